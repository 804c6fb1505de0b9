"""apply_copy and FileCopy: ON_ERROR, the first error, and arbitrary input (property tests)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe.catalog.models import Column, Table
from floe.errors import FileLoadError
from floe.records import LoadOutcome
from pipeline.formats import FileParseError, read_raw
from pipeline.transform import FileCopy, apply_copy, failed_file
from tests.pipeline.transform.support import BAD_CSV, EVENTS, ORDERS, VARIANT_TABLE, compile_for, load

pytestmark = pytest.mark.unit


def test_plain_copy_rereads_when_the_first_record_is_short() -> None:
    compiled = compile_for(ORDERS, columns=["ID", "NAME"], on_error="CONTINUE")
    out, result = load(compiled, b"1\n2,b\n3,c\n")
    assert [r["ID"] for r in out] == [2, 3]
    assert (result.errors_seen, result.first_error_line, result.code) == (1, 1, "100068")
    assert result.first_error == 'End of record reached while expected to parse column \'"ORDERS"["NAME":2]\''


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


def test_file_copy_adds_up_its_parts_and_keeps_the_first_error() -> None:
    compiled = compile_for(ORDERS, on_error="SKIP_FILE_N", limit=3, skip_header=1)
    copy = FileCopy(compiled, "big.csv")
    first = copy.add(read_raw(BAD_CSV, compiled.file_format, path="big.csv"))
    assert first.num_rows == 8 and not copy.doomed  # 2 errors, the file fails at 3
    copy.add(read_raw(BAD_CSV, compiled.file_format, path="big.csv"))
    assert copy.doomed
    result = copy.result()
    assert (result.status, result.rows_parsed, result.errors_seen) == ("LOAD_FAILED", 20, 4)
    assert (result.first_error_line, result.first_error_column) == (6, '"ORDERS"["AMOUNT":3]')


def test_failed_file_names_the_place_of_a_parse_error() -> None:
    compiled = compile_for(ORDERS)
    exc = FileParseError("bad record", file="f.csv", code="100065", line=3, character=4, field=2)
    outcome = failed_file(compiled, exc, "f.csv")
    assert (outcome.status, outcome.first_error, outcome.code) == ("LOAD_FAILED", "bad record", "100065")
    assert (outcome.first_error_line, outcome.first_error_character) == (3, 4)
    assert outcome.first_error_column == '"ORDERS"["NAME":2]'
    plain = failed_file(compiled, FileLoadError("unreadable", file="f.csv"), "f.csv")
    assert (plain.status, plain.first_error, plain.first_error_line) == ("LOAD_FAILED", "unreadable", None)
