"""Reading one staged file's columns within bounds (``floe.file_schema``): compressions, encodings,
samples a limit cuts, each format's schema, and a CSV tokenizer that stays linear on any text.
That it reads CSV as the loader does: tests/pipeline/formats/test_csv_header.py."""

from __future__ import annotations

import bz2
import gzip
import io
import zlib
from collections.abc import Callable

import fastavro
import pyarrow as pa
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq
import pytest
import zstandard

from floe.catalog.models import FileFormat
from floe.file_schema import (
    CsvSample,
    FileSchemaError,
    Limits,
    Readable,
    avro_schema,
    csv_records,
    file_columns,
    json_records,
    prefix,
)
from tests.cpu_time import cpu_seconds

pytestmark = pytest.mark.unit

LIMITS = Limits(sample_bytes=1 << 20, max_records=None, tail_bytes=1 << 20)


class Bytes:
    """A staged file in memory, counting what is read of it."""

    def __init__(self, data: bytes, path: str = "d/f") -> None:
        self.path = path
        self.data = data
        self.size = len(data)
        self.tails: list[int] = []

    def stream(self) -> Readable:
        return io.BytesIO(self.data)

    def tail(self, n: int) -> bytes:
        self.tails.append(n)
        return self.data[-n:] if n < self.size else self.data


def columns(data: bytes, limits: Limits = LIMITS, **fmt: object) -> list[tuple[str, str, bool]]:
    found = file_columns(Bytes(data), FileFormat(**fmt), limits)  # type: ignore[arg-type]
    return [(c.name, c.type.render() if c.type else "-", c.nullable) for c in found.columns]


CSV = b"id,amount,day\n1,2.5,2024-01-02\n22,,2024-01-03\n"
COMPRESSED: dict[str, Callable[[bytes], bytes]] = {
    "GZIP": lambda b: gzip.compress(b[:10]) + gzip.compress(b[10:]),  # two members, as gzip -d reads them
    "BZ2": bz2.compress,
    "ZSTD": lambda b: zstandard.ZstdCompressor().compress(b),
    "DEFLATE": zlib.compress,
    "RAW_DEFLATE": lambda b: zlib.compress(b, wbits=-15),
    "BROTLI": lambda b: pa.compress(b, "brotli", asbytes=True),
    "NONE": lambda b: b,
}


@pytest.mark.parametrize("method", list(COMPRESSED))
def test_every_compression(method: str) -> None:
    data = COMPRESSED[method](CSV)
    expected = [("id", "NUMBER(2, 0)", True), ("amount", "NUMBER(2, 1)", True), ("day", "DATE", True)]
    assert columns(data, compression=method, parse_header=True) == expected
    if method in ("GZIP", "BZ2", "ZSTD", "NONE"):  # what AUTO recognises by its magic bytes
        assert columns(data, parse_header=True) == expected


def test_a_corrupt_file_fails_with_the_decompressors_words() -> None:
    with pytest.raises(FileSchemaError, match=r"Invalid data encountered during decompression.*'GZIP'"):
        prefix(io.BytesIO(b"\x1f\x8b" + b"\x00" * 40), "AUTO", 100)


def test_a_sample_stops_at_its_limit_and_drops_the_record_it_cuts() -> None:
    data = b"n\n" + b"".join(b"%d\n" % (10**i) for i in range(30))
    limits = Limits(sample_bytes=40, max_records=None, tail_bytes=0)
    sample, cut = prefix(io.BytesIO(gzip.compress(data)), "AUTO", 40)
    assert (len(sample), cut) == (40, True)
    # 1, 10, ... 10**6 fit in 40 bytes, 10**7 is cut short: the widest whole value has 7 digits.
    assert columns(data, limits, parse_header=True) == [("n", "NUMBER(7, 0)", True)]
    assert columns(data, Limits(1 << 20, 3, 0), parse_header=True) == [("n", "NUMBER(3, 0)", True)]


def test_csv_encodings_headers_and_skipped_lines() -> None:
    text = "name;größe\nZoë;1\n"  # Python's UTF-16 writes a byte-order mark, which is dropped
    assert columns(text.encode("utf-16"), encoding="UTF16", field_delimiter=";", parse_header=True) == [
        ("name", "TEXT", True),
        ("größe", "NUMBER(1, 0)", True),
    ]
    assert columns(b"junk\nx,y\n1,2\n", skip_header=1) == [("c1", "TEXT", True), ("c2", "TEXT", True)]
    with pytest.raises(FileSchemaError, match="SKIP_HEADER option is not supported with PARSE_HEADER"):
        columns(b"a\n1\n", skip_header=1, parse_header=True)


def test_csv_sample_reads_quotes_escapes_and_any_delimiters() -> None:
    fmt = FileFormat(
        field_delimiter="||",
        record_delimiter="~~",
        field_optionally_enclosed_by='"',
        escape="\\",
        null_if=["NULL"],
        trim_space=True,
    )
    text = ' "a||b" ||x\\||y~~ "q\\"z""w" tail||NULL ~~\\N||"~~"'
    assert [values for values, _ in CsvSample(fmt).records(text)] == [
        ["a||b", "x||y"],
        ['q"z"w tail', None],
        ["\\N", "~~"],
    ]
    names, rows = csv_records(
        "a||b~~1||2~~~~3", fmt.model_copy(update={"parse_header": True}), cut=False, limit=None
    )
    assert (names, list(rows)) == (["a", "b"], [["1", "2"], ["3"]])  # the blank record is left out


def test_json_documents_arrays_and_errors() -> None:
    fmt = FileFormat(type="JSON", strip_outer_array=True)
    docs = list(json_records(b' [ {"a": 1}, 2, {"b": [1, 2]} ] [{"c": null}]', fmt, cut=False, limit=None))
    assert docs == [{"a": "1"}, {"b": ["1", "2"]}, {"c": None}]
    ndjson = FileFormat(type="JSON")
    assert list(json_records(b'{"a": 1}\n{"a": 2', ndjson, cut=True, limit=None)) == [{"a": "1"}]
    with pytest.raises(FileSchemaError, match="Error parsing JSON: Expecting value"):
        list(json_records(b'{"a": 1}\n{"a": }\n{"a": 2}\n', ndjson, cut=False, limit=None))
    assert columns(b'{"a": 1, "b": "x"}\n{"a": 1.5e3}\n', type="JSON") == [
        ("a", "REAL", True),
        ("b", "TEXT", True),
    ]


def test_avro_reads_only_the_header() -> None:
    buf = io.BytesIO()
    schema = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}]}
    fastavro.writer(buf, schema, [{"id": i} for i in range(1000)], codec="null")
    data = buf.getvalue()
    assert avro_schema(data[:400]) == {
        "type": "record",
        "name": "r",
        "fields": [{"name": "id", "type": "long"}],
    }
    assert columns(gzip.compress(data), type="AVRO", compression="GZIP") == [("id", "NUMBER(38, 0)", False)]
    with pytest.raises(FileSchemaError, match="not an Avro object container file"):
        avro_schema(b"PAR1")
    with pytest.raises(FileSchemaError, match="cut short or invalid"):
        avro_schema(data[:20])


def test_parquet_and_orc_read_their_footers_only() -> None:
    table = pa.table({"a": pa.array(range(50_000), pa.int64()), "s": pa.array(["x"] * 50_000)})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    source = Bytes(buf.getvalue())
    found = file_columns(source, FileFormat(type="PARQUET"), Limits(0, None, 4096))
    assert [(c.name, c.type.render() if c.type else "") for c in found.columns] == [
        ("a", "NUMBER(38, 0)"),
        ("s", "TEXT"),
    ]
    assert source.tails == [4096] and source.size > 4096 * 10
    with pytest.raises(FileSchemaError, match=r"footer .* is larger than the 16 bytes"):
        file_columns(source, FileFormat(type="PARQUET"), Limits(0, None, 16))
    orc = io.BytesIO()
    pa_orc.write_table(table, orc)
    found = file_columns(Bytes(orc.getvalue()), FileFormat(type="ORC"), Limits(0, None, 4096))
    assert [c.name for c in found.columns] == ["a", "s"]
    with pytest.raises(FileSchemaError, match="Error parsing the Parquet file"):
        file_columns(Bytes(b"not parquet at all"), FileFormat(type="PARQUET"), LIMITS)


ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "quotes": lambda n: '"' * n,
    "unclosed quote": lambda n: '"' + "a" * n,
    "escapes": lambda n: "\\" * n,
    "escaped quotes": lambda n: '"' + '\\"' * (n // 2),
    "delimiters": lambda n: "|" * n,
    "half delimiters": lambda n: "|~" * (n // 2),
    "blanks before a quote": lambda n: " " * n + '"x"',
    "newlines": lambda n: "\r" * n,
}


@pytest.mark.parametrize("case", list(ADVERSARIAL))
def test_the_csv_sample_tokenizer_runs_in_linear_time(case: str) -> None:
    """Doubling the text may not more than triple the CPU time (ratios of thread CPU time, not
    wall-clock limits)."""
    fmt = FileFormat(field_delimiter="||", field_optionally_enclosed_by='"', escape="\\", trim_space=True)

    def reading(n: int) -> Callable[[], object]:
        text = ADVERSARIAL[case](n)
        return lambda: sum(1 for _ in CsvSample(fmt).records(text))

    for _ in range(2):  # other processes share the machine: a real super-linear case fails twice
        small, large = cpu_seconds(reading(40_000)), cpu_seconds(reading(80_000))
        if large <= 3 * small + 0.005:
            return
    pytest.fail(f"{case}: super-linear: {small * 1000:.1f} ms, then {large * 1000:.1f} ms")
