"""CSV: field splitting, numbering, per-record parse errors, repairs, whole-file failures."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.formats import FileParseError, field_spans, read_csv_part
from tests.pipeline.formats.helpers import csv, rows

pytestmark = pytest.mark.unit


def test_csv_reads_strings_without_inference_and_names_columns() -> None:
    raw = csv(b"1,2.50,true\n007,x,\n")
    assert raw.table.column_names == ["c1", "c2", "c3"]
    assert all(t == pa.string() for t in raw.table.schema.types)
    assert rows(raw) == [("1", "2.50", "true"), ("007", "x", None)]
    assert raw.rows_parsed == 2
    assert raw.errors == []


def test_skip_header_numbers_rows_after_the_header_and_lines_physically() -> None:
    raw = csv(b"id,name\nunits,text\n1,a\n2,b\n", skip_header=2)
    assert rows(raw) == [("1", "a"), ("2", "b")]
    assert raw.row_numbers.to_pylist() == [1, 2]
    assert raw.line_numbers.to_pylist() == [3, 4]


def test_header_only_file_is_empty() -> None:
    raw = csv(b"id,name\n", skip_header=1)
    assert raw.num_rows == 0
    assert raw.rows_parsed == 0


@pytest.mark.parametrize("delimiter", [";", "|", "\t"])
def test_field_delimiter(delimiter: str) -> None:
    d = delimiter.encode()
    raw = csv(b"a" + d + b"b,c\n1" + d + b"2\n", field_delimiter=delimiter)
    assert rows(raw) == [("a", "b,c"), ("1", "2")]


def test_crlf_line_endings() -> None:
    raw = csv(b"h\r\n1,a\r\n2,b\r\n", skip_header=1)
    assert rows(raw) == [("1", "a"), ("2", "b")]
    assert raw.line_numbers.to_pylist() == [2, 3]


def test_null_if_and_empty_field_as_null() -> None:
    raw = csv(b"\\N,NULL,,x\n", null_if=["\\N", "NULL"])
    assert rows(raw) == [(None, None, None, "x")]
    raw = csv(b"\\N,,x\n", empty_field_as_null=False)
    assert rows(raw) == [(None, "", "x")]


def test_quoted_fields_keep_delimiters_quotes_and_empty_strings() -> None:
    raw = csv(b'"a,b","say ""hi""","",\n', field_optionally_enclosed_by='"')
    assert rows(raw) == [("a,b", 'say "hi"', "", None)]


def test_quotes_are_literal_without_field_optionally_enclosed_by() -> None:
    raw = csv(b'"a",b\n')
    assert rows(raw) == [('"a"', "b")]


def test_quoted_newlines_shift_the_following_line_numbers() -> None:
    raw = csv(b'h\n"multi\nline",1\nnext,2\n', skip_header=1, field_optionally_enclosed_by='"')
    assert rows(raw) == [("multi\nline", "1"), ("next", "2")]
    assert raw.row_numbers.to_pylist() == [1, 2]
    assert raw.line_numbers.to_pylist() == [2, 4]


def test_trim_space_strips_blanks_around_quoted_values() -> None:
    raw = csv(b'  a , "b c"  ,  \n', trim_space=True, field_optionally_enclosed_by='"')
    assert rows(raw) == [("a", "b c", None)]


def test_too_few_fields_is_end_of_record_error_with_its_line() -> None:
    raw = csv(b"h1,h2,h3\n1,2,3\n4,5\n6,7,8\n", skip_header=1)
    assert rows(raw) == [("1", "2", "3"), ("6", "7", "8")]
    assert raw.rows_parsed == 3
    assert raw.row_numbers.to_pylist() == [1, 3]
    assert raw.line_numbers.to_pylist() == [2, 4]
    (err,) = raw.errors
    assert (err.code, err.row_number, err.line, err.character, err.field) == ("100068", 2, 3, 4, 3)
    assert err.message.startswith("End of record reached while expected to parse column")


def test_too_many_fields_is_field_delimiter_error_with_its_line() -> None:
    raw = csv(b"h\n1,2\n33,44,55\n", skip_header=1, columns=2)
    assert rows(raw) == [("1", "2")]
    (err,) = raw.errors
    assert err.code == "100016"
    assert err.message == "Field delimiter ',' found while expecting record delimiter '\\n'"
    assert (err.row_number, err.line, err.character) == (2, 3, 6)


def test_field_count_errors_after_a_multiline_record() -> None:
    data = b'"a\nb",1\nshort\nc,2\n'
    raw = csv(data, field_optionally_enclosed_by='"')
    assert [e.line for e in raw.errors] == [3]
    assert raw.line_numbers.to_pylist() == [1, 4]


def test_first_record_decides_the_width_unless_columns_given() -> None:
    assert csv(b"1,2,3\n4,5\n").width == 3
    raw = csv(b"1,2,3\n4,5\n", columns=2)
    assert rows(raw) == [("4", "5")]
    assert raw.errors[0].code == "100016"


def test_column_count_mismatch_can_be_repaired() -> None:
    raw = csv(b"1\n2,b\n3,c,extra\n", columns=2, error_on_column_count_mismatch=False)
    assert rows(raw) == [("1", None), ("2", "b"), ("3", "c")]
    assert raw.errors == []
    assert raw.row_numbers.to_pylist() == [1, 2, 3]


def test_blank_lines_are_errors_unless_skipped() -> None:
    raw = csv(b"1,a\n\n2,b\n")
    assert rows(raw) == [("1", "a"), ("2", "b")]
    assert [(e.code, e.line) for e in raw.errors] == [("100068", 2)]
    assert raw.rows_parsed == 3
    raw = csv(b"1,a\n\n2,b\n", skip_blank_lines=True)
    assert raw.errors == []
    assert raw.rows_parsed == 2
    assert raw.row_numbers.to_pylist() == [1, 2]
    assert raw.line_numbers.to_pylist() == [1, 3]


def test_invalid_utf8_is_a_file_load_error_naming_the_line() -> None:
    with pytest.raises(FileLoadError, match="line 3"):
        csv(b"a,b\nc,d\ne,\xff\xfe\n")


def test_invalid_utf8_names_the_field_its_place_and_its_bytes_as_snowflake_does() -> None:
    """Safeguard: a non-UTF-8 file fails with the bad value quoted 0xNN-style and its position."""
    data = "id,name\n1,Ann\n2,Zoë Café\n".encode("latin-1")
    with pytest.raises(FileParseError) as caught:
        csv(data, skip_header=1)
    err = caught.value
    assert err.message == "Invalid UTF8 detected in string 'Zo0xEB Caf0xE9'"
    assert (err.line, err.character, err.field) == (3, 3, 2)


def test_width_is_the_one_most_records_share() -> None:
    """Safeguard: one short first record must not turn every good record after it into an error."""
    raw = csv(b"1,a\n2,b,2.5\n3,c,3.5\n4,d\n5,e,5.5\n")
    assert raw.width == 3
    assert rows(raw) == [("2", "b", "2.5"), ("3", "c", "3.5"), ("5", "e", "5.5")]
    assert [(e.code, e.line) for e in raw.errors] == [("100068", 1), ("100068", 4)]
    assert raw.rows_parsed == 5


def test_unsupported_delimiter_is_a_file_load_error() -> None:
    with pytest.raises(FileLoadError):
        csv(b"a||b\n", field_delimiter="||")


@pytest.mark.parametrize(
    ("record", "quote", "spans"),
    [
        ("a,bc,", None, [(0, 1), (2, 4), (5, 5)]),
        ('"a,b",c', '"', [(0, 5), (6, 7)]),
        ('"a"",b",c', '"', [(0, 7), (8, 9)]),
        ('x"a,b"', '"', [(0, 3), (4, 6)]),
        ('"a,b",c', None, [(0, 2), (3, 5), (6, 7)]),
        ("a,b\r\nc,d", None, [(0, 1), (2, 3)]),
        ('"a\nb",c\nd', '"', [(0, 5), (6, 7)]),
    ],
    ids=["plain", "quoted", "doubled-quote", "quote-mid-field", "quote-off", "crlf-ends", "quoted-newline"],
)
def test_field_spans(record: str, quote: str | None, spans: list[tuple[int, int]]) -> None:
    """Offsets include the quotes; a quote opens a field only at its start; a record ends at CR or LF
    outside quotes."""
    assert field_spans(record, ",", quote) == spans


def test_later_parts_of_a_streamed_file_keep_the_first_parts_width_and_skip_no_header() -> None:
    fmt = FileFormat(skip_header=1)
    first = read_csv_part(b"\xef\xbb\xbfh1,h2,h3\n1,2,3\n", fmt, "f.csv", first=True, width=None)
    assert (rows(first), first.width) == ([("1", "2", "3")], 3)
    later = read_csv_part(b"4,5\n6,7,8\n", fmt, "f.csv", first=False, width=first.width)
    assert rows(later) == [("6", "7", "8")]
    assert later.row_numbers.to_pylist() == [2]
    assert [(e.code, e.row_number, e.line) for e in later.errors] == [("100068", 1, 1)]


# ------------------------------------------------------------------------------------------------
# Property: CSV line numbers match a reference count of each record's physical lines

FIELD = st.sampled_from(["a", "b c", "1", "", '"x\ny"', '"p\n\nq"', '"quo""te"', '"a,b"'])
RECORD = st.lists(FIELD, min_size=1, max_size=4).map(",".join)


@settings(max_examples=300, deadline=None)
@given(records=st.lists(RECORD, min_size=1, max_size=20), header=st.integers(0, 2), trailing=st.booleans())
def test_csv_line_numbers_match_a_reference(records: list[str], header: int, trailing: bool) -> None:
    if not trailing and records[-1] == "":
        records[-1] = "z,z,z"  # a final empty record without a newline does not exist
    text = "".join(f"h{i}\n" for i in range(header)) + "\n".join(records) + ("\n" if trailing else "")
    raw = csv(text.encode(), columns=3, skip_header=header, field_optionally_enclosed_by='"')
    line = header + 1
    good: list[int] = []
    bad: list[int] = []
    for record in records:
        fields = len(record.split(",")) - record.count('"a,b"')  # the only quoted comma
        (good if record and fields == 3 else bad).append(line)
        line += 1 + record.count("\n")
    assert raw.line_numbers.to_pylist() == good
    assert sorted(e.line for e in raw.errors) == bad
    assert raw.rows_parsed == len(records)
