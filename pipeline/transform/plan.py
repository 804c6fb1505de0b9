"""The compiled form of a pipe's COPY: plain data, cheap to pickle and to rebuild on each worker.

A ``CompiledCopy`` holds, for each target column, a ``ColumnPlan``: a DuckDB expression over the
raw table (the file's records as text columns ``c<n>``, a JSON document ``c1``, or Parquet columns),
and it caches the per-file SQL built from those plans (``FileQuery``) by input shape. The names
below are the columns that SQL reads beyond the file's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from floe.catalog.models import Column, FileFormat

INPUT_VIEW = "__floe_input"
ROW_NUMBER_COLUMN = "__floe_rn"
# Columns every per-file query's source adds to INPUT_VIEW (see ``query.source_sql``): the file's name
# and scan time come in as prepared-statement parameters, never as text in the SQL, and the Parquet
# whole row is built from the file's own column names, quoted by sqlglot.
FILENAME_COLUMN = "__floe_filename"
SCAN_TIME_COLUMN = "__floe_scan_time"
PARQUET_ROW_COLUMN = "__floe_row"
CONTENT_KEY_COLUMN = "__floe_content_key"
LAST_MODIFIED_COLUMN = "__floe_last_modified"
EXTERNAL_COLUMN_PREFIX = "__floe_ef_"
"""Input columns holding the values of the COPY's external-function calls (``ExternalCall``)."""


@dataclass(frozen=True)
class ExternalCall:
    """One external-function call of a COPY: its arguments are computed over the file's rows first,
    sent to the remote service in batches, and its values added to the input as ``column``, which
    the column plans read where the call was."""

    column: str
    """The input column of its values."""
    key: str
    """The call as written (``floe.catalog.calls.call_key``): the pipe's CopySpec.functions key."""
    args: tuple[str, ...]
    """DuckDB SQL of each argument over the query's source, converted to its parameter's type."""
    params: tuple[Column, ...]
    """The parameters' types."""
    returns: Column
    """The return type."""


@dataclass(frozen=True)
class FileInfo:
    """What the store says of a staged file, for METADATA$FILE_CONTENT_KEY and
    METADATA$FILE_LAST_MODIFIED (the loader asks only when the COPY reads them: ``file_info``)."""

    content_key: str
    """The object's ETag, without its quotes: a checksum of its content, as Snowflake's key is."""
    last_modified: str
    """When it was last written, ISO 8601 in UTC without an offset (a TIMESTAMP_NTZ)."""


@dataclass(frozen=True)
class ColumnPlan:
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
    calls: tuple[int, ...] = ()
    """The external calls (indexes into CompiledCopy.calls) the expression makes: a row whose
    call failed is an error of this column."""


@dataclass(frozen=True)
class FileQuery:
    """The per-file SQL for one shape of input table."""

    sql: str
    """The whole query; reads the view INPUT_VIEW."""
    pre_try: tuple[str | None, ...]
    """Per plan, layer-1 SQL (TRY-wrapped unless bare/volatile)."""
    status: tuple[int, ...]
    """Plans that have a status column ``e<k>``."""
    slow: tuple[str | None, ...] = ()
    """Per plan, the full conversion of column ``p`` for rows the main query could not convert."""
    slow_offset: tuple[str | None, ...] = ()
    """Per TIMESTAMP_TZ plan with a slow path, the offset of ``p`` converted to ``v`` on those rows."""


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
    """Output schema, ``floe.types.arrow_schema(table)``: the table's columns (output ``o<i>``), then
    the offset columns of its TIMESTAMP_TZ columns."""
    plans: tuple[ColumnPlan, ...]
    """Loaded columns in SELECT-list order (that order decides a row's first error), then the rest."""
    output: tuple[int, ...]
    """For each table column in table order, the index of its plan."""
    csv_width: int | None
    """Plain CSV COPY: fields per record (the number of target columns)."""
    max_field: int
    """CSV: highest $n read (the raw table is padded with NULL columns up to it)."""
    parquet_columns: tuple[str, ...]
    """Parquet: file columns read, lower-cased (matched in any case) unless ``exact_names``."""
    parquet_row: bool
    """Parquet: some expression reads the whole row ($1)."""
    metadata: bool = False
    """Some expression reads METADATA$FILENAME or METADATA$START_SCAN_TIME (query parameters)."""
    calls: tuple[ExternalCall, ...] = ()
    """External-function calls, in the order they are made (a call in another's arguments first)."""
    file_info: bool = False
    """Some expression reads METADATA$FILE_CONTENT_KEY or METADATA$FILE_LAST_MODIFIED."""
    exact_names: bool = False
    """MATCH_BY_COLUMN_NAME = CASE_SENSITIVE: ``parquet_columns`` match the file's names exactly."""
    truncate_columns: bool = False
    """TRUNCATECOLUMNS = TRUE (ENFORCE_LENGTH = FALSE): VARCHAR(n) values are cut to n characters."""
    queries: dict[str, FileQuery] = field(default_factory=dict, compare=False, repr=False)
    """Per-process cache of per-file SQL, keyed by input schema."""
