"""Progress on stderr for `floe sql` (front/progress.py) and `floe put`: drawn only when stderr is a
terminal, and never in what stdout carries, so --json and piped output stay what scripts parse."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from floe.catalog.stage_commands import PutFiles
from front import cli as cli_module
from front.transfer import Caller, Meter, Outcome

pytestmark = pytest.mark.unit

COLUMNS = ["ID", "NAME"]
ROWS = [[i, f"n{i}"] for i in range(25)]
RECORDS = [dict(zip(COLUMNS, row, strict=True)) for row in ROWS]


def streamed(page_rows: int = 10) -> Iterator[dict[str, Any]]:
    yield {"columns": COLUMNS}
    for at in range(0, len(ROWS), page_rows):
        yield {"rows": ROWS[at : at + page_rows]}
    yield {"success": True, "rows": len(ROWS), "stats": {}}


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> StringIO:
    """stderr as a terminal: what the CLI draws there lands in the returned buffer."""
    screen = StringIO()
    monkeypatch.setattr(cli_module, "err", Console(file=screen, force_terminal=True, width=100))
    return screen


def sql(monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    monkeypatch.setattr(cli_module, "stream_sql", lambda settings, statement, **_: streamed())
    return CliRunner().invoke(cli_module.app, ["sql", *args])


def test_on_a_terminal_the_rows_received_show_on_stderr_and_stdout_stays_json(
    monkeypatch: pytest.MonkeyPatch, terminal: StringIO
) -> None:
    run = sql(monkeypatch, "--json", "SELECT * FROM big")
    assert run.exit_code == 0, run.output
    assert run.stdout == json.dumps(RECORDS) + "\n"
    drawn = terminal.getvalue()
    assert "25 rows received (SELECT * FROM big)" in drawn
    assert "\x1b[2K" in drawn  # the spinner's line is cleared when the statement is done


def test_on_a_terminal_a_table_result_keeps_its_rows_on_stdout(
    monkeypatch: pytest.MonkeyPatch, terminal: StringIO
) -> None:
    run = sql(monkeypatch, "SELECT * FROM big")
    assert run.exit_code == 0, run.output
    assert all(f"n{i}" in run.stdout for i in range(25)) and "rows received" not in run.stdout
    assert "rows received" in terminal.getvalue() and "n24" not in terminal.getvalue()


def test_without_a_terminal_nothing_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    run = sql(monkeypatch, "--json", "ALTER PIPE p REFRESH")
    assert run.exit_code == 0
    assert run.stdout == json.dumps(RECORDS) + "\n"
    assert run.stderr == ""
    run = sql(monkeypatch, "SELECT * FROM big")
    assert run.stderr == "25 rows\n"  # the count alone: no spinner, no control codes


def fake_put(statement: PutFiles, caller: Caller, meter: Meter | None = None) -> Outcome:
    """A PUT of two files that reports its bytes as the real one does."""
    assert meter is not None
    for name in ("a.csv", "b.csv"):
        meter.start(name, 1000)
        meter.advance(name, 600)
        meter.advance(name, 400)
        meter.done(name)
    columns = ["source", "target", "status"]
    return Outcome(columns, [["a.csv", "a.csv.gz", "UPLOADED"], ["b.csv", "b.csv.gz", "UPLOADED"]])


def test_put_draws_its_bars_on_a_terminal_only_and_json_stays_clean(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cli_module, "put", fake_put)
    expected = [
        {"source": "a.csv", "target": "a.csv.gz", "status": "UPLOADED"},
        {"source": "b.csv", "target": "b.csv.gz", "status": "UPLOADED"},
    ]
    source = f"file://{tmp_path}/*.csv"
    run = CliRunner().invoke(cli_module.app, ["put", source, "@s", "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout) == expected and run.stderr == ""

    screen = StringIO()
    monkeypatch.setattr(cli_module, "err", Console(file=screen, force_terminal=True, width=100))
    run = CliRunner().invoke(cli_module.app, ["put", source, "@s", "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout) == expected
    assert "total" in screen.getvalue()  # the bar of all the files, drawn on stderr
