"""What load history says about a bad row or file: Snowflake's error codes and messages, DuckDB's
evaluation errors mapped to them, and where in the file the error is.

Error positions follow Snowflake's layout: line = physical line where the record starts, character =
1-based position of the field in that line (CSV; 1 for JSON and Parquet), column =
``"<TABLE>"["<COLUMN>":<ordinal>]``.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from floe.catalog.models import Column
from pipeline.formats import CODE_INVALID_UTF8, RawFile, csv_field_character
from pipeline.formats.raw import show_invalid

CODE_NUMERIC = "100038"
CODE_OUT_OF_RANGE = "100039"
CODE_DATE = "100040"
CODE_TIMESTAMP = "100035"
CODE_BOOLEAN = "100037"
CODE_LENGTH = "100074"
CODE_HEX = "100115"
"""Snowflake's code for text that is not hex (its BINARY input page's example)."""
CODE_NOT_NULL = "100088"
CODE_JSON = "100069"
CODE_DIVISION = "100051"
CODE_OTHER = "100000"
"""Floe's code for expression errors it cannot classify (Snowflake has no single generic code), and
for the errors whose text Snowflake's is known but whose code is not: times not recognized, text
that is not base64, binary values longer than their column."""

NOT_NULL_MESSAGE = (
    "NULL result in a non-nullable column. Use quotes if an empty field should be interpreted as an "
    "empty string instead of a null"
)


def column_display(table_name: str, col: Column, ordinal: int) -> str:
    """The column an error is about, as Snowflake prints it: ``"<TABLE>"["<COLUMN>":<ordinal>]``."""
    return f'"{table_name}"["{col.name}":{ordinal}]'


def first_line(text: str) -> str:
    """The first line of an error text (DuckDB's messages go on with context lines)."""
    return text.strip().splitlines()[0] if text.strip() else text


def _text_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and not math.isinf(value):
        return str(int(value))
    if isinstance(value, bytes):
        return value.hex().upper()  # BINARY as Snowflake shows it
    return str(value)


def _looks_numeric(text: str) -> bool:
    try:
        return Decimal(text.strip()).is_finite()
    except (InvalidOperation, ValueError):
        return False


def binary_form(binary_format: str) -> str:
    """BINARY_FORMAT as HEX, BASE64 or UTF8, however it was spelled (``utf-8``)."""
    return binary_format.upper().replace("-", "")


def _binary_problem(text: str, binary_format: str) -> tuple[str, str] | None:
    """(code, message) when text is not of BINARY_FORMAT's form, None when it is (then it was too
    long). Plain string scans: the text is the file's."""
    form = binary_form(binary_format)
    if form == "UTF8":
        return None
    if form == "BASE64":
        try:
            base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError):
            return CODE_OTHER, f"The following string is not a legal base64-encoded value: '{text}'"
        return None
    if len(text) % 2 or not all(c in "0123456789abcdefABCDEF" for c in text):
        return CODE_HEX, f"The following string is not a legal hex-encoded value: '{text}'"
    return None


def conversion_message(col: Column, value: Any, binary_format: str = "HEX") -> tuple[str, str]:
    """(code, message) for a value that does not convert to col's type (``binary_format``: how text
    becomes BINARY, the file format's BINARY_FORMAT)."""
    text = _text_of(value)
    t = col.type
    if t == "BINARY":
        if isinstance(value, bytes):
            return CODE_OTHER, f"Binary value '{value.hex().upper()}' is too long and would be truncated"
        problem = _binary_problem(text, binary_format)
        if problem is not None:
            return problem
        return CODE_OTHER, f"Binary value '{text}' is too long and would be truncated"
    if t == "TIME":
        return CODE_OTHER, f"Time '{text}' is not recognized"
    if t == "NUMBER":
        if _looks_numeric(text) or isinstance(value, (int, float, Decimal)):
            return CODE_OUT_OF_RANGE, f"Numeric value '{text}' is out of range"
        return CODE_NUMERIC, f"Numeric value '{text}' is not recognized"
    if t == "FLOAT":
        return CODE_NUMERIC, f"Numeric value '{text}' is not recognized"
    if t == "BOOLEAN":
        return CODE_BOOLEAN, f"Boolean value '{text}' is not recognized"
    if t == "DATE":
        return CODE_DATE, f"Date '{text}' is not recognized"
    if t in ("TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "TIMESTAMP_TZ"):
        return CODE_TIMESTAMP, f"Timestamp '{text}' is not recognized"
    if t == "VARCHAR":
        if isinstance(value, bytes):  # binary read as text (BINARY_AS_TEXT)
            try:
                text = value.decode()
            except UnicodeDecodeError:
                shown = show_invalid(value.decode("utf-8", "surrogateescape"))
                return CODE_INVALID_UTF8, f"Invalid UTF8 detected in string '{shown}'"
        return CODE_LENGTH, f"User character length limit ({col.precision}) exceeded by string '{text}'"
    return CODE_JSON, f"Error parsing JSON: {text}"


_DUCK_MESSAGES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], tuple[str, str]]]] = [
    (
        re.compile(
            r"""Could not convert string ["'](.*)["'] to (DECIMAL|INT|BIGINT|HUGEINT|DOUBLE|FLOAT)""", re.S
        ),
        lambda m: (
            (CODE_OUT_OF_RANGE, f"Numeric value '{m.group(1)}' is out of range")
            if m.group(2) == "DECIMAL" and _looks_numeric(m.group(1))
            else (CODE_NUMERIC, f"Numeric value '{m.group(1)}' is not recognized")
        ),
    ),
    (
        re.compile(r"Could not cast value (\S+) to DECIMAL"),
        lambda m: (CODE_OUT_OF_RANGE, f"Numeric value '{m.group(1)}' is out of range"),
    ),
    (
        re.compile(r"""Could not convert string ["'](.*)["'] to BOOL""", re.S),
        lambda m: (CODE_BOOLEAN, f"Boolean value '{m.group(1)}' is not recognized"),
    ),
    (
        re.compile(r'date field (?:format|value out of range): "(.*?)"', re.S),
        lambda m: (CODE_DATE, f"Date '{m.group(1)}' is not recognized"),
    ),
    (
        re.compile(r'timestamp field (?:format|value out of range): "(.*?)"', re.S),
        lambda m: (CODE_TIMESTAMP, f"Timestamp '{m.group(1)}' is not recognized"),
    ),
    (
        re.compile(r'time field (?:format|value out of range): "(.*?)"', re.S),
        lambda m: (CODE_OTHER, f"Time '{m.group(1)}' is not recognized"),
    ),
    (
        re.compile(r'Could not parse string "(.*?)" according to format specifier "(.*?)"', re.S),
        lambda m: (
            (CODE_TIMESTAMP, f"Timestamp '{m.group(1)}' is not recognized")
            if "%H" in m.group(2) or "%I" in m.group(2)
            else (CODE_DATE, f"Date '{m.group(1)}' is not recognized")
        ),
    ),
    (re.compile(r"[Dd]ivision by zero"), lambda m: (CODE_DIVISION, "Division by zero")),
    (
        re.compile(r"Malformed JSON.*?: (.*)", re.S),
        lambda m: (CODE_JSON, f"Error parsing JSON: {first_line(m.group(1))}"),
    ),
]


_ERROR_CLASS = re.compile(r"[A-Za-z ]+Error: ")


def duckdb_message(exc: Exception) -> tuple[str, str]:
    """A DuckDB evaluation error in Snowflake's words where there is an equivalent."""
    text = str(exc)
    cls = _ERROR_CLASS.match(text)
    body = text[cls.end() :] if cls else text
    # Anchored: the message quotes the file's value, and a search from every position of a
    # value that repeats a message's prefix would be quadratic in the value's length.
    for pattern, render in _DUCK_MESSAGES:
        m = pattern.match(body)
        if m:
            return render(m)
    return CODE_OTHER, first_line(body)


def field_character(raw: RawFile, line: int, field_no: int) -> int:
    """1-based character position of CSV field ``field_no`` in the record starting on ``line``
    (the CSV reader's delimiters, quotes and escapes)."""
    return csv_field_character(raw.data, raw.fmt, line, field_no)
