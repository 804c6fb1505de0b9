"""Schema evolution's pure parts (pipeline.evolution): a file's columns and their inferred types, and
what loading it changes in a table (decision 81)."""

from __future__ import annotations

import datetime as dt
import decimal
import io
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from floe.catalog.models import Column, CopySpec, FileFormat, Pipe, Table
from pipeline.evolution import FileColumns, TaskTable, evolvable, evolve, file_columns, plan
from pipeline.formats import RawFile, read_raw
from pipeline.loader import load_file
from tests.pipeline.test_loader import FakeWorker, put

pytestmark = pytest.mark.unit

TABLE = Table(
    name="DB.S.T",
    enable_schema_evolution=True,
    columns=[
        Column(name="ID", type="NUMBER", precision=38, scale=0, nullable=False),
        Column(name="NAME", type="VARCHAR", nullable=False),
        Column(name="FILE", type="VARCHAR", nullable=False),
    ],
)


def pipe(kind: str = "JSON", match: str = "CASE_INSENSITIVE", **spec: object) -> Pipe:
    copy = CopySpec(
        table=TABLE.name,
        stage="DB.S.ST",
        file_format=FileFormat(type=kind),  # type: ignore[arg-type]
        match_by_column_name=match,  # type: ignore[arg-type]
        include_metadata={"FILE": "METADATA$FILENAME"},
        **spec,  # type: ignore[arg-type]
    )
    return Pipe(name="DB.S.P", copy_spec=copy, table_id=TABLE.id, stage_url="s3://b/in/")


def typed(found: FileColumns) -> dict[str, str]:
    return {c.name: c.sql_type for c in found.columns}


def test_json_keys_in_order_with_types_wide_enough_for_later_files() -> None:
    body = (
        b'{"id": 1, "name": "a", "Score": 1, "tags": ["x"], "mixed": 1, "note": null}\n'
        b'{"id": 2, "name": "b", "Score": 2.5, "when": "2024-01-01", "mixed": "one", "deep": {"k": 1}}\n'
        b'[1, 2]\n{"id": 3, "name": "c", "we\\"ird.key": true}\n'
    )
    raw = read_raw(body, FileFormat(type="JSON"), path="f.json")
    found = file_columns(raw, duckdb.connect())
    assert found is not None
    assert typed(found) == {
        "id": "NUMBER(38,0)",
        "name": "VARCHAR",
        "Score": "FLOAT",
        "tags": "VARIANT",
        "mixed": "VARCHAR",
        "note": "VARCHAR",
        "when": "VARCHAR",
        "deep": "VARIANT",
        'we"ird.key': "BOOLEAN",
    }
    # Keys some objects lack (the array document is no object and does not count).
    assert found.partial == frozenset(typed(found)) - {"id", "name"}


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def test_columnar_types_come_from_the_file_as_its_reader_gives_them() -> None:
    """USE_LOGICAL_TYPE's default reads a naive microsecond timestamp as its integer and a UTC one as
    TIMESTAMP_NTZ (decision 71); with TRUE, NTZ and LTZ."""
    data = pa.table(
        {
            "i": pa.array([1], pa.int32()),
            "f": pa.array([1.5], pa.float32()),
            "d": pa.array([decimal.Decimal("1.25")], pa.decimal128(10, 2)),
            "b": [True],
            "day": [dt.date(2024, 1, 1)],
            "ts": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us")),
            "tz": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")),
            "s": ["x"],
            "nested": [{"k": 1}],
            "bin": [b"\x00"],
        }
    )
    raw = read_raw(_parquet(data), FileFormat(type="PARQUET"), path="f.parquet")
    found = file_columns(raw, duckdb.connect())
    assert found is not None and found.partial == frozenset()
    assert typed(found) == {
        "i": "NUMBER(38,0)",
        "f": "FLOAT",
        "d": "NUMBER(10,2)",
        "b": "BOOLEAN",
        "day": "DATE",
        "ts": "NUMBER(38,0)",
        "tz": "TIMESTAMP_NTZ",
        "s": "VARCHAR",
        "nested": "VARIANT",
        "bin": "VARCHAR",  # binary reads as hex text
    }
    logical = read_raw(_parquet(data), FileFormat(type="PARQUET", use_logical_type=True), path="f.parquet")
    found = file_columns(logical, duckdb.connect())
    assert found is not None
    assert (typed(found)["ts"], typed(found)["tz"]) == ("TIMESTAMP_NTZ", "TIMESTAMP_LTZ")


def test_csv_with_a_header_infers_from_text_and_without_one_has_no_names() -> None:
    """CSV with PARSE_HEADER names its raw columns after the header, as a columnar file does."""
    table = pa.table(
        {"n": ["1", "22", None], "x": ["1.5", "2", "3"], "ok": ["TRUE", "false", None], "t": ["a", "1", "2"]}
    )
    empty = pa.array([], pa.int64())
    with_header = RawFile(table, empty, empty, [], 3, "CSV", fmt=FileFormat(parse_header=True))
    found = file_columns(with_header, duckdb.connect())
    assert found is not None
    assert typed(found) == {"n": "NUMBER(38,0)", "x": "FLOAT", "ok": "BOOLEAN", "t": "VARCHAR"}
    without = RawFile(table, empty, empty, [], 3, "CSV", fmt=FileFormat())
    assert file_columns(without, duckdb.connect()) is None


def test_plan_adds_new_columns_and_drops_not_null_where_the_file_lacks_them() -> None:
    """[EVO] 'Automatically adding new columns'; 'Automatically dropping the NOT NULL constraint from
    columns that are missing in new data files'. Columns INCLUDE_METADATA fills are neither."""
    found = FileColumns(
        (
            Column(name="id", type="NUMBER", precision=38, scale=0),
            Column(name="Score", type="FLOAT"),
            Column(name="file", type="VARCHAR"),
            Column(name="score", type="FLOAT"),
            Column(name="x" * 256, type="VARCHAR"),
        )
    )
    change = plan(TABLE, pipe(), found)
    assert [c.name for c in change.add] == ["SCORE"]  # upper-cased, once, file's FILE is metadata's
    assert change.drop_not_null == ("NAME",)
    exact = plan(TABLE, pipe(match="CASE_SENSITIVE"), found)
    assert [c.name for c in exact.add] == ["id", "Score", "file", "score"]
    assert exact.drop_not_null == ("ID", "NAME")
    # A key some documents lack is missing from those records: NOT NULL goes too.
    partial = FileColumns(found.columns, frozenset({"id"}))
    assert plan(TABLE, pipe(), partial).drop_not_null == ("ID", "NAME")
    everything = FileColumns((Column(name="ID", type="VARCHAR"), Column(name="NAME", type="VARCHAR")))
    assert not plan(TABLE, pipe(), everything)


def test_which_loads_evolve() -> None:
    """[EVO] ENABLE_SCHEMA_EVOLUTION = TRUE and MATCH_BY_COLUMN_NAME; never a transform or a
    streaming pipe (the privilege is checked per file, against the catalog)."""
    assert evolvable(pipe(), TABLE)
    assert not evolvable(pipe(), TABLE.model_copy(update={"enable_schema_evolution": False}))
    assert not evolvable(pipe(match="NONE"), TABLE)
    assert not evolvable(pipe(select=["$1"]), TABLE)
    assert not evolvable(pipe().model_copy(update={"source": "streaming"}), TABLE)


def test_a_copy_its_table_no_longer_fits_is_the_pipe_s_error(tmp_path: Path) -> None:
    """A pipe whose COPY names a column dropped since fails its files as a pipe error (the state
    SYSTEM$PIPE_STATUS reports as STALLED_COMPILATION_ERROR), with the compiler's text, not as a
    fault of Floe's."""
    copy = CopySpec(
        table=TABLE.name, stage="DB.S.ST", columns=["ID", "GONE"], file_format=FileFormat(skip_header=1)
    )
    loads = Pipe(name="DB.S.P", copy_spec=copy, table_id=TABLE.id, stage_url="s3://bucket/in/")
    put(tmp_path, "f.csv", b"id,gone\n1,x\n")
    rows, record = load_file(FakeWorker(tmp_path), loads, TABLE, "f.csv")  # type: ignore[arg-type]
    assert rows is None and record.status == "LOAD_FAILED"
    assert (record.trouble, record.system_error) == ("pipe", None)
    assert record.first_error == "SQL compilation error:\ninvalid identifier 'GONE'"


def test_csv_read_with_its_header_evolves_by_its_names() -> None:
    """[EVO] 'for schema evolution with CSV, when used with MATCH_BY_COLUMN_NAME and PARSE_HEADER,
    ERROR_ON_COLUMN_COUNT_MISMATCH must be set to false'; a name given twice is one column."""
    fmt = FileFormat(type="CSV", parse_header=True, error_on_column_count_mismatch=False)
    raw = read_raw(b"id,name,Amount,amount\n1,a,2.5,x\n2,b,3,y\n", fmt, path="c.csv")
    found = file_columns(raw, duckdb.connect())
    assert found is not None
    assert [(c.name, c.sql_type) for c in found.columns] == [
        ("id", "NUMBER(38,0)"),
        ("name", "VARCHAR"),
        ("Amount", "FLOAT"),
        ("amount", "VARCHAR"),
    ]
    assert [c.name for c in plan(TABLE, pipe("CSV"), found).add] == ["AMOUNT"]
    # With ERROR_ON_COLUMN_COUNT_MISMATCH = TRUE (the default) the load does not evolve the table.
    strict = read_raw(b"id,name,Amount\n1,a,2.5\n", FileFormat(type="CSV", parse_header=True), path="s.csv")
    current = TaskTable(TABLE)
    untouched = SimpleNamespace(con=duckdb.connect())  # no Redis: nothing may be changed
    assert evolve(untouched, pipe("CSV"), current, strict, "s.csv") is TABLE  # type: ignore[arg-type]
