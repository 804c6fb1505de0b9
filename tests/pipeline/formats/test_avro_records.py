"""Avro: records as columns, every type, the block codecs, file COMPRESSION, broken files, bombs,
invalid UTF-8, and the COPY transform over them ($1:field, $1, casts, METADATA$)."""

from __future__ import annotations

import bz2
import datetime as dt
import gzip
import io
import json
import struct
import zlib
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pytest
import zstandard

from floe.catalog.models import Column, FileFormat, Table
from floe.errors import FileLoadError
from pipeline.chunks import PartTooLarge
from pipeline.formats import RawFile, read_raw
from tests.pipeline.formats.transform_support import VARIANT_TABLE, compile_for, load
from tests.security.attacks import bombs

pytestmark = pytest.mark.unit

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Sale",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"]},
        {
            "name": "location",
            "type": {
                "type": "record",
                "name": "Loc",
                "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}],
            },
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "raw", "type": "bytes"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "any", "type": ["null", "long", "string"]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    ],
}
UTC = dt.UTC
RECORDS: list[dict[str, Any]] = [
    {
        "id": 1,
        "name": "Ann",
        "location": {"city": "Lexington", "zip": 40502},
        "tags": ["x", "y"],
        "counts": {"a": 1},
        "raw": b"\x00\xff",
        "kind": "B",
        "any": 5,
        "day": dt.date(2017, 3, 28),
        "at": dt.datetime(2017, 3, 28, 12, 0, tzinfo=UTC),
        "price": Decimal("12.34"),
    },
    {
        "id": 2,
        "name": None,
        "location": {"city": "Belmont", "zip": None},
        "tags": [],
        "counts": {},
        "raw": b"",
        "kind": "A",
        "any": "s",
        "day": dt.date(2017, 3, 29),
        "at": dt.datetime(2017, 3, 29, 0, 0, tzinfo=UTC),
        "price": Decimal("-1.00"),
    },
]


def avro_bytes(records: list[dict[str, Any]], schema: dict[str, Any] = SCHEMA, codec: str = "null") -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, schema, records, codec=codec, sync_interval=100)
    return buf.getvalue()


def _long(value: int) -> bytes:
    acc = (value << 1) ^ (value >> 63)
    out = bytearray()
    while acc & ~0x7F:
        out.append((acc & 0x7F) | 0x80)
        acc >>= 7
    out.append(acc)
    return bytes(out)


def _blob(data: bytes) -> bytes:
    return _long(len(data)) + data


SYNC = bytes(range(16))


def container(schema: dict[str, Any], codec: str, blocks: list[tuple[int, bytes]]) -> bytes:
    """An Avro object container file written by hand (for codecs fastavro cannot write here):
    ``blocks`` are (record count, compressed block bytes)."""
    meta = _long(2) + _blob(b"avro.schema") + _blob(json.dumps(schema).encode())
    meta += _blob(b"avro.codec") + _blob(codec.encode()) + _long(0)
    body = b"".join(_long(n) + _blob(block) + SYNC for n, block in blocks)
    return b"Obj\x01" + meta + SYNC + body


def encoded(records: list[dict[str, Any]], schema: dict[str, Any] = SCHEMA) -> bytes:
    """The records' binary encoding, one after the other (an uncompressed block's contents)."""
    buf = io.BytesIO()
    for rec in records:
        fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), rec)
    return buf.getvalue()


def avro(data: bytes, max_bytes: int | None = None, **options: Any) -> RawFile:
    return read_raw(data, FileFormat(type="AVRO", **options), path="d/f.avro", max_bytes=max_bytes)


def test_each_record_is_a_row_and_each_field_a_column() -> None:
    raw = avro(avro_bytes(RECORDS))
    assert raw.table.column_names == [f["name"] for f in SCHEMA["fields"]]
    assert raw.row_numbers.to_pylist() == raw.line_numbers.to_pylist() == [1, 2]
    assert (raw.rows_parsed, raw.errors, raw.format) == (2, [], "AVRO")
    first, second = raw.table.to_pylist()
    assert first == {
        "id": 1,
        "name": "Ann",
        "location": {"city": "Lexington", "zip": 40502},
        "tags": ["x", "y"],
        "counts": [("a", 1)],
        "raw": "00FF",  # bytes read as hex, as Snowflake shows BINARY in a VARIANT
        "kind": "B",
        "any": "5",  # a union of several types is a JSON value
        "day": dt.date(2017, 3, 28),
        "at": dt.datetime(2017, 3, 28, 12, 0, tzinfo=UTC),
        "price": Decimal("12.34"),
    }
    assert (second["name"], second["location"]["zip"], second["any"], second["raw"]) == (
        None,
        None,
        '"s"',
        "",
    )
    types = raw.table.schema
    assert types.field("any").type == pa.json_(pa.string())
    assert types.field("at").type == pa.timestamp("ms", tz="UTC")
    assert types.field("price").type == pa.decimal128(10, 2)


def test_more_logical_types_and_named_type_references() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "f", "type": {"type": "fixed", "name": "Two", "size": 2}},
            {"name": "g", "type": "Two"},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
            {"name": "clock", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "odd", "type": {"type": "string", "logicalType": "no-such-type"}},
        ],
    }
    rec = {
        "f": b"ab",
        "g": b"cd",
        "local": dt.datetime(2024, 1, 2, 3, 4, 5),
        "clock": dt.time(1, 2, 3),
        "uid": "0e8b7c4c-3c3f-4c3e-9e1e-2f9c2b9a7b1d",
        "odd": "kept",
    }
    (row,) = avro(avro_bytes([rec], schema)).table.to_pylist()
    assert row == {**rec, "f": "6162", "g": "6364"}


def test_a_recursive_type_is_read_as_json_below_its_first_level() -> None:
    schema = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "v", "type": "long"}, {"name": "next", "type": ["null", "Node"]}],
    }
    rows = avro(avro_bytes([{"v": 1, "next": {"v": 2, "next": None}}], schema)).table.to_pylist()
    assert rows == [{"v": 1, "next": '{"v":2,"next":null}'}]


@pytest.mark.parametrize("codec", ["null", "deflate", "bzip2", "xz"])
def test_block_codecs_fastavro_writes(codec: str) -> None:
    records = RECORDS * 50  # several blocks (sync_interval is 100 bytes)
    raw = avro(avro_bytes(records, codec=codec))
    assert raw.num_rows == 100 and raw.errors == []
    assert raw.table.column("id").to_pylist() == [1, 2] * 50


def _snappy(block: bytes) -> bytes:
    packed: bytes = pa.Codec("snappy").compress(block, asbytes=True)
    return packed + struct.pack(">I", zlib.crc32(block))


@pytest.mark.parametrize(
    ("codec", "compress"),
    [
        ("snappy", _snappy),
        ("zstandard", lambda b: zstandard.ZstdCompressor().compress(b)),
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw DEFLATE
        ("bzip2", bz2.compress),
    ],
)
def test_block_codecs_written_by_hand(codec: str, compress: Any) -> None:
    blocks = [(2, compress(encoded(RECORDS))), (1, compress(encoded(RECORDS[:1])))]
    raw = avro(container(SCHEMA, codec, blocks))
    assert raw.table.column("id").to_pylist() == [1, 2, 1]


def test_a_snappy_block_whose_checksum_is_wrong_fails_the_file() -> None:
    block = _snappy(encoded(RECORDS))
    with pytest.raises(FileLoadError, match="checksum"):
        avro(container(SCHEMA, "snappy", [(2, block[:-1] + bytes([block[-1] ^ 1]))]))


def test_an_unknown_codec_fails_the_file_naming_it() -> None:
    with pytest.raises(FileLoadError, match="codec 'lzo' is not supported"):
        avro(container(SCHEMA, "lzo", [(2, encoded(RECORDS))]))


@pytest.mark.parametrize(
    ("compression", "wrap"),
    [
        ("AUTO", gzip.compress),
        ("GZIP", gzip.compress),
        ("ZSTD", lambda b: zstandard.ZstdCompressor().compress(b)),
        ("DEFLATE", zlib.compress),
        ("RAW_DEFLATE", lambda b: zlib.compress(b)[2:-4]),
        ("NONE", lambda b: b),
        ("AUTO", lambda b: b),
    ],
)
def test_file_compression_is_undone_before_the_blocks(compression: str, wrap: Any) -> None:
    data = wrap(avro_bytes(RECORDS, codec="deflate"))
    assert avro(data, compression=compression).table.column("id").to_pylist() == [1, 2]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"id,name\n1,a\n", "not an Avro object container file"),
        (b"Obj\x01\x02", "ends inside"),
        (avro_bytes(RECORDS)[:-40], "ends inside"),
    ],
)
def test_a_file_that_is_not_valid_avro_fails_with_a_message_naming_it(data: bytes, message: str) -> None:
    with pytest.raises(FileLoadError, match=message) as caught:
        avro(data)
    assert caught.value.file == "d/f.avro"
    assert caught.value.message.startswith("Error parsing the Avro file: ")


def test_a_block_not_followed_by_the_sync_marker_fails_the_file() -> None:
    data = bytearray(avro_bytes(RECORDS))
    data[-1] ^= 0xFF
    with pytest.raises(FileLoadError, match="sync marker"):
        avro(bytes(data))


def test_records_that_do_not_match_the_schema_fail_the_file() -> None:
    block = encoded(RECORDS)[:-3]  # the last record is cut short
    with pytest.raises(FileLoadError, match="Error parsing the Avro file"):
        avro(container(SCHEMA, "null", [(2, block)]))


def test_a_schema_that_is_not_a_record_is_refused() -> None:
    with pytest.raises(FileLoadError, match='its schema is "string", not a record'):
        avro(avro_bytes(["a", "b"], "string"))  # type: ignore[list-item, arg-type]


def test_an_empty_file_is_zero_rows() -> None:
    raw = avro(b"")
    assert (raw.num_rows, raw.rows_parsed, raw.errors) == (0, 0, [])


def test_a_block_that_inflates_past_the_bound_fails_unread() -> None:
    big = [{**RECORDS[0], "name": "x" * 100_000} for _ in range(20)]
    data = avro_bytes(big, codec="deflate")
    assert len(data) < 100_000
    with pytest.raises(PartTooLarge, match="Avro files are read whole"):
        avro(data, max_bytes=1 << 20)
    assert avro(data, max_bytes=4 << 20).num_rows == 20


SIMPLE = {
    "type": "record",
    "name": "S",
    "fields": [{"name": "id", "type": "long"}, {"name": "s", "type": "string"}],
}


def _with_bad_utf8() -> bytes:
    good = [{"id": 1, "s": "Ann"}, {"id": 2, "s": "Zo#"}, {"id": 3, "s": "Bo"}]
    return avro_bytes(good, SIMPLE).replace(b"Zo#", b"Zo\xeb")


def test_a_string_that_is_not_utf8_is_an_error_of_its_row() -> None:
    raw = avro(_with_bad_utf8())
    assert raw.table.column("id").to_pylist() == [1, 3]
    assert raw.row_numbers.to_pylist() == [1, 3]
    (err,) = raw.errors
    assert (err.row_number, err.line, err.message) == (2, 2, "Invalid UTF8 detected in string 'Zo0xEB'")
    assert raw.rows_parsed == 3


def test_replace_invalid_characters_puts_the_replacement_character() -> None:
    raw = avro(_with_bad_utf8(), replace_invalid_characters=True)
    assert raw.table.column("s").to_pylist() == ["Ann", "Zo\ufffd", "Bo"]
    assert raw.errors == []


# ---------------------------------------------------------------------------------------------
# Through the COPY transform

SALES = Table(
    name="D.S.SALES",
    columns=[
        Column(name="ID", type="NUMBER", precision=18, scale=0),
        Column(name="CITY", type="VARCHAR"),
        Column(name="DAY", type="DATE"),
        Column(name="PRICE", type="NUMBER", precision=10, scale=2),
        Column(name="FILE", type="VARCHAR"),
        Column(name="ROWNUM", type="NUMBER", precision=18, scale=0),
    ],
)


def test_transform_reads_fields_paths_casts_and_metadata() -> None:
    compiled = compile_for(
        SALES,
        type="AVRO",
        select=[
            "$1:id",
            "$1:location.city::varchar",
            "$1:day::date",
            "$1:price",
            "METADATA$FILENAME",
            "METADATA$FILE_ROW_NUMBER",
        ],
    )
    rows, result = load(compiled, avro_bytes(RECORDS), "dir/sales.avro")
    assert result.status == "LOADED", result
    assert rows == [
        {
            "ID": 1,
            "CITY": "Lexington",
            "DAY": dt.date(2017, 3, 28),
            "PRICE": Decimal("12.34"),
            "FILE": "dir/sales.avro",
            "ROWNUM": 1,
        },
        {
            "ID": 2,
            "CITY": "Belmont",
            "DAY": dt.date(2017, 3, 29),
            "PRICE": Decimal("-1.00"),
            "FILE": "dir/sales.avro",
            "ROWNUM": 2,
        },
    ]


def test_plain_copy_into_one_variant_column_loads_each_record_whole() -> None:
    rows, result = load(compile_for(VARIANT_TABLE, type="AVRO"), avro_bytes(RECORDS[:1]), "f.avro")
    assert result.status == "LOADED", result
    record = json.loads(rows[0]["SRC"])
    assert record["location"] == {"city": "Lexington", "zip": 40502}
    assert (record["raw"], record["any"], record["tags"], record["counts"]) == (
        "00FF",
        5,
        ["x", "y"],
        {"a": 1},
    )


def test_dollar_one_into_variant_and_nested_paths() -> None:
    table = Table(
        name="D.S.V",
        columns=[Column(name="SRC", type="VARIANT"), Column(name="TAG", type="VARCHAR")],
    )
    rows, result = load(compile_for(table, type="AVRO", select=["$1", "$1:tags[1]"]), avro_bytes(RECORDS))
    assert result.status == "LOADED", result
    assert [json.loads(r["SRC"])["id"] for r in rows] == [1, 2]
    assert [r["TAG"] for r in rows] == ["y", None]


def test_plain_copy_into_several_columns_matches_fields_by_name() -> None:
    table = Table(
        name="D.S.P",
        columns=[
            Column(name="NAME", type="VARCHAR"),
            Column(name="ID", type="NUMBER", precision=18, scale=0),
        ],
    )
    rows, result = load(compile_for(table, type="AVRO"), avro_bytes(RECORDS))
    assert result.status == "LOADED", result
    assert rows == [{"NAME": "Ann", "ID": 1}, {"NAME": None, "ID": 2}]


def test_a_field_that_does_not_convert_is_an_error_of_its_row() -> None:
    table = Table(name="D.S.N", columns=[Column(name="N", type="NUMBER", precision=18, scale=0)])
    compiled = compile_for(table, type="AVRO", select=["$1:name"], on_error="CONTINUE")
    rows, result = load(compiled, avro_bytes(RECORDS[:1]), "f.avro")
    assert rows == []
    assert result.first_error is not None and "Numeric value 'Ann' is not recognized" in result.first_error


# ---------------------------------------------------------------------------------------------
# Decode bounds (decision 110)


def test_an_array_of_nulls_is_refused_before_it_is_read() -> None:
    with pytest.raises(FileLoadError, match="array whose items are null"):
        avro(bombs.avro_null_array(10**12))


def test_a_recursive_value_nested_too_deeply_fails_its_file() -> None:
    """A linked list 10,000 levels deep (fastavro's compiled reader would crash far deeper: the
    Python one stops at Python's recursion limit); a shallow one reads as JSON below its first level."""
    with pytest.raises(FileLoadError, match="nested more than Python's recursion limit"):
        avro(bombs.avro_recursive(10_000))
    assert avro(bombs.avro_recursive(3)).table.to_pylist() == [{"next": '{"next":{"next":{"next":null}}}'}]


def test_a_record_of_many_small_values_is_weighed_before_it_is_read() -> None:
    """One record of 4M one-byte integers (4 MB decompressed, a few KB stored) would be 4M Python
    objects: past a quarter of an 8 MiB bound it fails before fastavro makes them; within 1 GiB it
    reads."""
    data = bombs.avro_small_values(4_000_000)
    with pytest.raises(PartTooLarge, match=r"a quarter of pipeline\.max_part_bytes"):
        avro(data, max_bytes=8 << 20)
    assert avro(data, max_bytes=1 << 30).num_rows == 1


def test_zero_byte_records_count_their_rows() -> None:
    with pytest.raises(PartTooLarge, match="decodes to more than 1 MiB"):
        avro(bombs.avro_empty_records(1_000_000), max_bytes=1 << 20)
    assert avro(bombs.avro_empty_records(1000), max_bytes=1 << 20).num_rows == 1000
