"""Snowflake column types and their Arrow and DuckDB counterparts.

Floe stores eight canonical Snowflake types (``floe.catalog.models.COLUMN_TYPES``). This module maps
every spelling Snowflake accepts in DDL onto them (``parse_column_type``) and maps the canonical types
onto the physical types used in blobs (Arrow) and in the COPY transform (DuckDB).

Physical choices:

- ``NUMBER(p,0)`` with ``p <= 18`` is ``int64``: every such value fits, and integer columns are
  by far the most common. Anything wider, or with a scale, is ``decimal128(p,s)``.
- ``TIMESTAMP_TZ`` is stored as a UTC instant (``timestamp('us', tz='UTC')``); the original offset
  is not kept.
- ``VARIANT`` is JSON text in a string column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from floe.errors import CompilationError

if TYPE_CHECKING:  # annotations only: catalog.ddl imports this module
    from floe.catalog.models import Column, Table

MAX_PRECISION = 38
"""Largest NUMBER precision (Snowflake's and Arrow decimal128's)."""

_DT = exp.DataType.Type

# Spellings that are NUMBER(38,0) in Snowflake: its integer types are all aliases of NUMBER(38,0).
_INTEGER_TYPES = {_DT.INT, _DT.BIGINT, _DT.SMALLINT, _DT.TINYINT, _DT.MEDIUMINT}
_FLOAT_TYPES = {_DT.FLOAT, _DT.DOUBLE}
_STRING_TYPES = {_DT.VARCHAR, _DT.TEXT, _DT.NVARCHAR, _DT.CHAR, _DT.NCHAR}
# CHAR(n) is VARCHAR(n) in Snowflake, but a bare CHAR / CHARACTER / NCHAR means length 1.
_FIXED_CHAR_TYPES = {_DT.CHAR, _DT.NCHAR}
_NTZ_TYPES = {_DT.TIMESTAMP, _DT.DATETIME, _DT.TIMESTAMPNTZ}
# TIMESTAMP_LTZ is an instant like TIMESTAMP_TZ; Floe keeps both as UTC instants.
_TZ_TYPES = {_DT.TIMESTAMPTZ, _DT.TIMESTAMPLTZ}
_VARIANT_TYPES = {_DT.VARIANT, _DT.OBJECT, _DT.ARRAY}


def _int_param(dtype: exp.DataType, index: int) -> int | None:
    """The index-th numeric type parameter (``NUMBER(10,2)`` -> 10, 2), or None when absent."""
    params = dtype.expressions
    if index >= len(params):
        return None
    node = params[index]
    inner = node.this if isinstance(node, exp.DataTypeParam) else node
    try:
        return int(inner.name if isinstance(inner, exp.Expr) else str(inner))
    except (TypeError, ValueError):
        raise CompilationError(f"invalid type parameter in {dtype.sql('snowflake')}") from None


def parse_column_type(dtype: exp.DataType) -> tuple[str, int | None, int | None]:
    """Map a type as sqlglot's Snowflake dialect parsed it onto (canonical type, precision, scale).

    Precision is the NUMBER precision or the VARCHAR length (None: unlimited); scale is the NUMBER
    scale. Raises CompilationError for types Floe does not store (BINARY, TIME, GEOGRAPHY...).
    """
    kind = dtype.this
    if kind == _DT.DECIMAL:
        precision = _int_param(dtype, 0)
        scale = _int_param(dtype, 1)
        precision = MAX_PRECISION if precision is None else precision
        scale = 0 if scale is None else scale
        if not 1 <= precision <= MAX_PRECISION:
            raise CompilationError(
                f"Unsupported data type 'NUMBER({precision},{scale})': precision out of range"
            )
        if not 0 <= scale <= precision:
            raise CompilationError(f"Unsupported data type 'NUMBER({precision},{scale})': scale out of range")
        return "NUMBER", precision, scale
    if kind in _INTEGER_TYPES:
        return "NUMBER", MAX_PRECISION, 0
    if kind in _FLOAT_TYPES:
        return "FLOAT", None, None
    if kind in _STRING_TYPES:
        length = _int_param(dtype, 0)
        if length is None and kind in _FIXED_CHAR_TYPES:
            length = 1
        if length is not None and length < 1:
            raise CompilationError(
                f"Unsupported data type '{dtype.sql('snowflake')}': length must be positive"
            )
        return "VARCHAR", length, None
    if kind == _DT.BOOLEAN:
        return "BOOLEAN", None, None
    if kind == _DT.DATE:
        return "DATE", None, None
    if kind in _NTZ_TYPES:
        return "TIMESTAMP_NTZ", None, None
    if kind in _TZ_TYPES:
        return "TIMESTAMP_TZ", None, None
    if kind in _VARIANT_TYPES:
        return "VARIANT", None, None
    raise CompilationError(f"Unsupported data type '{dtype.sql('snowflake')}'.")


def _number_is_int64(col: Column) -> bool:
    return (col.scale or 0) == 0 and (col.precision or MAX_PRECISION) <= 18


def arrow_type(col: Column) -> pa.DataType:
    """The Arrow type that stores this column in blobs and transform output."""
    t = col.type
    if t == "NUMBER":
        if _number_is_int64(col):
            return pa.int64()
        return pa.decimal128(col.precision or MAX_PRECISION, col.scale or 0)
    if t == "FLOAT":
        return pa.float64()
    if t in ("VARCHAR", "VARIANT"):
        return pa.string()
    if t == "BOOLEAN":
        return pa.bool_()
    if t == "DATE":
        return pa.date32()
    if t == "TIMESTAMP_NTZ":
        return pa.timestamp("us")
    if t == "TIMESTAMP_TZ":
        return pa.timestamp("us", tz="UTC")
    raise CompilationError(f"Unsupported data type '{t}'.")


def duckdb_type(col: Column) -> str:
    """The DuckDB type the COPY transform casts this column to.

    VARIANT is VARCHAR (JSON text) rather than DuckDB's JSON type, so the Arrow result is a plain
    string column whatever DuckDB's JSON extension does with Arrow metadata.
    """
    t = col.type
    if t == "NUMBER":
        if _number_is_int64(col):
            return "BIGINT"
        return f"DECIMAL({col.precision or MAX_PRECISION},{col.scale or 0})"
    if t == "FLOAT":
        return "DOUBLE"
    if t in ("VARCHAR", "VARIANT"):
        return "VARCHAR"
    if t == "BOOLEAN":
        return "BOOLEAN"
    if t == "DATE":
        return "DATE"
    if t == "TIMESTAMP_NTZ":
        return "TIMESTAMP"
    if t == "TIMESTAMP_TZ":
        return "TIMESTAMPTZ"
    raise CompilationError(f"Unsupported data type '{t}'.")


def arrow_schema(table: Table) -> pa.Schema:
    """The Arrow schema of a table's blobs: its columns in order, NOT NULL as non-nullable fields."""
    return pa.schema([pa.field(c.name, arrow_type(c), nullable=c.nullable) for c in table.columns])
