"""External functions (issue 14): a query that calls a trivial remote function over N rows, against
the same query without the function.

* **Table**: ``(ID INT, KIND VARCHAR)`` with ids 0 .. N-1, loaded the fast way the harness has:
  Floe's streaming client over ``LOAD_CHANNELS`` channels into the table's default pipe, until
  ``SELECT COUNT(*)`` returns N. The load is not timed.
* **Service**: ``bench/echo_service.py`` in a process of its own, served by uvicorn on a free
  loopback port. It echoes its one argument and counts requests, batches, rows and the most
  requests in flight at once (``GET /stats``, ``POST /stats/reset``).
* **Function**: ``bench_echo(x NUMBER) RETURNS NUMBER VOLATILE`` through an API integration that
  allows the service's URL. VOLATILE, so every row is sent: an IMMUTABLE function would send each
  distinct argument once and cache the results.
* **Queries**: ``SELECT SUM(id)`` (the baseline) and ``SELECT SUM(bench_echo(id))``, each through
  the API's SQL endpoint on a kept-alive connection, timed from the request to its answer. One
  untimed run of each first (the API then holds the table's decrypted blobs, so both read warm),
  then ``repeats`` timed runs of each, alternating; the medians are the figures. Every sum must be
  N(N-1)/2, and every function run must have sent each row exactly once.

The service's counters are reset before each timed function run and read after it, which gives the
run's batches/s, rows per batch and the concurrency reached. The CPU of the API's process, of the
service and of this process is read from /proc around each timed run.
"""

from __future__ import annotations

import contextlib
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from bench.harness import (
    ROOT,
    BenchError,
    FloeStack,
    SqlClient,
    kill_session,
    unique,
    wait_for,
)
from bench.streaming import APPEND_ROWS, CpuMeter, balanced_channels, open_client, slices, spread
from floe.runtime import free_port
from floe.settings import Settings

EXTERNAL_COLUMNS_SQL = "(ID INT, KIND VARCHAR)"
"""The queried table, as CREATE TABLE takes it."""
LOAD_CHANNELS = 8
"""Streaming channels of the load (the fastest count in the streaming part)."""
QUERY_TIMEOUT_S = 600.0
"""The API's query.timeout_s while this part is selected: a million rows through a remote
function may take longer than the default 60 s on a small machine."""
INTEGRATION = "bench_ef"
FUNCTION = "bench_echo"
SERVICE_MODULE = "bench.echo_service:app"
SERVICE_READY_S = 30.0
POLL_S = 0.1
_KINDS = ("click", "view", "purchase", "refund", "signup", "login", "logout", "search")

OnProgress = Callable[[str, int, int], None]


# ------------------------------------------------------------------------------------ pure logic


def external_rows(start: int, n: int) -> list[dict[str, Any]]:
    """Rows ``start`` .. ``start + n - 1`` of the queried table."""
    return [{"id": i, "kind": _KINDS[i % len(_KINDS)]} for i in range(start, start + n)]


def expected_sum(rows: int) -> int:
    """SUM(id) over ids 0 .. rows-1."""
    return rows * (rows - 1) // 2


def integration_sql(base_url: str) -> str:
    """The API integration that lets functions call the service under ``base_url`` (ends in /)."""
    return (
        f"CREATE OR REPLACE API INTEGRATION {INTEGRATION} API_PROVIDER = aws_api_gateway "
        f"API_ALLOWED_PREFIXES = ('{base_url}') ENABLED = TRUE"
    )


def function_sql(base_url: str) -> str:
    """The echo function, VOLATILE so that every row is sent."""
    return (
        f"CREATE OR REPLACE EXTERNAL FUNCTION {FUNCTION}(x NUMBER) RETURNS NUMBER VOLATILE "
        f"API_INTEGRATION = {INTEGRATION} AS '{base_url}echo'"
    )


def baseline_query(table: str) -> str:
    """The query without the function."""
    return f"SELECT SUM(id) AS s FROM {table}"


def function_query(table: str) -> str:
    """The same query, every id through the remote function."""
    return f"SELECT SUM({FUNCTION}(id)) AS s FROM {table}"


def with_query_timeout(settings: Settings, seconds: float = QUERY_TIMEOUT_S) -> Settings:
    """``settings`` whose query.timeout_s is at least ``seconds``."""
    timeout = max(settings.query.timeout_s, seconds)
    return settings.model_copy(update={"query": settings.query.model_copy(update={"timeout_s": timeout})})


def as_int(value: Any) -> int:
    """A SUM as the SQL endpoint answers it (a number, or its text for a wide decimal) as an int;
    BenchError when it is not a whole number."""
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise BenchError(f"the sum {value!r} is not a number") from None
    if number != number.to_integral_value():
        raise BenchError(f"the sum {value!r} is not a whole number")
    return int(number)


def _median_by_key(maps: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The median of each key over the maps that have it."""
    keys = sorted({k for m in maps for k in m})
    return {k: round(statistics.median(m[k] for m in maps if k in m), 3) for k in keys}


def summarize(
    rows: int, baseline: Sequence[Mapping[str, Any]], function: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The figures of the timed runs: for each query its median rows/s, spread and seconds; for the
    function also the service's batches/s, rows per batch, the most requests in flight at once and
    the CPU each process used (medians over the runs, but the maximum of the concurrency)."""
    if not baseline or not function:
        raise ValueError("summarize needs at least one run of each query")

    def rates(runs: Sequence[Mapping[str, Any]]) -> list[float]:
        return [rows / r["seconds"] for r in runs]

    def query(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        r = rates(runs)
        return {
            "rows_per_s": statistics.median(r),
            "rows_per_s_spread": spread(r),
            "seconds": [round(run["seconds"], 4) for run in runs],
            "cpu_s": _median_by_key([run["cpu_s"] for run in runs if "cpu_s" in run]),
        }

    fn = query(function)
    fn["batches_per_s"] = statistics.median(r["batches"] / r["seconds"] for r in function)
    fn["requests_per_s"] = statistics.median(r["requests"] / r["seconds"] for r in function)
    fn["rows_per_batch"] = statistics.median(r["rows_sent"] / r["batches"] for r in function if r["batches"])
    fn["batches"] = statistics.median(r["batches"] for r in function)
    fn["retries"] = sum(r["requests"] - r["batches"] for r in function)
    fn["max_concurrency"] = max(r["max_in_flight"] for r in function)
    fn["max_concurrency_per_run"] = [r["max_in_flight"] for r in function]
    fn["machine_busy_cores"] = statistics.median(r.get("machine_busy_cores", 0.0) for r in function)
    api = fn["cpu_s"].get("api")
    if api is not None:
        fn["api_cpu_us_per_row"] = round(api / rows * 1e6, 3)
    return {"rows": rows, "baseline": query(baseline), "function": fn}


# ----------------------------------------------------------------------------------- the service


class EchoService:
    """``bench/echo_service.py`` under uvicorn in a session of its own, on a free loopback port."""

    def __init__(self, logs: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/"
        self.log_path = logs / "echo-service.log"
        self.proc: subprocess.Popen[bytes] | None = None
        # trust_env=False: a proxy from the environment must not sit between us and loopback.
        self.http = httpx.Client(base_url=self.base_url, timeout=10.0, trust_env=False)

    @property
    def pid(self) -> int:
        """The server's pid (it leads its own session)."""
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        """Start uvicorn and wait until ``/stats`` answers."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    SERVICE_MODULE,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "warning",
                    "--no-access-log",
                ],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise BenchError(
                    f"the echo service exited with code {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                return self.http.get("stats").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, SERVICE_READY_S, "the echo service to answer", POLL_S)

    def stats(self) -> dict[str, int]:
        """The service's counters since the last reset."""
        resp = self.http.get("stats")
        resp.raise_for_status()
        return dict(resp.json())

    def reset(self) -> None:
        """Zero the counters."""
        self.http.post("stats/reset").raise_for_status()

    def check(self) -> None:
        """BenchError when the service has exited."""
        if self.proc is None or self.proc.poll() is not None:
            raise BenchError(f"the echo service is not running:\n{self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the service's log."""
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else "(no log)"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL its session if it does not exit in time."""
        self.http.close()
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            kill_session(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)

    def __enter__(self) -> EchoService:
        try:
            self.start()
        except BaseException:
            self.stop()  # a server that never answered still runs: __exit__ would not be called
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------------------- the load


def load_table(
    stack: FloeStack, rows: int, partitions: int, *, on_progress: OnProgress | None = None
) -> dict[str, Any]:
    """A fresh table of ``rows`` rows through its default pipe, ``LOAD_CHANNELS`` channels of the
    streaming client; returns its name and how long the load took (until COUNT(*) agreed)."""
    table = unique("bench_ef_").upper()
    stack.sql(f"CREATE TABLE {table} {EXTERNAL_COLUMNS_SQL}")
    names = balanced_channels("ef-", LOAD_CHANNELS, partitions)
    pieces = slices(rows, LOAD_CHANNELS)
    last = {n: str(p.stop) for n, p in zip(names, pieces, strict=True) if len(p)}
    timeout_s = max(180.0, rows / 5_000)
    started = time.perf_counter()
    with open_client(stack, table, "bench-external") as client:
        opened = {n: client.open_channel(n)[0] for n in last}
        plan = [(opened[n], p) for n, p in zip(names, pieces, strict=True) if n in opened]
        # Round robin over the channels, as the streaming part appends: every channel's buffer
        # fills at once, so the client sends them side by side.
        for lo in range(0, max((len(p) for _, p in plan), default=0), APPEND_ROWS):
            for channel, piece in plan:
                if lo >= len(piece):
                    continue
                hi = min(len(piece), lo + APPEND_ROWS)
                channel.append_rows(
                    external_rows(piece.start + lo, hi - lo), end_offset_token=str(piece.start + hi)
                )
        client.initiate_flush()

        def committed() -> bool:
            statuses = client.get_channel_statuses(list(last))
            done = 0
            for name, st in statuses.items():
                if st.channel_status_code != "SUCCESS" or st.rows_error_count:
                    raise BenchError(f"load channel {name}: {st.channel_status_code} {st.last_error_message}")
                done += st.rows_inserted
            if on_progress is not None:
                on_progress("loading the table", done, rows)
            return all(
                n in statuses and statuses[n].last_committed_offset_token == t for n, t in last.items()
            )

        wait_for(committed, timeout_s, f"{rows:,} rows to commit into {table}", POLL_S)
    with SqlClient(stack.settings) as poll:
        count = f"SELECT COUNT(*) AS n FROM {table}"
        wait_for(
            lambda: int(poll.sql(count)[0]["N"]) == rows, 60.0, f"COUNT(*) of {table} to be {rows}", POLL_S
        )
    seconds = time.perf_counter() - started
    return {
        "table": table,
        "seconds": round(seconds, 2),
        "rows_per_s": rows / seconds,
        "channels": LOAD_CHANNELS,
    }


# ------------------------------------------------------------------------------------ the queries


def _timed(poll: SqlClient, statement: str) -> tuple[float, int]:
    """Seconds from the request to the answer, and the sum it answered."""
    started = time.perf_counter()
    answer = poll.sql(statement)
    seconds = time.perf_counter() - started
    return seconds, as_int(answer[0]["S"])


def run_external(
    stack: FloeStack,
    rows: int,
    repeats: int,
    partitions: int,
    *,
    on_progress: OnProgress | None = None,
) -> dict[str, Any]:
    """The whole part: load, service, function, warm-ups, timed runs; the figures (``summarize``)
    with the load, the settings that shape the calls and every run."""
    load = load_table(stack, rows, partitions, on_progress=on_progress)
    table = load["table"]
    want = expected_sum(rows)
    total_runs = 2 + 2 * repeats
    settings = stack.settings
    with EchoService(stack.logs) as service:
        stack.sql(integration_sql(service.base_url))
        stack.sql(function_sql(service.base_url))
        meter = CpuMeter({"api": stack.sid("api"), "service": service.pid}, None)
        baseline: list[dict[str, Any]] = []
        function: list[dict[str, Any]] = []
        warm: dict[str, float] = {}
        with SqlClient(settings, timeout=settings.query.timeout_s + 30.0) as poll:

            def once(kind: str, timed: bool) -> None:
                statement = baseline_query(table) if kind == "baseline" else function_query(table)
                service.reset()
                meter.start()
                seconds, got = _timed(poll, statement)
                cpu = meter.stop()
                service.check()
                if got != want:
                    raise BenchError(f"{statement} answered {got}, expected {want}")
                stats = service.stats()
                sent = stats["rows"] if kind == "function" else 0
                if kind == "function" and sent != rows:
                    raise BenchError(f"the function was sent {sent} rows, expected each of {rows} once")
                if not timed:
                    warm[kind] = round(seconds, 3)
                    return
                run: dict[str, Any] = {"seconds": seconds, "rows_per_s": rows / seconds, **cpu}
                if kind == "function":
                    run.update(
                        requests=stats["requests"],
                        batches=stats["batches"],
                        rows_sent=sent,
                        max_in_flight=stats["max_in_flight"],
                    )
                (baseline if kind == "baseline" else function).append(run)

            plan = [("baseline", False), ("function", False)]
            plan += [(kind, True) for _ in range(repeats) for kind in ("baseline", "function")]
            for done, (kind, timed) in enumerate(plan):
                once(kind, timed)
                if on_progress is not None:
                    on_progress("queries", done + 1, total_runs)
    out = summarize(rows, baseline, function)
    out["baseline"].update(query=baseline_query("t"), warmup_s=warm["baseline"], runs=baseline)
    out["function"].update(query=function_query("t"), warmup_s=warm["function"], runs=function)
    out["sum"] = str(want)
    out["repeats"] = repeats
    out["load"] = load
    ef = settings.external_functions
    out["settings"] = {
        "max_concurrency": ef.max_concurrency,
        "max_batch_rows": ef.max_batch_rows,
        "duckdb_threads": settings.query.threads,
        "query_timeout_s": settings.query.timeout_s,
    }
    return out
