"""Blob pruning on the whole stack: a table of 50 blobs with disjoint id ranges, queried through the
API (its `stats`), `floe sql --json --profile` and the API's log, counting the blobs each query read.

Files that arrive together are written into one blob per (pipe, Spark task), so to get one blob per
file without loading 50 files one after another, each file comes through its own pipe (all 50 pipes
copy into the one table, each from its own folder of the stage, queued by insertFiles): one file,
one pipe, one blob.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from floe.catalog import Catalog, Table
from floe.catalog.ddl import Defaults, qualify
from floe.keys import Keys
from front.client import auth_header, run_sql
from tests.conftest import ROOT, VENV_BIN, Stack, unique, wait_until
from tests.e2e.test_autoingest import history

pytestmark = pytest.mark.e2e

FILES = 50
ROWS = 20  # file i holds ids i*ROWS .. i*ROWS+ROWS-1


def csv_file(i: int) -> bytes:
    lines = ["id,name,day"] + [
        f"{n},row {n},2026-03-{1 + i % 28:02d}" for n in range(i * ROWS, (i + 1) * ROWS)
    ]
    return ("\n".join(lines) + "\n").encode()


def manifest(stack: Stack, table: str) -> list[dict[str, Any]]:
    """The table's committed blob entries, read from Redis as the query engine reads them."""
    settings = stack.settings
    client = settings.redis.client()
    keys = Keys(settings.redis.prefix)
    catalog = Catalog(client, keys)
    found = catalog.get(Table, str(qualify(table, Defaults(settings.database, settings.schema_name))))
    entries: list[dict[str, Any]] = []
    for pipe_id in catalog.segments(found):
        entries.extend(json.loads(v) for v in client.hgetall(keys.blobs(pipe_id)).values())
    return entries


def query(stack: Stack, sql: str) -> tuple[list[int], dict[str, Any]]:
    """The ids a query returns and the blob counts the API reports for it."""
    body = run_sql(stack.settings, sql)
    ids = [row[body["columns"].index("ID")] for row in body["rows"]]
    return ids, body["stats"]


def load_50_blobs(stack: Stack, bucket: str, s3: Any, pipes: list[str]) -> str:
    """A new table loaded from FILES files through FILES new pipes (named into ``pipes``); checks
    that it is FILES blobs of one file each."""
    stage, table = unique("st_"), unique("t_")
    stack.sql(
        f"CREATE STAGE {stage} URL = 's3://{bucket}/in/'"
        " STORAGE_INTEGRATION = floe_tests FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
    )
    stack.sql(f"CREATE TABLE {table} (id INT NOT NULL, name VARCHAR, day DATE)")
    # REST pipes (insertFiles), not auto-ingest: each auto-ingest pipe rewrites the bucket's
    # notification configuration, which LocalStack takes most of a second for.
    pipes.extend(unique("p_") for _ in range(FILES))
    for i, pipe in enumerate(pipes):
        stack.sql(
            f"CREATE PIPE {pipe} AUTO_INGEST = FALSE AS COPY INTO {table} FROM @{stage}/f{i:02d}/ "
            "FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
        )
    api = f"http://{stack.settings.api.host}:{stack.settings.api.port}/v1/data/pipes"

    def put_and_insert(i: int) -> None:
        s3.put_object(Bucket=bucket, Key=f"in/f{i:02d}/part.csv", Body=csv_file(i))
        resp = httpx.post(
            f"{api}/FLOE.PUBLIC.{pipes[i]}/insertFiles",
            json={"files": [{"path": f"f{i:02d}/part.csv"}]},
            headers=auth_header(stack.settings),
            timeout=60,
        )
        assert resp.status_code == 200, resp.text

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put_and_insert, range(FILES)))
    wait_until(
        lambda: len([h for h in history(stack, table) if h["STATUS"] == "Loaded"]) == FILES,
        timeout=120,
        interval=0.5,
        what=f"{FILES} files loaded",
    )
    blobs = manifest(stack, table)
    assert len(blobs) == FILES and all(len(b["files"]) == 1 for b in blobs), [b["files"] for b in blobs]
    return table


def test_a_selective_where_reads_only_the_blobs_its_min_max_allow(stack: Stack, bucket: str, s3: Any) -> None:
    pipes: list[str] = []
    try:
        check_pruning(stack, load_50_blobs(stack, bucket, s3, pipes))
    finally:
        # The stack is shared by the session: leave its Spark job no 50 idle pipes to poll.
        for pipe in pipes:
            stack.sql(f"DROP PIPE IF EXISTS {pipe}")


def check_pruning(stack: Stack, table: str) -> None:
    """Blobs read and rows returned by selective and non-selective WHEREs, through each way out."""
    cases = [
        # (WHERE, blobs it may read, ids it returns)
        ("id BETWEEN 403 AND 412", 1, list(range(403, 413))),  # inside file 20
        ("id >= 415 AND id < 425", 2, list(range(415, 425))),  # files 20 and 21
        (f"{table}.id = 999", 1, [999]),  # the last file, qualified
        ("id > 5000", 0, []),
        # Nothing prunable: every blob is read.
        ("id >= 0", FILES, list(range(FILES * ROWS))),
        ("id = 3 OR id = 990", FILES, [3, 990]),
        ("id % 250 = 7", FILES, [7, 257, 507, 757]),
    ]
    for where, read, ids in cases:
        got, stats = query(stack, f"SELECT id FROM {table} WHERE {where} ORDER BY id")
        print(
            f"WHERE {where}: read {stats['blobs_scanned']} of {stats['blobs_total']} blobs, {len(got)} rows"
        )
        # One file of 20 rows per blob: one row group each.
        assert stats == {
            "blobs_total": FILES,
            "blobs_scanned": read,
            "row_groups_total": read,
            "row_groups_scanned": read,
        }, where
        assert got == ids, where

    # The same counts reach `floe sql --json --profile` and the API's log line for the query.
    sql = f"SELECT id, name FROM {table} WHERE id BETWEEN 620 AND 621 ORDER BY id"
    run = subprocess.run(
        [str(VENV_BIN / "floe"), "sql", "--json", "--profile", sql],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr.decode()
    out = json.loads(run.stdout)
    print(f"floe sql --json --profile: {out['profile']}")
    assert out == {
        "rows": [{"ID": 620, "NAME": "row 620"}, {"ID": 621, "NAME": "row 621"}],
        "profile": {"blobs_total": FILES, "blobs_scanned": 1, "row_groups_total": 1, "row_groups_scanned": 1},
    }
    # Without --profile the JSON output is the bare array it always was.
    plain = subprocess.run(
        [str(VENV_BIN / "floe"), "sql", "--json", sql],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        timeout=120,
    )
    assert json.loads(plain.stdout) == out["rows"]

    def logged() -> list[dict[str, Any]]:
        lines = [json.loads(x) for x in stack.log_text("api").splitlines() if x.startswith('{"ts"')]
        return [x for x in lines if x.get("blobs_total") == FILES and x.get("blobs_scanned") == 1]

    entry = wait_until(logged, timeout=10, what="the query's log line")[-1]
    print(f"API log: {entry}")
    assert entry["msg"] == f"query read 1 of {FILES} blobs ({FILES - 1} skipped by min/max statistics)"
    assert entry["request_id"]
