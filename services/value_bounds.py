"""Bounds on the values a query makes: DuckDB's ``memory_limit`` does not cover them.

DuckDB counts its buffers (hash tables, sorts, collections, aggregate states) against
``memory_limit``, but not the strings a scalar function makes while evaluating an expression:
``length(repeat(repeat('x', 1000000), 1000))`` took the API to 2.1 GB under ``memory_limit=200MB``.
Nor is one value the unit to bound: DuckDB evaluates 2,048 rows at once, so values of 1 MB each
made 2 GB in one step (issue 31, item 7). So every allow-listed function whose output can outgrow
its inputs is checked before it runs, from its arguments' sizes:

* by an argument (REPEAT, SPACE, LPAD, RPAD), a product of them (REPLACE, REGEXP_REPLACE,
  ARRAY_TO_STRING's separator), by their number (CONCAT, ``||``, CONCAT_WS, INSERT,
  ARRAY_CONSTRUCT, OBJECT_CONSTRUCT), or by a factor that compounds when nested (HEX_ENCODE,
  BASE64_ENCODE);
* one value may not pass ``query.max_value_bytes``, and the values one call makes for the rows
  DuckDB evaluates at once may not pass the call's share of ``query.memory_limit``: the limit split
  over the query's checked calls and its threads, twice (the rows checked in SQL, and those checked
  by the guard), so the strings they hold at once stay within the limit together.

The other functions make at most a constant factor of their inputs without compounding (UPPER,
TRANSLATE, casts to text) or are aggregates, whose states DuckDB counts. Last, each value of a
result is measured before it is answered.

A checked call ``f(a, b)`` becomes ``f(CASE WHEN size <= T OR __floe_fits(size, kind) THEN a END,
b)``, with ``size`` an expression of ``a`` and ``b``: rows whose value is small by the SQL test
alone never reach Python; the guard sees the rest of each batch at once. The arguments are repeated
in the size, which DuckDB evaluates once, unless one holds another checked call (nested calls would
double the SQL at each level), a subquery, a window, RANDOM or an external function, or is large:
then they are bound once, in a lambda over a one-element list (``list_transform([{'a0': a}],
lambda v: ...)[1]``), which costs about 0.1 us a row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import duckdb
import duckdb.func
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ByteSize, TypeAdapter
from sqlglot import exp

from floe.errors import CompilationError, SqlError
from floe.settings import QuerySettings

GUARD = "__floe_fits"
"""The guard's name in DuckDB; a user cannot call it (not on the allow-list)."""
BATCH_ROWS = 2048
"""Rows DuckDB evaluates an expression for at once (its STANDARD_VECTOR_SIZE)."""
_VAR = "__floe_v"
_REPEATABLE_NODES = 32  # an argument with more nodes is bound once rather than repeated
_STRING_OVERHEAD = 16  # bytes DuckDB keeps per value of a list or struct besides its text

_CHECKED: tuple[type[exp.Expr], ...] = (
    exp.Repeat,
    exp.Space,
    exp.Pad,
    exp.Replace,
    exp.RegexpReplace,
    exp.Hex,
    exp.Base64Encode,
    exp.Concat,
    exp.ConcatWs,
    exp.DPipe,
    exp.Stuff,
    exp.ArrayToString,
    exp.Array,
    exp.Struct,
)
_NAMES: dict[type[exp.Expr], str] = {
    exp.Space: "SPACE",
    exp.Hex: "HEX_ENCODE",
    exp.Stuff: "INSERT",
    exp.Array: "ARRAY_CONSTRUCT",
    exp.Struct: "OBJECT_CONSTRUCT",
    exp.DPipe: "||",
}
KINDS: tuple[str, ...] = (
    "REPEAT",
    "SPACE",
    "LPAD",
    "RPAD",
    "REPLACE",
    "REGEXP_REPLACE",
    "HEX_ENCODE",
    "BASE64_ENCODE",
    "CONCAT",
    "CONCAT_WS",
    "||",
    "INSERT",
    "ARRAY_TO_STRING",
    "ARRAY_CONSTRUCT",
    "OBJECT_CONSTRUCT",
)
"""The names refusals give, by the code the guard is called with."""


def byte_count(size: str) -> int:
    """Bytes of a DuckDB size setting ("2GB" is 2*10^9 bytes, "2GiB" 2^31, as DuckDB reads them)."""
    return int(TypeAdapter(ByteSize).validate_python(size))


def kind_of(node: exp.Expr) -> str:
    """The name a user called ``node`` by."""
    if isinstance(node, exp.Pad):
        return "LPAD" if node.args.get("is_left") else "RPAD"
    if type(node) in _NAMES:
        return _NAMES[type(node)]
    return cast(exp.Func, node).sql_name().upper()


# --- sizes, in DuckDB SQL ------------------------------------------------------------------------


def _call(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this=name, expressions=list(args))


def _paren(node: exp.Expr) -> exp.Expr:
    return node if isinstance(node, exp.Paren | exp.Literal | exp.Anonymous) else exp.Paren(this=node)


def _num(value: float) -> exp.Expr:
    return exp.Literal.number(value)


def _add(*terms: exp.Expr) -> exp.Expr:
    total = _paren(terms[0])
    for term in terms[1:]:
        total = exp.Add(this=total, expression=_paren(term))
    return exp.Paren(this=total)


def _mul(a: exp.Expr, b: exp.Expr) -> exp.Expr:
    return exp.Paren(this=exp.Mul(this=_paren(a), expression=_paren(b)))


def _div(a: exp.Expr, b: exp.Expr) -> exp.Expr:
    return exp.Paren(this=exp.Div(this=_paren(a), expression=_paren(b)))


def _bytes(value: exp.Expr) -> exp.Expr:
    """Bytes of ``value`` as text (0 for NULL): a BLOB's escaped text is longer than its bytes."""
    if isinstance(value, exp.Literal):
        return _num(len(str(value.this).encode()))
    text = exp.Cast(this=value.copy(), to=exp.DataType.build("VARCHAR"))
    return _call("COALESCE", _call("STRLEN", text), _num(0))


def _count(value: exp.Expr) -> exp.Expr:
    """A count argument: NULL and negative counts make nothing."""
    if isinstance(value, exp.Literal) and not value.is_string and math.isfinite(float(value.this)):
        return _num(max(float(value.this), 0.0))
    number = exp.Cast(this=value.copy(), to=exp.DataType.build("DOUBLE"))
    return _call("GREATEST", _call("COALESCE", number, _num(0)), _num(0))


def _text(value: exp.Expr | None) -> exp.Expr:
    return value if value is not None else exp.Literal.string("")


def _size(node: exp.Expr, small: int) -> exp.Expr:
    """An upper bound of the bytes of ``node``'s value, from its (bound) arguments."""
    a = node.args
    if isinstance(node, exp.Repeat):
        return _mul(_bytes(node.this), _count(a["times"]))
    if isinstance(node, exp.Space):
        return _count(node.this)
    if isinstance(node, exp.Pad):
        fill = a.get("fill_pattern") or exp.Literal.string(" ")
        chars = _call(
            "GREATEST", _call("LENGTH", exp.Cast(this=fill.copy(), to=exp.DataType.build("VARCHAR"))), _num(1)
        )
        # k chars of a cycled fill hold at most k/len(fill) copies of it, plus one partial copy.
        return _add(_bytes(node.this), _mul(_count(a["expression"]), _div(_bytes(fill), chars)), _bytes(fill))
    if isinstance(node, exp.Replace):
        if a.get("replacement") is None:
            return _bytes(node.this)
        find, grow = (
            _call("GREATEST", _bytes(a["expression"]), _num(1)),
            _call(
                "GREATEST",
                exp.Sub(this=_bytes(a["replacement"]), expression=_bytes(a["expression"])),
                _num(0),
            ),
        )
        bound = _add(_bytes(node.this), _mul(_div(_bytes(node.this), find), grow))
        # Past the cheap bound, count the matches (removing them makes nothing larger).
        removed = _call("REPLACE", node.this.copy(), a["expression"].copy(), exp.Literal.string(""))
        matches = _div(exp.Sub(this=_bytes(node.this), expression=_bytes(removed)), find)
        exact = _add(_bytes(node.this), _mul(matches, grow))
        return exp.Case(
            ifs=[exp.If(this=exp.LTE(this=bound, expression=_num(small)), true=bound)], default=exact
        )
    if isinstance(node, exp.RegexpReplace):
        if a.get("replacement") is None:
            return _bytes(node.this)
        # Every position may match (an empty match too), and the replacement's backreferences
        # (two bytes each) copy at most the whole subject between them.
        subject, replacement = _bytes(node.this), _bytes(a["replacement"])
        return _add(
            subject, _mul(_add(subject, _num(1)), replacement), _mul(subject, _div(replacement, _num(2)))
        )
    if isinstance(node, exp.Hex):
        return _mul(_num(2), _bytes(node.this))
    if isinstance(node, exp.Base64Encode):
        return _add(_mul(_div(_num(4), _num(3)), _bytes(node.this)), _num(4))
    if isinstance(node, exp.ConcatWs):
        separator, *values = node.expressions
        return _add(
            _num(0), *(_bytes(v) for v in values), _mul(_bytes(separator), _num(max(len(values) - 1, 0)))
        )
    if isinstance(node, exp.Stuff):
        return _add(_bytes(node.this), _bytes(a["expression"]))
    if isinstance(node, exp.ArrayToString):
        # A list's text has at least a character per element: elements and separators together.
        listed = _bytes(node.this)
        return _add(listed, _mul(listed, _bytes(_text(a.get("expression")))))
    overhead = (
        _num(_STRING_OVERHEAD * len(_operands(node))) if isinstance(node, exp.Array | exp.Struct) else _num(0)
    )
    return _add(overhead, *(_bytes(v) for v in _operands(node)))


# --- rewriting -----------------------------------------------------------------------------------


def _chain(node: exp.DPipe) -> list[exp.Expr]:
    """The operands of a chain ``a || b || c``, in order."""
    out: list[exp.Expr] = []
    for side in (node.this, node.expression):
        out.extend(_chain(side) if isinstance(side, exp.DPipe) else [side])
    return out


def _operands(node: exp.Expr) -> list[exp.Expr]:
    """The value arguments of ``node`` (a chain's for ``||``, the values of OBJECT_CONSTRUCT)."""
    if isinstance(node, exp.DPipe):
        return _chain(node)
    if isinstance(node, exp.Struct):
        return [e.expression if isinstance(e, exp.PropertyEQ) else e for e in node.expressions]
    return list(node.iter_expressions())


def _in_place(node: exp.Expr) -> exp.Expr | None:
    """The argument that must stay where it is: DuckDB takes only a constant expression as
    ARRAY_TO_STRING's separator, which a lambda's variable is not."""
    return node.args.get("expression") if isinstance(node, exp.ArrayToString) else None


def _constant(node: exp.Expr) -> bool:
    if isinstance(node, exp.Literal | exp.Null | exp.Boolean):
        return True
    return isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal)


_ONCE: tuple[type[exp.Expr], ...] = (
    exp.Rand,
    exp.Uniform,
    exp.Uuid,
    exp.Anonymous,  # external functions among them
    exp.Subquery,
    exp.Select,
    exp.Exists,
    exp.Window,
)
"""What an argument that holds it is evaluated once for: a different answer each time, a remote
call, or a cost DuckDB would pay again."""


def _gate(node: exp.Expr, first: exp.Expr, fits: exp.Expr) -> None:
    """Pass ``node``'s first argument through its check: ``f(CASE WHEN fits THEN a END, b)``.

    Not ``CASE WHEN fits THEN f(a, b) END``: DuckDB folds a call of constants while it optimizes,
    and when folding the CASE fails (the guard refuses), it goes on to fold its branch, which made
    ``repeat('x', 1000000000)`` while the statement was being refused. A call whose argument is a
    CASE that cannot be folded is not folded either."""
    holder = exp.Null()
    first.replace(holder)
    gated: exp.Expr = exp.Case(ifs=[exp.If(this=fits, true=first)])
    if isinstance(first, exp.Cast):  # keep what sqlglot knows of its type
        gated = exp.Cast(this=gated, to=first.args["to"].copy())
    elif isinstance(node, exp.Base64Encode) and isinstance(first, exp.Literal):
        # DuckDB reads a string constant as BLOB where a BLOB is wanted, a CASE as VARCHAR.
        gated = exp.Cast(this=gated, to=exp.DataType.build("VARBINARY"))
    holder.replace(gated)


class ValueBounds:
    """The checks of one query: ``bound`` rewrites its tree, ``register`` adds the guard to its
    DuckDB connection, ``check_rows`` measures its result's values, and ``refused`` finds the
    guard's refusal in a DuckDB error (which reports it as a Python exception in a UDF)."""

    def __init__(self, limits: QuerySettings) -> None:
        self.max_value = limits.max_value_bytes
        self.memory_limit = limits.memory_limit
        self.threads = max(limits.threads, 1)
        self.calls = 0
        self.share = 0
        self._refusals: list[SqlError] = []  # DuckDB ignores one made while folding constants
        self._made: set[int] = set()  # the checked calls made so far, by id

    # The rewrite.

    def bound(self, query: exp.Expr) -> None:
        """Put every checked call in ``query`` behind its check, innermost first."""
        nodes = [
            n
            for n in query.walk()
            if isinstance(n, _CHECKED)
            and not (isinstance(n, exp.DPipe) and isinstance(n.parent, exp.DPipe))
            and not any(isinstance(o, exp.Star) for o in _operands(n))
        ]
        if not nodes:
            return
        self.calls = len(nodes)
        # Twice: the rows the SQL test lets through and those the guard does, per call and thread.
        self.share = max(byte_count(self.memory_limit) // (2 * self.threads * self.calls), 1)
        small = min(self.max_value, self.share // BATCH_ROWS)
        for node in reversed(nodes):
            holder = exp.Paren(this=exp.Null())
            node.replace(holder)
            checked = self._checked(node, small)
            holder.replace(checked)
            self._made.add(id(checked))

    def _once(self, operand: exp.Expr) -> bool:
        """Whether ``operand`` must be evaluated once: repeating another checked call would double
        the SQL at each level of nesting, a large expression would multiply the SQL (the size
        repeats an argument up to ten times), and the others may answer otherwise, or call out,
        each time. DuckDB evaluates a repeated expression of any other kind once."""
        for count, n in enumerate(operand.walk()):
            if count > _REPEATABLE_NODES or isinstance(n, _ONCE) or id(n) in self._made:
                return True
        return False

    def _checked(self, node: exp.Expr, small: int) -> exp.Expr:
        kept = _in_place(node)
        if kept is not None and kept.find(exp.ArrayToString):
            # The separator is measured beside the call, and sqlglot repeats it too: nesting them
            # would make SQL that grows exponentially with the depth.
            raise CompilationError("ARRAY_TO_STRING's separator cannot itself be made by ARRAY_TO_STRING")
        operands = [o for o in _operands(node) if o is not kept]
        bound: list[tuple[str, exp.Expr]] = []
        if any(self._once(o) for o in operands):
            for o in operands:
                if _constant(o):
                    continue
                name = f"a{len(bound)}"
                ref: exp.Expr = exp.Dot(this=exp.column(_VAR), expression=exp.to_identifier(name))
                if isinstance(o, exp.Cast):  # keep what sqlglot knows of its type
                    ref = exp.Cast(this=ref, to=o.args["to"].copy())
                o.replace(ref)
                bound.append((name, o))
        size = _size(node, small)
        fits = exp.Or(
            this=exp.Paren(this=exp.LTE(this=size, expression=_num(small))),
            expression=_call(GUARD, size.copy(), _num(KINDS.index(kind_of(node)))),
        )
        first = next((o for o in _operands(node) if o is not kept), None)
        if first is not None:
            _gate(node, first, fits)
        if not bound:
            return node
        args = exp.Struct(
            expressions=[exp.PropertyEQ(this=exp.to_identifier(n), expression=o) for n, o in bound]
        )
        each = exp.Lambda(this=node, expressions=[exp.to_identifier(_VAR)])
        return _call("LIST_EXTRACT", _call("LIST_TRANSFORM", exp.Array(expressions=[args]), each), _num(1))

    # The guard.

    def register(self, con: duckdb.DuckDBPyConnection) -> list[str]:
        """Add the guard to ``con`` when the query calls it; the names of the functions added."""
        if not self.calls:
            return []
        con.create_function(
            GUARD,
            self._fits,
            ["DOUBLE", "INTEGER"],  # DuckDB takes type names
            "BOOLEAN",
            type=duckdb.func.ARROW,
            side_effects=False,
        )
        return [GUARD]

    def _fits(self, sizes: pa.Array, kinds: pa.Array) -> pa.Array:
        """True for each row, or the statement's refusal: a value past ``max_value``, or values
        together past the call's share of the memory limit."""
        largest = pc.max(sizes).as_py()
        if largest is not None and largest > self.max_value:
            self._refuse(
                f"{self._kind(sizes, kinds, largest)} would make a value of {math.ceil(largest):,} bytes, "
                f"more than query.max_value_bytes ({self.max_value:,} bytes, FLOE_QUERY__MAX_VALUE_BYTES) "
                "allows; make it smaller, or raise the setting."
            )
        total = pc.sum(sizes).as_py() or 0
        if total > self.share:
            rows = f"{len(sizes):,} row{'' if len(sizes) == 1 else 's'}"
            self._refuse(
                f"{self._kind(sizes, kinds, largest)} would make {math.ceil(total):,} bytes for {rows} at "
                f"once, more than its share of query.memory_limit ({self.memory_limit}, "
                f"FLOE_QUERY__MEMORY_LIMIT): {self.share:,} bytes, the limit split over the query's "
                f"{self.calls} checked call(s) and {self.threads} thread(s); make the values smaller, or "
                "raise the limit."
            )
        return pc.is_valid(sizes)

    @staticmethod
    def _kind(sizes: pa.Array, kinds: pa.Array, largest: Any) -> str:
        at = pc.index(sizes, largest).as_py()
        return KINDS[int(kinds[max(at, 0)].as_py())]

    def _refuse(self, message: str) -> None:
        refusal = SqlError(message, code="000603", sql_state="54000")
        self._refusals.append(refusal)
        raise refusal

    def refused(self, error: Exception) -> SqlError | None:
        """The guard's refusal that made DuckDB fail with ``error``, if it was one."""
        text = str(error)
        return next((r for r in self._refusals if r.message in text), None)

    # The result.

    def check_rows(self, rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> None:
        """Refuse a result one of whose values is larger than ``max_value``."""
        limit = self.max_value
        quarter = limit // 4  # a str of that many characters is within the limit in any encoding
        for row in rows:
            for value in row:
                kind = type(value)
                if kind is str:
                    if len(value) <= quarter:
                        continue
                elif kind not in _SIZED:
                    continue
                size = measure(value, limit)
                if size > limit:
                    at = next(i for i, v in enumerate(row) if v is value)
                    column = columns[at] if at < len(columns) else f"#{at + 1}"
                    raise SqlError(
                        f"A value of column {column} of the result has {size:,} bytes or more, more than "
                        f"query.max_value_bytes ({limit:,} bytes, FLOE_QUERY__MAX_VALUE_BYTES) allows; "
                        "select less of it (SUBSTR, LEFT), or raise the setting.",
                        code="000603",
                        sql_state="54000",
                    )


_SIZED = frozenset({str, bytes, list, dict, tuple})


def measure(value: Any, limit: int) -> int:
    """Bytes of ``value`` as answered (text as UTF-8), counted until they pass ``limit``."""
    if isinstance(value, str):
        return len(value) if len(value) > limit else len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes):
        return len(value)
    items: Sequence[Any] = [*value.keys(), *value.values()] if isinstance(value, dict) else value
    total = 0
    if isinstance(items, list | tuple):
        for item in items:
            total += (
                measure(item, limit - total) if isinstance(item, str | bytes | list | dict | tuple) else 8
            )
            if total > limit:
                break
    return total
