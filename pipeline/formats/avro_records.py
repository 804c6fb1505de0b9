"""Avro: an object container file -> one row per record, a column per field of the records.

The file's schema must be a record; each of its fields is a column, read like a Parquet column
(``$1:field``, ``$1`` the whole record). Avro types as Floe reads them:

- null, boolean, int, long, float, double, string: themselves; enum: its symbol; bytes and fixed:
  upper-case hex text (as Snowflake shows BINARY in a VARIANT); record: an object; array: an array;
  map: an object.
- a union with null and one other type: that type, or NULL; any other union: the value itself, as
  a VARIANT (JSON) column, since its type changes from row to row.
- logical types: date, time-millis/-micros, timestamp-millis/-micros/-nanos (instants, like
  TIMESTAMP_LTZ), local-timestamp-* (TIMESTAMP_NTZ) and decimal read as such; uuid as its text.

The file's blocks are decompressed here, block by block and bounded (``max_bytes``), whatever their
codec: null, deflate, snappy, zstandard, bzip2 or xz. fastavro then decodes the records. A file that
is not Avro, or whose blocks do not decode, fails whole, with a message naming the file; a string
that is not UTF-8 is an error of its row (or U+FFFD with REPLACE_INVALID_CHARACTERS).
"""

from __future__ import annotations

import bz2
import json
import lzma
import struct
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from decimal import Decimal
from typing import IO, Any, cast

import pyarrow as pa
import zstandard
from fastavro import reader as avro_reader
from fastavro._read_py import reader as avro_reader_py

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import PartTooLarge
from pipeline.formats.avro_weight import (
    AvroError,
    Weigher,
    has_arrays_or_maps,
    read_long,
    recursive,
    refuse_weightless_arrays,
)
from pipeline.formats.decoded import ROW_BYTES, batch_size
from pipeline.formats.parquet_rows import columnar_raw
from pipeline.formats.raw import CODE_INVALID_UTF8, RawFile, RowError, empty_raw, show_invalid

MAGIC = b"Obj\x01"
_SYNC_SIZE = 16

Convert = Callable[[Any], Any]
"""Turns one decoded value into what ``pa.Table.from_pylist`` takes for its Arrow type."""


CODECS = ("null", "deflate", "snappy", "zstandard", "bzip2", "xz")
"""The block codecs Floe reads."""


_CORRUPT = (AvroError, ValueError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError, OSError)


GROUP_RECORDS = 4096
"""Records decoded into Python objects before they become Arrow columns: Python's objects of a
record weigh several times its Arrow values, so only this many are held at once."""

OBJECT_FACTOR = 256
"""Most bytes of Python objects one byte of an Avro block can become (an array item of a record of
one small integer: a dict and a list slot for one byte). A block of a schema with arrays or maps,
one record of which may hold the whole block, is decoded at once only within a quarter of
``max_bytes`` / OBJECT_FACTOR; a larger one is weighed first (``Weigher``), record by record."""


def read_avro(body: bytes, fmt: FileFormat, path: str, max_bytes: int | None = None) -> RawFile:
    """One staged Avro file (already without file-level COMPRESSION) as a RawFile.

    Read a block at a time (decompressed only when fastavro reaches it), its records a group at a
    time into Arrow, every decoded byte counted against ``max_bytes`` (decision 110)."""
    if not body:
        return empty_raw([], "AVRO", path, b"", fmt)
    limit = max_bytes if max_bytes is not None else 1 << 62
    try:
        meta, sync, pos = _header(body)
        if "avro.schema" not in meta:
            raise AvroError("its header has no avro.schema")
        schema = json.loads(meta["avro.schema"].decode("utf-8"))
    except (*_CORRUPT, RecursionError) as exc:
        raise FileLoadError(f"Error parsing the Avro file: {_detail(exc)}", file=path) from exc
    _record_fields(schema, path)
    errors = "replace" if fmt.replace_invalid_characters else "surrogateescape"
    try:
        refuse_weightless_arrays(schema, {}, path)
        deep = recursive(schema, {}, ())
        reader_schema, row_type, convert = _reading(schema, {}, ())
        codec = meta.get("avro.codec", b"null").decode("utf-8", "replace")
        many = has_arrays_or_maps(schema, {}, ())
        blocks = _PlainBlocks(
            body, pos, sync, meta["avro.schema"], codec, path, limit, schema if many else None
        )
        # A recursive type's values nest as deep as the data says: fastavro's compiled reader
        # recurses in C and a deep enough value crashes the process, where its Python reader stops
        # at Python's recursion limit (RecursionError).
        read = avro_reader_py if deep else avro_reader
        records = read(cast(IO[bytes], blocks), reader_schema, handle_unicode_errors=errors)
        raw = _records_raw(records, blocks, convert, pa.schema(list(row_type)), fmt, path, limit)
    except RecursionError as exc:
        raise FileLoadError(
            "Error parsing the Avro file: a value of a recursive type is nested more than Python's "
            "recursion limit allows",
            file=path,
        ) from exc
    except (AvroError, ValueError, EOFError, TypeError, KeyError, IndexError, OverflowError) as exc:
        raise FileLoadError(f"Error parsing the Avro file: {_detail(exc)}", file=path) from exc
    except _CORRUPT as exc:
        raise FileLoadError(f"Error parsing the Avro file: {_detail(exc)}", file=path) from exc
    return raw


def _records_raw(
    records: Iterator[Any],
    blocks: _PlainBlocks,
    convert: Convert | None,
    schema: pa.Schema,
    fmt: FileFormat,
    path: str,
    limit: int,
) -> RawFile:
    """The records as a RawFile, converted a group at a time, failing past ``limit`` decoded. A
    group ends with its block, after GROUP_RECORDS records, or once its records' Python objects
    (as weighed) reach a quarter of the limit."""
    tables: list[pa.Table] = []
    bad: dict[int, str] = {}
    held = total = weight = 0
    group: list[Any] = []
    block = blocks.index

    def flush() -> None:
        nonlocal held, weight
        table, group_bad = _table(group, schema)
        bad.update({total - len(group) + i: m for i, m in group_bad.items()})
        held += sum(batch_size(b) for b in table.to_batches()) + ROW_BYTES * len(group_bad)
        if held > limit:
            raise PartTooLarge(path, limit, record=False, kind="Avro", decoded=True)
        tables.append(table)
        group.clear()
        weight = 0

    for record in records:
        if blocks.index != block:  # the record is the next block's: the last block's records first
            flush()
            block = blocks.index
        group.append(record if convert is None else convert(record))
        total += 1
        weight += blocks.weight()
        if len(group) >= GROUP_RECORDS or weight >= limit // 4:
            flush()
    flush()
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    raw = columnar_raw(table, "AVRO", path, fmt)
    if not bad:
        return raw
    return _with_bad_rows(raw, bad, total)


def _detail(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:1].lower() + text[1:]


def _record_fields(schema: Any, path: str) -> None:
    """Refuse a file whose schema is not a record."""
    if isinstance(schema, dict) and schema.get("type") == "record" and isinstance(schema.get("fields"), list):
        return
    shown = schema.get("type") if isinstance(schema, dict) else schema
    raise FileLoadError(
        f"Error parsing the Avro file: its schema is {json.dumps(shown)}, not a record; "
        "Floe loads Avro files of records",
        file=path,
    )


# ---------------------------------------------------------------------------------------------
# The container: header, then blocks of records, each compressed by the file's codec


def _put_long(value: int) -> bytes:
    acc = (value << 1) ^ (value >> 63)
    out = bytearray()
    while acc & ~0x7F:
        out.append((acc & 0x7F) | 0x80)
        acc >>= 7
    out.append(acc)
    return bytes(out)


def _bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = read_long(data, pos)
    if size < 0 or pos + size > len(data):
        raise AvroError("the file ends inside a value")
    return data[pos : pos + size], pos + size


def _header(data: bytes) -> tuple[dict[str, bytes], bytes, int]:
    """The file's metadata, its sync marker and where its first block starts."""
    if not data.startswith(MAGIC):
        raise AvroError("not an Avro object container file (it does not start with 'Obj' 0x01)")
    meta: dict[str, bytes] = {}
    pos = len(MAGIC)
    while True:
        count, pos = read_long(data, pos)
        if count == 0:
            break
        if count < 0:
            count = -count
            _, pos = read_long(data, pos)  # the block's size in bytes
        for _ in range(count):
            key, pos = _bytes(data, pos)
            value, pos = _bytes(data, pos)
            meta[key.decode("utf-8", "replace")] = value
    if pos + _SYNC_SIZE > len(data):
        raise AvroError("the file ends inside its header")
    return meta, data[pos : pos + _SYNC_SIZE], pos + _SYNC_SIZE


def _blocks(data: bytes, pos: int, sync: bytes) -> Iterator[tuple[int, bytes]]:
    """(record count, stored bytes) of each block."""
    while pos < len(data):
        count, pos = read_long(data, pos)
        block, pos = _bytes(data, pos)
        if data[pos : pos + _SYNC_SIZE] != sync:
            raise AvroError("a block is not followed by the file's sync marker")
        pos += _SYNC_SIZE
        yield count, block


class _PlainBlocks:
    """The file as fastavro reads it: the header again with codec null, then each block decompressed
    only when fastavro reads up to it, so one block's bytes are held at a time. A block past
    ``limit`` fails the file. With ``schema`` (one with arrays or maps, one record of which may hold
    a whole block of small values), a block too large for its Python objects to be safely made at
    once is weighed first, record by record (``Weigher``)."""

    def __init__(
        self, body: bytes, pos: int, sync: bytes, text: bytes, codec: str, path: str, limit: int, schema: Any
    ) -> None:
        out = [MAGIC, _put_long(2)]
        for key, value in (("avro.schema", text), ("avro.codec", b"null")):
            out += [_put_long(len(key)), key.encode(), _put_long(len(value)), value]
        out += [_put_long(0), sync]
        self._buffer = memoryview(b"".join(out))
        self._blocks = _blocks(body, pos, sync)
        self._sync = sync
        self._codec = codec
        self._path = path
        self._limit = limit
        self._schema = schema
        self._small = max(1, limit // 4 // OBJECT_FACTOR)
        self._weights: list[int] = []
        self._small_weight = 0
        self.index = 0
        """Blocks read so far (fastavro reads a block once it has yielded the records before it)."""

    def weight(self) -> int:
        """Bytes the next record's Python objects may take (in the order fastavro yields them)."""
        return self._weights.pop() if self._weights else self._small_weight

    def read(self, n: int = -1, /) -> bytes:
        while not self._buffer:
            block = next(self._blocks, None)
            if block is None:
                return b""
            count, stored = block
            plain = _inflate(self._codec, stored, self._limit)
            if plain is None:
                raise PartTooLarge(self._path, self._limit, record=False, kind="Avro")
            self._weights = []
            self._small_weight = 0
            if self._schema is not None and len(plain) > self._small:
                self._weights = Weigher(plain, self._schema, self._path, self._limit // 4).records(count)
                self._weights.reverse()
            elif self._schema is not None:
                self._small_weight = len(plain) * OBJECT_FACTOR // max(1, count)
            self.index += 1
            self._buffer = memoryview(b"".join([_put_long(count), _put_long(len(plain)), plain, self._sync]))
        if n < 0:
            n = len(self._buffer)
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return bytes(out)


def _inflate(codec: str, block: bytes, budget: int) -> bytes | None:
    """A block decompressed by the file's codec; None when it would pass ``budget`` bytes."""
    if codec == "null":
        plain = block
    elif codec == "deflate":  # raw DEFLATE (RFC 1951)
        inflater = zlib.decompressobj(-15)
        plain = inflater.decompress(block, budget + 1)
    elif codec == "bzip2":
        plain = bz2.BZ2Decompressor().decompress(block, budget + 1)
    elif codec == "xz":
        plain = lzma.LZMADecompressor().decompress(block, budget + 1)
    elif codec == "zstandard":
        with zstandard.ZstdDecompressor().stream_reader(block) as stream:
            parts: list[bytes] = []
            have = 0
            while have <= budget and (part := stream.read(min(budget + 1 - have, 1 << 20))):
                parts.append(part)
                have += len(part)
            plain = b"".join(parts)
    elif codec == "snappy":  # raw snappy, then the CRC-32 (big-endian) of the uncompressed bytes
        if len(block) < 5:
            raise AvroError("a snappy block is too short")
        size, _ = _varint(block[:-4])
        if size > budget:
            return None
        plain = pa.Codec("snappy").decompress(block[:-4], decompressed_size=size).to_pybytes()
        if struct.unpack(">I", block[-4:])[0] != zlib.crc32(plain):
            raise AvroError("a snappy block's checksum does not match")
    else:
        raise AvroError(f"its codec '{codec}' is not supported ({', '.join(CODECS)})")
    return None if len(plain) > budget else plain


def _varint(data: bytes) -> tuple[int, int]:
    """An unsigned little-endian base-128 varint (snappy's uncompressed length)."""
    acc = shift = pos = 0
    while pos < len(data) and shift < 35:
        b = data[pos]
        acc |= (b & 0x7F) << shift
        pos += 1
        if not b & 0x80:
            return acc, pos
        shift += 7
    raise AvroError("a snappy block has no valid length")


# ---------------------------------------------------------------------------------------------
# Avro types -> the schema fastavro reads with, the Arrow type, and a conversion of the values


def _reading(t: Any, names: dict[str, Any], seen: tuple[str, ...]) -> tuple[Any, pa.DataType, Convert | None]:
    """For a writer type: the reader type (logical types dropped: Floe converts them), the column's
    Arrow type and a conversion of fastavro's values (None: none needed)."""
    if isinstance(t, list):
        return _union(t, names, seen)
    if isinstance(t, str):
        if t in names:  # a named type defined earlier: the reader schema names it too
            if t in seen:  # a recursive type: its values are JSON
                return t, pa.json_(pa.string()), _to_json
            _, arrow_type, convert = _reading(names[t], dict(names), seen)
            return t, arrow_type, convert
        return t, _PRIMITIVE.get(t, pa.string()), None
    kind = t.get("type")
    logical = t.get("logicalType")
    if isinstance(kind, str) and kind in ("record", "enum", "fixed"):
        name = t.get("name", "")
        full = name if "." in name or not t.get("namespace") else f"{t['namespace']}.{name}"
        names[name] = names[full] = t
        seen = (*seen, name, full)
    if logical is not None and (kind in _PRIMITIVE or kind == "fixed"):
        # fastavro reads the underlying value; Floe converts it (or keeps it, for a logical type it
        # does not know, as the specification says a reader must).
        plain = {k: v for k, v in t.items() if k != "logicalType"}
        known = _logical(str(logical), t)
        if known is not None:
            return plain, known[0], known[1]
        return plain, (pa.binary() if kind == "fixed" else _PRIMITIVE[kind]), None
    if kind == "record":
        fields, arrow_fields, converters = [], [], []
        for f in t.get("fields", []):
            avro_type, arrow_type, convert = _reading(f["type"], names, seen)
            fields.append({**f, "type": avro_type})
            arrow_fields.append(pa.field(f["name"], arrow_type))
            converters.append((f["name"], convert))
        return {**t, "fields": fields}, pa.struct(arrow_fields), _record_convert(converters)
    if kind == "enum":
        return t, pa.string(), None
    if kind == "fixed":
        return t, pa.binary(), None
    if kind == "array":
        avro_type, arrow_type, convert = _reading(t["items"], names, seen)
        each = None if convert is None else _list_convert(convert)
        return {**t, "items": avro_type}, pa.list_(arrow_type), each
    if kind == "map":
        avro_type, arrow_type, convert = _reading(t["values"], names, seen)
        return {**t, "values": avro_type}, pa.map_(pa.string(), arrow_type), _map_convert(convert)
    if isinstance(kind, (str, dict, list)):
        return _reading(kind, names, seen)  # {"type": "long"} and the like
    raise AvroError(f"unknown type {json.dumps(t)}")


_PRIMITIVE: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def _logical(logical: str, t: dict[str, Any]) -> tuple[pa.DataType, Convert | None] | None:
    """Arrow type and conversion of a logical type's underlying values; None: not one Floe knows
    (its underlying type is read, as the Avro specification says a reader must)."""
    kind = t.get("type")
    if logical == "date" and kind == "int":
        return pa.date32(), None  # pyarrow builds date32 from the day count itself
    if logical in _TIMES and kind == _TIMES[logical][1]:
        unit = _TIMES[logical][0]
        return pa.time32(unit) if unit == "ms" else pa.time64(unit), None
    if logical in _TIMESTAMPS and kind == "long":
        unit, tz = _TIMESTAMPS[logical]
        return pa.timestamp(unit, tz=tz), None
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(t.get("precision", 38)), int(t.get("scale", 0))
        if not 0 < precision <= 76 or not 0 <= scale <= precision:
            return None
        arrow_type = pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
        return arrow_type, _decimal_convert(scale)
    if logical == "uuid" and kind in ("string", "fixed"):
        return pa.string(), _uuid_text
    return None


_TIMES = {"time-millis": ("ms", "int"), "time-micros": ("us", "long")}
_TIMESTAMPS: dict[str, tuple[str, str | None]] = {
    "timestamp-millis": ("ms", "UTC"),
    "timestamp-micros": ("us", "UTC"),
    "timestamp-nanos": ("ns", "UTC"),
    "local-timestamp-millis": ("ms", None),
    "local-timestamp-micros": ("us", None),
    "local-timestamp-nanos": ("ns", None),
}


def _union(
    branches: list[Any], names: dict[str, Any], seen: tuple[str, ...]
) -> tuple[Any, pa.DataType, Convert | None]:
    others = [b for b in branches if b != "null"]
    if len(others) == 1:
        avro_type, arrow_type, convert = _reading(others[0], names, seen)
        nullable = [avro_type if b != "null" else "null" for b in branches]
        return nullable, arrow_type, (None if convert is None else _nullable(convert))
    # A value of any of several types: its JSON text, which DuckDB reads as JSON (a VARIANT).
    read = [_reading(b, names, seen)[0] for b in branches]
    return read, pa.json_(pa.string()), _to_json


def _nullable(convert: Convert) -> Convert:
    return lambda v: None if v is None else convert(v)


def _record_convert(converters: list[tuple[str, Convert | None]]) -> Convert | None:
    active = [(name, c) for name, c in converters if c is not None]
    if not active:
        return None

    def convert(rec: Any) -> Any:
        if rec is None:
            return None
        for name, c in active:
            rec[name] = c(rec[name])
        return rec

    return convert


def _list_convert(convert: Convert) -> Convert:
    return lambda items: None if items is None else [convert(v) for v in items]


def _map_convert(convert: Convert | None) -> Convert:
    # pyarrow takes a map as a list of (key, value) pairs.
    if convert is None:
        return lambda m: None if m is None else list(m.items())
    return lambda m: None if m is None else [(k, convert(v)) for k, v in m.items()]


def _decimal_convert(scale: int) -> Convert:
    def convert(v: Any) -> Any:
        if v is None or isinstance(v, Decimal):
            return v
        return Decimal(int.from_bytes(v, "big", signed=True)).scaleb(-scale)

    return convert


def _uuid_text(v: Any) -> Any:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, uuid.UUID):
        return str(v)
    h = bytes(v).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _json_default(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex().upper()
    if isinstance(v, Decimal):
        return float(v)
    return str(v)


def _to_json(v: Any) -> Any:
    if v is None:
        return None
    return json.dumps(v, ensure_ascii=False, default=_json_default, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------
# Records -> an Arrow table; records with strings that are not UTF-8 are errors of their rows


def _table(records: list[dict[str, Any]], schema: pa.Schema) -> tuple[pa.Table, dict[int, str]]:
    """The records as a table, and the rows left out because they hold a string that is not UTF-8
    (fastavro decoded it with surrogateescape), with their messages."""
    try:
        return pa.Table.from_pylist(records, schema=schema), {}
    except (UnicodeEncodeError, pa.ArrowInvalid):
        pass  # rare: find the offending records one by one
    good: list[dict[str, Any]] = []
    bad: dict[int, str] = {}
    for i, rec in enumerate(records):
        text = _invalid_text(rec)
        if text is None:
            good.append(rec)
        else:
            bad[i] = f"Invalid UTF8 detected in string '{show_invalid(text)}'"
    return pa.Table.from_pylist(good, schema=schema), bad


def _invalid_text(value: Any) -> str | None:
    """The first string in value holding undecodable bytes (as surrogate escapes), if any."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return None
        except UnicodeEncodeError:
            return value
    items: Any = ()
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        items = value
    for item in items:
        found = _invalid_text(item)
        if found is not None:
            return found
    return None


def _with_bad_rows(raw: RawFile, bad: dict[int, str], total: int) -> RawFile:
    """raw (the good records) renumbered among all the file's records, with the bad ones as errors."""
    good = [i for i in range(total) if i not in bad]
    kept = raw.row_numbers.to_pylist()  # 1-based among the good records (after columnar_raw's own)
    numbers = pa.array([good[k - 1] + 1 for k in kept], pa.int64())
    errors = [
        RowError(
            row_number=i + 1, line=i + 1, character=1, column_name=None, message=m, code=CODE_INVALID_UTF8
        )
        for i, m in sorted(bad.items())
    ]
    for e in raw.errors:
        number = good[e.row_number - 1] + 1
        errors.append(replace(e, row_number=number, line=number))
    errors.sort(key=lambda e: e.row_number)
    return RawFile(raw.table, numbers, numbers, errors, total, "AVRO", raw.path, b"", raw.fmt, raw.width)
