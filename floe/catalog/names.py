"""Object names in Snowflake SQL: identifiers, their length limit, and qualifying a name.

Both statement parsers need these: ``floe.catalog.ddl`` for stages, tables and pipes, and
``floe.catalog.access`` for the pipe names in grants. They live here so that neither parser
imports the other's module for them (``ddl`` imports ``access`` for its statements; the reverse
would be a cycle).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from floe.errors import CompilationError

IDENT = r'(?:"(?:[^"]|"")+"|[A-Za-z_][\w$]*)'
"""One identifier: double-quoted (kept as written, ``""`` standing for one ``"``) or bare
(upper-cased). The two branches of the quoted body never start alike, so matching stays linear."""

QNAME = rf"{IDENT}(?:\s*\.\s*{IDENT}){{0,2}}"
"""A name of one to three identifiers joined by dots (database.schema.name)."""

IDENTIFIER_MAX_LENGTH = 255
"""Snowflake's limit on an identifier's length. It also bounds SHOW ... LIKE's worst case, whose
cost grows with the length of the names it matches."""


_NEEDS_QUOTES = re.compile(r'[."()\s]')
"""What a key cannot hold bare: the separator, a quote, the parentheses of a function's signature
and blanks (grant keys put a space between kind and name)."""


def quote_part(part: str) -> str:
    """One identifier as a key spells it: double-quoted, with ``"`` doubled, as Snowflake writes
    such names, when it holds a dot, a quote, a parenthesis or a blank; as is otherwise, so that
    the keys of every other name stay what they were."""
    if _NEEDS_QUOTES.search(part) is None:
        return part
    return '"' + part.replace('"', '""') + '"'


def join_parts(*parts: str) -> str:
    """The key of a database (one part), a schema (two) or an object (three): each part quoted
    where needed (``quote_part``), joined by dots. Different parts give different keys, so a
    schema named ``"HR.SALARIES"`` in ``PROD`` is ``PROD."HR.SALARIES"``, never ``PROD.HR.SALARIES``
    (decision 109)."""
    return ".".join(quote_part(p) for p in parts)


def split_parts(key: str) -> tuple[str, ...]:
    """The identifiers of a key ``join_parts`` wrote, in one left-to-right pass.

    A key that ``join_parts`` could not have written (an unterminated quote, text after a quoted
    part) is a bug in the caller, not user input: it raises ValueError rather than guess."""
    parts: list[str] = []
    i, n = 0, len(key)
    while True:
        if i < n and key[i] == '"':
            chars: list[str] = []
            i += 1
            while True:
                j = key.find('"', i)
                if j < 0:
                    raise ValueError(f"unterminated quoted identifier in key {key!r}")
                chars.append(key[i:j])
                if key.startswith('""', j):
                    chars.append('"')
                    i = j + 2
                    continue
                i = j + 1
                break
            parts.append("".join(chars))
        else:
            j = key.find(".", i)
            end = n if j < 0 else j
            parts.append(key[i:end])
            i = end
        if i == n:
            return tuple(parts)
        if key[i] != ".":
            raise ValueError(f"malformed key {key!r} at {i}")
        i += 1


def inside(key: str, container: str) -> bool:
    """Whether the object, schema or database ``key`` lies strictly inside the database or schema
    ``container``, compared part by part: never by string prefix, which a dot inside a quoted
    name would fool (decision 109)."""
    parts, outer = split_parts(key), split_parts(container)
    return len(parts) > len(outer) and parts[: len(outer)] == outer


def within(key: str, container: str) -> bool:
    """Whether ``key`` is ``container`` itself or lies inside it (``inside``)."""
    return split_parts(key) == split_parts(container) or inside(key, container)


@dataclass(frozen=True)
class Name:
    """A fully qualified object name: three identifiers, upper-cased unless quoted. Its ``str`` is
    its catalog key (``join_parts``), which tells every distinct name apart."""

    database: str
    schema: str
    name: str

    def __str__(self) -> str:
        return join_parts(self.database, self.schema, self.name)

    @property
    def schema_key(self) -> str:
        """The key of the schema the object lives in."""
        return join_parts(self.database, self.schema)

    @classmethod
    def of(cls, key: str) -> Name:
        """The name a three-part key spells."""
        database, schema, name = split_parts(key)
        return cls(database, schema, name)


@dataclass
class Defaults:
    """Database and schema for unqualified names."""

    database: str = "FLOE"
    schema: str = "PUBLIC"
    extra: dict[str, str] = field(default_factory=dict)


def check_identifier(name: str) -> str:
    """``name`` itself, or a CompilationError if it is longer than Snowflake allows."""
    if len(name) > IDENTIFIER_MAX_LENGTH:
        raise CompilationError(
            f"identifier '{name[:40]}...' is too long ({len(name)} characters); "
            f"the maximum is {IDENTIFIER_MAX_LENGTH}"
        )
    return name


def unquote(token: str) -> str:
    """One identifier token's name: a quoted one unescaped as written, a bare one upper-cased."""
    return token[1:-1].replace('""', '"') if token.startswith('"') else token.upper()


def identifiers(text: str) -> list[str]:
    """The names of the identifiers in ``text``, a name as QNAME matched it."""
    return [unquote(p.strip()) for p in re.findall(IDENT, text)]


def qualify(text: str, defaults: Defaults) -> Name:
    """Resolve a possibly partial, possibly quoted name against the defaults."""
    norm = identifiers(text)
    if not 1 <= len(norm) <= 3:
        raise CompilationError(f"invalid object name '{text}'")
    while len(norm) < 3:
        norm.insert(0, defaults.schema if len(norm) == 1 else defaults.database)
    return Name(*map(check_identifier, norm))
