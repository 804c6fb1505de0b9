"""Internal stages end to end, as a user meets them: `floe put` (the CLI, through the API), a pipe
on the stage loading through insertFiles and ALTER PIPE ... REFRESH as Snowpipe does, the Spark
job reading the sealed files (whole, and streamed in parts), `floe get` back, and a file altered
at rest failing alone. Each test runs alone: pytest tests/e2e/test_internal_stages.py -k <name>.
The statements' rules in detail: tests/services/test_stages.py."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.harness import unique
from floe.catalog import Catalog, Stage, split_s3_url
from floe.keys import Keys
from front.client import auth_header
from tests.conftest import ROOT, VENV_BIN, Stack, wait_until
from tests.e2e.test_autoingest import csv_file, history

pytestmark = pytest.mark.e2e


def floe(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """`floe <args>` as a user runs it, against the stack."""
    return subprocess.run(
        [str(VENV_BIN / "floe"), *args],
        cwd=ROOT,
        env={**stack.env, "COLUMNS": "200"},  # rich tables: one line per row
        capture_output=True,
        text=True,
        timeout=120,
    )


def put(stack: Stack, source: Path | str, location: str, *options: str) -> list[dict[str, Any]]:
    run = floe(stack, "put", "--json", f"file://{source}", location, *options)
    assert run.returncode == 0, run.stdout + run.stderr
    rows: list[dict[str, Any]] = json.loads(run.stdout)
    return rows


def insert_files(stack: Stack, pipe: str, paths: list[str]) -> None:
    """Snowpipe's insertFiles for the stage-relative ``paths``, as the admin."""
    url = f"http://127.0.0.1:{stack.settings.api.port}/v1/data/pipes/FLOE.PUBLIC.{pipe}/insertFiles"
    resp = httpx.post(
        url,
        params={"requestId": unique("r")},
        json={"files": [{"path": p} for p in paths]},
        headers=auth_header(stack.settings),
        timeout=30,
    )
    assert resp.status_code == 200 and resp.json()["responseCode"] == "SUCCESS", resp.text


def statuses(stack: Stack, table: str) -> dict[str, str]:
    return {str(r["FILE_NAME"]): str(r["STATUS"]) for r in history(stack, table)}


def make_table(stack: Stack) -> str:
    table = unique("t_")
    stack.sql(
        f"CREATE TABLE {table} (id INT NOT NULL, name VARCHAR, amount NUMBER(10,2), day DATE, file VARCHAR)"
    )
    return table


def test_internal_stage_put_and_insert_files_load_decrypted_rows(stack: Stack, tmp_path: Path) -> None:
    stage, pipe = unique("st_"), unique("p_")
    table = make_table(stack)
    stack.sql(f"CREATE STAGE {stage} FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)")
    stack.sql(
        f"CREATE PIPE {pipe} AS COPY INTO {table} FROM "
        f"(SELECT $1, $2, $3, $4, METADATA$FILENAME FROM @{stage})"
    )
    (tmp_path / "a.csv").write_bytes(csv_file(0, 5))
    (tmp_path / "b.csv").write_bytes(csv_file(5, 3))
    rows = put(stack, tmp_path / "*.csv", f"@{stage}/in")
    assert [(r["source"], r["target"], r["status"]) for r in rows] == [
        ("a.csv", "a.csv.gz", "UPLOADED"),
        ("b.csv", "b.csv.gz", "UPLOADED"),
    ]
    listed = stack.sql(f"LIST @{stage}")
    assert [r["name"] for r in listed] == [f"{stage.lower()}/in/a.csv.gz", f"{stage.lower()}/in/b.csv.gz"]

    insert_files(stack, pipe, ["in/a.csv.gz", "in/b.csv.gz"])
    wanted = {"in/a.csv.gz": "Loaded", "in/b.csv.gz": "Loaded"}
    wait_until(lambda: statuses(stack, table) == wanted, what="both files loaded")
    loaded = stack.sql(f"SELECT id, name, amount, file FROM {table} ORDER BY id")
    assert [r["ID"] for r in loaded] == list(range(8))
    assert loaded[0]["NAME"] == "name 0" and loaded[0]["AMOUNT"] == 0.5 and loaded[0]["FILE"] == "in/a.csv.gz"


def test_table_stage_pipe_loads_what_alter_pipe_refresh_sends(stack: Stack, tmp_path: Path) -> None:
    table, pipe = make_table(stack), unique("p_")
    stack.sql(
        f"CREATE PIPE {pipe} AS COPY INTO {table} (id, name, amount, day) FROM @%{table} "
        "FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
    )
    (tmp_path / "rows.csv").write_bytes(csv_file(0, 4))
    assert put(stack, tmp_path / "rows.csv", f"@%{table}")[0]["status"] == "UPLOADED"
    refreshed = {str(r["File"]): str(r["Status"]) for r in stack.sql(f"ALTER PIPE {pipe} REFRESH")}
    assert refreshed == {"rows.csv.gz": "SENT"}
    wait_until(lambda: statuses(stack, table) == {"rows.csv.gz": "Loaded"}, what="rows.csv.gz loaded")
    assert stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"] == 4
    again = {str(r["File"]): str(r["Status"]) for r in stack.sql(f"ALTER PIPE {pipe} REFRESH")}
    assert again == {"rows.csv.gz": "SKIPPED"}


def streamed_lines(stack: Stack, mark: int, pipe: str, path: str) -> list[dict[str, Any]]:
    """The pipeline's "streamed" lines (a task's line for a file it read in parts) logged after
    ``mark`` for one file of one pipe. The session's log holds every earlier test's lines, and
    other tests stream files too."""
    complete = stack.log_since("pipeline", mark).split("\n")[:-1]  # not a line still being written
    lines = [json.loads(x) for x in complete if x.startswith('{"ts"')]
    return [
        x
        for x in lines
        if x["msg"].startswith("streamed s3://")
        and x.get("pipe") == f"FLOE.PUBLIC.{pipe.upper()}"
        and x.get("file") == path
    ]


def test_a_large_internal_file_is_decrypted_as_it_streams(stack: Stack, tmp_path: Path) -> None:
    """Over the stack's 8 MiB streaming threshold, uncompressed: the task reads it in parts,
    decrypting a segment at a time."""
    mark = stack.log_mark("pipeline")
    stage, pipe = unique("st_"), unique("p_")
    table = make_table(stack)
    stack.sql(f"CREATE STAGE {stage} FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)")
    stack.sql(f"CREATE PIPE {pipe} AS COPY INTO {table} (id, name, amount, day) FROM @{stage}")
    n = 250_000
    (tmp_path / "big.csv").write_bytes(csv_file(0, n))
    (row,) = put(stack, tmp_path / "big.csv", f"@{stage}", "AUTO_COMPRESS", "=", "FALSE")
    assert row["target"] == "big.csv" and row["target_size"] > stack.settings.pipeline.stream_file_bytes
    insert_files(stack, pipe, ["big.csv"])
    wait_until(lambda: statuses(stack, table) == {"big.csv": "Loaded"}, timeout=180, what="big.csv loaded")
    counted = stack.sql(f"SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d, MAX(id) AS m FROM {table}")[0]
    assert (counted["N"], counted["D"], counted["M"]) == (n, n, n - 1)
    # This test's file, read in parts, all of it. Its task logs the line from a Python worker,
    # whose output may reach the log after the driver has committed the file.
    lines = wait_until(
        lambda: streamed_lines(stack, mark, pipe, "big.csv"), timeout=30, what="big.csv's streamed line"
    )
    line = lines[-1]
    parts = re.search(r": (\d+) parts,", line["msg"])
    assert parts and int(parts[1]) > 1 and (line["status"], line["rows"]) == ("LOADED", n), line


def test_a_file_altered_at_rest_fails_alone(stack: Stack, tmp_path: Path, s3: Any) -> None:
    stage, pipe = unique("st_"), unique("p_")
    table = make_table(stack)
    stack.sql(f"CREATE STAGE {stage} FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)")
    stack.sql(f"CREATE PIPE {pipe} AS COPY INTO {table} (id, name, amount, day) FROM @{stage}")
    (tmp_path / "good.csv").write_bytes(csv_file(0, 2))
    (tmp_path / "bad.csv").write_bytes(csv_file(10, 2))
    put(stack, tmp_path / "*.csv", f"@{stage}")
    bucket, prefix = split_s3_url(stage_url(stack, stage))
    key = prefix + "bad.csv.gz"
    body = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    body[-5] ^= 1  # a user of the bucket changes a byte
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(body))
    insert_files(stack, pipe, ["good.csv.gz", "bad.csv.gz"])
    wanted = {"good.csv.gz": "Loaded", "bad.csv.gz": "Load failed"}
    wait_until(lambda: statuses(stack, table) == wanted, what="good loaded, bad failed")
    (bad,) = [r for r in history(stack, table) if r["FILE_NAME"] == "bad.csv.gz"]
    assert "cannot be decrypted" in str(bad["FIRST_ERROR_MESSAGE"])
    assert stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"] == 2


def stage_url(stack: Stack, stage: str) -> str:
    """Where the catalog keeps an internal stage's files (SHOW and DESC do not say)."""
    with closing(stack.settings.redis.client()) as client:
        found = Catalog(client, Keys(stack.settings.redis.prefix)).get(Stage, f"FLOE.PUBLIC.{stage.upper()}")
    return found.url


def test_floe_get_and_floe_sql_put_round_trip(stack: Stack, tmp_path: Path) -> None:
    stage = unique("st_")
    stack.sql(f"CREATE STAGE {stage}")
    src = tmp_path / "src"
    src.mkdir()
    (src / "d.csv").write_bytes(csv_file(0, 100))
    run = floe(stack, "sql", f"PUT file://{src}/d.csv @{stage}/x OVERWRITE = TRUE")
    assert run.returncode == 0 and "UPLOADED" in run.stdout, run.stdout + run.stderr
    out = tmp_path / "out"
    run = floe(stack, "get", f"@{stage}/x", f"file://{out}/")
    assert run.returncode == 0 and "DOWNLOADED" in run.stdout, run.stdout + run.stderr
    assert gzip.decompress((out / "d.csv.gz").read_bytes()) == csv_file(0, 100)
