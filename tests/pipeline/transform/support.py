"""Tables, COPY compilation and loading helpers shared by the transform tests."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from floe.catalog.models import Column, CopySpec, FileFormat, OnError, Table
from floe.records import LoadOutcome
from floe.types import OFFSET_COLUMN_PREFIX
from pipeline.formats import read_raw
from pipeline.transform import CompiledCopy, apply_copy, compile_copy

ORDERS = Table(
    name="DB.PUBLIC.ORDERS",
    columns=[
        Column(name="ID", type="NUMBER", precision=18, scale=0, nullable=False),
        Column(name="NAME", type="VARCHAR", precision=8),
        Column(name="AMOUNT", type="NUMBER", precision=10, scale=2),
        Column(name="TS", type="TIMESTAMP_NTZ"),
        Column(name="OK", type="BOOLEAN"),
        Column(name="DAY", type="DATE"),
    ],
)


def compile_for(
    table: Table,
    *,
    select: list[str] | None = None,
    columns: list[str] | None = None,
    on_error: OnError = "SKIP_FILE",
    limit: float = 0,
    truncate_columns: bool = False,
    **fmt: Any,
) -> CompiledCopy:
    """compile_copy of a COPY into ``table`` from stage DB.PUBLIC.ST; ``fmt``: FILE_FORMAT options."""
    copy = CopySpec(
        table=table.name,
        stage="DB.PUBLIC.ST",
        columns=columns,
        select=select,
        file_format=FileFormat(**fmt),
        on_error=on_error,
        on_error_limit=limit,
        truncate_columns=truncate_columns,
    )
    return compile_copy(copy, table, copy.file_format.type)


def load_table(
    compiled: CompiledCopy, data: bytes, filename: str = "dir/file.csv"
) -> tuple[pa.Table, LoadOutcome]:
    """Read and transform one file whole: the blob's rows (TIMESTAMP_TZ offsets included) and the
    file's load-history result."""
    raw = read_raw(data, compiled.file_format, path=filename)
    table, result = apply_copy(compiled, raw, filename=filename)
    assert table.schema == compiled.schema
    return table, result


def load(
    compiled: CompiledCopy, data: bytes, filename: str = "dir/file.csv"
) -> tuple[list[dict[str, Any]], LoadOutcome]:
    """Read and transform one file whole; its rows as dicts (the table's columns: TIMESTAMP_TZ
    offsets left out, see ``load_table``), and its load-history result."""
    table, result = load_table(compiled, data, filename)
    names = [n for n in table.column_names if not n.startswith(OFFSET_COLUMN_PREFIX)]
    return table.select(names).to_pylist(), result


VARIANT_TABLE = Table(name="D.S.RAW", columns=[Column(name="SRC", type="VARIANT")])


EVENTS = Table(
    name="D.S.EVENTS",
    columns=[
        Column(name="ID", type="NUMBER", precision=18, scale=0),
        Column(name="CITY", type="VARCHAR"),
        Column(name="TAGS", type="VARIANT"),
        Column(name="AT", type="TIMESTAMP_TZ"),
    ],
)


DOCS = (
    b'{"id": 1, "loc": {"city": "Paris"}, "tags": ["a", "b"], "at": "2024-01-02T03:04:05+01:00"}\n'
    b'{"id": "2", "loc": {"city": null}, "tags": []}\n'
)


def parquet_bytes(table: pa.Table) -> bytes:
    """table as a Parquet file."""
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


BAD_CSV = b"id,name,amount,ts,ok,day\n" + b"".join(
    b"%d,n,1.5,2024-01-01,true,2024-01-01\n" % i if i % 5 else b"%d,n,zz,2024-01-01,true,2024-01-01\n" % i
    for i in range(1, 11)
)  # rows 5 and 10 have a bad AMOUNT: 2 errors in 10 rows


NOTE = Table(name="D.S.NOTES", columns=[Column(name="V", type="VARCHAR")])


NOTE_AND_ROW = Table(
    name="D.S.ROWS", columns=[Column(name="SRC", type="VARIANT"), Column(name="V", type="VARCHAR")]
)


def load_one(select: str, filename: str = "f.csv") -> str:
    """The value the SELECT item ``select`` loads into NOTE from a one-record CSV file."""
    compiled = compile_for(NOTE, select=[select])
    out, result = load(compiled, b"a\n", filename)
    assert result.status == "LOADED", result
    return str(out[0]["V"])
