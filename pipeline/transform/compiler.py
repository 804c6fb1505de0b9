"""The COPY compiler: ``compile_copy`` turns a pipe's COPY (plain, or with a SELECT list in Snowflake
SQL) into a ``CompiledCopy``: for each target column, a DuckDB expression over the raw table.

A plain COPY reads CSV fields in order, a JSON document's keys named like the columns (or the whole
document into one VARIANT column), or Parquet columns by name; a SELECT list is compiled item by item
(``expressions.ExprCompiler``). CSV and JSON queries are bound at once, so mistakes fail CREATE PIPE;
Parquet queries are bound per file, against its column types.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import duckdb
import sqlglot
from sqlglot.errors import SqlglotError

from floe.catalog.ddl import PARSE_HEADER_ONLY
from floe.catalog.models import Column, CopySpec, ExternalFunction, FileFormat, Table
from floe.catalog.names import split_parts
from floe.errors import CompilationError, FileLoadError
from floe.types import arrow_schema
from pipeline.formats import COLUMNAR_FORMATS, check_csv_options
from pipeline.transform.connections import COMPILE_LOCK, compile_connection
from pipeline.transform.dialect import ident, lit
from pipeline.transform.expressions import ExprCompiler
from pipeline.transform.messages import column_display, first_line
from pipeline.transform.plan import PARQUET_ROW_COLUMN, ColumnPlan, CompiledCopy, ExternalCall
from pipeline.transform.query import empty_input, query_for


def compile_copy(
    copy: CopySpec,
    table: Table,
    fmt_type: str | None = None,
    functions: Mapping[str, ExternalFunction] | None = None,
) -> CompiledCopy:
    """Compile a pipe's COPY for its target table. Raises CompilationError for what Floe cannot run.

    ``functions``: the external functions the COPY calls, by call key (``copy.functions`` with each
    signature looked up in the catalog); every one it names must be there."""
    fmt = copy.file_format
    kind = (fmt_type or fmt.type).upper()
    _check_format(kind, fmt)
    if kind == "CSV" and fmt.parse_header and copy.match_by_column_name == "NONE":
        raise CompilationError(PARSE_HEADER_ONLY)  # CREATE PIPE refuses it too (services.sql)
    functions = functions or {}
    missing = sorted(sig for key, sig in copy.functions.items() if key not in functions)
    if missing:
        raise CompilationError(f"external function {missing[0]} of the pipe is not available")
    planner = _Planner(copy, table, kind, functions)
    plans = planner.plans()
    output = tuple(next(k for k, p in enumerate(plans) if p.column.name == c.name) for c in table.columns)
    by_position = kind == "CSV" and copy.select is None and not fmt.parse_header  # fields in order
    compiled = CompiledCopy(
        table_name=planner.short,
        format=kind,
        file_format=fmt,
        on_error=copy.on_error,
        on_error_limit=copy.on_error_limit,
        schema=arrow_schema(table),
        plans=tuple(plans),
        output=output,
        csv_width=len(planner.targets) if by_position else None,
        max_field=planner.max_field,
        parquet_columns=tuple(planner.parquet_columns),
        parquet_row=planner.parquet_row,
        metadata=planner.metadata,
        file_info=planner.file_info,
        calls=tuple(planner.calls),
        exact_names=copy.match_by_column_name == "CASE_SENSITIVE",
        truncate_columns=copy.truncate_columns,
    )
    if kind in ("CSV", "JSON"):
        # The raw table's shape is known now: bind the query once, so mistakes fail CREATE PIPE.
        _bind(compiled)
    return compiled


def _check_format(kind: str, fmt: FileFormat) -> None:
    if kind not in ("CSV", "JSON", *COLUMNAR_FORMATS):
        raise CompilationError(f"Unsupported file format type '{kind}'")
    if kind == "CSV":
        try:
            check_csv_options(fmt, "")
        except FileLoadError as exc:
            raise CompilationError(exc.message) from exc
    elif fmt.encoding != "UTF8":  # a pipe's ENCODING over a stage's TYPE: only CSV converts
        raise CompilationError(f"ENCODING applies to TYPE = CSV only; TYPE = {kind} is read as UTF-8")


def _bind(compiled: CompiledCopy) -> None:
    with COMPILE_LOCK:
        con = compile_connection()
        try:
            query_for(compiled, empty_input(compiled), con)
        except duckdb.Error as exc:
            raise CompilationError(first_line(str(exc))) from exc


def _resolve_targets(copy: CopySpec, table: Table) -> list[Column]:
    if not copy.columns:
        return list(table.columns)
    targets: list[Column] = []
    for name in copy.columns:
        col = _target_column(table, name)
        if col in targets:
            raise CompilationError(f"duplicate column name '{col.name}'")
        targets.append(col)
    return targets


def _target_column(table: Table, name: str) -> Column:
    """The column a COPY column list names: exactly, else as Snowflake resolves identifiers."""
    exact = next((c for c in table.columns if c.name == name), None)
    if exact is not None:
        return exact
    try:
        return table.column(name)
    except KeyError:
        raise CompilationError(f"invalid identifier '{name}'") from None


def _json_key_sql(name: str, as_json: bool, exact: bool = False) -> str:
    """Plain JSON COPY into several columns: the document's key named like the column, any case
    (``exact``: in the column's case only, MATCH_BY_COLUMN_NAME = CASE_SENSITIVE)."""
    fn = "json_extract" if as_json else "json_extract_string"
    doc = ident("c1")
    if exact:
        # A quoted path step names one key whatever it holds: dots, brackets, quotes (escaped).
        return f"{fn}({doc}, {lit('$.' + json.dumps(name))})"
    lower = name.lower()
    tries = [f"{fn}({doc}, {lit(lower)})"]
    if name != lower:
        tries.append(f"{fn}({doc}, {lit(name)})")
    tries.append(f"{fn}({doc}, list_filter(json_keys({doc}), lambda k: lower(k) = {lit(lower)})[1])")
    return f"COALESCE({', '.join(tries)})"


class _Planner:
    """Builds the plans of one COPY, noting what they read from the raw table."""

    def __init__(
        self, copy: CopySpec, table: Table, kind: str, functions: Mapping[str, ExternalFunction]
    ) -> None:
        self.copy = copy
        self.functions = functions
        self.calls: list[ExternalCall] = []
        self.table = table
        self.kind = kind
        self.short = split_parts(table.name)[-1].upper()
        self.ordinals = {c.name: i + 1 for i, c in enumerate(table.columns)}
        self.targets = _resolve_targets(copy, table)
        if copy.select is not None and len(copy.select) != len(self.targets):
            raise CompilationError(
                "Insert value list does not match column list "
                f"expecting {len(self.targets)} but got {len(copy.select)}"
            )
        self.parquet_columns: list[str] = []
        self.parquet_row = False
        self.metadata = False
        self.file_info = False
        self.max_field = 0

    def plans(self) -> list[ColumnPlan]:
        """Loaded columns in SELECT-list order, then the table's other columns (not loaded)."""
        plans = [self._plan(i, col) for i, col in enumerate(self.targets)]
        plans += [
            ColumnPlan(col, *self._place(col), None) for col in self.table.columns if col not in self.targets
        ]
        return plans

    def _place(self, col: Column) -> tuple[int, str]:
        """col's ordinal in the table, and its name in error messages."""
        ordinal = self.ordinals[col.name]
        return ordinal, column_display(self.short, col, ordinal)

    def _plan(self, i: int, col: Column) -> ColumnPlan:
        if self.copy.select is not None:
            return self._select_plan(self.copy.select[i], col)
        if self.copy.match_by_column_name != "NONE":
            return self._by_name(col)
        if self.kind == "CSV":
            self.max_field = len(self.targets)
            return ColumnPlan(col, *self._place(col), ident(f"c{i + 1}"), fields=(i + 1,))
        if self.kind == "JSON":
            # One VARIANT column takes the document; several columns take the keys named like them.
            is_variant = col.type == "VARIANT"
            whole = len(self.targets) == 1 and is_variant
            doc = ident("c1") if whole else _json_key_sql(col.name, is_variant)
            return ColumnPlan(col, *self._place(col), doc, json_text=is_variant)
        # Parquet, likewise: one VARIANT column takes the whole row; several take the file's columns.
        if len(self.targets) == 1 and col.type == "VARIANT":
            self.parquet_row = True
            return ColumnPlan(col, *self._place(col), ident(PARQUET_ROW_COLUMN))
        name = col.name.lower()
        self.parquet_columns.append(name)
        return ColumnPlan(col, *self._place(col), ident(name))

    def _by_name(self, col: Column) -> ColumnPlan:
        """MATCH_BY_COLUMN_NAME: the file's column (JSON: top-level key; CSV: the column its header
        names, PARSE_HEADER) named like ``col``, or the METADATA$ column INCLUDE_METADATA gives it
        (which wins over a file column of that name)."""
        meta = self.copy.include_metadata.get(col.name)
        if meta is not None:
            return self._select_plan(meta, col)
        exact = self.copy.match_by_column_name == "CASE_SENSITIVE"
        if self.kind == "JSON":
            is_variant = col.type == "VARIANT"
            key = _json_key_sql(col.name, is_variant, exact)
            return ColumnPlan(col, *self._place(col), key, json_text=is_variant)
        name = col.name if exact else col.name.lower()
        if name not in self.parquet_columns:
            self.parquet_columns.append(name)
        return ColumnPlan(col, *self._place(col), ident(name))

    def _select_plan(self, item: str, col: Column) -> ColumnPlan:
        try:
            node = sqlglot.parse_one(item, read="snowflake")
        except SqlglotError as exc:
            raise CompilationError(f"syntax error in '{item}': {exc}") from exc
        comp = ExprCompiler(self.kind, col, self.copy.file_format, self.functions, self.calls)
        pre, bare, lenient = comp.compile(node)
        self.parquet_columns += [c for c in comp.parquet_columns if c not in self.parquet_columns]
        self.parquet_row = self.parquet_row or comp.parquet_row
        self.metadata = self.metadata or comp.metadata
        self.file_info = self.file_info or comp.file_info
        self.max_field = max([self.max_field, *comp.fields])
        return ColumnPlan(
            col,
            *self._place(col),
            pre,
            bare=bare,
            volatile=comp.volatile,
            fields=tuple(comp.fields),
            json_text=comp.json_text,
            lenient=lenient,
            calls=tuple(comp.call_indexes),
        )
