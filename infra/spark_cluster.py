"""A Spark standalone cluster on this machine: one master and N workers, each its own JVM started
with the launcher classes pyspark ships (``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker`` through ``pyspark/bin/spark-class``), for running the
pipeline job on a cluster (``FLOE_PIPELINE__SPARK_MASTER=spark://127.0.0.1:7077``) and testing it.

Every part binds to 127.0.0.1, runs detached in its own session (so ``stop`` can SIGKILL a worker's
whole process group: its JVM, its executors and their Python workers), and writes its pid to
``<state_dir>/run/spark-<part>.pid`` and its output to ``<state_dir>/logs/spark-<part>.log``. Each
worker has its own work directory, ``<state_dir>/spark/worker-<n>``, where Spark runs each executor
in ``<app id>/<executor id>``.

Command line: ``python -m infra.spark_cluster {up,down,status}`` (``make cluster-up`` /
``make cluster-down``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from floe.runtime import free_port, private_dir
from floe.settings import Settings
from infra.processes import Ending, launch, process_alive, read_pid, stop_group, wait_gone

MASTER_PORT = 7077
"""The master's RPC port: ``spark://127.0.0.1:7077``."""
READY_TIMEOUT_S = 90.0
"""A master and two workers take about 10 s to start and register on two cores."""
STOP_GRACE_S = 10.0
KILL_WAIT_S = 10.0
SPARK_MARKER = "org.apache.spark.deploy."
"""On a master's and a worker's command line: a pid file that outlived a reboot names another process."""


class ClusterError(RuntimeError):
    """The cluster could not be started or stopped; the message says what to look at."""


def spark_home() -> Path:
    """The Spark distribution inside the pyspark package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass(frozen=True)
class Cluster:
    """A running cluster: where it listens and what it is made of."""

    master_url: str
    """``spark://127.0.0.1:<port>``: what FLOE_PIPELINE__SPARK_MASTER names."""
    ui_url: str
    """The master's web UI; ``<ui_url>/json/`` describes the workers and applications."""
    worker_dirs: tuple[Path, ...]
    """Each worker's work directory: executors run (and log) in ``<dir>/<app id>/<executor id>``."""

    def state(self) -> dict[str, Any]:
        """The master's JSON view (workers, their state, the applications)."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=2.0) as resp:
            data: dict[str, Any] = json.loads(resp.read())
        return data

    def alive_workers(self) -> int:
        """Workers registered and ALIVE (0 when the master does not answer)."""
        try:
            return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")
        except (OSError, ValueError, urllib.error.URLError):
            return 0


def _run_dir(settings: Settings) -> Path:
    return private_dir(Path(settings.state_dir) / "run")


def _pid_file(settings: Settings, part: str) -> Path:
    return _run_dir(settings) / f"spark-{part}.pid"


def _log_file(settings: Settings, part: str) -> Path:
    return private_dir(Path(settings.state_dir) / "logs") / f"spark-{part}.log"


def _info_file(settings: Settings) -> Path:
    return _run_dir(settings) / "spark-cluster.json"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Bind everything (RPC, block managers, web UIs) to loopback, as the local job does.
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_HOME"] = str(spark_home())
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


def _launch(settings: Settings, part: str, argv: list[str], env: dict[str, str]) -> int:
    """Start one part detached, in its own session (so that a stop reaches its whole process group)."""
    return launch(argv, log=_log_file(settings, part), pid_file=_pid_file(settings, part), env=env).pid


def running(settings: Settings) -> Cluster | None:
    """The cluster this state directory started, if its master is still up."""
    info = _info_file(settings)
    pid = read_pid(_pid_file(settings, "master"))
    if not info.exists() or pid is None or not process_alive(pid, SPARK_MARKER):
        return None
    data = json.loads(info.read_text())
    return Cluster(data["master_url"], data["ui_url"], tuple(Path(d) for d in data["worker_dirs"]))


def start(
    settings: Settings,
    *,
    workers: int = 2,
    cores: int = 1,
    memory: str = "3g",
    port: int = MASTER_PORT,
    timeout_s: float = READY_TIMEOUT_S,
) -> Cluster:
    """Start a master on 127.0.0.1:``port`` and ``workers`` workers of ``cores`` cores and ``memory``
    each, and wait until every worker is registered. A cluster this state directory already runs
    is returned as it is."""
    found = running(settings)
    if found is not None:
        return found
    spark_class = str(spark_home() / "bin" / "spark-class")
    env = _env()
    ui_port = free_port()
    master = _launch(
        settings,
        "master",
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui_port),
        ],
        env,
    )
    master_url = f"spark://127.0.0.1:{port}"
    root = private_dir(Path(settings.state_dir) / "spark")
    dirs = []
    for n in range(1, workers + 1):
        work = private_dir(root / f"worker-{n}")
        dirs.append(work)
        _launch(
            settings,
            f"worker-{n}",
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                master_url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--work-dir",
                str(work),
                "--webui-port",
                str(free_port()),
            ],
            env,
        )
    cluster = Cluster(master_url, f"http://127.0.0.1:{ui_port}", tuple(dirs))
    _info_file(settings).write_text(
        json.dumps(
            {"master_url": master_url, "ui_url": cluster.ui_url, "worker_dirs": [str(d) for d in dirs]}
        )
    )
    deadline = time.monotonic() + timeout_s
    while cluster.alive_workers() < workers:
        if not process_alive(master):  # just started: no stale pid file to doubt
            raise ClusterError(f"the Spark master exited; see {_log_file(settings, 'master')}")
        if time.monotonic() > deadline:
            stop(settings)
            raise ClusterError(
                f"{workers} workers did not register with {master_url} within {timeout_s:.0f} s; "
                f"see the logs in {_log_file(settings, 'master').parent}"
            )
        time.sleep(0.2)
    return cluster


def kill_worker(settings: Settings, n: int) -> int:
    """SIGKILL worker ``n``'s whole process group (its JVM, executors and Python workers) and wait
    until it is gone; its pid."""
    pid_file = _pid_file(settings, f"worker-{n}")
    pid = read_pid(pid_file)
    if pid is None:
        raise ClusterError(f"worker {n} has no pid file ({pid_file}); is the cluster running?")
    os.killpg(pid, signal.SIGKILL)
    if not wait_gone(pid, group=True, timeout_s=KILL_WAIT_S):
        raise ClusterError(f"worker {n} (pid {pid}) did not exit within {KILL_WAIT_S:.0f} s of SIGKILL")
    return pid


def stop(settings: Settings) -> list[str]:
    """Stop the workers, then the master (SIGTERM to each process group, SIGKILL after a grace);
    the parts that were running."""
    stopped = []
    parts = sorted(p.name[len("spark-") : -len(".pid")] for p in _run_dir(settings).glob("spark-*.pid"))
    for part in sorted(parts, key=lambda p: p == "master"):  # workers first
        pid_file = _pid_file(settings, part)
        pid = read_pid(pid_file)
        if pid is not None and process_alive(pid, SPARK_MARKER):
            if stop_group(pid, STOP_GRACE_S, KILL_WAIT_S) is Ending.SURVIVED:
                raise ClusterError(f"spark {part} (pid {pid}) did not exit even after SIGKILL")
            stopped.append(part)
        pid_file.unlink(missing_ok=True)
    _info_file(settings).unlink(missing_ok=True)
    return stopped


def main(argv: list[str] | None = None) -> int:
    """``up``, ``down`` or ``status`` of the local Spark standalone cluster."""
    parser = argparse.ArgumentParser(
        prog="python -m infra.spark_cluster", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser(
        "up", help="start a master and its workers on 127.0.0.1 and wait until they are registered"
    )
    up.add_argument("--workers", type=int, default=2, help="number of workers (default 2)")
    up.add_argument("--cores", type=int, default=1, help="cores each worker offers (default 1)")
    up.add_argument("--memory", default="3g", help="memory each worker offers (default 3g)")
    up.add_argument("--port", type=int, default=MASTER_PORT, help=f"master RPC port (default {MASTER_PORT})")
    sub.add_parser("down", help="stop the workers and the master")
    sub.add_parser("status", help="print the master URL and the live workers")
    args = parser.parse_args(argv)
    settings = Settings()
    if args.command == "up":
        try:
            cluster = start(
                settings, workers=args.workers, cores=args.cores, memory=args.memory, port=args.port
            )
        except ClusterError as exc:
            print(f"✗ {exc}", file=sys.stderr)
            return 1
        print(
            f"✓ Spark cluster {cluster.master_url}: {cluster.alive_workers()} workers (UI {cluster.ui_url})"
        )
        print(f"  run the job on it: FLOE_PIPELINE__SPARK_MASTER={cluster.master_url} make up")
        return 0
    if args.command == "down":
        stopped = stop(settings)
        print(f"✓ stopped {', '.join(stopped) if stopped else 'nothing (no cluster was running)'}")
        return 0
    found = running(settings)
    if found is None:
        print("no Spark cluster is running (make cluster-up starts one)")
        return 1
    print(f"{found.master_url}: {found.alive_workers()} workers alive (UI {found.ui_url})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
