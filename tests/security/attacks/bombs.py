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
