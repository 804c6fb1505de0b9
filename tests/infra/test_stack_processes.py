"""Unit tests of infra.stack's process handling, with small Python processes standing in for the parts.

They use a temporary state_dir, so they never touch a running stack.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from pydantic import SecretStr

from floe.settings import AwsSettings, RedisSettings, Settings
from infra import processes, stack

pytestmark = pytest.mark.unit


def _fake_part(settings: Settings, name: str, body: str, timeout_s: float = 10.0) -> stack.Part:
    """A part running ``body`` (Python); READY holds its ready-file path; a unique token marks its cmdline."""
    ready = stack.ready_file(name, settings)
    token = f"fake-part-{uuid.uuid4().hex}"
    header = f"# {token}\nimport os, signal, subprocess, sys, time\nREADY = {str(ready)!r}\n"
    script = header + textwrap.dedent(body)
    return stack.Part(
        name=name,
        argv=(sys.executable, "-c", script),
        env=dict(os.environ),
        cmdline_marker=token,
        ready_timeout_s=timeout_s,
        is_ready=ready.exists,
        ready_path=ready,
    )


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings whose state_dir is private to the test."""
    return Settings(state_dir=str(tmp_path / "state"))


def _use_parts(monkeypatch: pytest.MonkeyPatch, parts: dict[str, stack.Part]) -> None:
    """Make build_part return the fakes, so ensure/stop/status drive them like real parts."""
    real = stack.build_part
    monkeypatch.setattr(stack, "build_part", lambda name, s: parts[name] if name in parts else real(name, s))


def test_ensure_starts_once_and_stop_cleans_up(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    part = _fake_part(settings, "api", "open(READY, 'w').close()\ntime.sleep(300)\n")
    _use_parts(monkeypatch, {"api": part})

    assert stack.ensure(["api"], settings) == ["api"]
    pid = stack.running_pid("api", settings)
    assert pid is not None
    assert stack.ensure(["api"], settings) == []  # second call: already running, nothing started
    assert [row.state for row in stack.status(settings, ["api"])] == ["ready"]

    assert stack.stop(["api"], settings) == ["api"]
    assert not stack.process_alive(pid, part.cmdline_marker)
    assert not stack.pid_file("api", settings).exists()
    assert not stack.ready_file("api", settings).exists()
    assert stack.stop(["api"], settings) == []


def test_stale_ready_file_does_not_fake_readiness(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = _fake_part(settings, "consumer", "print('still warming up', flush=True)\ntime.sleep(300)\n", 1.5)
    _use_parts(monkeypatch, {"consumer": part})
    ready = stack.ready_file("consumer", settings)
    ready.parent.mkdir(parents=True)
    ready.touch()  # left behind by a crashed run

    with pytest.raises(stack.StackError, match="not ready after") as failure:
        stack.ensure(["consumer"], settings)
    assert "still warming up" in str(failure.value)  # the log tail is part of the error
    assert not stack.pid_file("consumer", settings).exists()  # the timed-out process was stopped


def test_early_exit_reports_code_and_log(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    part = _fake_part(settings, "pipeline", "print('boom: no Spark', flush=True)\nsys.exit(3)\n")
    _use_parts(monkeypatch, {"pipeline": part})

    with pytest.raises(stack.StackError, match="exited with code 3") as failure:
        stack.ensure(["pipeline"], settings)
    assert "boom: no Spark" in str(failure.value)
    assert "make up" in str(failure.value)  # the hint


def test_stale_pid_file_is_ignored(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    part = _fake_part(settings, "api", "open(READY, 'w').close()\ntime.sleep(300)\n")
    _use_parts(monkeypatch, {"api": part})
    pid_path = stack.pid_file("api", settings)
    pid_path.parent.mkdir(parents=True)
    pid_path.write_text(f"{os.getpid()}\n")  # a live pid, but not this part: the cmdline check must say so

    try:
        assert stack.ensure(["api"], settings) == ["api"]
        assert stack.running_pid("api", settings) != os.getpid()
    finally:
        stack.stop(["api"], settings)


def test_waiting_on_a_start_that_dies_starts_anew(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first instance (someone else's start) gives up before it is ready; the second one succeeds.
    body = """
        if os.path.exists(READY + ".first"):
            open(READY, "w").close()
            time.sleep(300)
        open(READY + ".first", "w").close()
        time.sleep(1)
    """
    part = _fake_part(settings, "api", body)
    _use_parts(monkeypatch, {"api": part})
    stack.pid_file("api", settings).parent.mkdir(parents=True)
    first = subprocess.Popen(part.argv, start_new_session=True)
    stack.pid_file("api", settings).write_text(f"{first.pid}\n")
    try:
        assert stack.ensure(["api"], settings) == ["api"]
        assert first.poll() is not None
        assert stack.running_pid("api", settings) not in (None, first.pid)
    finally:
        stack.stop(["api"], settings)
        first.wait()


def test_terminate_kills_the_whole_group_and_escalates(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The part ignores SIGTERM and has a child (think: Spark's JVM) that ignores it too.
    body = """
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
        open(READY + ".child", "w").write(str(child.pid))
        open(READY, "w").close()
        time.sleep(300)
    """
    part = _fake_part(settings, "pipeline", body)
    _use_parts(monkeypatch, {"pipeline": part})
    stack.ensure(["pipeline"], settings)
    pid = stack.running_pid("pipeline", settings)
    assert pid is not None
    child_pid = int(Path(str(stack.ready_file("pipeline", settings)) + ".child").read_text())

    started = time.monotonic()
    assert stack.terminate(pid, grace_s=0.5).startswith("killed")
    assert time.monotonic() - started < 10
    assert not stack.process_alive(pid, part.cmdline_marker)
    assert not processes.process_alive(child_pid)


def test_redis_argv_is_durable_and_loopback(tmp_path: Path) -> None:
    settings = Settings(state_dir=str(tmp_path), redis=RedisSettings(url="redis://localhost:6390/0"))
    argv = stack.redis_argv(settings)
    assert argv[1] == str(stack.redis_users_file(settings))  # users and password come from a file
    pairs = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert "--requirepass" not in pairs
    assert pairs["--appendonly"] == "yes"
    assert pairs["--appendfsync"] == "always"
    assert pairs["--save"] == ""
    assert pairs["--bind"] == "127.0.0.1"
    assert pairs["--port"] == "6390"
    assert pairs["--dir"] == str(tmp_path.absolute() / "redis")


def test_redis_users_file_holds_a_hash_and_no_default_user(tmp_path: Path) -> None:
    password_file = tmp_path / "secret" / "redis.password"
    settings = Settings(
        state_dir=str(tmp_path / "state"),
        redis=RedisSettings(username="loader", password_file=str(password_file)),
    )
    path = stack.write_redis_users(settings)
    password = password_file.read_text()
    assert len(password) >= 32 and oct(password_file.stat().st_mode & 0o777) == "0o600"
    lines = path.read_text().splitlines()
    assert lines[0] == "user default off ~* &* +@all"
    digest = hashlib.sha256(password.encode()).hexdigest()
    assert lines[1] == f"user loader on #{digest} ~* &* +@all"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    stack.write_redis_users(settings)
    assert password_file.read_text() == password  # the second start keeps the password


def test_explicit_redis_password_is_used_and_a_url_password_refused(tmp_path: Path) -> None:
    explicit = Settings(
        state_dir=str(tmp_path),
        redis=RedisSettings(password=SecretStr("s3cret"), password_file=str(tmp_path / "none")),
    )
    assert stack.redis_password(explicit.redis) == "s3cret"
    assert not (tmp_path / "none").exists()
    in_url = RedisSettings(url="redis://:hunter2@127.0.0.1:6390/0", password_file=str(tmp_path / "pw"))
    with pytest.raises(stack.StackError, match="FLOE_REDIS__PASSWORD") as failure:
        stack.redis_password(in_url)
    assert "hunter2" not in str(failure.value)


def test_localstack_env_follows_endpoint(tmp_path: Path) -> None:
    settings = Settings(state_dir=str(tmp_path), aws=AwsSettings(endpoint_url="http://localhost:4599"))
    part = stack.build_part("localstack", settings)
    assert part.env["GATEWAY_LISTEN"] == "127.0.0.1:4599"
    assert part.env["LOCALSTACK_HOST"] == "localhost:4599"
    assert part.env["SERVICES"] == "s3,sqs,sns"  # SNS: pipes' error notifications
    assert part.env["FILESYSTEM_ROOT"] == str(tmp_path.absolute() / "localstack")
    assert part.local


def test_remote_endpoints_are_checked_not_started(tmp_path: Path) -> None:
    settings = Settings(
        state_dir=str(tmp_path), aws=AwsSettings(endpoint_url="http://localstack.invalid:4566")
    )
    with pytest.raises(stack.StackError, match="not on this host"):
        stack.ensure(["localstack"], settings)
    real_aws = Settings(state_dir=str(tmp_path), aws=AwsSettings(endpoint_url=""))
    assert stack.ensure(["localstack"], real_aws) == []


def test_unknown_part_is_an_error(settings: Settings) -> None:
    with pytest.raises(stack.StackError, match="unknown part"):
        stack.ensure(["redis", "spark"], settings)
