"""A Spark task loading files that evolve their table (pipeline.loader with pipeline.evolution), with
the catalog in the real Redis and a local directory standing for S3: the table gains the columns,
the blob holds every file's rows, and a replay evolves nothing more (decision 81)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
import redis

from floe.blob_columns import read_as, stored_schema
from floe.blobs import read_blob
from floe.catalog import Catalog, Column, CopySpec, FileFormat, Pipe, Role, Table, grant_key
from floe.keys import Keys
from floe.settings import Settings
from floe.types import arrow_schema
from pipeline import loader
from pipeline.loader import BatchContext, process_partition
from tests.pipeline.test_loader import FakeWorker, put

pytestmark = pytest.mark.integration


@dataclass
class CatalogWorker(FakeWorker):
    """A fake worker whose catalog is in the real Redis, under ``prefix``."""

    client: Any = None
    prefix: str = ""
    evolve_calls: list[str] = field(default_factory=list)

    def redis(self) -> Any:
        return self.client

    @property
    def settings(self) -> Any:
        base = super().settings
        base.redis = SimpleNamespace(prefix=self.prefix)
        return base


def setup(
    tmp_path: Path, settings: Settings, client: redis.Redis, *, owner: str = "LOADER"
) -> tuple[CatalogWorker, Catalog, Table, Pipe]:
    keys = Keys(settings.redis.prefix)
    catalog = Catalog(client, keys)
    table = Table(
        name="DB.S.T",
        owner="LOADER",
        enable_schema_evolution=True,
        columns=[
            Column(name="ID", type="NUMBER", precision=38, scale=0),
            Column(name="CODE", type="VARCHAR", nullable=False),
        ],
    )
    catalog.put(table)
    spec = CopySpec(
        table=table.name,
        stage="DB.S.ST",
        file_format=FileFormat(type="JSON"),
        match_by_column_name="CASE_INSENSITIVE",
    )
    pipe = Pipe(name="DB.S.P", copy_spec=spec, table_id=table.id, stage_url="s3://bucket/in/", owner=owner)
    worker = CatalogWorker(tmp_path, client=client, prefix=settings.redis.prefix)
    return worker, catalog, table, pipe


def run_task(
    monkeypatch: pytest.MonkeyPatch, worker: CatalogWorker, pipe: Pipe, table: Table, files: dict[str, bytes]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """One task of one pipe over ``files``, with ``table`` as the driver shipped it."""
    for name, data in files.items():
        put(worker.root, name, data)
    monkeypatch.setattr(loader, "_WORKER", worker)
    ctx = BatchContext(
        "", b"", "query", 7, {pipe.id: pipe.model_dump_json()}, {pipe.id: table.model_dump_json()}
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


def rows_now(worker: CatalogWorker, catalog: Catalog, blobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blobs' rows as a reader of the table, as the catalog has it now, sees them."""
    table = catalog.get(Table, "DB.S.T")
    schema = arrow_schema(table, offsets=False)
    out: list[dict[str, Any]] = []
    for blob in blobs:
        data = read_blob(worker.fs.inner, blob["path"], worker.crypto, name=blob["name"])
        out += read_as(data, stored_schema(table, schema), schema).to_pylist()
    return sorted(out, key=lambda r: r["ID"])


FILES = {
    "1.json": b'{"id": 1, "code": "a"}\n',
    "2.json": b'{"id": 2, "code": "b", "Score": 9.5, "tags": ["x"]}\n',
    "3.json": b'{"id": 3, "score": 7}\n',
}


def test_files_evolve_the_table_they_load_into(
    tmp_path: Path, isolated_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, catalog, table, pipe = setup(tmp_path, isolated_settings, redis_client)
    records, blobs = run_task(monkeypatch, worker, pipe, table, FILES)
    assert {n: r["status"] for n, r in records.items()} == dict.fromkeys(FILES, "LOADED")
    evolved = catalog.get(Table, table.name)
    assert [(c.name, c.sql_type, c.nullable) for c in evolved.columns] == [
        ("ID", "NUMBER(38,0)", True),
        ("CODE", "VARCHAR", True),  # 3.json has no code: NOT NULL dropped
        ("SCORE", "FLOAT", True),
        ("TAGS", "VARIANT", True),
    ]
    added = evolved.column("SCORE").evolution
    assert added is not None and (added.evolution_type, added.file_name, added.pipe_id) == (
        "ADD_COLUMN",
        "2.json",
        pipe.id,
    )
    assert rows_now(worker, catalog, blobs) == [
        {"ID": 1, "CODE": "a", "SCORE": None, "TAGS": None},
        {"ID": 2, "CODE": "b", "SCORE": 9.5, "TAGS": '["x"]'},
        {"ID": 3, "CODE": None, "SCORE": 7.0, "TAGS": None},
    ]
    # The batch replayed (the driver crashed before its commit) with the table it now reads: the
    # same rows, and nothing evolves again.
    version = catalog.version()
    replayed_records, replayed = run_task(monkeypatch, worker, pipe, evolved, FILES)
    assert catalog.version() == version
    assert {n: r["status"] for n, r in replayed_records.items()} == dict.fromkeys(FILES, "LOADED")
    assert rows_now(worker, catalog, replayed) == rows_now(worker, catalog, blobs)


def test_a_loader_without_the_privilege_loads_without_evolving(
    tmp_path: Path, isolated_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[EVO] 'The role used to load the data has the EVOLVE SCHEMA or OWNERSHIP privilege on the table.'"""
    worker, catalog, table, pipe = setup(tmp_path, isolated_settings, redis_client, owner="OTHER")
    catalog.put(Role(name="OTHER", grants={grant_key("TABLE", table.name): ["INSERT"]}))
    records, _ = run_task(monkeypatch, worker, pipe, table, {"2.json": FILES["2.json"]})
    assert records["2.json"]["status"] == "LOADED"
    assert [c.name for c in catalog.get(Table, table.name).columns] == ["ID", "CODE"]
    catalog.put(Role(name="OTHER", grants={grant_key("TABLE", table.name): ["INSERT", "EVOLVE SCHEMA"]}))
    run_task(monkeypatch, worker, pipe, table, {"2.json": FILES["2.json"]})
    assert [c.name for c in catalog.get(Table, table.name).columns] == ["ID", "CODE", "SCORE", "TAGS"]


def test_a_file_adding_too_many_columns_fails_alone(
    tmp_path: Path, isolated_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[EVO] one load adds at most 100 columns (Snowflake's default limit per COPY)."""
    worker, catalog, table, pipe = setup(tmp_path, isolated_settings, redis_client)
    wide = json.dumps({"id": 5, "code": "w", **{f"k{i}": i for i in range(101)}}).encode()
    records, _ = run_task(monkeypatch, worker, pipe, table, {"wide.json": wide, "1.json": FILES["1.json"]})
    assert records["wide.json"]["status"] == "LOAD_FAILED"
    assert "would add 101 columns" in records["wide.json"]["first_error"]
    assert records["1.json"]["status"] == "LOADED"
    assert [c.name for c in catalog.get(Table, table.name).columns] == ["ID", "CODE"]


def test_a_streamed_file_evolves_the_table_from_the_part_that_brings_the_column(
    tmp_path: Path, isolated_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file read in parts (over ``pipeline.stream_file_bytes``): the part bringing a key adds its
    column; the rows of the parts before it read NULL there."""
    worker, catalog, table, pipe = setup(tmp_path, isolated_settings, redis_client)
    worker.stream_file_bytes, worker.chunk_bytes = 10, 256
    early = b"".join(b'{"id": %d, "code": "c"}\n' % i for i in range(40))
    late = b"".join(b'{"id": %d, "code": "c", "late": %d}\n' % (i, i) for i in range(40, 60))
    records, blobs = run_task(monkeypatch, worker, pipe, table, {"big.json": early + late})
    assert records["big.json"]["status"] == "LOADED" and len(blobs) > 2
    assert [c.name for c in catalog.get(Table, table.name).columns] == ["ID", "CODE", "LATE"]
    rows = rows_now(worker, catalog, blobs)
    assert [r["LATE"] for r in rows] == [None] * 40 + list(range(40, 60))
