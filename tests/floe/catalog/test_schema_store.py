"""TableStore, the compare-and-set every table change goes through, against the real Redis: writers
at once lose nothing, and a change meant for a table that was replaced or dropped changes nothing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from floe.catalog import Catalog, Column, Table
from floe.catalog.schema import Evolution, TableStore, Trigger, evolved
from floe.keys import Keys
from floe.settings import Settings

pytestmark = pytest.mark.integration


def test_concurrent_evolutions_all_land(isolated_settings: Settings, redis_client: redis.Redis) -> None:
    """Tasks of one micro-batch evolving the table at once, each with a column of its own: every
    column is there afterwards, once (a plain read-modify-write would keep only some)."""
    keys = Keys(isolated_settings.redis.prefix)
    catalog = Catalog(redis_client, keys)
    table = Table(name="DB.S.T", columns=[Column(name="ID", type="NUMBER", precision=38, scale=0)])
    catalog.put(table)
    store = TableStore(redis_client, keys)

    def add(i: int) -> Table | None:
        change = Evolution(add=(Column(name=f"C{i}", type="VARCHAR"),))
        trigger = Trigger(file_name=f"{i}.json", pipe_id="p", time_ms=i)
        return store.update(table.name, table.id, lambda t: evolved(t, change, trigger, exact=False))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(add, range(24)))
    assert all(r is not None for r in results)
    final = catalog.get(Table, table.name)
    assert sorted(c.name for c in final.columns) == sorted(["ID", *(f"C{i}" for i in range(24))])
    assert len({c.stored for c in final.columns[1:]}) == 24
    # Applied again (a replayed batch), nothing changes, nor is anything written.
    version = catalog.version()
    assert add(3) == final and catalog.version() == version


def test_a_replaced_or_dropped_table_is_left_alone(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    catalog = Catalog(redis_client, keys)
    old = Table(name="DB.S.T", columns=[Column(name="ID", type="VARCHAR")])
    catalog.put(old)
    new = Table(name="DB.S.T", columns=[Column(name="ID", type="VARCHAR")])  # CREATE OR REPLACE
    catalog.put(new)
    store = TableStore(redis_client, keys)
    change = Evolution(add=(Column(name="X", type="VARCHAR"),))
    trigger = Trigger(file_name="f", pipe_id="p", time_ms=0)
    assert store.update(old.name, old.id, lambda t: evolved(t, change, trigger, exact=False)) is None
    assert [c.name for c in catalog.get(Table, new.name).columns] == ["ID"]
    catalog.delete(Table, new.name)
    assert store.update(new.name, new.id, lambda t: evolved(t, change, trigger, exact=False)) is None
    assert catalog.find(Table, new.name) is None
