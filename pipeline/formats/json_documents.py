"""JSON: decompressed bytes -> one string column ``c1`` holding each document's text as written.

A document that does not parse is a 100069 RowError and the next line starts over. A record is a
document, or an element of a top-level array with STRIP_OUTER_ARRAY.
"""

from __future__ import annotations

import json
import re

import pyarrow as pa

from floe.catalog.models import FileFormat
from pipeline.formats.raw import CODE_JSON_PARSE, RawFile, RowError, utf8_error

_JSON_WS = re.compile(r"[ \t\n\r]*")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def read_json(body: bytes, fmt: FileFormat, path: str) -> RawFile:
    """Documents (NDJSON, concatenated or pretty-printed) or, with STRIP_OUTER_ARRAY, array elements."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise utf8_error(body, path, 1) from exc
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


def read_checked_lines(body: bytes, fmt: FileFormat, path: str) -> RawFile:
    """Rows the API has already checked (a Snowpipe Streaming append): UTF-8, one JSON object per
    line, every line ending in ``\n`` (floe/streaming/rows.py). Each line is a document as it is;
    splitting them costs no Python object per row, where ``read_json`` decodes every document to
    find where it ends (most of the job's CPU per streamed row)."""
    lines = body.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    n = len(lines)
    numbers = pa.array(range(1, n + 1), pa.int64())
    return RawFile(
        table=pa.table({"c1": pa.array(lines, pa.binary()).cast(pa.string())}),
        row_numbers=numbers,
        line_numbers=numbers,
        errors=[],
        rows_parsed=n,
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
