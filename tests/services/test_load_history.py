"""Load history through SQL (services/load_history.py): COPY_HISTORY's PIPE_NAME and "Load skipped"
rows, the INFORMATION_SCHEMA views, VALIDATE_PIPE_LOAD and SYSTEM$PIPE_STATUS's recorded fields,
against the real Redis and LocalStack.

Files are committed the way the registrar commits a micro-batch (``Registrar.commit`` of their
``LoadOutcome``), so what these statements read is what a load leaves behind; the same through real
pipes: tests/e2e/test_pipe_lifecycle.py."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import redis

from floe.aws import client as aws_client
from floe.catalog import Pipe, now_ms
from floe.errors import CompilationError, ObjectNotFound, PermissionDenied
from floe.history import ErrorDetail, read_state
from floe.records import LoadOutcome
from pipeline.registrar import PipeCommit, Registrar
from services.dedup import Deduper, FileRef
from services.sql import SqlExecutor
from tests.services.test_sql_access import make_user, run, status

pytestmark = pytest.mark.integration

_BATCHES = itertools.count(1)
HOUR = "DATEADD(HOUR, -1, CURRENT_TIMESTAMP())"
BAD = ErrorDetail(
    "Numeric value 'zz' is not recognized",
    line=3,
    character=5,
    byte_offset=40,
    category="conversion",
    code="100038",
    sql_state="22018",
    column_name='"T"["A":1]',
    row_number=2,
    row_start_line=3,
    rejected_record="zz,b",
)


def make_pipe(ex: SqlExecutor, name: str = "p", table: str = "t", extra: str = "") -> Pipe:
    run(ex, "CREATE STAGE IF NOT EXISTS st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests")
    run(ex, f"CREATE TABLE IF NOT EXISTS {table} (a INT, b VARCHAR)")
    run(ex, f"CREATE PIPE {name} AUTO_INGEST = FALSE AS COPY INTO {table} FROM @st {extra}")
    return ex.catalog.get(Pipe, f"FLOE.PUBLIC.{name.upper()}")


def load(ex: SqlExecutor, pipe: Pipe, outcome: LoadOutcome, size: int = 10) -> None:
    """Queue a file and commit its outcome as the registrar does after a micro-batch."""
    Deduper(ex.redis, ex.keys, 3600).enqueue(pipe, [FileRef(outcome.path, size)], source="rest")
    state = read_state(ex.redis, ex.keys, pipe.id, outcome.path)
    assert state is not None
    (sid,) = [
        s.decode() for s, f in ex.redis.xrange(ex.keys.queue(pipe.id)) if f[b"path"] == outcome.path.encode()
    ]
    now = now_ms()
    commit = PipeCommit(pipe.id, files=[(outcome.apply_to(state, now), sid)])
    Registrar(ex.redis, ex.keys, 3600).commit(commit, "q", next(_BATCHES), now)


def loaded(path: str) -> LoadOutcome:
    return LoadOutcome(path, "LOADED", 2, 2)


def partly(path: str, *errors: ErrorDetail) -> LoadOutcome:
    first = errors[0]
    return LoadOutcome(
        path,
        "PARTIALLY_LOADED",
        3,
        3 - len(errors),
        len(errors),
        first_error=first.error,
        first_error_line=first.line,
        errors=errors,
    )


def copy_history(ex: SqlExecutor, extra: str = "", **kw: Any) -> list[dict[str, Any]]:
    return run(
        ex,
        f"SELECT file_name, status, row_count FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY("
        f"TABLE_NAME => 't', START_TIME => {HOUR}{extra})) ORDER BY file_name, status",
        **kw,
    )


def test_copy_history_filters_by_pipe_and_shows_skipped_files(ex: SqlExecutor) -> None:
    p = make_pipe(ex)
    q = make_pipe(ex, "q")
    load(ex, p, loaded("a.csv"), size=10)
    load(ex, q, loaded("b.csv"))
    # a.csv overwritten (another size) and sent again: skipped, and shown as skipped.
    assert Deduper(ex.redis, ex.keys, 3600).enqueue(p, [FileRef("a.csv", 99)], source="rest") == [False]
    assert copy_history(ex) == [
        {"FILE_NAME": "a.csv", "STATUS": "Load skipped", "ROW_COUNT": 0},
        {"FILE_NAME": "a.csv", "STATUS": "Loaded", "ROW_COUNT": 2},
        {"FILE_NAME": "b.csv", "STATUS": "Loaded", "ROW_COUNT": 2},
    ]
    assert copy_history(ex, ", PIPE_NAME => 'floe.public.q'") == [
        {"FILE_NAME": "b.csv", "STATUS": "Loaded", "ROW_COUNT": 2}
    ]
    (skipped,) = run(
        ex,
        "SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => 't', START_TIME => "
        f"{HOUR})) WHERE status = 'Load skipped'",
    )
    assert skipped["FILE_SIZE"] == 99 and skipped["ERROR_COUNT"] == 0 and skipped["PIPE_NAME"] == "P"
    assert "already loaded by this pipe" in skipped["FIRST_ERROR_MESSAGE"]


def test_the_views_show_the_databases_loads_to_who_may_see_them(ex: SqlExecutor) -> None:
    p = make_pipe(ex)
    make_pipe(ex, "q", table="u")
    load(ex, p, loaded("a.csv"))
    load(ex, p, partly("b.csv", BAD))
    Deduper(ex.redis, ex.keys, 3600).enqueue(p, [FileRef("c.csv", 1)], source="rest")  # still loading
    rows = run(
        ex,
        "SELECT table_name, file_name, status, row_count, first_error_message, "
        "first_error_character_position, first_error_col_name FROM information_schema.load_history "
        "WHERE schema_name = 'PUBLIC' ORDER BY last_load_time, file_name",
    )
    assert rows == [
        {
            "TABLE_NAME": "T",
            "FILE_NAME": "a.csv",
            "STATUS": "LOADED",
            "ROW_COUNT": 2,
            "FIRST_ERROR_MESSAGE": None,
            "FIRST_ERROR_CHARACTER_POSITION": None,
            "FIRST_ERROR_COL_NAME": None,
        },
        {
            "TABLE_NAME": "T",
            "FILE_NAME": "b.csv",
            "STATUS": "PARTIALLY LOADED",
            "ROW_COUNT": 2,
            "FIRST_ERROR_MESSAGE": BAD.error,
            "FIRST_ERROR_CHARACTER_POSITION": None,
            "FIRST_ERROR_COL_NAME": None,
        },
    ]
    view = run(ex, "SELECT * FROM floe.information_schema.copy_history ORDER BY file_name")
    assert [(r["FILE_NAME"], r["STATUS"], r["PIPE_NAME"]) for r in view] == [
        ("a.csv", "Loaded", "P"),
        ("b.csv", "Partially loaded", "P"),
    ]
    table = ex.catalog.get(Pipe, "FLOE.PUBLIC.P").table_id
    assert view[0]["TABLE_ID"] == table and view[0]["FIRST_COMMIT_TIME"] == view[0]["LAST_LOAD_TIME"]
    assert list(view[0]) == [
        "FILE_NAME",
        "STAGE_LOCATION",
        "LAST_LOAD_TIME",
        "ROW_COUNT",
        "ROW_PARSED",
        "FILE_SIZE",
        "FIRST_ERROR_MESSAGE",
        "FIRST_ERROR_LINE_NUMBER",
        "FIRST_ERROR_CHARACTER_POS",
        "FIRST_ERROR_COLUMN_NAME",
        "ERROR_COUNT",
        "ERROR_LIMIT",
        "STATUS",
        "TABLE_ID",
        "TABLE_NAME",
        "TABLE_SCHEMA_ID",
        "TABLE_SCHEMA_NAME",
        "TABLE_CATALOG_ID",
        "TABLE_CATALOG_NAME",
        "PIPE_CATALOG_NAME",
        "PIPE_SCHEMA_NAME",
        "PIPE_NAME",
        "PIPE_RECEIVED_TIME",
        "FIRST_COMMIT_TIME",
        "BYTES_BILLED",
    ]
    # Another database's INFORMATION_SCHEMA shows its own tables only.
    run(ex, "CREATE DATABASE other")
    assert run(ex, "SELECT COUNT(*) AS n FROM other.information_schema.copy_history") == [{"N": 0}]
    # Through the same check as COPY_HISTORY: SELECT on the table, or MONITOR on the pipe.
    analyst = make_user(ex, "analyst", "ana")
    assert run(ex, "SELECT COUNT(*) AS n FROM information_schema.load_history", analyst) == [{"N": 0}]
    status(ex, "GRANT MONITOR ON PIPE p TO ROLE ana")
    assert run(ex, "SELECT COUNT(*) AS n FROM information_schema.load_history", analyst) == [{"N": 2}]
    with pytest.raises(
        CompilationError, match="INFORMATION_SCHEMA has the views COPY_HISTORY and LOAD_HISTORY"
    ):
        run(ex, "SELECT * FROM information_schema.pipes")


def validate(ex: SqlExecutor, pipe: str = "p", start: str = HOUR, **kw: Any) -> list[dict[str, Any]]:
    return run(
        ex,
        f"SELECT * FROM TABLE(VALIDATE_PIPE_LOAD(PIPE_NAME => '{pipe}', START_TIME => {start}))",
        **kw,
    )


def test_validate_pipe_load_shows_every_error_of_every_file(ex: SqlExecutor) -> None:
    p = make_pipe(ex)
    assert validate(ex) == []
    second = ErrorDetail("NULL result in a non-nullable column", line=7, code="100088", sql_state="22000")
    load(ex, p, loaded("a.csv"))
    load(ex, p, partly("b.csv", BAD, second))
    load(ex, p, LoadOutcome.stopped("gone.csv", "Remote file 's3://x/gone.csv' was not found.", system=True))
    rows = validate(ex)
    assert rows[:2] == [
        {
            "ERROR": BAD.error,
            "FILE": "b.csv",
            "LINE": 3,
            "CHARACTER": 5,
            "BYTE_OFFSET": 40,
            "CATEGORY": "conversion",
            "CODE": 100038,
            "SQL_STATE": 22018,
            "COLUMN_NAME": '"T"["A":1]',
            "ROW_NUMBER": 2,
            "ROW_START_LINE": 3,
            "REJECTED_RECORD": "zz,b",
        },
        {
            "ERROR": second.error,
            "FILE": "b.csv",
            "LINE": 7,
            "CHARACTER": None,
            "BYTE_OFFSET": None,
            "CATEGORY": "conversion",
            "CODE": 100088,
            "SQL_STATE": 22000,
            "COLUMN_NAME": None,
            "ROW_NUMBER": None,
            "ROW_START_LINE": None,
            "REJECTED_RECORD": None,
        },
    ]
    # A file that failed before it was read has its one error from load history.
    assert [(r["FILE"], r["ERROR"]) for r in rows[2:]] == [
        ("gone.csv", "Remote file 's3://x/gone.csv' was not found.")
    ]
    # END_TIME before the loads: none; a START_TIME past the 15 days: refused.
    assert (
        run(
            ex,
            "SELECT * FROM TABLE(INFORMATION_SCHEMA.VALIDATE_PIPE_LOAD(PIPE_NAME => 'p', START_TIME => "
            f"{HOUR}, END_TIME => DATEADD(HOUR, -1, CURRENT_TIMESTAMP())))",
        )
        == []
    )
    with pytest.raises(CompilationError, match="more than 15 days ago"):
        validate(ex, start="DATEADD(DAY, -16, CURRENT_TIMESTAMP())")
    with pytest.raises(CompilationError, match="VALIDATE_PIPE_LOAD needs PIPE_NAME"):
        run(ex, "SELECT * FROM TABLE(VALIDATE_PIPE_LOAD(START_TIME => CURRENT_TIMESTAMP()))")


def test_validate_pipe_load_needs_monitor_with_the_stage_and_table_privileges(ex: SqlExecutor) -> None:
    make_pipe(ex)
    watcher = make_user(ex, "watcher", "mon")
    status(ex, "GRANT MONITOR ON PIPE p TO ROLE mon")
    with pytest.raises(ObjectNotFound, match=r"Stage 'FLOE\.PUBLIC\.ST'"):  # nothing on the stage
        validate(ex, principal=watcher)
    status(ex, "GRANT USAGE ON STAGE st TO ROLE mon")
    status(ex, "GRANT SELECT ON TABLE t TO ROLE mon")
    with pytest.raises(PermissionDenied, match="INSERT"):
        validate(ex, principal=watcher)
    status(ex, "GRANT INSERT ON TABLE t TO ROLE mon")
    assert validate(ex, principal=watcher) == []


def pipe_status(ex: SqlExecutor, name: str = "p") -> dict[str, Any]:
    (row,) = run(ex, f"SELECT SYSTEM$PIPE_STATUS('{name}') AS s")
    return dict(json.loads(row["S"]))


def test_pipe_status_shows_what_was_recorded_and_why_the_pipe_stalls(ex: SqlExecutor) -> None:
    p = make_pipe(ex)
    assert pipe_status(ex) == {"executionState": "RUNNING", "pendingFileCount": 0}
    load(ex, p, loaded("a.csv"))
    refused = LoadOutcome.stopped("b.csv", "function F is gone", system=False, trouble="pipe")
    load(ex, p, refused)
    got = pipe_status(ex)
    assert (got["executionState"], got["error"], got["lastIngestedFilePath"]) == (
        "STALLED_COMPILATION_ERROR",
        "function F is gone",
        "a.csv",
    )
    assert list(got) == [
        "executionState",
        "pendingFileCount",
        "lastPipeErrorTimestamp",
        "lastIngestedTimestamp",
        "lastIngestedFilePath",
        "error",
    ]
    assert got["lastPipeErrorTimestamp"].endswith("Z")
    load(ex, p, loaded("c.csv"))  # a file loads: the COPY runs again, the error is gone
    got = pipe_status(ex)
    assert (got["executionState"], got["lastIngestedFilePath"], "error" in got) == ("RUNNING", "c.csv", False)
    load(ex, p, LoadOutcome.stopped("d.csv", "Internal error while loading", system=True, trouble="internal"))
    got = pipe_status(ex)
    assert (got["executionState"], got["fault"]) == ("RUNNING", "Internal error while loading")
    # The integration no longer admits the stage: every load is refused.
    status(ex, "ALTER INTEGRATION floe_tests SET ENABLED = FALSE")
    got = pipe_status(ex)
    assert got["executionState"] == "STALLED_STAGE_PERMISSION_ERROR" and "disabled" in got["error"]
    status(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE")
    assert pipe_status(ex)["executionState"] == "PAUSED"
    status(ex, "CREATE OR REPLACE TABLE t (a INT)")
    got = pipe_status(ex)
    assert got["executionState"] == "STOPPED_MISSING_TABLE" and "FLOE.PUBLIC.T" in got["error"]


def test_an_auto_ingest_pipes_status_shows_its_channel(
    ex: SqlExecutor, bucket: str, redis_client: redis.Redis
) -> None:
    run(ex, f"CREATE STAGE st URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = floe_tests")
    run(ex, "CREATE TABLE t (a INT)")
    run(ex, "CREATE PIPE p AUTO_INGEST = TRUE AS COPY INTO t FROM @st")
    p = ex.catalog.get(Pipe, "FLOE.PUBLIC.P")
    redis_client.hset(ex.keys.notification_channel(), "lastReceivedMessageTimestamp", "1700000000000")
    redis_client.hset(ex.keys.status(p.id), "lastForwardedFilePath", "in/a.csv")
    got = pipe_status(ex)
    assert got["notificationChannelName"] == ex.queue_arn()
    # SQS's count of messages not yet received (the bucket's test event, say), one more once sent.
    outstanding = got["numOutstandingMessagesOnChannel"]
    assert isinstance(outstanding, int)
    sqs = aws_client(ex.settings.aws, "sqs")
    try:
        url = sqs.get_queue_url(QueueName=ex.settings.consumer.queue_name)["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="{}")
    finally:
        sqs.close()
    assert pipe_status(ex)["numOutstandingMessagesOnChannel"] == outstanding + 1
    assert got["lastReceivedMessageTimestamp"] == "2023-11-14T22:13:20.000Z"
    assert got["lastForwardedFilePath"] == "in/a.csv"
