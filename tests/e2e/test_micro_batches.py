"""Where a micro-batch loads: a few small files in the Spark job's driver, a larger batch in
Spark's tasks (``pipeline.driver_batch_files``, decision 95); either way the same rows, names and
load history reach the table."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import csv_file, done, make_pipe

pytestmark = pytest.mark.e2e

PLACE = re.compile(r"^batch (\d+): .* loading (in the driver|in \d+ Spark tasks)")


def places(stack: Stack, pipe: str) -> set[str]:
    """Where each micro-batch that loaded files of ``pipe`` ran its loads."""
    lines = [json.loads(line) for line in stack.log_text("pipeline").splitlines() if line.startswith("{")]
    ours = {
        line["batch"]
        for line in lines
        if line.get("pipe", "").endswith(pipe.upper()) and " on executor " in line.get("msg", "")
    }
    found = set()
    for line in lines:
        m = PLACE.match(line.get("msg", ""))
        if m and int(m.group(1)) in ours:
            found.add(m.group(2))
    return found


def load_paused(stack: Stack, bucket: str, s3: Any, files: int) -> tuple[str, str]:
    """A fresh pipe whose ``files`` files of 3 rows are all queued before it resumes: one batch."""
    table, pipe = make_pipe(stack, bucket)
    stack.sql(f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = TRUE")
    for i in range(files):
        s3.put_object(Bucket=bucket, Key=f"in/f{i:02d}.csv", Body=csv_file(i * 3, 3))

    def queued() -> bool:
        status = json.loads(stack.sql(f"SELECT SYSTEM$PIPE_STATUS('{pipe}') AS s")[0]["S"])
        return int(status["pendingFileCount"]) == files

    wait_until(queued, what=f"{files} files queued")
    stack.sql(f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = FALSE")
    wait_until(lambda: done(stack, table, files), what=f"{files} loads")
    return table, pipe


def check_loaded(stack: Stack, table: str, files: int) -> None:
    rows = stack.sql(f"SELECT id, file, row_no FROM {table} ORDER BY id")
    assert [r["ID"] for r in rows] == list(range(files * 3))
    assert [(r["FILE"], r["ROW_NO"]) for r in rows] == [
        (f"f{i:02d}.csv", n) for i in range(files) for n in (1, 2, 3)
    ]
    assert {r["STATUS"] for r in done(stack, table, files) or []} == {"Loaded"}


def test_a_few_small_files_load_in_the_driver_and_more_in_spark(stack: Stack, bucket: str, s3: Any) -> None:
    table, pipe = load_paused(stack, bucket, s3, 3)
    assert places(stack, pipe) == {"in the driver"}
    check_loaded(stack, table, 3)
    stack.sql(f"DROP PIPE {pipe}")  # the next pipe's files land in the same stage
    more = stack.settings.pipeline.driver_batch_files + 1
    table, pipe = load_paused(stack, bucket, s3, more)
    assert places(stack, pipe) == {f"in {stack.settings.pipeline.partitions} Spark tasks"}
    check_loaded(stack, table, more)
