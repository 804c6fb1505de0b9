"""MATCH_BY_COLUMN_NAME on CSV with PARSE_HEADER = TRUE (decision 82): the header's names map the
fields to the table's columns, as a Parquet file's column names do.

Snowflake (COPY INTO <table>): MATCH_BY_COLUMN_NAME "is supported for ... CSV" with PARSE_HEADER;
ERROR_ON_COLUMN_COUNT_MISMATCH "specifies whether to generate a parsing error if the number of
delimited columns (that is, fields) in an input data file does not match the number of columns in
the corresponding table"; INCLUDE_METADATA for CSV wants ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE.
"""

from __future__ import annotations

from typing import Any

import pytest

from floe.catalog.models import Column, CopySpec, FileFormat, MatchBy, OnError, Table
from floe.errors import CompilationError
from floe.records import LoadOutcome
from pipeline.formats import read_raw
from pipeline.transform import CompiledCopy, apply_copy, compile_copy

pytestmark = pytest.mark.unit

PEOPLE = Table(
    name="D.S.PEOPLE",
    columns=[
        Column(name="ID", type="NUMBER", precision=18, scale=0),
        Column(name="Name", type="VARCHAR"),
        Column(name="CITY", type="VARCHAR"),
    ],
)


def compiled(
    match: MatchBy = "CASE_INSENSITIVE",  # strict: ERROR_ON_COLUMN_COUNT_MISMATCH (Snowflake's default TRUE)
    *,
    strict: bool = False,
    on_error: OnError = "SKIP_FILE",
    include: dict[str, str] | None = None,
    table: Table = PEOPLE,
    **fmt: Any,
) -> CompiledCopy:
    spec = CopySpec(
        table=table.name,
        stage="D.S.ST",
        file_format=FileFormat(parse_header=True, error_on_column_count_mismatch=strict, **fmt),
        match_by_column_name=match,
        include_metadata=include or {},
        on_error=on_error,
    )
    return compile_copy(spec, table, "CSV")


def load(copy: CompiledCopy, data: bytes) -> tuple[list[tuple[Any, ...]], LoadOutcome]:
    raw = read_raw(data, copy.file_format, path="in/f.csv")
    rows, result = apply_copy(copy, raw, filename="in/f.csv")
    return [tuple(r.values()) for r in rows.to_pylist()], result


CSV = b"city,id,extra,NAME\nOslo,1,x,ann\nLima,2,y,bo\n"


def test_case_insensitive_maps_header_names_to_columns_in_any_order() -> None:
    rows, result = load(compiled(), CSV)
    assert rows == [(1, "ann", "Oslo"), (2, "bo", "Lima")]
    assert (result.status, result.rows_loaded) == ("LOADED", 2)


def test_case_sensitive_takes_only_the_exact_names() -> None:
    rows, _ = load(compiled("CASE_SENSITIVE"), b"ID,name,CITY\n1,ann,Oslo\n")
    assert rows == [(1, None, "Oslo")]  # 'name' is not "Name"; missing columns load NULL
    rows, _ = load(compiled("CASE_SENSITIVE"), b"ID,Name,CITY\n1,ann,Oslo\n")
    assert rows == [(1, "ann", "Oslo")]


@pytest.mark.parametrize("delimiter", [",", "||"])
def test_both_parsers_and_the_error_position_of_a_field(delimiter: str) -> None:
    """A conversion error names the table's column and the character where its field starts."""
    data = (
        delimiter.join(["name", "id", "city"]).encode()
        + b"\n"
        + delimiter.join(["ann", "x", "Oslo"]).encode()
    )
    rows, result = load(compiled(field_delimiter=delimiter), data + b"\n")
    assert rows == []
    assert (result.status, result.first_error, result.first_error_line) == (
        "LOAD_FAILED",
        "Numeric value 'x' is not recognized",
        2,
    )
    assert result.first_error_column == '"PEOPLE"["ID":1]'
    assert result.first_error_character == 4 + len(delimiter)


def test_a_record_of_another_width_than_the_header_follows_on_error() -> None:
    """With ERROR_ON_COLUMN_COUNT_MISMATCH = TRUE; FALSE pads and cuts them to the header's width."""
    data = b"id,name,city\n1,ann,Oslo\n2,bo\n3,cy,Rome,extra\n4,di,Pisa\n"
    rows, result = load(compiled(strict=True, on_error="CONTINUE"), data)
    assert rows == [(1, "ann", "Oslo"), (4, "di", "Pisa")]
    assert (result.status, result.errors_seen, result.first_error_line) == ("PARTIALLY_LOADED", 2, 3)
    # The field the header names "city" loads the table's CITY: the message names that column.
    assert result.first_error == 'End of record reached while expected to parse column \'"PEOPLE"["CITY":3]\''
    assert result.first_error_column == '"PEOPLE"["CITY":3]'
    rows, result = load(compiled(strict=True), data)
    assert (rows, result.status) == ([], "LOAD_FAILED")
    rows, result = load(compiled(), data)
    assert rows == [(1, "ann", "Oslo"), (2, "bo", None), (3, "cy", "Rome"), (4, "di", "Pisa")]


def test_error_on_column_count_mismatch_compares_the_header_with_the_table() -> None:
    """TRUE (the default): a file whose header has another number of columns than the table loads no
    record, each an error of its row (100080); FALSE loads by name whatever the widths."""
    rows, result = load(compiled(strict=True, on_error="CONTINUE"), CSV)
    assert rows == []
    assert (result.status, result.errors_seen, result.code) == ("LOAD_FAILED", 2, "100080")
    assert result.first_error == (
        "Number of columns in file (4) does not match that of the corresponding table (3), use file "
        "format option error_on_column_count_mismatch=false to ignore this error"
    )
    rows, result = load(compiled(strict=True), b"CITY,ID,NAME\nOslo,1,ann\n")
    assert (rows, result.status) == ([(1, "ann", "Oslo")], "LOADED")


def test_include_metadata_with_error_on_column_count_mismatch_false() -> None:
    table = Table(name="D.S.T", columns=[*PEOPLE.columns, Column(name="SRC", type="VARCHAR")])
    copy = compiled(include={"SRC": "METADATA$FILENAME"}, table=table)
    rows, _ = load(copy, b"id,src,name\n1,not-this,ann\n")
    assert rows == [(1, "ann", None, "in/f.csv")]


def test_parse_header_is_refused_without_match_by_column_name() -> None:
    """Snowflake: PARSE_HEADER applies only to INFER_SCHEMA and MATCH_BY_COLUMN_NAME."""
    with pytest.raises(CompilationError, match='Invalid file format "PARSE_HEADER" is only allowed'):
        compiled("NONE")
