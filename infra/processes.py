"""Detached child processes of the local tooling: launching, pid files, liveness, stopping, log tails.

The stack's parts (``infra/stack.py``), the local Redis Cluster's nodes (``infra/redis_cluster.py``)
and the local Spark cluster's master and workers (``infra/spark_cluster.py``) are all run the same
way, and this module is that way, once:

* :func:`launch` starts a child in its own session (so a Ctrl-C in the terminal that started it
  does not reach it, and a stop can signal its whole process group), with its output appended to a
  log file and its pid written atomically to a pid file;
* :func:`process_alive` tells whether a pid from a pid file still runs and is still that child
  (pid files outlive reboots and pids get reused, so the caller names markers of its command line);
* :func:`stop_group` and :func:`terminate` SIGTERM a process group, SIGKILL it after a grace period
  and wait until it is gone;
* :func:`log_tail` reads the end of a log, for error messages.

This module imports nothing from ``infra.stack``, ``infra.redis_cluster`` or ``infra.spark_cluster``:
``infra.stack`` imports ``infra.redis_cluster``, so code the three share cannot live in the stack.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import os
import signal
import subprocess
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from floe.runtime import private_dir, proc_stat

STOP_GRACE_S = 20.0
"""How long a process group gets to exit after SIGTERM before it is sent SIGKILL."""
KILL_WAIT_S = 5.0
"""How long a process group gets to disappear after SIGKILL before it counts as unkillable."""
POLL_S = 0.1
LOG_TAIL_LINES = 30
LOG_TAIL_BYTES = 256 * 1024
""":func:`log_tail` reads at most this much of a log's end: logs grow large over many restarts."""

# The children this process launched, by pid, until they are collected. A child usually outlives the
# command that launched it (`make up` exits), so nothing waits on it; but a Popen dropped while its
# child runs is a ResourceWarning (the tests turn warnings into failures), and in-process callers
# (the tests) stop what they launched and must be able to reap it.
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


@atexit.register
def _leave_running() -> None:
    # A child still running when this process exits keeps running on purpose (init reaps it), so the
    # Popen finalizers' "still running" warnings at interpreter exit say nothing worth reading.
    if _STARTED:
        warnings.filterwarnings("ignore", r"subprocess \d+ is still running", ResourceWarning)


# ------------------------------------------------------------------------------------------ launching


def environ_without(*names: str) -> dict[str, str]:
    """This process's environment without ``names`` (compared case-insensitively).

    For secrets a child reads from a file instead: what is in its environment can be read from
    ``/proc/<pid>/environ`` for as long as it runs.
    """
    dropped = {name.upper() for name in names}
    return {key: value for key, value in os.environ.items() if key.upper() not in dropped}


def launch(
    argv: Sequence[str],
    *,
    log: Path,
    pid_file: Path,
    env: Mapping[str, str],
    umask: int | None = None,
    banner: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` detached, in a session of its own, its output appended to ``log``; write its
    pid to ``pid_file`` and return it.

    ``log``'s and ``pid_file``'s directories are created owner-only, and ``log`` is 0600. ``umask``
    is the child's (None: it inherits ours); ``banner``, when given, is written to the log first, after
    a time stamp, so that each start is easy to find in a log that several starts appended to.
    """
    private_dir(log.parent)
    private_dir(pid_file.parent)
    with os.fdopen(os.open(log, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600), "ab") as out:
        os.fchmod(out.fileno(), 0o600)  # a log an older Floe created world-readable
        if banner is not None:
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {banner}\n".encode())
            out.flush()  # before the child's own output, which bypasses this buffer
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            # Own session: terminal signals do not reach it, and a stop can signal its whole group.
            start_new_session=True,
            # -1 is Popen's "leave the umask alone".
            umask=-1 if umask is None else umask,
        )
    _STARTED[proc.pid] = proc
    write_pid(pid_file, proc.pid)
    return proc


def exit_code(pid: int) -> int | None:
    """The exit code of ``pid`` when it is a child this process launched and it has exited; None
    while it runs, and for any other pid (whose exit this process cannot observe), including one
    that :func:`reap` has already collected."""
    proc = _STARTED.get(pid)
    return None if proc is None else proc.poll()


def reap(pid: int) -> None:
    """Collect ``pid`` if it is an exited child of this process, so that it does not linger as a zombie."""
    proc = _STARTED.get(pid)
    if proc is not None:
        # Through its Popen, which then knows its exit code (and does not warn when collected).
        if proc.poll() is not None:
            del _STARTED[pid]
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


# ------------------------------------------------------------------------------------------ pid files


def read_pid(path: Path) -> int | None:
    """The pid in a pid file, or None when it is missing or garbled."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def write_pid(path: Path, pid: int) -> None:
    """Write a pid file (0600) atomically, so that a concurrent reader never sees half a pid."""
    tmp = path.with_name(f"{path.name}.tmp")
    with os.fdopen(os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600), "w") as out:
        out.write(f"{pid}\n")
    tmp.replace(path)


# ------------------------------------------------------------------------------------------ liveness


def process_alive(pid: int, *markers: str) -> bool:
    """True when ``pid`` runs, is not a zombie, and its command line contains every one of ``markers``.

    The markers matter because pid files outlive reboots and pids get reused: without them, any
    process that happens to have the pid counts. An exited child of this process is collected first.
    """
    reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists but belongs to someone else; /proc decides
    if not Path("/proc").is_dir():
        return True  # no procfs: the signal check is all there is
    stat = proc_stat(pid)
    if stat is None or stat[0] == "Z":
        return False
    if not markers:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return all(marker in cmdline for marker in markers)


def group_alive(pgid: int) -> bool:
    """True while any non-zombie process remains in process group ``pgid``."""
    if not Path("/proc").is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = proc_stat(int(entry.name))
        if stat is not None and stat[2] == str(pgid) and stat[0] != "Z":
            return True
    return False


# ------------------------------------------------------------------------------------------ stopping


class Ending(enum.Enum):
    """How :func:`stop_group` ended."""

    GONE = enum.auto()
    """There was no such process to signal."""
    STOPPED = enum.auto()
    """It exited after SIGTERM, within the grace period."""
    KILLED = enum.auto()
    """It needed SIGKILL."""
    SURVIVED = enum.auto()
    """It was still there after SIGKILL (a process stuck in the kernel, or not ours to kill)."""


def signal_process(pid: int, sig: signal.Signals, *, group: bool = True) -> None:
    """Send ``sig`` to the process group led by ``pid`` (its children too) or, when not ``group``,
    to ``pid`` alone; a process already gone is no error."""
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def wait_gone(pid: int, *, group: bool, timeout_s: float) -> bool:
    """Wait until ``pid`` (and its process group, when ``group``) has exited; True if it did in time.

    Zombies count as gone: an exited process whose parent has not collected it yet holds nothing.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if not process_alive(pid) and not (group and group_alive(pid)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def stop_group(pid: int, grace_s: float = STOP_GRACE_S, kill_wait_s: float = KILL_WAIT_S) -> Ending:
    """SIGTERM the process group led by ``pid``, SIGKILL it when it has not exited after ``grace_s``,
    and wait until it is gone; say which was needed.

    When ``pid`` leads no group of its own (it was not started by :func:`launch`), only ``pid`` is
    signalled, so that a stop never hits the group of whoever started it.
    """
    try:
        group = os.getpgid(pid) == pid  # launch() makes every child a session (and group) leader
    except ProcessLookupError:
        return Ending.GONE
    signal_process(pid, signal.SIGTERM, group=group)
    if wait_gone(pid, group=group, timeout_s=grace_s):
        return Ending.STOPPED
    signal_process(pid, signal.SIGKILL, group=group)
    if wait_gone(pid, group=group, timeout_s=kill_wait_s):
        return Ending.KILLED
    return Ending.SURVIVED


def terminate(pid: int, grace_s: float = STOP_GRACE_S) -> str:
    """:func:`stop_group`, said in words for a progress line: ``already gone``, ``stopped``,
    ``killed after <grace> s`` or ``did not die even after SIGKILL``."""
    ending = stop_group(pid, grace_s)
    if ending is Ending.KILLED:
        return f"killed after {grace_s:.0f} s"
    if ending is Ending.SURVIVED:
        return "did not die even after SIGKILL"
    return "stopped" if ending is Ending.STOPPED else "already gone"


# ------------------------------------------------------------------------------------------ logs


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file (empty when there is none)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            # Reading only the end keeps this cheap on logs that grew large over many restarts.
            fh.seek(max(0, fh.tell() - LOG_TAIL_BYTES))
            data = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
