"""CSV: decompressed bytes -> string columns ``c1..cN``, one row per record, and the records that
could not be parsed.

The bytes are converted from ENCODING to UTF-8 first (``pipeline.chunks.to_utf8``); a byte-order
mark is dropped (SKIP_BYTE_ORDER_MARK, the default) or kept as the first field's first character.

N is the number of fields of the first record, or of the most records when more of them share
another count, unless the caller passes ``columns``. NULL_IF / EMPTY_FIELD_AS_NULL / TRIM_SPACE are
already applied; they do not touch enclosed values, so ``""`` stays an empty string. Records with
another field count are RowErrors (100068 too few, 100016 too many), unless ``columns`` was given
and ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE, in which case they are padded with NULL or truncated. A
blank line is a 100068 RowError unless SKIP_BLANK_LINES (or the record has a single field).

The rest of Snowflake's CSV options:

- FIELD_DELIMITER and RECORD_DELIMITER: any strings (NONE: ""), neither inside the other. The
  default RECORD_DELIMITER, newline, is logical: CR LF and a lone CR end a record too.
- FIELD_OPTIONALLY_ENCLOSED_BY: a field that starts with the quote (after blanks, with TRIM_SPACE)
  is enclosed: delimiters inside it are data, a doubled quote is one quote, and text after its
  closing quote is added to the value (as pyarrow does). An enclosed value is never NULL.
- ESCAPE (enclosed fields): before the quote or itself, that character; before anything else, kept.
- ESCAPE_UNENCLOSED_FIELD (unenclosed fields, backslash by default): before the field delimiter,
  the record delimiter or itself, that text as data (so a record ending in ``\\`` runs on into the
  next line); before anything else, kept as written (``C:\\temp`` stays as it is). NULL_IF compares
  the field as written, before escapes are undone: ``\\N`` is NULL, ``\\\\N`` the string ``\\N``.
- MULTI_LINE = FALSE: a record with a record delimiter inside a field (enclosed, or escaped) is an
  error of that record.
- Invalid input (bytes that are not UTF-8, or not ENCODING): the record holding them is an error
  of its own, ``Invalid UTF8 detected in string '<the field, bad bytes as 0xNN>'``, and the other
  records load; REPLACE_INVALID_CHARACTERS = TRUE loads U+FFFD in their place instead.

Two parsers give the same records: pyarrow's, for the files it can read exactly (one ASCII
character as field delimiter, newline records, no ESCAPE in the data, nor with TRIM_SPACE a
quote; ESCAPE_UNENCLOSED_FIELD's sequences become placeholders first when the data holds no
quote, see ``_Plan``), and Floe's tokenizer (a linear regex per record, 15 to 30 times slower)
for the others. Lines: physical lines, that is, newlines, in the header and with the default
RECORD_DELIMITER; with another RECORD_DELIMITER each delimiter ends a line.
"""

from __future__ import annotations

import csv
import io
import itertools
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from floe.catalog.ddl import check_csv_format
from floe.catalog.models import FileFormat
from floe.errors import CompilationError, FileLoadError
from pipeline.chunks import INVALID_MARK, MARK_HIGH, MARK_LOW, to_utf8
from pipeline.formats.raw import (
    CODE_END_OF_RECORD,
    CODE_EXTRA_FIELD,
    CODE_INVALID_UTF8,
    CODE_MULTI_LINE,
    UTF8_BOM,
    RawFile,
    RowError,
    empty_raw,
    end_of_record_message,
)

Repaired = tuple[int, list[str | None]]
"""A record read with ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE: its ordinal and its padded fields."""

_SHOWN_CHARS = 200
"""How much of an offending value an error message quotes."""


def read_csv(body: bytes, fmt: FileFormat, path: str, columns: int | None = None) -> RawFile:
    """Parse decompressed CSV bytes (see ``read_raw``). The RawFile keeps the UTF-8 text as its
    ``data`` and a format saying UTF8, so reading it again gives the same records."""
    text = to_utf8(body, fmt)
    fmt = _as_utf8(fmt)
    if fmt.skip_byte_order_mark and text.startswith(UTF8_BOM):
        text = text[len(UTF8_BOM) :]
    if fmt.parse_header:
        return _read_headed(text, fmt, path, repeated=False)
    lenient = columns is not None and not fmt.error_on_column_count_mismatch
    return _read_csv(text, fmt, path, columns, lenient=lenient)


def read_csv_part(body: bytes, fmt: FileFormat, path: str, *, first: bool, width: int | None) -> RawFile:
    """One record-aligned part of a CSV file read as a stream (``pipeline.chunks.record_chunks``,
    which has converted it to UTF-8 already).

    The first part is read as a whole file would be (byte-order mark, SKIP_HEADER, its record
    width); later parts take ``width`` from the first. Row and line numbers are local to the part;
    the caller sets ``row_offset`` and ``line_offset`` (adding ``lines`` of the parts before).
    """
    fmt = _as_utf8(fmt)
    if first:
        return read_csv(body, fmt, path)
    if fmt.parse_header:  # record_chunks put the file's header record in front of this part again
        if fmt.skip_byte_order_mark and body.startswith(UTF8_BOM):
            body = body[len(UTF8_BOM) :]
        return _read_headed(to_utf8(body, fmt), fmt, path, repeated=True)
    rest = fmt.model_copy(update={"skip_header": 0})
    return _read_csv(to_utf8(body, rest), rest, path, width or None, lenient=False)


def check_csv_options(fmt: FileFormat, path: str) -> None:
    """Reject CSV options that cannot work (FileLoadError), rather than load wrong data: the checks
    CREATE makes (``floe.catalog.ddl.check_csv_format``), here on the stage's and the pipe's options
    together."""
    try:
        check_csv_format(fmt)
    except CompilationError as exc:
        raise FileLoadError(exc.message.removeprefix("SQL compilation error:\n"), file=path) from exc


def _as_utf8(fmt: FileFormat) -> FileFormat:
    return fmt if fmt.encoding == "UTF8" else fmt.model_copy(update={"encoding": "UTF8"})


# ---------------------------------------------------------------------------------------------
# PARSE_HEADER = TRUE: the first record names the columns (decision 82)

_HEADER_WINDOW = 1 << 16
"""Bytes decoded at first to find the header record's end; doubled while it has not ended."""


def header_record(text: bytes, fmt: FileFormat) -> tuple[list[str], int]:
    """PARSE_HEADER: the column names the first record of ``text`` (UTF-8, its byte-order mark
    already handled) gives, and the byte offset where the records after it start.

    The header is read by Floe's tokenizer, whichever parser reads the data, with the file's
    delimiters, quotes, escapes and TRIM_SPACE; NULL_IF and EMPTY_FIELD_AS_NULL do not apply to a
    name (an empty field is the name ''). An empty text has no names."""
    if not text:
        return [], 0
    tokens = _Tokens(fmt.model_copy(update={"null_if": [], "empty_field_as_null": False}))
    window = _HEADER_WINDOW
    while True:
        # A window cut inside a character loses only that character, which the record must end
        # before for the match to count; else the window grows.
        part = text[:window].decode("utf-8", "ignore")
        m = tokens.record_pattern.match(part)
        ended = m is not None and (m.group("r") is not None or window >= len(text))
        if ended or window >= len(text):
            break
        window *= 2
    if m is None:  # cannot happen: a record matches any text, if only as one empty field
        return [""], len(text)
    names: list[str] = []
    for f in tokens.pattern.finditer(m.group("rec")):
        names.append(tokens.value(f) or "")
        if f.group("d") is None:
            break
    return names, len(part[: m.end()].encode("utf-8"))


def _read_headed(text: bytes, fmt: FileFormat, path: str, *, repeated: bool) -> RawFile:
    """A CSV text whose first record is its header (PARSE_HEADER = TRUE): every other record must
    have one field per name (else the 100068 / 100016 errors of its row, as when the table's width
    is expected), or is padded with NULL or cut with ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE. The raw
    table's columns are named by the header, as a columnar file's are, for MATCH_BY_COLUMN_NAME.

    ``repeated``: ``text`` is a later part of a streamed file, with the file's header record put in
    front of it again (``pipeline.chunks.record_chunks``); rows, lines and ``data`` are then the
    part's own, after that header, as for any later part."""
    check_csv_options(fmt, path)
    names, end = header_record(text, fmt)
    lenient = not fmt.error_on_column_count_mismatch
    if repeated:
        raw = _read_csv(text[end:], fmt, path, len(names), lenient=lenient, header=(0, 0))
    else:
        lines = _count_breaks(text[:end], _Dialect.of(fmt).line_break)
        raw = _read_csv(text, fmt, path, len(names), lenient=lenient, header=(end, lines))
    raw.table = pa.Table.from_arrays(raw.table.columns, names=names)
    return raw


# ---------------------------------------------------------------------------------------------
# Floe's tokenizer: one regex match per record, split on the delimiter or read field by field


@dataclass(frozen=True)
class _Dialect:
    """The options that decide where fields and records end."""

    field: str
    record: str
    """RECORD_DELIMITER; "\\n" is the logical newline (CR LF, LF or CR)."""
    quote: str | None
    escape: str | None
    unenclosed: str | None
    trim: bool

    @staticmethod
    def of(fmt: FileFormat) -> _Dialect:
        quote = fmt.field_optionally_enclosed_by
        return _Dialect(
            field=fmt.field_delimiter,
            record=fmt.record_delimiter,
            quote=quote,
            escape=fmt.escape if quote is not None else None,
            unenclosed=fmt.escape_unenclosed_field,
            trim=fmt.trim_space,
        )

    @property
    def line_break(self) -> str:
        """What ends a line for numbering: a newline, or the RECORD_DELIMITER when it is another."""
        return self.record if self.record not in ("\n", "") else "\n"

    @property
    def record_regex(self) -> str:
        if self.record == "\n":
            return r"\r\n|\n|\r"
        return re.escape(self.record) if self.record else r"(?!)"

    @property
    def field_regex(self) -> str:
        return re.escape(self.field) if self.field else r"(?!)"


def _field_regexes(dialect: _Dialect) -> tuple[str | None, str]:
    """The regex of an enclosed field (None without a quote character), with groups ``o`` (the
    opening quote), ``q`` (its content) and ``t`` (text after the closing quote), and of an
    unenclosed one, group ``u``.

    Linear: a field is a run of plain characters, then of special sequences (an escape and what it
    escapes, a doubled quote, a delimiter's first character that does not start one here) each
    followed by plain characters again; every quantifier is possessive, so nothing is tried twice,
    and a lookahead is at most a delimiter long. A field stops only where a delimiter or the end
    of the text is, so what follows it always matches.
    """
    d, r = dialect.field_regex, dialect.record_regex
    firsts = {dialect.field[:1], *(("\r", "\n") if dialect.record == "\n" else (dialect.record[:1],))}
    firsts.discard("")
    u = dialect.unenclosed
    plain_chars = "".join(re.escape(c) for c in sorted(firsts | ({u} if u else set())))
    plain = f"[^{plain_chars}]*+" if plain_chars else ".*+"
    specials: list[str] = []
    if u:
        specials.append(f"{re.escape(u)}(?:{r}|{d}|.|\\Z)")
    if any(len(x) > 1 for x in (dialect.field, dialect.record if dialect.record != "\n" else "")):
        # a delimiter's first character that does not start a delimiter here is data
        specials.append(f"(?!{d}|{r})[{''.join(re.escape(c) for c in sorted(firsts))}]")
    unenclosed = f"(?P<u>{_run(plain, specials)})"
    q = dialect.quote
    if q is None:
        return None, unenclosed
    qe = re.escape(q)
    e = dialect.escape
    if e is not None and e != q:
        ee = re.escape(e)
        content = _run(f"[^{qe}{ee}]*+", [f"{qe}{qe}", f"{ee}(?:.|\\Z)"])
    else:
        content = _run(f"[^{qe}]*+", [f"{qe}{qe}"])
    lead = "[ \\t]*+" if dialect.trim else ""
    trail = f"(?:(?!{d}|{r}).)*+"
    return f"(?P<o>{lead}{qe})(?P<q>{content})(?:{qe}(?P<t>{trail})|\\Z)", unenclosed


def _run(plain: str, specials: list[str]) -> str:
    """Plain characters, then any number of special sequences each followed by plain characters."""
    if not specials:
        return plain
    return f"{plain}(?:(?:{'|'.join(specials)}){plain})*+"


@lru_cache(maxsize=64)
def _pattern(dialect: _Dialect) -> re.Pattern[str]:
    """One field and what ends it: the groups of ``_field_regexes``, and ``d`` a field delimiter,
    ``r`` a record delimiter (neither: the end of the text)."""
    enclosed, unenclosed = _field_regexes(dialect)
    field = unenclosed if enclosed is None else f"{enclosed}|{unenclosed}"
    d, r = dialect.field_regex, dialect.record_regex
    return re.compile(f"(?:{field})(?:(?P<d>{d})|(?P<r>{r})|\\Z)", re.S)


@lru_cache(maxsize=64)
def _record_pattern(dialect: _Dialect) -> re.Pattern[str]:
    """One record (group ``rec``) and what ends it (``r``, or the end of the text): fields and
    field delimiters, as ``_pattern`` reads them, in one match."""
    enclosed, unenclosed = _field_regexes(dialect)
    field = unenclosed if enclosed is None else f"(?>{enclosed}|{unenclosed})"
    field = re.sub(r"\(\?P<\w+>", "(?:", field)  # the groups are the field pattern's business
    d, r = dialect.field_regex, dialect.record_regex
    return re.compile(f"(?P<rec>{field}(?:{d}{field})*+)(?:(?P<r>{r})|\\Z)", re.S)


@lru_cache(maxsize=64)
def _enclosed_escapes(quote: str, escape: str | None) -> re.Pattern[str]:
    """In an enclosed value, left to right: a doubled quote, or ESCAPE and the quote or itself
    (group 1), or ESCAPE before anything else (kept)."""
    qe = re.escape(quote)
    if escape is None or escape == quote:
        return re.compile(qe + qe)
    ee = re.escape(escape)
    return re.compile(f"{qe}{qe}|{ee}(?:({qe}|{ee})|(?=.)|\\Z)", re.S)


@lru_cache(maxsize=64)
def _unenclosed_escapes(dialect: _Dialect) -> re.Pattern[str]:
    """In an unenclosed value: ESCAPE_UNENCLOSED_FIELD and a delimiter or itself (group 1), or it
    before anything else (kept)."""
    assert dialect.unenclosed is not None
    ue = re.escape(dialect.unenclosed)
    special = f"{dialect.record_regex}|{dialect.field_regex}|{ue}"
    return re.compile(f"{ue}(?:({special})|(?=.)|\\Z)", re.S)


class _Tokens:
    """Fields and records of a text, by Floe's tokenizer."""

    def __init__(self, fmt: FileFormat) -> None:
        self.dialect = d = _Dialect.of(fmt)
        self.pattern = _pattern(d)
        self.record_pattern = _record_pattern(d)
        self.nulls = frozenset(_null_set(fmt))
        self.quote = d.quote or ""
        self.escape = d.escape
        self.enclosed = _enclosed_escapes(d.quote, d.escape) if d.quote is not None else None
        self.unenclosed = d.unenclosed
        self.unenclosed_escapes = _unenclosed_escapes(d) if d.unenclosed is not None else None

    def value(self, m: re.Match[str]) -> str | None:
        """The value of the field a match of the pattern read: escapes undone, TRIM_SPACE, NULL_IF
        and EMPTY_FIELD_AS_NULL applied (to unenclosed fields, as written)."""
        text = m.group("u")
        if text is None:  # enclosed
            value = m.group("q")
            if self.enclosed is not None and (self.quote in value or (self.escape and self.escape in value)):
                value = self.enclosed.sub(self._enclosed_sequence, value)
            trail = m.group("t")
            if trail:
                value += trail.rstrip(" \t") if self.dialect.trim else trail
            return value
        if self.dialect.trim:
            text = text.strip(" \t")
        if text in self.nulls:
            return None
        if self.unenclosed is not None and self.unenclosed in text:
            assert self.unenclosed_escapes is not None
            text = self.unenclosed_escapes.sub(self._unenclosed_sequence, text)
        return text

    def _enclosed_sequence(self, m: re.Match[str]) -> str:
        if m.group(0) == self.quote * 2:
            return self.quote
        escaped = m.group(1) if m.re.groups else None
        return escaped if escaped is not None else m.group(0)

    def _unenclosed_sequence(self, m: re.Match[str]) -> str:
        escaped = m.group(1)
        return escaped if escaped is not None else m.group(0)

    def records(self, text: str) -> tuple[list[list[str | None]], list[int], list[int]]:
        """Every record's values, start and end offsets (its delimiter excluded). A record without
        quote or escape characters is split on the field delimiter; the others are read field by
        field."""
        values: list[list[str | None]] = []
        starts: list[int] = []
        ends: list[int] = []
        n = len(text)
        delimiter = self.dialect.field
        quote, escape = self.quote, self.unenclosed or ""
        nulls, trim = self.nulls, self.dialect.trim
        for m in self.record_pattern.finditer(text):
            start, end = m.span("rec")
            if start == n:
                break  # nothing after the last record delimiter
            record = m.group("rec")
            if (quote and quote in record) or (escape and escape in record):
                fields = []
                for f in self.pattern.finditer(record):
                    fields.append(self.value(f))
                    if f.group("d") is None:
                        break
            else:
                parts = record.split(delimiter) if delimiter else [record]
                if trim:
                    parts = [p.strip(" \t") for p in parts]
                fields = [None if p in nulls else p for p in parts]
            values.append(fields)
            starts.append(start)
            ends.append(end)
        return values, starts, ends


def _closed(m: re.Match[str]) -> bool:
    return "o" in m.re.groupindex and m.group("o") is not None and m.group("t") is not None


def _field_end(m: re.Match[str]) -> int:
    """End of a field's own text (before its delimiter)."""
    if m.group("d") is not None:
        return m.start("d")
    if m.group("r") is not None:
        return m.start("r")
    return m.end()


def field_spans(
    record: str,
    delimiter: str,
    quote: str | None,
    *,
    record_delimiter: str = "\n",
    escape: str | None = None,
    unenclosed_escape: str | None = None,
) -> list[tuple[int, int]]:
    """0-based (start, end) character offsets of each field of one CSV record (quotes included)."""
    fmt = FileFormat(
        field_delimiter=delimiter,
        record_delimiter=record_delimiter,
        field_optionally_enclosed_by=quote,
        escape=escape,
        escape_unenclosed_field=unenclosed_escape,
    )
    return _spans(record, fmt)


def _spans(record: str, fmt: FileFormat) -> list[tuple[int, int]]:
    tokens = _Tokens(fmt)
    out: list[tuple[int, int]] = []
    for m in tokens.pattern.finditer(record):
        end = m.end("t") if _closed(m) else _field_end(m)
        out.append((m.start(), end))
        if m.group("d") is None:
            break
    return out or [(0, 0)]


def csv_field_character(data: bytes, fmt: FileFormat, line: int, field_no: int) -> int:
    """1-based character position of CSV field ``field_no`` in the record that starts on ``line``
    of ``data`` (a RawFile's UTF-8 text and format)."""
    start = _line_start(data, fmt, line)
    if start is None:
        return 1
    window = data[start : start + 65536].decode("utf-8", "replace")
    spans = _spans(window, fmt)
    if 0 < field_no <= len(spans):
        return spans[field_no - 1][0] + 1
    return 1


_FIND_LINES_BELOW = 2000
"""Below this line number, a few finds are cheaper than one vectorised pass over the whole text."""


def _line_start(data: bytes, fmt: FileFormat, line: int) -> int | None:
    """Offset where line ``line`` (1-based) starts: header lines end with a newline, the others with
    the line break of the dialect. None when there is no such line."""
    brk = _Dialect.of(fmt).line_break.encode("utf-8")
    header = min(max(0, fmt.skip_header), line - 1)
    offset = _nth_end(data, b"\n", header, 0)
    if offset is None:
        return None
    if brk == b"\n" and _lone_crs(data, offset):
        ends = (m.end() for m in _LOGICAL_BREAK.finditer(data, offset))
        return next(itertools.islice(ends, line - 2 - header, None), None) if line - 1 > header else offset
    return _nth_end(data, brk, line - 1 - header, offset)


_LOGICAL_BREAK = re.compile(rb"\r\n?|\n")
"""The default RECORD_DELIMITER: a newline is "logical", CR LF, LF or a lone CR."""


def _lone_crs(data: bytes, offset: int = 0) -> int:
    """Carriage returns not followed by a line feed (each ends a line of its own)."""
    crs = data.count(b"\r", offset)
    return crs - data.count(b"\r\n", offset) if crs else 0


def _count_breaks(rest: bytes, brk: str) -> int:
    """Line breaks in ``rest``: newlines (and lone CRs) by default, else the RECORD_DELIMITER's."""
    if brk == "\n":
        return rest.count(b"\n") + _lone_crs(rest)
    return rest.count(brk.encode("utf-8"))


def _nth_end(data: bytes, token: bytes, count: int, offset: int) -> int | None:
    """Offset just past the ``count``-th ``token`` from ``offset`` (``offset`` for 0)."""
    if count <= 0:
        return offset
    if count >= _FIND_LINES_BELOW and len(token) == 1:
        found = np.flatnonzero(np.frombuffer(data, dtype=np.uint8, offset=offset) == token[0])
        return None if count > len(found) else offset + int(found[count - 1]) + 1
    at = offset - len(token)
    for _ in range(count):
        at = data.find(token, at + len(token))
        if at < 0:
            return None
    return at + len(token)


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


def _read_csv(
    body: bytes,
    fmt: FileFormat,
    path: str,
    columns: int | None,
    *,
    lenient: bool,
    header: tuple[int, int] | None = None,
) -> RawFile:
    """Parse UTF-8 CSV text with ``columns`` fields per record, or the file's own width when None.
    ``header``: where the data starts and the lines before it (PARSE_HEADER's record), instead of
    SKIP_HEADER's lines."""
    check_csv_options(fmt, path)
    offset, header_lines = header if header is not None else _skip_lines(body, max(0, fmt.skip_header))
    rest = body[offset:]
    plan = _pyarrow_plan(rest, fmt)
    if plan is not None:
        raw = _read_with_pyarrow(body, rest, fmt, path, columns, header_lines, lenient=lenient, plan=plan)
    else:
        raw = _read_with_tokens(body, rest, fmt, path, columns, header_lines, lenient=lenient)
    raw.lines = header_lines + _count_breaks(rest, _Dialect.of(fmt).line_break)
    return _reject_rows(raw, fmt)


@dataclass(frozen=True)
class _Plan:
    """How pyarrow reads a file's data part: ``parsed``, which is the part itself or the part with
    each sequence of ESCAPE_UNENCLOSED_FIELD and what it escapes replaced by one private-use
    character, and the format to parse it with (NULL_IF written the same way)."""

    parsed: bytes
    fmt: FileFormat
    values: dict[str, str]
    """Placeholder -> the text it stands for in a value (the escaped delimiter, newline, escape)."""
    spellings: dict[str, str]
    """Placeholder -> the text it replaced (the escape and what it escapes), for error positions."""

    def restore(self, col: pa.ChunkedArray) -> pa.ChunkedArray:
        """A column's values with the placeholders back to what they stand for."""
        if not self.values or not pc.any(pc.match_substring_regex(col, _PLACEHOLDERS)).as_py():
            return col
        for placeholder, value in self.values.items():
            col = pc.replace_substring(col, placeholder, value)
        return col

    def restore_values(self, values: list[str | None]) -> list[str | None]:
        return [v if v is None else _replaced(v, self.values) for v in values]

    def spelled(self, text: str) -> str:
        """A record's text as the file spells it."""
        return _replaced(text, self.spellings)


_PLACEHOLDERS = "[\ue000-\ue004]"


def _replaced(text: str, mapping: dict[str, str]) -> str:
    for old, new in mapping.items():
        text = text.replace(old, new)
    return text


def _pyarrow_plan(rest: bytes, fmt: FileFormat) -> _Plan | None:
    """How pyarrow's parser can read ``rest`` exactly as Floe's tokenizer would, or None if it
    cannot: a one-character ASCII field delimiter, newline records, no lone CR, no byte-order mark
    (pyarrow drops it), no ESCAPE in the data and, with TRIM_SPACE, no quote (pyarrow would not see
    one after blanks). ESCAPE_UNENCLOSED_FIELD in the data is replaced by placeholders when the data
    holds no quote (inside quotes it is data)."""
    delimiter, quote = fmt.field_delimiter, fmt.field_optionally_enclosed_by
    single = [c for c in (delimiter, quote) if c is not None]
    if fmt.record_delimiter != "\n" or any(len(c) != 1 or not c.isascii() or c in "\r\n" for c in single):
        return None
    quoted = quote is not None and quote.encode() in rest
    if (fmt.trim_space and quoted) or rest.startswith(UTF8_BOM) or _lone_crs(rest):
        return None
    if quote is not None and fmt.escape and fmt.escape.encode("utf-8") in rest:
        return None
    escape = fmt.escape_unenclosed_field
    if not escape or escape.encode("utf-8") not in rest:
        return _Plan(rest, fmt, {}, {})
    if quoted or not escape.isascii() or b"\xee\x80" in rest:  # U+E000.. is in the data
        return None
    specials = [delimiter, escape, "\r\n", "\n", "\r"]
    placeholders = [chr(0xE000 + i) for i in range(len(specials))]
    by_bytes = {s.encode(): p.encode() for s, p in zip(specials, placeholders, strict=True)}
    sequence = re.compile(re.escape(escape.encode()) + b"(" + b"|".join(map(re.escape, by_bytes)) + b")")
    parsed = sequence.sub(lambda m: by_bytes[m.group(1)], rest)
    nulls = [sequence.sub(lambda m: by_bytes[m.group(1)], n.encode()).decode() for n in fmt.null_if]
    return _Plan(
        parsed,
        fmt.model_copy(update={"null_if": nulls}),
        dict(zip(placeholders, specials, strict=True)),
        {p: escape + s for p, s in zip(placeholders, specials, strict=True)},
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


# ---------------------------------------------------------------------------------------------
# pyarrow's parser


def _read_with_pyarrow(
    body: bytes,
    rest: bytes,
    fmt: FileFormat,
    path: str,
    columns: int | None,
    header_lines: int,
    *,
    lenient: bool,
    plan: _Plan,
) -> RawFile:
    """The records of ``rest`` by pyarrow's parser, as ``plan`` says."""
    parsed = plan.parsed
    width = columns if columns is not None else (_first_record_width(parsed, fmt) if rest else 0)
    names = [f"c{i}" for i in range(1, width + 1)]
    if not rest or width == 0:
        return empty_raw(names, "CSV", path, body, fmt, width)

    table, invalid = _parse(parsed, plan.fmt, path, names)
    if columns is None and (common := _width_most_records_share(table, invalid)) is not None:
        return _read_with_pyarrow(body, rest, fmt, path, common, header_lines, lenient=False, plan=plan)
    if fmt.trim_space:
        table = pa.table({n: _clean_column(table.column(n), plan.fmt) for n in names})
    as_parsed = invalid
    if plan.values:  # escapes written with placeholders: values as the escapes say, records as written
        table = pa.table({n: plan.restore(table.column(n)) for n in names})
        invalid = [bad._replace(text=plan.spelled(bad.text)) for bad in invalid]

    places = _place_records(rest, table, invalid, fmt, width, header_lines)
    table = _last_field_unquoted(table, rest, fmt, places)
    placed = [bad for bad in invalid if 0 < bad.number < len(places.start_lines)]
    errors: list[RowError] = []
    repaired: list[Repaired] = []
    if lenient:
        repaired = [
            (bad.number, plan.restore_values(_repair_record(bad.text, plan.fmt, width)))
            for bad in as_parsed
            if 0 < bad.number < len(places.start_lines)
        ]
    else:
        errors = [
            _count_error(
                fmt,
                bad.fields,
                bad.text,
                width,
                int(places.row_of_record[bad.number]),
                int(places.start_lines[bad.number]),
            )
            for bad in placed
        ]
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


def _last_field_unquoted(table: pa.Table, rest: bytes, fmt: FileFormat, places: _Places) -> pa.Table:
    """A file that ends with a field delimiter, without a newline, ends with an empty unenclosed
    field; after an enclosed one, pyarrow reads it as enclosed (''), so EMPTY_FIELD_AS_NULL is
    applied here."""
    if rest.endswith(b"\n") or not rest.endswith(fmt.field_delimiter.encode()) or not table.num_rows:
        return table
    if "" not in _null_set(fmt) or places.good_numbers[-1] != len(places.start_lines) - 1:
        return table  # the last record is not among the rows
    last = table.column(table.num_columns - 1)
    if last[-1].as_py() != "":
        return table
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[-1] = True
    nulled = pc.if_else(pa.array(mask), pa.scalar(None, pa.string()), last)
    return table.set_column(table.num_columns - 1, table.column_names[-1], nulled)


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


def _parse(rest: bytes, fmt: FileFormat, path: str, names: list[str]) -> tuple[pa.Table, list[_BadRecord]]:
    """pyarrow's parse of the data part (valid UTF-8): the rows of ``len(names)`` fields, and the
    other records."""
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
        escape_char=False,  # only files without the escape characters come here
        newlines_in_values=quote is not None,  # MULTI_LINE = FALSE is checked on the values
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
    """TRIM_SPACE for one column pyarrow read (no quote character in the data: see
    ``_pyarrow_reads``): strip blanks, then NULL_IF."""
    trimmed = pc.utf8_trim(col, characters=" \t")
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
# Floe's tokenizer


def _read_with_tokens(
    body: bytes,
    rest: bytes,
    fmt: FileFormat,
    path: str,
    columns: int | None,
    header_lines: int,
    *,
    lenient: bool,
) -> RawFile:
    """The records of ``rest`` by Floe's tokenizer, numbered and checked as pyarrow's are."""
    text = rest.decode("utf-8")
    tokens = _Tokens(fmt)
    values, start_list, end_list = tokens.records(text)
    starts = np.array(start_list, dtype=np.int64)
    blank = starts == np.array(end_list, dtype=np.int64)
    counts = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    width = columns if columns is not None else _token_width(counts, blank)
    names = [f"c{i}" for i in range(1, width + 1)]
    if not values or width == 0:
        return empty_raw(names, "CSV", path, body, fmt, width)

    lines = header_lines + 1 + _breaks_before(rest, text, starts, tokens.dialect.line_break)
    blank &= width > 1 or fmt.skip_blank_lines
    counted = ~blank if fmt.skip_blank_lines else np.ones(len(values), dtype=bool)
    row_of = np.cumsum(counted)
    wrong = ~blank & (counts != width)
    good = ~blank & (lenient | ~wrong)
    errors = [_blank_line_error(int(row_of[i]), int(lines[i])) for i in np.flatnonzero(blank & counted)]
    if not lenient:
        for i in np.flatnonzero(wrong).tolist():
            record = text[start_list[i] : end_list[i]]
            errors.append(_count_error(fmt, int(counts[i]), record, width, int(row_of[i]), int(lines[i])))
        errors.sort(key=lambda e: e.line)
    keep = np.flatnonzero(good)
    rows = [values[i] for i in keep.tolist()]
    if lenient:
        rows = [r if len(r) == width else (r + [None] * width)[:width] for r in rows]
    by_column = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    return RawFile(
        table=pa.table({n: pa.array(by_column[j], pa.string()) for j, n in enumerate(names)}),
        row_numbers=pa.array(row_of[keep], pa.int64()),
        line_numbers=pa.array(lines[keep], pa.int64()),
        errors=errors,
        rows_parsed=int(row_of[-1]),
        format="CSV",
        path=path,
        data=body,
        fmt=fmt,
        width=width,
    )


def _breaks_before(rest: bytes, text: str, starts: np.ndarray, brk: str) -> np.ndarray:
    """How many line breaks come before each offset of ``starts`` in ``text`` (``rest`` decoded)."""
    lone_crs = brk == "\n" and _lone_crs(rest) > 0
    if len(brk) == 1 and rest.isascii() and not lone_crs:  # text offsets are byte offsets
        breaks = np.flatnonzero(np.frombuffer(rest, dtype=np.uint8) == ord(brk))
        return np.searchsorted(breaks, starts, side="left")
    out = np.empty(len(starts), dtype=np.int64)
    seen = previous = 0
    for i, start in enumerate(starts.tolist()):
        seen += text.count(brk, previous, start)
        if lone_crs:  # a CR LF cannot straddle a record's start: the record delimiter takes both
            seen += text.count("\r", previous, start) - text.count("\r\n", previous, start)
        previous = start
        out[i] = seen
    return out


def _token_width(counts: np.ndarray, blank: np.ndarray) -> int:
    """The width pyarrow's reading would take: the first non-blank record's, unless more records
    share another (blank lines agree with any width)."""
    filled = counts[~blank]
    if not len(filled):
        return 1 if len(counts) else 0
    first = int(filled[0])
    others = Counter(filled[filled != first].tolist())
    if not others:
        return first
    agreeing = int(blank.sum()) + int((filled == first).sum())
    common, count = others.most_common(1)[0]
    return int(common) if count > agreeing else first


# ---------------------------------------------------------------------------------------------
# Bad records: errors, or repairs with ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE


def _printable(delim: str) -> str:
    """A delimiter as Snowflake prints it in messages (escape sequences for control characters)."""
    return "".join({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c, c) for c in delim)


def _extra_field_message(fmt: FileFormat) -> str:
    return (
        f"Field delimiter '{_printable(fmt.field_delimiter)}' found while expecting record delimiter "
        f"'{_printable(fmt.record_delimiter or chr(10))}'"
    )


def _count_error(fmt: FileFormat, fields: int, text: str, width: int, row: int, line: int) -> RowError:
    """The RowError of a record (``text``, of ``fields`` fields) when ``width`` are expected."""
    first_line = text.split(_Dialect.of(fmt).line_break, 1)[0]
    if fields < width:
        return RowError(
            row_number=row,
            line=line,
            character=len(first_line) + 1,
            column_name=None,
            message=end_of_record_message(f"c{fields + 1}"),
            code=CODE_END_OF_RECORD,
            field=fields + 1,
        )
    spans = _spans(text, fmt)
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


def _blank_line_error(row: int, line: int) -> RowError:
    """SKIP_BLANK_LINES = FALSE: a blank line is a record that ends before its second field."""
    return RowError(
        row_number=row,
        line=line,
        character=1,
        column_name=None,
        message=end_of_record_message("c2"),
        code=CODE_END_OF_RECORD,
        field=2,
    )


def _blank_line_errors(places: _Places) -> list[RowError]:
    return [
        _blank_line_error(int(places.row_of_record[number]), int(places.start_lines[number]))
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


# ---------------------------------------------------------------------------------------------
# Rows that parsed but cannot load: MULTI_LINE = FALSE, invalid characters


def _reject_rows(raw: RawFile, fmt: FileFormat) -> RawFile:
    """Make errors of the rows with a record delimiter inside a value (MULTI_LINE = FALSE) or with
    an invalid byte (marked by ``to_utf8``); the other rows stay."""
    table = raw.table
    if table.num_rows == 0 or table.num_columns == 0:
        return raw
    checks: list[tuple[str, str]] = []
    if not fmt.multi_line and fmt.record_delimiter:
        if fmt.record_delimiter == "\n":
            checks.append(("multi_line", "[\r\n]"))
        else:
            checks.append(("multi_line", re.escape(fmt.record_delimiter)))
    if not raw.data.isascii() and b"\xef\xb7" in raw.data:  # the first two bytes of a mark
        checks.append(("invalid", INVALID_MARK.pattern))
    if not checks:
        return raw
    found: dict[int, tuple[str, int]] = {}  # row -> (check, 1-based field)
    for kind, pattern in checks:
        for j, name in enumerate(table.column_names):
            hit = pc.match_substring_regex(table.column(name), pattern=pattern)
            for i in np.flatnonzero(hit.to_numpy(zero_copy_only=False) == True).tolist():  # noqa: E712
                found.setdefault(i, (kind, j + 1))
    if not found:
        return raw
    keep = np.ones(table.num_rows, dtype=bool)
    keep[list(found)] = False
    rows, lines = raw.row_numbers.to_numpy(), raw.line_numbers.to_numpy()
    errors = list(raw.errors)
    for i, (kind, field_no) in sorted(found.items()):
        line = int(lines[i])
        character = csv_field_character(raw.data, fmt, line, field_no)
        value = table.column(field_no - 1)[i].as_py() or ""
        if kind == "multi_line":
            code, message = CODE_MULTI_LINE, _multi_line_message(fmt)
        else:
            code, message = CODE_INVALID_UTF8, f"Invalid UTF8 detected in string '{show_marked(value)}'"
        errors.append(RowError(int(rows[i]), line, character, None, message, code, field_no))
    errors.sort(key=lambda e: e.line)
    mask = pa.array(keep)
    raw.table = table.filter(mask)
    raw.row_numbers = pa.array(rows[keep], pa.int64())
    raw.line_numbers = pa.array(lines[keep], pa.int64())
    raw.errors = errors
    return raw


def _multi_line_message(fmt: FileFormat) -> str:
    return (
        f"Record delimiter '{_printable(fmt.record_delimiter)}' found inside a field, and MULTI_LINE is FALSE"
    )


def show_marked(value: str, limit: int = _SHOWN_CHARS) -> str:
    """Text from a CSV RawFile (its data, or a value) with the bytes that did not decode written as
    Snowflake writes bad bytes, 0xNN, cut at ``limit`` characters."""

    def byte(m: re.Match[str]) -> str:
        high, low = ord(m.group(0)[0]) - MARK_HIGH, ord(m.group(0)[1]) - MARK_LOW
        return f"0x{high * 16 + low:02X}"

    return INVALID_MARK.sub(byte, value)[:limit]


def csv_record_text(data: bytes, fmt: FileFormat, line: int, limit: int) -> str | None:
    """The text of the record that starts on ``line`` of a CSV RawFile's ``data`` (its record
    delimiter aside), bad bytes as 0xNN, cut at ``limit`` characters; None when there is no such
    line. For error reports (REJECTED_RECORD): it follows the file's delimiters, quotes and escapes."""
    start = _line_start(data, fmt, line)
    if start is None or start >= len(data):
        return None
    window = data[start : start + 8 * limit].decode("utf-8", "replace")
    m = _record_pattern(_Dialect.of(fmt)).match(window)
    return show_marked(m.group("rec") if m else window, limit)
