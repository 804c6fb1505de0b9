"""Error codes, messages and positions in load history."""

from __future__ import annotations

from decimal import Decimal

import duckdb
import pytest

from floe.catalog.models import Column, FileFormat
from pipeline.formats import read_raw
from pipeline.transform.messages import column_display, conversion_message, duckdb_message, field_character
from tests.pipeline.transform.support import EVENTS, ORDERS, compile_for, load

pytestmark = pytest.mark.unit


def test_varchar_length_limit() -> None:
    _, result = load(compile_for(ORDERS), b"1,much-too-long,1,2024-01-01,true,2024-01-01\n")
    assert result.first_error == "User character length limit (8) exceeded by string 'much-too-long'"
    assert result.code == "100074"
    assert result.first_error_column == '"ORDERS"["NAME":2]'


def test_json_conversion_error_names_the_column() -> None:
    compiled = compile_for(EVENTS, columns=["ID"], select=["$1:id::number"], type="JSON")
    _, result = load(compiled, b'{"id": 1}\n{"id": "x1"}\n', "f.json")
    assert (result.status, result.first_error, result.first_error_line, result.first_error_column) == (
        "LOAD_FAILED",
        "Numeric value 'x1' is not recognized",
        2,
        '"EVENTS"["ID":1]',
    )


@pytest.mark.parametrize(
    ("sql", "code", "message"),
    [
        ("SELECT CAST('abc' AS INTEGER)", "100038", "Numeric value 'abc' is not recognized"),
        ("SELECT CAST('123.456' AS DECIMAL(4,2))", "100039", "Numeric value '123.456' is out of range"),
        ("SELECT CAST('maybe' AS BOOLEAN)", "100037", "Boolean value 'maybe' is not recognized"),
        ("SELECT CAST('2024-13-01' AS DATE)", "100040", "Date '2024-13-01' is not recognized"),
        ("SELECT strptime('x', '%Y-%m-%d')", "100040", "Date 'x' is not recognized"),
        ("SELECT strptime('x', '%Y-%m-%d %H')", "100035", "Timestamp 'x' is not recognized"),
        ("SELECT CAST('25:00:00' AS TIME)", "100000", "Time '25:00:00' is not recognized"),
        ("SELECT 1 // 0", "100051", "Division by zero"),
        ("SELECT error('boom')", "100000", "boom"),
    ],
)
def test_duckdb_errors_in_snowflakes_words(sql: str, code: str, message: str) -> None:
    with pytest.raises(duckdb.Error) as caught:
        duckdb.connect().sql(sql).fetchall()
    assert duckdb_message(caught.value) == (code, message)


def test_unclassified_errors_keep_their_first_line_without_the_class() -> None:
    assert duckdb_message(Exception("Binder Error: no such thing\n\nLINE 1: SELECT ...")) == (
        "100000",
        "no such thing",
    )


@pytest.mark.parametrize(
    ("value", "code", "message"),
    [
        (Decimal("123.4"), "100039", "Numeric value '123.4' is out of range"),
        ("12x", "100038", "Numeric value '12x' is not recognized"),
        (1e9, "100039", "Numeric value '1000000000' is out of range"),
    ],
)
def test_conversion_messages_tell_out_of_range_from_not_a_number(
    value: object, code: str, message: str
) -> None:
    column = Column(name="N", type="NUMBER", precision=4, scale=2)
    assert conversion_message(column, value) == (code, message)


def test_column_display_is_snowflakes_layout() -> None:
    assert column_display("ORDERS", ORDERS.columns[2], 3) == '"ORDERS"["AMOUNT":3]'


def test_field_character_counts_from_the_start_of_the_records_line() -> None:
    fmt = FileFormat(field_optionally_enclosed_by='"')
    raw = read_raw(b'a,b,c\n"x,y",zz,w\n', fmt, path="f.csv")
    assert field_character(raw, 2, 1) == 1
    assert field_character(raw, 2, 2) == 7  # past the quoted "x,y" and its delimiter
    assert field_character(raw, 2, 3) == 10
    assert field_character(raw, 2, 9) == 1  # no such field
    assert field_character(raw, 7, 2) == 1  # no such line


def test_field_character_far_into_a_file() -> None:
    # Past the first lines the line start is found in one vectorised pass: same answer.
    data = b"".join(b"%d,abc,d\n" % i for i in range(3000))
    raw = read_raw(data, FileFormat(), path="f.csv")
    assert field_character(raw, 2500, 2) == len(b"2499,") + 1
    assert field_character(raw, 1999, 3) == len(b"1998,abc,") + 1
    assert field_character(raw, 3002, 2) == 1  # no such line


@pytest.mark.parametrize(
    ("column", "value", "binary_format", "code", "message"),
    [
        (
            Column(name="B", type="BINARY"),
            "HELP",
            "HEX",
            "100115",
            "The following string is not a legal hex-encoded value: 'HELP'",
        ),
        (
            Column(name="B", type="BINARY"),
            "abc",
            "HEX",
            "100115",
            "The following string is not a legal hex-encoded value: 'abc'",
        ),
        (
            Column(name="B", type="BINARY"),
            "SGVsbG8",
            "BASE64",
            "100000",
            "The following string is not a legal base64-encoded value: 'SGVsbG8'",
        ),
        (
            Column(name="B", type="BINARY", precision=1),
            "AABB",
            "HEX",
            "100000",
            "Binary value 'AABB' is too long and would be truncated",
        ),
        (
            Column(name="B", type="BINARY", precision=1),
            "SGk=",
            "BASE64",
            "100000",
            "Binary value 'SGk=' is too long and would be truncated",
        ),
        (
            Column(name="B", type="BINARY", precision=1),
            b"\x01\x02",
            "HEX",
            "100000",
            "Binary value '0102' is too long and would be truncated",
        ),
        (Column(name="T", type="TIME"), "noon", "HEX", "100000", "Time 'noon' is not recognized"),
        (Column(name="L", type="TIMESTAMP_LTZ"), "x", "HEX", "100035", "Timestamp 'x' is not recognized"),
        (
            Column(name="S", type="VARCHAR", precision=1),
            b"hi",
            "HEX",
            "100074",
            "User character length limit (1) exceeded by string 'hi'",
        ),
        (
            Column(name="S", type="VARCHAR"),
            b"Caf\xe9",
            "HEX",
            "100000",
            "Invalid UTF8 detected in string 'Caf0xE9'",
        ),
        (Column(name="N", type="NUMBER"), b"\xab", "HEX", "100038", "Numeric value 'AB' is not recognized"),
    ],
)
def test_conversion_messages_of_binary_time_and_text(
    column: Column, value: object, binary_format: str, code: str, message: str
) -> None:
    assert conversion_message(column, value, binary_format) == (code, message)
