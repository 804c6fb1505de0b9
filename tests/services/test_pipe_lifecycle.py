"""A pipe's life after CREATE: ALTER PIPE ... SET | UNSET, CREATE OR ALTER PIPE, staleness, ownership
transfer while paused and SYSTEM$PIPE_FORCE_RESUME (services/pipe_lifecycle.py and its handlers in
services/sql.py). The rules alone are unit tests; the statements run on the SQL executor against
the real Redis. Parsing: tests/floe/catalog/test_alter_pipe.py."""

from __future__ import annotations

import re

import pytest

from floe.catalog import Pipe, now_ms
from floe.catalog.ddl import CreatePipe, parse
from floe.catalog.models import CopySpec
from floe.errors import CompilationError, ObjectNotFound, PermissionDenied, SqlError
from floe.history import read_state
from services.dedup import Deduper, FileRef
from services.pipe_lifecycle import (
    OWNERSHIP_TRANSFER,
    STALENESS,
    copy_text,
    fixed_changes,
    force_resume_options,
    pause_update,
    stale,
)
from services.sql import SqlExecutor
from tests.services.test_sql_access import ADMIN, make_user, run, status

DAY = 86_400_000
RETENTION = 14 * DAY


def pipe(**update: object) -> Pipe:
    base = Pipe(
        name="D.S.P",
        auto_ingest=True,
        copy_spec=CopySpec(table="D.S.T", stage="D.S.ST", sql="COPY INTO t FROM @st"),
        table_id="t",
        stage_url="s3://b/",
        owner="ETL",
    )
    return base.model_copy(update=update)


# ---------------------------------------------------------------------------------- the rules


@pytest.mark.unit
def test_an_auto_ingest_pipe_is_stale_once_paused_longer_than_the_retention() -> None:
    now = 100 * DAY
    assert not stale(pipe(paused=True, paused_ms=now - RETENTION), now, RETENTION)
    assert stale(pipe(paused=True, paused_ms=now - RETENTION - 1), now, RETENTION)
    # Only auto-ingest pipes go stale, and only paused ones.
    assert not stale(pipe(paused=True, paused_ms=0, auto_ingest=False), now, RETENTION)
    assert not stale(pipe(paused=False, paused_ms=0), now, RETENTION)


@pytest.mark.unit
def test_pausing_records_when_and_by_whom_and_resuming_checks_both() -> None:
    now = 50 * DAY
    running = pipe()
    paused = running.model_copy(update=pause_update(running, True, now, RETENTION))
    assert (paused.paused, paused.paused_ms, paused.paused_owner) == (True, now, "ETL")
    # Pausing again keeps the first pause; resuming a running pipe changes nothing.
    assert pause_update(paused, True, now + DAY, RETENTION) == {}
    assert pause_update(running, False, now, RETENTION) == {}
    assert pause_update(paused, False, now + DAY, RETENTION) == {
        "paused": False,
        "paused_ms": None,
        "paused_owner": None,
    }
    later = now + RETENTION + 1
    with pytest.raises(SqlError, match=re.escape(f"SYSTEM$PIPE_FORCE_RESUME('D.S.P', '{STALENESS}')")):
        pause_update(paused, False, later, RETENTION)
    assert pause_update(paused, False, later, RETENTION, frozenset({STALENESS}))["paused"] is False
    moved = paused.model_copy(update={"owner": "OPS"})
    with pytest.raises(SqlError, match="ownership has moved to role OPS"):
        pause_update(moved, False, now, RETENTION)
    assert pause_update(moved, False, now, RETENTION, frozenset({OWNERSHIP_TRANSFER}))
    # A stale pipe that changed owners needs both overrides.
    with pytest.raises(SqlError, match="ownership"):
        pause_update(moved, False, later, RETENTION, frozenset({STALENESS}))


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "options"),
    [
        (None, {OWNERSHIP_TRANSFER}),
        ("staleness_check_override", {STALENESS}),
        ("staleness_check_override, ownership_transfer_check_override", {STALENESS, OWNERSHIP_TRANSFER}),
        (" OWNERSHIP_TRANSFER_CHECK_OVERRIDE ,STALENESS_CHECK_OVERRIDE", {STALENESS, OWNERSHIP_TRANSFER}),
    ],
)
def test_force_resume_takes_either_override_in_either_order(text: str | None, options: set[str]) -> None:
    assert force_resume_options(text) == options


@pytest.mark.unit
@pytest.mark.parametrize("text", ["", "STALE", "STALENESS_CHECK_OVERRIDE,,", "x" * 5000])
def test_force_resume_refuses_other_options(text: str) -> None:
    with pytest.raises(CompilationError, match="STALENESS_CHECK_OVERRIDE"):
        force_resume_options(text)


@pytest.mark.unit
def test_create_or_alter_compares_the_copy_statement_not_its_spelling() -> None:
    old = pipe()
    same = parse("CREATE OR ALTER PIPE p AUTO_INGEST = TRUE AS copy  into T from @ST")
    assert isinstance(same, CreatePipe) and fixed_changes(same, old) == []
    other = parse("CREATE OR ALTER PIPE p AS COPY INTO t FROM @st ON_ERROR = CONTINUE")
    assert isinstance(other, CreatePipe)
    assert fixed_changes(other, old) == ["COPY statement", "AUTO_INGEST"]
    assert copy_text("COPY INTO t FROM @st") == copy_text("copy into T\n  from @St;")
    assert copy_text("COPY INTO t FROM @st PATTERN = '.*A'") != copy_text(
        "COPY INTO t FROM @st PATTERN = '.*a'"
    )
    assert copy_text('COPY INTO "t" FROM @st') != copy_text('COPY INTO "T" FROM @st')


# ------------------------------------------------------------------ through the SQL executor


def make_pipe(ex: SqlExecutor, extra: str = "") -> Pipe:
    """A stage, a table and a pipe (AUTO_INGEST = FALSE: no notifications to configure)."""
    run(ex, "CREATE STAGE IF NOT EXISTS st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests")
    run(ex, "CREATE TABLE IF NOT EXISTS t (a INT, b VARCHAR)")
    run(ex, f"CREATE PIPE p AUTO_INGEST = FALSE {extra} AS COPY INTO t FROM @st")
    return ex.catalog.get(Pipe, "FLOE.PUBLIC.P")


def shown(ex: SqlExecutor) -> dict[str, object]:
    (row,) = [r for r in run(ex, "SHOW PIPES") if r["name"] == "P"]
    return row


@pytest.mark.integration
def test_alter_pipe_sets_and_unsets_the_comment_and_pauses_in_one_statement(ex: SqlExecutor) -> None:
    make_pipe(ex, "COMMENT = 'old'")
    assert status(ex, "ALTER PIPE p SET COMMENT = 'Pipe for North American sales data'")
    assert shown(ex)["comment"] == "Pipe for North American sales data"
    described = run(ex, "DESC PIPE p")[0]
    assert described["comment"] == "Pipe for North American sales data"
    status(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE, COMMENT = 'it''s paused'")
    assert (shown(ex)["comment"], shown(ex)["execution_state"]) == ("it's paused", "PAUSED")
    status(ex, "ALTER PIPE p UNSET COMMENT, PIPE_EXECUTION_PAUSED")
    assert (shown(ex)["comment"], shown(ex)["execution_state"]) == ("", "RUNNING")
    assert ex.catalog.get(Pipe, "FLOE.PUBLIC.P").comment is None
    # IF EXISTS on a pipe that is not there does nothing; without it, the pipe is missing.
    assert status(ex, "ALTER PIPE IF EXISTS nope SET COMMENT = 'x'") == "Statement executed successfully."
    with pytest.raises(ObjectNotFound):
        run(ex, "ALTER PIPE nope SET COMMENT = 'x'")


@pytest.mark.integration
def test_operate_pauses_and_resumes_but_only_the_owner_sets_properties(ex: SqlExecutor) -> None:
    make_pipe(ex)
    operator = make_user(ex, "operator", "ops")
    status(ex, "GRANT OPERATE ON PIPE p TO ROLE ops")
    status(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE", operator)
    status(ex, "ALTER PIPE p UNSET PIPE_EXECUTION_PAUSED", operator)
    assert not ex.catalog.get(Pipe, "FLOE.PUBLIC.P").paused
    for sql in ("ALTER PIPE p SET COMMENT = 'x'", "ALTER PIPE p UNSET COMMENT"):
        with pytest.raises(PermissionDenied, match="OWNERSHIP"):
            run(ex, sql, operator)
    assert ex.catalog.get(Pipe, "FLOE.PUBLIC.P").comment is None


@pytest.mark.integration
def test_create_or_alter_creates_then_alters_in_place_keeping_the_load_history(ex: SqlExecutor) -> None:
    run(ex, "CREATE STAGE st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests")
    run(ex, "CREATE TABLE t (a INT, b VARCHAR)")
    definition = "AS COPY INTO t FROM @st FILE_FORMAT = (TYPE = CSV)"
    created = status(ex, f"CREATE OR ALTER PIPE p COMMENT = 'v1' PIPE_EXECUTION_PAUSED = TRUE {definition}")
    assert created == "Pipe P successfully created."
    first = ex.catalog.get(Pipe, "FLOE.PUBLIC.P")
    assert (first.comment, first.paused, first.paused_owner) == ("v1", True, "ACCOUNTADMIN")
    Deduper(ex.redis, ex.keys, 3600).enqueue(first, [FileRef("a.csv", 4)], source="rest")

    # Same definition, other properties: altered in place; what it leaves out is unset (resumed).
    status(ex, f"CREATE OR ALTER PIPE p {definition}")
    second = ex.catalog.get(Pipe, "FLOE.PUBLIC.P")
    assert (second.id, second.comment, second.paused) == (first.id, None, False)
    assert read_state(ex.redis, ex.keys, second.id, "a.csv") is not None, "the load history stays"
    assert ex.redis.xlen(ex.keys.queue(second.id)) == 1, "the queued file stays"

    with pytest.raises(CompilationError, match="cannot change the COPY statement of existing pipe P"):
        run(ex, "CREATE OR ALTER PIPE p AS COPY INTO t FROM @st FILE_FORMAT = (TYPE = JSON)")
    with pytest.raises(CompilationError, match="cannot change the AUTO_INGEST"):
        run(ex, f"CREATE OR ALTER PIPE p AUTO_INGEST = TRUE {definition}")
    assert ex.catalog.get(Pipe, "FLOE.PUBLIC.P") == second

    # Altering an existing pipe takes its ownership, as in Snowflake.
    operator = make_user(ex, "operator", "ops")
    status(ex, "GRANT OPERATE ON PIPE p TO ROLE ops")
    with pytest.raises(PermissionDenied, match="OWNERSHIP"):
        run(ex, f"CREATE OR ALTER PIPE p COMMENT = 'x' {definition}", operator)


@pytest.mark.integration
def test_a_stale_pipe_resumes_only_through_force_resume_with_the_override(ex: SqlExecutor) -> None:
    p = make_pipe(ex).model_copy(update={"auto_ingest": True})
    # Paused 15 days ago (the catalog as a pipe paused then left it).
    ex.catalog.put(p.model_copy(update=pause_update(p, True, now_ms() - 15 * DAY, RETENTION)))
    with pytest.raises(
        SqlError, match=r"Pipe P is stale: it has been paused since .*'STALENESS_CHECK_OVERRIDE'"
    ):
        run(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = FALSE")
    with pytest.raises(SqlError, match="is stale"):
        run(ex, "CREATE OR ALTER PIPE p AUTO_INGEST = TRUE AS COPY INTO t FROM @st")
    with pytest.raises(SqlError, match="is stale"):
        run(ex, "SELECT SYSTEM$PIPE_FORCE_RESUME('p')")
    assert ex.catalog.get(Pipe, "FLOE.PUBLIC.P").paused
    answer = run(ex, "SELECT SYSTEM$PIPE_FORCE_RESUME('floe.public.p', 'staleness_check_override') AS r")
    assert answer == [{"R": "Pipe P successfully resumed."}]
    assert not ex.catalog.get(Pipe, "FLOE.PUBLIC.P").paused
    assert run(ex, "SELECT SYSTEM$PIPE_FORCE_RESUME('p') AS r") == [{"R": "Pipe P is already running."}]


@pytest.mark.integration
def test_a_pipe_transferred_while_paused_resumes_only_through_force_resume(ex: SqlExecutor) -> None:
    make_pipe(ex)
    owner = make_user(ex, "owner", "etl")
    watcher = make_user(ex, "watcher", "mon")
    status(ex, "GRANT MONITOR ON PIPE p TO ROLE mon")
    status(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE")
    status(ex, "GRANT OWNERSHIP ON PIPE p TO ROLE etl")
    with pytest.raises(SqlError, match=r"paused by role ACCOUNTADMIN .* moved to role ETL"):
        run(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = FALSE", owner)
    # FORCE_RESUME takes OPERATE or OWNERSHIP: MONITOR is not enough.
    with pytest.raises(PermissionDenied, match="OPERATE or OWNERSHIP"):
        run(ex, "SELECT SYSTEM$PIPE_FORCE_RESUME('p')", watcher)
    with pytest.raises(CompilationError, match="string literals"):
        run(ex, "SELECT SYSTEM$PIPE_FORCE_RESUME(1)", owner)
    assert run(ex, "SELECT SYSTEM$PIPE_FORCE_RESUME('p') AS r", owner) == [
        {"R": "Pipe P successfully resumed."}
    ]
    assert not ex.catalog.get(Pipe, "FLOE.PUBLIC.P").paused
    # Paused and resumed by the same owner, the pipe needs nothing more.
    status(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE", owner)
    status(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = FALSE", owner)
    assert run(ex, "SHOW PIPES", ADMIN)[0]["execution_state"] == "RUNNING"
