"""pipeline.chunks: a large file's stream cut into parts on record boundaries, decompressed on the fly."""

from __future__ import annotations

import bz2
import gzip
import io
import random

import pyarrow as pa
import pytest

from floe.errors import FileLoadError
from pipeline.chunks import TransportError, decompressed, record_chunks, record_end

pytestmark = pytest.mark.unit


class _Dribble(io.BytesIO):
    """A stream that returns fewer bytes than asked, as network streams do."""

    def read(self, n: int | None = -1, /) -> bytes:
        return super().read(min(n, 7) if n is not None and n > 0 else n)


def test_record_end_without_quotes_is_the_last_newline() -> None:
    assert record_end(b"a,b\nc,d\ne,", None) == 8
    assert record_end(b"a,b", None) == -1


def test_record_end_skips_newlines_inside_quotes() -> None:
    """Safeguard: a MULTI_LINE quoted value is never cut in two."""
    buf = b'1,"x\ny"\n2,"multi\nline'
    assert record_end(buf, '"') == buf.index(b'"\n') + 2
    assert record_end(b'1,"open\nstill open', '"') == -1


def test_record_end_doubled_quotes_keep_the_parity() -> None:
    buf = b'1,"say ""hi""\nthere"\n2,b\n3,"'
    assert record_end(buf, '"') == buf.index(b"2,b\n") + 4


def _text(rng: random.Random, rows: int) -> bytes:
    lines = []
    for i in range(rows):
        value = rng.choice(["plain", '"quoted, comma"', '"two\nlines"', '"dq ""x"" \n y"', ""])
        lines.append(f"{i},{value},{rng.random():.6f}")
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("chunk", [16, 100, 4096])
def test_chunks_rebuild_the_stream_and_end_on_records(chunk: int) -> None:
    """Safeguard: parts put back together are the file, byte for byte, and every part but the last
    ends where a record ends (so each parses alone into the same records)."""
    data = _text(random.Random(chunk), 300)
    parts = list(record_chunks(_Dribble(data), chunk, '"'))
    assert b"".join(parts) == data
    for part in parts:
        assert part.endswith(b"\n")
        assert record_end(part, '"') == len(part)  # no quote left open at the cut
    assert len(parts) > 1


def test_chunk_grows_for_a_record_longer_than_the_chunk() -> None:
    data = b"1," + b"x" * 5000 + b"\n2,y\n"
    parts = list(record_chunks(io.BytesIO(data), 100, None))
    assert parts[0].startswith(data[: data.index(b"\n") + 1])
    assert all(p.endswith(b"\n") for p in parts)
    assert b"".join(parts) == data


def test_a_stray_quote_cannot_make_one_part_of_the_whole_file() -> None:
    """Safeguard: a quote inside an unquoted field would leave every later newline 'inside quotes';
    the part stops growing at four chunk sizes and cuts at a newline."""
    data = b'1,ab"c\n' + b"2,plain\n" * 2000
    parts = list(record_chunks(io.BytesIO(data), 1000, '"'))
    assert b"".join(parts) == data
    assert max(len(p) for p in parts) <= 4 * 1000 + 1000


def test_no_trailing_newline_last_part_keeps_its_record() -> None:
    parts = list(record_chunks(io.BytesIO(b"1,a\n2,b\n3,c"), 5, None))
    assert b"".join(parts) == b"1,a\n2,b\n3,c"
    assert parts[-1].endswith(b"3,c")


@pytest.mark.parametrize(
    ("compression", "pack"),
    [
        ("AUTO", lambda b: gzip.compress(b[:500]) + gzip.compress(b[500:])),  # two gzip members
        ("GZIP", gzip.compress),
        ("AUTO", bz2.compress),
        ("AUTO", lambda b: pa.compress(b, "zstd", asbytes=True)),
        ("AUTO", lambda b: b),
        ("NONE", lambda b: b),
    ],
)
def test_decompressed_stream_yields_the_content(compression: str, pack: object) -> None:
    data = _text(random.Random(7), 200)
    packed = pack(data)  # type: ignore[operator]
    stream = decompressed(_Dribble(packed), compression, "f.csv")
    out = b"".join(iter(lambda: stream.read(333), b""))
    assert out == data


def test_corrupt_gzip_is_the_files_error_in_snowflakes_words() -> None:
    packed = bytearray(gzip.compress(_text(random.Random(1), 2000)))
    packed[len(packed) // 2 :] = b"\x00" * (len(packed) - len(packed) // 2)
    stream = decompressed(io.BytesIO(bytes(packed)), "AUTO", "bad.csv.gz")
    with pytest.raises(FileLoadError) as caught:
        while stream.read(1 << 16):
            pass
    assert caught.value.message.startswith(
        "Invalid data encountered during decompression for file: 'bad.csv.gz'"
    )


class _Broken:
    def __init__(self, head: bytes) -> None:
        self.head = head

    def read(self, n: int = -1, /) -> bytes:
        if self.head:
            out, self.head = self.head, b""
            return out
        raise OSError("AWS Error NETWORK_CONNECTION during GetObject operation: curl error")


def test_a_transport_error_mid_stream_is_transient_not_the_files_fault() -> None:
    """Safeguard: S3 failing under the decompressor must replay the batch (TransportError, an
    OSError), not fail the file as 'invalid data'."""
    packed = gzip.compress(_text(random.Random(2), 5000))
    stream = decompressed(_Broken(packed[:200]), "AUTO", "f.csv.gz")
    with pytest.raises(TransportError):
        while stream.read(1 << 16):
            pass
