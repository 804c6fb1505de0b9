"""Snowflake column types and their Arrow and DuckDB counterparts.

Floe stores eleven canonical Snowflake types (``floe.catalog.models.COLUMN_TYPES``). This module maps
every spelling Snowflake accepts in DDL onto them (``parse_column_type``) and maps the canonical types
onto the physical types used in blobs (Arrow) and in the COPY transform (DuckDB).

Physical choices:

- ``NUMBER(p,0)`` with ``p <= 18`` is ``int64``: every such value fits, and integer columns are
  by far the most common. Anything wider, or with a scale, is ``decimal128(p,s)``.
- ``BINARY`` is Arrow ``binary`` (DuckDB ``BLOB``); ``TIME`` is ``time64('us')``.
- Times and timestamps keep microseconds (Snowflake keeps up to nanoseconds: digits past the sixth
  are dropped). A column declared with fewer fractional digits, ``TIME(3)``, keeps that many.
- ``TIMESTAMP_LTZ`` is a UTC instant (``timestamp('us', tz='UTC')``), shown in the session time zone,
  which is UTC in Floe.
- ``TIMESTAMP_TZ`` is the same UTC instant plus the value's offset from UTC in minutes, in a
  companion ``int16`` column of the blob (``offset_column``), so comparisons, ordering, statistics and
  pruning all work on the instant, and a query shows the value in its own offset. Blobs written before
  the companion existed lack it: their offsets read as NULL, which means UTC, the offset those blobs'
  values were converted to when they were written (``conform``).
- ``VARIANT`` is JSON text in a string column.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
from sqlglot import exp

from floe.errors import CompilationError

if TYPE_CHECKING:  # annotations only: catalog.ddl imports this module
    from floe.catalog.models import Column, Table

MAX_PRECISION = 38
"""Largest NUMBER precision (Snowflake's and Arrow decimal128's)."""
MAX_BINARY_LENGTH = 8_388_608
"""Largest BINARY length in bytes (Snowflake's, and its default)."""
MAX_FRACTION_DIGITS = 9
"""Largest fractional-seconds precision of TIME and TIMESTAMP_* (Snowflake's, and its default)."""
STORED_FRACTION_DIGITS = 6
"""Fractional-seconds digits Floe stores (microseconds)."""
OFFSET_COLUMN_PREFIX = "__floe_tz_offset:"
"""Blob columns named ``<prefix><column>`` hold a TIMESTAMP_TZ column's offsets (``offset_column``)."""

_DT = exp.DataType.Type

# Spellings that are NUMBER(38,0) in Snowflake: its integer types are all aliases of NUMBER(38,0).
_INTEGER_TYPES = {_DT.INT, _DT.BIGINT, _DT.SMALLINT, _DT.TINYINT, _DT.MEDIUMINT}
_FLOAT_TYPES = {_DT.FLOAT, _DT.DOUBLE}
_STRING_TYPES = {_DT.VARCHAR, _DT.TEXT, _DT.NVARCHAR, _DT.CHAR, _DT.NCHAR}
# CHAR(n) is VARCHAR(n) in Snowflake, but a bare CHAR / CHARACTER / NCHAR means length 1.
_FIXED_CHAR_TYPES = {_DT.CHAR, _DT.NCHAR}
_BINARY_TYPES = {_DT.BINARY, _DT.VARBINARY}
# TIMESTAMP alone is TIMESTAMP_TYPE_MAPPING's default, TIMESTAMP_NTZ.
_TIMESTAMP_TYPES = {
    _DT.TIMESTAMP: "TIMESTAMP_NTZ",
    _DT.DATETIME: "TIMESTAMP_NTZ",
    _DT.TIMESTAMPNTZ: "TIMESTAMP_NTZ",
    _DT.TIMESTAMPLTZ: "TIMESTAMP_LTZ",
    _DT.TIMESTAMPTZ: "TIMESTAMP_TZ",
}
_VARIANT_TYPES = {_DT.VARIANT, _DT.OBJECT, _DT.ARRAY}
FRACTIONAL_TYPES = frozenset({"TIME", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "TIMESTAMP_TZ"})
"""Types whose precision is their fractional-seconds digits."""
INSTANT_TYPES = frozenset({"TIMESTAMP_LTZ", "TIMESTAMP_TZ"})
"""Types stored as UTC instants."""


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


def _number(dtype: exp.DataType) -> tuple[str, int | None, int | None]:
    precision = _int_param(dtype, 0)
    scale = _int_param(dtype, 1)
    precision = MAX_PRECISION if precision is None else precision
    scale = 0 if scale is None else scale
    if not 1 <= precision <= MAX_PRECISION:
        raise CompilationError(f"Unsupported data type 'NUMBER({precision},{scale})': precision out of range")
    if not 0 <= scale <= precision:
        raise CompilationError(f"Unsupported data type 'NUMBER({precision},{scale})': scale out of range")
    return "NUMBER", precision, scale


def _length(dtype: exp.DataType, default: int | None, most: int | None) -> int | None:
    """VARCHAR(n) / BINARY(n): n, checked; ``default`` when absent."""
    length = _int_param(dtype, 0)
    if length is None:
        return default
    if length < 1 or (most is not None and length > most):
        bound = f"between 1 and {most}" if most is not None else "positive"
        raise CompilationError(f"Unsupported data type '{dtype.sql('snowflake')}': length must be {bound}")
    return length


def _fraction(dtype: exp.DataType) -> int | None:
    """TIME(p) / TIMESTAMP_*(p): p (0 to 9), or None for the default (9)."""
    digits = _int_param(dtype, 0)
    if digits is not None and not 0 <= digits <= MAX_FRACTION_DIGITS:
        raise CompilationError(
            f"Unsupported data type '{dtype.sql('snowflake')}': the precision of fractional seconds "
            f"must be between 0 and {MAX_FRACTION_DIGITS}"
        )
    return digits


def parse_column_type(dtype: exp.DataType) -> tuple[str, int | None, int | None]:
    """Map a type as sqlglot's Snowflake dialect parsed it onto (canonical type, precision, scale).

    Precision is the NUMBER precision, the VARCHAR length in characters or the BINARY length in
    bytes (None: the most), or the fractional-seconds digits of TIME and TIMESTAMP_* (None: 9);
    scale is the NUMBER scale. Raises CompilationError for types Floe does not store (GEOGRAPHY...).
    """
    kind = dtype.this
    if kind == _DT.DECIMAL:
        return _number(dtype)
    if kind in _INTEGER_TYPES:
        return "NUMBER", MAX_PRECISION, 0
    if kind in _FLOAT_TYPES:
        return "FLOAT", None, None
    if kind in _STRING_TYPES:
        return "VARCHAR", _length(dtype, 1 if kind in _FIXED_CHAR_TYPES else None, None), None
    if kind in _BINARY_TYPES:
        return "BINARY", _length(dtype, None, MAX_BINARY_LENGTH), None
    if kind == _DT.BOOLEAN:
        return "BOOLEAN", None, None
    if kind == _DT.DATE:
        return "DATE", None, None
    if kind == _DT.TIME:
        return "TIME", _fraction(dtype), None
    if kind in _TIMESTAMP_TYPES:
        return _TIMESTAMP_TYPES[kind], _fraction(dtype), None
    if kind in _VARIANT_TYPES:
        return "VARIANT", None, None
    raise CompilationError(f"Unsupported data type '{dtype.sql('snowflake')}'.")


def _number_is_int64(col: Column) -> bool:
    return (col.scale or 0) == 0 and (col.precision or MAX_PRECISION) <= 18


def truncated_fraction(col: Column) -> int | None:
    """The fractional-seconds digits a TIME / TIMESTAMP_* column keeps when that is fewer than Floe
    stores (``TIME(3)`` -> 3), else None (nothing to cut)."""
    if col.type in FRACTIONAL_TYPES and col.precision is not None and col.precision < STORED_FRACTION_DIGITS:
        return col.precision
    return None


_ARROW: dict[str, pa.DataType] = {
    "FLOAT": pa.float64(),
    "VARCHAR": pa.string(),
    "VARIANT": pa.string(),
    "BINARY": pa.binary(),
    "BOOLEAN": pa.bool_(),
    "DATE": pa.date32(),
    "TIME": pa.time64("us"),
    "TIMESTAMP_NTZ": pa.timestamp("us"),
    "TIMESTAMP_LTZ": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP_TZ": pa.timestamp("us", tz="UTC"),
}

_DUCKDB: dict[str, str] = {
    "FLOAT": "DOUBLE",
    # VARIANT is VARCHAR (JSON text) rather than DuckDB's JSON type, so the Arrow result is a plain
    # string column whatever DuckDB's JSON extension does with Arrow metadata.
    "VARCHAR": "VARCHAR",
    "VARIANT": "VARCHAR",
    "BINARY": "BLOB",
    "BOOLEAN": "BOOLEAN",
    "DATE": "DATE",
    "TIME": "TIME",
    "TIMESTAMP_NTZ": "TIMESTAMP",
    "TIMESTAMP_LTZ": "TIMESTAMPTZ",
    "TIMESTAMP_TZ": "TIMESTAMPTZ",
}


def arrow_type(col: Column) -> pa.DataType:
    """The Arrow type that stores this column's values in blobs and transform output (a
    TIMESTAMP_TZ's instant: its offset is in ``offset_column``)."""
    t = col.type
    if t == "NUMBER":
        if _number_is_int64(col):
            return pa.int64()
        return pa.decimal128(col.precision or MAX_PRECISION, col.scale or 0)
    if t in _ARROW:
        return _ARROW[t]
    raise CompilationError(f"Unsupported data type '{t}'.")


def duckdb_type(col: Column) -> str:
    """The DuckDB type the COPY transform casts this column to (and queries see it as)."""
    t = col.type
    if t == "NUMBER":
        if _number_is_int64(col):
            return "BIGINT"
        return f"DECIMAL({col.precision or MAX_PRECISION},{col.scale or 0})"
    if t in _DUCKDB:
        return _DUCKDB[t]
    raise CompilationError(f"Unsupported data type '{t}'.")


def offset_column(name: str) -> str:
    """The blob column holding the offsets (minutes east of UTC, ``int16``) of TIMESTAMP_TZ column
    ``name``."""
    return OFFSET_COLUMN_PREFIX + name


OFFSET_TYPE = pa.int16()
"""Arrow type of an offset column."""


def arrow_schema(table: Table, *, offsets: bool = True) -> pa.Schema:
    """The Arrow schema of a table's blobs: its columns in order, NOT NULL as non-nullable fields,
    then (``offsets``) one offset column per TIMESTAMP_TZ column, in the same order.

    Without ``offsets``: the table's columns only, as readers outside Floe's query engine see them
    (a TIMESTAMP_TZ as its instant)."""
    fields = [pa.field(c.name, arrow_type(c), nullable=c.nullable) for c in table.columns]
    if offsets:
        names = {c.name for c in table.columns}
        for c in table.columns:
            if c.type == "TIMESTAMP_TZ":
                name = offset_column(c.name)
                if name in names:
                    raise CompilationError(
                        f"column name '{name}' is reserved: Floe stores the offsets of TIMESTAMP_TZ column "
                        f"{c.name} under it; rename the column"
                    )
                fields.append(pa.field(name, OFFSET_TYPE))
    return pa.schema(fields)


_Data = TypeVar("_Data", pa.Table, pa.RecordBatch)


def conform(data: _Data, schema: pa.Schema) -> _Data:
    """``data`` (a blob's columns, of any age) as ``schema``: its columns in the schema's order and
    types, columns the schema lacks dropped. An offset column the blob lacks (it was written before
    offsets were kept) is all NULL: UTC, which is what its timestamps were converted to."""
    arrays: list[Any] = []
    names = data.schema.names
    for f in schema:
        if f.name in names:
            arrays.append(data.column(f.name).cast(f.type))
        elif f.name.startswith(OFFSET_COLUMN_PREFIX):
            arrays.append(pa.nulls(data.num_rows, f.type))
        else:
            raise KeyError(f"blob has no column {f.name}")
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    return pa.Table.from_arrays(arrays, schema=schema)


def with_offset(value: dt.datetime, minutes: int | None) -> dt.datetime:
    """A TIMESTAMP_TZ's instant shown in its own offset (None: UTC)."""
    try:
        return value.astimezone(dt.timezone(dt.timedelta(minutes=minutes or 0)))
    except (OverflowError, ValueError):  # the wall clock would leave datetime's years 1..9999
        return value
