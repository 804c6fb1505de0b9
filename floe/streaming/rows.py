"""The body of a Snowpipe Streaming append, server side: undo its Content-Encoding within bounds, then
split the NDJSON into rows and check that every line is one JSON object.

Both steps run in linear time and bounded memory whatever the client sends: decompression stops as
soon as the output passes MAX_UNCOMPRESSED_BYTES (a gzip or zstd bomb never inflates), and each line
is parsed once by orjson, keeping nothing but the line's bytes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import ClassVar

import orjson
import zstandard

from floe.streaming.protocol import (
    MAX_BODY_BYTES,
    MAX_ROW_BYTES,
    MAX_UNCOMPRESSED_BYTES,
    Code,
)

__all__ = [
    "BodyError",
    "BodyTooLarge",
    "MalformedBody",
    "MalformedRows",
    "RowBatch",
    "TooManyRows",
    "decode_body",
    "parse_rows",
]

# ------------------------------------------------------------------------------------------------
# Errors


class BodyError(ValueError):
    """An append body Floe refuses; ``code`` and ``status`` are the error answer's."""

    code: ClassVar[str] = Code.BAD_REQUEST
    status: ClassVar[int] = 400


class MalformedBody(BodyError):
    """The body cannot be decoded: an unsupported Content-Encoding or corrupt compressed data."""


class BodyTooLarge(BodyError):
    """The body is over MAX_BODY_BYTES as sent or over MAX_UNCOMPRESSED_BYTES decompressed."""

    code: ClassVar[str] = Code.PAYLOAD_TOO_LARGE
    status: ClassVar[int] = 413


class TooManyRows(BodyTooLarge):
    """The body has more rows than its caller may take (``parse_rows``'s ``max_rows``)."""


class MalformedRows(BodyError):
    """A line of the NDJSON body is not a JSON object; ``line`` is its 1-based number."""

    code: ClassVar[str] = Code.MALFORMED_ROWS

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message

    def __reduce__(self) -> tuple[type[MalformedRows], tuple[int, str]]:
        # The default would call cls(str(self)), which this __init__ does not take.
        return (type(self), (self.line, self.message))


# ------------------------------------------------------------------------------------------------
# Content-Encoding

_GZIP_STEP = 4096
"""Compressed bytes fed to zlib per call. zlib bounds the output itself (max_length); the step only
bounds what each gzip member's ``unused_data`` copies, so a body of 200,000 tiny members stays linear."""
_ZSTD_STEP = 512
"""Compressed bytes fed to zstd per call. Its decompressobj has no output bound, but one zstd block
regenerates at most 128 KiB from at least 4 bytes (an RLE block), so one call yields at most about
(512 / 4 + 1) * 128 KiB = 16 MiB: the output overshoots the limit by no more than that before we stop."""
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_MAX_HEADER = 18


def decode_body(body: bytes, content_encoding: str | None, limit: int = MAX_UNCOMPRESSED_BYTES) -> bytes:
    """The body with its Content-Encoding undone: none (or ``identity``), ``gzip`` (``x-gzip``) or
    ``zstd``, case-insensitively. Several encodings (a comma list) are refused like unknown ones.

    Raises BodyTooLarge when the body is over MAX_BODY_BYTES, or as soon as its decompressed form
    passes ``limit`` (at most MAX_UNCOMPRESSED_BYTES; the API passes less when what the append may
    still hold is less, so a body that cannot be stored is not inflated further), and MalformedBody
    for an unsupported encoding or corrupt, truncated or trailing-garbage compressed data.
    """
    if len(body) > MAX_BODY_BYTES:
        raise BodyTooLarge(f"the body is {len(body)} bytes as sent; at most {MAX_BODY_BYTES} are accepted")
    limit = min(limit, MAX_UNCOMPRESSED_BYTES)
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("", "identity"):
        if len(body) > limit:
            raise _too_large(limit)
        return body
    if encoding in ("gzip", "x-gzip"):
        return _gunzip(body, limit)
    if encoding == "zstd":
        return _unzstd(body, limit)
    raise MalformedBody(
        f"Content-Encoding {content_encoding!r} is not supported: send the body as is, or compressed "
        "with one of gzip or zstd"
    )


def _too_large(limit: int) -> BodyTooLarge:
    return BodyTooLarge(f"the decompressed body is over {limit} bytes")


def _gunzip(body: bytes, limit: int) -> bytes:
    """Concatenated gzip members (RFC 1952), each checked against its CRC-32 and length."""
    if not body:
        raise MalformedBody("the gzip body is empty")
    out = bytearray()
    view = memoryview(body)
    pos = 0
    while pos < len(body):  # one gzip member per turn
        member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        while not member.eof:
            if pos >= len(body):
                raise MalformedBody("corrupt gzip data: the stream is truncated")
            chunk = view[pos : pos + _GZIP_STEP]
            budget = limit - len(out) + 1
            try:
                out += member.decompress(chunk, budget)
            except zlib.error as e:
                raise MalformedBody(f"corrupt gzip data: {e}") from None
            if len(out) > limit:
                raise _too_large(limit)
            # Output under the budget means zlib took the whole chunk (unconsumed_tail is empty);
            # what it did not need after the member's end is the next member's start.
            pos += len(chunk) - len(member.unused_data)
    return bytes(out)


def _unzstd(body: bytes, limit: int) -> bytes:
    """Zstandard frames (RFC 8878), skippable ones included, each checked to its end."""
    if not body:
        raise MalformedBody("the zstd body is empty")
    # zstd's own window limit (128 MiB) stays: a window caps memory only where content is unknown,
    # and the output bound below caps what is ever written.
    dctx = zstandard.ZstdDecompressor()
    out = bytearray()
    view = memoryview(body)
    pos = 0
    while pos < len(body):  # one frame per turn
        _check_zstd_frame_size(view[pos : pos + _ZSTD_MAX_HEADER], len(out), limit)
        # One decompressobj per frame: its eof tells a complete frame from a truncated one, which a
        # stream reader silently accepts.
        frame = dctx.decompressobj()
        while not frame.eof:
            if pos >= len(body):
                raise MalformedBody("corrupt zstd data: the stream is truncated")
            chunk = view[pos : pos + _ZSTD_STEP]
            try:
                out += frame.decompress(chunk)
            except zstandard.ZstdError as e:
                raise MalformedBody(f"corrupt zstd data: {e}") from None
            if len(out) > limit:
                raise _too_large(limit)
            pos += len(chunk) - len(frame.unused_data)
    return bytes(out)


def _check_zstd_frame_size(header: memoryview, decoded: int, limit: int) -> None:
    """Refuse at once a frame whose header declares more content than the limit leaves room for."""
    if len(header) < 4 or int.from_bytes(header[:4], "little") != _ZSTD_MAGIC:
        return  # a skippable frame, or garbage that the decompressor reports
    try:
        size = zstandard.get_frame_parameters(header).content_size
    except zstandard.ZstdError as e:
        raise MalformedBody(f"corrupt zstd data: {e}") from None
    if size != zstandard.CONTENTSIZE_UNKNOWN and decoded + size > limit:
        raise _too_large(limit)


# ------------------------------------------------------------------------------------------------
# NDJSON


@dataclass(frozen=True, slots=True)
class RowBatch:
    """An append's rows: the NDJSON as sent with line endings normalized, and how many rows it has."""

    data: bytes = field(repr=False)
    """One row per line, each exactly as sent, every line ending in ``\\n`` (never ``\\r\\n``); the
    empty lines sent are left out."""
    count: int
    """The number of rows (lines); at least 1."""


_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
_BLOCK_BYTES = 64 * 1024
"""About how much of the body parse_rows splits into lines at a time."""
_JSON_WHITESPACE = b" \t\r"
"""RFC 8259 whitespace other than \\n, which cannot occur inside a line."""


def parse_rows(data: bytes, max_rows: int | None = None) -> RowBatch:
    """Split a decoded NDJSON body into rows, checking that each line is one JSON object (RFC 8259,
    UTF-8, at most MAX_ROW_BYTES long).

    A line ends with ``\\n``, optionally preceded by ``\\r``; the last line may lack both, and a final
    ``\\n`` does not start another line. An empty line is skipped: it separates nothing, and the
    snowpipe-streaming SDK ends each ``append_rows`` call's rows with one. A line of whitespace is an
    error, as is a body without a row. Lines are numbered as sent, empty ones included. Raises
    MalformedRows naming the first bad line, and TooManyRows as soon as a block takes the count of
    rows past ``max_rows`` (what the append may still hold), before parsing further.
    """
    loads = orjson.loads
    count = 0
    numbered = 0
    end = 0
    kept: list[bytes] | None = None
    """The body's blocks without their empty lines, once one held any (else the body is kept)."""
    while end < len(data):
        # Whole lines a block at a time: bytes.split's speed, without a bytes object for each of
        # the 11 million lines of a 32 MB body of "{}" held at once.
        start = end
        cut = data.find(b"\n", start + _BLOCK_BYTES)
        end = len(data) if cut < 0 else cut + 1
        lines = data[start:end].split(b"\n")
        if not lines[-1]:
            lines.pop()  # the block's final \n ends its last line; it does not begin an empty one
        sent = lines
        if b"" in lines or b"\r" in lines:
            # Left out before parsing: an exception for each of the SDK's empty lines (one a row
            # with append_row) would double the parse.
            lines = [line for line in lines if line and line != b"\r"]
            if kept is None:
                kept = [data[:start]]  # the blocks before held none: as they are
            if lines:
                kept.append(b"\n".join(lines) + b"\n")
        elif kept is not None:
            kept.append(data[start:end])
        if max_rows is not None and count + len(lines) > max_rows:
            raise TooManyRows(f"the body has more than {max_rows} rows")
        # A line's \r ending stays on it here: JSON reads it as whitespace, so a line with it is
        # valid, and the same object, exactly when the line without it is. Only errors look closer.
        for index, line in enumerate(lines):
            if len(line) > MAX_ROW_BYTES and (size := len(line.removesuffix(b"\r"))) > MAX_ROW_BYTES:
                number = _line_number(sent, lines, index, numbered)
                raise MalformedRows(number, f"the row is {size} bytes; at most {MAX_ROW_BYTES} are accepted")
            try:
                value = loads(line)
            except orjson.JSONDecodeError as e:
                number = _line_number(sent, lines, index, numbered)
                raise MalformedRows(number, _describe(line.removesuffix(b"\r"), e)) from None
            if type(value) is not dict:
                kind = "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)
                raise MalformedRows(
                    _line_number(sent, lines, index, numbered), f"a row must be a JSON object, not {kind}"
                )
        numbered += len(sent)
        count += len(lines)
    if not count:
        raise MalformedRows(1, "the body has no rows")
    if kept is not None:
        data, kept = b"".join(kept), None  # the blocks' copies go before _normalize makes another
    return RowBatch(data=_normalize(data), count=count)


def _line_number(sent: list[bytes], rows: list[bytes], index: int, before: int) -> int:
    """The 1-based number, as sent, of ``rows[index]``: ``rows`` are the block's lines ``sent``
    without the empty ones, and ``before`` lines came before the block."""
    if rows is sent:
        return before + index + 1
    seen = -1
    for number, line in enumerate(sent, before + 1):
        seen += line not in (b"", b"\r")
        if seen == index:
            return number
    raise AssertionError("a row of a block is one of its lines")


def _normalize(data: bytes) -> bytes:
    """The body with each line ending as ``\\n``: one \\r before a \\n (or at the very end) goes."""
    if b"\r" in data:
        # A raw \n only ever ends a line (JSON strings escape it), so every \r\n is a line ending.
        data = data.replace(b"\r\n", b"\n")
    if data.endswith(b"\n"):
        return data
    return data.removesuffix(b"\r") + b"\n"


def _describe(line: bytes, error: orjson.JSONDecodeError) -> str:
    """What is wrong with a line (its \\r ending removed) that orjson refused with ``error``, in words
    that do not depend on how it checks."""
    if not line.strip(_JSON_WHITESPACE):
        return "the line holds only whitespace; every line must be a JSON object (an empty one is skipped)"
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as e:
        # orjson reports bad UTF-8 at position 0; the byte offset is what helps.
        return f"invalid UTF-8 at byte {e.start + 1}"
    # Parsed again without the \r so that an error at the line's end has the column the client
    # counts; adding whitespace cannot make valid JSON invalid, so this fails too.
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError as e:
        error = e
    return f"{error.msg} (column {error.colno})"
