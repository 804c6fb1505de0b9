"""compile_copy + apply_copy: typing, transforms, METADATA$ columns, error detection and ON_ERROR."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import pickle
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe.catalog.models import Column, CopySpec, FileFormat, OnError, Table
from floe.errors import CompilationError, FileLoadError
from floe.records import LoadOutcome
from floe.types import arrow_schema
from pipeline import transform as transform_module
from pipeline.formats import read_raw
from pipeline.transform import CompiledCopy, apply_copy, compile_copy, new_connection
from tests.security.attacks import copy_transform as attack

pytestmark = pytest.mark.unit

ORDERS = Table(
    name="DB.PUBLIC.ORDERS",
    columns=[
        Column(name="ID", type="NUMBER", precision=18, scale=0, nullable=False),
        Column(name="NAME", type="VARCHAR", precision=8),
        Column(name="AMOUNT", type="NUMBER", precision=10, scale=2),
        Column(name="TS", type="TIMESTAMP_NTZ"),
        Column(name="OK", type="BOOLEAN"),
        Column(name="DAY", type="DATE"),
    ],
)


def compile_for(
    table: Table,
    *,
    select: list[str] | None = None,
    columns: list[str] | None = None,
    on_error: OnError = "SKIP_FILE",
    limit: float = 0,
    **fmt: Any,
) -> CompiledCopy:
    copy = CopySpec(
        table=table.name,
        stage="DB.PUBLIC.ST",
        columns=columns,
        select=select,
        file_format=FileFormat(**fmt),
        on_error=on_error,
        on_error_limit=limit,
    )
    return compile_copy(copy, table, copy.file_format.type)


def load(
    compiled: CompiledCopy, data: bytes, filename: str = "dir/file.csv"
) -> tuple[list[dict[str, Any]], LoadOutcome]:
    raw = read_raw(data, compiled.file_format, path=filename)
    table, result = apply_copy(compiled, raw, filename=filename)
    assert table.schema == compiled.schema
    return table.to_pylist(), result


# ------------------------------------------------------------------------------------------------
# Plain COPY and typing


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


def test_varchar_length_limit() -> None:
    _, result = load(compile_for(ORDERS), b"1,much-too-long,1,2024-01-01,true,2024-01-01\n")
    assert result.first_error == "User character length limit (8) exceeded by string 'much-too-long'"
    assert result.code == "100074"
    assert result.first_error_column == '"ORDERS"["NAME":2]'


def test_plain_copy_column_list_leaves_other_columns_null() -> None:
    compiled = compile_for(ORDERS, columns=["ID", "DAY"])
    out, result = load(compiled, b"1,2024-05-06\n")
    assert result.status == "LOADED"
    assert out == [
        {"ID": 1, "NAME": None, "AMOUNT": None, "TS": None, "OK": None, "DAY": dt.date(2024, 5, 6)}
    ]


def test_plain_copy_rereads_when_the_first_record_is_short() -> None:
    compiled = compile_for(ORDERS, columns=["ID", "NAME"], on_error="CONTINUE")
    out, result = load(compiled, b"1\n2,b\n3,c\n")
    assert [r["ID"] for r in out] == [2, 3]
    assert (result.errors_seen, result.first_error_line, result.code) == (1, 1, "100068")
    assert result.first_error == 'End of record reached while expected to parse column \'"ORDERS"["NAME":2]\''


# ------------------------------------------------------------------------------------------------
# Transforms


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


def test_nullif_and_iff_nulls_are_not_errors() -> None:
    table = Table(
        name="D.S.T",
        columns=[Column(name="A", type="NUMBER", precision=9, scale=0), Column(name="B", type="VARCHAR")],
    )
    compiled = compile_for(
        table, select=["NULLIF($1, '')", "IFF($2 = 'x', NULL, $2)"], empty_field_as_null=False
    )
    out, result = load(compiled, b",x\n3,y\n")
    assert result.status == "LOADED", result
    assert out == [{"A": None, "B": None}, {"A": 3, "B": "y"}]


def test_try_cast_is_lenient_but_plain_cast_is_not() -> None:
    table = Table(name="D.S.T", columns=[Column(name="D", type="DATE")])
    out, result = load(compile_for(table, select=["TRY_TO_DATE($1)"]), b"nope\n2024-01-01\n")
    assert result.status == "LOADED"
    assert out == [{"D": None}, {"D": dt.date(2024, 1, 1)}]
    _, result = load(compile_for(table, select=["$1::date"]), b"nope\n2024-01-01\n")
    assert (result.status, result.first_error) == ("LOAD_FAILED", "Date 'nope' is not recognized")


def test_errors_inside_expressions_are_found_and_described() -> None:
    table = Table(name="D.S.T", columns=[Column(name="A", type="NUMBER", precision=9, scale=0)])
    compiled = compile_for(table, select=["COALESCE($1::number * 2, 0)"], on_error="CONTINUE")
    out, result = load(compiled, b"1\nabc\n\n")
    assert [r["A"] for r in out] == [2, 0]
    assert (result.errors_seen, result.first_error_line) == (1, 2)
    assert result.first_error == "Numeric value 'abc' is not recognized"


def test_not_null_violation() -> None:
    compiled = compile_for(ORDERS, columns=["NAME"], select=["$1"], on_error="CONTINUE")
    _, result = load(compiled, b"a\n")
    assert result.status == "LOAD_FAILED"
    assert result.code == "100088"
    assert result.first_error is not None and result.first_error.startswith(
        "NULL result in a non-nullable column"
    )
    assert result.first_error_column == '"ORDERS"["ID":1]'


# ------------------------------------------------------------------------------------------------
# JSON and Parquet

VARIANT_TABLE = Table(name="D.S.RAW", columns=[Column(name="SRC", type="VARIANT")])
EVENTS = Table(
    name="D.S.EVENTS",
    columns=[
        Column(name="ID", type="NUMBER", precision=18, scale=0),
        Column(name="CITY", type="VARCHAR"),
        Column(name="TAGS", type="VARIANT"),
        Column(name="AT", type="TIMESTAMP_TZ"),
    ],
)
DOCS = (
    b'{"id": 1, "loc": {"city": "Paris"}, "tags": ["a", "b"], "at": "2024-01-02T03:04:05+01:00"}\n'
    b'{"id": "2", "loc": {"city": null}, "tags": []}\n'
)


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


def test_json_bad_line_and_strip_outer_array() -> None:
    compiled = compile_for(EVENTS, columns=["ID"], select=["$1:id"], type="JSON", on_error="CONTINUE")
    out, result = load(compiled, b'{"id": 1}\n{"id": oops}\n{"id": 3}\n', "f.json")
    assert [r["ID"] for r in out] == [1, 3]
    assert (result.status, result.errors_seen, result.first_error_line, result.code) == (
        "PARTIALLY_LOADED",
        1,
        2,
        "100069",
    )
    compiled = compile_for(EVENTS, columns=["ID"], select=["$1:id"], type="JSON", strip_outer_array=True)
    out, result = load(compiled, b'[{"id": 1}, {"id": 2}]', "f.json")
    assert [r["ID"] for r in out] == [1, 2]


def test_json_conversion_error_names_the_column() -> None:
    compiled = compile_for(EVENTS, columns=["ID"], select=["$1:id::number"], type="JSON")
    _, result = load(compiled, b'{"id": 1}\n{"id": "x1"}\n', "f.json")
    assert (result.status, result.first_error, result.first_error_line, result.first_error_column) == (
        "LOAD_FAILED",
        "Numeric value 'x1' is not recognized",
        2,
        '"EVENTS"["ID":1]',
    )


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def test_parquet_plain_copy_matches_columns_by_name() -> None:
    data = parquet_bytes(pa.table({"city": ["x"], "Id": pa.array([7], pa.int32()), "unused": [1.5]}))
    out, result = load(compile_for(EVENTS, type="PARQUET"), data, "f.parquet")
    assert result.status == "LOADED"
    assert out == [{"ID": 7, "CITY": "x", "TAGS": None, "AT": None}]


def test_parquet_transform_reads_dollar_one_columns() -> None:
    data = parquet_bytes(pa.table({"ID": [1, 2], "City": ["a", "b"]}))
    compiled = compile_for(
        EVENTS, columns=["ID", "CITY"], select=["$1:id * 10", "UPPER($1:city)"], type="PARQUET"
    )
    out, result = load(compiled, data, "f.parquet")
    assert result.status == "LOADED", result
    assert [(r["ID"], r["CITY"]) for r in out] == [(10, "A"), (20, "B")]


def test_parquet_whole_row_into_variant() -> None:
    data = parquet_bytes(pa.table({"a": [1], "b": ["x"]}))
    out, _ = load(compile_for(VARIANT_TABLE, type="PARQUET"), data, "f.parquet")
    assert json.loads(out[0]["SRC"]) == {"a": 1, "b": "x"}


# ------------------------------------------------------------------------------------------------
# ON_ERROR and the first error

BAD_CSV = b"id,name,amount,ts,ok,day\n" + b"".join(
    b"%d,n,1.5,2024-01-01,true,2024-01-01\n" % i if i % 5 else b"%d,n,zz,2024-01-01,true,2024-01-01\n" % i
    for i in range(1, 11)
)  # rows 5 and 10 have a bad AMOUNT: 2 errors in 10 rows


def test_skip_file_fails_on_the_first_error() -> None:
    out, result = load(compile_for(ORDERS, skip_header=1), BAD_CSV)
    assert out == []
    assert result.status == "LOAD_FAILED"
    assert (result.rows_parsed, result.rows_loaded, result.errors_seen, result.error_limit) == (10, 0, 2, 1)
    assert result.first_error == "Numeric value 'zz' is not recognized"
    assert result.code == "100038"
    assert result.first_error_line == 6  # header is line 1, row 5 is line 6
    assert result.first_error_character == 5  # "5,n," -> the third field starts at character 5
    assert result.first_error_column == '"ORDERS"["AMOUNT":3]'


def test_continue_drops_bad_rows() -> None:
    out, result = load(compile_for(ORDERS, on_error="CONTINUE", skip_header=1), BAD_CSV)
    assert len(out) == 8
    assert 5 not in [r["ID"] for r in out]
    assert result.status == "PARTIALLY_LOADED"
    assert (result.rows_parsed, result.rows_loaded, result.errors_seen, result.error_limit) == (10, 8, 2, 10)


def test_continue_with_every_row_bad_is_load_failed() -> None:
    _, result = load(compile_for(ORDERS, on_error="CONTINUE"), b"x,a,1,2024-01-01,true,2024-01-01\n")
    assert result.status == "LOAD_FAILED"


@pytest.mark.parametrize(("limit", "status"), [(2, "LOAD_FAILED"), (3, "PARTIALLY_LOADED")])
def test_skip_file_n(limit: int, status: str) -> None:
    _, result = load(compile_for(ORDERS, on_error="SKIP_FILE_N", limit=limit, skip_header=1), BAD_CSV)
    assert result.status == status
    assert result.error_limit == limit
    assert result.rows_loaded == (0 if status == "LOAD_FAILED" else 8)


@pytest.mark.parametrize(("pct", "status"), [(10, "LOAD_FAILED"), (20, "PARTIALLY_LOADED")])
def test_skip_file_percent(pct: float, status: str) -> None:
    # 2 errors in 10 rows is 20%: fails 'SKIP_FILE_10%', passes 'SKIP_FILE_20%' (must exceed)
    _, result = load(compile_for(ORDERS, on_error="SKIP_FILE_PCT", limit=pct, skip_header=1), BAD_CSV)
    assert result.status == status


def test_parse_error_before_conversion_error_is_the_first_error() -> None:
    data = b"1,a,1,2024-01-01,true,2024-01-01\n2,b\n3,c,zz,2024-01-01,true,2024-01-01\n"
    _, result = load(compile_for(ORDERS, on_error="CONTINUE"), data)
    assert result.errors_seen == 2
    assert (result.first_error_line, result.code) == (2, "100068")
    assert result.first_error_column == '"ORDERS"["AMOUNT":3]'


def test_file_result_is_json_serialisable() -> None:
    _, result = load(compile_for(ORDERS, skip_header=1), BAD_CSV)
    record = json.loads(json.dumps(result.to_dict()))
    assert record["status"] == "LOAD_FAILED"
    assert record["first_error_line"] == 6
    failed = LoadOutcome.failed("f.csv", "boom")
    assert failed.to_dict()["status"] == "LOAD_FAILED"


# ------------------------------------------------------------------------------------------------
# Compilation


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


def test_explicit_connection() -> None:
    compiled = compile_for(ORDERS)
    raw = read_raw(b"1,a,1,2024-01-01,true,2024-01-01\n", compiled.file_format, path="f.csv")
    table, result = apply_copy(compiled, raw, filename="f.csv", con=new_connection())
    assert result.status == "LOADED" and table.num_rows == 1


# ------------------------------------------------------------------------------------------------
# Property: arbitrary CSV never raises anything but FileLoadError

PROPERTY_TABLE = Table(
    name="D.S.P",
    columns=[
        Column(name="N", type="NUMBER", precision=10, scale=2, nullable=False),
        Column(name="S", type="VARCHAR", precision=5),
        Column(name="D", type="DATE"),
        Column(name="B", type="BOOLEAN"),
    ],
)
PLAIN = compile_for(PROPERTY_TABLE, on_error="CONTINUE", field_optionally_enclosed_by='"', skip_header=1)
TRANSFORM = compile_for(
    PROPERTY_TABLE,
    select=["$2::number(10,2) + 1", "NULLIF($1, 'x')", "TO_DATE($3)", "$4"],
    on_error="CONTINUE",
    field_optionally_enclosed_by='"',
)
CSV_TEXT = st.text(alphabet=st.sampled_from(list('0123456789,"\n\r ax-.:/TtNnEe\\é')), max_size=200)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=CSV_TEXT, transform=st.booleans(), raw_bytes=st.binary(max_size=40))
def test_arbitrary_csv_only_raises_file_load_error(text: str, transform: bool, raw_bytes: bytes) -> None:
    compiled = TRANSFORM if transform else PLAIN
    for data in (text.encode(), raw_bytes):
        try:
            raw = read_raw(data, compiled.file_format, path="p.csv")
            table, result = apply_copy(compiled, raw, filename="p.csv")
        except FileLoadError:
            continue
        assert table.schema == compiled.schema
        assert result.status in ("LOADED", "PARTIALLY_LOADED", "LOAD_FAILED")
        assert result.rows_loaded == table.num_rows
        if result.status != "LOAD_FAILED":
            assert result.rows_parsed == result.rows_loaded + result.errors_seen
            assert all(r["N"] is not None for r in table.to_pylist())
        if result.errors_seen:
            assert result.first_error and result.first_error_line and result.code


JSON_TEXT = st.text(alphabet=st.sampled_from(list('{}[]:,"\n 0123456789abxnul.-\\eE')), max_size=200)
JSON_TRANSFORM = compile_for(
    EVENTS,
    columns=["ID", "CITY", "TAGS"],
    select=["$1:id", "$1:loc.city", "$1:tags"],
    type="JSON",
    on_error="CONTINUE",
)
JSON_PLAIN = compile_for(VARIANT_TABLE, type="JSON", strip_outer_array=True, on_error="CONTINUE")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=JSON_TEXT, transform=st.booleans())
def test_arbitrary_json_only_raises_file_load_error(text: str, transform: bool) -> None:
    compiled = JSON_TRANSFORM if transform else JSON_PLAIN
    try:
        raw = read_raw(text.encode(), compiled.file_format, path="p.json")
        table, result = apply_copy(compiled, raw, filename="p.json")
    except FileLoadError:
        return
    assert table.schema == compiled.schema
    assert result.rows_loaded == table.num_rows
    if result.status != "LOAD_FAILED":
        assert result.rows_parsed == result.rows_loaded + result.errors_seen


# ------------------------------------------------------------------------------------------------
# Injection (issue 9, item 4): a pipe's text, a file's name and a Parquet column's name are data

NOTE = Table(name="D.S.NOTES", columns=[Column(name="V", type="VARCHAR")])
NOTE_AND_ROW = Table(
    name="D.S.ROWS", columns=[Column(name="SRC", type="VARIANT"), Column(name="V", type="VARCHAR")]
)


def load_one(select: str, filename: str = "f.csv") -> str:
    compiled = compile_for(NOTE, select=[select])
    out, result = load(compiled, b"a\n", filename)
    assert result.status == "LOADED", result
    return str(out[0]["V"])


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.key"
    path.write_text("TOP-SECRET-MATERIAL\n")
    return path


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


def test_the_transform_connections_cannot_read_files(secret: Path) -> None:
    """Defence in depth: even SQL that reached DuckDB could not read a file."""
    for con in (new_connection(), transform_module._connection(None), transform_module._compile_connection()):
        for sql in ("SELECT * FROM read_text('/etc/passwd')", f"SELECT * FROM read_text('{secret}')"):
            with pytest.raises(duckdb.Error, match="disabled"):
                con.sql(sql).fetchall()
    # A plan whose SQL reads a file, as the issue's payload made one: the file fails, unread.
    compiled = compile_for(NOTE, select=["$1"])
    plan = dataclasses.replace(compiled.plans[0], pre=f"({attack.read_file_sql(str(secret))})")
    forced = dataclasses.replace(compiled, plans=(plan,), queries={})
    raw = read_raw(b"a\n", forced.file_format, path="f.csv")
    with pytest.raises(FileLoadError, match="disabled") as caught:
        apply_copy(forced, raw, filename="f.csv", con=new_connection())
    assert "TOP-SECRET" not in caught.value.message


def test_new_connection_takes_a_memory_limit() -> None:
    con = new_connection(memory_limit="123MB")
    limit = con.sql("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert limit.startswith("117") or limit.startswith("123"), limit  # DuckDB shows MiB
    with pytest.raises(duckdb.Error):
        con.execute("SET memory_limit = '8GB'")  # locked
