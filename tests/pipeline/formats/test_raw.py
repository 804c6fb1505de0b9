"""RawFile's records: RowError naming, FileParseError, placing invalid UTF-8."""

from __future__ import annotations

import pytest

from floe.errors import FileLoadError
from pipeline.formats import CODE_END_OF_RECORD, CODE_EXTRA_FIELD, FileParseError, RowError
from pipeline.formats.raw import end_of_record_message, find_invalid_utf8, show_invalid, utf8_error

pytestmark = pytest.mark.unit


def error(code: str, message: str) -> RowError:
    return RowError(row_number=1, line=1, character=1, column_name=None, message=message, code=code)


def test_naming_an_end_of_record_error_rewrites_the_column_its_message_quotes() -> None:
    named = error(CODE_END_OF_RECORD, end_of_record_message("c2")).named('"T"["B":2]')
    assert named.column_name == '"T"["B":2]'
    assert named.message == end_of_record_message('"T"["B":2]')


def test_naming_another_error_keeps_its_message() -> None:
    message = "Field delimiter ',' found while expecting record delimiter '\\n'"
    named = error(CODE_EXTRA_FIELD, message).named('"T"["A":1]')
    assert (named.column_name, named.message) == ('"T"["A":1]', message)


def test_invalid_utf8_is_placed_by_line_and_character_from_the_first_line_given() -> None:
    body = "ok\nCafé é\n".encode("latin-1")
    found = find_invalid_utf8(body, 5)
    assert found is not None
    assert (found.line, found.offset, show_invalid(found.text)) == (6, 3, "Caf0xE9 0xE9")
    err = utf8_error(body, "f.json", 5)
    assert isinstance(err, FileParseError)
    assert (err.message, err.line, err.character) == ("Invalid UTF8 detected in string 'Caf0xE9 0xE9'", 6, 4)
    assert str(err) == "Invalid UTF8 detected in string 'Caf0xE9 0xE9' (file=f.json, line 6, character 4)"


def test_valid_utf8_has_no_place() -> None:
    assert find_invalid_utf8("Café\n".encode(), 1) is None
    err = utf8_error(b"fine", "f.json", 1)
    assert type(err) is FileLoadError
    assert err.message == "Invalid UTF8 detected"


def test_a_quoted_value_is_cut_to_200_characters() -> None:
    assert show_invalid("x" * 300) == "x" * 200
