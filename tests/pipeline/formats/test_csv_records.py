"""CSV: field splitting, numbering, per-record parse errors, repairs, escapes, delimiters, MULTI_LINE,
ENCODING, and the options as CREATE spells them."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from floe.catalog import ddl
from floe.catalog.models import FileFormat
from floe.errors import CompilationError, FileLoadError
from pipeline.formats import (
    RawFile,
    csv_field_character,
    csv_record_text,
    field_spans,
    read_csv_part,
    read_raw,
)
from tests.cpu_time import cpu_seconds
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


def test_invalid_utf8_is_an_error_of_its_row_and_the_others_load() -> None:
    """Decision 70 (was 12): the record with bad bytes fails alone, quoting its field 0xNN-style."""
    data = "id,name\n1,Ann\n2,Zoë Café\n3,Bo\n".encode("latin-1")
    raw = csv(data, skip_header=1)
    assert rows(raw) == [("1", "Ann"), ("3", "Bo")]
    assert raw.row_numbers.to_pylist() == [1, 3]
    assert raw.rows_parsed == 3
    (err,) = raw.errors
    assert err.message == "Invalid UTF8 detected in string 'Zo0xEB Caf0xE9'"
    assert (err.code, err.row_number, err.line, err.character, err.field) == ("100000", 2, 3, 3, 2)


def test_invalid_utf8_rows_fail_in_either_parser_and_across_lines() -> None:
    data = b'1,"a\nb\xff"\n2,\\x\n3,\xc3\n'  # a quoted value over two lines
    raw = csv(data, field_optionally_enclosed_by='"', escape_unenclosed_field=None)
    assert rows(raw) == [("2", "\\x")]
    assert [(e.row_number, e.line, e.field, e.message) for e in raw.errors] == [
        (1, 1, 2, "Invalid UTF8 detected in string 'a\nb0xFF'"),
        (3, 4, 2, "Invalid UTF8 detected in string '0xC3'"),
    ]
    raw = csv(b"1,\\,x\n2,y\xff\n")  # an escaped delimiter: Floe's tokenizer reads this file
    assert rows(raw) == [("1", ",x")]
    assert raw.errors[0].message == "Invalid UTF8 detected in string 'y0xFF'"


def test_replace_invalid_characters_loads_one_replacement_per_bad_sequence() -> None:
    raw = csv(b"1,Caf\xe9\n2,\xe2\x82x\n", replace_invalid_characters=True)
    assert rows(raw) == [("1", "Caf\ufffd"), ("2", "\ufffdx")]
    assert raw.errors == []


def test_width_is_the_one_most_records_share() -> None:
    """Safeguard: one short first record must not turn every good record after it into an error."""
    raw = csv(b"1,a\n2,b,2.5\n3,c,3.5\n4,d\n5,e,5.5\n")
    assert raw.width == 3
    assert rows(raw) == [("2", "b", "2.5"), ("3", "c", "3.5"), ("5", "e", "5.5")]
    assert [(e.code, e.line) for e in raw.errors] == [("100068", 1), ("100068", 4)]
    assert raw.rows_parsed == 5


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


# ------------------------------------------------------------------------------------------------
# ESCAPE_UNENCLOSED_FIELD and ESCAPE


def test_the_default_unenclosed_escape_makes_delimiters_and_itself_data() -> None:
    """Snowflake's default ESCAPE_UNENCLOSED_FIELD is a backslash: before a delimiter or itself it
    makes that text data; before anything else it stays (a Windows path loads as written)."""
    raw = csv(b"a\\,b,C:\\temp\\x\n\\\\,\\q\n")
    assert rows(raw) == [("a,b", "C:\\temp\\x"), ("\\", "\\q")]


def test_a_record_ending_in_the_escape_runs_on_into_the_next_line() -> None:
    """Snowflake: "If a row in a data file ends in the backslash character, this character escapes
    the newline ... the load operation treats this row and the next row as a single row"."""
    raw = csv(b"1,two\\\nlines\n2,b\n")
    assert rows(raw) == [("1", "two\nlines"), ("2", "b")]
    assert raw.line_numbers.to_pylist() == [1, 3]
    assert raw.rows_parsed == 2
    raw = csv(b"1,two\\\nlines\n2,b\n", escape_unenclosed_field=None)  # NONE: the backslash is data
    assert rows(raw) == [("1", "two\\"), ("2", "b")]
    assert [(e.line, e.code) for e in raw.errors] == [(2, "100068")]


def test_null_if_compares_the_field_as_written() -> None:
    """NULL_IF's default \\N "assumes ESCAPE_UNENCLOSED_FIELD is \\\\": \\N is NULL, and an escaped
    backslash writes the string \\N."""
    raw = csv(b"\\N,\\\\N,x\n")
    assert rows(raw) == [(None, "\\N", "x")]
    raw = csv(b"\\N,\\\\N,x\n", escape_unenclosed_field=None)
    assert rows(raw) == [(None, "\\\\N", "x")]


def test_escape_makes_the_quote_literal_inside_enclosed_fields_only() -> None:
    fmt: dict[str, Any] = {
        "field_optionally_enclosed_by": '"',
        "escape": "\\",
        "escape_unenclosed_field": None,
    }
    raw = csv(b'"a\\"b","c\\\\d","e\\xf","g""h",i\\"j\n', **fmt)
    assert rows(raw) == [('a"b', "c\\d", "e\\xf", 'g"h', 'i\\"j')]
    raw = csv(b'"a\\",b\n', field_optionally_enclosed_by='"')  # ESCAPE = NONE: the quote closes
    assert rows(raw) == [("a\\", "b")]


def test_the_unenclosed_escape_does_not_apply_inside_quotes() -> None:
    raw = csv(b'"a\\,b",c\\,d,e\n', field_optionally_enclosed_by='"')
    assert rows(raw) == [("a\\,b", "c,d", "e")]


# ------------------------------------------------------------------------------------------------
# RECORD_DELIMITER and FIELD_DELIMITER


@pytest.mark.parametrize(
    ("data", "field", "record", "expected"),
    [
        (b"1|a^2|b^3|c", "|", "^", [("1", "a"), ("2", "b"), ("3", "c")]),
        (b"1|a\nb^2|c^", "|", "^", [("1", "a\nb"), ("2", "c")]),  # a newline is data
        (b"1||a~~2||b~~", "||", "~~", [("1", "a"), ("2", "b")]),
        ("1\u00a2a\u00a32\u00a2b".encode(), "\u00a2", "\u00a3", [("1", "a"), ("2", "b")]),  # multibyte
        (b"1,a\r\n2,b\nc\r\n", ",", "\r\n", [("1", "a"), ("2", "b\nc")]),  # only CR LF ends a record
        (b"1,a,b\n2,c,d\n", "", "\n", [("1,a,b",), ("2,c,d",)]),  # FIELD_DELIMITER = NONE
        (b"1,a\n2,b\n", ",", "", [("1", "a\n2", "b\n")]),  # RECORD_DELIMITER = NONE: one record
    ],
    ids=[
        "single",
        "newline-in-data",
        "multi-character",
        "multibyte",
        "crlf",
        "no-field-delimiter",
        "one-record",
    ],
)
def test_record_and_field_delimiters(
    data: bytes, field: str, record: str, expected: list[tuple[str, ...]]
) -> None:
    raw = csv(data, field_delimiter=field, record_delimiter=record)
    assert rows(raw) == expected
    assert raw.errors == []


def test_with_another_record_delimiter_each_delimiter_ends_a_line() -> None:
    """Lines count record delimiters (header lines still end with a newline)."""
    raw = csv(b"id|name\n1|a;2|b|x;3|c;", field_delimiter="|", record_delimiter=";", skip_header=1)
    assert rows(raw) == [("1", "a"), ("3", "c")]
    assert raw.line_numbers.to_pylist() == [2, 4]
    ((code, line, character),) = [(e.code, e.line, e.character) for e in raw.errors]
    assert (code, line, character) == ("100016", 3, 4)
    assert raw.errors[0].message == "Field delimiter '|' found while expecting record delimiter ';'"
    assert raw.lines == 4


# ------------------------------------------------------------------------------------------------
# MULTI_LINE


@pytest.mark.parametrize(
    ("data", "options"),
    [
        (b'1,"a\nb"\n2,c\n', {"field_optionally_enclosed_by": '"'}),  # pyarrow reads it
        (b'1,"a\nb"\n2,c\\\\\n', {"field_optionally_enclosed_by": '"'}),  # Floe's tokenizer does
        (b"1,a\\\nb\n2,c\n", {}),  # an escaped newline is a newline inside a field too
    ],
    ids=["enclosed", "enclosed-tokenizer", "escaped"],
)
def test_multi_line_false_makes_a_record_delimiter_inside_a_field_its_records_error(
    data: bytes, options: dict[str, Any]
) -> None:
    raw = csv(data, multi_line=False, **options)
    assert rows(raw)[0][0] == "2"
    (err,) = raw.errors
    assert (err.row_number, err.line, err.character, err.field) == (1, 1, 3, 2)
    assert err.message == "Record delimiter '\\n' found inside a field, and MULTI_LINE is FALSE"
    assert raw.rows_parsed == 2
    assert len(rows(csv(data, **options))) == 2  # MULTI_LINE = TRUE, the default, loads it


# ------------------------------------------------------------------------------------------------
# ENCODING, SKIP_BYTE_ORDER_MARK


TEXT = "id,name\n1,Zoë\n2,Ολγα\n3,Ž€\n"


@pytest.mark.parametrize(
    ("encoding", "codec", "text"),
    [
        ("UTF8", "utf-8", TEXT),
        ("UTF16", "utf-16", TEXT),  # with a byte-order mark (Python writes the machine's order)
        ("UTF16", "utf-16-be", TEXT),  # without one: big-endian
        ("UTF16LE", "utf-16-le", TEXT),
        ("UTF16BE", "utf-16-be", TEXT),
        ("UTF32", "utf-32", TEXT),
        ("UTF32LE", "utf-32-le", TEXT),
        ("ISO88591", "latin-1", "id,name\n1,Zoë\n2,Çà\n"),
        ("LATIN1", "latin-1", "id,name\n1,Zoë\n2,Çà\n"),
        ("WINDOWS1252", "cp1252", "id,name\n1,Zoë\n2,€‰\n"),
        ("WINDOWS1251", "cp1251", "id,name\n1,Ольга\n"),
        ("SHIFTJIS", "shift_jis", "id,name\n1,日本\n2,表\\\n"),  # 表's second byte is a backslash
        ("ISO2022JP", "iso2022_jp", "id,name\n1,日本\n"),
        ("GB18030", "gb18030", "id,name\n1,中文\n"),
    ],
)
def test_encodings_convert_to_utf8_before_parsing(encoding: str, codec: str, text: str) -> None:
    raw = csv(text.encode(codec), encoding=encoding, skip_header=1, escape_unenclosed_field=None)
    expected = [tuple(line.split(",")) for line in text.splitlines()[1:]]
    assert rows(raw) == expected
    assert raw.errors == []


def test_bytes_that_are_not_the_encoding_are_errors_of_their_rows() -> None:
    raw = csv(b"1,ok\n2,\x81\n", encoding="WINDOWS1252")  # 0x81 is not a windows-1252 character
    assert rows(raw) == [("1", "ok")]
    assert raw.errors[0].message == "Invalid UTF8 detected in string '0x81'"
    raw = csv("1,a\n2,b".encode("utf-16-le") + b"\x00", encoding="UTF16LE")  # a byte short
    assert rows(raw) == [("1", "a")]
    assert raw.errors[0].message == "Invalid UTF8 detected in string 'b0x00'"
    raw = csv(b"1,ok\n2,\x81\n", encoding="WINDOWS1252", replace_invalid_characters=True)
    assert rows(raw) == [("1", "ok"), ("2", "\ufffd")]


@pytest.mark.parametrize(
    ("encoding", "codec"), [("UTF8", "utf-8"), ("UTF16LE", "utf-16-le"), ("UTF16", "utf-16")]
)
def test_a_byte_order_mark_is_skipped_unless_told_otherwise(encoding: str, codec: str) -> None:
    data = ("\ufeff" if codec != "utf-16" else "") + "a,b\n"
    assert rows(csv(data.encode(codec), encoding=encoding)) == [("a", "b")]
    kept = csv(data.encode(codec), encoding=encoding, skip_byte_order_mark=False)
    assert rows(kept) == [("\ufeffa", "b")]  # Snowflake: "merged into the first column"


# ------------------------------------------------------------------------------------------------
# The options as CREATE spells them (floe.catalog.ddl)


def _format(options: str) -> FileFormat:
    stmt = ddl.parse(f"CREATE STAGE s URL = 's3://b/p/' STORAGE_INTEGRATION = i FILE_FORMAT = ({options})")
    assert isinstance(stmt, ddl.CreateStage)
    return FileFormat.model_validate(stmt.file_format)


@pytest.mark.parametrize(
    "spelled",
    [r"'\\136'", "0x5e", "'0x5e'", r"'\x5e'", r"'\\x5e'", "'^'"],
    ids=["octal", "hex", "quoted-hex", "sql-hex", "hex-escape", "plain"],
)
def test_a_delimiter_spelled_in_octal_or_hex_is_the_character(spelled: str) -> None:
    """Snowflake: "for records delimited by the circumflex accent (^) character, specify the octal
    (\\\\136) or hex (0x5e) value"."""
    fmt = _format(f"RECORD_DELIMITER = {spelled}")
    assert fmt.record_delimiter == "^"
    assert rows(read_raw(b"1,a^2,b^", fmt, path="f.csv")) == [("1", "a"), ("2", "b")]


def test_multibyte_delimiters_as_hex_and_escape_sequences() -> None:
    assert _format(r"FIELD_DELIMITER = '\xC2\xA2'").field_delimiter == "\u00a2"  # the cent sign
    assert _format(r"FIELD_DELIMITER = '\\xC2\\xA2'").field_delimiter == "\u00a2"
    assert _format(r"FIELD_DELIMITER = '\\t' RECORD_DELIMITER = NONE").field_delimiter == "\t"
    assert _format("RECORD_DELIMITER = NONE FIELD_DELIMITER = NONE").record_delimiter == ""
    assert _format("ESCAPE_UNENCLOSED_FIELD = NONE ESCAPE = NONE").escape_unenclosed_field is None
    assert _format("FIELD_OPTIONALLY_ENCLOSED_BY = 0x27").field_optionally_enclosed_by == "'"
    assert _format("ENCODING = 'iso-8859-1'").encoding == "ISO88591"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("FIELD_DELIMITER = 'aa' RECORD_DELIMITER = 'aabb'", "cannot be a substring of the delimiter"),
        ("RECORD_DELIMITER = ','", "cannot be a substring of the delimiter"),
        ("FIELD_DELIMITER = '" + "x" * 21 + "'", "FIELD_DELIMITER is limited to 20 characters"),
        (r"FIELD_DELIMITER = '\\xC2'", "is not a valid UTF-8 character sequence"),
        ("ESCAPE = 'ab'", "ESCAPE 'ab' must be one character (or NONE)"),
        ("ESCAPE_UNENCLOSED_FIELD = ','", "cannot be the field or record delimiter"),
        ("ENCODING = 'EBCDIC'", "ENCODING = 'EBCDIC' is not supported. Supported: UTF8, UTF16,"),
        ("ENCODING = 'IBM420'", "(Python has no codec for it)"),
        ("TYPE = JSON ENCODING = 'UTF16'", "ENCODING applies to TYPE = CSV only"),
    ],
)
def test_create_refuses_options_that_cannot_work(options: str, message: str) -> None:
    with pytest.raises(CompilationError) as caught:
        _format(options)
    assert message in caught.value.message


def test_a_pipe_over_a_stage_is_checked_with_both_formats_together() -> None:
    """A pipe's FIELD_DELIMITER may clash with its stage's RECORD_DELIMITER: the reader refuses the
    pair (CREATE PIPE checks the same, through the COPY compiler)."""
    merged = _format("RECORD_DELIMITER = ';'").merged({"field_delimiter": ";"})
    with pytest.raises(FileLoadError, match="cannot be a substring"):
        read_raw(b"1;2", merged, path="f.csv")


# ------------------------------------------------------------------------------------------------
# Positions, parts, and the tokenizer against pyarrow


def test_field_spans_and_characters_follow_escapes_and_delimiters() -> None:
    assert field_spans("a\\,b,c", ",", None, unenclosed_escape="\\") == [(0, 4), (5, 6)]
    assert field_spans("a||b~~c", "||", None, record_delimiter="~~") == [(0, 1), (3, 4)]
    fmt = FileFormat(field_delimiter="|", record_delimiter=";", skip_header=1)
    data = b"h\n1|a;22|b|c;"
    assert [csv_field_character(data, fmt, 3, n) for n in (1, 2, 3)] == [1, 4, 6]
    assert csv_field_character(data, fmt, 9, 1) == 1  # no such line


def test_later_parts_keep_delimiters_escapes_and_count_their_lines() -> None:
    fmt = FileFormat(field_delimiter="|", record_delimiter=";", encoding="UTF16", skip_header=1)
    first = read_csv_part(b"h\n1|a;2|b\\;c;", fmt, "f.csv", first=True, width=None)  # UTF-8 already
    assert rows(first) == [("1", "a"), ("2", "b;c")]
    assert first.lines == 4  # the header line, and three delimiters (an escaped one too)
    later = read_csv_part(b"3|x\\|y;4|z", fmt, "f.csv", first=False, width=2)
    assert rows(later) == [("3", "x|y"), ("4", "z")]
    assert later.line_numbers.to_pylist() == [1, 2]


def _tokenizer_only(data: bytes, fmt: FileFormat, columns: int | None = None) -> RawFile:
    with mock.patch("pipeline.formats.csv_records._pyarrow_plan", return_value=None):
        return read_raw(data, fmt, path="d/f.csv", columns=columns)


PIECE = st.sampled_from(["a", "b c", "1", "", '"x\ny"', '"q""q"', '"a,b"', "  ", "\\N", "NULL", "é", "\r"])
ESCAPED = st.sampled_from(["\\", "a\\,b", "\\\\", "\\\\N", "c:\\x", "\\ ", "\\\r"])  # and a line's end
LINE = st.lists(PIECE | ESCAPED, min_size=1, max_size=4).map(",".join)


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(LINE, min_size=1, max_size=12),
    newline=st.sampled_from(["\n", "\r\n"]),
    trailing=st.booleans(),
    quote=st.sampled_from(['"', None]),
    columns=st.sampled_from([None, 2, 3]),
    trim=st.booleans(),
    lenient=st.booleans(),
    skip_blank=st.booleans(),
    multi_line=st.booleans(),
    invalid=st.booleans(),
    escape=st.booleans(),
)
def test_floes_tokenizer_reads_what_pyarrow_reads(
    lines: list[str],
    newline: str,
    trailing: bool,
    quote: str | None,
    columns: int | None,
    trim: bool,
    lenient: bool,
    skip_blank: bool,
    multi_line: bool,
    invalid: bool,
    escape: bool,
) -> None:
    """Safeguard: the file pyarrow can read exactly (escapes written as placeholders when there is
    no quote) gives the same rows, numbers, lines and errors through Floe's tokenizer (which reads
    the files pyarrow cannot)."""
    data = (newline.join(lines) + (newline if trailing else "")).encode()
    if invalid:
        data = data.replace(b"b", b"\xff", 1)
    fmt = FileFormat(
        field_optionally_enclosed_by=quote,
        trim_space=trim and quote is None,  # TRIM_SPACE with quotes in the data is the tokenizer's
        null_if=["\\N", "NULL"],
        error_on_column_count_mismatch=not lenient,
        skip_blank_lines=skip_blank,
        multi_line=multi_line,
        escape_unenclosed_field="\\" if escape else None,
    )
    fast = read_raw(data, fmt, path="d/f.csv", columns=columns)
    slow = _tokenizer_only(data, fmt, columns)
    if lenient and columns is not None and quote is not None and any('"' in line for line in lines):
        return  # repairs re-read bad records with Python's csv module, which reads quotes its own way
    assert rows(slow) == rows(fast)
    assert slow.row_numbers.to_pylist() == fast.row_numbers.to_pylist()
    assert slow.line_numbers.to_pylist() == fast.line_numbers.to_pylist()
    assert [(e.code, e.row_number, e.line, e.character, e.field) for e in slow.errors] == [
        (e.code, e.row_number, e.line, e.character, e.field) for e in fast.errors
    ]
    assert (slow.rows_parsed, slow.width, slow.lines) == (fast.rows_parsed, fast.width, fast.lines)


# ------------------------------------------------------------------------------------------------
# Linear time: no input makes the tokenizer backtrack

N = 40_000
ADVERSARIAL = {
    "quotes": (b'"' * N, {"field_optionally_enclosed_by": '"'}),
    "quote pairs, never closed": (b'"' + b'""' * N, {"field_optionally_enclosed_by": '"'}),
    "escapes": (b"\\" * N + b"x", {}),
    "escaped quotes": (b'"' + b'\\"' * N, {"field_optionally_enclosed_by": '"', "escape": "\\"}),
    "delimiter prefixes": (b"|" * N + b"x", {"field_delimiter": "||x", "record_delimiter": "|;"}),
    "blanks before a quote": (b" " * N + b"a", {"field_optionally_enclosed_by": '"', "trim_space": True}),
    "trailing text": (b'"a"' + b"b" * N, {"field_optionally_enclosed_by": '"', "record_delimiter": ";;"}),
}


def _seconds(data: bytes, fmt: FileFormat) -> float:
    return cpu_seconds(lambda: _tokenizer_only(data, fmt))


@pytest.mark.parametrize("case", list(ADVERSARIAL), ids=list(ADVERSARIAL))
def test_the_tokenizer_runs_in_linear_time(case: str) -> None:
    """Doubling the input may not more than triple the time (plus timer noise on a shared machine)."""
    unit, options = ADVERSARIAL[case]
    fmt = FileFormat(**options)  # type: ignore[arg-type]
    once, twice = _seconds(unit, fmt), _seconds(unit + unit[: len(unit)], fmt)
    assert twice <= 3 * once + 0.02, f"{case}: {once:.4f}s for {len(unit)} bytes, {twice:.4f}s for twice"


def test_the_record_text_of_an_error_follows_the_format_and_shows_bad_bytes() -> None:
    """For REJECTED_RECORD: the record that starts on a line, by the file's own delimiters."""
    raw = csv(b"h\n1|Zo\xeb;2|x\\;y;", skip_header=1, field_delimiter="|", record_delimiter=";")
    assert csv_record_text(raw.data, raw.fmt, 2, 100) == "1|Zo0xEB"
    assert csv_record_text(raw.data, raw.fmt, 3, 100) == "2|x\\;y"
    assert csv_record_text(raw.data, raw.fmt, 3, 3) == "2|x"
    assert csv_record_text(raw.data, raw.fmt, 9, 100) is None
