"""read_raw: decompression, the byte-order mark, bounded whole-file reads, the choice of reader."""

from __future__ import annotations

import bz2
import gzip
import io
import tracemalloc
import zlib
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import PartTooLarge, csv_size
from pipeline.formats import read_raw
from tests.pipeline.formats.helpers import csv, rows
from tests.security.attacks import bombs

pytestmark = pytest.mark.unit


def test_byte_order_mark_is_skipped() -> None:
    raw = csv(b"\xef\xbb\xbfa,b\n")
    assert rows(raw) == [("a", "b")]


@pytest.mark.parametrize("compression", ["AUTO", "GZIP"])
def test_gzip(compression: str) -> None:
    raw = csv(gzip.compress(b"1,a\n2,b\n"), compression=compression)
    assert rows(raw) == [("1", "a"), ("2", "b")]


def test_auto_detects_bz2_and_none_leaves_bytes_alone() -> None:
    assert rows(csv(bz2.compress(b"1,a\n"))) == [("1", "a")]
    assert rows(csv(b"1,a\n", compression="NONE")) == [("1", "a")]


@pytest.mark.parametrize(
    "payload",
    [gzip.compress(b"1,a\n" * 1000)[:-20], b"\x1f\x8b\x08\x00garbage-garbage-garbage"],
    ids=["truncated", "corrupt"],
)
def test_bad_gzip_is_a_file_load_error(payload: bytes) -> None:
    with pytest.raises(FileLoadError, match=r"decompression.*GZIP"):
        csv(payload)


def test_forced_gzip_on_plain_bytes_fails_cleanly() -> None:
    with pytest.raises(FileLoadError):
        csv(b"1,a\n", compression="GZIP")


@pytest.mark.parametrize("kind", ["CSV", "JSON", "PARQUET"])
def test_zero_byte_file_is_zero_rows(kind: str) -> None:
    raw = read_raw(b"", FileFormat(type=kind), path="empty")  # type: ignore[arg-type]
    assert raw.num_rows == 0
    assert raw.rows_parsed == 0
    assert raw.errors == []


# ------------------------------------------------------------------------------------------------
# Bounded whole-file reads (decompression bombs, issue 9)


@pytest.mark.parametrize(
    ("compression", "pack"),
    [
        ("AUTO", gzip.compress),
        ("AUTO", lambda b: gzip.compress(b[:7]) + gzip.compress(b[7:])),
        ("AUTO", bz2.compress),
        ("AUTO", lambda b: pa.compress(b, "zstd", asbytes=True)),
        ("BROTLI", lambda b: pa.compress(b, "brotli", asbytes=True)),
        ("DEFLATE", zlib.compress),
        ("RAW_DEFLATE", lambda b: zlib.compress(b, wbits=-15)),
        ("NONE", lambda b: b),
    ],
)
def test_whole_file_read_at_max_bytes_loads_and_one_byte_over_fails(compression: str, pack: Any) -> None:
    """The bound holds a file's text and what its rows cost once parsed (decision 110): at what they
    cost together it loads; a byte less, it fails, saying so; a byte less than its text, it fails
    while it inflates."""
    data = b"1,a\n2,b\n3,c\n"
    cost = csv_size(data, b"\n", b",")
    raw = csv(pack(data), compression=compression, max_bytes=cost)
    assert rows(raw) == [("1", "a"), ("2", "b"), ("3", "c")]
    with pytest.raises(PartTooLarge) as caught:
        csv(pack(data), compression=compression, max_bytes=cost - 1)
    assert caught.value.message == (
        f"File 'd/f.csv' decodes to more than {cost - 1} bytes (pipeline.max_part_bytes), and it is read "
        "whole; split it into smaller files, or raise pipeline.max_part_bytes if such files are expected."
    )
    with pytest.raises(PartTooLarge) as caught:
        csv(pack(data), compression=compression, max_bytes=len(data) - 1)
    assert caught.value.message == (
        "File 'd/f.csv' decompresses to more than 11 bytes (pipeline.max_part_bytes), and it is read "
        "whole; split it into smaller files, or raise pipeline.max_part_bytes if such files are expected."
    )


def test_a_whole_read_bomb_costs_the_bound_not_its_size() -> None:
    """Safeguard: a whole-file read decompresses incrementally and stops at the bound; before, a
    64 MiB gzip could inflate to 64 GiB in one worker."""
    bomb = bombs.gzip_bomb(256 * bombs.MiB, bombs.lines())
    tracemalloc.start()
    try:
        with pytest.raises(PartTooLarge):
            csv(bomb, max_bytes=4 * bombs.MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 24 * bombs.MiB, f"inflating the bomb took {peak / bombs.MiB:.1f} MiB"


def test_json_and_parquet_say_they_are_read_whole() -> None:
    docs = b'{"a": 1}\n' * 100
    with pytest.raises(
        PartTooLarge, match=r"more than 100 bytes \(pipeline.max_part_bytes\), and JSON files"
    ):
        read_raw(gzip.compress(docs), FileFormat(type="JSON"), path="d.json.gz", max_bytes=100)
    buf = io.BytesIO()
    # Uncompressed pages, so the file's own inflated size (its pages) is below its stored size.
    pq.write_table(pa.table({"a": list(range(1000))}), buf, compression="none")
    parquet = buf.getvalue()
    # Its values decode to 24 KB (8 bytes each, and each row's numbers): counted, not its pages.
    assert read_raw(gzip.compress(parquet), FileFormat(type="PARQUET"), path="p", max_bytes=64 << 10).num_rows
    with pytest.raises(PartTooLarge, match="and Parquet files are read whole"):
        read_raw(gzip.compress(parquet), FileFormat(type="PARQUET"), path="p", max_bytes=len(parquet) - 1)
    with pytest.raises(PartTooLarge, match="and Parquet files are read whole"):
        read_raw(parquet, FileFormat(type="PARQUET"), path="p", max_bytes=len(parquet) - 1)
