"""The systems Floe's throughput is compared with, over the same CSV files.

* **limit**: plain pyarrow in two processes (``bench.limit_worker``), each reading its share of the
  files, casting them to the target table's Arrow schema and writing one encrypted Parquet blob with
  ``floe.blobs`` (the same encryption, compression and statistics as Floe's blobs). No queue, no
  scheduler. Run twice: over the objects on LocalStack, writing its blobs there (the limit of Floe's
  setting, which reads and writes S3), and over local files (the machine's limit).
* **peer**: Spark's own file-source stream (``readStream.csv`` on the local directory, the same
  casts, a Parquet sink, ``trigger(availableNow=True)``), what a user would build without Floe,
  warmed by a stream over two small files first, as Floe's job is. Its timed streams run once as
  they are and once with ``maxFilesPerTrigger``, as a streaming user would set it. It runs in a
  child process of its own (``bench.spark_peer``) so its JVM is measured, and stopped, alone. It
  reads local files: its S3 connector (hadoop-aws) is not in PySpark and Maven is out of reach.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyarrow import fs as pafs

from bench.checksum import blob_files, checksums
from bench.dataset import Dataset, csv_text, target_schema
from bench.harness import ROOT, BenchError, kill_session, remove_tree, wait_session_gone
from bench.streaming import spread
from floe.blobs import crypto_from_settings

LIMIT_PROCESSES = 2
PEER_MAX_FILES_PER_TRIGGER = 20
"""The peer's paced streams' maxFilesPerTrigger: a tenth of the data set's files a micro-batch."""
WARMUP_FILES = 2


@dataclass(frozen=True)
class S3Source:
    """The data set's files as objects on LocalStack (``bucket/prefix<name>``), put before the clock
    starts, and pyarrow's S3 options to read them with."""

    bucket: str
    prefix: str
    options: dict[str, Any]


def run_limit(
    dataset: Dataset,
    out_dir: Path,
    key_id: str,
    key: bytes,
    *,
    s3: S3Source | None = None,
    checksum: bool = False,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Time the pyarrow baseline over the data set, read from local files or, with ``s3``, from
    LocalStack (and its blobs written there, as Floe's are); returns its figures, with the
    checksums of the rows it wrote when asked.

    Both workers are started and have their imports done before the clock starts; it stops when
    the last one has written its blob.
    """
    remove_tree(out_dir)
    out_dir.mkdir(parents=True)
    if s3 is None:
        paths = [str(p) for p in dataset.paths]
        outs = [str(out_dir / f"limit-{w}.parquet") for w in range(LIMIT_PROCESSES)]
    else:
        paths = [f"{s3.bucket}/{s3.prefix}{p.name}" for p in dataset.paths]
        run_id = uuid.uuid4().hex[:8]
        outs = [f"{s3.bucket}/limit-out/{run_id}/limit-{w}.parquet" for w in range(LIMIT_PROCESSES)]
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
                "out": outs[w],
                "key_id": key_id,
                "key": base64.b64encode(key).decode(),
                "schema": schema,
                "s3": s3.options if s3 is not None else None,
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
    figures: dict[str, Any] = {
        "rows": rows,
        "seconds": elapsed,
        "rows_per_s": rows / elapsed,
        "processes": len(workers),
        "blob_bytes": sum(r["bytes"] for r in results),
        "reads": "LocalStack S3" if s3 is not None else "local files",
    }
    if checksum:
        fs: pafs.FileSystem = pafs.S3FileSystem(**s3.options) if s3 is not None else pafs.LocalFileSystem()
        crypto = crypto_from_settings(key_id, key)
        written = [(out, Path(out).name) for out in outs[: len(workers)]]  # named as limit_worker does
        figures["checksum"] = checksums(blob_files(fs, written, crypto))
    remove_tree(out_dir)
    return figures


def stage_dataset(dataset: Dataset, s3_client: Any, bucket: str, prefix: str, threads: int = 8) -> int:
    """Put the data set's files into ``bucket`` under ``prefix`` (not timed); how many."""
    with ThreadPoolExecutor(threads, thread_name_prefix="bench-stage") as pool:
        done = list(
            pool.map(
                lambda p: s3_client.put_object(Bucket=bucket, Key=f"{prefix}{p.name}", Body=p.read_bytes()),
                dataset.paths,
            )
        )
    return len(done)


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
        repeats: int = 3,
        max_files_per_trigger: int = PEER_MAX_FILES_PER_TRIGGER,
    ) -> None:
        self.dataset = dataset
        self.work_dir = work_dir
        self.driver_memory = driver_memory
        self.master = master
        self.java_options = java_options
        self.repeats = repeats
        self.max_files_per_trigger = max_files_per_trigger
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PeerRun:
        """Start the child process and return at once."""
        remove_tree(self.work_dir)
        warm = self.work_dir / "warmup-csv"
        warm.mkdir(parents=True)
        for i in range(WARMUP_FILES):  # what Floe's warm-up loads (bench.throughput.WarmUp)
            (warm / f"warm{i}.csv").write_text(csv_text(i, 10))
        argv = [
            sys.executable,
            "-m",
            "bench.spark_peer",
            "--input", str(self.dataset.directory),
            "--work", str(self.work_dir / "streams"),
            "--warmup", str(warm),
            "--repeats", str(self.repeats),
            "--max-files-per-trigger", str(self.max_files_per_trigger),
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
        raw: dict[str, Any] = json.loads(lines[-1])
        remove_tree(self.work_dir)
        return peer_figures(raw)

    def kill(self) -> None:
        """SIGKILL the child's session (nothing if it is gone)."""
        if self.proc is not None:
            kill_session(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            wait_session_gone(self.proc.pid, 10.0)


def repeated(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeated runs of one measurement: the median rows/s (and its run's seconds), the spread and
    every run."""
    rates = [r["rows_per_s"] for r in runs]
    middle = sorted(runs, key=lambda r: r["rows_per_s"])[len(runs) // 2]
    return {
        "rows": runs[0]["rows"],
        "rows_per_s": statistics.median(rates),
        "seconds": middle["seconds"],
        "rows_per_s_spread": spread(rates),
        "runs": runs,
    }


def peer_figures(raw: dict[str, Any]) -> dict[str, Any]:
    """The peer child's answer as figures: ``plain`` and ``paced`` (maxFilesPerTrigger) each
    ``repeated``, with the session's start, the warm-up and the checksum."""
    return {
        "plain": repeated(raw["runs"]),
        "paced": {**repeated(raw["paced_runs"]), "max_files_per_trigger": raw["max_files_per_trigger"]},
        "session_start_s": raw["session_start_s"],
        "warmup_s": raw["warmup_s"],
        "checksum": raw["checksum"],
        "master": raw["master"],
        "java_options": raw["java_options"],
    }
