"""`floe status`: the pipes' state in the terminal, as the web console's front page shows it.

Everything comes through the SQL endpoint as the user, with the user's privileges, as ``floe sql``
would run it: SHOW PIPES (the pipes the roles may see), SYSTEM$PIPE_STATUS of each (state, queue,
the pipe's own error) and, per table the pipes load, COPY_HISTORY over the last hour (files and
rows loaded per minute, failures, the last file error). A statement the user may not run leaves
its figures out and says why; it never stops the others. The API's reachability comes from its
public health route.

``collect`` gathers a ``Snapshot`` (the SQL runner is passed in, so tests hand it sample rows),
``render`` turns it into a rich table and ``Snapshot.to_json`` into what ``--json`` prints.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from floe.catalog.ddl import parse_copy
from floe.catalog.names import Defaults
from floe.errors import FloeError
from floe.settings import Settings
from floe.tls import api_base_url
from front.client import SqlFailed, http_client, records, run_sql

Sql = Callable[[str], list[dict[str, Any]]]
"""Runs one statement as the user and returns its rows as objects (upper-case column names)."""

WINDOW_MINUTES = 60
"""How far back the load figures look: the last hour, a minute per sparkline bar."""

_LOADED = ("Loaded", "Partially loaded")
_FAILED = ("Load failed",)
_BARS = "▁▂▃▄▅▆▇█"
_BARE = re.compile(r"[A-Z_][A-Z0-9_$]*")
"""An identifier that needs no quotes (anchored with fullmatch; linear)."""


@dataclass
class PipeStatus:
    """One pipe's line of the front page."""

    name: str
    """Fully qualified, as DATABASE.SCHEMA.PIPE."""
    state: str
    """SYSTEM$PIPE_STATUS's executionState (SHOW PIPES's execution_state if that was refused)."""
    pending: int | None = None
    """Files queued and not loaded yet (pendingFileCount)."""
    oldest_pending: str | None = None
    """When the oldest of them was received (ISO 8601), if any."""
    last_ingested: str | None = None
    """When a file last loaded (ISO 8601)."""
    loaded_last_hour: int | None = None
    """Files loaded (fully or partly) in the last hour; None when the history was refused."""
    rows_last_hour: int | None = None
    """Rows they brought."""
    failed_last_hour: int | None = None
    """Files whose load failed in the last hour."""
    per_minute: list[int] = field(default_factory=list)
    """Files loaded in each minute of the last hour, oldest first (WINDOW_MINUTES values)."""
    last_error: str | None = None
    """The pipe's own error (SYSTEM$PIPE_STATUS) or else its last file error of the hour, with the
    file, line and column."""
    unavailable: list[str] = field(default_factory=list)
    """Why a figure is missing (a statement refused, say)."""


@dataclass
class Snapshot:
    """What `floe status` shows at one moment."""

    taken: str
    """ISO 8601, UTC."""
    api: dict[str, Any]
    """url, reachable, and the health route's answer (``detail``)."""
    pipes: list[PipeStatus] = field(default_factory=list)
    error: str | None = None
    """Why there are no pipes to show (the API unreachable, SHOW PIPES refused)."""

    def to_json(self) -> str:
        """What --json prints: one object, on one line."""
        return json.dumps(asdict(self), default=str)


# ------------------------------------------------------------------------------------ gathering


def quoted_name(*parts: str) -> str:
    """A qualified name as SQL text: parts that are plain upper-case identifiers bare, the others
    double-quoted (SHOW PIPES gives the names as stored)."""
    return ".".join(p if _BARE.fullmatch(p) else '"' + p.replace('"', '""') + '"' for p in parts)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _iso_to_utc(value: object) -> dt.datetime | None:
    """A timestamp as the SQL endpoint or SYSTEM$PIPE_STATUS writes it, in UTC; None if not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)


def _table_of(row: dict[str, Any]) -> str | None:
    """The table a SHOW PIPES row's COPY loads, fully qualified; None if its definition does not
    parse here (the API parsed it once; a client of another version might not)."""
    try:
        spec = parse_copy(str(row["definition"]), Defaults(row["database_name"], row["schema_name"]))
    except (FloeError, KeyError, ValueError):
        return None
    return str(spec["table"])


def history_statements(table: str) -> tuple[str, str]:
    """The two COPY_HISTORY statements for one table's pipes: files and rows per pipe, status and
    minute over the last hour; and each pipe's last file error of the hour."""
    source = (
        "TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => "
        f"{_literal(quoted_name(*table.split('.', 2)))}, "
        f"START_TIME => DATEADD(minutes, -{WINDOW_MINUTES}, CURRENT_TIMESTAMP())))"
    )
    pipe = "PIPE_CATALOG_NAME AS D, PIPE_SCHEMA_NAME AS S, PIPE_NAME AS P"
    counts = (
        f"SELECT {pipe}, STATUS, DATE_TRUNC('MINUTE', LAST_LOAD_TIME) AS MINUTE, COUNT(*) AS FILES, "
        f"SUM(ROW_COUNT) AS ROWS_LOADED FROM {source} WHERE LAST_LOAD_TIME IS NOT NULL "
        "GROUP BY 1, 2, 3, 4, 5"
    )
    errors = (
        f"SELECT {pipe}, FILE_NAME, FIRST_ERROR_MESSAGE, FIRST_ERROR_LINE_NUMBER, "
        f"FIRST_ERROR_COLUMN_NAME, LAST_LOAD_TIME FROM {source} WHERE FIRST_ERROR_MESSAGE IS NOT NULL "
        "QUALIFY ROW_NUMBER() OVER (PARTITION BY PIPE_CATALOG_NAME, PIPE_SCHEMA_NAME, PIPE_NAME "
        "ORDER BY LAST_LOAD_TIME DESC) = 1"
    )
    return counts, errors


STATUSES_PER_STATEMENT = 100
"""SYSTEM$PIPE_STATUS calls in one SELECT: a statement costs the API a few milliseconds whatever
it does, so 400 pipes take 4 statements rather than 400."""
TABLES_PER_STATEMENT = 10
"""Tables whose COPY_HISTORY one statement reads (a UNION ALL of the per-table statements). The
API's cost per table was least at 10 (5.6 ms, against 10 ms alone and 10 ms at 25: compiling a
statement grows faster than its size)."""


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def pipe_statuses(sql: Sql, pipes: dict[str, str]) -> dict[str, dict[str, Any] | str]:
    """Each pipe's SYSTEM$PIPE_STATUS object (``pipes``: name -> its quoted name), or why it could
    not be read; many pipes a statement, and one by one in a statement that was refused."""
    out: dict[str, dict[str, Any] | str] = {}
    for chunk in _chunks(list(pipes), STATUSES_PER_STATEMENT):
        calls = ", ".join(f"SYSTEM$PIPE_STATUS({_literal(pipes[n])}) AS S{i}" for i, n in enumerate(chunk))
        try:
            (row,) = sql(f"SELECT {calls}")
            answers: list[tuple[str, Any]] = [(n, row[f"S{i}"]) for i, n in enumerate(chunk)]
        except SqlFailed:
            answers = []
            for name in chunk:  # one of them refused: ask one by one, to say which
                try:
                    (first,) = sql(f"SELECT SYSTEM$PIPE_STATUS({_literal(pipes[name])}) AS S")
                    answers.append((name, first["S"]))
                except SqlFailed as exc:
                    out[name] = str(exc)
        for name, text in answers:
            try:
                status = json.loads(text)
                out[name] = status if isinstance(status, dict) else "the answer is not a JSON object"
            except (ValueError, TypeError):
                out[name] = "the answer is not a JSON object"
    return out


def _histories(sql: Sql, tables: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``history_statements`` rows of these tables, in two statements."""
    counts, errors = zip(*(history_statements(t) for t in tables), strict=True)
    return (
        sql(" UNION ALL ".join(f"({s})" for s in counts)),
        sql(" UNION ALL ".join(f"({s})" for s in errors)),
    )


def build_pipes(
    shown: list[dict[str, Any]],
    statuses: dict[str, dict[str, Any] | str],
    counts: list[dict[str, Any]],
    errors: list[dict[str, Any]],
    now: dt.datetime,
    refused: dict[str, str] | None = None,
) -> list[PipeStatus]:
    """The front page's lines from the statements' rows: ``shown`` SHOW PIPES's; ``statuses`` per
    pipe its SYSTEM$PIPE_STATUS object (or why it could not be read); ``counts`` and ``errors`` the
    ``history_statements`` rows of every table; ``refused`` per pipe why its history is missing."""
    start = now - dt.timedelta(minutes=WINDOW_MINUTES)
    out: list[PipeStatus] = []
    for row in shown:
        name = ".".join((row["database_name"], row["schema_name"], row["name"]))
        p = PipeStatus(name=name, state=str(row.get("execution_state") or "UNKNOWN"))
        status = statuses.get(name)
        if isinstance(status, dict):
            p.state = str(status.get("executionState") or p.state)
            p.pending = _int(status.get("pendingFileCount"))
            p.oldest_pending = status.get("oldestFileTimestamp")
            p.last_ingested = status.get("lastIngestedTimestamp")
            p.last_error = status.get("error") or status.get("fault")
        elif isinstance(status, str):
            p.unavailable.append(f"SYSTEM$PIPE_STATUS: {status}")
        if refused and name in refused:
            p.unavailable.append(f"COPY_HISTORY: {refused[name]}")
        else:
            p.loaded_last_hour = p.rows_last_hour = p.failed_last_hour = 0
            p.per_minute = [0] * WINDOW_MINUTES
        out.append(p)
    by_name = {p.name: p for p in out}
    for r in counts:
        counted = by_name.get(".".join((r["D"], r["S"], r["P"])))
        if counted is None or counted.loaded_last_hour is None:
            continue
        files = _int(r.get("FILES")) or 0
        if r.get("STATUS") in _LOADED:
            counted.loaded_last_hour += files
            counted.rows_last_hour = (counted.rows_last_hour or 0) + (_int(r.get("ROWS_LOADED")) or 0)
            minute = _iso_to_utc(r.get("MINUTE"))
            if minute is not None:
                at = int((minute - start).total_seconds() // 60)
                counted.per_minute[min(max(at, 0), WINDOW_MINUTES - 1)] += files
        elif r.get("STATUS") in _FAILED:
            counted.failed_last_hour = (counted.failed_last_hour or 0) + files
    for r in errors:
        failing = by_name.get(".".join((r["D"], r["S"], r["P"])))
        if failing is None or failing.last_error:  # the pipe's own error first: it holds the pipe up
            continue
        where = ", ".join(
            f"{label} {value}"
            for label, value in (
                ("line", r.get("FIRST_ERROR_LINE_NUMBER")),
                ("column", r.get("FIRST_ERROR_COLUMN_NAME")),
            )
            if value is not None
        )
        failing.last_error = f"{r.get('FILE_NAME')}: {r.get('FIRST_ERROR_MESSAGE')}" + (
            f" ({where})" if where else ""
        )
    return out


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def api_health(settings: Settings, timeout: float = 5.0) -> dict[str, Any]:
    """Whether the API answers, from its public health routes (no token): /readyz when the API has
    it (Redis, S3 and the Spark job), else /health."""
    base = api_base_url(settings)
    out: dict[str, Any] = {"url": base, "reachable": False, "detail": None}
    try:
        http = http_client(settings)
    except SqlFailed as exc:
        out["detail"] = str(exc)
        return out
    try:
        for route in ("/readyz", "/health"):
            resp = http.get(base + route, timeout=timeout)
            if resp.status_code in (401, 403, 404):  # not a public route of this API's version
                continue
            out["reachable"] = True
            out["route"] = route
            out["ready"] = resp.status_code == 200
            with contextlib.suppress(ValueError):
                out["detail"] = resp.json()
            if out["detail"] is None:
                out["detail"] = resp.text[:200]
            break
    except httpx.HTTPError as exc:
        out["detail"] = f"{type(exc).__name__}: {exc}"
    return out


def collect(settings: Settings, sql: Sql, like: str | None = None) -> Snapshot:
    """One snapshot: the API's health, then the pipes' statements, each run as the user."""
    now = dt.datetime.now(dt.UTC)
    snap = Snapshot(taken=now.isoformat(timespec="seconds"), api=api_health(settings))
    try:
        shown = sql("SHOW PIPES" + (f" LIKE {_literal(like)}" if like else ""))
    except SqlFailed as exc:
        snap.error = str(exc)
        return snap
    tables: dict[str, list[str]] = {}
    pipes: dict[str, str] = {}
    for row in shown:
        parts = (row["database_name"], row["schema_name"], row["name"])
        pipes[".".join(parts)] = quoted_name(*parts)
        table = _table_of(row)
        if table is not None:
            tables.setdefault(table, []).append(".".join(parts))
    statuses = pipe_statuses(sql, pipes)
    counts: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    refused: dict[str, str] = {}
    for chunk in _chunks(list(tables), TABLES_PER_STATEMENT):
        try:
            found = _histories(sql, chunk)
        except SqlFailed:
            found = None  # one table refused: ask per table, to say which
        for table in chunk if found is None else []:
            try:
                counts_of, errors_of = _histories(sql, [table])
            except SqlFailed as exc:
                refused.update(dict.fromkeys(tables[table], str(exc)))
            else:
                counts += counts_of
                errors += errors_of
        if found is not None:
            counts += found[0]
            errors += found[1]
    for row in shown:
        name = ".".join((row["database_name"], row["schema_name"], row["name"]))
        if not any(name in names for names in tables.values()):
            refused.setdefault(name, "its COPY statement names no table this client can read")
    snap.pipes = build_pipes(shown, statuses, counts, errors, now, refused)
    return snap


# ------------------------------------------------------------------------------------ rendering

_STATE_STYLE = {"RUNNING": "green", "PAUSED": "yellow"}
SPARK_MINUTES = 5
"""Minutes per sparkline character in the terminal: an hour in 12 characters (--json keeps
every minute)."""


def sparkline(values: Iterable[int]) -> str:
    """One character per value, scaled to the largest; a value of 0 is a blank."""
    values = list(values)
    top = max(values, default=0)
    if top <= 0:
        return " " * len(values)
    return "".join(" " if v <= 0 else _BARS[(v * len(_BARS) - 1) // top] for v in values)


def per_bucket(per_minute: list[int], minutes: int = SPARK_MINUTES) -> list[int]:
    """Per-minute counts summed ``minutes`` at a time, oldest first."""
    return [sum(per_minute[i : i + minutes]) for i in range(0, len(per_minute), minutes)]


def age(iso: str | None, now: dt.datetime) -> str:
    """How long ago ``iso`` was, shortly: 12s, 5m, 3h, 2d; '' for none."""
    at = _iso_to_utc(iso)
    if at is None:
        return ""
    seconds = max(0, int((now - at).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _figure(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _api_line(snap: Snapshot) -> Text:
    api = snap.api
    line = Text.assemble(("API ", "bold"), str(api.get("url")), " ")
    if not api.get("reachable"):
        line.append("unreachable", style="red")
        if api.get("detail"):
            line.append(f": {api['detail']}", style="dim")
    else:
        line.append(*(("ready", "green") if api.get("ready") else ("not ready", "yellow")))
        detail = api.get("detail")
        if isinstance(detail, dict):  # /readyz: {"status": ..., "checks": {"redis": "ok", ...}}
            flat = {k: v for k, v in detail.items() if k != "status" and not isinstance(v, dict | list)}
            for nested in (v for v in detail.values() if isinstance(v, dict)):
                flat.update({k: v for k, v in nested.items() if not isinstance(v, dict | list)})
            if flat:
                line.append(f" ({', '.join(f'{k} {v}' for k, v in flat.items())})", style="dim")
    taken = _iso_to_utc(snap.taken)
    line.append(f"   {taken:%H:%M:%S} UTC" if taken else "", style="dim")
    return line


WIDE = 130
"""Console columns from which the last errors fit in the table; a narrower one lists them below it."""


def render(snap: Snapshot, width: int = WIDE) -> RenderableType:
    """The front page for a console ``width`` columns wide: a line on the API, then a table of the
    pipes (or why there is none), with their last errors in it or, when narrow, under it."""
    now = _iso_to_utc(snap.taken) or dt.datetime.now(dt.UTC)
    head = _api_line(snap)
    if snap.error is not None:
        return Group(head, Text(snap.error, style="red"))
    if not snap.pipes:
        return Group(head, Text("No pipes (or none your roles may see).", style="dim"))
    wide = width >= WIDE
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("pipe", overflow="fold", min_width=12)
    table.add_column("state", no_wrap=True)
    table.add_column("pending\n(oldest)", justify="right", no_wrap=True)
    table.add_column("loaded 1h\n(rows)", justify="right", no_wrap=True)
    table.add_column("failed\n1h", justify="right", no_wrap=True)
    table.add_column(f"files per\n{SPARK_MINUTES} min", no_wrap=True)
    table.add_column("last\nload", justify="right", no_wrap=True)
    if wide:
        table.add_column("last error", overflow="fold", min_width=16)
    below: list[RenderableType] = []
    for p in snap.pipes:
        pending = _figure(p.pending)
        if p.pending and p.oldest_pending:
            pending += f"\n({age(p.oldest_pending, now)})"
        loaded = _figure(p.loaded_last_hour)
        if p.rows_last_hour is not None:
            loaded += f"\n({p.rows_last_hour:,})"
        error = Text(p.last_error or "", style="red")
        if p.unavailable:
            error.append(("; " if p.last_error else "") + "; ".join(p.unavailable), style="dim")
        cells: list[RenderableType] = [
            escape(p.name),
            Text(p.state, style=_STATE_STYLE.get(p.state, "red")),
            pending,
            loaded,
            Text(_figure(p.failed_last_hour), style="red" if p.failed_last_hour else ""),
            Text(sparkline(per_bucket(p.per_minute)) if p.per_minute else "", style="cyan"),
            age(p.last_ingested, now),
        ]
        if wide:
            cells.append(error)
        elif error:
            below.append(Text.assemble((p.name, "bold"), ": ", error))
        table.add_row(*cells)
    return Group(head, table, *below)


# ------------------------------------------------------------------------------------ the command


def status_command(
    settings: Settings,
    *,
    as_json: bool,
    watch: bool,
    interval: float,
    like: str | None,
    user: str | None,
    key_file: str | None,
    role: str | None,
    console: Console | None = None,
    sql: Sql | None = None,
) -> int:
    """`floe status`; the exit code (1 when the pipes could not be listed, once or, with --watch,
    in the last snapshot before Ctrl-C)."""
    out = console or Console()

    def run(statement: str) -> list[dict[str, Any]]:
        return records(run_sql(settings, statement, user=user, key_file=key_file, role=role))

    runner = sql or run
    if not watch:
        snap = collect(settings, runner, like)
        if as_json:
            _print_json(out, snap)
        else:
            out.print(render(snap, out.width))
        return 1 if snap.error is not None else 0
    return _watch(settings, runner, like, interval, as_json, out)


def _watch(
    settings: Settings, sql: Sql, like: str | None, interval: float, as_json: bool, out: Console
) -> int:
    """Refresh every ``interval`` seconds until Ctrl-C: in place on a terminal (rich Live), one
    snapshot after the other otherwise; with --json, a JSON object a line."""
    snap: Snapshot | None = None
    try:
        if as_json or not out.is_terminal:
            while True:
                snap = collect(settings, sql, like)
                if as_json:
                    _print_json(out, snap)
                else:
                    out.print(render(snap, out.width))
                out.file.flush()
                time.sleep(interval)
        with Live(console=out, auto_refresh=False, screen=False) as live:
            while True:
                snap = collect(settings, sql, like)
                live.update(
                    Group(
                        render(snap, out.width), Text(f"every {interval:g} s; Ctrl-C to stop", style="dim")
                    ),
                    refresh=True,
                )
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
    return 1 if snap is None or snap.error is not None else 0


def _print_json(out: Console, snap: Snapshot) -> None:
    """The snapshot's JSON as it is: never wrapped, highlighted or read as markup."""
    out.file.write(snap.to_json() + "\n")
    out.file.flush()
