"""Process plumbing shared by every Floe process: structured logs, readiness files, signals."""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import FrameType

from floe.settings import FaultSettings, Settings

# Carried into every log line of the current task so a file can be followed across components.
log_context: contextvars.ContextVar[dict[str, object] | None] = contextvars.ContextVar(
    "log_context", default=None
)

LOG_FIELDS = (
    "pipe",
    "file",
    "batch",
    "step",
    "source",
    "status",
    "rows",
    "request_id",
    "blobs_total",
    "blobs_scanned",
)
"""The ``extra=`` keys a log line carries. A file's journey is the lines with its ``pipe`` and
``file`` (the path relative to the pipe's stage, as COPY_HISTORY's FILE_NAME shows it); ``step`` says
which step of it a line is (enqueued, picked, loaded, committed) and ``batch`` the micro-batch id,
from the step that picks the file on. A whitelist, not every extra: libraries pass their own
(uvicorn's ``color_message``), which would only add noise."""


# UTF-8 as it is, so a grep for a file name with accents finds it. One encoder for every line:
# json.dumps with options builds a new one per call.
_LINE_ENCODER = json.JSONEncoder(default=str, ensure_ascii=False)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, the process (``process``, as
    ``setup_logging`` names it), the message and the LOG_FIELDS that are known."""

    def __init__(self, process: str | None = None) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
        }
        if self.process is not None:
            entry["process"] = self.process
        entry["msg"] = record.getMessage()
        context = log_context.get()
        if context:
            entry.update(context)
        fields = record.__dict__
        for key in LOG_FIELDS:
            value = fields.get(key)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return _LINE_ENCODER.encode(entry)


class LinesHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler that also takes many records at once (``log_lines``): one lock, one write
    and one flush for all of them, where ``handle`` takes each for itself.

    The journey's lines come a call's or a micro-batch's files at a time; written one by one, the
    API's worker threads queued on the handler's lock behind each other's write.
    """

    def handle_many(self, records: list[logging.LogRecord]) -> None:
        """Format the records this handler's level and filters pass, and write them together."""
        kept = [r for r in records if r.levelno >= self.level and self.filter(r)]
        if not kept:
            return
        try:
            text = "".join(self.format(r) + self.terminator for r in kept)
            with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
                self.stream.write(text)
                self.flush()
        except Exception:  # noqa: BLE001 -- logging must not raise, as emit does not; Handler reports it
            self.handleError(kept[0])


def log_lines(logger: logging.Logger, lines: Iterable[tuple[int, str, Mapping[str, object]]]) -> None:
    """Log ``(level, message, extra)`` lines as ``logger.log(level, message, extra=extra)`` would,
    one record each, but handed to a LinesHandler all at once (any other handler, such as pytest's
    caplog, gets them one by one)."""
    records = [
        logger.makeRecord(logger.name, level, "(unknown file)", 0, message, (), None, extra=dict(extra))
        for level, message, extra in lines
        if logger.isEnabledFor(level)
    ]
    records = [r for r in records if logger.filter(r)]
    current: logging.Logger | None = logger
    while records and current is not None:  # Logger.callHandlers' walk
        for handler in current.handlers:
            if isinstance(handler, LinesHandler):
                handler.handle_many(records)
            else:
                for record in records:
                    if record.levelno >= handler.level:
                        handler.handle(record)
        current = current.parent if current.propagate else None


OWNER_ONLY_UMASK = 0o077
"""Files a Floe process creates are 0600 and directories 0700: state, logs, checkpoints, Redis's AOF."""


def private_files() -> None:
    """Make every file this process and its children create readable by its owner only.

    Called first thing by every entry point (`floe ...`, `python -m infra.stack`): Spark's JVM, the
    Python workers and redis-server inherit the umask, so their checkpoints, logs and AOF are
    covered without each writer having to care.
    """
    os.umask(OWNER_ONLY_UMASK)


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def private_dir(path: str | Path) -> Path:
    """Create ``path`` (and its parents) if needed and make it 0700; return it.

    The chmod also closes a state directory that an older Floe created world-readable.
    """
    directory = Path(path)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    return directory


def setup_logging(settings: Settings, component: str) -> logging.Logger:
    """Configure the root logger for a process; returns the component's logger."""
    handler = LinesHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(component))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level.upper())
    for noisy in ("botocore", "aiobotocore", "urllib3", "py4j", "asyncio", "s3transfer", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return logging.getLogger(f"floe.{component}")


class Readiness:
    """The ``<state_dir>/run/<name>.ready`` file that ``make up`` waits for."""

    def __init__(self, settings: Settings, name: str) -> None:
        self.path = Path(settings.state_dir) / "run" / f"{name}.ready"

    def set(self) -> None:
        """Announce readiness."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(str(os.getpid()))

    def clear(self) -> None:
        """Withdraw readiness (on exit)."""
        self.path.unlink(missing_ok=True)


class Shutdown:
    """First SIGTERM/SIGINT asks to drain; the second exits at once."""

    def __init__(self, on_first: Callable[[], None] | None = None) -> None:
        self.event = threading.Event()
        self._on_first = on_first
        self._count = 0

    def install(self) -> Shutdown:
        """Install the handlers (main thread only)."""
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._count += 1
        if self._count > 1:
            os._exit(128 + signum)
        self.event.set()
        if self._on_first is not None:
            self._on_first()

    @property
    def requested(self) -> bool:
        """Whether a drain was requested."""
        return self.event.is_set()


class Faults:
    """Crash points for the chaos tests: ``hit(name)`` SIGKILLs the process group at the chosen one.

    The whole group goes, as with ``kill -9`` of a process tree: for the Spark job that is the
    driver, its JVM and the Python workers, so nothing of the old run outlives the crash.
    """

    def __init__(self, settings: FaultSettings) -> None:
        self.settings = settings
        self._hits: dict[str, int] = {}
        self._lock = threading.Lock()
        self._armed = settings
        self._stamp: tuple[int, int, int] | None = None

    def current(self) -> FaultSettings:
        """The fault settings in force: the arm file's over the process's own, while it exists."""
        path = self.settings.arm_file
        if not path:
            return self.settings
        try:
            st = os.stat(path)
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if stamp != self._stamp:
                self._stamp = stamp
                self._hits.clear()
                self._armed = self.settings if stamp is None else self._read(path)
            return self._armed

    def _read(self, path: str) -> FaultSettings:
        try:
            override = json.loads(Path(path).read_text())
            return FaultSettings.model_validate({**self.settings.model_dump(), **override})
        except (OSError, ValueError) as exc:  # a half-written or wrong file arms nothing
            logging.getLogger("floe.faults").warning("fault arm file %s ignored: %s", path, exc)
            return self.settings

    def hit(self, point: str) -> None:
        """Mark that ``point`` was reached; crash if it is the configured one."""
        armed = self.current()
        if point != armed.crash_at:
            return
        with self._lock:
            self._hits[point] = self._hits.get(point, 0) + 1
            if self._hits[point] != armed.crash_on_hit:
                return
        logging.getLogger("floe.faults").warning("fault injection: SIGKILL at %s", point)
        for handler in logging.getLogger().handlers:
            handler.flush()
        _crash(point, armed.record_file)


def _crash(point: str, record_file: str) -> None:
    """SIGKILL every process group of this process's Floe tree, this process last; record it first.

    The record's lock is held until this process is dead (the kernel closes its descriptor), so a
    second process of the tree that reaches its own crash a moment later waits on the lock and dies
    there: a tree crashes, and is recorded, once. That second process may sit in another process group
    than the Floe leader's: pyspark's daemon makes a group of its own (``os.setpgid(0, 0)``) for
    itself and the Python workers it forks, so killing the leader's group alone left them running,
    and one of them, finding its leader gone, recorded a second crash under a tree of its own.
    """
    leader = _floe_group()
    fd = os.open(record_file, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600) if record_file else -1
    if fd >= 0:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when this process dies, never before
        _record_crash_locked(fd, record_file, point, os.getpid() if leader is None else leader)
    own = os.getpgrp()
    groups = {leader} | _tree_groups(leader) if leader is not None else set()
    for group in sorted(groups - {own}):
        # Another process of the tree may have killed a group already.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    if own in groups:
        os.killpg(own, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _record_crash_locked(fd: int, path: str, point: str, tree: int) -> None:
    """Append ``point pid tree`` unless the tree's crash at ``point`` is recorded (lock held)."""
    lines = [line.split() for line in Path(path).read_text().splitlines()]
    if not any(line[:1] == [point] and line[2:3] == [str(tree)] for line in lines):
        os.write(fd, f"{point} {os.getpid()} {tree}\n".encode())
        os.fsync(fd)


def _tree_groups(leader: int) -> set[int]:
    """The process groups of every process descended from ``leader`` (read from /proc)."""
    parent: dict[int, int] = {}
    group: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := proc_stat(int(entry.name))) is not None:  # None: gone
            parent[int(entry.name)], group[int(entry.name)] = int(fields[1]), int(fields[2])
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [leader]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            found.add(group[child])
            todo.append(child)
    return found


def _floe_group() -> int | None:
    """The process group a Floe process leads, looking up from this process through its parents.

    A Spark Python worker sits in pyspark's daemon's own group, below the JVM, below the
    `floe pipeline` driver that leads the job's group. Only such a group is ours to kill, never the
    shell or test runner that started a process outside its own session.
    """
    pid = os.getpid()
    for _ in range(8):
        try:
            group = os.getpgid(pid)
            argv = Path(f"/proc/{group}/cmdline").read_bytes().split(b"\0")[:2]
        except OSError:
            return None
        if any(os.path.basename(arg) == b"floe" for arg in argv):  # `floe <command>`
            return group
        if (stat := proc_stat(pid)) is None:
            return None
        pid = int(stat[1])  # the parent pid
        if pid <= 1:
            return None
    return None


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name sits in parentheses and may itself contain spaces or parentheses.
    return text.rsplit(")", 1)[1].split()
