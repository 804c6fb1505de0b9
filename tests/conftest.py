"""Session fixtures: real LocalStack and Redis, and a real Floe stack (API, consumer, Spark job).

Each session gets its own Redis key prefix, SQS queue, tables bucket and API port, and each test
its own stage bucket and object names, so runs never see each other's state.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import redis

from bench.harness import unique
from floe.aws import client as aws_client
from floe.runtime import free_port
from floe.settings import Settings
from front.client import records, run_sql
from tests.workers import pytest_runtest_setup, pytest_xdist_make_scheduler  # noqa: F401 - hooks

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent

# Hypothesis profiles, chosen by HYPOTHESIS_PROFILE (or pytest's --hypothesis-profile):
# - "ci", the default: derandomised (each property's examples are drawn from a seed its own code
#   gives, with no example database), so `make test` runs the same examples every time and passes
#   or fails alike on every run; no deadline, and no too_slow health check, whose timing a loaded
#   machine would decide;
# - "dev": Hypothesis' default profile, random examples each run and the .hypothesis database, to
#   look further than the fixed examples do.
# A property's own settings(max_examples=...) beats the profile's: the reference models take
# theirs from reference_model_examples.
hypothesis.settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
hypothesis.settings.register_profile("dev", hypothesis.settings.get_profile("default"))
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def reference_model_examples(dev: int, ci: int) -> int:
    """max_examples of a property that runs Floe against a reference model: ``ci`` under the "ci"
    profile, whose examples never change, so more of them are run to cover as much; ``dev`` under
    another, whose new examples each run cover more over time."""
    return ci if hypothesis.settings.get_current_profile_name() == "ci" else dev


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    """Settings of the shared services (LocalStack and Redis), as the environment gives them, with
    every step refused whose keys lie in two Redis Cluster slots (``redis.check_slots``; the stacks
    the tests start inherit it)."""
    settings = Settings()
    return settings.model_copy(update={"redis": settings.redis.model_copy(update={"check_slots": True})})


@pytest.fixture(scope="session")
def services(base_settings: Settings) -> Iterator[Settings]:
    """LocalStack and Redis, started if they are not running (and stopped again if we started them)."""
    from infra.stack import ensure_services, stop

    started = ensure_services(base_settings)
    yield base_settings
    if started:
        stop(started, base_settings)


@pytest.fixture(scope="session")
def redis_client(services: Settings) -> redis.Redis[bytes]:
    """A client of the test Redis."""
    return services.redis.client()


@pytest.fixture(scope="session")
def s3(services: Settings) -> Any:
    """A boto3 S3 client on LocalStack."""
    return aws_client(services.aws, "s3")


@pytest.fixture
def isolated_settings(services: Settings, tmp_path: Path) -> Settings:
    """Settings with a random key prefix, queue and bucket (no processes started)."""
    return services.model_copy(
        update={
            "state_dir": str(tmp_path / "state"),
            "redis": services.redis.model_copy(update={"prefix": unique("t")}),
            "consumer": services.consumer.model_copy(
                update={"queue_name": unique("q"), "dlq_name": unique("dlq"), "wait_time_s": 1}
            ),
            "pipeline": services.pipeline.model_copy(update={"tables_bucket": unique("tables")}),
            "auth": services.auth.model_copy(
                update={"admin_key_file": str(tmp_path / "state" / "admin_rsa_key.p8")}
            ),
        },
        deep=True,
    )


def _wait_group_gone(pgid: int, timeout: float = 30.0) -> None:
    """Wait until no process of a group is left (a Spark JVM exits a moment after its driver)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


@dataclass
class Stack:
    """A running Floe stack for end-to-end tests."""

    settings: Settings
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]]
    logs: Path
    altered: set[str] = field(default_factory=set)
    """Processes started with extra settings (a fault, say): ``restore`` restarts them plainly."""

    CORE = ("api", "consumer", "pipeline")
    """The processes every test expects running, as the session fixture started them."""

    def sql(self, statement: str) -> list[dict[str, Any]]:
        """Run a statement and return its rows as objects."""
        return records(run_sql(self.settings, statement))

    def start(
        self,
        name: str,
        timeout: float = 300.0,
        *,
        command: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start (or restart) one Floe process in its own session and wait until it is ready.

        ``name`` keys the process and its log; ``command`` is the `floe` subcommand (default: the
        name), so a second consumer can run as ``start("consumer2", command="consumer")``.
        ``env`` adds settings for this start only (fault injection, say).
        """
        command = command or name
        ready = Path(self.settings.state_dir) / "run" / f"{command}.ready"
        ready.unlink(missing_ok=True)
        with open(self.logs / f"{name}.log", "ab") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                [str(VENV_BIN / "floe"), command],
                cwd=ROOT,
                env={**self.env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a kill of the group takes the JVM and Python workers too
            )
        self.procs[name] = proc
        if env:
            self.altered.add(name)
        else:
            self.altered.discard(name)
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"floe {name} did not become ready:\n{tail}")
            time.sleep(0.1)
        return proc

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int | None:
        """Signal a process (SIGKILL: its whole process group) and wait for it to exit."""
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        if sig == signal.SIGKILL:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.send_signal(sig)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait(10)
        _wait_group_gone(proc.pid)
        return code

    def restore(self) -> list[str]:
        """Disarm the faults and bring the core processes back as the session started them, after a
        test that failed half-way through killing or reconfiguring one; the ones restarted.
        Without this, one failed chaos test would leave every later end-to-end test without, say,
        a Spark job."""
        Path(self.settings.faults.arm_file).unlink(missing_ok=True)
        restarted = []
        for name in self.CORE:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None and name not in self.altered:
                continue
            self.stop(name)
            self.start(name)
            restarted.append(name)
        return restarted

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run `floe <args>` in a process of its own, as a user runs it, against this stack."""
        return subprocess.run(
            [str(VENV_BIN / "floe"), *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def log_text(self, name: str) -> str:
        """Everything a process logged."""
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_mark(self, name: str) -> int:
        """Where a process's log ends now (a byte offset), for ``log_since``. A log holds the whole
        session, every test's lines and every restart's (``start`` appends), so a line found in
        ``log_text`` may be an earlier test's: take a mark when the test starts and read after it.
        """
        path = self.logs / f"{name}.log"
        return path.stat().st_size if path.exists() else 0

    def log_since(self, name: str, mark: int) -> str:
        """What a process logged after ``log_mark`` gave ``mark``."""
        path = self.logs / f"{name}.log"
        if not path.exists():
            return ""
        with path.open("rb") as log:
            log.seek(mark)
            return log.read().decode(errors="replace")


@pytest.fixture(scope="session")
def stack(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """API, consumer and Spark job on their own prefix, queue, bucket and port."""
    state = tmp_path_factory.mktemp("floe-state")
    settings = services.model_copy(
        update={
            "state_dir": str(state),
            "redis": services.redis.model_copy(update={"prefix": unique("e2e")}),
            "api": services.api.model_copy(update={"port": free_port()}),
            "consumer": services.consumer.model_copy(
                update={
                    "queue_name": unique("q"),
                    "dlq_name": unique("dlq"),
                    "wait_time_s": 2,
                    # Short, so a message whose consumer was killed comes back within a test.
                    "visibility_timeout_s": 10,
                    "max_receive_count": 3,
                    # Free ports, so the session's metrics never collide with a `make up` stack's
                    # (tests/e2e/test_metrics.py scrapes them).
                    "metrics_port": free_port(),
                }
            ),
            "pipeline": services.pipeline.model_copy(
                update={
                    "tables_bucket": unique("tables"),
                    "checkpoint_dir": str(state / "checkpoint"),
                    # Files over 8 MB stream in parts of 4 MB, so a test streams one in parts with
                    # a 40 MB file rather than a restart with other settings; the 2 GB volume test
                    # restarts with the defaults.
                    "stream_file_bytes": 8 * 1024 * 1024,
                    "chunk_bytes": 4 * 1024 * 1024,
                    "metrics_port": free_port(),
                }
            ),
            "encryption": services.encryption.model_copy(
                update={"master_key_file": str(state / "master.key")}
            ),
            "auth": services.auth.model_copy(update={"admin_key_file": str(state / "admin_rsa_key.p8")}),
            # A BACKFILL_INTERVAL may be a second and the consumers look for due listings and new
            # load failures twice a second, so tests/e2e/test_backfill.py and
            # test_error_notifications.py see them within a test.
            "backfill": services.backfill.model_copy(update={"min_interval_s": 1, "poll_s": 0.5}),
            "error_notifications": services.error_notifications.model_copy(update={"poll_s": 0.5}),
            # The chaos tests arm a fault in the running processes through this file rather than
            # restart a Spark job (half a minute) with other settings (tests/chaos/test_faults.py).
            "faults": services.faults.model_copy(update={"arm_file": str(state / "faults.arm")}),
            # A pipe's call gives up on a service that does not answer after 3 s, and the breaker
            # then holds its pipes back for 20 s: long enough that a test sees them held, short
            # enough that it sees them resume (tests/e2e/test_external_functions.py).
            "external_functions": services.external_functions.model_copy(
                update={
                    "pipe_retry_timeout_s": 3.0,
                    "breaker_cooldown_s": 20.0,
                    "breaker_max_cooldown_s": 40.0,
                }
            ),
        },
        deep=True,
    )
    settings.encryption.resolve_master_key()  # create the key file before the processes read it
    env = {**os.environ, **settings.child_env(), "PYSPARK_PYTHON": sys.executable}
    logs = state / "logs"
    logs.mkdir()
    st = Stack(settings, env, {}, logs)
    try:
        for name in ("api", "consumer", "pipeline"):
            st.start(name)
        st.sql(TEST_INTEGRATION)
        yield st
    finally:
        for name in list(st.procs):
            st.stop(name)


@pytest.fixture(autouse=True)
def _stack_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used the stack, its core processes run as the session started them."""
    yield
    if "stack" in request.fixturenames:
        restarted = request.getfixturevalue("stack").restore()
        if restarted:
            print(f"restored after {request.node.nodeid}: {', '.join(restarted)}")


TEST_INTEGRATION = (
    "CREATE STORAGE INTEGRATION IF NOT EXISTS floe_tests TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' "
    "ENABLED = TRUE STORAGE_ALLOWED_LOCATIONS = ('*')"
)
"""The integration every test stage reads through: a stage needs one, and the tests' buckets are
random. (tests/services/test_access.py tests integrations with real bounds.)"""


@pytest.fixture
def bucket(s3: Any) -> str:
    """A fresh stage bucket."""
    name = unique("stage")
    s3.create_bucket(Bucket=name)
    return name


def wait_until(
    predicate: Any, timeout: float = 90.0, interval: float = 0.3, what: str | Callable[[], str] = "condition"
) -> Any:
    """Poll until predicate() is truthy; fail the test with a clear message otherwise (``what`` may be
    a function, to say what is still missing at the time of the failure)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {said} (last value: {value!r})")
        time.sleep(interval)
