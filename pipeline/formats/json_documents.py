"""JSON: decompressed bytes -> one string column ``c1`` holding each document's text.

A document that does not parse is a 100069 RowError and the next line starts over. A record is a
document, or an element of a top-level array with STRIP_OUTER_ARRAY. A document keeps its text as
written unless an option changes its value:

- ALLOW_DUPLICATE = FALSE (the default): an object naming a key twice is an error of its document,
  ``Error parsing JSON: duplicate object attribute "a", pos 31`` as Snowflake's PARSE_JSON says it
  (pos: the character after the second key's closing quote, counted from the document's start).
  TRUE: the key's last value is kept (the document is written again without the others).
- STRIP_NULL_VALUES = TRUE: object fields whose value is null are removed. An array element that is
  null stays null: Snowflake leaves an empty ("undefined") slot in its place (``[null,null,3]`` shows
  as ``[,,3]``, still three elements), which JSON text cannot hold, so Floe keeps the element's place
  and its null.
- REPLACE_INVALID_CHARACTERS / IGNORE_UTF8_ERRORS = TRUE: each invalid UTF-8 sequence becomes
  U+FFFD instead of failing the file.
- ENABLE_OCTAL = TRUE: a number written with a leading zero (``010``) is octal (8).
- MULTI_LINE = FALSE: a document that spans lines is an error of its record.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

from floe.catalog.models import FileFormat
from pipeline.chunks import CHECK_EVERY, PartTooLarge, json_size
from pipeline.formats.raw import CODE_JSON_PARSE, RawFile, RowError, utf8_error

_JSON_WS = re.compile(r"[ \t\n\r]*")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# An integer with a leading zero outside strings (ENABLE_OCTAL). Possessive: linear whatever follows.
_OCTAL = re.compile(r"(?<![\w.+\-])(-?)0([0-7]++)(?![\w.])")


def read_json(
    body: bytes,
    fmt: FileFormat,
    path: str,
    *,
    in_array: bool = False,
    open_end: bool = False,
    max_bytes: int | None = None,
) -> RawFile:
    """Documents (NDJSON, concatenated or pretty-printed) or, with STRIP_OUTER_ARRAY, array elements.

    A part of a large file (``pipeline.large_files``) may start inside the outer array
    (``in_array``: its first values are elements) and end inside it (``open_end``: the next part
    goes on with the elements, so the end of the text is not an unclosed array). Past ``max_bytes``
    of text and documents (``decoded.json_size``: a document costs far more than its bytes when it
    is short), PartTooLarge, as soon as the documents found say so (decision 110)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not (fmt.replace_invalid_characters or fmt.ignore_utf8_errors):
            raise utf8_error(body, path, 1) from exc
        # One U+FFFD per invalid sequence (Python's "replace" follows Unicode's maximal subparts).
        text = body.decode("utf-8", "replace")
    if fmt.enable_octal:
        text = octal_to_decimal(text)
    scanner = _JsonScanner(text, fmt, open_end=open_end)
    if max_bytes is not None:
        scanner.bound(len(body), max_bytes, path)
    scanner.run(in_array=in_array)
    raw = RawFile(
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
    # The decoder's object hook is a bound method: the scanner (the text and a string per document)
    # is in a reference cycle, which only a full garbage collection frees. Broken here, it goes now,
    # instead of one part of a large file after another piling up (decision 83).
    del scanner.decoder
    return raw


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

    def __init__(self, text: str, fmt: FileFormat, *, open_end: bool = False) -> None:
        self.text = text
        self.open_end = open_end
        """The text ends inside the outer array, which the next part of the file goes on with."""
        self.strip_outer_array = fmt.strip_outer_array
        self.allow_duplicate = fmt.allow_duplicate
        self.strip_null_values = fmt.strip_null_values
        self.multi_line = fmt.multi_line
        self.duplicated = False
        """The document being decoded named a key twice (ALLOW_DUPLICATE = TRUE kept the last)."""
        self.decoder = json.JSONDecoder(object_pairs_hook=self._object)
        self.escaped_surrogates = _SURROGATE_ESCAPE.search(text) is not None
        self.docs: list[str] = []
        self.rows: list[int] = []
        self.lines: list[int] = []
        self._size = 0
        self._limit: int | None = None
        self._path = ""
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
        n = len(self.docs) + len(self.errors) + 1
        if n % CHECK_EVERY == 0 and self._limit is not None and json_size(b"", n) + self._size > self._limit:
            raise PartTooLarge(self._path, self._limit, record=False, kind="JSON", decoded=True)
        return n

    def bound(self, size: int, limit: int, path: str) -> None:
        """Fail (PartTooLarge) once the documents found, and the ``size`` bytes of text, cost more
        than ``limit`` (checked every CHECK_EVERY documents)."""
        self._size, self._limit, self._path = size, limit, path

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

    def _object(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        """The decoder's object hook: a dict, and a note (or an error) when a key repeats."""
        obj = dict(pairs)
        if len(obj) != len(pairs):
            if not self.allow_duplicate:
                raise _DuplicateKey
            self.duplicated = True
        return obj

    def take(self, start: int) -> int | None:
        """Decode the value at ``start``; record it (or its error). Returns its end, None on error."""
        self.duplicated = False
        try:
            value, end = self.decoder.raw_decode(self.text, start)
        except json.JSONDecodeError as exc:
            self.fail(start, exc.msg, exc.pos)
            return None
        except RecursionError:
            self.fail(start, "Document nested too deeply", start)
            return None
        except _DuplicateKey:
            key, pos = _first_duplicate(self.text, start)
            self.fail(start, f'duplicate object attribute "{key}"', pos)
            return None
        if not self.multi_line:
            newline = self.text.find("\n", start, end)
            if newline >= 0:
                self.fail(start, "a record spans lines (MULTI_LINE = FALSE)", newline)
                return int(end)
        if self.escaped_surrogates:
            # Python accepts a lone UTF-16 surrogate escape; DuckDB's parser (the transform) does not.
            try:
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except (UnicodeEncodeError, RecursionError):
                self.fail(start, "Invalid Unicode escape (lone surrogate)", start)
                return None
        doc = self.text[start:end]
        rewrite = self.duplicated
        if self.strip_null_values and "null" in doc:
            value, stripped = _strip_nulls(value)
            rewrite = rewrite or stripped
        if rewrite:
            doc = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        self.rows.append(self.ordinal())
        self.lines.append(self.line_at(start))
        self.docs.append(doc)
        return int(end)

    def run(self, *, in_array: bool = False) -> None:
        n = len(self.text)
        pos = self.skip_ws(0)
        if in_array:  # a part that starts among the outer array's elements
            pos = self.skip_ws(self.elements(pos))
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
        return self.elements(self.skip_ws(pos + 1))

    def elements(self, pos: int) -> int:
        """The elements of an array from ``pos`` (just after its ``[``, or where a part of the file
        starts inside it) to its ``]``; returns where scanning resumes."""
        text = self.text
        n = len(text)
        if pos < n and text[pos] == "]":
            return pos + 1
        while True:
            if pos >= n:
                if not self.open_end:
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


class _DuplicateKey(Exception):
    """An object named a key twice (ALLOW_DUPLICATE = FALSE); ``_first_duplicate`` says which."""


def _strip_nulls(value: Any) -> tuple[Any, bool]:
    """STRIP_NULL_VALUES: value without the object fields that are null (array elements stay: see
    the module's docstring), and whether anything was removed."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        changed = False
        for k, v in value.items():
            if v is None:
                changed = True
                continue
            out[k], sub = _strip_nulls(v)
            changed = changed or sub
        return out, changed
    if isinstance(value, list):
        items = [_strip_nulls(v) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    return value, False


def _string_end(text: str, quote: int) -> int:
    """Index of the quote closing the JSON string that opens at ``quote`` (len(text) if none)."""
    pos = quote + 1
    while True:
        end = text.find('"', pos)
        if end < 0:
            return len(text)
        backslashes = 0
        while text[end - 1 - backslashes] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:
            return end
        pos = end + 1


def _first_duplicate(text: str, start: int) -> tuple[str, int]:
    """The first key (in text order) that an object of the document at ``start`` names twice, and
    the index just after its closing quote (Snowflake's pos, once made relative). Only run on a document the
    decoder found a duplicate in, so it is known to be valid JSON up to that key."""
    stack: list[set[str] | None] = []  # per open container: the object's keys, None for an array
    expect_key = False
    pos = start
    n = len(text)
    while pos < n:
        ch = text[pos]
        if ch == '"':
            end = _string_end(text, pos)
            if expect_key and stack and stack[-1] is not None:
                key = json.loads(text[pos : end + 1])
                keys = stack[-1]
                if key in keys:
                    return key, end + 1
                keys.add(key)
            expect_key = False
            pos = end + 1
            continue
        if ch == "{":
            stack.append(set())
            expect_key = True
        elif ch == "[":
            stack.append(None)
        elif ch in "}]":
            stack.pop()
            if not stack:
                break
        elif ch == ",":
            expect_key = bool(stack) and stack[-1] is not None
        pos += 1
    return "", start


def octal_to_decimal(text: str) -> str:
    """ENABLE_OCTAL: integers written with a leading zero (``010``, ``-07``) rewritten in decimal,
    outside strings. Linear: strings are skipped with ``str.find``, the rest searched by ``_OCTAL``."""
    out: list[str] = []
    pos = 0
    n = len(text)
    while pos < n:
        quote = text.find('"', pos)
        stop = n if quote < 0 else quote
        out.append(_OCTAL.sub(lambda m: m.group(1) + str(int(m.group(2), 8)), text[pos:stop]))
        if quote < 0:
            break
        end = min(_string_end(text, quote) + 1, n)
        out.append(text[quote:end])
        pos = end
    return "".join(out)
