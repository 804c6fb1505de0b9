"""Value conversions with Snowflake's input rules, as DuckDB SQL: text to numbers, booleans, binary
(BINARY_FORMAT), dates, times, timestamps and VARIANT (AUTO date/time formats, its boolean words,
rounding to the scale).

``final_conversion`` turns a column's value into the column's type, NULL (never an error) when it
does not convert. It first uses DuckDB's own casts (cheap to plan and to run); only the rows they
reject get the complete Snowflake rule (AUTO date/time formats, 'on'/'off', integer timestamps), in
a second query on just those rows. ``nested_conversion`` is a conversion inside an expression
(``::T``, CAST, TO_DATE, TO_NUMBER...), which raises on bad input unless it is a TRY_ form.

A TIMESTAMP_TZ value keeps its offset: ``tz_offset`` is the SQL of a value's offset from UTC in
minutes, the wall clock its text shows minus the instant it converted to (0 when the text has no
offset: Floe's session time zone is UTC), for the blob's offset column (``floe.types.offset_column``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from floe.catalog.models import Column, FileFormat
from floe.errors import CompilationError
from floe.types import duckdb_type, truncated_fraction
from pipeline.transform.dialect import list_lit, lit
from pipeline.transform.messages import binary_form

# AUTO formats from Snowflake's date/time input rules that DuckDB's plain casts do not accept.
_NTZ_FORMATS = (
    "%m/%d/%Y %H:%M:%S",
    "%m/%d/%Y %H:%M:%S.%f",
    "%m/%d/%Y %H:%M",
    "%m/%d/%Y",
    "%d-%b-%Y",
    "%a, %d %b %Y %H:%M:%S",
    "%a, %d %b %Y %H:%M:%S.%f",
    "%a, %d %b %Y %I:%M:%S %p",
    "%a, %d %b %Y %I:%M:%S.%f %p",
    "%a, %d %b %Y %I:%M %p",
    "%a %b %d %H:%M:%S %Y",
    "%Y-%m-%d %H",
    "%Y-%m-%dT%H",
)
_TZ_FORMATS = (
    "%a, %d %b %Y %H:%M:%S %z",
    "%a, %d %b %Y %H:%M:%S.%f %z",
    "%a, %d %b %Y %I:%M:%S %p %z",
    "%a, %d %b %Y %I:%M:%S.%f %p %z",
    "%a %b %d %H:%M:%S %z %Y",
    "%m/%d/%Y %H:%M:%S %z",
)
# Snowflake's AUTO time formats that DuckDB's TIME cast does not read (12-hour clocks).
_TIME_FORMATS = (
    "%I:%M:%S.%n %p",
    "%I:%M:%S %p",
    "%I:%M %p",
)
# The time formats DuckDB's TIME cast reads as Snowflake's AUTO does: HH24:MI[:SS[.FF]], an optional
# offset (which a TIME drops). Checked first, as DuckDB's cast also takes a whole timestamp's text.
_TIME_TEXT = "\\s*\\d{1,2}:\\d{2}(:\\d{2}(\\.\\d{1,9})?)?\\s*(Z|[+-]\\d{2}(:?\\d{2})?)?\\s*"
# A trailing offset of a timestamp's text, removed to read the wall clock under a custom format.
_TRAILING_OFFSET = "\\s*(Z|[+-]\\d{2}(:?\\d{2})?)$"
_TRUE_WORDS = ("true", "t", "yes", "y", "on", "1")
_FALSE_WORDS = ("false", "f", "no", "n", "off", "0")
# Snowflake's integer timestamps: seconds, ms, us or ns by magnitude.
_EPOCH_SECONDS_LIMIT = 31536000000


# sqlglot's names for Snowflake format elements that DuckDB's strptime spells otherwise: FF and
# FF1..FF9 (any digits: DuckDB's %n reads 1 to 9), TZH:TZM and TZH (DuckDB's %z reads +HH, +HHMM
# and +HH:MM).
_STRPTIME_FIXES = (
    *((f"%f_{n}", "%n") for n in ("one", "two", "three", "four", "five", "seven", "eight", "nine")),
    ("%:z", "%z"),
    ("%-z", "%z"),
)


def _strftime(snowflake_format: str, kind: str) -> str:
    """A Snowflake DATE_FORMAT / TIME_FORMAT / TIMESTAMP_FORMAT as a DuckDB strptime pattern (via
    sqlglot's mapping)."""
    func = "TO_DATE" if kind == "DATE" else "TO_TIMESTAMP"
    try:
        fmt_sql = exp.Literal.string(snowflake_format).sql("snowflake")
        node = sqlglot.parse_one(f"{func}(x, {fmt_sql})", read="snowflake")
    except SqlglotError as exc:
        raise CompilationError(f"invalid format '{snowflake_format}': {exc}") from exc
    fmt = node.args.get("format")
    if not isinstance(fmt, exp.Literal):
        # sqlglot drops the format when it is its own default ISO one
        return "%Y-%m-%d" if kind == "DATE" else "%Y-%m-%d %H:%M:%S"
    pattern = str(fmt.this)
    for name, duck in _STRPTIME_FIXES:
        pattern = pattern.replace(name, duck)
    return pattern


def _epoch_sql(x: str) -> str:
    """Integer strings as Snowflake reads them into timestamps (seconds, ms, us or ns by size)."""
    n = f"TRY_CAST({x} AS HUGEINT)"
    limit = _EPOCH_SECONDS_LIMIT
    micros = (
        f"CASE WHEN abs({n}) < {limit} THEN {n} * 1000000 WHEN abs({n}) < {limit * 1000} THEN {n} * 1000 "
        f"WHEN abs({n}) < {limit * 1000000} THEN {n} ELSE {n} // 1000 END"
    )
    return (
        f"CASE WHEN regexp_full_match({x}, '\\s*[+-]?[0-9]{{1,20}}\\s*') "
        f"THEN TRY(make_timestamp(CAST({micros} AS BIGINT))) END"
    )


def _text_ntz(x: str, fmt: FileFormat | None) -> str:
    """VARCHAR -> TIMESTAMP, NULL when not a timestamp. Offsets are ignored (wall clock), as in NTZ."""
    if fmt is not None and fmt.timestamp_format.upper() != "AUTO":
        pattern = _strftime(fmt.timestamp_format, "TIMESTAMP")
        return f"CAST(TRY_STRPTIME({x}, {lit(pattern)}) AS TIMESTAMP)"
    no_offset = f"regexp_replace({x}, '\\s+[+-]\\d{{2}}:?\\d{{2}}(\\s+\\d{{4}})?$', '\\1')"
    return (
        f"COALESCE(TRY_CAST({x} AS TIMESTAMP), TRY_STRPTIME({no_offset}, {list_lit(_NTZ_FORMATS)}), "
        f"{_epoch_sql(x)})"
    )


def _text_tz(x: str, fmt: FileFormat | None) -> str:
    """VARCHAR -> TIMESTAMPTZ, NULL when not a timestamp; no offset means UTC (the session zone)."""
    if fmt is not None and fmt.timestamp_format.upper() != "AUTO":
        pattern = _strftime(fmt.timestamp_format, "TIMESTAMP")
        return f"CAST(TRY_STRPTIME({x}, {lit(pattern)}) AS TIMESTAMPTZ)"
    joined = f"regexp_replace({x}, '\\s+([+-]\\d{{2}}(:?\\d{{2}})?|Z)$', '\\1')"
    return (
        f"COALESCE(TRY_CAST({x} AS TIMESTAMPTZ), TRY_CAST({joined} AS TIMESTAMPTZ), "
        f"TRY_STRPTIME({x}, {list_lit(_TZ_FORMATS)}), CAST({_text_ntz(x, None)} AS TIMESTAMPTZ))"
    )


def _text_date(x: str, fmt: FileFormat | None) -> str:
    """VARCHAR -> DATE, NULL when not a date (a timestamp string gives its date)."""
    if fmt is not None and fmt.date_format.upper() != "AUTO":
        pattern = _strftime(fmt.date_format, "DATE")
        return f"CAST(TRY_STRPTIME({x}, {lit(pattern)}) AS DATE)"
    return f"COALESCE(TRY_CAST({x} AS DATE), CAST({_text_ntz(x, None)} AS DATE))"


def _text_time(x: str, fmt: FileFormat | None) -> str:
    """VARCHAR -> TIME, NULL when not a time: Snowflake's AUTO time formats (an offset is dropped,
    as a TIME has none) or integer-stored times (the time of day of that instant); 24:00 and later
    are not times."""
    if fmt is not None and fmt.time_format.upper() != "AUTO":
        pattern = _strftime(fmt.time_format, "TIME")
        return f"CAST(TRY_STRPTIME({x}, {lit(pattern)}) AS TIME)"
    without_offset = f"regexp_replace({x}, {lit(_TRAILING_OFFSET)}, '')"  # DuckDB misses '12:34 +07'
    return (
        f"COALESCE({_time_cast(x)}, {_time_cast(without_offset)}, "
        f"CAST(TRY_STRPTIME({x}, {list_lit(_TIME_FORMATS)}) AS TIME), CAST({_epoch_sql(x)} AS TIME))"
    )


def _time_cast(x: str) -> str:
    """DuckDB's TIME cast, on Snowflake's HH24 forms only (it also takes a whole timestamp, and 24:00)."""
    cast = f"TRY_CAST({x} AS TIME)"
    return f"CASE WHEN regexp_full_match({x}, {lit(_TIME_TEXT)}) AND {cast} < TIME '24:00:00' THEN {cast} END"


def _text_binary(x: str, binary_format: str) -> str:
    """VARCHAR -> BLOB per BINARY_FORMAT, NULL when the text is not of that form: HEX (either case,
    whole bytes), BASE64 (whitespace ignored, padded), UTF8 (the text's own bytes)."""
    form = binary_form(binary_format)
    if form == "UTF8":
        return f"encode({x})"
    if form == "BASE64":
        # RE2's \s: whitespace anywhere is ignored; from_base64 refuses what is not padded base64.
        return f"TRY(from_base64(regexp_replace({x}, '\\s+', '', 'g')))"
    # from_hex alone reads an odd digit count without complaint.
    return f"CASE WHEN regexp_full_match({x}, '([0-9A-Fa-f]{{2}})*') THEN from_hex({x}) END"


def _text_bool(x: str) -> str:
    """VARCHAR -> BOOLEAN with Snowflake's words (case-insensitive, no trimming)."""
    # A simple CASE, not IN lists: DuckDB plans IN lists of constants as joins.
    whens = [f"WHEN {lit(w)} THEN TRUE" for w in _TRUE_WORDS] + [
        f"WHEN {lit(w)} THEN FALSE" for w in _FALSE_WORDS
    ]
    return f"CASE lower({x}) {' '.join(whens)} END"


def _decimal(precision: int | None, scale: int | None) -> str:
    return f"DECIMAL({min(precision or 38, 38)},{scale or 0})"


_NUMERIC_TYPES = re.compile(r"^(U?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT)|FLOAT|DOUBLE|DECIMAL.*)$")


def _type_kind(duck_type: str) -> str:
    """Group a DuckDB type name: text, json, null, bool, number, date, time, timestamp, blob or other."""
    t = duck_type.upper()
    if t == "VARCHAR":
        return "text"
    if t == "JSON":
        return "json"
    if t == '"NULL"':
        return "null"
    if t == "BOOLEAN":
        return "bool"
    if _NUMERIC_TYPES.match(t):
        return "number"
    if t == "DATE":
        return "date"
    if t.startswith("TIMESTAMP"):
        return "timestamp"
    if t == "TIME" or t.startswith("TIME WITH"):
        return "time"
    if t == "BLOB":
        return "blob"
    return "other"


@dataclass(frozen=True)
class Conversion:
    """SQL turning a value into a column's type, NULL (never an error) when it does not convert."""

    fast: str
    """Used for every row: DuckDB's own cast where it agrees with Snowflake."""
    can_fail: bool
    """False when a non-NULL input always converts."""
    slow: str | None = None
    """The complete rule (AUTO formats, Snowflake's boolean words...), run only on the rows ``fast``
    rejected: keeping it out of the main query keeps that query cheap to plan and to run."""


def _finite(sql: str) -> str:
    # DuckDB casts 'infinity' / '-infinity' to infinite dates and timestamps; Snowflake has none.
    return f"CASE WHEN isfinite({sql}) THEN {sql} END"


def final_conversion(
    x: str, duck_type: str, col: Column, json_text: bool, fmt: FileFormat, *, truncate: bool = False
) -> Conversion:
    """How x (of DuckDB type duck_type) becomes col's type; json_text: x is JSON text; truncate:
    TRUNCATECOLUMNS (a VARCHAR(n) value longer than n is cut, not an error)."""
    kind = _type_kind(duck_type)
    target = duckdb_type(col)
    if kind == "null":
        return Conversion(f"CAST(NULL AS {target})", False)
    if kind == "json" and col.type != "VARIANT":
        x, kind = f"json_extract_string({x}, '$')", "text"
    t = col.type
    if t == "NUMBER":
        return _to_number(x, kind, col)
    if t == "FLOAT":
        return _to_float(x, kind)
    if t == "VARCHAR":
        return _to_varchar(x, kind, col, fmt, truncate)
    if t == "BINARY":
        return _to_binary(x, kind, col, fmt)
    if t == "BOOLEAN":
        return _to_boolean(x, kind)
    if t == "DATE":
        return _to_date(x, kind, fmt)
    if t == "TIME":
        return _cut_fraction(_to_time(x, kind, fmt), col)
    if t in ("TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "TIMESTAMP_TZ"):
        return _cut_fraction(_to_timestamp(x, kind, t != "TIMESTAMP_NTZ", target, fmt), col)
    if t == "VARIANT":
        return _to_variant(x, kind, json_text)
    raise CompilationError(f"Unsupported data type '{t}'.")


def _cut_fraction(conv: Conversion, col: Column) -> Conversion:
    """TIME(p) / TIMESTAMP_*(p) with p below 6: the fractional seconds past p digits dropped."""
    digits = truncated_fraction(col)
    if digits is None:
        return conv

    def cut(sql: str) -> str:
        # microsecond() is the microseconds within the minute; an interval moves an instant (or a
        # time of day) by exactly that, whatever the zone.
        return f"(({sql}) - to_microseconds(microsecond({sql}) % {10 ** (6 - digits)}))"

    return Conversion(cut(conv.fast), conv.can_fail, cut(conv.slow) if conv.slow is not None else None)


def _to_number(x: str, kind: str, col: Column) -> Conversion:
    dec = _decimal(col.precision, col.scale)
    if kind == "bool":
        return Conversion(f"CAST(CASE WHEN {x} THEN 1 ELSE 0 END AS {dec})", False)
    return Conversion(f"TRY_CAST({x} AS {dec})", True)


def _to_float(x: str, kind: str) -> Conversion:
    if kind == "bool":
        return Conversion(f"CASE WHEN {x} THEN 1.0 ELSE 0.0 END", False)
    return Conversion(f"TRY_CAST({x} AS DOUBLE)", kind != "number")


def _to_varchar(x: str, kind: str, col: Column, fmt: FileFormat, truncate: bool) -> Conversion:
    if kind == "text":
        text = x
    elif kind == "blob":
        # BINARY into text: UTF-8 text under BINARY_AS_TEXT (Parquet's default), else hex as
        # Snowflake shows BINARY; bytes that are not UTF-8 are an error of their row.
        text = f"TRY(decode({x}))" if fmt.binary_as_text else f"hex({x})"
    else:
        text = f"CAST({x} AS VARCHAR)"
    if col.precision:
        if truncate:
            # TRUNCATECOLUMNS: cut to n characters, as Snowflake's lengths count them.
            return Conversion(f"left({text}, {col.precision})", kind == "blob")
        return Conversion(f"CASE WHEN length({text}) <= {col.precision} THEN {text} END", True)
    return Conversion(text, kind == "blob")


def _to_binary(x: str, kind: str, col: Column, fmt: FileFormat) -> Conversion:
    if kind == "blob":
        value, can_fail = x, False  # Parquet / Avro binary values load as they are
    else:
        # Text per BINARY_FORMAT; any other value by its text (a JSON number's digits as hex...).
        text = x if kind == "text" else f"CAST({x} AS VARCHAR)"
        value, can_fail = _text_binary(text, fmt.binary_format), True
    if col.precision:
        return Conversion(f"CASE WHEN octet_length({value}) <= {col.precision} THEN {value} END", True)
    return Conversion(value, can_fail)


def _to_boolean(x: str, kind: str) -> Conversion:
    if kind == "bool":
        return Conversion(x, False)
    if kind == "number":
        return Conversion(f"({x} <> 0)", False)
    if kind == "text":
        # DuckDB's words are a subset of Snowflake's; 'on' / 'off' take the slow path.
        return Conversion(f"TRY_CAST({x} AS BOOLEAN)", True, _text_bool(x))
    return Conversion(f"TRY_CAST({x} AS BOOLEAN)", True)


def _to_date(x: str, kind: str, fmt: FileFormat) -> Conversion:
    if kind == "text":
        if fmt.date_format.upper() != "AUTO":
            return Conversion(_text_date(x, fmt), True)
        return Conversion(_finite(f"TRY_CAST({x} AS DATE)"), True, _finite(_text_date(x, fmt)))
    if kind in ("date", "timestamp"):
        return Conversion(f"CAST({x} AS DATE)", False)
    return Conversion(f"TRY_CAST({x} AS DATE)", True)


def _to_time(x: str, kind: str, fmt: FileFormat) -> Conversion:
    if kind == "text":
        if fmt.time_format.upper() != "AUTO":
            return Conversion(_text_time(x, fmt), True)
        return Conversion(_time_cast(x), True, _text_time(x, fmt))
    if kind in ("time", "timestamp"):
        return Conversion(f"CAST({x} AS TIME)", False)  # a timestamp's time of day
    if kind == "number":
        return Conversion(f"CAST({_epoch_sql(f'CAST({x} AS VARCHAR)')} AS TIME)", True)
    return Conversion(f"TRY_CAST({x} AS TIME)", True)


def _to_timestamp(x: str, kind: str, tz: bool, target: str, fmt: FileFormat) -> Conversion:
    if kind == "text":
        full = _text_tz(x, fmt) if tz else _text_ntz(x, fmt)
        if fmt.timestamp_format.upper() != "AUTO":
            return Conversion(full, True)
        return Conversion(_finite(f"TRY_CAST({x} AS {target})"), True, _finite(full))
    if kind in ("date", "timestamp"):
        return Conversion(f"CAST({x} AS {target})", False)
    if kind == "number":
        return Conversion(f"CAST({_epoch_sql(f'CAST({x} AS VARCHAR)')} AS {target})", True)
    return Conversion(f"TRY_CAST({x} AS {target})", True)


def tz_offset(x: str, v: str, duck_type: str, fmt: FileFormat, *, full: bool) -> str:
    """SQL of a TIMESTAMP_TZ value's offset from UTC in minutes (SMALLINT): x is the value before
    conversion (of DuckDB type duck_type), v the instant it converted to. Text gives the wall clock
    it shows minus v (0 without an offset); anything else has no offset of its own: 0, UTC, the
    session's zone. ``full``: read the wall clock with every AUTO format (the rows of the slow path),
    not only DuckDB's own cast."""
    kind = _type_kind(duck_type)
    if kind == "json":
        x, kind = f"json_extract_string({x}, '$')", "text"
    if kind != "text":
        return f"CASE WHEN {v} IS NOT NULL THEN CAST(0 AS SMALLINT) END"
    wall = _wall_clock(x, fmt, full)
    return f"CAST(round((epoch_us({wall}) - epoch_us({v})) / 60000000.0) AS SMALLINT)"


def _wall_clock(x: str, fmt: FileFormat, full: bool) -> str:
    """The date and time a timestamp's text shows, its offset ignored (TIMESTAMP, NULL if unread)."""
    if fmt.timestamp_format.upper() == "AUTO":
        return _text_ntz(x, None) if full else f"TRY_CAST({x} AS TIMESTAMP)"
    pattern = _strftime(fmt.timestamp_format, "TIMESTAMP")
    if "%z" not in pattern:
        return f"CAST(TRY_STRPTIME({x}, {lit(pattern)}) AS TIMESTAMP)"
    if pattern.count("%z") > 1 or not pattern.endswith("%z"):
        raise CompilationError(
            f"TIMESTAMP_FORMAT '{fmt.timestamp_format}' puts its offset (TZH, TZM) before the end: "
            "Floe reads a TIMESTAMP_TZ's offset only at the end of its text"
        )
    head = pattern[: -len("%z")].rstrip()
    without = f"regexp_replace({x}, {lit(_TRAILING_OFFSET)}, '')"
    return f"CAST(TRY_STRPTIME({without}, {lit(head)}) AS TIMESTAMP)"


def _to_variant(x: str, kind: str, json_text: bool) -> Conversion:
    if kind == "json":
        return Conversion(f"CAST({x} AS VARCHAR)", False)
    if kind == "blob":
        return Conversion(f"CAST(to_json(hex({x})) AS VARCHAR)", False)  # BINARY in JSON: hex text
    if kind == "text" and json_text:
        return Conversion(f"CAST(TRY(json({x})) AS VARCHAR)", True)
    return Conversion(f"CAST(to_json({x}) AS VARCHAR)", False)


_TEMPORAL: dict[str, tuple[str, Callable[[str, FileFormat | None], str]]] = {
    "DATE": ("DATE", _text_date),
    "TIMESTAMP_NTZ": ("TIMESTAMP", _text_ntz),
    "TIMESTAMP_LTZ": ("TIMESTAMPTZ", _text_tz),
    "TIMESTAMP_TZ": ("TIMESTAMPTZ", _text_tz),
}
"""Column type -> (DuckDB type, the text rule)."""


def nested_conversion(x: str, ctype: str, precision: int | None, scale: int | None, safe: bool) -> str:
    """SQL converting x inside an expression: Snowflake's input rules; raises on bad input unless safe.

    x's type is unknown here (it is inside an expression), so text rules apply to CAST(x AS VARCHAR)
    after DuckDB's own cast had its chance.
    """
    cast = "TRY_CAST" if safe else "CAST"
    text = f"CAST({x} AS VARCHAR)"
    if ctype == "NUMBER":
        return f"{cast}({x} AS {_decimal(precision, scale)})"
    if ctype == "FLOAT":
        return f"{cast}({x} AS DOUBLE)"
    if ctype == "VARCHAR":
        return f"CAST({x} AS VARCHAR)"
    if ctype == "BOOLEAN":
        return f"COALESCE({_text_bool(text)}, {cast}({x} AS BOOLEAN))"
    if ctype in _TEMPORAL:
        duck, from_text = _TEMPORAL[ctype]
        value = f"COALESCE(TRY_CAST({x} AS {duck}), {from_text(text, None)}, {cast}({x} AS {duck}))"
        # An infinite value becomes NULL here, not an error: failing a row needs error(), which
        # DuckDB refuses under the TRY that catches row errors. A column's own conversion errs.
        return _finite(value)
    if ctype == "TIME":
        # DuckDB's cast first: a time or timestamp value (its time of day), then the text rules.
        return f"COALESCE(TRY_CAST({x} AS TIME), {_text_time(text, None)}, {cast}({x} AS TIME))"
    if ctype == "BINARY":
        return _nested_binary(x, safe)
    if ctype == "VARIANT":
        return f"to_json({x})"
    raise CompilationError(f"Unsupported data type '{ctype}'.")


def _nested_binary(x: str, safe: bool) -> str:
    """TRY_TO_BINARY / TRY_CAST(... AS BINARY) inside an expression: a BINARY value as it is, text
    as HEX (Snowflake's BINARY_INPUT_FORMAT default), NULL when it is not hex.

    The raising forms are refused: their error must quote the value, and failing a row needs DuckDB's
    error(), which the TRY that catches row errors refuses. A BINARY column's own conversion (a
    top-level ``$1::BINARY`` or ``TO_BINARY($1)``) is not nested: it follows BINARY_FORMAT and errs."""
    if not safe:
        raise CompilationError(
            "TO_BINARY and casts to BINARY inside an expression are not supported by Floe; load the "
            "text into a BINARY column (BINARY_FORMAT decodes it), or use TRY_TO_BINARY"
        )
    text = f"CAST({x} AS VARCHAR)"
    return f"CASE WHEN typeof({x}) = 'BLOB' THEN TRY_CAST({x} AS BLOB) ELSE {_text_binary(text, 'HEX')} END"
