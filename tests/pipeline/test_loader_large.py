"""Large JSON and Parquet files through the loader (decision 83): streamed in parts, one blob each,
with the rows, row numbers, load-history record and error lines of the file read whole, and
ON_ERROR decided on the whole file (without Spark or S3: a local directory stands for the buckets,
as in test_loader.py)."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from floe.catalog.models import CopySpec, FileFormat, OnError, Pipe
from floe.records import LoadTask
from pipeline.loader import Streamed, fetch_file, stream_file
from tests.pipeline.test_loader import (
    CTX,
    TABLE,
    WIDE,
    FakeWorker,
    internal_pipe,
    put,
    put_sealed,
    run_task,
    streamed,
    whole,
)
from tests.security.attacks.bombs import MiB

pytestmark = pytest.mark.unit

SELECT = ["$1:id", "$1:name", "METADATA$FILE_ROW_NUMBER", "METADATA$FILENAME"]


def pipe_of(fmt: FileFormat, on_error: OnError = "CONTINUE", limit: float = 0) -> Pipe:
    spec = CopySpec(
        table=WIDE.name,
        stage="DB.PUBLIC.ST",
        select=SELECT,
        file_format=fmt,
        on_error=on_error,
        on_error_limit=limit,
    )
    return Pipe(name="DB.PUBLIC.WP", copy_spec=spec, table_id=WIDE.id, stage_url="s3://bucket/in/")


def two_column_pipe(fmt: FileFormat) -> Pipe:
    """A pipe into test_loader's TABLE (ID, NAME), the table run_task's context ships."""
    spec = CopySpec(table=TABLE.name, stage="DB.PUBLIC.ST", select=["$1:id", "$1:name"], file_format=fmt)
    return Pipe(name="DB.PUBLIC.P", copy_spec=spec, table_id=TABLE.id, stage_url="s3://bucket/in/")


def ndjson(rows: int, bad_every: int = 0, pretty_every: int = 0) -> bytes:
    """Documents one per line; every ``bad_every``-th an error (an id that is no number, or a line
    that is not JSON), every ``pretty_every``-th written over several lines."""
    out = []
    for i in range(1, rows + 1):
        doc: dict[str, Any] = {"id": i, "name": f'name {i} "q" [{i}]', "tags": [i, None]}
        if bad_every and i % bad_every == 0:
            out.append(
                json.dumps({**doc, "id": f"x{i}"}) if i % (2 * bad_every) else '{"id": ' + str(i) + ", oops}"
            )
        elif pretty_every and i % pretty_every == 0:
            out.append(json.dumps(doc, indent=2))
        else:
            out.append(json.dumps(doc))
    return ("\n".join(out) + "\n").encode()


JSON = FileFormat(type="JSON")


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("on_error", ["CONTINUE", "SKIP_FILE_PCT"])
def test_a_streamed_json_file_loads_exactly_as_the_whole_file(
    tmp_path: Path, compress: bool, on_error: OnError
) -> None:
    """Safeguard: a large JSON file read in parts gives the rows, METADATA$FILE_ROW_NUMBER, counts,
    first error (line, character) and every error's detail it gives read whole."""
    data = ndjson(3000, bad_every=250, pretty_every=7)
    put(tmp_path, "big.json", gzip.compress(data) if compress else data)
    pipe = pipe_of(JSON, on_error, 50)
    expected_rows, expected = whole(tmp_path, pipe, "big.json")
    rows, record, blobs = streamed(
        FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=16_000), pipe, "big.json"
    )
    assert len(blobs) > 5, "the file should have been read in several parts"
    assert rows == expected_rows and record == expected
    assert (record.status, record.rows_parsed, record.errors_seen) == ("PARTIALLY_LOADED", 3000, 12)
    assert [r["ROW_NO"] for r in rows] == [i for i in range(1, 3001) if i % 250]
    # The first error is document 250, on its line of the file (pretty documents span 7 lines more).
    assert record.first_error_line == 250 + 7 * (250 // 7) and record.first_error == (
        "Numeric value 'x250' is not recognized"
    )
    assert [e.row_number for e in record.errors] == list(range(250, 3001, 250))


@pytest.mark.parametrize(("on_error", "limit"), [("SKIP_FILE", 0), ("SKIP_FILE_N", 3)])
def test_skip_file_counts_json_errors_over_the_whole_file_and_leaves_no_blob(
    tmp_path: Path, on_error: OnError, limit: float
) -> None:
    """Safeguard: errors in different parts add up, and the parts written before the file failed
    are deleted."""
    put(tmp_path, "big.json", ndjson(3000, bad_every=1000))
    pipe = pipe_of(JSON, on_error, limit)
    _, expected = whole(tmp_path, pipe, "big.json")
    rows, record, blobs = streamed(
        FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=10_000), pipe, "big.json"
    )
    assert (record, rows, blobs) == (expected, [], [])
    assert (record.status, record.errors_seen) == ("LOAD_FAILED", 3)
    assert not list((tmp_path / "tables").rglob("*.parquet")), "blobs of the failed file remain"


def test_a_streamed_outer_array_loads_its_elements(tmp_path: Path) -> None:
    docs = [{"id": i, "name": f"n{i}"} for i in range(1, 2001)]
    put(tmp_path, "a.json", json.dumps(docs, indent=2).encode())
    pipe = pipe_of(FileFormat(type="JSON", strip_outer_array=True))
    expected_rows, expected = whole(tmp_path, pipe, "a.json")
    rows, record, blobs = streamed(
        FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=8000), pipe, "a.json"
    )
    assert len(blobs) > 5 and rows == expected_rows and record == expected
    assert (record.status, record.rows_loaded) == ("LOADED", 2000)


def test_invalid_utf8_in_a_later_json_part_names_the_files_line(tmp_path: Path) -> None:
    """A JSON file that is not UTF-8 fails whole (as read whole), at its line in the file."""
    data = ndjson(2000) + '{"id": 1, "name": "Zoë"}\n'.encode("latin-1")
    put(tmp_path, "big.json", data)
    pipe = pipe_of(JSON)
    _, expected = whole(tmp_path, pipe, "big.json")
    rows, record, blobs = streamed(
        FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=10_000), pipe, "big.json"
    )
    assert record == expected and (rows, blobs) == ([], [])
    assert (record.status, record.first_error_line) == ("LOAD_FAILED", 2001)


def test_a_json_line_over_the_part_bound_fails_alone_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=4096, max_part_bytes=64 * 1024)
    one_line = json.dumps([{"id": i, "name": "x" * 20} for i in range(5000)]).encode()
    json_pipe = two_column_pipe(FileFormat(type="JSON", strip_outer_array=True))
    records, blobs = run_task(
        monkeypatch, worker, json_pipe, {"min.json": one_line, "ok.json": b'{"id": 1}\n'}
    )
    assert records["min.json"]["status"] == "LOAD_FAILED"
    assert records["min.json"]["first_error"].startswith(
        "File 'min.json' has more than 64 KiB without a line break between two JSON documents"
    )
    assert records["ok.json"]["status"] == "LOADED"
    assert [b["files"] for b in blobs] == [["ok.json"]]


def test_a_small_gzip_json_that_inflates_past_the_part_bound_is_streamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stored small, read whole first, it inflates past max_part_bytes: handed to the streaming
    path, it loads in parts (before decision 83 it failed)."""
    data = ndjson(20_000)
    worker = FakeWorker(tmp_path, max_part_bytes=256 * 1024, chunk_bytes=64 * 1024)
    records, blobs = run_task(
        monkeypatch, worker, two_column_pipe(JSON), {"many.json.gz": gzip.compress(data)}
    )
    assert (records["many.json.gz"]["status"], records["many.json.gz"]["rows_loaded"]) == ("LOADED", 20_000)
    assert len(blobs) > 10 and sum(b["rows"] for b in blobs) == 20_000


# ------------------------------------------------------------------------------------------------
# Parquet

PARQUET = FileFormat(type="PARQUET")


def parquet_file(rows: int, group_rows: int, bad_row: int | None = None) -> bytes:
    names = [f"name {i}".encode() for i in range(1, rows + 1)]
    if bad_row is not None:
        names[bad_row - 1] = b"Zo\xeb"
    table = pa.table({"id": pa.array(range(1, rows + 1), pa.int64()), "name": pa.array(names, pa.binary())})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=group_rows)
    return buf.getvalue()


@pytest.mark.parametrize("wrap", ["plain", "gzip"])
def test_a_streamed_parquet_file_loads_by_row_group_exactly_as_whole(tmp_path: Path, wrap: str) -> None:
    """Safeguard: a large Parquet file is read a run of row groups at a time (by ranges; a gzip
    wrapper through a local spool), with the rows, row numbers and errors of the whole file: an
    invalid string in a later row group is an error of its own row, named by its row in the file."""
    data = parquet_file(20_000, 1000, bad_row=17_777)
    put(tmp_path, "big.parquet", gzip.compress(data) if wrap == "gzip" else data)
    pipe = pipe_of(PARQUET)
    expected_rows, expected = whole(tmp_path, pipe, "big.parquet")
    worker = FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=40_000)
    rows, record, blobs = streamed(worker, pipe, "big.parquet")
    assert len(blobs) > 5 and rows == expected_rows and record == expected
    assert (record.status, record.rows_loaded, record.first_error_line) == (
        "PARTIALLY_LOADED",
        19_999,
        17_777,
    )
    assert record.first_error == "Invalid UTF8 detected in string 'Zo0xEB'"
    assert [r["ROW_NO"] for r in rows] == [i for i in range(1, 20_001) if i != 17_777]


def test_skip_file_on_a_streamed_parquet_file_leaves_no_blob(tmp_path: Path) -> None:
    put(tmp_path, "big.parquet", parquet_file(20_000, 1000, bad_row=19_000))
    pipe = pipe_of(PARQUET, "SKIP_FILE")
    rows, record, blobs = streamed(
        FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=40_000), pipe, "big.parquet"
    )
    assert (record.status, record.first_error_line, rows, blobs) == ("LOAD_FAILED", 19_000, [], [])
    assert not list((tmp_path / "tables").rglob("*.parquet"))


def test_a_parquet_file_that_inflates_past_the_part_bound_is_read_by_row_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stored small (its pages compress well), its footer says it inflates past max_part_bytes:
    read whole that fails; handed to the streaming path, it loads a few row groups at a time from
    the bytes already in memory."""
    table = pa.table({"id": pa.array(range(200_000), pa.int64()), "name": ["same name"] * 200_000})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=10_000, compression="zstd")
    worker = FakeWorker(tmp_path, max_part_bytes=MiB, chunk_bytes=256 * 1024)
    assert (
        len(buf.getvalue())
        < MiB
        < sum(
            pq.ParquetFile(io.BytesIO(buf.getvalue())).metadata.row_group(g).total_byte_size
            for g in range(20)
        )
    )
    records, blobs = run_task(
        monkeypatch, worker, two_column_pipe(PARQUET), {"dense.parquet": buf.getvalue()}
    )
    assert (records["dense.parquet"]["status"], records["dense.parquet"]["rows_loaded"]) == (
        "LOADED",
        200_000,
    )
    assert len(blobs) > 3


def test_a_parquet_row_group_over_the_part_bound_fails_the_file_alone(tmp_path: Path) -> None:
    put(tmp_path, "wide.parquet", parquet_file(50_000, 50_000))
    worker = FakeWorker(tmp_path, stream_file_bytes=1000, max_part_bytes=MiB // 4)
    fetched = fetch_file(worker, pipe_of(PARQUET), "wide.parquet")  # type: ignore[arg-type]
    assert isinstance(fetched, Streamed)
    task = LoadTask("", "wide.parquet", None, 0, "")
    blobs, record = stream_file(worker, CTX, pipe_of(PARQUET), WIDE, task, 0, fetched.size)  # type: ignore[arg-type]
    assert blobs == [] and record.status == "LOAD_FAILED"
    assert "has a Parquet row group (number 1) that decompresses to" in (record.first_error or "")


def test_an_internal_stage_parquet_file_streams_through_a_local_spool(tmp_path: Path) -> None:
    """An internal stage's file is sealed: it cannot be read by ranges, so it is decrypted into a
    local temporary file and read by row group from there."""
    data = parquet_file(20_000, 1000)
    put(tmp_path, "p.parquet", data)
    expected_rows, expected = whole(tmp_path, pipe_of(PARQUET), "p.parquet")
    pipe = internal_pipe(pipe_of(PARQUET))
    worker = FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=40_000)
    put_sealed(worker, pipe, "p.parquet", data)
    rows, record, blobs = streamed(worker, pipe, "p.parquet")
    assert len(blobs) > 5 and rows == expected_rows and record == expected
