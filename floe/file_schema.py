"""The columns of one staged file, read within bounds, for INFER_SCHEMA (decision 82).

Both the API (``services.infer_schema``) and tests use this; it reads bytes it is handed, never S3.

- CSV and JSON: the first ``sample_bytes`` of the file, decompressed (COMPRESSION, AUTO by magic
  bytes) and, for CSV, converted from ENCODING; at most ``max_records`` records of it
  (MAX_RECORDS_PER_FILE). A record the sample cuts is left out. CSV takes its names from the header
  with PARSE_HEADER = TRUE, else c1, c2...; SKIP_HEADER lines are skipped first. The records are
  read by ``CsvSample``, a tokenizer of the file's delimiters, quotes and escapes that never
  backtracks: each step searches for the next special token from where the last one ended.
- Parquet and ORC: the schema in the file's footer, from its last ``tail_bytes`` (the footer must
  fit in them, ORC's inflated too); no row is read, and pyarrow is handed a footer holding the
  schema alone (``floe.parquet_footer``, ``floe.orc_footer``), never the row groups, stripes and
  statistics it would parse otherwise (decision 117).
- Avro: the schema in the file's header, from its first bytes (whole-file COMPRESSION undone).

A file may have at most ``max_columns`` columns (a CSV record's fields, a JSON document's keys, a
Parquet or ORC schema's columns and nested fields), counted before they are made; a JSON value
whose values json's decoder would make into more than ``DOCUMENT_COST`` bytes is not decoded.
"""

from __future__ import annotations

import bz2
import io
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq

from floe.catalog.ddl import CSV_ENCODINGS, SKIP_HEADER_WITH_PARSE_HEADER
from floe.catalog.models import FileFormat
from floe.inference import (
    TEXT,
    VARIANT,
    AvroSchemaError,
    ColumnsOf,
    FileColumn,
    JsonNumber,
    arrow_type,
    avro_columns,
    json_type,
    text_type,
    values_columns,
)
from floe.orc_footer import OrcStructureError, OrcTailTooLarge
from floe.orc_footer import schema_file as orc_schema_file
from floe.parquet_footer import ParquetFooterError, ParquetFooterTooLarge
from floe.parquet_footer import schema_file as parquet_schema_file

_MAGIC = {b"\x1f\x8b": "GZIP", b"BZh": "BZ2", b"\x28\xb5\x2f\xfd": "ZSTD"}
_BLOCK = 1 << 20
AVRO_HEADER_MAX = 1 << 20
"""An Avro header (its schema and metadata) larger than this is refused."""


class Readable(Protocol):
    """Anything with a blocking ``read(n)``: a boto3 body, a decrypting reader, a BytesIO."""

    def read(self, n: int = ..., /) -> bytes:
        """Up to n bytes; b'' at the end."""
        ...


class FileSchemaError(ValueError):
    """A file whose columns cannot be read: the message says why, in Snowflake's words where there
    are some."""


def too_many_columns(limit: int, found: str) -> FileSchemaError:
    """The refusal of a file past ``query.infer_schema_max_columns``; ``found`` says what was counted."""
    return FileSchemaError(
        f"the file has more than {limit} columns ({found}), the most INFER_SCHEMA reads of a file "
        "(query.infer_schema_max_columns): infer the schema of narrower files, or raise "
        "query.infer_schema_max_columns"
    )


@dataclass(frozen=True)
class Limits:
    """How much of a file INFER_SCHEMA reads."""

    sample_bytes: int
    """CSV and JSON: decompressed bytes read from the start."""
    max_records: int | None
    """CSV and JSON: records read (MAX_RECORDS_PER_FILE); None for all in the sample."""
    tail_bytes: int
    """Parquet and ORC: bytes read from the end, where the footer is; the most an ORC footer may
    inflate to (``query.infer_schema_footer_bytes``)."""
    max_columns: int | None = None
    """Columns one file may have (``query.infer_schema_max_columns``); None for any number."""


class Source(Protocol):
    """One staged file."""

    path: str
    """As FILENAMES shows it."""
    size: int
    """Its size (decrypted, for an internal stage's file)."""

    def stream(self) -> Readable:
        """Its bytes from the start (the caller reads only as far as it needs)."""
        ...

    def tail(self, n: int) -> bytes:
        """Its last ``min(n, size)`` bytes."""
        ...


def file_columns(source: Source, fmt: FileFormat, limits: Limits) -> ColumnsOf:
    """The columns of one file, read as ``fmt`` says, within ``limits``."""
    kind = fmt.type.upper()
    if kind in ("PARQUET", "ORC"):
        return ColumnsOf(source.path, _columnar(source, kind, fmt, limits))
    most = limits.max_columns
    if kind == "AVRO":
        head, _ = prefix(source.stream(), fmt.compression, AVRO_HEADER_MAX)
        columns = _avro(head)  # a header of at most AVRO_HEADER_MAX bytes: tens of thousands of fields
        if most is not None and len(columns) > most:
            raise too_many_columns(most, f"its schema has {len(columns)} fields")
        return ColumnsOf(source.path, columns)
    sample, cut = prefix(source.stream(), fmt.compression, limits.sample_bytes)
    if kind == "JSON":
        documents = json_records(sample, fmt, cut=cut, limit=limits.max_records, max_columns=most)
        return ColumnsOf(source.path, values_columns([], _keys_within(documents, most), json_type, VARIANT))
    text = decode(sample, fmt, cut)
    names, records = csv_records(text, fmt, cut=cut, limit=limits.max_records, max_columns=most)
    return ColumnsOf(source.path, values_columns(names, records, text_type, TEXT))


def _keys_within(documents: Iterator[dict[str, Any]], most: int | None) -> Iterator[dict[str, Any]]:
    """The documents, refused once their keys between them pass ``most``."""
    seen: set[str] = set()
    for doc in documents:
        if most is not None:
            seen.update(doc)
            if len(seen) > most:
                raise too_many_columns(most, f"its documents hold {len(seen)} keys or more")
        yield doc


# ---------------------------------------------------------------------------------------------
# The first bytes of a file, decompressed


def _decompressor(method: str) -> Any:
    if method == "GZIP":
        return zlib.decompressobj(wbits=31)
    if method == "DEFLATE":
        return zlib.decompressobj(wbits=15)
    if method == "RAW_DEFLATE":
        return zlib.decompressobj(wbits=-15)
    if method == "BZ2":
        return bz2.BZ2Decompressor()
    return None


def prefix(stream: Readable, compression: str, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of the stream's content, COMPRESSION undone (AUTO: gzip, bzip2 and
    zstd by their magic bytes), and whether the content goes on past them."""
    head = stream.read(4)
    method = (compression or "AUTO").upper()
    if method == "AUTO":
        method = next((m for magic, m in _MAGIC.items() if head.startswith(magic)), "NONE")
    if method == "NONE":
        data = head + _read_up_to(stream, limit + 1 - len(head))
        return data[:limit], len(data) > limit
    if method in ("ZSTD", "BROTLI"):
        joined = _Joined(head, stream)
        try:
            with pa.CompressedInputStream(pa.PythonFile(joined, mode="r"), method.lower()) as inflated:
                data = inflated.read(limit + 1)
        except (OSError, pa.ArrowException) as exc:
            raise _decompression_error(method, exc) from exc
        return data[:limit], len(data) > limit
    decompressor = _decompressor(method)
    if decompressor is None:
        raise FileSchemaError(f"Unsupported COMPRESSION '{compression}'")
    return _inflate(decompressor, method, head, stream, limit)


def _read_up_to(stream: Readable, n: int) -> bytes:
    parts, have = [], 0
    while have < n:
        block = stream.read(min(_BLOCK, n - have))
        if not block:
            break
        parts.append(block)
        have += len(block)
    return b"".join(parts)


def _inflate(decompressor: Any, method: str, head: bytes, stream: Readable, limit: int) -> tuple[bytes, bool]:
    out = bytearray()
    pending = head
    try:
        while len(out) <= limit:
            if not pending:
                pending = stream.read(_BLOCK)
                if not pending:
                    break
            if isinstance(decompressor, bz2.BZ2Decompressor):
                out += decompressor.decompress(pending, max_length=limit + 1 - len(out))
                pending = b""
                if decompressor.eof:  # concatenated streams, as bzip2 -d reads them
                    pending = decompressor.unused_data
                    decompressor = bz2.BZ2Decompressor()
                continue
            out += decompressor.decompress(pending, limit + 1 - len(out))
            pending = decompressor.unconsumed_tail
            if decompressor.eof:
                pending = decompressor.unused_data
                if method != "GZIP" or not pending:
                    break
                decompressor = zlib.decompressobj(wbits=31)  # the next gzip member
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        raise _decompression_error(method, exc) from exc
    return bytes(out[:limit]), len(out) > limit


def _decompression_error(method: str, exc: BaseException) -> FileSchemaError:
    return FileSchemaError(
        f"Invalid data encountered during decompression, compression type used: '{method}', cause: "
        f"'{str(exc) or type(exc).__name__}'"
    )


class _Joined(io.RawIOBase):
    """Bytes already read, then the rest of a stream."""

    def __init__(self, head: bytes, rest: Readable) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        """A read stream."""
        return True

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` from the head, then the rest."""
        view = memoryview(buffer).cast("B")
        if self._head:
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(view))
        view[: len(data)] = data
        return len(data)


def decode(sample: bytes, fmt: FileFormat, cut: bool) -> str:
    """A CSV sample as text: from ENCODING (UTF16/UTF32's byte order from a byte-order mark,
    big-endian without one), bytes that do not decode as U+FFFD, the byte-order mark dropped
    (SKIP_BYTE_ORDER_MARK). A sample cut inside a character loses that character."""
    codec = CSV_ENCODINGS.get((fmt.encoding or "UTF8").upper(), "utf-8")
    if codec == "utf-16":
        codec = "utf-16-le" if sample.startswith(b"\xff\xfe") else "utf-16-be"
    elif codec == "utf-32":
        codec = "utf-32-le" if sample.startswith(b"\xff\xfe\x00\x00") else "utf-32-be"
    text = sample.decode(codec, "replace")
    if cut and text.endswith("\ufffd"):
        text = text[:-1]
    if fmt.skip_byte_order_mark and text.startswith("\ufeff"):
        text = text[1:]
    return text


# ---------------------------------------------------------------------------------------------
# CSV


class CsvSample:
    """Records of CSV text by the file's options: FIELD_DELIMITER and RECORD_DELIMITER (any
    strings; the default newline is logical, CR LF, LF or CR), FIELD_OPTIONALLY_ENCLOSED_BY with a
    doubled quote or ESCAPE inside, ESCAPE_UNENCLOSED_FIELD before a delimiter or itself, TRIM_SPACE,
    NULL_IF (on the field as written) and EMPTY_FIELD_AS_NULL. Each search runs from where the last
    one ended to the next special token, so the whole text is scanned once."""

    def __init__(self, fmt: FileFormat, *, names: bool = False, max_columns: int | None = None) -> None:
        self.max_columns = max_columns
        """A record of more fields fails (FileSchemaError) before they are made."""
        self.field = fmt.field_delimiter
        self.records_end = ["\r\n", "\n", "\r"] if fmt.record_delimiter == "\n" else [fmt.record_delimiter]
        self.records_end = [r for r in self.records_end if r]
        self.quote = fmt.field_optionally_enclosed_by
        self.escape = fmt.escape if fmt.escape != self.quote else None
        self.unenclosed = fmt.escape_unenclosed_field
        self.trim = fmt.trim_space
        nulls = set(fmt.null_if)
        if fmt.empty_field_as_null:
            nulls.add("")
        self.nulls = frozenset() if names else frozenset(nulls)
        plain = [t for t in (self.field, *self.records_end, self.unenclosed) if t]
        self._escapable = tuple(plain)
        """What ESCAPE_UNENCLOSED_FIELD makes data: the delimiters and itself."""
        self._plain = _literals(plain)
        self._quoted = _literals([t for t in (self.quote, self.escape) if t])
        self._record_end = _literals(self.records_end)
        self._specials = (self.quote, self.unenclosed)
        """A record holding neither is split on the field delimiter (``records``)."""

    def records(self, text: str, start: int = 0) -> Iterator[tuple[list[str | None], int]]:
        """Each record's values, and the offset just past it (its record delimiter included)."""
        pos, n = start, len(text)
        while pos < n:
            # Most records hold no quote and no escape: split them on the delimiter at once. The
            # others are read field by field from the same start, so each character is searched
            # at most twice.
            m = self._record_end.search(text, pos)
            line = text[pos : m.start() if m else n]
            if not any(c and c in line for c in self._specials):
                if self.max_columns is not None and self.field and line.count(self.field) >= self.max_columns:
                    raise too_many_columns(
                        self.max_columns, f"a record of {line.count(self.field) + 1} fields"
                    )
                parts = line.split(self.field) if self.field else [line]
                if self.trim:
                    parts = [p.strip(" \t") for p in parts]
                yield [None if p in self.nulls else p for p in parts], m.end() if m else n
                pos = m.end() if m else n
                continue
            values: list[str | None] = []
            while True:
                value, pos, ended = self._field(text, pos)
                values.append(value)
                if ended:
                    break
                if self.max_columns is not None and len(values) >= self.max_columns:
                    raise too_many_columns(self.max_columns, "a record of more fields")
            yield values, pos

    def _field(self, text: str, pos: int) -> tuple[str | None, int, bool]:
        """One field from ``pos``: its value, where the next field or record starts, and whether
        the record ended with it."""
        at = pos
        if self.trim:
            while at < len(text) and text[at] in " \t":
                at += 1
        if self.quote and text.startswith(self.quote, at):
            return self._enclosed(text, at + len(self.quote))
        return self._unenclosed(text, pos)

    def _after(self, text: str, at: int) -> tuple[int, bool] | None:
        """Where a field that ends at ``at`` is followed: the offset after its delimiter and whether
        that ended the record; None when no delimiter is at ``at``."""
        if at >= len(text):
            return len(text), True
        if self.field and text.startswith(self.field, at):
            return at + len(self.field), False
        for end in self.records_end:
            if text.startswith(end, at):
                return at + len(end), True
        return None

    def _unenclosed(self, text: str, pos: int) -> tuple[str | None, int, bool]:
        pieces: list[str] = []
        at = pos
        while True:
            m = self._plain.search(text, at)
            stop = m.start() if m else len(text)
            if m is not None and self.unenclosed and m.group() == self.unenclosed:
                pieces.append(text[at:stop])
                nxt = stop + len(self.unenclosed)
                special = _starting(text, nxt, self._escapable)
                if special is None:
                    pieces.append(self.unenclosed)  # before anything else it stays
                    at = nxt
                else:
                    pieces.append(special)
                    at = nxt + len(special)
                continue
            pieces.append(text[at:stop])
            written = text[pos:stop]
            after = self._after(text, stop)
            assert after is not None
            value = "".join(pieces)
            if self.trim:
                written, value = written.strip(" \t"), value.strip(" \t")
            return (None if written in self.nulls else value), after[0], after[1]

    def _enclosed(self, text: str, at: int) -> tuple[str | None, int, bool]:
        assert self.quote is not None
        pieces: list[str] = []
        while True:
            m = self._quoted.search(text, at)
            if m is None:  # no closing quote: the rest is the value
                pieces.append(text[at:])
                return "".join(pieces), len(text), True
            pieces.append(text[at : m.start()])
            token, nxt = m.group(), m.end()
            if token == self.quote and text.startswith(self.quote, nxt):
                pieces.append(self.quote)  # a doubled quote
                at = nxt + len(self.quote)
                continue
            if token == self.escape:
                escaped = _starting(text, nxt, (self.quote, self.escape))
                pieces.append(escaped if escaped is not None else token)
                at = nxt + (len(escaped) if escaped is not None else 0)
                continue
            break  # the closing quote
        # Text after the closing quote, up to the delimiter, joins the value.
        m = self._plain.search(text, nxt)
        stop = m.start() if m else len(text)
        trail = text[nxt:stop]
        pieces.append(trail.rstrip(" \t") if self.trim else trail)
        after = self._after(text, stop) or (len(text), True)
        return "".join(pieces), after[0], after[1]


def _starting(text: str, at: int, tokens: tuple[str | None, ...]) -> str | None:
    """The first of ``tokens`` that ``text`` holds at ``at``, if any."""
    for token in tokens:
        if token and text.startswith(token, at):
            return token
    return None


def _literals(tokens: list[str]) -> re.Pattern[str]:
    """A pattern of alternative literal strings (longest first, so CR LF wins over CR): a search
    tries each at each position once, linear in the text."""
    if not tokens:
        return re.compile(r"(?!)")
    return re.compile("|".join(re.escape(t) for t in sorted(set(tokens), key=len, reverse=True)))


def _skip_lines(text: str, count: int) -> int:
    """Offset after the first ``count`` newline-ended lines (SKIP_HEADER)."""
    at = 0
    for _ in range(count):
        nl = text.find("\n", at)
        if nl < 0:
            return len(text)
        at = nl + 1
    return at


def csv_records(
    text: str, fmt: FileFormat, *, cut: bool, limit: int | None, max_columns: int | None = None
) -> tuple[list[str], Iterator[list[str | None]]]:
    """The header's names (PARSE_HEADER; else none) and the records of a CSV sample, at most
    ``limit`` of them, without the one the sample cut (``cut``) and without blank lines; a record of
    more than ``max_columns`` fields fails."""
    if fmt.parse_header and fmt.skip_header:
        raise FileSchemaError(SKIP_HEADER_WITH_PARSE_HEADER)
    start = _skip_lines(text, max(0, fmt.skip_header))
    names: list[str] = []
    if fmt.parse_header:
        found = next(CsvSample(fmt, names=True, max_columns=max_columns).records(text, start), None)
        if found is not None:
            names = [v or "" for v in found[0]]
            start = found[1]

    def rows() -> Iterator[list[str | None]]:
        taken = 0
        for values, end in CsvSample(fmt, max_columns=max_columns).records(text, start):
            if cut and end >= len(text):
                return  # the sample ends inside this record, or just after it: it may go on
            if len(values) == 1 and not values[0]:
                continue
            if limit is not None and taken >= limit:
                return
            taken += 1
            yield values

    return names, rows()


# ---------------------------------------------------------------------------------------------
# JSON


_DECODER = json.JSONDecoder(parse_float=JsonNumber, parse_int=JsonNumber, parse_constant=JsonNumber)
_BLANKS = " \t\r\n"

VALUE_COST = 128
"""Most bytes json's decoder makes of one value (a number is a JsonNumber and a list's slot: an
array of 4M zeros, 8 MiB of text, took 516 MiB)."""
DOCUMENT_COST = 64 << 20
"""A document, or a member's array or object, whose values may take more is not decoded whole."""
_STRUCTURE = re.compile(r'[\[\]{}"]')
_STRING_END = re.compile(r'["\\]')


def json_records(
    sample: bytes, fmt: FileFormat, *, cut: bool, limit: int | None, max_columns: int | None = None
) -> Iterator[dict[str, Any]]:
    """The object documents of a JSON sample (NDJSON, concatenated documents, or with
    STRIP_OUTER_ARRAY the elements of its outer array), at most ``limit``; documents that are not
    objects name no columns. A document the sample cuts is left out; invalid JSON before the cut
    fails (Snowflake's ``Error parsing JSON``); a document of more than ``max_columns`` keys fails.

    What decoding costs is counted first (``VALUE_COST`` a comma, colon or opening bracket): a
    sample within ``DOCUMENT_COST`` is decoded a document at a time; otherwise each object's members
    are, and a member's array or object past it (or nested past Python's recursion limit) stands as
    an empty one of its kind, which types the column the same, its brackets and strings checked."""
    text = sample.decode("utf-8", "replace")
    if fmt.skip_byte_order_mark and text.startswith("\ufeff"):
        text = text[1:]
    whole = _cost(text, 0, len(text)) <= DOCUMENT_COST
    at, n, taken = 0, len(text), 0
    inside = False
    while limit is None or taken < limit:
        at = _skip(text, at)
        if fmt.strip_outer_array:
            if not inside and at < n and text[at] == "[":
                inside, at = True, _skip(text, at + 1)
            if inside and at < n and text[at] in ",]":
                inside = text[at] == ","
                at += 1
                continue
        if at >= n:
            return
        try:
            doc, end = _document(text, at, whole, max_columns)
        except json.JSONDecodeError as exc:
            if cut:
                return  # most likely the document the sample cuts
            raise FileSchemaError(f"Error parsing JSON: {exc.msg}, pos {exc.pos}") from None
        at = end
        if isinstance(doc, dict):
            if max_columns is not None and len(doc) > max_columns:
                raise too_many_columns(max_columns, f"a JSON document of {len(doc)} keys")
            taken += 1
            yield doc


def _cost(text: str, start: int, end: int) -> int:
    """Most bytes decoding ``text[start:end]`` takes: ``VALUE_COST`` a value (each but the first
    follows a comma, a colon or an opening bracket; those in strings count too)."""
    return (1 + sum(text.count(c, start, end) for c in ",:[{")) * VALUE_COST


def _document(text: str, at: int, whole: bool, max_columns: int | None) -> tuple[Any, int]:
    """The document at ``at`` and the offset after it."""
    if whole:
        try:
            return _DECODER.raw_decode(text, at)
        except RecursionError:
            pass  # nested past the recursion limit: read by its members below
    if text[at] == "{":
        return _object(text, at, max_columns)
    if text[at] == "[":
        return [], _container_end(text, at)  # names no columns: not decoded
    return _DECODER.raw_decode(text, at)


def _object(text: str, at: int, max_columns: int | None) -> tuple[dict[str, Any], int]:
    """An object document read member by member, as json's decoder reads one (its messages too)."""
    doc: dict[str, Any] = {}
    pos = _skip(text, at + 1)
    if text.startswith("}", pos):
        return doc, pos + 1
    while True:
        if not text.startswith('"', pos):
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        if not text.startswith(":", pos):
            raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
        doc[key], pos = _member(text, _skip(text, pos + 1))
        if max_columns is not None and len(doc) > max_columns:
            raise too_many_columns(max_columns, "a JSON document of more keys")
        pos = _skip(text, pos)
        if text.startswith("}", pos):
            return doc, pos + 1
        if not text.startswith(",", pos):
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
        pos = _skip(text, pos + 1)


def _member(text: str, pos: int) -> tuple[Any, int]:
    """A member's value and the offset after it: an array or object whose values would take more
    than ``DOCUMENT_COST``, or nest past the recursion limit, is an empty one of its kind."""
    if not text.startswith(("[", "{"), pos):
        return _DECODER.raw_decode(text, pos)
    end = _container_end(text, pos)
    if _cost(text, pos, end) <= DOCUMENT_COST:
        try:
            return _DECODER.raw_decode(text, pos)
        except RecursionError:
            pass
    return ([] if text[pos] == "[" else {}), end


def _container_end(text: str, at: int) -> int:
    """The offset after the array or object at ``at``, found by its brackets and strings alone: one
    search (of a single character class, so linear) per bracket, quote and escape."""
    depth, pos = 0, at
    while True:
        m = _STRUCTURE.search(text, pos)
        if m is None:
            raise json.JSONDecodeError("Unterminated array or object starting at", text, at)
        pos = m.end()
        if m.group() == '"':
            while True:
                e = _STRING_END.search(text, pos)
                if e is None:
                    raise json.JSONDecodeError("Unterminated string starting at", text, m.start())
                pos = e.end()
                if e.group() == '"':
                    break
                pos += 1  # the escaped character
        elif m.group() in "[{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return pos


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _BLANKS:
        at += 1
    return at


# ---------------------------------------------------------------------------------------------
# Avro, Parquet, ORC


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at ``at``, and the offset after it."""
    shift = result = 0
    while True:
        if at >= len(data) or shift > 63:
            raise FileSchemaError("Error parsing the Avro file: its header is cut short or invalid")
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at


def avro_schema(head: bytes) -> Any:
    """The writer's schema from an Avro object container file's header (``head``, its first bytes):
    magic, then the metadata map whose ``avro.schema`` is the schema's JSON."""
    if not head.startswith(b"Obj\x01"):
        raise FileSchemaError("Error parsing the Avro file: not an Avro object container file")
    at = 4
    while True:
        count, at = _varint(head, at)
        if count == 0:
            break
        if count < 0:
            count = -count
            _, at = _varint(head, at)  # the block's size in bytes
        for _ in range(count):
            klen, at = _varint(head, at)
            key = head[at : at + klen]
            at += klen
            vlen, at = _varint(head, at)
            if klen < 0 or vlen < 0 or at + vlen > len(head):
                raise FileSchemaError("Error parsing the Avro file: its header is cut short or invalid")
            if key == b"avro.schema":
                try:
                    return json.loads(head[at : at + vlen])
                except ValueError as exc:
                    raise FileSchemaError(
                        f"Error parsing the Avro file: its schema is not JSON: {exc}"
                    ) from None
                except RecursionError:
                    raise FileSchemaError(
                        "Error parsing the Avro file: its schema nests too deep for Python's JSON "
                        "decoder; Floe reads no such schema"
                    ) from None
            at += vlen
    raise FileSchemaError("Error parsing the Avro file: its header has no avro.schema")


def _avro(head: bytes) -> list[FileColumn]:
    try:
        return [FileColumn(n, t, nullable) for n, t, nullable in avro_columns(avro_schema(head))]
    except AvroSchemaError as exc:
        raise FileSchemaError(f"Error parsing the Avro file: {exc}") from None


def _columnar(source: Source, kind: str, fmt: FileFormat, limits: Limits) -> list[FileColumn]:
    """The columns in a Parquet or ORC footer: the footer alone, checked within the bounds, is
    handed to pyarrow (``schema_file``), whose elements (columns and nested fields) count against
    ``max_columns`` with the root's."""
    tail = source.tail(limits.tail_bytes)
    elements = (limits.max_columns if limits.max_columns is not None else 1 << 40) + 1
    name = "Parquet" if kind == "PARQUET" else "ORC"
    try:
        if kind == "PARQUET":
            only = parquet_schema_file(tail, source.size, limits.tail_bytes, elements)
            schema = pq.read_schema(pa.BufferReader(only))
        else:
            only = orc_schema_file(tail, source.size, limits.tail_bytes, elements)
            schema = pa_orc.ORCFile(pa.BufferReader(only)).schema
        text = kind == "PARQUET" and fmt.binary_as_text
        return [FileColumn(f.name, arrow_type(f.type, binary_as_text=text), f.nullable) for f in schema]
    except (ParquetFooterTooLarge, OrcTailTooLarge) as exc:
        if exc.what == "footer":
            raise FileSchemaError(
                f"the {name} footer of '{source.path}' ({exc.size} bytes"
                f"{' inflated, or more' if kind == 'ORC' else ''}) is larger than the {exc.limit} bytes "
                "INFER_SCHEMA reads of a file's end (query.infer_schema_footer_bytes): raise "
                "query.infer_schema_footer_bytes, or infer the schema of a file with fewer columns, "
                "row groups or stripes"
            ) from None
        assert limits.max_columns is not None
        raise too_many_columns(limits.max_columns, f"its schema has {exc.size} {exc.what} or more") from None
    except (ParquetFooterError, OrcStructureError) as exc:
        raise FileSchemaError(f"Error parsing the {name} file: {str(exc)[:300]}") from None
    except UnicodeDecodeError:
        raise FileSchemaError(f"Error parsing the {name} file: a column name is not UTF-8") from None
    except (OSError, pa.ArrowException) as exc:
        raise FileSchemaError(f"Error parsing the {name} file: {str(exc).splitlines()[0][:300]}") from None
