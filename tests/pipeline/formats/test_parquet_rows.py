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
from pipeline.formats.parquet_rows import (
    _as_integer,
    _as_ltz,
    _as_ntz,
    _leaf_rule,
    open_parquet,
    read_parquet_groups,
    reader_shapes,
)
from tests.security.attacks import bombs

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
    """Parquet's own page compression: 64 MiB of one repeated string zstd-compress to a few KiB. Read,
    its one page and the strings decoded from it are held at once: 128 MiB (decision 110)."""
    buf = io.BytesIO()
    value = "x" * (1 << 20)
    pq.write_table(
        pa.table({"s": [value] * 64}), buf, compression="zstd", use_dictionary=False, row_group_size=64
    )
    bomb = buf.getvalue()
    assert len(bomb) < 1 << 20  # small as stored
    with pytest.raises(PartTooLarge, match="and Parquet files are read whole"):
        read_raw(bomb, FileFormat(type="PARQUET"), path="bomb.parquet", max_bytes=16 << 20)
    assert read_raw(bomb, FileFormat(type="PARQUET"), path="bomb.parquet", max_bytes=160 << 20).num_rows == 64


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


# ---------------------------------------------------------------------------------------------
# USE_VECTORIZED_SCANNER = FALSE (the default): maps as key_value entries, lists without NULLs

STR_INT = pa.map_(pa.string(), pa.int64())
MAPS = parquet_of(
    m=pa.array([[("k1", 1), ("k2", None)], None, []], STR_INT),
    inside=pa.array(
        [{"m": [("a", [1, None])], "n": 1}, {"m": None, "n": None}, None],
        pa.struct([("m", pa.map_(pa.string(), pa.list_(pa.int64()))), ("n", pa.int64())]),
    ),
    listed=pa.array([[[("x", 1)], None, []], None, [None]], pa.list_(STR_INT)),
    deep=pa.array([[("o", [("i", 2)])], None, None], pa.map_(pa.string(), STR_INT)),
)


def _entries(*pairs: tuple[object, object]) -> dict[str, object]:
    return {"key_value": [{"key": k, "value": v} for k, v in pairs]}


def test_default_reader_shows_a_map_as_its_key_value_entries_at_any_depth() -> None:
    """copy-into-table, USE_VECTORIZED_SCANNER = FALSE: 'The output of scanning a map type is
    "my_map": {"key_value": [{"key": "k1", "value": "v1"}, ...]}'; a map in a struct, in a list and
    in another map's values alike. A NULL map stays NULL; a NULL list element is left out."""
    assert read(MAPS) == [
        {
            "m": _entries(("k1", 1), ("k2", None)),
            "inside": {"m": _entries(("a", [1])), "n": 1},
            "listed": [_entries(("x", 1)), _entries()],
            "deep": _entries(("o", _entries(("i", 2)))),
        },
        {"m": None, "inside": {"m": None, "n": None}, "listed": None, "deep": None},
        {"m": _entries(), "inside": None, "listed": [], "deep": None},
    ]


def test_vectorized_scanner_keeps_maps_and_null_list_elements() -> None:
    """USE_VECTORIZED_SCANNER = TRUE: a map reads as an object (DuckDB's to_json of a MAP writes
    one), and the documented example keeps the NULL phone number."""
    rows = read(MAPS, use_vectorized_scanner=True)
    assert rows[0]["m"] == [("k1", 1), ("k2", None)]
    assert rows[0]["listed"] == [[("x", 1)], None, []]
    assert rows[0]["inside"] == {"m": [("a", [1, None])], "n": 1}


def test_default_reader_leaves_null_list_elements_out_at_any_depth() -> None:
    """The documented example of USE_VECTORIZED_SCANNER = FALSE: "phone_numbers": ["1234567890",
    "0987654321", "6781234590"], where the scanner shows the NULL between them."""
    data = parquet_of(
        phones=pa.array([["1234567890", "0987654321", None, "6781234590"], None, [None, None]]),
        grid=pa.array([[[1, None], None, [None]], [], None]),
        people=pa.array([[{"n": "a"}, None, {"n": None}], None, [None]]),
    )
    assert read(data) == [
        {
            "phones": ["1234567890", "0987654321", "6781234590"],
            "grid": [[1], []],
            "people": [{"n": "a"}, {"n": None}],
        },
        {"phones": None, "grid": [], "people": None},
        {"phones": [], "grid": None, "people": []},
    ]
    assert read(data, use_vectorized_scanner=True)[0]["phones"] == [
        "1234567890",
        "0987654321",
        None,
        "6781234590",
    ]


def test_reader_shapes_of_a_sliced_array_index_its_own_rows() -> None:
    """A chunk can be a slice of its arrays (its offsets do not start at 0): the NULLs left out and
    the map entries must be the slice's."""
    lists = pa.array([[None, 1], [2, None, 3], None, [None]]).slice(1, 3)
    maps = pa.array([[("a", 1)], [("b", None), ("c", 3)], None, [("d", 4)]], STR_INT).slice(1, 3)
    table = reader_shapes(pa.table({"l": lists, "m": maps}))
    assert table.to_pylist() == [
        {"l": [2, 3], "m": _entries(("b", None), ("c", 3))},
        {"l": None, "m": None},
        {"l": [], "m": _entries(("d", 4))},
    ]


def test_reader_shapes_keeps_columns_without_maps_or_null_elements_as_they_are() -> None:
    """Flat columns, and lists with no NULL element, pay nothing: the same buffers come back."""
    table = pa.table({"id": [1, 2], "s": [{"a": 1}, None], "l": [[1], [2, 3]]})
    shaped = reader_shapes(table)
    assert shaped.to_pylist() == table.to_pylist()
    for name in table.column_names:
        before, after = table.column(name).chunk(0), shaped.column(name).chunk(0)
        assert [b.address if b else None for b in after.buffers()] == [
            b.address if b else None for b in before.buffers()
        ]


def test_parts_of_a_file_read_as_the_whole_file() -> None:
    """A large file is read a few row groups at a time through the same function."""
    buf = io.BytesIO()
    table = pa.table(
        {
            "m": pa.array([[("k", i)] if i % 3 else None for i in range(30)], STR_INT),
            "l": pa.array([[i, None] for i in range(30)]),
        }
    )
    pq.write_table(table, buf, row_group_size=7)
    fmt = FileFormat(type="PARQUET")
    whole = read_raw(buf.getvalue(), fmt, path="f.parquet").table.to_pylist()
    source = pa.BufferReader(buf.getvalue())
    parquet = open_parquet(source, "f.parquet")
    parts = [read_parquet_groups(parquet, source, [g], fmt, "f.parquet").table.to_pylist() for g in range(5)]
    assert [row for part in parts for row in part] == whole
    assert whole[1] == {"m": _entries(("k", 1)), "l": [1]}


def test_chunks_with_and_without_null_elements_keep_one_column_type() -> None:
    """A chunk whose lists hold no NULL is kept as read, another is rebuilt: both must keep the
    fields' nullability and metadata (a writer's field ids), or the column's chunks would not join."""
    inner = pa.field("l", pa.list_(pa.int64()), nullable=False, metadata={b"PARQUET:field_id": b"7"})
    struct = pa.struct([inner, pa.field("n", pa.int64())])
    column = pa.chunked_array(
        [pa.array([{"l": [1, 2], "n": 1}], struct), pa.array([{"l": [3, None], "n": None}], struct)]
    )
    shaped = reader_shapes(pa.table({"s": column})).column("s")
    assert shaped.num_chunks == 2
    assert shaped.to_pylist() == [{"l": [1, 2], "n": 1}, {"l": [3], "n": None}]
    assert shaped.type == struct
    assert shaped.type.field("l").metadata == {b"PARQUET:field_id": b"7"}


# ---------------------------------------------------------------------------------------------
# Decode bounds (decision 110): values are counted as decoded, and pages as their headers say


def test_a_dictionary_column_is_counted_by_the_strings_its_rows_stand_for() -> None:
    """20k rows of one 1,000-character dictionary string: 20 MB decoded from a few KB stored, read
    as pyarrow reads it within a bound that holds it, refused within one that does not."""
    data = bombs.parquet_dictionary(20_000, 1000)
    assert len(data) < 20_000
    fmt = FileFormat(type="PARQUET")
    with pytest.raises(PartTooLarge, match=r"decodes to more than 8 MiB \(pipeline.max_part_bytes\)"):
        read_raw(data, fmt, path="d.parquet", max_bytes=8 << 20)
    raw = read_raw(data, fmt, path="d.parquet", max_bytes=64 << 20)
    assert raw.table.column("s").to_pylist() == pq.read_table(pa.BufferReader(data)).column("s").to_pylist()


def test_a_page_larger_than_its_footer_says_is_counted_as_its_header_says() -> None:
    """The footer says 1,000 bytes; the page inflates to 8 MiB: refused within 4 MiB, as it would be
    had the footer told the truth, and read within 64 MiB."""
    data = bombs.parquet_understated(8 << 20)
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    assert meta.row_group(0).column(0).total_uncompressed_size == 1000
    fmt = FileFormat(type="PARQUET")
    with pytest.raises(PartTooLarge):
        read_raw(data, fmt, path="u.parquet", max_bytes=4 << 20)
    assert read_raw(data, fmt, path="u.parquet", max_bytes=64 << 20).num_rows == 1


@pytest.mark.parametrize(
    "columns", [{"n": pa.array([None] * 5000, pa.int64())}, {"l": pa.array([[None] * 5000])}]
)
def test_nulls_and_list_elements_count_as_the_values_they_decode_to(columns: dict[str, pa.Array]) -> None:
    """5,000 NULLs in rows, or in one row's list: runs of one level, a few bytes stored, 8 bytes and a
    bit each decoded."""
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf, compression="zstd")
    fmt = FileFormat(type="PARQUET")
    with pytest.raises(PartTooLarge):
        read_raw(buf.getvalue(), fmt, path="n.parquet", max_bytes=20_000)
    assert read_raw(buf.getvalue(), fmt, path="n.parquet", max_bytes=1 << 20).table.num_rows >= 1
