"""`floe status` (front/status.py): the front page built from the rows of SHOW PIPES,
SYSTEM$PIPE_STATUS and COPY_HISTORY, its rendering, and the command's --json and --watch output.
The real command against a running stack: tests/e2e/test_journey_and_status.py."""

from __future__ import annotations

import datetime as dt
import json
import re
from io import StringIO
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from floe.settings import Settings
from front import cli as cli_module
from front import status as status_module
from front.client import ApiUnavailable, StatementRejected
from front.status import (
    STATUSES_PER_STATEMENT,
    TABLES_PER_STATEMENT,
    WINDOW_MINUTES,
    PipeStatus,
    Snapshot,
    build_pipes,
    collect,
    history_statements,
    per_bucket,
    quoted_name,
    render,
    sparkline,
)

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 11, 28, 16, 0, tzinfo=dt.UTC)


def show(
    name: str, definition: str, state: str = "RUNNING", db: str = "FLOE", schema: str = "PUBLIC"
) -> dict[str, Any]:
    return {
        "name": name,
        "database_name": db,
        "schema_name": schema,
        "definition": definition,
        "execution_state": state,
    }


def count(pipe: str, status: str, minute: str | None, files: int, rows: int) -> dict[str, Any]:
    return {
        "D": "FLOE",
        "S": "PUBLIC",
        "P": pipe,
        "STATUS": status,
        "MINUTE": minute,
        "FILES": files,
        "ROWS_LOADED": rows,
    }


def failure(pipe: str, file: str, message: str, line: int | None, column: str | None) -> dict[str, Any]:
    return {
        "D": "FLOE",
        "S": "PUBLIC",
        "P": pipe,
        "FILE_NAME": file,
        "FIRST_ERROR_MESSAGE": message,
        "FIRST_ERROR_LINE_NUMBER": line,
        "FIRST_ERROR_COLUMN_NAME": column,
        "LAST_LOAD_TIME": "2026-11-28 15:58:00+00:00",
    }


SHOWN = [
    show("ORDERS", "COPY INTO orders FROM @s"),
    show("EVENTS", "COPY INTO events FROM @s", state="PAUSED"),
    show("SECRET", "COPY INTO hidden FROM @s"),
]
STATUSES: dict[str, dict[str, Any] | str] = {
    "FLOE.PUBLIC.ORDERS": {
        "executionState": "RUNNING",
        "pendingFileCount": 3,
        "oldestFileTimestamp": "2026-11-28T15:58:30.000Z",
        "lastIngestedTimestamp": "2026-11-28T15:59:50.000Z",
    },
    "FLOE.PUBLIC.EVENTS": {
        "executionState": "STALLED_COMPILATION_ERROR",
        "pendingFileCount": 0,
        "error": "External function F no longer exists.",
    },
    "FLOE.PUBLIC.SECRET": "003001 (42501): Insufficient privileges to operate on pipe 'SECRET'",
}
COUNTS = [
    count("ORDERS", "Loaded", "2026-11-28 15:01:00+00:00", 4, 400),
    count("ORDERS", "Partially loaded", "2026-11-28 15:59:00+00:00", 1, 9),
    count("ORDERS", "Load failed", "2026-11-28 15:59:00+00:00", 2, 0),
    count("ORDERS", "Load skipped", "2026-11-28 15:30:00+00:00", 5, 0),
    count("EVENTS", "Load failed", "2026-11-28 15:10:00+00:00", 1, 0),
]
ERRORS = [
    failure("ORDERS", "a/b.csv", "Numeric value 'x' is not recognized", 3, '"ORDERS"["AMOUNT":2]'),
    failure("EVENTS", "e.json", "Error parsing JSON", 1, None),
]


def test_the_front_page_is_built_from_the_statements_rows() -> None:
    refused = {"FLOE.PUBLIC.SECRET": "003001 (42501): Insufficient privileges on table HIDDEN"}
    orders, events, secret = build_pipes(SHOWN, STATUSES, COUNTS, ERRORS, NOW, refused)

    assert (orders.name, orders.state, orders.pending) == ("FLOE.PUBLIC.ORDERS", "RUNNING", 3)
    assert orders.oldest_pending == "2026-11-28T15:58:30.000Z"
    # Loaded counts the partial load too; the skipped files count nowhere.
    assert (orders.loaded_last_hour, orders.rows_last_hour, orders.failed_last_hour) == (5, 409, 2)
    assert len(orders.per_minute) == WINDOW_MINUTES
    assert orders.per_minute[1] == 4 and orders.per_minute[59] == 1 and sum(orders.per_minute) == 5
    assert (
        orders.last_error
        == 'a/b.csv: Numeric value \'x\' is not recognized (line 3, column "ORDERS"["AMOUNT":2])'
    )
    assert orders.unavailable == []

    # The pipe's own error is the one that holds it up: it comes before its last file error.
    assert (events.state, events.failed_last_hour) == ("STALLED_COMPILATION_ERROR", 1)
    assert events.last_error == "External function F no longer exists."

    # What the user may not read is left out, saying why; SHOW PIPES's state stands in.
    assert (secret.state, secret.pending, secret.loaded_last_hour, secret.per_minute) == (
        "RUNNING",
        None,
        None,
        [],
    )
    assert secret.unavailable == [
        "SYSTEM$PIPE_STATUS: 003001 (42501): Insufficient privileges to operate on pipe 'SECRET'",
        "COPY_HISTORY: 003001 (42501): Insufficient privileges on table HIDDEN",
    ]


def test_names_are_quoted_as_sql_needs_them() -> None:
    assert quoted_name("FLOE", "PUBLIC", "P_1$") == "FLOE.PUBLIC.P_1$"
    assert quoted_name("FLOE", "my schema", "Pipe") == 'FLOE."my schema"."Pipe"'
    counts, errors = history_statements("FLOE.it's.T")
    assert "TABLE_NAME => 'FLOE.\"it''s\".T'" in counts and "TABLE_NAME => 'FLOE.\"it''s\".T'" in errors
    assert "GROUP BY" in counts and "QUALIFY ROW_NUMBER()" in errors


def test_sparkline_scales_to_the_busiest_bucket() -> None:
    assert sparkline([0, 1, 4, 8]) == " ▁▄█"
    assert sparkline([0, 0]) == "  "
    assert per_bucket([1] * 60) == [5] * 12
    assert per_bucket([0] * 59 + [7], 5)[-1] == 7


def snapshot(pipes: list[PipeStatus]) -> Snapshot:
    checks = {"redis": "ok", "s3": "ok", "pipeline": "ok"}
    api = {
        "url": "http://127.0.0.1:8080",
        "reachable": True,
        "ready": True,
        "detail": {"status": "ready", "checks": checks},
    }
    return Snapshot(taken="2026-11-28T16:00:00+00:00", api=api, pipes=pipes)


def rendered(snap: Snapshot, width: int) -> str:
    console = Console(file=StringIO(), width=width, record=True)
    console.print(render(snap, width))
    return console.export_text()


def test_the_table_shows_each_pipe_with_its_last_error_in_or_below_it() -> None:
    pipes = build_pipes(SHOWN, STATUSES, COUNTS, ERRORS, NOW)
    wide = rendered(snapshot(pipes), 200)
    assert "API http://127.0.0.1:8080 ready (redis ok, s3 ok, pipeline ok)   16:00:00 UTC" in wide
    lines = {line.split()[0]: line for line in wide.splitlines() if line.startswith("FLOE.PUBLIC.")}
    assert "RUNNING" in lines["FLOE.PUBLIC.ORDERS"] and "Numeric value 'x'" in lines["FLOE.PUBLIC.ORDERS"]
    assert "10s" in lines["FLOE.PUBLIC.ORDERS"]  # the last load, ten seconds before the snapshot
    assert "STALLED_COMPILATION_ERROR" in lines["FLOE.PUBLIC.EVENTS"]
    assert "Insufficient privileges" in lines["FLOE.PUBLIC.SECRET"]

    narrow = rendered(snapshot(pipes), 80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert "FLOE.PUBLIC.ORDERS: a/b.csv: Numeric value 'x' is not recognized" in narrow.replace("\n", " ")
    assert "FLOE.PUBLIC.EVENTS: External function F no longer exists." in narrow


def test_an_unreachable_api_and_no_pipes_say_so() -> None:
    down = Snapshot(
        taken="2026-11-28T16:00:00+00:00",
        api={"url": "http://127.0.0.1:9", "reachable": False, "detail": "ConnectError: refused"},
        error="cannot reach the Floe API at http://127.0.0.1:9/api/v1/sql",
    )
    text = rendered(down, 120)
    assert "API http://127.0.0.1:9 unreachable: ConnectError: refused" in text
    assert "cannot reach the Floe API" in text
    assert "No pipes" in rendered(snapshot([]), 120)
    stalled = snapshot([])
    stalled.api.update(
        ready=False, detail={"status": "not ready", "checks": {"redis": "ok", "pipeline": "no heartbeat"}}
    )
    assert "API http://127.0.0.1:8080 not ready (redis ok, pipeline no heartbeat)" in rendered(stalled, 120)


class FakeSql:
    """The SQL endpoint as the user sees it: answers by statement, refusals as SqlFailed."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, statement: str) -> list[dict[str, Any]]:
        self.statements.append(statement)
        if statement.startswith("SHOW PIPES"):
            return SHOWN
        if statement.startswith("SELECT SYSTEM$PIPE_STATUS"):
            # One call or many in one SELECT; any refused refuses the statement, as in Floe.
            row: dict[str, Any] = {}
            for name, alias in re.findall(r"SYSTEM\$PIPE_STATUS\('([^']*)'\) AS (\w+)", statement):
                status = STATUSES[name]
                if isinstance(status, str):
                    raise StatementRejected(status)
                row[alias] = json.dumps(status)
            return [row]
        if "'FLOE.PUBLIC.HIDDEN'" in statement:
            raise StatementRejected("003001 (42501): Insufficient privileges on table HIDDEN")
        out: list[dict[str, Any]] = []
        for part in statement.split(" UNION ALL "):  # one table's statement each, in parentheses
            table = part.split("TABLE_NAME => '")[1].split("'")[0].rsplit(".", 1)[1]
            pipe = {"ORDERS": "ORDERS", "EVENTS": "EVENTS"}[table]
            counts = "SELECT PIPE_CATALOG_NAME AS D, PIPE_SCHEMA_NAME AS S, PIPE_NAME AS P, STATUS"
            rows = COUNTS if part.lstrip("(").startswith(counts) else ERRORS
            out += [r for r in rows if r["P"] == pipe]
        return out


def answer(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The SQL endpoint's JSON answer holding ``rows``."""
    columns = list(rows[0]) if rows else []
    return {"success": True, "columns": columns, "rows": [[r[c] for c in columns] for r in rows]}


@pytest.fixture
def healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        status_module,
        "api_health",
        lambda settings: {"url": "http://api", "reachable": True, "ready": True, "detail": {"status": "ok"}},
    )


def test_collect_runs_the_statements_as_given_and_keeps_going_past_refusals(healthy: None) -> None:
    sql = FakeSql()
    snap = collect(Settings(), sql, like="%")
    assert snap.error is None
    assert sql.statements[0] == "SHOW PIPES LIKE '%'"
    assert [p.name for p in snap.pipes] == ["FLOE.PUBLIC.ORDERS", "FLOE.PUBLIC.EVENTS", "FLOE.PUBLIC.SECRET"]
    orders, _, secret = snap.pipes
    assert (orders.pending, orders.failed_last_hour) == (3, 2)
    assert [u.split(":")[0] for u in secret.unavailable] == ["SYSTEM$PIPE_STATUS", "COPY_HISTORY"]
    # Every status in one statement, and as it was refused (SECRET's), each on its own; every
    # table's history in one statement, and as it was refused (HIDDEN's), a pair per table, the
    # refused table's first ending it.
    statuses = [s.count("SYSTEM$PIPE_STATUS") for s in sql.statements if "SYSTEM$PIPE_STATUS" in s]
    assert statuses == [3, 1, 1, 1]
    histories = [s.count("COPY_HISTORY") for s in sql.statements if "COPY_HISTORY" in s]
    assert histories == [3, 1, 1, 1, 1, 1]


def test_collect_takes_many_pipes_and_tables_a_statement(
    healthy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing refused: 250 pipes on 60 tables take 3 status and 12 history statements, not 370."""
    shown = [show(f"P{i}", f"COPY INTO t{i % 60} FROM @s") for i in range(250)]
    seen: list[str] = []

    def sql(statement: str) -> list[dict[str, Any]]:
        seen.append(statement)
        if statement.startswith("SHOW PIPES"):
            return shown
        if statement.startswith("SELECT SYSTEM$PIPE_STATUS"):
            aliases = re.findall(r" AS (S\d+)", statement)
            return [{a: json.dumps({"executionState": "RUNNING", "pendingFileCount": 1}) for a in aliases}]
        return []

    snap = collect(Settings(), sql)
    assert len(snap.pipes) == 250 and {(p.state, p.pending, p.unavailable == []) for p in snap.pipes} == {
        ("RUNNING", 1, True)
    }
    assert (STATUSES_PER_STATEMENT, TABLES_PER_STATEMENT) == (100, 10)
    assert len(seen) == 1 + 3 + 2 * 6
    tables = {t for s in seen for t in re.findall(r"TABLE_NAME => '[^']*\.(T\d+)'", s)}
    assert len(tables) == 60


def test_floe_status_json_is_one_clean_line_and_exit_1_when_the_api_is_away(
    healthy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sql = FakeSql()
    monkeypatch.setattr(status_module, "run_sql", lambda settings, statement, **_: answer(sql(statement)))
    run = CliRunner().invoke(cli_module.app, ["status", "--json"])
    assert run.exit_code == 0, run.output
    assert run.stdout.count("\n") == 1 and "\x1b" not in run.stdout
    doc = json.loads(run.stdout)
    assert doc["pipes"][0]["name"] == "FLOE.PUBLIC.ORDERS" and doc["error"] is None
    assert doc["api"]["reachable"] is True and doc["pipes"][0]["loaded_last_hour"] == 5

    plain = CliRunner().invoke(cli_module.app, ["status"])
    assert plain.exit_code == 0 and "FLOE.PUBLIC.ORDERS" in plain.stdout and "\x1b" not in plain.stdout

    def away(settings: Any, statement: str, **_: Any) -> dict[str, Any]:
        raise ApiUnavailable("cannot reach the Floe API at http://api/api/v1/sql")

    monkeypatch.setattr(status_module, "run_sql", away)
    run = CliRunner().invoke(cli_module.app, ["status", "--json"])
    assert run.exit_code == 1 and json.loads(run.stdout)["error"].startswith("cannot reach the Floe API")


def test_watch_with_json_prints_a_line_per_refresh_until_ctrl_c(
    healthy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    refreshes = iter(range(3))

    def runner(statement: str) -> list[dict[str, Any]]:
        if statement.startswith("SHOW PIPES") and next(refreshes) == 2:
            raise KeyboardInterrupt  # Ctrl-C during the third refresh
        return FakeSql()(statement)

    monkeypatch.setattr(status_module.time, "sleep", lambda seconds: None)
    out = StringIO()
    code = status_module.status_command(
        Settings(),
        as_json=True,
        watch=True,
        interval=1.0,
        like=None,
        user=None,
        key_file=None,
        role=None,
        console=Console(file=out),
        sql=runner,
    )
    assert code == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["pipes"] for line in lines)
