"""TIMESTAMP_TZ values in query results, each shown in its own offset.

A TIMESTAMP_TZ column reaches DuckDB as its UTC instant (``floe.types``), so comparisons, ordering,
aggregates and functions all work on the instant, as Snowflake's do. Its offsets sit in the blob's
offset column (``floe.types.offset_column``), which DuckDB reads only when a result needs it: for
each projection of the top-level SELECT that is such a column itself (``t.c``, ``c``, or a ``*``
that includes it), ``plan_offsets`` appends that column's offsets as a hidden projection, and
``ResultShape.row`` shows the value in its offset and drops the hidden columns. The hidden
projections come last, so ORDER BY / GROUP BY positions are unchanged; under GROUP BY a hidden one is
``ANY_VALUE``, as a group holds one instant but may hold several offsets, and Snowflake shows one.

Where the rule does not reach (a TIMESTAMP_TZ computed by an expression, read through a subquery,
a CTE or a set operation, a ``SELECT DISTINCT``, or a ``*`` whose expansion Floe cannot tell), the
value is shown as the same instant in UTC: correct, in another offset.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from floe.catalog import Column, Table
from floe.types import offset_column, with_offset

_HIDDEN = "__floe_offset_"


@dataclass
class ResultShape:
    """How a query's raw rows become the result: which values get which hidden offset, and how many
    hidden columns to drop at the end."""

    offsets: list[tuple[int, int]] = field(default_factory=list)
    """(output position of a TIMESTAMP_TZ value, position of its offset)."""
    hidden: int = 0
    """Trailing columns that are offsets, not results."""

    def names(self, names: list[str]) -> list[str]:
        """The result's column names, without the hidden ones."""
        return names[: len(names) - self.hidden] if self.hidden else names

    def row(self, row: Sequence[Any], jsonable: Callable[[Any], Any]) -> list[Any]:
        """One result row: TIMESTAMP_TZ values in their offsets, hidden columns dropped, every value
        made JSON-friendly by ``jsonable``."""
        values = list(row)
        for at, offset in self.offsets:
            value = values[at]
            if isinstance(value, dt.datetime) and value.tzinfo is not None:
                values[at] = with_offset(value, values[offset])
        if self.hidden:
            values = values[: len(values) - self.hidden]
        return [jsonable(v) for v in values]


@dataclass(frozen=True)
class _Source:
    """One source of the top-level SELECT."""

    node: exp.Expr
    name: str
    """What a column reference qualifies it by (its alias, else its name), upper-cased unless quoted."""
    table: Table | None
    """The catalog table it reads; None for a subquery, CTE, COPY_HISTORY or VALUES."""


def _sources(query: exp.Select, tables: dict[int, Table]) -> list[_Source] | None:
    """The FROM source and the joined ones, in order; None when a join merges columns (USING,
    NATURAL) or a LATERAL adds some, so a ``*`` would not list every source's columns in order."""
    from_ = query.args.get("from_")
    if from_ is None or query.args.get("laterals"):
        return None
    nodes = [from_.this]
    for join in query.args.get("joins") or []:
        if join.args.get("using") or "NATURAL" in str(join.args.get("method") or "").upper():
            return None
        nodes.append(join.this)
    out = []
    for node in nodes:
        if isinstance(node, exp.Table) and (node.args.get("pivots") or _renames(node)):
            return None
        out.append(
            _Source(node, node.alias_or_name, tables.get(id(node)) if isinstance(node, exp.Table) else None)
        )
    return out


def _renames(node: exp.Table) -> bool:
    alias = node.args.get("alias")
    return isinstance(alias, exp.TableAlias) and bool(alias.columns)


def _column_of(ref: exp.Column, sources: list[_Source]) -> tuple[_Source, Column] | None:
    """The catalog source and column a column reference reads, when that is certain."""
    if ref.args.get("db") or ref.args.get("catalog"):
        return None
    candidates = [s for s in sources if s.name == ref.table] if ref.table else sources
    found = []
    for source in candidates:
        if source.table is None:
            if not ref.table:
                return None  # a subquery's or CTE's columns are unknown here: it may hold the name
            continue
        column = next((c for c in source.table.columns if c.name == ref.name), None)
        if column is not None:
            found.append((source, column))
    return found[0] if len(found) == 1 else None


def _is_star(projection: exp.Expr) -> bool:
    return isinstance(projection, exp.Star) or (
        isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
    )


def _star_columns(projection: exp.Expr, sources: list[_Source]) -> list[tuple[_Source, Column]] | None:
    """What ``*`` or ``t.*`` expands to, source by source, or None when that is not certain."""
    star = projection.this if isinstance(projection, exp.Column) else projection
    if not isinstance(star, exp.Star) or any(star.args.values()):  # EXCLUDE, REPLACE, RENAME...
        return None
    chosen = (
        [s for s in sources if s.name == projection.table] if isinstance(projection, exp.Column) else sources
    )
    if not chosen or any(s.table is None for s in chosen):
        return None
    return [(s, c) for s in chosen for c in (s.table.columns if s.table is not None else [])]


def _column_ref(source: _Source, name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True), table=exp.to_identifier(source.name, quoted=True))


def _uses_table_as_value(query: exp.Select, sources: list[_Source]) -> bool:
    """A column reference that names a source reads its whole row, offsets included."""
    names = {s.name for s in sources}
    return any(not c.table and c.name in names for c in query.find_all(exp.Column))


@dataclass
class _Projections:
    """The top-level projections, each with the TIMESTAMP_TZ columns it shows."""

    items: list[exp.Expr] = field(default_factory=list)
    """The projections, each ``*`` expanded to its columns."""
    wanted: list[tuple[int, _Source, Column]] = field(default_factory=list)
    """(output position, source, column) of each TIMESTAMP_TZ column shown as it is."""


def _projections(query: exp.Select, sources: list[_Source]) -> _Projections | None:
    """The projections with ``*`` expanded, or None when a ``*`` cannot be (its columns unknown)."""
    out = _Projections()
    for projection in query.expressions:
        if _is_star(projection):
            expanded = _star_columns(projection, sources)
            if expanded is None:
                return None
            for s, c in expanded:
                if c.type == "TIMESTAMP_TZ":
                    out.wanted.append((len(out.items), s, c))
                out.items.append(_column_ref(s, c.name))
            continue
        value = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(value, exp.Column):
            found = _column_of(value, sources)
            if found is not None and found[1].type == "TIMESTAMP_TZ":
                out.wanted.append((len(out.items), *found))
        out.items.append(projection)
    return out


def plan_offsets(query: exp.Expr, tables: dict[int, Table]) -> tuple[ResultShape, dict[int, list[str]]]:
    """Add the hidden offset projections to the top-level SELECT of ``query`` (identifiers already
    normalized, catalog references not yet replaced); ``tables``: ``id()`` of each catalog table
    reference -> its table. Returns the result's shape and, per reference, the offset columns it
    must read (a ``*`` over such a reference is expanded, so it never shows them)."""
    shape = ResultShape()
    reads: dict[int, list[str]] = {}
    if not isinstance(query, exp.Select) or query.args.get("distinct"):
        return shape, reads
    sources = _sources(query, tables)
    if not sources or all(s.table is None for s in sources) or _uses_table_as_value(query, sources):
        return shape, reads
    found = _projections(query, sources)
    if found is None or not found.wanted:
        return shape, reads
    grouped = bool(query.args.get("group"))
    hidden: list[exp.Expr] = []
    for at, source, column in found.wanted:
        ref: exp.Expr = _column_ref(source, offset_column(column.name))
        if grouped:
            ref = exp.Anonymous(this="ANY_VALUE", expressions=[ref])
        hidden.append(exp.alias_(ref, f"{_HIDDEN}{len(hidden)}", quoted=True))
        shape.offsets.append((at, len(found.items) + len(shape.offsets)))
        names = reads.setdefault(id(source.node), [])
        if offset_column(column.name) not in names:
            names.append(offset_column(column.name))
    shape.hidden = len(hidden)
    query.set("expressions", [*found.items, *hidden])
    return shape, reads
