"""CREATE OR REPLACE PIPE and DROP PIPE retire the old incarnation, against the real Redis."""

from __future__ import annotations

import pytest
import redis

from floe.catalog import Pipe
from floe.keys import Keys
from services.dedup import Deduper, FileRef
from services.sql import SqlExecutor
from tests.services.test_sql_access import ADMIN

pytestmark = pytest.mark.integration


def create(ex: SqlExecutor, replace: bool = False, stage: str = "st", pattern: str = "") -> Pipe:
    ex.execute(
        "CREATE STAGE IF NOT EXISTS st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests", ADMIN
    )
    ex.execute(
        "CREATE STAGE IF NOT EXISTS other URL = 's3://somebucket/y/' STORAGE_INTEGRATION = floe_tests", ADMIN
    )
    ex.execute("CREATE TABLE IF NOT EXISTS t (a INT, b VARCHAR)", ADMIN)
    verb = "CREATE OR REPLACE" if replace else "CREATE"
    ex.execute(f"{verb} PIPE p AUTO_INGEST = FALSE AS COPY INTO t FROM @{stage} {pattern}", ADMIN)
    return ex.catalog.get(Pipe, "FLOE.PUBLIC.P")


def queued(client: redis.Redis, keys: Keys, pipe: Pipe) -> list[str]:
    return sorted(fields[b"path"].decode() for _, fields in client.xrange(keys.queue(pipe.id)))


def enqueue(ex: SqlExecutor, pipe: Pipe, paths: list[str]) -> None:
    Deduper(ex.redis, ex.keys, 3600).enqueue(pipe, [FileRef(p, 10) for p in paths], source="rest")


def test_replace_hands_queued_files_to_the_new_pipe(ex: SqlExecutor) -> None:
    old = create(ex)
    enqueue(ex, old, ["a.csv", "b.csv"])
    new = create(ex, replace=True)
    assert new.id != old.id
    assert queued(ex.redis, ex.keys, new) == ["a.csv", "b.csv"]
    sizes = {f[b"size"] for _, f in ex.redis.xrange(ex.keys.queue(new.id))}
    assert sizes == {b"10"}
    # The old incarnation is retired: its flag stays (the registrar checks it), its queue is gone.
    assert ex.redis.exists(ex.keys.retired(old.id)) and not ex.redis.exists(ex.keys.queue(old.id))
    # The new incarnation's dedup memory knows them, so a notification arriving late adds nothing.
    assert Deduper(ex.redis, ex.keys, 3600).enqueue(new, [FileRef("a.csv")], source="notification") == [False]


def test_replace_carries_only_what_the_new_pipe_accepts(ex: SqlExecutor) -> None:
    old = create(ex)
    enqueue(ex, old, ["keep.csv", "drop.json"])
    new = create(ex, replace=True, pattern="PATTERN = '.*[.]csv'")
    assert queued(ex.redis, ex.keys, new) == ["keep.csv"]
    elsewhere = create(ex, replace=True, stage="other")
    assert queued(ex.redis, ex.keys, elsewhere) == []  # another stage: none of its files


def test_drop_retires_and_discards(ex: SqlExecutor) -> None:
    old = create(ex)
    enqueue(ex, old, ["a.csv"])
    ex.execute("DROP PIPE p", ADMIN)
    assert ex.redis.exists(ex.keys.retired(old.id))
    assert not ex.redis.exists(ex.keys.queue(old.id))
    again = create(ex)
    assert queued(ex.redis, ex.keys, again) == []
