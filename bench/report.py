"""The benchmark's result: what machine and versions, the figures, their ratios and targets, and the
table printed at the end. Everything here works on the plain result dictionary (the JSON file)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import subprocess
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from rich.table import Table

from bench.query_memory import RSS_TARGET_MB, queries
from floe.settings import Settings


@dataclass(frozen=True)
class Target:
    """One target of issue 5 (or 13): a figure, how it compares and the bound."""

    key: str
    label: str
    path: tuple[str, ...]
    op: str
    bound: float

    def check(self, value: float) -> bool:
        """Whether ``value`` meets the target."""
        if self.op == ">=":
            return value >= self.bound
        return value < self.bound if self.op == "<" else value <= self.bound


def rate_text(label: str) -> str:
    """'1_per_s' -> '1 file/s', '20_per_s' -> '20 files/s'."""
    rate = label.removesuffix("_per_s")
    return f"{rate} file/s" if rate == "1" else f"{rate} files/s"


STREAM_TP = ("figures", "streaming", "throughput")
STREAM_LAT = ("figures", "streaming", "latency", "append_to_committed")
STREAM_CHANNEL_KEYS = ("1_channel", "8_channels")
"""The streaming throughput figures (bench.streaming.channel_label of CHANNEL_COUNTS)."""
EXTERNAL = ("figures", "external")
EXTERNAL_RATIO = "external_function_over_baseline"
"""Rows/s of the query with the remote function over rows/s of the same query without it."""
SCALE = ("figures", "scale")
SCALE_RATIO = "scale_cluster_over_local"
"""Median rows/s of the load with the Spark job on the cluster over its median on local[2]."""
QUERY_NAMES: tuple[str, ...] = tuple(queries("t"))
"""The query_memory part's queries, by figure name."""


def targets(slow_label: str) -> list[Target]:
    """The targets (2-core machine), with the latency ones on the slow rate's figures."""
    lat = ("figures", "latency", slow_label, "put_to_queryable")
    slow = rate_text(slow_label)
    return [
        Target(
            "throughput_floe_over_limit", "Throughput Floe / limit", ("ratios", "floe_over_limit"), ">=", 0.5
        ),
        Target(
            "throughput_floe_over_peer", "Throughput Floe / peer", ("ratios", "floe_over_peer"), ">=", 1.5
        ),
        Target(
            "latency_queryable_p50_s",
            f"Latency at {slow} put→queryable p50 (s)",
            (*lat, "p50_s"),
            "<=",
            2.0,
        ),
        Target(
            "latency_queryable_p99_s",
            f"Latency at {slow} put→queryable p99 (s)",
            (*lat, "p99_s"),
            "<=",
            5.0,
        ),
        Target(
            "notifications_files_per_s",
            "Notifications (files/s)",
            ("figures", "notifications", "files_per_s"),
            ">=",
            2000.0,
        ),
        Target(
            "rest_calls_per_s", "REST insertFiles (calls/s)", ("figures", "rest", "calls_per_s"), ">=", 300.0
        ),
        Target("rest_p99_ms", "REST insertFiles p99 (ms)", ("figures", "rest", "p99_ms"), "<=", 100.0),
        # Issue 13: the table's rate is the 8-channel figure (one channel is one Spark task).
        Target(
            "streaming_rows_per_s",
            "Streaming rows/s per table (8 channels)",
            (*STREAM_TP, "8_channels", "rows_per_s"),
            ">=",
            200_000.0,
        ),
        Target(
            "streaming_latency_p50_s",
            "Streaming append→committed p50 (s)",
            (*STREAM_LAT, "p50_s"),
            "<=",
            1.5,
        ),
        Target(
            "streaming_latency_p99_s",
            "Streaming append→committed p99 (s)",
            (*STREAM_LAT, "p99_s"),
            "<=",
            3.0,
        ),
        # Issue 15: the API's peak RSS over every query of the 2 GB table.
        Target(
            "query_peak_rss_mb",
            "API peak RSS over the 2 GB table's queries (MB)",
            ("figures", "query_memory", "peak_rss_mb"),
            "<",
            RSS_TARGET_MB,
        ),
    ]


def dig(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    """The value at ``path``, or None when any step is missing."""
    node: Any = data
    for step in path:
        if not isinstance(node, dict) or step not in node:
            return None
        node = node[step]
    return node


def ratios(figures: dict[str, Any]) -> dict[str, float | None]:
    """Floe's throughput over the limit's and over the peer's, each streaming throughput over the
    streaming limit, the external-function query's rows/s over its baseline's, and Floe's throughput
    with the Spark job on the cluster over on local[2] (None when one side is missing)."""
    floe = dig(figures, ("throughput", "floe", "rows_per_s"))
    limit = dig(figures, ("throughput", "limit", "rows_per_s"))
    peer = dig(figures, ("throughput", "peer", "rows_per_s"))
    out: dict[str, float | None] = {
        "floe_over_limit": floe / limit if floe and limit else None,
        "floe_over_peer": floe / peer if floe and peer else None,
    }
    stream_limit = dig(figures, ("streaming", "limit", "rows_per_s"))
    for key in STREAM_CHANNEL_KEYS:
        rate = dig(figures, ("streaming", "throughput", key, "rows_per_s"))
        out[f"streaming_{key}_over_limit"] = rate / stream_limit if rate and stream_limit else None
    fn = dig(figures, ("external", "function", "rows_per_s"))
    base = dig(figures, ("external", "baseline", "rows_per_s"))
    out[EXTERNAL_RATIO] = fn / base if fn and base else None
    cluster = dig(figures, ("scale", "cluster", "rows_per_s"))
    local = dig(figures, ("scale", "local", "rows_per_s"))
    out[SCALE_RATIO] = cluster / local if cluster and local else None
    return out


def evaluate(result: dict[str, Any], slow_label: str) -> dict[str, dict[str, Any]]:
    """Each target with its value and whether it is met (None: not measured in this run)."""
    out: dict[str, dict[str, Any]] = {}
    for t in targets(slow_label):
        value = dig(result, t.path)
        out[t.key] = {
            "label": t.label,
            "target": f"{t.op} {t.bound:g}",
            "value": value,
            "met": None if value is None else t.check(float(value)),
        }
    return out


def missing_figures(result: dict[str, Any], parts: set[str], latency_labels: list[str]) -> list[str]:
    """The figures the selected parts should have produced but did not."""
    wanted: list[tuple[str, ...]] = []
    if "floe" in parts:
        wanted += [("figures", "throughput", "floe", "rows_per_s")]
        wanted += [("figures", "memory", name, "peak_rss_mb") for name in ("api", "consumer", "pipeline")]
    if "limit" in parts:
        wanted.append(("figures", "throughput", "limit", "rows_per_s"))
    if "peer" in parts:
        wanted.append(("figures", "throughput", "peer", "rows_per_s"))
    if {"floe", "limit"} <= parts:
        wanted.append(("ratios", "floe_over_limit"))
    if {"floe", "peer"} <= parts:
        wanted.append(("ratios", "floe_over_peer"))
    if "latency" in parts:
        for label in latency_labels:
            for what in ("put_to_queryable", "put_to_loaded"):
                wanted += [
                    ("figures", "latency", label, what, "p50_s"),
                    ("figures", "latency", label, what, "p99_s"),
                ]
    if "notifications" in parts:
        wanted.append(("figures", "notifications", "files_per_s"))
    if "rest" in parts:
        wanted += [("figures", "rest", "calls_per_s"), ("figures", "rest", "p99_ms")]
    if "streaming" in parts:
        wanted.append(("figures", "streaming", "limit", "rows_per_s"))
        for key in STREAM_CHANNEL_KEYS:
            wanted += [(*STREAM_TP, key, "rows_per_s"), ("ratios", f"streaming_{key}_over_limit")]
        wanted += [(*STREAM_LAT, "p50_s"), (*STREAM_LAT, "p99_s")]
    if "external" in parts:
        wanted += [(*EXTERNAL, "baseline", "rows_per_s"), ("ratios", EXTERNAL_RATIO)]
        wanted += [
            (*EXTERNAL, "function", what)
            for what in ("rows_per_s", "batches_per_s", "rows_per_batch", "max_concurrency")
        ]
    wanted += _scale_wanted(parts)
    return [".".join(p) for p in wanted if not isinstance(dig(result, p), int | float)]


def _scale_wanted(parts: set[str]) -> list[tuple[str, ...]]:
    """The figures of issue 15's parts (spark_cluster, query_memory) that ``parts`` should produce."""
    wanted: list[tuple[str, ...]] = []
    if "spark_cluster" in parts:
        wanted += [(*SCALE, mode, "rows_per_s") for mode in ("local", "cluster")]
        wanted.append(("ratios", SCALE_RATIO))
    if "query_memory" in parts:
        for name in QUERY_NAMES:
            q = ("figures", "query_memory", "queries", name)
            wanted += [(*q, "median_s"), (*q, "peak_rss_mb")]
    return wanted


# ---------------------------------------------------------------------------------- machine, versions


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model, Python and platform of this host."""
    memory_gb = None
    cpu = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "memory_gb": memory_gb,
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _dist(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _localstack_version(settings: Settings) -> str | None:
    url = f"{settings.aws.endpoint_url.rstrip('/')}/_localstack/health"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with contextlib.suppress(OSError, ValueError), opener.open(url, timeout=2) as resp:
        return str(json.loads(resp.read()).get("version"))
    return None


def _redis_version(settings: Settings) -> str | None:
    with contextlib.suppress(redis.RedisError, OSError):
        info = settings.redis.client(socket_timeout=2).info("server")
        return str(info.get("redis_version"))
    return None


def _java_version() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20)
        lines = (done.stderr or done.stdout).strip().splitlines()
        return lines[0] if lines else None
    return None


def versions(settings: Settings) -> dict[str, str | None]:
    """Versions of Floe and of what it runs on."""
    return {
        "floe": _dist("floe"),
        "pyspark": _dist("pyspark"),
        "pyarrow": _dist("pyarrow"),
        "duckdb": _dist("duckdb"),
        "sqlglot": _dist("sqlglot"),
        "boto3": _dist("boto3"),
        "redis_py": _dist("redis"),
        "localstack": _localstack_version(settings),
        "redis_server": _redis_version(settings),
        "java": _java_version(),
    }


# ------------------------------------------------------------------------------------------ table


def _num(value: Any, fmt: str = ",.0f", unit: str = "") -> str:
    if not isinstance(value, int | float):
        return "—"
    return f"{value:{fmt}}{unit}"


def _verdict(met: bool | None) -> str:
    return {True: "[green]met[/]", False: "[red]missed[/]", None: ""}[met]


def table_rows(result: dict[str, Any], slow_label: str) -> list[tuple[str, str, str, str]]:
    """(figure, value, target, verdict) rows of the summary table, from a result."""
    f: dict[str, Any] = result.get("figures", {})
    checks = evaluate(result, slow_label)
    rows: list[tuple[str, str, str, str]] = []

    def target_row(label: str, key: str, fmt: Callable[[Any], str]) -> None:
        c = checks[key]
        rows.append((label, fmt(c["value"]), c["target"], _verdict(c["met"])))

    tp = f.get("throughput", {})
    if "floe" in tp:
        fl = tp["floe"]
        rows.append(
            (
                "Throughput Floe end to end",
                f"{_num(fl['rows_per_s'])} rows/s",
                f"{fl['files']} files, {fl['seconds']:.1f} s",
                "",
            )
        )
    if "limit" in tp:
        rows.append(
            ("Throughput limit (pyarrow, 2 processes)", f"{_num(tp['limit']['rows_per_s'])} rows/s", "", "")
        )
    if "peer" in tp:
        pe = tp["peer"]
        rows.append(
            (
                "Throughput peer (Spark readStream.csv)",
                f"{_num(pe['rows_per_s'])} rows/s",
                f"+{pe['session_start_s']:.1f} s session start",
                "",
            )
        )
    r = result.get("ratios", {})
    if r.get("floe_over_limit") is not None:
        target_row("  Floe / limit", "throughput_floe_over_limit", lambda v: _num(v, ".2f"))
    if r.get("floe_over_peer") is not None:
        target_row("  Floe / peer", "throughput_floe_over_peer", lambda v: _num(v, ".2f"))
    for label, lat in f.get("latency", {}).items():
        for what, name in (("put_to_queryable", "queryable"), ("put_to_loaded", "COPY_HISTORY LOADED")):
            s = lat.get(what) or {}
            rate = rate_text(label)
            if label == slow_label and what == "put_to_queryable":
                target_row(
                    f"Latency at {rate} put→{name} p50",
                    "latency_queryable_p50_s",
                    lambda v: _num(v, ".2f", " s"),
                )
                target_row(
                    f"Latency at {rate} put→{name} p99",
                    "latency_queryable_p99_s",
                    lambda v: _num(v, ".2f", " s"),
                )
            else:
                rows.append(
                    (
                        f"Latency at {rate} put→{name} p50 / p99",
                        f"{_num(s.get('p50_s'), '.2f')} / {_num(s.get('p99_s'), '.2f')} s",
                        f"{lat['samples']} files",
                        "",
                    )
                )
    if "notifications" in f:
        target_row(
            "Notifications through dedup + enqueue",
            "notifications_files_per_s",
            lambda v: _num(v, ",.0f", " files/s"),
        )
        n = f["notifications"]
        if n.get("sqs_ceiling_files_per_s"):
            rows.append(
                (
                    "  SQS receive + delete alone (same messages and pollers)",
                    _num(n["sqs_ceiling_files_per_s"], ",.0f", " files/s"),
                    f"consumer / ceiling {_num(n.get('consumer_over_sqs_ceiling'), '.2f')}",
                    "",
                )
            )
    if "rest" in f:
        target_row(
            "REST insertFiles (100 files each)", "rest_calls_per_s", lambda v: _num(v, ",.0f", " calls/s")
        )
        target_row("REST insertFiles p99", "rest_p99_ms", lambda v: _num(v, ".1f", " ms"))
    rows += _streaming_rows(result, checks)
    rows += _external_rows(result)
    rows += _scale_rows(result)
    for name, mem in f.get("memory", {}).items():
        rows.append(
            (
                f"Memory peak: floe {name}",
                f"{_num(mem['peak_rss_mb'], ',.0f')} MB RSS",
                f"PSS {_num(mem['peak_pss_mb'], ',.0f')} MB, {mem['max_processes']} processes",
                "",
            )
        )
    for phase, message in result.get("errors", {}).items():
        rows.append((f"[red]{phase} failed[/]", message.splitlines()[0][:60], "", "[red]error[/]"))
    return rows


def _streaming_rows(
    result: dict[str, Any], checks: dict[str, dict[str, Any]]
) -> list[tuple[str, str, str, str]]:
    """The streaming part's rows of the summary table."""
    st: dict[str, Any] = result.get("figures", {}).get("streaming", {})
    r = result.get("ratios", {})
    rows: list[tuple[str, str, str, str]] = []

    def target_row(label: str, key: str, fmt: Callable[[Any], str], note: str = "") -> None:
        c = checks[key]
        rows.append((label, fmt(c["value"]), f"{c['target']}{note}", _verdict(c["met"])))

    for key in STREAM_CHANNEL_KEYS:
        fig = st.get("throughput", {}).get(key)
        if fig is None:
            continue
        spread = fig.get("rows_per_s_spread", {})
        runs = len(fig.get("runs", []))
        span = f"min {_num(spread.get('min'))}, max {_num(spread.get('max'))} ({runs} runs)"
        name = f"Streaming {key.replace('_', ' ')} into one table"
        if key == "8_channels":
            target_row(name, "streaming_rows_per_s", lambda v: _num(v, ",.0f", " rows/s"), f"; {span}")
        else:
            rows.append((name, f"{_num(fig['rows_per_s'])} rows/s", span, ""))
        ratio = r.get(f"streaming_{key}_over_limit")
        if ratio is not None:
            rows.append((f"  {key.replace('_', ' ')} / streaming limit", _num(ratio, ".2f"), "", ""))
    if "limit" in st:
        lim = st["limit"]
        rows.append(
            (
                "Streaming limit (pyarrow read_json, cast, blob)",
                f"{_num(lim['rows_per_s'])} rows/s",
                f"{_num(lim.get('ndjson_mb'), '.0f')} MB of NDJSON, 1 process",
                "",
            )
        )
    lat = st.get("latency")
    if lat is not None:
        rate = f"{_num(lat.get('rate_rows_per_s'), 'g')} rows/s"
        bound = f"; +≤ {_num(lat.get('poll_interval_s'), '.2f')} s poll"
        for p in ("p50", "p99"):
            target_row(
                f"Streaming append→committed {p} at {rate}",
                f"streaming_latency_{p}_s",
                lambda v: _num(v, ".2f", " s"),
                bound,
            )
    return rows


def _external_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The external-function part's rows of the summary table (issue 14 sets no target)."""
    ext: dict[str, Any] | None = result.get("figures", {}).get("external")
    if ext is None:
        return []
    fn, base = ext.get("function", {}), ext.get("baseline", {})
    runs = f"median of {len(fn.get('runs', []))}"
    api = dig(fn, ("cpu_s", "api"))
    return [
        (
            f"External function: SUM(bench_echo(id)), {_num(ext.get('rows'))} rows",
            f"{_num(fn.get('rows_per_s'))} rows/s",
            f"{runs}; API CPU {_num(api, '.2f', ' s')}",
            "",
        ),
        ("  baseline: SUM(id), same rows", f"{_num(base.get('rows_per_s'))} rows/s", runs, ""),
        ("  function / baseline", _num(result.get("ratios", {}).get(EXTERNAL_RATIO), ".4f"), "", ""),
        (
            "  remote batches",
            f"{_num(fn.get('batches_per_s'))} batches/s",
            f"{_num(fn.get('rows_per_batch'))} rows each, up to {_num(fn.get('max_concurrency'))} in flight",
            "",
        ),
    ]


SCALE_NOTE = "one machine: this is the cluster's overhead; a gain needs more hosts"


def _scale_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Issue 15's figures under one heading: the load with the Spark job on local[2] and on a
    standalone cluster on this machine, and the queries over the 2 GB table with the API's peak RSS."""
    f: dict[str, Any] = result.get("figures", {})
    sc: dict[str, Any] | None = f.get("scale")
    qm: dict[str, Any] | None = f.get("query_memory")
    if sc is None and qm is None:
        return []
    rows: list[tuple[str, str, str, str]] = [("[bold]Scale[/]", "", "", "")]
    if sc is not None:
        cl = sc.get("cluster", {})
        names = {
            "local": f"Spark job on {sc.get('baseline', 'local[2]')} (baseline)",
            "cluster": f"Spark job on a standalone cluster, {cl.get('workers', '?')} workers of "
            f"{cl.get('cores_per_worker', '?')} core, this machine",
        }
        for mode, name in names.items():
            fig = sc.get(mode, {})
            s = fig.get("rows_per_s_spread", {})
            runs = len(fig.get("runs", []))
            rows.append(
                (
                    f"Throughput Floe end to end, {name}",
                    f"{_num(fig.get('rows_per_s'))} rows/s",
                    f"median of {runs}; min {_num(s.get('min'))}, max {_num(s.get('max'))}",
                    "",
                )
            )
        ratio = result.get("ratios", {}).get(SCALE_RATIO)
        rows.append(("  cluster / local", _num(ratio, ".2f"), SCALE_NOTE, ""))
    if qm is not None:
        t = qm.get("table", {})
        rows.append(
            (
                f"Queries over a {_num(t.get('csv_mb'))} MB table ({_num(t.get('rows'))} rows, "
                f"{_num(t.get('blobs'))} blobs): median time",
                "",
                f"API RSS before {_num(qm.get('api_rss_before_mb'))} MB",
                "",
            )
        )
        bound = f"API peak RSS < {_num(qm.get('rss_target_mb'))} MB"
        for name, q in qm.get("queries", {}).items():
            rows.append(
                (
                    f"  {name}",
                    f"{_num(q.get('median_s'), '.2f', ' s')}, API peak {_num(q.get('peak_rss_mb'))} MB",
                    f"first {_num(q.get('first_s'), '.2f', ' s')}; {bound}",
                    _verdict(q.get("met")),
                )
            )
    return rows


def render(result: dict[str, Any], slow_label: str) -> Table:
    """The summary table."""
    table = Table(title=f"Floe benchmark ({result.get('mode', '?')}, {result['machine']['cores']} cores)")
    for column in ("figure", "value", "target / notes", ""):
        table.add_column(column)
    for row in table_rows(result, slow_label):
        table.add_row(*row)
    return table
