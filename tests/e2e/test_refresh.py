"""ALTER PIPE ... REFRESH end to end, through the API, the Spark job and the registrar: files no
notification announced load, and a file whose load failed loads once its cause is fixed, exactly
once. The statement's rules in detail: tests/services/test_pipe_refresh.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import csv_file, history, make_pipe

pytestmark = pytest.mark.e2e

BAD = b"id,name,amount,day\nnot a number,x,1.5,2026-01-01\n"
"""A file whose one record fails its INT column, so ON_ERROR = SKIP_FILE fails the whole file."""


def refresh(stack: Stack, pipe: str) -> dict[str, str]:
    return {str(r["File"]): str(r["Status"]) for r in stack.sql(f"ALTER PIPE {pipe} REFRESH")}


def statuses(stack: Stack, table: str) -> dict[str, str]:
    return {str(r["FILE_NAME"]): str(r["STATUS"]) for r in history(stack, table)}


def test_refresh_loads_missed_files_and_retries_a_failed_one(stack: Stack, bucket: str, s3: Any) -> None:
    table, pipe = make_pipe(stack, bucket, auto_ingest=False)  # no notifications: only REFRESH queues
    s3.put_object(Bucket=bucket, Key="in/a.csv", Body=BAD)
    s3.put_object(Bucket=bucket, Key="in/b.csv", Body=csv_file(0, 3))
    assert refresh(stack, pipe) == {"a.csv": "SENT", "b.csv": "SENT"}
    wanted = {"a.csv": "Load failed", "b.csv": "Loaded"}
    wait_until(lambda: statuses(stack, table) == wanted, what="a.csv failed, b.csv loaded")

    # The cause fixed (here the file itself), REFRESH sends the failed file again, and only it.
    s3.put_object(Bucket=bucket, Key="in/a.csv", Body=csv_file(10, 2))
    assert refresh(stack, pipe) == {"a.csv": "SENT", "b.csv": "SKIPPED"}
    wait_until(lambda: statuses(stack, table) == {"a.csv": "Loaded", "b.csv": "Loaded"}, what="a.csv loaded")
    rows = stack.sql(f"SELECT id, file FROM {table} ORDER BY id")
    assert [(r["ID"], r["FILE"]) for r in rows] == [
        (0, "b.csv"),
        (1, "b.csv"),
        (2, "b.csv"),
        (10, "a.csv"),
        (11, "a.csv"),
    ]
    (a,) = [r for r in history(stack, table) if r["FILE_NAME"] == "a.csv"]
    assert a["ROW_COUNT"] == 2 and a["FIRST_ERROR_MESSAGE"] is None  # the failure's entry was replaced

    # Loaded files stay loaded: a third REFRESH queues nothing, and the table keeps its five rows.
    assert refresh(stack, pipe) == {"a.csv": "SKIPPED", "b.csv": "SKIPPED"}
    status = stack.sql(f"SELECT SYSTEM$PIPE_STATUS('{pipe}') AS s")[0]["S"]
    assert '"pendingFileCount":0' in status.replace(" ", "")
    assert stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"] == 5
