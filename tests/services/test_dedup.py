"""Dedup and enqueue against the real Redis."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from floe.catalog import CopySpec, Pipe
from floe.history import read_skips, read_state, read_states
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


def test_a_file_sent_again_changed_after_its_load_is_a_skip_record(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """A "Load skipped" record: a path the pipe loaded, sent again with another size (overwritten), is
    skipped and recorded; sent again unchanged (a retry, a redelivery), or while still loading, it
    leaves no record."""
    keys = Keys(isolated_settings.redis.prefix)
    d = Deduper(redis_client, keys, isolated_settings.retention_seconds)
    pipe = make_pipe()
    assert d.enqueue(pipe, [FileRef("a.csv", 3), FileRef("b.csv", 5)], source="notification") == [True, True]
    assert d.enqueue(pipe, [FileRef("a.csv", 4)], source="rest") == [False]  # still loading
    assert read_skips(redis_client, keys, pipe.id) == []
    for path in ("a.csv", "b.csv"):
        state = read_state(redis_client, keys, pipe.id, path)
        assert state is not None
        done = state.model_copy(update={"status": "LOADED", "loaded_ms": 1234})
        redis_client.set(keys.file(pipe.id, path), done.model_dump_json())
    assert d.enqueue(pipe, [FileRef("a.csv", 3), FileRef("b.csv"), FileRef("b.csv", 6)], source="rest") == [
        False,
        False,
        False,
    ]
    (skip,) = read_skips(redis_client, keys, pipe.id)
    assert (skip.path, skip.size, skip.loaded_ms, skip.source) == ("b.csv", 6, 1234, "rest")
    assert redis_client.xlen(keys.queue(pipe.id)) == 2, "a skipped file is not queued again"
