"""load_file: how one file's failures become its load-history record (without Spark or S3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from pyarrow import fs as pafs

from floe.catalog.models import Column, CopySpec, FileFormat, Pipe, Table
from pipeline.loader import load_file
from pipeline.transform import CompiledCopy, compile_copy

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


class _NoFaults:
    def hit(self, point: str) -> None:
        del point


@dataclass
class _S3LikeFileSystem:
    """A local filesystem that, like pyarrow's S3FileSystem, refuses empty path components."""

    inner: pafs.FileSystem

    def open_input_file(self, path: str) -> Any:
        if "//" in path:
            raise pa.ArrowInvalid(f"Empty path component in path {path}")
        return self.inner.open_input_file(path)


@dataclass
class FakeWorker:
    """What load_file uses of a worker, over a local directory standing for S3."""

    root: Path
    broken: bool = False
    """compiled_for raises, as a transform bug would."""
    con: duckdb.DuckDBPyConnection = field(default_factory=duckdb.connect)
    faults: Any = field(default_factory=_NoFaults)
    fetched: list[str] = field(default_factory=list)
    """Keys read through get_object (boto3 in the real worker)."""

    @property
    def fs(self) -> Any:
        return _S3LikeFileSystem(pafs.SubTreeFileSystem(str(self.root), pafs.LocalFileSystem()))

    def get_object(self, bucket: str, key: str) -> bytes:
        self.fetched.append(key)
        path = self.root / bucket / key
        if not path.exists():
            raise FileNotFoundError(key)
        return path.read_bytes()

    def compiled_for(self, pipe: Pipe, table: Table) -> CompiledCopy:
        if self.broken:
            raise RuntimeError("a bug Floe did not foresee")
        return compile_copy(pipe.copy_spec, table, pipe.copy_spec.file_format.type)


def put(root: Path, name: str, data: bytes) -> None:
    path = root / "bucket" / "in" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_missing_object_is_load_failed_with_snowflakes_text_as_system_error(tmp_path: Path) -> None:
    """Safeguard: a notified file deleted before its load fails alone (no task failure, so no
    endless replay), with Snowflake's 091016 text as first error and systemError."""
    rows, record = load_file(FakeWorker(tmp_path), pipe_for(), TABLE, "gone.csv")  # type: ignore[arg-type]
    assert rows is None
    assert record["status"] == "LOAD_FAILED"
    assert record["first_error"] == record["system_error"]
    assert record["first_error"].startswith("Remote file 's3://bucket/in/gone.csv' was not found. If you are")


def test_not_utf8_file_records_line_character_and_column(tmp_path: Path) -> None:
    """Safeguard: a whole-file failure with a place in the file keeps that place in load history."""
    put(tmp_path, "latin1.csv", "id,name\n1,Ann\n2,Zoë\n".encode("latin-1"))
    rows, record = load_file(FakeWorker(tmp_path), pipe_for(["$1", "$2"]), TABLE, "latin1.csv")  # type: ignore[arg-type]
    assert rows is None
    assert (record["status"], record["errors_seen"], record["system_error"]) == ("LOAD_FAILED", 1, None)
    assert record["first_error"] == "Invalid UTF8 detected in string 'Zo0xEB'"
    assert (record["first_error_line"], record["first_error_character"]) == (3, 3)
    assert record["first_error_column"] == '"T"["NAME":2]'
    assert record["size"] == len("id,name\n1,Ann\n2,Zoë\n".encode("latin-1"))


def test_unforeseen_error_fails_the_file_not_the_batch(tmp_path: Path) -> None:
    """Safeguard: reading a file is deterministic, so an unexpected exception would fail every
    replay of its batch and stall the pipeline; the file fails alone with a systemError instead."""
    put(tmp_path, "f.csv", b"id,name\n1,a\n")
    rows, record = load_file(FakeWorker(tmp_path, broken=True), pipe_for(), TABLE, "f.csv")  # type: ignore[arg-type]
    assert rows is None
    assert record["status"] == "LOAD_FAILED"
    assert (
        record["system_error"]
        == "Internal error while loading the file: RuntimeError: a bug Floe did not foresee"
    )
    assert record["first_error"] == record["system_error"]


def test_good_file_loads(tmp_path: Path) -> None:
    """Safeguard: the failure handling above leaves the ordinary path alone."""
    put(tmp_path, "ok.csv", b"id,name\n1,a\n2,b\n")
    rows, record = load_file(FakeWorker(tmp_path), pipe_for(), TABLE, "ok.csv")  # type: ignore[arg-type]
    assert rows is not None and rows.num_rows == 2
    assert (record["status"], record["rows_loaded"]) == ("LOADED", 2)


def test_key_pyarrow_cannot_express_is_read_another_way(tmp_path: Path) -> None:
    """Safeguard: S3 allows 'a//b.csv', pyarrow's filesystem refuses it (ArrowInvalid); such a
    key must load, not fail its batch on every replay."""
    put(tmp_path, "a//b.csv", b"id,name\n1,a\n")
    worker = FakeWorker(tmp_path)
    rows, record = load_file(worker, pipe_for(), TABLE, "a//b.csv")  # type: ignore[arg-type]
    assert rows is not None and record["status"] == "LOADED"
    assert worker.fetched == ["in/a//b.csv"]
