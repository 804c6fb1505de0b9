"""The DuckDB SQL Floe writes: quoted literals and identifiers, and the dialect that generates a
user's syntax tree with Floe's own SQL fragments standing in it.

Literals and identifiers are quoted by sqlglot, never by hand, and fragments are nodes of the tree,
never text spliced into generated SQL: nothing the user wrote, nor any file or column name, can
become SQL.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.generators.duckdb import DuckDBGenerator


# Cached: the same few constants (formats, boolean words, column names) recur in every query built.
@functools.lru_cache(maxsize=4096)
def lit(value: str) -> str:
    """A DuckDB string literal, escaped by sqlglot."""
    return exp.Literal.string(value).sql("duckdb")


def list_lit(values: tuple[str, ...]) -> str:
    """A DuckDB list of string literals."""
    return "[" + ", ".join(lit(v) for v in values) + "]"


@functools.lru_cache(maxsize=4096)
def ident(name: str) -> str:
    """A quoted DuckDB identifier, escaped by sqlglot: any name is data, never SQL."""
    return exp.to_identifier(name, quoted=True).sql("duckdb")


class FloeFragment(exp.Expression):
    """A SQL expression Floe built (a raw column, a conversion...), standing in a user's syntax tree.

    ``this`` is complete DuckDB SQL that the generator emits as it is, in parentheses. It is never
    searched for in generated text, so nothing the user wrote (a string literal, a quoted name) can
    be turned into SQL by it.
    """

    arg_types = {"this": True, "leaf": False, "text": False, "const": False}


def _fragment_sql(_generator: Any, node: FloeFragment) -> str:
    return f"({node.this})"


class FloeDuckDB(DuckDB):
    """DuckDB's dialect, plus Floe's fragments."""

    class Generator(DuckDBGenerator):
        """DuckDB's generator; a FloeFragment becomes its own SQL."""

        TRANSFORMS = {**DuckDBGenerator.TRANSFORMS, FloeFragment: _fragment_sql}


DIALECT = FloeDuckDB()
