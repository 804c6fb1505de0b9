"""The benchmark's own Floe: LocalStack and Redis as the tests get them, and isolated Floe processes.

LocalStack and Redis are started through ``infra.stack`` when they do not answer yet, and only
those this run started are stopped at the end (as ``make test`` does). The API, the consumer and
the Spark job are this run's own: each runs ``.venv/bin/floe <name>`` in a session of its own (so
a stop reaches the Spark JVM and its Python daemons and workers), on a private state directory,
Redis key prefix, SQS queue, tables bucket and API port, so a benchmark never sees, or disturbs,
another stack on the same services.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis
from botocore.exceptions import ClientError
from rich.console import Console

from bench.memory import session_members
from floe.aws import AWS_ERRORS
from floe.aws import client as aws_client
from floe.runtime import free_port
from floe.settings import Settings
from floe.tls import api_base_url, client_ssl_context
from front.client import auth_header, records, run_sql

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
FLOE_PROCESSES: tuple[str, ...] = ("api", "consumer", "pipeline")
READY_TIMEOUT_S = {"api": 90.0, "consumer": 90.0, "pipeline": 240.0}
STOP_GRACE_S = 30.0
BENCH_INTEGRATION = (
    "CREATE STORAGE INTEGRATION IF NOT EXISTS floe_bench TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' "
    "ENABLED = TRUE STORAGE_ALLOWED_LOCATIONS = ('*')"
)
"""The integration the benchmarks' stages read through (their buckets have random names)."""


class BenchError(RuntimeError):
    """A benchmark step failed; the message says which and why."""


def unique(prefix: str) -> str:
    """A random lower-case name, valid as an S3 bucket, SQS queue, Redis prefix or SQL identifier."""
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def isolated_settings(base: Settings, run_dir: Path) -> Settings:
    """``base`` with this run's own state directory, key prefix, queues, bucket, port and keys."""
    return base.model_copy(
        update={
            "state_dir": str(run_dir),
            "redis": base.redis.model_copy(update={"prefix": unique("bench")}),
            "api": base.api.model_copy(update={"host": "127.0.0.1", "port": free_port()}),
            "consumer": base.consumer.model_copy(
                update={
                    "queue_name": unique("benchq"),
                    "dlq_name": unique("benchdlq"),
                    # A long poll returns as soon as a message arrives, so this only bounds how long
                    # a stop waits for idle pollers to notice it.
                    "wait_time_s": 2,
                }
            ),
            "pipeline": base.pipeline.model_copy(
                update={"tables_bucket": unique("benchtables"), "checkpoint_dir": str(run_dir / "checkpoint")}
            ),
            "encryption": base.encryption.model_copy(
                update={"master_key": None, "master_key_file": str(run_dir / "master.key")}
            ),
            "auth": base.auth.model_copy(update={"admin_key_file": str(run_dir / "admin_rsa_key.p8")}),
        },
        deep=True,
    )


def kill_group(pgid: int, sig: int) -> None:
    """Signal a whole process group; a group that is gone already is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_session(sid: int, sig: int) -> None:
    """Signal every process of a session: the leader's group and the groups PySpark's Python
    daemons make for themselves inside it."""
    kill_group(sid, sig)
    for pid in session_members({sid})[sid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_session_gone(sid: int, timeout_s: float) -> bool:
    """Wait until no process of the session is left (a Spark JVM and its Python daemons exit a
    moment after the driver)."""
    deadline = time.monotonic() + timeout_s
    while True:
        # An exited child of ours stays a zombie, still in the session, until it is reaped.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(sid, os.WNOHANG)
        if not _live(session_members({sid})[sid]):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _live(pids: list[int]) -> list[int]:
    """The pids that are not zombies."""
    out = []
    for pid in pids:
        try:
            state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.append(pid)
    return out


class FloeStack:
    """This run's Floe processes on their isolated settings."""

    def __init__(self, settings: Settings, console: Console) -> None:
        self.settings = settings
        self.console = console
        self.run_dir = Path(settings.state_dir)
        self.logs = self.run_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        settings.encryption.resolve_master_key()  # the key file exists before any process reads it
        base = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
        self.env = {**base, **settings.child_env(), "PYSPARK_PYTHON": sys.executable}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _ready_file(self, name: str) -> Path:
        return self.run_dir / "run" / f"{name}.ready"

    def launch(self, name: str) -> None:
        """Start one process in its own session without waiting for it."""
        self._ready_file(name).unlink(missing_ok=True)
        with (self.logs / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                [str(VENV_BIN / "floe"), name],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def launch_all(self) -> None:
        """Start every Floe process without waiting for them."""
        for name in FLOE_PROCESSES:
            self.launch(name)

    def wait_ready(self, names: tuple[str, ...] | list[str]) -> float:
        """Wait until every named process announced readiness; returns when the last one did."""
        pending = set(names)
        deadline = time.monotonic() + max(READY_TIMEOUT_S[n] for n in names)
        while pending:
            for name in list(pending):
                if self._ready_file(name).exists():
                    pending.discard(name)
                elif self.procs[name].poll() is not None or time.monotonic() > deadline:
                    raise BenchError(f"floe {name} did not become ready:\n{self.log_tail(name)}")
            if pending:
                time.sleep(0.01)
        ready = time.perf_counter()
        self.check(names)
        return ready

    def check(self, names: tuple[str, ...] | list[str] = FLOE_PROCESSES) -> None:
        """BenchError when a process that should run has exited (its log says why)."""
        for name in names:
            proc = self.procs.get(name)
            if proc is None:
                raise BenchError(f"floe {name} is not running")
            code = proc.poll()
            if code is not None:
                raise BenchError(
                    f"floe {name} exited with code {code} during the run (a signal from outside, if its "
                    f"log says 'drain requested'):\n{self.log_tail(name)}"
                )

    def start(self, names: tuple[str, ...] | list[str] = FLOE_PROCESSES) -> None:
        """Start the named processes side by side and wait until all are ready."""
        for name in names:
            self.launch(name)
        self.wait_ready(names)

    def sid(self, name: str) -> int:
        """The session (and process group) a running process leads."""
        return self.procs[name].pid

    def stop(self, names: tuple[str, ...] | list[str] | None = None) -> dict[str, int | None]:
        """SIGTERM the processes together, SIGKILL their groups after the grace time; exit codes."""
        names = list(self.procs) if names is None else [n for n in names if n in self.procs]
        for name in names:
            if self.procs[name].poll() is None:
                self.procs[name].send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + STOP_GRACE_S
        for name in names:
            proc = self.procs.pop(name)
            try:
                codes[name] = proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_session(proc.pid, signal.SIGKILL)
                codes[name] = proc.wait(10)
            if not wait_session_gone(proc.pid, max(1.0, deadline - time.monotonic())):
                kill_session(proc.pid, signal.SIGKILL)
                wait_session_gone(proc.pid, 10.0)
            self._ready_file(name).unlink(missing_ok=True)
        return codes

    def kill_all(self) -> None:
        """SIGKILL every session at once (the path of an interrupted run)."""
        for proc in self.procs.values():
            kill_session(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            if not wait_session_gone(proc.pid, 10.0):
                kill_session(proc.pid, signal.SIGKILL)
        self.procs.clear()

    def log_tail(self, name: str, chars: int = 3000) -> str:
        """The end of a process's log."""
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def sql(self, statement: str, timeout: float = 120.0) -> list[dict[str, Any]]:
        """Run one statement through the API; its rows as objects."""
        return records(run_sql(self.settings, statement, timeout))


class SqlClient:
    """A kept-alive connection of its own to the API's SQL endpoint, for polling: a poll never
    waits for a connection of the pool ``front.client.run_sql`` shares with the part's other work."""

    def __init__(self, settings: Settings, timeout: float = 60.0) -> None:
        self.settings = settings
        self.url = f"{api_base_url(settings)}/api/v1/sql"
        self.http = httpx.Client(timeout=timeout, verify=client_ssl_context(settings) or True)

    def sql(self, statement: str) -> list[dict[str, Any]]:
        """Run one statement; its rows as objects."""
        resp = self.http.post(self.url, json={"sql": statement}, headers=auth_header(self.settings))
        body = resp.json()
        if resp.status_code != 200 or not body.get("success"):
            raise BenchError(f"{statement[:80]}: {body.get('code', resp.status_code)} {body.get('message')}")
        return records(body)

    def close(self) -> None:
        """Close the connection."""
        self.http.close()

    def __enter__(self) -> SqlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    """Poll until ``predicate()`` is truthy; BenchError after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {value!r})")
        time.sleep(interval_s)


class Resources:
    """S3 buckets and Redis keys this run created, removed again at the end."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.buckets: list[str] = [settings.pipeline.tables_bucket]
        self._s3: Any = None

    @property
    def s3(self) -> Any:
        """A boto3 S3 client on the configured endpoint."""
        if self._s3 is None:
            self._s3 = aws_client(self.settings.aws, "s3")
        return self._s3

    def bucket(self, prefix: str) -> str:
        """Create a fresh bucket and remember it."""
        name = unique(prefix)
        self.s3.create_bucket(Bucket=name)
        self.buckets.append(name)
        return name

    def clean(self) -> list[str]:
        """Delete this run's buckets, queues and Redis keys; returns what could not be deleted."""
        problems: list[str] = []
        for bucket in self.buckets:
            try:
                paginator = self.s3.get_paginator("list_objects_v2")
                for page in paginator.paginate(Bucket=bucket):
                    keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                    for i in range(0, len(keys), 1000):
                        self.s3.delete_objects(Bucket=bucket, Delete={"Objects": keys[i : i + 1000]})
                self.s3.delete_bucket(Bucket=bucket)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "NoSuchBucket":
                    problems.append(f"bucket {bucket}: {exc}")
            except AWS_ERRORS as exc:
                problems.append(f"bucket {bucket}: {exc}")
        try:
            sqs = aws_client(self.settings.aws, "sqs")
            for name in (self.settings.consumer.queue_name, self.settings.consumer.dlq_name):
                with contextlib.suppress(sqs.exceptions.QueueDoesNotExist):
                    sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"])
        except AWS_ERRORS as exc:
            problems.append(f"queues: {exc}")
        try:
            client = self.settings.redis.client()
            batch: list[bytes] = []
            for key in client.scan_iter(match=f"{self.settings.redis.prefix}:*", count=5000):
                batch.append(key)
                if len(batch) >= 5000:
                    client.unlink(*batch)
                    batch.clear()
            if batch:
                client.unlink(*batch)
        except redis.RedisError as exc:
            problems.append(f"redis keys: {exc}")
        return problems


def remove_tree(path: Path) -> None:
    """Delete a directory tree, quietly."""
    shutil.rmtree(path, ignore_errors=True)
