"""compile_copy: plain COPY of CSV, JSON and Parquet, compilation errors, pickling."""

from __future__ import annotations

import datetime as dt
import json
import pickle
from decimal import Decimal

import pyarrow as pa
import pytest

from floe.catalog.models import Column, Table
from floe.errors import CompilationError
from floe.types import arrow_schema
from pipeline.formats import read_raw
from pipeline.transform import apply_copy
from tests.pipeline.transform.support import (
    DOCS,
    EVENTS,
    ORDERS,
    VARIANT_TABLE,
    compile_for,
    load,
    parquet_bytes,
)

pytestmark = pytest.mark.unit


def test_plain_csv_copy_types_every_column() -> None:
    compiled = compile_for(ORDERS, skip_header=1)
    out, result = load(
        compiled, b"id,name,amount,ts,ok,day\n7,bob,12.345,2024-01-02 03:04:05,yes,2024-02-03\n"
    )
    assert result.status == "LOADED"
    assert (result.rows_parsed, result.rows_loaded, result.errors_seen) == (1, 1, 0)
    assert out == [
        {
            "ID": 7,
            "NAME": "bob",
            "AMOUNT": Decimal("12.35"),
            "TS": dt.datetime(2024, 1, 2, 3, 4, 5),
            "OK": True,
            "DAY": dt.date(2024, 2, 3),
        }
    ]


def test_output_schema_is_the_tables_arrow_schema() -> None:
    compiled = compile_for(ORDERS)
    assert compiled.schema == arrow_schema(ORDERS)
    raw = read_raw(b"", compiled.file_format, path="empty.csv")
    table, result = apply_copy(compiled, raw, filename="empty.csv")
    assert table.schema == arrow_schema(ORDERS)
    assert (result.status, result.rows_parsed) == ("LOADED", 0)


def test_plain_copy_column_list_leaves_other_columns_null() -> None:
    compiled = compile_for(ORDERS, columns=["ID", "DAY"])
    out, result = load(compiled, b"1,2024-05-06\n")
    assert result.status == "LOADED"
    assert out == [
        {"ID": 1, "NAME": None, "AMOUNT": None, "TS": None, "OK": None, "DAY": dt.date(2024, 5, 6)}
    ]


def test_plain_json_into_one_variant_column() -> None:
    out, result = load(compile_for(VARIANT_TABLE, type="JSON"), DOCS, "f.json")
    assert result.status == "LOADED"
    assert json.loads(out[0]["SRC"])["loc"] == {"city": "Paris"}
    assert len(out) == 2


def test_plain_json_into_several_columns_matches_keys_case_insensitively() -> None:
    table = Table(
        name="D.S.T",
        columns=[
            Column(name="ID", type="NUMBER", precision=9, scale=0),
            Column(name="USERNAME", type="VARCHAR"),
        ],
    )
    out, result = load(compile_for(table, type="JSON"), b'{"Id": 4, "userName": "z"}\n', "f.json")
    assert result.status == "LOADED"
    assert out == [{"ID": 4, "USERNAME": "z"}]


def test_parquet_plain_copy_matches_columns_by_name() -> None:
    data = parquet_bytes(pa.table({"city": ["x"], "Id": pa.array([7], pa.int32()), "unused": [1.5]}))
    out, result = load(compile_for(EVENTS, type="PARQUET"), data, "f.parquet")
    assert result.status == "LOADED"
    assert out == [{"ID": 7, "CITY": "x", "TAGS": None, "AT": None}]


def test_parquet_whole_row_into_variant() -> None:
    data = parquet_bytes(pa.table({"a": [1], "b": ["x"]}))
    out, _ = load(compile_for(VARIANT_TABLE, type="PARQUET"), data, "f.parquet")
    assert json.loads(out[0]["SRC"]) == {"a": 1, "b": "x"}


@pytest.mark.parametrize(
    ("select", "columns", "kind", "match"),
    [
        (["$1"], ["ID", "NAME"], "CSV", "Insert value list does not match"),
        (["foo"], ["ID"], "CSV", "invalid identifier"),
        (["$1::binary"], ["ID"], "CSV", "BINARY"),
        (["SUM($1)"], ["ID"], "CSV", "unsupported expression"),
        (["$2"], ["ID"], "JSON", r"\$2"),
        (["$1"], ["NOPE"], "CSV", "invalid identifier 'NOPE'"),
    ],
)
def test_compilation_errors(select: list[str], columns: list[str], kind: str, match: str) -> None:
    with pytest.raises(CompilationError, match=match):
        compile_for(ORDERS, select=select, columns=columns, type=kind)


def test_compiled_copy_pickles() -> None:
    compiled = compile_for(ORDERS, select=["$1", "$2", "$3", "$4", "$5", "$6"])
    clone = pickle.loads(pickle.dumps(compiled))
    out, result = load(clone, b"1,a,1,2024-01-01,true,2024-01-01\n")
    assert result.status == "LOADED" and len(out) == 1
