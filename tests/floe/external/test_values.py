"""Values on the wire: every argument type to JSON text, and JSON results to every return type."""

from __future__ import annotations

import json
import math
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from floe.catalog.models import Column
from floe.external.remote import loads
from floe.external.values import Unconvertible, converter, encode_column, to_arrow

pytestmark = pytest.mark.unit


def col(kind: str, precision: int | None = None, scale: int | None = None) -> Column:
    return Column(name="C", type=kind, precision=precision, scale=scale)


def texts(array: pa.Array, column: Column) -> list[str]:
    encoded, bad = encode_column(array, column)
    assert bad == {}
    return [t.decode() for t in encoded]


# ------------------------------------------------------------------------------------------------
# Arguments


def test_numbers_are_json_numbers_and_decimals_keep_every_digit() -> None:
    assert texts(pa.array([0, -7, 2**62, None], pa.int64()), col("NUMBER", 18, 0)) == [
        "0",
        "-7",
        str(2**62),
        "null",
    ]
    wide = col("NUMBER", 38, 10)
    values = [Decimal("12345678901234567890123456.0123456789"), Decimal("1E-10"), Decimal("-0.5"), None]
    encoded = texts(pa.array(values, pa.decimal128(38, 10)), wide)
    assert encoded == ["12345678901234567890123456.0123456789", "0.0000000001", "-0.5000000000", "null"]
    # Each is a JSON number that parses back to exactly the decimal sent.
    assert [loads(t) for t in encoded[:3]] == values[:3]


def test_floats_are_json_numbers_and_non_finite_ones_snowflakes_strings() -> None:
    values = [1.5, -0.0, 1e300, 5e-324, math.nan, math.inf, -math.inf, None]
    encoded = texts(pa.array(values, pa.float64()), col("FLOAT"))
    assert encoded == ["1.5", "-0.0", "1e+300", "5e-324", '"NaN"', '"inf"', '"-inf"', "null"]
    assert [json.loads(t) for t in encoded[:4]] == values[:4]


def test_strings_booleans_and_null() -> None:
    strings = ["", 'quote " and \\ backslash', "line\nbreak", "ünïcødé ✓", None]
    assert [json.loads(t) for t in texts(pa.array(strings), col("VARCHAR"))] == strings
    assert texts(pa.array([True, False, None]), col("BOOLEAN")) == ["true", "false", "null"]


def test_variants_are_their_json_values_sent_as_written() -> None:
    variants = ['{"a": [1, 2, {"b": null}]}', '"text"', "12345678901234567890123", "[]", "null", None]
    encoded = texts(pa.array(variants), col("VARIANT"))
    # Objects stay objects (not strings holding JSON), and a big integer keeps its digits.
    assert json.loads(encoded[0]) == {"a": [1, 2, {"b": None}]}
    assert encoded[1:] == ['"text"', "12345678901234567890123", "[]", "null", "null"]


def test_a_variant_that_is_not_json_fails_its_row_only() -> None:
    encoded, bad = encode_column(pa.array(['{"ok": 1}', "{not json", "NaN", "1 2"]), col("VARIANT"))
    assert set(bad) == {1, 2, 3}
    assert all("VARIANT" in why and "not json" not in why for why in bad.values())
    assert encoded[0] == b'{"ok": 1}'


def test_dates_and_timestamps_are_iso_8601_strings_with_microseconds() -> None:
    assert texts(pa.array([date(2014, 1, 1), None]), col("DATE")) == ['"2014-01-01"', "null"]
    ntz = pa.array([datetime(2014, 1, 1, 16, 0), datetime(2014, 1, 1, 16, 0, 0, 5)], pa.timestamp("us"))
    assert texts(ntz, col("TIMESTAMP_NTZ")) == [
        '"2014-01-01T16:00:00.000000"',
        '"2014-01-01T16:00:00.000005"',
    ]
    pst = timezone(timedelta(hours=-8))
    tz = pa.array([datetime(2014, 1, 1, 16, 0, tzinfo=pst)], pa.timestamp("us", tz="UTC"))
    # The seed's "Wed, 01 Jan 2014 16:00:00 -0800", as the instant Floe stores: in UTC.
    assert texts(tz, col("TIMESTAMP_TZ")) == ['"2014-01-02T00:00:00.000000+00:00"']


def test_arguments_cast_to_the_declared_type() -> None:
    assert texts(pa.array([1, 2], pa.int16()), col("NUMBER", 10, 2)) == ["1.00", "2.00"]
    assert texts(pa.chunked_array([["a"], ["b"]]), col("VARCHAR")) == ['"a"', '"b"']


# ------------------------------------------------------------------------------------------------
# Results


def convert(column: Column, value: Any) -> Any:
    return converter(column)(value)


def refused(column: Column, value: Any) -> str:
    with pytest.raises(Unconvertible) as caught:
        convert(column, value)
    return str(caught.value)


def test_number_results_round_half_up_to_the_scale_and_stay_in_range() -> None:
    money = col("NUMBER", 10, 2)
    assert convert(money, loads("1.005")) == Decimal("1.01")
    assert convert(money, 7) == Decimal("7.00")
    assert convert(money, " -2.5e1 ") == Decimal("-25.00")
    assert convert(col("NUMBER", 18, 0), loads("2.5")) == 3
    assert type(convert(col("NUMBER", 18, 0), 42)) is int
    big = "123456789012345678901234567890.12345678"
    assert convert(col("NUMBER", 38, 8), loads(big)) == Decimal(big)
    assert "out of range for NUMBER(10,2)" in refused(money, 123456789)
    assert "out of range" in refused(money, loads("1e999999999"))
    assert refused(money, "12abc") == "expected NUMBER(10,2), got a string that is not a number"
    assert refused(money, True) == "expected NUMBER(10,2), got a boolean"
    assert refused(money, {"a": 1}) == "expected NUMBER(10,2), got an object"
    assert "1_000" not in refused(money, "1_000")  # Python's underscores are no JSON number


def test_float_results_take_numbers_numeric_strings_and_the_special_strings() -> None:
    f = col("FLOAT")
    assert convert(f, loads("0.1")) == 0.1
    assert convert(f, 3) == 3.0
    assert convert(f, "2.5") == 2.5
    assert math.isnan(convert(f, "NaN"))
    assert convert(f, "-Infinity") == -math.inf
    assert convert(f, "inf") == math.inf
    assert "out of range for FLOAT" in refused(f, loads("1e400"))
    assert refused(f, [1]) == "expected FLOAT, got an array"


def test_varchar_results() -> None:
    v = col("VARCHAR")
    assert convert(v, "") == ""
    assert convert(v, 12) == "12"
    assert convert(v, loads("1.50")) == "1.50"
    assert convert(v, True) == "true"
    assert refused(v, {"a": 1}) == "expected VARCHAR, got an object"
    assert refused(col("VARCHAR", 3), "abcd") == "the string is longer than VARCHAR(3) allows"
    assert "surrogate" in refused(v, loads('"\\ud800"'))


def test_boolean_date_and_timestamp_results() -> None:
    b = col("BOOLEAN")
    assert [convert(b, x) for x in (True, "yes", "OFF", 0, loads("2.5"))] == [True, True, False, False, True]
    assert refused(b, "maybe") == "expected BOOLEAN, got a string that is not a boolean"
    assert convert(col("DATE"), "2024-02-29") == date(2024, 2, 29)
    assert convert(col("DATE"), "2024-02-29T10:00:00") == date(2024, 2, 29)
    assert refused(col("DATE"), "2024-02-30") == "expected DATE, got a string that is not a date"
    ntz, tz = col("TIMESTAMP_NTZ"), col("TIMESTAMP_TZ")
    # NTZ keeps the wall-clock time; TZ is the instant, in UTC.
    assert convert(ntz, "2014-01-01T16:00:00.123456-08:00") == datetime(2014, 1, 1, 16, 0, 0, 123456)
    assert convert(tz, "Wed, 01 Jan 2014 16:00:00 -0800") == datetime(2014, 1, 2, 0, 0, tzinfo=UTC)
    assert convert(tz, "2014-01-01 16:00:00") == datetime(2014, 1, 1, 16, 0, tzinfo=UTC)
    assert refused(tz, 1388620800) == "expected TIMESTAMP, got a number"


def test_variant_results_keep_any_json_value_as_its_text() -> None:
    v = col("VARIANT")
    doc = loads('{"score": 0.10, "label": "positive", "n": 123456789012345678901234, "l": [true, null]}')
    text = convert(v, doc)
    assert json.loads(text) == {
        "score": 0.1,
        "label": "positive",
        "n": 123456789012345678901234,
        "l": [True, None],
    }
    assert '"score":0.10' in text  # the decimal text as the service wrote it
    assert convert(v, "plain") == '"plain"'
    assert convert(v, []) == "[]"


def test_converted_values_fit_their_arrow_type() -> None:
    cases: list[tuple[Column, Any]] = [
        (col("NUMBER", 18, 0), 5),
        (col("NUMBER", 38, 2), "1.234"),
        (col("FLOAT"), "NaN"),
        (col("VARCHAR"), "x"),
        (col("BOOLEAN"), "t"),
        (col("DATE"), "2020-01-01"),
        (col("TIMESTAMP_NTZ"), "2020-01-01T00:00:00"),
        (col("TIMESTAMP_TZ"), "2020-01-01T00:00:00+01:00"),
        (col("TIMESTAMP_LTZ"), "2020-01-01T00:00:00+01:00"),
        (col("TIME"), "01:02:03.5"),
        (col("BINARY"), "00ff"),
        (col("VARIANT"), {"a": 1}),
    ]
    for column, value in cases:
        array = to_arrow([convert(column, value), None], column)
        assert array.null_count == 1
        assert len(array) == 2


def test_binary_time_and_ltz_arguments() -> None:
    """BINARY as upper-case hex (as Snowflake writes BINARY in JSON), TIME and TIMESTAMP_LTZ in ISO
    8601 like the other dates and times."""
    assert texts(pa.array([b"\x00\xff", None]), col("BINARY")) == ['"00FF"', "null"]
    assert texts(pa.array([time(1, 2, 3, 5)], pa.time64("us")), col("TIME")) == ['"01:02:03.000005"']
    ltz = pa.array([datetime(2014, 1, 1, 16, 0, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))
    assert texts(ltz, col("TIMESTAMP_LTZ")) == ['"2014-01-01T16:00:00.000000+00:00"']


def test_binary_time_and_ltz_results() -> None:
    assert convert(col("BINARY"), "00fF") == b"\x00\xff"
    assert refused(col("BINARY"), "0 0") == "expected BINARY, got a string that is not hex"
    assert refused(col("BINARY"), "abc") == "expected BINARY, got a string that is not hex"
    assert refused(col("BINARY", 1), "AABB") == "the binary value is longer than BINARY(1) allows"
    assert refused(col("BINARY"), 12) == "expected BINARY, got a number"
    assert convert(col("TIME"), "13:02") == time(13, 2)
    assert convert(col("TIME"), "13:02:03.25+02:00") == time(13, 2, 3, 250000)
    assert refused(col("TIME"), "1pm") == "expected TIME, got a string that is not a time"
    assert convert(col("TIMESTAMP_LTZ"), "2014-01-01 16:00:00-01:00") == datetime(2014, 1, 1, 17, tzinfo=UTC)
