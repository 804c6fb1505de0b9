"""MATCH_BY_COLUMN_NAME and INCLUDE_METADATA (Snowflake's COPY INTO <table> reference), and the
METADATA$ columns a file's ETag and last-modified time fill."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from floe.catalog.models import Column, CopySpec, FileFormat, MatchBy, Table
from pipeline.formats import read_raw
from pipeline.transform import CompiledCopy, FileInfo, apply_copy, compile_copy
from tests.pipeline.transform.support import parquet_bytes

pytestmark = pytest.mark.unit

PEOPLE = Table(
    name="D.S.PEOPLE",
    columns=[
        Column(name="ID", type="NUMBER", precision=18, scale=0),
        Column(name="Name", type="VARCHAR"),
        Column(name="CITY", type="VARCHAR"),
        Column(name="SRC", type="VARCHAR"),
        Column(name="SEEN", type="TIMESTAMP_NTZ"),
    ],
)


def compiled(kind: str, match: MatchBy, include: dict[str, str] | None = None) -> CompiledCopy:
    spec = CopySpec(
        table=PEOPLE.name,
        stage="D.S.ST",
        file_format=FileFormat(type=kind),  # type: ignore[arg-type]
        match_by_column_name=match,
        include_metadata=include or {},
    )
    return compile_copy(spec, PEOPLE, kind)


def rows(copy: CompiledCopy, data: bytes, info: FileInfo | None = None) -> list[dict[str, Any]]:
    raw = read_raw(data, copy.file_format, path="in/f")
    table, result = apply_copy(copy, raw, filename="in/f", info=info)
    assert result.status == "LOADED", result
    return table.to_pylist()


JSON = b'{"ID": 1, "name": "ann", "city": "Oslo", "extra": true}\n{"id": 2, "Name": "bo", "CITY": "Lima"}\n'


def test_json_case_insensitive_matches_keys_in_any_case_and_ignores_extra_ones() -> None:
    out = rows(compiled("JSON", "CASE_INSENSITIVE"), JSON)
    assert [(r["ID"], r["Name"], r["CITY"], r["SRC"]) for r in out] == [
        (1, "ann", "Oslo", None),
        (2, "bo", "Lima", None),
    ]


def test_json_case_sensitive_matches_only_the_exact_name() -> None:
    out = rows(compiled("JSON", "CASE_SENSITIVE"), JSON)
    assert [(r["ID"], r["Name"], r["CITY"]) for r in out] == [(1, None, None), (None, "bo", "Lima")]


def test_no_matching_column_loads_a_row_of_nulls() -> None:
    """'If no match is found, a set of NULL values for each record in the files is loaded.'"""
    out = rows(compiled("JSON", "CASE_INSENSITIVE"), b'{"other": 1}\n')
    assert out == [dict.fromkeys(["ID", "Name", "CITY", "SRC", "SEEN"])]


def test_parquet_by_name_in_either_mode() -> None:
    data = parquet_bytes(pa.table({"name": ["x"], "ID": [5], "City": ["Rome"], "unused": [0]}))
    loose = rows(compiled("PARQUET", "CASE_INSENSITIVE"), data)
    assert [(r["ID"], r["Name"], r["CITY"]) for r in loose] == [(5, "x", "Rome")]
    strict = rows(compiled("PARQUET", "CASE_SENSITIVE"), data)
    assert [(r["ID"], r["Name"], r["CITY"]) for r in strict] == [(5, None, None)]


def test_include_metadata_fills_columns_and_wins_over_a_file_column() -> None:
    """INCLUDE_METADATA 'takes precedence' over a file column of the same name."""
    info = FileInfo(content_key="9b2cf535f27731c974343645a3985328", last_modified="2026-11-20T08:30:00")
    copy = compiled(
        "JSON",
        "CASE_INSENSITIVE",
        {
            "SRC": "METADATA$FILE_CONTENT_KEY",
            "SEEN": "METADATA$FILE_LAST_MODIFIED",
            "CITY": "METADATA$FILENAME",
        },
    )
    assert copy.file_info
    out = rows(copy, JSON, info)
    assert {(r["CITY"], r["SRC"], r["SEEN"]) for r in out} == {
        ("in/f", info.content_key, dt.datetime(2026, 11, 20, 8, 30))
    }


def test_file_info_columns_in_a_transform() -> None:
    spec = CopySpec(
        table=PEOPLE.name,
        stage="D.S.ST",
        select=["$1:id", "METADATA$FILE_CONTENT_KEY", "METADATA$FILE_LAST_MODIFIED"],
        columns=["ID", "SRC", "SEEN"],
        file_format=FileFormat(type="JSON"),
    )
    copy = compile_copy(spec, PEOPLE, "JSON")
    info = FileInfo(content_key="abc", last_modified="2026-01-02T03:04:05.123000")
    (row,) = rows(copy, b'{"id": 3}\n', info)
    assert (row["ID"], row["SRC"], row["SEEN"]) == (3, "abc", dt.datetime(2026, 1, 2, 3, 4, 5, 123000))
    plain = CopySpec(
        table=PEOPLE.name,
        stage="D.S.ST",
        select=["$1:id"],
        columns=["ID"],
        file_format=FileFormat(type="JSON"),
    )
    assert not compile_copy(plain, PEOPLE, "JSON").file_info
