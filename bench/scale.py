"""Scaling out (issue 15): Floe's end-to-end throughput with the Spark job on ``local[2]`` and on a
Spark standalone cluster of two workers on this same machine (``infra/spark_cluster.py``).

* **Load**: the ``floe`` part's, through ``bench.throughput.run_floe``: the same N CSV files of M
  rows put into a fresh stage bucket, through a fresh table and auto-ingest pipe each run, timed from
  the first put until ``SELECT COUNT(*)`` returns every row.
* **Job**: before each timed run the run's ``floe pipeline`` is stopped and started again, either
  on ``local[2]`` (the baseline, as ``make up`` runs it) or as the cluster's driver
  (``FLOE_PIPELINE__SPARK_MASTER=spark://...``, one executor of 1 core and 1 GB on each worker). Each
  job then loads the same two small files (``WarmUp``), so every timed run starts on a fresh job
  that is warm.
* **Runs**: ``repeats`` rounds of one local and one cluster run. The order swaps every round (local
  then cluster, then cluster then local, ...), so a drift of the machine during the part falls on
  both. The figures are the median rows/s of each and their ratio, cluster / local.
* **Evidence**: after each cluster run, the files each worker's executor read in it, from the
  executors' per-task log lines. A cluster run that left a worker idle fails.

On one machine the cluster cannot be faster: its executors share the same cores with the driver,
the consumer, the API, LocalStack and Redis, and it adds JVMs, RPC and task shipping. The figure
shows what the cluster costs; a gain needs workers on more hosts.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench.dataset import Dataset
from bench.harness import BenchError, FloeStack, Resources
from bench.streaming import spread
from bench.throughput import WarmUp, run_floe
from floe.runtime import free_port
from floe.settings import Settings
from infra import spark_cluster
from infra.spark_cluster import Cluster

LOCAL_MASTER = "local[2]"
"""The baseline: the job's default master, all of it in one JVM."""
WORKERS = 2
CORES_PER_WORKER = 1
WORKER_MEMORY = "2g"
"""Memory each worker offers; its executor takes EXECUTOR_MEMORY of it."""
EXECUTOR_MEMORY = "1g"
MODES: tuple[str, str] = ("local", "cluster")
MASTER_ENV = "FLOE_PIPELINE__SPARK_MASTER"
CONF_ENV = "FLOE_PIPELINE__SPARK_CONF"
DRIVER_BATCH_ENV = "FLOE_PIPELINE__DRIVER_BATCH_FILES"
TASK_LINE = re.compile(r"batch \d+ task \d+ on executor \S+: (\d+) files")
"""The line each task of the job logs (pipeline/loader.py), with the files it read."""
TASK_LOG_WAIT_S = 15.0
"""How long the executors' task lines may lag the commit they precede (stderr is relayed by the JVM)."""

Step = Callable[[str], None]
"""Told what the part is doing now (a spinner's text)."""
OnProgress = Callable[[str, int, int], None]
"""``(run label, rows visible, rows in all)`` during a timed run."""


def cluster_conf(workers: int = WORKERS, cores: int = CORES_PER_WORKER) -> dict[str, str]:
    """The job's Spark properties on the cluster: one executor of ``cores`` per worker."""
    return {
        "spark.cores.max": str(workers * cores),
        "spark.executor.cores": str(cores),
        "spark.executor.memory": EXECUTOR_MEMORY,
    }


def job_env(base: Mapping[str, str], master: str, conf: Mapping[str, str]) -> dict[str, str]:
    """``base`` (a Floe process's environment) with the job's master and Spark properties replaced.

    ``Settings.child_env`` spells a dict setting as one variable per key
    (``FLOE_PIPELINE__SPARK_CONF__<KEY>``); those go too, so only ``conf`` reaches the job.
    """
    env = {k: v for k, v in base.items() if not k.startswith(CONF_ENV)}
    env[MASTER_ENV] = master
    # Every batch in Spark's tasks, in both modes: a small one would load in the driver, and the
    # part compares where the tasks run.
    env[DRIVER_BATCH_ENV] = "0"
    if conf:
        env[CONF_ENV] = json.dumps(dict(conf))
    return env


def run_order(repeats: int) -> list[str]:
    """The modes of the timed runs: ``repeats`` rounds of both, each round's first run alternating."""
    order: list[str] = []
    for i in range(repeats):
        order += MODES if i % 2 == 0 else MODES[::-1]
    return order


def mode_label(mode: str) -> str:
    """How a mode is named in the progress display and the printout."""
    if mode == "local":
        return LOCAL_MASTER
    return f"cluster ({WORKERS} workers of {CORES_PER_WORKER} core)"


def overhead_note(cores: int | None) -> str:
    """What the figure can show on this machine, said plainly."""
    return (
        f"the cluster's {WORKERS} workers run on this same {cores or '?'}-core machine as the driver, the "
        "consumer, the API, LocalStack and Redis, so the ratio shows what the cluster costs (more JVMs, "
        "RPC, task shipping), not what it gains: a gain needs workers on more hosts"
    )


def task_files(log: str) -> int:
    """Files read by the tasks whose lines are in an executor's log."""
    return sum(int(m.group(1)) for m in TASK_LINE.finditer(log))


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per mode the median rows/s, its spread and every run; each round's cluster / local.

    The figure's ratio is the one of the medians (``report.ratios``); the rounds' own ratios show
    how much it moved.
    """
    out: dict[str, Any] = {}
    for mode in MODES:
        mine = [dict(r) for r in runs if r["mode"] == mode]
        if not mine:
            raise ValueError(f"no {mode} run to summarize")
        rates = [float(r["rows_per_s"]) for r in mine]
        out[mode] = {
            "rows_per_s": statistics.median(rates),
            "rows_per_s_spread": spread(rates),
            "seconds": [round(float(r["seconds"]), 3) for r in mine],
            "runs": mine,
        }
    by_round: dict[int, dict[str, float]] = {}
    for r in runs:
        by_round.setdefault(int(r["round"]), {})[str(r["mode"])] = float(r["rows_per_s"])
    out["round_ratios"] = [
        round(rates["cluster"] / rates["local"], 4)
        for _, rates in sorted(by_round.items())
        if rates.get("local") and "cluster" in rates
    ]
    return out


class JobSwitch:
    """The run's Spark job (``floe pipeline``), restarted on ``local[2]`` or as a cluster's driver.

    The other Floe processes keep running; only the job's environment changes, for one start.
    """

    def __init__(self, stack: FloeStack) -> None:
        self.stack = stack
        self.base_env = dict(stack.env)
        self.env = self.base_env
        """The environment the running job was started with."""
        self.exit_codes: list[int | None] = []
        """How each job this switch stopped exited (0: a clean drain)."""

    def restart(self, env: Mapping[str, str]) -> float:
        """Stop the job and start it again with ``env``; the seconds until it was ready."""
        if "pipeline" in self.stack.procs:
            self.exit_codes += self.stack.stop(["pipeline"]).values()
        t0 = time.perf_counter()
        self.env = dict(env)
        self.stack.env = self.env
        try:
            self.stack.start(("pipeline",))
        finally:
            # FloeStack launches every process with its env: only this one start gets the job's.
            self.stack.env = self.base_env
        return time.perf_counter() - t0

    def on(self, master: str, conf: Mapping[str, str]) -> float:
        """Restart the job on ``master`` with the Spark properties ``conf``; seconds until ready."""
        return self.restart(job_env(self.base_env, master, conf))

    def is_restored(self) -> bool:
        """Whether the job runs as the run started it."""
        proc = self.stack.procs.get("pipeline")
        return proc is not None and proc.poll() is None and self.env == self.base_env

    def restore(self) -> None:
        """Leave the job running as the run started it (the parts after this one need it)."""
        if not self.is_restored():
            self.restart(self.base_env)


def running_app(cluster: Cluster) -> str:
    """The id of the one application the cluster runs (the job's driver)."""
    apps = [a.get("id") for a in cluster.state().get("activeapps", []) if a.get("state") == "RUNNING"]
    if len(apps) != 1:
        raise BenchError(f"the Spark cluster runs {len(apps)} applications, expected the job's one: {apps}")
    return str(apps[0])


def worker_files(cluster: Cluster, app: str) -> dict[str, int]:
    """Per worker, the files its executors read for ``app`` so far (from their task lines)."""
    out: dict[str, int] = {}
    for work in cluster.worker_dirs:
        logs = sorted((work / app).glob("*/stderr"))
        out[work.name] = sum(task_files(p.read_text(errors="replace")) for p in logs)
    return out


def files_per_worker(cluster: Cluster, app: str, before: Mapping[str, int], files: int) -> dict[str, int]:
    """The files each worker read since ``before``; BenchError when a worker read none."""
    deadline = time.monotonic() + TASK_LOG_WAIT_S
    while True:
        now = worker_files(cluster, app)
        done = {w: n - before.get(w, 0) for w, n in now.items()}
        if sum(done.values()) >= files or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    idle = [w for w, n in done.items() if n <= 0]
    if idle:
        raise BenchError(f"the cluster run left {', '.join(idle)} idle (files per worker: {done})")
    return done


def stop_cluster(settings: Settings) -> list[str]:
    """Stop a cluster ``run_scale`` started under ``settings`` (nothing when none runs); the parts
    that were running."""
    return spark_cluster.stop(settings)


def run_scale(
    switch: JobSwitch,
    resources: Resources,
    dataset: Dataset,
    cluster_settings: Settings,
    *,
    repeats: int,
    warmup: bool = True,
    put_threads: int = 8,
    on_step: Step | None = None,
    on_progress: OnProgress | None = None,
) -> dict[str, Any]:
    """Start the cluster, time the load ``repeats`` times on each master, stop the cluster; the
    figures. The job runs as the run started it again at the end (when nothing failed)."""

    def step(text: str) -> None:
        if on_step is not None:
            on_step(text)

    stack = switch.stack
    conf = cluster_conf()
    order = run_order(repeats)
    step(f"starting a Spark cluster: a master and {WORKERS} workers of {CORES_PER_WORKER} core")
    t0 = time.perf_counter()
    cluster = spark_cluster.start(
        cluster_settings, workers=WORKERS, cores=CORES_PER_WORKER, memory=WORKER_MEMORY, port=free_port()
    )
    cluster_start_s = time.perf_counter() - t0
    runs: list[dict[str, Any]] = []
    try:
        for i, mode in enumerate(order):
            label = f"{mode_label(mode)}, run {i // 2 + 1} of {repeats}"
            step(f"{label}: starting the Spark job")
            on_cluster = mode == "cluster"
            master = cluster.master_url if on_cluster else LOCAL_MASTER
            run: dict[str, Any] = {"mode": mode, "round": i // 2 + 1}
            run["job_start_s"] = round(switch.on(master, conf if on_cluster else {}), 2)
            if warmup:
                warm = WarmUp(stack, resources)
                step(f"{label}: warm-up, {warm.files} small files")
                run["warmup_s"] = round(warm.start().wait(), 2)
            app = running_app(cluster) if on_cluster else ""
            before = worker_files(cluster, app) if on_cluster else {}
            step(f"{label}: put → queryable")

            def progress(rows: int, files: int, label: str = label) -> None:
                if on_progress is not None:
                    on_progress(label, rows, dataset.total_rows)

            run.update(run_floe(stack, resources, dataset, put_threads=put_threads, on_progress=progress))
            if on_cluster:
                run["files_per_worker"] = files_per_worker(cluster, app, before, dataset.files)
            runs.append(run)
        step(f"restarting the Spark job on {LOCAL_MASTER}")
        # The driver leaves the cluster before the cluster stops under it.
        switch.restore()
    finally:
        spark_cluster.stop(cluster_settings)
    out = summarize(runs)
    out["local"]["master"] = LOCAL_MASTER
    out["cluster"].update(
        workers=WORKERS,
        cores_per_worker=CORES_PER_WORKER,
        worker_memory=WORKER_MEMORY,
        spark_conf=conf,
        start_s=round(cluster_start_s, 2),
    )
    out.update(
        rows=dataset.total_rows,
        files=dataset.files,
        repeats=repeats,
        order=order,
        job_exit_codes=switch.exit_codes,
        note=overhead_note(os.cpu_count()),
    )
    return out
