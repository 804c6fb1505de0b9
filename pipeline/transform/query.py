"""The per-file query: one DuckDB query over the file's Arrow table, built from a CompiledCopy once
per input shape, and the input table it reads.

The query has three layers:

1. ``p = TRY(expression)``: the value before the final conversion to the column type (no TRY
   when the expression is a plain input: a raw column, a path, a METADATA$ column);
2. ``v = conversion(p)``: NULL instead of an error when the value does not convert; for rows where
   ``p`` is NULL, ``TRY(expression IS NULL) IS NULL`` tells an evaluation error (the whole TRY is
   NULL) from a legitimate NULL (NULLIF, IFF, a NULL input: TRUE);
3. a status per column and row, read back as a small integer column:
   1 = conversion error (``p`` not NULL, ``v`` NULL), 3 = the expression raised, 4 = NULL in a
   NOT NULL column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from floe.catalog.models import FileFormat
from floe.types import OFFSET_COLUMN_PREFIX, arrow_type, duckdb_type
from pipeline.formats import RawFile
from pipeline.transform.conversion import final_conversion, tz_offset
from pipeline.transform.dialect import ident, lit
from pipeline.transform.plan import (
    CONTENT_KEY_COLUMN,
    FILENAME_COLUMN,
    INPUT_VIEW,
    LAST_MODIFIED_COLUMN,
    PARQUET_ROW_COLUMN,
    ROW_NUMBER_COLUMN,
    SCAN_TIME_COLUMN,
    ColumnPlan,
    CompiledCopy,
    FileInfo,
    FileQuery,
)

_FILENAME_PARAM = "floe_filename"
_SCAN_TIME_PARAM = "floe_scan_time"
_CONTENT_KEY_PARAM = "floe_content_key"
_LAST_MODIFIED_PARAM = "floe_last_modified"
# Bounds each CompiledCopy's cache: Parquet files of many schemas would each add a query.
_MAX_CACHED_QUERIES = 64


def empty_input(compiled: CompiledCopy) -> pa.Table:
    """An empty input table of the shape CSV and JSON files give, to bind the query at compile time."""
    if compiled.format == "CSV" and compiled.file_format.parse_header:  # columns named by the header
        cols: dict[str, pa.Array] = {name: pa.array([], pa.string()) for name in compiled.parquet_columns}
    elif compiled.format == "CSV":
        width = compiled.max_field
        cols = {f"c{i}": pa.array([], pa.string()) for i in range(1, width + 1)}
    else:
        cols = {"c1": pa.array([], pa.string())}
    cols[ROW_NUMBER_COLUMN] = pa.array([], pa.int64())
    for call in compiled.calls:
        cols[call.column] = pa.array([], arrow_type(call.returns))
    return pa.table(cols)


@dataclass(frozen=True)
class ShapeSql:
    """What a file's own columns add to the per-file query's source (``source_sql``)."""

    row: str = ""
    """SQL of the whole row as JSON, for a COPY that reads ``$1`` of a columnar file."""
    replace: tuple[str, ...] = ()
    """``expression AS "column"`` items: file columns read as Snowflake's default Parquet reader
    shows them (``reader_value``)."""

    def key(self) -> str:
        return self.row + "\x00" + "\x00".join(self.replace)


_NO_SHAPE = ShapeSql()


def input_table(compiled: CompiledCopy, raw: RawFile) -> tuple[pa.Table, ShapeSql]:
    """The table DuckDB reads, and what its columns add to the query's source (the whole Parquet
    row, the columns read without their NULL fields)."""
    rn = pc.add(raw.row_numbers, raw.row_offset) if raw.row_offset else raw.row_numbers
    if compiled.format == "CSV" and compiled.file_format.parse_header:
        # MATCH_BY_COLUMN_NAME: the header names the raw columns, read by name as Parquet's are.
        cols = _parquet_columns(compiled, raw)
        cols[ROW_NUMBER_COLUMN] = rn
        return pa.table(cols), _NO_SHAPE
    if compiled.format == "CSV":
        cols = _csv_columns(compiled, raw)
        cols[ROW_NUMBER_COLUMN] = rn
        return pa.table(cols), _NO_SHAPE
    if compiled.format == "JSON":
        return pa.table({"c1": raw.table.column("c1"), ROW_NUMBER_COLUMN: rn}), _NO_SHAPE
    cols = _parquet_columns(compiled, raw)
    # USE_VECTORIZED_SCANNER = FALSE (Parquet's default): "does not explicitly show NULL values"
    omit_nulls = compiled.format == "PARQUET" and not compiled.file_format.use_vectorized_scanner
    replace: list[str] = []
    if omit_nulls:
        for name, col in cols.items():
            if has_struct(col.type):
                replace.append(f"{reader_value(ident(name), col.type)} AS {ident(name)}")
    row_sql = _parquet_row(raw, cols, omit_nulls) if compiled.parquet_row else ""
    cols[ROW_NUMBER_COLUMN] = rn
    return pa.table(cols), ShapeSql(row_sql, tuple(replace))


def _csv_columns(compiled: CompiledCopy, raw: RawFile) -> dict[str, Any]:
    """Fields c1..c<max_field>, NULL where the file's records are narrower."""
    n = raw.num_rows
    cols: dict[str, Any] = {}
    for i in range(1, compiled.max_field + 1):
        name = f"c{i}"
        cols[name] = raw.table.column(name) if name in raw.table.column_names else pa.nulls(n, pa.string())
    return cols


def _parquet_columns(compiled: CompiledCopy, raw: RawFile) -> dict[str, Any]:
    """The file columns the plans read, matched case-insensitively (exactly with ``exact_names``);
    NULL where the file lacks one."""
    n = raw.num_rows
    lowered: dict[str, int] = {}
    for i, name in enumerate(raw.table.column_names):
        lowered.setdefault(name if compiled.exact_names else name.lower(), i)
    cols: dict[str, Any] = {}
    for name in compiled.parquet_columns:
        idx = lowered.get(name)
        cols[name] = raw.table.column(idx) if idx is not None else pa.nulls(n, pa.string())
    return cols


def _parquet_row(raw: RawFile, cols: dict[str, Any], omit_nulls: bool) -> str:
    """SQL of the whole Parquet row as JSON; adds the file's columns to cols under aliases.
    ``omit_nulls``: NULL fields left out, at every depth (``reader_text``)."""
    # The file's column names are data: sqlglot quotes them as struct keys.
    fields: list[exp.Expr] = []
    members: list[Member] = []
    for i, name in enumerate(raw.table.column_names):
        alias = f"__floe_pq_{i}"
        column = raw.table.column(i)
        cols[alias] = column
        value = exp.column(exp.to_identifier(alias, quoted=True))
        fields.append(exp.PropertyEQ(this=exp.to_identifier(name, quoted=True), expression=value))
        members.append((name, ident(alias), column.type))
    if not fields:
        return "to_json(MAP {})"
    whole = exp.Anonymous(this="to_json", expressions=[exp.Struct(expressions=fields)]).sql("duckdb")
    if not omit_nulls or not any(c.null_count or has_struct(c.type) for c in raw.table.columns):
        return whole  # nothing to leave out: DuckDB's own to_json writes the same
    fast = max(struct_depth(t) for _, _, t in members) < FAST_DEPTH
    return f"CAST({_object_text(members, f'CAST({whole} AS VARCHAR)', fast=fast)} AS JSON)"


# ---------------------------------------------------------------------------------------------
# JSON as Snowflake's default Parquet reader shows it (USE_VECTORIZED_SCANNER = FALSE): NULL fields
# left out of objects, at every depth (a list's NULL elements were already left out by the reader,
# and a map is a struct by then: ``parquet_rows.reader_shapes``). The SQL is built from the Arrow
# type out of plain string functions, ``concat_ws`` skipping the NULL members, so DuckDB runs it
# vectorized; a value with no NULL anywhere in it takes DuckDB's own to_json, which writes the same
# text for less. Only columns holding a struct pay, and ``$1`` of a file with NULLs.


def has_struct(t: pa.DataType) -> bool:
    """Whether values of type t hold a struct (at any depth): only those have fields to leave out."""
    if pa.types.is_struct(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return has_struct(t.value_type)
    return False


def reader_value(x: str, t: pa.DataType, depth: int = 0) -> str:
    """SQL of x (of Arrow type t) with each struct in it a JSON object without its NULL fields;
    lists stay lists (of JSON), so list functions and indexes still apply."""
    if pa.types.is_struct(t):
        return f"CAST({reader_text(x, t, depth)} AS JSON)"
    if has_struct(t):
        e = f"__floe_e{depth}"
        return f"list_transform({x}, lambda {e}: {reader_value(e, t.value_type, depth + 1)})"
    return x


MAX_PATH = 8
"""struct_extract calls in a row before a struct is bound to a lambda variable of its own. Naming
every level's whole path from the column made the SQL of a deeply nested file cubic in its depth
(115 MB of SQL for 200 levels, built from a type the file chooses); rebinding keeps it linear."""
FAST_DEPTH = 4
"""Struct nesting up to which an object first checks that nothing in it is NULL, to take DuckDB's own
to_json: the check names every field below, so deeper types go without it."""


def reader_text(x: str, t: pa.DataType, depth: int = 0, fast: bool = True, hops: int = 0) -> str:
    """SQL of the JSON text (VARCHAR) of x, of Arrow type t, with the NULL fields of its structs
    left out; NULL when x is NULL. ``depth`` names the lambdas apart, ``fast`` allows the no-NULL
    shortcut (``_object_text``), ``hops`` counts the struct_extract calls x is made of."""
    if pa.types.is_struct(t):
        if hops >= MAX_PATH:
            e = f"__floe_e{depth}"
            return f"list_transform([{x}], lambda {e}: {reader_text(e, t, depth + 1, fast)})[1]"
        members = [(f.name, f"struct_extract({x}, {lit(f.name)})", f.type) for f in t]
        whole = f"CAST(to_json({x}) AS VARCHAR)"
        body = _object_text(members, whole, depth, fast and struct_depth(t) <= FAST_DEPTH, hops + 1)
        return f"CASE WHEN {x} IS NOT NULL THEN {body} END"
    if has_struct(t):
        e = f"__floe_e{depth}"
        element = f"coalesce({reader_text(e, t.value_type, depth + 1)}, 'null')"
        return (
            f"CASE WHEN {x} IS NOT NULL THEN "
            f"'[' || array_to_string(list_transform({x}, lambda {e}: {element}), ',') || ']' END"
        )
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return f"CAST({x} AS VARCHAR)"  # the same digits and words as to_json, for less
    return f"CAST(to_json({x}) AS VARCHAR)"


Member = tuple[str, str, pa.DataType]
"""An object's member: its key, the SQL of its value, the value's Arrow type."""


def _object_text(members: list[Member], whole: str, depth: int = 0, fast: bool = True, hops: int = 0) -> str:
    """SQL of the JSON text of an object of ``members``, those whose value is NULL left out;
    ``whole``: the same object's text as to_json writes it, NULLs included, taken (with ``fast``)
    for a row where nothing in the object is NULL."""
    if not members:
        return lit("{}")
    parts = [
        f"{lit(_json_key(key) + ':')} || {reader_text(sql, t, depth, False, hops)}" for key, sql, t in members
    ]
    text = f"'{{' || concat_ws(',', {', '.join(parts)}) || '}}'"
    present = _all_present(members) if fast else None
    # CASE runs each branch on its own rows only: a row without NULLs never builds the text by hand.
    return f"CASE WHEN {present} THEN {whole} ELSE {text} END" if present else text


def struct_depth(t: pa.DataType) -> int:
    """How many structs deep values of type t go (lists do not count)."""
    if pa.types.is_struct(t):
        return 1 + max((struct_depth(f.type) for f in t), default=0)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return struct_depth(t.value_type)
    return 0


# How DuckDB's to_json escapes a key (yyjson): the two-character escapes, other control characters
# as upper-case \u00XX, the rest (non-ASCII included) as it is.
_KEY_ESCAPES: dict[int, str] = {c: f"\\u{c:04X}" for c in range(0x20)} | {
    ord('"'): '\\"',
    ord("\\"): "\\\\",
    ord("\b"): "\\b",
    ord("\f"): "\\f",
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def _json_key(name: str) -> str:
    """A key as DuckDB's to_json writes it, quotes included (then quoted as SQL by ``lit``)."""
    return '"' + name.translate(_KEY_ESCAPES) + '"'


def _all_present(members: list[Member]) -> str | None:
    """SQL true when no member is NULL, at any depth; None when that cannot be told by a plain
    condition (a list of structs inside)."""
    checks: list[str] = []
    for _, sql, t in members:
        if pa.types.is_struct(t):
            inner = _all_present([(f.name, f"struct_extract({sql}, {lit(f.name)})", f.type) for f in t])
            if inner is None:
                return None
            checks += [f"{sql} IS NOT NULL", inner]
        elif has_struct(t):
            return None
        else:
            checks.append(f"{sql} IS NOT NULL")
    return " AND ".join(checks) if checks else "TRUE"


def source_sql(compiled: CompiledCopy, shape: ShapeSql = _NO_SHAPE, file_column: bool = False) -> str:
    """What per-file queries read: INPUT_VIEW, plus the columns the pipe's expressions read beyond
    it: the file's name and scan time (bound as parameters, see ``query_params``) and, for Parquet, the
    whole row as JSON; with ``shape.replace``, some file columns as the Parquet reader shows them.
    ``file_column``: the input has the file's name in a column of its own (``with_file_column``:
    the rows of several files in one query, ``copy_group``), not as a parameter."""
    extra = []
    if compiled.metadata:
        if not file_column:
            extra.append(f"${_FILENAME_PARAM} AS {ident(FILENAME_COLUMN)}")
        extra.append(f"CAST(${_SCAN_TIME_PARAM} AS TIMESTAMPTZ) AS {ident(SCAN_TIME_COLUMN)}")
    if compiled.file_info:
        extra += [
            f"${_CONTENT_KEY_PARAM} AS {ident(CONTENT_KEY_COLUMN)}",
            f"CAST(${_LAST_MODIFIED_PARAM} AS TIMESTAMP) AS {ident(LAST_MODIFIED_COLUMN)}",
        ]
    if shape.row:
        extra.append(f"{shape.row} AS {ident(PARQUET_ROW_COLUMN)}")
    star = f"* REPLACE ({', '.join(shape.replace)})" if shape.replace else "*"
    return f"(SELECT {', '.join([star, *extra])} FROM {INPUT_VIEW})" if extra or shape.replace else INPUT_VIEW


_NO_INFO = FileInfo(content_key="", last_modified="1970-01-01T00:00:00")


def with_file_column(inp: pa.Table, filename: str) -> pa.Table:
    """A file's input table with its name in a column, as ``source_sql(..., file_column=True)`` reads it."""
    return inp.append_column(FILENAME_COLUMN, pa.array([filename] * inp.num_rows, pa.string()))


def query_params(
    compiled: CompiledCopy, filename: str | None, scan_time: str, info: FileInfo | None = None
) -> dict[str, str]:
    """The values of ``source_sql``'s parameters (DuckDB refuses values for parameters it lacks).
    ``info`` is needed when ``compiled.file_info``; ``filename`` None: it is in a column
    (``with_file_column``)."""
    values: dict[str, str] = {}
    if compiled.metadata:
        values[_SCAN_TIME_PARAM] = scan_time
        if filename is not None:
            values[_FILENAME_PARAM] = filename
    if compiled.file_info:
        info = info or _NO_INFO
        values |= {_CONTENT_KEY_PARAM: info.content_key, _LAST_MODIFIED_PARAM: info.last_modified}
    return values


def query_for(
    compiled: CompiledCopy, inp: pa.Table, con: duckdb.DuckDBPyConnection, shape: ShapeSql = _NO_SHAPE
) -> FileQuery:
    """Build (once per input shape) the per-file query; binding it checks every expression."""
    key = inp.schema.to_string(show_schema_metadata=False) + "\x00" + shape.key()
    cached = compiled.queries.get(key)
    if cached is not None:
        return cached
    file_column = FILENAME_COLUMN in inp.schema.names
    src = source_sql(compiled, shape, file_column)
    probe_params = query_params(compiled, None if file_column else "", "1970-01-01T00:00:00+00:00")
    con.register(INPUT_VIEW, inp.schema.empty_table())
    try:
        types = _value_types(compiled, src, con, probe_params)
        query = _build(compiled, src, types)
        # Bind now: a type error is the pipe's fault, not the file's.
        _ = con.sql(query.sql, params=probe_params).types
    finally:
        con.unregister(INPUT_VIEW)
    if len(compiled.queries) > _MAX_CACHED_QUERIES:
        compiled.queries.clear()
    compiled.queries[key] = query
    return query


def _value_types(
    compiled: CompiledCopy, src: str, con: duckdb.DuckDBPyConnection, probe_params: dict[str, str]
) -> dict[int, str]:
    """Per loaded plan, the DuckDB type of its value before the final conversion."""
    typed = [(k, p.pre) for k, p in enumerate(compiled.plans) if p.pre is not None]
    if not typed:
        return {}
    probe = ", ".join(f"{s} AS __p{k}" for k, s in typed)
    rel = con.sql(f"SELECT {probe} FROM {src}", params=probe_params)
    return {k: str(t) for (k, _), t in zip(typed, rel.types, strict=True)}


def _build(compiled: CompiledCopy, src: str, types: dict[int, str]) -> FileQuery:
    """The three layers' SQL, and what reading the result back needs."""
    layers = _Layers(slow=[None] * len(compiled.plans), slow_offset=[None] * len(compiled.plans))
    for k, plan in enumerate(compiled.plans):
        if plan.pre is None:
            layers.add_unloaded(k, plan)
        else:
            layers.add_loaded(k, plan, plan.pre, types[k], compiled.file_format, compiled.truncate_columns)
    outputs = [f"__v{k} AS o{i}" for i, k in enumerate(compiled.output)] + _offset_outputs(compiled, layers)
    inner = f"SELECT {', '.join(layers.layer1)} FROM {src}"
    middle = f"SELECT {', '.join(layers.layer2) or '1 AS __floe_dummy'} FROM ({inner})"
    sql_all = f"SELECT {', '.join(outputs + layers.layer3)} FROM ({middle})"
    return FileQuery(
        sql_all, tuple(layers.pre_try), tuple(layers.status), tuple(layers.slow), tuple(layers.slow_offset)
    )


def _offset_outputs(compiled: CompiledCopy, layers: _Layers) -> list[str]:
    """The outputs after the table's columns: each TIMESTAMP_TZ column's offsets (NULL when the COPY
    does not load the column)."""
    by_name = {compiled.plans[k].column.name: k for k in compiled.output}
    out = []
    for j in range(len(compiled.output), len(compiled.schema)):
        k = by_name[compiled.schema.field(j).name.removeprefix(OFFSET_COLUMN_PREFIX)]
        out.append(f"{layers.offsets.get(k, 'CAST(NULL AS SMALLINT)')} AS o{j}")
    return out


@dataclass
class _Layers:
    """The select lists of the query's three layers, filled plan by plan."""

    slow: list[str | None]
    """Per plan, the full conversion of column ``p`` (FileQuery.slow)."""
    slow_offset: list[str | None]
    """Per plan, the offset of ``p`` converted to ``v`` on the slow path's rows (FileQuery.slow_offset)."""
    # Input columns stay visible: layer 2 re-evaluates failed rows.
    layer1: list[str] = field(default_factory=lambda: ["*"])
    layer2: list[str] = field(default_factory=list)
    layer3: list[str] = field(default_factory=list)
    pre_try: list[str | None] = field(default_factory=list)
    status: list[int] = field(default_factory=list)
    offsets: dict[int, str] = field(default_factory=dict)
    """Per TIMESTAMP_TZ plan, its offset over layer 2's ``__p<k>`` and ``__v<k>``."""

    def add_unloaded(self, k: int, plan: ColumnPlan) -> None:
        """A column the COPY does not load: NULL, an error in every row when it is NOT NULL."""
        self.pre_try.append(None)
        self.layer2.append(f"CAST(NULL AS {duckdb_type(plan.column)}) AS __v{k}")
        if not plan.column.nullable:
            self.layer3.append(f"CAST(4 AS UTINYINT) AS e{k}")
            self.status.append(k)

    def add_loaded(
        self, k: int, plan: ColumnPlan, sql: str, duck_type: str, fmt: FileFormat, truncate: bool = False
    ) -> None:
        """A loaded column whose value before the final conversion is ``sql``, of type duck_type;
        ``truncate``: TRUNCATECOLUMNS."""
        col = plan.column
        target = duckdb_type(col)
        p, v = f"__p{k}", f"__v{k}"
        wrapped = sql if plan.bare or plan.volatile else f"TRY({sql})"
        self.pre_try.append(wrapped)
        self.layer1.append(f"{wrapped} AS {p}")
        checks: list[str] = []
        conv = final_conversion(p, duck_type, col, plan.json_text, fmt, truncate=truncate)
        if conv.slow is not None:
            self.slow[k] = final_conversion("p", duck_type, col, plan.json_text, fmt, truncate=truncate).slow
        if col.type == "TIMESTAMP_TZ":
            self.offsets[k] = tz_offset(p, v, duck_type, fmt, full=False)
            if conv.slow is not None:
                self.slow_offset[k] = tz_offset("p", "v", duck_type, fmt, full=True)
        self.layer2.append(f"CAST({conv.fast} AS {target}) AS {v}")
        self.layer2.append(p)
        if conv.can_fail and (not plan.lenient or conv.slow is not None):
            checks.append(f"WHEN {p} IS NOT NULL AND {v} IS NULL THEN 1")
        if not plan.bare and not plan.volatile:
            # TRY(x IS NULL) is NULL exactly when evaluating x raised: a legitimate NULL (NULLIF,
            # IFF, a NULL input...) gives TRUE. Only rows whose value is NULL pay for this.
            self.layer2.append(
                f"CASE WHEN {p} IS NULL THEN TRY(({sql}) IS NULL) IS NULL ELSE FALSE END AS __x{k}"
            )
            checks.append(f"WHEN __x{k} THEN 3")
        if not col.nullable:
            checks.append(f"WHEN {v} IS NULL THEN 4")
        if checks:
            self.layer3.append(f"CAST(CASE {' '.join(checks)} ELSE 0 END AS UTINYINT) AS e{k}")
            self.status.append(k)
