"""A pipe's lifecycle end to end, through the API, the consumer, the Spark job and the registrar:
VALIDATE_PIPE_LOAD's every error of a real load, the history views, SYSTEM$PIPE_STATUS's recorded
fields, "Load skipped" for an overwritten file, ALTER PIPE SET COMMENT / pausing, CREATE OR ALTER
PIPE keeping the load history, and a stale pipe resumed by SYSTEM$PIPE_FORCE_RESUME. Each rule in
detail: tests/services/test_pipe_lifecycle.py and tests/services/test_load_history.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from floe.catalog import Catalog, Pipe, now_ms
from floe.keys import Keys
from front.client import StatementRejected
from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import csv_file, history, make_pipe

pytestmark = pytest.mark.e2e

HOUR = "DATEADD(HOUR, -1, CURRENT_TIMESTAMP())"


def statuses(stack: Stack, table: str) -> list[tuple[str, str]]:
    return sorted((str(r["FILE_NAME"]), str(r["STATUS"])) for r in history(stack, table))


def pipe_status(stack: Stack, pipe: str) -> dict[str, Any]:
    return dict(json.loads(stack.sql(f"SELECT SYSTEM$PIPE_STATUS('{pipe}') AS s")[0]["S"]))


def test_pipe_lifecycle_validate_pipe_load_shows_every_error(stack: Stack, bucket: str, s3: Any) -> None:
    table, pipe = make_pipe(stack, bucket, on_error="CONTINUE")
    body = (
        b"id,name,amount,day\n"
        b"1,a,1.5,2026-01-01\n"
        b"x,b,2.5,2026-01-02\n"
        b"3,c,zz,2026-01-03\n"
        b"4,d,4.5,2026-13-40\n"
        b"5,e,5.5,2026-01-05\n"
    )
    s3.put_object(Bucket=bucket, Key="in/bad.csv", Body=body)
    wait_until(
        lambda: statuses(stack, table) == [("bad.csv", "Partially loaded")], what="bad.csv loaded in part"
    )
    rows = stack.sql(
        f"SELECT error, file, line, character, category, code, sql_state, row_number, rejected_record "
        f"FROM TABLE(VALIDATE_PIPE_LOAD(PIPE_NAME => '{pipe}', START_TIME => {HOUR})) ORDER BY line"
    )
    assert [(r["LINE"], r["ROW_NUMBER"], r["CODE"], r["CATEGORY"]) for r in rows] == [
        (3, 2, 100038, "conversion"),
        (4, 3, 100038, "conversion"),
        (5, 4, 100040, "conversion"),
    ]
    assert rows[0]["ERROR"] == "Numeric value 'x' is not recognized" and rows[0]["FILE"] == "bad.csv"
    assert [r["REJECTED_RECORD"] for r in rows] == [
        "x,b,2.5,2026-01-02",
        "3,c,zz,2026-01-03",
        "4,d,4.5,2026-13-40",
    ]
    assert {r["SQL_STATE"] for r in rows} == {22018, 22007}

    # The views list the load too; LOAD_HISTORY with its own spelling of the status.
    (loaded,) = stack.sql(
        f"SELECT status, row_count, error_count FROM information_schema.load_history "
        f"WHERE table_name = '{table.upper()}'"
    )
    assert loaded == {"STATUS": "PARTIALLY LOADED", "ROW_COUNT": 2, "ERROR_COUNT": 3}
    (viewed,) = stack.sql(
        f"SELECT file_name, status FROM information_schema.copy_history WHERE table_name = '{table.upper()}'"
    )
    assert viewed == {"FILE_NAME": "bad.csv", "STATUS": "Partially loaded"}

    # SYSTEM$PIPE_STATUS: the consumer recorded the notification, the registrar the load.
    status = pipe_status(stack, pipe)
    assert status["executionState"] == "RUNNING" and status["lastIngestedFilePath"] == "bad.csv"
    assert status["lastForwardedFilePath"] == "bad.csv"
    for field in (
        "lastReceivedMessageTimestamp",
        "lastForwardedMessageTimestamp",
        "lastPulledFromChannelTimestamp",
    ):
        assert status[field].endswith("Z"), field
    assert status["lastForwardedMessageTimestamp"] <= status["lastIngestedTimestamp"]
    assert isinstance(status["numOutstandingMessagesOnChannel"], int)


def test_pipe_lifecycle_an_overwritten_file_is_load_skipped(stack: Stack, bucket: str, s3: Any) -> None:
    table, _ = make_pipe(stack, bucket)
    s3.put_object(Bucket=bucket, Key="in/a.csv", Body=csv_file(0, 2))
    wait_until(lambda: statuses(stack, table) == [("a.csv", "Loaded")], what="a.csv loaded")
    s3.put_object(Bucket=bucket, Key="in/a.csv", Body=csv_file(10, 3))  # same path, other contents
    wait_until(
        lambda: statuses(stack, table) == [("a.csv", "Load skipped"), ("a.csv", "Loaded")],
        what="a.csv skipped when overwritten",
    )
    assert stack.sql(f"SELECT id FROM {table} ORDER BY id") == [{"ID": 0}, {"ID": 1}]


def test_pipe_lifecycle_pause_comment_create_or_alter_and_force_resume(
    stack: Stack, bucket: str, s3: Any
) -> None:
    table, pipe = make_pipe(stack, bucket)
    stack.sql(f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = TRUE COMMENT = 'North American sales'")
    (shown,) = [r for r in stack.sql("SHOW PIPES") if r["name"] == pipe.upper()]
    assert (shown["comment"], shown["execution_state"]) == ("North American sales", "PAUSED")
    s3.put_object(Bucket=bucket, Key="in/a.csv", Body=csv_file(0, 2))
    wait_until(lambda: pipe_status(stack, pipe)["pendingFileCount"] == 1, what="a.csv queued while paused")
    assert pipe_status(stack, pipe)["executionState"] == "PAUSED"

    # CREATE OR ALTER with the same COPY: altered in place, so the queued file and the pipe's
    # history stay; PIPE_EXECUTION_PAUSED left out resumes it, and the file loads.
    (definition,) = [r["definition"] for r in stack.sql("SHOW PIPES") if r["name"] == pipe.upper()]
    stack.sql(f"CREATE OR ALTER PIPE {pipe} AUTO_INGEST = TRUE COMMENT = 'v2' AS {definition}")
    wait_until(lambda: statuses(stack, table) == [("a.csv", "Loaded")], what="a.csv loaded after the alter")
    (shown,) = [r for r in stack.sql("SHOW PIPES") if r["name"] == pipe.upper()]
    assert (shown["comment"], shown["execution_state"]) == ("v2", "RUNNING")

    # Paused 15 days ago, it is stale: ALTER PIPE refuses to resume it, FORCE_RESUME with the
    # override does, and the file sent meanwhile loads.
    stack.sql(f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = TRUE")
    client = stack.settings.redis.client()
    try:
        catalog = Catalog(client, Keys(stack.settings.redis.prefix))
        paused = catalog.get(Pipe, f"FLOE.PUBLIC.{pipe.upper()}")
        catalog.put(paused.model_copy(update={"paused_ms": now_ms() - 15 * 86_400_000}))
    finally:
        client.close()
    s3.put_object(Bucket=bucket, Key="in/b.csv", Body=csv_file(5, 1))
    wait_until(lambda: pipe_status(stack, pipe)["pendingFileCount"] == 1, what="b.csv queued while paused")
    with pytest.raises(StatementRejected, match="is stale"):
        stack.sql(f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = FALSE")
    (answer,) = stack.sql(f"SELECT SYSTEM$PIPE_FORCE_RESUME('{pipe}', 'STALENESS_CHECK_OVERRIDE') AS r")
    assert answer["R"] == f"Pipe {pipe.upper()} successfully resumed."
    wait_until(
        lambda: statuses(stack, table) == [("a.csv", "Loaded"), ("b.csv", "Loaded")], what="b.csv loaded"
    )
    assert [r["ID"] for r in stack.sql(f"SELECT id FROM {table} ORDER BY id")] == [0, 1, 5]
