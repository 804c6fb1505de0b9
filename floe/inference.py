"""Column types inferred from staged files, as INFER_SCHEMA reports them (decision 82).

Snowflake's INFER_SCHEMA answers one row per column: COLUMN_NAME, TYPE, NULLABLE, EXPRESSION,
FILENAMES, ORDER_ID. This module holds the part that needs no I/O: the type of a CSV field's text,
of a JSON value, of an Arrow (Parquet, ORC) or Avro field; how two types found for the same column
merge; and the rows. ``floe.file_schema`` reads the files; ``services.infer_schema`` is the table
function.

Types follow Snowflake's names (its documented output: TEXT, NUMBER(p, s), REAL, BOOLEAN, DATE,
TIME, TIMESTAMP_NTZ, BINARY, VARIANT, OBJECT, ARRAY):

- text (CSV fields, JSON strings): an integer is NUMBER(digits, 0), a decimal NUMBER(p, s) with
  the digits it has, a number with an exponent REAL; TRUE / FALSE (any case) BOOLEAN (CSV only:
  JSON has booleans of its own); an ISO date DATE, an ISO time TIME, an ISO timestamp (with or
  without its offset: "all the variations of timestamp data types are retrieved as TIMESTAMP_NTZ")
  TIMESTAMP_NTZ; anything else TEXT. Nothing here uses a regular expression on the data.
- JSON: numbers as their text says (above); objects OBJECT, arrays ARRAY.
- Parquet and ORC (Arrow types): integers NUMBER(38, 0), decimals NUMBER(p, s), floats REAL,
  strings TEXT, binary BINARY (Parquet binary TEXT with BINARY_AS_TEXT = TRUE, as the loader reads
  it), dates, times and timestamps DATE, TIME, TIMESTAMP_NTZ, structs and maps VARIANT (as
  Snowflake's example shows a nested column), lists ARRAY.
- Avro: the same by its schema's types and logical types; a union of null and one type is that
  type, nullable; a union of several types VARIANT.

Merging (values of one column, or one column across files): NUMBERs keep the most integer digits
and the largest scale (at most 38 digits in all); NUMBER and REAL make REAL; DATE and TIMESTAMP_NTZ
make TIMESTAMP_NTZ; OBJECT, ARRAY and VARIANT make VARIANT; other mixes are TEXT for CSV (every
field is text) and VARIANT for the other formats. A column seen only as NULL is TEXT.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.types as pat

MAX_DIGITS = 38
"""NUMBER's largest precision."""
_MAX_CLASSIFIED = 64
"""Text longer than this is TEXT at once: no number, date or timestamp is that long."""

SEMI_STRUCTURED = frozenset({"VARIANT", "OBJECT", "ARRAY"})
TEXT = "TEXT"
VARIANT = "VARIANT"


class Inferred(NamedTuple):
    """A column type as INFER_SCHEMA reports it (a tuple: compared for every value typed)."""

    kind: str
    """TEXT, NUMBER, REAL, BOOLEAN, DATE, TIME, TIMESTAMP_NTZ, BINARY, VARIANT, OBJECT or ARRAY."""
    digits: int = 0
    """NUMBER: digits before the decimal point."""
    scale: int = 0
    """NUMBER: digits after it."""

    def render(self) -> str:
        """The TYPE column: ``NUMBER(3, 1)``, ``TEXT``..."""
        if self.kind == "NUMBER":
            return f"NUMBER({self.digits + self.scale}, {self.scale})"
        return self.kind


@functools.lru_cache(maxsize=4096)
def number(digits: int, scale: int) -> Inferred:
    """NUMBER with ``digits`` before the point and ``scale`` after, within 38 digits in all (the
    scale gives way first); REAL past 38 integer digits."""
    digits = max(1, digits)
    if digits > MAX_DIGITS:
        return Inferred("REAL")
    return Inferred("NUMBER", digits, min(scale, MAX_DIGITS - digits))


def widen(a: Inferred | None, b: Inferred | None, fallback: str) -> Inferred | None:
    """One type for values of types ``a`` and ``b`` (None: only NULLs so far); ``fallback`` for a
    mix nothing else holds (TEXT for CSV, VARIANT for the others)."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    kinds = {a.kind, b.kind}
    if kinds == {"NUMBER"}:
        return number(max(a.digits, b.digits), max(a.scale, b.scale))
    if kinds == {"NUMBER", "REAL"}:
        return Inferred("REAL")
    if kinds == {"DATE", "TIMESTAMP_NTZ"}:
        return Inferred("TIMESTAMP_NTZ")
    if kinds <= SEMI_STRUCTURED:
        return _VARIANT
    return _SETTLED.get(fallback) or Inferred(fallback)


# ---------------------------------------------------------------------------------------------
# Text: CSV fields and JSON strings


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def number_text(text: str) -> Inferred | None:
    """The type of a number written as ``text`` (sign, digits, a point, an exponent), or None if it
    is not one."""
    if text.isdigit() and text.isascii():  # the common case first
        return number(len(text.lstrip("0")), 0)
    body = text[1:] if text[:1] in ("+", "-") else text
    mantissa, e, exponent = body.replace("E", "e").partition("e")
    if e:
        if exponent[:1] in ("+", "-"):
            exponent = exponent[1:]
        if not _digits(exponent):
            return None
    whole, point, fraction = mantissa.partition(".")
    if not (whole or fraction) or (whole and not _digits(whole)) or (fraction and not _digits(fraction)):
        return None
    if e:
        return Inferred("REAL")
    return number(len(whole.lstrip("0")) if whole else 1, len(fraction) if point else 0)


@functools.lru_cache(maxsize=4096)  # dates and times repeat in a column
def _is_date(text: str) -> bool:
    if len(text) != 10 or text[4] != "-" or text[7] != "-":
        return False
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _is_time(text: str) -> bool:
    if not 5 <= len(text) <= 18 or text[2] != ":" or not _digits(text[:2]):
        return False
    try:
        dt.time.fromisoformat(text)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _is_timestamp(text: str) -> bool:
    if len(text) < 16 or text[10] not in ("T", " ") or not _is_date(text[:10]) or text[13] != ":":
        return False
    try:
        dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        return False
    return True


def text_type(text: str, *, booleans: bool = True) -> Inferred:
    """The type of a field's text (see the module's docstring). ``booleans``: TRUE and FALSE are
    BOOLEAN (CSV; a JSON string "true" is text)."""
    value = text.strip() if text[:1].isspace() or text[-1:].isspace() else text
    if not value or len(value) > _MAX_CLASSIFIED:
        return _TEXT
    first = value[0]
    if first.isdigit() or first in "+-.":
        found = number_text(value)
        if found is not None:
            return found
        if _is_date(value):
            return _DATE
        if _is_timestamp(value):
            return _TIMESTAMP
        if _is_time(value):
            return _TIME
    elif booleans and value.lower() in ("true", "false"):
        return _BOOLEAN
    return _TEXT


_TEXT, _DATE, _TIMESTAMP, _TIME, _BOOLEAN, _VARIANT = (
    Inferred(k) for k in (TEXT, "DATE", "TIMESTAMP_NTZ", "TIME", "BOOLEAN", VARIANT)
)
_SETTLED = {TEXT: _TEXT, VARIANT: _VARIANT}
"""The types ``widen`` returns as such for a fallback (the same objects, so ``is`` finds them)."""


class JsonNumber(str):
    """A JSON number kept as its text (``json`` calls this for ints and floats), so its digits
    and exponent say its type."""

    __slots__ = ()


def json_type(value: Any) -> Inferred | None:
    """The type of a JSON value parsed with numbers as JsonNumber (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return Inferred("BOOLEAN")
    if isinstance(value, JsonNumber):
        return number_text(str(value)) or Inferred("REAL")  # NaN, Infinity
    if isinstance(value, str):
        return text_type(value, booleans=False)
    if isinstance(value, dict):
        return Inferred("OBJECT")
    if isinstance(value, list):
        return Inferred("ARRAY")
    return Inferred(VARIANT)


# ---------------------------------------------------------------------------------------------
# Typed formats: Arrow (Parquet, ORC) and Avro


def arrow_type(t: pa.DataType, *, binary_as_text: bool = False) -> Inferred:
    """The type of an Arrow field (a Parquet or ORC column). ``binary_as_text``: Parquet's
    BINARY_AS_TEXT, binary without a logical type read as text."""
    if pat.is_dictionary(t):
        return arrow_type(t.value_type, binary_as_text=binary_as_text)
    if pat.is_boolean(t):
        return Inferred("BOOLEAN")
    if pat.is_integer(t):
        return number(MAX_DIGITS, 0)
    if pat.is_floating(t):
        return Inferred("REAL")
    if pat.is_decimal(t):
        return number(t.precision - t.scale, t.scale)
    if pat.is_string(t) or pat.is_large_string(t):
        return Inferred(TEXT)
    if pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t):
        return Inferred(TEXT if binary_as_text else "BINARY")
    if pat.is_date(t):
        return Inferred("DATE")
    if pat.is_time(t):
        return Inferred("TIME")
    if pat.is_timestamp(t):
        return Inferred("TIMESTAMP_NTZ")
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        return Inferred("ARRAY")
    if pat.is_null(t):
        return Inferred(TEXT)
    return Inferred(VARIANT)  # structs, maps, unions


_AVRO_PRIMITIVES = {
    "boolean": Inferred("BOOLEAN"),
    "int": number(MAX_DIGITS, 0),
    "long": number(MAX_DIGITS, 0),
    "float": Inferred("REAL"),
    "double": Inferred("REAL"),
    "bytes": Inferred("BINARY"),
    "string": Inferred(TEXT),
}
_AVRO_LOGICAL = {
    "date": Inferred("DATE"),
    "time-millis": Inferred("TIME"),
    "time-micros": Inferred("TIME"),
    "timestamp-millis": Inferred("TIMESTAMP_NTZ"),
    "timestamp-micros": Inferred("TIMESTAMP_NTZ"),
    "timestamp-nanos": Inferred("TIMESTAMP_NTZ"),
    "local-timestamp-millis": Inferred("TIMESTAMP_NTZ"),
    "local-timestamp-micros": Inferred("TIMESTAMP_NTZ"),
    "local-timestamp-nanos": Inferred("TIMESTAMP_NTZ"),
    "uuid": Inferred(TEXT),
}
_AVRO_DEPTH = 64
"""Nesting an Avro schema may have before it is refused (a schema is data)."""


class AvroSchemaError(ValueError):
    """An Avro schema Floe cannot read a column list from."""


def avro_columns(schema: Any) -> list[tuple[str, Inferred | None, bool]]:
    """The fields of an Avro file's (record) schema: (name, type, nullable), in order."""
    names: dict[str, Any] = {}
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise AvroSchemaError("the schema of an Avro file must be a record")
    namespace = schema.get("namespace") if isinstance(schema.get("namespace"), str) else ""
    names[_NAMESPACE] = namespace
    _register(schema, names)
    out: list[tuple[str, Inferred | None, bool]] = []
    for f in schema.get("fields") or []:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise AvroSchemaError("a record field needs a name")
        kind, nullable = _avro_type(f.get("type"), names, 0)
        out.append((f["name"], kind, nullable))
    return out


_NAMESPACE = "\x00namespace"
"""The key of ``names`` that holds the file schema's namespace (no Avro name holds a NUL)."""


def _register(schema: Any, names: dict[str, Any]) -> None:
    """Named types (record, enum, fixed) by name, short and full (its namespace, else the file
    schema's), so later references resolve."""
    if isinstance(schema, dict) and isinstance(schema.get("name"), str):
        name = schema["name"]
        names[name] = schema
        own = schema.get("namespace")
        namespace = own if isinstance(own, str) else names.get(_NAMESPACE, "")
        if namespace and "." not in name:
            names[f"{namespace}.{name}"] = schema


def _avro_type(t: Any, names: dict[str, Any], depth: int) -> tuple[Inferred | None, bool]:
    """(type, nullable) of an Avro type: a name, a union (list) or a complex type (dict)."""
    if depth > _AVRO_DEPTH:
        raise AvroSchemaError("the Avro schema nests too deep")
    if isinstance(t, list):
        members = [m for m in t if m != "null"]
        nullable = len(members) < len(t)
        if len(members) == 1:
            return _avro_type(members[0], names, depth + 1)[0], nullable
        return (Inferred(VARIANT) if members else None), True
    if isinstance(t, str):
        if t == "null":
            return None, True
        if t in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[t], False
        if t in names:
            return _avro_type(names[t], names, depth + 1)
        raise AvroSchemaError(f"unknown Avro type {t[:100]!r}")
    if not isinstance(t, dict):
        raise AvroSchemaError("an Avro type is a name, a union or an object")
    _register(t, names)
    logical = t.get("logicalType")
    kind = t.get("type")
    precision, scale = t.get("precision"), t.get("scale", 0)
    if logical == "decimal" and isinstance(precision, int) and isinstance(scale, int):
        return number(precision - scale, scale), False
    if isinstance(logical, str) and logical in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[logical], False
    if kind in ("record", "map"):
        return Inferred(VARIANT), False
    if kind == "array":
        return Inferred("ARRAY"), False
    if kind == "enum":
        return Inferred(TEXT), False
    if kind == "fixed":
        return Inferred("BINARY"), False
    return _avro_type(kind, names, depth + 1)


# ---------------------------------------------------------------------------------------------
# One file's columns, and the merge over files


@dataclass
class FileColumn:
    """A column as one file has it."""

    name: str
    type: Inferred | None
    """None: the file held only NULLs in it."""
    nullable: bool = True


@dataclass
class ColumnsOf:
    """The columns one file has, in its order."""

    path: str
    """The file's path, as FILENAMES shows it."""
    columns: list[FileColumn]


@dataclass
class InferredColumn:
    """One row of INFER_SCHEMA."""

    name: str
    type: str
    nullable: bool
    expression: str
    filenames: str
    order_id: int

    def row(self) -> dict[str, Any]:
        """The row, by Snowflake's column names."""
        return {
            "COLUMN_NAME": self.name,
            "TYPE": self.type,
            "NULLABLE": self.nullable,
            "EXPRESSION": self.expression,
            "FILENAMES": self.filenames,
            "ORDER_ID": self.order_id,
        }


OUTPUT_COLUMNS = ("COLUMN_NAME", "TYPE", "NULLABLE", "EXPRESSION", "FILENAMES", "ORDER_ID")
"""INFER_SCHEMA's columns, in order."""


@dataclass
class _Merged:
    name: str
    type: Inferred | None
    nullable: bool
    files: list[str] = field(default_factory=list)
    position: int | None = None
    """CSV without a header: the field number the name stands for."""


def _path_step(name: str) -> str:
    """A key in EXPRESSION's path: bare when it is a plain identifier, else double-quoted."""
    plain = name.isascii() and all(c.isalnum() or c == "_" for c in name)
    if plain and name and not name[0].isdigit():
        return name
    return '"' + name.replace('"', '""') + '"'


def _expression(column: _Merged, ignore_case: bool, type_text: str) -> str:
    if column.position is not None:
        return f"${column.position}::{type_text}"
    if ignore_case:
        return f"GET_IGNORE_CASE ($1, {_path_step(column.name)})::{type_text}"
    return f"$1:{_path_step(column.name)}::{type_text}"


def merge(
    files: Sequence[ColumnsOf],
    *,
    ignore_case: bool = False,
    fallback: str = VARIANT,
    positional: bool = False,
) -> list[InferredColumn]:
    """INFER_SCHEMA's rows for the columns of ``files``: one per name (upper-cased and matched in
    any case with ``ignore_case``), in the order the names first appear; the types merged
    (``widen``); NULLABLE when a file says so or lacks the column; FILENAMES the files that have it.
    ``positional``: CSV without a header, whose names c1, c2... stand for field numbers."""
    merged: dict[str, _Merged] = {}
    for f in files:
        seen: set[str] = set()
        for col in f.columns:
            key = col.name.upper() if ignore_case else col.name
            if key in seen:
                continue  # a name twice in one file: its first column, as loads match it
            seen.add(key)
            found = merged.get(key)
            if found is None:
                found = merged[key] = _Merged(key, col.type, col.nullable)
                if positional:
                    found.position = len(merged)
            else:
                found.type = widen(found.type, col.type, fallback)
                found.nullable = found.nullable or col.nullable
            found.files.append(f.path)
    out = []
    for order, column in enumerate(merged.values()):
        type_text = (column.type or Inferred(TEXT)).render()
        out.append(
            InferredColumn(
                name=column.name,
                type=type_text,
                nullable=column.nullable or len(column.files) < len(files),
                expression=_expression(column, ignore_case, type_text),
                filenames=",".join(column.files),
                order_id=order,
            )
        )
    return out


def values_columns(
    names: Sequence[str], records: Iterable[Sequence[Any] | Mapping[str, Any]], typer: Any, fallback: str
) -> list[FileColumn]:
    """A file's columns from its records' values: ``records`` are lists (by position: named by
    ``names``, fields past them ignored; without names, c1, c2... as many as the widest record has)
    or dicts (by key, in first-seen order); ``typer`` maps a value to its type (None for NULL).
    Every column is NULLABLE, as Snowflake says of CSV and JSON."""
    order: list[str] = list(names)
    types: dict[str, Inferred | None] = dict.fromkeys(names)
    made_up = not names
    settled = _SETTLED[fallback]  # no value changes a column of this type: its values are not typed
    for record in records:
        if isinstance(record, Mapping):
            items: Iterable[tuple[str, Any]] = record.items()
        else:
            while made_up and len(order) < len(record):
                order.append(f"c{len(order) + 1}")
                types[order[-1]] = None
            items = zip(order, record, strict=False)
        for name, value in items:
            if name not in types:
                order.append(name)
                types[name] = None
            if value is not None and types[name] is not settled:
                types[name] = widen(types[name], typer(value), fallback)
    return [FileColumn(name, types[name], True) for name in order]
