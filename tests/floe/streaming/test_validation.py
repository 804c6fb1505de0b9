"""Streaming rows on the client: serialization to NDJSON values and validation against the table's
columns with the Snowpipe Streaming SDK's type rules."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Context, Decimal
from enum import Enum, IntEnum
from typing import Any
from uuid import UUID

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from floe.catalog.models import COLUMN_TYPES, Column
from floe.streaming.validation import (
    MAX_BINARY_LENGTH,
    ColumnSpec,
    RowError,
    row_line,
    serialize_row,
    serialize_value,
    validate_row,
    validate_rows,
)

pytestmark = pytest.mark.unit


def error_of(sql_type: str, value: Any) -> str | None:
    """The message for one value in a nullable column named C of sql_type, None when it loads."""
    errors = validate_row({"c": value}, [ColumnSpec("C", sql_type, True)], index=0)
    assert len(errors) <= 1
    return errors[0].message if errors else None


def wrong_type(py_type: str, sql_type: str, allowed: str) -> str:
    return (
        f"Value of Python type {py_type} cannot be ingested into a column of type {sql_type}; "
        f"allowed: {allowed}"
    )


NUMBERS = "int, float, Decimal, str"
TEMPORAL = "date, datetime, int, str"

# (column type, value, expected message or None when the value loads)
CASES: list[tuple[str, Any, str | None]] = [
    # NUMBER: numbers and numeric text; extra scale digits round half away from zero
    ("NUMBER(38,0)", 12, None),
    ("NUMBER(38,0)", -(10**38) + 1, None),
    ("NUMBER(38,0)", 10**38, "Number out of representable range: type NUMBER(38,0), value " + "1" + "0" * 38),
    ("NUMBER(10,2)", Decimal("12345678.99"), None),
    ("NUMBER(10,2)", "99999999.994", None),
    (
        "NUMBER(10,2)",
        "99999999.995",
        "Number out of representable range: type NUMBER(10,2), value 99999999.995",
    ),
    ("NUMBER(10,2)", 123456789, "Number out of representable range: type NUMBER(10,2), value 123456789"),
    ("NUMBER(10,2)", 1.005, None),
    ("NUMBER(10,2)", " -1.5e3 ", None),
    ("NUMBER(10,2)", "+.5", None),
    ("NUMBER(10,2)", "5.", None),
    ("NUMBER(10,2)", "1e-99999999999999999999", None),
    (
        "NUMBER(10,2)",
        "1e99999999999999999999",
        "Number out of representable range: type NUMBER(10,2), value 1e99999999999999999999",
    ),
    ("NUMBER(2,2)", "0.994", None),
    ("NUMBER(2,2)", "0.995", "Number out of representable range: type NUMBER(2,2), value 0.995"),
    ("NUMBER", "abc", "Numeric value 'abc' is not recognized"),
    ("NUMBER", "", "Numeric value '' is not recognized"),
    ("NUMBER", "1_000", "Numeric value '1_000' is not recognized"),
    ("NUMBER", "NaN", "Numeric value 'NaN' is not recognized"),
    ("NUMBER", "\u0661", "Numeric value '\u0661' is not recognized"),
    ("NUMBER", "1e", "Numeric value '1e' is not recognized"),
    ("NUMBER", ".", "Numeric value '.' is not recognized"),
    ("NUMBER", float("inf"), "Numeric value 'inf' is not recognized"),
    ("NUMBER", Decimal("NaN"), "Numeric value 'NaN' is not recognized"),
    ("INT", True, wrong_type("bool", "INT", NUMBERS)),
    ("INTEGER", [1], wrong_type("list", "INTEGER", NUMBERS)),
    ("BIGINT", 2**63, None),
    ("NUMERIC(5, 1)", "1234.5", None),
    # FLOAT
    ("FLOAT", 1.5, None),
    ("FLOAT", float("nan"), None),
    ("FLOAT", "NaN", None),
    ("FLOAT", "inf", None),
    ("FLOAT", "-inf", None),
    ("FLOAT", "-Infinity", None),
    ("FLOAT", "1.5e300", None),
    ("FLOAT", Decimal("1.1"), None),
    ("FLOAT", 10**400, "Number out of representable range: type FLOAT, value " + "1" + "0" * 199 + "..."),
    ("FLOAT", "1e400", "Number out of representable range: type FLOAT, value 1e400"),
    ("DOUBLE", "x1", "Numeric value 'x1' is not recognized"),
    ("FLOAT", False, wrong_type("bool", "FLOAT", NUMBERS)),
    # VARCHAR: text of strings, numbers and booleans, length checked on that text
    ("VARCHAR(5)", "abcde", None),
    ("VARCHAR(5)", "abcdef", "String 'abcdef' is too long and would be truncated"),
    ("VARCHAR(5)", "ééééé", None),
    ("VARCHAR(4)", True, None),
    ("VARCHAR(4)", False, "String 'false' is too long and would be truncated"),
    ("VARCHAR(3)", 123, None),
    ("VARCHAR(3)", -123, "String '-123' is too long and would be truncated"),
    ("VARCHAR(3)", 2.0, None),
    ("VARCHAR(3)", Decimal("1E+3"), "String '1000' is too long and would be truncated"),
    ("VARCHAR(3)", float("nan"), None),
    ("VARCHAR", "x" * 1000, None),
    ("VARCHAR(16777216)", "y", None),
    ("STRING", "z", None),
    ("CHAR", "ab", "String 'ab' is too long and would be truncated"),
    ("VARCHAR(10)", {"a": 1}, wrong_type("dict", "VARCHAR(10)", "str, int, float, bool, Decimal")),
    ("VARCHAR(10)", date(2020, 1, 1), wrong_type("date", "VARCHAR(10)", "str, int, float, bool, Decimal")),
    ("VARCHAR(1)", "a" * 300, f"String '{'a' * 200}...' is too long and would be truncated"),
    # BOOLEAN: booleans, numbers (0 false), Snowflake's words in any case, untrimmed
    ("BOOLEAN", True, None),
    ("BOOLEAN", 0, None),
    ("BOOLEAN", -2.5, None),
    ("BOOLEAN", Decimal("0.0"), None),
    ("BOOLEAN", 2**63 - 1, None),
    ("BOOLEAN", 2**63, "Boolean value '9223372036854775808' is not recognized"),  # sent as text
    *[
        ("BOOLEAN", word, None)
        for word in ("true", "FALSE", "t", "F", "Yes", "no", "Y", "n", "on", "OFF", "1", "0")
    ],
    ("BOOLEAN", "2", "Boolean value '2' is not recognized"),
    ("BOOLEAN", " true", "Boolean value ' true' is not recognized"),
    ("BOOLEAN", "", "Boolean value '' is not recognized"),
    ("BOOLEAN", "oN\u0130", "Boolean value 'oN\u0130' is not recognized"),
    ("BOOLEAN", float("nan"), "Boolean value 'NaN' is not recognized"),
    ("BOOLEAN", float("-inf"), "Boolean value '-inf' is not recognized"),
    ("BOOLEAN", Decimal("Infinity"), "Boolean value 'inf' is not recognized"),
    ("BOOLEAN", [True], wrong_type("list", "BOOLEAN", "bool, int, float, Decimal, str")),
    # DATE: date objects, the seed's formats, integer-stored values
    ("DATE", date(2013, 4, 28), None),
    ("DATE", datetime(2013, 4, 28, 20, 57), None),
    ("DATE", "2013-04-28", None),
    ("DATE", "2013-04-28T20:57:01.123456789+07:00", None),
    ("DATE", "2013-04-28T20:57:01.123456", None),
    ("DATE", "2013-04-28T20:57:01", None),
    ("DATE", "2013-04-28T20:57", None),
    ("DATE", "2013-04-28T20:57:01-07:00", None),
    ("DATE", "2013-04-28T20:57-07:00", None),
    ("DATE", "1366923421", None),
    ("DATE", 1366923421000, None),
    ("DATE", "2013-02-29", "Date '2013-02-29' is not recognized"),
    ("DATE", "2013-4-28", "Date '2013-4-28' is not recognized"),
    ("DATE", "28/04/2013", "Date '28/04/2013' is not recognized"),
    ("DATE", "2013-04-28T25:00", "Date '2013-04-28T25:00' is not recognized"),
    ("DATE", "2013-W17-1", "Date '2013-W17-1' is not recognized"),
    ("DATE", "1" * 21, f"Date '{'1' * 21}' is not recognized"),
    ("DATE", time(1, 2), wrong_type("time", "DATE", TEMPORAL)),
    ("DATE", 1.5, wrong_type("float", "DATE", TEMPORAL)),
    # TIME
    ("TIME", time(20, 57, 1), None),
    ("TIME", time(20, 57, 1, tzinfo=timezone(timedelta(hours=7))), None),
    ("TIME", "20:57:01.123456789+07:00", None),
    ("TIME", "20:57:01.123456789", None),
    ("TIME", "20:57:01", None),
    ("TIME", "20:57", None),
    ("TIME", "75421", None),
    ("TIME", 75421, None),
    ("TIME", "24:00:00", "Time '24:00:00' is not recognized"),
    ("TIME", "20:57:01.1234567890", "Time '20:57:01.1234567890' is not recognized"),
    ("TIME", "20:57:01.", "Time '20:57:01.' is not recognized"),
    ("TIME", "8:57", "Time '8:57' is not recognized"),
    ("TIME(9)", datetime(2020, 1, 1), wrong_type("datetime", "TIME(9)", "time, int, str")),
    # TIMESTAMP_*
    ("TIMESTAMP_NTZ", datetime(2013, 4, 28, 20, 57, 1), None),
    ("TIMESTAMP_NTZ", datetime(2013, 4, 28, 20, 57, 1, tzinfo=UTC), None),
    ("TIMESTAMP_NTZ", date(2013, 4, 28), None),
    ("TIMESTAMP_NTZ(9)", "2013-04-28 20:57:01", None),
    ("TIMESTAMP_TZ", "2013-04-28T20:57:01.123456789+07:00", None),
    ("TIMESTAMP_TZ", "2013-04-28T20:57:01Z", None),
    ("TIMESTAMP_TZ", "2013-04-28T20:57:01 +0700", None),
    ("TIMESTAMP_TZ", "2013-04-28T20:57:01+07", None),
    ("TIMESTAMP_LTZ", "2013-04-28", None),
    ("TIMESTAMP_LTZ", "-1", None),
    ("TIMESTAMP", "1366923421123456789", None),
    ("TIMESTAMP_NTZ", 1366923421123456, None),
    ("TIMESTAMP_NTZ", "99999999999999999999", None),
    ("TIMESTAMP_NTZ", "-99999999999999999999", "Timestamp '-99999999999999999999' is not recognized"),
    ("TIMESTAMP_TZ", "2013-04-28T20:57:01+07:0", "Timestamp '2013-04-28T20:57:01+07:0' is not recognized"),
    ("TIMESTAMP_TZ", "2013-04-28T20:57:01+24:00", "Timestamp '2013-04-28T20:57:01+24:00' is not recognized"),
    ("TIMESTAMP_TZ", "2013-04-28X20:57", "Timestamp '2013-04-28X20:57' is not recognized"),
    ("TIMESTAMP_TZ", "now", "Timestamp 'now' is not recognized"),
    ("TIMESTAMP_NTZ", time(1, 2), wrong_type("time", "TIMESTAMP_NTZ", TEMPORAL)),
    ("TIMESTAMP_NTZ", True, wrong_type("bool", "TIMESTAMP_NTZ", TEMPORAL)),
    # BINARY
    ("BINARY", b"\x00\xff", None),
    ("BINARY(2)", bytearray(b"ab"), None),
    ("BINARY(2)", memoryview(b"abc"), "Binary value '616263' is too long and would be truncated"),
    ("BINARY", "00fFaA", None),
    ("BINARY", "", None),
    ("BINARY(1)", "0a0b", "Binary value '0a0b' is too long and would be truncated"),
    ("BINARY", "abc", "The following string is not a legal hex-encoded value: 'abc'"),
    ("BINARY", "zz", "The following string is not a legal hex-encoded value: 'zz'"),
    ("VARBINARY", 12, wrong_type("int", "VARBINARY", "bytes, bytearray, memoryview, str (hex)")),
    # VARIANT / OBJECT / ARRAY
    ("VARIANT", {"a": [1, 2.5, None, "x", Decimal("1.1"), date(2020, 1, 1), b"\x01"]}, None),
    ("VARIANT", "not json at all", None),
    ("VARIANT", 5, None),
    ("VARIANT", {1: "a"}, "Object keys must be str, not int"),
    ("VARIANT", [1, {2}], "Value of Python type set inside a value cannot be sent"),
    (
        "VARIANT",
        object(),
        wrong_type(
            "object",
            "VARIANT",
            "None, bool, int, float, str, Decimal, date, time, datetime, bytes, dict, list, tuple",
        ),
    ),
    ("OBJECT", {"a": 1}, None),
    ("OBJECT", '{"a": [1]}', None),
    ("OBJECT", "[1]", "JSON value '[1]' is not an object"),
    ("OBJECT", "{", "Error parsing JSON: Expecting property name enclosed in double quotes, pos 1"),
    ("OBJECT", [1], wrong_type("list", "OBJECT", "dict, str (a JSON object)")),
    ("ARRAY", [1, "a"], None),
    ("ARRAY", (1, 2), None),
    ("ARRAY", "[1, 2]", None),
    ("ARRAY", '{"a": 1}', """JSON value '{"a": 1}' is not an array"""),
    ("ARRAY", "[" * 100_000, "Error parsing JSON: nested more than 500 levels deep"),
    ("ARRAY", "[" + "9" * 10_000 + "]", None),
    ("ARRAY", {"a": 1}, wrong_type("dict", "ARRAY", "list, tuple, str (a JSON array)")),
    ("ARRAY(NUMBER(10,2))", [1], None),
    # types this client does not support
    ("GEOGRAPHY", "POINT(1 1)", "Unsupported data type 'GEOGRAPHY'"),
    ("NUMBER(39,0)", 1, "Unsupported data type 'NUMBER(39,0)'"),
    ("VARCHAR(x)", "a", "Unsupported data type 'VARCHAR(x)'"),
    ("GEOGRAPHY", None, None),
]


@pytest.mark.parametrize(
    ("sql_type", "value", "expected"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_value_rules(sql_type: str, value: Any, expected: str | None) -> None:
    assert error_of(sql_type, value) == expected


def test_deep_values_are_errors_not_exceptions() -> None:
    deep: list[Any] = []
    node = deep
    for _ in range(2000):
        node.append([])
        node = node[0]
    assert error_of("VARIANT", deep) == "Value is nested more than 500 levels deep"
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    assert error_of("ARRAY", cyclic) == "Value is nested more than 500 levels deep"


def test_long_binary_message_is_cut() -> None:
    message = error_of("BINARY", b"\x01" * (MAX_BINARY_LENGTH + 1))
    assert message == f"Binary value '{'01' * 100}...' is too long and would be truncated"


# ------------------------------------------------------------------------------------------------
# Rows: names, NULLs, extra and missing columns

TABLE = [
    ColumnSpec("ID", "NUMBER(38,0)", nullable=False),
    ColumnSpec("NAME", "VARCHAR(5)", nullable=True),
    ColumnSpec("TS", "TIMESTAMP_NTZ", nullable=False),
]


def test_names_match_case_insensitively() -> None:
    assert validate_row({"id": 1, "Name": "ab", "tS": "2020-01-01"}, TABLE, index=0) == []


def test_missing_and_null_not_null_columns() -> None:
    assert validate_row({"NAME": None, "TS": None}, TABLE, index=3) == [
        RowError(3, "ID", "Missing NOT NULL column: [ID]"),
        RowError(3, "TS", "NULL result in a non-nullable column"),
    ]
    # a nullable column may be missing or NULL
    assert validate_row({"ID": 1, "TS": 0}, TABLE, index=0) == []


def test_extra_columns_are_one_row_error_listed_in_row_order() -> None:
    errors = validate_row({"ID": 1, "TS": 0, "zeta": 1, "ALPHA": 2}, TABLE, index=1)
    assert errors == [
        RowError(
            1,
            None,
            "The given row cannot be converted to the internal format: Extra columns: [zeta, ALPHA]. "
            "Columns not present in the table shouldn't be specified",
        )
    ]


def test_the_same_column_twice_in_different_cases() -> None:
    errors = validate_row({"ID": 1, "id": 2, "TS": 0}, TABLE, index=0)
    assert [str(e) for e in errors] == [
        "row 0, column ID: The given row cannot be converted to the internal format: "
        "Duplicate column names: [ID, id]"
    ]


def test_every_bad_column_is_reported_in_table_order() -> None:
    errors = validate_row({"TS": "x", "NAME": "toolong", "ID": "1.5e40"}, TABLE, index=0)
    assert [(e.column, e.message) for e in errors] == [
        ("ID", "Number out of representable range: type NUMBER(38,0), value 1.5e40"),
        ("NAME", "String 'toolong' is too long and would be truncated"),
        ("TS", "Timestamp 'x' is not recognized"),
    ]


def test_validate_rows_indexes_by_position() -> None:
    rows: list[dict[str, Any]] = [{"ID": 1, "TS": 0}, {"ID": "x", "TS": 0}, {"ID": 3, "TS": 0}, {"TS": 0}]
    assert validate_rows(rows, TABLE) == [
        RowError(1, "ID", "Numeric value 'x' is not recognized"),
        RowError(3, "ID", "Missing NOT NULL column: [ID]"),
    ]
    assert validate_rows(iter([]), TABLE) == []


def test_column_spec_from_json() -> None:
    spec = ColumnSpec.from_json({"name": "A", "type": "NUMBER(10,2)", "nullable": False, "ordinal": 1})
    assert spec == ColumnSpec("A", "NUMBER(10,2)", False)
    assert ColumnSpec.from_json(spec.to_json()) == spec
    assert ColumnSpec.from_json({"name": "B", "type": "VARIANT"}).nullable is True
    for bad in (
        {"type": "VARIANT"},
        {"name": "B", "type": 3},
        {"name": "B", "type": "DATE", "nullable": "no"},
    ):
        with pytest.raises(ValueError):
            ColumnSpec.from_json(bad)


@pytest.mark.parametrize(
    "column",
    [Column(name="C", type=t) for t in COLUMN_TYPES]
    + [
        Column(name="C", type="NUMBER", precision=10, scale=2),
        Column(name="C", type="VARCHAR", precision=16),
        Column(name="C", type="BINARY", precision=16),
        Column(name="C", type="TIME", precision=3),
        Column(name="C", type="TIMESTAMP_TZ", precision=0),
    ],
    ids=lambda c: c.sql_type,
)
def test_every_floe_column_type_is_supported(column: Column) -> None:
    """Every type Floe's catalog stores, as ``Column.sql_type`` prints it into table_columns."""
    spec = ColumnSpec("C", column.sql_type, True)
    errors = validate_row({"C": object()}, [spec], index=0)
    assert len(errors) == 1
    assert errors[0].message.startswith("Value of Python type object cannot be ingested"), errors[0]


# ------------------------------------------------------------------------------------------------
# Serialization


class Color(Enum):
    RED = "red"


class Size(IntEnum):
    BIG = 9


class Wrapped(Enum):
    NAN = float("nan")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (True, True),
        (7, 7),
        (-(2**63), -(2**63)),
        (2**63, "9223372036854775808"),
        (-(10**5000), "-1" + "0" * 5000),
        (1.5, 1.5),
        (float("nan"), "NaN"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        ("x", "x"),
        (Decimal("0.1000000000000000000000000000001"), "0.1000000000000000000000000000001"),
        (Decimal("1E+3"), "1000"),
        (Decimal("-0"), "-0"),
        (Decimal("1E+5000"), "1E+5000"),
        (Decimal("NaN"), "NaN"),
        (Decimal("-Infinity"), "-inf"),
        (date(2013, 4, 28), "2013-04-28"),
        (datetime(2013, 4, 28, 20, 57, 1, 123456), "2013-04-28T20:57:01.123456"),
        (datetime(2013, 4, 28, 20, 57, tzinfo=timezone(timedelta(hours=-7))), "2013-04-28T20:57:00-07:00"),
        (
            datetime(2013, 4, 28, 20, 57, tzinfo=timezone(timedelta(seconds=1172))),
            "2013-04-28T20:37:28+00:00",
        ),
        (time(20, 57, 1), "20:57:01"),
        (time(20, 57, tzinfo=timezone(timedelta(hours=7))), "20:57:00+07:00"),
        (b"\x00\xab", "00ab"),
        (bytearray(b"\x01"), "01"),
        (memoryview(b"\x02"), "02"),
        ({"a": [1, (Decimal("2.50"), b"\x03")]}, {"a": [1, ["2.50", "03"]]}),
        (UUID("12345678-1234-5678-1234-567812345678"), "12345678-1234-5678-1234-567812345678"),
        (Color.RED, "red"),
        (Size.BIG, 9),
        (Wrapped.NAN, "NaN"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_serialize_value(value: Any, expected: Any) -> None:
    assert serialize_value(value) == expected


def test_serialize_refuses_other_types_naming_the_column() -> None:
    with pytest.raises(TypeError, match="column TAGS: values of Python type set cannot be sent"):
        serialize_row({"TAGS": {"a"}})
    with pytest.raises(TypeError, match="column V: object keys must be str, not int"):
        serialize_row({"V": {"x": {1: 2}}})
    with pytest.raises(TypeError, match="column names must be str"):
        serialize_row({1: 2})  # type: ignore[dict-item]


def test_decimal_is_exact_on_the_wire() -> None:
    value = Decimal("12345678901234567890123456789.123456789")
    line = json.dumps(serialize_row({"N": value}))
    assert Decimal(json.loads(line)["N"]) == value
    assert validate_row(json.loads(line), [ColumnSpec("N", "NUMBER(38,9)")], index=0) == []


# ------------------------------------------------------------------------------------------------
# Properties

SUPPORTED_TYPES = [
    "NUMBER(38,0)",
    "NUMBER(10,2)",
    "NUMBER(5,5)",
    "INT",
    "FLOAT",
    "VARCHAR(16777216)",
    "VARCHAR(8)",
    "VARCHAR",
    "BOOLEAN",
    "DATE",
    "TIME",
    "TIMESTAMP_NTZ",
    "TIMESTAMP_LTZ",
    "TIMESTAMP_TZ",
    "BINARY",
    "BINARY(4)",
    "VARIANT",
    "OBJECT",
    "ARRAY",
]
ALL_TYPES = [*SUPPORTED_TYPES, "GEOGRAPHY", "NUMBER(", "VARCHAR(0)", "TIMESTAMP_NTZ(10)", ""]

offsets = st.integers(-23 * 60 + 1, 23 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
zones = st.none() | st.just(UTC) | offsets | st.just(timezone(timedelta(seconds=1172)))
datetimes = st.datetimes(timezones=zones)
times = st.times(timezones=zones)

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**60), max_value=10**60)
    | st.floats()
    | st.text(max_size=20)
    | st.decimals()
    | st.dates()
    | datetimes
    | times
    | st.binary(max_size=10)
    | st.sampled_from(["NaN", "inf", "1e5", "2013-04-28", "20:57", "[1]", "{}", "on", "00ff", " 12 "])
)
json_ish = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
)


@st.composite
def tables(draw: st.DrawFn, types: list[str]) -> list[ColumnSpec]:
    """Columns with distinct upper-case names C0, C1, ..."""
    chosen = draw(st.lists(st.sampled_from(types), min_size=1, max_size=6))
    return [ColumnSpec(f"C{i}", t, draw(st.booleans())) for i, t in enumerate(chosen)]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_validate_row_reports_errors_and_never_raises(data: st.DataObject) -> None:
    columns = data.draw(tables(ALL_TYPES))
    names = st.sampled_from([c.name for c in columns]).flatmap(
        lambda n: st.sampled_from([n, n.lower()])
    ) | st.text(max_size=4)
    row = data.draw(st.dictionaries(names, json_ish, max_size=8))
    index = data.draw(st.integers(0, 10))
    errors = validate_row(row, columns, index=index)
    assert all(isinstance(e, RowError) and e.row_index == index and e.message for e in errors)
    assert all(e.column is None or e.column in {c.name for c in columns} for e in errors)


def _number_values(precision: int, scale: int) -> st.SearchStrategy[Any]:
    """Values a NUMBER(precision, scale) column takes, as Decimals, text, floats and ints."""
    # Built from ints: Decimal arithmetic (in st.decimals too) rounds to the context's 28 digits.
    wide = Context(prec=100)
    largest = 10**precision - 1
    exact = st.integers(-largest, largest).map(lambda n: Decimal(n).scaleb(-scale, context=wide))
    top = float(Decimal(largest).scaleb(-scale, context=wide))
    return (
        exact
        | exact.map(str)
        | exact.map(lambda d: f" {d:e} ")
        | st.floats(min_value=-top / 2, max_value=top / 2)
        | st.integers(-(10 ** (precision - scale)) + 1, 10 ** (precision - scale) - 1)
    )


def _epoch_values() -> st.SearchStrategy[Any]:
    seconds = st.integers(-31_535_999_999, 31_535_999_999)
    nanos = st.integers(-(10**19), 10**19)
    return seconds | seconds.map(str) | nanos.map(str)


def _temporal_text(with_time: bool) -> st.SearchStrategy[str]:
    def render(moment: datetime, style: int) -> str:
        day = moment.strftime("%Y-%m-%d") if moment.year >= 1000 else moment.date().isoformat()
        clock = [
            "",
            f"T{moment:%H:%M}",
            f"T{moment:%H:%M:%S}",
            f"T{moment:%H:%M:%S}.{moment.microsecond:06d}123",
            f" {moment:%H:%M:%S}+07:00",
            f"T{moment:%H:%M}-0330",
            f"T{moment:%H:%M:%S}Z",
        ][style]
        return day + clock if with_time else day

    return st.builds(render, st.datetimes(), st.integers(0, 6))


def _time_text() -> st.SearchStrategy[str]:
    def render(moment: time, style: int) -> str:
        return [
            f"{moment:%H:%M}",
            f"{moment:%H:%M:%S}",
            f"{moment:%H:%M:%S}.{moment.microsecond:06d}999",
            f"{moment:%H:%M:%S}.{moment.microsecond // 1000:03d}+07:00",
        ][style]

    return st.builds(render, st.times(), st.integers(0, 3))


def _hex(raw: bytes) -> str:
    return raw.hex().upper() if len(raw) % 2 else raw.hex()


VALID: dict[str, Callable[[], st.SearchStrategy[Any]]] = {
    "NUMBER(38,0)": lambda: _number_values(38, 0),
    "NUMBER(10,2)": lambda: _number_values(10, 2),
    "NUMBER(5,5)": lambda: _number_values(5, 5),
    "INT": lambda: _number_values(38, 0),
    "FLOAT": lambda: (
        st.floats()
        | st.integers(-(10**300), 10**300)
        | st.decimals(allow_nan=True)
        | st.floats(allow_nan=False).map(repr).filter(lambda s: s not in ("inf", "-inf"))
        | st.sampled_from(["NaN", "nan", "inf", "-inf", "Infinity"])
    ),
    "VARCHAR(16777216)": lambda: st.text() | st.integers() | st.booleans() | st.floats() | st.decimals(),
    "VARCHAR(8)": lambda: st.text(max_size=8) | st.integers(-9_999_999, 99_999_999) | st.booleans(),
    "VARCHAR": lambda: st.text(),
    "BOOLEAN": lambda: (
        st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.sampled_from(["true", "FALSE", "t", "F", "yes", "No", "y", "N", "on", "OFF", "1", "0"])
    ),
    "DATE": lambda: st.dates() | datetimes | _temporal_text(True) | _epoch_values(),
    "TIME": lambda: times | _time_text() | st.integers(-(10**19), 10**19),
    "TIMESTAMP_NTZ": lambda: datetimes | st.dates() | _temporal_text(True) | _epoch_values(),
    "TIMESTAMP_LTZ": lambda: datetimes | _temporal_text(False),
    "TIMESTAMP_TZ": lambda: datetimes | _temporal_text(True) | _epoch_values(),
    "BINARY": lambda: st.binary() | st.binary().map(lambda b: b.hex().upper()),
    "BINARY(4)": lambda: st.binary(max_size=4) | st.binary(max_size=4).map(bytearray),
    "VARIANT": lambda: json_ish.filter(lambda v: v is not None),  # None is NULL, not a JSON null
    "OBJECT": lambda: (
        st.dictionaries(st.text(max_size=5), json_ish, max_size=4)
        | st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3).map(
            json.dumps
        )
    ),
    "ARRAY": lambda: (
        st.lists(json_ish, max_size=4) | st.lists(st.integers() | st.booleans(), max_size=3).map(json.dumps)
    ),
}


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_valid_values_validate_clean_before_and_after_serialization(data: st.DataObject) -> None:
    columns = data.draw(tables(SUPPORTED_TYPES))
    row: dict[str, Any] = {}
    for col in columns:
        choice = data.draw(
            st.sampled_from(["value", "value", "null", "missing"] if col.nullable else ["value"])
        )
        if choice == "missing":
            continue
        name = data.draw(st.sampled_from([col.name, col.name.lower()]))
        row[name] = None if choice == "null" else data.draw(VALID[col.type]())
    assert validate_row(row, columns, index=0) == []
    sent = json.loads(json.dumps(serialize_row(row), allow_nan=False))
    assert validate_row(sent, columns, index=0) == []


@settings(max_examples=200, deadline=None)
@given(row=st.dictionaries(st.text(max_size=5), json_ish, max_size=6))
def test_serialized_rows_always_encode(row: dict[str, Any]) -> None:
    line = json.dumps(serialize_row(row), allow_nan=False)
    assert isinstance(json.loads(line), dict)


@dataclass
class Point:
    x: int


class Cents(float):
    """A float subclass: serialize_value passes it on as it is, and orjson does not take it."""


# Values of every kind the fast road hands back to serialize_value, the ones orjson writes
# differently (NaN, infinities, ints beyond 53 bits), None, and ones neither road can send.
wire_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), -(2**63) - 1])
    | st.floats()
    | st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0])
    | st.text(max_size=6)
    | st.sampled_from(["null", "NaN", "\ud800", "é"])
    | st.decimals()
    | st.datetimes(timezones=st.none() | st.timezones())
    | st.dates()
    | times
    | st.binary(max_size=4)
    | st.uuids()
    | st.sampled_from([Color.RED, Size.BIG, Wrapped.NAN, Point(1), Cents(1.5), {1, 2}]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=3) | st.integers(0, 3), children, max_size=3)
    ),
    max_leaves=12,
)


def _slow_line(row: dict[str, Any]) -> bytes:
    return orjson.dumps(serialize_row(row), option=orjson.OPT_APPEND_NEWLINE)


class Refused(Exception):
    """The reference refuses the row; ``message``: the TypeError's text, when Floe words it (None
    when orjson refuses what it is given)."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message)
        self.message = message


def _plain(value: Decimal) -> str:
    """A finite Decimal's digits in plain notation, as many as it has (``1.50`` stays ``1.50``)."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    if exponent >= 0:
        text = str(int(text) * 10**exponent)
    else:
        text = text.rjust(1 - exponent, "0")
        text = f"{text[:exponent]}.{text[exponent:]}"
    return "-" + text if sign else text


def _offset_text(minutes: int) -> str:
    hours, rest = divmod(abs(minutes), 60)
    return f"{'-' if minutes < 0 else '+'}{hours:02d}:{rest:02d}"


def _sent(value: Any, column: str) -> Any:
    """The JSON value the wire rules (serialize_value's contract) send for ``value``, written apart
    from Floe: its JSON types as they are, numbers and temporal values as ``_sent_number`` and
    ``_sent_temporal`` say, bytes as hex, a UUID as its text, an Enum as its value's, lists, tuples
    and dicts (str keys) member by member; anything else is Refused, at the first such value. A
    str and a finite float go as they are, for orjson to write or refuse (a lone surrogate, a
    subclass of float)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Enum):
        return _sent(value.value, column)
    if isinstance(value, (int, float, Decimal)):
        return _sent_number(value)
    if isinstance(value, (date, time)):
        return _sent_temporal(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise Refused(f"column {column}: object keys must be str, not {type(key).__name__}")
            out[key] = _sent(item, column)
        return out
    if isinstance(value, (list, tuple)):
        return [_sent(item, column) for item in value]
    raise Refused(f"column {column}: values of Python type {type(value).__name__} cannot be sent")


def _sent_number(value: float | Decimal) -> Any:
    """An int as it is within int64, else its decimal text; a Decimal's exact text (plain unless
    its exponent passes 1000); NaN and infinities, float or Decimal, as "NaN", "inf", "-inf"."""
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else str(value)
    if value.is_nan() if isinstance(value, Decimal) else value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, float):
        return value
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    return _plain(value) if max(abs(exponent), abs(value.adjusted())) <= 1000 else str(value)


def _sent_temporal(value: date | time) -> str:
    """ISO 8601, an offset of whole minutes kept; a datetime with seconds in its offset as the same
    instant in UTC (at the ends of datetime's range, and for a time, the wall clock and the offset's
    whole minutes)."""
    offset = value.utcoffset() if isinstance(value, (datetime, time)) else None
    if offset is None or offset.total_seconds() % 60 == 0:
        return value.isoformat()
    wall = value.replace(tzinfo=None)
    if isinstance(wall, datetime):
        with contextlib.suppress(OverflowError):
            return (wall - offset).isoformat() + "+00:00"
    return wall.isoformat() + _offset_text(int(offset.total_seconds() // 60))


def _expected_line(row: dict[str, Any]) -> bytes:
    """The line for ``row``: the reference's JSON values, written by orjson (plain JSON values, so
    none of Floe's code runs), or Refused: first by the reference, at the first value it refuses,
    column by column; else by orjson (its message is its own)."""
    sent = {key: _sent(value, key) for key, value in row.items()}
    try:
        return orjson.dumps(sent, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError as exc:
        raise Refused() from exc


def test_the_reference_line_is_what_the_wire_rules_say() -> None:
    """The reference itself, on values whose lines are written out by hand."""
    row = {
        "n": [1, 2**63, -(2**63) - 1, True, None],
        "f": [1.5, float("nan"), float("-inf")],
        "d": [Decimal("1E+2"), Decimal("-1.20E-3"), Decimal("0E+2"), Decimal("1E+1001"), Decimal("-sNaN")],
        "t": [
            datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-5))),
            datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(seconds=1172))),
            datetime.min.replace(tzinfo=timezone(timedelta(seconds=1172))),
            date(2024, 1, 2),
            time(3, 4, tzinfo=timezone(timedelta(seconds=1172))),
        ],
        "o": {"k": (b"\x00\xff", UUID(int=1), Color.RED, Size.BIG, Wrapped.NAN)},
    }
    assert _expected_line(row) == (
        b'{"n":[1,"9223372036854775808","-9223372036854775809",true,null],'
        b'"f":[1.5,"NaN","-inf"],'
        b'"d":["100","-0.00120","0","1E+1001","NaN"],'
        b'"t":["2024-01-02T03:04:05-05:00","2024-01-02T02:44:33+00:00","0001-01-01T00:00:00+00:19",'
        b'"2024-01-02","03:04:00+00:19"],'
        b'"o":{"k":["00ff","00000000-0000-0000-0000-000000000001","red",9,"NaN"]}}\n'
    )
    for bad, message in [
        ({"a": {1, 2}}, "column a: values of Python type set cannot be sent"),
        ({"a": [{"k": Point(1)}]}, "column a: values of Python type Point cannot be sent"),
        ({"a": {1: "x"}}, "column a: object keys must be str, not int"),
        ({"a": "\ud800", "b": {2}}, "column b: values of Python type set cannot be sent"),
        ({"a": Cents(1.5)}, None),
        ({"\ud800": 1}, None),
    ]:
        with pytest.raises(Refused) as info:
            _expected_line(bad)
        assert info.value.message == message


@settings(max_examples=600, deadline=None)
@example(
    row={
        "n": [2**63 - 1, -(2**63), 2**63, 2**53 + 1, Size.BIG],
        "f": [float("nan"), float("inf"), float("-inf"), -0.0, Wrapped.NAN],
        "d": [Decimal("1E+2"), Decimal("-1.20E-7"), Decimal("-Infinity"), Decimal("1E+1001")],
        "t": [
            datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(seconds=1172))),
            time(3, 4, tzinfo=timezone(timedelta(seconds=1172))),
        ],
        "o": {"k": (b"\x00\xff", UUID(int=1), Color.RED, date(2024, 1, 2))},
    }
)
@given(row=st.dictionaries(st.text(max_size=4), wire_values, max_size=6))
def test_row_line_writes_what_the_wire_rules_say(row: dict[str, Any]) -> None:
    """Whichever road it takes (orjson alone, or serialize_row), row_line gives the bytes a reference
    written apart from Floe gives (``_sent``, then orjson on plain JSON values), or refuses the row
    as it does (with Floe's message, where Floe words it)."""
    try:
        expected: bytes | Refused = _expected_line(row)
    except Refused as exc:
        expected = exc
    try:
        got = row_line(row)
    except TypeError as exc:
        assert isinstance(expected, Refused), f"refused ({exc}), but the line is {expected!r}"
        if expected.message is not None:
            assert str(exc) == expected.message
        return
    assert not isinstance(expected, Refused), f"refused, but row_line wrote {got!r}"
    assert got == expected


@pytest.mark.parametrize(
    "row",
    [
        {"F": float("nan")},  # orjson alone would write null
        {"F": [1.0, float("-inf")]},
        {"N": 2**60},  # beyond 53 bits: orjson's strict mode refuses, serialize_row writes it
        {"N": 2**63},  # beyond int64 (orjson alone writes uint64 as a number): text
        {"N": 2**64},
        {"V": None, "T": "null"},
        {"M": {"k": Decimal("1.5")}},
    ],
)
def test_row_line_takes_the_slow_road_where_orjson_differs(row: dict[str, Any]) -> None:
    assert row_line(row) == _slow_line(row)
    assert orjson.loads(row_line(row)) == orjson.loads(orjson.dumps(serialize_row(row)))
