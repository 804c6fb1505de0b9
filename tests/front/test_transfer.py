"""The client's side of PUT and GET that needs no API: which local files a PUT names (a glob in
the file name, matched under RE2), how their compression is told, and how they are gzipped on the
way. The transfers themselves: tests/services/test_stages.py."""

from __future__ import annotations

import bz2
import gzip
import zlib
from pathlib import Path

import pytest

from front.client import StatementRejected
from front.transfer import _pieces, glob_pattern, local_files, source_compression
from tests.cpu_time import cpu_seconds

pytestmark = pytest.mark.unit


def touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_glob_names_the_files_of_one_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("orders_001.csv", "orders_101.csv", "orders_002.csv", "orders_001.csv.bak", "a+b.csv"):
        touch(tmp_path / name)
    touch(tmp_path / "sub" / "orders_201.csv")
    # Snowflake's example: PUT file:///tmp/data/orders_*01.csv
    assert [p.name for p in local_files(f"{tmp_path}/orders_*01.csv")] == ["orders_001.csv", "orders_101.csv"]
    assert [p.name for p in local_files(f"{tmp_path}/orders_00?.csv")] == ["orders_001.csv", "orders_002.csv"]
    assert [p.name for p in local_files(f"{tmp_path}/a+b.csv")] == ["a+b.csv"]  # literal, not a regex
    assert [p.name for p in local_files(f"{tmp_path}/a+b*")] == ["a+b.csv"]
    monkeypatch.chdir(tmp_path)
    assert local_files("sub/orders_201.csv") == [tmp_path / "sub" / "orders_201.csv"]


def test_what_put_refuses(tmp_path: Path) -> None:
    with pytest.raises(StatementRejected, match="File doesn't exist"):
        local_files(f"{tmp_path}/none*.csv")
    with pytest.raises(StatementRejected, match="File doesn't exist"):
        local_files(f"{tmp_path}/missing.csv")
    with pytest.raises(StatementRejected, match="wildcards in directories"):
        local_files(f"{tmp_path}/*/a.csv")


def test_a_glob_is_matched_in_linear_time(tmp_path: Path) -> None:
    name = "a" * 200
    touch(tmp_path / name)
    glob = "*a" * 60 + "b"  # exponential for a backtracking matcher

    def match() -> None:
        with pytest.raises(StatementRejected):
            local_files(f"{tmp_path}/{glob}")

    # A bound against exponential blowup, not a performance figure: a backtracking matcher would
    # take years on this glob, the linear one microseconds.
    assert cpu_seconds(match, repeat=1) < 1.0
    assert glob_pattern("a.*?") == r"a\.[^/]*[^/]"


def test_source_compression_by_name_then_by_first_bytes(tmp_path: Path) -> None:
    assert source_compression(touch(tmp_path / "a.csv.gz", b"anything"), "AUTO_DETECT") == "GZIP"
    assert source_compression(touch(tmp_path / "a.csv.bz2"), "AUTO_DETECT") == "BZ2"
    assert source_compression(touch(tmp_path / "a.csv.zst"), "AUTO_DETECT") == "ZSTD"
    assert source_compression(touch(tmp_path / "a.csv.br"), "AUTO_DETECT") == "BROTLI"
    assert source_compression(touch(tmp_path / "g", gzip.compress(b"1")), "AUTO_DETECT") == "GZIP"
    assert source_compression(touch(tmp_path / "b", bz2.compress(b"1")), "AUTO_DETECT") == "BZ2"
    assert source_compression(touch(tmp_path / "p.parquet", b"PAR1...."), "AUTO_DETECT") == "PARQUET"
    assert source_compression(touch(tmp_path / "plain.csv", b"id\n1\n"), "AUTO_DETECT") == "NONE"
    assert source_compression(tmp_path / "plain.csv", "BROTLI") == "BROTLI"  # as declared


def test_a_file_is_gzipped_as_it_is_read(tmp_path: Path) -> None:
    data = b"id,name\n" + b"1,a\n" * 300_000
    path = touch(tmp_path / "a.csv", data)
    moved: list[int] = []
    sizes: list[int] = []
    sent = b"".join(_pieces(path, True, moved.append, sizes))
    assert gzip.decompress(sent) == data and sum(moved) == len(data) and sizes == [len(sent)]
    assert b"".join(_pieces(path, True, lambda n: None, [])) == sent  # the same bytes each time
    assert zlib.decompress(sent, 31) == data
    raw: list[int] = []
    assert b"".join(_pieces(path, False, lambda n: None, raw)) == data and raw == [len(data)]
