"""Exactly once under crashes and redelivery: kill each process mid-load, restart it, check the table.

Every test loads a known set of files with a known row count each, injects one fault, restarts
what it broke, and then checks, through `floe sql`, that each file is in the table exactly once:
no (file, row number) pair twice, the exact row count per file, and one LOADED history entry per
file. The docstring of each test names the safeguard it exercises; disable that safeguard and the
test fails.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from floe.aws import client as aws_client
from floe.keypair import sign_token
from floe.settings import Settings
from infra.stack import ensure_services, running_pid
from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import history, make_pipe
from tests.e2e.test_snowpipe_sdk import grant_operate

pytestmark = pytest.mark.chaos

ROWS = 5


def file_set(n: int, tag: str) -> dict[str, bytes]:
    """``n`` CSV files of ROWS rows each, keyed by stage-relative name."""
    out: dict[str, bytes] = {}
    for i in range(n):
        lines = ["id,name,amount,day"] + [
            f"{i * ROWS + j},{tag} {i}/{j},{j}.25,2026-02-{1 + j:02d}" for j in range(ROWS)
        ]
        out[f"{tag}/f{i:04d}.csv"] = ("\n".join(lines) + "\n").encode()
    return out


def put_all(s3: Any, bucket: str, files: dict[str, bytes], prefix: str = "in/") -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=bucket, Key=prefix + kv[0], Body=kv[1]), files.items()))


def loaded_count(stack: Stack, table: str) -> int:
    try:
        return int(stack.sql(f"SELECT COUNT(DISTINCT file) AS n FROM {table}")[0]["N"])
    except Exception:  # the API may be the process under test
        return -1


def wait_all_loaded(stack: Stack, table: str, files: dict[str, bytes], timeout: float = 300) -> None:
    wait_until(
        lambda: len([h for h in history(stack, table) if h["STATUS"] != "Load in progress"]) >= len(files),
        timeout=timeout,
        interval=1.0,
        what=f"{len(files)} files in COPY_HISTORY",
    )


def assert_exactly_once(stack: Stack, table: str, files: dict[str, bytes]) -> None:
    """Each file's rows exactly once, and exactly one LOADED history entry per file."""
    dupes = stack.sql(
        f"SELECT file, row_no, COUNT(*) AS n FROM {table} GROUP BY file, row_no HAVING COUNT(*) > 1 LIMIT 5"
    )
    assert dupes == [], f"rows loaded twice: {dupes}"
    per_file = {
        r["FILE"]: r["N"] for r in stack.sql(f"SELECT file, COUNT(*) AS n FROM {table} GROUP BY file")
    }
    missing = sorted(set(files) - set(per_file))
    assert not missing, f"{len(missing)} files never loaded, e.g. {missing[:3]}"
    assert per_file == dict.fromkeys(files, ROWS)
    assert stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"] == ROWS * len(files)
    hist = history(stack, table)
    names = [h["FILE_NAME"] for h in hist]
    assert sorted(names) == sorted(files), "COPY_HISTORY must hold exactly one entry per file"
    assert {h["STATUS"] for h in hist} == {"Loaded"}
    assert {h["ROW_COUNT"] for h in hist} == {ROWS}


def wait_dead(stack: Stack, name: str, timeout: float = 180) -> int:
    """Wait for a process that is meant to crash; returns its exit code."""
    proc = stack.procs[name]
    wait_until(lambda: proc.poll() is not None, timeout=timeout, what=f"{name} to crash")
    stack.stop(name)  # reaps it and waits until its whole process group is gone
    return int(proc.returncode)


def restart_with(stack: Stack, name: str, env: dict[str, str]) -> None:
    stack.stop(name)
    stack.start(name, env=env)


@pytest.mark.parametrize(
    ("point", "hit"),
    [("pipeline.reading", 40), ("pipeline.after_blobs", 1), ("pipeline.after_commit", 1)],
)
def test_spark_job_killed_mid_load(stack: Stack, bucket: str, s3: Any, point: str, hit: int) -> None:
    """kill -9 of the Spark job (driver, JVM and workers) while reading, between the blob writes and
    the registrar's commit, and right after the commit.

    Safeguards: Spark's offset log replays the same queue range after a restart; blob names are
    deterministic per batch, so a replay overwrites instead of adding; the registrar's batch marker
    makes a replayed commit a no-op; queue entries leave only in the commit.
    """
    table, _ = make_pipe(stack, bucket)
    files = file_set(240, "kill")
    restart_with(stack, "pipeline", {"FLOE_FAULTS__CRASH_AT": point, "FLOE_FAULTS__CRASH_ON_HIT": str(hit)})
    put_all(s3, bucket, files)
    assert wait_dead(stack, "pipeline") == -signal.SIGKILL
    stack.start("pipeline")
    wait_all_loaded(stack, table, files)
    assert_exactly_once(stack, table, files)


def test_consumer_killed_between_enqueue_and_delete(stack: Stack, bucket: str, s3: Any) -> None:
    """kill -9 of a consumer after the Redis step and before the SQS delete: the messages come back.

    Safeguards: the SQS delete only follows a successful dedup-and-enqueue; the (pipe, path) dedup
    key makes the redelivered messages enqueue nothing.
    """
    table, _ = make_pipe(stack, bucket)
    files = file_set(200, "consumer")
    restart_with(
        stack,
        "consumer",
        {"FLOE_FAULTS__CRASH_AT": "consumer.after_enqueue", "FLOE_FAULTS__CRASH_ON_HIT": "3"},
    )
    mark = len(stack.log_text("consumer"))
    put_all(s3, bucket, files)
    assert wait_dead(stack, "consumer") == -signal.SIGKILL
    stack.start("consumer")
    wait_all_loaded(stack, table, files)
    assert_exactly_once(stack, table, files)
    # The killed consumer's messages come back only once their visibility timeout ends, which may
    # be after every file has loaded: wait for the redelivery itself, with a bound, then check
    # again that it added nothing.
    visibility = stack.settings.consumer.visibility_timeout_s
    wait_until(
        lambda: "skipped: already seen by this pipe" in stack.log_text("consumer")[mark:],
        timeout=3 * visibility + 30,
        what="the killed consumer's messages to be redelivered and deduplicated",
    )
    assert_exactly_once(stack, table, files)


def test_two_consumers_share_one_queue(stack: Stack, bucket: str, s3: Any) -> None:
    """Two consumer processes poll the same queue at once.

    Safeguard: dedup and enqueue are one atomic Lua step per (pipe, path), so two consumers that
    see the same notification (or its redelivery) enqueue the file once.
    """
    table, _ = make_pipe(stack, bucket)
    files = file_set(300, "two")
    mark = {name: len(stack.log_text(name)) for name in ("consumer", "consumer2")}
    stack.start("consumer2", command="consumer")
    try:
        put_all(s3, bucket, files)
        wait_all_loaded(stack, table, files)
    finally:
        stack.stop("consumer2")
    assert_exactly_once(stack, table, files)
    for name in ("consumer", "consumer2"):
        assert '"msg": "enqueued"' in stack.log_text(name)[mark[name] :], f"{name} took no messages"


def test_api_killed_while_insert_files_calls_are_in_flight(stack: Stack, bucket: str, s3: Any) -> None:
    """kill -9 of the API while clients call insertFiles; they retry on errors, as the SDK does.

    Safeguards: insertFiles answers 200 only after the durable Redis step, and the dedup key makes
    a retry of a call that had gone through enqueue nothing.
    """
    table, pipe = make_pipe(stack, bucket, auto_ingest=False)
    files = file_set(300, "api")
    put_all(s3, bucket, files)
    user, key = grant_operate(stack, pipe)
    token = sign_token(stack.settings.account, user, key)
    pipe = f"FLOE.PUBLIC.{pipe}"
    names = sorted(files)
    batches = [names[i : i + 10] for i in range(0, len(names), 10)]
    succeeded: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()

    def call(batch: list[str]) -> None:
        url = f"http://127.0.0.1:{stack.settings.api.port}/v1/data/pipes/{pipe}/insertFiles"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                resp = httpx.post(
                    url,
                    json={"files": [{"path": p} for p in batch]},
                    headers={"Authorization": f"Bearer {token}"},
                )
                if resp.status_code == 200:
                    with lock:
                        succeeded.append(len(batch))
                    return
                if resp.status_code < 500:
                    with lock:
                        errors.append(resp.text)
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        errors.append("gave up")

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(call, b) for b in batches]
        wait_until(lambda: len(succeeded) >= 5, timeout=60, interval=0.01, what="the first calls")
        stack.stop("api", signal.SIGKILL)
        time.sleep(1)
        stack.start("api")
        for f in futures:
            f.result()
    assert errors == [] and sum(succeeded) == len(files)
    wait_all_loaded(stack, table, files)
    assert_exactly_once(stack, table, files)


def test_redis_killed_and_restarted_mid_load(stack: Stack, services: Settings, bucket: str, s3: Any) -> None:
    """kill -9 of Redis mid-load, then a restart that replays its append-only file.

    Safeguards: Redis runs with appendfsync always, so every acknowledged step (dedup, commit) is on
    disk before the acknowledgement; processes treat Redis errors as transient and retry (the
    consumer leaves the message in SQS, the Spark job restarts its query from the checkpoint).
    """
    table, _ = make_pipe(stack, bucket)
    files = file_set(300, "redis")
    pid = running_pid("redis", services)
    assert pid is not None, "the tests' Redis must be one that infra.stack started (make test does)"
    put_all(s3, bucket, files)
    wait_until(lambda: loaded_count(stack, table) >= 1, timeout=120, what="the first loaded file")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: running_pid("redis", services) is None, timeout=30, what="redis to die")
    time.sleep(2)  # long enough for every process to notice
    ensure_services(services)
    wait_all_loaded(stack, table, files)
    assert_exactly_once(stack, table, files)


def test_slow_enqueue_outlasting_the_visibility_timeout(stack: Stack, bucket: str, s3: Any) -> None:
    """A dedup step slower than SQS's visibility timeout: the consumer extends the visibility.

    Safeguard: the consumer calls ChangeMessageVisibility while a message's step runs, so SQS
    does not hand the message to another poller (no redelivery, nothing in the dead-letter queue);
    were the extension to fail, dedup would still keep the redelivery harmless.
    """
    table, _ = make_pipe(stack, bucket)
    files = file_set(16, "slow")
    env = {"FLOE_CONSUMER__VISIBILITY_TIMEOUT_S": "2", "FLOE_FAULTS__ENQUEUE_DELAY_S": "3"}
    mark = len(stack.log_text("consumer"))
    restart_with(stack, "consumer", env)
    try:
        put_all(s3, bucket, files)
        wait_all_loaded(stack, table, files)
    finally:
        restart_with(stack, "consumer", {})
    assert_exactly_once(stack, table, files)
    log = stack.log_text("consumer")[mark:]
    assert "extended the visibility" in log
    assert "skipped: already seen by this pipe" not in log, "no message should have been redelivered"
    sqs = aws_client(stack.settings.aws, "sqs")
    dlq = sqs.get_queue_url(QueueName=stack.settings.consumer.dlq_name)["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])
    assert attrs["Attributes"]["ApproximateNumberOfMessages"] == "0"


def test_sigterm_drains_every_process_and_nothing_is_redone(stack: Stack, bucket: str, s3: Any) -> None:
    """SIGTERM to the consumer, the Spark job and the API mid-load: each drains and exits 0.

    Safeguards: the first SIGTERM lets the consumer finish its messages and the Spark job finish
    and commit its running micro-batch before stopping; after the restart no batch is replayed.
    """
    table, _ = make_pipe(stack, bucket)
    files = file_set(240, "drain")
    put_all(s3, bucket, files)
    wait_until(lambda: loaded_count(stack, table) >= 1, timeout=120, what="the first loaded file")
    for name in ("consumer", "pipeline", "api"):
        assert stack.stop(name, signal.SIGTERM) == 0, f"{name} did not drain and exit cleanly"
    mark = len(stack.log_text("pipeline"))
    for name in ("api", "consumer", "pipeline"):
        stack.start(name)
    wait_all_loaded(stack, table, files)
    assert_exactly_once(stack, table, files)
    assert "replay skipped" not in stack.log_text("pipeline")[mark:], "a drained batch was run again"
