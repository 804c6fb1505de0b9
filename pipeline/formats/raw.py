"""What a reader makes of a staged file: the raw table, its unparseable records, whole-file failures.

Whole-file failures (corrupt compression, invalid UTF-8 in JSON, unreadable Parquet, unsupported
options) raise ``floe.errors.FileLoadError``; ``FileParseError`` when the failure has a place (the
line and character of the first invalid UTF-8 byte). In CSV and Parquet, a value that is not UTF-8
is a RowError of its row (decision 70). A zero-byte file is 0 rows and no error in every format.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError

CODE_END_OF_RECORD = "100068"
CODE_EXTRA_FIELD = "100016"
CODE_JSON_PARSE = "100069"
CODE_INVALID_UTF8 = "100000"
"""Snowflake's code for invalid UTF-8 is not documented; Floe's code for errors it cannot classify."""
CODE_MULTI_LINE = "100000"
"""A record delimiter inside a CSV field with MULTI_LINE = FALSE: Snowflake's code is not documented."""

UTF8_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class RowError:
    """A record that could not be parsed (it never reaches the transform)."""

    row_number: int
    """Record ordinal, 1-based (see "Numbering" in ``pipeline.formats``)."""
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


def end_of_record_message(column_name: str) -> str:
    """Snowflake's 100068 text."""
    return f"End of record reached while expected to parse column '{column_name}'"


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
    """Decompressed file contents (JSON), or its text converted to UTF-8 (CSV: ``fmt`` then says
    UTF8, and bytes that did not decode are marked, see ``pipeline.chunks``), kept to locate error
    positions and to re-read."""
    fmt: FileFormat = field(default_factory=FileFormat, repr=False)
    """Format options the file was read with."""
    width: int = 0
    """CSV: fields per record the file was read with."""
    row_offset: int = 0
    """Records before this part of the file (a streamed file is read in parts); row numbers and
    lines above are local to the part, and METADATA$FILE_ROW_NUMBER adds this."""
    line_offset: int = 0
    """Physical lines before this part of the file; load history adds this to error lines."""
    lines: int = 0
    """CSV: the lines the bytes span (newlines, or the RECORD_DELIMITER when it is another), so the
    parts of a streamed file after this one know their ``line_offset``."""

    @property
    def num_rows(self) -> int:
        """Good records."""
        rows: int = self.table.num_rows  # pyarrow is untyped
        return rows


def empty_raw(
    names: Sequence[str], kind: str, path: str, body: bytes, fmt: FileFormat, width: int = 0
) -> RawFile:
    """A file without records: string columns ``names``, no rows."""
    table = pa.table({n: pa.array([], pa.string()) for n in names})
    empty = pa.array([], pa.int64())
    return RawFile(table, empty, empty, [], 0, kind, path, body, fmt, width)


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


# ---------------------------------------------------------------------------------------------
# Invalid UTF-8, placed and quoted as Snowflake does


_SHOWN_CHARS = 200
"""How much of an offending value an error message quotes."""


def show_invalid(text: str) -> str:
    """A value decoded with surrogateescape, its undecodable bytes written as Snowflake does: 0xNN."""
    out = "".join(f"0x{ord(ch) - 0xDC00:02X}" if 0xDC80 <= ord(ch) <= 0xDCFF else ch for ch in text)
    return out[:_SHOWN_CHARS]


@dataclass(frozen=True)
class InvalidUtf8:
    """Where the first invalid UTF-8 sequence of some bytes is."""

    line: int
    """Physical line, 1-based from the line the bytes start on."""
    text: str
    """That line, decoded with surrogateescape (so ``show_invalid`` can quote it)."""
    offset: int
    """Characters of ``text`` before the first bad byte."""


def find_invalid_utf8(body: bytes, first_line: int) -> InvalidUtf8 | None:
    """The first invalid UTF-8 sequence in ``body`` (which starts on line ``first_line``), if any."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + body.count(b"\n", 0, exc.start)
        start = body.rfind(b"\n", 0, exc.start) + 1
        end = body.find(b"\n", exc.start)
        text = body[start : end if end >= 0 else len(body)].decode("utf-8", "surrogateescape")
        bad = len(body[start : exc.start].decode("utf-8", "surrogateescape"))
        return InvalidUtf8(line, text, bad)
    return None


def utf8_error(body: bytes, path: str, first_line: int) -> FileLoadError:
    """Where the first invalid UTF-8 sequence is, in Snowflake's words.

    Snowflake quotes the value that holds the bad bytes (here the line; the CSV reader narrows it to
    the field) with each bad byte as ``0xNN``: ``Invalid UTF8 detected in string 'Caf0xE9'``.
    """
    found = find_invalid_utf8(body, first_line)
    if found is None:
        return FileLoadError("Invalid UTF8 detected", file=path)
    return FileParseError(
        f"Invalid UTF8 detected in string '{show_invalid(found.text)}'",
        file=path,
        line=found.line,
        character=found.offset + 1,
    )
