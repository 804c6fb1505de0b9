"""Staged files whose metadata, or whose first records, cost INFER_SCHEMA far more than they store
(decision 117): footers written by hand, field by field, so their lists hold what no writer would
write (millions of empty entries), and text samples of one shape repeated.

Thrift's compact protocol (Parquet's footer) and protocol buffers (ORC's) are written here with just
what these files need; the fields' numbers are the formats' own (parquet.thrift, orc_proto.proto).
"""

from __future__ import annotations

import gzip
import struct

from tests.security.attacks.bombs import MiB, _avro_file, _varint

# ---------------------------------------------------------------------------------------------
# Parquet: FileMetaData in Thrift's compact protocol

_I32, _I64, _BINARY, _LIST, _STRUCT = 5, 6, 8, 9, 12
_STOP = b"\x00"


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _field(delta: int, kind: int) -> bytes:
    return bytes([delta << 4 | kind])


def _list_header(kind: int, size: int) -> bytes:
    return bytes([size << 4 | kind]) if size < 15 else bytes([0xF0 | kind]) + _varint(size)


def _element(name: bytes, children: int | None = None) -> bytes:
    """A SchemaElement: a group of ``children`` fields (name, num_children), or an optional INT64
    leaf (type, repetition_type, name)."""
    named = _varint(len(name)) + name
    if children is not None:
        return _field(4, _BINARY) + named + _field(1, _I32) + _zigzag(children) + _STOP
    return _field(1, _I32) + _zigzag(2) + _field(2, _I32) + _zigzag(1) + _field(1, _BINARY) + named + _STOP


def _parquet(leaves: list[bytes], row_groups: bytes) -> bytes:
    root = _element(b"schema", len(leaves))
    schema = _field(1, _LIST) + _list_header(_STRUCT, len(leaves) + 1) + root + b"".join(leaves)
    meta = _field(1, _I32) + _zigzag(1) + schema + _field(1, _I64) + _zigzag(0) + row_groups + _STOP
    return b"PAR1" + meta + struct.pack("<I", len(meta)) + b"PAR1"


def parquet_row_groups(groups: int, chunks: int) -> bytes:
    """One INT64 column, and ``groups`` row groups of ``chunks`` column chunks each, every chunk just
    its file offset (three bytes): the footer pyarrow parses whole, a few hundred bytes a chunk."""
    chunk = _field(2, _I64) + _zigzag(0) + _STOP
    group = _field(1, _LIST) + _list_header(_STRUCT, chunks) + chunk * chunks
    group += _field(1, _I64) + _zigzag(0) + _field(1, _I64) + _zigzag(0) + _STOP
    return _parquet([_element(b"a")], _field(1, _LIST) + _list_header(_STRUCT, groups) + group * groups)


def parquet_wide_schema(columns: int) -> bytes:
    """``columns`` INT64 columns, no row group (Thrift's containers hold a million at most)."""
    leaves = [_element(b"c%d" % i) for i in range(columns)]
    return _parquet(leaves, _field(1, _LIST) + _list_header(_STRUCT, 0))


# ---------------------------------------------------------------------------------------------
# ORC: Footer and PostScript as protocol buffers, uncompressed


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _int(number: int, value: int) -> bytes:
    return _key(number, 0) + _varint(value)


def orc_dense_footer(entries: int, field: int, *, field_names: int = 0) -> bytes:
    """A file of one BIGINT column whose footer repeats an empty message ``entries`` times in
    ``field`` (3: stripes, written before the types as writers do; 7: statistics, after them), two
    bytes each; ``field_names`` extra empty names in the root struct."""
    root = _int(1, 12) + _bytes(2, _varint(1)) + _bytes(3, b"a") + _bytes(3, b"") * field_names
    types = _bytes(4, root) + _bytes(4, _int(1, 4))
    repeated = _bytes(field, b"") * entries
    before, after = (repeated, b"") if field < 4 else (b"", repeated)
    footer = _int(1, 3) + _int(2, 0) + before + types + _int(6, 0) + after
    postscript = (
        _int(1, len(footer)) + _int(2, 0) + _bytes(4, b"\x00\x0c") + _int(6, 1) + _bytes(8000, b"ORC")
    )
    return b"ORC" + footer + postscript + bytes([len(postscript)])


# ---------------------------------------------------------------------------------------------
# Avro, CSV, JSON


def avro_wide_schema(fields: int) -> bytes:
    """An Avro header whose record has ``fields`` NULL fields (about 35 bytes each), no block."""
    schema: dict[str, object] = {
        "type": "record",
        "name": "R",
        "fields": [{"name": f"f{i}", "type": "null"} for i in range(fields)],
    }
    return _avro_file(schema, [])


def avro_deep_schema(depth: int) -> bytes:
    """An Avro header whose one field is an array of arrays ``depth`` levels deep."""
    inner = '"null"'
    for _ in range(depth):
        inner = '{"type":"array","items":' + inner + "}"
    text = '{"type":"record","name":"R","fields":[{"name":"a","type":' + inner + "}]}"
    key, value = b"avro.schema", text.encode()
    header = _zigzag(1) + _zigzag(len(key)) + key + _zigzag(len(value)) + value + _zigzag(0)
    return b"Obj\x01" + header + b"\x17" * 16


def csv_one_wide_record(size: int = 8 * MiB) -> bytes:
    """One record of ``size`` empty fields (8 KB gzip for 8 MiB)."""
    return gzip.compress(b"," * (size - 2) + b"\n\n")


def json_long_array(size: int = 8 * MiB) -> bytes:
    """One document whose one key holds an array of ``size`` / 2 zeros."""
    return gzip.compress(b'{"a": [' + b"0," * ((size - 20) // 2) + b"0]}\n")


def json_many_keys(keys: int) -> bytes:
    """One document of ``keys`` keys."""
    return gzip.compress(b"{" + b",".join(b'"k%d":0' % i for i in range(keys)) + b"}\n")


def json_deep_document(depth: int) -> bytes:
    """A document whose one key holds arrays ``depth`` deep, then an ordinary one."""
    return gzip.compress(b'{"a": ' + b"[" * depth + b"]" * depth + b', "b": 1}\n{"c": "x"}\n')
