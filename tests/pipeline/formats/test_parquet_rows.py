"""Parquet: the file's own columns, unreadable files, strings that are not UTF-8, page bombs."""

from __future__ import annotations

import datetime as dt
import io
import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import PartTooLarge
from pipeline.formats import read_raw
from pipeline.formats.parquet_rows import _as_integer, _as_ltz, _as_ntz, _leaf_rule

pytestmark = pytest.mark.unit


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def test_parquet_keeps_its_columns_and_types() -> None:
    data = parquet_bytes(pa.table({"Id": pa.array([1, 2], pa.int32()), "name": ["a", None]}))
    raw = read_raw(data, FileFormat(type="PARQUET"), path="f.parquet")
    assert raw.table.column_names == ["Id", "name"]
    assert raw.table.schema.field("Id").type == pa.int32()
    assert raw.row_numbers.to_pylist() == [1, 2]
    assert raw.rows_parsed == 2


def test_truncated_parquet_is_a_file_load_error() -> None:
    data = parquet_bytes(pa.table({"a": list(range(100))}))
    with pytest.raises(FileLoadError, match="parquet"):
        read_raw(data[: len(data) // 2], FileFormat(type="PARQUET"), path="f.parquet")


def test_truncated_parquet_message_does_not_mention_floe_internals() -> None:
    """Safeguard: the error a user sees names the file's problem, not Floe's in-memory buffer."""
    data = parquet_bytes(pa.table({"a": list(range(100))}))
    with pytest.raises(FileLoadError) as caught:
        read_raw(data[: len(data) // 2], FileFormat(type="PARQUET"), path="f.parquet")
    assert caught.value.message == (
        "Error parsing the parquet file: Parquet magic bytes not found in footer. "
        "Either the file is corrupted or this is not a parquet file."
    )


def test_parquet_column_name_that_is_not_utf8_is_a_file_load_error() -> None:
    """Safeguard: pyarrow decodes column names lazily; a bad one must fail the file, not the batch."""
    data = parquet_bytes(pa.table({"colXname": [1, 2]})).replace(b"colXname", b"col\x85name")
    with pytest.raises(FileLoadError, match="column name is not UTF-8"):
        read_raw(data, FileFormat(type="PARQUET"), path="f.parquet")


def test_parquet_string_that_is_not_utf8_is_an_error_of_its_row() -> None:
    """Safeguard: pyarrow does not check Parquet strings; an invalid one loaded into a blob would
    make every later query of the table fail, so its row is an error and the others load."""
    names = pa.array([b"Ann", b"Zo\xeb", b"Bo"], pa.binary())
    broken = pa.Array.from_buffers(pa.string(), 3, names.buffers())
    table = pa.table({"id": [1, 2, 3], "name": broken, "tags": pa.array([["x"], ["y"], ["ü"]])})
    raw = read_raw(parquet_bytes(table), FileFormat(type="PARQUET"), path="f.parquet")
    assert raw.table.column("id").to_pylist() == [1, 3]
    assert raw.row_numbers.to_pylist() == [1, 3]
    (err,) = raw.errors
    assert (err.row_number, err.line, err.message) == (2, 2, "Invalid UTF8 detected in string 'Zo0xEB'")
    assert raw.rows_parsed == 3


def test_a_parquet_file_whose_pages_inflate_past_the_bound_fails_unread() -> None:
    """Parquet's own page compression: 64 MiB of one repeated string zstd-compress to a few KiB."""
    buf = io.BytesIO()
    value = "x" * (1 << 20)
    pq.write_table(
        pa.table({"s": [value] * 64}), buf, compression="zstd", use_dictionary=False, row_group_size=64
    )
    bomb = buf.getvalue()
    assert len(bomb) < 1 << 20  # small as stored
    with pytest.raises(PartTooLarge, match="and Parquet files are read whole"):
        read_raw(bomb, FileFormat(type="PARQUET"), path="bomb.parquet", max_bytes=16 << 20)
    assert read_raw(bomb, FileFormat(type="PARQUET"), path="bomb.parquet", max_bytes=128 << 20).num_rows == 64


# ---------------------------------------------------------------------------------------------
# BINARY_AS_TEXT, USE_LOGICAL_TYPE, REPLACE_INVALID_CHARACTERS


def parquet_of(**columns: pa.Array) -> bytes:
    return parquet_bytes(pa.table(columns))


def read(data: bytes, **options: object) -> list[dict[str, object]]:
    raw = read_raw(data, FileFormat(type="PARQUET", **options), path="f.parquet")  # type: ignore[arg-type]
    assert raw.errors == []
    rows: list[dict[str, object]] = raw.table.to_pylist()
    return rows


BINARY = parquet_of(
    b=pa.array([b"Hi\n", None], pa.binary()),
    fixed=pa.array([b"ab", b"cd"], pa.binary(2)),
    nested=pa.array([{"x": b"q", "l": [b"r"]}, None]),
    s=pa.array(["text", "t"]),
)


def test_binary_without_a_logical_type_reads_as_text_by_default() -> None:
    assert read(BINARY) == [
        {"b": "Hi\n", "fixed": "ab", "nested": {"x": "q", "l": ["r"]}, "s": "text"},
        {"b": None, "fixed": "cd", "nested": None, "s": "t"},
    ]


def test_binary_as_text_false_reads_binary_as_hex() -> None:
    assert read(BINARY, binary_as_text=False) == [
        {"b": "48690A", "fixed": "6162", "nested": {"x": "71", "l": ["72"]}, "s": "text"},
        {"b": None, "fixed": "6364", "nested": None, "s": "t"},
    ]


def test_binary_read_as_text_that_is_not_utf8_is_an_error_of_its_row() -> None:
    raw = read_raw(
        parquet_of(id=pa.array([1, 2]), b=pa.array([b"ok", b"Zo\xeb"])), FileFormat(type="PARQUET"), path="f"
    )
    assert raw.table.column("id").to_pylist() == [1]
    assert [(e.row_number, e.message) for e in raw.errors] == [
        (2, "Invalid UTF8 detected in string 'Zo0xEB'")
    ]


def test_replace_invalid_characters_replaces_what_is_not_utf8() -> None:
    names = pa.array([b"Ann", b"Zo\xeb"], pa.binary())
    broken = pa.Array.from_buffers(pa.string(), 2, names.buffers())
    data = parquet_of(name=broken, nested=pa.array([[b"ok"], [b"\xff!"]]))
    assert read(data, replace_invalid_characters=True) == [
        {"name": "Ann", "nested": ["ok"]},
        {"name": "Zo\ufffd", "nested": ["\ufffd!"]},
    ]


AT = dt.datetime(2024, 1, 2, 3, 4, 5)
MICROS = 1704164645000000  # AT as microseconds since the epoch
TIMES = parquet_of(
    naive=pa.array([AT], pa.timestamp("us")),  # isAdjustedToUTC=false, no converted type
    utc=pa.array([AT], pa.timestamp("ms", tz="UTC")),  # isAdjustedToUTC=true, TIMESTAMP_MILLIS
    nanos=pa.array([AT], pa.timestamp("ns", tz="UTC")),
    clock=pa.array([dt.time(1, 2, 3)], pa.time64("us")),  # no converted type
    day=pa.array([dt.date(2024, 1, 2)]),
)


def test_use_logical_type_false_follows_snowflakes_table() -> None:
    """copy-into-table (USE_LOGICAL_TYPE = FALSE): a timestamp not adjusted to UTC without a converted
    type, NANOS timestamps and a TIME without a converted type are integers; a UTC-adjusted MILLIS or
    MICROS timestamp is TIMESTAMP_NTZ."""
    raw = read_raw(TIMES, FileFormat(type="PARQUET"), path="f.parquet")
    assert raw.table.to_pylist() == [
        {"naive": MICROS, "utc": AT, "nanos": MICROS * 1000, "clock": 3723000000, "day": dt.date(2024, 1, 2)}
    ]
    assert raw.table.schema.field("utc").type == pa.timestamp("ms")  # NTZ: no zone


def test_use_logical_type_true_reads_timestamps_and_times() -> None:
    raw = read_raw(TIMES, FileFormat(type="PARQUET", use_logical_type=True), path="f.parquet")
    utc = AT.replace(tzinfo=dt.UTC)
    row = raw.table.to_pylist()[0]
    assert row == {
        "naive": AT,
        "utc": utc,
        "nanos": utc,
        "clock": dt.time(1, 2, 3),
        "day": dt.date(2024, 1, 2),
    }
    assert raw.table.schema.field("naive").type == pa.timestamp("us")  # NTZ
    assert raw.table.schema.field("utc").type == pa.timestamp("ms", tz="UTC")  # LTZ


@dataclass
class _Logical:
    type: str
    info: dict[str, object]

    def to_json(self) -> str:
        return json.dumps(self.info)


@dataclass
class _Leaf:
    """What _leaf_rule reads of a pyarrow ColumnSchema."""

    logical_type: _Logical
    converted_type: str
    physical_type: str = "INT64"


def _rule(kind: str, utc: bool, unit: str, converted: bool, use_logical_type: bool) -> str:
    info = {"Type": kind, "isAdjustedToUTC": utc, "timeUnit": unit}
    leaf = _Leaf(_Logical(kind.upper(), info), "TIMESTAMP_MICROS" if converted else "NONE")
    fn: object = _leaf_rule(leaf, FileFormat(type="PARQUET", use_logical_type=use_logical_type))
    names: dict[object, str] = {None: "as read", _as_integer: "INTEGER", _as_ltz: "LTZ", _as_ntz: "NTZ"}
    return names[fn]


@pytest.mark.parametrize(
    ("kind", "utc", "unit", "converted", "logical", "expected"),
    [
        # copy-into-table's table for USE_VECTORIZED_SCANNER = FALSE, row by row:
        ("Time", True, "milliseconds", True, True, "as read"),  # TIME
        ("Time", False, "microseconds", True, False, "as read"),  # TIME (ConvertedType present)
        ("Time", False, "microseconds", False, False, "INTEGER"),  # INTEGER (no ConvertedType)
        ("Time", False, "nanoseconds", False, True, "as read"),
        ("Time", False, "nanoseconds", False, False, "INTEGER"),
        ("Timestamp", True, "milliseconds", True, True, "LTZ"),
        ("Timestamp", True, "microseconds", True, False, "NTZ"),
        ("Timestamp", True, "nanoseconds", False, True, "LTZ"),
        ("Timestamp", True, "nanoseconds", False, False, "INTEGER"),
        ("Timestamp", False, "microseconds", False, True, "NTZ"),
        ("Timestamp", False, "milliseconds", True, False, "LTZ"),  # ConvertedType present
        ("Timestamp", False, "milliseconds", False, False, "INTEGER"),  # not present
        ("Timestamp", False, "nanoseconds", False, True, "NTZ"),
        ("Timestamp", False, "nanoseconds", False, False, "INTEGER"),
    ],
)
def test_use_logical_type_rules_for_every_row_of_snowflakes_table(
    kind: str, utc: bool, unit: str, converted: bool, logical: bool, expected: str
) -> None:
    assert _rule(kind, utc, unit, converted, logical) == expected
