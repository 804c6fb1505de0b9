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
from pipeline.transform.dialect import ident
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


def input_table(compiled: CompiledCopy, raw: RawFile) -> tuple[pa.Table, str]:
    """The table DuckDB reads, and the SQL of the whole Parquet row (if any) over it."""
    rn = pc.add(raw.row_numbers, raw.row_offset) if raw.row_offset else raw.row_numbers
    if compiled.format == "CSV" and compiled.file_format.parse_header:
        # MATCH_BY_COLUMN_NAME: the header names the raw columns, read by name as Parquet's are.
        cols = _parquet_columns(compiled, raw)
        cols[ROW_NUMBER_COLUMN] = rn
        return pa.table(cols), ""
    if compiled.format == "CSV":
        cols = _csv_columns(compiled, raw)
        cols[ROW_NUMBER_COLUMN] = rn
        return pa.table(cols), ""
    if compiled.format == "JSON":
        return pa.table({"c1": raw.table.column("c1"), ROW_NUMBER_COLUMN: rn}), ""
    cols = _parquet_columns(compiled, raw)
    row_sql = _parquet_row(raw, cols) if compiled.parquet_row else ""
    cols[ROW_NUMBER_COLUMN] = rn
    return pa.table(cols), row_sql


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


def _parquet_row(raw: RawFile, cols: dict[str, Any]) -> str:
    """SQL of the whole Parquet row as JSON; adds the file's columns to cols under aliases."""
    # The file's column names are data: sqlglot quotes them as struct keys.
    fields: list[exp.Expr] = []
    for i, name in enumerate(raw.table.column_names):
        alias = f"__floe_pq_{i}"
        cols[alias] = raw.table.column(i)
        value = exp.column(exp.to_identifier(alias, quoted=True))
        fields.append(exp.PropertyEQ(this=exp.to_identifier(name, quoted=True), expression=value))
    if not fields:
        return "to_json(MAP {})"
    return exp.Anonymous(this="to_json", expressions=[exp.Struct(expressions=fields)]).sql("duckdb")


def source_sql(compiled: CompiledCopy, row_sql: str) -> str:
    """What per-file queries read: INPUT_VIEW, plus the columns the pipe's expressions read beyond
    it: the file's name and scan time (bound as parameters, see ``query_params``) and, for Parquet, the
    whole row as JSON."""
    extra = []
    if compiled.metadata:
        extra += [
            f"${_FILENAME_PARAM} AS {ident(FILENAME_COLUMN)}",
            f"CAST(${_SCAN_TIME_PARAM} AS TIMESTAMPTZ) AS {ident(SCAN_TIME_COLUMN)}",
        ]
    if compiled.file_info:
        extra += [
            f"${_CONTENT_KEY_PARAM} AS {ident(CONTENT_KEY_COLUMN)}",
            f"CAST(${_LAST_MODIFIED_PARAM} AS TIMESTAMP) AS {ident(LAST_MODIFIED_COLUMN)}",
        ]
    if row_sql:
        extra.append(f"{row_sql} AS {ident(PARQUET_ROW_COLUMN)}")
    return f"(SELECT *, {', '.join(extra)} FROM {INPUT_VIEW})" if extra else INPUT_VIEW


_NO_INFO = FileInfo(content_key="", last_modified="1970-01-01T00:00:00")


def query_params(
    compiled: CompiledCopy, filename: str, scan_time: str, info: FileInfo | None = None
) -> dict[str, str]:
    """The values of ``source_sql``'s parameters (DuckDB refuses values for parameters it lacks).
    ``info`` is needed when ``compiled.file_info``."""
    values: dict[str, str] = {}
    if compiled.metadata:
        values |= {_FILENAME_PARAM: filename, _SCAN_TIME_PARAM: scan_time}
    if compiled.file_info:
        info = info or _NO_INFO
        values |= {_CONTENT_KEY_PARAM: info.content_key, _LAST_MODIFIED_PARAM: info.last_modified}
    return values


def query_for(
    compiled: CompiledCopy, inp: pa.Table, con: duckdb.DuckDBPyConnection, row_sql: str = ""
) -> FileQuery:
    """Build (once per input shape) the per-file query; binding it checks every expression."""
    key = inp.schema.to_string(show_schema_metadata=False) + "\x00" + row_sql
    cached = compiled.queries.get(key)
    if cached is not None:
        return cached
    src = source_sql(compiled, row_sql)
    probe_params = query_params(compiled, "", "1970-01-01T00:00:00+00:00")
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
