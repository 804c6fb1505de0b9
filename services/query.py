"""Queries over loaded tables: Snowflake SQL transpiled by sqlglot, run by DuckDB over Arrow.

A table is handed to DuckDB as a stream (``BlobScan``): its blobs are decrypted and decoded one row
group, one batch of rows, at a time while DuckDB reads them, so a query's memory is DuckDB's
``query.memory_limit`` plus a row group or so per scan, not the table's size. Every scan DuckDB
starts opens a stream of its own, so a table referenced twice (a self-join, a subquery, a recursive
CTE) is simply read twice. Small blobs are kept decoded in an LRU cache (blobs are immutable once
committed), so a small query answers in milliseconds without a Spark session.

Before reading, a single-table query's WHERE terms that compare a column with a literal (joined by
AND) are checked against each blob's min/max statistics from the manifest, and then against each
row group's Parquet statistics; blobs and row groups that cannot hold a matching row are skipped.
Only the columns the query names are read. ``SELECT COUNT(*) FROM t`` alone is answered from the
manifest's row counts. The result's ``stats`` count the blobs in the table and those read, and the
row groups of those blobs and those read. ``COPY_HISTORY`` and ``SYSTEM$PIPE_STATUS`` are answered
from load history and joined into the same DuckDB query.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import functools
import json
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, cast

import duckdb
import pyarrow as pa
from pyarrow import fs as pafs
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.optimizer.scope import Scope, build_scope

from floe import sandbox
from floe.aws import pyarrow_s3_kwargs
from floe.blob_columns import blob_schema, fill, stored_name, stored_schema
from floe.blobs import BlobCrypto, OpenedBlob, crypto_from_settings, open_blob, row_group_stats
from floe.catalog import Catalog, Column, Pipe, Table
from floe.catalog.ddl import Defaults, qualify, qualify_table
from floe.catalog.locations import refusal
from floe.catalog.pipe_state import pipe_stopped
from floe.errors import CompilationError, ObjectNotFound, SqlError
from floe.external import Breaker, FunctionCaller, held_back
from floe.history import iso_utc
from floe.keys import Keys, RedisClient
from floe.records import QueueEntry
from floe.settings import Settings
from floe.types import arrow_schema, parse_column_type
from services.access import Check, Need
from services.external_calls import ExternalCalls
from services.functions import check_functions, function_name
from services.load_history import VIEWS, LoadHistory, status_json
from services.tz_results import ResultShape, plan_offsets
from services.value_bounds import ValueBounds


@dataclass
class Result:
    """Rows of a statement, with upper-case column names as Snowflake returns them."""

    columns: list[str]
    rows: list[list[Any]]
    stats: dict[str, Any] = field(default_factory=dict)

    def records(self) -> list[dict[str, Any]]:
        """Rows as objects keyed by column name."""
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


class RowSink(Protocol):
    """Where a streamed result goes, page by page (the API's answer to ``"stream": true``)."""

    def watch(self, stop: Callable[[], None]) -> None:
        """Called as the query starts: ``stop``, called from any thread, cancels it (its reader is
        gone)."""

    def start(self, columns: list[str]) -> None:
        """The result's column names, before any page."""

    def page(self, rows: list[list[Any]], timeout_s: float) -> None:
        """Take one page, waiting at most ``timeout_s`` for room (``TimeoutError`` past it: the
        statement's time is up); it raises what it likes once its reader is gone."""


def send_result(sink: RowSink, result: Result, page_rows: int, timeout_s: float) -> None:
    """A result computed whole (a statement other than a query) handed to ``sink``, in pages."""
    sink.start(result.columns)
    deadline = time.monotonic() + timeout_s
    try:
        for at in range(0, len(result.rows), page_rows):
            sink.page(result.rows[at : at + page_rows], deadline - time.monotonic())
    except TimeoutError:
        raise _timed_out(timeout_s) from None


def jsonable(value: Any) -> Any:
    """A JSON-friendly Python value."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() and "." not in str(value) else float(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex().upper()  # BINARY as Snowflake shows it (BINARY_OUTPUT_FORMAT HEX)
    return value


@dataclass(frozen=True)
class CachedBlob:
    """A blob held decoded: its row groups (every column) and each group's Parquet statistics."""

    groups: tuple[pa.Table, ...]
    stats: tuple[dict[str, dict[str, Any]], ...]
    nbytes: int
    """The Arrow buffers the groups hold (``get_total_buffer_size``), counted once."""


CacheEntry: TypeAlias = CachedBlob | pa.Table
"""What the cache holds for a blob: a ``CachedBlob``, or a bare table (one group, no statistics)."""


def held_bytes(entry: CacheEntry) -> int:
    """The bytes a cache entry keeps alive: its Arrow buffers, whole even when sliced."""
    if isinstance(entry, CachedBlob):
        return entry.nbytes
    return int(entry.get_total_buffer_size())


def _groups(entry: CacheEntry) -> tuple[tuple[pa.Table, ...], tuple[dict[str, dict[str, Any]], ...]]:
    if isinstance(entry, CachedBlob):
        return entry.groups, entry.stats
    return (entry,), ({},)


class BlobCache:
    """Decoded blobs by name, least recently used evicted to keep them within a byte budget.

    An entry counts the Arrow buffers it holds (``held_bytes``), once per name: putting a name again
    replaces its entry and its count. An entry larger than the whole budget is not kept, so
    ``bytes <= budget`` always holds. An entry evicted while a query still reads it is freed when
    that query ends.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._items: OrderedDict[str, tuple[CacheEntry, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        """The bytes the entries hold now."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def peek(self, name: str) -> CacheEntry | None:
        """The cached blob, or None; a hit becomes the most recently used."""
        with self._lock:
            hit = self._items.get(name)
            if hit is None:
                return None
            self._items.move_to_end(name)
            return hit[0]

    def put(self, name: str, entry: CacheEntry) -> bool:
        """Keep ``entry`` (evicting the least recently used past the budget); False if it alone is
        larger than the budget, and then not kept."""
        size = held_bytes(entry)
        with self._lock:
            old = self._items.pop(name, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.budget:
                return False
            self._items[name] = (entry, size)
            self._bytes += size
            while self._bytes > self.budget:
                _, (_, evicted) = self._items.popitem(last=False)
                self._bytes -= evicted
        return True

    def get(self, name: str, load: Callable[[], CacheEntry]) -> CacheEntry:
        """The cached blob, loading (and keeping, if it fits) it on a miss."""
        hit = self.peek(name)
        if hit is not None:
            return hit
        entry = load()
        self.put(name, entry)
        return entry


class ArrowMeter:
    """The most Arrow memory in use while queries decoded blobs: pyarrow's default pool, process-wide
    (decrypted pages, decoded batches, the cache, and batches DuckDB still holds), sampled after each
    batch or row group a scan decodes, which is where it grows. Tests and benchmarks read ``peak``."""

    def __init__(self) -> None:
        self._peak = 0
        self._lock = threading.Lock()

    def sample(self) -> None:
        """Note the pool's current size."""
        now = pa.total_allocated_bytes()
        with self._lock:
            self._peak = max(self._peak, now)

    def reset(self) -> None:
        """Start over from the pool's current size."""
        with self._lock:
            self._peak = pa.total_allocated_bytes()

    @property
    def peak(self) -> int:
        """The largest size sampled since the last reset."""
        with self._lock:
            return self._peak


@dataclass
class _BlobPlan:
    """One blob a scan reads: its row groups that the statistics did not rule out, and where from."""

    name: str
    path: str
    groups: list[int] = field(default_factory=list)
    cached: CacheEntry | None = None
    opened: OpenedBlob | None = None
    """Opened while the query was compiled; the first stream takes it, later ones open their own."""
    estimate: int | None = None
    """Decoded bytes by the manifest (``_decoded_estimate``), if it can tell."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def group_stats(self) -> list[dict[str, dict[str, Any]]]:
        if self.cached is not None:
            return list(_groups(self.cached)[1])
        assert self.opened is not None
        md = self.opened.metadata
        return [row_group_stats(md, g) for g in range(md.num_row_groups)]

    def take(self) -> OpenedBlob | None:
        """The blob opened at compile time, for the first stream that reads it (once)."""
        with self.lock:
            opened, self.opened = self.opened, None
        return opened

    def release(self) -> None:
        opened = self.take()
        if opened is not None:
            opened.close()


class BlobScan:
    """One table reference's rows, as a stream DuckDB scans (the Arrow PyCapsule stream protocol).

    DuckDB asks for a new stream for every scan it runs (a recursive CTE's every iteration, say), and
    each stream reads the planned blobs again, a batch at a time: the scan is never materialized, and
    a table read twice is read twice rather than failing on a spent reader.
    """

    def __init__(
        self,
        schema: pa.Schema,
        blobs: list[_BlobPlan],
        read: Callable[[_BlobPlan, pa.Schema], Iterator[pa.RecordBatch]],
    ) -> None:
        self.schema = schema
        self.blobs = blobs
        self._read = read

    def __arrow_c_schema__(self) -> object:
        # Without it DuckDB would open a stream just to learn the schema.
        return self.schema.__arrow_c_schema__()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        stream = pa.RecordBatchReader.from_batches(self.schema, self._batches())
        return stream.__arrow_c_stream__(requested_schema)

    def _batches(self) -> Iterator[pa.RecordBatch]:
        for blob in self.blobs:
            yield from self._read(blob, self.schema)


Predicate = tuple[str, str, Any]

"""Authorizes one need of a query for its caller, or raises ObjectNotFound / PermissionDenied."""
"""(column, op, value): a WHERE conjunct that a blob's min/max can refute. ``value`` is already of the
type DuckDB compares the column in (see ``_literal``), and ``may_match`` reads the statistics as that."""

_OPS: dict[type[exp.Expr], str] = {exp.EQ: "=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_FLIP = {"=": "=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}
# Clauses of the top-level SELECT under which WHERE alone decides which of the table's rows count.
# Any other (SAMPLE, CONNECT BY, MATCH_RECOGNIZE, PIVOT...) sees rows before or beside WHERE, so a
# query that has one is not pruned: when in doubt, read the blob.
_QUERY_ARGS = frozenset(
    {"expressions", "from_", "where", "group", "having", "qualify", "windows", "order", "limit", "offset"}
    | {"distinct", "with_"}
)
# Likewise for the table reference itself: a sample, time travel, pivot or a column list in its
# alias (``t AS x(a, b)`` renames the columns WHERE names) all stop pruning.
_SOURCE_ARGS = frozenset({"this", "db", "catalog", "alias"})
# DuckDB compares a NUMBER column with a plain integer or decimal literal exactly (as DECIMAL) while
# both fit 38 digits; exponent forms and longer literals become DOUBLE, compared approximately.
# 18 digits keeps well inside the exact range.
_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?", re.ASCII)
_MAX_EXACT_DIGITS = 18
_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_TIME_TEXT = r"[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?"
_NTZ_TEXT = re.compile(rf"\d{{4}}-\d{{2}}-\d{{2}}(?:{_TIME_TEXT})?", re.ASCII)
_TZ_TEXT = re.compile(rf"\d{{4}}-\d{{2}}-\d{{2}}(?:{_TIME_TEXT}(?:Z|[+-]\d{{2}}(?::?\d{{2}})?)?)?", re.ASCII)
_CLOCK_TEXT = re.compile(r"\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?", re.ASCII)
_CASTABLE = frozenset({"DATE", "TIME", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "TIMESTAMP_TZ"})


def _plain_query(query: exp.Expr, source: exp.Table) -> bool:
    """True when the WHERE of ``query`` filters ``source``'s rows and nothing else changes them."""
    if not isinstance(query, exp.Select):
        return False
    if any(value for key, value in query.args.items() if key not in _QUERY_ARGS):
        return False
    if any(value for key, value in source.args.items() if key not in _SOURCE_ARGS):
        return False
    alias = source.args.get("alias")
    return not (isinstance(alias, exp.TableAlias) and alias.columns)


def _shadowed(query: exp.Select, source: exp.Table) -> set[str]:
    """Output names that stand for something other than the table column of that name.

    DuckDB binds a WHERE name to the table's column first and to an output alias only if there is
    no such column; a name that could be either is not used for pruning all the same.
    """
    out: set[str] = set()
    for projection in query.expressions:
        for alias in projection.find_all(exp.Alias):
            inner = alias.this
            plain = (
                alias is projection
                and isinstance(inner, exp.Column)
                and inner.table in ("", source.alias_or_name)
                and not inner.args.get("db")
            )
            if not (plain and inner.name.upper() == alias.alias.upper()):
                out.add(alias.alias.upper())
    return out


def _conjuncts(where: exp.Expr) -> list[exp.Expr]:
    """The AND-ed terms of a WHERE clause, through the Where node and parentheses.

    Only AND is opened: a term under OR, NOT or anything else is one opaque term (never pruned on).
    A loop, not recursion, so a long chain of ANDs cannot exhaust the stack.
    """
    out: list[exp.Expr] = []
    todo: list[exp.Expr] = [where]
    while todo:
        node = todo.pop()
        if isinstance(node, exp.Where | exp.Paren):
            todo.append(node.this)
        elif isinstance(node, exp.And):
            todo.extend((node.right, node.left))
        else:
            out.append(node)
    return out


def _column(node: exp.Expr, source: exp.Table, table: Table, shadowed: set[str]) -> Column | None:
    """The table column ``node`` names: unqualified or qualified by the source's alias (or name)."""
    if not isinstance(node, exp.Column) or node.args.get("db") or node.args.get("catalog"):
        return None
    if node.table and node.table != source.alias_or_name:
        return None
    name = node.name.upper()
    if name in shadowed:
        return None
    try:
        return table.column(name)  # DuckDB binds names case-insensitively, as this looks them up
    except KeyError:
        return None


def _string_literal(text: str, kind: str) -> Any:
    """A string literal as a ``kind`` column's value, or None unless it is one exactly."""
    if kind == "VARCHAR":
        return text
    if kind == "DATE" and _DATE_TEXT.fullmatch(text):
        return dt.date.fromisoformat(text)
    if kind == "TIMESTAMP_NTZ" and _NTZ_TEXT.fullmatch(text):
        return dt.datetime.fromisoformat(text)
    if kind in ("TIMESTAMP_TZ", "TIMESTAMP_LTZ") and _TZ_TEXT.fullmatch(text):
        value = dt.datetime.fromisoformat(text)
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value
    if kind == "TIME" and _CLOCK_TEXT.fullmatch(text):
        return dt.time.fromisoformat(text)
    return None


def _literal(node: exp.Expr, column: Column) -> Any:
    """``node`` as the value DuckDB compares ``column`` with, or None unless that is certain.

    NUMBER: a plain literal of at most 18 digits, as a Decimal (exact). FLOAT: a number a double
    holds exactly, as a float. VARCHAR: a string literal. DATE / TIME / TIMESTAMP_*: an ISO string
    literal (optionally cast to the column's own type), as a date, time or datetime; a TIMESTAMP_TZ
    or _LTZ literal without an offset is UTC, the sandbox's session zone (a TIMESTAMP_TZ compares by
    its instant). BINARY: never (see ``floe.blobs.column_stats``). Anything else: None.
    """
    kind = column.type
    if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast) and kind in _CASTABLE:
        try:
            target = parse_column_type(node.to)[0]
        except CompilationError:
            return None
        if target != kind or not (isinstance(node.this, exp.Literal) and node.this.is_string):
            return None
        node = node.this
    negative = isinstance(node, exp.Neg)
    if negative:
        node = node.this
    if not isinstance(node, exp.Literal):
        return None
    text = str(node.this)
    try:
        if node.is_string:
            return None if negative else _string_literal(text, kind)
        if kind == "NUMBER" and _PLAIN_NUMBER.fullmatch(text):
            if sum(c.isdigit() for c in text) > _MAX_EXACT_DIGITS:
                return None
            number = decimal.Decimal(text)
            return -number if negative else number
        if kind == "FLOAT":
            exact = decimal.Decimal(text)
            # DuckDB rounds the literal to a double; only one a double holds exactly rounds the same
            # whichever way it is done.
            if not exact.is_finite() or decimal.Decimal(float(exact)) != exact:
                return None
            return -float(exact) if negative else float(exact)
    except (ValueError, decimal.InvalidOperation):
        return None  # not a value DuckDB would accept either; let it report that
    return None


def _predicate(column: Column | None, op: str, node: exp.Expr) -> Predicate | None:
    if column is None:
        return None
    # DuckDB sorts NaN above every number and min/max statistics skip NaN, so a blob whose max is
    # below v may still hold rows with x > v.
    if column.type == "FLOAT" and op in (">", ">="):
        return None
    value = _literal(node, column)
    # Statistics are kept per blob column: a column's stored name (floe.blob_columns).
    return None if value is None else (stored_name(column), op, value)


def _predicates(query: exp.Expr, source: exp.Table, table: Table) -> list[Predicate]:
    """Conjuncts of ``query``'s WHERE clause that ``table``'s blob statistics can decide.

    ``source`` is the query's only source and reads ``table``; identifiers are normalized (upper
    case unless quoted). Only comparisons of a table column with a literal (``=``, ``<``, ``<=``,
    ``>``, ``>=``, either way round) and ``BETWEEN`` are used, and only in terms joined by AND:
    leaving a predicate out only reads more blobs, so whatever is not certain is left out.
    """
    where = query.args.get("where")
    if where is None or not isinstance(query, exp.Select) or not _plain_query(query, source):
        return []
    shadowed = _shadowed(query, source)
    out: list[Predicate] = []
    for node in _conjuncts(where):
        found: list[Predicate | None] = []
        if isinstance(node, exp.Between) and not node.args.get("symmetric"):
            column = _column(node.this, source, table, shadowed)
            found += [_predicate(column, ">=", node.args["low"]), _predicate(column, "<=", node.args["high"])]
        elif (op := _OPS.get(type(node))) is not None:
            left, right = node.this, node.expression
            if not isinstance(left, exp.Column):
                left, right, op = right, left, _FLIP[op]
            found.append(_predicate(_column(left, source, table, shadowed), op, right))
        out.extend(p for p in found if p is not None)
    return out


def _stat_as(stat: Any, like: Any) -> Any:
    """A manifest min/max read as the type of the literal it is compared with, or None."""
    if isinstance(stat, bool):
        return None
    try:
        if isinstance(like, decimal.Decimal) and isinstance(stat, int | str):
            value = decimal.Decimal(stat)  # wide NUMBERs are kept as strings in the manifest
            return value if value.is_finite() else None
        if isinstance(like, float) and isinstance(stat, int | float):
            return float(stat)
        if isinstance(like, dt.datetime) and isinstance(stat, str) and "T" in stat:
            # A timestamp's statistics are datetime.isoformat(): never a bare date.
            moment = dt.datetime.fromisoformat(stat)
            return moment if (moment.tzinfo is None) == (like.tzinfo is None) else None
        if isinstance(like, dt.date) and not isinstance(like, dt.datetime) and isinstance(stat, str):
            return dt.date.fromisoformat(stat)
        if isinstance(like, dt.time) and isinstance(stat, str):
            return dt.time.fromisoformat(stat)
        if isinstance(like, str) and isinstance(stat, str):
            return stat
    except (ValueError, decimal.InvalidOperation):
        return None
    return None


def may_match(stats: dict[str, dict[str, Any]], predicates: list[Predicate]) -> bool:
    """False only when the statistics prove no row of the blob satisfies every predicate."""
    for column, op, value in predicates:
        col = stats.get(column)
        if not col or "min" not in col or "max" not in col:
            continue
        mn, mx = _stat_as(col["min"], value), _stat_as(col["max"], value)
        if mn is None or mx is None:
            continue
        # NaN statistics (a FLOAT column of NaNs only) make every comparison false: nothing pruned.
        if (
            (op == "=" and (value < mn or value > mx))
            or (op == ">" and mx <= value)
            or (op == ">=" and mx < value)
            or (op == "<" and mn >= value)
            or (op == "<=" and mn > value)
        ):
            return False
    return True


_HISTORY_ARGS = frozenset({"TABLE_NAME", "START_TIME", "END_TIME", "PIPE_NAME"})
_VALIDATE_ARGS = frozenset({"PIPE_NAME", "START_TIME", "END_TIME"})
_TABLE_FUNCTIONS = ("COPY_HISTORY", "VALIDATE_PIPE_LOAD")
"""The table functions a query may call, inside TABLE(...), with or without INFORMATION_SCHEMA."""
_BOUND_HELP = (
    "COPY_HISTORY START_TIME and END_TIME accept a timestamp string ('2024-05-01 12:00:00'), "
    "CURRENT_TIMESTAMP() or SYSDATE(), a cast of one of those (::TIMESTAMP_LTZ), or "
    "DATEADD(<unit>, <integer>, <one of those>)"
)
_NOW = (exp.CurrentTimestamp, exp.CurrentTimestampLTZ, exp.Systimestamp, exp.Localtimestamp, exp.CurrentDate)
_ADD = (exp.DateAdd, exp.TimestampAdd, exp.TimeAdd, exp.TsOrDsAdd, exp.DateSub, exp.TimestampSub)
_TIMESTAMP_TYPES = {
    exp.DType.DATE,
    exp.DType.DATETIME,
    exp.DType.TIMESTAMP,
    exp.DType.TIMESTAMPLTZ,
    exp.DType.TIMESTAMPNTZ,
    exp.DType.TIMESTAMPTZ,
}
_STEP = {
    "MICROSECOND": dt.timedelta(microseconds=1),
    "MILLISECOND": dt.timedelta(milliseconds=1),
    "SECOND": dt.timedelta(seconds=1),
    "MINUTE": dt.timedelta(minutes=1),
    "HOUR": dt.timedelta(hours=1),
    "DAY": dt.timedelta(days=1),
    "WEEK": dt.timedelta(weeks=1),
}
_MONTHS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}
_TO_TIMESTAMP = {"TO_TIMESTAMP", "TO_TIMESTAMP_LTZ", "TO_TIMESTAMP_NTZ", "TO_TIMESTAMP_TZ"}


def _bound_error(node: exp.Expr) -> CompilationError:
    return CompilationError(f"{_BOUND_HELP}; got {node.sql('snowflake')[:200]}")


def _integer(node: exp.Expr) -> int:
    """An integer literal, possibly negated or signed."""
    sign = 1
    while isinstance(node, exp.Neg | exp.Paren):
        if isinstance(node, exp.Neg):
            sign = -sign
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit() and len(node.this) < 12:
        return sign * int(node.this)
    raise _bound_error(node)


def _add_months(when: dt.datetime, months: int) -> dt.datetime:
    """``when`` moved by whole months, the day clamped to the target month's end (as Snowflake)."""
    index = when.year * 12 + when.month - 1 + months
    year, month = divmod(index, 12)
    if not 1 <= year <= 9999:
        raise OverflowError
    next_first = dt.date(year + (month + 1) // 12, (month + 1) % 12 + 1, 1)
    last = (next_first - dt.timedelta(days=1)).day
    return when.replace(year=year, month=month + 1, day=min(when.day, last))


def evaluate_bound(node: exp.Expr, now: dt.datetime) -> dt.datetime:
    """A COPY_HISTORY START_TIME / END_TIME, evaluated by Floe (never by DuckDB), in UTC.

    Only literal expressions are accepted (see ``_BOUND_HELP``): a bound that DuckDB evaluated
    would answer one bit of anything the query could read (issue 9, item 3).
    """
    if isinstance(node, exp.Paren):
        return evaluate_bound(node.this, now)
    if isinstance(node, exp.Literal) and node.is_string:
        text = str(node.this).strip()
        try:
            parsed = dt.datetime.fromisoformat(text)
        except ValueError:
            raise CompilationError(f"Timestamp '{text[:100]}' is not recognized; {_BOUND_HELP}") from None
        return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)
    if isinstance(node, _NOW) and not node.args.get("this"):
        if isinstance(node, exp.CurrentDate):
            return now.replace(hour=0, minute=0, second=0, microsecond=0)
        return now
    if isinstance(node, exp.Cast | exp.TryCast) and node.to.this in _TIMESTAMP_TYPES:
        value = evaluate_bound(node.this, now)
        if node.to.this is exp.DType.DATE:
            return value.replace(hour=0, minute=0, second=0, microsecond=0)
        return value
    if isinstance(node, exp.Anonymous) and node.name.upper() in _TO_TIMESTAMP and len(node.expressions) == 1:
        return evaluate_bound(node.expressions[0], now)
    if isinstance(node, _ADD):
        unit = node.args.get("unit")
        unit_name = (unit.name if unit is not None else "DAY").upper().rstrip("S")
        count = _integer(node.expression)
        if isinstance(node, exp.DateSub | exp.TimestampSub):
            count = -count
        base = evaluate_bound(node.this, now)
        try:
            if unit_name in _MONTHS:
                return _add_months(base, count * _MONTHS[unit_name])
            if unit_name in _STEP:
                return base + count * _STEP[unit_name]
        except OverflowError:
            raise CompilationError(f"DATEADD result is out of range; {_BOUND_HELP}") from None
        raise CompilationError(
            f"unsupported DATEADD unit {unit_name}; use one of {', '.join(sorted({*_STEP, *_MONTHS}))}"
        )
    raise _bound_error(node)


def _table_function_error(name: str) -> CompilationError:
    return CompilationError(
        f"Unknown table function {name}; the table functions are "
        "TABLE(INFORMATION_SCHEMA.COPY_HISTORY(...)), TABLE(INFORMATION_SCHEMA.VALIDATE_PIPE_LOAD(...)) "
        "and TABLE(INFER_SCHEMA(...))",
        code="002140",
        sql_state="42601",
    )


def _named_args(call: exp.Anonymous, allowed: frozenset[str], usage: str) -> dict[str, exp.Expr]:
    """A table function's named arguments (NAME => value), refused unless all are in ``allowed``."""
    args: dict[str, exp.Expr] = {}
    for kw in call.expressions:
        if not isinstance(kw, exp.Kwarg) or kw.this.name.upper() not in allowed:
            raise CompilationError(f"{call.name.upper()} takes named arguments only: {usage}")
        args[kw.this.name.upper()] = kw.expression
    return args


def _string_arg(args: dict[str, exp.Expr], name: str) -> str | None:
    """A named argument's string literal (None when absent); refused when it is something else."""
    value = args.get(name)
    if value is None:
        return None
    if not (isinstance(value, exp.Literal) and value.is_string):
        raise CompilationError(f"{name} takes a string literal, such as {name} => 'MYDB.PUBLIC.MYPIPE'")
    return str(value.this)


def _view_of(table: exp.Table) -> str | None:
    """The INFORMATION_SCHEMA view a table reference names (COPY_HISTORY or LOAD_HISTORY), or None
    for a reference outside INFORMATION_SCHEMA; other INFORMATION_SCHEMA names are refused."""
    if table.db.upper() != "INFORMATION_SCHEMA":
        return None
    if table.name.upper() in VIEWS:
        return table.name.upper()
    raise CompilationError(
        f"View 'INFORMATION_SCHEMA.{table.name[:100]}' does not exist or not authorized; Floe's "
        f"INFORMATION_SCHEMA has the views {' and '.join(VIEWS)}",
        code="002003",
        sql_state="42S02",
    )


def _copy_history_call(fn: exp.TableFromRows) -> exp.Anonymous:
    """The COPY_HISTORY or VALIDATE_PIPE_LOAD call inside TABLE(...), or a refusal for any other
    table function."""
    inner = fn.this
    if isinstance(inner, exp.Dot):
        schema = inner.this
        if not (isinstance(schema, exp.Identifier) and schema.name.upper() == "INFORMATION_SCHEMA"):
            raise _table_function_error(inner.sql("snowflake")[:100])
        inner = inner.expression
    if isinstance(inner, exp.Anonymous) and inner.name.upper() in _TABLE_FUNCTIONS:
        return inner
    name = function_name(inner) if isinstance(inner, exp.Func) else inner.sql("snowflake")[:100]
    raise _table_function_error(name)


_SOURCES = (exp.Table, exp.Subquery, exp.Values, exp.TableFromRows, exp.Lateral)


def _refuse_table_functions(query: exp.Expr) -> None:
    """Refuse anything in FROM, JOIN or LATERAL that is not a table name, a subquery, VALUES or
    TABLE(INFORMATION_SCHEMA.COPY_HISTORY | VALIDATE_PIPE_LOAD(...)): a table function there would
    read what it likes."""
    for table in query.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            if isinstance(table.this, exp.Func):
                raise _table_function_error(function_name(table.this))
            raise CompilationError(
                f"invalid table reference {table.this.sql('snowflake')[:100]}: name a table, "
                "as in SELECT ... FROM my_table"
            )
    for lateral in query.find_all(exp.Lateral):
        if not isinstance(lateral.this, exp.Subquery):
            what = lateral.this
            raise _table_function_error(
                function_name(what) if isinstance(what, exp.Func) else what.sql("snowflake")[:100]
            )
    for fn in query.find_all(exp.TableFromRows):
        _copy_history_call(fn)
    for clause in query.find_all(exp.From, exp.Join):
        source = clause.this
        if not isinstance(source, _SOURCES):
            name = function_name(source) if isinstance(source, exp.Func) else type(source).__name__.upper()
            raise _table_function_error(name)


def _cte_of(source: Scope | exp.Table) -> exp.CTE | None:
    """The CTE a scope source stands for, if it is one."""
    if not isinstance(source, Scope) or not source.is_cte:
        return None
    return source.expression.find_ancestor(exp.CTE)


def _resolve_ctes(query: exp.Expr, ours: set[int]) -> list[exp.Table]:
    """Rename every CTE and the references sqlglot's scopes bind to it; return the other references.

    Each CTE gets a generated name, so a reference that DuckDB would bind differently from
    sqlglot (a CTE of a sibling subquery, say) fails as an unknown table instead of reading a
    file. ``ours`` are references Floe already generated.
    """
    ctes = list(query.find_all(exp.CTE))
    names = {id(cte): f"__floe_cte_{i}" for i, cte in enumerate(ctes)}
    root = build_scope(query)
    if root is None:
        raise CompilationError("unsupported query: only SELECT queries can be run")
    renames: list[tuple[exp.Table, str]] = []
    others: list[exp.Table] = []
    for scope in root.traverse():
        for table in scope.tables:
            if id(table) in ours:
                continue
            visible = None if table.db or table.catalog else scope.cte_sources.get(table.name)
            cte = _cte_of(visible) if visible is not None else None
            if cte is not None and id(cte) in names:
                renames.append((table, names[id(cte)]))
            else:
                others.append(table)
    for cte in ctes:
        alias = cte.args.get("alias")
        columns = alias.columns if isinstance(alias, exp.TableAlias) else []
        cte.set("alias", exp.TableAlias(this=exp.to_identifier(names[id(cte)]), columns=columns))
    for table, name in renames:
        _point(table, name, ours)
    return others


def _is_only_source(query: exp.Expr, table: exp.Table) -> bool:
    """True when ``table`` is the top-level SELECT's only source, so its WHERE speaks of it."""
    from_ = query.args.get("from_")
    return (
        isinstance(query, exp.Select)
        and from_ is not None
        and from_.this is table
        and not query.args.get("joins")
        and not query.args.get("laterals")
    )


def _counts_rows_only(query: exp.Expr, source: exp.Table) -> bool:
    """True for ``SELECT COUNT(*)[, COUNT(*) ...] FROM source`` and nothing else: no WHERE, GROUP BY,
    HAVING, QUALIFY, ORDER BY, LIMIT, DISTINCT, CTE, join, sample or time travel, and no
    projection but a plain COUNT(*) (no DISTINCT, FILTER or OVER). Its answer is the table's row
    count, which the manifest holds."""
    if not isinstance(query, exp.Select) or not query.expressions:
        return False
    if any(value for key, value in query.args.items() if key not in ("expressions", "from_")):
        return False
    from_ = query.args.get("from_")
    if from_ is None or from_.this is not source:
        return False
    if any(value for key, value in source.args.items() if key not in _SOURCE_ARGS):
        return False
    for projection in query.expressions:
        count = projection.this if isinstance(projection, exp.Alias) else projection
        if not isinstance(count, exp.Count) or not isinstance(count.this, exp.Star):
            return False
        if any(value for key, value in count.args.items() if key not in ("this", "big_int")):
            return False
        if any(count.this.args.values()):  # COUNT(* EXCLUDE ...) and the like
            return False
    return True


def _answer_count(query: exp.Select, rows: int) -> None:
    """Replace every COUNT(*) of a ``_counts_rows_only`` query by ``rows`` and drop its FROM; the
    output names and type (BIGINT, as DuckDB's COUNT) stay."""
    for projection in query.expressions:
        count = projection.this if isinstance(projection, exp.Alias) else projection
        count.replace(exp.Cast(this=exp.Literal.number(rows), to=exp.DataType.build("BIGINT")))
    query.set("from_", None)


def _decoded_estimate(table: Table, entry: dict[str, Any], stats: dict[str, dict[str, Any]]) -> int | None:
    """About the Arrow bytes a blob decodes to, by its manifest entry: rows times each column's
    width, a string column's by its longest value (``max_length``, in characters: a bound for ASCII
    text). None when the entry lacks what it takes."""
    rows = entry.get("rows")
    if not isinstance(rows, int) or isinstance(rows, bool):
        return None
    total = 0
    for column in blob_schema(table):
        width = _width(column)
        if width < _VARIABLE:
            total += rows * max(1, width // 8)
            continue
        longest = stats.get(column.name, {}).get("max_length")
        if not isinstance(longest, int):
            return None
        total += rows * (longest + 4)  # the value and its offset
    return total


_VARIABLE = 1 << 30


def _width(column: pa.Field) -> int:
    """Bits per value of a fixed-width type; a variable-width one (strings) sorts after all."""
    try:
        return int(column.type.bit_width)
    except ValueError:
        return _VARIABLE


def _whole_rows(query: exp.Expr) -> bool:
    """True when some part of ``query`` may read every column of a table without naming it: a star
    (other than COUNT's), a NATURAL join, or a table's name used as a value (DuckDB reads it as the
    whole row)."""
    for star in query.find_all(exp.Star):
        if not isinstance(star.parent, exp.Count):
            return True
    for join in query.find_all(exp.Join):
        if "NATURAL" in str(join.args.get("method") or "").upper():
            return True
    relations: set[str] = set()
    for table in query.find_all(exp.Table):
        relations.update({table.name.upper(), table.alias_or_name.upper()})
    for alias in query.find_all(exp.TableAlias):
        relations.add(alias.name.upper())
    return any(column.name.upper() in relations for column in query.find_all(exp.Column))


def _read_columns(query: exp.Expr, source: exp.Table, table: Table, whole: bool) -> list[str]:
    """The columns of ``table`` that ``source`` must read: those whose name appears anywhere in the
    query as an identifier (a superset: DuckDB binds names case-insensitively), or all of them when
    ``whole`` (``_whole_rows``) or when the reference renames columns by position (``t AS x(a, b)``)
    or pivots. When none is named (``COUNT(*)`` under a WHERE on nothing), the narrowest one, for
    the row count."""
    names = [c.name for c in table.columns]
    alias = source.args.get("alias")
    if whole or source.args.get("pivots") or (isinstance(alias, exp.TableAlias) and alias.columns):
        return names
    used = {identifier.name.upper() for identifier in query.find_all(exp.Identifier)}
    wanted = [n for n in names if n.upper() in used]
    if wanted:
        return wanted
    # A blob without the column (added after it) still gives its row count, in NULLs (floe.blob_columns).
    return [min(arrow_schema(table, offsets=False), key=_width).name]


def _check_resolved(query: exp.Expr, ours: set[int]) -> None:
    """Every table reference left must be one Floe generated (a last guard against a reference
    that sqlglot's scopes did not list, which DuckDB would resolve on its own)."""
    for table in query.find_all(exp.Table):
        if id(table) not in ours:
            raise CompilationError(
                f"unsupported table reference {table.sql('snowflake')[:100]} in this position"
            )


def _alias_of(table: exp.Table) -> exp.TableAlias:
    """The alias a replaced reference keeps, so column qualifiers still bind: its own alias, or
    else its name (quoted as written)."""
    alias = table.args.get("alias")
    if isinstance(alias, exp.TableAlias):
        return alias.copy()
    return exp.TableAlias(this=table.this.copy())


def _reference(name: str, alias: exp.TableAlias | None) -> exp.Table:
    """A reference to a generated name."""
    return exp.Table(this=exp.to_identifier(name), alias=alias)


def _point(table: exp.Table, name: str, ours: set[int]) -> None:
    """Make ``table`` refer to the generated ``name``, keeping its alias, sample, pivots and joins."""
    alias = _alias_of(table)
    table.set("this", exp.to_identifier(name))
    table.set("db", None)
    table.set("catalog", None)
    table.set("alias", alias)
    ours.add(id(table))


# Blobs whose footers one query opens at once (S3 round trips overlap; each holds only its footer).
_OPEN_THREADS = 8
_STAT_KEYS = ("blobs_total", "blobs_scanned", "row_groups_total", "row_groups_scanned")


def _cast_batches(table: pa.Table, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """A decoded table's batches as ``schema``: its columns, in the table's types (zero-copy when they
    agree; a column an older blob lacks reads as NULL, ``floe.blob_columns.fill``)."""
    for batch in table.to_batches():
        yield fill(batch, schema)


def _timed_out(seconds: float) -> SqlError:
    return SqlError(
        f"Statement reached its statement timeout of {seconds:g} second(s) and was canceled "
        "(setting query.timeout_s, FLOE_QUERY__TIMEOUT_S); filter, aggregate or add a LIMIT.",
        code="000630",
        sql_state="57014",
    )


def _abandoned() -> SqlError:
    return SqlError(
        "The client stopped reading the streamed result; the statement was canceled.",
        code="000604",
        sql_state="57014",
    )


class _Cancel:
    """Stops a query's DuckDB connection from another thread: at its time limit (the timer), or
    when the reader of its streamed result has gone. The connection is closed under the same lock,
    so neither can interrupt it once it is closed."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self._lock = threading.Lock()
        self._closed = False
        self.timed_out = threading.Event()
        self.abandoned = threading.Event()

    def time_up(self) -> None:
        self.timed_out.set()
        self._interrupt()

    def abandon(self) -> None:
        self.abandoned.set()
        self._interrupt()

    def _interrupt(self) -> None:
        with self._lock:
            if not self._closed:
                self._con.interrupt()

    def close(self, keep: Callable[[duckdb.DuckDBPyConnection], None] | None = None) -> None:
        """Close the connection, or hand it to ``keep`` if it was never interrupted (an interrupt
        may still be pending in it)."""
        with self._lock:
            self._closed = True
            if keep is not None and not (self.timed_out.is_set() or self.abandoned.is_set()):
                keep(self._con)
            else:
                self._con.close()


class _Databases:
    """Sandboxed DuckDB databases kept between queries: opening one costs about 30 ms of CPU, more
    than a simple statement takes. A query has one to itself, as fresh: one comes back only from a
    query that ended without an error or an interrupt, once the tables and functions that query
    registered are removed. Nothing else can stay behind, as a query is one SELECT compiled here
    and the configuration is locked."""

    def __init__(self, threads: int, memory_limit: str, keep: int) -> None:
        self._threads = threads
        self._memory_limit = memory_limit
        self._keep = keep
        self._idle: list[duckdb.DuckDBPyConnection] = []
        self._lock = threading.Lock()

    def take(self) -> duckdb.DuckDBPyConnection:
        """An idle database, or a new one."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return sandbox.connect(threads=self._threads, memory_limit=self._memory_limit)

    def give_back(
        self, con: duckdb.DuckDBPyConnection, tables: Sequence[str], functions: Sequence[str]
    ) -> None:
        """Keep ``con`` for the next query once ``tables`` and ``functions`` are gone from it."""
        try:
            for name in tables:
                con.unregister(name)
            for name in functions:
                con.remove_function(name)
        except duckdb.Error:
            con.close()
            return
        with self._lock:
            if len(self._idle) < self._keep:
                self._idle.append(con)
                return
        con.close()


class QueryEngine:
    """Runs SELECT statements."""

    def __init__(
        self, settings: Settings, client: RedisClient, catalog: Catalog, queue_arn: Callable[[], str]
    ):
        self.settings = settings
        self.redis = client
        self.keys = Keys(settings.redis.prefix)
        self.catalog = catalog
        self.defaults = Defaults(settings.database, settings.schema_name)
        self.cache = BlobCache(settings.api.query_cache_bytes)
        self.meter = ArrowMeter()
        self._fs: pafs.S3FileSystem | None = None
        self._crypto: BlobCrypto | None = None
        self._queue_arn = queue_arn
        self._slots = threading.BoundedSemaphore(settings.query.max_concurrent)
        limits = settings.query
        self._databases = _Databases(limits.threads, limits.memory_limit, limits.max_concurrent)
        self._caller: FunctionCaller | None = None
        self._caller_lock = threading.Lock()
        self.history = LoadHistory(settings, client, catalog)

    def caller(self) -> FunctionCaller:
        """The process's external-function caller, made by the first query that calls one."""
        with self._caller_lock:
            if self._caller is None:
                settings = self.settings.external_functions
                breaker = Breaker(settings, self.redis, self.keys)
                self._caller = FunctionCaller(settings, breaker=breaker)
            return self._caller

    def close(self) -> None:
        """Release the external-function caller's connections, if a query made it."""
        with self._caller_lock:
            if self._caller is not None:
                self._caller.close()
                self._caller = None

    def _blob_reader(self) -> tuple[pafs.S3FileSystem, BlobCrypto]:
        if self._fs is None or self._crypto is None:
            self._fs = pafs.S3FileSystem(**pyarrow_s3_kwargs(self.settings.aws))
            enc = self.settings.encryption
            self._crypto = crypto_from_settings(enc.master_key_id, enc.resolve_master_key())
        return self._fs, self._crypto

    def manifest(self, table: Table) -> list[dict[str, Any]]:
        """Committed blobs of a table, across every pipe that ever loaded it."""
        blobs: list[dict[str, Any]] = []
        for pipe_id in self.catalog.segments(table):
            raw = self.redis.hgetall(self.keys.blobs(pipe_id))
            blobs.extend(json.loads(v) for _, v in sorted(raw.items()))
        return blobs

    def row_count(self, table: Table) -> tuple[int, int] | None:
        """The table's rows and blobs by its manifest (each blob's row count, written with it),
        reading no blob; None if an entry has no count."""
        blobs = self.manifest(table)
        counts = [b.get("rows") for b in blobs]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
            return None
        return sum(cast(list[int], counts)), len(blobs)

    def scan(
        self, table: Table, predicates: list[Predicate], columns: list[str], stats: dict[str, int]
    ) -> BlobScan:
        """A stream of the table's ``columns`` from the blobs, and their row groups, whose statistics
        do not rule out ``predicates``.

        Each blob not in the cache is opened here (its footer decrypted, several at once), so a blob
        that is not what its name says is refused before the query runs, and its row groups'
        statistics are known; its pages are read only as DuckDB scans.
        """
        _, crypto = self._blob_reader()
        bucket = self.settings.pipeline.tables_bucket
        plans: list[_BlobPlan] = []
        for blob in self.manifest(table):
            stats["blobs_total"] += 1
            if not may_match(crypto.open_stats(blob), predicates):
                continue
            stats["blobs_scanned"] += 1
            plan = _BlobPlan(name=blob["name"], path=f"{bucket}/{blob['name']}")
            plan.estimate = _decoded_estimate(table, blob, crypto.open_stats(blob))
            plan.cached = self.cache.peek(plan.name)
            plans.append(plan)
        self._open_blobs([p for p in plans if p.cached is None])
        kept: list[_BlobPlan] = []
        for plan in plans:
            groups = plan.group_stats()
            plan.groups = [g for g, group in enumerate(groups) if may_match(group, predicates)]
            stats["row_groups_total"] += len(groups)
            stats["row_groups_scanned"] += len(plan.groups)
            if plan.groups:
                kept.append(plan)
            else:
                plan.release()
        schema = arrow_schema(table)
        shown = pa.schema([schema.field(c) for c in columns])
        # Blobs hold each column under its stored name, whatever the table calls it now.
        stored = stored_schema(table, shown)

        def read(plan: _BlobPlan, _: pa.Schema) -> Iterator[pa.RecordBatch]:
            for batch in self._blob_batches(plan, stored):
                yield pa.RecordBatch.from_arrays(batch.columns, schema=shown)

        return BlobScan(shown, kept, read)

    def _open_blobs(self, plans: list[_BlobPlan]) -> None:
        """Open each blob (S3 requests and footer decryption, up to ``_OPEN_THREADS`` at once); the
        first failure, in manifest order, is raised once every blob opened is closed again."""
        fs, crypto = self._blob_reader()

        def open_one(plan: _BlobPlan) -> None:
            plan.opened = open_blob(fs, plan.path, crypto, name=plan.name)

        if len(plans) <= 1:
            for plan in plans:
                open_one(plan)
            return
        with ThreadPoolExecutor(min(_OPEN_THREADS, len(plans)), thread_name_prefix="floe-open") as pool:
            futures = [pool.submit(open_one, plan) for plan in plans]
        failed = [exc for f in futures if (exc := f.exception()) is not None]
        if failed:
            for plan in plans:
                plan.release()
            raise failed[0]

    def _cacheable(self, plan: _BlobPlan, opened: OpenedBlob) -> bool:
        """Whether a blob looks small enough for the cache: decoded, within
        ``api.query_cache_blob_bytes`` and the cache's budget by both the manifest's estimate and
        Parquet's uncompressed size (which undercounts dictionary-encoded strings)."""
        cap = min(self.settings.api.query_cache_blob_bytes, self.cache.budget)
        size = max(plan.estimate or 0, int(opened.decoded_bytes()))
        return 0 < size <= cap

    def _blob_batches(self, plan: _BlobPlan, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """One blob's planned row groups, as batches of ``schema``'s columns (blob column names; a
        column the blob lacks is all NULL).

        A cached blob is served from memory. Otherwise the blob is read row group by row group; a
        small one (``_cacheable``) is read whole and kept in the cache unless it turns out larger
        than allowed once decoded, a large one is decoded a batch at a time, so only that batch and
        its row group's fetched pages are held.
        """
        columns = schema.names
        if plan.cached is not None:
            groups = _groups(plan.cached)[0]
            for g in plan.groups:
                yield from _cast_batches(groups[g], schema)
            return
        opened = plan.take()
        if opened is None:
            fs, crypto = self._blob_reader()
            opened = open_blob(fs, plan.path, crypto, name=plan.name)
        try:
            wanted = set(plan.groups)
            md = opened.metadata
            present = set(md.schema.to_arrow_schema().names)  # an older blob lacks later columns
            keep: list[pa.Table] | None = [] if self._cacheable(plan, opened) else None
            held = 0
            cap = min(self.settings.api.query_cache_blob_bytes, self.cache.budget)
            for g in range(md.num_row_groups):
                if keep is not None:
                    group = opened.read_group(g)
                    self.meter.sample()
                    keep.append(group)
                    held += int(group.get_total_buffer_size())
                    if held > cap:
                        keep = None  # larger than its Parquet sizes said: stream the rest
                    if g in wanted:
                        yield from _cast_batches(group, schema)
                elif g in wanted:
                    for batch in opened.batches(g, [c for c in columns if c in present]):
                        self.meter.sample()
                        yield fill(batch, schema)
            if keep is not None:
                stats = tuple(row_group_stats(md, g) for g in range(md.num_row_groups))
                self.cache.put(plan.name, CachedBlob(tuple(keep), stats, held))
        finally:
            opened.close()

    def copy_history(self, call: exp.Anonymous, check: Check) -> pa.Table:
        """INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => ..., START_TIME => ...[, END_TIME => ...]
        [, PIPE_NAME => ...]) or VALIDATE_PIPE_LOAD(PIPE_NAME => ..., START_TIME => ...
        [, END_TIME => ...]), as the Arrow table ``services.load_history`` builds.

        The arguments are evaluated here, in Python, and never reach DuckDB (see ``evaluate_bound``).
        """
        now = dt.datetime.now(dt.UTC)
        if call.name.upper() == "VALIDATE_PIPE_LOAD":
            usage = "PIPE_NAME => '<pipe>', START_TIME => <timestamp> [, END_TIME => <timestamp>]"
            args = _named_args(call, _VALIDATE_ARGS, usage)
            pipe = _string_arg(args, "PIPE_NAME")
            if pipe is None or "START_TIME" not in args:
                raise CompilationError(f"VALIDATE_PIPE_LOAD needs {usage}")
            start = evaluate_bound(args["START_TIME"], now)
            end = evaluate_bound(args["END_TIME"], now) if "END_TIME" in args else None
            return self.history.validate_pipe_load(str(qualify(pipe, self.defaults)), start, end, check)
        usage = (
            "TABLE_NAME => '<table>', START_TIME => <timestamp> [, END_TIME => <timestamp>] "
            "[, PIPE_NAME => '<pipe>']"
        )
        args = _named_args(call, _HISTORY_ARGS, usage)
        name = _string_arg(args, "TABLE_NAME")
        if name is None or "START_TIME" not in args:
            raise CompilationError(
                "COPY_HISTORY needs TABLE_NAME => '<table>' (a string literal) and START_TIME => <timestamp>"
            )
        start = evaluate_bound(args["START_TIME"], now)
        end = evaluate_bound(args["END_TIME"], now) if "END_TIME" in args else None
        pipe_name = _string_arg(args, "PIPE_NAME")
        return self.history.copy_history(
            str(qualify(name, self.defaults)),
            start,
            end,
            check,
            str(qualify(pipe_name, self.defaults)) if pipe_name is not None else None,
        )

    def pipe_status(self, name: str, check: Check) -> str:
        """SYSTEM$PIPE_STATUS JSON: the state and queue computed now, the rest as the consumer and
        the registrar recorded it (``services.load_history.status_json``)."""
        full = str(qualify(name, self.defaults))
        check(Need("PIPE", full, ("MONITOR", "OPERATE", "OWNERSHIP")))
        pipe = self.catalog.get(Pipe, full)
        queue = self.keys.queue(pipe.id)
        pending = int(self.redis.xlen(queue))
        recorded = self.history.recorded_status(pipe)
        state, error = self._execution_state(pipe, recorded)
        out: dict[str, Any] = {"executionState": state, "pendingFileCount": pending, "error": error}
        if pending:
            first = cast(list[tuple[bytes, dict[bytes, bytes]]], self.redis.xrange(queue, count=1))
            if first:
                oldest = QueueEntry.from_stream(*first[0])
                out["oldestPendingFilePath"] = oldest.path
                out["oldestFileTimestamp"] = iso_utc(oldest.received_ms)
        if pipe.auto_ingest:
            arn = self._queue_arn()
            out["notificationChannelName"] = arn
            out["numOutstandingMessagesOnChannel"] = self.history.channel_backlog(arn)
        return status_json(out, recorded)

    def _execution_state(self, pipe: Pipe, recorded: dict[str, str]) -> tuple[str, str | None]:
        """executionState, and the error that explains it (None: the recorded one, if any).

        STOPPED_MISSING_TABLE, STOPPED_STAGE_DROPPED, STOPPED_STAGE_ALTERED: its table or stage
        was dropped, replaced or altered (``floe.catalog.pipe_state``; its files wait in its queue);
        PAUSED; STALLED_STAGE_PERMISSION_ERROR: its storage integration no longer admits its stage
        (every load is refused); STALLED_EXECUTION_ERROR: an external function's service is down
        (its files wait); STALLED_COMPILATION_ERROR: its last load could not compile or run its COPY
        (a function dropped, say) and nothing has loaded since."""
        if (stopped := pipe_stopped(self.catalog, pipe)) is not None:
            return stopped.state, stopped.reason
        if pipe.paused:
            return "PAUSED", None
        if (reason := refusal(self.catalog, self.settings, pipe)) is not None:
            return "STALLED_STAGE_PERMISSION_ERROR", reason
        if pipe.copy_spec.functions and (  # only then is the caller (an HTTP client) worth making
            held := held_back(self.catalog, self.caller().breaker, [pipe])
        ):
            function, trip = held[pipe.id]
            until = iso_utc(trip.until_ms)
            return "STALLED_EXECUTION_ERROR", (
                f"The remote service of external function {function} is unavailable; the pipe's files "
                f"wait in its queue until {until}, when a micro-batch tries the service again."
            )
        if recorded.get("error"):
            return "STALLED_COMPILATION_ERROR", None
        return "RUNNING", None

    def run(
        self,
        query: exp.Expr,
        check: Check,
        context: Mapping[str, str] | None = None,
        sink: RowSink | None = None,
    ) -> Result:
        """Execute one query within the limits of ``settings.query``; ``check`` authorizes each
        table, pipe, load history and external function it reads (``services.access.authorize``
        for the caller). ``context``: the session's CURRENT_* values, for external functions'
        CONTEXT_HEADERS.

        With a ``sink``, the rows go to it page by page, as it takes them, with no
        ``max_result_rows`` limit, and the Result returned carries no rows; the query holds its slot
        and connection until the last page is taken, within its time limit all the same."""
        limits = self.settings.query
        # Waiting threads hold an API worker thread too, but only up to the time limit; the
        # running ones are capped, so the rest of the pool stays free for insertFiles.
        if not self._slots.acquire(timeout=limits.timeout_s):
            raise SqlError(
                f"{limits.max_concurrent} queries are already running (setting query.max_concurrent, "
                f"FLOE_QUERY__MAX_CONCURRENT) and none finished within {limits.timeout_s:g} s; "
                "try again later.",
                code="000625",
                sql_state="57014",
            )
        try:
            return self._run(query, check, context or {}, sink)
        finally:
            self._slots.release()

    def compile(
        self,
        query: exp.Expr,
        stats: dict[str, int],
        check: Check,
        calls: ExternalCalls | None = None,
        shape: ResultShape | None = None,
        bounds: ValueBounds | None = None,
    ) -> tuple[str, dict[str, pa.Table | BlobScan]]:
        """DuckDB SQL for ``query`` and the Arrow data it reads (COPY_HISTORY tables, table scans),
        by their generated names; ``stats`` gets the blob and row-group counts (``_STAT_KEYS``).

        Every table reference is resolved here: a CTE visible in its scope (renamed), a catalog
        table or COPY_HISTORY (both registered under generated names). Anything else is refused,
        so DuckDB never sees a name it could resolve on its own (a file, a view, a setting).
        External functions are bound into ``calls`` (a query that calls one needs it). ``shape``
        gets what the raw rows need to become the result (``services.tz_results``). Every call
        that could make a value past the query's bounds is put behind its check (``bounds``, whose
        guard the query's connection then needs: ``ValueBounds.register``).
        """
        query = query.copy()
        self._name_outputs(query)
        # Snowflake folds unquoted names to upper case; so must CTE matching.
        query = normalize_identifiers(query, dialect="snowflake")
        _refuse_table_functions(query)
        tables: dict[str, pa.Table | BlobScan] = {}
        ours: set[int] = set()
        for fn in list(query.find_all(exp.TableFromRows)):
            name = f"__floe_history_{len(tables)}"
            tables[name] = self.copy_history(_copy_history_call(fn), check)
            alias = fn.args.get("alias")
            ref = _reference(name, alias.copy() if isinstance(alias, exp.TableAlias) else None)
            ours.add(id(ref))
            fn.replace(ref)
        calls = calls if calls is not None else ExternalCalls(self.catalog, self.defaults, check)
        calls.bind(query)
        check_functions(query, calls.names)
        for call in list(query.find_all(exp.Anonymous)):
            if call.name.upper() == "SYSTEM$PIPE_STATUS":
                if not call.expressions or not isinstance(call.expressions[0], exp.Literal):
                    raise CompilationError("SYSTEM$PIPE_STATUS takes the pipe name as a string literal")
                call.replace(exp.Literal.string(self.pipe_status(str(call.expressions[0].this), check)))
        catalog_refs = _resolve_ctes(query, ours)
        # Only a table that is the top-level SELECT's one source is pruned: the top-level WHERE
        # speaks of it alone (a second reference, even in a subquery, may see other rows).
        single = len(catalog_refs) == 1 and _is_only_source(query, catalog_refs[0])
        whole = _whole_rows(query)
        # TIMESTAMP_TZ columns the result shows as they are read their offsets too (tz_results).
        found = {id(n): self.catalog.find(Table, str(qualify_table(n, self.defaults))) for n in catalog_refs}
        planned, offsets = plan_offsets(query, {k: t for k, t in found.items() if t is not None})
        if shape is not None:
            shape.offsets, shape.hidden = planned.offsets, planned.hidden
        for key in _STAT_KEYS:
            stats.setdefault(key, 0)
        for node in list(catalog_refs):
            if (view := _view_of(node)) is not None:
                name = f"__floe_view_{len(tables)}"
                tables[name] = self.history.view(view, node.catalog.upper() or self.defaults.database, check)
                _point(node, name, ours)
                catalog_refs.remove(node)
        for node in catalog_refs:
            full = str(qualify_table(node, self.defaults))
            check(Need("TABLE", full, ("SELECT",)))
            table = self.catalog.find(Table, full)
            if table is None:
                raise ObjectNotFound("table", full)
            if single and isinstance(query, exp.Select) and _counts_rows_only(query, node):
                counted = self.row_count(table)
                if counted is not None:
                    stats["blobs_total"] += counted[1]
                    _answer_count(query, counted[0])  # the reference goes with the FROM clause
                    continue
            name = f"__floe_t{len(tables)}"
            predicates = _predicates(query, node, table) if single else []
            columns = _read_columns(query, node, table, whole) + offsets.get(id(node), [])
            tables[name] = self.scan(table, predicates, columns, stats)
            _point(node, name, ours)
        _check_resolved(query, ours)
        (bounds if bounds is not None else ValueBounds(self.settings.query)).bound(query)
        try:
            return query.sql(dialect="duckdb"), tables
        except Exception as exc:
            # sqlglot's DuckDB generator can fail on a shape it does not expect (DATE_PART with one
            # argument raised AttributeError): any failure there means the query cannot be run here,
            # which is the user's error to fix, not a server fault.
            raise CompilationError(f"SQL compilation error: this query cannot be run ({exc})") from exc

    def _run(self, query: exp.Expr, check: Check, context: Mapping[str, str], sink: RowSink | None) -> Result:
        limits = self.settings.query
        stats = {"blobs_total": 0, "blobs_scanned": 0}
        calls = ExternalCalls(self.catalog, self.defaults, check)
        shape = ResultShape()
        bounds = ValueBounds(limits)
        sql, tables = self.compile(query, stats, check, calls, shape, bounds)
        con = self._databases.take()
        functions = [*bounds.register(con), *calls.bound]
        if calls.bound:
            # The statement's time limit also cuts remote calls short: DuckDB's interrupt cannot
            # stop a Python function waiting for an answer.
            deadline = time.monotonic() + limits.timeout_s
            calls.register(con, self.caller(), str(uuid.uuid4()), context, deadline)
        cancel = _Cancel(con)
        timer = threading.Timer(limits.timeout_s, cancel.time_up)
        if sink is not None:
            sink.watch(cancel.abandon)
        clean = False
        try:
            for name, data in tables.items():
                con.register(name, data)
            deadline = time.monotonic() + limits.timeout_s
            timer.start()
            with self._failures(cancel, calls, bounds):
                cur = con.execute(sql)
            names = shape.names([d[0].upper() for d in cur.description or []])
            if sink is not None:
                streamed = self._stream(cur, names, stats, sink, cancel, calls, deadline, shape, bounds)
                clean = True
                return streamed
            with self._failures(cancel, calls, bounds):
                fetched = cur.fetchmany(limits.max_result_rows + 1)
            if len(fetched) > limits.max_result_rows:
                raise SqlError(
                    f"The result has more than {limits.max_result_rows} rows (setting "
                    "query.max_result_rows, FLOE_QUERY__MAX_RESULT_ROWS); add a LIMIT, filter or "
                    "aggregate, or stream it: `floe sql` streams results, as does the API with "
                    '"stream": true.',
                    code="000603",
                    sql_state="54000",
                )
            bounds.check_rows(fetched, names)
            rows = [shape.row(row, jsonable) for row in fetched]
            clean = True
            return Result(names, rows, stats)
        finally:
            timer.cancel()
            cancel.close(
                functools.partial(self._databases.give_back, tables=list(tables), functions=functions)
                if clean
                else None
            )

    def _stream(
        self,
        cur: duckdb.DuckDBPyConnection,
        names: list[str],
        stats: dict[str, Any],
        sink: RowSink,
        cancel: _Cancel,
        calls: ExternalCalls,
        deadline: float,
        shape: ResultShape | None = None,
        bounds: ValueBounds | None = None,
    ) -> Result:
        """Hand the result to ``sink`` a page at a time. DuckDB's result streams: a page is fetched
        (and the tables read for it) only once the sink took the one before, so the rows held here
        are one page, whatever the result's size; a sink that stays full runs into the deadline.

        The first page is fetched before the columns go out: DuckDB runs a query as it is fetched,
        so a statement that fails at once (a sort out of memory, a bad value in the first rows)
        still fails before the answer has started, as an unstreamed one does."""
        limits = self.settings.query
        shape = shape or ResultShape()
        bounds = bounds or ValueBounds(limits)
        with self._failures(cancel, calls, bounds):
            fetched = cur.fetchmany(limits.page_rows)
            bounds.check_rows(fetched, names)
        sink.start(names)
        while fetched:
            try:
                sink.page([shape.row(row, jsonable) for row in fetched], deadline - time.monotonic())
            except TimeoutError:
                raise _timed_out(limits.timeout_s) from None
            if cancel.abandoned.is_set():
                raise _abandoned()
            with self._failures(cancel, calls, bounds):
                fetched = cur.fetchmany(limits.page_rows)
                bounds.check_rows(fetched, names)
        return Result(names, [], stats)

    @contextlib.contextmanager
    def _failures(self, cancel: _Cancel, calls: ExternalCalls, bounds: ValueBounds) -> Iterator[None]:
        """DuckDB's errors as the statement's: its time limit, a reader gone, a failed remote call,
        a value past its bounds, memory, or DuckDB's own message."""
        limits = self.settings.query
        try:
            yield
        except duckdb.Error as exc:
            if cancel.timed_out.is_set() or calls.timed_out():
                raise _timed_out(limits.timeout_s) from None
            if cancel.abandoned.is_set():
                raise _abandoned() from None
            if (failed := calls.error()) is not None:
                raise failed from None
            if (refused := bounds.refused(exc)) is not None:
                raise refused from None
            if isinstance(exc, duckdb.OutOfMemoryException):
                raise SqlError(
                    f"The query needs more memory than query.memory_limit ({limits.memory_limit}, "
                    "FLOE_QUERY__MEMORY_LIMIT) allows; filter or aggregate more, or raise the limit.",
                    code="000603",
                    sql_state="53200",
                ) from None
            raise SqlError(_duck_message(exc), code="002003", sql_state="42000") from exc

    @staticmethod
    def _name_outputs(query: exp.Expr) -> None:
        """Name unaliased projections as Snowflake does: the expression text, upper-cased."""
        if not isinstance(query, exp.Select):
            return
        named: list[exp.Expr] = []
        for proj in query.expressions:
            if isinstance(proj, exp.Alias | exp.Star) or (
                isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star)
            ):
                named.append(proj)
            elif isinstance(proj, exp.Column):
                named.append(exp.alias_(proj, proj.name.upper(), quoted=True))
            else:
                named.append(exp.alias_(proj, proj.sql("snowflake").upper(), quoted=True))
        query.set("expressions", named)


def _duck_message(exc: Exception) -> str:
    text = str(exc).split("\n")[0]
    # A table scan that failed while DuckDB read it (a blob that no longer reads, S3 gone): DuckDB
    # names the generated relation and appends the start of a Python traceback; keep the cause.
    text = text.partition(". Detail: Python exception:")[0]
    head, found, rest = text.partition("reading the stream registered as '")
    if found:
        text = head + "reading a table failed: " + rest.partition("' failed: ")[2]
    return text.replace("Binder Error: ", "SQL compilation error: ").replace(
        "Parser Error: ", "syntax error: "
    )
