"""An append body's decoding (identity, gzip, zstd, bounded against bombs) and its NDJSON checks (every
line one JSON object, errors naming the line)."""

from __future__ import annotations

import functools
import gzip
import pickle
import struct
import tracemalloc
import zlib
from typing import Any
from unittest import mock

import orjson
import pytest
import zstandard
from hypothesis import assume, given
from hypothesis import strategies as st

from floe.streaming import rows
from floe.streaming.protocol import MAX_BODY_BYTES, MAX_ROW_BYTES, MAX_UNCOMPRESSED_BYTES, Code
from floe.streaming.rows import (
    BodyError,
    BodyTooLarge,
    MalformedBody,
    MalformedRows,
    RowBatch,
    TooManyRows,
    decode_body,
    parse_rows,
)

pytestmark = pytest.mark.unit

MIB = 1024 * 1024
ZEROS = bytes(MIB)

# ------------------------------------------------------------------------------------------------
# parse_rows: table-driven

GOOD: list[tuple[bytes, bytes, int]] = [
    # (body, normalized data, rows)
    (b'{"a":1}', b'{"a":1}\n', 1),
    (b'{"a":1}\n', b'{"a":1}\n', 1),
    (b'{"a":1}\r\n', b'{"a":1}\n', 1),
    (b'{"a":1}\r', b'{"a":1}\n', 1),
    (b'{"a":1}\n{"b":2}', b'{"a":1}\n{"b":2}\n', 2),
    (b'{"a":1}\r\n{"b":2}\n{"c":3}\r\n', b'{"a":1}\n{"b":2}\n{"c":3}\n', 3),
    (b"{}\n{}\n{}\n", b"{}\n{}\n{}\n", 3),
    # Rows are kept exactly as sent: whitespace around and inside, escapes, key order, duplicates.
    (b' \t{ "b" : [1, 2.5e3, null] , "a":{} }  \n', b' \t{ "b" : [1, 2.5e3, null] , "a":{} }  \n', 1),
    (b'{"a":\r1}\n', b'{"a":\r1}\n', 1),
    (b'{"s":"\\r\\n\\u00e9\\ud83d\\ude00"}\r\n', b'{"s":"\\r\\n\\u00e9\\ud83d\\ude00"}\n', 1),
    ('{"é":"日本"}\n'.encode(), '{"é":"日本"}\n'.encode(), 1),
    (b'{"big":123456789012345678901234567890}', b'{"big":123456789012345678901234567890}\n', 1),
    (b'{"a":1,"a":2}\n', b'{"a":1,"a":2}\n', 1),
    # Only one \r belongs to the line ending; one more before it is the row's trailing whitespace.
    (b"{}\r\r\n", b"{}\r\n", 1),
    # Empty lines separate nothing and are left out: the snowpipe-streaming SDK ends each
    # append_row(s) call's rows with one (docs/streaming-sdk-protocol.md, section 4.5).
    (b'{"id":1}\n\n{"id":2}\n{"id":3}\n\n', b'{"id":1}\n{"id":2}\n{"id":3}\n', 3),
    (b"{}\n\n{}\n", b"{}\n{}\n", 2),
    (b"{}\n\n", b"{}\n", 1),
    (b"{}\r\n\r\n", b"{}\n", 1),
    (b"\n\n{}", b"{}\n", 1),
    (b"{}\n\n\n\r\n\n{}\r", b"{}\n{}\n", 2),
    (b'{"a":1}\r\n\n{"b":2}\r\n', b'{"a":1}\n{"b":2}\n', 2),
]


@pytest.mark.parametrize(("body", "data", "count"), GOOD)
def test_good_bodies(body: bytes, data: bytes, count: int) -> None:
    assert parse_rows(body) == RowBatch(data=data, count=count)


def test_many_rows() -> None:
    body = b"".join(orjson.dumps({"id": i, "name": f"n{i}"}) + b"\n" for i in range(40_000))
    batch = parse_rows(body)
    assert batch.count == 40_000
    assert batch.data is body  # nothing to normalize: no copy


BAD: list[tuple[bytes, int, str]] = [
    # (body, line, a fragment of the message)
    (b"", 1, "the body has no rows"),
    (b"\n", 1, "the body has no rows"),
    (b"\r\n", 1, "the body has no rows"),
    (b"\n\n\r\n\n", 1, "the body has no rows"),
    # Only an empty line is skipped; one of whitespace is no JSON value.
    (b"  \t ", 1, "the line holds only whitespace"),
    (b"{}\n{}\n \n", 3, "the line holds only whitespace"),
    (b"{}\n\r\r\n", 2, "the line holds only whitespace"),
    # Lines are numbered as sent, empty ones included.
    (b"{}\n\n[1]\n", 3, "not an array"),
    (b"\n\n\n{", 4, "unexpected end of data"),
    (b"[1]", 1, "a row must be a JSON object, not an array"),
    (b"{}\n[]\n{}", 2, "not an array"),
    (b"3\n", 1, "not a number"),
    (b"{}\n-1.5e3", 2, "not a number"),
    (b'"x"', 1, "not a string"),
    (b"null", 1, "not null"),
    (b"true", 1, "not a boolean"),
    (b'{}\n{}\n{"a": x}\n', 3, "unexpected character, expected a JSON value (column 7)"),
    (b'{"a":1} x', 1, "unexpected content after document (column 9)"),
    (b'{"a":1}{"b":2}\n', 1, "unexpected content after document (column 8)"),
    (b'{"a":1,}', 1, "trailing comma is not allowed (column 7)"),
    (b"{'a':1}", 1, "expected a string key (column 2)"),
    (b'{"a":NaN}', 1, "expected a JSON value (column 6)"),
    (b'{"a":', 1, "unexpected end of data (column 6)"),
    (b'{"a":1\n}', 1, "unexpected end of data (column 7)"),
    (b'{}\r\n{"a":1\r\n}', 2, "unexpected end of data (column 7)"),  # the \r is the ending's
    (b'{}\r\n{"a": x}\r\n', 2, "expected a JSON value (column 7)"),
    (b'{"a":"\x00"}', 1, "control character in string (column 7)"),
    ('{"é": x}'.encode(), 1, "expected a JSON value (column 7)"),  # columns count characters, not bytes
    (b'{}\n{"a":"\xff"}\n', 2, "invalid UTF-8 at byte 7"),
    (b'{"a":"\xed\xa0\x80"}', 1, "invalid UTF-8 at byte 7"),  # an encoded surrogate
    (b'{"a":"\\ud800"}', 1, "no low surrogate in string (column 7)"),  # a lone surrogate escape
    (
        b"\xef\xbb\xbf{}",
        1,
        "byte order mark (BOM) is not supported (column 1)",
    ),  # RFC 8259 forbids a byte order mark
    (b"[" * 2000, 1, "depth limit exceeded (column 1026)"),
]


@pytest.mark.parametrize(("body", "line", "fragment"), BAD)
def test_bad_bodies(body: bytes, line: int, fragment: str) -> None:
    with pytest.raises(MalformedRows) as caught:
        parse_rows(body)
    error = caught.value
    assert error.line == line
    assert str(error) == f"line {line}: {error.message}"
    assert fragment in error.message
    assert error.code == Code.MALFORMED_ROWS
    assert error.status == 400


def test_lines_across_blocks() -> None:
    # Lines of many lengths, so that the blocks parse_rows splits at a time end everywhere.
    lines = [orjson.dumps({"i": i, "pad": "x" * (i % 97)}) for i in range(6_000)]
    body = b"\n".join(lines) + b"\n"
    assert len(body) > 5 * rows._BLOCK_BYTES
    assert parse_rows(body) == RowBatch(data=body, count=len(lines))
    for bad in (1, 2, 700, 701, 1_999, 3_000, 5_999, 6_000):
        for garbage in (b" ", b"[]", b"{"):  # an empty line is skipped (test_good_bodies)
            broken = [*lines[: bad - 1], garbage, *lines[bad:]]
            with pytest.raises(MalformedRows) as caught:
                parse_rows(b"\r\n".join(broken) + b"\r\n")
            assert caught.value.line == bad


def test_memory_stays_bounded_whatever_the_line_count() -> None:
    body = b"{}\n" * (MIB // 3)
    tracemalloc.start()
    try:
        batch = parse_rows(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert batch.count == MIB // 3
    # A bytes object for each of the 350,000 lines at once would take about 14 MiB (and 32 MB of
    # such lines, as a zstd body can inflate to, 450 MiB).
    assert peak < 4 * MIB


def test_row_size_limit() -> None:
    def row(size: int) -> bytes:
        return b'{"a":"' + b"x" * (size - 8) + b'"}'

    assert len(row(MAX_ROW_BYTES)) == MAX_ROW_BYTES
    # The line ending does not count.
    assert parse_rows(b"{}\n" + row(MAX_ROW_BYTES) + b"\r\n").count == 2
    with pytest.raises(MalformedRows) as caught:
        parse_rows(b"{}\n" + row(MAX_ROW_BYTES + 1) + b"\n{}\n")
    assert caught.value.line == 2
    assert caught.value.message == (
        f"the row is {MAX_ROW_BYTES + 1} bytes; at most {MAX_ROW_BYTES} are accepted"
    )


def test_errors() -> None:
    assert issubclass(BodyError, ValueError)
    assert (MalformedBody.code, MalformedBody.status) == (Code.BAD_REQUEST, 400)
    assert (BodyTooLarge.code, BodyTooLarge.status) == (Code.PAYLOAD_TOO_LARGE, 413)
    error = pickle.loads(pickle.dumps(MalformedRows(3, "bad")))
    assert (error.line, error.message, str(error)) == (3, "bad", "line 3: bad")


# ------------------------------------------------------------------------------------------------
# decode_body

NDJSON = b"".join(orjson.dumps({"id": i, "v": "x" * (i % 50)}) + b"\n" for i in range(2_000))


def _zstd_stream(data: bytes, **options: Any) -> bytes:
    """A zstd frame written as a stream: its header does not declare the content size."""
    compressor = zstandard.ZstdCompressor(**options).compressobj()
    return compressor.compress(data) + compressor.flush()


# gzip writes the time into its header: mtime=0 keeps the bodies, and so the parameter ids that show
# them, the same in every collection, as xdist's workers require.
ENCODED: list[tuple[str | None, bytes]] = [
    (None, NDJSON),
    ("", NDJSON),
    ("identity", NDJSON),
    ("gzip", gzip.compress(NDJSON, mtime=0)),
    ("GZip", gzip.compress(NDJSON, compresslevel=1, mtime=0)),
    (" x-gzip ", gzip.compress(NDJSON, mtime=0)),
    ("gzip", gzip.compress(NDJSON[:1000], mtime=0) + gzip.compress(NDJSON[1000:], mtime=0)),  # two members
    ("zstd", zstandard.ZstdCompressor().compress(NDJSON)),
    ("ZSTD", zstandard.ZstdCompressor(level=19, write_checksum=True).compress(NDJSON)),
    ("zstd", _zstd_stream(NDJSON)),
    ("zstd", zstandard.compress(NDJSON[:1000]) + _zstd_stream(NDJSON[1000:])),  # two frames
    ("zstd", struct.pack("<II", 0x184D2A50, 3) + b"abc" + zstandard.compress(NDJSON)),  # skippable
]


@pytest.mark.parametrize(("encoding", "body"), ENCODED)
def test_round_trips(encoding: str | None, body: bytes) -> None:
    assert decode_body(body, encoding) == NDJSON
    assert parse_rows(decode_body(body, encoding)).count == 2_000


@pytest.mark.parametrize("encoding", ["br", "deflate", "compress", "gzip, zstd", "gzip,identity", "zst"])
def test_unsupported_encodings(encoding: str) -> None:
    with pytest.raises(MalformedBody, match="is not supported"):
        decode_body(gzip.compress(NDJSON, mtime=0), encoding)


@pytest.mark.parametrize("encoding", [None, "gzip", "zstd"])
def test_body_size_as_sent(encoding: str | None) -> None:
    assert decode_body(b"x" * MAX_BODY_BYTES, None) == b"x" * MAX_BODY_BYTES
    with pytest.raises(BodyTooLarge, match="as sent"):
        decode_body(b"x" * (MAX_BODY_BYTES + 1), encoding)


SMALL = b'{"a":1}\n' * 100
CORRUPT: list[tuple[str, bytes, str]] = [
    ("gzip", b"", "empty"),
    ("gzip", b"not gzip at all", "incorrect header check"),
    ("gzip", gzip.compress(SMALL, mtime=0) + b"junk", "incorrect header check"),
    ("gzip", gzip.compress(SMALL, mtime=0) + b"\x1f", "truncated"),
    ("zstd", b"", "empty"),
    ("zstd", b"not zstd at all", "Unknown frame descriptor"),
    ("zstd", zstandard.compress(SMALL) + b"junk", "Unknown frame descriptor"),
    ("zstd", zstandard.compress(SMALL)[:3], "truncated"),
    ("zstd", struct.pack("<II", 0x184D2A50, 9) + b"abc", "truncated"),
]


@pytest.mark.parametrize(("encoding", "body", "fragment"), CORRUPT)
def test_corrupt(encoding: str, body: bytes, fragment: str) -> None:
    with pytest.raises(MalformedBody) as caught:
        decode_body(body, encoding)
    assert encoding in str(caught.value)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip", gzip.compress(SMALL, mtime=0)),
        ("zstd", zstandard.ZstdCompressor(write_checksum=True).compress(SMALL)),
        ("zstd", _zstd_stream(SMALL)),
    ],
)
def test_every_truncation_is_refused(encoding: str, body: bytes) -> None:
    for end in range(len(body)):
        with pytest.raises(MalformedBody):
            decode_body(body[:end], encoding)


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip", gzip.compress(SMALL, mtime=0)),
        ("zstd", zstandard.ZstdCompressor(write_checksum=True).compress(SMALL)),
    ],
)
def test_flipped_bits_never_decode_to_other_rows(encoding: str, body: bytes) -> None:
    # The checksums (gzip's CRC-32, zstd's XXH64) catch what the decoder does not. (A flip in zstd's
    # declared content size may also make it too large.)
    for at in range(len(body)):
        for bit in (0x01, 0x80):
            flipped = body[:at] + bytes([body[at] ^ bit]) + body[at + 1 :]
            try:
                decoded = decode_body(flipped, encoding)
            except BodyError:
                continue
            assert decoded == SMALL


# ------------------------------------------------------------------------------------------------
# Bombs: 1 GiB of zeros in about 1 MB, built without ever holding the gigabyte


@functools.cache
def _gzip_zeros(mib: int) -> bytes:
    """One gzip member of ``mib`` MiB of zeros. After a full flush deflate forgets its history, so
    every MiB compresses to the same bytes and is compressed once."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    piece = deflate.compress(ZEROS) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(ZEROS, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    trailer = struct.pack("<II", crc, (mib * MIB) & 0xFFFFFFFF)
    return header + piece * mib + deflate.flush() + trailer


@functools.cache
def _zstd_zeros(mib: int, *, pledged: bool) -> bytes:
    """One zstd frame of ``mib`` MiB of zeros; its header declares the size only if ``pledged``."""
    compressor = zstandard.ZstdCompressor(write_checksum=True)
    stream = compressor.compressobj(size=mib * MIB) if pledged else compressor.compressobj()
    return b"".join([*(stream.compress(ZEROS) for _ in range(mib)), stream.flush()])


def _bombs() -> list[tuple[str, bytes]]:
    return [
        ("gzip", _gzip_zeros(1024)),
        ("gzip", gzip.compress(ZEROS, mtime=0) * 1024),  # 1,024 members of 1 MiB
        ("zstd", _zstd_zeros(1024, pledged=False)),
        ("zstd", _zstd_zeros(1024, pledged=True)),  # refused from its header
        ("zstd", zstandard.compress(ZEROS) * 1024),  # 1,024 frames of 1 MiB, each declared
        ("zstd", _zstd_zeros(1, pledged=False) * 1024),  # 1,024 frames of 1 MiB, none declared
    ]


def test_bomb_builders_make_valid_streams() -> None:
    # The builders at a size under the limit decode to exactly the zeros they claim.
    assert decode_body(_gzip_zeros(5), "gzip") == bytes(5 * MIB)
    assert decode_body(_zstd_zeros(5, pledged=False), "zstd") == bytes(5 * MIB)
    assert decode_body(_zstd_zeros(5, pledged=True), "zstd") == bytes(5 * MIB)


@pytest.mark.parametrize("index", range(6))
def test_bombs_stop_at_the_limit(index: int) -> None:
    encoding, body = _bombs()[index]
    assert len(body) <= MAX_BODY_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(BodyTooLarge, match="decompressed"):
            decode_body(body, encoding)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Decoding stopped near the limit instead of inflating the gigabyte.
    assert peak < 4 * MAX_UNCOMPRESSED_BYTES


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", lambda data: gzip.compress(data, compresslevel=1, mtime=0)),
        ("zstd", zstandard.compress),
        ("zstd", _zstd_stream),
    ],
)
def test_the_limit_is_inclusive(encoding: str, compress: Any) -> None:
    assert len(decode_body(compress(bytes(MAX_UNCOMPRESSED_BYTES)), encoding)) == MAX_UNCOMPRESSED_BYTES
    with pytest.raises(BodyTooLarge):
        decode_body(compress(bytes(MAX_UNCOMPRESSED_BYTES + 1)), encoding)


# ------------------------------------------------------------------------------------------------
# Properties

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)  # orjson's integer range
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=5)
endings = st.sampled_from([b"\n", b"\r\n"])
padding = st.sampled_from([b"", b" ", b"\t "])
encodings = st.sampled_from([None, "gzip", "x-gzip", "zstd"])


@st.composite
def bodies(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Rows, and their NDJSON lines as sent (each with its padding and line ending)."""
    objects = draw(st.lists(json_objects, min_size=1, max_size=12))
    lines = [draw(padding) + orjson.dumps(row) + draw(padding) + draw(endings) for row in objects]
    return objects, lines


def _send(lines: list[bytes], final_newline: bool, encoding: str | None) -> bytes:
    body = b"".join(lines)
    if not final_newline:
        body = body.removesuffix(b"\n").removesuffix(b"\r")
    if encoding in ("gzip", "x-gzip"):
        return gzip.compress(body, mtime=0)
    if encoding == "zstd":
        return zstandard.compress(body)
    return body


# Small blocks put block ends everywhere in these small bodies.
block_sizes = st.sampled_from([1, 2, 7, 64, rows._BLOCK_BYTES])


@given(body=bodies(), final_newline=st.booleans(), encoding=encodings, block=block_sizes)
def test_rows_round_trip(
    body: tuple[list[dict[str, Any]], list[bytes]], final_newline: bool, encoding: str | None, block: int
) -> None:
    objects, lines = body
    with mock.patch.object(rows, "_BLOCK_BYTES", block):
        batch = parse_rows(decode_body(_send(lines, final_newline, encoding), encoding))
    assert batch.count == len(objects)
    assert batch.data == b"".join(line.removesuffix(b"\n").removesuffix(b"\r") + b"\n" for line in lines)
    assert [orjson.loads(line) for line in batch.data.split(b"\n")[:-1]] == objects


@given(
    body=bodies(),
    empties=st.lists(st.tuples(st.integers(min_value=0), endings), max_size=6),
    encoding=encodings,
    block=block_sizes,
)
def test_empty_lines_anywhere_change_nothing(
    body: tuple[list[dict[str, Any]], list[bytes]],
    empties: list[tuple[int, bytes]],
    encoding: str | None,
    block: int,
) -> None:
    objects, lines = body
    with mock.patch.object(rows, "_BLOCK_BYTES", block):
        without = parse_rows(decode_body(_send(lines, True, encoding), encoding))
        for position, ending in empties:
            lines.insert(position % (len(lines) + 1), ending)
        batch = parse_rows(decode_body(_send(lines, True, encoding), encoding))
    assert batch == without
    assert [orjson.loads(line) for line in batch.data.split(b"\n")[:-1]] == objects


def _is_object(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


garbage = (
    json_values.filter(lambda value: not isinstance(value, dict)).map(orjson.dumps)
    | json_objects.map(lambda row: orjson.dumps(row)[:-1])  # unterminated
    | st.tuples(json_objects, st.sampled_from([b"x", b"{}", b",", b"]", b"\x00"])).map(
        lambda pair: orjson.dumps(pair[0]) + pair[1]
    )
    | st.sampled_from([b"", b" ", b"\t", b"\r", b"\xef\xbb\xbf{}", b'{"a":"\xc3"}', b"{'a':1}"])
    | st.binary(max_size=24)
)


@given(
    body=bodies(),
    final_newline=st.booleans(),
    encoding=encodings,
    position=st.integers(min_value=0),
    bad=garbage,
    block=block_sizes,
)
def test_a_bad_line_is_named(
    body: tuple[list[dict[str, Any]], list[bytes]],
    final_newline: bool,
    encoding: str | None,
    position: int,
    bad: bytes,
    block: int,
) -> None:
    _, lines = body
    index = position % len(lines)
    assume(b"\n" not in bad)
    # The parser takes one \r before the line's end as the line ending's, whichever ending follows.
    assume(not _is_object(bad) and not _is_object(bad.removesuffix(b"\r")))
    # An empty line is skipped, not refused (and an empty last line without a final newline is no
    # line at all).
    assume(bad not in (b"", b"\r"))
    ending = lines[index][len(lines[index].rstrip(b"\r\n")) :]
    lines[index] = bad + ending
    with mock.patch.object(rows, "_BLOCK_BYTES", block), pytest.raises(MalformedRows) as caught:
        parse_rows(decode_body(_send(lines, final_newline, encoding), encoding))
    assert caught.value.line == index + 1
    assert str(caught.value).startswith(f"line {index + 1}: ")


# ------------------------------------------------------------------------------------------------
# A caller's lower bounds: what the append may still hold (issue 31, item 6)


@pytest.mark.parametrize("index", range(6))
def test_bombs_stop_at_a_callers_lower_limit(index: int) -> None:
    """The API passes the room its bounds leave: a bomb stops there, not at the 32 MB cap."""
    encoding, body = _bombs()[index]
    tracemalloc.start()
    try:
        with pytest.raises(BodyTooLarge, match=f"over {MIB} bytes"):
            decode_body(body, encoding, limit=MIB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One zstd call may overshoot by up to 16 MiB (see rows._ZSTD_STEP); far below the 32 MB cap's.
    assert peak < MAX_UNCOMPRESSED_BYTES


@pytest.mark.parametrize("encoding", [None, "gzip", "zstd"])
def test_a_body_within_the_callers_limit_decodes_whole(encoding: str | None) -> None:
    data = b'{"a": 1}\n' * 1000
    body = {None: data, "gzip": gzip.compress(data), "zstd": zstandard.compress(data)}[encoding]
    assert decode_body(body, encoding, limit=len(data)) == data
    with pytest.raises(BodyTooLarge):
        decode_body(body, encoding, limit=len(data) - 1)
    # A limit above the cap is the cap.
    assert decode_body(body, encoding, limit=1 << 40) == data


def test_empty_lines_are_no_rows_for_max_rows() -> None:
    sdk = b'{"id":1}\n\n' * 5
    assert parse_rows(sdk, max_rows=5) == RowBatch(data=b'{"id":1}\n' * 5, count=5)
    with pytest.raises(TooManyRows, match="more than 4 rows"):
        parse_rows(sdk, max_rows=4)


def test_memory_stays_bounded_whatever_the_empty_line_count() -> None:
    body = b"{}\n\n" * (MIB // 4)
    tracemalloc.start()
    try:
        batch = parse_rows(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert batch == RowBatch(data=b"{}\n" * (MIB // 4), count=MIB // 4)
    # The rows kept (768 KiB) and a block's lines at a time, not a bytes object for every line.
    assert peak < 4 * MIB


def test_rows_past_max_rows_stop_the_parse() -> None:
    data = b"{}\n" * 200_000
    assert parse_rows(data, max_rows=200_000).count == 200_000
    with pytest.raises(TooManyRows, match="more than 199999 rows"):
        parse_rows(data, max_rows=199_999)
    # Counted a block at a time, before the block's lines are parsed: a bad line past the bound is
    # never reached.
    with pytest.raises(TooManyRows):
        parse_rows(b"{}\n" * 10 + b"not json\n", max_rows=5)
