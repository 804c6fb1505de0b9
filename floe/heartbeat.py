"""Heartbeats in Redis: how the API's ``/readyz`` knows the Spark job is alive.

The job's driver writes ``<holder> -> now (ms)`` into the hash ``Keys.heartbeat("pipeline")``
every ``pipeline.heartbeat_s`` while its streaming query is active, and deletes its field when it
stops. A reader counts the job alive while the newest field is younger than ``STALE_BEATS``
intervals. Redis rather than the job's ready file: the API may run on another host or container
than the job (docker-compose gives each its own state directory), and a job whose query died or
whose driver hangs keeps its ready file but stops beating.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Mapping

from floe.keys import REDIS_ERRORS, Keys, RedisClient

log = logging.getLogger("floe.heartbeat")

PIPELINE = "pipeline"
"""The component name of the Spark job's heartbeats."""
STALE_BEATS = 3
"""Intervals without a beat after which a reader counts the job gone."""
FORGET_AFTER_MS = 24 * 3600 * 1000
"""Fields older than this (left by jobs killed before they could delete theirs) are deleted when a
job starts, so the hash stays as small as the number of jobs."""


def newest_beat_ms(fields: Mapping[bytes, bytes]) -> int | None:
    """The newest beat of a heartbeat hash (HGETALL's answer); None when there is none."""
    beats = [int(v) for v in fields.values() if v.isdigit()]
    return max(beats) if beats else None


class Heartbeat:
    """One process's heartbeat: a daemon thread that beats every ``interval_s`` while ``alive()``.

    ``on_error`` is called with an operation name when Redis fails (the metrics count it); a
    failed beat is retried at the next interval and never stops the thread.
    """

    def __init__(
        self,
        client: RedisClient,
        keys: Keys,
        component: str,
        interval_s: float,
        clock: Callable[[], int],
        on_error: Callable[[str], None] = lambda _: None,
    ) -> None:
        self._r = client
        self.key = keys.heartbeat(component)
        self.interval_s = interval_s
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._clock = clock
        self._on_error = on_error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> bool:
        """Write one beat now; False (counted) when Redis failed."""
        try:
            with self._r.pipeline(transaction=False) as pipe:
                pipe.hset(self.key, self.holder, str(self._clock()))
                pipe.execute()
        except REDIS_ERRORS as exc:
            self._on_error("heartbeat")
            log.warning("heartbeat not written: %s", type(exc).__name__)
            return False
        return True

    def forget_stale(self) -> None:
        """Delete other holders' fields older than ``FORGET_AFTER_MS``; best effort."""
        try:
            old = [
                k.decode()
                for k, v in self._r.hgetall(self.key).items()
                if v.isdigit() and self._clock() - int(v) > FORGET_AFTER_MS
            ]
            if old:
                self._delete(*old)
        except REDIS_ERRORS:
            self._on_error("heartbeat")

    def start(self, alive: Callable[[], bool]) -> None:
        """Beat every interval, from a daemon thread, while ``alive()`` says so."""
        self.forget_stale()

        def run() -> None:
            while not self._stop.wait(self.interval_s):
                try:
                    live = alive()
                except Exception as exc:  # noqa: BLE001 -- a question to a stopping JVM: not alive
                    log.debug("liveness check failed: %s", exc)
                    live = False
                if live:
                    self.beat()

        self._thread = threading.Thread(target=run, name=f"floe-heartbeat-{self.key}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and delete this holder's field, so readers see the process gone at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval_s + 5)
        try:
            self._delete(self.holder)
        except REDIS_ERRORS:
            self._on_error("heartbeat")

    def _delete(self, *fields: str) -> None:
        with self._r.pipeline(transaction=False) as pipe:
            pipe.hdel(self.key, *fields)
            pipe.execute()
