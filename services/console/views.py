"""What each console page shows, read with statements the signed-in user runs.

Nothing here reads the catalog or Redis: every value comes from a statement (SHOW PIPES,
SYSTEM$PIPE_STATUS, COPY_HISTORY, SHOW CHANNELS, SHOW TABLES, SELECT) passed to ``Run``, which the
routes bind to ``SqlExecutor.execute`` as the session's principal. So what a user sees, and what a
button may do, is decided by the executor's one privilege check (``services.access``), never a
second time here. A statement that is refused is shown with its error where its data would be.

Names go into statements as quoted identifiers and text as string literals (``ident``,
``literal``); a user's search is a substring matched with CONTAINS, never a pattern.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from floe.catalog.ddl import Defaults, parse_copy
from floe.catalog.names import Name
from floe.errors import FloeError
from services.answers import answer_for
from services.query import Result

Run = Callable[[str], Result]
"""Runs one statement as the signed-in user (``SqlExecutor.execute`` bound to its principal)."""

SPARK_MINUTES = 60
"""The sparklines' span: one point per minute of the last hour."""
STATUSES = ("Loaded", "Partially loaded", "Load failed", "Load in progress", "Load skipped")
"""COPY_HISTORY's statuses, which the history page filters by."""
WINDOWS = {"1h": 1, "24h": 24, "14d": 14 * 24}
"""The history page's time windows, in hours (COPY_HISTORY keeps 14 days)."""
MAX_SEARCH = 200
"""Longest file-name search the history page accepts (a longer one matches no stored path)."""
_FAILED = "STATUS IN ('Load failed', 'Partially loaded')"


def ident(*parts: str) -> str:
    """A (qualified) name as quoted identifiers: exactly these names, whatever their characters."""
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


def literal(text: str) -> str:
    """``text`` as a Snowflake string literal (a backslash escapes in those, as does a quote)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def refusal(exc: Exception) -> str:
    """A failed statement's error as `floe sql` prints it: ``code (sqlState): message``."""
    body = answer_for(exc, "/console").body()
    return f"{body['code']} ({body['sqlState']}): {body['message']}"


@dataclass(frozen=True)
class ObjectName:
    """A fully qualified name, as SHOW gives its parts."""

    database: str
    schema: str
    name: str

    @property
    def sql(self) -> str:
        """The name as a statement spells it."""
        return ident(self.database, self.schema, self.name)

    @property
    def shown(self) -> str:
        return f"{self.database}.{self.schema}.{self.name}"

    def query(self) -> dict[str, str]:
        """The name as a page's URL parameters."""
        return {"db": self.database, "schema": self.schema, "name": self.name}


@dataclass
class Timed:
    """Wall time the statements of one page took, which sets when it refreshes next."""

    started: float = field(default_factory=time.perf_counter)

    def seconds(self) -> float:
        return time.perf_counter() - self.started


# --------------------------------------------------------------------------------------- pipes


@dataclass
class Spark:
    """A pipe's last hour, a point per minute (oldest first)."""

    minutes: list[int]
    """Each minute's start, in epoch seconds."""
    files: list[int]
    rows: list[int]
    failed: int = 0
    """Files of the hour that failed or loaded partly."""
    last_error: str | None = None
    """The first error of the newest file that failed or loaded partly in the hour."""
    last_error_file: str | None = None


@dataclass
class PipeRow:
    """One line of the pipes page."""

    name: ObjectName
    table: ObjectName | None
    state: str
    pending: int | None = None
    oldest_pending: str | None = None
    last_ingested: str | None = None
    error: str | None = None
    """The pipe's own error or fault (SYSTEM$PIPE_STATUS), or why its status could not be read."""
    spark: Spark | None = None
    spark_error: str | None = None
    """Why the sparkline is missing: the COPY_HISTORY refusal (no SELECT on the table nor MONITOR)."""
    spark_pending: bool = False
    """The sparkline is not computed yet (the request's sparkline budget ran out first)."""

    @property
    def paused(self) -> bool:
        return self.state == "PAUSED"


def _table_of(definition: str, defaults: Defaults) -> ObjectName | None:
    """The table a pipe's COPY INTO loads, from the definition SHOW PIPES showed the user."""
    try:
        table = parse_copy(definition, defaults)["table"]
    except FloeError:
        return None
    return ObjectName(table.database, table.schema, table.name) if isinstance(table, Name) else None


def show_pipes(run: Run, defaults: Defaults, limit: int) -> tuple[list[PipeRow], int]:
    """SHOW PIPES, each with the table its definition loads: the ``limit`` created last, newest
    first, and how many the user sees in all."""
    records = run("SHOW PIPES").records()
    records.sort(key=lambda r: (str(r.get("created_on") or ""), r["name"]), reverse=True)
    out = []
    for r in records[:limit]:
        name = ObjectName(r["database_name"], r["schema_name"], r["name"])
        out.append(PipeRow(name, _table_of(r["definition"], defaults), r["execution_state"]))
    return out, len(records)


def _apply_status(pipe: PipeRow, answer: str) -> None:
    status = json.loads(answer)
    pipe.state = status.get("executionState", pipe.state)
    pipe.pending = status.get("pendingFileCount")
    pipe.oldest_pending = status.get("oldestPendingFilePath")
    pipe.last_ingested = status.get("lastIngestedTimestamp")
    pipe.error = status.get("error") or status.get("fault")


def pipe_statuses(run: Run, pipes: list[PipeRow]) -> None:
    """Fill in each pipe's SYSTEM$PIPE_STATUS: all in one SELECT, or, when that is refused (a pipe
    the user sees but may not monitor), one at a time, each refusal shown on its pipe."""
    if not pipes:
        return
    calls = ", ".join(f"SYSTEM$PIPE_STATUS({literal(p.name.sql)}) AS S{i}" for i, p in enumerate(pipes))
    try:
        row = run(f"SELECT {calls}").rows[0]
    except Exception:  # noqa: BLE001 -- each pipe is asked alone below, and says its own refusal
        for pipe in pipes:
            try:
                _apply_status(pipe, run(f"SELECT SYSTEM$PIPE_STATUS({literal(pipe.name.sql)})").rows[0][0])
            except Exception as exc:  # noqa: BLE001 -- shown on the pipe's line
                pipe.error = refusal(exc)
        return
    for pipe, answer in zip(pipes, row, strict=True):
        _apply_status(pipe, answer)


def moment(value: str | dt.datetime) -> dt.datetime:
    """A timestamp of a result (the executor answers them as ISO 8601 text), aware, in UTC."""
    when = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(value)
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def minute_starts(now: dt.datetime) -> list[int]:
    """The start of each of the last ``SPARK_MINUTES`` minutes (the current one last), epoch s."""
    top = int(now.timestamp()) // 60 * 60
    return [top - 60 * k for k in range(SPARK_MINUTES - 1, -1, -1)]


def sparklines(run: Run, table: ObjectName, now: dt.datetime) -> dict[ObjectName, Spark]:
    """Files and rows loaded per minute over the last hour by each pipe of ``table``, from one
    COPY_HISTORY statement grouped by pipe and minute (so at most pipes x 60 rows come back)."""
    failed_at = f"IFF({_FAILED}, LAST_LOAD_TIME, NULL)"
    result = run(
        "SELECT PIPE_CATALOG_NAME AS D, PIPE_SCHEMA_NAME AS S, PIPE_NAME AS P, "
        "DATE_TRUNC('MINUTE', LAST_LOAD_TIME) AS M, "
        "COUNT_IF(STATUS IN ('Loaded', 'Partially loaded')) AS FILES, "
        "COALESCE(SUM(ROW_COUNT), 0) AS LOADED, COUNT_IF(" + _FAILED + ") AS FAILED, "
        f"MAX({failed_at}) AS ERROR_AT, MAX_BY(FIRST_ERROR_MESSAGE, {failed_at}) AS ERROR, "
        f"MAX_BY(FILE_NAME, {failed_at}) AS ERROR_FILE "
        "FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY("
        f"TABLE_NAME => {literal(table.sql)}, START_TIME => DATEADD(MINUTE, -{SPARK_MINUTES}, "
        "CURRENT_TIMESTAMP()))) WHERE LAST_LOAD_TIME IS NOT NULL GROUP BY 1, 2, 3, 4"
    )
    minutes = minute_starts(now)
    index = {m: i for i, m in enumerate(minutes)}
    out: dict[ObjectName, Spark] = {}
    newest: dict[ObjectName, dt.datetime] = {}
    for r in result.records():
        pipe = ObjectName(r["D"], r["S"], r["P"])
        spark = out.setdefault(pipe, Spark(minutes, [0] * len(minutes), [0] * len(minutes)))
        at = index.get(int(moment(r["M"]).timestamp()))
        if at is not None:
            spark.files[at] += int(r["FILES"])
            spark.rows[at] += int(r["LOADED"])
        spark.failed += int(r["FAILED"])
        failed = moment(r["ERROR_AT"]) if r["ERROR_AT"] is not None else None
        if failed is not None and (pipe not in newest or failed > newest[pipe]):
            newest[pipe] = failed
            spark.last_error, spark.last_error_file = r["ERROR"], r["ERROR_FILE"]
    return out


def attach_sparklines(
    pipes: list[PipeRow], by_table: dict[ObjectName, dict[ObjectName, Spark] | str], now: dt.datetime
) -> None:
    """Give each pipe its table's sparkline (an empty one if it loaded nothing in the hour), or the
    reason its table's history could not be read; a table missing from ``by_table`` is pending."""
    for pipe in pipes:
        found = by_table.get(pipe.table) if pipe.table is not None else None
        pipe.spark_pending = pipe.table is not None and pipe.table not in by_table
        if isinstance(found, str):
            pipe.spark_error = found
        elif found is not None:
            minutes = minute_starts(now)
            pipe.spark = found.get(pipe.name) or Spark(minutes, [0] * len(minutes), [0] * len(minutes))


def tables_of(pipes: Iterable[PipeRow]) -> list[ObjectName]:
    """The tables the pipes load, each once."""
    return sorted({p.table for p in pipes if p.table is not None}, key=lambda t: t.shown)


def set_paused(run: Run, pipe: ObjectName, paused: bool) -> str:
    """Pause or resume a pipe; the statement's answer (its refusal raises)."""
    value = "TRUE" if paused else "FALSE"
    return str(run(f"ALTER PIPE {pipe.sql} SET PIPE_EXECUTION_PAUSED = {value}").rows[0][0])


# ------------------------------------------------------------------------------------- history


@dataclass
class HistoryFilter:
    """What the history page's form asks for."""

    search: str = ""
    """A substring of the file name, matched without regard to case."""
    status: str = ""
    """One of ``STATUSES``, or '' for all."""
    window: str = "24h"
    """One of ``WINDOWS``."""

    @classmethod
    def of(cls, search: str | None, status: str | None, window: str | None) -> HistoryFilter:
        """The filter a request asks for; values outside the choices fall back to the defaults."""
        return cls(
            (search or "").strip()[:MAX_SEARCH],
            status if status in STATUSES else "",
            window if window in WINDOWS else "24h",
        )


@dataclass
class History:
    """A pipe's load history, newest first."""

    pipe: ObjectName
    table: ObjectName | None
    state: str
    files: list[dict[str, Any]]
    matched: int
    """Files that match the filter (``files`` holds at most ``console.history_rows`` of them)."""


def describe_pipe(run: Run, pipe: ObjectName, defaults: Defaults) -> tuple[ObjectName | None, str]:
    """The table a pipe loads and its execution state (DESC PIPE: refused as the pipe is)."""
    row = run(f"DESC PIPE {pipe.sql}").records()[0]
    return _table_of(row["definition"], defaults), str(row["execution_state"])


def history(run: Run, pipe: ObjectName, want: HistoryFilter, limit: int, defaults: Defaults) -> History:
    """The pipe's files in the window, filtered, newest first, with each one's first error."""
    table, state = describe_pipe(run, pipe, defaults)
    if table is None:
        return History(pipe, None, state, [], 0)
    where = []
    if want.search:
        where.append(f"CONTAINS(LOWER(FILE_NAME), LOWER({literal(want.search)}))")
    if want.status:
        where.append(f"STATUS = {literal(want.status)}")
    result = run(
        "SELECT FILE_NAME, STATUS, ROW_COUNT, ROW_PARSED, FILE_SIZE, ERROR_COUNT, FIRST_ERROR_MESSAGE, "
        "FIRST_ERROR_LINE_NUMBER, FIRST_ERROR_CHARACTER_POS, FIRST_ERROR_COLUMN_NAME, "
        "PIPE_RECEIVED_TIME, LAST_LOAD_TIME, COUNT(*) OVER () AS MATCHED "
        "FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY("
        f"TABLE_NAME => {literal(table.sql)}, "
        f"START_TIME => DATEADD(HOUR, -{WINDOWS[want.window]}, CURRENT_TIMESTAMP()), "
        f"PIPE_NAME => {literal(pipe.sql)}))"
        + (f" WHERE {' AND '.join(where)}" if where else "")
        + " ORDER BY COALESCE(LAST_LOAD_TIME, PIPE_RECEIVED_TIME) DESC, FILE_NAME"
        + f" LIMIT {int(limit)}"
    )
    files = result.records()
    return History(pipe, table, state, files, int(files[0]["MATCHED"]) if files else 0)


# ------------------------------------------------------------------------------------ channels


@dataclass
class TableChannels:
    """The channels that load one table."""

    table: ObjectName
    channels: list[dict[str, Any]]

    @property
    def rows_inserted(self) -> int:
        return sum(int(c["rows_inserted"] or 0) for c in self.channels)

    @property
    def errors(self) -> int:
        return sum(int(c["rows_error_count"] or 0) for c in self.channels)


def channels(run: Run) -> list[TableChannels]:
    """SHOW CHANNELS, grouped by table."""
    grouped: dict[ObjectName, list[dict[str, Any]]] = {}
    for r in run("SHOW CHANNELS").records():
        table = ObjectName(r["database_name"], r["schema_name"], r["table_name"])
        grouped.setdefault(table, []).append(r)
    return [TableChannels(t, grouped[t]) for t in sorted(grouped, key=lambda t: t.shown)]


# -------------------------------------------------------------------------------------- tables


@dataclass
class TableRow:
    """One line of the tables page."""

    name: ObjectName
    rows: int
    bytes: int
    owner: str
    blobs: int | None = None
    blobs_error: str | None = None
    """Why the blob count is missing: counting needs SELECT on the table."""


def show_tables(run: Run) -> list[TableRow]:
    """SHOW TABLES, each with its blob count from a ``SELECT COUNT(*)`` (answered from the table's
    manifest, which the statement's profile counts)."""
    out = []
    for r in run("SHOW TABLES").records():
        row = TableRow(
            ObjectName(r["database_name"], r["schema_name"], r["name"]), r["rows"], r["bytes"], r["owner"]
        )
        try:
            row.blobs = int(run(f"SELECT COUNT(*) FROM {row.name.sql}").stats.get("blobs_total", 0))
        except Exception as exc:  # noqa: BLE001 -- shown in the table's line
            row.blobs_error = refusal(exc)
        out.append(row)
    out.sort(key=lambda t: t.name.shown)
    return out


@dataclass
class Sample:
    """Some rows of one table, or why there are none."""

    table: ObjectName
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    error: str | None = None


def sample(run: Run, table: ObjectName, limit: int) -> Sample:
    """The first rows a ``SELECT *`` of the table answers."""
    try:
        result = run(f"SELECT * FROM {table.sql} LIMIT {int(limit)}")
    except Exception as exc:  # noqa: BLE001 -- shown where the rows would be
        return Sample(table, error=refusal(exc))
    return Sample(table, result.columns, result.rows)


# ----------------------------------------------------------------------------------------- SQL


@dataclass
class SqlAnswer:
    """What the SQL box shows of a statement."""

    statement: str
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    total: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0


def run_box(run: Run, statement: str, limit: int) -> SqlAnswer:
    """Run what the SQL box holds (one statement, or several separated by ';'); its first
    ``limit`` rows, or its error."""
    timer = Timed()
    try:
        result = run(statement)
    except Exception as exc:  # noqa: BLE001 -- the error is the answer the box shows
        return SqlAnswer(statement, error=refusal(exc), seconds=timer.seconds())
    return SqlAnswer(
        statement, result.columns, result.rows[:limit], len(result.rows), result.stats, None, timer.seconds()
    )
