"""Snowflake type spellings -> canonical types, and canonical types -> Arrow / DuckDB types."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from floe.catalog.models import Column, Table
from floe.errors import CompilationError
from floe.types import (
    OFFSET_TYPE,
    arrow_schema,
    arrow_type,
    conform,
    duckdb_type,
    offset_column,
    parse_column_type,
    truncated_fraction,
    with_offset,
)

pytestmark = pytest.mark.unit


def dtype(spelling: str) -> exp.DataType:
    """The column type as sqlglot's Snowflake dialect parses it in CREATE TABLE."""
    node = sqlglot.parse_one(f"CREATE TABLE t (a {spelling})", read="snowflake")
    coldef = node.find(exp.ColumnDef)
    assert coldef is not None
    kind = coldef.args["kind"]
    assert isinstance(kind, exp.DataType)
    return kind


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("NUMBER", ("NUMBER", 38, 0)),
        ("NUMBER(10,2)", ("NUMBER", 10, 2)),
        ("NUMBER(5)", ("NUMBER", 5, 0)),
        ("NUMERIC(12,3)", ("NUMBER", 12, 3)),
        ("DECIMAL(8,1)", ("NUMBER", 8, 1)),
        ("INT", ("NUMBER", 38, 0)),
        ("INTEGER", ("NUMBER", 38, 0)),
        ("BIGINT", ("NUMBER", 38, 0)),
        ("SMALLINT", ("NUMBER", 38, 0)),
        ("TINYINT", ("NUMBER", 38, 0)),
        ("BYTEINT", ("NUMBER", 38, 0)),
        ("FLOAT", ("FLOAT", None, None)),
        ("FLOAT4", ("FLOAT", None, None)),
        ("FLOAT8", ("FLOAT", None, None)),
        ("DOUBLE", ("FLOAT", None, None)),
        ("DOUBLE PRECISION", ("FLOAT", None, None)),
        ("REAL", ("FLOAT", None, None)),
        ("VARCHAR", ("VARCHAR", None, None)),
        ("VARCHAR(20)", ("VARCHAR", 20, None)),
        ("STRING", ("VARCHAR", None, None)),
        ("TEXT", ("VARCHAR", None, None)),
        ("CHAR", ("VARCHAR", 1, None)),
        ("CHAR(5)", ("VARCHAR", 5, None)),
        ("CHARACTER", ("VARCHAR", 1, None)),
        ("BOOLEAN", ("BOOLEAN", None, None)),
        ("DATE", ("DATE", None, None)),
        ("TIMESTAMP", ("TIMESTAMP_NTZ", None, None)),
        ("DATETIME", ("TIMESTAMP_NTZ", None, None)),
        ("TIMESTAMP_NTZ", ("TIMESTAMP_NTZ", None, None)),
        ("TIMESTAMP_NTZ(9)", ("TIMESTAMP_NTZ", 9, None)),
        ("TIMESTAMP(3)", ("TIMESTAMP_NTZ", 3, None)),
        ("TIMESTAMP_TZ", ("TIMESTAMP_TZ", None, None)),
        ("TIMESTAMP_TZ(0)", ("TIMESTAMP_TZ", 0, None)),
        ("TIMESTAMP WITH TIME ZONE", ("TIMESTAMP_TZ", None, None)),
        ("TIMESTAMP_LTZ", ("TIMESTAMP_LTZ", None, None)),
        ("TIMESTAMPLTZ", ("TIMESTAMP_LTZ", None, None)),
        ("TIMESTAMP WITH LOCAL TIME ZONE", ("TIMESTAMP_LTZ", None, None)),
        ("TIME", ("TIME", None, None)),
        ("TIME(3)", ("TIME", 3, None)),
        ("BINARY", ("BINARY", None, None)),
        ("BINARY(16)", ("BINARY", 16, None)),
        ("VARBINARY", ("BINARY", None, None)),
        ("VARBINARY(8388608)", ("BINARY", 8388608, None)),
        ("VARIANT", ("VARIANT", None, None)),
        ("OBJECT", ("VARIANT", None, None)),
        ("ARRAY", ("VARIANT", None, None)),
    ],
)
def test_parse_column_type(spelling: str, expected: tuple[str, int | None, int | None]) -> None:
    assert parse_column_type(dtype(spelling)) == expected


@pytest.mark.parametrize(
    "spelling",
    [
        "GEOGRAPHY",
        "NUMBER(39,0)",
        "NUMBER(5,6)",
        "BINARY(0)",
        "BINARY(8388609)",
        "TIME(10)",
        "TIMESTAMP_TZ(12)",
    ],
)
def test_unsupported_types_are_compilation_errors(spelling: str) -> None:
    with pytest.raises(CompilationError):
        parse_column_type(dtype(spelling))


@pytest.mark.parametrize(
    ("column", "arrow", "duck"),
    [
        (Column(name="A", type="NUMBER", precision=18, scale=0), pa.int64(), "BIGINT"),
        (Column(name="A", type="NUMBER", precision=38, scale=0), pa.decimal128(38, 0), "DECIMAL(38,0)"),
        (Column(name="A", type="NUMBER", precision=10, scale=2), pa.decimal128(10, 2), "DECIMAL(10,2)"),
        (Column(name="A", type="FLOAT"), pa.float64(), "DOUBLE"),
        (Column(name="A", type="VARCHAR", precision=5), pa.string(), "VARCHAR"),
        (Column(name="A", type="BOOLEAN"), pa.bool_(), "BOOLEAN"),
        (Column(name="A", type="DATE"), pa.date32(), "DATE"),
        (Column(name="A", type="TIMESTAMP_NTZ"), pa.timestamp("us"), "TIMESTAMP"),
        (Column(name="A", type="TIMESTAMP_TZ"), pa.timestamp("us", tz="UTC"), "TIMESTAMPTZ"),
        (Column(name="A", type="TIMESTAMP_LTZ"), pa.timestamp("us", tz="UTC"), "TIMESTAMPTZ"),
        (Column(name="A", type="TIME", precision=3), pa.time64("us"), "TIME"),
        (Column(name="A", type="BINARY", precision=4), pa.binary(), "BLOB"),
        (Column(name="A", type="VARIANT"), pa.string(), "VARCHAR"),
    ],
)
def test_physical_types(column: Column, arrow: pa.DataType, duck: str) -> None:
    assert arrow_type(column) == arrow
    assert duckdb_type(column) == duck


def test_arrow_schema_keeps_order_names_and_nullability() -> None:
    table = Table(
        name="D.S.T",
        columns=[
            Column(name="ID", type="NUMBER", precision=9, scale=0, nullable=False),
            Column(name="V", type="VARIANT"),
        ],
    )
    schema = arrow_schema(table)
    assert schema.names == ["ID", "V"]
    assert not schema.field("ID").nullable
    assert schema.field("V").nullable
    assert schema.field("ID").type == pa.int64()


def test_timestamp_tz_columns_keep_their_offsets_in_a_companion_column_after_the_table_columns() -> None:
    table = Table(
        name="D.S.T",
        columns=[
            Column(name="AT", type="TIMESTAMP_TZ"),
            Column(name="ID", type="NUMBER", precision=9, scale=0),
            Column(name="L", type="TIMESTAMP_LTZ"),
        ],
    )
    assert arrow_schema(table).names == ["AT", "ID", "L", offset_column("AT")]
    assert arrow_schema(table).field(offset_column("AT")).type == OFFSET_TYPE
    assert arrow_schema(table, offsets=False).names == ["AT", "ID", "L"]


def test_a_column_named_like_an_offset_column_is_refused() -> None:
    table = Table(
        name="D.S.T",
        columns=[Column(name="AT", type="TIMESTAMP_TZ"), Column(name=offset_column("AT"), type="VARCHAR")],
    )
    with pytest.raises(CompilationError, match="reserved"):
        arrow_schema(table)


def test_conform_reads_a_blob_written_before_offsets_were_kept_as_utc() -> None:
    """A table created before offsets were stored: its blobs have the instant only."""
    table = Table(
        name="D.S.T", columns=[Column(name="AT", type="TIMESTAMP_TZ"), Column(name="N", type="VARCHAR")]
    )
    when = dt.datetime(2024, 1, 2, 15, tzinfo=dt.UTC)
    old_blob = pa.table({"AT": pa.array([when], pa.timestamp("us", tz="UTC")), "N": ["a"]})
    batch = conform(old_blob.to_batches()[0], arrow_schema(table))
    assert batch.schema == arrow_schema(table)
    assert batch.column(offset_column("AT")).to_pylist() == [None]
    # Columns the caller did not ask for are dropped, in any order.
    assert conform(old_blob, pa.schema([pa.field("N", pa.string())])).to_pylist() == [{"N": "a"}]
    with pytest.raises(KeyError):
        conform(old_blob, pa.schema([pa.field("MISSING", pa.string())]))


def test_with_offset_shows_the_instant_in_its_offset() -> None:
    instant = dt.datetime(2024, 1, 2, 15, tzinfo=dt.UTC)
    assert with_offset(instant, 60).isoformat() == "2024-01-02T16:00:00+01:00"
    assert with_offset(instant, -330).isoformat() == "2024-01-02T09:30:00-05:30"
    assert with_offset(instant, None).isoformat() == "2024-01-02T15:00:00+00:00"
    end = dt.datetime(9999, 12, 31, 23, tzinfo=dt.UTC)
    assert with_offset(end, 120) == end  # past year 9999: shown in UTC rather than failing


@pytest.mark.parametrize(
    ("column", "digits"),
    [
        (Column(name="A", type="TIME", precision=3), 3),
        (Column(name="A", type="TIMESTAMP_TZ", precision=0), 0),
        (Column(name="A", type="TIMESTAMP_NTZ", precision=6), None),
        (Column(name="A", type="TIMESTAMP_LTZ", precision=9), None),
        (Column(name="A", type="TIME"), None),
        (Column(name="A", type="VARCHAR", precision=3), None),
    ],
)
def test_truncated_fraction(column: Column, digits: int | None) -> None:
    assert truncated_fraction(column) == digits


@pytest.mark.parametrize(
    ("column", "shown"),
    [
        (Column(name="A", type="BINARY", precision=16), "BINARY(16)"),
        (Column(name="A", type="BINARY"), "BINARY"),
        (Column(name="A", type="TIME", precision=0), "TIME(0)"),
        (Column(name="A", type="TIMESTAMP_LTZ"), "TIMESTAMP_LTZ"),
        (Column(name="A", type="VARCHAR", precision=5), "VARCHAR(5)"),
        (Column(name="A", type="NUMBER", precision=10, scale=2), "NUMBER(10,2)"),
    ],
)
def test_sql_type_shows_lengths_and_fractional_digits(column: Column, shown: str) -> None:
    assert column.sql_type == shown
