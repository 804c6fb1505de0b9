"""Parts of large JSON and Parquet files (pipeline/large_files.py): each file read in parts gives the
records, row numbers, lines and errors it gives read whole."""

from __future__ import annotations

import gc
import gzip
import io
import json
import random
import weakref
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe.catalog.models import FileFormat
from pipeline.chunks import FileTooLarge, PartTooLarge, TransportError, decompressed, json_size
from pipeline.formats import json_documents, open_parquet, read_json, read_raw
from pipeline.large_files import (
    JsonPart,
    JsonPartTooLarge,
    RangeReader,
    RowGroupTooLarge,
    json_cuts,
    json_parts,
    parquet_parts,
    read_json_part,
    spooled,
)

pytestmark = pytest.mark.unit

Seen = tuple[list[str], list[int], list[int], list[tuple[int, int, int, str]]]
"""Documents, their row numbers and lines, and (row, line, character, message) of each error."""


def whole_json(data: bytes, fmt: FileFormat) -> Seen:
    raw = read_raw(data, fmt, path="f.json")
    errors = [(e.row_number, e.line, e.character, e.message) for e in raw.errors]
    return (
        raw.table.column("c1").to_pylist(),
        raw.row_numbers.to_pylist(),
        raw.line_numbers.to_pylist(),
        errors,
    )


def parted_json(data: bytes, fmt: FileFormat, chunk: int, limit: int = 1 << 20) -> tuple[Seen, int]:
    """The file read in parts, numbered as the loader places them; and how many parts there were."""
    docs: list[str] = []
    rows: list[int] = []
    lines: list[int] = []
    errors: list[tuple[int, int, int, str]] = []
    rows_before = lines_before = n = 0
    body = decompressed(io.BytesIO(data), fmt.compression, "f.json")
    for n, part in enumerate(json_parts(body, chunk, fmt, max_part_bytes=limit, path="f.json"), 1):
        raw = read_json_part(part, fmt, "f.json", first=n == 1)
        docs += raw.table.column("c1").to_pylist()
        rows += [r + rows_before for r in raw.row_numbers.to_pylist()]
        lines += [x + lines_before for x in raw.line_numbers.to_pylist()]
        errors += [
            (e.row_number + rows_before, e.line + lines_before, e.character, e.message) for e in raw.errors
        ]
        rows_before += raw.rows_parsed
        lines_before += raw.lines
    return (docs, rows, lines, errors), n


# Strings that look like structure, or escape it: a cut inside one would show.
TRICKY = ['a"b', "x{y", "[", "\\", "]}", "plain", "new\nline", "tab\there", '\\"', "é", "", ",\n"]


def documents(count: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"id": i, "s": rng.choice(TRICKY), "l": [i, {"z": None, "w": rng.choice(TRICKY)}], "o": {}}
        for i in range(count)
    ]


DOCS = documents(400)
JSON = FileFormat(type="JSON")
OUTER = FileFormat(type="JSON", strip_outer_array=True)
LAYOUTS: dict[str, tuple[bytes, FileFormat]] = {
    "ndjson": ("".join(json.dumps(d) + "\n" for d in DOCS).encode(), JSON),
    "ndjson_crlf": ("".join(json.dumps(d) + "\r\n" for d in DOCS).encode(), JSON),
    "pretty": ("".join(json.dumps(d, indent=2) + "\n" for d in DOCS).encode(), JSON),
    "array_pretty": (json.dumps(DOCS, indent=1).encode(), OUTER),
    "array_per_line": (("[\n" + ",\n".join(json.dumps(d) for d in DOCS) + "\n]\n").encode(), OUTER),
    "arrays_then_docs": (
        (
            json.dumps(DOCS[:200], indent=1) + "\n" + "".join(json.dumps(d) + "\n" for d in DOCS[200:])
        ).encode(),
        OUTER,
    ),
    "array_not_stripped": (json.dumps(DOCS[:50], indent=1).encode(), JSON),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("chunk", [256, 1000, 4096])
def test_a_json_file_in_parts_reads_as_it_does_whole(layout: str, chunk: int) -> None:
    """Safeguard: parts end between records (documents, or the outer array's elements), so every
    record, its row number and its line are the whole file's."""
    data, fmt = LAYOUTS[layout]
    if layout == "array_not_stripped":
        # One document, which no part may cut: a part grows past it (a document over four chunk
        # sizes is cut at a line end, the price of bounded memory with broken brackets).
        chunk = max(chunk, len(data) // 3)
    expected = whole_json(data, fmt)
    got, parts = parted_json(data, fmt, chunk)
    assert got == expected
    assert len(expected[0]) in (400, 50, 1)
    if layout != "array_not_stripped":  # one document: it cannot be cut
        assert parts > 5, "the file should have been read in several parts"


def test_the_last_part_of_an_unclosed_array_is_an_error_as_whole() -> None:
    data = ("[\n" + ",\n".join(json.dumps(d) for d in DOCS[:100]) + ",\n").encode()
    expected = whole_json(data, OUTER)
    assert (
        expected[3]
        and expected[3][-1][3] == "Error parsing JSON: unexpected end of input, expecting ']', pos 0"
    )
    got, parts = parted_json(data, OUTER, 512)
    assert got == expected and parts > 3


def broken_ndjson() -> bytes:
    """NDJSON with a truncated line (an unclosed brace), a stray closer, bad values and a duplicate
    key: errors of their own rows; the lines after them load."""
    lines = [json.dumps(d) for d in DOCS]
    lines[40] = lines[40][:-1]  # '{"id": 40, ...' never closes
    lines[90] = "}" + lines[90]
    lines[150] = '{"id": 150, "v": tru}'
    lines[151] = '{"id": 151, "id": 2}'
    lines[300] = '{"id": 300, "s": "unterminated}'
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("chunk", [300, 2000])
def test_errors_in_a_json_part_are_the_files_rows_lines_and_characters(chunk: int) -> None:
    """Safeguard: an error's row and line count the parts before it (the loader adds them), and a
    broken line (an unclosed brace) costs its own row only, as read whole."""
    data = broken_ndjson()
    expected = whole_json(data, JSON)
    got, parts = parted_json(data, JSON, chunk)
    assert got == expected and parts > 5
    assert [(row, line) for row, line, _, _ in got[3]] == [
        (41, 41),
        (91, 91),
        (151, 151),
        (152, 152),
        (301, 301),
    ]


def test_a_gzip_json_streams_through_decompression_and_the_first_part_drops_the_bom() -> None:
    text = b"\xef\xbb\xbf" + LAYOUTS["ndjson"][0]
    expected = whole_json(gzip.compress(text), JSON)
    got, parts = parted_json(gzip.compress(text), JSON, 512)
    assert got == expected and parts > 5
    assert got[0][0].startswith('{"id": 0')


def written(docs: list[Any], indent: int | None, layout: str) -> Seen:
    """What reading the property's file gives, from how json.dumps wrote it: one document per
    ``json.dumps(d, indent=indent)``, one after another (``docs``); or an outer array (``array``),
    whose elements are written the same but, with an indent, on lines of their own after the
    ``[`` line and each of their lines after the first indented once more. Rows count from 1; a
    record's line is 1 plus the newlines before it (all on line 1 in an array without indent)."""
    texts = [json.dumps(d, indent=indent) for d in docs]
    if layout == "array" and indent is not None:
        texts = [t.replace("\n", "\n" + " " * indent) for t in texts]
    line = 1 if layout == "docs" or indent is None else 2
    lines = []
    for text in texts:
        lines.append(line)
        if layout == "docs" or indent is not None:
            line += text.count("\n") + 1
    return texts, list(range(1, len(docs) + 1)), lines, []


def test_written_is_what_the_files_hold() -> None:
    """The reference, against files written out by hand."""
    docs = [{"a": [1, "x\ny"]}, "q", []]
    assert written(docs, None, "docs") == (['{"a": [1, "x\\ny"]}', '"q"', "[]"], [1, 2, 3], [1, 2, 3], [])
    assert written(docs, 1, "docs") == (
        ['{\n "a": [\n  1,\n  "x\\ny"\n ]\n}', '"q"', "[]"],
        [1, 2, 3],
        [1, 7, 8],
        [],
    )
    # [\n {\n  "a": [\n   1,\n   "x\\ny"\n  ]\n },\n "q",\n []\n]
    assert written(docs, 1, "array") == (
        ['{\n  "a": [\n   1,\n   "x\\ny"\n  ]\n }', '"q"', "[]"],
        [1, 2, 3],
        [2, 8, 9],
        [],
    )
    assert written(docs, None, "array")[2] == [1, 1, 1]


@given(
    docs=st.lists(
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\{}[],:\n\t é'),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text('kx{["\\', max_size=3), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        min_size=1,
        max_size=30,
    ),
    indent=st.sampled_from([None, 0, 1, 2]),
    layout=st.sampled_from(["docs", "array"]),
    chunk=st.integers(min_value=16, max_value=400),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_json_in_parts_reads_as_written(
    docs: list[Any], indent: int | None, layout: str, chunk: int
) -> None:
    """Property: random documents (strings full of quotes, brackets, escapes and newlines) written
    one per line, pretty-printed, or as an outer array, read in parts of any size, and read whole,
    give each document's text as written, its row number and the line it starts on, worked out
    from how the file was written (``written``), and no error."""
    if layout == "array":
        data, fmt = json.dumps(docs, indent=indent).encode(), OUTER
    else:
        data, fmt = "".join(json.dumps(d, indent=indent) + "\n" for d in docs).encode(), JSON
    expected = written(docs, indent, layout)
    assert [json.loads(d) for d in expected[0]] == docs  # the reference's own check
    # Parts grow past a record, up to four chunk sizes, before the fallback cut: keep records below.
    longest = max(len(json.dumps(d, indent=indent)) for d in docs)
    chunk = max(chunk, longest)
    assert whole_json(data, fmt) == expected
    assert parted_json(data, fmt, chunk)[0] == expected


def test_a_single_line_larger_than_the_bound_fails_with_what_to_do() -> None:
    """A minified array (one line) or one huge document has nowhere to be cut: past
    max_part_bytes the file fails, after reading about that much, with a message naming the fix."""
    data = json.dumps(documents(2000)).encode()
    with pytest.raises(JsonPartTooLarge) as info:
        parted_json(data, OUTER, 1000, limit=8192)
    assert info.value.message == (
        "File 'f.json' has more than 8 KiB without a line break between two JSON documents "
        "(pipeline.max_part_bytes). A large JSON file is loaded in parts that end at a line break "
        "between documents, or with STRIP_OUTER_ARRAY = TRUE after a comma that ends a line inside "
        "the outer array; write one document (or array element) per line, split the file, or raise "
        "pipeline.max_part_bytes if such files are expected."
    )


def test_json_cuts_only_between_records() -> None:
    # Brackets inside strings (an escaped quote does not end one) are not structure.
    buf = b'{"a": "x\\"{["}\n{"b": [1,\n2]}\n{"c": "]"'
    cut, _ = json_cuts(buf, False, False)
    assert buf[: cut.at] == b'{"a": "x\\"{["}\n{"b": [1,\n2]}\n'
    cut, _ = json_cuts(b'{"b": [1,\n2]}\n{"c": \n', False, False)
    assert cut.at == len(b'{"b": [1,\n2]}\n') and not cut.in_array
    cut, _ = json_cuts(b'[\n{"a": 1},\n{"a": [\n', True, False)
    assert cut.at == len(b'[\n{"a": 1},\n') and cut.in_array
    cut, _ = json_cuts(b'{"a": 1},\n{"a": [\n', True, True)
    assert cut.at == len(b'{"a": 1},\n') and cut.in_array
    # Without STRIP_OUTER_ARRAY the array is one document.
    cut, fallback = json_cuts(b'[\n{"a": 1},\n{"a": [\n', False, False)
    assert cut.at == -1 and fallback.at > 0


def test_a_part_that_starts_among_elements_reads_them() -> None:
    part = JsonPart(b' {"a": 1},\n {"a": 2}\n]\n{"b": 3}\n', in_array=True, open_end=False)
    raw = read_json_part(part, OUTER, "f.json", first=False)
    assert raw.table.column("c1").to_pylist() == ['{"a": 1}', '{"a": 2}', '{"b": 3}']
    assert (raw.line_numbers.to_pylist(), raw.lines, raw.errors) == ([1, 2, 4], 4, [])
    open_end = read_json(b'[\n{"a": 1},\n', OUTER, "f.json", open_end=True)
    assert (open_end.num_rows, open_end.errors) == (1, [])


# ------------------------------------------------------------------------------------------------
# Parquet


def parquet_bytes(rows: int, group_rows: int, **columns: pa.Array) -> bytes:
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": [f"name {i:06d}" for i in range(rows)],
            **columns,
        }
    )
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=group_rows)
    return buf.getvalue()


def parted_parquet(
    source: Any, fmt: FileFormat, chunk: int, limit: int = 1 << 30
) -> tuple[list[dict[str, Any]], list[int], int]:
    parquet = open_parquet(source, "f.parquet")
    rows: list[dict[str, Any]] = []
    numbers: list[int] = []
    before = parts = 0
    for raw in parquet_parts(
        parquet,
        fmt,
        "f.parquet",
        chunk_bytes=chunk,
        max_part_bytes=limit,
        max_file_bytes=1 << 40,
        source=source,
    ):
        rows += raw.table.to_pylist()
        numbers += [n + before for n in raw.row_numbers.to_pylist()]
        assert raw.lines == raw.rows_parsed
        before += raw.rows_parsed
        parts += 1
    return rows, numbers, parts


def test_a_parquet_file_by_row_groups_reads_as_it_does_whole() -> None:
    data = parquet_bytes(10_000, 700)  # 15 row groups
    fmt = FileFormat(type="PARQUET")
    whole = read_raw(data, fmt, path="f.parquet")
    group = pq.ParquetFile(pa.BufferReader(data)).metadata.row_group(0).total_byte_size
    rows, numbers, parts = parted_parquet(pa.BufferReader(data), fmt, int(group * 3.5))
    assert rows == whole.table.to_pylist() and numbers == list(range(1, 10_001))
    assert 3 < parts < 15, "runs of a few row groups each"


def test_parts_are_cut_by_their_decoded_size_not_by_row_group() -> None:
    """One row group of 100 KB stored that decodes to about 6 MB (a dictionary of 64 strings of 1,000
    characters): read in parts of about 1 MiB decoded, batches cut where a part ends, the rows those
    of the file read whole (decision 110)."""
    names = pa.array([f"{i:02d}" + "x" * 998 for i in range(64)])
    table = pa.table(
        {"id": pa.array(range(6000), pa.int64()), "name": names.take(pa.array([i % 64 for i in range(6000)]))}
    )
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    data = buf.getvalue()
    assert len(data) < 200_000 and pq.ParquetFile(pa.BufferReader(data)).metadata.num_row_groups == 1
    fmt = FileFormat(type="PARQUET")
    rows, numbers, parts = parted_parquet(pa.BufferReader(data), fmt, 1 << 20, limit=4 << 20)
    assert rows == read_raw(data, fmt, path="f.parquet").table.to_pylist()
    assert numbers == list(range(1, 6001))
    assert 4 <= parts <= 8, parts


def test_a_row_group_over_the_part_bound_fails_the_file_before_reading() -> None:
    data = parquet_bytes(5000, 5000)
    with pytest.raises(RowGroupTooLarge) as info:
        parted_parquet(pa.BufferReader(data), FileFormat(type="PARQUET"), 1024, limit=4096)
    assert info.value.message.startswith(
        "File 'f.parquet' has a Parquet row group (number 1) that decompresses to "
    )
    assert "write it with smaller row groups, or raise pipeline.max_part_bytes" in info.value.message
    parquet = open_parquet(pa.BufferReader(data), "f.parquet")
    with pytest.raises(FileTooLarge):
        next(
            parquet_parts(
                parquet,
                FileFormat(type="PARQUET"),
                "f.parquet",
                chunk_bytes=1,
                max_part_bytes=1 << 30,
                max_file_bytes=4096,
                source=pa.BufferReader(data),
            )
        )


def test_invalid_utf8_in_a_later_row_group_is_an_error_of_the_files_row() -> None:
    names = [f"n{i}".encode() for i in range(3000)]
    names[2500] = b"Zo\xeb"
    data = parquet_bytes(3000, 500, raw=pa.array(names, pa.binary()))
    fmt = FileFormat(type="PARQUET")
    whole = read_raw(data, fmt, path="f.parquet")
    parquet = open_parquet(pa.BufferReader(data), "f.parquet")
    errors = []
    before = 0
    for raw in parquet_parts(
        parquet,
        fmt,
        "f.parquet",
        chunk_bytes=1,
        max_part_bytes=1 << 30,
        max_file_bytes=1 << 40,
        source=pa.BufferReader(data),
    ):
        errors += [(e.row_number + before, e.line + before, e.message) for e in raw.errors]
        before += raw.rows_parsed
    assert (
        errors
        == [(e.row_number, e.line, e.message) for e in whole.errors]
        == [(2501, 2501, "Invalid UTF8 detected in string 'Zo0xEB'")]
    )


class _Ranged:
    """pyarrow's S3 file as RangeReader sees it, over bytes, counting what each read asks for."""

    def __init__(self, data: bytes, fail_after: int | None = None) -> None:
        self.data = data
        self.reads: list[int] = []
        self.fail_after = fail_after

    def size(self) -> int:
        return len(self.data)

    def read_at(self, n: int, offset: int) -> bytes:
        if self.fail_after is not None and len(self.reads) >= self.fail_after:
            raise OSError("AWS Error NETWORK_CONNECTION during GetObject operation: connection reset")
        self.reads.append(n)
        return self.data[offset : offset + n]


def test_a_parquet_file_is_read_by_ranges_never_whole() -> None:
    """Safeguard: the footer first, then each row group's column chunks; no read asks for the file,
    and each chunk is read once, for its page headers and for pyarrow (``RangeReader.hold``)."""
    data = parquet_bytes(200_000, 10_000)
    ranged = _Ranged(data)
    rows, _, parts = parted_parquet(RangeReader(ranged), FileFormat(type="PARQUET"), 300_000)
    assert len(rows) == 200_000 and parts > 5
    assert max(ranged.reads) < len(data) / 5
    assert sum(ranged.reads) < 1.1 * len(data)


def test_a_failed_range_read_is_transient_not_a_bad_file() -> None:
    """Safeguard: S3 failing mid-file replays the batch (TransportError) instead of failing the
    file as unreadable Parquet."""
    ranged = _Ranged(parquet_bytes(20_000, 1000), fail_after=4)
    with pytest.raises(TransportError, match="connection reset"):
        parted_parquet(RangeReader(ranged), FileFormat(type="PARQUET"), 30_000)


def test_a_gzip_wrapped_parquet_file_is_spooled_to_disk_and_read_by_row_group(tmp_path: Path) -> None:
    data = parquet_bytes(5000, 500)
    with spooled(io.BytesIO(gzip.compress(data)), "f.parquet.gz", 1 << 30) as source:
        rows, _, parts = parted_parquet(source, FileFormat(type="PARQUET"), 10_000)
    assert rows == pq.read_table(io.BytesIO(data)).to_pylist() and parts > 2
    with pytest.raises(FileTooLarge), spooled(io.BytesIO(gzip.compress(data)), "f.parquet.gz", 1000):
        pass


def _parquet(table: pa.Table, int96: bool = False) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, use_deprecated_int96_timestamps=int96)
    return buf.getvalue()


def test_use_vectorized_scanner_reads_as_snowflakes_vectorized_scanner() -> None:
    """copy-into-table, USE_VECTORIZED_SCANNER = TRUE: BINARY_AS_TEXT is treated as FALSE and
    USE_LOGICAL_TYPE as TRUE whatever they say; INT96 is TIMESTAMP_LTZ (NTZ otherwise)."""
    data = _parquet(
        pa.table(
            {
                "b": pa.array([b"Hi"], pa.binary()),
                "local": pa.array([1_704_164_645_000_000], pa.timestamp("us")),
                "utc": pa.array([1_704_164_645_000], pa.timestamp("ms", tz="UTC")),
            }
        )
    )
    int96 = _parquet(pa.table({"t96": pa.array([1_704_164_645_000_000_000], pa.timestamp("ns"))}), int96=True)

    def types(body: bytes, **options: Any) -> dict[str, str]:
        raw = read_raw(body, FileFormat(type="PARQUET", **options), path="f.parquet")
        return {f.name: str(f.type) for f in raw.table.schema}

    vectorized = {"b": "string", "local": "timestamp[us]", "utc": "timestamp[ms, tz=UTC]"}
    assert types(data, use_vectorized_scanner=True) == vectorized  # b: binary, as hex text
    assert types(data, use_vectorized_scanner=True, binary_as_text=True, use_logical_type=False) == vectorized
    assert types(data) == {"b": "string", "local": "int64", "utc": "timestamp[ms]"}
    hexed = read_raw(data, FileFormat(type="PARQUET", use_vectorized_scanner=True), path="f.parquet")
    assert hexed.table.column("b").to_pylist() == ["4869"]
    assert types(int96, use_vectorized_scanner=True) == {"t96": "timestamp[ns, tz=UTC]"}  # LTZ
    assert types(int96) == types(int96, use_logical_type=True) == {"t96": "timestamp[ns]"}  # NTZ


def test_a_json_part_is_freed_as_soon_as_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Safeguard: the reader's scanner (a part's text and a string per document) must not outlive
    read_json in a reference cycle, which only a full collection frees; parts of a 2 GB file piled
    up that way, 4 GB in one Python worker."""
    made: list[weakref.ref[Any]] = []
    original = json_documents._JsonScanner.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(weakref.ref(self))

    monkeypatch.setattr(json_documents._JsonScanner, "__init__", init)
    gc.disable()
    try:
        raw = read_json(LAYOUTS["ndjson"][0], JSON, "f.json")
        assert raw.num_rows == 400 and len(made) == 1
        assert made[0]() is None, "the scanner is still alive"
    finally:
        gc.enable()


# ---------------------------------------------------------------------------------------------
# Dense documents (decision 110)


def test_short_documents_make_short_parts_that_read_as_the_whole_file() -> None:
    """200k two-byte documents cost about 130 bytes each once read: parts of about 256 KiB of cost
    (a few thousand documents), which together are the file's documents, numbered as whole."""
    fmt = FileFormat(type="JSON")
    body = b"".join(b"%d\n" % (i % 10) for i in range(200_000))
    chunk = 256 * 1024
    parts = list(json_parts(io.BytesIO(body), chunk, fmt, max_part_bytes=1 << 30, path="f.json"))
    assert b"".join(p.data for p in parts) == body
    assert all(json_size(p.data) <= 2 * chunk for p in parts) and len(parts) > 50
    rows = [
        v
        for n, p in enumerate(parts)
        for v in read_json_part(p, fmt, "f.json", first=n == 0).table.column("c1").to_pylist()
    ]
    assert rows == read_raw(body, fmt, path="f.json").table.column("c1").to_pylist()


def test_documents_on_one_line_fail_once_they_cost_the_bound() -> None:
    """No line end to cut at: the documents are counted as they are found, and past the bound the
    part fails (it would be each document's string and numbers, 65 times its two bytes)."""
    body = b"1 " * 100_000
    with pytest.raises(PartTooLarge, match=r"decodes to more than 1 MiB \(pipeline\.max_part_bytes\)"):
        read_json(body, FileFormat(type="JSON"), "f.json", max_bytes=1 << 20)
    assert read_json(body, FileFormat(type="JSON"), "f.json", max_bytes=64 << 20).rows_parsed == 100_000
