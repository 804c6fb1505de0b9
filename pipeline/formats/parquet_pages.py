"""What a Parquet row group may decode to, from its page headers, before pyarrow decodes it.

The footer's sizes are the writer's word: a file whose footer says a column chunk inflates to 1,000
bytes may hold a page that inflates to 192 MiB, and pyarrow allocates each page by its own header.
So each column chunk's page headers (Thrift's compact protocol, a few dozen bytes each) are read
here, as pyarrow will read them: from the chunk's first page, skipping each page's body, until the
data pages hold the chunk's value count. They give the true inflated size of each page, and how
many values (definition and repetition levels) the pages hold.

``plan_group`` turns them into the most a row group can cost while one batch of its rows is decoded
(``GroupPlan``): its pages in flight, its values of list and map columns (a single row may hold all
of them), its strings as stored, and a batch of rows of its other columns at a fixed width each.
Dictionary-encoded strings are not in the plan: they are decoded to indices and counted, expanded,
before they are expanded (``pipeline.formats.decoded``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow.parquet as pq

from floe.errors import FileLoadError
from pipeline.formats.decoded import BATCH_BYTES, MAX_BATCH_ROWS, ROW_BYTES

ReadAt = Callable[[int, int], bytes]
"""``read_at(offset, n)``: n bytes of the file from offset (fewer at its end)."""

_DICTIONARY_PAGE = 2
_INDEX_PAGE = 1
_DATA_PAGES = (0, 3)
_DELTA_BYTE_ARRAY = 7
_PADDING = 100
"""pyarrow reads this much past a chunk for writers that understated a dictionary page's size."""

_WIDTH = {"BOOLEAN": 1, "INT32": 16, "INT64": 16, "INT96": 16, "FLOAT": 8, "DOUBLE": 8, "BYTE_ARRAY": 32}
"""Most bytes one value of a physical type decodes to in Arrow (an INT32 or INT64 may be a 16-byte
decimal; a BYTE_ARRAY a 32-byte decimal, or a string's index and 8-byte offset; its text is counted
apart)."""


class _Thrift:
    """Just enough of Thrift's compact protocol to read a PageHeader and skip what it does not need."""

    def __init__(self, data: bytes | memoryview, pos: int) -> None:
        self.data = data
        self.pos = pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ValueError("a page header runs past its column chunk")
        b = self.data[self.pos]
        self.pos += 1
        return int(b)

    def varint(self) -> int:
        shift = acc = 0
        while True:
            b = self.byte()
            acc |= (b & 0x7F) << shift
            if not b & 0x80:
                return acc
            shift += 7
            if shift > 70:
                raise ValueError("a page header holds a number longer than 64 bits")

    def integer(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, kind: int, depth: int = 0) -> None:
        if kind in (1, 2):  # booleans are in the field header
            return
        if kind == 3:
            self.byte()
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.pos += 8
        elif kind == 8:
            length = self.varint()  # read before pos is, which it moves
            self.pos += length
        elif kind in (9, 10):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            for _ in range(size):
                self.skip(head & 0x0F, depth + 1)
        elif kind == 11:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4, depth + 1)
                    self.skip(types & 0x0F, depth + 1)
        elif kind == 12:
            self.struct(depth + 1)
        else:
            raise ValueError(f"a page header holds an unknown Thrift type {kind}")

    def struct(self, depth: int = 0) -> dict[int, object]:
        """A struct's fields: integers as ints, nested structs as dicts, anything else skipped."""
        if depth > 64:
            raise ValueError("a page header is nested too deeply")
        out: dict[int, object] = {}
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return out
            kind = head & 0x0F
            delta = head >> 4
            field = last + delta if delta else self.integer()
            last = field
            if kind in (5, 6):
                out[field] = self.integer()
            elif kind == 12:
                out[field] = self.struct(depth + 1)
            else:
                self.skip(kind, depth)


@dataclass(frozen=True)
class ChunkPages:
    """A column chunk's pages as their headers describe them."""

    inflated: int
    """Bytes all its pages take once decompressed."""
    stored: int
    """Bytes of the chunk as stored (what pyarrow reads of the file for it)."""
    largest: int
    """The largest data page, decompressed."""
    dictionary: int
    """The dictionary page, decompressed (0: none)."""
    values: int
    """Values (level entries) its data pages hold, up to the chunk's value count."""
    prefixed: bool
    """A data page is DELTA_BYTE_ARRAY: each string shares a prefix with the one before, so a string
    may be as long as its page (and a page of them far longer)."""


def chunk_range(column: pq.ColumnChunkMetaData) -> tuple[int, int]:
    """Where pyarrow reads a column chunk: its first page (the dictionary's when it comes first)
    and the footer's stored size."""
    start = int(column.data_page_offset)
    dictionary = column.dictionary_page_offset
    if column.has_dictionary_page and dictionary is not None and 0 < dictionary < start:
        start = int(dictionary)
    return start, int(column.total_compressed_size)


def chunk_pages(read_at: ReadAt, column: pq.ColumnChunkMetaData, path: str) -> ChunkPages:
    """Read one column chunk's page headers (the file's bytes through ``read_at``)."""
    start, length = chunk_range(column)
    if start < 0 or length < 0:
        raise FileLoadError("Error parsing the parquet file: a column chunk has a negative offset", file=path)
    data = read_at(start, length + _PADDING)
    wanted = int(column.num_values)
    inflated = largest = dictionary = values = 0
    prefixed = False
    pos = 0
    try:
        while values < wanted and pos < len(data):
            header = _Thrift(data, pos)
            fields = header.struct()
            kind, size, stored = fields.get(1), fields.get(2), fields.get(3)
            if not isinstance(size, int) or not isinstance(stored, int) or size < 0 or stored < 0:
                raise ValueError("a page header lacks its sizes")
            pos = header.pos + stored
            if pos > len(data):
                raise ValueError("a page runs past its column chunk")
            inflated += size
            if kind == _DICTIONARY_PAGE:
                dictionary = max(dictionary, size)
            elif kind in _DATA_PAGES:
                page = fields.get(5 if kind == 0 else 8)
                count = page.get(1) if isinstance(page, dict) else None
                if not isinstance(page, dict) or not isinstance(count, int) or count < 0:
                    raise ValueError("a data page header lacks its value count")
                values += count
                largest = max(largest, size)
                prefixed = prefixed or page.get(4 if kind == 3 else 2) == _DELTA_BYTE_ARRAY
            elif kind != _INDEX_PAGE:
                raise ValueError(f"a page has an unknown type {kind}")
    except ValueError as exc:
        raise FileLoadError(f"Error parsing the parquet file: {exc}", file=path) from exc
    return ChunkPages(inflated, length, largest, dictionary, values, prefixed)


@dataclass(frozen=True)
class GroupPlan:
    """What reading one row group costs at most, besides the values already read."""

    rows: int
    batch_rows: int
    """Rows decoded at a time."""
    inflated: int
    """Its pages' decompressed size (the footer's ``total_uncompressed_size``, as the pages say)."""
    reserve: int
    """Most bytes decoding one batch takes before its values are counted: the pages in flight (each
    chunk as stored, its largest page and its dictionary), the list and map values of the whole
    group, its strings as stored, and a batch of rows at a fixed width a column."""
    nested: int
    """The list and map values' part of ``reserve``."""


def plan_group(read_at: ReadAt, parquet: pq.ParquetFile, g: int, path: str) -> GroupPlan:
    """Read row group ``g``'s page headers and bound what it decodes to (``GroupPlan``)."""
    md = parquet.metadata
    schema = parquet.schema
    group = md.row_group(g)
    rows = int(group.num_rows)
    inflated = in_flight = nested = text = 0
    per_row = ROW_BYTES
    for c in range(group.num_columns):
        meta = group.column(c)
        pages = chunk_pages(read_at, meta, path)
        leaf = schema.column(c)
        inflated += pages.inflated
        in_flight += pages.stored + pages.largest + pages.dictionary
        width = _WIDTH.get(leaf.physical_type, 0)
        if leaf.physical_type == "FIXED_LEN_BYTE_ARRAY":
            width = max(int(leaf.length or 0), 32)
        width += 1 + 8 * leaf.max_repetition_level  # validity, then an offset per list level
        if pages.prefixed:
            width += pages.largest
        if leaf.max_repetition_level:
            nested += pages.values * width
        else:
            per_row += width
        if leaf.physical_type == "BYTE_ARRAY":
            text += pages.inflated  # no string outgrows the pages that hold it, but a dictionary's
    batch = max(1, min(MAX_BATCH_ROWS, rows, BATCH_BYTES // per_row))
    reserve = in_flight + nested + text + batch * per_row
    return GroupPlan(rows, batch, inflated, reserve, nested)
