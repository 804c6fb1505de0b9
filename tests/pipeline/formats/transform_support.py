"""COPY compilation and loading for the format tests that run a file through the transform.

(``tests.pipeline.transform.support`` has the same for the transform tests; importing it from here
would import it before its package's conftest registers it for assertion rewriting.)"""

from __future__ import annotations

from typing import Any

from floe.catalog.models import Column, CopySpec, FileFormat, OnError, Table
from floe.records import LoadOutcome
from pipeline.formats import read_raw
from pipeline.transform import CompiledCopy, apply_copy, compile_copy

VARIANT_TABLE = Table(name="D.S.RAW", columns=[Column(name="SRC", type="VARIANT")])


def compile_for(
    table: Table, *, select: list[str] | None = None, on_error: OnError = "SKIP_FILE", **fmt: Any
) -> CompiledCopy:
    """compile_copy of a COPY into ``table`` from stage DB.PUBLIC.ST; ``fmt``: FILE_FORMAT options."""
    copy = CopySpec(
        table=table.name,
        stage="DB.PUBLIC.ST",
        select=select,
        file_format=FileFormat(**fmt),
        on_error=on_error,
    )
    return compile_copy(copy, table, copy.file_format.type)


def load(
    compiled: CompiledCopy, data: bytes, filename: str = "f"
) -> tuple[list[dict[str, Any]], LoadOutcome]:
    """Read and transform one file whole; its rows as dicts, and its load-history result."""
    raw = read_raw(data, compiled.file_format, path=filename)
    table, result = apply_copy(compiled, raw, filename=filename)
    return table.to_pylist(), result
