"""Issue 9, items 1-3: SQL cannot read the server's files, whoever sends it, ACCOUNTADMIN included."""

from __future__ import annotations

import json

import pytest

from tests.conftest import Stack
from tests.security.attacks.caller import SqlCaller
from tests.security.attacks.sql_files import (
    file_targets,
    history_oracle,
    history_oracle_without_files,
    lateral_reads,
    secret_marks,
    sibling_cte,
)

pytestmark = pytest.mark.e2e


def assert_refused(status: int, body: dict[str, object], marks: list[str], statement: str) -> None:
    """A 422 compilation error that carries none of the secrets."""
    assert status == 422, (statement, body)
    assert body["success"] is False and str(body["message"]).startswith("SQL compilation error"), body
    text = json.dumps(body)
    leaked = [m for m in marks if m in text]
    assert not leaked, (statement, leaked)


@pytest.mark.parametrize("who", ["mallory", "admin"])
def test_table_functions_cannot_read_files(stack: Stack, who: str, request: pytest.FixtureRequest) -> None:
    caller: SqlCaller = request.getfixturevalue(who)
    marks = secret_marks(stack.settings)
    assert len(marks) >= 5  # the key files exist and their fragments are what we look for
    for statement in lateral_reads(file_targets(stack.settings)):
        status, body = caller.sql(statement)
        assert_refused(status, body, marks, statement)


@pytest.mark.parametrize("who", ["mallory", "admin"])
def test_a_sibling_cte_cannot_turn_into_a_file_read(
    stack: Stack, who: str, request: pytest.FixtureRequest
) -> None:
    caller: SqlCaller = request.getfixturevalue(who)
    marks = secret_marks(stack.settings)
    for path in [*file_targets(stack.settings)[:2], "/etc/passwd"]:
        statement = sibling_cte(path)
        status, body = caller.sql(statement)
        assert_refused(status, body, marks, statement)


def test_copy_history_bounds_are_no_oracle(stack: Stack, mallory: SqlCaller) -> None:
    table = f"{mallory.user}_t"
    marks = secret_marks(stack.settings)
    answers = set()
    # The first bytes differ ('-' for the PEM key, 'r' for /etc/passwd, base64 for the master key),
    # so an oracle would answer differently across these thresholds.
    for path in (
        stack.settings.encryption.master_key_file,
        stack.settings.auth.admin_key_file,
        "/etc/passwd",
    ):
        for threshold in (0, 46, 64, 100, 114, 255):
            statement = history_oracle(table, path, threshold)
            status, body = mallory.sql(statement)
            assert_refused(status, body, marks, statement)
            answers.add((status, body["code"], body["message"]))
    assert len(answers) == 1, answers
    bounds = set()
    for threshold in (0, 255):
        status, body = mallory.sql(history_oracle_without_files(table, threshold))
        assert status == 422 and "CURRENT_TIMESTAMP()" in str(body["message"]), body
        bounds.add(str(body["message"]).split("; got ")[0])
    assert len(bounds) == 1, bounds
    # The supported form still answers.
    status, body = mallory.sql(
        f"SELECT COUNT(*) AS n FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => '{table}', "
        "START_TIME => DATEADD(hours, -1, CURRENT_TIMESTAMP())))"
    )
    assert status == 200 and body["rows"] == [[0]], body
