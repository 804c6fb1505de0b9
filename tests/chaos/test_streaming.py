"""Snowpipe Streaming under crashes: a Kafka-style producer per channel, and kill -9 of the API, of
the Spark job and of Redis (restarted from its append-only file) while rows flow.

Each producer does what a Kafka connector does: open the channel, read the last committed offset
token, resend from the offset after it, and on any failure reopen and start over from the committed
token. Every (channel, offset) must end up in the table exactly once with the payload its producer
sent, by SQL and in the decrypted blobs (tests/chaos/oracle.py), every channel's committed token must
be its last offset, and no accepted append and no orphan blob may be left.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from floe.settings import Settings
from floe.streaming import StreamingError, StreamingIngestClient
from infra.stack import ensure_services, running_pid
from tests.chaos.oracle import Sent, assert_channels_exactly_once
from tests.conftest import Stack, unique, wait_until
from tests.e2e.test_streaming import client_properties

pytestmark = pytest.mark.chaos

ROWS_PER_CHANNEL = 100_000
CHANNELS = 3
BATCH = 1_000
"""Rows per append_rows call; each carries the offset of its last row as its end token."""
PACE_S = 0.5
"""A producer's pause after each call, as a source that yields rows at 2,000/s would make it: the
load lasts about 50 s, long enough for the three kills to fall in the middle of it."""


@dataclass
class Gate:
    """How far the producers may send. The test raises it only after each kill, so every producer is
    still mid-stream at every kill, however far the commits lag behind the sends."""

    limit: int
    cond: threading.Condition = field(default_factory=threading.Condition)

    def raise_to(self, fraction: float) -> None:
        with self.cond:
            self.limit = int(fraction * ROWS_PER_CHANNEL)
            self.cond.notify_all()

    def poke(self) -> None:
        """Wake the producers waiting here, to see a restart or the stop."""
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, offset: int, interrupted: Callable[[], bool]) -> None:
        """Until ``offset`` is below the limit, or ``interrupted()``."""
        with self.cond:
            self.cond.wait_for(lambda: offset < self.limit or interrupted())


@dataclass
class Producer:
    """One channel's producer thread: its progress and what it ran into."""

    table: str
    channel: str
    properties: dict[str, Any]
    stop: threading.Event
    gate: Gate
    restart: threading.Event = field(default_factory=threading.Event)
    """Set by the test after each kill: the producer restarts as a crashed connector would."""
    resumed_from: list[int] = field(default_factory=list)
    reopens: int = 0
    errors: list[str] = field(default_factory=list)
    done: bool = False

    def run(self) -> None:
        while not self.stop.is_set():
            client = StreamingIngestClient(
                f"producer-{self.channel}",
                "FLOE",
                "PUBLIC",
                f"{self.table}-STREAMING",
                properties=self.properties,
            )
            try:
                if self._produce(client):
                    client.close()
                    self.done = True
                    return
            except StreamingError as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            # What a connector does on any failure: drop what it buffered, reopen, resend from the
            # committed token. Appends it sent that are not committed yet are fenced by the reopen.
            client.close(wait_for_flush=False)
            self.reopens += 1

    def _produce(self, client: StreamingIngestClient) -> bool:
        """Send the rest from the committed token; False when told to restart first."""
        channel, status = client.open_channel(self.channel)
        token = status.latest_committed_offset_token
        offset = int(token) + 1 if token is not None else 0
        self.resumed_from.append(offset)
        while offset < ROWS_PER_CHANNEL and not self.stop.is_set():
            self.gate.wait_for(offset, lambda: self.restart.is_set() or self.stop.is_set())
            if self.restart.is_set():
                self.restart.clear()
                return False
            end = min(offset + BATCH, ROWS_PER_CHANNEL)
            rows = [
                {"ch": ch, "off": off, "payload": payload}
                for ch, off, payload in sent_rows(self.channel, offset, end)
            ]
            channel.append_rows(rows, start_offset_token=str(offset), end_offset_token=str(end - 1))
            offset = end
            self.stop.wait(PACE_S)
        last = str(ROWS_PER_CHANNEL - 1)
        channel.wait_for_commit(lambda t: t == last, timeout_seconds=300)
        return True


def sent_rows(channel: str, start: int = 0, end: int = ROWS_PER_CHANNEL) -> list[Sent]:
    """What a producer sends for offsets ``start`` to ``end - 1`` of its channel."""
    return [(channel, i, f"row {i} of {channel}") for i in range(start, end)]


def restart(producers: list[Producer], gate: Gate, fraction: float) -> None:
    """Make every producer reopen its channel and resend from the committed token, up to ``fraction``."""
    for p in producers:
        p.restart.set()
    gate.poke()
    gate.raise_to(fraction)


def committed(stack: Stack, table: str) -> dict[str, int]:
    """Each channel's committed offset, from SHOW CHANNELS (-1 before its first commit)."""
    rows = stack.sql(f"SHOW CHANNELS IN TABLE {table}")
    return {r["name"]: int(r["offset_token"]) if r["offset_token"] is not None else -1 for r in rows}


def under_way(stack: Stack, table: str, names: list[str], fraction: float) -> bool:
    """Every channel has committed past ``fraction`` of its rows, and one has not finished."""
    done = committed(stack, table)
    marks = [done.get(n, -1) for n in names]
    return all(m >= fraction * ROWS_PER_CHANNEL for m in marks) and min(marks) < ROWS_PER_CHANNEL - 1


def test_producers_resume_from_committed_tokens_through_three_kills(stack: Stack, services: Settings) -> None:
    """kill -9 of the API, then of the Spark job, then of Redis, while three channels stream.

    Safeguards: an append answers 200 only once its rows are in Redis (AOF, appendfsync always);
    a retried append with the same requestId and token is answered, not stored again; the offset
    token commits in the same script as the rows (fencing and exactly once at commit); a killed
    Spark job replays its last micro-batch from the checkpoint, whose commit is idempotent.
    """
    table = unique("t_")
    stack.sql(f"CREATE TABLE {table} (ch VARCHAR, off INT NOT NULL, payload VARCHAR)")
    names = [f"partition-{i}" for i in range(CHANNELS)]
    mark = len(stack.log_text("pipeline"))
    stop = threading.Event()
    gate = Gate(0)
    gate.raise_to(0.3)
    producers = [Producer(table, n, client_properties(stack), stop, gate) for n in names]
    threads = [threading.Thread(target=p.run, name=f"producer-{p.channel}", daemon=True) for p in producers]
    for t in threads:
        t.start()
    try:
        # 1. The API, while the first fifth is committed and the rest still to come.
        wait_until(lambda: under_way(stack, table, names, 0.05), timeout=180, what="a twentieth committed")
        before = committed(stack, table)
        assert stack.stop("api", signal.SIGKILL) == -signal.SIGKILL
        stack.start("api")
        restart(producers, gate, 0.55)
        assert min(before.values()) < ROWS_PER_CHANNEL - 1, "the load must be under way at the API kill"

        # 2. The Spark job, mid-load.
        wait_until(lambda: under_way(stack, table, names, 0.3), timeout=300, what="three tenths committed")
        before = committed(stack, table)
        assert stack.stop("pipeline", signal.SIGKILL) == -signal.SIGKILL
        stack.start("pipeline")
        restart(producers, gate, 0.8)
        assert min(before.values()) < ROWS_PER_CHANNEL - 1, "the load must be under way at the job kill"

        # 3. Redis, restarted from its append-only file.
        wait_until(lambda: under_way(stack, table, names, 0.5), timeout=300, what="half committed")
        before = committed(stack, table)
        pid = running_pid("redis", services)
        assert pid is not None, "the tests' Redis must be one that infra.stack started (make test does)"
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: running_pid("redis", services) is None, timeout=30, what="redis to die")
        ensure_services(services)
        restart(producers, gate, 1.0)
        assert min(before.values()) < ROWS_PER_CHANNEL - 1, "the load must be under way at the Redis kill"

        for t in threads:
            t.join(timeout=600)
        assert all(p.done for p in producers), [(p.channel, p.errors[-3:]) for p in producers]
    finally:
        stop.set()
        gate.poke()
    # The oracle: by SQL and in the decrypted blobs, every (channel, offset) once with the payload
    # its producer sent; every token its channel's last offset; no append left waiting; no orphan.
    assert_channels_exactly_once(stack, table, Counter(row for n in names for row in sent_rows(n)))
    # Each producer restarted after each kill and resumed where the table said, not from zero.
    for p in producers:
        assert p.reopens >= 3 and len(p.resumed_from) >= 4 and max(p.resumed_from[1:]) > 0, p
    sequencers = {r["name"]: r["client_sequencer"] for r in stack.sql(f"SHOW CHANNELS IN TABLE {table}")}
    assert all(seq >= 4 for seq in sequencers.values()), sequencers
    # The reopens caught appends in flight, and their commit dropped them: fencing fired.
    assert "their channels were reopened or dropped" in stack.log_text("pipeline")[mark:]
    print(
        "streaming kills: resumed from "
        + "; ".join(f"{p.channel}: {p.resumed_from}" for p in producers)
        + "; errors: "
        + "; ".join(e for p in producers for e in p.errors[:1])
    )
