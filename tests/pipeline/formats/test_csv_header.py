"""PARSE_HEADER = TRUE in the CSV reader (decision 82): the first record names the raw table's
columns, with pyarrow's parser and with Floe's tokenizer reading the rest, whole and streamed in
parts (each part after the first gets the header again); records of another width are errors of
their rows, or padded and cut with ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE. INFER_SCHEMA's sampling
tokenizer (``floe.file_schema.CsvSample``) reads the same names and records.

Snowflake: "PARSE_HEADER = TRUE | FALSE: Boolean that specifies whether to use the first row
headers in the data files to determine column names" (COPY INTO <table>, CSV options).
"""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe.catalog.models import FileFormat
from floe.file_schema import csv_records, decode, prefix
from pipeline.chunks import decompressed, first_record_end, record_chunks
from pipeline.formats import RawFile, read_csv, read_csv_part, read_raw
from pipeline.formats.csv_records import header_record
from tests.pipeline.formats.test_csv_roundtrip import (
    Dialect,
    _encodable,
    _value_strategy,
    _write_value,
    dialects,
)

pytestmark = pytest.mark.unit

HEADED = FileFormat(parse_header=True)
# Files pyarrow reads (one ASCII delimiter, newline records) and files only the tokenizer reads.
PARSERS = {
    "pyarrow": FileFormat(parse_header=True, field_optionally_enclosed_by='"'),
    "tokenizer": FileFormat(parse_header=True, field_optionally_enclosed_by='"', field_delimiter="||"),
}


def records(raw: RawFile) -> list[list[str | None]]:
    """The rows by column position (header names may repeat)."""
    columns = [raw.table.column(i).to_pylist() for i in range(raw.table.num_columns)]
    return [list(r) for r in zip(*columns, strict=True)]


@pytest.mark.parametrize("parser", list(PARSERS))
def test_the_header_names_the_columns_and_is_no_record(parser: str) -> None:
    fmt = PARSERS[parser]
    d = fmt.field_delimiter
    text = f'ID{d}"Full{d} ""name"""{d}City\n1{d}ann{d}Oslo\n2{d}"b\no"{d}\\N\n'
    raw = read_csv(text.encode(), fmt, "a.csv")
    assert raw.table.column_names == ["ID", f'Full{d} "name"', "City"]
    assert records(raw) == [["1", "ann", "Oslo"], ["2", "b\no", None]]
    assert raw.row_numbers.to_pylist() == [1, 2]
    assert raw.line_numbers.to_pylist() == [2, 3]  # the header is line 1
    assert (raw.rows_parsed, raw.lines, raw.width, raw.errors) == (2, 4, 3, [])


def test_names_keep_what_null_if_and_empty_field_as_null_would_turn_to_null() -> None:
    raw = read_csv(
        b"\xef\xbb\xbf a ,\\N,,x\n1,2,3,4\n", HEADED.model_copy(update={"trim_space": True}), "b.csv"
    )
    assert raw.table.column_names == ["a", "\\N", "", "x"]  # the byte-order mark is dropped first
    assert records(raw) == [["1", "2", "3", "4"]]


@pytest.mark.parametrize("parser", list(PARSERS))
def test_records_of_another_width_are_errors_of_their_rows(parser: str) -> None:
    """As a plain COPY's records are when their width is not the table's: 100068 for too few fields,
    100016 for too many, each row's own, so ON_ERROR decides."""
    fmt = PARSERS[parser]
    d = fmt.field_delimiter
    raw = read_csv(f"a{d}b\n1{d}2\n3\n4{d}5{d}6\n7{d}8\n".encode(), fmt, "c.csv")
    assert records(raw) == [["1", "2"], ["7", "8"]]
    assert [(e.code, e.row_number, e.line) for e in raw.errors] == [("100068", 2, 3), ("100016", 3, 4)]
    lenient = read_csv(
        f"a{d}b\n1{d}2\n3\n4{d}5{d}6\n".encode(),
        fmt.model_copy(update={"error_on_column_count_mismatch": False}),
        "c.csv",
    )
    assert (records(lenient), lenient.errors) == ([["1", "2"], ["3", None], ["4", "5"]], [])


def test_a_header_over_several_lines_moves_the_lines_after_it() -> None:
    fmt = PARSERS["pyarrow"]
    raw = read_csv(b'"a\nb",c\n1,2\n', fmt, "d.csv")
    assert raw.table.column_names == ["a\nb", "c"]
    assert raw.line_numbers.to_pylist() == [3]


def test_an_empty_file_and_a_file_of_only_a_header() -> None:
    empty = read_raw(b"", HEADED, path="e.csv")
    assert (empty.table.num_columns, empty.rows_parsed) == (0, 0)
    only = read_raw(b"x,y", HEADED, path="f.csv")
    assert (only.table.column_names, only.num_rows, only.rows_parsed) == (["x", "y"], 0, 0)


def test_header_record_and_first_record_end_agree() -> None:
    """The reader's header (its tokenizer) ends where the streaming cut finds the first record's end."""
    fmt = FileFormat(parse_header=True, field_optionally_enclosed_by='"', escape_unenclosed_field="\\")
    text = b'"x\r\n,y",b\\\nc,d\r\n1,2,3\r\n'
    names, end = header_record(text, fmt)
    assert names == ["x\r\n,y", "b\nc", "d"]
    assert end == first_record_end(text, fmt) == text.index(b"1,2")


@pytest.mark.parametrize("parser", list(PARSERS))
def test_a_streamed_file_repeats_its_header_in_every_part(parser: str) -> None:
    """Each later part starts with the header again, so it is read on its own; rows, lines and
    errors are those of the whole file, placed with the offsets the loader adds."""
    fmt = PARSERS[parser]
    d = fmt.field_delimiter
    lines = [f"ID{d}name"] + [f"{i}{d}n{i}" if i % 7 else f"{i}" for i in range(1, 60)]
    data = ("\n".join(lines) + "\n").encode()
    whole = read_csv(data, fmt, "g.csv")
    names, rows, row_numbers, line_numbers, errors = set(), [], [], [], []
    rows_before = lines_before = 0
    parts = list(record_chunks(io.BytesIO(data), 40, fmt))
    assert len(parts) > 5
    for i, part in enumerate(parts):
        raw = read_csv_part(part, fmt, "g.csv", first=i == 0, width=None)
        names.add(tuple(raw.table.column_names))
        rows += records(raw)
        row_numbers += [n + rows_before for n in raw.row_numbers.to_pylist()]
        line_numbers += [n + lines_before for n in raw.line_numbers.to_pylist()]
        errors += [(e.code, e.row_number + rows_before, e.line + lines_before) for e in raw.errors]
        rows_before += raw.rows_parsed
        lines_before += raw.lines
    assert names == {("ID", "name")}
    assert rows == records(whole)
    assert row_numbers == whole.row_numbers.to_pylist()
    assert line_numbers == whole.line_numbers.to_pylist()
    assert errors == [(e.code, e.row_number, e.line) for e in whole.errors]
    assert (rows_before, lines_before) == (whole.rows_parsed, whole.lines)


def _header(d: Dialect, names: list[str]) -> str:
    return d.field.join(_write_value(n, d) for n in names) + d.record


@st.composite
def headed_tables(draw: st.DrawFn) -> tuple[Dialect, list[str], list[list[str | None]]]:
    d = draw(dialects())
    width = draw(st.integers(2, 4))
    names = draw(st.lists(_name_strategy(d), min_size=width, max_size=width))
    rows = draw(st.lists(st.lists(_value_strategy(d), min_size=width, max_size=width), max_size=10))
    return d, names, rows


def _name_strategy(d: Dialect) -> st.SearchStrategy[str]:
    """Names of text and, where a quote or an escape can write them, the delimiters."""
    pieces = ["a", "Z", "0", " ", "é", "中", "\\", '"', "'"]
    if d.quote is not None or d.unenclosed is not None:
        pieces += [d.field, d.record, *(("\r\n",) if d.record == "\n" else ())]
    pieces = [p for p in pieces if _encodable(p, d.encoding[1])]
    return st.lists(st.sampled_from(pieces), min_size=1, max_size=4).map("".join)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=headed_tables(), chunk=st.integers(16, 300))
def test_a_random_table_with_a_header_reads_back_by_both_readers(
    table: tuple[Dialect, list[str], list[list[str | None]]], chunk: int
) -> None:
    """Issue 16's round trip (tests/pipeline/formats/test_csv_roundtrip.py) with a header record of
    random names: the loader's reader, whole and streamed, and INFER_SCHEMA's sampler agree."""
    d, names, rows = table
    fmt = d.format().model_copy(update={"skip_header": 0, "parse_header": True})
    body = _header(d, names) + d.record.join(d.field.join(_write_value(v, d) for v in r) for r in rows)
    body += d.record if d.trailing and rows else ""
    data = (("\ufeff" if d.bom else "") + body).encode(d.encoding[1])

    raw = read_raw(data, fmt, path="h.csv")
    assert raw.errors == []
    assert (raw.table.column_names, records(raw)) == (names, rows)

    streamed: list[list[str | None]] = []
    for i, part in enumerate(record_chunks(decompressed(io.BytesIO(data), "AUTO", "h.csv"), chunk, fmt)):
        piece = read_csv_part(part, fmt, "h.csv", first=i == 0, width=None)
        assert piece.errors == []
        assert piece.table.column_names == names
        streamed += records(piece)
    assert streamed == rows

    sample, cut = prefix(io.BytesIO(data), "AUTO", len(data) + 1)
    sampled_names, sampled = csv_records(decode(sample, fmt, cut), fmt, cut=cut, limit=None)
    assert sampled_names == names
    assert list(sampled) == rows
