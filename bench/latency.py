"""Latency of single small files: put at a steady rate, time until their rows answer a SELECT and
until COPY_HISTORY says Loaded.

Two pollers, one asking a SELECT grouped by file name and one asking COPY_HISTORY, each check
every outstanding file at once, ~50 ms after their last answer, and stop asking while nothing is
outstanding: the polling costs the API the same few queries a second however many files are in
flight. A file counts as visible at the arrival of the first answer that shows all its rows, so
each figure is late by at most one poll round (the query time is reported alongside).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.dataset import csv_text
from bench.harness import BenchError, FloeStack, Resources, SqlClient, wait_for
from bench.throughput import create_pipe, states, table_name
from floe.catalog import Pipe

POLL_S = 0.05


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile (p in 0..100): a value that was measured, never interpolated."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    """p50, p99, mean and max of a sample, in seconds."""
    return {
        "p50_s": percentile(values, 50),
        "p99_s": percentile(values, 99),
        "mean_s": sum(values) / len(values),
        "max_s": max(values),
    }


@dataclass
class _File:
    path: str
    put_at: float = 0.0
    put_wall: float = 0.0
    put_done: float = 0.0
    visible_at: float | None = None
    loaded_at: float | None = None


class _Poller:
    """Watches the table, or COPY_HISTORY, for every outstanding file (one thread each)."""

    def __init__(self, stack: FloeStack, table: str, rows_per_file: int) -> None:
        self.stack = stack
        self.table = table
        self.rows = rows_per_file
        self.files: dict[str, _File] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.durations: dict[str, list[float]] = {"rows": [], "history": []}

    def add(self, f: _File) -> None:
        with self.lock:
            self.files[f.path] = f

    def _outstanding(self, kind: str) -> bool:
        with self.lock:
            return any(
                f.put_done and (f.visible_at if kind == "rows" else f.loaded_at) is None
                for f in self.files.values()
            )

    def take_durations(self) -> dict[str, list[float]]:
        """The query times since the last call."""
        with self.lock:
            taken = self.durations
            self.durations = {"rows": [], "history": []}
        return taken

    def _visible(self, client: SqlClient) -> set[str]:
        rows = client.sql(f"SELECT src, COUNT(*) AS n FROM {self.table} GROUP BY src")
        return {r["SRC"] for r in rows if r["N"] >= self.rows}

    def _loaded(self, client: SqlClient) -> set[str]:
        hist = client.sql(
            "SELECT FILE_NAME FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => '"
            + self.table
            + "', START_TIME => DATEADD(hours, -1, CURRENT_TIMESTAMP()))) WHERE STATUS = 'Loaded'"
        )
        return {r["FILE_NAME"] for r in hist}

    def _round(self, kind: str, client: SqlClient) -> None:
        # A file whose put had not returned when the query was sent may be seen without its put
        # time; only files put before the query count, so the next round picks the others up.
        asked = time.perf_counter()
        seen = self._visible(client) if kind == "rows" else self._loaded(client)
        answered = time.perf_counter()
        with self.lock:
            for f in self.files.values():
                if not f.put_done or f.put_at > asked or f.path not in seen:
                    continue
                if kind == "rows" and f.visible_at is None:
                    f.visible_at = answered
                elif kind == "history" and f.loaded_at is None:
                    f.loaded_at = answered
            self.durations[kind].append(answered - asked)

    def run(self, kind: str) -> None:
        """Poll one kind until stopped."""
        try:
            with SqlClient(self.stack.settings) as client:
                while not self.stop.is_set():
                    if self._outstanding(kind):
                        self._round(kind, client)
                    self.stop.wait(POLL_S)
        except BaseException as exc:  # noqa: BLE001 -- handed to the measuring thread, which re-raises it
            self.error = exc


def _put(resources: Resources, bucket: str, f: _File, body: bytes) -> None:
    f.put_wall = time.time()
    f.put_at = time.perf_counter()
    resources.s3.put_object(Bucket=bucket, Key=f"in/{f.path}", Body=body)
    f.put_done = time.perf_counter()


def run_latency(
    stack: FloeStack,
    resources: Resources,
    rates: Sequence[tuple[float, int]],
    *,
    rows_per_file: int = 5,
    drain_timeout_s: float = 120.0,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """For each (files per second, samples): put files at that rate and time them; figures per rate."""
    bucket = resources.bucket("bench-lat-")
    pipe: Pipe = create_pipe(
        stack, bucket, "lat", extra_columns=", src VARCHAR", extra_select=", METADATA$FILENAME"
    )
    table = table_name(pipe)
    poller = _Poller(stack, table, rows_per_file)
    threads = [
        threading.Thread(target=poller.run, args=(kind,), name=f"bench-latency-{kind}", daemon=True)
        for kind in ("rows", "history")
    ]
    for thread in threads:
        thread.start()
    results: dict[str, Any] = {}
    counter = 0
    try:
        with ThreadPoolExecutor(4, thread_name_prefix="bench-lat-put") as pool:

            def wave(label: str, rate: float, n: int) -> list[_File]:
                nonlocal counter
                files: list[_File] = []
                puts = []
                start = time.perf_counter() + 0.05
                for i in range(n):
                    f = _File(f"{label}/f{i:05d}.csv")
                    body = csv_text(counter, rows_per_file).encode()
                    counter += 1
                    poller.add(f)
                    files.append(f)
                    delay = start + i / rate - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    puts.append(pool.submit(_put, resources, bucket, f, body))
                    if poller.error is not None:
                        raise BenchError(f"latency poller failed: {poller.error}")
                for put in puts:
                    put.result()  # a failed put ends the part with its error

                def all_seen() -> bool:
                    if poller.error is not None:
                        raise BenchError(f"latency poller failed: {poller.error}")
                    done = sum(1 for f in files if f.visible_at is not None and f.loaded_at is not None)
                    if on_progress is not None:
                        on_progress(label, done, n)
                    return done == n

                wait_for(all_seen, drain_timeout_s, f"{n} files at {label} to load", interval_s=0.1)
                return files

            for rate, n in rates:
                label = f"{rate:g}_per_s"
                files = wave(label, rate, n)
                visible = [f.visible_at - f.put_at for f in files if f.visible_at is not None]
                loaded = [f.loaded_at - f.put_at for f in files if f.loaded_at is not None]
                # Where the time went, from the clocks of Floe's own records (same host, wall clock).
                by_path = {s.path: s for s in states(stack, pipe)}
                received = [
                    by_path[f.path].received_ms / 1000 - f.put_wall for f in files if f.path in by_path
                ]
                committed = [
                    (by_path[f.path].loaded_ms or 0) / 1000 - f.put_wall
                    for f in files
                    if f.path in by_path and by_path[f.path].loaded_ms
                ]
                polls = poller.take_durations()
                results[label] = {
                    "rate_per_s": rate,
                    "samples": n,
                    "rows_per_file": rows_per_file,
                    "put_to_queryable": summary(visible),
                    "put_to_loaded": summary(loaded),
                    "put_s": summary([f.put_done - f.put_at for f in files]),
                    "put_to_notified": summary(received) if received else None,
                    "put_to_committed": summary(committed) if committed else None,
                    "poll_queries": {k: len(v) for k, v in polls.items()},
                    # Each file's figure is late by up to one of these (the answer that showed it).
                    "poll_query_p50_s": {k: percentile(v, 50) for k, v in polls.items() if v},
                }
    finally:
        poller.stop.set()
        for thread in threads:
            thread.join(10)
    return results
