"""External-function calls of a COPY, made before its main query: each call's arguments are computed
over the file's rows, sent to the remote service in batches (``floe.external.FunctionCaller``), and
its values added to the input table as the column the column plans read (``plan.ExternalCall``).

A row whose arguments could not be computed, or whose batch failed, gets NULL there and an error
message: the file copy counts it as an error of every column whose expression made the call, so
ON_ERROR decides, and the function's message (never the row's data) is what load history shows.
A service that does not answer at all (its retries ran out, or its circuit breaker is open) fails
the whole file instead: nothing of it is loaded, so ALTER PIPE ... REFRESH can send it again.
Calls run in order, each seeing the values of those before it (a call in another's arguments).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa

from floe.errors import FileLoadError
from floe.external import CallContext, FunctionCaller, RemoteFunction
from floe.types import arrow_type
from pipeline.transform.plan import INPUT_VIEW, CompiledCopy


@dataclass(frozen=True)
class RemoteCalls:
    """What a pipe's load needs to call its external functions."""

    caller: FunctionCaller
    """The process's caller (its cache and connections are shared by every load)."""
    functions: Mapping[str, RemoteFunction]
    """Each call key's function, as the catalog defined it when the micro-batch started."""
    query_id: str
    """``sf-external-function-current-query-id``: the same on a replay of the micro-batch."""
    context: Mapping[str, str] = field(default_factory=dict)
    """Values of CONTEXT_HEADERS."""
    pipe: str = ""
    """The pipe's name, for the hint on reloading a file whose service did not answer."""


@dataclass
class CallErrors:
    """Rows whose external call failed, per call: row index -> message."""

    by_call: dict[int, dict[int, str]] = field(default_factory=dict)

    def of(self, calls: tuple[int, ...], row: int) -> str | None:
        """The message of the first of ``calls`` that failed at ``row``, if one did."""
        for k in calls:
            message = self.by_call.get(k, {}).get(row)
            if message is not None:
                return message
        return None

    def rows(self, calls: tuple[int, ...]) -> list[int]:
        """Rows where any of ``calls`` failed."""
        found: set[int] = set()
        for k in calls:
            found.update(self.by_call.get(k, {}))
        return sorted(found)


def add_call_values(
    compiled: CompiledCopy,
    inp: pa.Table,
    source: str,
    params: dict[str, str],
    con: duckdb.DuckDBPyConnection,
    remote: RemoteCalls | None,
    call_id: str,
) -> tuple[pa.Table, CallErrors]:
    """``inp`` with each external call's values as a column, and the rows whose call failed.
    ``source`` is the SQL the query reads (INPUT_VIEW and its extra columns); ``call_id`` names
    this file (or part) in the batch ids, the same on a replay."""
    errors = CallErrors()
    if not compiled.calls:
        return inp, errors
    if remote is None:
        raise FileLoadError("the pipe calls external functions, but none were made available")
    n = inp.num_rows
    for k, call in enumerate(compiled.calls):
        fn = remote.functions.get(call.key)
        if fn is None:
            raise FileLoadError(f"the external function of {call.key} is not available")
        failed: dict[int, str] = {}
        # TRY(x IS NULL) is NULL exactly when computing x raised, as in query.py's layer 2, and in
        # a layer of its own for the same reason: next to TRY(x), DuckDB would compute x once,
        # outside both TRYs.
        inner = ", ".join(["*", *(f"TRY({a}) AS __a{i}" for i, a in enumerate(call.args))])
        flags = " OR ".join(
            f"(CASE WHEN __a{i} IS NULL THEN TRY(({a}) IS NULL) IS NULL ELSE FALSE END)"
            for i, a in enumerate(call.args)
        )
        outer = ", ".join([*(f"__a{i} AS a{i}" for i in range(len(call.args))), f"{flags or 'FALSE'} AS bad"])
        con.register(INPUT_VIEW, inp)
        try:
            sql = f"SELECT {outer} FROM (SELECT {inner} FROM {source})"
            args = con.sql(sql, params=params).to_arrow_table()
        finally:
            con.unregister(INPUT_VIEW)
        bad = args.column("bad").to_numpy(zero_copy_only=False).astype(bool)
        for row in np.flatnonzero(bad):
            failed[int(row)] = f"{fn.name}: an argument could not be converted to its parameter's type"
        send = np.flatnonzero(~bad)
        taken = pa.array(send, pa.int64())
        arrays = [args.column(f"a{i}").take(taken) for i in range(len(call.args))]
        ctx = CallContext(query_id=remote.query_id, context=remote.context, call_id=f"{call_id}#{k}")
        outcome = remote.caller.call(fn, arrays, ctx, num_rows=len(send), in_pipe=True)
        if outcome.unavailable is not None:
            # The service's outage, not the rows': the whole file fails, whatever ON_ERROR says, so
            # that none of it is loaded and REFRESH can send all of it again (docs/decisions.md).
            raise FileLoadError(
                f"{outcome.unavailable}. Once the service answers, ALTER PIPE {remote.pipe or '<pipe>'} "
                "REFRESH loads this file again."
            )
        for position in np.flatnonzero(outcome.errors.is_valid().to_numpy(zero_copy_only=False)):
            failed[int(send[position])] = str(outcome.errors[int(position)].as_py())
        values = outcome.values
        if len(send) != n:
            # Back to the file's rows: NULL where nothing was sent.
            where = np.full(n, -1, dtype=np.int64)
            where[send] = np.arange(len(send))
            values = values.take(pa.array(where, pa.int64(), mask=where < 0))
        inp = inp.append_column(call.column, values.cast(arrow_type(call.returns)))
        if failed:
            errors.by_call[k] = failed
    return inp, errors
