"""Dedup and enqueue against the real Redis."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from floe.catalog import CopySpec, Pipe
from floe.history import read_state, read_states
from floe.keys import Keys
from floe.settings import Settings
from services.dedup import Deduper, FileRef

pytestmark = pytest.mark.integration


def make_pipe() -> Pipe:
    return Pipe(
        name="D.S.P", copy_spec=CopySpec(table="D.S.T", stage="D.S.S"), table_id="t", stage_url="s3://b/x/"
    )


def test_a_path_enters_the_queue_once(isolated_settings: Settings, redis_client: redis.Redis) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    d = Deduper(redis_client, keys, isolated_settings.retention_seconds)
    pipe = make_pipe()
    assert d.enqueue(pipe, [FileRef("a.csv", 3), FileRef("b.csv"), FileRef("a.csv")], source="rest") == [
        True,
        True,
        False,
    ]
    assert d.enqueue(pipe, [FileRef("a.csv", 9)], source="notification") == [False]
    assert redis_client.xlen(keys.queue(pipe.id)) == 2
    state = read_state(redis_client, keys, pipe.id, "a.csv")
    assert state is not None and state.status == "LOAD_IN_PROGRESS" and state.size == 3
    ttl = redis_client.ttl(keys.file(pipe.id, "a.csv"))
    assert 14 * 86400 - 10 < ttl <= 14 * 86400
    assert [s.path for s in read_states(redis_client, keys, pipe.id)] == ["a.csv", "b.csv"]


def test_concurrent_enqueues_of_the_same_paths(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    pipe = make_pipe()
    files = [FileRef(f"f{i}.csv") for i in range(200)]

    def run(_: int) -> int:
        d = Deduper(isolated_settings.redis.client(), keys, 3600)
        return sum(d.enqueue(pipe, files, source="notification"))

    with ThreadPoolExecutor(4) as pool:
        total = sum(pool.map(run, range(4)))
    assert total == 200
    assert redis_client.xlen(keys.queue(pipe.id)) == 200
