"""Values on the wire: Arrow arguments to JSON text, JSON results to the return type.

Arguments (the seed's rules): numbers are JSON numbers (a decimal's exact text, never through a
float), booleans booleans, strings strings, a VARIANT its JSON value (its text, checked and sent as
it is, so big numbers keep every digit), NULL null, and everything else a string: DATE as
``YYYY-MM-DD``, TIME as ``HH:MM:SS.ffffff``, TIMESTAMP_NTZ as ISO 8601 with microseconds
(``2014-01-01T16:00:00.000000``), TIMESTAMP_LTZ and TIMESTAMP_TZ the same in UTC with ``+00:00`` (an
argument is the value's instant: a TIMESTAMP_TZ's offset stays in its table), BINARY as upper-case hex
text (how Snowflake writes BINARY in JSON). FLOAT NaN and infinities, which JSON numbers cannot hold,
are the strings ``"NaN"``, ``"inf"`` and ``"-inf"``: Snowflake's own spellings of them.

Results: see ``converter``. A value that does not convert makes ``Unconvertible``, whose reason
names the expected type and the JSON kind received, never the value.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, time
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from email.utils import parsedate_to_datetime
from typing import Any

import orjson
import pyarrow as pa

from floe.catalog.models import Column
from floe.external.remote import json_text
from floe.types import arrow_type

_NUMERIC = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_SPECIAL_FLOATS = {
    "nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-inf": -math.inf,
    "-infinity": -math.inf,
}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
# Snowflake's strings for booleans (its TO_BOOLEAN), lower-cased.
_TRUE = frozenset({"true", "t", "yes", "y", "on", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "off", "0"})
# Room for any NUMBER(38, s) and rounding without the default context's 28 digits getting in the way.
_WIDE = Context(prec=100)


class Unconvertible(ValueError):
    """A value has no form in the wanted type; the reason never shows the value."""


# ------------------------------------------------------------------------------------------------
# Arguments


def encode_column(array: pa.Array | pa.ChunkedArray, column: Column) -> tuple[list[bytes], dict[int, str]]:
    """Each value of ``array`` (of ``column``'s type, or one that casts to it) as JSON text, and
    why, by row, the values that have none (a VARIANT that is not JSON)."""
    want = arrow_type(column)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type != want:
        array = array.cast(want)
    values = array.to_pylist()
    kind = column.type
    if kind == "NUMBER":
        if pa.types.is_integer(want):
            return [b"null" if v is None else b"%d" % v for v in values], {}
        return [b"null" if v is None else format(v, "f").encode() for v in values], {}
    if kind == "FLOAT":
        return [b"null" if v is None else json_text(v).encode() for v in values], {}
    if kind == "VARCHAR":
        return [b"null" if v is None else orjson.dumps(v) for v in values], {}
    if kind == "BOOLEAN":
        return [b"null" if v is None else (b"true" if v else b"false") for v in values], {}
    if kind == "VARIANT":
        return _encode_variants(values)
    if kind == "DATE":
        return [b"null" if v is None else b'"%s"' % v.isoformat().encode() for v in values], {}
    if kind in ("TIME", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "TIMESTAMP_TZ"):
        return [
            b"null" if v is None else b'"%s"' % v.isoformat(timespec="microseconds").encode() for v in values
        ], {}
    if kind == "BINARY":
        return [b"null" if v is None else b'"%s"' % v.hex().upper().encode() for v in values], {}
    raise ValueError(f"external functions do not take {column.sql_type} arguments")


def _encode_variants(values: list[Any]) -> tuple[list[bytes], dict[int, str]]:
    out: list[bytes] = []
    bad: dict[int, str] = {}
    for row, text in enumerate(values):
        if text is None:
            out.append(b"null")
            continue
        raw = text.encode()
        if not _is_json(raw):
            bad[row] = "a VARIANT argument is not valid JSON text"
            raw = b"null"
        out.append(raw.strip())
    return out, bad


def _is_json(raw: bytes) -> bool:
    """Whether ``raw`` is exactly one strict JSON value, so it can be written into a body as is."""
    try:
        orjson.loads(raw)
        return True
    except orjson.JSONDecodeError:
        pass
    try:
        # orjson refuses integers past 64 bits, which JSON allows; the slower parser takes them.
        json.loads(raw, parse_constant=_refuse)
        return True
    except (ValueError, RecursionError):
        return False


def _refuse(name: str) -> Any:
    raise ValueError(name)


# ------------------------------------------------------------------------------------------------
# Results


def json_kind(value: Any) -> str:
    """What a parsed JSON value is, for messages that must not show it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | Decimal):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    return "an array"


def converter(column: Column) -> Callable[[Any], Any]:
    """A function from one non-null JSON value (as ``remote.loads`` parses it) to the Python value
    Arrow stores for ``column``'s type; it raises Unconvertible.

    - NUMBER: JSON numbers and numeric strings, rounded half up to the scale; out of range fails.
    - FLOAT: JSON numbers, numeric strings, and "NaN", "inf", "-inf" (any case).
    - VARCHAR: strings; a number or boolean becomes its JSON text; objects and arrays fail (say
      VARIANT if that is what the service returns). VARCHAR(n) fails past n characters.
    - BOOLEAN: booleans, Snowflake's boolean strings (true/false, yes/no, on/off, t/f, y/n, 1/0)
      and numbers (0 is false).
    - DATE, TIMESTAMP_*: ISO 8601 strings, or RFC 2822 ones like the seed's example; TIMESTAMP_NTZ
      keeps the wall-clock time of a string with an offset, TIMESTAMP_TZ and _LTZ read one without as
      UTC (a returned TIMESTAMP_TZ is its instant, shown in UTC).
    - TIME: ISO 8601 times (``HH:MM[:SS[.ffffff]]``, an offset dropped).
    - BINARY: hex strings (either case); BINARY(n) fails past n bytes.
    - VARIANT: any JSON value, kept as its JSON text.
    """
    kind = column.type
    if kind == "NUMBER":
        return _number_converter(column)
    if kind == "FLOAT":
        return _to_float
    if kind == "VARCHAR":
        return _varchar_converter(column.precision)
    if kind == "BOOLEAN":
        return _to_boolean
    if kind == "DATE":
        return _to_date
    if kind == "TIMESTAMP_NTZ":
        return lambda value: _to_timestamp(value).replace(tzinfo=None)
    if kind in ("TIMESTAMP_TZ", "TIMESTAMP_LTZ"):
        return _to_utc_timestamp
    if kind == "TIME":
        return _to_time
    if kind == "BINARY":
        return _binary_converter(column)
    if kind == "VARIANT":
        return lambda value: _utf8(json_text(value), column)
    raise ValueError(f"external functions do not return {column.sql_type}")


def to_arrow(values: list[Any], column: Column) -> pa.Array:
    """Converted values (None for NULL) as an Arrow array of ``column``'s type."""
    return pa.array(values, type=arrow_type(column))


def _expected(column_type: str, value: Any) -> Unconvertible:
    return Unconvertible(f"expected {column_type}, got {json_kind(value)}")


def _decimal(value: Any, column_type: str) -> Decimal:
    if isinstance(value, bool):
        raise _expected(column_type, value)
    if isinstance(value, int | Decimal):
        return Decimal(value)
    if isinstance(value, str):
        text = value.strip()
        if _NUMERIC.fullmatch(text):
            return Decimal(text)
        raise Unconvertible(f"expected {column_type}, got a string that is not a number")
    raise _expected(column_type, value)


def _number_converter(column: Column) -> Callable[[Any], Any]:
    precision, scale = column.precision or 38, column.scale or 0
    quantum = Decimal(1).scaleb(-scale)
    as_int = pa.types.is_integer(arrow_type(column))
    sql_type = column.sql_type

    def convert(value: Any) -> Any:
        number = _decimal(value, sql_type)
        try:
            rounded = number.quantize(quantum, rounding=ROUND_HALF_UP, context=_WIDE)
        except InvalidOperation:
            raise Unconvertible(f"the number is out of range for {sql_type}") from None
        # After quantize the exponent is -scale, so the digit count is the precision the value needs.
        if len(rounded.as_tuple().digits) > precision:
            raise Unconvertible(f"the number is out of range for {sql_type}")
        return int(rounded) if as_int else rounded

    return convert


def _to_float(value: Any) -> float:
    if isinstance(value, str):
        text = value.strip()
        special = _SPECIAL_FLOATS.get(text.lower())
        if special is not None:
            return special
        if not _NUMERIC.fullmatch(text):
            raise Unconvertible("expected FLOAT, got a string that is not a number")
        value = Decimal(text)
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise _expected("FLOAT", value)
    try:
        result = float(value)
    except OverflowError:
        result = math.inf
    if not math.isfinite(result):
        raise Unconvertible("the number is out of range for FLOAT")
    return result


def _varchar_converter(length: int | None) -> Callable[[Any], str]:
    sql_type = f"VARCHAR({length})" if length else "VARCHAR"

    def convert(value: Any) -> str:
        if isinstance(value, str):
            text = value
        elif isinstance(value, bool | int | Decimal):
            text = json_text(value)
        else:
            raise _expected(sql_type, value)
        if length is not None and len(text) > length:
            raise Unconvertible(f"the string is longer than {sql_type} allows")
        return _utf8(text, None)

    return convert


def _utf8(text: str, column: Column | None) -> str:
    """``text``, refused when Arrow could not store it (a lone surrogate from a ``\\ud800`` escape)."""
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            what = column.sql_type if column is not None else "VARCHAR"
            raise Unconvertible(f"the {what} value is not valid Unicode (a lone surrogate)") from None
    return text


def _to_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | Decimal):
        return value != 0
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise Unconvertible("expected BOOLEAN, got a string that is not a boolean")
    raise _expected("BOOLEAN", value)


def _to_date(value: Any) -> date:
    if not isinstance(value, str):
        raise _expected("DATE", value)
    try:
        return date.fromisoformat(value.strip())
    except ValueError:
        pass
    try:
        return _to_timestamp(value).date()
    except Unconvertible:
        raise Unconvertible("expected DATE, got a string that is not a date") from None


def _to_timestamp(value: Any) -> datetime:
    if not isinstance(value, str):
        raise _expected("TIMESTAMP", value)
    text = value.strip()
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    try:
        # The seed's example spelling: "Wed, 01 Jan 2014 16:00:00 -0800".
        return parsedate_to_datetime(text)
    except (ValueError, TypeError, IndexError):
        raise Unconvertible("expected TIMESTAMP, got a string that is not a timestamp") from None


def _to_time(value: Any) -> time:
    if not isinstance(value, str):
        raise _expected("TIME", value)
    try:
        return time.fromisoformat(value.strip()).replace(tzinfo=None)
    except ValueError:
        raise Unconvertible("expected TIME, got a string that is not a time") from None


def _binary_converter(column: Column) -> Callable[[Any], bytes]:
    sql_type = column.sql_type

    def convert(value: Any) -> bytes:
        if not isinstance(value, str):
            raise _expected(sql_type, value)
        # bytes.fromhex alone would also take spaces between the bytes.
        if len(value) % 2 or not all(c in _HEX_DIGITS for c in value):
            raise Unconvertible(f"expected {sql_type}, got a string that is not hex")
        data = bytes.fromhex(value)
        if column.precision is not None and len(data) > column.precision:
            raise Unconvertible(f"the binary value is longer than {sql_type} allows")
        return data

    return convert


def _to_utc_timestamp(value: Any) -> datetime:
    stamp = _to_timestamp(value)
    if stamp.tzinfo is None:
        return stamp.replace(tzinfo=UTC)
    return stamp.astimezone(UTC)
