"""Operating Floe from the terminal, end to end: a file's journey through every process's log found
with one grep of its name (README, "Logs, progress and `floe status`"), and the real
`floe status --json` against the stack after a load, as an admin and as a user who may see one pipe.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from snowflake.ingest import StagedFile

from floe.keypair import new_private_key, private_key_pem, public_key_body
from tests.conftest import Stack, unique, wait_until
from tests.e2e.test_autoingest import csv_file, done, make_pipe
from tests.e2e.test_snowpipe_sdk import manager, rest_pipe

pytestmark = pytest.mark.e2e

STEPS = ["enqueued", "picked", "loaded", "committed"]
"""A file's journey, one log line a step: dedup in the process that received it, the micro-batch
that picks it (the Spark driver), the Python worker that reads, transforms and writes it, and the
registrar's commit (its load history)."""


def grep(stack: Stack, file: str) -> list[str]:
    """What `grep -h '"file": "<file>"' <logs>/*.log` prints (the README's command)."""
    needle = f'"file": {json.dumps(file, ensure_ascii=False)}'
    return [
        line
        for path in sorted(stack.logs.glob("*.log"))
        for line in path.read_text(errors="replace").splitlines()
        if needle in line
    ]


def journey(stack: Stack, pipe: str, file: str) -> list[dict[str, Any]]:
    """The grep's lines of one pipe, oldest first."""
    entries = [json.loads(line) for line in grep(stack, file)]
    return sorted((e for e in entries if e.get("pipe") == pipe), key=lambda e: e["ts"])


def whole_journey(stack: Stack, pipe: str, file: str) -> list[dict[str, Any]]:
    """The journey once its last step is logged (just after the commit the history shows)."""
    return wait_until(
        lambda: (j := journey(stack, pipe, file)) and j[-1].get("step") == "committed" and j,
        what=lambda: f"the committed line of {file}: {journey(stack, pipe, file)}",
    )


def test_a_files_journey_is_one_grep_across_the_processes_logs(stack: Stack, bucket: str, s3: Any) -> None:
    table, name = make_pipe(stack, bucket)
    pipe = f"FLOE.PUBLIC.{name.upper()}"
    good, bad = "journey/ok ü.csv", "journey/bad.csv"
    s3.put_object(Bucket=bucket, Key=f"in/{good}", Body=csv_file(0, 5))
    s3.put_object(Bucket=bucket, Key=f"in/{bad}", Body=b"id,name,amount,day\n1,a,oops,2026-01-01\n")
    wait_until(lambda: done(stack, table, 2), what="both files in the load history")

    ok = whole_journey(stack, pipe, good)
    assert [e["step"] for e in ok] == STEPS, ok  # every step, once
    # Two small files: a batch the job's driver loads itself (decision 95), so every line after
    # the consumer's is the driver's, the last one too.
    assert [e["process"] for e in ok] == ["consumer", "pipeline", "pipeline", "pipeline"]
    assert ok[0]["source"] == "notification" and "batch" not in ok[0]  # no micro-batch yet
    batch = ok[1]["batch"]
    assert isinstance(batch, int) and all(e["batch"] == batch for e in ok[1:])
    assert (ok[2]["status"], ok[2]["rows"]) == ("LOADED", 5) and "written to blob" in ok[2]["msg"]
    assert (ok[3]["level"], ok[3]["msg"], ok[3]["rows"]) == ("INFO", "committed: LOADED, 5 rows", 5)

    failed = whole_journey(stack, pipe, bad)
    assert [e["step"] for e in failed] == STEPS, failed
    assert failed[2]["status"] == "LOAD_FAILED" and "blob" not in failed[2]["msg"]
    assert failed[3]["level"] == "WARNING"
    assert failed[3]["msg"] == "load failed: Numeric value 'oops' is not recognized"

    # What a journey costs in the logs (README: the volume for 10,000 files).
    size = sum(len(line.encode()) + 1 for line in grep(stack, good))
    print(f"log bytes for one file's journey: {size}")
    assert size < 2000


def test_an_insertfiles_journey_starts_in_the_api_log(stack: Stack, bucket: str, s3: Any) -> None:
    pipe, _, user, pem = rest_pipe(stack, bucket)
    s3.put_object(Bucket=bucket, Key="rest/via-rest.csv", Body=csv_file(0, 2))
    answer = manager(stack, pipe, user, pem).ingest_files([StagedFile("via-rest.csv", None)])
    assert answer["responseCode"] == "SUCCESS"
    steps = whole_journey(stack, pipe.upper(), "via-rest.csv")
    assert [e["step"] for e in steps] == STEPS, steps
    enqueued = steps[0]
    assert (enqueued["process"], enqueued["source"]) == ("api", "rest") and enqueued["request_id"]


def floe_status(stack: Stack, *args: str) -> dict[str, Any]:
    """The real `floe status --json`, in a process of its own as a user runs it."""
    run = stack.cli("status", "--json", *args)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("\n") == 1, run.stdout  # one JSON object, nothing else
    return dict(json.loads(run.stdout))


def test_floe_status_json_after_a_load(stack: Stack, bucket: str, s3: Any, tmp_path: Any) -> None:
    table, name = make_pipe(stack, bucket)
    _, other = make_pipe(stack, bucket)
    pipe = f"FLOE.PUBLIC.{name.upper()}"
    s3.put_object(Bucket=bucket, Key="in/status-ok.csv", Body=csv_file(0, 4))
    s3.put_object(Bucket=bucket, Key="in/status-bad.csv", Body=b"id,name,amount,day\n1,a,oops,2026-01-01\n")
    wait_until(lambda: done(stack, table, 2), what="both files in the load history")

    doc = floe_status(stack)
    assert doc["error"] is None and doc["api"]["reachable"] is True
    row = next(p for p in doc["pipes"] if p["name"] == pipe)
    assert (row["state"], row["pending"]) == ("RUNNING", 0)
    assert (row["loaded_last_hour"], row["rows_last_hour"], row["failed_last_hour"]) == (1, 4, 1)
    assert sum(row["per_minute"]) == 1 and row["last_ingested"]
    assert row["last_error"].startswith("status-bad.csv: Numeric value 'oops' is not recognized (line 2")
    assert f"FLOE.PUBLIC.{other.upper()}" in {p["name"] for p in doc["pipes"]}

    # A user whose role may monitor the one pipe sees it, its figures and nothing else.
    role, user, key = unique("r_"), unique("u_"), new_private_key()
    for statement in (
        f"CREATE ROLE {role}",
        f"CREATE USER {user} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}' DEFAULT_ROLE = {role}",
        f"GRANT ROLE {role} TO USER {user}",
        f"GRANT USAGE ON DATABASE FLOE TO ROLE {role}",
        f"GRANT USAGE ON SCHEMA FLOE.PUBLIC TO ROLE {role}",
        f"GRANT MONITOR ON PIPE {pipe} TO ROLE {role}",
    ):
        stack.sql(statement)
    key_file = tmp_path / "user.p8"
    key_file.write_text(private_key_pem(key))
    mine = floe_status(stack, "--user", user, "--private-key-file", str(key_file))
    assert [p["name"] for p in mine["pipes"]] == [pipe]
    (seen,) = mine["pipes"]
    assert (seen["loaded_last_hour"], seen["failed_last_hour"], seen["unavailable"]) == (1, 1, [])
