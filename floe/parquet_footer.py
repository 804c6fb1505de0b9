"""A Parquet file's schema, cut from its footer before pyarrow parses it (decision 117).

pyarrow parses a Parquet footer whole, row groups included, before it can say the file's schema:
Thrift's compact protocol stores a column chunk in a few bytes and pyarrow holds it in hundreds
(15 MB of footer, five million empty column chunks, took 3.4 GB), and its key-value metadata and
column orders are lists of any length too. INFER_SCHEMA needs only the schema, so ``schema_file``
walks the footer's first fields (version, schema, row count), which writers put before the row
groups, counts the schema's elements first, and hands pyarrow a footer of those fields and no row
group. The key-value metadata goes too (its ``ARROW:schema`` only changes an Arrow duration column
from NUMBER to VARIANT, Arrow's own type, which Snowflake does not read either).
"""

from __future__ import annotations

import struct

MAGIC = b"PAR1"

_LIST, _SET, _MAP, _STRUCT = 9, 10, 11, 12
_ROW_GROUPS = 4
_DEPTH = 32
"""Structs nested deeper are refused: a SchemaElement's logical type is three levels deep."""


class ParquetFooterError(ValueError):
    """The footer does not parse as Thrift's compact protocol (pyarrow would fail on it too)."""


class ParquetFooterTooLarge(ValueError):
    """Past a bound INFER_SCHEMA sets: ``what`` it counted, ``size`` of it, the ``limit``."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what}: {size} > {limit}")
        self.what = what
        self.size = size
        self.limit = limit


class _Reader:
    """Thrift's compact protocol over the footer, skipping what it does not keep."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ParquetFooterError("the footer is cut short")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = acc = 0
        while True:
            b = self.byte()
            acc |= (b & 0x7F) << shift
            if not b & 0x80:
                return acc
            shift += 7
            if shift > 63:
                raise ParquetFooterError("the footer holds a number longer than 64 bits")

    def list_header(self) -> tuple[int, int]:
        """A list's (or set's) element type and size."""
        head = self.byte()
        size = head >> 4
        return head & 0x0F, size if size != 15 else self.varint()

    def skip(self, kind: int, depth: int, in_list: bool = False) -> None:
        if depth > _DEPTH:
            raise ParquetFooterError("the footer nests too deeply")
        if kind in (1, 2):
            if in_list:
                self.byte()  # a list's booleans are a byte each; a field's are in its header
        elif kind == 3:
            self.byte()
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.pos += 8
        elif kind == 8:
            length = self.varint()
            self.pos += length
        elif kind in (_LIST, _SET):
            element, size = self.list_header()
            for _ in range(size):
                self.skip(element, depth + 1, in_list=True)
        elif kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4, depth + 1, in_list=True)
                    self.skip(types & 0x0F, depth + 1, in_list=True)
        elif kind == _STRUCT:
            self.struct(depth + 1)
        else:
            raise ParquetFooterError(f"the footer holds an unknown Thrift type {kind}")
        if self.pos > len(self.data):
            raise ParquetFooterError("the footer is cut short")

    def field(self, last: int) -> tuple[int, int]:
        """The next field's (number, type); (0, 0) at the struct's end."""
        head = self.byte()
        if head == 0:
            return 0, 0
        delta = head >> 4
        if delta:
            return last + delta, head & 0x0F
        n = self.varint()
        return (n >> 1) ^ -(n & 1), head & 0x0F

    def struct(self, depth: int) -> None:
        last = 0
        while True:
            number, kind = self.field(last)
            if not kind:
                return
            self.skip(kind, depth)
            last = number


def schema_file(tail: bytes, size: int, max_footer: int, max_elements: int) -> bytes:
    """A Parquet file holding the schema of the file whose last bytes are ``tail`` (``size`` bytes
    in all) and no row group, for pyarrow to read the schema from. ParquetFooterTooLarge when the
    footer passes ``max_footer`` bytes (or is not all in ``tail``) or its schema ``max_elements``
    elements (columns and nested fields, the root included); ParquetFooterError when it does not
    parse."""
    if len(tail) < 8 or tail[-4:] != MAGIC:
        encrypted = tail[-4:] == b"PARE"
        raise ParquetFooterError(
            "its footer is encrypted" if encrypted else "it does not end with Parquet's magic bytes"
        )
    length = struct.unpack("<I", tail[-8:-4])[0]
    if length + 8 > len(tail) or length > max_footer:
        if length + 12 > size:
            raise ParquetFooterError(f"its footer's length ({length} bytes) is more than the file holds")
        raise ParquetFooterTooLarge("footer", length, max_footer)
    footer = tail[-8 - length : -8]
    reader = _Reader(footer)
    last = 0
    while True:
        start = reader.pos
        number, kind = reader.field(last)
        if not kind or number >= _ROW_GROUPS:
            break  # the row groups, and all that follows them, are left out
        if number == 2 and kind == _LIST:
            element, count = reader.list_header()
            if count > max_elements:
                raise ParquetFooterTooLarge("schema elements", count, max_elements)
            for _ in range(count):
                reader.skip(element, 1, in_list=True)
        else:
            reader.skip(kind, 1)
        last = number
    delta = _ROW_GROUPS - last
    header = bytes([delta << 4 | _LIST]) if 0 < delta <= 15 else bytes([_LIST, _ROW_GROUPS << 1])
    kept = footer[:start] + header + bytes([_STRUCT]) + b"\x00"  # no row group, then the struct's end
    return MAGIC + kept + struct.pack("<I", len(kept)) + MAGIC
