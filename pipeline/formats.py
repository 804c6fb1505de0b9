"""Staged file bytes -> a raw Arrow table, plus the records that could not be parsed at all.

``read_raw`` undoes compression and splits the file into records; it does not know the target
table. Typing, the COPY transform and ON_ERROR live in ``pipeline.transform``.

Numbering (the same for every format, used by METADATA$FILE_ROW_NUMBER and by load history):

- **row number**: 1-based ordinal of a record among the records of the file, counting bad records
  too. For CSV, the SKIP_HEADER lines are not records (so the first data row is row 1 whatever
  SKIP_HEADER is), and neither are blank lines skipped by SKIP_BLANK_LINES = TRUE. For JSON a record
  is a document (an element with STRIP_OUTER_ARRAY); for Parquet, a row.
- **line**: physical line (1-based, counting the header lines) where the record starts. A quoted
  CSV value or a JSON document can span several lines. Parquet has no lines: line = row number.

Raw tables:

- CSV: string columns ``c1..cN``; N is the number of fields of the first record, or of the most
  records when more of them share another count, unless the caller passes ``columns``. NULL_IF /
  EMPTY_FIELD_AS_NULL / TRIM_SPACE are already applied; they do not touch enclosed values, so
  ``""`` stays an empty string. Records with another field count are
  RowErrors (100068 too few, 100016 too many), unless ``columns`` was given and
  ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE, in which case they are padded with NULL or truncated. A
  blank line is a 100068 RowError unless SKIP_BLANK_LINES (or the record has a single field). Quoted
  values may span lines (MULTI_LINE). ESCAPE / ESCAPE_UNENCLOSED_FIELD are not supported: a
  backslash is an ordinary character, which keeps the default NULL_IF ``\\N`` working.
- JSON: one string column ``c1`` holding each document's text as written; a document that does not
  parse is a 100069 RowError and the next line starts over.
- Parquet: the file's own columns and types.

COMPRESSION: AUTO recognises gzip, bzip2 and zstd by magic bytes; GZIP, BZ2, ZSTD, BROTLI, DEFLATE,
RAW_DEFLATE and NONE can be forced. A UTF-8 byte order mark is skipped. Decompression is incremental
and bounded (``max_bytes``), so a decompression bomb fails its file (PartTooLarge) instead of
filling the worker's memory.

Whole-file failures (corrupt compression, invalid UTF-8 in CSV/JSON, unreadable Parquet, unsupported
options) raise ``floe.errors.FileLoadError``; ``FileParseError`` when the failure has a place (the
line, character and CSV field of the first invalid UTF-8 byte). In Parquet, a string value that is
not UTF-8 is a RowError of its row. A zero-byte file is 0 rows and no error in every format.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import PartTooLarge, compression_of, decompressed, read_bounded

CODE_END_OF_RECORD = "100068"
CODE_EXTRA_FIELD = "100016"
CODE_JSON_PARSE = "100069"
CODE_INVALID_UTF8 = "100000"
"""Snowflake's code for invalid UTF-8 is not documented; Floe's code for errors it cannot classify."""

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
_JSON_WS = re.compile(r"[ \t\n\r]*")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


@dataclass(frozen=True)
class RowError:
    """A record that could not be parsed (it never reaches the transform)."""

    row_number: int
    """Record ordinal, 1-based (see the module docstring)."""
    line: int
    """Physical line where the record starts, 1-based, counting header lines."""
    character: int
    """1-based character position of the error within its line (best effort)."""
    column_name: str | None
    """Column as Snowflake names it (``"T"["COL":3]``) once known; None for JSON syntax errors."""
    message: str
    """Snowflake-style error text."""
    code: str
    """Snowflake error code, e.g. 100068."""
    field: int | None = None
    """1-based CSV field the error is about; the transform uses it to name the target column."""

    def named(self, column_name: str) -> RowError:
        """This error with its column resolved (re-rendering messages that quote the column)."""
        message = self.message
        if self.code == CODE_END_OF_RECORD:
            message = end_of_record_message(column_name)
        return replace(self, column_name=column_name, message=message)


@dataclass
class RawFile:
    """One staged file, parsed into raw values and per-record metadata."""

    table: pa.Table
    """Raw values of the good records, in file order."""
    row_numbers: pa.Array
    """int64 row number of each good record (METADATA$FILE_ROW_NUMBER)."""
    line_numbers: pa.Array
    """int64 physical start line of each good record."""
    errors: list[RowError]
    """Records that could not be parsed, in file order."""
    rows_parsed: int
    """Records seen, good and bad."""
    format: str = "CSV"
    """CSV, JSON or PARQUET."""
    path: str = ""
    """File path, for messages."""
    data: bytes = field(default=b"", repr=False)
    """Decompressed file contents (CSV/JSON), kept to locate error positions and to re-read."""
    fmt: FileFormat = field(default_factory=FileFormat, repr=False)
    """Format options the file was read with."""
    width: int = 0
    """CSV: fields per record the file was read with."""
    row_offset: int = 0
    """Records before this part of the file (a streamed file is read in parts); row numbers and
    lines above are local to the part, and METADATA$FILE_ROW_NUMBER adds this."""
    line_offset: int = 0
    """Physical lines before this part of the file; load history adds this to error lines."""

    @property
    def num_rows(self) -> int:
        """Good records."""
        return self.table.num_rows


def read_raw(
    data: bytes, fmt: FileFormat, *, path: str, columns: int | None = None, max_bytes: int | None = None
) -> RawFile:
    """Decompress and parse one staged file.

    ``columns`` (CSV only) fixes the expected field count, as a plain COPY does (the number of target
    columns); without it the first record decides. ``max_bytes`` bounds the decompressed file
    (``pipeline.max_part_bytes``): past it, PartTooLarge, after inflating only that much. Raises
    FileLoadError when the file as a whole cannot be read.
    """
    kind = fmt.type.upper()
    if kind == "PARQUET":
        # Parquet compresses internally; only a whole-file gzip wrapper is undone here.
        compression = "AUTO" if data.startswith(_GZIP_MAGIC) else "NONE"
        body = _decompress(data, compression, path, max_bytes, "Parquet")
        return _read_parquet(body, fmt, path, max_bytes)
    body = _decompress(data, fmt.compression, path, max_bytes, "JSON" if kind == "JSON" else "")
    if body.startswith(_UTF8_BOM):  # SKIP_BYTE_ORDER_MARK = TRUE (Snowflake's default)
        body = body[len(_UTF8_BOM) :]
    if kind == "CSV":
        return read_csv(body, fmt, path, columns)
    if kind == "JSON":
        return _read_json(body, fmt, path)
    raise FileLoadError(f"Unsupported file format type '{fmt.type}'", file=path)


# ---------------------------------------------------------------------------------------------
# Compression


def _decompress(
    data: bytes, compression: str, path: str, max_bytes: int | None = None, kind: str = ""
) -> bytes:
    """Undo COMPRESSION (AUTO recognises gzip, bzip2 and zstd by their magic bytes), inflating at
    most ``max_bytes`` (PartTooLarge past it): the streaming decompressors of ``pipeline.chunks``
    over the bytes in memory, so a bomb costs the bound, not its inflated size."""
    if compression_of(data[:4], compression) == "NONE" or not data:
        body: bytes | None = data if max_bytes is None or len(data) <= max_bytes else None
    else:
        stream = decompressed(io.BytesIO(data), compression, path)
        body = read_bounded(stream, sys.maxsize - 1 if max_bytes is None else max_bytes)
    if body is None:
        assert max_bytes is not None
        raise PartTooLarge(path, max_bytes, record=False, kind=kind)
    return body


class FileParseError(FileLoadError):
    """A whole-file failure at a known place: load history shows its line, character and column."""

    def __init__(
        self,
        message: str,
        *,
        file: str,
        line: int,
        character: int,
        field: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, file=file)
        self.line = line
        """Physical line (1-based, counting header lines)."""
        self.character = character
        """1-based character position in that line."""
        self.field = field
        """1-based CSV field, which the transform turns into the target column's name."""
        self.code = code
        """Snowflake error code, when there is a known one."""

    def __str__(self) -> str:
        return f"{self.message} (file={self.file}, line {self.line}, character {self.character})"


_SHOWN_CHARS = 200
"""How much of an offending value an error message quotes."""


def _show_invalid(text: str) -> str:
    """A value decoded with surrogateescape, its undecodable bytes written as Snowflake does: 0xNN."""
    out = "".join(f"0x{ord(ch) - 0xDC00:02X}" if 0xDC80 <= ord(ch) <= 0xDCFF else ch for ch in text)
    return out[:_SHOWN_CHARS]


def _utf8_error(body: bytes, path: str, first_line: int, fmt: FileFormat | None = None) -> FileLoadError:
    """Where the first invalid UTF-8 sequence is, in Snowflake's words.

    Snowflake quotes the value that holds the bad bytes (the CSV field; for JSON, the line) with
    each bad byte as ``0xNN``: ``Invalid UTF8 detected in string 'Caf0xE9'``. ``fmt`` is given for
    CSV, whose field the error then names.
    """
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + body.count(b"\n", 0, exc.start)
        start = body.rfind(b"\n", 0, exc.start) + 1
        end = body.find(b"\n", exc.start)
        text = body[start : end if end >= 0 else len(body)].decode("utf-8", "surrogateescape")
        bad = len(body[start : exc.start].decode("utf-8", "surrogateescape"))
        if fmt is None:
            return FileParseError(
                f"Invalid UTF8 detected in string '{_show_invalid(text)}'",
                file=path,
                line=line,
                character=bad + 1,
            )
        spans = field_spans(text.rstrip("\r"), fmt.field_delimiter, fmt.field_optionally_enclosed_by)
        number = next((i for i, (_, e) in enumerate(spans) if bad < e), len(spans) - 1)
        first, last = spans[number]
        return FileParseError(
            f"Invalid UTF8 detected in string '{_show_invalid(text[first:last])}'",
            file=path,
            line=line,
            character=first + 1,
            field=number + 1,
        )
    return FileLoadError("Invalid UTF8 detected", file=path)


# ---------------------------------------------------------------------------------------------
# CSV


def end_of_record_message(column_name: str) -> str:
    """Snowflake's 100068 text."""
    return f"End of record reached while expected to parse column '{column_name}'"


def _printable(delim: str) -> str:
    """A delimiter as Snowflake prints it in messages (escape sequences for control characters)."""
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(delim, delim)


def _extra_field_message(fmt: FileFormat) -> str:
    return (
        f"Field delimiter '{_printable(fmt.field_delimiter)}' found while expecting record delimiter "
        f"'{_printable(fmt.record_delimiter or chr(10))}'"
    )


def check_csv_options(fmt: FileFormat, path: str) -> None:
    """Reject CSV options the pyarrow parser cannot honour (FileLoadError), rather than load wrong data."""
    if len(fmt.field_delimiter) != 1:
        raise FileLoadError(
            f"FIELD_DELIMITER '{fmt.field_delimiter}' is not supported: Floe needs a single character",
            file=path,
        )
    if fmt.record_delimiter not in ("\n", "\r\n", ""):
        raise FileLoadError("RECORD_DELIMITER other than newline is not supported", file=path)
    quote = fmt.field_optionally_enclosed_by
    if quote is not None and len(quote) != 1:
        raise FileLoadError(f"FIELD_OPTIONALLY_ENCLOSED_BY '{quote}' must be one character", file=path)
    if quote is not None and quote == fmt.field_delimiter:
        raise FileLoadError("FIELD_OPTIONALLY_ENCLOSED_BY cannot be the field delimiter", file=path)


def field_spans(record: str, delimiter: str, quote: str | None) -> list[tuple[int, int]]:
    """0-based (start, end) character offsets of each field of one CSV record (quotes included)."""
    spans: list[tuple[int, int]] = []
    start = 0
    i = 0
    n = len(record)
    in_quotes = False
    while i < n:
        ch = record[i]
        if in_quotes:
            if ch == quote:
                if i + 1 < n and record[i + 1] == quote:
                    i += 1  # doubled quote inside a quoted field
                else:
                    in_quotes = False
        elif ch == delimiter:
            spans.append((start, i))
            start = i + 1
        elif ch == quote and i == start:
            in_quotes = True
        elif ch == "\n" or (ch == "\r" and not in_quotes):
            break
        i += 1
    spans.append((start, i))
    return spans


def _skip_lines(body: bytes, count: int) -> tuple[int, int]:
    """Byte offset after the first ``count`` lines, and how many lines that really was."""
    offset = 0
    for skipped in range(count):
        nl = body.find(b"\n", offset)
        if nl < 0:
            return len(body), skipped + (1 if offset < len(body) else 0)
        offset = nl + 1
    return offset, count


def _first_record_width(rest: bytes, fmt: FileFormat) -> int:
    """Fields in the first non-blank record (Python's csv module reads just that far)."""
    quote = fmt.field_optionally_enclosed_by
    stream = io.TextIOWrapper(io.BytesIO(rest), encoding="utf-8", errors="replace", newline="")
    if quote is None:
        reader = csv.reader(stream, delimiter=fmt.field_delimiter, quoting=csv.QUOTE_NONE, strict=False)
    else:
        reader = csv.reader(
            stream, delimiter=fmt.field_delimiter, quotechar=quote, doublequote=True, strict=False
        )
    try:
        for record in reader:
            if record:
                return len(record)
    except csv.Error:
        # e.g. a field over csv's size limit: count delimiters on the first line instead
        first_line = rest.split(b"\n", 1)[0]
        return first_line.count(fmt.field_delimiter.encode()) + 1
    return 1


def _null_set(fmt: FileFormat) -> list[str]:
    nulls = list(dict.fromkeys(fmt.null_if))
    if fmt.empty_field_as_null and "" not in nulls:
        nulls.append("")
    return nulls


def _clean_column(col: pa.ChunkedArray, fmt: FileFormat) -> pa.ChunkedArray:
    """TRIM_SPACE for one column: strip blanks, then quotes that the blanks hid from the parser."""
    trimmed = pc.utf8_trim(col, characters=" \t")
    quote = fmt.field_optionally_enclosed_by
    if quote is not None:
        q = re.escape(quote)
        inner = pc.replace_substring_regex(trimmed, pattern=f"^{q}(.*){q}$", replacement="\\1")
        was_quoted = pc.match_substring_regex(trimmed, pattern=f"^{q}(.*){q}$")
        unescaped = pc.replace_substring(inner, pattern=quote * 2, replacement=quote)
        trimmed = pc.if_else(was_quoted, unescaped, trimmed)
    nulls = _null_set(fmt)
    if nulls:
        is_null = pc.is_in(trimmed, value_set=pa.array(nulls, pa.string()))
        trimmed = pc.if_else(is_null, pa.scalar(None, pa.string()), trimmed)
    return trimmed


def _repair_record(text: str, fmt: FileFormat, width: int) -> list[str | None]:
    """ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE: a bad record's fields, padded with NULL or truncated."""
    quote = fmt.field_optionally_enclosed_by
    if quote is None:
        reader = csv.reader([text], delimiter=fmt.field_delimiter, quoting=csv.QUOTE_NONE, strict=False)
    else:
        reader = csv.reader(
            io.StringIO(text, newline=""), delimiter=fmt.field_delimiter, quotechar=quote, strict=False
        )
    try:
        values: list[str] = [v for rec in reader for v in rec][:width]
    except csv.Error:
        values = []
    nulls = set(_null_set(fmt))
    out: list[str | None] = []
    for v in values:
        if fmt.trim_space:
            v = v.strip(" \t")
        out.append(None if v in nulls else v)
    return out + [None] * (width - len(out))


def read_csv(body: bytes, fmt: FileFormat, path: str, columns: int | None = None) -> RawFile:
    """Parse decompressed CSV bytes (see ``read_raw``)."""
    lenient = columns is not None and not fmt.error_on_column_count_mismatch
    return _read_csv(body, fmt, path, columns, lenient=lenient)


def read_csv_part(body: bytes, fmt: FileFormat, path: str, *, first: bool, width: int | None) -> RawFile:
    """One record-aligned part of a CSV file read as a stream (see ``pipeline.chunks``).

    The first part is read as a whole file would be (byte-order mark, SKIP_HEADER, its record
    width); later parts take ``width`` from the first. Row and line numbers are local to the part;
    the caller sets ``row_offset`` and ``line_offset``.
    """
    if first:
        if body.startswith(_UTF8_BOM):
            body = body[len(_UTF8_BOM) :]
        return read_csv(body, fmt, path)
    rest = fmt.model_copy(update={"skip_header": 0})
    return _read_csv(body, rest, path, width or None, lenient=False)


def _read_csv(body: bytes, fmt: FileFormat, path: str, columns: int | None, *, lenient: bool) -> RawFile:
    check_csv_options(fmt, path)
    offset, header_lines = _skip_lines(body, max(0, fmt.skip_header))
    rest = body[offset:]
    width = columns if columns is not None else (_first_record_width(rest, fmt) if rest else 0)
    names = [f"c{i}" for i in range(1, width + 1)]
    if not rest or width == 0:
        return _empty_raw(names, "CSV", path, body, fmt, width)

    try:
        # Checked up front (cheap for ASCII): pyarrow cannot report bad bytes inside invalid rows.
        rest.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _utf8_error(rest, path, header_lines + 1, fmt) from exc
    quote = fmt.field_optionally_enclosed_by
    invalid: list[tuple[int, int, str]] = []

    def on_invalid(row: pacsv.InvalidRow) -> str:
        invalid.append((row.number or 0, row.actual_columns, row.text))
        return "skip"

    nulls = _null_set(fmt)
    read_options = pacsv.ReadOptions(
        column_names=names,
        use_threads=False,  # serial parsing keeps InvalidRow.number exact
        block_size=min(max(len(rest) + 1, 1 << 16), (1 << 31) - 1),
    )
    parse_options = pacsv.ParseOptions(
        delimiter=fmt.field_delimiter,
        quote_char=quote if quote is not None else False,
        double_quote=True,
        escape_char=False,
        newlines_in_values=quote is not None,  # MULTI_LINE = TRUE
        ignore_empty_lines=False,  # blank lines are records here; handled below per SKIP_BLANK_LINES
        invalid_row_handler=on_invalid,
    )
    convert_options = pacsv.ConvertOptions(
        column_types={n: pa.string() for n in names},
        null_values=[] if fmt.trim_space else nulls,
        strings_can_be_null=not fmt.trim_space and bool(nulls),
        # An enclosed empty string is '' even with EMPTY_FIELD_AS_NULL (Snowflake's 100088 hint).
        quoted_strings_can_be_null=False,
    )
    try:
        table = pacsv.read_csv(
            io.BytesIO(rest),
            read_options=read_options,
            parse_options=parse_options,
            convert_options=convert_options,
        )
    except pa.ArrowInvalid as exc:
        if "UTF8" in str(exc) or "utf8" in str(exc).lower():
            raise _utf8_error(rest, path, header_lines + 1, fmt) from exc
        raise FileLoadError(f"Error parsing CSV file: {exc}", file=path) from exc
    except pa.ArrowException as exc:
        raise FileLoadError(f"Error parsing CSV file: {exc}", file=path) from exc
    if columns is None and invalid:
        # Records of varying length are errors, but which length is the wrong one? Taking the first
        # record's would let one short first line turn every good record after it into an error
        # (and load the short one); the length most records share is the file's.
        common, count = Counter(actual for _, actual, _ in invalid).most_common(1)[0]
        if count > table.num_rows:
            return _read_csv(body, fmt, path, common, lenient=False)
    if fmt.trim_space:
        table = pa.table({n: _clean_column(table.column(n), fmt) for n in names})

    good = table.num_rows
    total = good + len(invalid)
    # Record ordinals (1-based, as pyarrow counts them) of the good rows: the ones not reported invalid.
    is_good = np.ones(total + 1, dtype=bool)
    is_good[0] = False
    for number, _, _ in invalid:
        if 0 < number <= total:
            is_good[number] = False
    good_numbers = np.flatnonzero(is_good)
    if len(good_numbers) != good:  # pyarrow could not number some row; fall back to file order
        good_numbers = np.arange(1, good + 1)
        is_good = np.zeros(total + 1, dtype=bool)
        is_good[good_numbers] = True

    # Newlines inside each record, to turn record ordinals into physical lines.
    newlines = np.flatnonzero(np.frombuffer(rest, dtype=np.uint8) == 10)
    physical_lines = len(newlines) + (0 if rest.endswith(b"\n") else 1)
    extra_newlines = np.zeros(total + 1, dtype=np.int64)
    if physical_lines != total:
        per_row = np.zeros(good, dtype=np.int64)
        for name in names:
            counts = pc.count_substring(table.column(name), "\n").to_numpy(zero_copy_only=False)
            per_row += np.nan_to_num(counts.astype(np.float64), nan=0).astype(np.int64)
        extra_newlines[good_numbers] = per_row
        for number, _, text in invalid:
            if 0 < number <= total:
                extra_newlines[number] = text.count("\n")
    # start line of record k = header + 1 + (k - 1) + newlines inside records 1..k-1
    start_lines = (
        header_lines
        + np.arange(0, total + 1, dtype=np.int64)
        + np.concatenate(([0], np.cumsum(extra_newlines[:-1])))
    )

    # Blank lines: pyarrow pads them into a row of empty fields, so find them in the bytes.
    blank = np.zeros(total + 1, dtype=bool)
    if width > 1 or fmt.skip_blank_lines:
        blank_lines = _blank_line_numbers(rest, newlines, header_lines)
        if len(blank_lines):
            blank[1:] = np.isin(start_lines[1:], blank_lines)
            blank &= is_good
    # Record ordinal -> row number: blank lines skipped by SKIP_BLANK_LINES are not records.
    row_of_record = np.arange(0, total + 1, dtype=np.int64)
    if fmt.skip_blank_lines and blank.any():
        row_of_record = row_of_record - np.cumsum(blank)
        total -= int(blank.sum())

    errors: list[RowError] = []
    repaired: list[tuple[int, list[str | None]]] = []
    for number, actual, text in invalid:
        if not 0 < number < len(start_lines):
            continue
        if lenient:
            repaired.append((number, _repair_record(text, fmt, width)))
            continue
        errors.append(
            _count_error(fmt, text, actual, width, int(row_of_record[number]), int(start_lines[number]))
        )
    keep = ~blank[good_numbers]
    if not fmt.skip_blank_lines:
        for blank_number in np.flatnonzero(blank).tolist():
            number = int(blank_number)
            errors.append(
                RowError(
                    row_number=int(row_of_record[number]),
                    line=int(start_lines[number]),
                    character=1,
                    column_name=None,
                    message=end_of_record_message("c2"),
                    code=CODE_END_OF_RECORD,
                    field=2,
                )
            )
    if not keep.all():
        table = table.filter(pa.array(keep))
        good_numbers = good_numbers[keep]
    if repaired:
        table, good_numbers = _merge_repaired(table, good_numbers, repaired, names)
    errors.sort(key=lambda e: e.line)
    return RawFile(
        table=table,
        row_numbers=pa.array(row_of_record[good_numbers], pa.int64()),
        line_numbers=pa.array(start_lines[good_numbers], pa.int64()),
        errors=errors,
        rows_parsed=total,
        format="CSV",
        path=path,
        data=body,
        fmt=fmt,
        width=width,
    )


def _count_error(fmt: FileFormat, text: str, actual: int, width: int, row: int, line: int) -> RowError:
    """The RowError of a record whose field count is not ``width``."""
    first_line = text.split("\n", 1)[0]
    if actual < width:
        return RowError(
            row_number=row,
            line=line,
            character=len(first_line) + 1,
            column_name=None,
            message=end_of_record_message(f"c{actual + 1}"),
            code=CODE_END_OF_RECORD,
            field=actual + 1,
        )
    spans = field_spans(text, fmt.field_delimiter, fmt.field_optionally_enclosed_by)
    # The delimiter that ends field `width` is the one Snowflake trips over.
    character = spans[width - 1][1] + 1 if width - 1 < len(spans) else len(first_line) + 1
    return RowError(
        row_number=row,
        line=line,
        character=character,
        column_name=None,
        message=_extra_field_message(fmt),
        code=CODE_EXTRA_FIELD,
        field=width,
    )


def _blank_line_numbers(rest: bytes, newlines: np.ndarray, header_lines: int) -> np.ndarray:
    """Physical line numbers of the empty lines (only a newline, or CR LF) of a CSV file's data part."""
    if len(newlines) == 0:
        return newlines
    starts = np.concatenate(([0], newlines[:-1] + 1))
    lengths = newlines - starts
    data = np.frombuffer(rest, dtype=np.uint8)
    empty = (lengths == 0) | ((lengths == 1) & (data[starts] == 13))
    return np.flatnonzero(empty).astype(np.int64) + header_lines + 1


def _merge_repaired(
    table: pa.Table, good_numbers: np.ndarray, repaired: list[tuple[int, list[str | None]]], names: list[str]
) -> tuple[pa.Table, np.ndarray]:
    """Put padded/truncated records back among the good rows, in file order."""
    extra = pa.table(
        {n: pa.array([vals[i] for _, vals in repaired], pa.string()) for i, n in enumerate(names)}
    )
    numbers = np.concatenate([good_numbers, np.array([n for n, _ in repaired], dtype=np.int64)])
    merged = pa.concat_tables([table, extra])
    order = np.argsort(numbers, kind="stable")
    return merged.take(pa.array(order)), numbers[order]


def _empty_raw(
    names: Sequence[str], kind: str, path: str, body: bytes, fmt: FileFormat, width: int = 0
) -> RawFile:
    table = pa.table({n: pa.array([], pa.string()) for n in names})
    empty = pa.array([], pa.int64())
    return RawFile(table, empty, empty, [], 0, kind, path, body, fmt, width)


# ---------------------------------------------------------------------------------------------
# JSON


def _read_json(body: bytes, fmt: FileFormat, path: str) -> RawFile:
    """Documents (NDJSON, concatenated or pretty-printed) or, with STRIP_OUTER_ARRAY, array elements."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _utf8_error(body, path, 1) from exc
    scanner = _JsonScanner(text, fmt.strip_outer_array)
    scanner.run()
    return RawFile(
        table=pa.table({"c1": pa.array(scanner.docs, pa.string())}),
        row_numbers=pa.array(scanner.rows, pa.int64()),
        line_numbers=pa.array(scanner.lines, pa.int64()),
        errors=scanner.errors,
        rows_parsed=len(scanner.docs) + len(scanner.errors),
        format="JSON",
        path=path,
        data=body,
        fmt=fmt,
        width=1,
    )


class _JsonScanner:
    """Splits JSON text into documents with Python's C decoder, keeping each one's text and line.

    A document that does not parse is a RowError; scanning resumes on the next line, so in NDJSON
    one bad line costs one row. With STRIP_OUTER_ARRAY a top-level array yields one row per element;
    a syntax error inside it ends the array (its remaining elements cannot be delimited reliably).
    """

    def __init__(self, text: str, strip_outer_array: bool) -> None:
        self.text = text
        self.strip_outer_array = strip_outer_array
        self.decoder = json.JSONDecoder()
        self.escaped_surrogates = _SURROGATE_ESCAPE.search(text) is not None
        self.docs: list[str] = []
        self.rows: list[int] = []
        self.lines: list[int] = []
        self.errors: list[RowError] = []
        # Incremental line counting: line_at() is only asked for increasing positions.
        self._line_pos = 0
        self._line_no = 1

    def line_at(self, pos: int) -> int:
        if pos > self._line_pos:
            self._line_no += self.text.count("\n", self._line_pos, pos)
            self._line_pos = pos
        return self._line_no

    def skip_ws(self, pos: int) -> int:
        match = _JSON_WS.match(self.text, pos)
        return match.end() if match else pos

    def next_line(self, pos: int) -> int:
        nl = self.text.find("\n", pos)
        return len(self.text) if nl < 0 else nl + 1

    def ordinal(self) -> int:
        return len(self.docs) + len(self.errors) + 1

    def fail(self, start: int, msg: str, err_pos: int) -> None:
        text = self.text
        line = self.line_at(start)
        same_line = text.count("\n", start, err_pos) == 0
        detail = msg[:1].lower() + msg[1:]
        self.errors.append(
            RowError(
                row_number=self.ordinal(),
                line=line,
                character=err_pos - text.rfind("\n", 0, err_pos) if same_line else 1,
                column_name=None,
                message=f"Error parsing JSON: {detail}, pos {err_pos - start}",
                code=CODE_JSON_PARSE,
            )
        )

    def take(self, start: int) -> int | None:
        """Decode the value at ``start``; record it (or its error). Returns its end, None on error."""
        try:
            value, end = self.decoder.raw_decode(self.text, start)
        except json.JSONDecodeError as exc:
            self.fail(start, exc.msg, exc.pos)
            return None
        except RecursionError:
            self.fail(start, "Document nested too deeply", start)
            return None
        if self.escaped_surrogates:
            # Python accepts a lone UTF-16 surrogate escape; DuckDB's parser (the transform) does not.
            try:
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except (UnicodeEncodeError, RecursionError):
                self.fail(start, "Invalid Unicode escape (lone surrogate)", start)
                return None
        self.rows.append(self.ordinal())
        self.lines.append(self.line_at(start))
        self.docs.append(self.text[start:end])
        return int(end)

    def run(self) -> None:
        n = len(self.text)
        pos = self.skip_ws(0)
        while pos < n:
            if self.strip_outer_array and self.text[pos] == "[":
                pos = self.array(pos)
            else:
                end = self.take(pos)
                pos = self.next_line(pos) if end is None else end
            pos = self.skip_ws(pos)

    def array(self, pos: int) -> int:
        """Elements of the array opening at ``pos``; returns where scanning resumes.

        After a bad element, scanning resumes on the next line, still inside the array: arrays
        written one element per line lose only the bad element.
        """
        text = self.text
        n = len(text)
        pos = self.skip_ws(pos + 1)
        if pos < n and text[pos] == "]":
            return pos + 1
        while True:
            if pos >= n:
                self.fail(pos, "Unexpected end of input, expecting ']'", pos)
                return n
            end = self.take(pos)
            if end is not None:
                pos = self.skip_ws(end)
                if pos < n and text[pos] == "]":
                    return pos + 1
                if pos < n and text[pos] == ",":
                    pos = self.skip_ws(pos + 1)
                    continue
                if pos >= n:
                    continue
                self.fail(pos, "Expecting ',' delimiter or ']'", pos)
            pos = self.skip_ws(self.next_line(pos))
            if pos < n and text[pos] == "]":
                return pos + 1


# ---------------------------------------------------------------------------------------------
# Parquet


_PARQUET_SOURCE = re.compile(r"^Could not open Parquet input source '[^']*': ")


def _parquet_inflated(parquet: pq.ParquetFile) -> int:
    """Bytes the file's column chunks take once their pages are decompressed, from its footer."""
    md = parquet.metadata
    return sum(
        md.row_group(g).column(c).total_uncompressed_size
        for g in range(md.num_row_groups)
        for c in range(md.num_columns)
    )


def _read_parquet(body: bytes, fmt: FileFormat, path: str, max_bytes: int | None = None) -> RawFile:
    if not body:
        return _empty_raw([], "PARQUET", path, b"", fmt)
    try:
        parquet = pq.ParquetFile(pa.BufferReader(body))
        # Parquet's own page compression is a bomb too: its footer says how far it inflates, and
        # pyarrow allocates pages by their headers' sizes, which must agree with the footer's.
        if max_bytes is not None and _parquet_inflated(parquet) > max_bytes:
            raise PartTooLarge(path, max_bytes, record=False, kind="Parquet")
        table = parquet.read()
        table.schema.names  # noqa: B018 - pyarrow decodes names lazily: a bad one raises only here
    except UnicodeDecodeError as exc:
        raise FileLoadError("Error parsing the parquet file: a column name is not UTF-8", file=path) from exc
    except (pa.ArrowException, OSError, ValueError) as exc:
        detail = _PARQUET_SOURCE.sub("", str(exc))  # the source is Floe's in-memory buffer
        raise FileLoadError(f"Error parsing the parquet file: {detail}", file=path) from exc
    n = table.num_rows
    bad = _invalid_utf8_rows(table)
    errors = [
        RowError(
            row_number=i + 1, line=i + 1, character=1, column_name=None, message=m, code=CODE_INVALID_UTF8
        )
        for i, m in sorted(bad.items())
    ]
    numbers = np.arange(1, n + 1, dtype=np.int64)
    if bad:
        keep = np.ones(n, dtype=bool)
        keep[list(bad)] = False
        table = table.filter(pa.array(keep))
        numbers = numbers[keep]
    rows = pa.array(numbers)
    return RawFile(table, rows, rows, errors, n, "PARQUET", path, b"", fmt, table.num_columns)


def _has_text(t: pa.DataType) -> bool:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return True
    return any(_has_text(t.field(i).type) for i in range(t.num_fields))


def _invalid_utf8_rows(table: pa.Table) -> dict[int, str]:
    """Rows holding a string that is not UTF-8, with their message (the first such column's).

    pyarrow does not check Parquet strings, and one such value in a blob would make DuckDB refuse
    every later query of the table; so the row is an error here, as in Snowflake.
    """
    bad: dict[int, str] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        if not _has_text(col.type):
            continue
        try:
            col.validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        offset = 0
        for chunk in col.chunks:  # rare: find the offending rows one by one
            for j in range(len(chunk)):
                cell = chunk.slice(j, 1)
                try:
                    cell.validate(full=True)
                except pa.ArrowInvalid:
                    bad.setdefault(offset + j, _utf8_message(cell, name))
            offset += len(chunk)
    return bad


def _utf8_message(cell: pa.Array, column: str) -> str:
    t = cell.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        raw = cell.view(pa.large_binary() if pa.types.is_large_string(t) else pa.binary())[0].as_py()
        return f"Invalid UTF8 detected in string '{_show_invalid(raw.decode('utf-8', 'surrogateescape'))}'"
    return f"Invalid UTF8 detected in a string inside column '{column}'"
