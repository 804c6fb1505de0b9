"""A Spark task's worker (pipeline.loader, the real ``_Worker``) loading a JSON file and a Parquet file
from LocalStack's S3 in several parts each, with small part sizes: the rows in the blobs it writes,
the file's load-history record and its error lines are those of the file read whole (decision 83).
The Parquet file is read from S3 by ranges, through pyarrow's S3 file."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import fs as pafs

from floe.aws import pyarrow_s3_kwargs
from floe.blobs import crypto_from_settings, read_blob
from floe.catalog import Column, CopySpec, FileFormat, Pipe, Table
from floe.records import LoadOutcome
from floe.settings import Settings
from pipeline import loader
from pipeline.formats import read_raw
from pipeline.loader import BatchContext, process_partition
from pipeline.transform import apply_copy, compile_copy

pytestmark = pytest.mark.integration

KIB = 1024
TABLE = Table(
    name="DB.PUBLIC.EVENTS",
    columns=[
        Column(name="ID", type="NUMBER", precision=38, scale=0),
        Column(name="NAME", type="VARCHAR"),
        Column(name="ROW_NO", type="NUMBER", precision=38, scale=0),
    ],
)
SELECT = ["$1:id", "$1:name", "METADATA$FILE_ROW_NUMBER"]


@pytest.fixture
def settings(isolated_settings: Settings, tmp_path: Path, s3: Any) -> Settings:
    """Files over 256 KiB stream, in parts of 128 KiB; a tables bucket of the test's own."""
    settings = isolated_settings.model_copy(
        update={
            "pipeline": isolated_settings.pipeline.model_copy(
                update={"stream_file_bytes": 256 * KIB, "chunk_bytes": 128 * KIB}
            ),
            "encryption": isolated_settings.encryption.model_copy(
                update={"master_key_file": str(tmp_path / "master.key")}
            ),
        },
        deep=True,
    )
    s3.create_bucket(Bucket=settings.pipeline.tables_bucket)
    return settings


@pytest.fixture
def fresh_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The task builds its own worker from the context's settings, and it is closed afterwards."""
    monkeypatch.setattr(loader, "_WORKER", None)
    yield
    if loader._WORKER is not None:
        loader._WORKER.pool.shutdown()


def pipe_for(bucket: str, fmt: FileFormat) -> Pipe:
    spec = CopySpec(
        table=TABLE.name, stage="DB.PUBLIC.ST", select=SELECT, file_format=fmt, on_error="CONTINUE"
    )
    return Pipe(name="DB.PUBLIC.P", copy_spec=spec, table_id=TABLE.id, stage_url=f"s3://{bucket}/in/")


def load(
    settings: Settings, s3: Any, bucket: str, pipe: Pipe, name: str, data: bytes
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One task of ``pipe`` over the file: its record (the wire form of its LoadOutcome) and the
    blobs it wrote."""
    s3.put_object(Bucket=bucket, Key=f"in/{name}", Body=data)
    ctx = BatchContext(
        settings.worker_json(),
        settings.encryption.resolve_master_key(),
        "query",
        3,
        {pipe.id: pipe.model_dump_json()},
        {pipe.id: TABLE.model_dump_json()},
    )
    task = {
        "pipe_id": pipe.id,
        "path": name,
        "size": len(data),
        "received_ms": 0,
        "stream_id": "1-0",
        "part": 0,
    }
    records: list[dict[str, Any]] = []
    blobs: list[dict[str, Any]] = []
    for batch in process_partition(ctx, iter([pa.RecordBatch.from_pylist([task])])):
        for out in batch.to_pylist():
            payload = json.loads(out["payload"])
            if out["kind"] == "file":
                records.append(payload)
            else:
                blobs.append(payload)
    assert len(records) == 1
    return records[0], blobs


def blob_rows(settings: Settings, blobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    fs = pafs.S3FileSystem(**pyarrow_s3_kwargs(settings.aws))
    crypto = crypto_from_settings(settings.encryption.master_key_id, settings.encryption.resolve_master_key())
    rows: list[dict[str, Any]] = []
    for blob in blobs:
        rows += read_blob(fs, blob["path"], crypto, name=blob["name"]).to_pylist()
    return sorted(rows, key=lambda r: r["ROW_NO"])


def whole(pipe: Pipe, name: str, data: bytes) -> tuple[list[dict[str, Any]], LoadOutcome]:
    """The file read whole and transformed, as a small file is."""
    compiled = compile_copy(pipe.copy_spec, TABLE, pipe.copy_spec.file_format.type)
    rows, outcome = apply_copy(compiled, read_raw(data, pipe.copy_spec.file_format, path=name), filename=name)
    return sorted(rows.to_pylist(), key=lambda r: r["ROW_NO"]), outcome


def test_a_json_file_in_several_parts_loads_as_one(
    settings: Settings, s3: Any, bucket: str, fresh_worker: None
) -> None:
    """NDJSON with pretty-printed documents and bad ones in different parts: the blobs hold every
    good row once, with its row number in the file; the record counts the whole file and names
    the first error's line in the file."""
    docs = []
    for i in range(1, 12_001):
        doc = {"id": i, "name": f'event {i:05d} with [brackets] and "quotes"'}
        if i % 2500 == 0:
            docs.append(json.dumps({**doc, "id": f"n/a {i}"}))
        elif i % 97 == 0:
            docs.append(json.dumps(doc, indent=2))
        else:
            docs.append(json.dumps(doc))
    data = ("\n".join(docs) + "\n").encode()
    assert len(data) > 256 * KIB and len(data) > 4 * 128 * KIB, "the file must stream in several parts"
    pipe = pipe_for(bucket, FileFormat(type="JSON"))
    expected_rows, expected = whole(pipe, "events.json", data)
    record, blobs = load(settings, s3, bucket, pipe, "events.json", data)
    assert len(blobs) >= 4, "one blob per part"
    assert blob_rows(settings, blobs) == expected_rows
    assert len(expected_rows) == 12_000 - 4
    assert record["status"] == "PARTIALLY_LOADED"
    assert (record["rows_parsed"], record["rows_loaded"], record["errors_seen"]) == (
        12_000,
        11_996,
        4,
    )
    assert record["first_error"] == expected.first_error == "Numeric value 'n/a 2500' is not recognized"
    # Document 2500 is on line 2500 plus 3 lines for each pretty one before it.
    assert record["first_error_line"] == expected.first_error_line == 2500 + 3 * (2500 // 97)


def test_a_parquet_file_in_several_parts_loads_as_one(
    settings: Settings, s3: Any, bucket: str, fresh_worker: None
) -> None:
    """Parquet read from S3 by ranges, a few row groups per part; an invalid string in a later row
    group is an error of its own row, its line (= row) the file's."""
    n = 60_000
    names = [f"event {i:05d}".encode() for i in range(1, n + 1)]
    names[52_345 - 1] = b"caf\xe9"
    table = pa.table({"id": pa.array(range(1, n + 1), pa.int64()), "name": pa.array(names, pa.binary())})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=5000, compression="none")
    data = buf.getvalue()
    assert len(data) > 256 * KIB
    pipe = pipe_for(bucket, FileFormat(type="PARQUET"))
    expected_rows, expected = whole(pipe, "events.parquet", data)
    record, blobs = load(settings, s3, bucket, pipe, "events.parquet", data)
    assert len(blobs) >= 4
    assert blob_rows(settings, blobs) == expected_rows and len(expected_rows) == n - 1
    assert (record["status"], record["rows_loaded"], record["errors_seen"]) == (
        "PARTIALLY_LOADED",
        n - 1,
        1,
    )
    assert record["first_error"] == expected.first_error == "Invalid UTF8 detected in string 'caf0xE9'"
    assert record["first_error_line"] == expected.first_error_line == 52_345
