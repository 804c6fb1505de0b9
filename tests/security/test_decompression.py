"""Issue 9, item 9: a decompression bomb fails its own file, and the batch and other pipes go on.

The shared stack runs with the default bounds (``pipeline.max_part_bytes`` 256 MiB,
``pipeline.max_file_bytes`` 16 GiB). A 2 MB gzip holding one 2 GiB record passes the part bound;
a bomb with newlines would have to pass 16 GiB to fail here, which is too slow for a test, so it is
covered with small bounds in tests/pipeline/test_loader.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Stack, unique, wait_until
from tests.e2e.test_autoingest import csv_file, history
from tests.security.attacks import bombs
from tests.security.attacks.caller import SqlCaller

pytestmark = pytest.mark.e2e


def _pipe(admin: SqlCaller, bucket: str) -> str:
    """A table and an auto-ingest CSV pipe on s3://bucket/in/; returns the table's name."""
    stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
    admin.run_all(
        f"CREATE STAGE {stage} URL = 's3://{bucket}/in/'"
        " STORAGE_INTEGRATION = floe_tests FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)",
        f"CREATE TABLE {table} (id INT, name VARCHAR, amount NUMBER(10,2), day DATE)",
        f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} FROM @{stage} ON_ERROR = CONTINUE",
    )
    return table


def _finished(stack: Stack, table: str, name: str) -> dict[str, Any] | None:
    rows = [r for r in history(stack, table) if r["FILE_NAME"] == name and r["STATUS"] != "Load in progress"]
    return rows[0] if rows else None


def test_one_line_gzip_bomb_fails_alone_and_another_pipe_loads(
    stack: Stack, admin: SqlCaller, s3: Any
) -> None:
    bomb_bucket, good_bucket = unique("stage"), unique("stage")
    for name in (bomb_bucket, good_bucket):
        s3.create_bucket(Bucket=name)
    bomb_table = _pipe(admin, bomb_bucket)
    good_table = _pipe(admin, good_bucket)
    bomb = bombs.gzip_bomb(2 * bombs.GiB, header=b"id,name,amount,day\n")
    assert len(bomb) < 3_000_000, "the bomb should be small on the wire"
    s3.put_object(Bucket=bomb_bucket, Key="in/bomb.csv.gz", Body=bomb)
    s3.put_object(Bucket=good_bucket, Key="in/good.csv", Body=csv_file(0, 5))

    failed = wait_until(lambda: _finished(stack, bomb_table, "bomb.csv.gz"), timeout=180, what="bomb's load")
    assert failed["STATUS"] == "Load failed"
    assert failed["ROW_COUNT"] == 0
    assert failed["FIRST_ERROR_MESSAGE"] == (
        "File 'bomb.csv.gz' decompresses to more than 256 MiB in one record (pipeline.max_part_bytes); "
        "check that its records end with a newline (and that its quotes are closed), or raise "
        "pipeline.max_part_bytes if such files are expected."
    )
    loaded = wait_until(
        lambda: _finished(stack, good_table, "good.csv"), timeout=180, what="good file's load"
    )
    assert (loaded["STATUS"], loaded["ROW_COUNT"]) == ("Loaded", 5)
    assert stack.sql(f"SELECT COUNT(*) AS n FROM {good_table}")[0]["N"] == 5
    assert stack.sql(f"SELECT COUNT(*) AS n FROM {bomb_table}")[0]["N"] == 0
    assert stack.procs["pipeline"].poll() is None, "the Spark job exited"
