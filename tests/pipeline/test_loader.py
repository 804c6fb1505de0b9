"""load_file and stream_file: how one file becomes rows, blobs and its load-history record
(without Spark or S3: a local directory stands for the buckets)."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from pyarrow import fs as pafs

from floe.blobs import BlobCrypto, crypto_from_settings, read_blob
from floe.catalog.models import Column, CopySpec, FileFormat, OnError, Pipe, Table
from floe.records import LoadOutcome, LoadTask
from floe.runtime import Faults
from floe.settings import FaultSettings
from floe.stage_crypto import StageCipher, stage_cipher
from pipeline import loader
from pipeline.loader import BatchContext, Streamed, fetch_file, load_file, process_partition, stream_file
from pipeline.transform import CompiledCopy, compile_copy
from tests.security.attacks import bombs
from tests.security.attacks.bombs import GiB, MiB

pytestmark = pytest.mark.unit

TABLE = Table(
    name="DB.PUBLIC.T",
    columns=[Column(name="ID", type="NUMBER", precision=38, scale=0), Column(name="NAME", type="VARCHAR")],
)


def pipe_for(select: list[str] | None = None) -> Pipe:
    spec = CopySpec(
        table=TABLE.name, stage="DB.PUBLIC.ST", select=select, file_format=FileFormat(skip_header=1)
    )
    return Pipe(name="DB.PUBLIC.P", copy_spec=spec, table_id=TABLE.id, stage_url="s3://bucket/in/")


@dataclass
class _S3LikeFileSystem:
    """A local filesystem that, like pyarrow's S3FileSystem, refuses empty path components."""

    inner: pafs.FileSystem

    def open_input_file(self, path: str) -> Any:
        self._check(path)
        return self.inner.open_input_file(path)

    def open_input_stream(self, path: str, buffer_size: int | None = None) -> Any:
        self._check(path)
        return self.inner.open_input_stream(path, buffer_size=buffer_size)

    def open_output_stream(self, path: str) -> Any:
        self.inner.create_dir(path.rsplit("/", 1)[0])
        return self.inner.open_output_stream(path)

    def delete_file(self, path: str) -> None:
        self.inner.delete_file(path)

    @staticmethod
    def _check(path: str) -> None:
        if "//" in path:
            raise pa.ArrowInvalid(f"Empty path component in path {path}")


@dataclass
class FakeWorker:
    """What load_file uses of a worker, over a local directory standing for S3."""

    root: Path
    broken: bool = False
    """compiled_for raises, as a transform bug would."""
    con: duckdb.DuckDBPyConnection = field(default_factory=duckdb.connect)
    faults: Faults = field(default_factory=lambda: Faults(FaultSettings()))  # none armed
    fetched: list[str] = field(default_factory=list)
    """Keys read through get_object (boto3 in the real worker)."""
    stream_file_bytes: int = 1 << 30
    chunk_bytes: int = 1 << 20
    max_part_bytes: int = 1 << 30
    max_file_bytes: int = 1 << 40
    crypto: BlobCrypto = field(default_factory=lambda: crypto_from_settings("test-key", os.urandom(32)))
    stage_cipher: StageCipher = field(default_factory=lambda: stage_cipher("test-key", os.urandom(32)))
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(2))
    source_json: str = ""
    """What process_partition compares with its context's settings to reuse this worker."""

    @property
    def settings(self) -> Any:
        pipeline = SimpleNamespace(
            stream_file_bytes=self.stream_file_bytes,
            chunk_bytes=self.chunk_bytes,
            max_part_bytes=self.max_part_bytes,
            max_file_bytes=self.max_file_bytes,
            prefetch_files=2,
            prefetch_bytes=1 << 30,
            tables_bucket="tables",
            max_errors_per_file=100,
        )
        return SimpleNamespace(pipeline=pipeline, stages=SimpleNamespace(bucket=STAGES_BUCKET))

    @property
    def fs(self) -> Any:
        return _S3LikeFileSystem(pafs.SubTreeFileSystem(str(self.root), pafs.LocalFileSystem()))

    def get_object(self, bucket: str, key: str) -> dict[str, Any]:
        self.fetched.append(key)
        path = self.root / bucket / key
        if not path.exists():
            raise FileNotFoundError(key)
        data = path.read_bytes()
        return {"ContentLength": len(data), "Body": io.BytesIO(data)}

    def compiled_for(self, pipe: Pipe, table: Table) -> CompiledCopy:
        if self.broken:
            raise RuntimeError("a bug Floe did not foresee")
        return compile_copy(pipe.copy_spec, table, pipe.copy_spec.file_format.type)

    def remote_for(self, pipe: Pipe) -> None:
        """These pipes call no external function (tests/pipeline/transform/test_remote_calls.py)."""
        return None


STAGES_BUCKET = "stages"
"""The fake worker's internal stages bucket: what it reads there, it decrypts."""


def put(root: Path, name: str, data: bytes) -> None:
    path = root / "bucket" / "in" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_missing_object_is_load_failed_with_snowflakes_text_as_system_error(tmp_path: Path) -> None:
    """Safeguard: a notified file deleted before its load fails alone (no task failure, so no
    endless replay), with Snowflake's 091016 text as first error and systemError."""
    rows, record = load_file(FakeWorker(tmp_path), pipe_for(), TABLE, "gone.csv")  # type: ignore[arg-type]
    assert rows is None
    assert record.status == "LOAD_FAILED"
    assert record.first_error == record.system_error
    assert record.first_error.startswith("Remote file 's3://bucket/in/gone.csv' was not found. If you are")


def test_not_utf8_file_records_line_character_and_column(tmp_path: Path) -> None:
    """Safeguard: a whole-file failure with a place in the file keeps that place in load history."""
    put(tmp_path, "latin1.csv", "id,name\n1,Ann\n2,Zoë\n".encode("latin-1"))
    rows, record = load_file(FakeWorker(tmp_path), pipe_for(["$1", "$2"]), TABLE, "latin1.csv")  # type: ignore[arg-type]
    assert rows is None
    assert (record.status, record.errors_seen, record.system_error) == ("LOAD_FAILED", 1, None)
    assert record.first_error == "Invalid UTF8 detected in string 'Zo0xEB'"
    assert (record.first_error_line, record.first_error_character) == (3, 3)
    assert record.first_error_column == '"T"["NAME":2]'
    assert record.size == len("id,name\n1,Ann\n2,Zoë\n".encode("latin-1"))


def test_unforeseen_error_fails_the_file_not_the_batch(tmp_path: Path) -> None:
    """Safeguard: reading a file is deterministic, so an unexpected exception would fail every
    replay of its batch and stall the pipeline; the file fails alone with a systemError instead."""
    put(tmp_path, "f.csv", b"id,name\n1,a\n")
    rows, record = load_file(FakeWorker(tmp_path, broken=True), pipe_for(), TABLE, "f.csv")  # type: ignore[arg-type]
    assert rows is None
    assert record.status == "LOAD_FAILED"
    assert (
        record.system_error
        == "Internal error while loading the file: RuntimeError: a bug Floe did not foresee"
    )
    assert record.first_error == record.system_error


def test_good_file_loads(tmp_path: Path) -> None:
    """Safeguard: the failure handling above leaves the ordinary path alone."""
    put(tmp_path, "ok.csv", b"id,name\n1,a\n2,b\n")
    rows, record = load_file(FakeWorker(tmp_path), pipe_for(), TABLE, "ok.csv")  # type: ignore[arg-type]
    assert rows is not None and rows.num_rows == 2
    assert (record.status, record.rows_loaded) == ("LOADED", 2)


def test_key_pyarrow_cannot_express_is_read_another_way(tmp_path: Path) -> None:
    """Safeguard: S3 allows 'a//b.csv', pyarrow's filesystem refuses it (ArrowInvalid); such a
    key must load, not fail its batch on every replay."""
    put(tmp_path, "a//b.csv", b"id,name\n1,a\n")
    worker = FakeWorker(tmp_path)
    rows, record = load_file(worker, pipe_for(), TABLE, "a//b.csv")  # type: ignore[arg-type]
    assert rows is not None and record.status == "LOADED"
    assert worker.fetched == ["in/a//b.csv"]


# ------------------------------------------------------------------------------------------------
# Large files, read as a stream in parts

WIDE = Table(
    name="DB.PUBLIC.W",
    columns=[
        Column(name="ID", type="NUMBER", precision=38, scale=0),
        Column(name="NAME", type="VARCHAR"),
        Column(name="ROW_NO", type="NUMBER", precision=38, scale=0),
        Column(name="FILE", type="VARCHAR"),
    ],
)
CTX = BatchContext("", b"", "query", 7, {}, {})


def wide_pipe(on_error: OnError = "CONTINUE", limit: float = 0, quote: str | None = '"') -> Pipe:
    spec = CopySpec(
        table=WIDE.name,
        stage="DB.PUBLIC.ST",
        select=["$1", "$2", "METADATA$FILE_ROW_NUMBER", "METADATA$FILENAME"],
        file_format=FileFormat(skip_header=1, field_optionally_enclosed_by=quote),
        on_error=on_error,
        on_error_limit=limit,
    )
    return Pipe(name="DB.PUBLIC.WP", copy_spec=spec, table_id=WIDE.id, stage_url="s3://bucket/in/")


def messy_csv(rows: int, bad_every: int = 0, blanks: bool = False) -> bytes:
    """Quoted values with newlines and doubled quotes, blank lines (with ``blanks``: each is an
    error), and every ``bad_every``-th record a value that does not convert or an extra field."""
    out = ["id,name"]
    for i in range(1, rows + 1):
        name = ["plain", '"a, b"', '"two\nlines"', '"say ""hi"""', ""][i % 5]
        if bad_every and i % bad_every == 0:
            out.append(f"x{i},{name}" if i % (2 * bad_every) else f"{i},{name},extra")
        else:
            out.append(f"{i},{name}")
        if blanks and i % 97 == 0:
            out.append("")
    return ("\n".join(out) + "\n").encode()


def streamed(
    worker: FakeWorker, pipe: Pipe, name: str
) -> tuple[list[dict[str, Any]], LoadOutcome, list[Any]]:
    fetched = fetch_file(worker, pipe, name)  # type: ignore[arg-type]
    assert isinstance(fetched, Streamed), "the file should be over the streaming threshold"
    row = LoadTask("", name, None, 0, "")
    blobs, record = stream_file(worker, CTX, pipe, WIDE, row, 3, fetched.size)  # type: ignore[arg-type]
    rows: list[dict[str, Any]] = []
    for blob in blobs:
        rows.extend(read_blob(worker.fs.inner, blob.path, worker.crypto).to_pylist())
    return rows, record, blobs


def whole(tmp_path: Path, pipe: Pipe, name: str) -> tuple[list[dict[str, Any]], LoadOutcome]:
    table, record = load_file(FakeWorker(tmp_path), pipe, WIDE, name)  # type: ignore[arg-type]
    return (table.to_pylist() if table is not None else []), record


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("on_error", ["CONTINUE", "SKIP_FILE_PCT"])
def test_streamed_file_loads_exactly_as_the_whole_file(
    tmp_path: Path, compress: bool, on_error: OnError
) -> None:
    """Safeguard: a large file read in parts gives the rows, METADATA$FILE_ROW_NUMBER, counts and
    first error (line, character, column) it gives when read whole: parts are cut on record
    boundaries and numbered with the records and lines before them."""
    data = messy_csv(3000, bad_every=250, blanks=True)
    put(tmp_path, "big.csv", gzip.compress(data) if compress else data)
    pipe = wide_pipe(on_error, 50)
    expected_rows, expected = whole(tmp_path, pipe, "big.csv")
    worker = FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=4000)
    rows, record, blobs = streamed(worker, pipe, "big.csv")
    assert len(blobs) > 5, "the file should have been read in several parts"
    assert rows == expected_rows
    assert record == expected
    assert record.status == "PARTIALLY_LOADED" and record.errors_seen == 12 + 30
    assert [r["ROW_NO"] for r in rows] == sorted(r["ROW_NO"] for r in rows)


def test_streamed_blob_names_are_deterministic(tmp_path: Path) -> None:
    """Safeguard: a replayed batch writes its streamed blobs under the same names (it overwrites
    them instead of adding rows)."""
    put(tmp_path, "big.csv", messy_csv(2000))
    worker = FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=5000)
    pipe = wide_pipe()
    first = [b.name for b in streamed(worker, pipe, "big.csv")[2]]
    again = [b.name for b in streamed(worker, pipe, "big.csv")[2]]
    assert first == again and len(set(first)) == len(first) > 1
    assert first[0].endswith("/query-0000000007-0000-00003-00000.parquet")


@pytest.mark.parametrize(("on_error", "limit"), [("SKIP_FILE", 0), ("SKIP_FILE_N", 3)])
def test_skip_file_counts_errors_over_the_whole_file_and_leaves_no_blob(
    tmp_path: Path, on_error: OnError, limit: float
) -> None:
    """Safeguard: ON_ERROR is decided on the whole file, not per part. Errors in different parts
    add up (SKIP_FILE_3 fails on the third), and the parts written before the file failed are
    deleted: a failed file leaves nothing behind."""
    data = messy_csv(3000, bad_every=1000)  # errors at records 1000, 2000 and 3000: three parts apart
    put(tmp_path, "big.csv", data)
    pipe = wide_pipe(on_error, limit)
    _, expected = whole(tmp_path, pipe, "big.csv")
    worker = FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=3000)
    rows, record, blobs = streamed(worker, pipe, "big.csv")
    assert (record, rows, blobs) == (expected, [], [])
    assert record.status == "LOAD_FAILED" and record.errors_seen == 3
    assert not list((tmp_path / "tables").rglob("*.parquet")), "blobs of the failed file remain"


def test_skip_file_n_below_the_limit_loads_from_every_part(tmp_path: Path) -> None:
    data = messy_csv(3000, bad_every=1000)
    put(tmp_path, "big.csv", data)
    pipe = wide_pipe("SKIP_FILE_N", 4)
    expected_rows, expected = whole(tmp_path, pipe, "big.csv")
    rows, record, _ = streamed(
        FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=3000), pipe, "big.csv"
    )
    assert record == expected and record.status == "PARTIALLY_LOADED"
    assert rows == expected_rows and len(rows) == 2997


def test_invalid_utf8_in_a_later_part_names_its_line_in_the_file(tmp_path: Path) -> None:
    """Safeguard: a row error found in part k reports the line in the file, not in the part; the
    bad row alone fails (invalid UTF-8 is an error of its row, decision 70)."""
    data = messy_csv(2000) + "2001,Zoë\n".encode("latin-1")
    put(tmp_path, "big.csv", data)
    pipe = wide_pipe()
    _, expected = whole(tmp_path, pipe, "big.csv")
    rows, record, blobs = streamed(
        FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=3000), pipe, "big.csv"
    )
    assert record == expected and record.status == "PARTIALLY_LOADED"
    assert (len(rows), record.rows_loaded, record.errors_seen) == (2000, 2000, 1) and blobs
    assert record.first_error_line == data.count(b"\n")


def test_small_files_and_other_formats_are_read_whole(tmp_path: Path) -> None:
    put(tmp_path, "small.csv", messy_csv(10))
    worker = FakeWorker(tmp_path, stream_file_bytes=1 << 20)
    assert isinstance(fetch_file(worker, wide_pipe(), "small.csv"), bytes)  # type: ignore[arg-type]
    # Avro and ORC are read whole whatever their size (JSON and Parquet stream too: decision 83).
    avro_pipe = wide_pipe().model_copy(deep=True)
    avro_pipe.copy_spec.file_format = FileFormat(type="AVRO")
    put(tmp_path, "big.avro", b"x" * 9000)
    assert isinstance(fetch_file(FakeWorker(tmp_path, stream_file_bytes=10), avro_pipe, "big.avro"), bytes)  # type: ignore[arg-type]


def test_deleted_before_streaming_is_load_failed_with_a_system_error(tmp_path: Path) -> None:
    worker = FakeWorker(tmp_path, stream_file_bytes=10)
    blobs, record = stream_file(worker, CTX, wide_pipe(), WIDE, LoadTask("", "gone.csv", None, 0, ""), 0, 100)  # type: ignore[arg-type]
    assert blobs == [] and record.status == "LOAD_FAILED"
    assert record.system_error.startswith("Remote file 's3://bucket/in/gone.csv' was not found.")


# ------------------------------------------------------------------------------------------------
# Decompression bombs (issue 9): bounded per file and per part, failing the file alone

PART_BOUND = 4 * MiB


def run_task(
    monkeypatch: pytest.MonkeyPatch, worker: FakeWorker, pipe: Pipe, files: dict[str, bytes]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """One Spark task of one pipe over ``files`` (process_partition, with ``worker`` standing for the
    executor's): each file's record by name, and the blobs the task returns."""
    for name, data in files.items():
        put(worker.root, name, data)
    monkeypatch.setattr(loader, "_WORKER", worker)
    ctx = BatchContext(
        "", b"", "query", 7, {pipe.id: pipe.model_dump_json()}, {pipe.id: TABLE.model_dump_json()}
    )
    rows = [
        {"pipe_id": pipe.id, "path": n, "size": len(d), "received_ms": 0, "stream_id": f"{i}-0", "part": 0}
        for i, (n, d) in enumerate(files.items())
    ]
    records: dict[str, dict[str, Any]] = {}
    blobs: list[dict[str, Any]] = []
    for batch in process_partition(ctx, iter([pa.RecordBatch.from_pylist(rows)])):
        for out in batch.to_pylist():
            payload = json.loads(out["payload"])
            if out["kind"] == "file":
                records[payload["path"]] = payload
            else:
                blobs.append(payload)
    return records, blobs


def _kib(field_name: str) -> int:
    status = Path("/proc/self/status").read_text()
    match = re.search(rf"^{field_name}:\s+(\d+) kB", status, re.M)
    assert match, f"no {field_name} in /proc/self/status"
    return int(match.group(1))


def peak_rss_growth(work: Callable[[], Any]) -> tuple[Any, int]:
    """``work()`` and how far the process's peak RSS rose above its RSS before it (bytes).

    Linux keeps the peak (VmHWM) for the process's lifetime; writing 5 to clear_refs resets it,
    so the figure is this call's own."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _kib("VmRSS")
    result = work()
    return result, (_kib("VmHWM") - before) * 1024


GOOD_CSV = b"id,name\n1,a\n2,b\n"


def test_one_line_bomb_fails_alone_with_the_part_bound_and_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Safeguard: a 2 MB gzip holding one 1 GiB record, next to a good file in the same task. Stored
    small, it is read whole first, handed to the streaming path when it inflates past
    max_part_bytes, and fails there: no record end within the bound. The good file loads; the
    task's memory grows by the bound, not by the gigabyte."""
    worker = FakeWorker(tmp_path, max_part_bytes=PART_BOUND, chunk_bytes=MiB)
    bomb = bombs.gzip_bomb(GiB, header=b"id,name\n")
    assert len(bomb) < 2_200_000
    run_task(monkeypatch, worker, pipe_for(), {"warm.csv": GOOD_CSV})  # imports and caches first
    (records, blobs), growth = peak_rss_growth(
        lambda: run_task(monkeypatch, worker, pipe_for(), {"bomb.csv.gz": bomb, "good.csv": GOOD_CSV})
    )
    print(f"one-line 1 GiB bomb, max_part_bytes 4 MiB: peak RSS +{growth / MiB:.1f} MiB")
    assert records["bomb.csv.gz"]["status"] == "LOAD_FAILED"
    assert records["bomb.csv.gz"]["first_error"] == (
        "File 'bomb.csv.gz' decompresses to more than 4 MiB in one record (pipeline.max_part_bytes); "
        "check that its records end with a newline (and that its quotes are closed), or raise "
        "pipeline.max_part_bytes if such files are expected."
    )
    assert records["bomb.csv.gz"]["size"] == len(bomb)
    assert (records["good.csv"]["status"], records["good.csv"]["rows_loaded"]) == ("LOADED", 2)
    assert [b["files"] for b in blobs] == [["good.csv"]]
    assert growth < 64 * MiB, (
        f"peak RSS grew by {growth / MiB:.0f} MiB for a {PART_BOUND / MiB:.0f} MiB bound"
    )


def test_bomb_with_newlines_fails_at_the_file_bound_and_leaves_no_blob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Safeguard: with newlines, every part ends on a record and stays small, so only the file's
    decompressed size stops it: past max_file_bytes it fails, the blobs of its parts already
    written are deleted, and the good file in the same task loads."""
    worker = FakeWorker(tmp_path, max_part_bytes=PART_BOUND, max_file_bytes=16 * MiB, chunk_bytes=MiB)
    bomb = bombs.gzip_bomb(GiB, bombs.lines(), header=b"id,name\n")
    run_task(monkeypatch, worker, pipe_for(), {"warm.csv": GOOD_CSV})  # imports and caches first
    (records, blobs), growth = peak_rss_growth(
        lambda: run_task(monkeypatch, worker, pipe_for(), {"lines.csv.gz": bomb, "good.csv": GOOD_CSV})
    )
    print(f"1 GiB bomb with newlines, max_file_bytes 16 MiB: peak RSS +{growth / MiB:.1f} MiB")
    record = records["lines.csv.gz"]
    assert (record["status"], record["rows_loaded"]) == ("LOAD_FAILED", 0)
    assert record["first_error"] == (
        "File 'lines.csv.gz' decompresses to more than 16 MiB (pipeline.max_file_bytes); split it into "
        "smaller files, or raise pipeline.max_file_bytes if files this large are expected."
    )
    assert records["good.csv"]["status"] == "LOADED"
    assert [b["files"] for b in blobs] == [["good.csv"]]
    left = sorted(p.name for p in (tmp_path / "tables").rglob("*.parquet"))
    assert len(left) == 2, f"blobs of the failed file remain: {left}"  # the good file's and warm-up's
    assert growth < 64 * MiB, f"peak RSS grew by {growth / MiB:.0f} MiB"


def test_a_bomb_bigger_than_the_streaming_threshold_is_stopped_too(tmp_path: Path) -> None:
    """Safeguard: a stored file above stream_file_bytes goes straight to the streaming path; the
    same bounds hold there."""
    put(tmp_path, "big.csv.gz", bombs.gzip_bomb(256 * MiB, header=b"id,name\n"))
    worker = FakeWorker(tmp_path, stream_file_bytes=1000, max_part_bytes=PART_BOUND, chunk_bytes=MiB)
    fetched = fetch_file(worker, pipe_for(), "big.csv.gz")  # type: ignore[arg-type]
    assert isinstance(fetched, Streamed)
    row = LoadTask("", "big.csv.gz", None, 0, "")
    blobs, record = stream_file(worker, CTX, pipe_for(), TABLE, row, 0, fetched.size)  # type: ignore[arg-type]
    assert blobs == [] and record.status == "LOAD_FAILED"
    assert "in one record (pipeline.max_part_bytes)" in record.first_error


def test_a_whole_read_csv_over_the_part_bound_is_streamed_and_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Safeguard: a small gzip that inflates past max_part_bytes but has records is not a bomb:
    it is handed to the streaming path and loads in parts, as a large file does."""
    data = b"id,name\n" + b"".join(b"%d,name %d\n" % (i, i) for i in range(200_000))
    worker = FakeWorker(tmp_path, max_part_bytes=256 * 1024, chunk_bytes=64 * 1024)
    records, blobs = run_task(monkeypatch, worker, pipe_for(), {"many.csv.gz": gzip.compress(data)})
    assert (records["many.csv.gz"]["status"], records["many.csv.gz"]["rows_loaded"]) == ("LOADED", 200_000)
    assert len(blobs) > 10, "the file should have been loaded in parts"
    assert sum(b["rows"] for b in blobs) == 200_000


def test_json_over_the_part_bound_fails_as_read_whole(tmp_path: Path) -> None:
    json_pipe = pipe_for(["$1:id", "$1:name"]).model_copy(deep=True)
    json_pipe.copy_spec.file_format = FileFormat(type="JSON")
    put(tmp_path, "bomb.json.gz", bombs.gzip_bomb(64 * MiB, b" "))
    put(tmp_path, "plain.json", b'{"id": 1, "name": "a"}\n' * 1000)
    worker = FakeWorker(tmp_path, max_part_bytes=16 * 1024)
    rows, record = load_file(worker, json_pipe, TABLE, "bomb.json.gz")  # type: ignore[arg-type]
    assert rows is None and record.status == "LOAD_FAILED"
    assert record.first_error.startswith(
        "File 'bomb.json.gz' decompresses to more than 16 KiB (pipeline.max_part_bytes), and JSON files "
        "are read whole; split it into smaller files"
    )
    # Stored bytes over the bound: refused before it is even downloaded.
    rows, record = load_file(worker, json_pipe, TABLE, "plain.json")  # type: ignore[arg-type]
    assert rows is None and record.status == "LOAD_FAILED"
    assert record.first_error.startswith("File 'plain.json' decompresses to more than 16 KiB")
    assert record.size == 23 * 1000


def test_load_file_without_hand_off_fails_a_csv_over_the_part_bound(tmp_path: Path) -> None:
    put(tmp_path, "b.csv.gz", bombs.gzip_bomb(64 * MiB, bombs.lines(), header=b"id,name\n"))
    rows, record = load_file(FakeWorker(tmp_path, max_part_bytes=MiB), pipe_for(), TABLE, "b.csv.gz")  # type: ignore[arg-type]
    assert rows is None and record.status == "LOAD_FAILED"
    assert "more than 1 MiB (pipeline.max_part_bytes), and it is read whole" in record.first_error


# ------------------------------------------------------------------------------------------------
# Internal stages: their files are sealed (floe/stage_crypto.py); the loader opens them, read whole
# or streamed in parts, and a file that does not open fails alone


def internal_pipe(pipe: Pipe, stage_id: str = "0123456789abcdef") -> Pipe:
    # Validated anew: a copy would keep the original's cached stage prefix.
    return Pipe.model_validate({**pipe.model_dump(), "stage_url": f"s3://{STAGES_BUCKET}/stages/{stage_id}/"})


def put_sealed(worker: FakeWorker, pipe: Pipe, name: str, data: bytes) -> Path:
    key = pipe.object_key(name)
    path = worker.root / STAGES_BUCKET / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(worker.stage_cipher.seal(data, key))
    return path


def test_an_internal_stage_file_is_decrypted_whole_and_streamed(tmp_path: Path) -> None:
    data = messy_csv(2000, bad_every=250)
    put(tmp_path, "a.csv", data)  # the same file on an external stage, as the reference
    expected_rows, expected = whole(tmp_path, wide_pipe(), "a.csv")
    pipe = internal_pipe(wide_pipe())
    worker = FakeWorker(tmp_path)
    put_sealed(worker, pipe, "a.csv", data)
    table, record = load_file(worker, pipe, WIDE, "a.csv")  # type: ignore[arg-type]
    assert table is not None and table.to_pylist() == expected_rows
    assert record == expected

    streaming = FakeWorker(
        tmp_path, stream_file_bytes=1000, chunk_bytes=4000, stage_cipher=worker.stage_cipher
    )
    rows, streamed_record, blobs = streamed(streaming, pipe, "a.csv")
    assert len(blobs) > 3 and rows == expected_rows
    assert streamed_record == expected


def test_an_internal_stage_file_that_does_not_decrypt_fails_alone(tmp_path: Path) -> None:
    pipe = internal_pipe(wide_pipe())
    worker = FakeWorker(tmp_path)
    path = put_sealed(worker, pipe, "a.csv", messy_csv(50))
    tampered = bytearray(path.read_bytes())
    tampered[-3] ^= 1
    path.write_bytes(bytes(tampered))
    outcome = fetch_file(worker, pipe, "a.csv")  # type: ignore[arg-type]
    assert isinstance(outcome, LoadOutcome) and outcome.status == "LOAD_FAILED"
    assert "cannot be decrypted: segment 0 was altered" in (outcome.first_error or "")
    # Streamed, it fails the same way (and leaves no blob).
    streaming = FakeWorker(tmp_path, stream_file_bytes=10, stage_cipher=worker.stage_cipher)
    task = LoadTask("", "a.csv", None, 0, "")
    blobs, record = stream_file(streaming, CTX, pipe, WIDE, task, 0, 100)  # type: ignore[arg-type]
    assert blobs == [] and record.status == "LOAD_FAILED"
    assert "cannot be decrypted" in (record.first_error or "")
    # A file sealed for another stage (moved there) does not open either.
    other = internal_pipe(wide_pipe(), "ffffffffffffffff")
    moved = worker.root / STAGES_BUCKET / other.object_key("a.csv")
    moved.parent.mkdir(parents=True, exist_ok=True)
    moved.write_bytes(worker.stage_cipher.seal(b"id,v\n1,2\n", pipe.object_key("a.csv")))
    outcome = fetch_file(worker, other, "a.csv")  # type: ignore[arg-type]
    assert isinstance(outcome, LoadOutcome) and "moved or copied" in (outcome.first_error or "")


# ------------------------------------------------------------------------------------------------
# Small files share one transform query (loader.transform_group, transform.copy_group)


def test_small_files_share_one_query_and_each_loads_as_it_would_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task of small files: the clean ones go through one shared query, the one with a bad row
    and the one that does not parse are transformed alone, and every file's record is what a task
    of that file alone gives; the blob holds the loaded files in path order."""
    files = {
        "a.csv": b"id,name\n1,a\n2,b\n",
        "b.csv": b"id,name\n3,c\nx,d\n4,e\n",  # a bad ID: CONTINUE loads the other two
        "c.csv": b"id,name\n5,f\n",
        "d.csv": b"id,name\n6,g,extra\n",  # a record of three fields: a parse error
        "e.csv": b"id,name\n7,h\n8,i\n9,j\n",
    }
    pipe = pipe_for().model_copy(
        update={"copy_spec": pipe_for().copy_spec.model_copy(update={"on_error": "CONTINUE"})}
    )
    shared: list[list[str]] = []
    real = loader.copy_group

    def spy(compiled: CompiledCopy, raws: list[tuple[str, Any]], *args: Any, **kwargs: Any) -> Any:
        out = real(compiled, raws, *args, **kwargs)
        shared.append([name for (name, _), done in zip(raws, out, strict=True) if done is not None])
        return out

    monkeypatch.setattr(loader, "copy_group", spy)
    records, blobs = run_task(monkeypatch, FakeWorker(tmp_path), pipe, files)
    assert shared == [["a.csv", "c.csv", "e.csv"]], "the clean files in one query, the others alone"
    assert [b["files"] for b in blobs] == [["a.csv", "b.csv", "c.csv", "e.csv"]]
    assert blobs[0]["rows"] == 8
    for name, data in files.items():
        alone, _ = run_task(monkeypatch, FakeWorker(tmp_path / name), pipe, {name: data})
        assert {**records[name], "stream_id": ""} == {**alone[name], "stream_id": ""}, name
    assert (records["b.csv"]["status"], records["b.csv"]["rows_loaded"]) == ("PARTIALLY_LOADED", 2)
    assert records["d.csv"]["status"] == "LOAD_FAILED"
