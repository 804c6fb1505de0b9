"""Exactly once under crashes and redelivery: kill each process mid-load, restart it, check the table.

Every test loads a known set of files with a known row count each, injects one fault, checks that
the fault fired while the load was still under way, restarts what it broke, and then hands the table
to the oracle (tests/chaos/oracle.py): SQL, COPY_HISTORY and the decrypted blobs must each hold
every file exactly once, nothing may be left queued, all of it must still hold after a settle
period, and no blob may be left that no manifest names. The docstring of each test names the
safeguard it exercises; disable that safeguard and the test fails.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from floe.aws import client as aws_client
from floe.keypair import sign_token
from floe.settings import Settings
from front.client import SqlFailed
from infra.stack import ensure_services, running_pid
from tests.chaos.oracle import (
    assert_exactly_once,
    assert_rows_exactly_once,
    csv_row,
    file_set,
    incarnation_prefix,
    pending,
    scan_table,
)
from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import history, make_pipe
from tests.e2e.test_snowpipe_sdk import grant_operate

pytestmark = pytest.mark.chaos


def put_all(s3: Any, bucket: str, files: dict[str, bytes], prefix: str = "in/") -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=bucket, Key=prefix + kv[0], Body=kv[1]), files.items()))


def loaded_count(stack: Stack, table: str) -> int:
    try:
        return int(stack.sql(f"SELECT COUNT(DISTINCT file) AS n FROM {table}")[0]["N"])
    except SqlFailed:  # the API may be the process under test
        return -1


def wait_all_loaded(stack: Stack, table: str, files: dict[str, bytes], timeout: float = 300) -> None:
    wait_until(
        lambda: len([h for h in history(stack, table) if h["STATUS"] != "Load in progress"]) >= len(files),
        timeout=timeout,
        interval=1.0,
        what=f"{len(files)} files in COPY_HISTORY",
    )


def last_load(stack: Stack, table: str) -> dt.datetime:
    """The latest LAST_LOAD_TIME in the table's COPY_HISTORY."""
    times = [dt.datetime.fromisoformat(h["LAST_LOAD_TIME"]) for h in history(stack, table)]
    return max(t if t.tzinfo else t.replace(tzinfo=dt.UTC) for t in times)


def wait_dead(stack: Stack, name: str, timeout: float = 180) -> int:
    """Wait for a process that is meant to crash; returns its exit code."""
    proc = stack.procs[name]
    wait_until(lambda: proc.poll() is not None, timeout=timeout, what=f"{name} to crash")
    stack.stop(name)  # reaps it and waits until its whole process group is gone
    return int(proc.returncode)


def restart_with(stack: Stack, name: str, env: dict[str, str]) -> None:
    stack.stop(name)
    stack.start(name, env=env)


def crash_env(stack: Stack, point: str, hit: int = 1) -> dict[str, str]:
    """Settings that crash a process started with them at ``point`` (see ``arm`` for a running one)."""
    return {
        "FLOE_FAULTS__CRASH_AT": point,
        "FLOE_FAULTS__CRASH_ON_HIT": str(hit),
        "FLOE_FAULTS__RECORD_FILE": str(Path(stack.settings.state_dir) / "faults.log"),
    }


def arm(stack: Stack, **faults: object) -> None:
    """Arm faults (FaultSettings fields) in the stack's running processes, and in any it starts
    until ``disarm``: no restart, which for the Spark job costs half a minute. A crash is recorded
    where ``fired`` looks."""
    path = Path(stack.settings.faults.arm_file)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"record_file": str(Path(stack.settings.state_dir) / "faults.log"), **faults}))
    os.replace(tmp, path)  # whole or not at all: a process never reads half of it


def disarm(stack: Stack) -> None:
    Path(stack.settings.faults.arm_file).unlink(missing_ok=True)


def crashes(stack: Stack, point: str) -> list[tuple[int, int]]:
    """(pid, process tree) of each crash at ``point``, oldest first (the record Faults.hit keeps)."""
    record = Path(stack.settings.state_dir) / "faults.log"
    lines = [line.split() for line in record.read_text().splitlines()] if record.exists() else []
    return [(int(pid), int(tree)) for at, pid, tree in lines if at == point]


def fired(stack: Stack, point: str) -> int:
    """How often a process tree has crashed itself at ``point``."""
    return len(crashes(stack, point))


def batch_parts(stack: Stack, table: str, batch: int) -> set[int]:
    """The task numbers in the names of the blobs micro-batch ``batch`` wrote for ``table``,
    committed or not (pipeline.loader.blob_name): {0} when it loaded in the driver, which loads a
    batch as one task; one per Spark task otherwise."""
    scan = scan_table(stack.settings, table, csv_row)
    tag = f"-{batch:010d}-"
    return {int(name.split(tag, 1)[1][:4]) for name in scan.committed + scan.orphans if tag in name}


def killed_on(stack: Stack, point: str, table: str, batch: int) -> str:
    """Where the last crash at ``point`` hit the load: ``driver`` or ``tasks``.

    A crash while reading is in the process that reads: the driver, which leads the job's process
    tree, or a Spark Python worker. The later points run in the driver whatever the path, so the
    killed batch's blob names tell: a batch loaded in the driver writes only task 0's."""
    if point == "pipeline.reading":
        pid, tree = crashes(stack, point)[-1]
        return "driver" if pid == tree else "tasks"
    parts = batch_parts(stack, table, batch)
    assert parts, f"batch {batch} wrote no blobs before the kill at {point}"
    return "driver" if parts == {0} else "tasks"


def checkpoint_batches(stack: Stack) -> tuple[int, set[int]]:
    """(the last planned micro-batch, the committed ones) from the Spark job's checkpoint."""

    def ids(sub: str) -> set[int]:
        folder = Path(stack.settings.pipeline.checkpoint_dir) / sub
        return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()

    return max(ids("offsets"), default=-1), ids("commits")


@pytest.mark.parametrize("path", ["driver", "tasks"])
@pytest.mark.parametrize(
    ("point", "hit"),
    [("pipeline.reading", 40), ("pipeline.after_blobs", 1), ("pipeline.after_commit", 1)],
)
def test_spark_job_killed_mid_load(
    stack: Stack, bucket: str, s3: Any, point: str, hit: int, path: str
) -> None:
    """kill -9 of the Spark job (driver, JVM and workers) while reading, between the blob writes and
    the registrar's commit, and right after the commit; with the batch loading in the driver, and
    in Spark tasks (``faults.load_path``; the replay goes by size again).

    Safeguards: Spark's offset log replays the same queue range after a restart; blob names are
    deterministic per batch, so a replay overwrites instead of adding, and a replay planned otherwise
    than its killed attempt deletes what the attempt wrote (``BatchProcessor._sweep``); the
    registrar's batch marker makes a replayed commit a no-op; queue entries leave only in the commit.
    """
    table, pipe = make_pipe(stack, bucket)
    files = file_set(240, "kill")
    before = fired(stack, point)
    arm(stack, crash_at=point, crash_on_hit=hit, load_path=path)
    put_all(s3, bucket, files)
    assert wait_dead(stack, "pipeline") == -signal.SIGKILL
    assert fired(stack, point) == before + 1
    disarm(stack)
    killed, committed = checkpoint_batches(stack)
    assert killed not in committed, "the kill must interrupt a micro-batch"
    assert killed_on(stack, point, table, killed) == path, f"the kill must hit a load in the {path}"
    if point == "pipeline.after_commit":
        assert loaded_count(stack, table) >= 1, "the registrar's commit must precede the kill"
    else:
        assert loaded_count(stack, table) < len(files), "the kill must come before the load is done"
    stack.start("pipeline")
    # The restarted job runs the killed batch again, from its logged range, before any new one.
    wait_until(lambda: killed in checkpoint_batches(stack)[1], what=f"the replay of batch {killed}")
    wait_all_loaded(stack, table, files)
    assert_exactly_once(stack, table, pipe, files)


def test_job_killed_again_while_replaying_the_killed_batch(stack: Stack, bucket: str, s3: Any) -> None:
    """kill -9 of the Spark job after its blob writes, then again in the replay of that same batch.

    Safeguards: the replay reads the range in the offset log, not a new one, however often it is
    interrupted; its blobs overwrite the first attempt's; only the finished replay commits.
    """
    table, pipe = make_pipe(stack, bucket)
    files = file_set(200, "twice")
    before = fired(stack, "pipeline.after_blobs")
    arm(stack, crash_at="pipeline.after_blobs")
    put_all(s3, bucket, files)
    assert wait_dead(stack, "pipeline") == -signal.SIGKILL
    killed, committed = checkpoint_batches(stack)
    assert killed not in committed
    # The restarted job's first batch is the replay of the killed one: the fault, still armed, kills
    # it at the same point.
    stack.start("pipeline")
    assert wait_dead(stack, "pipeline") == -signal.SIGKILL
    assert fired(stack, "pipeline.after_blobs") == before + 2
    disarm(stack)
    again, committed = checkpoint_batches(stack)
    assert (again, killed in committed) == (killed, False), "the second kill must hit the replay"
    assert loaded_count(stack, table) < len(files)
    stack.start("pipeline")
    wait_all_loaded(stack, table, files)
    assert_exactly_once(stack, table, pipe, files)


def test_job_killed_between_the_commits_of_two_pipes_in_one_batch(stack: Stack, bucket: str, s3: Any) -> None:
    """Two pipes read one stage, so one micro-batch holds files of both; kill -9 after the first
    pipe's commit and before the second's.

    Safeguards: each pipe's share of a batch commits on its own, under its own batch marker, and
    takes its files out of the queue; the replay finds nothing left of the committed pipe and
    commits the other. The replay has half the files, so it loads in the driver where the killed
    attempt used Spark tasks, and names its blobs otherwise: it deletes the killed attempt's
    (``BatchProcessor._sweep``), which no manifest names.
    """
    table_a, pipe_a = make_pipe(stack, bucket)
    table_b, pipe_b = make_pipe(stack, bucket)
    files = file_set(60, "pair")
    stack.stop("pipeline")
    put_all(s3, bucket, files)
    for pipe in (pipe_a, pipe_b):
        wait_until(
            lambda p=pipe: pending(stack, p) == (len(files), len(files)), timeout=300, what=f"{pipe}'s queue"
        )
    before = fired(stack, "pipeline.between_commits")
    arm(stack, crash_at="pipeline.between_commits")
    stack.start("pipeline")
    assert wait_dead(stack, "pipeline") == -signal.SIGKILL
    assert fired(stack, "pipeline.between_commits") == before + 1
    disarm(stack)
    counts = sorted(loaded_count(stack, t) for t in (table_a, table_b))
    assert counts == [0, len(files)], "one pipe committed, the other not"
    killed, committed = checkpoint_batches(stack)
    assert killed not in committed
    waiting = table_a if loaded_count(stack, table_a) == 0 else table_b
    assert len(batch_parts(stack, waiting, killed)) > 1, "the killed attempt must load in Spark tasks"
    mark = len(stack.log_text("pipeline"))
    stack.start("pipeline")
    # The replay reads the committed pipe's range too: its entries left the queue in its commit, so
    # it finds nothing of that pipe to do, and loads the other pipe's files.
    wait_until(lambda: killed in checkpoint_batches(stack)[1], what=f"the replay of batch {killed}")
    for table in (table_a, table_b):
        wait_all_loaded(stack, table, files)
    replay = [line for line in stack.log_text("pipeline")[mark:].splitlines() if f'"batch {killed}: ' in line]
    loaded = [line for line in replay if " pipes in " in line]
    assert len(loaded) == 1 and f"{len(files)} files, 1 pipes" in loaded[0], replay
    assert "in the driver" in loaded[0], "the replay must load in the driver, unlike its killed attempt"
    assert any("an earlier attempt of the replayed batch wrote them" in line for line in replay), replay
    # The oracle fails on any orphan: the killed attempt's blobs must be gone.
    for table, pipe in ((table_a, pipe_a), (table_b, pipe_b)):
        assert_exactly_once(stack, table, pipe, files)


def test_pipe_dropped_after_its_killed_batch_wrote_blobs_leaves_only_documented_garbage(
    stack: Stack, bucket: str, s3: Any
) -> None:
    """kill -9 of the Spark job after its blob writes, DROP PIPE before the restart, then a new pipe
    of the same name that loads the same files again.

    Decision 32's one documented exception, asserted by name: the dropped pipe's queue went with it,
    so the replay has nothing of it to load, commit or sweep, and the killed attempt's blobs stay
    under the dropped incarnation's prefix, where no read ever looks. Nothing else may be left, and
    the new pipe loads every file exactly once.
    """
    table, pipe = make_pipe(stack, bucket)
    files = file_set(40, "dropped")
    definition = next(r for r in stack.sql("SHOW PIPES") if r["name"] == pipe.upper())["definition"]
    garbage = incarnation_prefix(stack.settings, table, pipe)
    before = fired(stack, "pipeline.after_blobs")
    arm(stack, crash_at="pipeline.after_blobs")
    put_all(s3, bucket, files)
    assert wait_dead(stack, "pipeline") == -signal.SIGKILL
    assert fired(stack, "pipeline.after_blobs") == before + 1
    disarm(stack)
    written = scan_table(stack.settings, table, csv_row)
    assert written.orphans and all(o.startswith(garbage) for o in written.orphans), written.orphans
    stack.sql(f"DROP PIPE {pipe}")
    stack.sql(f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS {definition}")
    assert incarnation_prefix(stack.settings, table, pipe) != garbage
    stack.start("pipeline")
    put_all(s3, bucket, files)  # notified again: the new incarnation loads them
    wait_all_loaded(stack, table, files)
    scan = assert_exactly_once(stack, table, pipe, files, garbage=garbage)
    assert set(scan.orphans) == set(written.orphans), "exactly the killed attempt's blobs are garbage"


@pytest.mark.parametrize(("point", "hit"), [("consumer.after_receive", 2), ("consumer.after_enqueue", 3)])
def test_consumer_killed_mid_message(stack: Stack, bucket: str, s3: Any, point: str, hit: int) -> None:
    """kill -9 of a consumer after ReceiveMessage (before the Redis step), and after the Redis step
    (before the SQS delete): either way the messages come back after their visibility timeout.

    Safeguards: the SQS delete only follows a successful dedup-and-enqueue; the (pipe, path) dedup
    key makes messages redelivered after the Redis step enqueue nothing.
    """
    table, pipe = make_pipe(stack, bucket)
    files = file_set(200, "consumer")
    before = fired(stack, point)
    arm(stack, crash_at=point, crash_on_hit=hit)
    mark = len(stack.log_text("consumer"))
    put_all(s3, bucket, files)
    assert wait_dead(stack, "consumer") == -signal.SIGKILL
    assert fired(stack, point) == before + 1
    disarm(stack)
    stack.start("consumer")
    wait_all_loaded(stack, table, files)
    # The oracle waits until SQS holds no message, so the killed consumer's batch has come back
    # (after its visibility timeout) and been handled before it checks.
    assert_exactly_once(stack, table, pipe, files)
    if point == "consumer.after_enqueue":
        assert "skipped: already seen by this pipe" in stack.log_text("consumer")[mark:]


def test_two_consumers_share_one_queue(stack: Stack, bucket: str, s3: Any) -> None:
    """Two consumer processes poll the same queue at once.

    Safeguard: dedup and enqueue are one atomic Lua step per (pipe, path), so two consumers that
    see the same notification (or its redelivery) enqueue the file once.
    """
    table, pipe = make_pipe(stack, bucket)
    files = file_set(300, "two")
    mark = {name: len(stack.log_text(name)) for name in ("consumer", "consumer2")}
    stack.start("consumer2", command="consumer")
    try:
        put_all(s3, bucket, files)
        wait_all_loaded(stack, table, files)
    finally:
        stack.stop("consumer2")
    assert_exactly_once(stack, table, pipe, files)
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
    qualified = f"FLOE.PUBLIC.{pipe}"
    names = sorted(files)
    batches = [names[i : i + 10] for i in range(0, len(names), 10)]
    succeeded: list[int] = []
    refused: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()

    def call(batch: list[str]) -> None:
        url = f"http://127.0.0.1:{stack.settings.api.port}/v1/data/pipes/{qualified}/insertFiles"
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
                with lock:
                    refused.append(1)
            time.sleep(0.3)
        errors.append("gave up")

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(call, b) for b in batches]
        wait_until(lambda: len(succeeded) >= 5, timeout=60, interval=0.01, what="the first calls")
        stack.stop("api", signal.SIGKILL)
        # The fault must be seen by the clients, not only by the test: wait until one was refused.
        wait_until(lambda: refused, timeout=30, interval=0.05, what="a client to find the API down")
        stack.start("api")
        for f in futures:
            f.result()
    assert errors == [] and sum(succeeded) == len(files)
    wait_all_loaded(stack, table, files)
    assert_exactly_once(stack, table, pipe, files)


def test_redis_killed_and_restarted_mid_load(stack: Stack, services: Settings, bucket: str, s3: Any) -> None:
    """kill -9 of Redis mid-load, then a restart that replays its append-only file.

    Safeguards: Redis runs with appendfsync always, so every acknowledged step (dedup, commit) is on
    disk before the acknowledgement; processes treat Redis errors as transient and retry (the
    consumer leaves the message in SQS, the Spark job restarts its query from the checkpoint).
    """
    table, pipe = make_pipe(stack, bucket)
    files = file_set(300, "redis")
    pid = running_pid("redis", services)
    assert pid is not None, "the tests' Redis must be one that infra.stack started (make test does)"
    marks = {name: len(stack.log_text(name)) for name in ("consumer", "pipeline")}
    put_all(s3, bucket, files)
    wait_until(lambda: loaded_count(stack, table) >= 1, timeout=120, what="the first loaded file")
    killed_at = dt.datetime.now(dt.UTC)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: running_pid("redis", services) is None, timeout=30, what="redis to die")

    def noticed() -> bool:
        return "streaming query stopped" in stack.log_text("pipeline")[marks["pipeline"] :] or (
            "Redis is unavailable" in stack.log_text("consumer")[marks["consumer"] :]
        )

    wait_until(noticed, timeout=60, interval=0.2, what="a Floe process to see the Redis outage")
    ensure_services(services)
    wait_all_loaded(stack, table, files)
    assert last_load(stack, table) > killed_at, "the load must still have been under way at the kill"
    assert_exactly_once(stack, table, pipe, files)


def test_slow_enqueue_outlasting_the_visibility_timeout(stack: Stack, bucket: str, s3: Any) -> None:
    """A dedup step slower than SQS's visibility timeout: the consumer extends the visibility.

    Safeguard: the consumer calls ChangeMessageVisibility while a message's step runs, so SQS
    does not hand the message to another poller (no redelivery, nothing in the dead-letter queue);
    were the extension to fail, dedup would still keep the redelivery harmless.
    """
    table, pipe = make_pipe(stack, bucket)
    files = file_set(16, "slow")
    env = {"FLOE_CONSUMER__VISIBILITY_TIMEOUT_S": "2", "FLOE_FAULTS__ENQUEUE_DELAY_S": "3"}
    mark = len(stack.log_text("consumer"))
    restart_with(stack, "consumer", env)
    try:
        put_all(s3, bucket, files)
        wait_all_loaded(stack, table, files)
    finally:
        restart_with(stack, "consumer", {})
    assert_exactly_once(stack, table, pipe, files)
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
    table, pipe = make_pipe(stack, bucket)
    files = file_set(240, "drain")
    mark = len(stack.log_text("pipeline"))
    # Each commit waits 3 s, so a micro-batch is certainly between its blob writes and its commit
    # when SIGTERM arrives: the drain has work to finish, whatever the machine's speed.
    arm(stack, commit_delay_s=3)
    try:
        put_all(s3, bucket, files)
        wait_until(
            lambda: "before its commit" in stack.log_text("pipeline")[mark:],
            timeout=120,
            what="a micro-batch waiting to commit",
        )
        loaded_at_sigterm = loaded_count(stack, table)
        for name in ("consumer", "pipeline", "api"):
            assert stack.stop(name, signal.SIGTERM) == 0, f"{name} did not drain and exit cleanly"
    finally:
        disarm(stack)
        for name in ("api", "consumer"):
            if name not in stack.procs:
                stack.start(name)
    assert loaded_at_sigterm < len(files), "the load must still have been under way at SIGTERM"
    # Drained: the batch waiting at SIGTERM committed, and it is the last one planned (Spark's
    # commit log has it), so none is run again.
    last, committed = checkpoint_batches(stack)
    assert last in committed, f"batch {last} was planned but not finished before the job exited"
    assert loaded_count(stack, table) > loaded_at_sigterm, "the drain must have committed its batch"
    stack.start("pipeline")
    wait_all_loaded(stack, table, files)
    assert_exactly_once(stack, table, pipe, files)


def test_create_or_replace_pipe_while_its_files_load(stack: Stack, bucket: str, s3: Any) -> None:
    """CREATE OR REPLACE PIPE while a micro-batch of the pipe is between its blob writes and its
    commit, and more of its files are queued.

    Safeguards: the replacement retires the old incarnation in one Redis step that also takes its
    queue, so the in-flight commit is refused (its blobs deleted) and every queued file goes to the
    new pipe once; what the old pipe had committed stays in the table.
    """
    table, pipe = make_pipe(stack, bucket)
    first, second = file_set(60, "before"), file_set(120, "during")
    put_all(s3, bucket, first)
    wait_all_loaded(stack, table, first)
    definition = next(r for r in stack.sql("SHOW PIPES") if r["name"] == pipe.upper())["definition"]
    marks = {name: len(stack.log_text(name)) for name in ("pipeline", "api")}
    arm(stack, commit_delay_s=4)
    try:
        put_all(s3, bucket, second)
        wait_until(
            lambda: "before its commit" in stack.log_text("pipeline")[marks["pipeline"] :],
            what="a micro-batch waiting to commit",
        )
        stack.sql(f"CREATE OR REPLACE PIPE {pipe} AUTO_INGEST = TRUE AS {definition}")
        wait_until(
            lambda: "dropped or replaced while batch" in stack.log_text("pipeline")[marks["pipeline"] :],
            what="the in-flight commit to be refused",
        )
        # The new incarnation's history starts empty (as in Snowflake) and holds the second set.
        wait_all_loaded(stack, table, second)
    finally:
        disarm(stack)
    assert "queued files carried over to the new pipe" in stack.log_text("api")[marks["api"] :]
    everything = {**first, **second}
    assert sorted(h["FILE_NAME"] for h in history(stack, table)) == sorted(second)
    # The oracle fails on any orphan: the refused commit's blobs must be deleted.
    assert_rows_exactly_once(stack, table, pipe, everything)
