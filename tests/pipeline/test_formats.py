"""read_raw: decompression, CSV / JSON / Parquet parsing, numbering, per-record parse errors."""

from __future__ import annotations

import bz2
import gzip
import io
import tracemalloc
import zlib
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import PartTooLarge
from pipeline.formats import FileParseError, RawFile, read_raw
from tests.security.attacks import bombs

pytestmark = pytest.mark.unit


def csv(data: bytes, columns: int | None = None, max_bytes: int | None = None, **options: Any) -> RawFile:
    return read_raw(data, FileFormat(**options), path="d/f.csv", columns=columns, max_bytes=max_bytes)


def rows(raw: RawFile) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in raw.table.to_pylist()]


# ------------------------------------------------------------------------------------------------
# CSV


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


def test_byte_order_mark_is_skipped() -> None:
    raw = csv(b"\xef\xbb\xbfa,b\n")
    assert rows(raw) == [("a", "b")]


@pytest.mark.parametrize("compression", ["AUTO", "GZIP"])
def test_gzip(compression: str) -> None:
    raw = csv(gzip.compress(b"1,a\n2,b\n"), compression=compression)
    assert rows(raw) == [("1", "a"), ("2", "b")]


def test_auto_detects_bz2_and_none_leaves_bytes_alone() -> None:
    assert rows(csv(bz2.compress(b"1,a\n"))) == [("1", "a")]
    assert rows(csv(b"1,a\n", compression="NONE")) == [("1", "a")]


@pytest.mark.parametrize(
    "payload",
    [gzip.compress(b"1,a\n" * 1000)[:-20], b"\x1f\x8b\x08\x00garbage-garbage-garbage"],
    ids=["truncated", "corrupt"],
)
def test_bad_gzip_is_a_file_load_error(payload: bytes) -> None:
    with pytest.raises(FileLoadError, match=r"decompression.*GZIP"):
        csv(payload)


def test_forced_gzip_on_plain_bytes_fails_cleanly() -> None:
    with pytest.raises(FileLoadError):
        csv(b"1,a\n", compression="GZIP")


@pytest.mark.parametrize("kind", ["CSV", "JSON", "PARQUET"])
def test_zero_byte_file_is_zero_rows(kind: str) -> None:
    raw = read_raw(b"", FileFormat(type=kind), path="empty")  # type: ignore[arg-type]
    assert raw.num_rows == 0
    assert raw.rows_parsed == 0
    assert raw.errors == []


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
    with pytest.raises(FileParseError) as caught:
        read_raw(b'{"a": 1}\n{"a": "\xff"}\n', FileFormat(type="JSON"), path="f.json")
    assert (caught.value.message, caught.value.line, caught.value.character) == (
        'Invalid UTF8 detected in string \'{"a": "0xFF"}\'',
        2,
        8,
    )


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


# ------------------------------------------------------------------------------------------------
# JSON


def jsn(data: bytes, **options: Any) -> RawFile:
    return read_raw(data, FileFormat(type="JSON", **options), path="d/f.json")


def test_ndjson_one_row_per_document_and_bad_line_is_a_row_error() -> None:
    raw = jsn(b'{"a": 1}\n\n{"a": [1, 2]}\n{"a": \n{"b": "x"}\n')
    assert raw.table.column("c1").to_pylist() == ['{"a": 1}', '{"a": [1, 2]}', '{"b": "x"}']
    assert raw.line_numbers.to_pylist() == [1, 3, 5]
    assert raw.row_numbers.to_pylist() == [1, 2, 4]
    assert raw.rows_parsed == 4
    (err,) = raw.errors
    assert (err.code, err.line, err.row_number) == ("100069", 4, 3)
    assert err.message.startswith("Error parsing JSON: ")


def test_pretty_printed_documents_span_lines() -> None:
    raw = jsn(b'{\n  "a": 1\n}\n{\n  "a": 2\n}\n')
    assert raw.num_rows == 2
    assert raw.line_numbers.to_pylist() == [1, 4]
    assert raw.errors == []


def test_strip_outer_array_gives_one_row_per_element() -> None:
    raw = jsn(b'[\n {"a": 1},\n {"a": 2},\n 3\n]\n', strip_outer_array=True)
    assert raw.table.column("c1").to_pylist() == ['{"a": 1}', '{"a": 2}', "3"]
    assert raw.line_numbers.to_pylist() == [2, 3, 4]
    assert raw.errors == []


def test_strip_outer_array_bad_element_keeps_the_others() -> None:
    raw = jsn(b'[\n {"a": 1},\n {"a": },\n {"a": 3}\n]\n', strip_outer_array=True)
    assert raw.table.column("c1").to_pylist() == ['{"a": 1}', '{"a": 3}']
    assert [e.line for e in raw.errors] == [3]


def test_array_without_strip_outer_array_is_one_row() -> None:
    raw = jsn(b'[{"a": 1}, {"a": 2}]')
    assert raw.num_rows == 1


def test_json_invalid_utf8_is_a_file_load_error() -> None:
    with pytest.raises(FileLoadError):
        jsn(b'{"a": "\xff"}\n')


# ------------------------------------------------------------------------------------------------
# Parquet


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def test_parquet_keeps_its_columns_and_types() -> None:
    data = parquet_bytes(pa.table({"Id": pa.array([1, 2], pa.int32()), "name": ["a", None]}))
    raw = read_raw(data, FileFormat(type="PARQUET"), path="f.parquet")
    assert raw.table.column_names == ["Id", "name"]
    assert raw.table.schema.field("Id").type == pa.int32()
    assert raw.row_numbers.to_pylist() == [1, 2]
    assert raw.rows_parsed == 2


def test_truncated_parquet_is_a_file_load_error() -> None:
    data = parquet_bytes(pa.table({"a": list(range(100))}))
    with pytest.raises(FileLoadError, match="parquet"):
        read_raw(data[: len(data) // 2], FileFormat(type="PARQUET"), path="f.parquet")


def test_truncated_parquet_message_does_not_mention_floe_internals() -> None:
    """Safeguard: the error a user sees names the file's problem, not Floe's in-memory buffer."""
    data = parquet_bytes(pa.table({"a": list(range(100))}))
    with pytest.raises(FileLoadError) as caught:
        read_raw(data[: len(data) // 2], FileFormat(type="PARQUET"), path="f.parquet")
    assert caught.value.message == (
        "Error parsing the parquet file: Parquet magic bytes not found in footer. "
        "Either the file is corrupted or this is not a parquet file."
    )


def test_parquet_column_name_that_is_not_utf8_is_a_file_load_error() -> None:
    """Safeguard: pyarrow decodes column names lazily; a bad one must fail the file, not the batch."""
    data = parquet_bytes(pa.table({"colXname": [1, 2]})).replace(b"colXname", b"col\x85name")
    with pytest.raises(FileLoadError, match="column name is not UTF-8"):
        read_raw(data, FileFormat(type="PARQUET"), path="f.parquet")


def test_parquet_string_that_is_not_utf8_is_an_error_of_its_row() -> None:
    """Safeguard: pyarrow does not check Parquet strings; an invalid one loaded into a blob would
    make every later query of the table fail, so its row is an error and the others load."""
    names = pa.array([b"Ann", b"Zo\xeb", b"Bo"], pa.binary())
    broken = pa.Array.from_buffers(pa.string(), 3, names.buffers())
    table = pa.table({"id": [1, 2, 3], "name": broken, "tags": pa.array([["x"], ["y"], ["ü"]])})
    raw = read_raw(parquet_bytes(table), FileFormat(type="PARQUET"), path="f.parquet")
    assert raw.table.column("id").to_pylist() == [1, 3]
    assert raw.row_numbers.to_pylist() == [1, 3]
    (err,) = raw.errors
    assert (err.row_number, err.line, err.message) == (2, 2, "Invalid UTF8 detected in string 'Zo0xEB'")
    assert raw.rows_parsed == 3


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
# Bounded whole-file reads (decompression bombs, issue 9)


@pytest.mark.parametrize(
    ("compression", "pack"),
    [
        ("AUTO", gzip.compress),
        ("AUTO", lambda b: gzip.compress(b[:7]) + gzip.compress(b[7:])),
        ("AUTO", bz2.compress),
        ("AUTO", lambda b: pa.compress(b, "zstd", asbytes=True)),
        ("BROTLI", lambda b: pa.compress(b, "brotli", asbytes=True)),
        ("DEFLATE", zlib.compress),
        ("RAW_DEFLATE", lambda b: zlib.compress(b, wbits=-15)),
        ("NONE", lambda b: b),
    ],
)
def test_whole_file_read_at_max_bytes_loads_and_one_byte_over_fails(compression: str, pack: Any) -> None:
    data = b"1,a\n2,b\n3,c\n"
    raw = csv(pack(data), compression=compression, max_bytes=len(data))
    assert rows(raw) == [("1", "a"), ("2", "b"), ("3", "c")]
    with pytest.raises(PartTooLarge) as caught:
        csv(pack(data), compression=compression, max_bytes=len(data) - 1)
    assert caught.value.message == (
        "File 'd/f.csv' decompresses to more than 11 bytes (pipeline.max_part_bytes), and it is read "
        "whole; split it into smaller files, or raise pipeline.max_part_bytes if such files are expected."
    )


def test_a_whole_read_bomb_costs_the_bound_not_its_size() -> None:
    """Safeguard: a whole-file read decompresses incrementally and stops at the bound; before, a
    64 MiB gzip could inflate to 64 GiB in one worker."""
    bomb = bombs.gzip_bomb(256 * bombs.MiB, bombs.lines())
    tracemalloc.start()
    try:
        with pytest.raises(PartTooLarge):
            csv(bomb, max_bytes=4 * bombs.MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 24 * bombs.MiB, f"inflating the bomb took {peak / bombs.MiB:.1f} MiB"


def test_json_and_parquet_say_they_are_read_whole() -> None:
    docs = b'{"a": 1}\n' * 100
    with pytest.raises(
        PartTooLarge, match=r"more than 100 bytes \(pipeline.max_part_bytes\), and JSON files"
    ):
        read_raw(gzip.compress(docs), FileFormat(type="JSON"), path="d.json.gz", max_bytes=100)
    buf = io.BytesIO()
    # Uncompressed pages, so the file's own inflated size (its pages) is below its stored size.
    pq.write_table(pa.table({"a": list(range(1000))}), buf, compression="none")
    parquet = buf.getvalue()
    assert read_raw(
        gzip.compress(parquet), FileFormat(type="PARQUET"), path="p", max_bytes=len(parquet)
    ).num_rows
    with pytest.raises(PartTooLarge, match="and Parquet files are read whole"):
        read_raw(gzip.compress(parquet), FileFormat(type="PARQUET"), path="p", max_bytes=len(parquet) - 1)
    with pytest.raises(PartTooLarge, match="and Parquet files are read whole"):
        read_raw(parquet, FileFormat(type="PARQUET"), path="p", max_bytes=len(parquet) - 1)


def test_a_parquet_file_whose_pages_inflate_past_the_bound_fails_unread() -> None:
    """Parquet's own page compression: 64 MiB of one repeated string zstd-compress to a few KiB."""
    buf = io.BytesIO()
    value = "x" * (1 << 20)
    pq.write_table(
        pa.table({"s": [value] * 64}), buf, compression="zstd", use_dictionary=False, row_group_size=64
    )
    bomb = buf.getvalue()
    assert len(bomb) < 1 << 20  # small as stored
    with pytest.raises(PartTooLarge, match="and Parquet files are read whole"):
        read_raw(bomb, FileFormat(type="PARQUET"), path="bomb.parquet", max_bytes=16 << 20)
    assert read_raw(bomb, FileFormat(type="PARQUET"), path="bomb.parquet", max_bytes=128 << 20).num_rows == 64
