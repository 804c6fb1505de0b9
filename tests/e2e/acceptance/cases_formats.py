"""Avro and ORC files, and the JSON and Parquet options issue 16 added (helper B's area)."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import struct
import zlib
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq

from tests.e2e.acceptance.case import Case

CIT = "[CIT] https://docs.snowflake.com/en/sql-reference/sql/copy-into-table"
CFF = "[CFF] https://docs.snowflake.com/en/sql-reference/sql/create-file-format"
TRF = "[TRF] https://docs.snowflake.com/en/user-guide/data-load-transform"
META = "[META] https://docs.snowflake.com/en/user-guide/querying-metadata"
PJ = "https://docs.snowflake.com/en/sql-reference/functions/parse_json"

SALE: dict[str, Any] = {
    "type": "record",
    "name": "Sale",
    "fields": [
        {"name": "id", "type": "long"},
        {
            "name": "location",
            "type": {"type": "record", "name": "Loc", "fields": [{"name": "city", "type": "string"}]},
        },
        {"name": "sale_date", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
SALES = [
    {"id": 1, "location": {"city": "Lexington"}, "sale_date": dt.date(2017, 3, 28), "tags": ["a"]},
    {"id": 2, "location": {"city": "Belmont"}, "sale_date": dt.date(2017, 3, 29), "tags": []},
]


def _avro(records: list[dict[str, Any]], codec: str = "null") -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, SALE, records, codec=codec)
    return buf.getvalue()


def _long(value: int) -> bytes:
    acc = (value << 1) ^ (value >> 63)
    out = bytearray()
    while acc & ~0x7F:
        out.append((acc & 0x7F) | 0x80)
        acc >>= 7
    return bytes([*out, acc])


def _snappy_avro(records: list[dict[str, Any]]) -> bytes:
    """An Avro file with the snappy codec (each block: raw snappy, then the CRC-32 of its data)."""
    buf = io.BytesIO()
    for rec in records:
        fastavro.schemaless_writer(buf, fastavro.parse_schema(SALE), rec)
    block = buf.getvalue()
    packed: bytes = pa.Codec("snappy").compress(block, asbytes=True)
    packed += struct.pack(">I", zlib.crc32(block))
    sync = bytes(range(16))
    schema = fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(SALE)).encode()
    meta = _long(2) + _long(11) + b"avro.schema" + _long(len(schema)) + schema
    meta += _long(10) + b"avro.codec" + _long(6) + b"snappy" + _long(0)
    return b"Obj\x01" + meta + sync + _long(len(records)) + _long(len(packed)) + packed + sync


def _orc(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    orc.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


ORC_TABLE = pa.table(
    {
        "id": pa.array([1, 2], pa.int32()),
        "loc": [{"city": "Oslo"}, {"city": "Lima"}],
        "at": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5), dt.datetime(2024, 1, 3)], pa.timestamp("ns")),
        "raw": pa.array([b"\x00\xff", b"A"], pa.binary()),
    }
)
AT = dt.datetime(2024, 1, 2, 3, 4, 5)

CASES = [
    # -- Avro
    Case(
        id="avro_transform_fields_paths_metadata",
        source=f"{CIT} (TYPE = AVRO); {TRF} ($1:location.city::varchar, $1:sale_date::date); "
        f"{META} (METADATA$FILENAME, METADATA$FILE_ROW_NUMBER)",
        columns="id INT, city VARCHAR, day DATE, file VARCHAR, rownum INT",
        copy=(
            "FROM (SELECT $1:id, $1:location.city::varchar, $1:sale_date::date, METADATA$FILENAME, "
            "METADATA$FILE_ROW_NUMBER FROM @{stage}) FILE_FORMAT = (TYPE = AVRO)"
        ),
        files={"sales.avro": _avro(SALES)},
        rows=[(1, "Lexington", "2017-03-28", "sales.avro", 1), (2, "Belmont", "2017-03-29", "sales.avro", 2)],
        history={"sales.avro": {"STATUS": "Loaded", "ROW_COUNT": 2, "ROW_PARSED": 2}},
    ),
    Case(
        id="avro_plain_copy_into_variant",
        source=f"{CIT} (semi-structured data: plain COPY loads each record into one VARIANT column)",
        columns="src VARIANT",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = AVRO)",
        files={"v.avro": _avro(SALES[:1])},
        rows=[('{"id":1,"location":{"city":"Lexington"},"sale_date":"2017-03-28","tags":["a"]}',)],
        history={"v.avro": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="avro_codecs_and_file_compression",
        source=f"{CFF} (TYPE = AVRO COMPRESSION = AUTO: 'will determine both the file and codec "
        "compression'); Avro's deflate and snappy codecs",
        columns="id INT, city VARCHAR",
        copy="FROM (SELECT $1:id, $1:location.city FROM @{stage}) FILE_FORMAT = (TYPE = AVRO)",
        files={
            "deflate.avro.gz": gzip.compress(_avro(SALES[:1], codec="deflate")),
            "snappy.avro": _snappy_avro(SALES[1:]),
        },
        query="SELECT * FROM {table} ORDER BY 1",
        rows=[(1, "Lexington"), (2, "Belmont")],
        history={
            "deflate.avro.gz": {"STATUS": "Loaded", "ROW_COUNT": 1},
            "snappy.avro": {"STATUS": "Loaded", "ROW_COUNT": 1},
        },
    ),
    Case(
        id="avro_not_avro_fails_its_file",
        source=f"{CIT} (a file the format cannot parse is a load error; Snowpipe's ON_ERROR = SKIP_FILE)",
        columns="src VARIANT",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = AVRO)",
        files={"bad.avro": b"id,name\n1,a\n", "good.avro": _avro(SALES[:1])},
        query="SELECT COUNT(*) FROM {table}",
        rows=[(1,)],
        history={
            "bad.avro": {
                "STATUS": "Load failed",
                "FIRST_ERROR_MESSAGE": "Error parsing the Avro file: not an Avro object container file "
                "(it does not start with 'Obj' 0x01)",
            },
            "good.avro": {"STATUS": "Loaded", "ROW_COUNT": 1},
        },
    ),
    # -- ORC
    Case(
        id="orc_transform_fields_and_casts",
        source=f"{CIT} (TYPE = ORC); {TRF} ($1:col, paths and casts)",
        columns="id INT, city VARCHAR, at TIMESTAMP_NTZ, raw VARCHAR",
        copy=(
            "FROM (SELECT $1:id, UPPER($1:loc.city), $1:at, $1:raw FROM @{stage}) FILE_FORMAT = (TYPE = ORC)"
        ),
        files={"o.orc": _orc(ORC_TABLE)},
        rows=[(1, "OSLO", "2024-01-02 03:04:05", "00FF"), (2, "LIMA", "2024-01-03 00:00:00", "41")],
        history={"o.orc": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="orc_plain_copy_into_variant_and_bad_file",
        source=f"{CIT} (TYPE = ORC: each row into one VARIANT column; an unreadable file fails)",
        columns="src VARIANT",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = ORC)",
        files={"v.orc": _orc(ORC_TABLE.slice(0, 1).select(["id", "loc"])), "bad.orc": b"PAR1 not orc"},
        rows=[('{"id":1,"loc":{"city":"Oslo"}}',)],
        history={
            "v.orc": {"STATUS": "Loaded", "ROW_COUNT": 1},
            "bad.orc": {
                "STATUS": "Load failed",
                "FIRST_ERROR_MESSAGE": "Error parsing the ORC file: not an ORC file "
                "(it does not start with 'ORC')",
            },
        },
    ),
    # -- JSON options
    Case(
        id="json_allow_duplicate_false_is_a_row_error",
        source=f'{CFF} (ALLOW_DUPLICATE default FALSE); {PJ} (example: \'{{ "a" : "123", "b" : "456", '
        '"a": "789"} \' fails with 100069 Error parsing JSON: duplicate object attribute "a", pos 31)',
        columns="a VARCHAR",
        copy="FROM (SELECT $1:a FROM @{stage}) FILE_FORMAT = (TYPE = JSON) ON_ERROR = CONTINUE",
        files={"d.json": b'{"a": "ok"}\n{ "a" : "123", "b" : "456", "a": "789"} \n'},
        rows=[("ok",)],
        history={
            "d.json": {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 1,
                "ROW_PARSED": 2,
                "ERROR_COUNT": 1,
                "FIRST_ERROR_MESSAGE": 'Error parsing JSON: duplicate object attribute "a", pos 31',
                "FIRST_ERROR_LINE_NUMBER": 2,
            }
        },
    ),
    Case(
        id="json_allow_duplicate_true_keeps_the_last",
        source=f"{CFF} (ALLOW_DUPLICATE = TRUE: 'only the last one will be preserved')",
        columns="a VARCHAR, b VARCHAR",
        copy="FROM (SELECT $1:a, $1:b FROM @{stage}) FILE_FORMAT = (TYPE = JSON ALLOW_DUPLICATE = TRUE)",
        files={"d.json": b'{ "a" : "123", "b" : "456", "a": "789"}\n'},
        rows=[("789", "456")],
        history={"d.json": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="json_strip_null_values",
        source=f'{CFF} (STRIP_NULL_VALUES = TRUE: {{"a":null,"b":null,"c":123}} -> {{"c":123}}, '
        '{"a":[1,null,2],"b":{"x":null,"y":88}} -> {"a":[1,,2],"b":{"y":88}}; Floe keeps an array\'s '
        "null in its place, which JSON text cannot leave empty)",
        columns="n INT, src VARIANT",
        copy=(
            "FROM (SELECT METADATA$FILE_ROW_NUMBER, $1 FROM @{stage}) "
            "FILE_FORMAT = (TYPE = JSON STRIP_NULL_VALUES = TRUE)"
        ),
        files={
            "n.json": b'{"a":null,"b":null,"c":123}\n{"a":[1,null,2],"b":{"x":null,"y":88}}\n[null,null,3]\n'
        },
        rows=[(1, '{"c":123}'), (2, '{"a":[1,null,2],"b":{"y":88}}'), (3, "[null,null,3]")],
        history={"n.json": {"STATUS": "Loaded", "ROW_COUNT": 3}},
    ),
    Case(
        id="json_ignore_utf8_errors_and_replace_invalid_characters",
        source=f"{CFF} (IGNORE_UTF8_ERRORS, REPLACE_INVALID_CHARACTERS's other name, = TRUE: "
        "invalid UTF-8 becomes U+FFFD)",
        columns="name VARCHAR",
        copy="FROM (SELECT $1:name FROM @{stage}) FILE_FORMAT = (TYPE = JSON IGNORE_UTF8_ERRORS = TRUE)",
        files={"u.json": b'{"name": "Caf\xe9"}\n'},
        rows=[("Caf\ufffd",)],
        history={"u.json": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="json_enable_octal",
        source=f"{CFF} (ENABLE_OCTAL = TRUE: 'enables parsing of octal numbers')",
        columns="n INT, s VARCHAR",
        copy="FROM (SELECT $1:n, $1:s FROM @{stage}) FILE_FORMAT = (TYPE = JSON ENABLE_OCTAL = TRUE)",
        files={"o.json": b'{"n": 010, "s": "010"}\n'},
        rows=[(8, "010")],
        history={"o.json": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    # -- Parquet options
    Case(
        id="parquet_binary_as_text",
        source=f"{CFF} (BINARY_AS_TEXT default TRUE: columns with no logical type read as UTF-8 text; "
        "FALSE: as binary, shown as hex)",
        columns="t VARCHAR",
        copy="FROM (SELECT $1:b FROM @{stage}) FILE_FORMAT = (TYPE = PARQUET)",
        files={"b.parquet": _parquet(pa.table({"b": pa.array([b"Hi"], pa.binary())}))},
        rows=[("Hi",)],
        history={"b.parquet": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="parquet_binary_as_text_false",
        source=f"{CFF} (BINARY_AS_TEXT = FALSE: Snowflake interprets these columns as binary data)",
        columns="h VARCHAR",
        copy="FROM (SELECT $1:b FROM @{stage}) FILE_FORMAT = (TYPE = PARQUET BINARY_AS_TEXT = FALSE)",
        files={"b.parquet": _parquet(pa.table({"b": pa.array([b"Hi"], pa.binary())}))},
        rows=[("4869",)],
        history={"b.parquet": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="parquet_use_logical_type_false",
        source=f"{CFF} (USE_LOGICAL_TYPE = FALSE, the default: TimestampType(isAdjustedToUtc=False, MICROS) "
        "without a ConvertedType -> INTEGER; TimestampType(isAdjustedToUtc=True, MILLIS) -> TIMESTAMP_NTZ)",
        columns="local_ts VARIANT, utc_ts TIMESTAMP_NTZ",
        copy="FROM (SELECT $1:l, $1:u FROM @{stage}) FILE_FORMAT = (TYPE = PARQUET)",
        files={
            "t.parquet": _parquet(
                pa.table(
                    {
                        "l": pa.array([AT], pa.timestamp("us")),
                        "u": pa.array([AT], pa.timestamp("ms", tz="UTC")),
                    }
                )
            )
        },
        rows=[("1704164645000000", "2024-01-02 03:04:05")],
        history={"t.parquet": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="parquet_use_logical_type_true",
        source=f"{CFF} (USE_LOGICAL_TYPE = TRUE: TimestampType(isAdjustedToUtc=False) -> TIMESTAMP_NTZ)",
        columns="local_ts VARIANT",
        copy="FROM (SELECT $1:l FROM @{stage}) FILE_FORMAT = (TYPE = PARQUET USE_LOGICAL_TYPE = TRUE)",
        files={"t.parquet": _parquet(pa.table({"l": pa.array([AT], pa.timestamp("us"))}))},
        rows=[('"2024-01-02 03:04:05"',)],
        history={"t.parquet": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
]
