"""Which blob column holds which table column, whatever the table looked like when the blob was written.

A table's blobs are never rewritten: a column added, dropped or renamed later changes the catalog
only. So every reader maps the table's columns, as they are now, onto each blob's own columns, and
a column's identity in blobs is its *stored name* (``Column.stored``, decision 81):

- a column the table was created with is stored under its name, as it always was;
- a column added later (ALTER TABLE ... ADD COLUMN, or schema evolution) gets a stored name of its
  own, ``__floe_col:<random id>``. Blobs written before it lack that column and read it as NULL,
  even when they hold a column of the same name that was dropped before: its values never
  resurface under the new column;
- a renamed column keeps its stored name, so older blobs read under the new name;
- a dropped column is no longer in the table, so no reader asks for it.

A TIMESTAMP_TZ column's offsets follow it: their blob column is ``offset_column(stored name)``.
Nothing else changes: statistics are kept per blob column, so pruning looks them up by stored name,
and a column a blob lacks has no statistics, so nothing is pruned on it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from floe.types import arrow_schema, offset_column

if TYPE_CHECKING:  # annotations only: floe.catalog imports this module
    from floe.catalog.models import Column, Table

STORED_PREFIX = "__floe_col:"
"""Stored names of the columns added after a table was created start with this."""

_Data = TypeVar("_Data", pa.Table, pa.RecordBatch)


def stored_name(column: Column) -> str:
    """The name of ``column``'s blob column."""
    return column.stored or column.name


def new_stored_name() -> str:
    """A stored name for a column being added: unique among every column the table ever had (a
    random 64-bit id), so no older blob holds a column of that name."""
    return STORED_PREFIX + uuid.uuid4().hex[:16]


def blob_names(table: Table) -> dict[str, str]:
    """Every field of ``arrow_schema(table)`` (offset columns included) -> its blob column's name."""
    names: dict[str, str] = {}
    for column in table.columns:
        stored = stored_name(column)
        names[column.name] = stored
        if column.type == "TIMESTAMP_TZ":
            names[offset_column(column.name)] = offset_column(stored)
    return names


def stored_schema(table: Table, schema: pa.Schema) -> pa.Schema:
    """``schema`` (fields of ``arrow_schema(table)``, by the table's names) with each field renamed
    to its blob column."""
    names = blob_names(table)
    return pa.schema([f.with_name(names[f.name]) for f in schema])


def blob_schema(table: Table, *, offsets: bool = True) -> pa.Schema:
    """The schema blobs of ``table`` are written in now: ``arrow_schema(table)`` by stored names."""
    return stored_schema(table, arrow_schema(table, offsets=offsets))


def to_blob(data: pa.Table, table: Table) -> pa.Table:
    """Rows shaped as ``arrow_schema(table)`` (a transform's output), renamed to their blob columns."""
    names = blob_names(table)
    return data.rename_columns([names[n] for n in data.column_names])


def fill(data: _Data, schema: pa.Schema) -> _Data:
    """``data`` (a blob's columns, of any age) as ``schema`` (blob column names): its columns in the
    schema's order and types, columns the schema lacks dropped, and every column the blob lacks all
    NULL (added after it was written, or an offset column from before offsets were kept, read as UTC:
    ``floe.types.conform``)."""
    arrays: list[Any] = []
    names = set(data.schema.names)
    for f in schema:
        if f.name in names:
            arrays.append(data.column(f.name).cast(f.type))
        else:
            arrays.append(pa.nulls(data.num_rows, f.type))
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    return pa.Table.from_arrays(arrays, schema=schema)


def read_as(data: _Data, stored: pa.Schema, shown: pa.Schema) -> _Data:
    """A blob's ``data`` as ``shown`` (the table's names), given ``stored``, the same fields by
    their blob columns (``stored_schema``)."""
    filled = fill(data, stored)
    if isinstance(filled, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(filled.columns, schema=shown)
    return pa.Table.from_arrays(filled.columns, schema=shown)
