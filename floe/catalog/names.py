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

IDENT = r'(?:"[^"]+"|[A-Za-z_][\w$]*)'
"""One identifier: double-quoted (kept as written) or bare (upper-cased)."""

QNAME = rf"{IDENT}(?:\s*\.\s*{IDENT}){{0,2}}"
"""A name of one to three identifiers joined by dots (database.schema.name)."""

IDENTIFIER_MAX_LENGTH = 255
"""Snowflake's limit on an identifier's length. It also bounds SHOW ... LIKE's worst case, whose
cost grows with the length of the names it matches."""


@dataclass
class Name:
    """A fully qualified object name, upper-cased unless quoted."""

    database: str
    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.database}.{self.schema}.{self.name}"


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


def qualify(text: str, defaults: Defaults) -> Name:
    """Resolve a possibly partial, possibly quoted name against the defaults."""
    parts = [p.strip() for p in re.findall(IDENT, text)]
    norm = [p[1:-1] if p.startswith('"') else p.upper() for p in parts]
    if not 1 <= len(norm) <= 3:
        raise CompilationError(f"invalid object name '{text}'")
    while len(norm) < 3:
        norm.insert(0, defaults.schema if len(norm) == 1 else defaults.database)
    return Name(*map(check_identifier, norm))
