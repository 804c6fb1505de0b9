"""CSV: decompressed bytes -> string columns ``c1..cN``, one row per record, and the records that
could not be parsed.

N is the number of fields of the first record, or of the most records when more of them share
another count, unless the caller passes ``columns``. NULL_IF / EMPTY_FIELD_AS_NULL / TRIM_SPACE are
already applied; they do not touch enclosed values, so ``""`` stays an empty string. Records with
another field count are RowErrors (100068 too few, 100016 too many), unless ``columns`` was given
and ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE, in which case they are padded with NULL or truncated. A
blank line is a 100068 RowError unless SKIP_BLANK_LINES (or the record has a single field). Quoted
values may span lines (MULTI_LINE). ESCAPE / ESCAPE_UNENCLOSED_FIELD are not supported: a
backslash is an ordinary character, which keeps the default NULL_IF ``\\N`` working.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.formats.raw import (
    CODE_END_OF_RECORD,
    CODE_EXTRA_FIELD,
    UTF8_BOM,
    FileParseError,
    RawFile,
    RowError,
    empty_raw,
    end_of_record_message,
    find_invalid_utf8,
    show_invalid,
)

Repaired = tuple[int, list[str | None]]
"""A record read with ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE: its ordinal and its padded fields."""


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
        if body.startswith(UTF8_BOM):
            body = body[len(UTF8_BOM) :]
        return read_csv(body, fmt, path)
    rest = fmt.model_copy(update={"skip_header": 0})
    return _read_csv(body, rest, path, width or None, lenient=False)


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
            i += 1
            continue
        if ch == delimiter:
            spans.append((start, i))
            start = i + 1
        elif ch == quote and i == start:
            in_quotes = True
        elif ch == "\n" or ch == "\r":
            break
        i += 1
    spans.append((start, i))
    return spans


# ---------------------------------------------------------------------------------------------
# The reader, step by step


class _BadRecord(NamedTuple):
    """A record pyarrow refused because of its field count."""

    number: int
    """Record ordinal, 1-based as pyarrow counts records; 0 when pyarrow could not tell."""
    fields: int
    """Fields it has."""
    text: str
    """The record as written."""


@dataclass
class _Places:
    """Where the records of a CSV file's data part are; the arrays are indexed by record ordinal
    (1-based, as pyarrow counts records; index 0 unused)."""

    good_numbers: np.ndarray
    """Ordinals of the rows pyarrow returned, in table order."""
    start_lines: np.ndarray
    """Physical line each record starts on."""
    blank: np.ndarray
    """Which records are blank lines (only good rows: pyarrow pads a blank line into a row)."""
    row_of_record: np.ndarray
    """Row number of each record (blank lines skipped by SKIP_BLANK_LINES are not records)."""
    records: int
    """Records of the part, good and bad, without the skipped blank lines."""


def _read_csv(body: bytes, fmt: FileFormat, path: str, columns: int | None, *, lenient: bool) -> RawFile:
    """Parse CSV bytes with ``columns`` fields per record, or the file's own width when None."""
    check_csv_options(fmt, path)
    offset, header_lines = _skip_lines(body, max(0, fmt.skip_header))
    rest = body[offset:]
    width = columns if columns is not None else (_first_record_width(rest, fmt) if rest else 0)
    names = [f"c{i}" for i in range(1, width + 1)]
    if not rest or width == 0:
        return empty_raw(names, "CSV", path, body, fmt, width)

    table, invalid = _parse(rest, fmt, path, names, header_lines)
    if columns is None and (common := _width_most_records_share(table, invalid)) is not None:
        return _read_csv(body, fmt, path, common, lenient=False)
    if fmt.trim_space:
        table = pa.table({n: _clean_column(table.column(n), fmt) for n in names})

    places = _place_records(rest, table, invalid, fmt, width, header_lines)
    placed = [bad for bad in invalid if 0 < bad.number < len(places.start_lines)]
    errors: list[RowError] = []
    repaired: list[Repaired] = []
    if lenient:
        repaired = [(bad.number, _repair_record(bad.text, fmt, width)) for bad in placed]
    else:
        errors = [_count_error(fmt, bad, width, places) for bad in placed]
    if not fmt.skip_blank_lines:
        errors.extend(_blank_line_errors(places))
    table, good_numbers = _drop_blank_rows(table, places)
    if repaired:
        table, good_numbers = _merge_repaired(table, good_numbers, repaired, names)
    errors.sort(key=lambda e: e.line)
    return RawFile(
        table=table,
        row_numbers=pa.array(places.row_of_record[good_numbers], pa.int64()),
        line_numbers=pa.array(places.start_lines[good_numbers], pa.int64()),
        errors=errors,
        rows_parsed=places.records,
        format="CSV",
        path=path,
        data=body,
        fmt=fmt,
        width=width,
    )


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


def _parse(
    rest: bytes, fmt: FileFormat, path: str, names: list[str], header_lines: int
) -> tuple[pa.Table, list[_BadRecord]]:
    """pyarrow's parse of the data part: the rows of ``len(names)`` fields, and the other records."""
    try:
        # Checked up front (cheap for ASCII): pyarrow cannot report bad bytes inside invalid rows.
        rest.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _utf8_error(rest, path, header_lines + 1, fmt) from exc
    invalid: list[_BadRecord] = []

    def on_invalid(row: pacsv.InvalidRow) -> str:
        invalid.append(_BadRecord(row.number or 0, row.actual_columns, row.text))
        return "skip"

    try:
        table = pacsv.read_csv(
            io.BytesIO(rest),
            read_options=_read_options(names, len(rest)),
            parse_options=_parse_options(fmt, on_invalid),
            convert_options=_convert_options(fmt, names),
        )
    except pa.ArrowInvalid as exc:
        if "UTF8" in str(exc) or "utf8" in str(exc).lower():
            raise _utf8_error(rest, path, header_lines + 1, fmt) from exc
        raise FileLoadError(f"Error parsing CSV file: {exc}", file=path) from exc
    except pa.ArrowException as exc:
        raise FileLoadError(f"Error parsing CSV file: {exc}", file=path) from exc
    return table, invalid


def _read_options(names: list[str], size: int) -> pacsv.ReadOptions:
    return pacsv.ReadOptions(
        column_names=names,
        use_threads=False,  # serial parsing keeps InvalidRow.number exact
        block_size=min(max(size + 1, 1 << 16), (1 << 31) - 1),
    )


def _parse_options(fmt: FileFormat, on_invalid: Callable[[pacsv.InvalidRow], str]) -> pacsv.ParseOptions:
    quote = fmt.field_optionally_enclosed_by
    return pacsv.ParseOptions(
        delimiter=fmt.field_delimiter,
        quote_char=quote if quote is not None else False,
        double_quote=True,
        escape_char=False,
        newlines_in_values=quote is not None,  # MULTI_LINE = TRUE
        ignore_empty_lines=False,  # blank lines are records here; handled per SKIP_BLANK_LINES
        invalid_row_handler=on_invalid,
    )


def _convert_options(fmt: FileFormat, names: list[str]) -> pacsv.ConvertOptions:
    nulls = _null_set(fmt)
    return pacsv.ConvertOptions(
        column_types={n: pa.string() for n in names},
        null_values=[] if fmt.trim_space else nulls,
        strings_can_be_null=not fmt.trim_space and bool(nulls),
        # An enclosed empty string is '' even with EMPTY_FIELD_AS_NULL (Snowflake's 100088 hint).
        quoted_strings_can_be_null=False,
    )


def _utf8_error(rest: bytes, path: str, first_line: int, fmt: FileFormat) -> FileLoadError:
    """Where the first invalid UTF-8 sequence is: Snowflake quotes the CSV field that holds it, with
    each bad byte as ``0xNN``: ``Invalid UTF8 detected in string 'Caf0xE9'``."""
    found = find_invalid_utf8(rest, first_line)
    if found is None:
        return FileLoadError("Invalid UTF8 detected", file=path)
    text = found.text
    spans = field_spans(text.rstrip("\r"), fmt.field_delimiter, fmt.field_optionally_enclosed_by)
    number = next((i for i, (_, e) in enumerate(spans) if found.offset < e), len(spans) - 1)
    first, last = spans[number]
    return FileParseError(
        f"Invalid UTF8 detected in string '{show_invalid(text[first:last])}'",
        file=path,
        line=found.line,
        character=first + 1,
        field=number + 1,
    )


def _width_most_records_share(table: pa.Table, invalid: list[_BadRecord]) -> int | None:
    """Another record width, when more records have it than the one the file was read with.

    Records of varying length are errors, but which length is the wrong one? Taking the first
    record's would let one short first line turn every good record after it into an error (and load
    the short one); the length most records share is the file's.
    """
    if not invalid:
        return None
    common, count = Counter(bad.fields for bad in invalid).most_common(1)[0]
    return common if count > table.num_rows else None


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


# ---------------------------------------------------------------------------------------------
# Numbering: record ordinals -> row numbers and physical lines


def _place_records(
    rest: bytes, table: pa.Table, invalid: list[_BadRecord], fmt: FileFormat, width: int, header_lines: int
) -> _Places:
    """Row numbers and start lines of all records, good and bad, and which ones are blank lines."""
    total = table.num_rows + len(invalid)
    good_numbers, is_good = _good_ordinals(table.num_rows, invalid, total)
    newlines = np.flatnonzero(np.frombuffer(rest, dtype=np.uint8) == 10)
    start_lines = _start_lines(rest, newlines, table, invalid, good_numbers, total, header_lines)

    # Blank lines: pyarrow pads them into a row of empty fields, so find them in the bytes.
    blank = np.zeros(total + 1, dtype=bool)
    if width > 1 or fmt.skip_blank_lines:
        blank_lines = _blank_line_numbers(rest, newlines, header_lines)
        if len(blank_lines):
            blank[1:] = np.isin(start_lines[1:], blank_lines)
            blank &= is_good
    row_of_record = np.arange(0, total + 1, dtype=np.int64)
    if fmt.skip_blank_lines and blank.any():
        row_of_record = row_of_record - np.cumsum(blank)
        total -= int(blank.sum())
    return _Places(good_numbers, start_lines, blank, row_of_record, total)


def _good_ordinals(good: int, invalid: list[_BadRecord], total: int) -> tuple[np.ndarray, np.ndarray]:
    """Record ordinals of the good rows (the ones not reported invalid), and a mask of them."""
    is_good = np.ones(total + 1, dtype=bool)
    is_good[0] = False
    for bad in invalid:
        if 0 < bad.number <= total:
            is_good[bad.number] = False
    good_numbers = np.flatnonzero(is_good)
    if len(good_numbers) != good:  # pyarrow could not number some row; fall back to file order
        good_numbers = np.arange(1, good + 1)
        is_good = np.zeros(total + 1, dtype=bool)
        is_good[good_numbers] = True
    return good_numbers, is_good


def _start_lines(
    rest: bytes,
    newlines: np.ndarray,
    table: pa.Table,
    invalid: list[_BadRecord],
    good_numbers: np.ndarray,
    total: int,
    header_lines: int,
) -> np.ndarray:
    """Physical start line of each record, from the newlines inside the records before it."""
    physical_lines = len(newlines) + (0 if rest.endswith(b"\n") else 1)
    extra_newlines = np.zeros(total + 1, dtype=np.int64)
    if physical_lines != total:  # some record spans lines
        extra_newlines[good_numbers] = _newlines_per_row(table)
        for bad in invalid:
            if 0 < bad.number <= total:
                extra_newlines[bad.number] = bad.text.count("\n")
    # start line of record k = header + 1 + (k - 1) + newlines inside records 1..k-1
    return (
        header_lines
        + np.arange(0, total + 1, dtype=np.int64)
        + np.concatenate(([0], np.cumsum(extra_newlines[:-1])))
    )


def _newlines_per_row(table: pa.Table) -> np.ndarray:
    """Newlines inside the values of each row (quoted values spanning lines)."""
    per_row = np.zeros(table.num_rows, dtype=np.int64)
    for name in table.column_names:
        counts = pc.count_substring(table.column(name), "\n").to_numpy(zero_copy_only=False)
        per_row += np.nan_to_num(counts.astype(np.float64), nan=0).astype(np.int64)
    return per_row


def _blank_line_numbers(rest: bytes, newlines: np.ndarray, header_lines: int) -> np.ndarray:
    """Physical line numbers of the empty lines (only a newline, or CR LF) of a CSV file's data part."""
    if len(newlines) == 0:
        return newlines
    starts = np.concatenate(([0], newlines[:-1] + 1))
    lengths = newlines - starts
    data = np.frombuffer(rest, dtype=np.uint8)
    empty = (lengths == 0) | ((lengths == 1) & (data[starts] == 13))
    return np.flatnonzero(empty).astype(np.int64) + header_lines + 1


# ---------------------------------------------------------------------------------------------
# Bad records: errors, or repairs with ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE


def _printable(delim: str) -> str:
    """A delimiter as Snowflake prints it in messages (escape sequences for control characters)."""
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(delim, delim)


def _extra_field_message(fmt: FileFormat) -> str:
    return (
        f"Field delimiter '{_printable(fmt.field_delimiter)}' found while expecting record delimiter "
        f"'{_printable(fmt.record_delimiter or chr(10))}'"
    )


def _count_error(fmt: FileFormat, bad: _BadRecord, width: int, places: _Places) -> RowError:
    """The RowError of a record whose field count is not ``width``."""
    row = int(places.row_of_record[bad.number])
    line = int(places.start_lines[bad.number])
    first_line = bad.text.split("\n", 1)[0]
    if bad.fields < width:
        return RowError(
            row_number=row,
            line=line,
            character=len(first_line) + 1,
            column_name=None,
            message=end_of_record_message(f"c{bad.fields + 1}"),
            code=CODE_END_OF_RECORD,
            field=bad.fields + 1,
        )
    spans = field_spans(bad.text, fmt.field_delimiter, fmt.field_optionally_enclosed_by)
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


def _blank_line_errors(places: _Places) -> list[RowError]:
    """SKIP_BLANK_LINES = FALSE: each blank line is a record that ends before its second field."""
    return [
        RowError(
            row_number=int(places.row_of_record[number]),
            line=int(places.start_lines[number]),
            character=1,
            column_name=None,
            message=end_of_record_message("c2"),
            code=CODE_END_OF_RECORD,
            field=2,
        )
        for number in np.flatnonzero(places.blank).tolist()
    ]


def _drop_blank_rows(table: pa.Table, places: _Places) -> tuple[pa.Table, np.ndarray]:
    """The rows that are not blank lines, and their record ordinals."""
    keep = ~places.blank[places.good_numbers]
    if keep.all():
        return table, places.good_numbers
    return table.filter(pa.array(keep)), places.good_numbers[keep]


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


def _merge_repaired(
    table: pa.Table, good_numbers: np.ndarray, repaired: list[Repaired], names: list[str]
) -> tuple[pa.Table, np.ndarray]:
    """Put padded/truncated records back among the good rows, in file order."""
    extra = pa.table(
        {n: pa.array([vals[i] for _, vals in repaired], pa.string()) for i, n in enumerate(names)}
    )
    numbers = np.concatenate([good_numbers, np.array([n for n, _ in repaired], dtype=np.int64)])
    merged = pa.concat_tables([table, extra])
    order = np.argsort(numbers, kind="stable")
    return merged.take(pa.array(order)), numbers[order]
