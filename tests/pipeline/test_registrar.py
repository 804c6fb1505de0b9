"""The registrar's commit against the real Redis: atomic, idempotent per (pipe, batch)."""

from __future__ import annotations

import json

import pytest
import redis

from floe.catalog import CopySpec, Pipe
from floe.history import read_state
from floe.keys import Keys
from floe.settings import Settings
from pipeline.registrar import Outcome, PipeCommit, Registrar
from pipeline.source import FileStreamReader, PipeRange
from services.dedup import Deduper, FileRef, retire_pipe

pytestmark = pytest.mark.integration


def setup(settings: Settings, client: redis.Redis) -> tuple[Keys, Pipe, list[str]]:
    keys = Keys(settings.redis.prefix)
    pipe = Pipe(
        name="D.S.P", copy_spec=CopySpec(table="D.S.T", stage="D.S.S"), table_id="t", stage_url="s3://b/"
    )
    Deduper(client, keys, 3600).enqueue(pipe, [FileRef("a"), FileRef("b")], source="rest")
    ids = [sid.decode() for sid, _ in client.xrange(keys.queue(pipe.id))]
    return keys, pipe, ids


def test_commit_is_atomic_and_replay_changes_nothing(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    keys, pipe, ids = setup(isolated_settings, redis_client)
    reg = Registrar(redis_client, keys, 3600)
    a = read_state(redis_client, keys, pipe.id, "a")
    b = read_state(redis_client, keys, pipe.id, "b")
    assert a and b
    c = PipeCommit(pipe.id, blobs=[{"name": "blob-1", "rows": 5}])
    c.files = [
        (a.model_copy(update={"status": "LOADED", "rows_loaded": 5}), ids[0]),
        (b.model_copy(update={"status": "LOAD_FAILED"}), ids[1]),
    ]
    assert not reg.committed(pipe.id, "q", 7)
    assert reg.commit(c, "q", 7, 1000) is Outcome.COMMITTED
    assert reg.committed(pipe.id, "q", 7)
    assert redis_client.xlen(keys.queue(pipe.id)) == 0
    assert json.loads(redis_client.hget(keys.blobs(pipe.id), "blob-1") or b"{}")["rows"] == 5
    loaded = read_state(redis_client, keys, pipe.id, "a")
    assert loaded is not None and loaded.status == "LOADED"
    # A replay of the same batch (same query id and batch id) commits nothing.
    c.blobs = [{"name": "blob-2", "rows": 9}]
    assert reg.commit(c, "q", 7, 2000) is Outcome.REPLAYED
    assert redis_client.hlen(keys.blobs(pipe.id)) == 1


def test_a_retired_pipe_commits_nothing_and_hands_its_queue_over(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """DROP / CREATE OR REPLACE against a batch in flight: whichever script runs first wins, whole."""
    keys, pipe, ids = setup(isolated_settings, redis_client)
    reg = Registrar(redis_client, keys, 3600)
    a = read_state(redis_client, keys, pipe.id, "a")
    assert a is not None
    done = PipeCommit(pipe.id, blobs=[{"name": "blob-a", "rows": 1}])
    done.files = [(a.model_copy(update={"status": "LOADED", "rows_loaded": 1}), ids[0])]
    assert reg.commit(done, "q", 1, 1000) is Outcome.COMMITTED
    # Retiring hands over what is still queued (b), not what was committed (a).
    handed = retire_pipe(redis_client, keys, pipe.id)
    assert [(f.path, f.size) for f in handed] == [("b", None)]
    late = PipeCommit(pipe.id, blobs=[{"name": "blob-b", "rows": 1}])
    b = read_state(redis_client, keys, pipe.id, "b")
    assert b is not None
    late.files = [(b.model_copy(update={"status": "LOADED", "rows_loaded": 1}), ids[1])]
    assert reg.commit(late, "q", 2, 2000) is Outcome.RETIRED
    assert sorted(redis_client.hkeys(keys.blobs(pipe.id))) == [b"blob-a"]
    assert retire_pipe(redis_client, keys, pipe.id) == []  # idempotent: nothing is handed over twice


def test_source_offsets_ranges_and_trim(isolated_settings: Settings, redis_client: redis.Redis) -> None:
    keys, pipe, ids = setup(isolated_settings, redis_client)
    redis_client.hset(keys.objects("pipes"), pipe.name, pipe.model_dump_json())
    reader = FileStreamReader(
        {"redis_url": isolated_settings.redis.url, "prefix": keys.prefix, "max_files": "1"}
    )
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {pipe.id: ids[0]}  # the read limit admits one file
    (part,) = reader.partitions(start, end)
    assert isinstance(part, PipeRange)
    assert [r[1] for r in reader.read(part)] == ["a"]
    end2 = reader.latestOffset(end, reader.getDefaultReadLimit())
    assert [r[1] for r in reader.read(reader.partitions(end, end2)[0])] == ["b"]
    assert reader.latestOffset(end2, reader.getDefaultReadLimit()) == end2  # nothing new
    reader.commit(end)
    assert [sid.decode() for sid, _ in redis_client.xrange(keys.queue(pipe.id))] == [ids[1]]
    paused = pipe.model_copy(update={"paused": True})
    redis_client.hset(keys.objects("pipes"), pipe.name, paused.model_dump_json())
    redis_client.incr(keys.catalog_version())
    Deduper(redis_client, keys, 3600).enqueue(pipe, [FileRef("c")], source="rest")
    assert reader.latestOffset(end2, reader.getDefaultReadLimit()) == end2  # paused pipes are not planned
