"""Fault injection's arm file (how the chaos tests arm a running process without restarting it), its
crash record, and the log handler that writes a batch of lines at once."""

from __future__ import annotations

import fcntl
import io
import json
import logging
import multiprocessing
import multiprocessing.synchronize
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from floe.runtime import Faults, JsonFormatter, LinesHandler, _record_crash_locked, log_lines
from floe.settings import FaultSettings
from tests.conftest import wait_until

pytestmark = pytest.mark.unit


def arm(path: Path, **fields: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(fields))
    os.replace(tmp, path)


def test_without_an_arm_file_the_settings_alone_apply(tmp_path: Path) -> None:
    base = FaultSettings(commit_delay_s=2.0)
    assert Faults(base).current() is base
    armed = FaultSettings(commit_delay_s=2.0, arm_file=str(tmp_path / "arm.json"))
    assert Faults(armed).current() is armed  # the file does not exist


def test_the_arm_file_overrides_while_it_exists_and_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "arm.json"
    faults = Faults(FaultSettings(commit_delay_s=2.0, arm_file=str(path)))
    arm(path, crash_at="pipeline.after_blobs", crash_on_hit=3)
    now = faults.current()
    assert (now.crash_at, now.crash_on_hit, now.commit_delay_s) == ("pipeline.after_blobs", 3, 2.0)
    arm(path, commit_delay_s=4.0)
    assert (faults.current().crash_at, faults.current().commit_delay_s) == ("", 4.0)
    path.unlink()
    assert faults.current() == faults.settings


def test_hits_count_from_the_arming_and_a_disarmed_point_never_crashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashes: list[str] = []
    # The crash itself SIGKILLs the process group; here it is recorded instead.
    monkeypatch.setattr("floe.runtime._floe_group", lambda: None)
    monkeypatch.setattr("floe.runtime.os.kill", lambda pid, sig: crashes.append(f"{pid}:{sig}"))
    path = tmp_path / "arm.json"
    record = tmp_path / "faults.log"
    faults = Faults(FaultSettings(arm_file=str(path)))
    for _ in range(5):
        faults.hit("pipeline.after_commit")  # not armed yet: these do not count
    arm(path, crash_at="pipeline.after_commit", crash_on_hit=2, record_file=str(record))
    faults.hit("pipeline.after_commit")
    faults.hit("pipeline.after_blobs")  # another point
    assert crashes == []
    faults.hit("pipeline.after_commit")
    assert len(crashes) == 1 and record.read_text().split()[0] == "pipeline.after_commit"
    path.unlink()
    for _ in range(3):
        faults.hit("pipeline.after_commit")
    assert len(crashes) == 1


def _record_crash(path: str, point: str, tree: int) -> None:
    """What a crash does to the record (``floe.runtime._crash``), but that it lets the lock go on
    closing instead of on dying."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _record_crash_locked(fd, path, point, tree)
    finally:
        os.close(fd)


def _crash_together(start: multiprocessing.synchronize.Barrier, path: str, tree: int) -> None:
    start.wait()
    _record_crash(path, "pipeline.reading", tree)


def test_a_process_tree_that_crashes_in_two_processes_at_once_is_recorded_once(tmp_path: Path) -> None:
    record = tmp_path / "faults.log"
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(6)
    # Six processes of tree 100 reach the crash together, as two Spark workers can.
    procs = [ctx.Process(target=_crash_together, args=(start, str(record), 100)) for _ in range(6)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=30)
    assert [proc.exitcode for proc in procs] == [0] * 6
    lines = record.read_text().splitlines()
    assert len(lines) == 1 and lines[0].split()[::2] == ["pipeline.reading", "100"]
    _record_crash(str(record), "pipeline.reading", 200)  # a restarted tree crashes again
    _record_crash(str(record), "pipeline.after_blobs", 100)  # another point
    assert record.read_text().split().count("pipeline.reading") == 2
    assert len(record.read_text().splitlines()) == 3


_LEADER = """\
import os, subprocess, sys, time
from floe.runtime import Faults
from floe.settings import FaultSettings

# `floe <command>`: this file is named floe, so the fault code takes its group for the Floe tree.
work, who = sys.argv[1], sys.argv[2]
daemon = subprocess.Popen([sys.executable, os.path.join(work, "daemon.py"), work, who])
with open(os.path.join(work, "pids"), "a") as f:
    f.write(f"{os.getpid()}\\n{daemon.pid}\\n")
if who == "leader":  # the driver crashes while the daemon's workers run
    while not os.path.exists(os.path.join(work, "b-ready")):
        time.sleep(0.001)
    Faults(FaultSettings(crash_at="pipeline.reading", record_file=os.path.join(work, "faults.log"))).hit(
        "pipeline.reading"
    )
daemon.wait()
"""

_DAEMON = """\
import os, sys, time
from floe.runtime import Faults
from floe.settings import FaultSettings

work, who = sys.argv[1], sys.argv[2]
os.setpgid(0, 0)  # as pyspark's daemon does: a group of its own for itself and its workers
leader = os.getppid()
faults = Faults(FaultSettings(crash_at="pipeline.reading", record_file=os.path.join(work, "faults.log")))


def leader_gone() -> bool:
    try:
        with open(f"/proc/{leader}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


workers = []
for role in ("a", "b"):
    pid = os.fork()
    if pid == 0:
        if role == "b":
            open(os.path.join(work, "b-ready"), "w").close()
            while not leader_gone():  # the crash has begun: the leader's group is dead
                time.sleep(0.001)
            faults.hit("pipeline.reading")  # its own crash, a moment after
            os._exit(0)
        while not os.path.exists(os.path.join(work, "b-ready")):
            time.sleep(0.001)
        if who == "worker":
            faults.hit("pipeline.reading")
        os._exit(0)
    workers.append(pid)
with open(os.path.join(work, "pids"), "a") as f:
    f.write("".join(f"{pid}\\n" for pid in workers))
for pid in workers:
    os.waitpid(pid, 0)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize("who", ["worker", "leader"])
def test_a_crash_kills_every_process_group_of_the_tree_and_is_recorded_once(tmp_path: Path, who: str) -> None:
    """A Spark Python worker (or the driver) crashes; the daemon's workers sit in a group of their own.

    Before the whole tree was killed, the daemon and its other worker outlived the crash: that worker
    reached its own crash point after its leader died, found no Floe tree above it, and recorded a
    second crash as a tree of its own (the chaos test that counted two crashes), and the daemon was
    left running.
    """
    (tmp_path / "floe").write_text(_LEADER)
    (tmp_path / "daemon.py").write_text(_DAEMON)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    leader = subprocess.Popen(
        [sys.executable, str(tmp_path / "floe"), str(tmp_path), who], env=env, start_new_session=True
    )
    try:
        assert leader.wait(timeout=60) == -signal.SIGKILL
        pids = [int(x) for x in (tmp_path / "pids").read_text().split()]
        assert len(pids) == 4, "the leader, the daemon and its two workers all started"
        wait_until(lambda: not any(_alive(pid) for pid in pids), timeout=30, what="the whole tree to be gone")
        lines = (tmp_path / "faults.log").read_text().splitlines()
        assert [line.split()[::2] for line in lines] == [["pipeline.reading", str(leader.pid)]]
    finally:
        started = tmp_path / "pids"
        for pid in [int(x) for x in started.read_text().split()] if started.exists() else []:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_malformed_arm_file_arms_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "arm.json"
    path.write_text('{"crash_at": ')
    faults = Faults(FaultSettings(arm_file=str(path)))
    assert faults.current() == faults.settings
    assert "fault arm file" in caplog.text
    arm(path, crash_on_hit="often")
    assert faults.current() == faults.settings


class _Writes(io.StringIO):
    """A stream that counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_log_lines_writes_a_batch_of_records_at_once_and_gives_other_handlers_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stream = _Writes()
    handler = LinesHandler(stream)
    handler.setFormatter(JsonFormatter("api"))
    logger = logging.getLogger("floe.test_log_lines")
    logger.addHandler(handler)
    try:
        with caplog.at_level(logging.INFO, logger="floe.test_log_lines"):
            log_lines(
                logger,
                [
                    (logging.INFO, "enqueued", {"file": "a.csv", "step": "enqueued"}),
                    (logging.DEBUG, "left alone", {"file": "b.csv"}),  # below the logger's level
                    (logging.WARNING, "load failed: 100% bad", {"file": "c%s.csv", "rows": 0}),
                ],
            )
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["level"], x["msg"], x["file"]) for x in lines] == [
        ("INFO", "enqueued", "a.csv"),
        ("WARNING", "load failed: 100% bad", "c%s.csv"),  # a message is not %-formatted again
    ]
    assert lines[0]["step"] == "enqueued" and lines[1]["rows"] == 0
    assert stream.writes == 1  # both lines in one write
    # pytest's handler, not a LinesHandler, got the same records one by one.
    assert [(r.getMessage(), r.__dict__["file"]) for r in caplog.records] == [
        ("enqueued", "a.csv"),
        ("load failed: 100% bad", "c%s.csv"),
    ]
    log_lines(logger, [])  # nothing to write: no empty write either
    assert stream.writes == 1
