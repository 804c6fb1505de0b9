"""Record-aligned chunks of a large staged file, read as a stream.

A staged CSV file above ``pipeline.stream_file_bytes`` is not read whole: its bytes flow from S3
through a streaming decompressor and are cut into parts of about ``pipeline.chunk_bytes`` that end
on a record boundary, so each part parses on its own and memory stays bounded by the part size,
not the file size.
"""

from __future__ import annotations

import bz2
import gzip
import zlib
from collections.abc import Iterator
from typing import Protocol

import numpy as np
import pyarrow as pa

from floe.errors import FileLoadError

_MAGIC = {b"\x1f\x8b": "GZIP", b"BZh": "BZ2", b"\x28\xb5\x2f\xfd": "ZSTD"}

STREAMABLE_COMPRESSION = frozenset({"AUTO", "NONE", "GZIP", "BZ2", "ZSTD", "BROTLI"})
"""COMPRESSION values the streaming reader undoes; files with other ones are read whole."""

_GROWTH_LIMIT = 4
"""A part grows to this many chunk sizes looking for a boundary outside quotes, then takes the
last newline (a stray quote in an unquoted field would otherwise keep every newline 'inside').
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


class TransportError(OSError):
    """Reading the staged object failed (not its content): transient, the batch is replayed."""


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


def decompressed(raw: Readable, compression: str, path: str) -> Readable:
    """The stream's content with COMPRESSION undone (AUTO recognises gzip, bzip2 and zstd)."""
    method = (compression or "AUTO").upper()
    raw = _Transport(raw)
    head = raw.read(4)
    source = _Prefixed(head, raw)
    if method == "AUTO":
        method = next((m for magic, m in _MAGIC.items() if head.startswith(magic)), "NONE")
    if method == "NONE" or not head:
        return source
    if method == "GZIP":  # Python's reader handles concatenated members, as gzip -d does
        inner: Readable = gzip.GzipFile(fileobj=source, mode="rb")  # type: ignore[call-overload]
    elif method == "BZ2":
        inner = bz2.BZ2File(source, mode="rb")  # type: ignore[call-overload]
    elif method in ("ZSTD", "BROTLI"):
        inner = pa.CompressedInputStream(pa.PythonFile(source, mode="r"), method.lower())
    else:
        raise FileLoadError(f"COMPRESSION '{compression}' cannot be read as a stream", file=path)
    return _Decompressing(inner, method, path)


def record_end(buf: bytes, quote: str | None) -> int:
    """Offset just past the last newline of ``buf`` that ends a record, or -1 if none does.

    ``buf`` starts on a record boundary. With a quote character, a newline ends a record only
    outside quotes: after an even number of quote characters (a doubled quote inside a quoted
    field counts twice, so it keeps the parity).
    """
    if quote is None:
        return buf.rfind(b"\n") + 1 or -1
    data = np.frombuffer(buf, dtype=np.uint8)
    newlines = np.flatnonzero(data == 10)
    if not len(newlines):
        return -1
    quotes = np.flatnonzero(data == ord(quote))
    if len(quotes):
        outside = np.searchsorted(quotes, newlines) % 2 == 0
        newlines = newlines[outside]
        if not len(newlines):
            return -1
    return int(newlines[-1]) + 1


def record_chunks(stream: Readable, chunk_bytes: int, quote: str | None) -> Iterator[bytes]:
    """The stream's bytes in parts of about ``chunk_bytes``, each ending on a record boundary.

    A part is larger only when one record is: it grows until a boundary turns up.
    """
    carry = b""
    target = chunk_bytes
    while True:
        parts = [carry]
        have = len(carry)
        eof = False
        while have < target:
            block = stream.read(target - have)
            if not block:
                eof = True
                break
            parts.append(block)
            have += len(block)
        buf = b"".join(parts)
        del parts
        if eof:
            if buf:
                yield buf
            return
        cut = record_end(buf, quote)
        if cut < 0 and quote is not None and len(buf) >= _GROWTH_LIMIT * chunk_bytes:
            cut = record_end(buf, None)
        if cut < 0:
            carry, target = buf, len(buf) + chunk_bytes
            continue
        carry, target = buf[cut:], chunk_bytes
        yield buf[:cut]
