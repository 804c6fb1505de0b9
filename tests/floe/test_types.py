"""Snowflake type spellings -> canonical types, and canonical types -> Arrow / DuckDB types."""

from __future__ import annotations

import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from floe.catalog.models import Column, Table
from floe.errors import CompilationError
from floe.types import arrow_schema, arrow_type, duckdb_type, parse_column_type

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
        ("TIMESTAMP_NTZ(9)", ("TIMESTAMP_NTZ", None, None)),
        ("TIMESTAMP_TZ", ("TIMESTAMP_TZ", None, None)),
        ("TIMESTAMP_LTZ", ("TIMESTAMP_TZ", None, None)),
        ("VARIANT", ("VARIANT", None, None)),
        ("OBJECT", ("VARIANT", None, None)),
        ("ARRAY", ("VARIANT", None, None)),
    ],
)
def test_parse_column_type(spelling: str, expected: tuple[str, int | None, int | None]) -> None:
    assert parse_column_type(dtype(spelling)) == expected


@pytest.mark.parametrize("spelling", ["BINARY", "TIME", "GEOGRAPHY", "NUMBER(39,0)", "NUMBER(5,6)"])
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
