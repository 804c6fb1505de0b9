"""The types INFER_SCHEMA infers (``floe.inference``): of text, JSON values, Arrow and Avro fields,
merged over values and files, and the rows they make.

Snowflake's INFER_SCHEMA reference (https://docs.snowflake.com/en/sql-reference/functions/infer_schema):
"All the variations of timestamp data types are retrieved as TIMESTAMP_NTZ"; "The scientific
annotations (e.g. 1E2) in JSON files are retrieved as REAL data type"; "For both CSV and JSON files,
all columns are identified as NULLABLE"; EXPRESSION is "$1:COLUMN_NAME::TYPE", or with IGNORE_CASE
"GET_IGNORE_CASE ($1, COLUMN_NAME)::TYPE".
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from floe.inference import (
    AvroSchemaError,
    ColumnsOf,
    FileColumn,
    Inferred,
    JsonNumber,
    arrow_type,
    avro_columns,
    json_type,
    merge,
    text_type,
    values_columns,
    widen,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12", "NUMBER(2, 0)"),
        ("-007", "NUMBER(1, 0)"),
        ("+1.50", "NUMBER(3, 2)"),
        (".5", "NUMBER(2, 1)"),
        ("1e5", "REAL"),
        ("-2.5E-3", "REAL"),
        ("1" * 39, "REAL"),
        ("1" * 30 + "." + "1" * 20, "NUMBER(38, 8)"),
        ("TRUE", "BOOLEAN"),
        ("false", "BOOLEAN"),
        ("2024-02-29", "DATE"),
        ("2023-02-29", "TEXT"),
        ("2024-01-02 03:04:05", "TIMESTAMP_NTZ"),
        ("2024-01-02T03:04:05.123456+01:00", "TIMESTAMP_NTZ"),
        ("2024-01-02T03:04:05Z", "TIMESTAMP_NTZ"),
        ("12:30", "TIME"),
        ("23:59:59.5", "TIME"),
        ("25:00", "TEXT"),
        ("1,5", "TEXT"),
        ("1_000", "TEXT"),
        ("١٢", "TEXT"),  # digits, but not ASCII ones
        ("", "TEXT"),
        ("e5", "TEXT"),
        ("1e", "TEXT"),
        (".", "TEXT"),
    ],
)
def test_the_type_of_a_fields_text(text: str, expected: str) -> None:
    assert text_type(text).render() == expected


def test_json_values_keep_their_own_types() -> None:
    doc = json.loads(
        '{"b": true, "i": 12, "d": 1.25, "e": 1E2, "s": "true", "day": "2024-01-02", '
        '"o": {}, "a": [], "n": null}',
        parse_int=JsonNumber,
        parse_float=JsonNumber,
    )
    assert {k: (t.render() if (t := json_type(v)) else None) for k, v in doc.items()} == {
        "b": "BOOLEAN",
        "i": "NUMBER(2, 0)",
        "d": "NUMBER(3, 2)",
        "e": "REAL",
        "s": "TEXT",
        "day": "DATE",
        "o": "OBJECT",
        "a": "ARRAY",
        "n": None,
    }


def test_widening() -> None:
    num = Inferred("NUMBER", 3, 0)
    assert widen(num, Inferred("NUMBER", 1, 2), "TEXT") == Inferred("NUMBER", 3, 2)
    assert widen(num, Inferred("REAL"), "TEXT") == Inferred("REAL")
    assert widen(Inferred("DATE"), Inferred("TIMESTAMP_NTZ"), "TEXT") == Inferred("TIMESTAMP_NTZ")
    assert widen(Inferred("OBJECT"), Inferred("ARRAY"), "TEXT") == Inferred("VARIANT")
    assert widen(num, Inferred("BOOLEAN"), "TEXT") == Inferred("TEXT")
    assert widen(num, Inferred("BOOLEAN"), "VARIANT") == Inferred("VARIANT")
    assert widen(None, num, "TEXT") == num and widen(num, None, "TEXT") == num
    assert widen(Inferred("NUMBER", 30, 0), Inferred("NUMBER", 1, 20), "TEXT") == Inferred("NUMBER", 30, 8)


def test_arrow_types() -> None:
    expected = {
        pa.int32(): "NUMBER(38, 0)",
        pa.uint64(): "NUMBER(38, 0)",
        pa.float32(): "REAL",
        pa.decimal128(10, 2): "NUMBER(10, 2)",
        pa.string(): "TEXT",
        pa.binary(): "BINARY",
        pa.bool_(): "BOOLEAN",
        pa.date32(): "DATE",
        pa.time64("us"): "TIME",
        pa.timestamp("ns", tz="UTC"): "TIMESTAMP_NTZ",
        pa.struct([("a", pa.int8())]): "VARIANT",
        pa.map_(pa.string(), pa.int8()): "VARIANT",
        pa.list_(pa.int8()): "ARRAY",
        pa.dictionary(pa.int8(), pa.string()): "TEXT",
    }
    assert {t: arrow_type(t).render() for t in expected} == expected
    assert arrow_type(pa.binary(), binary_as_text=True).render() == "TEXT"


def test_avro_schemas() -> None:
    schema = {
        "type": "record",
        "name": "r",
        "namespace": "ns",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "maybe", "type": ["null", "double"]},
            {"name": "either", "type": ["int", "string"]},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {
                "name": "money",
                "type": {
                    "type": "fixed",
                    "name": "m",
                    "size": 8,
                    "logicalType": "decimal",
                    "precision": 12,
                    "scale": 3,
                },
            },
            {"name": "again", "type": "ns.m"},
            {"name": "kind", "type": {"type": "enum", "name": "k", "symbols": ["A"]}},
            {"name": "child", "type": {"type": "record", "name": "c", "fields": []}},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
    found = [(n, t.render() if t else None, nullable) for n, t, nullable in avro_columns(schema)]
    assert found == [
        ("id", "NUMBER(38, 0)", False),
        ("maybe", "REAL", True),
        ("either", "VARIANT", True),
        ("ts", "TIMESTAMP_NTZ", False),
        ("money", "NUMBER(12, 3)", False),
        ("again", "NUMBER(12, 3)", False),
        ("kind", "TEXT", False),
        ("child", "VARIANT", False),
        ("tags", "ARRAY", False),
    ]
    with pytest.raises(AvroSchemaError, match="must be a record"):
        avro_columns({"type": "array", "items": "int"})
    with pytest.raises(AvroSchemaError, match="unknown Avro type"):
        avro_columns({"type": "record", "name": "r", "fields": [{"name": "x", "type": "nope"}]})
    deep: object = "int"
    for _ in range(200):
        deep = [deep]
    with pytest.raises(AvroSchemaError, match="nests too deep"):
        avro_columns({"type": "record", "name": "r", "fields": [{"name": "x", "type": deep}]})


def test_merge_over_files() -> None:
    """Names in first-seen order; a column some file lacks is NULLABLE; FILENAMES lists the files
    that have it; a name twice in one file counts once; IGNORE_CASE upper-cases and merges names."""
    a = ColumnsOf(
        "d/a.parquet", [FileColumn("id", Inferred("NUMBER", 2, 0), False), FileColumn("x", None, True)]
    )
    b = ColumnsOf(
        "d/b.parquet",
        [
            FileColumn("ID", Inferred("NUMBER", 4, 1), False),
            FileColumn("id", Inferred("REAL"), False),
            FileColumn("id", Inferred("TEXT"), True),
            FileColumn("my col", Inferred("TEXT"), False),
        ],
    )
    rows = [r.row() for r in merge([a, b])]
    assert [(r["COLUMN_NAME"], r["TYPE"], r["NULLABLE"], r["FILENAMES"], r["ORDER_ID"]) for r in rows] == [
        ("id", "REAL", False, "d/a.parquet,d/b.parquet", 0),
        ("x", "TEXT", True, "d/a.parquet", 1),
        ("ID", "NUMBER(5, 1)", True, "d/b.parquet", 2),
        ("my col", "TEXT", True, "d/b.parquet", 3),
    ]
    assert rows[3]["EXPRESSION"] == '$1:"my col"::TEXT'
    upper = [r.row() for r in merge([a, b], ignore_case=True)]
    assert [(r["COLUMN_NAME"], r["TYPE"], r["EXPRESSION"]) for r in upper] == [
        ("ID", "NUMBER(5, 1)", "GET_IGNORE_CASE ($1, ID)::NUMBER(5, 1)"),
        ("X", "TEXT", "GET_IGNORE_CASE ($1, X)::TEXT"),
        ("MY COL", "TEXT", 'GET_IGNORE_CASE ($1, "MY COL")::TEXT'),
    ]


def test_values_columns() -> None:
    by_position = values_columns([], [["1", "x"], ["2", None, "2024-01-01"]], text_type, "TEXT")
    assert [(c.name, c.type.render() if c.type else None) for c in by_position] == [
        ("c1", "NUMBER(1, 0)"),
        ("c2", "TEXT"),
        ("c3", "DATE"),
    ]
    named = values_columns(["a"], [["1", "ignored"]], text_type, "TEXT")
    assert [c.name for c in named] == ["a"]
    keyed = values_columns(
        [], [{"b": JsonNumber("1")}, {"a": "x", "b": JsonNumber("2.5")}], json_type, "VARIANT"
    )
    assert [(c.name, c.type.render() if c.type else None, c.nullable) for c in keyed] == [
        ("b", "NUMBER(2, 1)", True),
        ("a", "TEXT", True),
    ]


def test_long_text_is_text_at_once() -> None:
    """Nothing longer than a number, date or timestamp can be is classified further (no regular
    expression reads the data either: each check is a string method, linear in the text)."""
    assert text_type("1" * 200_000).render() == "TEXT"
    assert text_type("2024-01-01" * 20_000).render() == "TEXT"
