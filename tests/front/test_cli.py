"""`floe sql` (front/cli.py): its output formats, --profile, and how it reports a failed statement.

The API's answer is streamed (``front.client.stream_sql``): the tests hand the command the lines
an answer would bring, a page at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from front import cli as cli_module
from front.client import ApiUnavailable, StatementRejected

pytestmark = pytest.mark.unit

BODY = {
    "success": True,
    "columns": ["ID"],
    "rows": [[23]],
    "stats": {"blobs_total": 50, "blobs_scanned": 1},
}


def streamed(
    body: dict[str, Any], page_rows: int = 2, failure: Exception | None = None
) -> Iterator[dict[str, Any]]:
    """The lines of ``body`` as the API streams them: columns, pages, then the trailer or ``failure``."""
    yield {"columns": body["columns"]}
    for at in range(0, len(body["rows"]), page_rows):
        yield {"rows": body["rows"][at : at + page_rows]}
    if failure is not None:
        raise failure
    yield {"success": True, "rows": len(body["rows"]), "stats": body["stats"]}


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`floe sql` with the API answering BODY (or, for DDL, no statistics)."""

    def fake_stream_sql(settings: Any, statement: str, **_: Any) -> Iterator[dict[str, Any]]:
        if statement.startswith("SELECT"):
            return streamed(BODY)
        return streamed({"success": True, "columns": ["STATUS"], "rows": [["done"]], "stats": {}})

    monkeypatch.setattr(cli_module, "stream_sql", fake_stream_sql)
    runner = CliRunner()
    return lambda *args: runner.invoke(cli_module.app, ["sql", *args])


def test_floe_sql_json_is_unchanged_without_profile(cli: Any) -> None:
    run = cli("--json", "SELECT id FROM t WHERE id = 23")
    assert run.exit_code == 0 and json.loads(run.stdout) == [{"ID": 23}]


def test_floe_sql_json_profile_carries_the_blob_counts(cli: Any) -> None:
    run = cli("--json", "--profile", "SELECT id FROM t WHERE id = 23")
    assert json.loads(run.stdout) == {
        "rows": [{"ID": 23}],
        "profile": {"blobs_total": 50, "blobs_scanned": 1},
    }
    run = cli("--json", "--profile", "CREATE TABLE x (a INT)")
    assert json.loads(run.stdout) == {"rows": [{"STATUS": "done"}], "profile": {}}


def test_floe_sql_profile_prints_a_line_on_stderr(cli: Any) -> None:
    run = cli("--profile", "SELECT id FROM t WHERE id = 23")
    assert run.exit_code == 0 and "23" in run.stdout
    assert "read 1 of 50 blobs (49 skipped by min/max statistics)" in run.stderr
    assert "blobs" not in cli("SELECT id FROM t WHERE id = 23").stderr


@pytest.mark.parametrize(
    "failure",
    [StatementRejected("002003 (02000): Table 'NOPE' does not exist."), ApiUnavailable("start it: make up")],
)
def test_a_failed_statement_exits_1_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    def failing_stream_sql(settings: Any, statement: str, **_: Any) -> Iterator[dict[str, Any]]:
        raise failure
        yield {}  # a generator, as stream_sql is: it fails at the first line

    monkeypatch.setattr(cli_module, "stream_sql", failing_stream_sql)
    run = CliRunner().invoke(cli_module.app, ["sql", "SELECT * FROM nope"])
    assert run.exit_code == 1, run.output
    assert str(failure) in run.stderr and run.stdout == ""


def test_role_reaches_the_api_request(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def recording_stream_sql(settings: Any, statement: str, **options: Any) -> Iterator[dict[str, Any]]:
        seen.update(options, statement=statement)
        return streamed({"columns": ["STATUS"], "rows": [["ok"]], "stats": {}})

    monkeypatch.setattr(cli_module, "stream_sql", recording_stream_sql)
    run = CliRunner().invoke(cli_module.app, ["sql", "--role", "analyst", "USE ROLE x; SELECT 1"])
    assert run.exit_code == 0, run.output
    assert seen["role"] == "analyst" and seen["statement"] == "USE ROLE x; SELECT 1"
    assert CliRunner().invoke(cli_module.app, ["sql", "SELECT 1"]).exit_code == 0
    assert seen["role"] is None


MANY = {
    "columns": ["ID", "NAME", "AT"],
    "rows": [[i, None if i % 3 else f"n{i}", f"2026-11-0{i % 9 + 1} 12:00:00"] for i in range(7)],
    "stats": {"blobs_total": 3, "blobs_scanned": 2},
}


def use(monkeypatch: pytest.MonkeyPatch, lines: Iterator[dict[str, Any]]) -> Any:
    monkeypatch.setattr(cli_module, "stream_sql", lambda settings, statement, **_: lines)
    return CliRunner().invoke(cli_module.app, ["sql", "--json", "SELECT * FROM t"])


@pytest.mark.parametrize("page_rows", [1, 2, 7, 100])
def test_floe_sql_json_writes_the_same_bytes_as_before_whatever_the_pages(
    monkeypatch: pytest.MonkeyPatch, page_rows: int
) -> None:
    """Written page by page, the array is byte for byte what json.dumps gave for the whole result."""
    records = [dict(zip(MANY["columns"], row, strict=True)) for row in MANY["rows"]]
    run = use(monkeypatch, streamed(MANY, page_rows))
    assert run.exit_code == 0, run.output
    assert run.stdout == json.dumps(records, default=str) + "\n"
    assert json.loads(run.stdout) == records
    monkeypatch.setattr(cli_module, "stream_sql", lambda settings, statement, **_: streamed(MANY, page_rows))
    run = CliRunner().invoke(cli_module.app, ["sql", "--json", "--profile", "SELECT * FROM t"])
    assert run.stdout == json.dumps({"rows": records, "profile": MANY["stats"]}, default=str) + "\n"
    run = use(monkeypatch, streamed({"columns": ["A"], "rows": [], "stats": {}}))
    assert run.stdout == "[]\n"


def test_floe_sql_prints_a_table_per_page_with_the_header_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_module, "stream_sql", lambda settings, statement, **_: streamed(MANY, 3))
    run = CliRunner().invoke(cli_module.app, ["sql", "SELECT * FROM t"])
    assert run.exit_code == 0, run.output
    assert run.stdout.count("NAME") == 1  # the header, on the first page's table only
    assert run.stdout.count("┏") == 1 and run.stdout.count("┌") == 2  # three tables: 3 + 3 + 1 rows
    for i in range(7):
        assert f"2026-11-0{i % 9 + 1} 12:00:00" in run.stdout
    assert "7 rows" in run.stderr


def test_a_failure_mid_stream_prints_what_came_then_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    timeout = StatementRejected("000630 (57014): Statement reached its statement timeout of 60 second(s)")
    monkeypatch.setattr(
        cli_module, "stream_sql", lambda settings, statement, **_: streamed(MANY, 3, failure=timeout)
    )
    run = CliRunner().invoke(cli_module.app, ["sql", "SELECT * FROM t"])
    assert run.exit_code == 1
    assert "n0" in run.stdout and "n6" in run.stdout  # every row that came is printed
    assert str(timeout) in run.stderr and "rows" not in run.stderr  # no count: the result is cut

    run = use(monkeypatch, streamed(MANY, 3, failure=timeout))
    assert run.exit_code == 1 and str(timeout) in run.stderr
    # What came is printed, and the array is left open: a cut result never parses as a whole one.
    records = [dict(zip(MANY["columns"], row, strict=True)) for row in MANY["rows"]]
    assert run.stdout == json.dumps(records, default=str)[:-1] + "\n"
    with pytest.raises(json.JSONDecodeError):
        json.loads(run.stdout)


COMMANDS = sorted(typer.main.get_command(cli_module.app).commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)], ids=["floe", *COMMANDS])
def test_every_help_renders(command: list[str]) -> None:
    """Typer renders help as Rich markup, where `@s[/path]` is a closing tag that matches nothing: a
    help text that forgets to escape it makes `--help` crash instead of print."""
    result = CliRunner().invoke(cli_module.app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_an_error_holding_markup_is_printed_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = StatementRejected("stage @s[/path] is not [bold]there[/bold]")
    monkeypatch.setattr(
        cli_module, "stream_sql", lambda settings, statement, **_: streamed(MANY, 3, failure=refused)
    )
    result = CliRunner().invoke(cli_module.app, ["sql", "LIST @s/path"])
    assert result.exit_code == 1, result.output
    assert "@s[/path] is not [bold]there[/bold]" in result.stderr
