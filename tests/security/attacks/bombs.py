"""Decompression bombs: small staged files that inflate to gigabytes (issue 9, item 9).

Built without ever holding the inflated bytes: a bomb is one small compressed block written again
and again (gzip members concatenated, which ``gzip -d`` and every reader of Floe's inflate as one
stream), or one member compressed from a stream of writes. So a test of a 2 GiB bomb costs a few
megabytes and a fraction of a second.
"""

from __future__ import annotations

import bz2
import zlib

import pyarrow as pa

MiB = 1 << 20
GiB = 1 << 30

ONE_LINE = b"0"
"""Fill of a bomb without a newline: one record as long as the whole file."""


def lines(width: int = 1024, prefix: bytes = b"1,") -> bytes:
    """Fill of a bomb with newlines: CSV records ``prefix`` + zeros, ``width`` bytes each."""
    return prefix + b"0" * (width - len(prefix) - 1) + b"\n"


def _block(fill: bytes, size: int) -> bytes:
    assert size % len(fill) == 0, "the block must hold whole copies of the fill"
    return fill * (size // len(fill))


def gzip_bomb(inflated: int, fill: bytes = ONE_LINE, *, member: int = 8 * MiB, header: bytes = b"") -> bytes:
    """A gzip file inflating to ``header`` + ``inflated`` bytes of ``fill``, as concatenated members
    of ``member`` inflated bytes each (``inflated`` must be a multiple of ``member``)."""
    assert inflated % member == 0
    one = _gzip(_block(fill, member))
    return (_gzip(header) if header else b"") + one * (inflated // member)


def gzip_bomb_one_member(inflated: int, fill: bytes = ONE_LINE, *, block: int = MiB) -> bytes:
    """The same as one gzip member, written block by block through a streaming compressor."""
    return _stream(zlib.compressobj(9, zlib.DEFLATED, 31), _block(fill, block), inflated // block)


def deflate_bomb(inflated: int, fill: bytes = ONE_LINE, *, raw: bool = False, block: int = MiB) -> bytes:
    """A zlib (DEFLATE) or raw DEFLATE stream inflating to ``inflated`` bytes of ``fill``."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15 if raw else 15)
    return _stream(compressor, _block(fill, block), inflated // block)


def bz2_bomb(inflated: int, fill: bytes = ONE_LINE, *, block: int = MiB) -> bytes:
    """A bzip2 stream inflating to ``inflated`` bytes of ``fill``."""
    return _stream(bz2.BZ2Compressor(9), _block(fill, block), inflated // block)


def arrow_bomb(codec: str, inflated: int, fill: bytes = ONE_LINE, *, block: int = MiB) -> bytes:
    """A zstd or brotli stream (pyarrow's codecs) inflating to ``inflated`` bytes of ``fill``."""
    sink = pa.BufferOutputStream()
    data = _block(fill, block)
    with pa.CompressedOutputStream(sink, codec) as out:
        for _ in range(inflated // block):
            out.write(data)
    return bytes(sink.getvalue())


def _gzip(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def _stream(compressor: zlib._Compress | bz2.BZ2Compressor, block: bytes, count: int) -> bytes:
    out = [compressor.compress(block) for _ in range(count)]
    out.append(compressor.flush())
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# Decode bombs (issue 31, items 3 and 4): files whose own encodings (a dictionary, runs of one
# level, nulls, nesting, a page that lies about its size) decode to far more than they store.
# Built from small or lazily allocated arrays, so a test pays megabytes, not the decoded size.


def _zeros(n: int) -> pa.Buffer:
    """n zero bytes that cost nothing until read (calloc'd pages)."""
    import numpy as np

    return pa.py_buffer(np.zeros(n, dtype=np.uint8))


def parquet_dictionary(rows: int, width: int, *, row_group: int = 1 << 20) -> bytes:
    """``rows`` rows of one ``width``-character string, stored once in a dictionary page; the rows
    are runs of one dictionary index (RLE), and no Arrow schema is stored, so it reads as a string
    column (the issue's file: 600k rows of a 1,000-character string in 64 KB)."""
    import pyarrow.parquet as pq

    indices = pa.Array.from_buffers(pa.int32(), rows, [None, _zeros(4 * rows)])
    column = pa.DictionaryArray.from_arrays(indices, pa.array(["x" * width]))
    sink = pa.BufferOutputStream()
    pq.write_table(
        pa.table({"s": column}), sink, store_schema=False, compression="zstd", row_group_size=row_group
    )
    return bytes(sink.getvalue())


def parquet_null_columns(rows: int, columns: int) -> bytes:
    """``columns`` BIGINT columns of ``rows`` NULLs each: runs of one definition level, a few bytes a
    column, while each NULL is eight bytes (and a bit) once decoded."""
    import pyarrow.parquet as pq

    nulls = pa.Array.from_buffers(
        pa.int64(), rows, [_zeros((rows + 7) // 8), _zeros(8 * rows)], null_count=rows
    )
    table = pa.table({f"c{i}": nulls for i in range(columns)})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, store_schema=False, compression="zstd", row_group_size=rows)
    return bytes(sink.getvalue())


def parquet_nested_nulls(values: int, rows: int = 1) -> bytes:
    """``rows`` rows of one list column, the first holding ``values`` NULL elements (deep nesting's
    cheapest form: every element is a run of the same repetition and definition levels)."""
    import pyarrow.parquet as pq

    items = pa.Array.from_buffers(
        pa.int64(), values, [_zeros((values + 7) // 8), _zeros(8 * values)], null_count=values
    )
    offsets = pa.array([0, values] + [values] * (rows - 1), pa.int32())
    column = pa.ListArray.from_arrays(offsets, items)
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"l": column}), sink, store_schema=False, compression="zstd")
    return bytes(sink.getvalue())


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def parquet_understated(width: int) -> bytes:
    """One row holding one ``width``-byte string in a zstd page, whose footer says each of its sizes
    (the column chunk's and the row group's uncompressed size) is 1,000 bytes: a bound that trusts the
    footer reads it. Each size is rewritten in place as a padded varint of the same length."""
    import struct

    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(
        pa.table({"s": ["x" * width]}), sink, compression="zstd", use_dictionary=False, store_schema=False
    )
    data = bytes(sink.getvalue())
    footer_length = struct.unpack("<I", data[-8:-4])[0]
    footer = data[-8 - footer_length : -8]
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    for size in {meta.row_group(0).column(0).total_uncompressed_size, meta.row_group(0).total_byte_size}:
        old = _varint(size << 1)  # thrift's compact i64: zigzag varint
        small = bytearray(_varint(1000 << 1))
        while len(small) < len(old):
            small[-1] |= 0x80
            small.append(0)
        assert old in footer
        footer = footer.replace(old, bytes(small))
    return data[: -8 - footer_length] + footer + data[-8:]


def orc_dictionary(rows: int, width: int, *, batch: int = 8192) -> bytes:
    """``rows`` rows of one ``width``-character string, dictionary-encoded in one stripe (written a
    batch at a time, so the test never holds the rows)."""
    import pyarrow.orc as orc

    sink = pa.BufferOutputStream()
    writer = orc.ORCWriter(sink, compression="zstd", dictionary_key_size_threshold=1.0, stripe_size=1 << 30)
    value = "x" * width
    done = 0
    while done < rows:
        n = min(batch, rows - done)
        writer.write(pa.table({"s": pa.array([value]).take(pa.array([0] * n))}))
        done += n
    writer.close()
    return bytes(sink.getvalue())


def orc_null_columns(rows: int, columns: int) -> bytes:
    """``columns`` BIGINT columns of ``rows`` NULLs each (one stripe): a present-stream run each."""
    import pyarrow.orc as orc

    nulls = pa.Array.from_buffers(
        pa.int64(), rows, [_zeros((rows + 7) // 8), _zeros(8 * rows)], null_count=rows
    )
    sink = pa.BufferOutputStream()
    orc.write_table(
        pa.table({f"c{i}": nulls for i in range(columns)}), sink, compression="zstd", stripe_size=1 << 30
    )
    return bytes(sink.getvalue())


def orc_nested_nulls(values: int) -> bytes:
    """One row of one list column holding ``values`` NULL elements."""
    import pyarrow.orc as orc

    items = pa.Array.from_buffers(
        pa.int64(), values, [_zeros((values + 7) // 8), _zeros(8 * values)], null_count=values
    )
    column = pa.ListArray.from_arrays(pa.array([0, values], pa.int32()), items)
    sink = pa.BufferOutputStream()
    orc.write_table(pa.table({"l": column}), sink, compression="zstd", stripe_size=1 << 30)
    return bytes(sink.getvalue())


def orc_one_value(width: int) -> bytes:
    """One row holding one ``width``-byte string, stored directly (no dictionary) and zstd-compressed
    in blocks: a single value as large as the stripe."""
    import pyarrow.orc as orc

    sink = pa.BufferOutputStream()
    orc.write_table(pa.table({"s": ["x" * width]}), sink, compression="zstd", stripe_size=1 << 30)
    return bytes(sink.getvalue())


def _avro_file(schema: dict[str, object], blocks: list[tuple[int, bytes]], codec: str = "null") -> bytes:
    """An Avro object container file of ``blocks`` (record count, block bytes as the codec stores
    them), written by hand: the counts are what the blocks say, whatever they hold."""
    import json

    def long(v: int) -> bytes:
        return _varint((v << 1) ^ (v >> 63))

    sync = b"\x17" * 16
    out = [b"Obj\x01", long(2)]
    for key, value in (("avro.schema", json.dumps(schema).encode()), ("avro.codec", codec.encode())):
        out += [long(len(key)), key.encode(), long(len(value)), value]
    out += [long(0), sync]
    for count, block in blocks:
        out += [long(count), long(len(block)), block, sync]
    return b"".join(out)


def avro_recursive(depth: int) -> bytes:
    """One record of a recursive type (a linked list), ``depth`` levels deep: one byte a level (the
    union's branch), and a reader that recurses once a level."""
    schema: dict[str, object] = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    return _avro_file(schema, [(1, b"\x02" * depth + b"\x00")])


def avro_null_array(items: int) -> bytes:
    """One record whose array of NULLs says it holds ``items`` of them: a null takes no byte, so the
    whole array is its count (a few bytes)."""
    schema: dict[str, object] = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}],
    }

    def long(v: int) -> bytes:
        return _varint((v << 1) ^ (v >> 63))

    return _avro_file(schema, [(1, long(items) + long(0))])


def avro_empty_records(records: int) -> bytes:
    """A block that says it holds ``records`` records of one NULL field each: zero bytes a record."""
    schema: dict[str, object] = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "null"}]}
    return _avro_file(schema, [(records, b"")])


def avro_small_values(values: int) -> bytes:
    """One record holding an array of ``values`` one-byte integers (deflate: a few KB stored): each
    byte becomes a Python integer and a list slot, then an Arrow value."""
    schema: dict[str, object] = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": {"type": "array", "items": "long"}}],
    }

    def long(v: int) -> bytes:
        return _varint((v << 1) ^ (v >> 63))

    plain = long(values) + b"\x02" * values + long(0)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return _avro_file(schema, [(1, compressor.compress(plain) + compressor.flush())], codec="deflate")
