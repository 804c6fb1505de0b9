"""What an ORC file's stripes may decode to, from their own structure, before liborc decodes them.

pyarrow reads an ORC stripe whole (``read_stripe``) or in batches of rows; either way a batch is
decoded before it can be counted, and ORC's encodings make a batch from almost nothing: a dictionary
index per row for a string of any length, a run-length-encoded list length for a list of any
length, NULLs from a run of present bits. So each stripe is read here first (decision 110):

- the file's tail (postscript and footer, uncompressed by liborc: ``serialized_file_tail``) gives
  the stripes and the type tree; each stripe's footer (compressed like its streams) gives its
  streams and their encodings;
- a stream's decompressed size is counted by decompressing it a megabyte at a time, stopping past
  the bound (a chunk inflates to at most the file's block size, which liborc enforces);
- the lengths of list and map columns and of dictionary entries are decoded (ORC's integer
  run-length encodings, version 1 and 2), so the values under a list and the longest string a
  dictionary index can stand for are known exactly.

``plan_orc`` turns them into a batch size and what decoding one batch may take at most.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from floe.orc_footer import OrcStructureError as OrcStructureError
from floe.orc_footer import inflate as _inflate
from floe.orc_footer import inflated_size as inflated_size
from floe.orc_footer import int_field as _int
from floe.orc_footer import message as _message
from floe.orc_footer import packed as _packed
from floe.orc_footer import tail_size as tail_size
from floe.orc_footer import varint as _varint
from pipeline.formats.decoded import MAX_BATCH_ROWS, ROW_BYTES

# ---------------------------------------------------------------------------------------------
# Integer run-length encodings (lengths are unsigned)

_WIDTHS: list[int] = [*range(1, 25), 26, 28, 30, 32, 40, 48, 56, 64]


def _unpack(data: bytes, pos: int, count: int, width: int) -> tuple[list[int], int]:
    """``count`` big-endian values of ``width`` bits each from pos; returns them and the byte after."""
    nbytes = (count * width + 7) // 8
    if pos + nbytes > len(data):
        raise OrcStructureError("a run of integers runs past its stream")
    bits = int.from_bytes(data[pos : pos + nbytes], "big")
    spare = nbytes * 8 - count * width
    mask = (1 << width) - 1
    values = [(bits >> (spare + (count - 1 - i) * width)) & mask for i in range(count)]
    return values, pos + nbytes


def _rle_v1(data: bytes) -> Iterator[tuple[int, int, int]]:
    """ORC's integer RLE version 1, as (first value, count, delta) runs."""
    pos = 0
    while pos < len(data):
        control = data[pos]
        pos += 1
        if control < 128:
            if pos >= len(data):
                raise OrcStructureError("a run of integers runs past its stream")
            delta = data[pos] - 256 if data[pos] > 127 else data[pos]
            base, pos = _varint(data, pos + 1)
            yield base, control + 3, delta
        else:
            for _ in range(256 - control):
                value, pos = _varint(data, pos)
                yield value, 1, 0


def _rle_v2(data: bytes) -> Iterator[tuple[int, int, int]]:
    """ORC's integer RLE version 2 (unsigned), as (first value, count, delta) runs."""
    pos = 0
    while pos < len(data):
        head = data[pos]
        kind = head >> 6
        if kind == 0:  # SHORT_REPEAT
            width = ((head >> 3) & 7) + 1
            value = int.from_bytes(data[pos + 1 : pos + 1 + width], "big")
            pos += 1 + width
            yield value, (head & 7) + 3, 0
            continue
        if pos + 2 > len(data):
            raise OrcStructureError("a run of integers runs past its stream")
        count = ((head & 1) << 8 | data[pos + 1]) + 1
        code = (head >> 1) & 31
        if kind == 1:  # DIRECT
            values, pos = _unpack(data, pos + 2, count, _WIDTHS[code])
            for v in values:
                yield v, 1, 0
        elif kind == 2:  # PATCHED_BASE
            if pos + 4 > len(data):
                raise OrcStructureError("a run of integers runs past its stream")
            third, fourth = data[pos + 2], data[pos + 3]
            base_width = ((third >> 5) & 7) + 1
            patch_width = _WIDTHS[third & 31]
            gap_width = ((fourth >> 5) & 7) + 1
            patches = fourth & 31
            pos += 4
            raw = int.from_bytes(data[pos : pos + base_width], "big")
            sign = 1 << (base_width * 8 - 1)
            base = -(raw & ~sign) if raw & sign else raw
            pos += base_width
            width = _WIDTHS[code]
            values, pos = _unpack(data, pos, count, width)
            entries, pos = _unpack(data, pos, patches, _closest(patch_width + gap_width))
            index = 0
            for entry in entries:
                index += entry >> patch_width
                if index < count:
                    values[index] |= (entry & ((1 << patch_width) - 1)) << width
            for v in values:
                yield base + v, 1, 0
        else:  # DELTA
            base, pos = _varint(data, pos + 2)
            delta_raw, pos = _varint(data, pos)
            delta = (delta_raw >> 1) ^ -(delta_raw & 1)
            if code == 0:
                yield base, count, delta
                continue
            deltas, pos = _unpack(data, pos, count - 2, _WIDTHS[code])
            value = base
            yield value, 1, 0
            value += delta
            yield value, 1, 0
            step = 1 if delta >= 0 else -1
            for d in deltas:
                value += step * d
                yield value, 1, 0


def _closest(width: int) -> int:
    """The narrowest of ORC's fixed bit widths that holds ``width`` bits."""
    for w in _WIDTHS:
        if w >= width:
            return w
    raise OrcStructureError(f"a patch is {width} bits wide")


def lengths_sum_and_max(data: bytes, v2: bool) -> tuple[int, int]:
    """Sum and largest of an unsigned integer stream (list lengths, dictionary entry lengths)."""
    total = largest = 0
    for first, count, delta in (_rle_v2 if v2 else _rle_v1)(data):
        if count < 0 or first < 0:
            raise OrcStructureError("a length is negative")
        last = first + (count - 1) * delta
        total += count * (first + last) // 2
        largest = max(largest, first, last)
    return total, largest


# ---------------------------------------------------------------------------------------------
# The plan

BATCH_BYTES = 1024 * 1024
"""Decoded bytes of one batch of rows (less than Parquet's: pyarrow's ORC reader builds each batch
through growing buffers, and its peak memory is several batches)."""

STREAM_BYTES = 32 * 1024
"""What liborc holds for each stream it reads besides its decompressed chunk (measured: a 500-column
stripe of NULLs, 1,000 streams, took 30 MB before its first batch)."""


_PRESENT, _DATA, _LENGTH, _DICTIONARY_DATA = 0, 1, 2, 3
_BOOLEAN, _STRING, _BINARY, _LIST, _MAP, _STRUCT, _UNION = 0, 7, 8, 10, 11, 12, 13
_VARCHAR, _CHAR = 16, 17
_TEXT = (_STRING, _BINARY, _VARCHAR, _CHAR)
_WIDTH = {1: 1, 2: 2, 3: 4, 4: 8, 5: 4, 6: 8, 9: 16, 14: 16, 15: 4, 18: 16}
"""Bytes one value of an ORC type takes in Arrow (a timestamp with its nanoseconds, a decimal as
decimal128); text takes an 8-byte offset here, its bytes apart."""


@dataclass(frozen=True)
class OrcPlan:
    batch_rows: int
    """Rows read at a time."""
    reserve: int
    """Most bytes decoding one batch takes, the largest stripe's: a decompression buffer a stream,
    its list and map values (a row may hold all of a stripe's), its text as stored, and a batch of
    rows."""
    inflated: int
    """The most one stripe's streams inflate to (a stripe past the bound fails unread)."""
    nested: int = 0
    """The most one stripe's values under lists and maps take (part of ``reserve``)."""


@dataclass
class _Column:
    kind: int
    children: list[int]
    under_list: bool = False


def _types(footer: dict[int, list[int | bytes]]) -> list[_Column]:
    columns = []
    for raw in footer.get(4, []):
        if not isinstance(raw, bytes):
            raise OrcStructureError("a type is not a message")
        t = _message(raw)
        columns.append(_Column(_int(t, 1), _packed(t, 2)))
    for i, column in enumerate(columns):
        for child in column.children:
            if not i < child < len(columns):
                raise OrcStructureError("the type tree is not a tree")
            columns[child].under_list = column.under_list or column.kind in (_LIST, _MAP)
    return columns


def plan_orc(body: bytes, tail: bytes, codec: str, block: int, limit: int) -> OrcPlan:
    """Read every stripe's footer and the lengths it needs (``body``: the whole file). A stripe
    whose streams may inflate past ``limit`` ends the reading: its plan says so (``inflated``)."""
    file_tail = _message(tail)
    footer_raw = file_tail.get(2, [b""])[-1]
    if not isinstance(footer_raw, bytes):
        raise OrcStructureError("the file has no footer")
    footer = _message(footer_raw)
    columns = _types(footer)
    compressed = codec != "UNCOMPRESSED"
    batch_rows = MAX_BATCH_ROWS
    reserve = largest = nested = 0
    for raw in footer.get(3, []):
        if not isinstance(raw, bytes):
            raise OrcStructureError("a stripe is not a message")
        stripe = _message(raw)
        offset, index, data, tail_length = (_int(stripe, f) for f in (1, 2, 3, 4))
        rows = _int(stripe, 5)
        end = offset + index + data + tail_length
        if end > len(body) or min(offset, index, data, tail_length, rows) < 0:
            raise OrcStructureError("a stripe lies outside the file")
        plain_footer = _inflate(codec, body[offset + index + data : end], compressed, block)
        stripe_footer = _message(plain_footer)
        costs = _stripe_costs(body, offset, stripe_footer, columns, rows, codec, compressed, block, limit)
        largest = max(largest, costs.inflated)
        if costs.inflated > limit:
            return OrcPlan(1, costs.inflated, costs.inflated)
        rows_at_once = max(1, min(MAX_BATCH_ROWS, BATCH_BYTES // costs.per_row))
        batch_rows = min(batch_rows, rows_at_once)
        reserve = max(reserve, costs.buffers + costs.nested + costs.text + rows_at_once * costs.per_row)
        nested = max(nested, costs.nested)
    return OrcPlan(batch_rows, reserve, largest, nested)


@dataclass(frozen=True)
class _Costs:
    per_row: int
    """Bytes a row costs outside lists and maps (its dictionary strings at their longest)."""
    nested: int
    """Bytes of all the stripe's values under lists and maps."""
    text: int
    """The stripe's text as stored (inflated), which no string outgrows but a dictionary's."""
    inflated: int
    """What all its streams inflate to."""
    buffers: int
    """A decompression buffer a stream."""


def _stripe_costs(
    body: bytes,
    offset: int,
    stripe_footer: dict[int, list[int | bytes]],
    columns: list[_Column],
    rows: int,
    codec: str,
    compressed: bool,
    block: int,
    limit: int,
) -> _Costs:
    """What one stripe costs (``_Costs``); its lengths are decoded only while it stays within
    ``limit``."""
    encodings = []
    for raw in stripe_footer.get(2, []):
        encodings.append(_int(_message(raw), 1) if isinstance(raw, bytes) else 0)
    inflated = buffers = 0
    pos = offset
    lengths: dict[tuple[int, int], bytes] = {}
    text = 0
    for raw in stripe_footer.get(1, []):
        if not isinstance(raw, bytes):
            raise OrcStructureError("a stream is not a message")
        stream = _message(raw)
        kind, column, length = _int(stream, 1), _int(stream, 2), _int(stream, 3)
        if pos + length > len(body):
            raise OrcStructureError("a stream lies outside the file")
        data = body[pos : pos + length]
        pos += length
        size = inflated_size(codec, data, compressed, block, limit - inflated)
        inflated += size
        buffers += min(size, block) + STREAM_BYTES
        if inflated > limit:
            return _Costs(ROW_BYTES, 0, 0, inflated, buffers)
        if not 0 <= column < len(columns):
            continue
        col = columns[column]
        if kind == _LENGTH and (col.kind in (_LIST, _MAP) or _dictionary(encodings, column)):
            lengths[(column, kind)] = _inflate(codec, data, compressed, block)
        if kind in (_DATA, _DICTIONARY_DATA) and col.kind in _TEXT:
            text += size
    per_row, nested = _value_costs(columns, encodings, lengths, rows)
    return _Costs(per_row, nested, text, inflated, buffers)


def _value_costs(
    columns: list[_Column], encodings: list[int], lengths: dict[tuple[int, int], bytes], rows: int
) -> tuple[int, int]:
    """(bytes a row costs outside lists and maps, bytes of every value under them) of a stripe of
    ``rows`` rows, from its list lengths and dictionary entry lengths."""
    counts = [0] * len(columns)
    if columns:
        counts[0] = rows
    longest = [0] * len(columns)
    for i, col in enumerate(columns):  # parents come before their children in ORC's type list
        v2 = i < len(encodings) and encodings[i] in (2, 3)
        count = counts[i]
        if col.kind in (_LIST, _MAP):
            count, _ = lengths_sum_and_max(lengths.get((i, _LENGTH), b""), v2)
        for child in col.children:
            counts[child] = count
        if col.kind in _TEXT and _dictionary(encodings, i):
            _, longest[i] = lengths_sum_and_max(lengths.get((i, _LENGTH), b""), v2)
    per_row = ROW_BYTES
    nested = 0
    for i, col in enumerate(columns):
        width = 1 + (8 if col.kind in (_LIST, _MAP, *_TEXT) else _WIDTH.get(col.kind, 0)) + longest[i]
        if col.under_list:
            nested += counts[i] * width
        elif i:
            per_row += width
    return per_row, nested


def _dictionary(encodings: list[int], column: int) -> bool:
    return column < len(encodings) and encodings[column] in (1, 3)
