"""Floe's benchmark harness (issue 5): throughput against two baselines, latency, notifications,
REST, memory, row streaming (issue 13), external functions (issue 14) and scaling out (issue 15),
printed as a table and written as JSON.

    .venv/bin/python -m bench.run             # full run   -> bench/results/latest.json  (make bench)
    .venv/bin/python -m bench.run --smoke     # tiny sizes -> bench/results/smoke.json   (make bench-smoke)

Parts (--only takes a comma-separated list of them):
  floe           Floe end to end: put the CSV files into a stage bucket; rows/s from the first put
                 until SELECT COUNT(*) returns every row (S3, SQS, consumer, Spark job, registrar).
                 Peak memory of every Floe process is sampled meanwhile.
  limit          plain pyarrow over the same local files (read, cast, encrypted Parquet), 2 processes.
  peer           Spark's own file-source stream (readStream.csv, the same casts, Parquet sink,
                 trigger availableNow), local[2], in a process of its own.
  latency        one small file at a time at two rates; p50/p99 from the put until the rows answer a
                 SELECT and until COPY_HISTORY shows Loaded.
  notifications  the consumer alone: S3 event messages through dedup and enqueue, in files/s.
  rest           insertFiles calls per second with 100 files each, and their p99 (bench/rest.py).
  streaming      Snowpipe Streaming (bench/streaming.py): rows/s into one table with 1 and with 8
                 channels of Floe's client, append→committed p50/p99 at a steady rate, and pyarrow
                 on the same rows as NDJSON (its limit).
  external       external functions (bench/external.py): SELECT SUM(bench_echo(id)) over N rows,
                 the function a trivial echo service in a process of its own, against SELECT
                 SUM(id); rows/s of each, their ratio, batches/s and the concurrency reached.
  query_memory   queries over a 2 GB table (bench/query_memory.py): the API's peak RSS and the times
                 of COUNT(*), a GROUP BY, SELECT * LIMIT 10 and a full scan. Several minutes, so a
                 smoke run leaves it out unless --only names it.
  spark_cluster  the floe part's load with the Spark job on local[2] and on a Spark standalone
                 cluster of 2 workers on this machine (bench/scale.py), alternately, --scale-repeats
                 times each: median rows/s of each and cluster / local. On one machine this shows
                 the cluster's overhead; a gain needs more hosts. Several minutes, so a smoke run
                 leaves it out unless --only names it.
  Aliases: throughput = floe,limit,peer; memory = floe; scale = spark_cluster,query_memory
  (issue 15); all = every part.

LocalStack and Redis are started when they do not answer yet (and stopped again afterwards), at
the endpoints Floe's settings name (FLOE_AWS__ENDPOINT_URL, FLOE_REDIS__URL, FLOE_STATE_DIR...).
The Floe processes are the run's own, on a private state directory (<state_dir>/bench/run-*, kept
with its logs when a part fails), key prefix, queue, buckets and port; all of it is removed at the
end unless --keep. Generated data is cached under <state_dir>/bench/data.
The exit code is 0 when every selected figure was measured (missed targets are reported, not
failures, unless --fail-on-missed-targets), 1 when a part failed, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import signal
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from bench import rest
from bench.baselines import PEER_MAX_FILES_PER_TRIGGER, PeerRun, S3Source, repeated, run_limit, stage_dataset
from bench.curves import FILE_COUNTS, FILE_SIZES, count_points, run_curves, size_points
from bench.dataset import Dataset, ensure_dataset
from bench.external import (
    EXTERNAL_COLUMNS_SQL,
    FUNCTION,
    LOAD_CHANNELS,
    baseline_query,
    function_query,
    run_external,
    with_query_timeout,
)
from bench.harness import FLOE_PROCESSES, FloeStack, Resources, isolated_settings, remove_tree
from bench.latency import run_latency
from bench.memory import MemorySampler, forked_workers
from bench.notifications import run_notifications
from bench.query_memory import RSS_TARGET_MB, run_query_memory
from bench.report import (
    CHECKSUMMED,
    SCALE_RATIO,
    checksums_agree,
    evaluate,
    machine,
    missing_figures,
    rate_text,
    ratios,
    render,
    versions,
)
from bench.scale import LOCAL_MASTER, JobSwitch, cluster_conf, mode_label, run_scale, stop_cluster
from bench.streaming import (
    APPEND_ROWS,
    CHANNEL_COUNTS,
    COMPRESSION,
    MAX_CLIENT_LAG_MS,
    CpuMeter,
    channel_label,
    ndjson,
    redis_pid,
    run_stream_latency,
    run_stream_limit,
    run_stream_throughput,
    stream_rows,
    warm_up,
)
from bench.throughput import WarmUp, run_floe
from floe.aws import pyarrow_s3_kwargs
from floe.settings import Settings
from infra.stack import StackError, ensure_services, stop
from infra.stack import status as stack_status

PARTS: tuple[str, ...] = (
    "floe",
    "limit",
    "peer",
    "latency",
    "notifications",
    "rest",
    "streaming",
    "external",
    "query_memory",
    "spark_cluster",
    "curves",
)
SMOKE_SKIPS: frozenset[str] = frozenset({"query_memory", "spark_cluster", "curves"})
"""Parts a smoke run leaves out unless --only names them (each takes minutes even at its size)."""
IDLE_SAMPLES = 10
"""Samples of the warm Spark job's memory, 0.2 s apart, before the throughput runs: its idle figure."""
ALIASES: dict[str, tuple[str, ...]] = {
    "throughput": ("floe", "limit", "peer"),
    "memory": ("floe",),
    "scale": ("spark_cluster", "query_memory"),
    "all": PARTS,
}
STACK_PHASES = frozenset(
    {
        "warmup",
        "warmup_load",
        "floe",
        "latency",
        "notifications",
        "rest",
        "streaming_warmup",
        *(f"streaming_{channel_label(n)}" for n in CHANNEL_COUNTS),
        "streaming_latency",
        "external",
        "query_memory",
        "spark_cluster",
        "curves",
    }
)
STACK_PARTS = frozenset(PARTS) - {"limit", "peer"}
"""The parts that need the run's Floe processes."""
RESULTS_DIR = Path(__file__).resolve().parent / "results"

FULL: dict[str, Any] = {
    "files": 200,
    "rows": 10_000,
    "throughput_repeats": 3,
    "idle_wait": 120.0,
    "slow_rate": 1.0,
    "slow_samples": 30,
    "fast_rate": 20.0,
    "fast_samples": 100,
    "latency_rows": 5,
    "notifications": 10_000,
    "rest_seconds": 10.0,
    "rest_concurrency": 16,
    "rest_files": 100,
    "stream_rows": 2_000_000,
    "stream_repeats": 3,
    "stream_rate": 1_000.0,
    "stream_seconds": 30.0,
    "stream_append_rows": 50,
    "external_rows": 1_000_000,
    "external_repeats": 3,
    "query_table_mb": 2048,
    "query_repeats": 3,
    "scale_repeats": 3,
    "curve_counts": FILE_COUNTS,
    "curve_sizes": FILE_SIZES,
    "out": RESULTS_DIR / "latest.json",
    "overlap": False,
    "warmup": True,
    "peer_java_options": "",
}
SMOKE: dict[str, Any] = {
    **FULL,
    "files": 4,
    "rows": 1_000,
    "throughput_repeats": 1,
    "idle_wait": 0.0,
    "slow_samples": 2,
    "fast_samples": 6,
    "notifications": 300,
    "rest_seconds": 2.0,
    "rest_concurrency": 8,
    "stream_rows": 20_000,
    "stream_repeats": 1,
    "stream_seconds": 5.0,
    "external_rows": 20_000,
    "query_table_mb": 64,
    "query_repeats": 1,
    "scale_repeats": 1,
    "curve_counts": (4, 8),
    "curve_sizes": (1_000, 10_000),
    "out": RESULTS_DIR / "smoke.json",
    "overlap": True,
    "warmup": True,
    # The peer's JVM with the C1 compiler only: a third less CPU for a run this short, which the
    # Floe processes starting beside it need. Smoke figures only show that the harness works.
    "peer_java_options": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def int_list(text: str) -> tuple[int, ...]:
    """A comma-separated list of positive integers (an argument of --curve-counts, --curve-sizes)."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give at least one integer, each 1 or more")
    return values


def parse_parts(text: str) -> set[str]:
    """The parts named by --only (names and aliases, comma-separated)."""
    parts: set[str] = set()
    for raw in text.split(","):
        name = raw.strip().lower()
        if not name:
            continue
        if name in ALIASES:
            parts.update(ALIASES[name])
        elif name in PARTS:
            parts.add(name)
        else:
            known = ", ".join((*PARTS, *ALIASES))
            raise argparse.ArgumentTypeError(f"unknown part {name!r}; known: {known}")
    if not parts:
        raise argparse.ArgumentTypeError("--only needs at least one part")
    return parts


def build_parser() -> argparse.ArgumentParser:
    """The command line (defaults of None are filled from the full or the smoke sizes)."""
    p = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )

    def sizes(key: str) -> str:
        def text(value: float | tuple[int, ...]) -> str:
            if isinstance(value, tuple):
                return ",".join(str(v) for v in value)
            return f"{value:,}" if isinstance(value, int) else f"{value:g}"

        return f"(full {text(FULL[key])}, smoke {text(SMOKE[key])})"

    p.add_argument("--smoke", action="store_true", help="tiny sizes, under a minute; writes smoke.json")
    p.add_argument(
        "--only",
        type=parse_parts,
        metavar="PARTS",
        help=f"parts to run (default all; a smoke run all but {', '.join(sorted(SMOKE_SKIPS))})",
    )
    p.add_argument(
        "--out", type=Path, help="JSON result file (full: bench/results/latest.json, smoke: smoke.json)"
    )
    g = p.add_argument_group("throughput")
    g.add_argument("--files", type=int, help=f"CSV files {sizes('files')}")
    g.add_argument("--rows", type=int, help=f"rows per file {sizes('rows')}")
    g.add_argument("--seed", type=int, default=7, help="seed of the generated data (default 7)")
    g.add_argument(
        "--throughput-repeats",
        type=int,
        help="runs of each throughput figure (Floe staged and end to end, both limits, the peer "
        f"plain and paced); the median is the figure {sizes('throughput_repeats')}",
    )
    g.add_argument(
        "--put-threads", type=int, default=8, help="concurrent S3 puts of the Floe run (default 8)"
    )
    g.add_argument(
        "--idle-wait",
        type=float,
        help="seconds the idle-memory figure waits after the Floe runs for Spark to stop its idle "
        f"Python workers, which it does after a minute without a task {sizes('idle_wait')}",
    )
    g.add_argument(
        "--data-dir", type=Path, help="where generated files are kept (default <state_dir>/bench/data)"
    )
    g = p.add_argument_group("latency")
    g.add_argument("--slow-rate", type=float, help=f"files per second of the first wave {sizes('slow_rate')}")
    g.add_argument("--slow-samples", type=int, help=f"files of the first wave {sizes('slow_samples')}")
    g.add_argument(
        "--fast-rate", type=float, help=f"files per second of the second wave {sizes('fast_rate')}"
    )
    g.add_argument("--fast-samples", type=int, help=f"files of the second wave {sizes('fast_samples')}")
    g.add_argument("--latency-rows", type=int, help=f"rows per latency file {sizes('latency_rows')}")
    g = p.add_argument_group("notifications and REST")
    g.add_argument("--notifications", type=int, help=f"S3 event messages {sizes('notifications')}")
    g.add_argument("--rest-seconds", type=float, help=f"seconds of insertFiles calls {sizes('rest_seconds')}")
    g.add_argument(
        "--rest-concurrency", type=int, help=f"concurrent REST clients {sizes('rest_concurrency')}"
    )
    g.add_argument("--rest-files", type=int, help=f"files per insertFiles call {sizes('rest_files')}")
    g.add_argument(
        "--overlap",
        action=argparse.BooleanOptionalAction,
        help="run the baselines while the Floe processes start, and the notifications and REST parts "
        "while the Spark job warms up: much faster, but the parts then share the CPU, so the figures "
        "only show that the harness works (smoke default on, full default off)",
    )
    g.add_argument(
        "--warmup",
        action=argparse.BooleanOptionalAction,
        help="load two small files before the timed parts, so the Spark job's first micro-batches "
        "are not timed (default on)",
    )
    g.add_argument(
        "--peer-java-options",
        metavar="OPTS",
        help="spark.driver.extraJavaOptions of the Spark peer, as --peer-java-options='-X...' (full: "
        "none; smoke: C1 JIT only and the serial GC, which save CPU on a run this short)",
    )
    g = p.add_argument_group("streaming")
    g.add_argument(
        "--stream-rows", type=int, help=f"rows per streaming throughput run {sizes('stream_rows')}"
    )
    g.add_argument(
        "--stream-repeats",
        type=int,
        help=f"runs of each streaming throughput figure and of its limit {sizes('stream_repeats')}",
    )
    g.add_argument(
        "--stream-rate", type=float, help=f"rows per second of the latency channel {sizes('stream_rate')}"
    )
    g.add_argument(
        "--stream-seconds", type=float, help=f"seconds of the latency channel {sizes('stream_seconds')}"
    )
    g.add_argument(
        "--stream-append-rows",
        type=int,
        help=f"rows per append of the latency channel {sizes('stream_append_rows')}",
    )
    g = p.add_argument_group("external functions")
    g.add_argument(
        "--external-rows",
        type=int,
        help=f"rows of the table the function query reads {sizes('external_rows')}",
    )
    g.add_argument(
        "--external-repeats",
        type=int,
        help=f"timed runs of the function query and of its baseline {sizes('external_repeats')}",
    )
    g = p.add_argument_group("queries with bounded memory")
    g.add_argument(
        "--query-table-mb", type=int, help=f"size of the queried table as CSV, MB {sizes('query_table_mb')}"
    )
    g.add_argument("--query-repeats", type=int, help=f"runs of each query {sizes('query_repeats')}")
    g = p.add_argument_group("scaling out (spark_cluster; the load is the throughput group's files)")
    g.add_argument(
        "--scale-repeats",
        type=int,
        help=f"timed loads on local[2] and as many on the cluster, alternating {sizes('scale_repeats')}",
    )
    g = p.add_argument_group("scaling curves (curves; a PNG each in the --out file's directory)")
    g.add_argument(
        "--curve-counts",
        type=int_list,
        metavar="N,N,...",
        help=f"files of about 1 KB at each point of the files curve {sizes('curve_counts')}",
    )
    g.add_argument(
        "--curve-sizes",
        type=int_list,
        metavar="BYTES,...",
        help=f"bytes per file at each point of the size curve, up to 400 MB a point {sizes('curve_sizes')}",
    )
    g = p.add_argument_group("housekeeping")
    g.add_argument(
        "--keep", action="store_true", help="keep the run's state dir, buckets, queues and Redis keys"
    )
    g.add_argument(
        "--fail-on-missed-targets",
        action="store_true",
        help="exit 2 when a measured figure misses its target",
    )
    return p


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill unset sizes from the smoke or full defaults."""
    defaults = SMOKE if args.smoke else FULL
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if args.only is None:
        args.only = set(PARTS) - (SMOKE_SKIPS if args.smoke else set())
    return args


def _terminate(signum: int, frame: FrameType | None) -> None:
    # SIGTERM takes the Ctrl-C path, so the Floe processes and services get stopped.
    raise KeyboardInterrupt


class _Bars:
    """One progress bar per label a part reports (``update`` is the part's on_progress)."""

    def __init__(self, progress: Progress, title: Callable[[str], str]) -> None:
        self.progress = progress
        self.title = title
        self.tasks: dict[str, Any] = {}

    def update(self, label: str, done: int, n: int) -> None:
        """Advance (or start) the bar of ``label``."""
        if label not in self.tasks:
            self.tasks[label] = self.progress.add_task(self.title(label), total=n)
        self.progress.update(self.tasks[label], completed=done)

    def close(self) -> None:
        """Remove every bar."""
        for task in self.tasks.values():
            self.progress.remove_task(task)


class Run:
    """One benchmark run: its settings, processes, resources and result."""

    def __init__(self, args: argparse.Namespace, settings: Settings, console: Console) -> None:
        self.args = args
        self.base = settings
        self.console = console
        self.parts: set[str] = args.only
        bench_root = Path(settings.state_dir).absolute() / "bench"
        self.run_dir = bench_root / f"run-{dt.datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:4]}"
        self.data_dir = args.data_dir or bench_root / "data"
        self.settings = isolated_settings(settings, self.run_dir)
        if "external" in self.parts:
            # A million rows through a remote function may outlast the default 60 s query limit.
            self.settings = with_query_timeout(self.settings)
        self.stack: FloeStack | None = None
        self.launched = 0.0
        self.peer_run: PeerRun | None = None
        self.peer_collected = False
        self.started_services: list[str] = []
        self.cluster_settings: Settings | None = None
        """Set once the spark_cluster part may have started a cluster: shutdown stops it."""
        self.warm_task: Any = None
        self.overall: Any = None
        """The run's own bar: the phase under way and how many of the selected parts are done."""
        self.parts_done: set[str] = set()
        self.resources = Resources(self.settings)
        self.rates = [(args.slow_rate, args.slow_samples), (args.fast_rate, args.fast_samples)]
        self.slow_label = f"{args.slow_rate:g}_per_s"
        self.fast_label = f"{args.fast_rate:g}_per_s"
        self.result: dict[str, Any] = {
            "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "mode": "smoke" if args.smoke else "full",
            "machine": machine(),
            "versions": {},
            "params": self.params(),
            "figures": {},
            "ratios": {},
            "targets": {},
            "errors": {},
            "timings_s": {},
        }
        if args.overlap or args.peer_java_options:
            self.result["note"] = (
                "parts overlapped or the peer's JVM tuned for a short run: these figures show that the "
                "harness works; compare only full runs"
            )

    def params(self) -> dict[str, Any]:
        """What the run was asked to measure."""
        a = self.args
        return {
            "parts": sorted(self.parts),
            "throughput": {
                "files": a.files,
                "rows_per_file": a.rows,
                "columns": "id NUMBER(18,0), amount NUMBER(12,2), name VARCHAR, day DATE, ts TIMESTAMP_NTZ, "
                "flag BOOLEAN; every column cast from text",
                "seed": a.seed,
                "put_threads": a.put_threads,
                "repeats": a.throughput_repeats,
                "peer_max_files_per_trigger": PEER_MAX_FILES_PER_TRIGGER,
            },
            "latency": {
                "rates": [{"per_s": r, "samples": n} for r, n in self.rates],
                "rows_per_file": a.latency_rows,
            },
            "notifications": {"files": a.notifications},
            "rest": {
                "seconds": a.rest_seconds,
                "concurrency": a.rest_concurrency,
                "files_per_call": a.rest_files,
            },
            "streaming": {
                "rows": a.stream_rows,
                "repeats": a.stream_repeats,
                "channels": list(CHANNEL_COUNTS),
                "columns": "ID INT, KIND VARCHAR, AMOUNT NUMBER(10,2), SCORE FLOAT, FLAG BOOLEAN, "
                "TS TIMESTAMP_NTZ through the default pipe; JSON int, string, decimal text, float, "
                "boolean, ISO text",
                "latency_rate_rows_per_s": a.stream_rate,
                "latency_seconds": a.stream_seconds,
                "latency_rows_per_append": a.stream_append_rows,
                "rows_per_append_call": APPEND_ROWS,
                "max_client_lag_ms": MAX_CLIENT_LAG_MS,
                "compression": COMPRESSION,
                "seed": a.seed,
            },
            "external": {
                "rows": a.external_rows,
                "repeats": a.external_repeats,
                "columns": EXTERNAL_COLUMNS_SQL,
                "load_channels": LOAD_CHANNELS,
                "baseline": baseline_query("t"),
                "function": function_query("t"),
                "remote": f"{FUNCTION}(x NUMBER) RETURNS NUMBER VOLATILE: an echo under uvicorn, "
                "bench/echo_service.py",
                "query_timeout_s": self.settings.query.timeout_s,
            },
            "query_memory": {
                "table_csv_mb": a.query_table_mb,
                "repeats": a.query_repeats,
                "rss_target_mb": RSS_TARGET_MB,
            },
            "spark_cluster": {
                "repeats": a.scale_repeats,
                "baseline": LOCAL_MASTER,
                "cluster": mode_label("cluster"),
                "spark_conf": cluster_conf(),
                "load": "the throughput files, a fresh table and pipe per run, the job restarted and "
                "warmed before each",
            },
            "curves": {
                "file_counts": list(a.curve_counts),
                "file_sizes": list(a.curve_sizes),
                "point": "a fresh stage bucket, table and pipe, loaded end to end on the warm stack",
            },
            "spark_master": self.base.pipeline.spark_master,
            "pipeline_partitions": self.base.pipeline.partitions,
            "overlap": a.overlap,
            "warmup": a.warmup,
            "peer_java_options": a.peer_java_options,
        }

    def phase(self, name: str, progress: Progress, fn: Any, *fargs: Any, **kwargs: Any) -> Any:
        """Run one part; a failure is recorded and the run goes on with the next part."""
        started = time.perf_counter()
        self._show_phase(progress, name)
        try:
            if name in STACK_PHASES and self.stack is not None:
                self.stack.check()
            value = fn(*fargs, **kwargs)
            if name in STACK_PHASES and self.stack is not None:
                self.stack.check()  # a process that died meanwhile makes the figure suspect
        except Exception as exc:  # noqa: BLE001 -- one failed phase is reported; the others still run
            self.result["errors"][name] = f"{type(exc).__name__}: {exc}"
            progress.console.print(f"[red]✗ {name} failed:[/] {type(exc).__name__}: {exc}", markup=True)
            return None
        finally:
            self.result["timings_s"][name] = round(time.perf_counter() - started, 2)
            self.part_done(progress, name)
        return value

    def _show_phase(self, progress: Progress, name: str) -> None:
        """Name the phase under way on the run's bar (added on the first phase)."""
        total = len(self.parts)
        if self.overall is None:
            self.overall = progress.add_task("", total=total)
        progress.update(
            self.overall, description=f"bench: {name} ({len(self.parts_done)} of {total} parts done)"
        )

    def part_done(self, progress: Progress, name: str) -> None:
        """Count ``name`` on the run's bar if it is a part (a phase may be only a step of one)."""
        if name in self.parts and name not in self.parts_done and self.overall is not None:
            self.parts_done.add(name)
            progress.update(self.overall, completed=len(self.parts_done))

    def execute(self, progress: Progress) -> None:
        """Every selected part, in an order that keeps them from competing for the CPU.

        Without --overlap the baselines run first, alone, then the Floe processes start and each
        Floe part runs alone. With it (the smoke run's default) the Spark peer and the limit run
        while the Floe processes start, and the notifications and REST parts while the Spark job
        loads its warm-up files: the run takes far less time, and its figures only show that the
        harness works.
        """
        a = self.args
        need_stack = bool(self.parts & STACK_PARTS)
        dataset = self.dataset(progress) if self.parts & {"floe", "limit", "peer", "spark_cluster"} else None
        rows = self.stream_data(progress) if "streaming" in self.parts else None
        if a.overlap and need_stack:
            self.launch_stack()
        if dataset is not None and "peer" in self.parts:
            self.peer_run = self.new_peer(dataset).start()
            if not a.overlap:
                self.collect_peer(progress)
        if dataset is not None and "limit" in self.parts:
            self.limit(progress, dataset)
        if rows is not None:
            self.stream_limit(progress, rows)
        if need_stack:
            self.stack_parts(progress, dataset, rows)
        if self.peer_run is not None and not self.peer_collected:
            self.collect_peer(progress)

    def stack_parts(
        self, progress: Progress, dataset: Dataset | None, rows: list[dict[str, Any]] | None
    ) -> None:
        """The parts that need the Floe processes, which are started here unless running already."""
        a = self.args
        if self.stack is None:
            self.launch_stack()
        warming = a.warmup and bool(self.parts & {"floe", "latency", "curves"})
        warm: WarmUp | None = None
        # The warm-up files go in as soon as the API and the consumer answer: the Spark job
        # picks them up the moment its stream starts.
        if warming and self.stack_ready(progress, ("api", "consumer")):
            warm = self.start_warmup(progress)
        if not self.stack_ready(progress, FLOE_PROCESSES):
            return
        apart = ("notifications", "rest")  # the parts that leave the Spark job alone
        if a.overlap:
            self.apart(progress, apart)
        if not warming or self.finish_warmup(progress, warm):
            if dataset is not None and "floe" in self.parts:
                self.floe(progress, dataset)
                # The floe part ends idle, Spark's Python workers stopped (its memory figure): the
                # loads after it start warm again, as every timed part does.
                if self.args.idle_wait > 0 and self.parts & {"latency", "curves"}:
                    self.finish_warmup(progress, self.start_warmup(progress))
            if "latency" in self.parts:
                self.latency(progress)
            if "curves" in self.parts:
                self.curves(progress)
        # Row streaming warms its own path (its first appends), so a failed file warm-up does not
        # keep it from running.
        if rows is not None:
            self.streaming(progress, rows)
        if "external" in self.parts:
            self.external(progress)
        if "query_memory" in self.parts:
            self.query_memory(progress)
        # After the query part: its API RSS figures would otherwise include what these loads'
        # COUNT(*) polls leave in the API's blob cache.
        if dataset is not None and "spark_cluster" in self.parts:
            self.spark_cluster(progress, dataset)
        if not a.overlap:
            self.apart(progress, apart)

    def apart(self, progress: Progress, parts: tuple[str, ...]) -> None:
        """The selected ones of the parts that leave the Spark job alone."""
        if "notifications" in parts and "notifications" in self.parts:
            self.notifications(progress)
        if "rest" in parts and "rest" in self.parts:
            self.rest(progress)

    def dataset(self, progress: Progress) -> Dataset:
        """The CSV files, generated on first use."""
        a = self.args
        task = progress.add_task("generating the data set", total=None)
        dataset = ensure_dataset(self.data_dir, a.files, a.rows, a.seed)
        progress.remove_task(task)
        progress.console.print(
            f"data set: {a.files} files x {a.rows:,} rows, {dataset.total_bytes / 1e6:.1f} MB "
            f"in {dataset.directory}"
        )
        return dataset

    def limit(self, progress: Progress, dataset: Dataset) -> None:
        """The pyarrow baselines: over the objects on LocalStack (staged first, untimed), then over
        the local files; each ``throughput_repeats`` times, the first run's rows checksummed."""
        enc = self.settings.encryption
        key = enc.resolve_master_key()
        task = progress.add_task("limit: staging the files on LocalStack", total=None)
        bucket = self.phase("limit_stage", progress, self.resources.bucket, "bench-limit-")
        source = None
        if (
            bucket is not None
            and self.phase("limit_stage", progress, stage_dataset, dataset, self.resources.s3, bucket, "in/")
            is not None
        ):
            source = S3Source(bucket, "in/", pyarrow_s3_kwargs(self.settings.aws))
        progress.remove_task(task)
        kinds: list[tuple[str, S3Source | None]] = [("limit_local", None)]
        if source is not None:
            kinds.insert(0, ("limit_s3", source))
        for name, s3 in kinds:
            where = "LocalStack" if s3 is not None else "local files"
            task = progress.add_task(f"limit: pyarrow, 2 processes, {where}", total=None)
            runs: list[dict[str, Any]] = []
            for i in range(self.args.throughput_repeats):
                one = self.phase(
                    name,
                    progress,
                    run_limit,
                    dataset,
                    self.run_dir / "limit",
                    enc.master_key_id,
                    key,
                    s3=s3,
                    checksum=i == 0,
                )
                if one is None:
                    break
                runs.append(one)
            progress.remove_task(task)
            if len(runs) == self.args.throughput_repeats:
                self.record_throughput(progress, name, f"limit ({where})", runs)

    def new_peer(self, dataset: Dataset) -> PeerRun:
        """The Spark peer, not started yet."""
        return PeerRun(
            dataset,
            self.run_dir / "peer",
            driver_memory=self.base.pipeline.driver_memory,
            java_options=self.args.peer_java_options,
            repeats=self.args.throughput_repeats,
        )

    def collect_peer(self, progress: Progress) -> None:
        """Wait for the running Spark peer and record its figures."""
        assert self.peer_run is not None
        self.peer_collected = True
        task = progress.add_task("peer: Spark readStream.csv, availableNow", total=None)
        peer = self.phase("peer", progress, self.peer_run.wait)
        progress.remove_task(task)
        if peer:
            tp = self.result["figures"].setdefault("throughput", {})
            common = {k: peer[k] for k in ("session_start_s", "warmup_s", "master", "java_options")}
            tp["peer"] = {**peer["plain"], **common, "checksum": peer["checksum"]}
            tp["peer_paced"] = {**peer["paced"], **common}
            for name, label in (("peer", "peer"), ("peer_paced", "peer, maxFilesPerTrigger")):
                self.print_throughput(progress, label, tp[name])
            progress.console.print(
                f"  peer session start {peer['session_start_s']:.1f} s, warm-up stream "
                f"{peer['warmup_s']:.1f} s (not timed)"
            )

    def record_throughput(
        self, progress: Progress, name: str, label: str, runs: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Keep ``runs`` of one throughput figure as its median, spread and runs (the first run's
        checksum and breakdown with them), and print it."""
        figure = {**runs[0], **repeated(runs)}
        self.result["figures"].setdefault("throughput", {})[name] = figure
        self.print_throughput(progress, label, figure)
        return figure

    @staticmethod
    def print_throughput(progress: Progress, label: str, figure: dict[str, Any]) -> None:
        s = figure["rows_per_s_spread"]
        progress.console.print(
            f"[green]✓[/] {label}: {figure['rows_per_s']:,.0f} rows/s, median of {len(figure['runs'])} "
            f"(min {s['min']:,.0f}, max {s['max']:,.0f})"
        )

    def launch_stack(self) -> None:
        """Start the Floe processes without waiting for them."""
        self.stack = FloeStack(self.settings, self.console)
        self.launched = time.perf_counter()
        self.stack.launch_all()

    def stack_ready(self, progress: Progress, names: tuple[str, ...]) -> bool:
        """Wait for the named Floe processes; False when one did not become ready."""
        assert self.stack is not None
        if "stack" in self.result["errors"]:
            return False
        task = progress.add_task(f"waiting for floe {', '.join(names)}", total=None)
        ready = self.phase("stack", progress, self.stack.wait_ready, names)
        progress.remove_task(task)
        if ready is None:
            return False
        if names == FLOE_PROCESSES:
            self.result["timings_s"]["stack_ready"] = round(ready - self.launched, 2)
            progress.console.print(
                f"[green]✓[/] floe processes ready in {ready - self.launched:.1f} s (logs: {self.stack.logs})"
            )
        return True

    def start_warmup(self, progress: Progress) -> WarmUp | None:
        """Queue the warm-up files; None when that failed."""
        assert self.stack is not None
        warm = WarmUp(self.stack, self.resources)
        self.warm_task = progress.add_task("warm-up: first micro-batches of the Spark job", total=None)
        if self.phase("warmup", progress, warm.start) is None:
            progress.remove_task(self.warm_task)
            return None
        return warm

    def finish_warmup(self, progress: Progress, warm: WarmUp | None) -> bool:
        """Wait until the warm-up files are loaded; False when they were not."""
        if warm is None:
            return False
        seconds = self.phase("warmup_load", progress, warm.wait)
        progress.remove_task(self.warm_task)
        if seconds is None:
            return False
        progress.console.print(f"[green]✓[/] warm-up: {warm.files} small files loaded in {seconds:.1f} s")
        return True

    def floe(self, progress: Progress, dataset: Dataset) -> None:
        """Floe's pipeline (staged files, resume → queryable) and end-to-end throughput, each
        repeated, with the warm job's memory at idle before and every process's peak meanwhile."""
        assert self.stack is not None
        stack = self.stack
        task = progress.add_task("floe: put → queryable", total=dataset.total_rows)

        def on_progress(rows: int, files: int) -> None:
            progress.update(task, completed=rows)

        sessions = {name: stack.sid(name) for name in FLOE_PROCESSES}
        # The warm job just after a load, before the timed ones: Spark still holds its Python workers.
        self.result["figures"]["memory_after_load"] = idle_samples(sessions["pipeline"])
        repeats = self.args.throughput_repeats
        with MemorySampler(sessions) as sampler:
            for staged, name, label in (
                (True, "floe", "floe pipeline (staged, resume → queryable)"),
                (False, "floe_e2e", "floe end to end (first put → queryable)"),
            ):
                runs: list[dict[str, Any]] = []
                for i in range(repeats):
                    progress.update(task, completed=0, description=f"{label}, run {i + 1} of {repeats}")
                    one = self.phase(
                        name,
                        progress,
                        run_floe,
                        stack,
                        self.resources,
                        dataset,
                        staged=staged,
                        checksum=staged and i == 0,
                        put_threads=self.args.put_threads,
                        on_progress=on_progress,
                    )
                    if one is None:
                        break
                    runs.append(one)
                if len(runs) == repeats:
                    self.record_throughput(progress, name, label, runs)
        progress.remove_task(task)
        self.result["figures"]["memory"] = sampler.result()
        self.result["figures"]["memory_idle"] = self.idle_memory(progress, sessions["pipeline"])

    def idle_memory(self, progress: Progress, sid: int) -> dict[str, Any]:
        """The job's memory at idle: Spark stops the Python workers of a factory that has started
        or finished no task for a minute (its monitor looks every 10 s), so this waits until the
        session holds none, up to ``--idle-wait`` seconds, then samples it."""
        task = progress.add_task(
            "memory at idle: waiting for Spark to stop its idle Python workers", total=None
        )
        started = time.perf_counter()
        deadline = started + self.args.idle_wait
        while forked_workers(sid) and time.perf_counter() < deadline:
            time.sleep(0.5)
        waited = time.perf_counter() - started
        progress.remove_task(task)
        out = idle_samples(sid)
        out["pipeline"].update(waited_s=round(waited, 1), python_workers=forked_workers(sid))
        return out

    def curves(self, progress: Progress) -> None:
        """The scaling curves: each point loaded end to end, then a PNG per curve."""
        assert self.stack is not None
        a = self.args
        points = count_points(a.curve_counts) + size_points(a.curve_sizes)
        task = progress.add_task("curves", total=len(points))

        def on_point(figure: dict[str, Any]) -> None:
            progress.advance(task)
            progress.console.print(
                f"[green]✓[/] curve {figure['curve']}: {figure['files']:,} files of "
                f"{figure['bytes_per_file']:,.0f} bytes, {figure['rows_per_s']:,.0f} rows/s, "
                f"{figure['seconds_per_file'] * 1000:.1f} ms/file, queued → committed p99 "
                f"{figure['queued_to_committed_p99_s']:.2f} s"
            )

        # A full run's plots are bench/results/curve_*.png; another --out's carry its name.
        prefix = "" if a.out.stem == "latest" else f"{a.out.stem}_"
        curves = self.phase(
            "curves",
            progress,
            run_curves,
            self.stack,
            self.resources,
            self.data_dir,
            points,
            a.out.parent,
            on_point,
            prefix,
        )
        progress.remove_task(task)
        if curves:
            self.result["figures"]["curves"] = curves

    def latency(self, progress: Progress) -> None:
        """put → queryable and put → LOADED at the two rates."""
        bars = _Bars(progress, lambda label: f"latency at {rate_text(label)}")

        latency = self.phase(
            "latency",
            progress,
            run_latency,
            self.stack,
            self.resources,
            self.rates,
            rows_per_file=self.args.latency_rows,
            on_progress=bars.update,
        )
        bars.close()
        if latency:
            self.result["figures"]["latency"] = latency
            for label, lat in latency.items():
                q, ld = lat["put_to_queryable"], lat["put_to_loaded"]
                progress.console.print(
                    f"[green]✓[/] latency at {rate_text(label)}: queryable p50 {q['p50_s']:.2f} s "
                    f"p99 {q['p99_s']:.2f} s; loaded p50 {ld['p50_s']:.2f} s p99 {ld['p99_s']:.2f} s"
                )

    def notifications(self, progress: Progress) -> None:
        """The consumer's rate through dedup and enqueue."""
        bars = _Bars(progress, lambda label: f"notifications: {label}")

        notes = self.phase(
            "notifications",
            progress,
            run_notifications,
            self.stack,
            self.resources,
            self.args.notifications,
            on_progress=bars.update,
        )
        bars.close()
        if notes:
            self.result["figures"]["notifications"] = notes
            progress.console.print(
                f"[green]✓[/] notifications: {notes['files_per_s']:,.0f} files/s ({notes['files']} files)"
            )

    def rest(self, progress: Progress) -> None:
        """insertFiles calls per second and their p99 (bench/rest.py)."""
        a = self.args
        task = progress.add_task(f"rest: insertFiles for {a.rest_seconds:g} s", total=None)
        result = self.phase(
            "rest", progress, rest.run, self.settings, a.rest_seconds, a.rest_concurrency, a.rest_files
        )
        progress.remove_task(task)
        if result:
            self.result["figures"]["rest"] = result
            progress.console.print(
                f"[green]✓[/] rest: {result['calls_per_s']:,.0f} calls/s, p99 {result['p99_ms']:.1f} ms"
            )

    def stream_data(self, progress: Progress) -> list[dict[str, Any]]:
        """The rows every streaming throughput run appends (and the limit reads), made up front."""
        a = self.args
        task = progress.add_task(f"streaming: generating {a.stream_rows:,} rows", total=None)
        rows = stream_rows(0, a.stream_rows, a.seed)
        # Millions of dicts held for the whole run would make every full collection of the
        # cyclic GC scan them all, inside the timed appends; a real loader holds a few batches.
        gc.freeze()
        progress.remove_task(task)
        return rows

    def stream_limit(self, progress: Progress, rows: list[dict[str, Any]]) -> None:
        """pyarrow on the streaming rows as NDJSON (bench/streaming.py)."""
        a = self.args
        task = progress.add_task("streaming limit: pyarrow read_json, cast, blob", total=None)
        enc = self.settings.encryption
        key = enc.resolve_master_key()
        limit = self.phase(
            "streaming_limit",
            progress,
            lambda: run_stream_limit(
                ndjson(rows),
                len(rows),
                self.run_dir / "stream-limit",
                enc.master_key_id,
                key,
                a.stream_repeats,
            ),
        )
        progress.remove_task(task)
        if limit:
            self.result["figures"].setdefault("streaming", {})["limit"] = limit
            progress.console.print(
                f"[green]✓[/] streaming limit: {limit['rows_per_s']:,.0f} rows/s "
                f"({limit['ndjson_mb']:.0f} MB of NDJSON, median of {a.stream_repeats})"
            )

    def streaming(self, progress: Progress, rows: list[dict[str, Any]]) -> None:
        """Snowpipe Streaming: warm-up, rows/s with 1 and 8 channels, append→committed latency."""
        if self.args.warmup:
            # Its appends load in Spark's tasks, whose Python workers are not started yet, or were
            # stopped after the parts before left them idle a minute (latency's trickle loads in
            # the driver): the file warm-up starts them, as before the floe part.
            self.finish_warmup(progress, self.start_warmup(progress))
        assert self.stack is not None
        a, stack = self.args, self.stack
        out = self.result["figures"].setdefault("streaming", {})
        partitions = self.settings.pipeline.partitions
        task = progress.add_task("streaming: warm-up append", total=None)
        warm = self.phase("streaming_warmup", progress, warm_up, stack, partitions)
        progress.remove_task(task)
        if warm is None:
            return
        out["warmup_s"] = warm
        progress.console.print(f"[green]✓[/] streaming warm-up: first rows committed in {warm:.1f} s")
        sessions = {name: stack.sid(name) for name in FLOE_PROCESSES}
        meter = CpuMeter(sessions, redis_pid(stack))
        bars = _Bars(progress, lambda label: f"streaming {label} (rows committed)")
        for n in CHANNEL_COUNTS:
            key = channel_label(n)
            tp = self.phase(
                f"streaming_{key}",
                progress,
                run_stream_throughput,
                stack,
                rows,
                n,
                a.stream_repeats,
                partitions,
                meter,
                on_progress=bars.update,
            )
            if tp:
                out.setdefault("throughput", {})[key] = tp
                s = tp["rows_per_s_spread"]
                progress.console.print(
                    f"[green]✓[/] streaming {key.replace('_', ' ')}: {tp['rows_per_s']:,.0f} rows/s "
                    f"(min {s['min']:,.0f}, max {s['max']:,.0f}; {tp['rows']:,} rows)"
                )
        bars.close()
        bars = _Bars(progress, lambda label: f"streaming {label} (appends committed)")
        lat = self.phase(
            "streaming_latency",
            progress,
            run_stream_latency,
            stack,
            rate=a.stream_rate,
            seconds=a.stream_seconds,
            rows_per_append=a.stream_append_rows,
            seed=a.seed,
            on_progress=bars.update,
        )
        bars.close()
        if lat:
            out["latency"] = lat
            q = lat["append_to_committed"]
            progress.console.print(
                f"[green]✓[/] streaming latency at {a.stream_rate:g} rows/s: append→committed "
                f"p50 {q['p50_s']:.2f} s p99 {q['p99_s']:.2f} s ({lat['appends']} appends)"
            )
        self.part_done(progress, "streaming")  # its phases are streaming_*: the part ends here

    def external(self, progress: Progress) -> None:
        """A query calling a trivial remote function against the same query without it."""
        a = self.args
        bars = _Bars(progress, lambda label: f"external: {label}")
        ext = self.phase(
            "external",
            progress,
            run_external,
            self.stack,
            a.external_rows,
            a.external_repeats,
            self.settings.pipeline.partitions,
            on_progress=bars.update,
        )
        bars.close()
        if ext:
            self.result["figures"]["external"] = ext
            fn, base = ext["function"], ext["baseline"]
            progress.console.print(
                f"[green]✓[/] external: {fn['rows_per_s']:,.0f} rows/s with the function, "
                f"{base['rows_per_s']:,.0f} without ({fn['batches_per_s']:,.0f} batches/s of "
                f"{fn['rows_per_batch']:,.0f} rows, up to {fn['max_concurrency']} in flight)"
            )

    def query_memory(self, progress: Progress) -> None:
        """The API's peak RSS and the query times over a 2 GB table (bench/query_memory.py)."""
        a = self.args
        bars = _Bars(progress, lambda label: f"query memory: {label}")
        out = self.phase(
            "query_memory",
            progress,
            run_query_memory,
            self.stack,
            a.query_table_mb * 1024 * 1024,
            a.query_repeats,
            on_progress=bars.update,
        )
        bars.close()
        if out:
            self.result["figures"]["query_memory"] = out
            for name, q in out["queries"].items():
                mark = "[green]✓[/]" if q["met"] else "[yellow]![/]"
                progress.console.print(
                    f"{mark} query memory {name}: API peak RSS {q['peak_rss_mb']:,.0f} MB, "
                    f"{q['median_s']:.2f} s (first {q['first_s']:.2f} s)"
                )

    def spark_cluster(self, progress: Progress, dataset: Dataset) -> None:
        """The load with the Spark job on local[2] and on a 2-worker cluster (bench/scale.py)."""
        assert self.stack is not None
        a = self.args
        switch = JobSwitch(self.stack)
        self.cluster_settings = self.settings  # its pid files live in the run's state dir
        status = progress.add_task("scale: starting", total=None)
        bars: dict[str, Any] = {}

        def on_step(text: str) -> None:
            progress.update(status, description=f"scale: {text}")

        def on_progress(label: str, rows: int, total: int) -> None:
            if label not in bars:
                for task in bars.values():
                    progress.remove_task(task)  # one bar at a time: the run under way
                bars.clear()
                bars[label] = progress.add_task(f"scale: {label}, rows queryable", total=total)
            progress.update(bars[label], completed=rows)

        out = self.phase(
            "spark_cluster",
            progress,
            run_scale,
            switch,
            self.resources,
            dataset,
            self.settings,
            repeats=a.scale_repeats,
            warmup=a.warmup,
            put_threads=a.put_threads,
            on_step=on_step,
            on_progress=on_progress,
        )
        if not switch.is_restored():
            # A failed run may leave the job stopped or on the stopped cluster; the parts after
            # this one need it back on local[2].
            on_step(f"restarting the Spark job on {LOCAL_MASTER}")
            self.phase("spark_cluster_restore", progress, switch.restore)
        for task in (status, *bars.values()):
            progress.remove_task(task)
        if not out:
            return
        self.result["figures"]["scale"] = out
        local, cluster = out["local"], out["cluster"]
        ratio = ratios(self.result["figures"])[SCALE_RATIO]
        progress.console.print(
            f"[green]✓[/] scale: {local['rows_per_s']:,.0f} rows/s on {LOCAL_MASTER}, "
            f"{cluster['rows_per_s']:,.0f} rows/s on {mode_label('cluster')}; cluster / local "
            f"{ratio:.2f} (medians of {out['repeats']} runs each, {out['files']} files)"
        )
        progress.console.print(f"  [yellow]note:[/] {out['note']}")
        bad = [code for code in out["job_exit_codes"] if code not in (0, None)]
        if bad:
            progress.console.print(
                f"  [yellow]the restarted Spark jobs exited with {bad}[/] (logs: {self.stack.logs})"
            )

    def shutdown(self, interrupted: bool) -> None:
        """Stop the Floe processes and remove what the run created (unless --keep)."""
        if self.peer_run is not None:
            self.peer_run.kill()
        if self.stack is not None:
            if interrupted:
                self.stack.kill_all()
            else:
                with self.console.status("stopping the floe processes…"):
                    codes = self.stack.stop()
                self.result["exit_codes"] = codes
                bad = {k: v for k, v in codes.items() if v not in (0, None)}
                if bad:
                    self.console.print(
                        f"[yellow]floe processes exited with {bad}[/] (logs: {self.stack.logs})"
                    )
        if self.cluster_settings is not None:
            # The part stops its cluster itself; this is for a run interrupted while it did.
            try:
                left = stop_cluster(self.cluster_settings)
            except (OSError, ValueError) as exc:
                left = []
                self.console.print(f"[yellow]could not stop the scale part's Spark cluster:[/] {exc}")
            if left:
                self.console.print(f"stopped the scale part's Spark cluster: {', '.join(left)}")
        if self.args.keep:
            self.console.print(
                f"kept: {self.run_dir}, buckets {self.resources.buckets}, prefix {self.settings.redis.prefix}"
            )
            return
        with self.console.status("removing the run's buckets, queues and keys…"):
            problems = self.resources.clean()
        for problem in problems:
            self.console.print(f"[yellow]cleanup:[/] {problem}")
        if self.result["errors"] or interrupted:
            self.console.print(f"state and logs kept for a look: {self.run_dir}")
        else:
            remove_tree(self.run_dir)

    def finish(self) -> int:
        """Ratios, targets, the table and the JSON file; returns the exit code."""
        r = self.result
        r["ratios"] = ratios(r["figures"])
        r["checksums_agree"] = checksums_agree(r["figures"])
        if r["checksums_agree"] is False:
            tp = r["figures"]["throughput"]
            r["errors"]["checksum"] = "the systems loaded different rows: " + "; ".join(
                f"{k} {tp[k]['checksum']}" for k in CHECKSUMMED if tp.get(k, {}).get("checksum")
            )
        r["targets"] = evaluate(r, self.slow_label, self.fast_label)
        labels = [f"{rate:g}_per_s" for rate, _ in self.rates]
        missing = missing_figures(r, self.parts, labels)
        r["missing"] = missing
        self.console.print(render(r, self.slow_label, self.fast_label))
        out: Path = self.args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(r, indent=2, default=str) + "\n")
        self.console.print(f"written: {out}")
        if r["errors"] or missing:
            self.console.print(f"[red]missing figures:[/] {', '.join(missing) or '—'}")
            return 1
        if self.args.fail_on_missed_targets and any(t["met"] is False for t in r["targets"].values()):
            return 2
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench.run``; returns the exit code."""
    args = resolve(build_parser().parse_args(argv))
    # Piped output (make, CI logs) would otherwise be cut to 80 columns and wrap the table.
    probe = Console()
    console = Console(highlight=False, width=None if probe.is_terminal else 140)
    settings = Settings()
    signal.signal(signal.SIGTERM, _terminate)
    wall = time.perf_counter()
    try:
        started_services = ensure_services(settings, console)
    except StackError as exc:
        console.print(f"[red]✗ cannot start LocalStack and Redis:[/] {exc}")
        return 1
    except KeyboardInterrupt:
        console.print(
            "[yellow]interrupted[/] while starting LocalStack and Redis (`make services-down` stops them)"
        )
        return 130
    run = Run(args, settings, console)
    run.started_services = started_services
    # A stack from `make up` keeps running beside the benchmark's own processes; idle as it is, it
    # still takes some CPU, so the result says it was there.
    others = [p.name for p in stack_status(settings, FLOE_PROCESSES) if p.state in ("ready", "starting")]
    run.result["other_floe_processes"] = others
    if others:
        console.print(
            f"[yellow]note:[/] floe {', '.join(others)} of `make up` keep running beside the benchmark"
        )
    # `java -version` and the service probes take a moment; they run beside the parts.
    with ThreadPoolExecutor(1, thread_name_prefix="bench-versions") as pool:
        found = pool.submit(versions, settings)
        interrupted = run_parts(run, console)
        run.result["versions"] = found.result()
    if interrupted:
        return 130
    run.result["timings_s"]["total"] = round(time.perf_counter() - wall, 2)
    return run.finish()


def idle_samples(sid: int) -> dict[str, Any]:
    """``IDLE_SAMPLES`` samples of the job's session, 0.2 s apart."""
    idle = MemorySampler({"pipeline": sid})
    for _ in range(IDLE_SAMPLES):
        idle.sample()
        time.sleep(0.2)
    return idle.result()


def run_parts(run: Run, console: Console) -> bool:
    """Run the parts with a progress display, then stop and clean up; True when interrupted."""
    interrupted = False
    try:
        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=True, refresh_per_second=4) as progress:
            run.execute(progress)
    except KeyboardInterrupt:
        interrupted = True
        console.print("[yellow]interrupted[/]; stopping what the benchmark started")
    finally:
        # A second Ctrl-C must not leave processes or services behind half-stopped.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            run.shutdown(interrupted)
        finally:
            if run.started_services:
                stop(run.started_services, run.base, console)
    return interrupted


if __name__ == "__main__":
    sys.exit(main())
