"""Backfill end to end (BACKFILL_INTERVAL, a Floe extension): with the bucket's notifications off, a
pipe's files still load, each once, through the consumers' periodic listing; listing again and
again loads nothing twice, and a failed file stays failed. With notifications on too, a file both
announce loads once. The listing's rules in detail: tests/services/test_backfill.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.harness import unique
from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import csv_file, history

pytestmark = pytest.mark.e2e

BAD = b"id,name,amount,day\nnot a number,x,1.5,2026-01-01\n"


def make_pipe(stack: Stack, bucket: str, props: str) -> tuple[str, str]:
    stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
    stack.sql(
        f"CREATE STAGE {stage} URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = floe_tests "
        "FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
    )
    stack.sql(
        f"CREATE TABLE {table} (id INT NOT NULL, name VARCHAR, amount NUMBER(10,2), day DATE, file VARCHAR)"
    )
    stack.sql(
        f"CREATE PIPE {pipe} {props} AS COPY INTO {table} "
        f"FROM (SELECT $1, $2, $3, $4, METADATA$FILENAME FROM @{stage}) ON_ERROR = SKIP_FILE"
    )
    return table, pipe


def listings(stack: Stack, pipe: str) -> int:
    """How many backfills of ``pipe`` the consumer has logged."""
    name = f"FLOE.PUBLIC.{pipe.upper()}"
    lines = [
        json.loads(line) for line in stack.log_text("consumer").splitlines() if "backfill listed" in line
    ]
    return sum(1 for entry in lines if entry.get("pipe") == name)


def statuses(stack: Stack, table: str) -> dict[str, str]:
    return {str(r["FILE_NAME"]): str(r["STATUS"]) for r in history(stack, table)}


def rows_per_file(stack: Stack, table: str) -> dict[str, int]:
    rows = stack.sql(f"SELECT file, COUNT(*) AS n FROM {table} GROUP BY file")
    return {str(r["FILE"]): int(r["N"]) for r in rows}


def test_backfill_loads_what_no_notification_announced_once(stack: Stack, bucket: str, s3: Any) -> None:
    # AUTO_INGEST = FALSE: the bucket sends Floe nothing, only the backfill queues files.
    table, pipe = make_pipe(stack, bucket, "AUTO_INGEST = FALSE BACKFILL_INTERVAL = '1 second'")
    try:
        (row,) = stack.sql(f"SHOW PIPES LIKE '{pipe}'")
        assert row["backfill_interval"] == "1 SECOND" and row["notification_channel"] is None
        s3.put_object(Bucket=bucket, Key="in/a.csv", Body=csv_file(0, 3))
        s3.put_object(Bucket=bucket, Key="in/2026/b.csv", Body=csv_file(10, 2))
        s3.put_object(Bucket=bucket, Key="in/bad.csv", Body=BAD)
        wanted = {"a.csv": "Loaded", "2026/b.csv": "Loaded", "bad.csv": "Load failed"}
        wait_until(
            lambda: statuses(stack, table) == wanted,
            what=lambda: f"the backfilled files' loads: {statuses(stack, table)}",
        )
        s3.put_object(Bucket=bucket, Key="in/c.csv", Body=csv_file(20, 1))
        wait_until(lambda: statuses(stack, table).get("c.csv") == "Loaded", what="c.csv, staged later")

        # Listing goes on every second: nothing is queued or loaded again, the failed file included.
        seen = listings(stack, pipe)
        wait_until(lambda: listings(stack, pipe) >= seen + 3, 30, what="three more listings")
        assert statuses(stack, table) == {**wanted, "c.csv": "Loaded"}
        assert rows_per_file(stack, table) == {"a.csv": 3, "2026/b.csv": 2, "c.csv": 1}
        status = stack.sql(f"SELECT SYSTEM$PIPE_STATUS('{pipe}') AS s")[0]["S"]
        assert '"pendingFileCount":0' in status.replace(" ", "")
    finally:
        stack.sql(f"DROP PIPE {pipe}")  # so the session's consumers stop listing its bucket


def test_with_notifications_too_each_file_loads_once(stack: Stack, bucket: str, s3: Any) -> None:
    table, pipe = make_pipe(stack, bucket, "AUTO_INGEST = TRUE BACKFILL_INTERVAL = '1 second'")
    try:
        config = s3.get_bucket_notification_configuration(Bucket=bucket)
        config.pop("ResponseMetadata", None)
        assert config.get("QueueConfigurations"), "CREATE PIPE configured the bucket's notifications"
        # Notifications lost: the bucket stops sending them, and the backfill alone finds x.csv.
        s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={})
        s3.put_object(Bucket=bucket, Key="in/x.csv", Body=csv_file(0, 2))
        wait_until(lambda: statuses(stack, table) == {"x.csv": "Loaded"}, what="x.csv, found by listing")
        # Notifications back: y.csv is announced and listed, and queued once.
        s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration=config)
        s3.put_object(Bucket=bucket, Key="in/y.csv", Body=csv_file(10, 4))
        wait_until(lambda: statuses(stack, table).get("y.csv") == "Loaded", what="y.csv loaded")
        seen = listings(stack, pipe)
        wait_until(lambda: listings(stack, pipe) >= seen + 2, 30, what="two more listings")
        assert rows_per_file(stack, table) == {"x.csv": 2, "y.csv": 4}
        assert len(history(stack, table)) == 2
    finally:
        stack.sql(f"DROP PIPE {pipe}")
