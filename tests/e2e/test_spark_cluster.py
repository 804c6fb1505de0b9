"""The pipeline job on a Spark standalone cluster of two workers (``infra/spark_cluster.py``, the
cluster ``make cluster-up`` starts): auto-ingest and REST loads run, exactly once, with tasks on
both workers, as each executor's per-task log shows."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from snowflake.ingest import StagedFile

from floe.runtime import free_port
from floe.settings import Settings
from infra import spark_cluster
from infra.spark_cluster import Cluster
from tests.chaos.oracle import assert_exactly_once, file_set
from tests.chaos.test_faults import (
    arm,
    checkpoint_batches,
    disarm,
    fired,
    loaded_count,
    put_all,
    wait_all_loaded,
    wait_dead,
)
from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import csv_file, done, make_pipe
from tests.e2e.test_snowpipe_sdk import manager, rest_pipe

# Starting the cluster and restarting the job on it takes minutes: `make test-cluster` runs this
# (on the Redis Cluster too), `make test` does not.
pytestmark = [pytest.mark.e2e, pytest.mark.spark_cluster]

TASK_LINE = re.compile(r"batch \d+ task \d+ on executor (\d+): (\d+) files")


@pytest.fixture(scope="module")
def cluster_settings(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The settings the module's cluster runs under: its pid files are in their state directory."""
    return services.model_copy(update={"state_dir": str(tmp_path_factory.mktemp("spark-cluster"))})


@pytest.fixture(scope="module")
def cluster(cluster_settings: Settings) -> Iterator[Cluster]:
    """A master and two workers of one core each, stopped after the module's tests."""
    started = spark_cluster.start(cluster_settings, workers=2, cores=1, memory="2g", port=free_port())
    yield started
    spark_cluster.stop(cluster_settings)


def start_on_cluster(stack: Stack, cluster: Cluster) -> None:
    """(Re)start the stack's Spark job as a driver of the cluster, one executor per worker."""
    conf = {"spark.cores.max": "2", "spark.executor.cores": "1", "spark.executor.memory": "1g"}
    stack.start(
        "pipeline",
        timeout=240,
        env={
            "FLOE_PIPELINE__SPARK_MASTER": cluster.master_url,
            "FLOE_PIPELINE__SPARK_CONF": json.dumps(conf),
            # The tests look for each worker's tasks: no batch, however small, loads in the driver.
            "FLOE_PIPELINE__DRIVER_BATCH_FILES": "0",
        },
    )


@pytest.fixture
def on_cluster(stack: Stack, cluster: Cluster) -> Iterator[Stack]:
    """The session's stack with its Spark job restarted on the cluster (restored afterwards)."""
    stack.stop("pipeline")
    start_on_cluster(stack, cluster)
    yield stack


def task_lines(cluster: Cluster) -> dict[str, list[tuple[str, int]]]:
    """Per worker: (executor id, files) of every task its executors logged."""
    found: dict[str, list[tuple[str, int]]] = {}
    for work in cluster.worker_dirs:
        lines = []
        for stderr in Path(work).glob("app-*/*/stderr"):
            lines += [
                (m.group(1), int(m.group(2))) for m in TASK_LINE.finditer(stderr.read_text(errors="replace"))
            ]
        found[work.name] = lines
    return found


def test_auto_ingest_and_rest_loads_run_on_both_workers(
    on_cluster: Stack, cluster: Cluster, bucket: str, s3: Any
) -> None:
    stack = on_cluster
    table, _ = make_pipe(stack, bucket)
    names = [f"in/{i:03d}.csv" for i in range(24)]
    for i, key in enumerate(names):
        s3.put_object(Bucket=bucket, Key=key, Body=csv_file(i * 10, 10))
    rest, rest_table, user, pem = rest_pipe(stack, bucket)
    rest_names = [f"r{i:02d}.csv" for i in range(8)]
    for i, name in enumerate(rest_names):
        s3.put_object(Bucket=bucket, Key=f"rest/{name}", Body=csv_file(1000 + i * 5, 5))
    sdk = manager(stack, rest, user, pem)
    assert sdk.ingest_files([StagedFile(n, None) for n in rest_names])["responseCode"] == "SUCCESS"

    rows = wait_until(lambda: done(stack, table, len(names)), timeout=240, what="the auto-ingested files")
    assert {r["STATUS"] for r in rows} == {"Loaded"}, rows
    wait_until(lambda: done(stack, rest_table, len(rest_names)), timeout=240, what="the REST files")
    assert stack.sql(f"SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d FROM {table}") == [{"N": 240, "D": 240}]
    assert stack.sql(f"SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d FROM {rest_table}") == [
        {"N": 40, "D": 40}
    ]

    tasks = task_lines(cluster)
    assert all(tasks.values()), f"every worker ran tasks: {tasks}"
    executors = {executor for lines in tasks.values() for executor, _ in lines}
    assert len(executors) == 2, tasks
    assert sum(files for lines in tasks.values() for _, files in lines) >= len(names) + len(rest_names)


def test_the_spark_reader_scans_a_table_on_the_cluster(
    stack: Stack, cluster: Cluster, bucket: str, s3: Any
) -> None:
    """``pipeline.read_table`` in a session on the cluster: the executors fetch and decrypt the
    blobs (a standalone cluster's driver runs no task), with what the task closure carries."""
    from pipeline import read_table, spark_session

    table, _ = make_pipe(stack, bucket)  # loaded by the stack's own job, so the cluster's cores are free
    for i in range(4):
        s3.put_object(Bucket=bucket, Key=f"in/scan_{i}.csv", Body=csv_file(i * 100, 50))
    wait_until(lambda: done(stack, table, 4), what="four loads")
    pipeline = stack.settings.pipeline.model_copy(
        update={"spark_master": cluster.master_url, "spark_conf": {"spark.cores.max": "2"}}
    )
    settings = stack.settings.model_copy(update={"pipeline": pipeline})
    spark = spark_session(settings, "floe-reader-cluster-test")
    try:
        assert spark.sparkContext.master == cluster.master_url
        df = read_table(spark, settings, table, partitions=4)
        rows = {r["ID"]: r for r in df.collect()}
        assert sorted(rows) == sorted(i * 100 + j for i in range(4) for j in range(50))
        assert rows[301]["NAME"] == "name 301" and rows[301]["FILE"] == "scan_3.csv"
        app = spark.sparkContext.applicationId
        assert [w.name for w in cluster.worker_dirs if (w / app).is_dir()], f"no worker ran {app}'s executors"
    finally:
        spark.stop()


def batch_tasks(log: str, batch: int) -> dict[int, int]:
    """The tasks of micro-batch ``batch`` an executor's log says finished: task number -> files."""
    found = re.finditer(r"batch (\d+) task (\d+) on executor \d+: (\d+) files", log)
    return {int(m.group(2)): int(m.group(3)) for m in found if int(m.group(1)) == batch}


def executor_logs(cluster: Cluster, worker: int) -> str:
    """What the executors on worker ``worker`` (1-based) logged, their Python workers included."""
    work = cluster.worker_dirs[worker - 1]
    return "".join(p.read_text(errors="replace") for p in sorted(Path(work).glob("app-*/*/stderr")))


@pytest.mark.chaos
def test_driver_killed_mid_batch_restarts_from_its_checkpoint(
    on_cluster: Stack, cluster: Cluster, bucket: str, s3: Any
) -> None:
    """kill -9 of the driver (`floe pipeline`) on the cluster between the blob writes and the commit.

    Safeguards: as on one machine, the restarted driver replays the batch from its checkpoint's
    offset log and the registrar's batch marker makes the commit once; the executors of the dead
    driver's application go with it, and the new one gets the workers' cores.
    """
    stack = on_cluster
    table, pipe = make_pipe(stack, bucket)
    files = file_set(60, "driver")
    before = fired(stack, "pipeline.after_blobs")
    arm(stack, crash_at="pipeline.after_blobs")
    put_all(s3, bucket, files)
    assert wait_dead(stack, "pipeline") == -signal.SIGKILL
    assert fired(stack, "pipeline.after_blobs") == before + 1
    disarm(stack)
    killed, committed = checkpoint_batches(stack)
    assert killed not in committed, "the kill must interrupt a micro-batch"
    assert loaded_count(stack, table) < len(files)
    start_on_cluster(stack, cluster)
    wait_until(
        lambda: killed in checkpoint_batches(stack)[1], timeout=240, what=f"the replay of batch {killed}"
    )
    wait_all_loaded(stack, table, files)
    assert_exactly_once(stack, table, pipe, files)


@pytest.mark.chaos
def test_a_worker_killed_mid_batch_its_tasks_run_again_on_the_other(
    on_cluster: Stack, cluster: Cluster, cluster_settings: Settings, bucket: str, s3: Any
) -> None:
    """kill -9 of worker 1 (its JVM, its executor and their Python workers) while its executor runs
    a task of a micro-batch. It runs last in this module: the cluster keeps one worker after it.

    Safeguards: Spark runs the lost task again on the other worker's executor, within the same
    micro-batch (the driver lives on); the rerun writes its blobs under the same deterministic names,
    and only the batch's one commit registers them.
    """
    stack = on_cluster
    table, pipe = make_pipe(stack, bucket)
    files = file_set(40, "worker")
    mark = len(stack.log_text("pipeline"))
    # Earlier applications' logs sort first (by application id) and no longer grow.
    seen = {w: len(executor_logs(cluster, w)) for w in (1, 2)}
    # Each fetched file waits 2 s, so each task of the batch runs for several seconds.
    arm(stack, read_delay_s=2.0)
    put_all(s3, bucket, files)
    wait_until(
        lambda: f"fault injection: s3://{bucket}/" in executor_logs(cluster, 1)[seen[1] :],
        timeout=180,
        what="a task of the batch reading on worker 1",
    )
    planned, committed = checkpoint_batches(stack)
    assert planned not in committed, "the batch must be in flight at the kill"
    spark_cluster.kill_worker(cluster_settings, 1)
    disarm(stack)
    wait_all_loaded(stack, table, files)
    assert stack.procs["pipeline"].poll() is None, "the driver must live through a worker's loss"
    assert planned in checkpoint_batches(stack)[1], f"batch {planned} must finish, not be replayed"
    assert "Lost executor" in stack.log_text("pipeline")[mark:], "the driver must have seen the executor go"
    assert_exactly_once(stack, table, pipe, files)
    # Worker 1 was reading files of the batch and finished none of its tasks; worker 2 finished them all.
    finished = {w: batch_tasks(executor_logs(cluster, w)[seen[w] :], planned) for w in (1, 2)}
    assert finished[1] == {} and finished[2], finished
