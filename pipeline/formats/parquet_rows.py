"""Parquet: decompressed bytes -> the file's own columns, one row per Parquet row.

Parquet has no lines: a row's line is its row number. The columns keep their types, but for what
Snowflake's Parquet reader (the default one, not the vectorized scanner) makes of them:

- BINARY_AS_TEXT = TRUE (the default): a BYTE_ARRAY or FIXED_LEN_BYTE_ARRAY column without a logical
  (or converted) type is UTF-8 text; FALSE: binary, which reads as hex text (``48690A``), as
  Snowflake shows a BINARY value in a VARIANT.
- USE_LOGICAL_TYPE = FALSE (the default) follows Snowflake's table for timestamps and times: a
  TIMESTAMP adjusted to UTC in MILLIS or MICROS is a TIMESTAMP_NTZ (its UTC wall clock); one not
  adjusted to UTC is a TIMESTAMP_LTZ if the file also gives the legacy converted type, else its
  stored integer; NANOS timestamps are integers; a TIME is a time if it has a converted type, else
  an integer. USE_LOGICAL_TYPE = TRUE: UTC-adjusted timestamps are TIMESTAMP_LTZ, the others NTZ,
  and every TIME a time. INT96 timestamps are NTZ either way.
- USE_VECTORIZED_SCANNER = FALSE (the default) reads as Snowflake's default reader
  (``reader_shapes``): a MAP, at any depth, is the struct Parquet stores, ``{key_value: [{key,
  value}, ...]}``, and a list's NULL elements are left out (the documented example's
  ``phone_numbers`` loses its null). The NULL fields of structs and of ``$1`` are left out when
  they become JSON, in the transform (``pipeline.transform.query.reader_text``; decision 86).
- USE_VECTORIZED_SCANNER = TRUE reads as Snowflake's vectorized scanner: BINARY_AS_TEXT is taken as
  FALSE and USE_LOGICAL_TYPE as TRUE whatever they say, and INT96 timestamps are TIMESTAMP_LTZ;
  maps stay maps (objects, ``{"k1": "v1"}``, in JSON) and NULL values are shown (decision 83).

The shared last step of Parquet, Avro and ORC (``columnar_raw``): binary values become upper-case
hex text, and a string that is not UTF-8 is a RowError of its row, or with
REPLACE_INVALID_CHARACTERS = TRUE has each invalid sequence replaced by U+FFFD.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import TransportError
from pipeline.formats.parquet_batches import ParquetBatches, read_whole
from pipeline.formats.raw import CODE_INVALID_UTF8, RawFile, RowError, empty_raw, show_invalid

_PARQUET_SOURCE = re.compile(r"^Could not open Parquet input source '[^']*': ")

COLUMNAR_FORMATS = ("PARQUET", "AVRO", "ORC")
"""The formats whose raw table is the file's own columns (``$1:col`` reads one, ``$1`` the row)."""

LeafFn = Callable[[pa.Array], pa.Array]
"""A new array for one leaf array of a column (same length)."""


def read_parquet(body: bytes, fmt: FileFormat, path: str, max_bytes: int | None = None) -> RawFile:
    """A Parquet file read whole, a batch of rows at a time, failing (PartTooLarge) as soon as its
    values decode past ``max_bytes`` (``parquet_batches``): its footer's sizes count encoded pages,
    and a dictionary, runs of NULLs or nesting make far more of them."""
    if not body:
        return empty_raw([], "PARQUET", path, b"", fmt)
    source = pa.BufferReader(body)
    parquet = open_parquet(source, path)
    groups = range(parquet.metadata.num_row_groups)
    return parquet_raw(
        read_whole(ParquetBatches(parquet, source, path), groups, max_bytes), parquet, fmt, path
    )


def open_parquet(source: pa.NativeFile, path: str) -> pq.ParquetFile:
    """A Parquet file's footer read from ``source`` (bytes in memory, or a file read by ranges)."""
    try:
        parquet = pq.ParquetFile(source)
        parquet.schema_arrow.names  # noqa: B018 - pyarrow decodes names lazily: a bad one raises only here
        return parquet
    except TransportError:
        raise  # reading the object failed, not its content: the batch is replayed
    except UnicodeDecodeError as exc:
        raise FileLoadError("Error parsing the parquet file: a column name is not UTF-8", file=path) from exc
    except (pa.ArrowException, OSError, ValueError) as exc:
        detail = _PARQUET_SOURCE.sub("", str(exc))  # the source is Floe's in-memory buffer
        raise FileLoadError(f"Error parsing the parquet file: {detail}", file=path) from exc


def read_parquet_groups(
    parquet: pq.ParquetFile, source: pa.NativeFile, groups: Sequence[int], fmt: FileFormat, path: str
) -> RawFile:
    """Row groups ``groups`` of a Parquet file open on ``source`` as one RawFile, unbounded (the
    caller has bounded them)."""
    return parquet_raw(read_whole(ParquetBatches(parquet, source, path), groups, None), parquet, fmt, path)


def parquet_raw(table: pa.Table, parquet: pq.ParquetFile, fmt: FileFormat, path: str) -> RawFile:
    """Decoded rows of a Parquet file as a RawFile numbered from 1: its logical types as Snowflake
    reads them, maps and lists as its reader shows them (USE_VECTORIZED_SCANNER = FALSE)."""
    table = _snowflake_types(table, parquet.schema, fmt)
    if not fmt.use_vectorized_scanner:
        table = reader_shapes(table)
    return columnar_raw(table, "PARQUET", path, fmt)


# ---------------------------------------------------------------------------------------------
# Parquet's logical types as Snowflake reads them


def _snowflake_types(table: pa.Table, schema: pq.ParquetSchema, fmt: FileFormat) -> pa.Table:
    """BINARY_AS_TEXT and USE_LOGICAL_TYPE applied to each leaf column (Parquet's leaf order is the
    depth-first order of the Arrow columns' leaves)."""
    fns: list[LeafFn | None] = [_leaf_rule(schema.column(i), fmt) for i in range(len(schema))]
    if not any(fns) or sum(len(_leaf_types(t)) for t in table.schema.types) != len(fns):
        return table  # nothing to change (or a shape pyarrow read in its own way: left as read)
    return map_leaves(table, lambda t, i: fns[i])


def _leaf_rule(col: pq.ColumnSchema, fmt: FileFormat) -> LeafFn | None:
    """What becomes of one Parquet leaf column's values; None: they stay as pyarrow reads them."""
    # USE_VECTORIZED_SCANNER = TRUE: "BINARY_AS_TEXT is always treated as FALSE and USE_LOGICAL_TYPE
    # as TRUE", and INT96 is a TIMESTAMP_LTZ (copy-into-table).
    vectorized = fmt.use_vectorized_scanner
    use_logical_type = fmt.use_logical_type or vectorized
    logical = col.logical_type.type
    converted = col.converted_type != "NONE"
    if col.physical_type == "INT96":
        return _as_ltz if vectorized else None  # pyarrow reads it as a timestamp without a zone: NTZ
    if logical == "NONE" and not converted and col.physical_type in ("BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"):
        # BINARY_AS_TEXT = FALSE: binary, hex text in columnar_raw
        return _as_text if fmt.binary_as_text and not vectorized else None
    if logical not in ("TIMESTAMP", "TIME"):
        return None
    info = json.loads(col.logical_type.to_json())
    utc = bool(info.get("isAdjustedToUTC"))
    nanos = info.get("timeUnit") == "nanoseconds"
    if logical == "TIME":
        return None if use_logical_type or (converted and not nanos) else _as_integer
    if use_logical_type:
        return _as_ltz if utc else _as_ntz
    if nanos:
        return _as_integer
    if utc:
        return _as_ntz
    return _as_ltz if converted else _as_integer


def _as_text(arr: pa.Array) -> pa.Array:
    """Binary read as UTF-8 text (invalid sequences are found later, by ``columnar_raw``)."""
    if pa.types.is_fixed_size_binary(arr.type):
        arr = arr.cast(pa.binary())
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
        return arr
    return pc.cast(arr, options=pc.CastOptions(pa.string(), allow_invalid_utf8=True))


def _as_integer(arr: pa.Array) -> pa.Array:
    """A timestamp or time as the integer Parquet stores (units since the epoch or midnight)."""
    if pa.types.is_time32(arr.type):
        return arr.cast(pa.int32()).cast(pa.int64())
    if pa.types.is_time64(arr.type) or pa.types.is_timestamp(arr.type):
        return arr.cast(pa.int64())
    return arr


def _as_ntz(arr: pa.Array) -> pa.Array:
    """TIMESTAMP_NTZ: a timestamp without a time zone (a UTC instant becomes its UTC wall clock)."""
    if pa.types.is_timestamp(arr.type) and arr.type.tz is not None:
        return arr.cast(pa.timestamp(arr.type.unit))
    return arr


def _as_ltz(arr: pa.Array) -> pa.Array:
    """TIMESTAMP_LTZ: an instant (a wall clock without a zone is taken as UTC, the session's zone)."""
    if pa.types.is_timestamp(arr.type) and arr.type.tz != "UTC":
        return arr.cast(pa.timestamp(arr.type.unit, tz="UTC"))
    return arr


# ---------------------------------------------------------------------------------------------
# Maps and lists as Snowflake's default Parquet reader shows them (USE_VECTORIZED_SCANNER = FALSE)


def reader_shapes(table: pa.Table) -> pa.Table:
    """table with every map (at any depth) a struct ``{key_value: [{key, value}, ...]}``, as the
    Parquet file stores it, and the NULL elements of every list left out; a column with neither
    maps nor lists is kept as it is (no copy)."""
    columns: list[pa.ChunkedArray] = []
    for column in table.columns:
        if not _has_map_or_list(column.type):
            columns.append(column)
            continue
        chunks = [_reshape(chunk) for chunk in column.chunks] or [_reshape(pa.array([], column.type))]
        columns.append(pa.chunked_array(chunks))
    return pa.table(columns, names=table.column_names)


def _has_map_or_list(t: pa.DataType) -> bool:
    if pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        return True
    return pa.types.is_struct(t) and any(_has_map_or_list(t.field(i).type) for i in range(t.num_fields))


def _reshape(arr: pa.Array) -> pa.Array:
    """One array of ``reader_shapes``: maps as key_value structs, lists without NULL elements."""
    t = arr.type
    if not _has_map_or_list(t):
        return arr
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(t):
        flat = arr.flatten()  # offset-adjusted; the struct's own nulls come back by mask
        children = [_reshape(child) for child in flat]
        if all(new is old for new, old in zip(children, flat, strict=True)):
            return arr
        # with_type keeps each field's nullability and metadata (Parquet field ids): every chunk,
        # changed or not, keeps one type.
        fields = [t.field(i).with_type(c.type) for i, c in enumerate(children)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    if pa.types.is_map(t):
        # Parquet's MAP is a repeated group key_value of key and value: Snowflake shows it as stored.
        keys, items = (_reshape(child) for child in arr.values.flatten())
        entries = pa.StructArray.from_arrays([keys, items], names=["key", "value"])
        key_value = pa.ListArray.from_arrays(arr.offsets, entries)
        return pa.StructArray.from_arrays([key_value], names=["key_value"], mask=mask)
    child = arr.values  # the whole child, as the offsets index it
    values = _reshape(child)
    if values is child and not values.null_count:
        return arr
    offsets = arr.offsets
    if values.null_count:
        # "does not explicitly show NULL values": the documented example's array loses its null.
        kept = values.is_valid()
        before = np.concatenate(([0], np.cumsum(kept.to_numpy(zero_copy_only=False), dtype=np.int64)))
        offsets = pa.array(before[offsets.to_numpy()], offsets.type)
        values = values.filter(kept)
    kind = pa.list_ if pa.types.is_list(t) else pa.large_list
    cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
    return cls.from_arrays(offsets, values, type=kind(t.value_field.with_type(values.type)), mask=mask)


# ---------------------------------------------------------------------------------------------
# Leaf columns of nested Arrow data


def _leaf_types(t: pa.DataType) -> list[pa.DataType]:
    """The leaf types under t, depth first (a map's keys, then its values)."""
    if pa.types.is_struct(t):
        return [leaf for i in range(t.num_fields) for leaf in _leaf_types(t.field(i).type)]
    if pa.types.is_map(t):
        return _leaf_types(t.key_type) + _leaf_types(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _leaf_types(t.value_type)
    return [t]


def map_leaves(table: pa.Table, rule: Callable[[pa.DataType, int], LeafFn | None]) -> pa.Table:
    """table with each leaf array replaced by ``rule(leaf type, leaf index)(array)``; a column none
    of whose leaves has a rule is kept as it is (no copy)."""
    columns: list[pa.ChunkedArray] = []
    index = 0
    for column in table.columns:
        leaves = _leaf_types(column.type)
        fns = [rule(t, index + k) for k, t in enumerate(leaves)]
        index += len(leaves)
        if not any(fns):
            columns.append(column)
            continue
        chunks = [_map_array(chunk, fns, 0)[0] for chunk in column.chunks]
        if not chunks:
            chunks = [_map_array(pa.array([], column.type), fns, 0)[0]]
        columns.append(pa.chunked_array(chunks))
    return pa.table(columns, names=table.column_names)


def _map_array(arr: pa.Array, fns: list[LeafFn | None], index: int) -> tuple[pa.Array, int]:
    """arr with its leaves from ``fns[index:]`` applied; returns it and the next leaf index."""
    t = arr.type
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(t):
        children: list[pa.Array] = []
        for child in arr.flatten():  # offset-adjusted; the struct's own nulls come back by mask
            mapped, index = _map_array(child, fns, index)
            children.append(mapped)
        fields = [pa.field(t.field(i).name, c.type) for i, c in enumerate(children)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask), index
    if pa.types.is_map(t):
        entries = arr.values.flatten()  # keys, items: the whole children, as the offsets index them
        keys, index = _map_array(entries[0], fns, index)
        items, index = _map_array(entries[1], fns, index)
        return pa.MapArray.from_arrays(arr.offsets, keys, items, mask=mask), index
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        values, index = _map_array(arr.values, fns, index)
        kind = pa.list_ if pa.types.is_list(t) else pa.large_list
        list_type = kind(pa.field(t.value_field.name, values.type))
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        return cls.from_arrays(arr.offsets, values, type=list_type, mask=mask), index
    fn = fns[index]
    return (arr if fn is None else fn(arr)), index + 1


# ---------------------------------------------------------------------------------------------
# The raw file of a columnar format (Parquet, Avro, ORC)


def columnar_raw(table: pa.Table, kind: str, path: str, fmt: FileFormat) -> RawFile:
    """The RawFile of a table read from a Parquet, Avro or ORC file: binary as hex text, and strings
    that are not UTF-8 replaced (REPLACE_INVALID_CHARACTERS) or made errors of their rows."""
    table = map_leaves(table, lambda t, _: _hex if _is_binary(t) else None)
    if fmt.replace_invalid_characters:
        table = map_leaves(table, lambda t, _: _replace_invalid if _is_text(t) else None)
    n = table.num_rows
    bad = {} if fmt.replace_invalid_characters else _invalid_utf8_rows(table)
    errors = [
        RowError(
            row_number=i + 1, line=i + 1, character=1, column_name=None, message=m, code=CODE_INVALID_UTF8
        )
        for i, m in sorted(bad.items())
    ]
    numbers = np.arange(1, n + 1, dtype=np.int64)
    if bad:
        keep = np.ones(n, dtype=bool)
        keep[list(bad)] = False
        table = table.filter(pa.array(keep))
        numbers = numbers[keep]
    rows = pa.array(numbers)
    return RawFile(table, rows, rows, errors, n, kind, path, b"", fmt, table.num_columns)


def _is_binary(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t))


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _hex(arr: pa.Array) -> pa.Array:
    """Binary values as upper-case hex text, as Snowflake shows BINARY (BINARY_OUTPUT_FORMAT HEX)."""
    return pa.array([None if v is None else v.hex().upper() for v in arr.to_pylist()], pa.string())


def _replace_invalid(arr: pa.Array) -> pa.Array:
    """Strings with each invalid UTF-8 sequence replaced by U+FFFD (valid arrays are returned as they are)."""
    try:
        arr.validate(full=True)
        return arr
    except pa.ArrowInvalid:
        pass
    raw = arr.view(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
    return pa.array([None if v is None else v.decode("utf-8", "replace") for v in raw.to_pylist()], arr.type)


def _has_text(t: pa.DataType) -> bool:
    if _is_text(t):
        return True
    return any(_has_text(t.field(i).type) for i in range(t.num_fields))


def _invalid_utf8_rows(table: pa.Table) -> dict[int, str]:
    """Rows holding a string that is not UTF-8, with their message (the first such column's).

    pyarrow does not check Parquet strings, and one such value in a blob would make DuckDB refuse
    every later query of the table; so the row is an error here, as in Snowflake.
    """
    bad: dict[int, str] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        if not _has_text(col.type):
            continue
        try:
            col.validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        offset = 0
        for chunk in col.chunks:  # rare: find the offending rows one by one
            for j in range(len(chunk)):
                cell = chunk.slice(j, 1)
                try:
                    cell.validate(full=True)
                except pa.ArrowInvalid:
                    bad.setdefault(offset + j, _utf8_message(cell, name))
            offset += len(chunk)
    return bad


def _utf8_message(cell: pa.Array, column: str) -> str:
    t = cell.type
    if _is_text(t):
        raw = cell.view(pa.large_binary() if pa.types.is_large_string(t) else pa.binary())[0].as_py()
        return f"Invalid UTF8 detected in string '{show_invalid(raw.decode('utf-8', 'surrogateescape'))}'"
    return f"Invalid UTF8 detected in a string inside column '{column}'"
