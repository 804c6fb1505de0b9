"""Parquet: the file's own columns, unreadable files, strings that are not UTF-8, page bombs."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import PartTooLarge
from pipeline.formats import read_raw

pytestmark = pytest.mark.unit


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def test_parquet_keeps_its_columns_and_types() -> None:
    data = parquet_bytes(pa.table({"Id": pa.array([1, 2], pa.int32()), "name": ["a", None]}))
    raw = read_raw(data, FileFormat(type="PARQUET"), path="f.parquet")
    assert raw.table.column_names == ["Id", "name"]
    assert raw.table.schema.field("Id").type == pa.int32()
    assert raw.row_numbers.to_pylist() == [1, 2]
    assert raw.rows_parsed == 2


def test_truncated_parquet_is_a_file_load_error() -> None:
    data = parquet_bytes(pa.table({"a": list(range(100))}))
    with pytest.raises(FileLoadError, match="parquet"):
        read_raw(data[: len(data) // 2], FileFormat(type="PARQUET"), path="f.parquet")


def test_truncated_parquet_message_does_not_mention_floe_internals() -> None:
    """Safeguard: the error a user sees names the file's problem, not Floe's in-memory buffer."""
    data = parquet_bytes(pa.table({"a": list(range(100))}))
    with pytest.raises(FileLoadError) as caught:
        read_raw(data[: len(data) // 2], FileFormat(type="PARQUET"), path="f.parquet")
    assert caught.value.message == (
        "Error parsing the parquet file: Parquet magic bytes not found in footer. "
        "Either the file is corrupted or this is not a parquet file."
    )


def test_parquet_column_name_that_is_not_utf8_is_a_file_load_error() -> None:
    """Safeguard: pyarrow decodes column names lazily; a bad one must fail the file, not the batch."""
    data = parquet_bytes(pa.table({"colXname": [1, 2]})).replace(b"colXname", b"col\x85name")
    with pytest.raises(FileLoadError, match="column name is not UTF-8"):
        read_raw(data, FileFormat(type="PARQUET"), path="f.parquet")


def test_parquet_string_that_is_not_utf8_is_an_error_of_its_row() -> None:
    """Safeguard: pyarrow does not check Parquet strings; an invalid one loaded into a blob would
    make every later query of the table fail, so its row is an error and the others load."""
    names = pa.array([b"Ann", b"Zo\xeb", b"Bo"], pa.binary())
    broken = pa.Array.from_buffers(pa.string(), 3, names.buffers())
    table = pa.table({"id": [1, 2, 3], "name": broken, "tags": pa.array([["x"], ["y"], ["ü"]])})
    raw = read_raw(parquet_bytes(table), FileFormat(type="PARQUET"), path="f.parquet")
    assert raw.table.column("id").to_pylist() == [1, 3]
    assert raw.row_numbers.to_pylist() == [1, 3]
    (err,) = raw.errors
    assert (err.row_number, err.line, err.message) == (2, 2, "Invalid UTF8 detected in string 'Zo0xEB'")
    assert raw.rows_parsed == 3


def test_a_parquet_file_whose_pages_inflate_past_the_bound_fails_unread() -> None:
    """Parquet's own page compression: 64 MiB of one repeated string zstd-compress to a few KiB."""
    buf = io.BytesIO()
    value = "x" * (1 << 20)
    pq.write_table(
        pa.table({"s": [value] * 64}), buf, compression="zstd", use_dictionary=False, row_group_size=64
    )
    bomb = buf.getvalue()
    assert len(bomb) < 1 << 20  # small as stored
    with pytest.raises(PartTooLarge, match="and Parquet files are read whole"):
        read_raw(bomb, FileFormat(type="PARQUET"), path="bomb.parquet", max_bytes=16 << 20)
    assert read_raw(bomb, FileFormat(type="PARQUET"), path="bomb.parquet", max_bytes=128 << 20).num_rows == 64
