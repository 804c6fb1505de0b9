"""Value conversions: Snowflake's input rules for booleans, numbers, dates and timestamps."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from floe.catalog.models import Column, Table
from floe.errors import CompilationError
from pipeline.transform.conversion import nested_conversion
from tests.pipeline.transform.support import compile_for, load

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("T", True),
        ("Yes", True),
        ("y", True),
        ("on", True),
        ("1", True),
        ("FALSE", False),
        ("f", False),
        ("no", False),
        ("N", False),
        ("off", False),
        ("0", False),
    ],
)
def test_boolean_words(text: str, expected: bool) -> None:
    table = Table(name="D.S.B", columns=[Column(name="B", type="BOOLEAN")])
    out, result = load(compile_for(table), text.encode() + b"\n")
    assert result.status == "LOADED"
    assert out == [{"B": expected}]


def test_bad_boolean_is_an_error() -> None:
    table = Table(name="D.S.B", columns=[Column(name="B", type="BOOLEAN")])
    _, result = load(compile_for(table), b"maybe\n")
    assert (result.status, result.first_error, result.code) == (
        "LOAD_FAILED",
        "Boolean value 'maybe' is not recognized",
        "100037",
    )


def test_auto_date_and_timestamp_formats() -> None:
    table = Table(
        name="D.S.T",
        columns=[
            Column(name="D", type="DATE"),
            Column(name="NTZ", type="TIMESTAMP_NTZ"),
            Column(name="TZ", type="TIMESTAMP_TZ"),
        ],
    )
    data = (
        b"2024-01-02|2024-01-02T03:04:05.123456|2024-01-02 03:04:05 +02:00\n"
        b"01/02/2024|2024-01-02 03:04:05+02:00|2024-01-02T03:04:05Z\n"
        b"02-Jan-2024|Tue, 02 Jan 2024 03:04:05 +0200|2024-01-02 03:04:05\n"
    )
    out, result = load(compile_for(table, field_delimiter="|"), data)
    assert result.status == "LOADED", result
    utc = dt.UTC
    assert [r["D"] for r in out] == [dt.date(2024, 1, 2)] * 3
    assert [r["NTZ"] for r in out] == [
        dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
        dt.datetime(2024, 1, 2, 3, 4, 5),  # NTZ ignores the offset
        dt.datetime(2024, 1, 2, 3, 4, 5),
    ]
    assert [r["TZ"] for r in out] == [
        dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=utc),  # stored as UTC
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=utc),
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=utc),
    ]


def test_explicit_date_format() -> None:
    table = Table(name="D.S.T", columns=[Column(name="D", type="DATE")])
    out, result = load(compile_for(table, date_format="DD.MM.YYYY"), b"03.02.2024\n")
    assert result.status == "LOADED"
    assert out == [{"D": dt.date(2024, 2, 3)}]


def test_number_rounds_to_scale_and_wide_numbers_are_decimal() -> None:
    table = Table(
        name="D.S.N",
        columns=[
            Column(name="I", type="NUMBER", precision=38, scale=0),
            Column(name="S", type="NUMBER", precision=10, scale=1),
            Column(name="F", type="FLOAT"),
        ],
    )
    out, result = load(compile_for(table), b"12.5,98.76546,1e3\n-12.5,1,NaN\n")
    assert result.status == "LOADED"
    assert out[0] == {"I": Decimal("13"), "S": Decimal("98.8"), "F": 1000.0}
    assert out[1]["I"] == Decimal("-13")
    assert out[1]["F"] != out[1]["F"]  # NaN


def test_number_out_of_range_and_not_recognized() -> None:
    table = Table(name="D.S.N", columns=[Column(name="N", type="NUMBER", precision=4, scale=2)])
    _, result = load(compile_for(table, on_error="CONTINUE"), b"123.4\nabc\n")
    assert (result.first_error, result.code) == ("Numeric value '123.4' is out of range", "100039")
    assert result.errors_seen == 2


def test_try_cast_is_lenient_but_plain_cast_is_not() -> None:
    table = Table(name="D.S.T", columns=[Column(name="D", type="DATE")])
    out, result = load(compile_for(table, select=["TRY_TO_DATE($1)"]), b"nope\n2024-01-01\n")
    assert result.status == "LOADED"
    assert out == [{"D": None}, {"D": dt.date(2024, 1, 1)}]
    _, result = load(compile_for(table, select=["$1::date"]), b"nope\n2024-01-01\n")
    assert (result.status, result.first_error) == ("LOAD_FAILED", "Date 'nope' is not recognized")


def test_conversions_inside_expressions_use_snowflakes_words_and_formats() -> None:
    table = Table(name="D.S.T", columns=[Column(name="V", type="VARCHAR")])
    compiled = compile_for(table, select=["IFF($1::boolean, 'yes', 'no') || ' ' || TO_DATE($2)::varchar"])
    out, result = load(compiled, b"on,01/02/2024\nOFF,2024-03-04 05:06:07\n")
    assert result.status == "LOADED", result
    assert out == [{"V": "yes 2024-01-02"}, {"V": "no 2024-03-04"}]


def test_a_conversion_to_an_unsupported_type_does_not_compile() -> None:
    with pytest.raises(CompilationError, match="Unsupported data type 'GEOGRAPHY'"):
        nested_conversion("x", "GEOGRAPHY", None, None, safe=False)


def test_a_raising_binary_conversion_inside_an_expression_is_refused() -> None:
    """Its error would have to quote the value, which a row error inside TRY cannot."""
    with pytest.raises(CompilationError, match="TRY_TO_BINARY"):
        nested_conversion("x", "BINARY", None, None, safe=False)


@pytest.mark.parametrize("kind", ["DATE", "TIMESTAMP_NTZ", "TIMESTAMP_TZ"])
@pytest.mark.parametrize("text", ["infinity", "-infinity", " infinity", "Infinity"])
def test_infinite_dates_and_timestamps_are_errors_not_values(kind: str, text: str) -> None:
    """DuckDB reads 'infinity' as a date or timestamp; Snowflake has no such value. A column loads
    it as an error, whichever path (the fast cast, or the AUTO rules) sees it."""
    table = Table(name="D.S.T", columns=[Column(name="ID", type="NUMBER"), Column(name="V", type=kind)])
    out, result = load(compile_for(table, on_error="CONTINUE"), f"1,2024-05-01\n2,{text}\n".encode())
    assert (result.status, result.rows_loaded, result.errors_seen) == ("PARTIALLY_LOADED", 1, 1)
    assert out[0]["ID"] == 1 and len(out) == 1
    word = "Date" if kind == "DATE" else "Timestamp"
    assert result.first_error == f"{word} '{text}' is not recognized", result.first_error


@pytest.mark.parametrize("kind", ["DATE", "TIMESTAMP_NTZ", "TIMESTAMP_TZ"])
def test_infinite_values_inside_an_expression_are_null(kind: str) -> None:
    """Inside an expression an infinite value cannot fail its row (DuckDB refuses error() under the
    TRY that catches row errors), so it is NULL: never a value pyarrow and Snowflake lack."""
    table = Table(name="D.S.T", columns=[Column(name="ID", type="NUMBER"), Column(name="V", type="VARCHAR")])
    for select in (["$1", f"TO_VARCHAR($2::{kind})"], ["$1", f"TO_VARCHAR(TRY_CAST($2 AS {kind}))"]):
        out, result = load(compile_for(table, select=select), b"1,2024-05-01\n2,infinity\n")
        assert result.status == "LOADED", result.first_error
        assert out[0]["V"] is not None and out[1]["V"] is None
