"""Peak memory of the Floe processes: every process of each one's session, sampled from /proc.

A Floe process leads its own session, and everything it starts stays in it: the Spark job's
session holds the Python driver, the JVM and PySpark's Python daemons and workers (those put
themselves into process groups of their own, so the session, not the group, is what holds them
all). Each sample sums VmRSS over a session's processes (shared pages count once per process, so
the sum is an upper bound) and PSS from ``smaps_rollup`` (shared pages split between their users),
and notes the largest process.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

PROC = Path("/proc")


def stat_fields(stat: str) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, session, ..."""
    # The command name sits in parentheses and may itself hold spaces or parentheses.
    return stat.rsplit(")", 1)[1].split()


def parse_stat_session(stat: str) -> int:
    """The session id in the text of /proc/<pid>/stat."""
    return int(stat_fields(stat)[3])


def parse_stat_parent(stat: str) -> int:
    """The parent pid in the text of /proc/<pid>/stat."""
    return int(stat_fields(stat)[1])


DAEMON_MODULES = (b"pyspark.daemon", b"pipeline.spark_daemon")
"""What a PySpark worker daemon's command line runs: pyspark's own, or Floe's (decision 97)."""


def runs_module(cmdline: bytes, modules: tuple[bytes, ...]) -> bool:
    """Whether a /proc/<pid>/cmdline is ``python -m <one of modules> ...``. Not a substring test:
    the JVM's own command line names the daemon module in its --conf."""
    args = cmdline.split(b"\0")
    return any(a == b"-m" and b in modules for a, b in pairwise(args))


def forked_workers(sid: int) -> int:
    """PySpark Python workers in session ``sid``: the children of its worker daemons
    (``DAEMON_MODULES``), which Spark stops once they have had no task for a minute."""
    pids = session_members({sid})[sid]
    daemons, parents = set(), {}
    for pid in pids:
        try:
            cmdline = (PROC / str(pid) / "cmdline").read_bytes()
            parents[pid] = parse_stat_parent((PROC / str(pid) / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if runs_module(cmdline, DAEMON_MODULES):
            daemons.add(pid)
    return sum(1 for pid, parent in parents.items() if parent in daemons)


def parse_kib(text: str, field_name: str) -> int | None:
    """A ``Name:   1234 kB`` field of /proc/<pid>/status or smaps_rollup, in KiB."""
    for line in text.splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    return None


def session_members(sids: set[int]) -> dict[int, list[int]]:
    """The pids of each session in ``sids``."""
    members: dict[int, list[int]] = {s: [] for s in sids}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            sid = parse_stat_session((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # gone between the listing and the read
        if sid in members:
            members[sid].append(int(entry.name))
    return members


@dataclass
class SessionPeak:
    """The largest figures seen for one session."""

    rss_kib: int = 0
    pss_kib: int = 0
    max_process_rss_kib: int = 0
    processes: int = 0
    samples: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Figures in MB."""
        return {
            "peak_rss_mb": round(self.rss_kib / 1024, 1),
            "peak_pss_mb": round(self.pss_kib / 1024, 1),
            "peak_single_process_rss_mb": round(self.max_process_rss_kib / 1024, 1),
            "max_processes": self.processes,
            "samples": self.samples,
        }


@dataclass
class MemorySampler:
    """Samples the named sessions every ``interval_s`` on a thread until stopped."""

    sessions: dict[str, int]
    """Name -> session id (the pid of the process that leads it)."""
    interval_s: float = 0.5
    peaks: dict[str, SessionPeak] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        """Take one sample of every session."""
        members = session_members(set(self.sessions.values()))
        for name, sid in self.sessions.items():
            rss = pss = biggest = 0
            pids = members.get(sid, [])
            for pid in pids:
                try:
                    status = (PROC / str(pid) / "status").read_text()
                    rollup = (PROC / str(pid) / "smaps_rollup").read_text()
                except OSError:
                    continue
                one = parse_kib(status, "VmRSS") or 0
                rss += one
                pss += parse_kib(rollup, "Pss") or 0
                biggest = max(biggest, one)
            peak = self.peaks.setdefault(name, SessionPeak())
            peak.rss_kib = max(peak.rss_kib, rss)
            peak.pss_kib = max(peak.pss_kib, pss)
            peak.max_process_rss_kib = max(peak.max_process_rss_kib, biggest)
            peak.processes = max(peak.processes, len(pids))
            peak.samples += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def __enter__(self) -> MemorySampler:
        self._thread = threading.Thread(target=self._loop, name="bench-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.sample()

    def result(self) -> dict[str, dict[str, Any]]:
        """Peak figures per session, in MB."""
        return {name: peak.to_dict() for name, peak in self.peaks.items()}
