"""The registrar's commit against the real Redis: atomic, idempotent per (pipe, batch)."""

from __future__ import annotations

import json

import pytest
import redis

from floe.catalog import Catalog, Column, CopySpec, Pipe, Stage, Table
from floe.channels import ChannelStore, PipeRef, channel_state
from floe.history import ErrorDetail, read_errors, read_state
from floe.keys import Keys
from floe.records import RowAppend
from floe.settings import Settings
from pipeline.registrar import ChannelRegistrar, ChannelSettle, Outcome, PipeCommit, Registrar
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
    # The table and stage it was made on: a pipe without them is stopped, and not planned.
    catalog = Catalog(redis_client, keys)
    catalog.put(Table(name="D.S.T", id="t", columns=[Column(name="A", type="NUMBER")]))
    catalog.put(Stage(name="D.S.S", url="s3://b/"))
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


def channel_world(
    settings: Settings, client: redis.Redis
) -> tuple[Keys, ChannelStore, PipeRef, list[RowAppend]]:
    """A streaming pipe's channel 'c' with two appends waiting in the rows stream."""
    keys = Keys(settings.redis.prefix)
    store = ChannelStore(client, keys, 1 << 20)
    ref = PipeRef("streaming-pipe", "D", "S", "P")
    token = store.open(ref, "c", 1_000, None, False).token
    token = store.append(ref, "c", token, "r1", b'{"a": 1}\n', 1, "1", "1", 1_000)
    store.append(ref, "c", token, "r2", b'{"a": 2}\n', 1, "2", "2", 1_000)
    appends = [RowAppend.from_stream(sid, f) for sid, f in client.xrange(keys.rows(ref.pipe_id))]
    return keys, store, ref, appends


def settle_of(appends: list[RowAppend], blob: str) -> ChannelSettle:
    first = appends[0]
    return ChannelSettle(
        "c",
        first.incarnation,
        first.client_sequencer,
        appends=len(appends),
        bytes=sum(a.size for a in appends),
        rows_inserted=2,
        rows_parsed=3,
        errors=1,
        token=appends[-1].end_offset_token,
        last_error="Numeric value 'x' is not recognized",
        last_error_bound="2",
        latency_ms=40,
        blobs=[{"name": blob, "rows": 2}],
        stream_ids=[str(a.stream_id) for a in appends],
        data_keys=[a.data_key for a in appends],
    )


def test_a_channel_commit_is_atomic_and_replay_changes_nothing(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    keys, store, ref, appends = channel_world(isolated_settings, redis_client)
    reg = ChannelRegistrar(redis_client, keys, 3600)
    assert redis_client.exists(*[a.data_key for a in appends]) == 2
    settled = reg.settle(ref.pipe_id, [settle_of(appends, "blob-c")], "q", 3, 5_000)
    assert settled.outcome is Outcome.COMMITTED and settled.fenced_blobs == []
    status = store.statuses(ref, ["c"])["c"]
    assert status.last_committed_offset_token == "2"
    assert (status.rows_inserted, status.rows_parsed, status.rows_error_count) == (2, 3, 1)
    assert status.last_error_offset_upper_bound == "2" and status.last_error_timestamp_ms == 5_000
    assert status.snowflake_avg_processing_latency_ms == 40
    assert redis_client.hexists(keys.blobs(ref.pipe_id), "blob-c")
    assert redis_client.xlen(keys.rows(ref.pipe_id)) == 0
    assert redis_client.exists(*[a.data_key for a in appends]) == 0
    assert channel_state(redis_client, keys, ref.pipe_id, "c")["pending"] == "0"
    again = reg.settle(ref.pipe_id, [settle_of(appends, "blob-c")], "q", 3, 6_000)
    assert again.outcome is Outcome.REPLAYED
    assert store.statuses(ref, ["c"])["c"].rows_inserted == 2


def test_an_empty_offset_token_never_becomes_the_committed_one(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """The SDK sends endOffsetToken= for an append without one: "" is no token, whoever passes it."""
    keys, store, ref, appends = channel_world(isolated_settings, redis_client)
    reg = ChannelRegistrar(redis_client, keys, 3600)
    first = settle_of(appends[:1], "b1")
    assert reg.settle(ref.pipe_id, [first], "q", 1, 2_000).outcome is Outcome.COMMITTED
    assert store.statuses(ref, ["c"])["c"].last_committed_offset_token == "1"
    second = settle_of(appends[1:], "b2")
    second.token, second.last_error_bound = "", ""
    assert reg.settle(ref.pipe_id, [second], "q", 2, 3_000).outcome is Outcome.COMMITTED
    status = store.statuses(ref, ["c"])["c"]
    assert status.last_committed_offset_token == "1" and status.rows_inserted == 4
    assert status.last_error_offset_upper_bound is None


def test_a_reopened_channels_appends_are_fenced_at_commit(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    keys, store, ref, appends = channel_world(isolated_settings, redis_client)
    store.open(ref, "c", 2_000, None, False)  # a new writer: the two appends are the old one's
    settled = ChannelRegistrar(redis_client, keys, 3600).settle(
        ref.pipe_id, [settle_of(appends, "b")], "q", 1, 3_000
    )
    assert settled.outcome is Outcome.COMMITTED and settled.fenced_blobs == ["b"]
    assert not redis_client.hexists(keys.blobs(ref.pipe_id), "b")
    status = store.statuses(ref, ["c"])["c"]
    assert status.last_committed_offset_token is None and status.rows_inserted == 0
    # Their entries and rows are gone all the same: nothing will ever load them.
    assert redis_client.xlen(keys.rows(ref.pipe_id)) == 0
    assert redis_client.exists(*[a.data_key for a in appends]) == 0


def test_a_dropped_channels_appends_are_fenced_and_a_retired_pipe_commits_nothing(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    keys, store, ref, appends = channel_world(isolated_settings, redis_client)
    store.drop(ref, "c", fail_on_uncommitted=False)
    reg = ChannelRegistrar(redis_client, keys, 3600)
    assert reg.settle(ref.pipe_id, [settle_of(appends, "b")], "q", 1, 3_000).fenced_blobs == ["b"]
    retire_pipe(redis_client, keys, ref.pipe_id)
    assert reg.settle(ref.pipe_id, [settle_of(appends, "b2")], "q", 2, 3_000).outcome is Outcome.RETIRED


def test_commit_stores_each_files_errors_and_the_pipes_status(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """A file's errors are stored in the commit that makes its state terminal (and a replay changes
    nothing); a file loaded again without errors leaves no stale detail. The pipe's status keeps its
    last loaded file, its last pipe error and fault."""
    keys, pipe, ids = setup(isolated_settings, redis_client)
    reg = Registrar(redis_client, keys, 3600)
    a = read_state(redis_client, keys, pipe.id, "a")
    b = read_state(redis_client, keys, pipe.id, "b")
    assert a and b
    bad = [
        ErrorDetail("Numeric value 'x' is not recognized", line=2, code="100038"),
        ErrorDetail("e2", line=5),
    ]
    partly = a.model_copy(update={"status": "PARTIALLY_LOADED", "errors_seen": 2, "errors": bad})
    refused = b.model_copy(
        update={"status": "LOAD_FAILED", "first_error": "no such function", "trouble": "pipe"}
    )
    assert (
        reg.commit(PipeCommit(pipe.id, files=[(partly, ids[0]), (refused, ids[1])]), "q", 1, 5000)
        is Outcome.COMMITTED
    )
    assert read_errors(redis_client, keys, pipe.id, ["a", "b"]) == {"a": bad}
    stored = read_state(redis_client, keys, pipe.id, "a")
    assert (
        stored is not None
        and stored.errors == []
        and "errors" not in json.loads(redis_client.get(keys.file(pipe.id, "a")) or b"{}")
    )
    status = {k.decode(): v.decode() for k, v in redis_client.hgetall(keys.status(pipe.id)).items()}
    assert status == {
        "lastIngestedTimestamp": "5000",
        "lastIngestedFilePath": "a",
        "error": "no such function",
        "lastPipeErrorTimestamp": "5000",
    }
    # A replay writes nothing: the errors stay as the first commit left them.
    replay = partly.model_copy(update={"errors": []})
    assert reg.commit(PipeCommit(pipe.id, files=[(replay, ids[0])]), "q", 1, 6000) is Outcome.REPLAYED
    assert read_errors(redis_client, keys, pipe.id, ["a"]) == {"a": bad}
    # The file loaded again (after a REFRESH), cleanly: its old detail goes, the error clears, an
    # internal error of another file is the pipe's fault.
    clean = a.model_copy(update={"status": "LOADED"})
    broken = b.model_copy(
        update={"status": "LOAD_FAILED", "first_error": "Internal error", "trouble": "internal"}
    )
    assert (
        reg.commit(PipeCommit(pipe.id, files=[(clean, ""), (broken, "")]), "q", 2, 7000) is Outcome.COMMITTED
    )
    assert read_errors(redis_client, keys, pipe.id, ["a", "b"]) == {}
    status = {k.decode(): v.decode() for k, v in redis_client.hgetall(keys.status(pipe.id)).items()}
    assert status == {
        "lastIngestedTimestamp": "7000",
        "lastIngestedFilePath": "a",
        "lastPipeErrorTimestamp": "5000",
        "fault": "Internal error",
        "lastPipeFaultTimestamp": "7000",
    }
