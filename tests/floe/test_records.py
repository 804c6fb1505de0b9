"""The load path's records and their external forms: Redis stream fields, Spark rows, the
executor-to-driver wire rows, and the FileState a load outcome commits (pure logic)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from floe.blobs import BlobMeta
from floe.history import FileState
from floe.records import (
    SOURCE_SCHEMA,
    TASK_SCHEMA,
    WIRE_DDL,
    WIRE_SCHEMA,
    LoadOutcome,
    LoadTask,
    QueueEntry,
    decode_results,
    encode_results,
)

pytestmark = pytest.mark.unit

LOADED_MS = 1_795_000_123_456

# What dedup writes for a file of a pipe with ON_ERROR = SKIP_FILE_7 (services/dedup.py).
QUEUED = FileState(
    path="dir/a.csv",
    stage_location="s3://bucket/in/",
    size=10,
    received_ms=1_795_000_000_000,
    error_limit=7,
    source="rest",
)


# ------------------------------------------------------------------------------------------------
# Queue entries


@pytest.mark.parametrize("size", [None, 0, 123])
@pytest.mark.parametrize("origin", ["notification", "rest", "replace"])
def test_queue_entry_round_trips_through_its_stream_fields(size: int | None, origin: str) -> None:
    entry = QueueEntry("dir/ä b.csv", size, 1_795_000_000_000, origin)  # type: ignore[arg-type]
    flat = entry.stream_fields()
    # As Redis hands them back: every name and value a byte string.
    fields = {str(k).encode(): str(v).encode() for k, v in zip(flat[::2], flat[1::2], strict=True)}
    decoded = QueueEntry.from_stream(b"1795000000000-3", fields)
    assert decoded == QueueEntry("dir/ä b.csv", size, 1_795_000_000_000, origin, "1795000000000-3")  # type: ignore[arg-type]


def test_stream_fields_keep_the_names_and_encoding_older_readers_use() -> None:
    """Safeguard: the entry's fields are the ones written before the records existed, plus origin;
    an unknown size is -1."""
    assert QueueEntry("a.csv", None, 5, "rest").stream_fields() == [
        "path",
        "a.csv",
        "size",
        -1,
        "received",
        5,
        "origin",
        "rest",
    ]


def test_entries_queued_before_the_origin_field_still_decode() -> None:
    """Safeguard: entries written by the older dedup script (path, size, received; no origin) read
    as notifications; an entry without size or received time reads as unknown size, time 0."""
    old = {b"path": b"a.csv", b"size": b"42", b"received": b"1795000000000"}
    assert QueueEntry.from_stream(b"1-0", old) == QueueEntry(
        "a.csv", 42, 1_795_000_000_000, "notification", "1-0"
    )
    assert QueueEntry.from_stream("2-0", {b"path": b"b.csv"}) == QueueEntry(
        "b.csv", None, 0, "notification", "2-0"
    )
    assert QueueEntry.from_stream(b"3-0", {b"path": b"c.csv", b"size": b"-1"}).size is None


def test_unknown_origin_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown origin 'channel'"):
        QueueEntry.from_stream(b"1-0", {b"path": b"a.csv", b"origin": b"channel"})


def test_entry_from_a_scripts_xrange_output() -> None:
    """The retire script returns XRANGE's entries as [id, [name, value, ...]]."""
    raw = [b"7-1", [b"path", b"x/y.csv", b"size", b"9", b"received", b"11", b"origin", b"replace"]]
    assert QueueEntry.from_flat(raw) == QueueEntry("x/y.csv", 9, 11, "replace", "7-1")


# ------------------------------------------------------------------------------------------------
# Tasks


def test_spark_schemas_are_derived_from_the_task() -> None:
    """Safeguard: the source's schema only grows at its end (its checkpoint outlives a restart, and
    the query is stateless, so a new trailing column is read from the next batch on: `append`
    came with Snowpipe Streaming, `put_ms` with the metrics); the task schema adds the partition
    before them."""
    base = "pipe_id string, path string, size long, received_ms long, stream_id string"
    assert base + ", append string, put_ms long" == SOURCE_SCHEMA
    assert base + ", part long, append string, put_ms long" == TASK_SCHEMA
    assert WIRE_DDL == "kind string, pipe_id string, payload string"


def test_task_round_trips_through_source_and_task_rows() -> None:
    entry = QueueEntry("a.csv", None, 17, "notification", "5-2")
    queued = LoadTask.queued("pipe1", entry)
    assert queued == LoadTask("pipe1", "a.csv", None, 17, "5-2", 0)
    source_names = [c.split()[0] for c in SOURCE_SCHEMA.split(", ")]
    assert LoadTask.from_row(dict(zip(source_names, queued.source_row(), strict=True))) == queued
    planned = [queued.in_part(3), LoadTask("pipe2", "b.csv", 8, 18, "6-0", 1)]
    task_names = [c.split()[0] for c in TASK_SCHEMA.split(", ")]
    batch = pa.RecordBatch.from_pylist([dict(zip(task_names, t.task_row(), strict=True)) for t in planned])
    assert LoadTask.from_batch(batch) == planned
    # The batch the driver hands the loader itself (a micro-batch it loads without Spark) has the
    # task schema's columns in its order, and the same tasks come out of it.
    ours = LoadTask.to_batch(planned)
    assert ours.schema.names == task_names
    assert LoadTask.from_batch(ours) == planned
    assert LoadTask.to_batch([]).num_rows == 0


# ------------------------------------------------------------------------------------------------
# Executor -> driver


def blob(name: str) -> BlobMeta:
    return BlobMeta(name, f"tables/{name}", 3, 100, {}, ["dir/a.csv"], sealed_stats="sealed")


def test_outcomes_and_blobs_round_trip_through_the_wire_rows() -> None:
    outcomes = [
        LoadOutcome("dir/a.csv", "LOADED", 3, 3, 0, 1, size=12, stream_id="1-0"),
        LoadOutcome.failed("b.csv", "bad", code="100068", line=2, character=3, column='"T"["A":1]'),
        LoadOutcome.stopped("c.csv", "gone", system=True),
    ]
    first = encode_results("p1", [blob("b1"), outcomes[0], outcomes[1]])
    second = encode_results("p2", [outcomes[2], blob("b2")])
    assert first.schema == WIRE_SCHEMA
    rows = pa.Table.from_batches([first, second]).to_pylist()
    decoded = decode_results(rows)
    assert list(decoded) == ["p1", "p2"]
    assert decoded["p1"].outcomes == outcomes[:2] and decoded["p2"].outcomes == outcomes[2:]
    assert decoded["p1"].blobs == [blob("b1").to_dict()] and decoded["p2"].blobs == [blob("b2").to_dict()]


def test_wire_payload_keeps_the_keys_of_the_old_json_records() -> None:
    """The file rows' JSON has the keys load history and the loader tests read."""
    row = encode_results(
        "p", [LoadOutcome("a.csv", "LOADED", 1, 1, 0, 1, size=4, stream_id="1-0")]
    ).to_pylist()[0]
    assert (row["kind"], row["pipe_id"]) == ("file", "p")
    payload = json.loads(row["payload"])
    assert {k: payload[k] for k in ("path", "status", "rows_loaded", "size", "stream_id")} == {
        "path": "a.csv",
        "status": "LOADED",
        "rows_loaded": 1,
        "size": 4,
        "stream_id": "1-0",
    }


def test_outcome_of_a_task_takes_its_path_and_queue_entry() -> None:
    task = LoadTask("p", "dir/a.csv", 10, 1, "9-9", 2)
    assert LoadOutcome.stopped("dir/a.csv", "x", system=False).of_task(task).stream_id == "9-9"
    assert LoadOutcome.failed("dir/a.csv", "x").sized(12).size == 12


# ------------------------------------------------------------------------------------------------
# Commit: the FileState each outcome leaves (the values job._commit wrote before the records)


def test_loaded_file() -> None:
    outcome = LoadOutcome("dir/a.csv", "LOADED", 3, 3, 0, 1, size=12, stream_id="1-0")
    assert outcome.apply_to(QUEUED, LOADED_MS) == FileState(
        path="dir/a.csv",
        stage_location="s3://bucket/in/",
        status="LOADED",
        size=12,
        received_ms=1_795_000_000_000,
        loaded_ms=LOADED_MS,
        rows_parsed=3,
        rows_loaded=3,
        errors_seen=0,
        error_limit=1,
        source="rest",
    )


def test_partially_loaded_file() -> None:
    outcome = LoadOutcome(
        "dir/a.csv",
        "PARTIALLY_LOADED",
        rows_parsed=10,
        rows_loaded=8,
        errors_seen=2,
        error_limit=10,
        first_error="Numeric value 'x' is not recognized",
        first_error_line=6,
        first_error_character=1,
        first_error_column='"T"["ID":1]',
        code="100038",
        size=200,
        stream_id="1-0",
    )
    assert outcome.apply_to(QUEUED, LOADED_MS) == FileState(
        path="dir/a.csv",
        stage_location="s3://bucket/in/",
        status="PARTIALLY_LOADED",
        size=200,
        received_ms=1_795_000_000_000,
        loaded_ms=LOADED_MS,
        rows_parsed=10,
        rows_loaded=8,
        errors_seen=2,
        error_limit=10,
        first_error="Numeric value 'x' is not recognized",
        first_error_line=6,
        first_error_character=1,
        first_error_column='"T"["ID":1]',
        source="rest",
    )


def test_file_that_failed_its_copy() -> None:
    """ON_ERROR failed the file, or it could not be parsed (a place in the file, error limit 1)."""
    outcome = LoadOutcome.failed(
        "dir/a.csv",
        "Invalid UTF8 detected in string 'Zo0xEB'",
        code="100096",
        line=3,
        character=3,
        column='"T"["NAME":2]',
    ).sized(21)
    assert outcome.apply_to(QUEUED, LOADED_MS) == FileState(
        path="dir/a.csv",
        stage_location="s3://bucket/in/",
        status="LOAD_FAILED",
        size=21,
        received_ms=1_795_000_000_000,
        loaded_ms=LOADED_MS,
        rows_parsed=0,
        rows_loaded=0,
        errors_seen=1,
        error_limit=1,
        first_error="Invalid UTF8 detected in string 'Zo0xEB'",
        first_error_line=3,
        first_error_character=3,
        first_error_column='"T"["NAME":2]',
        source="rest",
    )


def test_file_gone_before_its_load_keeps_the_queued_size_and_the_pipes_error_limit() -> None:
    """A file that failed before its COPY ran (here: deleted, a system error) knows neither its
    size nor an error limit: the state keeps the notification's size and the pipe's ERROR_LIMIT."""
    message = "Remote file 's3://bucket/in/dir/a.csv' was not found."
    outcome = LoadOutcome.stopped("dir/a.csv", message, system=True)
    assert outcome.apply_to(QUEUED, LOADED_MS) == FileState(
        path="dir/a.csv",
        stage_location="s3://bucket/in/",
        status="LOAD_FAILED",
        size=10,
        received_ms=1_795_000_000_000,
        loaded_ms=LOADED_MS,
        rows_parsed=0,
        rows_loaded=0,
        errors_seen=1,
        error_limit=7,
        first_error=message,
        system_error=message,
        source="rest",
    )


def test_file_too_large_to_read_records_its_size_and_no_system_error() -> None:
    outcome = LoadOutcome.stopped(
        "dir/a.csv", "File 'dir/a.csv' decompresses to more than 16 KiB", system=False, size=5000
    )
    assert outcome.apply_to(QUEUED, LOADED_MS) == FileState(
        path="dir/a.csv",
        stage_location="s3://bucket/in/",
        status="LOAD_FAILED",
        size=5000,
        received_ms=1_795_000_000_000,
        loaded_ms=LOADED_MS,
        rows_parsed=0,
        rows_loaded=0,
        errors_seen=1,
        error_limit=7,
        first_error="File 'dir/a.csv' decompresses to more than 16 KiB",
        source="rest",
    )


def test_file_whose_state_was_forgotten_gets_a_fresh_one() -> None:
    """The commit builds a state when Redis no longer has one (its defaults: error limit 1)."""
    fresh = FileState(path="dir/a.csv", stage_location="s3://bucket/in/", received_ms=5)
    outcome = LoadOutcome.stopped("dir/a.csv", "boom", system=True, size=3)
    assert outcome.apply_to(fresh, LOADED_MS) == FileState(
        path="dir/a.csv",
        stage_location="s3://bucket/in/",
        status="LOAD_FAILED",
        size=3,
        received_ms=5,
        loaded_ms=LOADED_MS,
        rows_parsed=0,
        errors_seen=1,
        error_limit=1,
        first_error="boom",
        system_error="boom",
    )


def test_the_dedup_scripts_xadd_writes_the_fields_stream_fields_names() -> None:
    """The dedup script adds entries from Lua; its field list is generated from the same names."""
    lua = QueueEntry.lua_stream_fields("p", "s", "r", "o")
    names = QueueEntry("a.csv", 1, 2, "rest").stream_fields()[::2]
    assert lua == ", ".join(f"'{name}', {value}" for name, value in zip(names, "psro", strict=True))
