"""The two systems Floe's throughput is compared with, over the same local CSV files.

* **limit**: plain pyarrow in two processes (``bench.limit_worker``), each reading its share of the
  files, casting them to the target table's Arrow schema and writing one encrypted Parquet blob with
  ``floe.blobs`` (the same encryption, compression and statistics as Floe's blobs). No S3, no
  queue, no scheduler: roughly what this machine can do for this work.
* **peer**: Spark's own file-source stream (``readStream.csv`` on the directory, the same casts,
  a Parquet sink, ``trigger(availableNow=True)``), what a user would build without Floe. It runs in
  a child process of its own (``bench.spark_peer``) so its JVM is measured, and stopped, alone.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.dataset import Dataset, target_schema
from bench.harness import ROOT, BenchError, kill_session, remove_tree, wait_session_gone

LIMIT_PROCESSES = 2


def run_limit(
    dataset: Dataset, out_dir: Path, key_id: str, key: bytes, timeout_s: float = 600.0
) -> dict[str, Any]:
    """Time the pyarrow baseline over the data set; returns its figures.

    Both workers are started and have their imports done before the clock starts; it stops when
    the last one has written its blob.
    """
    remove_tree(out_dir)
    out_dir.mkdir(parents=True)
    paths = [str(p) for p in dataset.paths]
    schema = base64.b64encode(target_schema().serialize().to_pybytes()).decode()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    workers: list[subprocess.Popen[str]] = []
    try:
        for w in range(LIMIT_PROCESSES):
            share = paths[w::LIMIT_PROCESSES]
            if not share:
                continue
            with (out_dir / f"limit-{w}.log").open("wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "bench.limit_worker"],
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    start_new_session=True,
                )
            workers.append(proc)
            job = {
                "paths": share,
                "out": str(out_dir / f"limit-{w}.parquet"),
                "key_id": key_id,
                "key": base64.b64encode(key).decode(),
                "schema": schema,
            }
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(job) + "\n")
            proc.stdin.flush()
        for proc in workers:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise BenchError(f"a limit worker failed to start (exit {proc.wait(10)}):\n{_tails(out_dir)}")
        started = time.perf_counter()
        for proc in workers:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for proc in workers:
            out, _ = proc.communicate(timeout=timeout_s)
            if proc.returncode != 0 or not out.strip():
                raise BenchError(f"a limit worker failed (exit {proc.returncode}):\n{_tails(out_dir)}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        elapsed = time.perf_counter() - started
    finally:
        for proc in workers:
            if proc.poll() is None:
                kill_session(proc.pid, signal.SIGKILL)
                proc.wait(10)
    rows = sum(r["rows"] for r in results)
    if rows != dataset.total_rows:
        raise BenchError(f"limit baseline wrote {rows} rows, expected {dataset.total_rows}")
    remove_tree(out_dir)
    return {
        "rows": rows,
        "seconds": elapsed,
        "rows_per_s": rows / elapsed,
        "processes": len(workers),
        "blob_bytes": sum(r["bytes"] for r in results),
    }


def _tails(out_dir: Path) -> str:
    """The ends of the limit workers' logs."""
    return "\n".join(p.read_text(errors="replace")[-1500:] for p in sorted(out_dir.glob("limit-*.log")))


class PeerRun:
    """Spark's file-source stream over the data set, running in a child process of its own."""

    def __init__(
        self,
        dataset: Dataset,
        work_dir: Path,
        *,
        driver_memory: str,
        master: str = "local[2]",
        java_options: str = "",
    ) -> None:
        self.dataset = dataset
        self.work_dir = work_dir
        self.driver_memory = driver_memory
        self.master = master
        self.java_options = java_options
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PeerRun:
        """Start the child process and return at once."""
        remove_tree(self.work_dir)
        self.work_dir.mkdir(parents=True)
        argv = [
            sys.executable,
            "-m",
            "bench.spark_peer",
            "--input", str(self.dataset.directory),
            "--output", str(self.work_dir / "out"),
            "--checkpoint", str(self.work_dir / "checkpoint"),
            "--master", self.master,
            "--driver-memory", self.driver_memory,
            "--expect-rows", str(self.dataset.total_rows),
            f"--java-options={self.java_options}",  # one word: the value starts with a dash
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
        env.update(
            PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1"
        )
        with (self.work_dir / "spark-peer.log").open("wb") as err:
            self.proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,  # its JVM is in the group, and goes with it on an error
            )
        return self

    def wait(self, timeout_s: float = 900.0) -> dict[str, Any]:
        """Wait for the child; its figures, or BenchError with the end of its log."""
        assert self.proc is not None, "start() first"
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
        finally:
            self.kill()  # a JVM that outlived its driver, or the whole group on an error
        lines = out.decode(errors="replace").strip().splitlines()
        if self.proc.returncode != 0 or not lines:
            tail = (self.work_dir / "spark-peer.log").read_text(errors="replace")[-3000:]
            raise BenchError(f"the Spark peer failed (exit {self.proc.returncode}):\n{tail}")
        result: dict[str, Any] = json.loads(lines[-1])
        remove_tree(self.work_dir)
        return result

    def kill(self) -> None:
        """SIGKILL the child's session (nothing if it is gone)."""
        if self.proc is not None:
            kill_session(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            wait_session_gone(self.proc.pid, 10.0)


def run_peer(
    dataset: Dataset, work_dir: Path, *, driver_memory: str, master: str = "local[2]"
) -> dict[str, Any]:
    """Run the peer to its end; returns its figures."""
    return PeerRun(dataset, work_dir, driver_memory=driver_memory, master=master).start().wait()
