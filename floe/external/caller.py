"""Calling external functions: rows in, batches out to the remote service (concurrently, retried),
values and per-row errors back.

One ``FunctionCaller`` serves a process (the query engine, or a Spark executor's transforms): it
holds the HTTP connection pool and the result cache of IMMUTABLE functions, and is safe to share
between threads. ``call`` answers every row (a value, or the message of the failure that covered
it), so a pipe's ON_ERROR can decide per row; ``call_or_raise`` raises the first failure, as a
query must.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx
import pyarrow as pa

from floe.external import wire
from floe.external.breaker import Breaker, Trip
from floe.external.cache import MISS, ResultCache
from floe.external.errors import (
    ExternalFunctionError,
    ExternalFunctionFailed,
    ExternalFunctionUnavailable,
)
from floe.external.function import CallContext, RemoteFunction
from floe.external.values import Unconvertible, converter, encode_column, to_arrow
from floe.settings import ExternalFunctionSettings

log = logging.getLogger("floe.external")

USER_AGENT = "Floe-ExternalFunctions/0.1"
"""Sent on every request to a remote service."""
_MAX_BACKOFF_DOUBLINGS = 60
"""Beyond this many doublings the ceiling is backoff_max_s anyway (and 2.0**n would overflow)."""


MIN_SPREAD_ROWS = 128
"""Batches are not cut below this many rows to spread a call over concurrent requests."""


@dataclass(frozen=True)
class CallOutcome:
    """What one call returned: a value or an error for each row, and what it took."""

    values: pa.Array
    """One value per row, of the return type's Arrow type; null where the row failed."""
    errors: pa.Array
    """One string per row: null where the value came back, else the message of the failure that
    covered the row (it names the function and the batch, never row data)."""
    batches: int = 0
    """Batches sent (each at least once)."""
    requests: int = 0
    """HTTP requests made, retries included."""
    retries: int = 0
    """Requests that repeated an earlier one of the same batch."""
    cache_hits: int = 0
    """Rows answered from the cache of IMMUTABLE results, without a request."""
    deduplicated: int = 0
    """Rows of an IMMUTABLE function that shared a request with an identical earlier row."""
    max_in_flight: int = 0
    """The most requests this call had in flight at once."""
    unavailable: str | None = None
    """When rows failed because the remote service did not answer (retries exhausted, or its
    circuit breaker open), the first such message: the failure is the service's, not the rows'."""

    @property
    def failed_rows(self) -> int:
        """How many rows have an error."""
        return len(self.errors) - int(self.errors.null_count)


class _Stats:
    """One call's counters, updated by its worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.batches = 0
        self.requests = 0
        self.retries = 0
        self.cache_hits = 0
        self.deduplicated = 0
        self.in_flight = 0
        self.max_in_flight = 0

    @contextmanager
    def request(self, first: bool) -> Iterator[None]:
        """Count one request while it is in flight."""
        with self._lock:
            self.requests += 1
            self.batches += first
            self.retries += not first
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1


class _ResponseTooLarge(Exception):
    """The raw answer passed max_response_bytes while it was read."""


@dataclass(frozen=True)
class _Call:
    """What every batch of one call shares."""

    fn: RemoteFunction
    ctx: CallContext
    unit_args: list[bytes]
    stats: _Stats
    abort: threading.Event
    retry_timeout_s: float
    budget_setting: str
    """The setting ``retry_timeout_s`` comes from, for messages."""
    deadline: float | None
    """time.monotonic() after which no request is made or waited for (a statement's time limit)."""
    stopped: list[ExternalFunctionUnavailable] = field(default_factory=list)
    """The failure that stopped the call, when the service stopped answering (set with ``abort``)."""


class FunctionCaller:
    """Calls external functions for one process: thread-safe, and closed when done (it is a context
    manager). ``client`` replaces the HTTP client it would make (it is then the caller's to close)."""

    def __init__(
        self,
        settings: ExternalFunctionSettings,
        *,
        client: httpx.Client | None = None,
        cache: ResultCache | None = None,
        breaker: Breaker | None = None,
    ) -> None:
        self.settings = settings
        self._owns_client = client is None
        self._client = (
            client
            if client is not None
            else httpx.Client(
                timeout=httpx.Timeout(settings.request_timeout_s),
                # A redirect could lead outside the integration's prefixes: the 3xx fails the batch.
                follow_redirects=False,
                # Proxies and CA bundles come from Floe's settings, never from the environment.
                trust_env=False,
                limits=httpx.Limits(
                    max_connections=None, max_keepalive_connections=max(10, 2 * settings.max_concurrency)
                ),
                headers={"user-agent": USER_AGENT},
            )
        )
        # "is not None": an empty cache is falsy (it has a length), and must still be the one used.
        self.cache = cache if cache is not None else ResultCache(settings.cache_entries, settings.cache_bytes)
        """Results of IMMUTABLE functions, shared by every call this caller makes."""
        self.breaker = breaker if breaker is not None else Breaker(settings)
        """Circuit breakers of the remote services (shared between processes when it has Redis)."""
        self._lock = threading.Lock()
        self._active: set[threading.Event] = set()
        self._closed = False

    # ---------------------------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Stop the calls in progress from sending more (their remaining rows fail) and close the
        HTTP client if this caller made it."""
        with self._lock:
            self._closed = True
            for abort in self._active:
                abort.set()
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> FunctionCaller:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---------------------------------------------------------------------------------- calls

    def call(
        self,
        fn: RemoteFunction,
        args: Sequence[pa.Array | pa.ChunkedArray],
        ctx: CallContext,
        *,
        num_rows: int | None = None,
        in_pipe: bool = False,
        deadline: float | None = None,
    ) -> CallOutcome:
        """Call ``fn`` on every row of ``args`` (one array per argument; ``num_rows`` is needed
        only when there are none). A failed batch fails its rows only. ``in_pipe``: each batch
        may take ``pipe_retry_timeout_s`` in all rather than ``retry_timeout_s``; ``deadline``
        (``time.monotonic()``) cuts requests and retries short, as a statement's time limit does."""
        return self._call(fn, args, ctx, num_rows, in_pipe, deadline, fail_fast=False)

    def call_or_raise(
        self,
        fn: RemoteFunction,
        args: Sequence[pa.Array | pa.ChunkedArray],
        ctx: CallContext,
        *,
        num_rows: int | None = None,
        in_pipe: bool = False,
        deadline: float | None = None,
    ) -> pa.Array:
        """The values of ``call``, or the first failure raised (ExternalFunctionError); no batch
        starts after it, and the requests already in flight are waited for."""
        return self._call(fn, args, ctx, num_rows, in_pipe, deadline, fail_fast=True).values

    def _call(
        self,
        fn: RemoteFunction,
        args: Sequence[pa.Array | pa.ChunkedArray],
        ctx: CallContext,
        num_rows: int | None,
        in_pipe: bool,
        deadline: float | None,
        *,
        fail_fast: bool,
    ) -> CallOutcome:
        rows = _row_count(fn, args, num_rows)
        missing = [name for name in fn.context_headers if ctx.context.get(name) is None]
        if missing:
            raise ValueError(f"{fn.name}: the call context has no value for {', '.join(missing)}")
        row_args, errors = self._encode(fn, args, rows, fail_fast)
        values: list[Any] = [None] * rows
        stats = _Stats()
        skip = _null_rows(args) if fn.strict else set()
        units = self._units(fn, ctx, row_args, errors, values, stats, skip)
        call = _Call(
            fn,
            ctx,
            [row_args[unit[0]] for unit in units],
            stats,
            threading.Event(),
            self.settings.pipe_retry_timeout_s if in_pipe else self.settings.retry_timeout_s,
            f"external_functions.{'pipe_retry_timeout_s' if in_pipe else 'retry_timeout_s'}",
            deadline,
        )
        plan = wire.plan_batches(
            [len(a) for a in call.unit_args],
            self._batch_rows(fn, len(units)),
            self.settings.max_batch_bytes,
        )
        # An open breaker: the service failed lately, and nothing is sent until its cooldown ends.
        # A half-open one (cooldown over): this call probes, and its first answer closes it.
        seen = self.breaker.state(fn.url) if plan else None
        probe: list[Trip] = [seen] if seen is not None else []
        unavailable: list[str] = []
        if seen is not None and seen.is_open(int(time.time() * 1000)):
            held = _held_back(fn, seen)
            call.stopped.append(held)
            call.abort.set()

        def settle(span: range, result: list[Any] | ExternalFunctionError) -> None:
            if isinstance(result, ExternalFunctionError):
                for index in span:
                    for row in units[index]:
                        errors[row] = result.message
                if isinstance(result, ExternalFunctionUnavailable) and not unavailable:
                    unavailable.append(result.message)
                return
            if probe:
                self.breaker.close(fn.url, probe.pop())
            for index, value in zip(span, result, strict=True):
                for row in units[index]:
                    values[row] = value
                if fn.immutable:
                    key = _cache_key(fn, ctx, call.unit_args[index])
                    self.cache.put(key, value, len(call.unit_args[index]))

        with self._lock:
            if self._closed:
                raise RuntimeError("the FunctionCaller is closed")
            self._active.add(call.abort)
        try:
            self._run(call, plan, settle, fail_fast)
        finally:
            with self._lock:
                self._active.discard(call.abort)
        log.debug(
            "external function %s: %d rows, %d batches, %d requests, %d retries, %d cache hits",
            fn.name,
            rows,
            stats.batches,
            stats.requests,
            stats.retries,
            stats.cache_hits,
            extra={"function": fn.name, "query_id": ctx.query_id},
        )
        return CallOutcome(
            values=to_arrow(values, fn.returns),
            errors=pa.array(errors, type=pa.string()),
            batches=stats.batches,
            requests=stats.requests,
            retries=stats.retries,
            cache_hits=stats.cache_hits,
            deduplicated=stats.deduplicated,
            max_in_flight=stats.max_in_flight,
            unavailable=unavailable[0] if unavailable else None,
        )

    def _batch_rows(self, fn: RemoteFunction, rows: int) -> int:
        """Rows per batch: the function's MAX_BATCH_ROWS (else the setting), but fewer when that
        spreads a call over more of its ``max_concurrency`` requests. A query's call is one
        vector of 2,048 rows: 3 batches of at most 1,000 would leave 5 of the 8 slots idle and make
        the last batch a sliver, where 8 of 256 keep them all busy. Never below MIN_SPREAD_ROWS."""
        limit = fn.max_batch_rows or self.settings.max_batch_rows
        spread = -(-rows // max(1, self.settings.max_concurrency))  # ceiling division
        return max(1, min(limit, max(MIN_SPREAD_ROWS, spread)))

    def _encode(
        self,
        fn: RemoteFunction,
        args: Sequence[pa.Array | pa.ChunkedArray],
        rows: int,
        fail_fast: bool,
    ) -> tuple[list[bytes], list[str | None]]:
        """Each row's arguments as comma-joined JSON text, and the rows that cannot be sent."""
        errors: list[str | None] = [None] * rows
        columns: list[list[bytes]] = []
        for position, (array, column) in enumerate(zip(args, fn.args, strict=True), start=1):
            try:
                texts, bad = encode_column(array, column)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
                raise ValueError(f"{fn.name}: argument {position} is not {column.sql_type}: {exc}") from None
            for row, why in sorted(bad.items()):
                error = ExternalFunctionFailed.of(fn.name, None, f"row {row}: argument {position}: {why}")
                if fail_fast:
                    raise error
                errors[row] = errors[row] or error.message
            columns.append(texts)
        row_args = [b",".join(parts) for parts in zip(*columns, strict=True)] if columns else [b""] * rows
        return row_args, errors

    def _units(
        self,
        fn: RemoteFunction,
        ctx: CallContext,
        row_args: list[bytes],
        errors: list[str | None],
        values: list[Any],
        stats: _Stats,
        skip: set[int],
    ) -> list[list[int]]:
        """The rows to send, grouped: one row each, or for an IMMUTABLE function one group per
        distinct argument tuple not in the cache (the cached ones are filled in here). Rows that
        cannot be encoded, and those in ``skip`` (NULL under STRICT), are not sent."""
        sendable = (row for row, error in enumerate(errors) if error is None and row not in skip)
        if not fn.immutable:
            return [[row] for row in sendable]
        groups: dict[bytes, list[int]] = {}
        for row in sendable:
            groups.setdefault(row_args[row], []).append(row)
        units = []
        for text, members in groups.items():
            cached = self.cache.get(_cache_key(fn, ctx, text))
            if cached is MISS:
                units.append(members)
                stats.deduplicated += len(members) - 1
                continue
            for row in members:
                values[row] = cached
            stats.cache_hits += len(members)
        return units

    def _run(
        self,
        call: _Call,
        plan: list[range],
        settle: Callable[[range, list[Any] | ExternalFunctionError], None],
        fail_fast: bool,
    ) -> None:
        """Send the planned batches, ``max_concurrency`` at a time, settling each as it ends."""
        workers = min(self.settings.max_concurrency, len(plan))
        if workers <= 1 or call.abort.is_set():
            for position, span in enumerate(plan):
                result = self._batch(call, position, span)
                settle(span, result)
                if fail_fast and isinstance(result, ExternalFunctionError):
                    raise result
            return
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="floe-external") as pool:
            futures = {
                pool.submit(self._batch, call, position, span): span for position, span in enumerate(plan)
            }
            for future in as_completed(futures):
                result = future.result()
                settle(futures[future], result)
                if fail_fast and isinstance(result, ExternalFunctionError):
                    # Queued batches never start; running ones stop before their next attempt.
                    call.abort.set()
                    for other in futures:
                        other.cancel()
                    raise result

    # ---------------------------------------------------------------------------------- one batch

    def _batch(self, call: _Call, position: int, span: range) -> list[Any] | ExternalFunctionError:
        """One batch sent and answered: its converted values, or the error that failed it (also
        when the call stopped before the batch was answered)."""
        fn = call.fn
        body = wire.build_body(call.unit_args[span.start : span.stop])
        batch = wire.batch_id(fn, call.ctx, position, body)
        where = {"function": fn.name, "query_id": call.ctx.query_id, "batch_id": batch}
        try:
            answer = self._exchange(call, batch, body, where)
            if answer is None:
                if call.stopped:
                    return ExternalFunctionUnavailable.of(
                        fn.name, batch, f"not sent: {call.stopped[0].reason}"
                    )
                return ExternalFunctionFailed.of(fn.name, batch, "not sent: the call was stopped")
            raw, encoding = answer
            values = wire.decode_answer(raw, encoding, len(span), self.settings.max_response_bytes)
            return _convert(fn, values)
        except wire.ProtocolViolation as exc:
            error: ExternalFunctionError = ExternalFunctionFailed.of(fn.name, batch, str(exc))
        except ExternalFunctionUnavailable as exc:
            error = exc
            if not call.stopped:
                # The service is down for this call's other batches too: they stop, and so do other
                # calls to it (in every process, with a shared breaker) until the cooldown ends.
                trip = self.breaker.trip(fn.url, f"batch {exc.batch_id}: {exc.reason}")
                call.stopped.append(_held_back(fn, trip))
                call.abort.set()
        except ExternalFunctionError as exc:
            error = exc
        log.warning("%s", error.message, extra=where)
        return error

    def _exchange(
        self, call: _Call, batch: str, body: bytes, where: dict[str, str]
    ) -> tuple[bytes, str | None] | None:
        """Post the batch until a 200 (its raw body and Content-Encoding), retrying transport
        errors, 429 and 5xx with backoff and full jitter within ``retry_timeout_s``; None if the
        call stopped meanwhile."""
        fn, settings = call.fn, self.settings
        sent, encoding = wire.compress(body, fn)
        headers = wire.request_headers(fn, call.ctx, batch, encoding)
        budget = time.monotonic() + call.retry_timeout_s
        deadline = budget if call.deadline is None else min(budget, call.deadline)
        attempt = 0
        last = "none made"
        while not call.abort.is_set():
            fn.check_egress(batch)  # the integration is checked before every request, retries too
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._out_of_time(call, batch, attempt, last, budget)
            attempt += 1
            hint: float | None = None
            # An attempt never outlives the batch's budget: a hanging service then costs the
            # budget, not request_timeout_s on top of it.
            timeout = min(settings.request_timeout_s, left)
            try:
                with call.stats.request(first=attempt == 1):
                    signed = wire.sign(headers, fn, batch, sent)
                    status, answer_headers, raw = self._post(fn.url, sent, signed, timeout)
            except httpx.TransportError as exc:
                last = _describe(exc, timeout, settings.request_timeout_s)
            except RuntimeError:
                if call.abort.is_set():  # close() shut the client under this request
                    return None
                raise
            except _ResponseTooLarge:
                raise ExternalFunctionFailed.of(
                    fn.name,
                    batch,
                    f"the response is larger than {settings.max_response_bytes} bytes "
                    "(external_functions.max_response_bytes)",
                ) from None
            else:
                if status == 200:
                    return raw, answer_headers.get("content-encoding")
                if status != 429 and status < 500:
                    redirect = " (redirects are not followed)" if 300 <= status < 400 else ""
                    raise ExternalFunctionFailed.of(
                        fn.name, batch, f"the remote service answered HTTP {status}{redirect}"
                    )
                last = f"HTTP {status}"
                hint = wire.retry_after(answer_headers.get("retry-after"))
            ceiling = settings.backoff_base_s * 2.0 ** min(attempt - 1, _MAX_BACKOFF_DOUBLINGS)
            # Full jitter: retries of many batches hit by one outage spread over the whole window.
            delay = random.uniform(0.0, min(settings.backoff_max_s, ceiling))
            if hint is not None:
                delay = max(delay, min(hint, settings.backoff_max_s))
            if time.monotonic() + delay >= deadline:
                raise self._out_of_time(call, batch, attempt, last, budget)
            log.info(
                "external function %s, batch %s: %s; retry %d in %.2f s",
                fn.name,
                batch,
                last,
                attempt,
                delay,
                extra=where,
            )
            if call.abort.wait(delay):
                break
        return None

    def _out_of_time(
        self, call: _Call, batch: str, attempts: int, last: str, budget: float
    ) -> ExternalFunctionError:
        """The error of a batch whose time ran out: the statement's limit when that came first (the
        service is not to blame, so the breaker is left alone), else the retry budget (it is)."""
        if call.deadline is not None and call.deadline < budget:
            return ExternalFunctionFailed.of(
                call.fn.name, batch, "stopped: the statement reached its time limit"
            )
        plural = "s" if attempts != 1 else ""
        setting = call.budget_setting
        return ExternalFunctionUnavailable.of(
            call.fn.name,
            batch,
            f"no answer after {attempts} attempt{plural} within {setting} "
            f"({call.retry_timeout_s:g} s); last: {last}",
        )

    def _post(
        self, url: str, body: bytes, headers: dict[str, str], timeout_s: float
    ) -> tuple[int, httpx.Headers, bytes]:
        """One POST: the status, the headers, and for a 200 the raw body, read within
        ``timeout_s`` in all and ``max_response_bytes``."""
        limit = self.settings.max_response_bytes
        deadline = time.monotonic() + timeout_s
        # Encoded here: httpx would encode values as ASCII, and a context value may not be.
        sent = [(name.encode(), value.encode()) for name, value in headers.items()]
        timeout = httpx.Timeout(timeout_s)
        with self._client.stream("POST", url, content=body, headers=sent, timeout=timeout) as response:
            if response.status_code != 200:
                return response.status_code, response.headers, b""  # an error's body is never shown
            raw = bytearray()
            for chunk in response.iter_raw():
                raw += chunk
                if len(raw) > limit:
                    raise _ResponseTooLarge
                # The per-read timeout alone would let a service that trickles bytes run forever.
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("the answer took longer than its time limit")
            return 200, response.headers, bytes(raw)


def _row_count(fn: RemoteFunction, args: Sequence[pa.Array | pa.ChunkedArray], num_rows: int | None) -> int:
    if len(args) != len(fn.args):
        raise ValueError(f"{fn.name} takes {len(fn.args)} arguments; {len(args)} were given")
    lengths = {len(array) for array in args}
    if num_rows is not None:
        lengths.add(num_rows)
    if not lengths:
        raise ValueError(f"{fn.name} takes no arguments: pass num_rows")
    if len(lengths) > 1:
        raise ValueError(f"{fn.name}: the argument arrays (and num_rows) differ in length")
    return lengths.pop()


def _null_rows(args: Sequence[pa.Array | pa.ChunkedArray]) -> set[int]:
    """The rows with a NULL argument (SQL NULL: a VARIANT holding JSON null is not one)."""
    rows: set[int] = set()
    for array in args:
        if array.null_count:
            mask = array.is_null().to_pylist()
            rows.update(row for row, null in enumerate(mask) if null)
    return rows


def _cache_key(fn: RemoteFunction, ctx: CallContext, args: bytes) -> tuple[str, tuple[str, ...], bytes]:
    # The context header values are part of the key: a function that answers per CURRENT_USER, say,
    # must not hand one user's cached result to another.
    return fn.identity, tuple(ctx.context[name] for name in fn.context_headers), args


def _convert(fn: RemoteFunction, values: list[Any]) -> list[Any]:
    """The answer's values in the return type, or ProtocolViolation naming the row and the type."""
    convert = converter(fn.returns)
    out: list[Any] = []
    for row, value in enumerate(values):
        if value is None:
            if not fn.returns.nullable:
                raise wire.ProtocolViolation(
                    f"row {row}: null returned by a function that RETURNS {fn.returns.sql_type} NOT NULL"
                )
            out.append(None)
            continue
        try:
            out.append(convert(value))
        except Unconvertible as exc:
            raise wire.ProtocolViolation(f"row {row}: {exc}") from None
    return out


def _describe(exc: httpx.TransportError, timeout_s: float, setting_s: float) -> str:
    """A transport failure in words, without the request; ``timeout_s`` is the attempt's limit,
    ``setting_s`` request_timeout_s (the limit is less when the batch's budget ran low)."""
    if isinstance(exc, httpx.TimeoutException):
        if timeout_s < setting_s:
            return f"timed out after {timeout_s:.3g} s, the rest of the batch's retry budget"
        return f"timed out (external_functions.request_timeout_s = {timeout_s:g} s)"
    if isinstance(exc, httpx.ConnectError):
        return "could not connect"
    return f"the connection failed ({type(exc).__name__})"


def _held_back(fn: RemoteFunction, trip: Trip) -> ExternalFunctionUnavailable:
    """The error of rows not sent because the service's breaker is open."""
    until = time.strftime("%H:%M:%S", time.gmtime(trip.until_ms / 1000))
    return ExternalFunctionUnavailable.of(
        fn.name,
        None,
        f"the remote service is unavailable, so calls are held back until {until} UTC "
        f"(external_functions.breaker_cooldown_s); it last failed at {trip.reason}",
    )
