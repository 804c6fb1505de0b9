"""Rows on the client side of a streaming channel: how Python values go on the wire, and which rows
the target table would refuse.

``serialize_row`` turns a row of Python values into the JSON object sent as one NDJSON line;
``row_line`` is the line itself, the same bytes by a faster road.
``validate_row`` / ``validate_rows`` check rows against the table's columns (``ColumnSpec``, from the
open-channel answer's ``table_columns``) with the Snowpipe Streaming SDK's type rules ("Supported
Java data types"), so a channel with ON_ERROR = ABORT or SKIP_BATCH can refuse a batch before it
is sent. Columns match case-insensitively by name, as the default pipe's MATCH_BY_COLUMN_NAME does.

Every parser here is a fixed-format scan in linear time: rows are user data, and no row text goes
into a regular expression.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from enum import Enum
from functools import lru_cache
from typing import Any, TypeAlias
from uuid import UUID

import orjson

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
"""What ``serialize_value`` returns: a value ``json.dumps`` (and orjson) encodes as is."""

MAX_PRECISION = 38
"""Largest NUMBER precision (also NUMBER's default)."""
MAX_VARCHAR_LENGTH = 16_777_216
"""A VARCHAR's length when the type names none (Snowflake's default maximum, in characters)."""
MAX_BINARY_LENGTH = 8_388_608
"""A BINARY's length when the type names none (bytes)."""
MAX_NESTING = 500
"""Deepest nesting of lists and dicts a VARIANT / OBJECT / ARRAY value may have here (a bound that
keeps validation clear of Python's recursion limit; Snowflake's own is not documented)."""

# Snowflake's integer-stored dates, times and timestamps: seconds, ms, us or ns by magnitude.
_EPOCH_SECONDS_LIMIT = 31_536_000_000
_EPOCH_MAX_DIGITS = 20
_EPOCH = datetime(1970, 1, 1)
# Ints outside int64 travel as decimal strings: orjson neither writes nor reads them exactly
# (it reads a wider integer as a float), and NUMBER columns take numeric strings exactly.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Decimal plain notation ('f') stays within this exponent range; beyond it the text would be huge.
_PLAIN_EXPONENT_LIMIT = 1000
# Quoted values in messages are cut here: a 16 MB string does not belong in an error message.
_MAX_SHOWN = 200
_WHITESPACE = " \t\n\r\f\v"
_DIGITS = frozenset("0123456789")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_TRUE_WORDS = frozenset({"true", "t", "yes", "y", "on", "1"})
_FALSE_WORDS = frozenset({"false", "f", "no", "n", "off", "0"})
_FLOAT_WORDS = frozenset({"nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"})
# Wide enough for any NUMBER rounding (at most 38 + 1 digits) and any exponent Decimal parses.
_ROUNDING = Context(
    prec=100, rounding=ROUND_HALF_UP, Emax=999_999_999_999_999_999, Emin=-999_999_999_999_999_999
)


# ------------------------------------------------------------------------------------------------
# Columns and errors


@dataclass(frozen=True)
class ColumnSpec:
    """One target-table column as the open-channel answer's ``table_columns`` describes it."""

    name: str
    """The column name (upper-case unless it was quoted at creation)."""
    type: str
    """The SQL type as Floe prints it, e.g. ``NUMBER(10,2)``, ``VARCHAR(16777216)``, ``TIMESTAMP_NTZ``."""
    nullable: bool = True
    """False for NOT NULL."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ColumnSpec:
        """From a ``table_columns`` entry ``{"name": ..., "type": ..., "nullable": ...}``; ValueError
        when name or type is missing or not a string. Other fields are ignored."""
        name, sql_type, nullable = data.get("name"), data.get("type"), data.get("nullable", True)
        if not isinstance(name, str) or not name or not isinstance(sql_type, str) or not sql_type:
            raise ValueError(f"not a table column: {_cut(repr(dict(data)))}")
        if not isinstance(nullable, bool):
            raise ValueError(f"column {name}: 'nullable' is not a boolean")
        return cls(name, sql_type, nullable)

    def to_json(self) -> dict[str, Any]:
        """The ``table_columns`` entry."""
        return {"name": self.name, "type": self.type, "nullable": self.nullable}


@dataclass(frozen=True)
class RowError:
    """Why one row would not load: its position in the batch, the column, and Snowflake's words."""

    row_index: int
    """The row's position in the batch (0-based)."""
    column: str | None
    """The table column the error is about; None for errors about the row as a whole."""
    message: str
    """The error text, worded as Snowflake words it."""

    def __str__(self) -> str:
        where = f"row {self.row_index}" + (f", column {self.column}" if self.column is not None else "")
        return f"{where}: {self.message}"


# ------------------------------------------------------------------------------------------------
# Serialization


def serialize_value(value: Any, *, column: str | None = None) -> JsonValue:
    """One Python value as the JSON value sent for it.

    date / datetime / time become ISO 8601 text (an aware value keeps its offset, a naive one stays
    naive), Decimal exact text, bytes hex text, NaN and infinities the strings ``"NaN"``, ``"inf"``,
    ``"-inf"``; ints beyond int64 decimal text, a UUID its text and an Enum its value. dicts
    (string keys) and lists / tuples recurse. Anything else is a TypeError naming ``column`` and
    the Python type.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if _INT64_MIN <= value <= _INT64_MAX else str(Decimal(value))
    if isinstance(value, float):
        return value if math.isfinite(value) else _float_word(value)
    if isinstance(value, Decimal):
        return _decimal_text(value)
    if isinstance(value, datetime):
        return _datetime_text(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, time):
        return _time_text(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Enum):
        return serialize_value(value.value, column=column)
    if isinstance(value, Mapping):
        out: dict[str, JsonValue] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{_where(column)}object keys must be str, not {type(key).__name__}")
            out[key] = serialize_value(item, column=column)
        return out
    if isinstance(value, (list, tuple)):
        return [serialize_value(item, column=column) for item in value]
    raise TypeError(f"{_where(column)}values of Python type {type(value).__name__} cannot be sent")


def serialize_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as the JSON object sent as one NDJSON line (``serialize_value`` on each value)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if not isinstance(key, str):
            raise TypeError(f"column names must be str, not {type(key).__name__}")
        out[key] = serialize_value(value, column=key)
    return out


# orjson writes every JSON type, UUIDs and Enums exactly as serialize_value would, except NaN and
# infinities (as null) and ints beyond int64 (as numbers): STRICT_INTEGER makes the widest ints fail
# over to serialize_row, and a line with a null is written again by it. The rest (dates, Decimal,
# bytes, other Mappings, dataclasses) goes through _fast_default, i.e. serialize_value.
_FAST_OPTIONS = (
    orjson.OPT_APPEND_NEWLINE
    | orjson.OPT_STRICT_INTEGER
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
)


def _fast_default(value: Any) -> JsonValue:
    out = serialize_value(value)
    if out is value:  # a subclass orjson does not take (say numpy.float64): serialize_row says why
        raise TypeError(f"values of Python type {type(value).__name__} cannot be sent")
    return out


def row_line(row: Mapping[str, Any]) -> bytes:
    """The NDJSON line sent for ``row``: ``orjson.dumps(serialize_row(row))`` and a newline.

    The same bytes, several times faster for rows of plain JSON types: orjson walks the row in C and
    only values it cannot write come back to Python. A TypeError says why a row cannot be sent.
    """
    if type(row) is dict:
        try:
            line = orjson.dumps(row, default=_fast_default, option=_FAST_OPTIONS)
        except TypeError:
            pass  # serialize_row decides (a wide int is fine; a bad key or value raises there)
        else:
            if b"null" not in line:  # no NaN or infinity went out as null (nor a None: rare)
                return line
    return orjson.dumps(serialize_row(row), option=orjson.OPT_APPEND_NEWLINE)


def _where(column: str | None) -> str:
    return f"column {column}: " if column is not None else ""


def _float_word(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "inf" if value > 0 else "-inf"


def _decimal_text(value: Decimal) -> str:
    """Exact text of a Decimal: plain notation unless the exponent is extreme, words when not finite."""
    if value.is_nan():
        return "NaN"
    if value.is_infinite():
        return "inf" if value > 0 else "-inf"
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)  # finite: never 'n', 'N' or 'F'
    if abs(exponent) <= _PLAIN_EXPONENT_LIMIT and abs(value.adjusted()) <= _PLAIN_EXPONENT_LIMIT:
        return format(value, "f")
    return str(value)


def _datetime_text(value: datetime) -> str:
    offset = value.utcoffset()
    if offset is None or offset % timedelta(minutes=1) == timedelta(0):
        return value.isoformat()
    # Snowflake's offsets are whole minutes; the same instant in UTC is (old LMT zones have seconds).
    try:
        return value.astimezone(UTC).isoformat()
    except OverflowError:  # at the ends of datetime's range: keep the wall clock, drop the seconds
        minutes = offset // timedelta(minutes=1)
        return value.replace(tzinfo=timezone(timedelta(minutes=minutes))).isoformat()


def _time_text(value: time) -> str:
    offset = value.utcoffset()
    if offset is None or offset % timedelta(minutes=1) == timedelta(0):
        return value.isoformat()
    return value.replace(tzinfo=timezone(timedelta(minutes=offset // timedelta(minutes=1)))).isoformat()


# ------------------------------------------------------------------------------------------------
# Column types


@dataclass(frozen=True)
class _SqlType:
    """A column type reduced to what validation needs."""

    kind: str
    precision: int = MAX_PRECISION
    scale: int = 0
    length: int = MAX_VARCHAR_LENGTH


_NUMBER_NAMES = frozenset({"NUMBER", "DECIMAL", "NUMERIC"})
_INTEGER_NAMES = frozenset({"INT", "INTEGER", "BIGINT", "SMALLINT", "TINYINT", "BYTEINT"})
_FLOAT_NAMES = frozenset({"FLOAT", "FLOAT4", "FLOAT8", "DOUBLE", "DOUBLE PRECISION", "REAL"})
_STRING_NAMES = frozenset(
    {
        "VARCHAR",
        "STRING",
        "TEXT",
        "NVARCHAR",
        "NVARCHAR2",
        "CHAR VARYING",
        "NCHAR VARYING",
        "CHARACTER VARYING",
    }
)
_CHAR_NAMES = frozenset({"CHAR", "CHARACTER", "NCHAR"})  # a bare CHAR is one character
_BINARY_NAMES = frozenset({"BINARY", "VARBINARY"})
_SIMPLE_NAMES = {
    "BOOLEAN": "BOOLEAN",
    "DATE": "DATE",
    "TIME": "TIME",
    "DATETIME": "TIMESTAMP_NTZ",
    "TIMESTAMP": "TIMESTAMP_NTZ",  # TIMESTAMP_TYPE_MAPPING's default
    "TIMESTAMP_NTZ": "TIMESTAMP_NTZ",
    "TIMESTAMPNTZ": "TIMESTAMP_NTZ",
    "TIMESTAMP WITHOUT TIME ZONE": "TIMESTAMP_NTZ",
    "TIMESTAMP_LTZ": "TIMESTAMP_LTZ",
    "TIMESTAMPLTZ": "TIMESTAMP_LTZ",
    "TIMESTAMP WITH LOCAL TIME ZONE": "TIMESTAMP_LTZ",
    "TIMESTAMP_TZ": "TIMESTAMP_TZ",
    "TIMESTAMPTZ": "TIMESTAMP_TZ",
    "TIMESTAMP WITH TIME ZONE": "TIMESTAMP_TZ",
    "VARIANT": "VARIANT",
    "OBJECT": "OBJECT",
    "ARRAY": "ARRAY",
}
_FRACTIONAL_KINDS = frozenset({"TIME", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "TIMESTAMP_TZ"})  # take (0..9)
_NESTED_KINDS = frozenset({"VARIANT", "OBJECT", "ARRAY"})


@lru_cache(maxsize=1024)
def _sql_type(spelling: str) -> _SqlType | None:
    """The type a column's SQL spelling names; None when this client does not support it."""
    text = " ".join(spelling.upper().split())
    if "(" not in text:
        return _build_type(text, [])
    open_at = text.index("(")
    name = text[:open_at].rstrip()
    if not text.endswith(")"):
        return None
    if _SIMPLE_NAMES.get(name) in _NESTED_KINDS:
        # Structured OBJECT(...) / ARRAY(...): the shape is checked, the element types are not.
        return _SqlType(_SIMPLE_NAMES[name])
    params: list[int] = []
    for part in text[open_at + 1 : -1].split(","):
        digits = part.strip()
        if not digits or len(digits) > 10 or not set(digits) <= _DIGITS:
            return None
        params.append(int(digits))
    return _build_type(name, params)


def _build_type(name: str, params: list[int]) -> _SqlType | None:
    if name in _NUMBER_NAMES:
        if len(params) > 2:
            return None
        precision = params[0] if params else MAX_PRECISION
        scale = params[1] if len(params) > 1 else 0
        if not (1 <= precision <= MAX_PRECISION and 0 <= scale <= precision):
            return None
        return _SqlType("NUMBER", precision=precision, scale=scale)
    if name in _INTEGER_NAMES or name in _FLOAT_NAMES:
        return None if params else _SqlType("NUMBER" if name in _INTEGER_NAMES else "FLOAT")
    if name in _STRING_NAMES or name in _CHAR_NAMES or name in _BINARY_NAMES:
        binary = name in _BINARY_NAMES
        default = 1 if name in _CHAR_NAMES else MAX_BINARY_LENGTH if binary else MAX_VARCHAR_LENGTH
        length = params[0] if len(params) == 1 else default
        if len(params) > 1 or length < 1:
            return None
        return _SqlType("BINARY" if binary else "VARCHAR", length=length)
    kind = _SIMPLE_NAMES.get(name)
    if kind is None:
        return None
    if params and not (kind in _FRACTIONAL_KINDS and len(params) == 1 and params[0] <= 9):
        return None
    return _SqlType(kind)


# ------------------------------------------------------------------------------------------------
# Validation


def validate_row(row: Mapping[str, Any], columns: Sequence[ColumnSpec], *, index: int) -> list[RowError]:
    """The errors the row at position ``index`` of its batch would have in a table of ``columns``
    (empty when it loads). Never raises: a value of any Python type is an error, not an exception."""
    return _Table(columns).validate(row, index)


def validate_rows(rows: Iterable[Mapping[str, Any]], columns: Sequence[ColumnSpec]) -> list[RowError]:
    """The errors of a batch of rows, in row order; ``row_index`` is the row's position in the batch."""
    table = _Table(columns)
    errors: list[RowError] = []
    for index, row in enumerate(rows):
        errors.extend(table.validate(row, index))
    return errors


class _Table:
    """The columns by upper-case name, looked up once per batch rather than once per row."""

    def __init__(self, columns: Sequence[ColumnSpec]) -> None:
        self.columns = list(columns)
        self.by_name: dict[str, ColumnSpec] = {}
        for col in self.columns:
            self.by_name.setdefault(col.name.upper(), col)

    def validate(self, row: Mapping[str, Any], index: int) -> list[RowError]:
        """One row's errors: extra columns first, then each table column in table order."""
        errors: list[RowError] = []
        given: dict[str, list[str]] = {}
        extra: list[str] = []
        for key in row:
            col = self.by_name.get(key.upper()) if isinstance(key, str) else None
            if col is None:
                extra.append(key if isinstance(key, str) else repr(key))
            else:
                given.setdefault(col.name.upper(), []).append(key)
        if extra:
            errors.append(
                RowError(
                    index,
                    None,
                    "The given row cannot be converted to the internal format: "
                    f"Extra columns: [{_cut(', '.join(extra))}]. "
                    "Columns not present in the table shouldn't be specified",
                )
            )
        for col in self.columns:
            keys = given.pop(col.name.upper(), None)
            if keys is None:
                if not col.nullable:
                    errors.append(RowError(index, col.name, f"Missing NOT NULL column: [{col.name}]"))
                continue
            if len(keys) > 1:
                duplicate = (
                    "The given row cannot be converted to the internal format: "
                    f"Duplicate column names: [{_cut(', '.join(keys))}]"
                )
                errors.append(RowError(index, col.name, duplicate))
                continue
            message = _check_value(row[keys[0]], col)
            if message is not None:
                errors.append(RowError(index, col.name, message))
        return errors


def _check_value(value: Any, col: ColumnSpec) -> str | None:
    """The error of one value in one column, None when it loads."""
    if value is None:
        return None if col.nullable else "NULL result in a non-nullable column"
    sql_type = _sql_type(col.type)
    if sql_type is None:
        return f"Unsupported data type '{col.type}'"
    check, allowed = _CHECKS[sql_type.kind]
    try:
        message = check(value, sql_type)
    except RecursionError:  # a self-containing list or dict; MAX_NESTING catches the rest
        return f"Value is nested more than {MAX_NESTING} levels deep"
    if message == _WRONG_TYPE:
        return (
            f"Value of Python type {type(value).__name__} cannot be ingested into a column of type "
            f"{col.type}; allowed: {allowed}"
        )
    return message


# A check's answer for a value of a Python type the column type does not take (the caller words it).
_WRONG_TYPE = "wrong type"


def _check_number(value: Any, t: _SqlType) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, str)):
        return _WRONG_TYPE
    number = _exact(value)
    if number is None:
        return f"Numeric value '{_shown(value)}' is not recognized"
    if not _fits(number, t.precision, t.scale):
        return (
            f"Number out of representable range: type NUMBER({t.precision},{t.scale}), value {_shown(value)}"
        )
    return None


def _check_float(value: Any, t: _SqlType) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, str)):
        return _WRONG_TYPE
    if isinstance(value, float) or (isinstance(value, Decimal) and not value.is_finite()):
        return None
    if isinstance(value, str) and value.strip(_WHITESPACE).lower() in _FLOAT_WORDS:
        return None
    number = _exact(value)
    if number is None:
        return f"Numeric value '{_shown(value)}' is not recognized"
    if not number.is_finite() or math.isinf(float(number)):
        return f"Number out of representable range: type FLOAT, value {_shown(value)}"
    return None


def _check_varchar(value: Any, t: _SqlType) -> str | None:
    if not isinstance(value, (str, int, float, Decimal)):  # bool is an int
        return _WRONG_TYPE
    if len(_text(value)) > t.length:
        return f"String '{_shown(value)}' is too long and would be truncated"
    return None


def _check_binary(value: Any, t: _SqlType) -> str | None:
    if isinstance(value, (bytes, bytearray, memoryview)):
        size = value.nbytes if isinstance(value, memoryview) else len(value)
        if size > t.length:
            return (
                f"Binary value '{_cut(bytes(value[:_MAX_SHOWN]).hex())}' is too long and would be truncated"
            )
        return None
    if not isinstance(value, str):
        return _WRONG_TYPE
    if len(value) % 2 or not set(value) <= _HEX_DIGITS:
        return f"The following string is not a legal hex-encoded value: '{_shown(value)}'"
    if len(value) // 2 > t.length:
        return f"Binary value '{_shown(value)}' is too long and would be truncated"
    return None


def _check_boolean(value: Any, t: _SqlType) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        # 0 is false, anything else true; but an int beyond int64 travels as text, which is no word.
        in_range = _INT64_MIN <= value <= _INT64_MAX
        return None if in_range else f"Boolean value '{_shown(value)}' is not recognized"
    if isinstance(value, (float, Decimal)):
        # NaN and the infinities are neither, and they travel as the strings 'NaN', 'inf', '-inf'.
        finite = value.is_finite() if isinstance(value, Decimal) else math.isfinite(value)
        return None if finite else f"Boolean value '{_shown(value)}' is not recognized"
    if not isinstance(value, str):
        return _WRONG_TYPE
    # Snowflake's words, case-insensitive, not trimmed; ASCII only, so no Unicode case folding
    # turns some other letter into one of them.
    word = value.lower() if value.isascii() else ""
    if word in _TRUE_WORDS or word in _FALSE_WORDS:
        return None
    return f"Boolean value '{_shown(value)}' is not recognized"


def _check_date(value: Any, t: _SqlType) -> str | None:
    if isinstance(value, date):  # a datetime too: its date
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return _WRONG_TYPE
    if _is_epoch(value) or (isinstance(value, str) and _is_timestamp_text(value.strip(_WHITESPACE))):
        return None
    return f"Date '{_shown(value)}' is not recognized"


def _check_time(value: Any, t: _SqlType) -> str | None:
    if isinstance(value, time):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return _WRONG_TYPE
    if _is_epoch(value, time_of_day=True) or (
        isinstance(value, str) and _is_time_text(value.strip(_WHITESPACE))
    ):
        return None
    return f"Time '{_shown(value)}' is not recognized"


def _check_timestamp(value: Any, t: _SqlType) -> str | None:
    if isinstance(value, date):  # a date is its midnight
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return _WRONG_TYPE
    if _is_epoch(value) or (isinstance(value, str) and _is_timestamp_text(value.strip(_WHITESPACE))):
        return None
    return f"Timestamp '{_shown(value)}' is not recognized"


def _check_variant(value: Any, t: _SqlType) -> str | None:
    problem = _json_problem(value, 0)
    if problem is not None:
        return _WRONG_TYPE if problem == "" else problem
    return None


def _check_object(value: Any, t: _SqlType) -> str | None:
    return _check_shaped(value, Mapping, "an object")


def _check_array(value: Any, t: _SqlType) -> str | None:
    return _check_shaped(value, (list, tuple), "an array")


def _check_shaped(value: Any, shape: type | tuple[type, ...], what: str) -> str | None:
    """OBJECT / ARRAY: a value of that shape, or a string holding JSON of that shape."""
    if isinstance(value, str):
        try:
            # Numbers as Decimals: only the shape matters here, and int() of a long digit run is
            # refused past 4300 digits (and quadratic below that).
            parsed = json.loads(value, parse_int=Decimal, parse_float=Decimal)
        except json.JSONDecodeError as exc:
            return f"Error parsing JSON: {exc.msg}, pos {exc.pos}"
        except RecursionError:
            return f"Error parsing JSON: nested more than {MAX_NESTING} levels deep"
        if not isinstance(parsed, shape):
            return f"JSON value '{_shown(value)}' is not {what}"
        return None
    if not isinstance(value, shape):
        return _WRONG_TYPE
    return _check_variant(value, _SqlType("VARIANT"))


_CHECKS: dict[str, tuple[Callable[[Any, _SqlType], str | None], str]] = {
    "NUMBER": (_check_number, "int, float, Decimal, str"),
    "FLOAT": (_check_float, "int, float, Decimal, str"),
    "VARCHAR": (_check_varchar, "str, int, float, bool, Decimal"),
    "BINARY": (_check_binary, "bytes, bytearray, memoryview, str (hex)"),
    "BOOLEAN": (_check_boolean, "bool, int, float, Decimal, str"),
    "DATE": (_check_date, "date, datetime, int, str"),
    "TIME": (_check_time, "time, int, str"),
    "TIMESTAMP_NTZ": (_check_timestamp, "date, datetime, int, str"),
    "TIMESTAMP_LTZ": (_check_timestamp, "date, datetime, int, str"),
    "TIMESTAMP_TZ": (_check_timestamp, "date, datetime, int, str"),
    "VARIANT": (
        _check_variant,
        "None, bool, int, float, str, Decimal, date, time, datetime, bytes, dict, list, tuple",
    ),
    "OBJECT": (_check_object, "dict, str (a JSON object)"),
    "ARRAY": (_check_array, "list, tuple, str (a JSON array)"),
}
"""Column kind -> (the check, the Python types it takes, for the message)."""

_SCALARS = (bool, int, float, str, Decimal, date, time, bytes, bytearray, memoryview)


def _json_problem(value: Any, depth: int) -> str | None:
    """Why ``serialize_value`` would refuse value: None when it would not, "" for the value's own
    type, a message for something inside it."""
    if value is None or isinstance(value, _SCALARS):
        return None
    if depth >= MAX_NESTING:
        return f"Value is nested more than {MAX_NESTING} levels deep"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"Object keys must be str, not {type(key).__name__}"
            problem = _json_problem(item, depth + 1)
            if problem is not None:
                return problem or f"Value of Python type {type(item).__name__} inside a value cannot be sent"
        return None
    if isinstance(value, (list, tuple)):
        for item in value:
            problem = _json_problem(item, depth + 1)
            if problem is not None:
                return problem or f"Value of Python type {type(item).__name__} inside a value cannot be sent"
        return None
    return ""


# ------------------------------------------------------------------------------------------------
# Numbers


def _exact(value: int | float | Decimal | str) -> Decimal | None:
    """value as a Decimal: ints and Decimals as they are, floats by their shortest text, strings when
    they are numeric text (infinite when the exponent is beyond Decimal's); None when not numeric."""
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    text = value.strip(_WHITESPACE)
    if not _is_numeric_text(text):
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        # An exponent past Decimal's limits: zero when it is negative, else far out of any range.
        if "e-" in text.lower():
            return Decimal(0)
        return Decimal("-Infinity") if text.startswith("-") else Decimal("Infinity")


def _is_numeric_text(text: str) -> bool:
    """``[+-]digits[.digits][e[+-]digits]`` (digits on at least one side of the point), ASCII only;
    Decimal() alone would also take 'NaN', '1_000' and non-ASCII digits."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body.isascii():
        return False
    mantissa, marker, exponent = body.lower().partition("e")
    if marker:
        exponent = exponent[1:] if exponent[:1] in ("+", "-") else exponent
        if not exponent or not _all_digits(exponent):
            return False
    whole, _, fraction = mantissa.partition(".")
    return bool(whole or fraction) and _all_digits(whole) and _all_digits(fraction)


def _all_digits(text: str) -> bool:
    """Empty or ASCII digits only (str.isdigit alone takes other scripts' digits and superscripts)."""
    return not text or (text.isascii() and text.isdigit())


def _fits(number: Decimal, precision: int, scale: int) -> bool:
    """Whether number, rounded half away from zero to ``scale`` digits, has at most
    ``precision - scale`` integer digits (Snowflake rounds extra scale digits, it does not refuse them)."""
    if not number.is_finite():
        return False
    if number.is_zero():
        return True
    integer_digits = precision - scale
    if number.adjusted() >= integer_digits:
        return False  # 10**integer_digits or more before rounding; rounding never shrinks it
    if number.adjusted() < -scale - 1:
        return True  # below half a unit of the last digit: rounds to zero
    rounded = number.quantize(Decimal(1).scaleb(-scale), context=_ROUNDING)
    return rounded.is_zero() or rounded.adjusted() < integer_digits


# ------------------------------------------------------------------------------------------------
# Dates and times: fixed-format scans of Snowflake's AUTO formats (the seed's list)


def _is_epoch(value: int | str, *, time_of_day: bool = False) -> bool:
    """Whether value is an integer-stored date/time: an int, or a string of up to 20 digits with an
    optional sign, read as seconds, ms, us or ns since the epoch by magnitude; the instant must be
    one datetime can hold (a TIME takes any, as only its time of day counts)."""
    if isinstance(value, str):
        text = value.strip(_WHITESPACE)
        digits = text[1:] if text[:1] in ("+", "-") else text
        if not digits or len(digits) > _EPOCH_MAX_DIGITS or not set(digits) <= _DIGITS:
            return False
        number = int(text)
    else:
        number = value
        if abs(number) >= 10**_EPOCH_MAX_DIGITS:
            return False
    if time_of_day:
        return True
    magnitude = abs(number)
    if magnitude < _EPOCH_SECONDS_LIMIT:
        micros = number * 1_000_000
    elif magnitude < _EPOCH_SECONDS_LIMIT * 1000:
        micros = number * 1000
    elif magnitude < _EPOCH_SECONDS_LIMIT * 1_000_000:
        micros = number
    else:
        micros = number // 1000
    try:
        _EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        return False
    return True


def _number_at(text: str, start: int, width: int, limit: int) -> bool:
    """Whether text[start:start+width] is ``width`` ASCII digits forming a number below ``limit``."""
    part = text[start : start + width]
    return len(part) == width and set(part) <= _DIGITS and int(part) < limit


def _is_date_text(text: str) -> bool:
    """``YYYY-MM-DD`` exactly, and a real calendar date."""
    if len(text) != 10 or text[4] != "-" or text[7] != "-":
        return False
    if not (_number_at(text, 0, 4, 10_000) and _number_at(text, 5, 2, 13) and _number_at(text, 8, 2, 32)):
        return False
    try:
        date(int(text[:4]), int(text[5:7]), int(text[8:10]))
    except ValueError:
        return False
    return True


def _clock_end(text: str, i: int) -> int | None:
    """Where ``HH24:MI[:SS[.FF]]`` (FF: 1 to 9 digits) starting at i ends; None when it is not there."""
    if not (_number_at(text, i, 2, 24) and text[i + 2 : i + 3] == ":" and _number_at(text, i + 3, 2, 60)):
        return None
    i += 5
    if text[i : i + 1] != ":":
        return i
    if not _number_at(text, i + 1, 2, 60):
        return None
    i += 3
    if text[i : i + 1] != ".":
        return i
    start = i + 1
    i = start
    while i < len(text) and text[i] in _DIGITS:
        i += 1
    return i if 1 <= i - start <= 9 else None


def _is_offset_text(text: str, i: int) -> bool:
    """Whether text[i:] is empty or an offset: ``Z``, ``+HH:MM``, ``+HHMM`` or ``+HH`` (one space
    before it allowed)."""
    rest = text[i:]
    if rest.startswith(" "):
        rest = rest[1:]
        if not rest:
            return False
    if rest in ("", "Z"):
        return True
    if rest[0] not in "+-" or not _number_at(rest, 1, 2, 24):
        return False
    minutes = rest[3:]
    if minutes.startswith(":"):
        minutes = minutes[1:]
        if not minutes:
            return False
    return minutes == "" or (len(minutes) == 2 and _number_at(minutes, 0, 2, 60))


def _is_time_text(text: str) -> bool:
    """``HH24:MI[:SS[.FF]]`` with an optional offset."""
    end = _clock_end(text, 0)
    return end is not None and _is_offset_text(text, end)


def _is_timestamp_text(text: str) -> bool:
    """``YYYY-MM-DD``, or it followed by ``T`` (or a space) and a time with an optional offset."""
    if not _is_date_text(text[:10]):
        return False
    if len(text) == 10:
        return True
    if text[10] not in "T ":
        return False
    end = _clock_end(text, 11)
    return end is not None and _is_offset_text(text, end)


# ------------------------------------------------------------------------------------------------
# Text of values


def _text(value: str | int | float | Decimal) -> str:
    """A scalar as Snowflake turns it into a VARCHAR (what a VARCHAR's length applies to)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(Decimal(value))  # no int-to-str digit limit on the way
    if isinstance(value, float):
        if not math.isfinite(value):
            return _float_word(value)
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    return _decimal_text(value)


def _shown(value: Any) -> str:
    """A value as an error message quotes it, cut at _MAX_SHOWN characters."""
    if isinstance(value, (str, int, float, Decimal)):
        return _cut(_text(value))
    return _cut(repr(value))


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."
