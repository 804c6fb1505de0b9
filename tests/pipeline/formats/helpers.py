"""Shorthands the format tests share."""

from __future__ import annotations

from typing import Any

from floe.catalog.models import FileFormat
from pipeline.formats import RawFile, read_raw


def csv(data: bytes, columns: int | None = None, max_bytes: int | None = None, **options: Any) -> RawFile:
    """``data`` read as a staged CSV file with these FileFormat options."""
    return read_raw(data, FileFormat(**options), path="d/f.csv", columns=columns, max_bytes=max_bytes)


def rows(raw: RawFile) -> list[tuple[Any, ...]]:
    """The raw table's rows as tuples."""
    return [tuple(r.values()) for r in raw.table.to_pylist()]
