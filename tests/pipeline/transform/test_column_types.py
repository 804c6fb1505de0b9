"""BINARY, TIME, TIMESTAMP_LTZ and TIMESTAMP_TZ columns, and TRUNCATECOLUMNS, through the transform:
Snowflake's input rules, its error texts, and a TIMESTAMP_TZ's offset kept beside its instant."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from floe.catalog.models import Column, FileFormat, Table
from floe.errors import CompilationError
from floe.streaming.validation import ColumnSpec, row_line, validate_rows
from floe.types import offset_column
from pipeline.transform.conversion import final_conversion
from tests.pipeline.transform.support import compile_for, load, load_table, parquet_bytes

pytestmark = pytest.mark.unit

ID = Column(name="ID", type="NUMBER", precision=9, scale=0)


def _table(*columns: Column) -> Table:
    return Table(name="D.S.T", columns=[ID, *columns])


def _load(columns: list[Column], data: bytes, **options: Any) -> tuple[list[dict[str, Any]], Any]:
    compiled = compile_for(_table(*columns), on_error="CONTINUE", field_delimiter="|", **options)
    return load(compiled, data)


# ------------------------------------------------------------------------------------------------
# BINARY


def test_hex_is_read_in_either_case_and_anything_else_is_an_error_of_its_row() -> None:
    """[BIN]: HEX input is case-insensitive; 'HELP' is the reference's own example of an error."""
    out, result = _load([Column(name="B", type="BINARY")], b"1|48454C50\n2|48454c50\n3|HELP\n4|ABC\n5|\n")
    assert out == [{"ID": 1, "B": b"HELP"}, {"ID": 2, "B": b"HELP"}, {"ID": 5, "B": None}]
    assert (result.status, result.errors_seen) == ("PARTIALLY_LOADED", 2)
    assert (result.first_error, result.code) == (
        "The following string is not a legal hex-encoded value: 'HELP'",
        "100115",
    )
    assert (result.first_error_line, result.first_error_column) == (3, '"T"["B":2]')


def test_an_odd_number_of_hex_digits_is_not_hex() -> None:
    _, result = _load([Column(name="B", type="BINARY")], b"1|ABC\n")
    assert result.first_error == "The following string is not a legal hex-encoded value: 'ABC'"


def test_base64_ignores_whitespace_and_needs_its_padding() -> None:
    out, result = _load(
        [Column(name="B", type="BINARY")], b"1|SGVs bG8=\n2|SGVsbG8\n3|SGVsbG8=\n", binary_format="BASE64"
    )
    assert out == [{"ID": 1, "B": b"Hello"}, {"ID": 3, "B": b"Hello"}]
    assert result.first_error == "The following string is not a legal base64-encoded value: 'SGVsbG8'"


def test_utf8_loads_the_texts_own_bytes() -> None:
    out, result = _load([Column(name="B", type="BINARY")], "1|héllo\n".encode(), binary_format="UTF8")
    assert result.status == "LOADED"
    assert out == [{"ID": 1, "B": "héllo".encode()}]


def test_a_binary_value_longer_than_its_column_is_an_error() -> None:
    out, result = _load([Column(name="B", type="BINARY", precision=2)], b"1|AABB\n2|AABBCC\n")
    assert out == [{"ID": 1, "B": b"\xaa\xbb"}]
    assert result.first_error == "Binary value 'AABBCC' is too long and would be truncated"


def test_parquet_binary_loads_as_it_is_with_binary_as_text_false() -> None:
    """[CIT] Parquet BINARY_AS_TEXT = FALSE: a binary column is binary, which loads into a BINARY
    column unchanged (the reader hands it over as hex, HEX being BINARY_FORMAT's default), and into
    a VARCHAR as Snowflake shows a BINARY value: hex."""
    table = _table(Column(name="B", type="BINARY"), Column(name="S", type="VARCHAR"))
    data = parquet_bytes(pa.table({"id": [1], "b": pa.array([b"\x00\xff"]), "s": pa.array([b"hi"])}))
    out, result = load(compile_for(table, type="PARQUET", binary_as_text=False), data, "f.parquet")
    assert result.status == "LOADED", result.first_error
    assert out == [{"ID": 1, "B": b"\x00\xff", "S": "6869"}]
    text = parquet_bytes(pa.table({"id": [1], "s": pa.array([b"hi"])}))
    out, result = load(compile_for(table, type="PARQUET"), text, "f.parquet")
    assert out == [{"ID": 1, "B": None, "S": "hi"}]  # BINARY_AS_TEXT = TRUE, the default: UTF-8 text


def test_a_json_string_loads_into_binary_per_binary_format() -> None:
    """JSON (and Snowpipe Streaming, whose client sends bytes as hex) with a COPY transform."""
    table = _table(Column(name="B", type="BINARY"))
    compiled = compile_for(table, type="JSON", select=["$1:id", "$1:b"], on_error="CONTINUE")
    out, result = load(compiled, b'{"id": 1, "b": "cafe"}\n{"id": 2, "b": "nope"}\n', "f.json")
    assert out == [{"ID": 1, "B": b"\xca\xfe"}]
    assert result.first_error == "The following string is not a legal hex-encoded value: 'nope'"


def test_try_to_binary_inside_an_expression_is_null_when_not_hex() -> None:
    compiled = compile_for(
        _table(Column(name="V", type="VARCHAR")), select=["$1", "HEX_ENCODE(TRY_TO_BINARY($2))"]
    )
    out, result = load(compiled, b"1,0aff\n2,zz\n")
    assert result.status == "LOADED", result.first_error
    assert out == [{"ID": 1, "V": "0AFF"}, {"ID": 2, "V": None}]


# ------------------------------------------------------------------------------------------------
# TIME


def test_auto_time_formats() -> None:
    """[DTIO] AUTO times: HH24:MI:SS.FFTZH:TZM, HH24:MI:SS.FF, HH24:MI:SS, HH24:MI and the HH12 AM/PM
    forms; an integer is an instant whose time of day loads. Not a time: 24:00 and later, a date."""
    data = (
        b"1|12:34:56\n2|12:34\n3|12:34:56.123456789\n4|01:02:03 PM\n5|12:34:56.5+07:00\n"
        b"6|3600\n7|24:00:00\n8|2024-01-01 12:00:00\n9|1:02 am\n"
    )
    out, result = _load([Column(name="T", type="TIME")], data)
    assert out == [
        {"ID": 1, "T": dt.time(12, 34, 56)},
        {"ID": 2, "T": dt.time(12, 34)},
        {"ID": 3, "T": dt.time(12, 34, 56, 123456)},
        {"ID": 4, "T": dt.time(13, 2, 3)},
        {"ID": 5, "T": dt.time(12, 34, 56, 500000)},  # a TIME has no offset: dropped
        {"ID": 6, "T": dt.time(1, 0)},
        {"ID": 9, "T": dt.time(1, 2)},
    ]
    assert (result.errors_seen, result.first_error, result.first_error_line) == (
        2,
        "Time '24:00:00' is not recognized",
        7,
    )


def test_time_format_reads_its_own_form_only() -> None:
    out, result = _load([Column(name="T", type="TIME")], b"1|123456\n2|12:34:56\n", time_format="HH24MISS")
    assert out == [{"ID": 1, "T": dt.time(12, 34, 56)}]
    assert result.first_error == "Time '12:34:56' is not recognized"


def test_a_time_format_with_fractions_and_a_twelve_hour_clock() -> None:
    out, result = _load(
        [Column(name="T", type="TIME")], b"1|01:02:03.25 PM\n", time_format="HH12:MI:SS.FF AM"
    )
    assert result.status == "LOADED", result.first_error
    assert out == [{"ID": 1, "T": dt.time(13, 2, 3, 250000)}]


def test_fewer_fractional_digits_are_cut_not_rounded() -> None:
    columns = [
        Column(name="T", type="TIME", precision=0),
        Column(name="N", type="TIMESTAMP_NTZ", precision=3),
        Column(name="Z", type="TIMESTAMP_TZ", precision=1),
    ]
    out, result = _load(columns, b"1|12:34:56.999|2024-01-02 03:04:05.123999|2024-01-02 03:04:05.99 +01:00\n")
    assert result.status == "LOADED", result.first_error
    assert out == [
        {
            "ID": 1,
            "T": dt.time(12, 34, 56),
            "N": dt.datetime(2024, 1, 2, 3, 4, 5, 123000),
            "Z": dt.datetime(2024, 1, 2, 2, 4, 5, 900000, tzinfo=dt.UTC),
        }
    ]


def test_parquet_time_and_timestamp_values_load_into_time() -> None:
    table = _table(Column(name="T", type="TIME"), Column(name="U", type="TIME"))
    data = parquet_bytes(
        pa.table(
            {
                "id": [1],
                "t": pa.array([dt.time(1, 2, 3)], pa.time64("us")),
                "u": pa.array([dt.datetime(2024, 1, 2, 4, 5, 6)], pa.timestamp("ms")),
            }
        )
    )
    # USE_LOGICAL_TYPE = TRUE: a TIME without the legacy converted type is a time, not its integer.
    out, result = load(compile_for(table, type="PARQUET", use_logical_type=True), data, "f.parquet")
    assert result.status == "LOADED", result.first_error
    assert out == [{"ID": 1, "T": dt.time(1, 2, 3), "U": dt.time(4, 5, 6)}]


def test_to_time_inside_an_expression() -> None:
    compiled = compile_for(_table(Column(name="V", type="VARCHAR")), select=["$1", "TO_TIME($2)::varchar"])
    out, result = load(compiled, b"1,01:02 PM\n")
    assert result.status == "LOADED", result.first_error
    assert out == [{"ID": 1, "V": "13:02:00"}]


# ------------------------------------------------------------------------------------------------
# TIMESTAMP_TZ keeps its offset; TIMESTAMP_LTZ is an instant


def _offsets(data: bytes, **options: Any) -> list[tuple[dt.datetime | None, int | None]]:
    compiled = compile_for(
        _table(Column(name="Z", type="TIMESTAMP_TZ")), on_error="CONTINUE", field_delimiter="|", **options
    )
    table, _ = load_table(compiled, data)
    return list(zip(table.column("Z").to_pylist(), table.column(offset_column("Z")).to_pylist(), strict=True))


def test_timestamp_tz_stores_the_instant_and_the_offset_written() -> None:
    """[DT] TIMESTAMP_TZ stores UTC plus the offset; with none, the session's (UTC in Floe)."""
    utc = dt.UTC
    got = _offsets(
        b"1|2024-01-02 16:00:00 +01:00\n2|2024-01-02T16:00:00Z\n3|2024-01-02 16:00:00\n"
        b"4|2024-01-02T16:00:00+05:30\n5|2024-01-02 16:00:00-08:00\n6|1704211200\n"
    )
    assert got == [
        (dt.datetime(2024, 1, 2, 15, tzinfo=utc), 60),
        (dt.datetime(2024, 1, 2, 16, tzinfo=utc), 0),
        (dt.datetime(2024, 1, 2, 16, tzinfo=utc), 0),
        (dt.datetime(2024, 1, 2, 10, 30, tzinfo=utc), 330),
        (dt.datetime(2024, 1, 3, 0, tzinfo=utc), -480),
        (dt.datetime(2024, 1, 2, 16, tzinfo=utc), 0),
    ]


def test_the_auto_formats_the_fast_cast_misses_keep_their_offsets_too() -> None:
    """RFC forms take the slow path, which must patch the offset as well as the instant."""
    utc = dt.UTC
    got = _offsets(
        b"1|Tue, 02 Jan 2024 03:04:05 +0200\n2|Tue Jan 02 03:04:05 -0700 2024\n3|01/02/2024 03:04:05\n"
    )
    assert got == [
        (dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=utc), 120),
        (dt.datetime(2024, 1, 2, 10, 4, 5, tzinfo=utc), -420),
        (dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=utc), 0),
    ]


def test_a_timestamp_format_ending_in_its_offset() -> None:
    got = _offsets(b"1|2024-01-02 16:00:00 +02:00\n", timestamp_format="YYYY-MM-DD HH24:MI:SS TZH:TZM")
    assert got == [(dt.datetime(2024, 1, 2, 14, tzinfo=dt.UTC), 120)]


def test_a_timestamp_format_with_its_offset_elsewhere_is_refused_for_timestamp_tz() -> None:
    with pytest.raises(CompilationError, match="offset"):
        compile_for(
            _table(Column(name="Z", type="TIMESTAMP_TZ")), timestamp_format="TZH:TZM YYYY-MM-DD HH24:MI:SS"
        )


def test_values_that_are_not_text_have_the_session_offset() -> None:
    table = _table(Column(name="Z", type="TIMESTAMP_TZ"))
    instant = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    data = parquet_bytes(
        pa.table({"id": [1, 2], "z": pa.array([instant, None], pa.timestamp("us", tz="UTC"))})
    )
    blob, result = load_table(compile_for(table, type="PARQUET"), data, "f.parquet")
    assert result.status == "LOADED"
    assert blob.column("Z").to_pylist() == [instant, None]
    assert blob.column(offset_column("Z")).to_pylist() == [0, None]


def test_a_json_timestamp_keeps_its_offset() -> None:
    """What Snowpipe Streaming sends for an aware datetime: ISO 8601 with its offset."""
    table = _table(Column(name="Z", type="TIMESTAMP_TZ"))
    compiled = compile_for(table, type="JSON", select=["$1:id", "$1:z"])
    blob, result = load_table(compiled, b'{"id": 1, "z": "2024-01-02T16:00:00-03:00"}\n', "f.json")
    assert result.status == "LOADED"
    assert blob.column(offset_column("Z")).to_pylist() == [-180]


def test_a_timestamp_tz_the_copy_does_not_load_has_no_offset() -> None:
    table = _table(Column(name="Z", type="TIMESTAMP_TZ"))
    blob, result = load_table(compile_for(table, columns=["ID"]), b"1\n")
    assert result.status == "LOADED"
    assert blob.to_pylist() == [{"ID": 1, "Z": None, offset_column("Z"): None}]


def test_timestamp_ltz_is_an_instant_without_an_offset_column() -> None:
    table = _table(Column(name="L", type="TIMESTAMP_LTZ"))
    blob, result = load_table(
        compile_for(table, field_delimiter="|"), b"1|2024-01-02 16:00:00 +01:00\n2|2024-01-02 16:00:00\n"
    )
    assert result.status == "LOADED"
    assert blob.column_names == ["ID", "L"]
    assert blob.column("L").to_pylist() == [
        dt.datetime(2024, 1, 2, 15, tzinfo=dt.UTC),
        dt.datetime(2024, 1, 2, 16, tzinfo=dt.UTC),  # no offset: the session's, UTC
    ]


def test_a_bad_timestamp_ltz_is_an_error_of_its_row() -> None:
    _, result = _load([Column(name="L", type="TIMESTAMP_LTZ")], b"1|yesterday\n")
    assert (result.first_error, result.code) == ("Timestamp 'yesterday' is not recognized", "100035")


# ------------------------------------------------------------------------------------------------
# VARCHAR(n): an error unless TRUNCATECOLUMNS


def test_an_over_long_string_is_an_error_of_its_row() -> None:
    """[CIT] ENFORCE_LENGTH = TRUE / TRUNCATECOLUMNS = FALSE, the default."""
    out, result = _load([Column(name="S", type="VARCHAR", precision=3)], "1|abc\n2|abcdef\n3|héé\n".encode())
    assert out == [{"ID": 1, "S": "abc"}, {"ID": 3, "S": "héé"}]  # characters, not bytes
    assert (result.first_error, result.code) == (
        "User character length limit (3) exceeded by string 'abcdef'",
        "100074",
    )


def test_truncatecolumns_cuts_strings_to_the_column_length() -> None:
    compiled = compile_for(
        _table(Column(name="S", type="VARCHAR", precision=3), Column(name="B", type="BINARY", precision=1)),
        field_delimiter="|",
        on_error="CONTINUE",
    )
    truncating = compile_for(
        _table(Column(name="S", type="VARCHAR", precision=3), Column(name="B", type="BINARY", precision=1)),
        field_delimiter="|",
        on_error="CONTINUE",
        truncate_columns=True,
    )
    data = "1|abcdef|AA\n2|héllo|AABB\n".encode()
    assert load(compiled, data)[1].errors_seen == 2
    out, result = load(truncating, data)
    assert out == [{"ID": 1, "S": "abc", "B": b"\xaa"}]  # BINARY lengths are still enforced
    assert result.first_error == "Binary value 'AABB' is too long and would be truncated"


# ------------------------------------------------------------------------------------------------
# Snowpipe Streaming: what the client sends for each type loads as it was meant


def test_rows_the_streaming_client_sends_load_through_a_default_pipe() -> None:
    """The client checks rows with the SDK's rules (floe.streaming.validation) and sends them as
    NDJSON (row_line); the table's default pipe loads them as a plain JSON COPY, keys matched by name."""
    table = _table(
        Column(name="B", type="BINARY", precision=4),
        Column(name="T", type="TIME"),
        Column(name="Z", type="TIMESTAMP_TZ"),
        Column(name="L", type="TIMESTAMP_LTZ"),
    )
    columns = [ColumnSpec(c.name, c.sql_type, c.nullable) for c in table.columns]
    plus_two = dt.timezone(dt.timedelta(hours=2))
    rows = [
        {
            "ID": 1,
            "B": b"\x00\xff",
            "T": dt.time(1, 2, 3, 4),
            "Z": dt.datetime(2024, 1, 2, 3, tzinfo=plus_two),
        },
        {
            "id": 2,
            "b": "CAFE",
            "t": "12:34 +07",
            "z": "2024-01-02 03:00:00",
            "l": "2024-01-02T03:00:00-01:00",
        },
    ]
    assert validate_rows(rows, columns) == []
    compiled = compile_for(table, type="JSON", on_error="CONTINUE")
    blob, result = load_table(compiled, b"".join(row_line(r) for r in rows), "channel/1/1")
    assert result.status == "LOADED", result.first_error
    assert blob.to_pylist() == [
        {
            "ID": 1,
            "B": b"\x00\xff",
            "T": dt.time(1, 2, 3, 4),
            "Z": dt.datetime(2024, 1, 2, 1, tzinfo=dt.UTC),
            "L": None,
            offset_column("Z"): 120,
        },
        {
            "ID": 2,
            "B": b"\xca\xfe",
            "T": dt.time(12, 34),
            "Z": dt.datetime(2024, 1, 2, 3, tzinfo=dt.UTC),
            "L": dt.datetime(2024, 1, 2, 4, tzinfo=dt.UTC),
            offset_column("Z"): 0,
        },
    ]


def test_what_the_streaming_client_refuses_the_pipe_refuses_too() -> None:
    table = _table(Column(name="B", type="BINARY", precision=1), Column(name="T", type="TIME"))
    columns = [ColumnSpec(c.name, c.sql_type, c.nullable) for c in table.columns]
    rows = [{"ID": 1, "B": "zz"}, {"ID": 2, "B": "AABB"}, {"ID": 3, "T": "25:00"}]
    assert [e.row_index for e in validate_rows(rows, columns)] == [0, 1, 2]
    compiled = compile_for(table, type="JSON", on_error="CONTINUE")
    _, result = load_table(compiled, b"".join(row_line(r) for r in rows), "channel/1/1")
    assert (result.rows_loaded, result.errors_seen) == (0, 3)


def test_binary_format_is_read_however_it_was_spelled() -> None:
    """A stage's stored options are merged without validation (FileFormat.merged): 'utf-8' is UTF8."""
    fmt = FileFormat().merged({"binary_format": "utf-8"})
    conv = final_conversion("x", "VARCHAR", Column(name="B", type="BINARY"), False, fmt)
    assert conv.fast == "encode(x)"
