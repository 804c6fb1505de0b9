"""What load history says about a bad row or file: Snowflake's error codes and messages, DuckDB's
evaluation errors mapped to them, and where in the file the error is.

Error positions follow Snowflake's layout: line = physical line where the record starts, character =
1-based position of the field in that line (CSV; 1 for JSON and Parquet), column =
``"<TABLE>"["<COLUMN>":<ordinal>]``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from floe.catalog.models import Column
from pipeline.formats import RawFile, field_spans

CODE_NUMERIC = "100038"
CODE_OUT_OF_RANGE = "100039"
CODE_DATE = "100040"
CODE_TIMESTAMP = "100035"
CODE_BOOLEAN = "100037"
CODE_LENGTH = "100074"
CODE_NOT_NULL = "100088"
CODE_JSON = "100069"
CODE_DIVISION = "100051"
CODE_OTHER = "100000"
"""Floe's code for expression errors it cannot classify (Snowflake has no single generic code)."""

NOT_NULL_MESSAGE = (
    "NULL result in a non-nullable column. Use quotes if an empty field should be interpreted as an "
    "empty string instead of a null"
)

# Below this line number, a few finds are cheaper than one vectorised pass over the whole file.
_FIND_LINES_BELOW = 2000


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
    return str(value)


def _looks_numeric(text: str) -> bool:
    try:
        return Decimal(text.strip()).is_finite()
    except (InvalidOperation, ValueError):
        return False


def conversion_message(col: Column, value: Any) -> tuple[str, str]:
    """(code, message) for a value that does not convert to col's type."""
    text = _text_of(value)
    t = col.type
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
    if t in ("TIMESTAMP_NTZ", "TIMESTAMP_TZ"):
        return CODE_TIMESTAMP, f"Timestamp '{text}' is not recognized"
    if t == "VARCHAR":
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


def _line_start(data: bytes, line: int) -> int | None:
    """Offset in data where physical line ``line`` (1-based) starts; None when there is no such line."""
    if line <= 1:
        return 0
    if line < _FIND_LINES_BELOW:
        start = -1
        for _ in range(line - 1):
            start = data.find(b"\n", start + 1)
            if start < 0:
                return None
        return start + 1
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    if line - 2 >= len(newlines):
        return None
    return int(newlines[line - 2]) + 1


def field_character(raw: RawFile, line: int, field_no: int) -> int:
    """1-based character position of CSV field ``field_no`` in physical line ``line``."""
    data = raw.data
    start = _line_start(data, line)
    if start is None:
        return 1
    chunk = data[start : start + 65536].decode("utf-8", "replace")
    fmt = raw.fmt
    spans = field_spans(chunk, fmt.field_delimiter, fmt.field_optionally_enclosed_by)
    if 0 < field_no <= len(spans):
        return spans[field_no - 1][0] + 1
    return 1
