"""The expression compiler: transforms, $n and paths, METADATA$ columns, and injection (issue 9,
item 4): a pipe's text, a file's name and a Parquet column's name are data."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from floe.catalog.models import Column, Table
from floe.errors import CompilationError
from tests.pipeline.transform.support import (
    DOCS,
    EVENTS,
    NOTE,
    NOTE_AND_ROW,
    ORDERS,
    compile_for,
    load,
    load_one,
    parquet_bytes,
)
from tests.security.attacks import copy_transform as attack

pytestmark = pytest.mark.unit


def test_transform_reorders_casts_and_omits_columns() -> None:
    compiled = compile_for(
        ORDERS,
        columns=["DAY", "ID", "NAME"],
        select=["$3::date", "$1", "UPPER($2)"],
        skip_header=1,
    )
    out, result = load(compiled, b"h\n5,abc,2024-03-04\n")
    assert result.status == "LOADED"
    assert out == [
        {"ID": 5, "NAME": "ABC", "AMOUNT": None, "TS": None, "OK": None, "DAY": dt.date(2024, 3, 4)}
    ]


def test_alias_qualified_params_and_functions() -> None:
    compiled = compile_for(
        ORDERS,
        columns=["ID", "NAME", "AMOUNT"],
        select=["t.$1::number + 1", "CONCAT(t.$2, '-x')", "TO_NUMBER($3, 10, 2)"],
    )
    out, result = load(compiled, b"1,ab,2.5\n")
    assert result.status == "LOADED", result
    assert out[0]["ID"] == 2 and out[0]["NAME"] == "ab-x" and out[0]["AMOUNT"] == Decimal("2.50")


def test_metadata_filename_and_row_number() -> None:
    table = Table(
        name="D.S.M",
        columns=[
            Column(name="V", type="VARCHAR"),
            Column(name="FILE", type="VARCHAR"),
            Column(name="ROW", type="NUMBER", precision=18, scale=0),
        ],
    )
    compiled = compile_for(
        table, select=["$1", "METADATA$FILENAME", "METADATA$FILE_ROW_NUMBER"], skip_header=1
    )
    out, result = load(compiled, b"header\na\nb\n", filename="sub/dir/it's.csv")
    assert result.status == "LOADED"
    assert out == [
        {"V": "a", "FILE": "sub/dir/it's.csv", "ROW": 1},
        {"V": "b", "FILE": "sub/dir/it's.csv", "ROW": 2},
    ]


def test_json_paths_extract_text_or_json() -> None:
    compiled = compile_for(
        EVENTS, type="JSON", select=["$1:id", "$1:loc.city::varchar", "$1:tags", "$1:at::timestamp_tz"]
    )
    out, result = load(compiled, DOCS, "f.json")
    assert result.status == "LOADED", result
    assert out[0]["CITY"] == "Paris"  # text, no JSON quotes
    assert json.loads(out[0]["TAGS"]) == ["a", "b"]  # VARIANT keeps JSON
    assert out[0]["AT"] == dt.datetime(2024, 1, 2, 2, 4, 5, tzinfo=dt.UTC)
    assert out[1] == {"ID": 2, "CITY": None, "TAGS": "[]", "AT": None}


def test_parquet_transform_reads_dollar_one_columns() -> None:
    data = parquet_bytes(pa.table({"ID": [1, 2], "City": ["a", "b"]}))
    compiled = compile_for(
        EVENTS, columns=["ID", "CITY"], select=["$1:id * 10", "UPPER($1:city)"], type="PARQUET"
    )
    out, result = load(compiled, data, "f.parquet")
    assert result.status == "LOADED", result
    assert [(r["ID"], r["CITY"]) for r in out] == [(10, "A"), (20, "B")]


@pytest.mark.parametrize("volatile", [True, False], ids=["volatile", "try-wrapped"])
@pytest.mark.parametrize("reads_file", [False, True], ids=["select-42", "read_text"])
def test_the_issues_payload_loads_as_its_text(secret: Path, reads_file: bool, volatile: bool) -> None:
    sql = attack.read_file_sql(str(secret)) if reads_file else "SELECT 42"
    item = attack.issue_item(sql)
    if not volatile:
        item = item.replace(" || LEFT(UUID_STRING(), 0)", "")
    value = load_one(item)
    assert value == attack.issue_item_value(sql)
    assert "TOP-SECRET" not in value


def test_a_quote_closing_payload_next_to_a_compiler_name_loads_as_its_text() -> None:
    text = "') || (SELECT 42) || ('"
    item = f"{attack.snowflake_literal(text)}::VARCHAR || '__floe_ph_0__' || $1 || '__floe_ph_1__'"
    assert load_one(item) == text + "__floe_ph_0__a__floe_ph_1__"


@pytest.mark.parametrize("filename", attack.HOSTILE_NAMES)
def test_compiler_names_in_literals_and_a_hostile_file_name_load_as_text(filename: str) -> None:
    assert load_one(attack.lookalike_item(), filename) == attack.lookalike_value(filename)
    assert load_one("METADATA$FILENAME", filename) == filename


def test_the_scan_time_is_a_timestamp_whatever_the_pipe_text() -> None:
    value = load_one("'''__FLOE_SCAN_TIME__''' || METADATA$START_SCAN_TIME::VARCHAR")
    assert value.startswith("'__FLOE_SCAN_TIME__'20")


@pytest.mark.parametrize("name", ["__floe_ph_0__", "__floe_filename", "__floe_rn", "c1"])
def test_compiler_names_as_quoted_identifiers_are_unknown(name: str) -> None:
    with pytest.raises(CompilationError, match="invalid identifier"):
        compile_for(NOTE, select=[f'"{name}"'])


def test_a_json_key_named_like_a_compiler_name_is_a_key() -> None:
    compiled = compile_for(NOTE, select=['$1:"__floe_ph_0__" || $1:"__floe_base__"'], type="JSON")
    out, result = load(compiled, b'{"__floe_ph_0__": "a\'", "__floe_base__": "b"}\n', "f.json")
    assert result.status == "LOADED", result
    assert out == [{"V": "a'b"}]


def test_parquet_column_names_with_quotes_are_data() -> None:
    names = [*attack.HOSTILE_NAMES, 'd"q', "__floe_parquet_row__", "__floe_row"]
    data = parquet_bytes(pa.table({name: [i] for i, name in enumerate(names)}))
    text = "__floe_parquet_row__ __floe_row"
    compiled = compile_for(
        NOTE_AND_ROW,
        select=["$1", f"{attack.snowflake_literal(text)} || $1:\"x' || (select 42) || '\""],
        type="PARQUET",
    )
    out, result = load(compiled, data, "f.parquet")
    assert result.status == "LOADED", result
    assert json.loads(out[0]["SRC"]) == {name: i for i, name in enumerate(names)}
    assert out[0]["V"] == text + "0"  # the column named x' || (SELECT 42) || ' holds 0


def test_a_parquet_path_key_with_a_quote_is_a_key() -> None:
    data = parquet_bytes(pa.table({"a'b": [{"__floe_base__": "v'"}]}))
    compiled = compile_for(NOTE, select=['$1:"a\'b"."__floe_base__"'], type="PARQUET")
    out, result = load(compiled, data, "f.parquet")
    assert result.status == "LOADED", result
    assert out == [{"V": "v'"}]


def test_array_size_counts_an_array_and_is_null_for_anything_else() -> None:
    """ARRAY_SIZE of a path (JSON) and of a Parquet list column: "If the input is not an array, the
    function returns NULL" (Snowflake, ARRAY_SIZE); DuckDB's array_length takes lists only."""
    sizes = Table(name="D.S.SIZES", columns=[Column(name="N", type="NUMBER")])
    compiled = compile_for(sizes, select=["ARRAY_SIZE($1:a.b)"], type="JSON")
    values = ["[1, 2, 3]", "[]", '"text"', '{"k": 1}']
    docs = "".join(f'{{"a": {{"b": {v}}}}}\n' for v in values).encode() + b'{"a": 1}\n'
    out, result = load(compiled, docs, "f.json")
    assert result.status == "LOADED", result
    assert [row["N"] for row in out] == [3, 0, None, None, None]
    file = parquet_bytes(pa.table({"l": pa.array([[1, 2], [], None], pa.list_(pa.int64()))}))
    compiled = compile_for(sizes, select=["ARRAY_SIZE($1:l)"], type="PARQUET")
    out, result = load(compiled, file, "f.parquet")
    assert result.status == "LOADED", result
    assert [row["N"] for row in out] == [2, 0, None]
