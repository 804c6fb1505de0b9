"""External functions in queries: calls found in the syntax tree, resolved against the catalog, and
run by DuckDB as vectorized Python functions that send their rows to the remote service.

``ExternalCalls.bind`` replaces each call of an external function ``f(a, b)`` (plain, or qualified
as ``s.f`` / ``db.s.f``) by ``__floe_ef_<k>(CAST(a AS <type>), CAST(b AS <type>))``, the arguments
cast to the overload's declared types as Snowflake converts them. ``register`` then gives DuckDB one
Arrow function per name: each vector of rows DuckDB evaluates becomes one ``FunctionCaller`` call,
batched, concurrent and retried there (``floe.external``). DuckDB evaluates the call where the
query puts it, so a WHERE clause or a join filters rows before they are sent.

Resolution, as Snowflake's: an unqualified name is looked up in the session's database and schema;
the overloads the caller may use (USAGE or OWNERSHIP) are those of that name; one with as many
parameters as the call has arguments is chosen, and among several of one arity, the one whose
types the arguments' explicit casts match.
"""

from __future__ import annotations

import inspect
import itertools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import duckdb
import duckdb.func
import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from floe.catalog import ApiIntegration, Catalog, Column, ExternalFunction
from floe.catalog.calls import call_sites
from floe.catalog.names import Defaults
from floe.errors import CompilationError, SqlError
from floe.external import CallContext, ExternalFunctionError, FunctionCaller, RemoteFunction
from floe.types import duckdb_type, parse_column_type
from services.access import Check, function_name, own_name, resolve_function
from services.functions import ALLOWED_NAMES, unknown_function

UDF_PREFIX = "__floe_ef_"
"""Names the query's external calls get in DuckDB; a user cannot call them (the allow-list)."""


@dataclass
class _Bound:
    """One call site's function, as DuckDB will call it."""

    udf: str
    function: RemoteFunction
    zero_args: bool


@dataclass
class ExternalCalls:
    """The external-function calls of one query."""

    catalog: Catalog
    defaults: Defaults
    check: Check
    bound: dict[str, _Bound] = field(default_factory=dict)
    failures: list[ExternalFunctionError] = field(default_factory=list)
    """What the remote calls raised, in order: the query fails with the first, in its own words."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _deadline: float | None = None

    @property
    def names(self) -> frozenset[str]:
        """The DuckDB names bound in the tree."""
        return frozenset(self.bound)

    def bind(self, query: exp.Expr) -> None:
        """Replace every external call in ``query`` (resolved for the caller, or refused)."""
        for site in list(call_sites(query)):
            if (len(site.parts) == 1 and site.parts[0] in ALLOWED_NAMES) or site.parts[-1].startswith(
                UDF_PREFIX
            ):
                continue
            fn = resolve_call(self.catalog, self.defaults, self.check, site.parts, site.call.expressions)
            integration = self.catalog.find(ApiIntegration, fn.integration)
            if integration is None:
                raise SqlError(
                    f"External function {fn.name} cannot be called: its API integration "
                    f"{fn.integration} does not exist.",
                    code="002003",
                    sql_state="02000",
                )
            udf = f"{UDF_PREFIX}{len(self.bound)}"
            args = [_cast(arg, col) for arg, col in zip(site.call.expressions, fn.args, strict=True)]
            # DuckDB passes a function without parameters no rows to count: one constant stands in.
            zero = not args
            call = exp.Anonymous(this=udf, expressions=args or [exp.true()])
            self.bound[udf] = _Bound(udf, RemoteFunction.of(fn, integration), zero)
            site.node.replace(call)

    def register(
        self,
        con: duckdb.DuckDBPyConnection,
        caller: FunctionCaller,
        query_id: str,
        context: Mapping[str, str],
        deadline: float | None = None,
    ) -> None:
        """Give DuckDB each bound function, calling the remote service through ``caller``; no
        request is made or waited for after ``deadline`` (``time.monotonic()``)."""
        self._deadline = deadline
        for b in self.bound.values():
            params: list[Any] = [duckdb_type(c) for c in b.function.args] or ["BOOLEAN"]  # type names
            con.create_function(
                b.udf,
                self._udf(b, caller, query_id, context),
                params,
                duckdb_type(b.function.returns),
                type=duckdb.func.ARROW,
                # NULLs go to the remote service (Snowflake sends them), unless RETURNS NULL ON NULL INPUT.
                null_handling=duckdb.func.DEFAULT if b.function.strict else duckdb.func.SPECIAL,
                side_effects=not b.function.immutable,
            )

    def _udf(
        self, b: _Bound, caller: FunctionCaller, query_id: str, context: Mapping[str, str]
    ) -> Callable[..., pa.Array]:
        chunks = itertools.count()

        def call(*arrays: pa.Array | pa.ChunkedArray) -> pa.Array:
            rows = len(arrays[0])
            ctx = CallContext(query_id=query_id, context=context, call_id=f"{b.udf}.{next(chunks)}")
            try:
                return caller.call_or_raise(
                    b.function, [] if b.zero_args else arrays, ctx, num_rows=rows, deadline=self._deadline
                )
            except ExternalFunctionError as exc:
                with self._lock:
                    self.failures.append(exc)
                raise

        # DuckDB counts the parameters of the Python function against the declared types.
        count = max(1, len(b.function.args))
        call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(count)]
        )
        return call

    def timed_out(self) -> bool:
        """Whether the statement's time limit has passed (a remote call may have stopped for it)."""
        return self._deadline is not None and time.monotonic() >= self._deadline

    def error(self) -> SqlError | None:
        """The query's error when a remote call failed (DuckDB's own wraps it in other words)."""
        if not self.failures:
            return None
        first = self.failures[0]
        return SqlError(str(first), code="100351", sql_state="22000")


def resolve_call(
    catalog: Catalog, defaults: Defaults, check: Check, parts: tuple[str, ...], args: list[exp.Expr]
) -> ExternalFunction:
    """The external function a call names, as Snowflake resolves it for the caller (``check``):
    the overloads of the qualified name the caller may use (``resolve_function``), by argument
    count, then by the arguments' explicit casts. CompilationError when none fits."""
    short = parts[-1]
    if function_name(parts, defaults) is None:
        raise CompilationError(f"invalid function name {'.'.join(parts)}")
    usable = resolve_function(catalog, check, parts, None, defaults)
    if not usable:
        raise unknown_function(short)
    fitting = [fn for fn in usable if len(fn.args) == len(args)]
    if len(fitting) > 1:
        typed = [_cast_type(a) for a in args]
        fitting = [fn for fn in fitting if _matches(typed, fn.args)]
        if len(fitting) > 1 and any(t is None for t in typed):
            overloads = ", ".join(sorted(own_name("FUNCTION", fn.name) for fn in fitting))
            raise CompilationError(
                f"Ambiguous call of {short}: {overloads} all take {len(args)} argument(s); cast the "
                "arguments to the types of the one you mean, e.g. f(x::NUMBER)",
                code="002140",
                sql_state="42601",
            )
    if not fitting:
        kinds = ", ".join(_cast_type(a) or "?" for a in args)
        raise CompilationError(
            f"Invalid argument types for function '{short}': ({kinds}); it takes "
            + " or ".join(sorted(own_name("FUNCTION", fn.name) for fn in usable)),
            code="001044",
            sql_state="42P13",
        )
    return fitting[0]


def pipe_functions(catalog: Catalog, defaults: Defaults, check: Check, items: list[str]) -> dict[str, str]:
    """The external functions a pipe's SELECT items call: call key -> the overload's signature,
    resolved with the creator's privileges. A name no external function has is left to the COPY
    compiler (a built-in such as TO_DATE, or an error when the pipe loads)."""
    names = {fn.function_name for fn in catalog.all(ExternalFunction).values()}
    found: dict[str, str] = {}
    for item in items:
        try:
            tree = sqlglot.parse_one(item, read="snowflake")
        except SqlglotError:
            continue  # the COPY compiler reports it, with its position
        for site in call_sites(tree):
            if function_name(site.parts, defaults) not in names:
                continue
            found[site.key] = resolve_call(catalog, defaults, check, site.parts, site.call.expressions).name
    return found


def _cast(arg: exp.Expr, col: Column) -> exp.Expr:
    return exp.Cast(this=arg, to=exp.DataType.build(duckdb_type(col), dialect="duckdb"))


def _matches(typed: list[str | None], params: list[Column]) -> bool:
    """Whether arguments cast to ``typed`` (None: not cast) fit parameters of these types."""
    return all(t is None or t == c.type for t, c in zip(typed, params, strict=True))


def _cast_type(arg: exp.Expr) -> str | None:
    """The canonical type an argument is explicitly cast to, else None."""
    if isinstance(arg, exp.Cast) and isinstance(arg.to, exp.DataType):
        try:
            return parse_column_type(arg.to)[0]
        except CompilationError:
            return None
    return None
