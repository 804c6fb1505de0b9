"""Parquet: decompressed bytes -> the file's own columns and types, one row per Parquet row.

Parquet has no lines: a row's line is its row number. A string value that is not UTF-8 is a
RowError of its row.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import PartTooLarge
from pipeline.formats.raw import CODE_INVALID_UTF8, RawFile, RowError, empty_raw, show_invalid

_PARQUET_SOURCE = re.compile(r"^Could not open Parquet input source '[^']*': ")


def _parquet_inflated(parquet: pq.ParquetFile) -> int:
    """Bytes the file's column chunks take once their pages are decompressed, from its footer."""
    md = parquet.metadata
    return sum(
        md.row_group(g).column(c).total_uncompressed_size
        for g in range(md.num_row_groups)
        for c in range(md.num_columns)
    )


def read_parquet(body: bytes, fmt: FileFormat, path: str, max_bytes: int | None = None) -> RawFile:
    if not body:
        return empty_raw([], "PARQUET", path, b"", fmt)
    try:
        parquet = pq.ParquetFile(pa.BufferReader(body))
        # Parquet's own page compression is a bomb too: its footer says how far it inflates, and
        # pyarrow allocates pages by their headers' sizes, which must agree with the footer's.
        if max_bytes is not None and _parquet_inflated(parquet) > max_bytes:
            raise PartTooLarge(path, max_bytes, record=False, kind="Parquet")
        table = parquet.read()
        table.schema.names  # noqa: B018 - pyarrow decodes names lazily: a bad one raises only here
    except UnicodeDecodeError as exc:
        raise FileLoadError("Error parsing the parquet file: a column name is not UTF-8", file=path) from exc
    except (pa.ArrowException, OSError, ValueError) as exc:
        detail = _PARQUET_SOURCE.sub("", str(exc))  # the source is Floe's in-memory buffer
        raise FileLoadError(f"Error parsing the parquet file: {detail}", file=path) from exc
    n = table.num_rows
    bad = _invalid_utf8_rows(table)
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
    return RawFile(table, rows, rows, errors, n, "PARQUET", path, b"", fmt, table.num_columns)


def _has_text(t: pa.DataType) -> bool:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
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
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        raw = cell.view(pa.large_binary() if pa.types.is_large_string(t) else pa.binary())[0].as_py()
        return f"Invalid UTF8 detected in string '{show_invalid(raw.decode('utf-8', 'surrogateescape'))}'"
    return f"Invalid UTF8 detected in a string inside column '{column}'"
