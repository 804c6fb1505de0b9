"""JSON: one row per document (or array element), syntax errors as RowErrors, invalid UTF-8."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from floe.streaming.rows import parse_rows
from pipeline.formats import FileParseError, RawFile, read_checked_lines, read_raw

pytestmark = pytest.mark.unit


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


def test_json_invalid_utf8_names_the_line_its_place_and_its_bytes_as_snowflake_does() -> None:
    """Safeguard: a non-UTF-8 JSON file fails with its line quoted 0xNN-style and the position."""
    with pytest.raises(FileParseError) as caught:
        read_raw(b'{"a": 1}\n{"a": "\xff"}\n', FileFormat(type="JSON"), path="f.json")
    assert (caught.value.message, caught.value.line, caught.value.character) == (
        'Invalid UTF8 detected in string \'{"a": "0xFF"}\'',
        2,
        8,
    )


@given(
    st.lists(
        st.dictionaries(
            st.text(max_size=5),
            st.one_of(
                st.integers(-(2**63), 2**63 - 1),
                st.text(max_size=8),
                st.none(),
                st.booleans(),
                st.floats(allow_nan=False, allow_infinity=False),
            ),
            max_size=4,
        ),
        min_size=1,
        max_size=20,
    )
)
def test_checked_lines_read_as_read_json_reads_them(rows: list[dict[str, Any]]) -> None:
    """A streaming append the API checked is split into the documents read_json would find."""
    body = parse_rows(b"".join(orjson.dumps(r) + b"\n" for r in rows)).data
    fmt = FileFormat(type="JSON")
    fast, slow = read_checked_lines(body, fmt, "c/x/1"), read_raw(body, fmt, path="c/x/1")
    assert [json.loads(d) for d in fast.table.column("c1").to_pylist()] == rows
    assert fast.table.column("c1").to_pylist() == slow.table.column("c1").to_pylist()
    assert fast.row_numbers.to_pylist() == slow.row_numbers.to_pylist()
    assert fast.line_numbers.to_pylist() == slow.line_numbers.to_pylist()
    assert (fast.rows_parsed, fast.errors) == (slow.rows_parsed, slow.errors) == (len(rows), [])
