"""ORC: the file's own columns and types, binary as hex, broken files, stripe bombs, invalid UTF-8,
and the COPY transform over them."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.orc as orc
import pytest

from floe.catalog.models import Column, FileFormat, Table
from floe.errors import CompilationError, FileLoadError
from pipeline.chunks import PartTooLarge
from pipeline.formats import RawFile, read_raw
from pipeline.formats.orc_stripes import plan_orc
from tests.pipeline.formats.transform_support import VARIANT_TABLE, compile_for, load
from tests.security.attacks import bombs

pytestmark = pytest.mark.unit


def orc_bytes(table: pa.Table, **options: Any) -> bytes:
    buf = io.BytesIO()
    orc.write_table(table, buf, **options)
    return buf.getvalue()


def read(data: bytes, max_bytes: int | None = None, **options: Any) -> RawFile:
    return read_raw(data, FileFormat(type="ORC", **options), path="d/f.orc", max_bytes=max_bytes)


TABLE = pa.table(
    {
        "id": pa.array([1, 2], pa.int64()),
        "name": ["Ann", None],
        "amount": pa.array([Decimal("12.34"), Decimal("-1.00")], pa.decimal128(10, 2)),
        "day": [dt.date(2024, 1, 2), dt.date(2024, 1, 3)],
        "at": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5), None], pa.timestamp("ns")),
        "raw": pa.array([b"\x00\xff", None], pa.binary()),
        "loc": [{"city": "Paris", "zip": 75}, None],
        "tags": [["x", "y"], []],
        "counts": pa.array([[("a", 1)], []], pa.map_(pa.string(), pa.int64())),
    }
)


def test_orc_keeps_its_columns_and_types() -> None:
    raw = read(orc_bytes(TABLE))
    assert raw.table.column_names == TABLE.column_names
    assert (raw.rows_parsed, raw.errors, raw.format) == (2, [], "ORC")
    assert raw.row_numbers.to_pylist() == raw.line_numbers.to_pylist() == [1, 2]
    assert raw.table.to_pylist() == [
        {
            "id": 1,
            "name": "Ann",
            "amount": Decimal("12.34"),
            "day": dt.date(2024, 1, 2),
            "at": dt.datetime(2024, 1, 2, 3, 4, 5),
            "raw": "00FF",  # binary read as hex
            "loc": {"city": "Paris", "zip": 75},
            "tags": ["x", "y"],
            "counts": [("a", 1)],
        },
        {
            "id": 2,
            "name": None,
            "amount": Decimal("-1.00"),
            "day": dt.date(2024, 1, 3),
            "at": None,
            "raw": None,
            "loc": None,
            "tags": [],
            "counts": [],
        },
    ]


@pytest.mark.parametrize("compression", ["uncompressed", "zlib", "snappy", "zstd", "lz4"])
def test_orc_compression_is_read(compression: str) -> None:
    assert read(orc_bytes(TABLE, compression=compression)).num_rows == 2


def test_a_gzip_wrapped_orc_file_is_read() -> None:
    assert read(gzip.compress(orc_bytes(TABLE))).num_rows == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"id,name\n1,a\n", "not an ORC file"),
        (orc_bytes(TABLE)[:-20], "Error parsing the ORC file"),
        (b"ORC" + b"\x00" * 40, "Error parsing the ORC file"),
    ],
)
def test_a_file_that_is_not_valid_orc_fails_with_a_message_naming_it(data: bytes, message: str) -> None:
    with pytest.raises(FileLoadError, match=message) as caught:
        read(data)
    assert caught.value.file == "d/f.orc"


def test_an_empty_file_is_zero_rows() -> None:
    raw = read(b"")
    assert (raw.num_rows, raw.rows_parsed, raw.errors) == (0, 0, [])


def test_a_file_whose_stripes_decode_past_the_bound_fails() -> None:
    data = orc_bytes(pa.table({"s": ["x" * (1 << 20)] * 8}), compression="zstd", stripe_size=1 << 20)
    assert len(data) < 1 << 20
    with pytest.raises(PartTooLarge, match="ORC files are read whole"):
        read(data, max_bytes=4 << 20)
    assert read(data, max_bytes=64 << 20).num_rows == 8


def _with_bad_utf8() -> bytes:
    return orc_bytes(
        pa.table({"id": [1, 2, 3], "s": ["Ann", "Zo#", "Bo"]}), compression="uncompressed"
    ).replace(b"Zo#", b"Zo\xeb")


def test_a_string_that_is_not_utf8_is_an_error_of_its_row() -> None:
    raw = read(_with_bad_utf8())
    assert raw.table.column("id").to_pylist() == [1, 3]
    (err,) = raw.errors
    assert (err.row_number, err.message) == (2, "Invalid UTF8 detected in string 'Zo0xEB'")


def test_replace_invalid_characters_puts_the_replacement_character() -> None:
    raw = read(_with_bad_utf8(), replace_invalid_characters=True)
    assert raw.table.column("s").to_pylist() == ["Ann", "Zo\ufffd", "Bo"]
    assert raw.errors == []


# ---------------------------------------------------------------------------------------------
# Through the COPY transform


def test_transform_reads_columns_paths_casts_and_metadata() -> None:
    table = Table(
        name="D.S.O",
        columns=[
            Column(name="ID", type="NUMBER", precision=18, scale=0),
            Column(name="CITY", type="VARCHAR"),
            Column(name="AT", type="TIMESTAMP_NTZ"),
            Column(name="N", type="NUMBER", precision=18, scale=0),
            Column(name="FILE", type="VARCHAR"),
        ],
    )
    compiled = compile_for(
        table,
        type="ORC",
        select=["$1:ID", "UPPER($1:loc.city)", "$1:at", "$1:amount::number", "METADATA$FILENAME"],
    )
    rows, result = load(compiled, orc_bytes(TABLE), "in/o.orc")
    assert result.status == "LOADED", result
    assert rows == [
        {"ID": 1, "CITY": "PARIS", "AT": dt.datetime(2024, 1, 2, 3, 4, 5), "N": 12, "FILE": "in/o.orc"},
        {"ID": 2, "CITY": None, "AT": None, "N": -1, "FILE": "in/o.orc"},
    ]


def test_plain_copy_into_one_variant_column_loads_each_row_whole() -> None:
    rows, result = load(compile_for(VARIANT_TABLE, type="ORC"), orc_bytes(TABLE.slice(0, 1)), "f.orc")
    assert result.status == "LOADED", result
    row = json.loads(rows[0]["SRC"])
    assert (row["id"], row["raw"], row["loc"], row["counts"]) == (
        1,
        "00FF",
        {"city": "Paris", "zip": 75},
        {"a": 1},
    )


def test_a_dollar_two_is_refused_at_compile_time() -> None:
    with pytest.raises(CompilationError, match=r"ORC files have only \$1"):
        compile_for(VARIANT_TABLE, type="ORC", select=["$2"])


# ---------------------------------------------------------------------------------------------
# Decode bounds (decision 110): the lengths ORC's run-length encodings hold are decoded exactly

LENGTHS = {
    "short-repeat": [3] * 5000,
    "increasing": list(range(2000)),
    "decreasing": list(range(2000, 0, -1)),
    "random": [(i * 7919) % 41 for i in range(5000)],
    "outliers": [(i % 4) if i % 100 else 5000 for i in range(3000)],
}


@pytest.mark.parametrize("version", ["0.11", "0.12"])
@pytest.mark.parametrize("pattern", list(LENGTHS))
def test_list_lengths_are_decoded_exactly_in_both_run_length_encodings(version: str, pattern: str) -> None:
    """ORC 0.11 writes lengths in RLE version 1, 0.12 in version 2 (short repeats, direct runs, deltas
    and patched bases): the values under the lists are what the plan reserves, 9 bytes each."""
    lengths = LENGTHS[pattern]
    column = pa.array([[1] * n for n in lengths], pa.list_(pa.int64()))
    data = orc_bytes(pa.table({"l": column}), file_version=version, compression="zlib")
    source = orc.ORCFile(pa.BufferReader(data))
    plan = plan_orc(
        data, source.reader.serialized_file_tail(), source.compression, source.compression_size, 1 << 40
    )
    assert plan.nested == 9 * sum(lengths)


def test_a_dictionary_string_counts_as_long_as_its_rows_make_it() -> None:
    """10k rows of one 1,000-character dictionary string: 10 MB decoded from a few KB."""
    data = orc_bytes(
        pa.table({"s": pa.array(["x" * 1000]).take(pa.array([0] * 10_000))}),
        compression="zstd",
        dictionary_key_size_threshold=1.0,
    )
    assert len(data) < 10_000
    with pytest.raises(PartTooLarge, match=r"decodes to more than 4 MiB \(pipeline.max_part_bytes\)"):
        read(data, max_bytes=4 << 20)
    assert read(data, max_bytes=64 << 20).num_rows == 10_000


def test_a_list_whose_values_may_pass_the_bound_fails_unread() -> None:
    """One row holding a million NULL elements: 9 MB of values from a few hundred bytes, refused from
    the stripe's lengths before any batch is decoded."""
    data = bombs.orc_nested_nulls(1_000_000)
    with pytest.raises(PartTooLarge, match="decodes to more than 4 MiB"):
        read(data, max_bytes=4 << 20)
    assert read(data, max_bytes=64 << 20).num_rows == 1
