"""What an Avro schema lets a few bytes of a block become, weighed before fastavro makes it.

Avro values take at least a byte each, but for a few: null, a fixed of size 0, a record of such
fields. An array of them is its count alone, so a few bytes can say it holds billions
(``refuse_weightless_arrays`` refuses such a schema). Every other value becomes a Python object of
tens of bytes or more, and an array of records of one small integer makes a dict and a list slot of
each byte: a block of records with arrays or maps too large for that to be safe is walked first by
its schema, without making any object, and each record's Python weight added up (``Weigher``).
A recursive type nests as deep as its data says (``recursive``), which the reader must stop
(decision 110).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from floe.errors import FileLoadError
from pipeline.chunks import PartTooLarge, size_text


class AvroError(Exception):
    """The file is not a valid Avro object container file (the message says where it broke)."""


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at pos; returns it and the position after it."""
    shift = 0
    acc = 0
    while True:
        if pos >= len(data):
            raise AvroError("the file ends inside a number")
        b = data[pos]
        pos += 1
        acc |= (b & 0x7F) << shift
        if not b & 0x80:
            return (acc >> 1) ^ -(acc & 1), pos
        shift += 7
        if shift > 63:
            raise AvroError("a number is longer than 64 bits")


def _named(t: Any, names: dict[str, Any]) -> tuple[Any, tuple[str, ...]]:
    """t with a reference to a named type resolved, and the names a definition of t introduces."""
    if isinstance(t, str):
        return (names[t], (t,)) if t in names else (t, ())
    if isinstance(t, dict) and t.get("type") in ("record", "enum", "fixed"):
        name = str(t.get("name", ""))
        full = name if "." in name or not t.get("namespace") else f"{t['namespace']}.{name}"
        names[name] = names[full] = t
        return t, (name, full)
    return t, ()


def _children(t: Any) -> list[Any]:
    """The types directly inside t."""
    if isinstance(t, list):
        return list(t)
    if not isinstance(t, dict):
        return []
    kind = t.get("type")
    if kind == "record":
        return [f.get("type") for f in t.get("fields", []) if isinstance(f, dict)]
    if kind == "array":
        return [t.get("items")]
    if kind == "map":
        return [t.get("values")]
    if isinstance(kind, (dict, list)):
        return [kind]
    return []


def walk(
    t: Any, names: dict[str, Any], path: tuple[str, ...], visit: Callable[[Any, tuple[str, ...]], bool]
) -> bool:
    """Whether ``visit`` holds for t or a type inside it, each named type entered once per path
    (``path``: the names being defined around t, so a recursive reference stops)."""
    if isinstance(t, str) and t in path:
        return visit(t, path)
    t, defined = _named(t, names)
    if visit(t, path):
        return True
    inner = (*path, *defined)
    return any(walk(child, names, inner, visit) for child in _children(t))


def _weightless(t: Any, names: dict[str, Any], seen: tuple[int, ...] = ()) -> bool:
    """Values of t take no byte in the file: null, a fixed of size 0, a record of such fields."""
    t, _ = _named(t, names)
    if t == "null" or (isinstance(t, dict) and t.get("type") == "null"):
        return True
    if not isinstance(t, dict) or id(t) in seen:
        return False
    if t.get("type") == "fixed":
        return t.get("size") == 0
    if t.get("type") == "record":
        return all(_weightless(child, names, (*seen, id(t))) for child in _children(t))
    return False


def refuse_weightless_arrays(schema: Any, names: dict[str, Any], path: str) -> None:
    """An array of items that take no byte is its count alone: a few bytes can say it holds
    billions, each a Python object and an Arrow value once read. Such a file is refused."""

    def weightless_array(t: Any, _: tuple[str, ...]) -> bool:
        return isinstance(t, dict) and t.get("type") == "array" and _weightless(t.get("items"), dict(names))

    if walk(schema, names, (), weightless_array):
        raise FileLoadError(
            "Error parsing the Avro file: its schema has an array whose items are null (or records "
            "of nulls), which takes no bytes in the file, so a few bytes can say it holds billions "
            "of them; Floe does not read such files",
            file=path,
        )


def recursive(schema: Any, names: dict[str, Any], path: tuple[str, ...]) -> bool:
    """Whether a named type of the schema refers to itself (its values nest as deep as they say)."""
    return walk(schema, names, path, lambda t, around: isinstance(t, str) and t in around)


def has_arrays_or_maps(schema: Any, names: dict[str, Any], path: tuple[str, ...]) -> bool:
    """Whether one record may hold any number of values (an array or a map anywhere in it)."""
    return walk(schema, names, path, lambda t, _: isinstance(t, dict) and t.get("type") in ("array", "map"))


_COST = {"null": 16, "boolean": 16, "int": 36, "long": 36, "float": 32, "double": 32, "enum": 16}
"""Bytes of Python objects a value of a primitive type takes, its list slot included (a string or
bytes value: 57 and its length; a record: 240 and its fields; an array or map: 64, and 8 or 100 an
item)."""

_MAX_DEPTH = 200
"""Deepest a weighed value may nest (a recursive type's)."""


class Weigher:
    """Walks a block's records by the schema without making any object, adding up what fastavro's
    objects of each would weigh; a record past ``budget`` fails the file as soon as its array or
    map counts say so, before its items are walked."""

    def __init__(self, data: bytes, schema: Any, path: str, budget: int) -> None:
        self.data = data
        self.pos = 0
        self.names: dict[str, Any] = {}
        self.schema = schema
        self.path = path
        self.budget = budget
        self.cost = 0
        walk(schema, self.names, (), lambda t, _: False)  # every named type, by name

    def records(self, count: int) -> list[int]:
        weights = []
        for _ in range(count):
            self.cost = 0
            self.value(self.schema, 0)
            weights.append(self.cost)
        return weights

    def add(self, n: int) -> None:
        self.cost += n
        if self.cost > self.budget:
            raise RecordTooLarge(self.path, self.budget)

    def long(self) -> int:
        value, self.pos = read_long(self.data, self.pos)
        return value

    def value(self, t: Any, depth: int) -> None:  # noqa: C901 - one branch per Avro type
        if depth > _MAX_DEPTH:
            raise AvroError(f"a value is nested more than {_MAX_DEPTH} levels deep")
        if isinstance(t, str) and t in self.names:
            t = self.names[t]
        if isinstance(t, list):
            branch = self.long()
            if not 0 <= branch < len(t):
                raise AvroError("a union's branch is out of range")
            self.value(t[branch], depth + 1)
            return
        kind = t.get("type") if isinstance(t, dict) else t
        if isinstance(kind, (dict, list)):
            self.value(kind, depth + 1)
        elif kind in ("null", "boolean", "int", "long", "float", "double", "enum"):
            self.add(_COST[kind])
            self.pos += {"null": 0, "boolean": 1, "float": 4, "double": 8}.get(kind, 0)
            if kind in ("int", "long", "enum"):
                self.long()
        elif kind in ("string", "bytes"):
            size = self.long()
            if size < 0:
                raise AvroError("a value has a negative length")
            self.add(57 + size)
            self.pos += size
        elif kind == "fixed":
            self.add(41 + int(t.get("size", 0)))
            self.pos += int(t.get("size", 0))
        elif kind == "record":
            self.add(240)
            for field in t.get("fields", []):
                self.value(field.get("type"), depth + 1)
        elif kind in ("array", "map"):
            self.add(64)
            item = t.get("items") if kind == "array" else t.get("values")
            while (count := self.long()) != 0:
                if count < 0:
                    count = -count
                    self.long()  # the block's size in bytes
                self.add(count * (8 if kind == "array" else 157))  # checked before the items
                for _ in range(count):
                    if kind == "map":
                        key = self.long()  # read before pos is, which it moves
                        self.pos += key
                    self.value(item, depth + 1)
        else:
            raise AvroError(f"unknown type {json.dumps(kind)}")
        if self.pos > len(self.data):
            raise AvroError("a record runs past its block")


class RecordTooLarge(PartTooLarge):
    """An Avro record whose values make more Python objects than may be held at once."""

    def __init__(self, path: str, budget: int) -> None:
        FileLoadError.__init__(
            self,
            f"File '{path}' has an Avro record whose arrays or maps hold values that take more than "
            f"{size_text(budget)} of memory once read (a quarter of pipeline.max_part_bytes); split "
            "such records, or raise pipeline.max_part_bytes if such files are expected.",
            file=path,
        )
        self.limit = budget
        self.record = True
