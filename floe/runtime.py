"""Process plumbing shared by every Floe process: structured logs, readiness files, signals."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from floe.settings import Settings

# Carried into every log line of the current task so a file can be followed across components.
log_context: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "log_context", default=None
)


class JsonFormatter(logging.Formatter):
    """One JSON object per line with pipe, file and request_id when known."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(log_context.get() or {})
        for key in ("pipe", "file", "request_id", "batch"):
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(settings: Settings, component: str) -> logging.Logger:
    """Configure the root logger for a process; returns the component's logger."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
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


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll until the predicate holds or the timeout passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
