"""Queries over loaded tables: Snowflake SQL transpiled by sqlglot, run by DuckDB over Arrow.

The API process keeps decrypted blobs in an LRU cache (blobs are immutable once committed), so a
small query answers in milliseconds without a Spark session. Before reading, the WHERE clause's
simple comparisons are checked against each blob's min/max statistics from the manifest, and blobs
that cannot hold a matching row are skipped. ``COPY_HISTORY`` and ``SYSTEM$PIPE_STATUS`` are
answered from load history and joined into the same DuckDB query.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import duckdb
import pyarrow as pa
import redis
from pyarrow import fs as pafs
from sqlglot import exp

from floe.aws import pyarrow_s3_kwargs
from floe.blobs import BlobCrypto, crypto_from_settings, read_blob
from floe.catalog import Catalog, Pipe, Table
from floe.catalog.ddl import Defaults, qualify
from floe.errors import CompilationError, ObjectNotFound, SqlError
from floe.history import COPY_HISTORY_STATUS, FileState, read_states
from floe.keys import Keys
from floe.settings import Settings
from floe.types import arrow_schema


@dataclass
class Result:
    """Rows of a statement, with upper-case column names as Snowflake returns them."""

    columns: list[str]
    rows: list[list[Any]]
    stats: dict[str, Any] = field(default_factory=dict)

    def records(self) -> list[dict[str, Any]]:
        """Rows as objects keyed by column name."""
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


def jsonable(value: Any) -> Any:
    """A JSON-friendly Python value."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() and "." not in str(value) else float(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return value


class BlobCache:
    """Decrypted blobs by name, least recently used evicted past a byte budget."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._items: OrderedDict[str, pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, name: str, load: Callable[[], pa.Table]) -> pa.Table:
        """The cached blob, loading it on a miss."""
        with self._lock:
            hit = self._items.get(name)
            if hit is not None:
                self._items.move_to_end(name)
                return hit
        table = load()
        with self._lock:
            self._items[name] = table
            self._bytes += table.nbytes
            while self._bytes > self.budget and len(self._items) > 1:
                _, old = self._items.popitem(last=False)
                self._bytes -= old.nbytes
        return table


_OPS: dict[type[exp.Expr], str] = {exp.EQ: "=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_FLIP = {"=": "=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}


def _predicates(where: exp.Expr | None) -> list[tuple[str, str, Any]]:
    """(column, op, literal) conjuncts of a WHERE clause that statistics can decide."""
    if where is None:
        return []
    out: list[tuple[str, str, Any]] = []
    for node in where.flatten() if isinstance(where, exp.And) else [where]:
        op = _OPS.get(type(node))
        if op is None:
            continue
        left, right = node.this, node.expression
        if isinstance(right, exp.Column) and isinstance(left, exp.Literal):
            left, right, op = right, left, _FLIP[op]
        if isinstance(left, exp.Column) and isinstance(right, exp.Literal):
            value: Any = right.this if right.is_string else float(right.this)
            out.append((left.name.upper(), op, value))
    return out


def _comparable(stat: Any, literal: Any) -> tuple[Any, Any] | None:
    if isinstance(literal, float) and isinstance(stat, int | float) and not isinstance(stat, bool):
        return float(stat), literal
    if isinstance(literal, str) and isinstance(stat, str):
        return stat.replace("T", " "), literal.replace("T", " ")
    if isinstance(literal, float) and isinstance(stat, str):
        try:
            return float(stat), literal  # decimals are kept as strings in the manifest
        except ValueError:
            return None
    return None


def may_match(stats: dict[str, dict[str, Any]], predicates: list[tuple[str, str, Any]]) -> bool:
    """False only when the statistics prove no row of the blob satisfies every predicate."""
    for column, op, literal in predicates:
        col = stats.get(column)
        if col is None or "min" not in col:
            continue
        lo = _comparable(col["min"], literal)
        hi = _comparable(col["max"], literal)
        if lo is None or hi is None:
            continue
        (mn, v), (mx, _) = lo, hi
        if (
            (op == "=" and (v < mn or v > mx))
            or (op == ">" and mx <= v)
            or (op == ">=" and mx < v)
            or (op == "<" and mn >= v)
            or (op == "<=" and mn > v)
        ):
            return False
    return True


COPY_HISTORY_SCHEMA = pa.schema(
    [
        ("FILE_NAME", pa.string()),
        ("STAGE_LOCATION", pa.string()),
        ("LAST_LOAD_TIME", pa.timestamp("ms", tz="UTC")),
        ("ROW_COUNT", pa.int64()),
        ("ROW_PARSED", pa.int64()),
        ("FILE_SIZE", pa.int64()),
        ("FIRST_ERROR_MESSAGE", pa.string()),
        ("FIRST_ERROR_LINE_NUMBER", pa.int64()),
        ("FIRST_ERROR_CHARACTER_POS", pa.int64()),
        ("FIRST_ERROR_COLUMN_NAME", pa.string()),
        ("ERROR_COUNT", pa.int64()),
        ("ERROR_LIMIT", pa.int64()),
        ("STATUS", pa.string()),
        ("TABLE_CATALOG_NAME", pa.string()),
        ("TABLE_SCHEMA_NAME", pa.string()),
        ("TABLE_NAME", pa.string()),
        ("PIPE_CATALOG_NAME", pa.string()),
        ("PIPE_SCHEMA_NAME", pa.string()),
        ("PIPE_NAME", pa.string()),
        ("PIPE_RECEIVED_TIME", pa.timestamp("ms", tz="UTC")),
    ]
)


def _ts(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def copy_history_row(state: FileState, table: Table, pipe: Pipe) -> dict[str, Any]:
    """One COPY_HISTORY row."""
    tdb, tschema, tname = table.name.split(".")
    pdb, pschema, pname = pipe.name.split(".")
    return {
        "FILE_NAME": state.path,
        "STAGE_LOCATION": state.stage_location,
        "LAST_LOAD_TIME": _ts(state.loaded_ms),
        "ROW_COUNT": state.rows_loaded if state.complete else None,
        "ROW_PARSED": state.rows_parsed,
        "FILE_SIZE": state.size,
        "FIRST_ERROR_MESSAGE": state.first_error,
        "FIRST_ERROR_LINE_NUMBER": state.first_error_line,
        "FIRST_ERROR_CHARACTER_POS": state.first_error_character,
        "FIRST_ERROR_COLUMN_NAME": state.first_error_column,
        "ERROR_COUNT": state.errors_seen,
        "ERROR_LIMIT": state.error_limit,
        "STATUS": COPY_HISTORY_STATUS[state.status],
        "TABLE_CATALOG_NAME": tdb,
        "TABLE_SCHEMA_NAME": tschema,
        "TABLE_NAME": tname,
        "PIPE_CATALOG_NAME": pdb,
        "PIPE_SCHEMA_NAME": pschema,
        "PIPE_NAME": pname,
        "PIPE_RECEIVED_TIME": _ts(state.received_ms),
    }


class QueryEngine:
    """Runs SELECT statements."""

    def __init__(
        self, settings: Settings, client: redis.Redis, catalog: Catalog, queue_arn: Callable[[], str]
    ):
        self.settings = settings
        self.redis = client
        self.keys = Keys(settings.redis.prefix)
        self.catalog = catalog
        self.defaults = Defaults(settings.database, settings.schema_name)
        self.cache = BlobCache(settings.api.query_cache_bytes)
        self._fs: pafs.S3FileSystem | None = None
        self._crypto: BlobCrypto | None = None
        self._queue_arn = queue_arn

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
            raw = cast(dict[bytes, bytes], self.redis.hgetall(self.keys.blobs(pipe_id)))
            blobs.extend(json.loads(v) for _, v in sorted(raw.items()))
        return blobs

    def table_data(
        self, table: Table, predicates: list[tuple[str, str, Any]], stats: dict[str, int]
    ) -> pa.Table:
        """The table's rows from the blobs its statistics do not rule out."""
        schema = arrow_schema(table)
        pieces: list[pa.Table] = []
        fs, crypto = self._blob_reader()
        for blob in self.manifest(table):
            stats["blobs_total"] += 1
            if not may_match(blob.get("stats", {}), predicates):
                continue
            stats["blobs_scanned"] += 1
            path = f"{self.settings.pipeline.tables_bucket}/{blob['name']}"
            pieces.append(self.cache.get(blob["name"], functools.partial(read_blob, fs, path, crypto)))
        if not pieces:
            return schema.empty_table()
        return pa.concat_tables([p.cast(schema) for p in pieces])

    def copy_history(self, call: exp.Anonymous, con: duckdb.DuckDBPyConnection) -> pa.Table:
        """INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => ..., START_TIME => ..., END_TIME => ...)."""
        args: dict[str, exp.Expr] = {}
        for kw in call.expressions:
            if isinstance(kw, exp.Kwarg):
                args[kw.this.name.upper()] = kw.expression
        if "TABLE_NAME" not in args or "START_TIME" not in args:
            raise CompilationError("COPY_HISTORY needs TABLE_NAME => '<table>' and START_TIME => <timestamp>")
        table = self.catalog.get(
            Table, str(qualify(str(cast(exp.Literal, args["TABLE_NAME"]).this), self.defaults))
        )

        def bound(name: str) -> dt.datetime | None:
            if name not in args:
                return None
            sql = f"SELECT CAST(({args[name].sql('duckdb')}) AS TIMESTAMPTZ)"
            cur = con.cursor()
            try:
                return cast(dt.datetime, cur.execute(sql).fetchall()[0][0])
            finally:
                cur.close()

        start, end = bound("START_TIME"), bound("END_TIME")
        since = 0 if start is None else int(start.timestamp() * 1000) - 86_400_000
        rows = []
        for pipe in self.catalog.pipes_for_table(table):
            for state in read_states(self.redis, self.keys, pipe.id, since):
                row = copy_history_row(state, table, pipe)
                when = row["LAST_LOAD_TIME"] or row["PIPE_RECEIVED_TIME"]
                if (start is None or when >= start) and (end is None or when < end):
                    rows.append(row)
        return pa.Table.from_pylist(rows, schema=COPY_HISTORY_SCHEMA)

    def pipe_status(self, name: str) -> str:
        """SYSTEM$PIPE_STATUS JSON."""
        pipe = self.catalog.get(Pipe, str(qualify(name, self.defaults)))
        queue = self.keys.queue(pipe.id)
        pending = int(cast(int, self.redis.xlen(queue)))
        status = {
            k.decode(): v.decode()
            for k, v in cast(dict[bytes, bytes], self.redis.hgetall(self.keys.status(pipe.id))).items()
        }
        table = self.catalog.find(Table, pipe.copy_spec.table)
        state = "PAUSED" if pipe.paused else "RUNNING"
        if table is None or table.id != pipe.table_id:
            state = "STOPPED_MISSING_TABLE"
        out: dict[str, Any] = {"executionState": state, "pendingFileCount": pending}
        if pending:
            first = cast(list[tuple[bytes, dict[bytes, bytes]]], self.redis.xrange(queue, count=1))
            if first:
                out["oldestPendingFilePath"] = first[0][1][b"path"].decode()
                out["oldestFileTimestamp"] = _iso(int(first[0][1].get(b"received", b"0")))
        if "lastIngestedTimestamp" in status:
            out["lastIngestedTimestamp"] = _iso(int(status["lastIngestedTimestamp"]))
            out["lastIngestedFilePath"] = status["lastIngestedFilePath"]
        if pipe.auto_ingest:
            out["notificationChannelName"] = self._queue_arn()
        return json.dumps(out, separators=(",", ":"))

    def run(self, query: exp.Expr) -> Result:
        """Execute one query."""
        query = query.copy()
        con = duckdb.connect(config={"threads": 2})
        stats = {"blobs_total": 0, "blobs_scanned": 0}
        try:
            self._name_outputs(query)
            for call in list(query.find_all(exp.Anonymous)):
                if call.name.upper() == "SYSTEM$PIPE_STATUS":
                    if not call.expressions or not isinstance(call.expressions[0], exp.Literal):
                        raise CompilationError("SYSTEM$PIPE_STATUS takes the pipe name as a string literal")
                    call.replace(exp.Literal.string(self.pipe_status(str(call.expressions[0].this))))
            for n, fn in enumerate(list(query.find_all(exp.TableFromRows))):
                inner = fn.this.expression if isinstance(fn.this, exp.Dot) else fn.this
                if not (isinstance(inner, exp.Anonymous) and inner.name.upper() == "COPY_HISTORY"):
                    raise CompilationError(f"unsupported table function {fn.this.sql('snowflake')}")
                alias = f"__copy_history_{n}"
                con.register(alias, self.copy_history(inner, con))
                fn.replace(exp.to_table(alias))
            ctes = {c.alias_or_name.upper() for c in query.find_all(exp.CTE)}
            tables = [
                t
                for t in query.find_all(exp.Table)
                if t.name.upper() not in ctes and not t.name.startswith("__")
            ]
            where = query.args.get("where") if len(tables) == 1 else None
            for i, node in enumerate(tables):
                parts = ".".join(p for p in (node.catalog, node.db, node.name) if p)
                table = self.catalog.find(Table, str(qualify(parts, self.defaults)))
                if table is None:
                    raise ObjectNotFound("table", str(qualify(parts, self.defaults)))
                alias = f"__t{i}"
                con.register(alias, self.table_data(table, _predicates(where), stats))
                node.replace(exp.alias_(exp.to_table(alias), node.alias_or_name, table=True))
            sql = query.sql(dialect="duckdb")
            try:
                cur = con.execute(sql)
                names = [d[0].upper() for d in cur.description or []]
                rows = [[jsonable(v) for v in row] for row in cur.fetchall()]
            except duckdb.Error as exc:
                raise SqlError(_duck_message(exc), code="002003", sql_state="42000") from exc
            return Result(names, rows, stats)
        finally:
            con.close()

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
    return text.replace("Binder Error: ", "SQL compilation error: ").replace(
        "Parser Error: ", "syntax error: "
    )


def _iso(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
