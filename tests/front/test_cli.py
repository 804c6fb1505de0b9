"""`floe sql` (front/cli.py): its output formats, --profile, and how it reports a failed statement."""

from __future__ import annotations

import json
from typing import Any

import pytest
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


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`floe sql` with the API answering BODY (or, for DDL, no statistics)."""

    def fake_run_sql(settings: Any, statement: str, **_: Any) -> dict[str, Any]:
        if statement.startswith("SELECT"):
            return BODY
        return {"success": True, "columns": ["STATUS"], "rows": [["done"]], "stats": {}}

    monkeypatch.setattr(cli_module, "run_sql", fake_run_sql)
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
    def failing_run_sql(settings: Any, statement: str, **_: Any) -> dict[str, Any]:
        raise failure

    monkeypatch.setattr(cli_module, "run_sql", failing_run_sql)
    run = CliRunner().invoke(cli_module.app, ["sql", "SELECT * FROM nope"])
    assert run.exit_code == 1, run.output
    assert str(failure) in run.stderr and run.stdout == ""


def test_role_reaches_the_api_request(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def recording_run_sql(settings: Any, statement: str, **options: Any) -> dict[str, Any]:
        seen.update(options, statement=statement)
        return {"success": True, "columns": ["STATUS"], "rows": [["ok"]], "stats": {}}

    monkeypatch.setattr(cli_module, "run_sql", recording_run_sql)
    run = CliRunner().invoke(cli_module.app, ["sql", "--role", "analyst", "USE ROLE x; SELECT 1"])
    assert run.exit_code == 0, run.output
    assert seen["role"] == "analyst" and seen["statement"] == "USE ROLE x; SELECT 1"
    assert CliRunner().invoke(cli_module.app, ["sql", "SELECT 1"]).exit_code == 0
    assert seen["role"] is None
