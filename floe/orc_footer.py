"""An ORC file's tail, read before liborc reads it (decisions 110 and 117).

liborc inflates and parses an ORC file's footer as it opens the file, before anything can be
counted: the footer holds each column's statistics, whose minimum and maximum may be as long as the
column's longest string (a 192 MiB value stored in a few KB of zstd), and protobuf's repeated fields
cost liborc far more parsed than stored (14 MB of empty statistics took 1 GB). The job
(``pipeline.formats.orc_stripes``) counts the inflated tail before liborc opens a file it loads; the
API's INFER_SCHEMA (``floe.file_schema``) needs only the file's type tree, so it hands liborc a tail
of its own holding just that (``schema_file``).

Protocol buffers and ORC's compression chunks are read here with just what these need.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import pyarrow as pa
import zstandard

CODECS = {0: "UNCOMPRESSED", 1: "ZLIB", 2: "SNAPPY", 3: "LZO", 4: "LZ4", 5: "ZSTD"}
"""PostScript.compression's values."""


class OrcStructureError(ValueError):
    """The file's structure does not parse (liborc would fail on it too, or read it otherwise)."""


# ---------------------------------------------------------------------------------------------
# Protocol buffers: just what the tail and stripe footers need


def varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``, and the offset after it."""
    shift = acc = 0
    while True:
        if pos >= len(data):
            raise OrcStructureError("a number runs past its message")
        b = data[pos]
        pos += 1
        acc |= (b & 0x7F) << shift
        if not b & 0x80:
            return acc, pos
        shift += 7
        if shift > 70:
            raise OrcStructureError("a number is longer than 64 bits")


def message(data: bytes | memoryview) -> dict[int, list[int | bytes]]:
    """A protobuf message's fields by number: varints as ints, length-delimited ones as bytes."""
    out: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        field, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 2:
            size, pos = varint(data, pos)
            if pos + size > len(data):
                raise OrcStructureError("a field runs past its message")
            value, pos = bytes(data[pos : pos + size]), pos + size
        elif wire == 1:
            value, pos = 0, pos + 8
        elif wire == 5:
            value, pos = 0, pos + 4
        else:
            raise OrcStructureError(f"a message holds an unknown wire type {wire}")
        out.setdefault(field, []).append(value)
    return out


def int_field(msg: dict[int, list[int | bytes]], field: int, default: int = 0) -> int:
    """A varint field's last value (``default`` when absent)."""
    values = msg.get(field)
    return int(values[-1]) if values and isinstance(values[-1], int) else default


def packed(msg: dict[int, list[int | bytes]], field: int) -> list[int]:
    """A repeated varint field's values, packed or not."""
    out: list[int] = []
    for value in msg.get(field, []):
        if isinstance(value, int):
            out.append(value)
            continue
        pos = 0
        while pos < len(value):
            n, pos = varint(value, pos)
            out.append(n)
    return out


# ---------------------------------------------------------------------------------------------
# Compression chunks


def _chunks(data: bytes | memoryview, compressed: bool) -> Iterator[tuple[bool, memoryview]]:
    """A stream's compression chunks: (stored as is, bytes)."""
    view = memoryview(data)
    if not compressed:
        yield True, view
        return
    pos = 0
    while pos < len(view):
        if pos + 3 > len(view):
            raise OrcStructureError("a compression chunk header runs past its stream")
        header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
        size = header >> 1
        if pos + 3 + size > len(view):
            raise OrcStructureError("a compression chunk runs past its stream")
        yield bool(header & 1), view[pos + 3 : pos + 3 + size]
        pos += 3 + size


def inflated_size(codec: str, data: bytes | memoryview, compressed: bool, block: int, limit: int) -> int:
    """Bytes a stream decompresses to, counted a megabyte at a time without holding them; past
    ``limit`` the count stops (the stream is too large whatever the rest holds)."""
    total = 0
    for original, chunk in _chunks(data, compressed):
        if original:
            total += len(chunk)
        elif codec == "ZLIB":
            inflater = zlib.decompressobj(-15)
            pending = bytes(chunk)
            while pending and total <= limit:
                total += len(inflater.decompress(pending, 1 << 20))
                pending = inflater.unconsumed_tail
        elif codec == "ZSTD":
            with zstandard.ZstdDecompressor().stream_reader(bytes(chunk)) as reader:
                while total <= limit and (part := reader.read(1 << 20)):
                    total += len(part)
        elif codec == "SNAPPY":
            total += varint(chunk, 0)[0]  # snappy's header says; liborc checks it
        else:  # LZ4 says nothing of its size: at most a block (liborc refuses more)
            total += block
        if total > limit:
            return total
    return total


def inflate(codec: str, data: bytes | memoryview, compressed: bool, block: int) -> bytes:
    """A stream decompressed, chunk by chunk, each at most ``block`` bytes."""
    out: list[bytes] = []
    for original, chunk in _chunks(data, compressed):
        if original:
            out.append(bytes(chunk))
        elif codec == "ZLIB":
            inflater = zlib.decompressobj(-15)
            plain = inflater.decompress(bytes(chunk), block)
            if inflater.unconsumed_tail:
                raise OrcStructureError("a zlib chunk inflates past the block size")
            out.append(plain)
        elif codec == "ZSTD":
            try:
                out.append(zstandard.ZstdDecompressor().decompress(bytes(chunk), max_output_size=block))
            except zstandard.ZstdError as exc:
                raise OrcStructureError(f"a zstd chunk does not decompress: {exc}") from exc
        elif codec == "SNAPPY":
            size, _ = varint(chunk, 0)
            if size > block:
                raise OrcStructureError("a snappy chunk inflates past the block size")
            out.append(pa.Codec("snappy").decompress(bytes(chunk), decompressed_size=size).to_pybytes())
        elif codec == "LZ4":
            plain = pa.Codec("lz4_raw").decompress(bytes(chunk), decompressed_size=block)
            out.append(plain.to_pybytes())
        else:
            raise OrcStructureError(f"its compression {codec} is not one Floe reads")
    return b"".join(out)


def tail_size(body: bytes, limit: int) -> int:
    """What the file's footer and metadata inflate to (liborc decompresses them when it opens the
    file; they hold each column's statistics, whose minimum and maximum may be as long as its longest
    string), counted before it does; past ``limit`` the count stops."""
    if len(body) < 4:
        raise OrcStructureError("the file is too short for its postscript")
    ps_length = body[-1]
    if ps_length + 1 > len(body):
        raise OrcStructureError("the postscript lies outside the file")
    postscript = message(body[-1 - ps_length : -1])
    footer, metadata = int_field(postscript, 1), int_field(postscript, 5)
    codec = CODECS.get(int_field(postscript, 2), "UNKNOWN")
    block = int_field(postscript, 3, 256 * 1024)
    end = len(body) - 1 - ps_length
    start = end - footer - metadata
    if start < 0 or footer < 0 or metadata < 0:
        raise OrcStructureError("the footer lies outside the file")
    compressed = codec != "UNCOMPRESSED"
    meta = inflated_size(codec, body[start : start + metadata], compressed, block, limit)
    return meta + inflated_size(codec, body[start + metadata : end], compressed, block, limit - meta)


# ---------------------------------------------------------------------------------------------
# The type tree alone, for INFER_SCHEMA

_HIGH_BYTES = bytes(range(0x80, 0x100))
"""Deleted from a packed field, what is left counts its varints (one byte below 0x80 ends each)."""

TYPE_ENTRIES = 8
"""Entries (fields, children, names, attributes) a type may hold on average: a struct holds its
kind and a child and a name per field, each child being a type of its own."""


class OrcTailTooLarge(ValueError):
    """Past a bound INFER_SCHEMA sets: ``what`` it counted, ``size`` of it, the ``limit``."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what}: {size} > {limit}")
        self.what = what
        self.size = size
        self.limit = limit


def _spans(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """Each field of a protobuf message as (number, wire type, start, end): a varint's bytes or a
    length-delimited field's payload; nothing is copied."""
    pos, n = 0, len(data)
    while pos < n:
        key, pos = varint(data, pos)
        wire = key & 7
        if wire == 0:
            _, end = varint(data, pos)
        elif wire == 2:
            size, pos = varint(data, pos)
            end = pos + size
        elif wire == 1:
            end = pos + 8
        elif wire == 5:
            end = pos + 4
        else:
            raise OrcStructureError(f"a message holds an unknown wire type {wire}")
        if end > n:
            raise OrcStructureError("a field runs past its message")
        yield key >> 3, wire, pos, end
        pos = end


def _type_entries(data: bytes, budget: int) -> int:
    """Entries of one Type message: its fields, the children of its packed ``subtypes`` counted
    each; the count stops past ``budget``."""
    entries = 0
    for field, wire, start, end in _spans(data):
        entries += len(data[start:end].translate(None, _HIGH_BYTES)) if (field, wire) == (2, 2) else 1
        if entries > budget:
            break
    return entries


def _types(footer: bytes) -> Iterator[bytes]:
    """The footer's Type messages (field 4), read up to the first field past them: writers write
    fields in their numbers' order, and what follows the types (row counts, statistics) is not
    needed. The fields before them (stripes) are skipped a byte or two at a time."""
    pos, n, seen = 0, len(footer), False
    while pos < n:
        key = footer[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = varint(footer, pos)
        wire, number = key & 7, key >> 3
        if seen and number != 4:
            return
        if wire == 2:
            size = footer[pos] if pos < n else 0x80
            if size < 0x80:
                pos += 1
            else:
                size, pos = varint(footer, pos)
            end = pos + size
        elif wire == 0:
            _, end = varint(footer, pos)
        elif wire in (1, 5):
            end = pos + (8 if wire == 1 else 4)
        else:
            raise OrcStructureError(f"the footer holds an unknown wire type {wire}")
        if end > n:
            raise OrcStructureError("a field runs past the footer")
        if number == 4 and wire == 2:
            seen = True
            yield footer[pos:end]
        pos = end


def schema_file(tail: bytes, size: int, max_footer: int, max_types: int) -> bytes:
    """An ORC file holding nothing but the type tree of the file whose last bytes are ``tail``
    (``size`` bytes in all), for liborc to read the schema from: its footer is inflated only once
    counted within ``max_footer`` bytes, and its types (at most ``max_types``, with at most
    ``TYPE_ENTRIES`` entries each on average) are copied into an uncompressed footer without
    stripes, statistics or metadata, which liborc would otherwise parse too. OrcTailTooLarge past a
    bound (a tail that does not hold the whole footer included), OrcStructureError if it does not
    parse."""
    if len(tail) < 4 or tail[-1] + 1 > len(tail):
        raise OrcStructureError("the file is too short for its postscript")
    ps_length = tail[-1]
    postscript = message(tail[-1 - ps_length : -1])
    footer_length = int_field(postscript, 1)
    codec = CODECS.get(int_field(postscript, 2), "UNKNOWN")
    end = len(tail) - 1 - ps_length
    if footer_length > end:
        if 1 + ps_length + footer_length <= size:
            raise OrcTailTooLarge("footer", 1 + ps_length + footer_length, max_footer)
        raise OrcStructureError("the footer lies outside the file")
    stored = tail[end - footer_length : end]
    compressed = codec != "UNCOMPRESSED"
    block = min(int_field(postscript, 3, 256 * 1024), max_footer + 1)
    inflated = inflated_size(codec, stored, compressed, block, max_footer)
    if inflated > max_footer:
        raise OrcTailTooLarge("footer", inflated, max_footer)
    footer = inflate(codec, stored, compressed, block) if compressed else stored
    types: list[bytes] = []
    entries = 0
    for one in _types(footer):
        types.append(one)
        entries += _type_entries(one, TYPE_ENTRIES * max_types - entries)
        if len(types) > max_types:
            raise OrcTailTooLarge("types", len(types), max_types)
        if entries > TYPE_ENTRIES * max_types:
            raise OrcTailTooLarge("type entries", entries, TYPE_ENTRIES * max_types)
    if not types:
        raise OrcStructureError("the footer holds no types")
    body = b"".join(_field(4, t) for t in types)
    footer_out = _varint_field(1, 3) + _varint_field(2, 0) + body + _varint_field(6, 0)
    version = _field(4, b"\x00\x0c")  # 0.12: what liborc writes
    ps_out = _varint_field(1, len(footer_out)) + _varint_field(2, 0) + version + _field(8000, b"ORC")
    return b"ORC" + footer_out + ps_out + bytes([len(ps_out)])


def _encode(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _varint_field(number: int, value: int) -> bytes:
    return _encode(number << 3) + _encode(value)


def _field(number: int, payload: bytes) -> bytes:
    return _encode(number << 3 | 2) + _encode(len(payload)) + payload
