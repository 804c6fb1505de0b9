"""JSON: one row per document (or array element), syntax errors as RowErrors, invalid UTF-8."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from floe.streaming.rows import parse_rows
from pipeline.formats import FileParseError, RawFile, read_checked_lines, read_raw
from pipeline.formats.json_documents import octal_to_decimal
from tests.cpu_time import cpu_seconds

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


# ---------------------------------------------------------------------------------------------
# ALLOW_DUPLICATE, STRIP_NULL_VALUES, IGNORE_UTF8_ERRORS / REPLACE_INVALID_CHARACTERS, ENABLE_OCTAL


def docs(raw: RawFile) -> list[Any]:
    return [json.loads(d) for d in raw.table.column("c1").to_pylist()]


def test_a_duplicate_key_is_an_error_of_its_document_with_snowflakes_message_and_pos() -> None:
    """PARSE_JSON's documented example: '{ "a" : "123", "b" : "456", "a": "789"} ' fails with
    'Error parsing JSON: duplicate object attribute "a", pos 31' (100069); the other lines load."""
    raw = jsn(b'{"ok": 1}\n{ "a" : "123", "b" : "456", "a": "789"} \n{"x": {"q": 1, "q": 2}}\n{"ok": 2}\n')
    assert docs(raw) == [{"ok": 1}, {"ok": 2}]
    assert raw.row_numbers.to_pylist() == [1, 4]
    first, second = raw.errors
    assert (first.message, first.code, first.row_number, first.line, first.character) == (
        'Error parsing JSON: duplicate object attribute "a", pos 31',
        "100069",
        2,
        2,
        32,
    )
    assert second.message == 'Error parsing JSON: duplicate object attribute "q", pos 18'


def test_a_duplicate_key_inside_a_stripped_array_fails_its_element_only() -> None:
    raw = jsn(b'[{"a": 1},\n {"a": 1, "a": 2},\n {"a": 3}]', strip_outer_array=True)
    assert docs(raw) == [{"a": 1}, {"a": 3}]
    assert [(e.row_number, e.line) for e in raw.errors] == [(2, 2)]


def test_the_same_key_in_different_objects_is_no_duplicate() -> None:
    raw = jsn(b'{"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}], "c": "\\"a\\""}\n')
    assert raw.errors == []
    assert raw.table.column("c1").to_pylist() == [
        '{"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}], "c": "\\"a\\""}'
    ]


def test_allow_duplicate_keeps_the_last_value_of_a_key() -> None:
    raw = jsn(b'{ "a" : "123", "b" : "456", "a": "789"}\n{"x": {"q": 1, "q": [2]}}\n', allow_duplicate=True)
    assert raw.errors == []
    assert docs(raw) == [{"a": "789", "b": "456"}, {"x": {"q": [2]}}]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # The documented table; Snowflake's empty slots ([,,3]) keep their place as null (see
        # json_documents' docstring).
        ("[null]", [None]),
        ("[null,null,3]", [None, None, 3]),
        ('{"a":null,"b":null,"c":123}', {"c": 123}),
        ('{"a":[1,null,2],"b":{"x":null,"y":88}}', {"a": [1, None, 2], "b": {"y": 88}}),
    ],
)
def test_strip_null_values_removes_null_object_fields(before: str, after: Any) -> None:
    raw = jsn(before.encode(), strip_null_values=True)
    assert docs(raw) == [after]


def test_without_strip_null_values_nulls_stay_and_the_text_is_untouched() -> None:
    raw = jsn(b'{"a": null, "c": 123}')
    assert raw.table.column("c1").to_pylist() == ['{"a": null, "c": 123}']


def test_a_string_saying_null_is_not_stripped() -> None:
    raw = jsn(b'{"a": "null", "b": null}', strip_null_values=True)
    assert docs(raw) == [{"a": "null"}]


@pytest.mark.parametrize("option", ["replace_invalid_characters", "ignore_utf8_errors"])
def test_invalid_utf8_becomes_the_replacement_character(option: str) -> None:
    raw = jsn(b'{"a": "Caf\xe9 \xf0\x9f"}\n{"a": "ok"}\n', **{option: True})
    assert docs(raw) == [{"a": "Caf\ufffd \ufffd"}, {"a": "ok"}]
    assert raw.errors == []


def test_enable_octal_reads_numbers_with_a_leading_zero_as_octal() -> None:
    raw = jsn(
        b'{"a": 010, "b": "010", "c": -017, "d": 0, "e": 0.5, "f": 1e010, "g": [07, 00]}', enable_octal=True
    )
    assert docs(raw) == [{"a": 8, "b": "010", "c": -15, "d": 0, "e": 0.5, "f": 1e10, "g": [7, 0]}]


def test_without_enable_octal_a_leading_zero_is_a_syntax_error() -> None:
    raw = jsn(b'{"a": 010}\n{"a": 1}\n')
    assert docs(raw) == [{"a": 1}]
    assert [e.code for e in raw.errors] == ["100069"]


def test_enable_octal_leaves_strings_with_escaped_quotes_alone() -> None:
    raw = jsn(b'{"a": "x\\" 010 \\\\", "b": 010}', enable_octal=True)
    assert docs(raw) == [{"a": 'x" 010 \\', "b": 8}]


def test_octal_rewrite_is_linear_on_adversarial_text() -> None:
    """Safeguard: ENABLE_OCTAL's scan sees user data; its regex and string skipping are linear."""

    for unit in ("0" * 7 + "8 ", '"\\', "-0", "07."):
        small, large = unit * 20_000, unit * 40_000
        t_small = cpu_seconds(partial(octal_to_decimal, small))
        t_large = cpu_seconds(partial(octal_to_decimal, large))
        assert t_large <= 3 * t_small + 0.005, (unit, t_small, t_large)


def test_multi_line_false_makes_a_document_spanning_lines_an_error() -> None:
    raw = jsn(b'{"a":\n 1}\n{"b": 2}\n', multi_line=False)
    assert docs(raw) == [{"b": 2}]
    (err,) = raw.errors
    assert (err.row_number, err.line, err.code) == (1, 1, "100069")
