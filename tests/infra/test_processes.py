"""Unit tests of infra.processes with small real processes (``sleep``, ``sh``, Python) in a tmp dir."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from floe.runtime import OWNER_ONLY_UMASK
from infra import processes
from tests.conftest import wait_until

pytestmark = pytest.mark.unit


@pytest.fixture
def launched() -> Iterator[list[int]]:
    """Pids a test launched; whatever still runs afterwards is killed, so no test leaves a child behind."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        processes.stop_group(pid, grace_s=0.0)


def _launch(
    tmp_path: Path, launched: list[int], argv: list[str], umask: int | None = None, banner: str | None = None
) -> subprocess.Popen[bytes]:
    """Launch ``argv`` with its log and pid file under ``tmp_path``; the ``launched`` fixture stops it."""
    proc = processes.launch(
        argv,
        log=tmp_path / "logs" / "child.log",
        pid_file=tmp_path / "run" / "child.pid",
        env=os.environ,
        umask=umask,
        banner=banner,
    )
    launched.append(proc.pid)
    return proc


def _wait_exec(pid: int, marker: str) -> None:
    """Wait until ``pid``'s command line shows ``marker``: for a moment after exec, the kernel
    shows an empty /proc/<pid>/cmdline (Popen returns as soon as exec has begun)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    wait_until(lambda: marker.encode() in cmdline.read_bytes(), timeout=10.0, interval=0.01, what="the exec")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_launched_child_runs_in_its_own_session_with_its_pid_file_and_log(
    tmp_path: Path, launched: list[int]
) -> None:
    seconds = str(1000 + int.from_bytes(os.urandom(2), "big"))  # a marker no other sleep is likely to have
    proc = _launch(tmp_path, launched, ["sleep", seconds], banner="starting the sleeper")

    assert processes.process_alive(proc.pid)
    _wait_exec(proc.pid, "sleep")
    assert processes.process_alive(proc.pid, "sleep", seconds)
    # Its own session and group: terminal signals miss it, and a stop can signal its whole group.
    assert os.getsid(proc.pid) == proc.pid
    assert os.getpgid(proc.pid) == proc.pid
    pid_file = tmp_path / "run" / "child.pid"
    assert pid_file.read_text() == f"{proc.pid}\n"
    assert processes.read_pid(pid_file) == proc.pid
    log = tmp_path / "logs" / "child.log"
    assert "starting the sleeper" in log.read_text()
    assert _mode(log) == 0o600 and _mode(pid_file) == 0o600
    assert _mode(log.parent) == 0o700 and _mode(pid_file.parent) == 0o700
    assert processes.exit_code(proc.pid) is None

    assert processes.terminate(proc.pid) == "stopped"
    assert not processes.process_alive(proc.pid)
    assert proc.returncode == -signal.SIGTERM  # collected through its Popen, so no zombie is left
    assert processes.terminate(proc.pid) == "already gone"


def test_a_pid_whose_command_line_lacks_the_marker_is_not_alive(tmp_path: Path, launched: list[int]) -> None:
    proc = _launch(tmp_path, launched, ["sleep", "300"])
    _wait_exec(proc.pid, "sleep")

    assert processes.process_alive(proc.pid, "sleep")
    assert not processes.process_alive(proc.pid, f"floe-{uuid.uuid4().hex}")
    assert not processes.process_alive(proc.pid, "sleep", f"floe-{uuid.uuid4().hex}")  # every marker counts


def test_launch_appends_to_the_log_sets_the_umask_and_reports_the_exit_code(
    tmp_path: Path, launched: list[int]
) -> None:
    log = tmp_path / "logs" / "child.log"
    log.parent.mkdir()
    log.write_text("an earlier start\n")
    log.chmod(0o644)
    old_umask = os.umask(0o022)
    try:
        proc = _launch(tmp_path, launched, ["sh", "-c", "umask; exit 3"], umask=OWNER_ONLY_UMASK)
    finally:
        os.umask(old_umask)

    assert wait_until(lambda: processes.exit_code(proc.pid) is not None, timeout=10.0, interval=0.01)
    assert processes.exit_code(proc.pid) == 3
    lines = log.read_text().splitlines()
    assert lines[0] == "an earlier start"
    assert lines[-1] == "0077"
    assert _mode(log) == 0o600  # a log an older version created readable by others is closed
    assert processes.exit_code(os.getpid()) is None  # not a child this process launched


def test_terminate_kills_a_group_whose_leader_ignores_sigterm_and_says_so(
    tmp_path: Path, launched: list[int]
) -> None:
    child_file = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
        open({str(child_file)!r} + ".tmp", "w").write(str(child.pid))
        os.replace({str(child_file)!r} + ".tmp", {str(child_file)!r})
        time.sleep(300)
    """)
    proc = _launch(tmp_path, launched, [sys.executable, "-c", script])
    wait_until(child_file.exists, timeout=30.0, interval=0.01, what="the leader to start its child")
    child = int(child_file.read_text())
    assert processes.group_alive(proc.pid)

    assert processes.terminate(proc.pid, grace_s=1.0) == "killed after 1 s"
    assert not processes.process_alive(proc.pid)
    assert not processes.process_alive(child)  # the whole group went, not just its leader
    assert not processes.group_alive(proc.pid)
    assert proc.returncode == -signal.SIGKILL


def test_stop_group_signals_only_a_pid_that_leads_no_group(tmp_path: Path) -> None:
    # Started without a session of its own, it shares this process's group: stopping it must not
    # signal that group (this test would die with it).
    with subprocess.Popen(["sleep", "300"]) as proc:
        assert os.getpgid(proc.pid) == os.getpgid(0)
        assert processes.stop_group(proc.pid, grace_s=10.0) is processes.Ending.STOPPED
        assert not processes.process_alive(proc.pid)


def test_a_zombie_counts_as_gone() -> None:
    # The zombie is a grandchild: its parent never collects it, and this process cannot, so only
    # /proc can tell that it is no longer running.
    script = (
        "import subprocess, sys; c = subprocess.Popen(['true']); print(c.pid, flush=True); sys.stdin.read()"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as parent:
        try:
            assert parent.stdout is not None
            zombie = int(parent.stdout.readline())
            wait_until(
                lambda: Path(f"/proc/{zombie}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
                timeout=10.0,
                interval=0.01,
                what="the grandchild to exit",
            )
            os.kill(zombie, 0)  # it still exists...

            assert not processes.process_alive(zombie)  # ...but does not run
            assert processes.wait_gone(zombie, group=False, timeout_s=0.0)
            assert processes.stop_group(zombie, grace_s=0.0) is processes.Ending.STOPPED
        finally:
            parent.kill()


def test_pid_files_round_trip_atomically_and_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "part.pid"
    assert processes.read_pid(path) is None
    old_umask = os.umask(0o000)
    try:
        processes.write_pid(path, 4242)
    finally:
        os.umask(old_umask)
    assert processes.read_pid(path) == 4242
    assert _mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["part.pid"]  # the temporary file was renamed
    processes.write_pid(path, 17)
    assert path.read_text() == "17\n"
    path.write_text("not a pid\n")
    assert processes.read_pid(path) is None


def test_log_tail_returns_the_last_lines_and_nothing_for_a_missing_log(tmp_path: Path) -> None:
    log = tmp_path / "part.log"
    assert processes.log_tail(log) == ""
    log.write_text("".join(f"line {n}\n" for n in range(100)))
    assert processes.log_tail(log, 3) == "line 97\nline 98\nline 99"
    assert processes.log_tail(log).splitlines() == [f"line {n}" for n in range(70, 100)]


def test_log_tail_reads_only_the_end_of_a_large_log(tmp_path: Path) -> None:
    log = tmp_path / "part.log"
    with log.open("wb") as out:
        out.write(b"first line\n" + b"x" * (2 * processes.LOG_TAIL_BYTES) + b"\nlast line\n")
    assert processes.log_tail(log, 1000).splitlines()[-1] == "last line"
    assert "first line" not in processes.log_tail(log, 1000)


def test_environ_without_drops_the_names_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    keep = f"FLOE_TEST_{uuid.uuid4().hex.upper()}"
    monkeypatch.setenv("FLOE_REDIS__PASSWORD", "secret")
    monkeypatch.setenv("floe_redis__password", "secret")
    monkeypatch.setenv(keep, "kept")
    env = processes.environ_without("FLOE_REDIS__PASSWORD")
    assert "FLOE_REDIS__PASSWORD" not in env and "floe_redis__password" not in env
    assert env[keep] == "kept"
    assert os.environ["FLOE_REDIS__PASSWORD"] == "secret"  # a copy: this process's own is untouched
