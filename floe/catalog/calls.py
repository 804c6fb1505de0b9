"""Calls of user functions in a Snowflake syntax tree: where they are, what they name, and the key
a pipe records for each one.

A call sqlglot does not know is an ``exp.Anonymous``; a qualified one, ``s.f(x)`` or ``db.s.f(x)``,
is that call under an ``exp.Dot``. The query engine and the COPY compiler both resolve such calls to
external functions; a pipe resolves them once, at CREATE PIPE, and keeps the answer by ``call_key``
(the call as Snowflake SQL), which the pipeline's compiler computes again from the same text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlglot import exp

from floe.errors import CompilationError


@dataclass(frozen=True)
class CallSite:
    """One call of a function by name."""

    node: exp.Expr
    """What the call is in the tree: the call, or the Dot that qualifies it (what to replace)."""
    call: exp.Anonymous
    """The call itself (its arguments are ``call.expressions``)."""
    parts: tuple[str, ...]
    """The name as written: one to three parts, upper-cased unless quoted."""

    @property
    def key(self) -> str:
        """``call_key`` of the call."""
        return call_key(self.node)


def call_key(node: exp.Expr) -> str:
    """How a pipe's COPY names one call site: its Snowflake SQL text."""
    return node.sql("snowflake")


def call_sites(tree: exp.Expr) -> Iterator[CallSite]:
    """Every call by name in ``tree``, outermost first (a call in another's arguments comes after
    it)."""
    for node in list(tree.find_all(exp.Anonymous)):
        yield site_of(node)


def site_of(node: exp.Anonymous) -> CallSite:
    """The call site of one call."""
    name = _name(node)
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        return CallSite(parent, node, (*_dotted(parent.this), name))
    return CallSite(node, node, (name,))


def _name(node: exp.Anonymous) -> str:
    this = node.this
    if isinstance(this, exp.Identifier):
        return this.name if this.quoted else this.name.upper()
    return str(this).upper()


def _dotted(node: exp.Expr) -> list[str]:
    if isinstance(node, exp.Dot):
        return [*_dotted(node.this), *_dotted(node.expression)]
    if isinstance(node, exp.Identifier):
        return [node.name if node.quoted else node.name.upper()]
    if isinstance(node, exp.Column) and not node.table:
        return _dotted(node.this)
    raise CompilationError(f"invalid function name {node.sql('snowflake')}")
