"""Record-aligned chunks of a large staged file, read as a stream.

A staged CSV file above ``pipeline.stream_file_bytes`` is not read whole: its bytes flow from S3
through a streaming decompressor, are converted to UTF-8 (ENCODING), and are cut into parts of
about ``pipeline.chunk_bytes`` that end on a record boundary (after a RECORD_DELIMITER outside
quotes and not escaped), so each part parses on its own and memory stays bounded by the part size,
not the file size.

Conversion to UTF-8 (``to_utf8`` for bytes in memory, ``transcoded`` for a stream) marks what does
not decode: each byte of an invalid sequence becomes two noncharacters, U+FDD0 + its high nibble
then U+FDE0 + its low one (``INVALID_MARK``), so the CSV reader can make its record an error that
quotes the bytes, while every delimiter search stays on valid UTF-8. With
REPLACE_INVALID_CHARACTERS each invalid sequence becomes U+FFFD instead.

The decompressors here also serve whole-file reads (``pipeline.formats``): every one of them
returns at most what it is asked for per read, so a decompression bomb is stopped at a bound
(``pipeline.max_file_bytes`` for a file, ``pipeline.max_part_bytes`` for a piece held in memory)
after inflating only that much.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import re
import zlib
from collections.abc import Iterator
from typing import Protocol

import numpy as np
import pyarrow as pa

from floe.catalog.ddl import CSV_ENCODINGS
from floe.catalog.models import FileFormat
from floe.errors import FileLoadError, TransientError

_MAGIC = {b"\x1f\x8b": "GZIP", b"BZh": "BZ2", b"\x28\xb5\x2f\xfd": "ZSTD"}

STREAMABLE_COMPRESSION = frozenset(
    {"AUTO", "NONE", "GZIP", "BZ2", "ZSTD", "BROTLI", "DEFLATE", "RAW_DEFLATE"}
)
"""COMPRESSION values the streaming reader undoes; files with other ones are read whole."""

_INPUT_BLOCK = 1 << 20
"""Compressed bytes fed to a zlib decompressor at a time."""

_GROWTH_LIMIT = 4
"""A part grows to this many chunk sizes looking for a boundary outside quotes and escapes, then
takes the last record delimiter (a stray quote in an unquoted field would otherwise keep every
newline 'inside').
The price: a quoted value with newlines longer than that (128 MiB by default) is cut in two."""


class Readable(Protocol):
    """Anything with a blocking ``read(n)``: a pyarrow stream, a boto3 body, a decompressor."""

    def read(self, n: int = ..., /) -> bytes:
        """Up to n bytes; b'' at the end."""
        ...


class _Prefixed:
    """A stream with bytes already read from its head put back in front."""

    closed = False  # what pyarrow's PythonFile checks before it reads

    def __init__(self, head: bytes, rest: Readable) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        """Always: this is a read stream."""
        return True

    def close(self) -> None:
        """The underlying stream is closed by whoever opened it."""

    def read(self, n: int = -1, /) -> bytes:
        if self._head:
            if n < 0:
                out, self._head = self._head + self._rest.read(), b""
                return out
            out, self._head = self._head[:n], self._head[n:]
            return out
        return self._rest.read(n)


class TransportError(TransientError, OSError):
    """Reading the staged object failed (not its content): transient, the batch is replayed.

    Also an OSError, so readers that let only OSError through (pyarrow's file wrappers) keep it."""


def size_text(n: int) -> str:
    """A byte count as people write it (256 MiB, 16 GiB)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


class FileTooLarge(FileLoadError):
    """A staged file decompresses (or, ``decoded``, its values decode) past
    ``pipeline.max_file_bytes``: it fails alone, terminally."""

    def __init__(self, path: str, limit: int, *, decoded: bool = False) -> None:
        verb = "decodes" if decoded else "decompresses"
        super().__init__(
            f"File '{path}' {verb} to more than {size_text(limit)} (pipeline.max_file_bytes); "
            "split it into smaller files, or raise pipeline.max_file_bytes if files this large are "
            "expected.",
            file=path,
        )
        self.limit = limit


class PartTooLarge(FileLoadError):
    """A piece of a staged file that must be held in memory whole decompresses past
    ``pipeline.max_part_bytes``: a record that never ends, or a file that is only read whole.
    ``decoded``: its values decode past it (a columnar file's dictionaries, NULLs, nesting)."""

    def __init__(self, path: str, limit: int, *, record: bool, kind: str = "", decoded: bool = False) -> None:
        if record:
            what = "in one record (pipeline.max_part_bytes); check that its records end with a newline "
            what += "(and that its quotes are closed), "
        else:
            read_whole = f"{kind} files are read whole" if kind else "it is read whole"
            what = f"(pipeline.max_part_bytes), and {read_whole}; split it into smaller files, "
        super().__init__(
            f"File '{path}' {'decodes' if decoded else 'decompresses'} to more than {size_text(limit)} {what}"
            "or raise pipeline.max_part_bytes if such files are expected.",
            file=path,
        )
        self.limit = limit
        self.record = record


class _Transport:
    """Marks the source's own read errors, so a decompressor's errors are not mistaken for them."""

    def __init__(self, inner: Readable) -> None:
        self._inner = inner

    def read(self, n: int = -1, /) -> bytes:
        try:
            return bytes(self._inner.read(n))
        except OSError as exc:
            raise TransportError(str(exc)) from exc


class _Decompressing:
    """Turns the decompressor's own errors into the file's FileLoadError (Snowflake's wording)."""

    def __init__(self, inner: Readable, method: str, path: str) -> None:
        self._inner = inner
        self._method = method
        self._path = path

    def read(self, n: int = -1, /) -> bytes:
        try:
            return bytes(self._inner.read(n))
        except TransportError:
            raise
        except (OSError, EOFError, ValueError, zlib.error, pa.ArrowException) as exc:
            detail = str(exc) or type(exc).__name__
            raise FileLoadError(
                f"Invalid data encountered during decompression for file: '{self._path}',"
                f"compression type used: '{self._method}', cause: '{detail}'",
                file=self._path,
            ) from exc


def compression_of(head: bytes, compression: str) -> str:
    """The compression a file's first bytes and its COMPRESSION option say it has (NONE for none)."""
    method = (compression or "AUTO").upper()
    if method == "AUTO":
        return next((m for magic, m in _MAGIC.items() if head.startswith(magic)), "NONE")
    return method


class _Inflating:
    """zlib's DEFLATE (``wbits`` 15) or raw DEFLATE (-15) as a stream, never more than asked per read."""

    def __init__(self, source: Readable, wbits: int) -> None:
        self._source = source
        self._inflater = zlib.decompressobj(wbits)

    def read(self, n: int = -1, /) -> bytes:
        if n < 0:
            n = 1 << 20
        inflater = self._inflater
        while not inflater.eof:
            data = inflater.unconsumed_tail or self._source.read(_INPUT_BLOCK)
            out = inflater.decompress(data, n)
            if out:
                return out
            if not data:
                raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        return b""


class _Bounded:
    """Counts the decompressed bytes of a file and stops it past ``pipeline.max_file_bytes``."""

    def __init__(self, inner: Readable, limit: int, path: str) -> None:
        self._inner = inner
        self._left = limit
        self._limit = limit
        self._path = path

    def read(self, n: int = -1, /) -> bytes:
        # One byte more than the bound allows tells "exactly at the bound" from "past it".
        want = self._left + 1 if n < 0 else min(n, self._left + 1)
        block = self._inner.read(want)
        self._left -= len(block)
        if self._left < 0:
            raise FileTooLarge(self._path, self._limit)
        return block


def decompressed(raw: Readable, compression: str, path: str, *, max_bytes: int | None = None) -> Readable:
    """The stream's content with COMPRESSION undone (AUTO recognises gzip, bzip2 and zstd).

    Every read returns at most what it asks for, whatever the compression ratio. With
    ``max_bytes``, a read that would pass that many decompressed bytes raises FileTooLarge.
    """
    raw = _Transport(raw)
    head = raw.read(4)
    source = _Prefixed(head, raw)
    method = compression_of(head, compression)
    inner: Readable
    if method == "NONE" or not head:
        inner = source
    elif method == "GZIP":  # Python's reader handles concatenated members, as gzip -d does
        inner = _Decompressing(gzip.GzipFile(fileobj=source, mode="rb"), method, path)  # type: ignore[call-overload]
    elif method == "BZ2":
        inner = _Decompressing(bz2.BZ2File(source, mode="rb"), method, path)  # type: ignore[call-overload]
    elif method in ("ZSTD", "BROTLI"):
        stream = pa.CompressedInputStream(pa.PythonFile(source, mode="r"), method.lower())
        inner = _Decompressing(stream, method, path)
    elif method in ("DEFLATE", "RAW_DEFLATE"):
        inner = _Decompressing(_Inflating(source, 15 if method == "DEFLATE" else -15), method, path)
    else:
        raise FileLoadError(f"Unsupported COMPRESSION '{compression}'", file=path)
    return inner if max_bytes is None else _Bounded(inner, max_bytes, path)


def fill(stream: Readable, carry: bytes, target: int) -> tuple[bytes, bool]:
    """``carry`` followed by what ``stream`` gives until ``target`` bytes are held, and whether the
    stream ended first. Reads are joined once, so a part costs one copy whatever the block sizes."""
    blocks = [carry]
    have = len(carry)
    while have < target:
        block = stream.read(target - have)
        if not block:
            return b"".join(blocks), True
        blocks.append(block)
        have += len(block)
    return b"".join(blocks), False


def read_bounded(stream: Readable, limit: int, block: int = 8 << 20) -> bytes | None:
    """All of ``stream``, or None as soon as it passes ``limit`` bytes (having read at most one
    block more). Reads in blocks: a buffered reader asked for ``limit`` bytes would allocate them."""
    blocks: list[bytes] = []
    have = 0
    while True:
        data = stream.read(min(block, limit + 1 - have))
        if not data:
            return b"".join(blocks)
        have += len(data)
        if have > limit:
            return None
        blocks.append(data)


# ---------------------------------------------------------------------------------------------
# ENCODING: any of Snowflake's character sets to UTF-8, invalid sequences marked or replaced

MARK_HIGH = 0xFDD0
"""First of the two noncharacters that stand for one byte that did not decode: MARK_HIGH + the
byte's high nibble, then MARK_LOW + its low nibble."""
MARK_LOW = 0xFDE0
INVALID_MARK = re.compile("[\ufdd0-\ufddf][\ufde0-\ufdef]")
"""One marked byte in converted text (noncharacters are for internal use: a file that holds this
very pair is read as if it held an invalid byte)."""
_MARK_ERRORS = "floe-mark-invalid"


def _mark_invalid(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    bad = exc.object[exc.start : exc.end]
    return "".join(chr(MARK_HIGH + (b >> 4)) + chr(MARK_LOW + (b & 15)) for b in bad), exc.end


codecs.register_error(_MARK_ERRORS, _mark_invalid)


def _errors(fmt: FileFormat) -> str:
    return "replace" if fmt.replace_invalid_characters else _MARK_ERRORS


def codec_of(fmt: FileFormat, head: bytes) -> str:
    """The Python codec for a file's ENCODING; ``head``, its first bytes, picks the byte order of
    UTF16 and UTF32 from a byte-order mark (big-endian without one, as Unicode says). The mark
    itself decodes to U+FEFF, which SKIP_BYTE_ORDER_MARK then drops or keeps."""
    name = (fmt.encoding or "UTF8").upper()
    codec = CSV_ENCODINGS.get(name)
    if codec is None:
        raise FileLoadError(f"ENCODING = '{fmt.encoding}' is not supported")
    if codec == "utf-16":
        return "utf-16-le" if head.startswith(b"\xff\xfe") else "utf-16-be"
    if codec == "utf-32":
        return "utf-32-le" if head.startswith(b"\xff\xfe\x00\x00") else "utf-32-be"
    return codec


def to_utf8(body: bytes, fmt: FileFormat) -> bytes:
    """``body``, in ``fmt``'s ENCODING, as valid UTF-8 (the same object when it already is)."""
    codec = codec_of(fmt, body[:4])
    if codec == "utf-8":
        try:
            body.decode("utf-8")
            return body
        except UnicodeDecodeError:
            pass
    return body.decode(codec, _errors(fmt)).encode("utf-8")


class _Transcoding:
    """A stream in some ENCODING read as UTF-8, never more than asked per read."""

    def __init__(self, inner: Readable, fmt: FileFormat) -> None:
        self._inner = inner
        self._fmt = fmt
        self._decoder: codecs.IncrementalDecoder | None = None
        self._out = b""
        self._done = False

    def read(self, n: int = -1, /) -> bytes:
        if n < 0:
            n = 1 << 20
        while not self._out and not self._done:
            block = self._inner.read(max(n, 4))
            if self._decoder is None:
                while 0 < len(block) < 4 and (more := self._inner.read(4 - len(block))):
                    block += more  # a UTF-16/32 byte-order mark needs the first four bytes
                codec = codec_of(self._fmt, block)
                self._decoder = codecs.getincrementaldecoder(codec)(_errors(self._fmt))
            self._done = not block
            self._out = self._decoder.decode(block, final=self._done).encode("utf-8")
        out, self._out = self._out[:n], self._out[n:]
        return out


def transcoded(stream: Readable, fmt: FileFormat) -> Readable:
    """``stream`` converted from ``fmt``'s ENCODING to UTF-8 (itself when it is UTF-8: the CSV reader
    checks each part)."""
    if (fmt.encoding or "UTF8").upper() == "UTF8":
        return stream
    return _Transcoding(stream, fmt)


# ---------------------------------------------------------------------------------------------
# Text: no dictionary, but every record costs its numbers and objects whatever its bytes

CSV_ROW_BYTES = 48
"""What a CSV row costs once parsed besides its text: its row and line numbers, and the parser's
own arrays of positions (measured: 57 bytes a row of one two-byte field)."""
CSV_FIELD_BYTES = 12
"""What a CSV field costs besides its text: its offset and validity in the raw table, and its
positions while parsed (measured: about 10.5 bytes a field of 51-field rows)."""
JSON_RECORD_BYTES = 128
"""What a JSON document (or outer array element) costs besides its text: its Python string, row
and line numbers (measured: 119 bytes a two-byte document)."""
CHECK_EVERY = 4096
"""Records read between two checks of a JSON text's cost."""


def csv_size(text: bytes | memoryview, record_token: bytes, field_token: bytes) -> int:
    """Most bytes CSV text takes once parsed: each record delimiter may end a row, each field
    delimiter start a field (quoted ones count too: an over-estimate)."""
    data = bytes(text) if isinstance(text, memoryview) else text
    rows = (data.count(record_token) if record_token else 0) + 1
    fields = rows + (data.count(field_token) if field_token else 0)
    return len(data) + rows * CSV_ROW_BYTES + fields * CSV_FIELD_BYTES


def json_size(text: bytes, records: int | None = None) -> int:
    """Bytes JSON text takes once read into documents: ``records`` of them, or as many as it has
    lines (a document a line, as NDJSON has; the reader counts the documents it finds as well)."""
    count = text.count(b"\n") + 1 if records is None else records
    return len(text) + count * JSON_RECORD_BYTES


# ---------------------------------------------------------------------------------------------
# Record boundaries


def _token_positions(buf: bytes, data: np.ndarray, token: bytes) -> np.ndarray:
    """Start offsets of ``token`` in ``buf``, left to right without overlap."""
    if len(token) == 1:
        return np.flatnonzero(data == token[0])
    found: list[int] = []
    at = buf.find(token)
    while at >= 0:
        found.append(at)
        at = buf.find(token, at + len(token))
    return np.array(found, dtype=np.int64)


def _escaped(positions: np.ndarray, escapes: np.ndarray, width: int) -> np.ndarray:
    """Which ``positions`` follow an odd run of escape tokens (``escapes``: their offsets, sorted;
    ``width``: their length), that is, are escaped."""
    if not len(escapes) or not len(positions):
        return np.zeros(len(positions), dtype=bool)
    new_run = np.ones(len(escapes), dtype=bool)
    new_run[1:] = escapes[1:] != escapes[:-1] + width
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(len(escapes)), 0))
    before = positions - width
    idx = np.minimum(np.searchsorted(escapes, before), len(escapes) - 1)
    adjacent = escapes[idx] == before
    escaped: np.ndarray = adjacent & ((idx - run_start[idx]) % 2 == 0)
    return escaped


def record_token(fmt: FileFormat) -> bytes:
    """The bytes that end a record: the RECORD_DELIMITER (LF for the logical newline, which also
    ends CR LF), empty for NONE."""
    delimiter = fmt.record_delimiter
    return b"\n" if delimiter == "\n" else delimiter.encode("utf-8")


def record_end(buf: bytes, fmt: FileFormat) -> int:
    """Offset just past the last record delimiter of ``buf`` that ends a record, or -1 if none does.

    ``buf`` starts on a record boundary. A delimiter ends a record unless ESCAPE_UNENCLOSED_FIELD
    escapes it (an odd run of escapes right before it) or it is inside quotes (after an odd number
    of quote characters that ESCAPE does not escape; a doubled quote counts twice, so it keeps the
    parity). RECORD_DELIMITER = NONE has no boundary: the file is one record.
    """
    ends = _record_ends(buf, fmt)
    return int(ends[-1]) if len(ends) else -1


def first_record_end(buf: bytes, fmt: FileFormat) -> int:
    """Offset just past the first record of ``buf`` (as ``record_end`` finds record ends), or -1
    when ``buf`` holds no record delimiter that ends a record."""
    ends = _record_ends(buf, fmt)
    return int(ends[0]) if len(ends) else -1


def _record_ends(buf: bytes, fmt: FileFormat) -> np.ndarray:
    """Offsets just past each record delimiter of ``buf`` that ends a record (``record_end``)."""
    none = np.zeros(0, dtype=np.int64)
    token = record_token(fmt)
    if not token:
        return none
    data = np.frombuffer(buf, dtype=np.uint8)
    starts = _token_positions(buf, data, token)
    if not len(starts):
        return none
    unenclosed_escape = fmt.escape_unenclosed_field
    if unenclosed_escape:
        escape = unenclosed_escape.encode("utf-8")
        if escape in buf:
            starts = starts[~_escaped(starts, _token_positions(buf, data, escape), len(escape))]
    quote = fmt.field_optionally_enclosed_by
    if quote is not None and len(starts):
        q = quote.encode("utf-8")
        quotes = _token_positions(buf, data, q)
        escape_char = fmt.escape
        if escape_char and escape_char != quote and escape_char.encode("utf-8") in buf:
            e = escape_char.encode("utf-8")
            quotes = quotes[~_escaped(quotes, _token_positions(buf, data, e), len(e))]
        if len(quotes):
            starts = starts[np.searchsorted(quotes, starts) % 2 == 0]
    ends: np.ndarray = starts + len(token)
    return ends


_MIN_TARGET = 64 * 1024
"""Fewest bytes a part of dense rows reads on."""


def _csv_cost(buf: bytes | memoryview, fmt: FileFormat) -> int:
    field = fmt.field_delimiter.encode("utf-8") if fmt.field_delimiter else b""
    return csv_size(buf, record_token(fmt), field)


def _within_cost(buf: bytes, cut: int, chunk_bytes: int, budget: int, fmt: FileFormat) -> int:
    """``cut``, or, when the rows before it cost more than ``budget`` once parsed
    (``csv_size``), an earlier record end where they cost about ``chunk_bytes``."""
    cost = _csv_cost(memoryview(buf)[:cut], fmt)
    if cost <= budget:
        return cut
    earlier = record_end(buf[: max(1, cut * chunk_bytes // cost)], fmt)
    return earlier if earlier > 0 else cut


def _dense_window(buf: bytes, chunk_bytes: int, budget: int, fmt: FileFormat) -> bytes:
    """``buf``, or, when its rows cost more than ``budget`` once parsed, its first bytes whose rows
    cost about ``chunk_bytes``."""
    cost = _csv_cost(buf, fmt)
    return buf if cost <= budget else buf[: max(1, len(buf) * chunk_bytes // cost)]


def _costly_tail(buf: bytes, chunk_bytes: int, budget: int, fmt: FileFormat) -> Iterator[bytes]:
    """The stream's last bytes as parts: one, unless its rows cost more than ``budget``."""
    while buf:
        window = _dense_window(buf, chunk_bytes, budget, fmt)
        cut = record_end(window, fmt) if window is not buf else -1
        if cut <= 0:  # within the budget (or no record end to cut at): the rest is the last part
            yield buf
            return
        yield buf[:cut]
        buf = buf[cut:]


def _last_delimiter(buf: bytes, fmt: FileFormat) -> int:
    """Offset just past the last record delimiter of ``buf``, quotes and escapes aside; -1 if none."""
    token = record_token(fmt)
    at = buf.rfind(token) if token else -1
    return at + len(token) if at >= 0 else -1


def record_chunks(
    stream: Readable,
    chunk_bytes: int,
    fmt: FileFormat,
    *,
    max_part_bytes: int | None = None,
    path: str = "",
) -> Iterator[bytes]:
    """The stream's content as UTF-8 (``transcoded``) in parts of about ``chunk_bytes``, each
    ending on a record boundary (``record_end``).

    A part is larger only when one record is: it grows until a boundary turns up, but not past
    ``max_part_bytes`` (PartTooLarge): a file without record delimiters would otherwise be read
    into memory whole, however large it inflates.

    With PARSE_HEADER = TRUE every part after the first starts with the file's header record again
    (the first part's first record), so each part knows the column names on its own
    (``pipeline.formats.csv_records``, decision 82).
    """
    parts = _record_parts(stream, chunk_bytes, fmt, max_part_bytes=max_part_bytes, path=path)
    return _headed(parts, fmt) if fmt.parse_header else parts


def _headed(parts: Iterator[bytes], fmt: FileFormat) -> Iterator[bytes]:
    """``parts``, the later ones with the first part's first record in front."""
    header = b""
    for n, part in enumerate(parts):
        if n == 0:
            end = first_record_end(part, fmt)
            header = part if end < 0 else part[:end]
            yield part
        else:
            yield header + part


def _record_parts(
    stream: Readable,
    chunk_bytes: int,
    fmt: FileFormat,
    *,
    max_part_bytes: int | None = None,
    path: str = "",
) -> Iterator[bytes]:
    """``record_chunks`` without the header repeated."""
    stream = transcoded(stream, fmt)
    guarded = fmt.field_optionally_enclosed_by is not None or bool(fmt.escape_unenclosed_field)
    ceiling = max_part_bytes + 1 if max_part_bytes is not None else None
    # What a part's rows may cost once parsed (``csv_size``); past it, short rows make the part
    # shorter than chunk_bytes of text (decision 110).
    budget = 2 * chunk_bytes if max_part_bytes is None else min(2 * chunk_bytes, max_part_bytes)
    carry = b""
    target = chunk_bytes if ceiling is None else min(chunk_bytes, ceiling)
    while True:
        buf, eof = fill(stream, carry, target)
        if eof:
            yield from _costly_tail(buf, chunk_bytes, budget, fmt)
            return
        # Dense rows: look for the part's end within what costs about chunk_bytes, not in all of
        # buf (finding record ends costs several times the bytes searched).
        cut = record_end(_dense_window(buf, chunk_bytes, budget, fmt), fmt)
        if cut < 0:
            cut = record_end(buf, fmt)
        if cut < 0 and guarded and len(buf) >= _GROWTH_LIMIT * chunk_bytes:
            cut = _last_delimiter(buf, fmt)
        if cut < 0 and ceiling is not None and len(buf) >= ceiling:
            assert max_part_bytes is not None
            raise PartTooLarge(path, max_part_bytes, record=True)
        if cut < 0:
            carry, target = buf, len(buf) + chunk_bytes
            if ceiling is not None:
                target = min(target, ceiling)
            continue
        shorter = _within_cost(buf, cut, chunk_bytes, budget, fmt)
        # Dense rows: read on a part's worth at a time, not chunk_bytes, until they are not.
        target = chunk_bytes if shorter == cut else max(_MIN_TARGET, shorter)
        if ceiling is not None:
            target = min(target, ceiling)
        carry, cut = buf[shorter:], shorter
        yield buf[:cut]
