"""Parts of a large JSON or Parquet file, so the loader holds one part in memory, not the file.

A staged file above ``pipeline.stream_file_bytes`` (or one that inflates past
``pipeline.max_part_bytes`` when read whole) is loaded part by part, as a CSV file is
(``pipeline.chunks``, ``pipeline.loader.stream_file``); each part is a RawFile numbered from 1,
which the loader places in the file with its ``row_offset`` and ``line_offset``.

JSON (decision 83). The decompressed stream is cut into parts of about ``pipeline.chunk_bytes`` at
places where the whole-file reader (``pipeline.formats.json_documents``) is between records, found
by a vectorised scan of the part's structure (quotes not escaped, brackets outside strings):

- at a line end outside every document: NDJSON, concatenated documents, pretty-printed ones;
- with STRIP_OUTER_ARRAY = TRUE, also at a line end right after a comma (or the opening bracket)
  of a top-level array: the outer array written an element or a few per line. The next part
  starts among its elements (``in_array``) and the part before it ends inside it (``open_end``).

A part never ends inside a line, so every part starts on a line of its own and its error lines
and characters are the file's once the loader adds the lines before it. A JSON string cannot hold
a raw newline, so the quote parity starts over on every line, and one broken line cannot hide the
boundaries of the rest. A part that finds no boundary grows; at four chunk sizes (as a CSV part
does) it is cut at the last line end of the lowest depth in its second half (a document longer
than that, 128 MiB by default, is cut in two; after a line whose brackets do not balance, NDJSON's
documents sit a level deeper, so NDJSON with a truncated line still loads as read whole), and past
``pipeline.max_part_bytes`` with no line end at all the file fails with a message saying what to
do (a single line or document that large: a minified array, say).

Parquet. A part is about ``pipeline.chunk_bytes`` of decoded values, read a batch of rows at a
time (``pipeline.formats.parquet_batches``: a batch is cut where a part ends, whatever row group it
is in); the object is read by ranges (the footer, then each row group's column chunks, each read
once for its page headers and pyarrow: ``RangeReader.hold``), never whole. A row group that the
footer says decompresses past ``pipeline.max_part_bytes`` fails the file (RowGroupTooLarge: write
smaller row groups), as does one whose page headers say one batch of it may decode past it
(GroupTooLarge), a row that decodes past it (RowTooLarge), or a file whose values decode past
``pipeline.max_file_bytes`` (decision 110). An object that cannot be read by ranges (an internal
stage's sealed file, a whole-file gzip wrapper, a key pyarrow cannot open) is first copied,
decrypted and decompressed, to a temporary file on the worker's disk, and read from there.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import (
    FileTooLarge,
    PartTooLarge,
    Readable,
    TransportError,
    decompressed,
    fill,
    json_size,
)
from pipeline.formats import UTF8_BOM, ParquetBatches, RawFile, parquet_raw, read_json, read_parts

GROWTH_LIMIT = 4
"""A JSON part grows to this many chunk sizes looking for a boundary, then is cut at its last line
end (``pipeline.chunks`` does the same for CSV)."""

_GZIP_MAGIC = b"\x1f\x8b"
_SPOOL_BLOCK = 8 << 20

_NL, _QUOTE, _BACKSLASH, _COMMA, _CR = 10, 34, 92, 44, 13
_OPEN_OBJECT, _CLOSE_OBJECT, _OPEN_ARRAY, _CLOSE_ARRAY = 123, 125, 91, 93


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


class JsonPartTooLarge(PartTooLarge):
    """A JSON file with more than ``pipeline.max_part_bytes`` between two places it can be cut."""

    def __init__(self, path: str, limit: int) -> None:
        FileLoadError.__init__(
            self,
            f"File '{path}' has more than {_size(limit)} without a line break between two JSON "
            "documents (pipeline.max_part_bytes). A large JSON file is loaded in parts that end at a "
            "line break between documents, or with STRIP_OUTER_ARRAY = TRUE after a comma that ends "
            "a line inside the outer array; write one document (or array element) per line, split "
            "the file, or raise pipeline.max_part_bytes if such files are expected.",
            file=path,
        )
        self.limit = limit
        self.record = True


class RowGroupTooLarge(PartTooLarge):
    """A Parquet row group that decompresses past ``pipeline.max_part_bytes``."""

    def __init__(self, path: str, limit: int, group: int, size: int) -> None:
        FileLoadError.__init__(
            self,
            f"File '{path}' has a Parquet row group (number {group + 1}) that decompresses to "
            f"{size:,} bytes, more than {_size(limit)} (pipeline.max_part_bytes). A large Parquet "
            "file is read a row group at a time; write it with smaller row groups, or raise "
            "pipeline.max_part_bytes if such files are expected.",
            file=path,
        )
        self.limit = limit
        self.record = False


# ---------------------------------------------------------------------------------------------
# JSON


@dataclass(frozen=True)
class JsonPart:
    """Some whole lines of a JSON file, starting and ending where records do."""

    data: bytes
    in_array: bool = False
    """It starts among the elements of a top-level array (STRIP_OUTER_ARRAY)."""
    open_end: bool = False
    """It ends among them: the next part goes on with the elements."""


@dataclass(frozen=True)
class _Cut:
    at: int
    """Offset just past the line end where the part ends; -1 when there is no such place."""
    in_array: bool
    """The next part starts among the outer array's elements."""


def _escaped(positions: np.ndarray, escapes: np.ndarray) -> np.ndarray:
    """Which ``positions`` follow an odd run of backslashes (``escapes``: their offsets, sorted)."""
    if not len(escapes) or not len(positions):
        return np.zeros(len(positions), dtype=bool)
    new_run = np.ones(len(escapes), dtype=bool)
    new_run[1:] = escapes[1:] != escapes[:-1] + 1
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(len(escapes)), 0))
    before = positions - 1
    idx = np.minimum(np.searchsorted(escapes, before), len(escapes) - 1)
    adjacent = escapes[idx] == before
    escaped: np.ndarray = adjacent & ((idx - run_start[idx]) % 2 == 0)
    return escaped


def json_cuts(buf: bytes, strip_outer_array: bool, in_array: bool) -> tuple[_Cut, _Cut]:
    """The last place ``buf`` (which starts where a record may start; among the outer array's
    elements with ``in_array``) can end as a part, and the fallback of a part that found no such
    place: its last line end of the lowest depth in its second half."""
    none = _Cut(-1, in_array)
    data = np.frombuffer(buf, dtype=np.uint8)
    newlines = np.flatnonzero(data == _NL)
    if not len(newlines):
        return none, none
    quotes = np.flatnonzero(data == _QUOTE)
    if len(quotes):
        quotes = quotes[~_escaped(quotes, np.flatnonzero(data == _BACKSLASH))]
    brackets = np.flatnonzero(
        (data == _OPEN_OBJECT) | (data == _CLOSE_OBJECT) | (data == _OPEN_ARRAY) | (data == _CLOSE_ARRAY)
    )
    if len(quotes) and len(brackets):
        # Inside a string when an odd number of quotes precede it on its own line.
        line = np.searchsorted(newlines, brackets)
        line_start = np.where(line > 0, newlines[np.maximum(line - 1, 0)] + 1, 0)
        inside = (np.searchsorted(quotes, brackets) - np.searchsorted(quotes, line_start)) % 2 == 1
        brackets = brackets[~inside]
    kinds = data[brackets]
    opens = (kinds == _OPEN_OBJECT) | (kinds == _OPEN_ARRAY)
    start = 1 if in_array else 0
    depth = start + np.cumsum(np.where(opens, 1, -1))
    # Depth at each line end, and the lowest depth reached before it (stray closers lower it).
    before_newline = np.searchsorted(brackets, newlines)  # brackets before each line end
    depths = np.concatenate(([start], depth))
    at_newline = depths[before_newline]
    floor = np.minimum.accumulate(depths)[before_newline]
    between_documents = (at_newline <= 0) & (at_newline == floor)
    # The fallback: the last line end at the lowest depth of the buffer's second half (after an
    # unclosed brace, NDJSON's documents sit one level deeper: still between two of them).
    late = newlines >= len(buf) // 2
    if not late.any():
        late[:] = True
    shallowest = at_newline[late].min()
    fall = int(np.flatnonzero(late & (at_newline == shallowest))[-1])
    fallback = _Cut(int(newlines[fall]) + 1, False)
    if strip_outer_array:
        # The level-1 region a line end is in was opened by '[' (or by the part's start among the
        # elements), and the line's last character is a comma or that bracket.
        openers = brackets[opens & (depth == 1)]
        if len(openers):
            which = np.searchsorted(openers, newlines) - 1
            opener_is_bracket = data[openers[np.maximum(which, 0)]] == _OPEN_ARRAY
            array_opened = np.where(which >= 0, opener_is_bracket, in_array)
        else:
            array_opened = np.full(len(newlines), in_array)
        before = np.maximum(newlines - 1, 0)
        before = np.where((data[before] == _CR) & (before > 0), before - 1, before)
        ends_list = (newlines > 0) & ((data[before] == _COMMA) | (data[before] == _OPEN_ARRAY))
        among_elements = (at_newline == 1) & array_opened & ends_list
        fallback = _Cut(fallback.at, bool(at_newline[fall] >= 1 and array_opened[fall]))
    else:
        among_elements = np.zeros(len(newlines), dtype=bool)
    ok = np.flatnonzero(between_documents | among_elements)
    if not len(ok):
        return none, fallback
    k = int(ok[-1])
    return _Cut(int(newlines[k]) + 1, bool(among_elements[k])), fallback


def json_parts(
    stream: Readable,
    chunk_bytes: int,
    fmt: FileFormat,
    *,
    max_part_bytes: int | None = None,
    path: str = "",
) -> Iterator[JsonPart]:
    """A JSON file's decompressed stream in parts of about ``chunk_bytes`` that end where a record
    does (``json_cuts``). A part is larger only when a record is, and not past ``max_part_bytes``
    (JsonPartTooLarge)."""
    ceiling = max_part_bytes + 1 if max_part_bytes is not None else None

    def capped(n: int) -> int:
        return n if ceiling is None else min(n, ceiling)

    # What a part's documents may cost once read (``chunks.json_size``); past it, short documents
    # make the part shorter than chunk_bytes of text (decision 110).
    budget = 2 * chunk_bytes if max_part_bytes is None else min(2 * chunk_bytes, max_part_bytes)
    strip = fmt.strip_outer_array
    carry = b""
    in_array = False
    target = capped(chunk_bytes)
    while True:
        buf, eof = fill(stream, carry, target)
        if eof:
            while buf and (window := _dense_window(buf, chunk_bytes, budget)) is not buf:
                cut, _ = json_cuts(window, strip, in_array)
                if cut.at <= 0:
                    break
                yield JsonPart(buf[: cut.at], in_array, cut.in_array)
                buf, in_array = buf[cut.at :], cut.in_array
            if buf:
                yield JsonPart(buf, in_array, False)
            return
        # Dense documents: look for the part's end within what costs about chunk_bytes, not in all
        # of buf (json_cuts' arrays cost several times the bytes they scan).
        window = _dense_window(buf, chunk_bytes, budget)
        cut, fallback = json_cuts(window, strip, in_array)
        if cut.at < 0 and window is not buf:
            cut, fallback = json_cuts(buf, strip, in_array)
        if cut.at < 0 and len(buf) >= GROWTH_LIMIT * chunk_bytes:
            cut = fallback
        if cut.at < 0 and ceiling is not None and len(buf) >= ceiling:
            assert max_part_bytes is not None
            raise JsonPartTooLarge(path, max_part_bytes)
        if cut.at < 0:
            carry, target = buf, capped(len(buf) + chunk_bytes)
            continue
        shorter = _json_within_cost(buf, cut, chunk_bytes, budget, strip, in_array)
        # Dense documents: read on a part's worth at a time, not chunk_bytes, until they are not.
        target = capped(chunk_bytes if shorter.at == cut.at else max(64 * 1024, shorter.at))
        cut = shorter
        part = JsonPart(buf[: cut.at], in_array, cut.in_array)
        carry, in_array = buf[cut.at :], cut.in_array
        del buf  # not held while the caller loads the part
        yield part
        del part


def _dense_window(buf: bytes, chunk_bytes: int, budget: int) -> bytes:
    """``buf``, or, when its documents cost more than ``budget`` once read (``chunks.json_size``),
    its first bytes whose documents cost about ``chunk_bytes``."""
    cost = json_size(buf)
    return buf if cost <= budget else buf[: max(1, len(buf) * chunk_bytes // cost)]


def _json_within_cost(
    buf: bytes, cut: _Cut, chunk_bytes: int, budget: int, strip_outer_array: bool, in_array: bool
) -> _Cut:
    """``cut``, or, when the documents before it cost more than ``budget`` once read
    (``chunks.json_size``, a document a line), an earlier one where they cost about ``chunk_bytes``."""
    cost = json_size(buf[: cut.at])
    if cost <= budget:
        return cut
    earlier, _ = json_cuts(buf[: max(1, cut.at * chunk_bytes // cost)], strip_outer_array, in_array)
    return earlier if earlier.at > 0 else cut


def read_json_part(
    part: JsonPart, fmt: FileFormat, path: str, *, first: bool, max_bytes: int | None = None
) -> RawFile:
    """One part of a JSON file as a RawFile numbered from 1; ``lines`` says how many lines it spans.
    The first part drops a byte-order mark as a whole file does (SKIP_BYTE_ORDER_MARK). Its
    documents may cost at most ``max_bytes`` (PartTooLarge: ``read_json``)."""
    body = part.data
    if first and fmt.skip_byte_order_mark and body.startswith(UTF8_BOM):
        body = body[len(UTF8_BOM) :]
    raw = read_json(body, fmt, path, in_array=part.in_array, open_end=part.open_end, max_bytes=max_bytes)
    raw.lines = body.count(b"\n")
    return raw


# ---------------------------------------------------------------------------------------------
# Parquet


class RangeReader:
    """A staged object read by ranges (pyarrow's S3 file), for ``pq.ParquetFile``; the object's own
    read errors become TransportError (transient: the batch is replayed), not a bad file."""

    closed = False  # what pyarrow's PythonFile checks

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._size = int(inner.size())
        self._pos = 0
        self._held: list[tuple[int, memoryview]] = []
        """Ranges read ahead (``hold``), served to pyarrow's reads that fall inside them."""

    def readable(self) -> bool:
        """A read stream."""
        return True

    def seekable(self) -> bool:
        """Read by ranges."""
        return True

    def size(self) -> int:
        """The object's size in bytes."""
        return self._size

    def tell(self) -> int:
        """The offset the next read starts at."""
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move to ``offset`` (from the start, the current offset or the end)."""
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, n: int = -1, /) -> bytes:
        """Up to ``n`` bytes from the current offset (the rest of the object when ``n`` < 0)."""
        if n < 0:
            n = self._size - self._pos
        n = max(0, min(n, self._size - self._pos))
        if n == 0:
            return b""
        for start, held in self._held:
            if start <= self._pos and self._pos + n <= start + len(held):
                out = held[self._pos - start : self._pos - start + n]
                self._pos += n
                return out  # type: ignore[return-value]  # pyarrow takes any buffer
        try:
            data = bytes(self._inner.read_at(n, self._pos))
        except OSError as exc:
            raise TransportError(str(exc)) from exc
        self._pos += len(data)
        return data

    def hold(self, offset: int, n: int) -> memoryview:
        """Up to ``n`` bytes from ``offset``, kept until ``release`` for pyarrow's reads inside them:
        a column chunk's page headers are read before pyarrow reads the chunk, from one request."""
        n = max(0, min(n, self._size - offset))
        try:
            data = memoryview(bytes(self._inner.read_at(n, offset))) if n else memoryview(b"")
        except OSError as exc:
            raise TransportError(str(exc)) from exc
        self._held.append((offset, data))
        return data

    def release(self) -> None:
        """Forget the ranges held (a row group is read)."""
        self._held.clear()

    def close(self) -> None:
        """The object is closed by whoever opened it."""


def is_gzip(head: bytes) -> bool:
    """A whole-file gzip wrapper (the one compression Floe undoes around a Parquet file)."""
    return head.startswith(_GZIP_MAGIC)


@contextmanager
def spooled(stream: Readable, path: str, max_file_bytes: int) -> Iterator[pa.NativeFile]:
    """``stream`` (a whole-file gzip wrapper undone) copied to a temporary file on local disk, open for
    reading by ranges; the file is gone when the context ends. At most ``max_file_bytes`` are
    written (FileTooLarge past them)."""
    head = _read_exactly(stream, 2)
    source = _Prefixed(head, stream)
    body = decompressed(source, "GZIP" if is_gzip(head) else "NONE", path, max_bytes=max_file_bytes)
    spool: IO[bytes]
    with tempfile.TemporaryFile(prefix="floe-parquet-") as spool:
        while block := body.read(_SPOOL_BLOCK):
            spool.write(block)
        spool.flush()
        spool.seek(0)
        yield pa.PythonFile(spool, mode="r")


def _read_exactly(stream: Readable, n: int) -> bytes:
    out = b""
    while len(out) < n and (block := stream.read(n - len(out))):
        out += block
    return out


class _Prefixed:
    """A stream with bytes already read from its head put back in front."""

    def __init__(self, head: bytes, rest: Readable) -> None:
        self._head = head
        self._rest = rest

    def read(self, n: int = -1, /) -> bytes:
        if self._head:
            out, self._head = (self._head, b"") if n < 0 else (self._head[:n], self._head[n:])
            return out
        return self._rest.read(n)


def parquet_parts(
    parquet: pq.ParquetFile,
    fmt: FileFormat,
    path: str,
    *,
    chunk_bytes: int,
    max_part_bytes: int,
    max_file_bytes: int,
    source: Any,
) -> Iterator[RawFile]:
    """An open Parquet file's rows in parts of about ``chunk_bytes`` decoded
    (``pipeline.formats.parquet_batches.parts``), each a RawFile numbered from 1 whose ``lines``
    are its rows (Parquet has no lines: a row's line is its row number). ``source``: what the file
    was opened on.

    The footer's sizes are checked first, as written: a row group past ``max_part_bytes``
    (RowGroupTooLarge) or a file past ``max_file_bytes`` (FileTooLarge) fails before any is read.
    Then each row group's page headers, and each batch's decoded values, are checked as it is read
    (a row group whose pages alone pass ``max_part_bytes`` fails with GroupTooLarge)."""
    md = parquet.metadata
    sizes = [
        sum(md.row_group(g).column(c).total_uncompressed_size for c in range(md.num_columns))
        for g in range(md.num_row_groups)
    ]
    if sum(sizes) > max_file_bytes:
        raise FileTooLarge(path, max_file_bytes)
    for g, size in enumerate(sizes):
        if size > max_part_bytes:
            raise RowGroupTooLarge(path, max_part_bytes, g, size)
    decoder = ParquetBatches(parquet, source, path)
    tables = read_parts(
        decoder, chunk_bytes=chunk_bytes, max_part_bytes=max_part_bytes, max_file_bytes=max_file_bytes
    )
    for table in tables:
        raw = parquet_raw(table, parquet, fmt, path)
        del table
        raw.lines = raw.rows_parsed
        yield raw
        del raw
