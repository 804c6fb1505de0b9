"""The pipeline job on a Spark standalone cluster of two workers (``infra/spark_cluster.py``, the
cluster ``make cluster-up`` starts): auto-ingest and REST loads run, exactly once, with tasks on
both workers, as each executor's per-task log shows."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from snowflake.ingest import StagedFile

from floe.runtime import free_port
from floe.settings import Settings
from infra import spark_cluster
from infra.spark_cluster import Cluster
from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import csv_file, done, make_pipe
from tests.e2e.test_snowpipe_sdk import manager, rest_pipe

# Starting the cluster and restarting the job on it takes minutes: `make test-cluster` runs this
# (on the Redis Cluster too), `make test` does not.
pytestmark = [pytest.mark.e2e, pytest.mark.spark_cluster]

TASK_LINE = re.compile(r"batch \d+ task \d+ on executor (\d+): (\d+) files")


@pytest.fixture(scope="module")
def cluster(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and two workers of one core each, stopped after the module's tests."""
    settings = services.model_copy(update={"state_dir": str(tmp_path_factory.mktemp("spark-cluster"))})
    started = spark_cluster.start(settings, workers=2, cores=1, memory="2g", port=free_port())
    yield started
    spark_cluster.stop(settings)


@pytest.fixture
def on_cluster(stack: Stack, cluster: Cluster) -> Iterator[Stack]:
    """The session's stack with its Spark job restarted on the cluster (restored afterwards)."""
    conf = {"spark.cores.max": "2", "spark.executor.cores": "1", "spark.executor.memory": "1g"}
    stack.stop("pipeline")
    stack.start(
        "pipeline",
        timeout=240,
        env={
            "FLOE_PIPELINE__SPARK_MASTER": cluster.master_url,
            "FLOE_PIPELINE__SPARK_CONF": json.dumps(conf),
        },
    )
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
