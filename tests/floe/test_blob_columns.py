"""Blobs written under every earlier shape of a table read right under its present one
(floe.blob_columns, decision 81)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from floe.blob_columns import blob_names, blob_schema, fill, read_as, stored_schema, to_blob
from floe.catalog.alter_table import AddColumns, DropColumns, RenameColumn
from floe.catalog.models import Column, Table
from floe.catalog.schema import apply_change
from floe.types import arrow_schema, offset_column

pytestmark = pytest.mark.unit

V1 = Table(
    name="DB.S.T",
    columns=[
        Column(name="ID", type="NUMBER", precision=9, scale=0),
        Column(name="KIND", type="VARCHAR"),
        Column(name="AT", type="TIMESTAMP_TZ"),
    ],
)
AT = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)


def written(table: Table, rows: dict[str, list[object]]) -> pa.Table:
    """A blob as the loader writes it: the transform's rows (table names) under their blob columns."""
    return to_blob(pa.table(rows, schema=arrow_schema(table)), table)


def shown(table: Table, blob: pa.Table) -> list[dict[str, object]]:
    """What a reader of the table now sees of ``blob``."""
    schema = arrow_schema(table)
    return read_as(blob, stored_schema(table, schema), schema).to_pylist()


def test_a_column_added_later_is_null_in_older_blobs() -> None:
    old = written(V1, {"ID": [1], "KIND": ["a"], "AT": [AT], offset_column("AT"): [60]})
    v2 = apply_change(V1, AddColumns([Column(name="SCORE", type="FLOAT")]), has_rows=True)
    new = written(v2, {"ID": [2], "KIND": ["b"], "AT": [AT], offset_column("AT"): [0], "SCORE": [1.5]})
    assert shown(v2, old) == [{"ID": 1, "KIND": "a", "AT": AT, offset_column("AT"): 60, "SCORE": None}]
    assert shown(v2, new)[0]["SCORE"] == 1.5
    assert "SCORE" not in new.column_names  # stored under a name of its own


def test_a_dropped_column_never_resurfaces_under_a_new_one_of_its_name() -> None:
    old = written(V1, {"ID": [1], "KIND": ["secret"], "AT": [AT], offset_column("AT"): [0]})
    v2 = apply_change(V1, DropColumns(["KIND"]), has_rows=True)
    assert "KIND" not in shown(v2, old)[0]
    v3 = apply_change(v2, AddColumns([Column(name="KIND", type="VARCHAR")]), has_rows=True)
    assert shown(v3, old)[0]["KIND"] is None
    new = written(v3, {"ID": [2], "AT": [AT], offset_column("AT"): [0], "KIND": ["fresh"]})
    assert shown(v3, new)[0]["KIND"] == "fresh"


def test_a_renamed_column_and_its_offsets_read_from_older_blobs() -> None:
    old = written(V1, {"ID": [1], "KIND": ["a"], "AT": [AT], offset_column("AT"): [-120]})
    v2 = apply_change(V1, RenameColumn("AT", "WHEN"), has_rows=True)
    v2 = apply_change(v2, AddColumns([Column(name="AT", type="DATE")]), has_rows=True)
    assert blob_names(v2)[offset_column("WHEN")] == offset_column("AT")
    assert shown(v2, old) == [{"ID": 1, "KIND": "a", "WHEN": AT, "AT": None, offset_column("WHEN"): -120}]


def test_fill_takes_batches_and_row_counts_without_columns() -> None:
    """A query naming no column of an older blob still counts its rows."""
    schema = blob_schema(apply_change(V1, AddColumns([Column(name="N", type="FLOAT")]), has_rows=True))
    only_new = pa.schema([schema.field(schema.names[-1])])
    batch = pa.record_batch([pa.array([1, 2, 3])], names=["ID"])
    filled = fill(batch.select([]), only_new)
    assert isinstance(filled, pa.RecordBatch) and filled.num_rows == 3 and filled.column(0).null_count == 3
