"""The COPY transform: raw records of one file -> typed rows of the target table, plus its load result.

``compile_copy`` turns a pipe's COPY (plain, or with a SELECT list in Snowflake SQL) into a
``CompiledCopy``: for each target column, a DuckDB expression over the raw table. sqlglot parses each
SELECT item (Snowflake dialect) and generates DuckDB SQL, after Floe rewrites the parts DuckDB has no
equivalent for: ``$n`` (raw column ``c<n>``; for JSON the document; for Parquet ``$1:col`` is the file
column ``col``, matched case-insensitively), ``$1:a.b`` paths (text extraction unless the value goes
into a VARIANT), METADATA$ columns, and conversions (``::T``, CAST, TO_DATE, TO_NUMBER...) which get
Snowflake's input rules (AUTO date/time formats, its boolean words, rounding to the scale).

``apply_copy`` runs one DuckDB query per file over the Arrow table, in three layers:

1. ``p = TRY(expression)``: the value before the final conversion to the column type (no TRY
   when the expression is a plain input: a raw column, a path, a METADATA$ column);
2. ``v = conversion(p)``: NULL instead of an error when the value does not convert; for rows where
   ``p`` is NULL, ``TRY(expression IS NULL) IS NULL`` tells an evaluation error (the whole TRY is
   NULL) from a legitimate NULL (NULLIF, IFF, a NULL input: TRUE);
3. a status per column and row, read back as a small integer column:
   1 = conversion error (``p`` not NULL, ``v`` NULL), 3 = the expression raised, 4 = NULL in a
   NOT NULL column.

Conversions first use DuckDB's own casts (cheap to plan and to run); only the rows they reject
get the complete Snowflake rule (AUTO date/time formats, 'on'/'off', integer timestamps) in a
second query on just those rows. The first error's message costs one more one-row query. A clean
file is one query.

ON_ERROR then decides the file's fate (see ``FileCopy.result``). Error positions follow Snowflake's
layout: line = physical line where the record starts, character = 1-based position of the field in
that line (CSV; 1 for JSON and Parquet), column = ``"<TABLE>"["<COLUMN>":<ordinal>]``.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.errors import SqlglotError
from sqlglot.generators.duckdb import DuckDBGenerator

from floe import sandbox
from floe.catalog.models import Column, CopySpec, FileFormat, Table
from floe.errors import CompilationError, FileLoadError
from floe.records import LoadOutcome
from floe.types import arrow_schema, duckdb_type, parse_column_type
from pipeline.formats import (
    CODE_END_OF_RECORD,
    CODE_EXTRA_FIELD,
    FileParseError,
    RawFile,
    RowError,
    check_csv_options,
    field_spans,
    read_csv,
)


@dataclass(frozen=True)
class _Plan:
    """How one target column gets its value."""

    column: Column
    """Target column."""
    ordinal: int
    """1-based position in the table."""
    display: str
    """``"<TABLE>"["<COLUMN>":<ordinal>]``."""
    pre: str | None
    """DuckDB SQL of the value before the final conversion; None when the column is not loaded."""
    bare: bool = True
    """pre is a plain input (raw column, JSON path, metadata): NULL in, NULL out, never an error."""
    volatile: bool = False
    """pre calls RANDOM() or the like, which DuckDB's TRY() refuses."""
    fields: tuple[int, ...] = ()
    """CSV fields ($n) pre reads, in order; the first locates errors within the line."""
    json_text: bool = False
    """pre is JSON text (a JSON document or a JSON path value)."""
    lenient: bool = False
    """The expression is a top-level TRY_CAST / TRY_TO_*: a failed conversion is NULL, not an error."""


@dataclass(frozen=True)
class _Query:
    """The per-file SQL for one shape of input table."""

    sql: str
    """The whole query; reads the view INPUT_VIEW."""
    pre_try: tuple[str | None, ...]
    """Per plan, layer-1 SQL (TRY-wrapped unless bare/volatile)."""
    status: tuple[int, ...]
    """Plans that have a status column ``e<k>``."""
    slow: tuple[str | None, ...] = ()
    """Per plan, the full conversion of column ``p`` for rows the main query could not convert."""


@dataclass(frozen=True)
class CompiledCopy:
    """A pipe's COPY, compiled for DuckDB. Plain data: cheap to pickle and to rebuild."""

    table_name: str
    """Short upper-case table name, for error column names."""
    format: str
    """CSV, JSON or PARQUET."""
    file_format: FileFormat
    """The pipe's effective file format."""
    on_error: str
    """ON_ERROR rule."""
    on_error_limit: float
    """N of SKIP_FILE_N / 'SKIP_FILE_N%'."""
    schema: pa.Schema
    """Output schema, ``floe.types.arrow_schema(table)``."""
    plans: tuple[_Plan, ...]
    """Loaded columns in SELECT-list order (that order decides a row's first error), then the rest."""
    output: tuple[int, ...]
    """For each table column in table order, the index of its plan."""
    csv_width: int | None
    """Plain CSV COPY: fields per record (the number of target columns)."""
    max_field: int
    """CSV: highest $n read (the raw table is padded with NULL columns up to it)."""
    parquet_columns: tuple[str, ...]
    """Parquet: lower-cased file columns read."""
    parquet_row: bool
    """Parquet: some expression reads the whole row ($1)."""
    metadata: bool = False
    """Some expression reads METADATA$FILENAME or METADATA$START_SCAN_TIME (query parameters)."""
    queries: dict[str, _Query] = field(default_factory=dict, compare=False, repr=False)
    """Per-process cache of per-file SQL, keyed by input schema."""


# ------------------------------------------------------------------------------------------------
# Error texts and codes

CODE_NUMERIC = "100038"
CODE_OUT_OF_RANGE = "100039"
CODE_DATE = "100040"
CODE_TIMESTAMP = "100035"
CODE_BOOLEAN = "100037"
CODE_LENGTH = "100074"
CODE_NOT_NULL = "100088"
CODE_JSON = "100069"
CODE_DIVISION = "100051"
CODE_OTHER = "100000"
"""Floe's code for expression errors it cannot classify (Snowflake has no single generic code)."""

NOT_NULL_MESSAGE = (
    "NULL result in a non-nullable column. Use quotes if an empty field should be interpreted as an "
    "empty string instead of a null"
)

# ------------------------------------------------------------------------------------------------
# SQL building blocks

INPUT_VIEW = "__floe_input"
ROW_NUMBER_COLUMN = "__floe_rn"
# Columns every per-file query's source adds to INPUT_VIEW (see ``_source``): the file's name and
# scan time come in as prepared-statement parameters, never as text in the SQL, and the Parquet
# whole row is built from the file's own column names, quoted by sqlglot.
FILENAME_COLUMN = "__floe_filename"
SCAN_TIME_COLUMN = "__floe_scan_time"
PARQUET_ROW_COLUMN = "__floe_row"
_FILENAME_PARAM = "floe_filename"
_SCAN_TIME_PARAM = "floe_scan_time"

# AUTO formats from Snowflake's date/time input rules that DuckDB's plain casts do not accept.
_NTZ_FORMATS = (
    "%m/%d/%Y %H:%M:%S",
    "%m/%d/%Y %H:%M:%S.%f",
    "%m/%d/%Y %H:%M",
    "%m/%d/%Y",
    "%d-%b-%Y",
    "%a, %d %b %Y %H:%M:%S",
    "%a, %d %b %Y %H:%M:%S.%f",
    "%a, %d %b %Y %I:%M:%S %p",
    "%a, %d %b %Y %I:%M:%S.%f %p",
    "%a, %d %b %Y %I:%M %p",
    "%a %b %d %H:%M:%S %Y",
    "%Y-%m-%d %H",
    "%Y-%m-%dT%H",
)
_TZ_FORMATS = (
    "%a, %d %b %Y %H:%M:%S %z",
    "%a, %d %b %Y %H:%M:%S.%f %z",
    "%a, %d %b %Y %I:%M:%S %p %z",
    "%a, %d %b %Y %I:%M:%S.%f %p %z",
    "%a %b %d %H:%M:%S %z %Y",
    "%m/%d/%Y %H:%M:%S %z",
)
_TRUE_WORDS = ("true", "t", "yes", "y", "on", "1")
_FALSE_WORDS = ("false", "f", "no", "n", "off", "0")
# Snowflake's integer timestamps: seconds, ms, us or ns by magnitude.
_EPOCH_SECONDS_LIMIT = 31536000000


# Cached: the same few constants (formats, boolean words, column names) recur in every query built.
@functools.lru_cache(maxsize=4096)
def _lit(value: str) -> str:
    """A DuckDB string literal, escaped by sqlglot."""
    return exp.Literal.string(value).sql("duckdb")


def _list_lit(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(_lit(v) for v in values) + "]"


@functools.lru_cache(maxsize=4096)
def _ident(name: str) -> str:
    """A quoted DuckDB identifier, escaped by sqlglot: any name is data, never SQL."""
    return exp.to_identifier(name, quoted=True).sql("duckdb")


class FloeFragment(exp.Expression):
    """A SQL expression Floe built (a raw column, a conversion...), standing in a user's syntax tree.

    ``this`` is complete DuckDB SQL that the generator emits as it is, in parentheses. It is never
    searched for in generated text, so nothing the user wrote (a string literal, a quoted name) can
    be turned into SQL by it.
    """

    arg_types = {"this": True, "leaf": False, "text": False, "const": False}


def _fragment_sql(_generator: Any, node: FloeFragment) -> str:
    return f"({node.this})"


class FloeDuckDB(DuckDB):
    """DuckDB's dialect, plus Floe's fragments."""

    class Generator(DuckDBGenerator):
        """DuckDB's generator; a FloeFragment becomes its own SQL."""

        TRANSFORMS = {**DuckDBGenerator.TRANSFORMS, FloeFragment: _fragment_sql}


_DIALECT = FloeDuckDB()


def _strftime(snowflake_format: str, kind: str) -> str:
    """A Snowflake DATE_FORMAT / TIMESTAMP_FORMAT as a strptime pattern (via sqlglot's mapping)."""
    func = "TO_DATE" if kind == "DATE" else "TO_TIMESTAMP"
    try:
        fmt_sql = exp.Literal.string(snowflake_format).sql("snowflake")
        node = sqlglot.parse_one(f"{func}(x, {fmt_sql})", read="snowflake")
    except SqlglotError as exc:
        raise CompilationError(f"invalid format '{snowflake_format}': {exc}") from exc
    fmt = node.args.get("format")
    if not isinstance(fmt, exp.Literal):
        # sqlglot drops the format when it is its own default ISO one
        return "%Y-%m-%d" if kind == "DATE" else "%Y-%m-%d %H:%M:%S"
    return str(fmt.this)


def _epoch_sql(x: str) -> str:
    """Integer strings as Snowflake reads them into timestamps (seconds, ms, us or ns by size)."""
    n = f"TRY_CAST({x} AS HUGEINT)"
    limit = _EPOCH_SECONDS_LIMIT
    micros = (
        f"CASE WHEN abs({n}) < {limit} THEN {n} * 1000000 WHEN abs({n}) < {limit * 1000} THEN {n} * 1000 "
        f"WHEN abs({n}) < {limit * 1000000} THEN {n} ELSE {n} // 1000 END"
    )
    return (
        f"CASE WHEN regexp_full_match({x}, '\\s*[+-]?[0-9]{{1,20}}\\s*') "
        f"THEN TRY(make_timestamp(CAST({micros} AS BIGINT))) END"
    )


def _text_ntz(x: str, fmt: FileFormat | None) -> str:
    """VARCHAR -> TIMESTAMP, NULL when not a timestamp. Offsets are ignored (wall clock), as in NTZ."""
    if fmt is not None and fmt.timestamp_format.upper() != "AUTO":
        pattern = _strftime(fmt.timestamp_format, "TIMESTAMP")
        return f"CAST(TRY_STRPTIME({x}, {_lit(pattern)}) AS TIMESTAMP)"
    no_offset = f"regexp_replace({x}, '\\s+[+-]\\d{{2}}:?\\d{{2}}(\\s+\\d{{4}})?$', '\\1')"
    return (
        f"COALESCE(TRY_CAST({x} AS TIMESTAMP), TRY_STRPTIME({no_offset}, {_list_lit(_NTZ_FORMATS)}), "
        f"{_epoch_sql(x)})"
    )


def _text_tz(x: str, fmt: FileFormat | None) -> str:
    """VARCHAR -> TIMESTAMPTZ, NULL when not a timestamp; no offset means UTC (the session zone)."""
    if fmt is not None and fmt.timestamp_format.upper() != "AUTO":
        pattern = _strftime(fmt.timestamp_format, "TIMESTAMP")
        return f"CAST(TRY_STRPTIME({x}, {_lit(pattern)}) AS TIMESTAMPTZ)"
    joined = f"regexp_replace({x}, '\\s+([+-]\\d{{2}}(:?\\d{{2}})?|Z)$', '\\1')"
    return (
        f"COALESCE(TRY_CAST({x} AS TIMESTAMPTZ), TRY_CAST({joined} AS TIMESTAMPTZ), "
        f"TRY_STRPTIME({x}, {_list_lit(_TZ_FORMATS)}), CAST({_text_ntz(x, None)} AS TIMESTAMPTZ))"
    )


def _text_date(x: str, fmt: FileFormat | None) -> str:
    """VARCHAR -> DATE, NULL when not a date (a timestamp string gives its date)."""
    if fmt is not None and fmt.date_format.upper() != "AUTO":
        pattern = _strftime(fmt.date_format, "DATE")
        return f"CAST(TRY_STRPTIME({x}, {_lit(pattern)}) AS DATE)"
    return f"COALESCE(TRY_CAST({x} AS DATE), CAST({_text_ntz(x, None)} AS DATE))"


def _text_bool(x: str) -> str:
    """VARCHAR -> BOOLEAN with Snowflake's words (case-insensitive, no trimming)."""
    # A simple CASE, not IN lists: DuckDB plans IN lists of constants as joins.
    whens = [f"WHEN {_lit(w)} THEN TRUE" for w in _TRUE_WORDS] + [
        f"WHEN {_lit(w)} THEN FALSE" for w in _FALSE_WORDS
    ]
    return f"CASE lower({x}) {' '.join(whens)} END"


def _decimal(precision: int | None, scale: int | None) -> str:
    return f"DECIMAL({min(precision or 38, 38)},{scale or 0})"


_NUMERIC_TYPES = re.compile(r"^(U?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT)|FLOAT|DOUBLE|DECIMAL.*)$")


def _type_kind(duck_type: str) -> str:
    """Group a DuckDB type name: text, json, null, bool, number, date, timestamp or other."""
    t = duck_type.upper()
    if t == "VARCHAR":
        return "text"
    if t == "JSON":
        return "json"
    if t == '"NULL"':
        return "null"
    if t == "BOOLEAN":
        return "bool"
    if _NUMERIC_TYPES.match(t):
        return "number"
    if t == "DATE":
        return "date"
    if t.startswith("TIMESTAMP"):
        return "timestamp"
    return "other"


@dataclass(frozen=True)
class _Conversion:
    """SQL turning a value into a column's type, NULL (never an error) when it does not convert."""

    fast: str
    """Used for every row: DuckDB's own cast where it agrees with Snowflake."""
    can_fail: bool
    """False when a non-NULL input always converts."""
    slow: str | None = None
    """The complete rule (AUTO formats, Snowflake's boolean words...), run only on the rows ``fast``
    rejected: keeping it out of the main query keeps that query cheap to plan and to run."""


def _finite(sql: str) -> str:
    # DuckDB casts 'infinity' / '-infinity' to infinite dates and timestamps; Snowflake has none.
    return f"CASE WHEN isfinite({sql}) THEN {sql} END"


def _final_conversion(x: str, duck_type: str, plan: _Plan, fmt: FileFormat) -> _Conversion:
    """How x (of DuckDB type duck_type) becomes the plan's column type."""
    col = plan.column
    kind = _type_kind(duck_type)
    target = duckdb_type(col)
    if kind == "null":
        return _Conversion(f"CAST(NULL AS {target})", False)
    if kind == "json" and col.type != "VARIANT":
        x, kind = f"json_extract_string({x}, '$')", "text"
    t = col.type
    if t == "NUMBER":
        dec = _decimal(col.precision, col.scale)
        if kind == "bool":
            return _Conversion(f"CAST(CASE WHEN {x} THEN 1 ELSE 0 END AS {dec})", False)
        return _Conversion(f"TRY_CAST({x} AS {dec})", True)
    if t == "FLOAT":
        if kind == "bool":
            return _Conversion(f"CASE WHEN {x} THEN 1.0 ELSE 0.0 END", False)
        return _Conversion(f"TRY_CAST({x} AS DOUBLE)", kind != "number")
    if t == "VARCHAR":
        text = x if kind == "text" else f"CAST({x} AS VARCHAR)"
        if col.precision:
            return _Conversion(f"CASE WHEN length({text}) <= {col.precision} THEN {text} END", True)
        return _Conversion(text, False)
    if t == "BOOLEAN":
        if kind == "bool":
            return _Conversion(x, False)
        if kind == "number":
            return _Conversion(f"({x} <> 0)", False)
        if kind == "text":
            # DuckDB's words are a subset of Snowflake's; 'on' / 'off' take the slow path.
            return _Conversion(f"TRY_CAST({x} AS BOOLEAN)", True, _text_bool(x))
        return _Conversion(f"TRY_CAST({x} AS BOOLEAN)", True)
    if t == "DATE":
        if kind == "text":
            if fmt.date_format.upper() != "AUTO":
                return _Conversion(_text_date(x, fmt), True)
            return _Conversion(_finite(f"TRY_CAST({x} AS DATE)"), True, _text_date(x, fmt))
        if kind in ("date", "timestamp"):
            return _Conversion(f"CAST({x} AS DATE)", False)
        return _Conversion(f"TRY_CAST({x} AS DATE)", True)
    if t in ("TIMESTAMP_NTZ", "TIMESTAMP_TZ"):
        tz = t == "TIMESTAMP_TZ"
        if kind == "text":
            full = _text_tz(x, fmt) if tz else _text_ntz(x, fmt)
            if fmt.timestamp_format.upper() != "AUTO":
                return _Conversion(full, True)
            return _Conversion(_finite(f"TRY_CAST({x} AS {target})"), True, full)
        if kind in ("date", "timestamp"):
            return _Conversion(f"CAST({x} AS {target})", False)
        if kind == "number":
            return _Conversion(f"CAST({_epoch_sql(f'CAST({x} AS VARCHAR)')} AS {target})", True)
        return _Conversion(f"TRY_CAST({x} AS {target})", True)
    if t == "VARIANT":
        if kind == "json":
            return _Conversion(f"CAST({x} AS VARCHAR)", False)
        if kind == "text" and plan.json_text:
            return _Conversion(f"CAST(TRY(json({x})) AS VARCHAR)", True)
        return _Conversion(f"CAST(to_json({x}) AS VARCHAR)", False)
    raise CompilationError(f"Unsupported data type '{t}'.")


def _nested_conversion(x: str, ctype: str, precision: int | None, scale: int | None, safe: bool) -> str:
    """SQL converting x inside an expression: Snowflake's input rules; raises on bad input unless safe.

    x's type is unknown here (it is inside an expression), so text rules apply to CAST(x AS VARCHAR)
    after DuckDB's own cast had its chance.
    """
    cast = "TRY_CAST" if safe else "CAST"
    text = f"CAST({x} AS VARCHAR)"
    if ctype == "NUMBER":
        return f"{cast}({x} AS {_decimal(precision, scale)})"
    if ctype == "FLOAT":
        return f"{cast}({x} AS DOUBLE)"
    if ctype == "VARCHAR":
        return f"CAST({x} AS VARCHAR)"
    if ctype == "BOOLEAN":
        return f"COALESCE({_text_bool(text)}, {cast}({x} AS BOOLEAN))"
    if ctype == "DATE":
        return f"COALESCE(TRY_CAST({x} AS DATE), {_text_date(text, None)}, {cast}({x} AS DATE))"
    if ctype == "TIMESTAMP_NTZ":
        return f"COALESCE(TRY_CAST({x} AS TIMESTAMP), {_text_ntz(text, None)}, {cast}({x} AS TIMESTAMP))"
    if ctype == "TIMESTAMP_TZ":
        return f"COALESCE(TRY_CAST({x} AS TIMESTAMPTZ), {_text_tz(text, None)}, {cast}({x} AS TIMESTAMPTZ))"
    if ctype == "VARIANT":
        return f"to_json({x})"
    raise CompilationError(f"Unsupported data type '{ctype}'.")


# ------------------------------------------------------------------------------------------------
# Expression compiler

_METADATA = {
    "METADATA$FILENAME": _ident(FILENAME_COLUMN),
    "METADATA$FILE_ROW_NUMBER": _ident(ROW_NUMBER_COLUMN),
    "METADATA$START_SCAN_TIME": _ident(SCAN_TIME_COLUMN),
}
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg)
_COMPARISON = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_VOLATILE_NODES: tuple[type[exp.Expr], ...] = (exp.Rand, exp.Uuid)
_VOLATILE_NAMES = {"RANDOM", "UUID_STRING", "RANDSTR", "SEQ1", "SEQ2", "SEQ4", "SEQ8"}
_FORBIDDEN: tuple[type[exp.Expr], ...] = (exp.Subquery, exp.Select, exp.AggFunc, exp.Window, exp.Star)
# Functions whose argument is a JSON value (a path below them extracts JSON, not text).
_JSON_CONSUMERS: tuple[type[exp.Expr], ...] = (
    exp.ArraySize,
    exp.JSONExtract,
    exp.GetExtract,
    exp.Bracket,
)
_JSON_CONSUMER_NAMES = {
    "IS_ARRAY",
    "IS_OBJECT",
    "IS_NULL_VALUE",
    "TYPEOF",
    "OBJECT_KEYS",
    "TO_ARRAY",
    "TO_OBJECT",
}
_ANON_CONVERSIONS: dict[str, tuple[str, bool]] = {
    "TO_DATE": ("DATE", False),
    "DATE": ("DATE", False),
    "TRY_TO_DATE": ("DATE", True),
    "TO_TIMESTAMP": ("TIMESTAMP_NTZ", False),
    "TO_TIMESTAMP_NTZ": ("TIMESTAMP_NTZ", False),
    "TRY_TO_TIMESTAMP": ("TIMESTAMP_NTZ", True),
    "TRY_TO_TIMESTAMP_NTZ": ("TIMESTAMP_NTZ", True),
    "TO_TIMESTAMP_TZ": ("TIMESTAMP_TZ", False),
    "TO_TIMESTAMP_LTZ": ("TIMESTAMP_TZ", False),
    "TRY_TO_TIMESTAMP_TZ": ("TIMESTAMP_TZ", True),
    "TRY_TO_TIMESTAMP_LTZ": ("TIMESTAMP_TZ", True),
    "TO_VARIANT": ("VARIANT", False),
    "TO_BOOLEAN": ("BOOLEAN", False),
    "TRY_TO_BOOLEAN": ("BOOLEAN", True),
    "TO_DOUBLE": ("FLOAT", False),
    "TRY_TO_DOUBLE": ("FLOAT", True),
}

_ConversionCall = tuple[exp.Expr, tuple[str, int | None, int | None], bool]


def _int_arg(node: exp.Expr, name: str, default: int) -> int:
    value = node.args.get(name)
    if value is None:
        return default
    if isinstance(value, exp.Literal) and not value.is_string:
        return int(value.this)
    raise CompilationError(f"{name} of {node.sql('snowflake')} must be an integer constant")


def _conversion_of(node: exp.Expr) -> _ConversionCall | None:
    """If node converts one value to a Floe type: (argument, (type, precision, scale), is TRY_ form)."""
    if isinstance(node, exp.Cast):  # also TryCast
        to = node.args.get("to")
        if not isinstance(to, exp.DataType):
            return None
        safe = isinstance(node, exp.TryCast) or bool(node.args.get("safe"))
        return node.this, parse_column_type(to), safe
    if isinstance(node, exp.ToNumber) and node.args.get("format") is None:
        precision = _int_arg(node, "precision", 38)
        scale = _int_arg(node, "scale", 0)
        return node.this, ("NUMBER", precision, scale), bool(node.args.get("safe"))
    if isinstance(node, exp.ToDouble) and node.args.get("format") is None:
        return node.this, ("FLOAT", None, None), bool(node.args.get("safe"))
    if isinstance(node, exp.ToBoolean):
        return node.this, ("BOOLEAN", None, None), bool(node.args.get("safe"))
    if isinstance(node, exp.ToChar) and node.args.get("format") is None:
        return node.this, ("VARCHAR", None, None), False
    if isinstance(node, exp.Anonymous):
        name = str(node.name).upper()
        if name in _ANON_CONVERSIONS and len(node.expressions) == 1:
            ctype, safe = _ANON_CONVERSIONS[name]
            return node.expressions[0], (ctype, None, None), safe
    return None


def _same_type(conv: tuple[str, int | None, int | None], col: Column) -> bool:
    """Whether a conversion to conv is exactly the column's own type (so the final conversion does it)."""
    ctype, precision, scale = conv
    if ctype != col.type:
        return False
    if ctype == "NUMBER":
        return (precision or 38, scale or 0) == (col.precision or 38, col.scale or 0)
    if ctype == "VARCHAR":
        return precision is None or precision == col.precision
    return True


def _param_number(node: exp.Expr) -> int | None:
    """n of ``$n`` / ``alias.$n``, else None."""
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Parameter):
        node = node.this
    if isinstance(node, exp.Parameter):
        inner = node.this
        text = inner.name if isinstance(inner, exp.Expr) else str(inner)
        if text.isdigit():
            return int(text)
        raise CompilationError(f"invalid identifier '${text}'")
    return None


class _ExprCompiler:
    """Rewrites one Snowflake SELECT item into DuckDB SQL over the raw table, noting what it reads."""

    def __init__(self, fmt_type: str, target: Column, fmt: FileFormat) -> None:
        self.fmt_type = fmt_type
        self.target = target
        self.fmt = fmt
        self.fields: list[int] = []
        self.parquet_columns: list[str] = []
        self.parquet_row = False
        self.metadata = False
        self.volatile = False
        self.json_text = False

    # -- fragments: Floe's SQL as nodes of the tree, generated in place (never spliced into text)
    @staticmethod
    def _ph(sql: str, *, leaf: bool = False, text_leaf: bool = False, const: bool = False) -> FloeFragment:
        """A node for Floe's ``sql``; leaf: a plain input (raw column, path); text_leaf: raw text;
        const: the same value on every row (METADATA$ columns)."""
        return FloeFragment(this=sql, leaf=leaf, text=text_leaf, const=const)

    def sql(self, node: exp.Expr, as_json: bool) -> str:
        """DuckDB SQL of a sub-expression."""
        shown = node.sql("snowflake")  # before the rewrite puts fragments in it
        rewritten = self._rewrite(node, as_json)
        if isinstance(rewritten, FloeFragment):
            return str(rewritten.this)
        try:
            return rewritten.sql(dialect=_DIALECT, unsupported_level=sqlglot.ErrorLevel.RAISE)
        except SqlglotError as exc:
            raise CompilationError(f"unsupported expression {shown}: {exc}") from exc

    def compile(self, node: exp.Expr) -> tuple[str, bool, bool]:
        """(pre SQL, bare, lenient) for a whole SELECT item."""
        if isinstance(node, exp.Alias):
            node = node.this
        lenient = False
        conv = _conversion_of(node)
        if conv is not None and _same_type(conv[1], self.target):
            # The final conversion to the column type does this cast, with the file's formats.
            node, lenient = conv[0], conv[2]
        as_json = self.target.type == "VARIANT"
        rewritten = self._rewrite(node, as_json)
        if isinstance(rewritten, FloeFragment):
            bare = bool(rewritten.args.get("leaf") or rewritten.args.get("const"))
            return str(rewritten.this), bare and not self.volatile, lenient
        return rewritten.sql(dialect=_DIALECT), False, lenient

    # -- the rewrite proper
    def _rewrite(self, node: exp.Expr, as_json: bool) -> exp.Expr:
        if isinstance(node, _FORBIDDEN):
            raise CompilationError(f"unsupported expression in a COPY transform: {node.sql('snowflake')}")
        n = _param_number(node)
        if n is not None:
            return self._param(n, as_json)
        if (
            isinstance(node, (exp.JSONExtract, exp.JSONExtractScalar))
            and _param_number(node.this) is not None
        ):
            path = node.expression
            if isinstance(path, exp.JSONPath):
                return self._path(_param_number(node.this) or 0, list(path.expressions), as_json)
        if isinstance(node, (exp.GetExtract, exp.Bracket)) and _param_number(node.this) is not None:
            key = node.expression if isinstance(node, exp.GetExtract) else (node.expressions or [None])[0]
            if isinstance(key, exp.Literal) and len(getattr(node, "expressions", []) or [key]) == 1:
                part: exp.Expr = (
                    exp.JSONPathKey(this=key.this)
                    if key.is_string
                    else exp.JSONPathSubscript(this=int(key.this))
                )
                return self._path(_param_number(node.this) or 0, [exp.JSONPathRoot(), part], as_json)
        if isinstance(node, exp.Column):
            return self._column(node)
        conv = _conversion_of(node)
        if conv is not None:
            inner, (ctype, precision, scale), safe = conv
            inner_sql = self.sql(inner, ctype == "VARIANT")
            if ctype == "VARIANT" and self._is_json_sql(inner):
                return self._ph(inner_sql)
            return self._ph(_nested_conversion(inner_sql, ctype, precision, scale, safe))
        if isinstance(node, _VOLATILE_NODES) or (
            isinstance(node, exp.Anonymous) and str(node.name).upper() in _VOLATILE_NAMES
        ):
            self.volatile = True
        child_json = isinstance(node, _JSON_CONSUMERS) or (
            isinstance(node, exp.Anonymous) and str(node.name).upper() in _JSON_CONSUMER_NAMES
        )
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expr):
                node.set(key, self._rewrite(value, child_json))
            elif isinstance(value, list):
                node.set(key, [self._rewrite(v, child_json) if isinstance(v, exp.Expr) else v for v in value])
        self._coerce_text_operands(node)
        return node

    def _is_json_sql(self, node: exp.Expr) -> bool:
        """Whether node (before rewriting) yields JSON: a $1 path, or $1 of a JSON file."""
        if isinstance(node, (exp.JSONExtract, exp.GetExtract)):
            return True
        return self.fmt_type == "JSON" and _param_number(node) is not None

    def _coerce_text_operands(self, node: exp.Expr) -> None:
        """Snowflake reads strings as numbers in arithmetic; DuckDB will not, so cast raw text leaves."""
        if isinstance(node, _ARITHMETIC):
            keys = ["this", "expression"]
        elif isinstance(node, _COMPARISON):
            other = {"this": node.expression, "expression": node.this}
            keys = [k for k, o in other.items() if isinstance(o, exp.Literal) and not o.is_string]
        else:
            return
        for key in keys:
            child = node.args.get(key)
            if isinstance(child, FloeFragment) and child.args.get("text"):
                node.set(key, self._ph(f"CAST({child.this} AS DOUBLE)"))

    def _param(self, n: int, as_json: bool) -> exp.Expr:
        if self.fmt_type == "CSV":
            if n < 1:
                raise CompilationError(f"invalid identifier '${n}'")
            self.fields.append(n)
            col = _ident(f"c{n}")
            return self._ph(col, leaf=True, text_leaf=True)
        if n != 1:
            raise CompilationError(f"invalid identifier '${n}': {self.fmt_type} files have only $1")
        if self.fmt_type == "JSON":
            self.json_text = True
            col = _ident("c1")
            return self._ph(col, leaf=True)
        self.parquet_row = True
        return self._ph(_ident(PARQUET_ROW_COLUMN), leaf=True)

    def _path(self, n: int, parts: list[exp.Expr], as_json: bool) -> exp.Expr:
        """``$n:a.b[0]``: text extraction, or JSON when the value goes into a VARIANT or JSON function."""
        if self.fmt_type == "PARQUET":
            if n != 1:
                raise CompilationError(f"invalid identifier '${n}': PARQUET files have only $1")
            keys = [p for p in parts if not isinstance(p, exp.JSONPathRoot)]
            if not keys or not isinstance(keys[0], exp.JSONPathKey):
                raise CompilationError("a Parquet path must start with a column name, as in $1:col")
            name = str(keys[0].this).lower()
            if name not in self.parquet_columns:
                self.parquet_columns.append(name)
            base = _ident(name)
            if len(keys) == 1:
                return self._ph(base, leaf=True)
            base = f"to_json({base})"
            rest: list[exp.Expr] = [exp.JSONPathRoot(), *keys[1:]]
        else:
            if self.fmt_type == "CSV":
                self.fields.append(n)
                # A CSV field need not hold JSON: a field that does not parse has no path values.
                base = f"TRY_CAST({_ident(f'c{n}')} AS JSON)"
            elif n != 1:
                raise CompilationError(f"invalid identifier '${n}': JSON files have only $1")
            else:
                base = _ident("c1")  # documents were validated by read_raw
            rest = parts
        path = exp.JSONPath(expressions=rest)
        if as_json:
            self.json_text = True
            json_sql = exp.JSONExtract(this=self._ph(base), expression=path).sql(dialect=_DIALECT)
            return self._ph(json_sql, leaf=True)
        text_sql = exp.JSONExtractScalar(this=self._ph(base), expression=path).sql(dialect=_DIALECT)
        return self._ph(text_sql, leaf=True, text_leaf=True)

    def _column(self, node: exp.Column) -> exp.Expr:
        name = node.name.upper()
        if name in _METADATA:
            self.metadata = self.metadata or name != "METADATA$FILE_ROW_NUMBER"
            return self._ph(_METADATA[name], const=True)
        if name.startswith("METADATA$"):
            raise CompilationError(f"{name} is not supported by Floe")
        if node.table and name in ("NEXTVAL", "CURRVAL"):
            raise CompilationError("sequences are not supported in Floe COPY transforms")
        raise CompilationError(f"invalid identifier '{node.sql('snowflake')}'")


# ------------------------------------------------------------------------------------------------
# compile_copy


def _display(table_name: str, col: Column, ordinal: int) -> str:
    return f'"{table_name}"["{col.name}":{ordinal}]'


def _json_key_sql(name: str, as_json: bool) -> str:
    """Plain JSON COPY into several columns: the document's key named like the column, any case."""
    fn = "json_extract" if as_json else "json_extract_string"
    doc = _ident("c1")
    lower = name.lower()
    tries = [f"{fn}({doc}, {_lit(lower)})"]
    if name != lower:
        tries.append(f"{fn}({doc}, {_lit(name)})")
    tries.append(f"{fn}({doc}, list_filter(json_keys({doc}), lambda k: lower(k) = {_lit(lower)})[1])")
    return f"COALESCE({', '.join(tries)})"


def _resolve_targets(copy: CopySpec, table: Table) -> list[Column]:
    if not copy.columns:
        return list(table.columns)
    targets: list[Column] = []
    for name in copy.columns:
        try:
            col = next(c for c in table.columns if c.name == name)
        except StopIteration:
            try:
                col = table.column(name)
            except KeyError:
                raise CompilationError(f"invalid identifier '{name}'") from None
        if col in targets:
            raise CompilationError(f"duplicate column name '{col.name}'")
        targets.append(col)
    return targets


def compile_copy(copy: CopySpec, table: Table, fmt_type: str | None = None) -> CompiledCopy:
    """Compile a pipe's COPY for its target table. Raises CompilationError for what Floe cannot run."""
    fmt = copy.file_format
    kind = (fmt_type or fmt.type).upper()
    if kind not in ("CSV", "JSON", "PARQUET"):
        raise CompilationError(f"Unsupported file format type '{kind}'")
    if kind == "CSV":
        try:
            check_csv_options(fmt, "")
        except FileLoadError as exc:
            raise CompilationError(exc.message) from exc
    short = table.name.split(".")[-1].upper()
    ordinals = {c.name: i + 1 for i, c in enumerate(table.columns)}
    targets = _resolve_targets(copy, table)
    if copy.select is not None and len(copy.select) != len(targets):
        raise CompilationError(
            "Insert value list does not match column list "
            f"expecting {len(targets)} but got {len(copy.select)}"
        )
    plans: list[_Plan] = []
    parquet_columns: list[str] = []
    parquet_row = False
    metadata = False
    max_field = 0
    for i, col in enumerate(targets):
        display = _display(short, col, ordinals[col.name])
        if copy.select is not None:
            try:
                node = sqlglot.parse_one(copy.select[i], read="snowflake")
            except SqlglotError as exc:
                raise CompilationError(f"syntax error in '{copy.select[i]}': {exc}") from exc
            comp = _ExprCompiler(kind, col, fmt)
            pre, bare, lenient = comp.compile(node)
            plan = _Plan(
                col,
                ordinals[col.name],
                display,
                pre,
                bare=bare,
                volatile=comp.volatile,
                fields=tuple(comp.fields),
                json_text=comp.json_text,
                lenient=lenient,
            )
            parquet_columns += [c for c in comp.parquet_columns if c not in parquet_columns]
            parquet_row = parquet_row or comp.parquet_row
            metadata = metadata or comp.metadata
            max_field = max([max_field, *comp.fields])
        elif kind == "CSV":
            plan = _Plan(col, ordinals[col.name], display, _ident(f"c{i + 1}"), fields=(i + 1,))
            max_field = len(targets)
        elif kind == "JSON":
            # One VARIANT column takes the document; several columns take the keys named like them.
            is_variant = col.type == "VARIANT"
            doc = _ident("c1") if len(targets) == 1 and is_variant else _json_key_sql(col.name, is_variant)
            plan = _Plan(col, ordinals[col.name], display, doc, json_text=is_variant)
        else:
            if len(targets) == 1 and col.type == "VARIANT":
                plan = _Plan(col, ordinals[col.name], display, _ident(PARQUET_ROW_COLUMN))
                parquet_row = True
            else:
                name = col.name.lower()
                parquet_columns.append(name)
                plan = _Plan(col, ordinals[col.name], display, _ident(name))
        plans.append(plan)
    for col in table.columns:
        if col not in targets:
            plans.append(_Plan(col, ordinals[col.name], _display(short, col, ordinals[col.name]), None))
    output = tuple(next(k for k, p in enumerate(plans) if p.column.name == c.name) for c in table.columns)
    compiled = CompiledCopy(
        table_name=short,
        format=kind,
        file_format=fmt,
        on_error=copy.on_error,
        on_error_limit=copy.on_error_limit,
        schema=arrow_schema(table),
        plans=tuple(plans),
        output=output,
        csv_width=len(targets) if kind == "CSV" and copy.select is None else None,
        max_field=max_field,
        parquet_columns=tuple(parquet_columns),
        parquet_row=parquet_row,
        metadata=metadata,
    )
    if kind in ("CSV", "JSON"):
        # The raw table's shape is known now: bind the query once, so mistakes fail CREATE PIPE.
        with _COMPILE_LOCK:
            con = _compile_connection()
            try:
                _query_for(compiled, _empty_input(compiled), con)
            except duckdb.Error as exc:
                raise CompilationError(_first_line(str(exc))) from exc
    return compiled


_COMPILE_LOCK = threading.Lock()
_COMPILE_CON: list[duckdb.DuckDBPyConnection] = []


def _compile_connection() -> duckdb.DuckDBPyConnection:
    if not _COMPILE_CON:
        _COMPILE_CON.append(new_connection())
    return _COMPILE_CON[0]


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


# ------------------------------------------------------------------------------------------------
# Connections

_LOCAL = threading.local()
_CONFIGURED: weakref.WeakSet[duckdb.DuckDBPyConnection] = weakref.WeakSet()


def new_connection(memory_limit: str = "1GB") -> duckdb.DuckDBPyConnection:
    """A sandboxed DuckDB connection for apply_copy: one thread, UTC, no files, network or extensions."""
    con = sandbox.connect(threads=1, memory_limit=memory_limit)
    _CONFIGURED.add(con)
    return con


def _configure(con: duckdb.DuckDBPyConnection) -> None:
    # TIMESTAMP_TZ values without an offset, and NTZ -> TZ casts, use the session zone: it must be
    # UTC. A sandboxed connection already is, and its configuration is locked: only SET when needed.
    zone = con.sql("SELECT current_setting('TimeZone')").fetchall()[0][0]
    if zone != "UTC":
        con.execute("SET TimeZone = 'UTC'")
    _CONFIGURED.add(con)


def _connection(con: duckdb.DuckDBPyConnection | None) -> duckdb.DuckDBPyConnection:
    if con is None:
        con = getattr(_LOCAL, "con", None)
        if con is None:
            con = new_connection()
            _LOCAL.con = con
        return con
    if con not in _CONFIGURED:
        _configure(con)
    return con


# ------------------------------------------------------------------------------------------------
# Per-file query


def _empty_input(compiled: CompiledCopy) -> pa.Table:
    if compiled.format == "CSV":
        width = compiled.max_field
        cols: dict[str, pa.Array] = {f"c{i}": pa.array([], pa.string()) for i in range(1, width + 1)}
    else:
        cols = {"c1": pa.array([], pa.string())}
    cols[ROW_NUMBER_COLUMN] = pa.array([], pa.int64())
    return pa.table(cols)


def _input_table(compiled: CompiledCopy, raw: RawFile) -> tuple[pa.Table, str]:
    """The table DuckDB reads, and the SQL of the whole Parquet row (if any) over it."""
    n = raw.num_rows
    rn = pc.add(raw.row_numbers, raw.row_offset) if raw.row_offset else raw.row_numbers
    if compiled.format == "CSV":
        cols: dict[str, Any] = {}
        for i in range(1, compiled.max_field + 1):
            name = f"c{i}"
            cols[name] = (
                raw.table.column(name) if name in raw.table.column_names else pa.nulls(n, pa.string())
            )
        cols[ROW_NUMBER_COLUMN] = rn
        return pa.table(cols), ""
    if compiled.format == "JSON":
        return pa.table({"c1": raw.table.column("c1"), ROW_NUMBER_COLUMN: rn}), ""
    lowered: dict[str, int] = {}
    for i, name in enumerate(raw.table.column_names):
        lowered.setdefault(name.lower(), i)
    cols = {}
    for name in compiled.parquet_columns:
        idx = lowered.get(name)
        cols[name] = raw.table.column(idx) if idx is not None else pa.nulls(n, pa.string())
    row_sql = ""
    if compiled.parquet_row:
        # The file's column names are data: sqlglot quotes them as struct keys.
        fields: list[exp.Expr] = []
        for i, name in enumerate(raw.table.column_names):
            alias = f"__floe_pq_{i}"
            cols[alias] = raw.table.column(i)
            value = exp.column(exp.to_identifier(alias, quoted=True))
            fields.append(exp.PropertyEQ(this=exp.to_identifier(name, quoted=True), expression=value))
        row_sql = (
            exp.Anonymous(this="to_json", expressions=[exp.Struct(expressions=fields)]).sql("duckdb")
            if fields
            else "to_json(MAP {})"
        )
    cols[ROW_NUMBER_COLUMN] = rn
    return pa.table(cols), row_sql


def _source(compiled: CompiledCopy, row_sql: str) -> str:
    """What per-file queries read: INPUT_VIEW, plus the columns the pipe's expressions read beyond
    it: the file's name and scan time (bound as parameters, see ``_params``) and, for Parquet, the
    whole row as JSON."""
    extra = []
    if compiled.metadata:
        extra += [
            f"${_FILENAME_PARAM} AS {_ident(FILENAME_COLUMN)}",
            f"CAST(${_SCAN_TIME_PARAM} AS TIMESTAMPTZ) AS {_ident(SCAN_TIME_COLUMN)}",
        ]
    if row_sql:
        extra.append(f"{row_sql} AS {_ident(PARQUET_ROW_COLUMN)}")
    return f"(SELECT *, {', '.join(extra)} FROM {INPUT_VIEW})" if extra else INPUT_VIEW


def _params(compiled: CompiledCopy, filename: str, scan_time: str) -> dict[str, str]:
    """The values of ``_source``'s parameters (DuckDB refuses values for parameters it lacks)."""
    if not compiled.metadata:
        return {}
    return {_FILENAME_PARAM: filename, _SCAN_TIME_PARAM: scan_time}


def _query_for(
    compiled: CompiledCopy, inp: pa.Table, con: duckdb.DuckDBPyConnection, row_sql: str = ""
) -> _Query:
    """Build (once per input shape) the per-file query; binding it checks every expression."""
    key = inp.schema.to_string(show_schema_metadata=False) + "\x00" + row_sql
    cached = compiled.queries.get(key)
    if cached is not None:
        return cached
    plans = compiled.plans
    pre = [p.pre for p in plans]
    source = _source(compiled, row_sql)
    probe_params = _params(compiled, "", "1970-01-01T00:00:00+00:00")
    con.register(INPUT_VIEW, inp.schema.empty_table())
    try:
        typed = [(k, s) for k, s in enumerate(pre) if s is not None]
        types: dict[int, str] = {}
        if typed:
            probe = ", ".join(f"{s} AS __p{k}" for k, s in typed)
            rel = con.sql(f"SELECT {probe} FROM {source}", params=probe_params)
            types = {k: str(t) for (k, _), t in zip(typed, rel.types, strict=True)}
        layer1: list[str] = ["*"]  # input columns stay visible: layer 2 re-evaluates failed rows
        layer2: list[str] = []
        layer3: list[str] = []
        pre_try: list[str | None] = []
        status: list[int] = []
        slow: list[str | None] = [None] * len(plans)
        for k, plan in enumerate(plans):
            col = plan.column
            target = duckdb_type(col)
            sql = pre[k]
            if sql is None:
                pre_try.append(None)
                layer2.append(f"CAST(NULL AS {target}) AS __v{k}")
                if not col.nullable:
                    layer3.append(f"CAST(4 AS UTINYINT) AS e{k}")
                    status.append(k)
                continue
            p, v = f"__p{k}", f"__v{k}"
            wrapped = sql if plan.bare or plan.volatile else f"TRY({sql})"
            pre_try.append(wrapped)
            layer1.append(f"{wrapped} AS {p}")
            checks: list[str] = []
            conv = _final_conversion(p, types[k], plan, compiled.file_format)
            if conv.slow is not None:
                slow[k] = _final_conversion("p", types[k], plan, compiled.file_format).slow
            layer2.append(f"CAST({conv.fast} AS {target}) AS {v}")
            layer2.append(p)
            if conv.can_fail and (not plan.lenient or conv.slow is not None):
                checks.append(f"WHEN {p} IS NOT NULL AND {v} IS NULL THEN 1")
            if not plan.bare and not plan.volatile:
                # TRY(x IS NULL) is NULL exactly when evaluating x raised: a legitimate NULL (NULLIF,
                # IFF, a NULL input...) gives TRUE. Only rows whose value is NULL pay for this.
                layer2.append(
                    f"CASE WHEN {p} IS NULL THEN TRY(({sql}) IS NULL) IS NULL ELSE FALSE END AS __x{k}"
                )
                checks.append(f"WHEN __x{k} THEN 3")
            if not col.nullable:
                checks.append(f"WHEN {v} IS NULL THEN 4")
            if checks:
                layer3.append(f"CAST(CASE {' '.join(checks)} ELSE 0 END AS UTINYINT) AS e{k}")
                status.append(k)
        outputs = [f"__v{k} AS o{i}" for i, k in enumerate(compiled.output)]
        inner = f"SELECT {', '.join(layer1)} FROM {source}"
        middle = f"SELECT {', '.join(layer2) or '1 AS __floe_dummy'} FROM ({inner})"
        sql_all = f"SELECT {', '.join(outputs + layer3)} FROM ({middle})"
        # Bind now: a type error is the pipe's fault, not the file's.
        _ = con.sql(sql_all, params=probe_params).types
        query = _Query(sql_all, tuple(pre_try), tuple(status), tuple(slow))
    finally:
        con.unregister(INPUT_VIEW)
    if len(compiled.queries) > 64:
        compiled.queries.clear()
    compiled.queries[key] = query
    return query


# ------------------------------------------------------------------------------------------------
# Error messages


def _text_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and not math.isinf(value):
        return str(int(value))
    return str(value)


def _looks_numeric(text: str) -> bool:
    try:
        return Decimal(text.strip()).is_finite()
    except (InvalidOperation, ValueError):
        return False


def _conversion_message(col: Column, value: Any) -> tuple[str, str]:
    """(code, message) for a value that does not convert to col's type."""
    text = _text_of(value)
    t = col.type
    if t == "NUMBER":
        if _looks_numeric(text) or isinstance(value, (int, float, Decimal)):
            return CODE_OUT_OF_RANGE, f"Numeric value '{text}' is out of range"
        return CODE_NUMERIC, f"Numeric value '{text}' is not recognized"
    if t == "FLOAT":
        return CODE_NUMERIC, f"Numeric value '{text}' is not recognized"
    if t == "BOOLEAN":
        return CODE_BOOLEAN, f"Boolean value '{text}' is not recognized"
    if t == "DATE":
        return CODE_DATE, f"Date '{text}' is not recognized"
    if t in ("TIMESTAMP_NTZ", "TIMESTAMP_TZ"):
        return CODE_TIMESTAMP, f"Timestamp '{text}' is not recognized"
    if t == "VARCHAR":
        return CODE_LENGTH, f"User character length limit ({col.precision}) exceeded by string '{text}'"
    return CODE_JSON, f"Error parsing JSON: {text}"


_DUCK_MESSAGES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], tuple[str, str]]]] = [
    (
        re.compile(
            r"""Could not convert string ["'](.*)["'] to (DECIMAL|INT|BIGINT|HUGEINT|DOUBLE|FLOAT)""", re.S
        ),
        lambda m: (
            (CODE_OUT_OF_RANGE, f"Numeric value '{m.group(1)}' is out of range")
            if m.group(2) == "DECIMAL" and _looks_numeric(m.group(1))
            else (CODE_NUMERIC, f"Numeric value '{m.group(1)}' is not recognized")
        ),
    ),
    (
        re.compile(r"Could not cast value (\S+) to DECIMAL"),
        lambda m: (CODE_OUT_OF_RANGE, f"Numeric value '{m.group(1)}' is out of range"),
    ),
    (
        re.compile(r"""Could not convert string ["'](.*)["'] to BOOL""", re.S),
        lambda m: (CODE_BOOLEAN, f"Boolean value '{m.group(1)}' is not recognized"),
    ),
    (
        re.compile(r'date field (?:format|value out of range): "(.*?)"', re.S),
        lambda m: (CODE_DATE, f"Date '{m.group(1)}' is not recognized"),
    ),
    (
        re.compile(r'timestamp field (?:format|value out of range): "(.*?)"', re.S),
        lambda m: (CODE_TIMESTAMP, f"Timestamp '{m.group(1)}' is not recognized"),
    ),
    (
        re.compile(r'Could not parse string "(.*?)" according to format specifier "(.*?)"', re.S),
        lambda m: (
            (CODE_TIMESTAMP, f"Timestamp '{m.group(1)}' is not recognized")
            if "%H" in m.group(2) or "%I" in m.group(2)
            else (CODE_DATE, f"Date '{m.group(1)}' is not recognized")
        ),
    ),
    (re.compile(r"[Dd]ivision by zero"), lambda m: (CODE_DIVISION, "Division by zero")),
    (
        re.compile(r"Malformed JSON.*?: (.*)", re.S),
        lambda m: (CODE_JSON, f"Error parsing JSON: {_first_line(m.group(1))}"),
    ),
]


_ERROR_CLASS = re.compile(r"[A-Za-z ]+Error: ")


def _duckdb_message(exc: Exception) -> tuple[str, str]:
    """A DuckDB evaluation error in Snowflake's words where there is an equivalent."""
    text = str(exc)
    cls = _ERROR_CLASS.match(text)
    body = text[cls.end() :] if cls else text
    # Anchored: the message quotes the file's value, and a search from every position of a
    # value that repeats a message's prefix would be quadratic in the value's length.
    for pattern, render in _DUCK_MESSAGES:
        m = pattern.match(body)
        if m:
            return render(m)
    return CODE_OTHER, _first_line(body)


def _field_character(raw: RawFile, line: int, field_no: int) -> int:
    """1-based character position of CSV field ``field_no`` in physical line ``line``."""
    data = raw.data
    if line <= 1:
        start = 0
    elif line < 2000:
        start = -1
        for _ in range(line - 1):
            start = data.find(b"\n", start + 1)
            if start < 0:
                return 1
        start += 1
    else:
        newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
        if line - 2 >= len(newlines):
            return 1
        start = int(newlines[line - 2]) + 1
    chunk = data[start : start + 65536].decode("utf-8", "replace")
    fmt = raw.fmt
    spans = field_spans(chunk, fmt.field_delimiter, fmt.field_optionally_enclosed_by)
    if 0 < field_no <= len(spans):
        return spans[field_no - 1][0] + 1
    return 1


# ------------------------------------------------------------------------------------------------
# apply_copy


@dataclass
class _FirstError:
    line: int
    character: int
    column: str | None
    message: str
    code: str


def _fit_width(compiled: CompiledCopy, raw: RawFile) -> RawFile:
    """Plain CSV COPY: records must have one field per target column; re-read when the file was
    read with another width (read_raw takes the first record's) or needs lenient repair."""
    if compiled.format != "CSV" or compiled.csv_width is None or raw.format != "CSV":
        return raw
    width = compiled.csv_width
    mismatches = any(e.code in (CODE_END_OF_RECORD, CODE_EXTRA_FIELD) for e in raw.errors)
    lenient = not raw.fmt.error_on_column_count_mismatch
    if raw.width == width and not (lenient and mismatches):
        return raw
    if raw.rows_parsed == 0:
        return raw
    again = read_csv(raw.data, raw.fmt, raw.path, width)
    return replace(again, row_offset=raw.row_offset, line_offset=raw.line_offset)


def _field_column(compiled: CompiledCopy, field_no: int) -> str:
    """The target column Snowflake names for an error in CSV field ``field_no``."""
    name = next((p.display for p in compiled.plans if field_no in p.fields[:1]), None)
    name = name or next((p.display for p in compiled.plans if field_no in p.fields), None)
    return name or f'"{compiled.table_name}"["${field_no}":{field_no}]'


def _name_parse_errors(compiled: CompiledCopy, errors: list[RowError]) -> list[RowError]:
    """Give CSV field-count errors the target column name Snowflake would print."""
    out: list[RowError] = []
    for err in errors:
        if err.column_name is None and err.field is not None:
            err = err.named(_field_column(compiled, err.field))
        out.append(err)
    return out


def failed_file(compiled: CompiledCopy, exc: FileLoadError, filename: str) -> LoadOutcome:
    """The result of a file that could not be read at all (a FileLoadError from ``read_raw``).

    When the error has a place in the file (a FileParseError), load history shows its line,
    character and target column, as for a row error.
    """
    if not isinstance(exc, FileParseError):
        return LoadOutcome.failed(filename, exc.message)
    column = (
        _field_column(compiled, exc.field) if exc.field is not None and compiled.format == "CSV" else None
    )
    return LoadOutcome.failed(
        filename, exc.message, code=exc.code, line=exc.line, character=exc.character, column=column
    )


def _error_limit(compiled: CompiledCopy, rows_parsed: int) -> int:
    if compiled.on_error == "SKIP_FILE_N":
        return max(1, int(compiled.on_error_limit))
    if compiled.on_error == "SKIP_FILE_PCT":
        return math.floor(rows_parsed * compiled.on_error_limit / 100) + 1
    if compiled.on_error == "CONTINUE":
        return rows_parsed
    return 1


def _fails(compiled: CompiledCopy, errors: int, rows_parsed: int, loaded: int) -> bool:
    if errors == 0:
        return False
    if loaded == 0:
        return True  # every record failed: nothing was loaded, whatever the rule
    rule = compiled.on_error
    if rule == "CONTINUE":
        return False
    if rule == "SKIP_FILE_N":
        return errors >= max(1, compiled.on_error_limit)
    if rule == "SKIP_FILE_PCT":
        return rows_parsed > 0 and errors * 100.0 / rows_parsed > compiled.on_error_limit
    return True  # SKIP_FILE


def _run(con: duckdb.DuckDBPyConnection, sql: str, table: pa.Table, params: dict[str, str]) -> pa.Table:
    con.register(INPUT_VIEW, table)
    try:
        return con.sql(sql, params=params).to_arrow_table()
    finally:
        con.unregister(INPUT_VIEW)


def _raises(
    con: duckdb.DuckDBPyConnection, sql: str, table: pa.Table, params: dict[str, str]
) -> Exception | None:
    try:
        _run(con, sql, table, params)
    except duckdb.Error as exc:
        return exc
    return None


def apply_copy(
    compiled: CompiledCopy,
    raw: RawFile,
    *,
    filename: str,
    con: duckdb.DuckDBPyConnection | None = None,
) -> tuple[pa.Table, LoadOutcome]:
    """Transform one parsed file into rows of the target table and its load-history result.

    Returns the rows to load (exactly ``compiled.schema``; empty when the file fails) and the
    LoadOutcome. ``con``: a DuckDB connection owned by the calling thread, by default a per-thread
    ``new_connection()``. Pass a ``new_connection()`` too: it is the sandboxed one (a plain
    connection also works, set to UTC, but it can read files if an expression ever reached them).
    Raises FileLoadError only for failures of the whole file.
    """
    copy = FileCopy(compiled, filename)
    rows = copy.add(raw, con)
    result = copy.result()
    if result.status == "LOAD_FAILED":
        rows = compiled.schema.empty_table()
    return rows, result


class FileCopy:
    """One file's COPY, fed in one piece or in consecutive parts (a large file read as a stream).

    ``add`` transforms a part and returns its good rows; ON_ERROR is decided once, on the whole
    file's counts, by ``result``. The caller keeps or drops the rows accordingly; ``doomed`` says
    early when the file can no longer load, so a streaming caller can stop writing its rows.
    """

    def __init__(self, compiled: CompiledCopy, filename: str) -> None:
        self.compiled = compiled
        self.filename = filename
        self.rows_parsed = 0
        self.rows_good = 0
        self.errors = 0
        self.first: _FirstError | None = None

    def add(self, raw: RawFile, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
        """Transform one part; returns its good rows (``compiled.schema``), whatever ON_ERROR says."""
        compiled = self.compiled
        con = _connection(con)
        raw = _fit_width(compiled, raw)
        parse_errors = _name_parse_errors(compiled, raw.errors)
        n = raw.num_rows
        first: _FirstError | None = None
        if parse_errors:
            e0 = min(parse_errors, key=lambda e: e.line)
            first = _FirstError(e0.line, e0.character, e0.column_name, e0.message, e0.code)
        bad = np.zeros(n, dtype=bool)
        result: pa.Table | None = None
        if n > 0:
            run = _FileRun.start(compiled, raw, con, self.filename)
            result = run.result
            if run.query.status:
                bad, where = run.check_rows()
                result = run.result
                if where is not None:
                    err = run.describe(*where)
                    if first is None or err.line < first.line:
                        first = err
        n_bad = int(bad.sum())
        self.rows_parsed += raw.rows_parsed
        self.errors += len(parse_errors) + n_bad
        self.rows_good += n - n_bad
        if first is not None and self.first is None:
            # Parts arrive in file order, so the first part with an error holds the file's first.
            self.first = replace(first, line=first.line + raw.line_offset)
        if result is None:
            return compiled.schema.empty_table()
        if n_bad:
            result = result.filter(pa.array(~bad))
        return pa.Table.from_arrays(
            [result.column(f"o{i}").cast(f.type) for i, f in enumerate(compiled.schema)],
            schema=compiled.schema,
        )

    @property
    def doomed(self) -> bool:
        """The errors so far fail the file whatever the rest of it holds."""
        rule = self.compiled.on_error
        if self.errors == 0 or rule in ("CONTINUE", "SKIP_FILE_PCT"):
            return False
        if rule == "SKIP_FILE_N":
            return self.errors >= max(1, self.compiled.on_error_limit)
        return True

    def result(self) -> LoadOutcome:
        """The file's load-history record: ON_ERROR applied to the counts of every part."""
        compiled = self.compiled
        failed = _fails(compiled, self.errors, self.rows_parsed, self.rows_good)
        first = self.first
        return LoadOutcome(
            path=self.filename,
            status="LOADED" if self.errors == 0 else "LOAD_FAILED" if failed else "PARTIALLY_LOADED",
            rows_parsed=self.rows_parsed,
            rows_loaded=0 if failed else self.rows_good,
            errors_seen=self.errors,
            error_limit=_error_limit(compiled, self.rows_parsed),
            first_error=first.message if first else None,
            first_error_line=first.line if first else None,
            first_error_character=first.character if first else None,
            first_error_column=first.column if first else None,
            code=first.code if first else None,
        )


@dataclass
class _FileRun:
    """One file's trip through DuckDB, and the follow-up queries its error rows need."""

    compiled: CompiledCopy
    raw: RawFile
    con: duckdb.DuckDBPyConnection
    filename: str
    params: dict[str, str]
    inp: pa.Table
    source: str
    query: _Query
    result: pa.Table

    @classmethod
    def start(
        cls, compiled: CompiledCopy, raw: RawFile, con: duckdb.DuckDBPyConnection, filename: str
    ) -> _FileRun:
        """Run the main query."""
        inp, row_sql = _input_table(compiled, raw)
        params = _params(compiled, filename, dt.datetime.now(dt.UTC).isoformat())
        try:
            # Parquet queries are bound here, against the file's own column types.
            query = _query_for(compiled, inp, con, row_sql)
            result = _run(con, query.sql, inp, params)
        except duckdb.Error as exc:
            raise FileLoadError(f"Transform failed: {_first_line(str(exc))}", file=filename) from exc
        return cls(compiled, raw, con, filename, params, inp, _source(compiled, row_sql), query, result)

    def sql(self, expr: str, alias: str = "x") -> str:
        """A query evaluating one expression over the file's rows (run with ``self.params``)."""
        return f"SELECT {expr} AS {alias} FROM {self.source}"

    def check_rows(self) -> tuple[np.ndarray, tuple[int, int, int] | None]:
        """Error mask over the rows, and (row, plan, status) of the first error.

        Conversion failures first get the slow, complete conversion (the result is patched where
        it succeeds).
        """
        n = self.result.num_rows
        statuses: dict[int, np.ndarray] = {}
        for k in self.query.status:
            s = self.result.column(f"e{k}").to_numpy()
            if s.any():
                statuses[k] = np.array(s, dtype=np.uint8)  # writable copy
        for k, s in statuses.items():
            plan = self.compiled.plans[k]
            if self.query.slow[k] is not None and (s == 1).any():
                self._slow_path(k, s)
            if plan.lenient:
                s[s == 1] = 0 if plan.column.nullable else 4
        bad = np.zeros(n, dtype=bool)
        for s in statuses.values():
            bad |= s != 0
        if not bad.any():
            return bad, None
        row = int(np.argmax(bad))
        for k in sorted(statuses):
            if statuses[k][row]:
                return bad, (row, k, int(statuses[k][row]))
        return bad, None

    def _slow_path(self, k: int, status: np.ndarray) -> None:
        """Rows of plan k the main query could not convert: try the full rule, patch what converts."""
        plan = self.compiled.plans[k]
        rows = np.flatnonzero(status == 1)
        target = duckdb_type(plan.column)
        pre = self.query.pre_try[k] or "NULL"
        sql = f"SELECT CAST({self.query.slow[k]} AS {target}) AS v FROM ({self.sql(pre, 'p')})"
        values = _run(self.con, sql, self.inp.take(pa.array(rows)), self.params).column(0)
        converted = values.is_valid().to_numpy(zero_copy_only=False)
        if not converted.any():
            return
        position = self.compiled.output.index(k)
        name = f"o{position}"
        column = self.result.column(name)
        mask = np.zeros(len(status), dtype=bool)
        mask[rows[converted]] = True
        replacements = values.filter(pa.array(converted)).cast(column.type)
        patched = pc.replace_with_mask(column.combine_chunks(), pa.array(mask), replacements.combine_chunks())
        self.result = self.result.set_column(position, name, patched)
        status[rows[converted]] = 0

    def describe(self, row: int, plan_index: int, status: int) -> _FirstError:
        """Message, line, character and column of the error at (row, plan, status)."""
        compiled, raw = self.compiled, self.raw
        plan = compiled.plans[plan_index]
        line = int(raw.line_numbers[row].as_py())
        one = self.inp.slice(row, 1)
        if status == 4:
            code, message = CODE_NOT_NULL, NOT_NULL_MESSAGE
        elif status == 1:
            value = _run(self.con, self.sql(self.query.pre_try[plan_index] or "NULL"), one, self.params)
            code, message = _conversion_message(plan.column, value.column(0)[0].as_py())
        else:
            exc = _raises(self.con, self.sql(plan.pre or "NULL"), one, self.params)
            code, message = (
                _duckdb_message(exc) if exc is not None else (CODE_OTHER, "Expression evaluation failed")
            )
        character = 1
        if compiled.format == "CSV" and raw.data:
            character = _field_character(raw, line, plan.fields[0] if plan.fields else 1)
        return _FirstError(line, character, plan.display, message, code)
