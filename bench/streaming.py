"""Snowpipe Streaming (issue 13): rows/s into one table with 1 and with 8 channels, append→committed
latency at a steady rate, and the pyarrow limit on the same rows.

Every measurement loads a fresh table of six mixed-type columns (``STREAM_COLUMNS_SQL``) through its
default pipe ``<TABLE>-STREAMING`` with Floe's own client (``floe.streaming``), at the client's
defaults of ``max_client_lag`` = 1 s and zstd. The rows are generated from a seed before anything is
timed, and the limit reads exactly the NDJSON bytes the client sends for them.

* **throughput**: the rows are cut into one contiguous slice per channel; one thread appends them,
  ``APPEND_ROWS`` at a time, round robin over the channels, each append carrying its slice's offset
  as end offset token. The clock runs from the first ``append_rows`` until a bulk status (asked every
  ``POLL_S``) shows every channel's committed token at its last offset; ``SELECT COUNT(*)`` must then
  return every row. Nothing forces a flush: the last rows wait up to ``max_client_lag`` as a
  running loader's would.
* **latency**: one channel, appends of a few rows at a steady rate, each with its own end offset
  token (a counter). A poller asks the committed token every ``POLL_S``; an append's latency is from
  its ``append_rows`` call to the arrival of the first answer that shows its token (or a later one)
  committed, so each figure is late by at most one poll (interval plus query time, both reported).
* **limit**: pyarrow in this process on the same rows as NDJSON bytes in memory: ``read_json``, a
  cast to the table's Arrow schema (``floe.types.arrow_schema`` of the table as Floe's DDL parses
  it) and one encrypted Parquet blob through ``floe.blobs``, after one untimed run.

The CPU each Floe process (its whole session), Redis, this process (the client) and the machine used
during a throughput run is read from /proc, to show where the time went.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import statistics
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
from pyarrow import fs as pafs

from bench.harness import BenchError, FloeStack, SqlClient, remove_tree, unique, wait_for
from bench.latency import percentile, summary
from bench.memory import PROC, session_members, stat_fields
from floe.blobs import crypto_from_settings, write_blob
from floe.catalog.ddl import CreateTable, parse
from floe.catalog.models import Table
from floe.streaming import StreamingIngestClient
from floe.streaming.validation import row_line
from floe.tls import api_base_url
from floe.types import arrow_schema

STREAM_COLUMNS_SQL = (
    "(ID INT, KIND VARCHAR, AMOUNT NUMBER(10,2), SCORE FLOAT, FLAG BOOLEAN, TS TIMESTAMP_NTZ)"
)
"""The streamed table, as CREATE TABLE takes it (INT is NUMBER(38,0), so a decimal128 in blobs)."""
JSON_READ_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("kind", pa.string()),
        ("amount", pa.string()),
        ("score", pa.float64()),
        ("flag", pa.bool_()),
        ("ts", pa.string()),
    ]
)
"""The rows' JSON as the limit reads it: the JSON types, before the cast to the table's types."""
CHANNEL_COUNTS: tuple[int, ...] = (1, 8)
APPEND_ROWS = 10_000
"""Rows per append_rows call of the throughput runs (the client buffers them until it sends)."""
MAX_CLIENT_LAG_MS = 1_000
COMPRESSION = "zstd"
POLL_S = 0.05
PROGRESS_EVERY_S = 0.5
WARMUP_ROWS = 10
_KINDS = ("click", "view", "purchase", "refund", "signup", "login", "logout", "search")

OnProgress = Callable[[str, int, int], None]


# ------------------------------------------------------------------------------------------- rows


def stream_rows(start: int, n: int, seed: int = 7) -> list[dict[str, Any]]:
    """Rows ``start`` .. ``start + n - 1``: an integer, a string of varying length, a decimal (as its
    exact text, as the client sends a Decimal), a float, a boolean and a timestamp (ISO text).
    The same seed and range give the same rows."""
    rnd = random.Random(seed * 1_000_003 + start)
    out: list[dict[str, Any]] = []
    for i in range(start, start + n):
        cents = rnd.randrange(10**9)
        sec = i * 37 % 86_400
        out.append(
            {
                "id": i,
                "kind": _KINDS[i % len(_KINDS)] + "x" * (i % 5),
                "amount": f"{cents // 100}.{cents % 100:02d}",
                "score": rnd.random() * 1000,
                "flag": rnd.random() < 0.5,
                "ts": f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}T{sec // 3600:02d}:{sec // 60 % 60:02d}:"
                f"{sec % 60:02d}.{i % 1000:03d}",
            }
        )
    return out


def ndjson(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """The rows as the client sends them: one ``row_line`` per row."""
    return b"".join([row_line(r) for r in rows])


def stream_table(name: str = "FLOE.PUBLIC.BENCH_STREAM") -> Table:
    """The streamed table as Floe's DDL makes it (so its Arrow schema is the blobs' schema)."""
    stmt = parse(f"CREATE TABLE BENCH_STREAM {STREAM_COLUMNS_SQL}")
    assert isinstance(stmt, CreateTable)
    return Table(name=name, columns=stmt.columns)


def to_table_schema(raw: pa.Table, schema: pa.Schema) -> pa.Table:
    """The JSON columns (lower-case keys) cast to the table's Arrow schema (upper-case names)."""
    return pa.table([pc.cast(raw[f.name.lower()], f.type) for f in schema], schema=schema)


def balanced_channels(prefix: str, count: int, partitions: int) -> list[str]:
    """``count`` channel names spread evenly over the Spark job's partitions.

    The job puts all of a channel's appends into partition ``crc32(name) % n`` (pipeline/job.py
    ``_part``), so eight names picked blindly could all land on one core; the benchmark measures the
    table's capacity, not the luck of its names.
    """
    partitions = max(1, partitions)
    room = [count // partitions + (1 if p < count % partitions else 0) for p in range(partitions)]
    names: list[str] = []
    i = 0
    while len(names) < count:
        name = f"{prefix}{i}"
        part = zlib.crc32(name.encode()) % partitions
        if room[part] > 0:
            names.append(name)
            room[part] -= 1
        i += 1
    return names


def slices(total: int, parts: int) -> list[range]:
    """``range(total)`` cut into ``parts`` contiguous pieces whose sizes differ by at most one."""
    bounds = [total * k // parts for k in range(parts + 1)]
    return [range(bounds[k], bounds[k + 1]) for k in range(parts)]


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of repeated measurements."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# -------------------------------------------------------------------------------------------- CPU


def parse_stat_cpu_ticks(stat: str) -> int:
    """utime + stime (clock ticks) in the text of /proc/<pid>/stat."""
    # After the parenthesized command: state (field 3) ... utime (14), stime (15).
    fields = stat_fields(stat)
    return int(fields[11]) + int(fields[12])


def parse_machine_ticks(proc_stat: str) -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs from the first line of /proc/stat."""
    values = [int(v) for v in proc_stat.splitlines()[0].split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice, already in user and nice]
    total = sum(values[:8])
    return total - values[3] - values[4], total


def _pid_ticks(pid: int) -> int:
    try:
        return parse_stat_cpu_ticks((PROC / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return 0  # gone meanwhile


class CpuMeter:
    """CPU seconds of each Floe process's session, of Redis, of this process and of the machine
    between ``start`` and ``stop``.

    A process that exits in between takes its CPU with it; the Floe processes and PySpark's
    daemon and workers live through a run. Redis is shared with anything else that uses it.
    """

    def __init__(self, sessions: Mapping[str, int], redis_pid: int | None) -> None:
        self.sessions = dict(sessions)
        self.redis_pid = redis_pid
        self.tick = float(os.sysconf("SC_CLK_TCK"))
        self._start: dict[str, float] = {}

    def _sample(self) -> dict[str, float]:
        members = session_members(set(self.sessions.values()))
        out = {
            name: sum(_pid_ticks(pid) for pid in members.get(sid, [])) / self.tick
            for name, sid in self.sessions.items()
        }
        if self.redis_pid is not None:
            out["redis"] = _pid_ticks(self.redis_pid) / self.tick
        out["client"] = time.process_time()
        busy, total = parse_machine_ticks((PROC / "stat").read_text())
        out["_busy"], out["_total"] = busy / self.tick, total / self.tick
        out["_wall"] = time.perf_counter()
        return out

    def start(self) -> None:
        """Take the first sample."""
        self._start = self._sample()

    def stop(self) -> dict[str, Any]:
        """CPU seconds per process since ``start``, and the machine's busy cores meanwhile."""
        end = self._sample()
        used = {k: round(end[k] - self._start[k], 2) for k in end if not k.startswith("_")}
        wall = end["_wall"] - self._start["_wall"]
        # /proc/stat counts every CPU: total ticks / wall seconds is the number of cores.
        cores = (end["_total"] - self._start["_total"]) / wall if wall > 0 else 0.0
        busy = (end["_busy"] - self._start["_busy"]) / wall if wall > 0 else 0.0
        return {"cpu_s": used, "machine_busy_cores": round(busy, 2), "machine_cores": round(cores, 1)}


def redis_pid(stack: FloeStack) -> int | None:
    """The Redis server's pid, when it runs on this host (its INFO says)."""
    with contextlib.suppress(Exception):
        pid = int(stack.settings.redis.client().info("server")["process_id"])
        if (PROC / str(pid)).exists():
            return pid
    return None


# ------------------------------------------------------------------------------------------ limit


def run_stream_limit(
    data: bytes, rows: int, out_dir: Path, key_id: str, key: bytes, repeats: int
) -> dict[str, Any]:
    """pyarrow on the NDJSON in memory: read, cast, one encrypted blob; one untimed run first, then
    ``repeats`` timed ones. pyarrow's JSON reader uses its thread pool (both cores here)."""
    remove_tree(out_dir)
    out_dir.mkdir(parents=True)
    schema = arrow_schema(stream_table())
    crypto = crypto_from_settings(key_id, key)
    fs = pafs.LocalFileSystem()
    options = pajson.ParseOptions(explicit_schema=JSON_READ_SCHEMA)

    def once(n: int) -> tuple[float, int, int]:
        name = f"stream-limit-{n}.parquet"
        started = time.perf_counter()
        raw = pajson.read_json(io.BytesIO(data), parse_options=options)
        table = to_table_schema(raw, schema)
        meta = write_blob(table, fs, str(out_dir / name), crypto, name=name, files=["ndjson"])
        return time.perf_counter() - started, meta.rows, meta.bytes

    try:
        once(0)  # warm-up: pyarrow's thread pool, the codecs, the page cache of the output dir
        runs = [once(n) for n in range(1, repeats + 1)]
    finally:
        remove_tree(out_dir)
    if any(r[1] != rows for r in runs):
        raise BenchError(f"stream limit wrote {[r[1] for r in runs]} rows, expected {rows}")
    rates = [rows / r[0] for r in runs]
    return {
        "rows": rows,
        "ndjson_mb": round(len(data) / 1e6, 1),
        "rows_per_s": statistics.median(rates),
        "rows_per_s_spread": spread(rates),
        "seconds": [round(r[0], 3) for r in runs],
        "blob_bytes": runs[-1][2],
        "processes": 1,
    }


# ---------------------------------------------------------------------------------- Floe, client


def client_properties(stack: FloeStack) -> dict[str, Any]:
    """The streaming client's properties for this run's API: its URL, the admin user and key."""
    s = stack.settings
    return {
        "url": api_base_url(s),
        "account": s.account,
        "user": s.auth.admin_user,
        "private_key_file": s.auth.admin_key_file,
        "max_client_lag": MAX_CLIENT_LAG_MS,
        "compression": COMPRESSION,
    }


def new_table(stack: FloeStack, tag: str) -> str:
    """A fresh streamed table; its unqualified upper-case name."""
    name = unique(f"bench_st_{tag}_").upper()
    stack.sql(f"CREATE TABLE {name} {STREAM_COLUMNS_SQL}")
    return name


def open_client(stack: FloeStack, table: str, name: str) -> StreamingIngestClient:
    """A client on the table's default pipe."""
    s = stack.settings
    return StreamingIngestClient(
        name,
        s.database,
        s.schema_name,
        f"{table}-STREAMING",
        properties=client_properties(stack),
        settings=s,
    )


def _check_status(statuses: Mapping[str, Any], names: Sequence[str]) -> None:
    for name in names:
        st = statuses.get(name)
        if st is not None and st.channel_status_code != "SUCCESS":
            raise BenchError(f"channel {name} is {st.channel_status_code}: {st.last_error_message}")
        if st is not None and st.rows_error_count:
            raise BenchError(
                f"channel {name} counted {st.rows_error_count} bad rows: {st.last_error_message}"
            )


def warm_up(stack: FloeStack, partitions: int, timeout_s: float = 300.0) -> float:
    """A few rows through a throwaway table, one channel per Spark partition, so the streaming
    path's first micro-batches (each partition's first appends) are not timed; the seconds taken."""
    table = new_table(stack, "warm")
    started = time.perf_counter()
    with open_client(stack, table, "bench-warm") as client:
        names = balanced_channels("warm-", max(1, partitions), partitions)
        channels = [client.open_channel(n)[0] for n in names]
        for k, ch in enumerate(channels):
            ch.append_rows(stream_rows(k * WARMUP_ROWS, WARMUP_ROWS), end_offset_token="done")
        client.initiate_flush()

        def committed() -> bool:
            statuses = client.get_channel_statuses(names)
            _check_status(statuses, names)
            return all(n in statuses and statuses[n].last_committed_offset_token == "done" for n in names)

        wait_for(committed, timeout_s, "the streaming warm-up rows to commit", POLL_S)
    return time.perf_counter() - started


def _count(stack: FloeStack, table: str, expected: int, timeout_s: float) -> float:
    """Seconds until SELECT COUNT(*) returns ``expected``; BenchError when it never does."""
    started = time.perf_counter()
    with SqlClient(stack.settings) as poll:
        seen: list[int] = []

        def matched() -> bool:
            seen.append(int(poll.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"]))
            if seen[-1] > expected:
                raise BenchError(f"{table} holds {seen[-1]} rows, more than the {expected} appended")
            return seen[-1] == expected

        wait_for(matched, timeout_s, f"SELECT COUNT(*) on {table} to return {expected}", POLL_S)
    return time.perf_counter() - started


def throughput_once(
    stack: FloeStack,
    rows: Sequence[Mapping[str, Any]],
    channels: int,
    partitions: int,
    meter: CpuMeter,
    *,
    label: str = "",
    timeout_s: float | None = None,
    on_progress: OnProgress | None = None,
) -> dict[str, Any]:
    """Append every row over ``channels`` channels of a fresh table; time until all committed."""
    total = len(rows)
    timeout_s = timeout_s or max(180.0, total / 10_000)
    table = new_table(stack, f"c{channels}")
    names = balanced_channels("ch-", channels, partitions)
    pieces = slices(total, channels)
    last = {n: str(len(p) - 1) for n, p in zip(names, pieces, strict=True)}
    with open_client(stack, table, f"bench-{channels}") as client:
        opened = [client.open_channel(n)[0] for n in names]
        plan = [(ch, piece) for ch, piece in zip(opened, pieces, strict=True) if len(piece)]
        rounds = max((len(piece) + APPEND_ROWS - 1) // APPEND_ROWS for _, piece in plan)
        committed_rows = 0
        next_progress = 0.0

        def ask() -> bool:
            nonlocal committed_rows
            statuses = client.get_channel_statuses(names)
            _check_status(statuses, names)
            committed_rows = sum(s.rows_inserted for s in statuses.values())
            return all(n in statuses and statuses[n].last_committed_offset_token == last[n] for n in names)

        meter.start()
        t0 = time.perf_counter()
        for r in range(rounds):
            for ch, piece in plan:
                lo = r * APPEND_ROWS
                if lo >= len(piece):
                    continue
                hi = min(len(piece), lo + APPEND_ROWS)
                ch.append_rows(
                    rows[piece.start + lo : piece.start + hi],
                    start_offset_token=str(lo),
                    end_offset_token=str(hi - 1),
                )
            now = time.perf_counter()
            if on_progress is not None and now >= next_progress:
                ask()
                on_progress(label, committed_rows, total)
                next_progress = now + PROGRESS_EVERY_S
        appended = time.perf_counter()
        while True:
            done = ask()
            end = time.perf_counter()  # the arrival of the answer that shows the last commit
            if done:
                break
            if end - t0 > timeout_s:
                raise BenchError(
                    f"streaming {channels} channel(s): {committed_rows} of {total} rows committed after "
                    f"{timeout_s:.0f} s (pipeline log tail:\n{stack.log_tail('pipeline')})"
                )
            if on_progress is not None:
                on_progress(label, committed_rows, total)
            time.sleep(POLL_S)
        cpu = meter.stop()
        if on_progress is not None:
            on_progress(label, committed_rows, total)
    if committed_rows != total:
        raise BenchError(f"the channels report {committed_rows} rows inserted, expected {total}")
    count_s = _count(stack, table, total, 60.0)
    elapsed = end - t0
    # Everything runs on one machine here, the client too: what each side costs per row shows
    # what the table could take with the client elsewhere.
    cpu["cpu_us_per_row"] = {k: round(v / total * 1e6, 2) for k, v in cpu["cpu_s"].items()}
    return {
        "rows": total,
        "channels": channels,
        "table": table,
        "seconds": elapsed,
        "rows_per_s": total / elapsed,
        "appends_done_s": appended - t0,
        "count_matched_after_s": count_s,
        **cpu,
    }


def run_stream_throughput(
    stack: FloeStack,
    rows: Sequence[Mapping[str, Any]],
    channels: int,
    repeats: int,
    partitions: int,
    meter: CpuMeter,
    *,
    on_progress: OnProgress | None = None,
) -> dict[str, Any]:
    """``repeats`` runs with ``channels`` channels, each into its own table; the median and spread."""
    runs = []
    for k in range(repeats):
        label = f"{channel_label(channels).replace('_', ' ')}, run {k + 1}/{repeats}"
        runs.append(
            throughput_once(stack, rows, channels, partitions, meter, label=label, on_progress=on_progress)
        )
    rates = [r["rows_per_s"] for r in runs]
    median = statistics.median(rates)
    return {
        "rows": len(rows),
        "channels": channels,
        "rows_per_s": median,
        "rows_per_s_spread": spread(rates),
        "seconds": statistics.median(r["seconds"] for r in runs),
        "runs": runs,
    }


def channel_label(channels: int) -> str:
    """'1_channel', '8_channels': the key of a throughput figure."""
    return f"{channels}_channel" if channels == 1 else f"{channels}_channels"


# ---------------------------------------------------------------------------------------- latency


class _CommitPoller:
    """Asks one channel's committed token every POLL_S and notes when each append was first seen."""

    def __init__(self, client: StreamingIngestClient, channel: str, appends: int) -> None:
        self.client = client
        self.channel = channel
        self.seen: list[float | None] = [None] * appends
        self.next = 0
        """The first append not seen committed yet (tokens commit in order)."""
        self.polls: list[float] = []
        self.server_ms: list[int] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        """Poll until stopped."""
        try:
            while not self.stop.is_set():
                asked = time.perf_counter()
                status = self.client.get_channel_statuses([self.channel]).get(self.channel)
                answered = time.perf_counter()
                self.polls.append(answered - asked)
                token = status.last_committed_offset_token if status is not None else None
                if status is not None and token is not None and token.isdigit():
                    upto = min(int(token), len(self.seen) - 1)
                    if upto >= self.next:
                        # The server's own figure for this commit: append received → committed.
                        self.server_ms.append(status.snowflake_avg_processing_latency_ms)
                    while self.next <= upto:
                        self.seen[self.next] = answered
                        self.next += 1
                self.stop.wait(POLL_S)
        except BaseException as exc:  # noqa: BLE001 -- handed to the measuring thread, which re-raises it
            self.error = exc


def run_stream_latency(
    stack: FloeStack,
    *,
    rate: float,
    seconds: float,
    rows_per_append: int,
    seed: int = 7,
    drain_timeout_s: float = 120.0,
    on_progress: OnProgress | None = None,
) -> dict[str, Any]:
    """One channel at ``rate`` rows/s in appends of ``rows_per_append``; append→committed figures."""
    interval = rows_per_append / rate
    appends = max(1, round(seconds / interval))
    batches = [stream_rows(k * rows_per_append, rows_per_append, seed) for k in range(appends)]
    table = new_table(stack, "lat")
    called: list[float] = [0.0] * appends
    label = f"latency at {rate:g} rows/s"
    with open_client(stack, table, "bench-latency") as client:
        channel, _ = client.open_channel("lat")
        poller = _CommitPoller(client, "lat", appends)
        thread = threading.Thread(target=poller.run, name="bench-stream-latency", daemon=True)
        thread.start()
        try:
            start = time.perf_counter() + 0.05
            for k, batch in enumerate(batches):
                delay = start + k * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                called[k] = time.perf_counter()
                channel.append_rows(batch, end_offset_token=str(k))
                if poller.error is not None:
                    raise BenchError(f"latency poller failed: {poller.error}")
                if on_progress is not None and k % 20 == 0:
                    on_progress(label, poller.next, appends)

            def all_seen() -> bool:
                if poller.error is not None:
                    raise BenchError(f"latency poller failed: {poller.error}")
                if on_progress is not None:
                    on_progress(label, poller.next, appends)
                return poller.next >= appends

            wait_for(all_seen, drain_timeout_s, f"{appends} appends to commit", interval_s=0.1)
        finally:
            poller.stop.set()
            thread.join(10)
        lag_behind = max(0.0, called[-1] - (start + (appends - 1) * interval))
    latencies = [s - c for s, c in zip(poller.seen, called, strict=True) if s is not None]
    _count(stack, table, appends * rows_per_append, 60.0)
    return {
        "rate_rows_per_s": rate,
        "rows_per_append": rows_per_append,
        "appends": appends,
        "seconds": seconds,
        "max_client_lag_ms": MAX_CLIENT_LAG_MS,
        "append_to_committed": summary(latencies),
        "poll_interval_s": POLL_S,
        "poll_query_p50_s": percentile(poller.polls, 50),
        "polls": len(poller.polls),
        # Append received by the API → committed, as the channel status reports it at each commit.
        "server_processing": summary([ms / 1000 for ms in poller.server_ms]) if poller.server_ms else None,
        "pacing_late_s": lag_behind,
    }
