"""Every error of a file, as VALIDATE_PIPE_LOAD shows it: FileCopy keeps each bad record's message,
place, code and text, in file order, up to its cap (pipeline/transform/file_copy.py)."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from floe.history import REJECTED_RECORD_CHARS, ErrorDetail
from floe.records import LoadOutcome
from pipeline.formats import FileParseError, read_raw
from pipeline.transform import FileCopy, apply_copy, failed_file
from pipeline.transform.file_copy import sql_state
from tests.pipeline.transform.support import BAD_CSV, ORDERS, compile_for, load, parquet_bytes

pytestmark = pytest.mark.unit


def offset_of(data: bytes, needle: bytes) -> int:
    at = data.index(needle)
    assert data.count(needle) == 1
    return at


def test_every_error_is_kept_in_file_order_with_its_place_and_record() -> None:
    data = (
        b"id,name,amount,ts,ok,day\n"
        b"1,n,1.5,2024-01-01,true,2024-01-01\n"
        b"2,n,zz,2024-01-01,true,2024-01-01\n"  # a conversion error (AMOUNT)
        b"3,n\n"  # a parse error: the record ends early
        b"4,n,1.5,2024-01-01,maybe,2024-01-01\n"  # a conversion error (OK)
        b",n,1.5,2024-01-01,true,2024-01-01\n"  # NOT NULL (ID)
    )
    out, result = load(compile_for(ORDERS, on_error="CONTINUE", skip_header=1), data)
    assert [r["ID"] for r in out] == [1]
    assert (result.status, result.errors_seen, len(result.errors)) == ("PARTIALLY_LOADED", 4, 4)
    first, short, boolean, null = result.errors
    assert first == ErrorDetail(
        "Numeric value 'zz' is not recognized",
        line=3,
        character=5,
        byte_offset=offset_of(data, b"zz"),
        category="conversion",
        code="100038",
        sql_state="22018",
        column_name='"ORDERS"["AMOUNT":3]',
        row_number=2,
        row_start_line=3,
        rejected_record="2,n,zz,2024-01-01,true,2024-01-01",
    )
    assert (short.category, short.code, short.sql_state, short.line, short.row_number) == (
        "parsing",
        "100068",
        "22000",
        4,
        3,
    )
    assert short.rejected_record == "3,n" and short.column_name == '"ORDERS"["AMOUNT":3]'
    assert (boolean.code, boolean.line, boolean.character, boolean.column_name) == (
        "100037",
        5,
        offset_of(data[offset_of(data, b"4,n") :], b"maybe") + 1,
        '"ORDERS"["OK":5]',
    )
    assert boolean.byte_offset == offset_of(data, b"maybe")
    assert (null.code, null.line, null.row_number, null.column_name) == ("100088", 6, 5, '"ORDERS"["ID":1]')
    # The first error of load history is the first of these.
    assert (result.first_error, result.first_error_line) == (first.error, first.line)


def test_skip_file_keeps_every_error_too() -> None:
    _, result = load(compile_for(ORDERS, skip_header=1), BAD_CSV)
    assert result.status == "LOAD_FAILED"
    assert [(e.line, e.row_number, e.error) for e in result.errors] == [
        (6, 5, "Numeric value 'zz' is not recognized"),
        (11, 10, "Numeric value 'zz' is not recognized"),
    ]


def test_the_detail_is_capped_but_every_error_is_counted() -> None:
    compiled = compile_for(ORDERS, on_error="CONTINUE")
    data = b"".join(b"%d,n,bad%d\n" % (i, i) for i in range(1, 21))
    raw = read_raw(data, compiled.file_format, path="f.csv")
    _, result = apply_copy(compiled, raw, filename="f.csv", max_errors=3)
    assert result.errors_seen == 20
    assert [e.row_number for e in result.errors] == [1, 2, 3]
    assert [e.rejected_record for e in result.errors] == ["1,n,bad1", "2,n,bad2", "3,n,bad3"]


def test_a_file_fed_in_parts_numbers_its_errors_in_the_whole_file() -> None:
    compiled = compile_for(ORDERS, columns=["ID", "NAME", "AMOUNT"], on_error="CONTINUE")
    part1 = b"1,a,1\n2,b,x\n"
    part2 = b"3,c,1\n4,d,y\n"
    copy = FileCopy(compiled, "big.csv")
    copy.add(read_raw(part1, compiled.file_format, path="big.csv"))
    second = read_raw(part2, compiled.file_format, path="big.csv")
    copy.add(replace(second, row_offset=2, line_offset=2))
    result = copy.result()
    assert [(e.line, e.row_number, e.byte_offset) for e in result.errors] == [
        (2, 2, part1.index(b"x")),
        (4, 4, len(part1) + part2.index(b"y")),
    ]


def test_a_parquet_row_is_its_record_as_json() -> None:
    data = parquet_bytes(pa.table({"ID": [1, 2], "NAME": ["ok", "a name too long"]}))
    compiled = compile_for(ORDERS, columns=["ID", "NAME"], select=["$1:ID", "$1:NAME"], type="PARQUET")
    _, result = load(compiled, data, "f.parquet")
    (error,) = result.errors
    assert error.code == "100074" and error.sql_state == "54000" and error.byte_offset is None
    assert error.rejected_record is not None and '"a name too long"' in error.rejected_record


def test_a_long_record_is_cut() -> None:
    compiled = compile_for(ORDERS, columns=["ID", "NAME"], on_error="CONTINUE")
    _, result = load(compiled, b"x," + b"n" * 5000 + b"\n")
    (error,) = result.errors
    assert error.rejected_record == ("x," + "n" * 5000)[:REJECTED_RECORD_CHARS]


def test_a_file_that_cannot_be_read_has_one_parsing_error() -> None:
    compiled = compile_for(ORDERS)
    exc = FileParseError("Error parsing JSON: x", file="f", line=3, character=2, code="100069")
    result = failed_file(compiled, exc, "f")
    assert result.errors == (
        ErrorDetail(
            "Error parsing JSON: x",
            line=3,
            character=2,
            category="parsing",
            code="100069",
            sql_state="22000",
            row_start_line=3,
        ),
    )
    # Through the wire and back, the detail stays.
    assert LoadOutcome.from_dict(result.to_dict()) == result


def test_sql_states_follow_the_codes() -> None:
    assert [sql_state(c) for c in ("100038", "100039", "100035", "100088", None)] == [
        "22018",
        "22003",
        "22007",
        "22000",
        None,
    ]
