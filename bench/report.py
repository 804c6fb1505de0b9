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


THROUGHPUT_KINDS: tuple[tuple[str, str], ...] = (
    ("floe", "Throughput Floe pipeline (staged, resume → queryable)"),
    ("floe_e2e", "Throughput Floe end to end (first put → queryable)"),
    ("limit_s3", "Throughput limit: pyarrow, 2 processes, LocalStack"),
    ("limit_local", "Throughput limit: pyarrow, 2 processes, local files"),
    ("peer", "Throughput peer: Spark readStream.csv, warm"),
    ("peer_paced", "Throughput peer with maxFilesPerTrigger"),
)
"""The throughput figures (``figures.throughput.<key>``), each a median of repeated runs."""
THROUGHPUT_RATIOS: tuple[tuple[str, str, str], ...] = (
    ("floe_over_limit_s3", "floe", "limit_s3"),
    ("floe_over_limit_local", "floe", "limit_local"),
    ("floe_over_peer", "floe", "peer"),
    ("floe_over_peer_paced", "floe", "peer_paced"),
)
"""Ratio name, numerator and denominator: Floe's pipeline figure over each baseline."""
CHECKSUMMED = ("floe", "limit_s3", "limit_local", "peer")
"""The throughput figures whose first run's rows are checksummed and compared."""


def targets(slow_label: str, fast_label: str = "20_per_s") -> list[Target]:
    """The targets of issue 18 on this 2-core machine (13's and 15's where 18 sets none), the
    latency ones on each rate's figures."""
    out = [
        Target(
            "throughput_floe_over_limit",
            "Throughput Floe / limit (LocalStack reads)",
            ("ratios", "floe_over_limit_s3"),
            ">=",
            0.6,
        ),
        Target(
            "throughput_floe_over_peer", "Throughput Floe / peer", ("ratios", "floe_over_peer"), ">=", 2.0
        ),
    ]
    for label, key, p50, p99 in ((slow_label, "", 0.5, 1.0), (fast_label, "_fast", 1.0, 2.0)):
        lat = ("figures", "latency", label, "put_to_queryable")
        rate = rate_text(label)
        out += [
            Target(
                f"latency{key}_queryable_p50_s",
                f"Latency at {rate} put→queryable p50 (s)",
                (*lat, "p50_s"),
                "<=",
                p50,
            ),
            Target(
                f"latency{key}_queryable_p99_s",
                f"Latency at {rate} put→queryable p99 (s)",
                (*lat, "p99_s"),
                "<=",
                p99,
            ),
        ]
    return [
        *out,
        Target(
            "notifications_files_per_s",
            "Notifications (files/s)",
            ("figures", "notifications", "files_per_s"),
            ">=",
            2000.0,
        ),
        Target(
            "rest_calls_per_s", "REST insertFiles (calls/s)", ("figures", "rest", "calls_per_s"), ">=", 600.0
        ),
        Target("rest_p99_ms", "REST insertFiles p99 (ms)", ("figures", "rest", "p99_ms"), "<=", 100.0),
        Target(
            "pipeline_idle_rss_mb",
            "Spark job at idle, RSS of its processes (MB)",
            ("figures", "memory_idle", "pipeline", "peak_rss_mb"),
            "<=",
            1200.0,
        ),
        # Issue 13: the table's rate is the 8-channel figure (one channel is one Spark task).
        Target(
            "streaming_rows_per_s",
            "Streaming rows/s per table (8 channels)",
            (*STREAM_TP, "8_channels", "rows_per_s"),
            ">=",
            300_000.0,
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
    """Floe's pipeline throughput over each baseline's (THROUGHPUT_RATIOS), each streaming throughput over the
    streaming limit, the external-function query's rows/s over its baseline's, and Floe's throughput
    with the Spark job on the cluster over on local[2] (None when one side is missing)."""
    out: dict[str, float | None] = {}
    for name, top, bottom in THROUGHPUT_RATIOS:
        a = dig(figures, ("throughput", top, "rows_per_s"))
        b = dig(figures, ("throughput", bottom, "rows_per_s"))
        out[name] = a / b if a and b else None
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


def checksums_agree(figures: dict[str, Any]) -> bool | None:
    """Whether the checksummed throughput figures loaded the same rows (None: fewer than two)."""
    taken = [dig(figures, ("throughput", k, "checksum")) for k in CHECKSUMMED]
    taken = [c for c in taken if c is not None]
    return None if len(taken) < 2 else all(c == taken[0] for c in taken[1:])


def evaluate(
    result: dict[str, Any], slow_label: str, fast_label: str = "20_per_s"
) -> dict[str, dict[str, Any]]:
    """Each target with its value and whether it is met (None: not measured in this run)."""
    out: dict[str, dict[str, Any]] = {}
    for t in targets(slow_label, fast_label):
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
    kinds = {
        "floe": ("floe", "floe_e2e"),
        "limit": ("limit_s3", "limit_local"),
        "peer": ("peer", "peer_paced"),
    }
    for part, names in kinds.items():
        if part in parts:
            wanted += [("figures", "throughput", name, "rows_per_s") for name in names]
    if "floe" in parts:
        wanted += [("figures", "memory", name, "peak_rss_mb") for name in ("api", "consumer", "pipeline")]
        wanted.append(("figures", "memory_idle", "pipeline", "peak_rss_mb"))
    for name, _, bottom in THROUGHPUT_RATIOS:
        if {"floe", bottom.split("_")[0]} <= parts:
            wanted.append(("ratios", name))
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
    if "curves" in parts:
        wanted += [("figures", "curves", c, "growth") for c in ("files", "size")]
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


def table_rows(
    result: dict[str, Any], slow_label: str, fast_label: str = "20_per_s"
) -> list[tuple[str, str, str, str]]:
    """(figure, value, target, verdict) rows of the summary table, from a result."""
    f: dict[str, Any] = result.get("figures", {})
    checks = evaluate(result, slow_label, fast_label)
    rows: list[tuple[str, str, str, str]] = []

    def target_row(label: str, key: str, fmt: Callable[[Any], str]) -> None:
        c = checks[key]
        rows.append((label, fmt(c["value"]), c["target"], _verdict(c["met"])))

    rows += _throughput_rows(result, checks)
    for label, lat in f.get("latency", {}).items():
        for what, name in (("put_to_queryable", "queryable"), ("put_to_loaded", "COPY_HISTORY LOADED")):
            s = lat.get(what) or {}
            rate = rate_text(label)
            key = {slow_label: "", fast_label: "_fast"}.get(label)
            if key is not None and what == "put_to_queryable":
                for p in ("p50", "p99"):
                    target_row(
                        f"Latency at {rate} put→{name} {p}",
                        f"latency{key}_queryable_{p}_s",
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
    rows += _curve_rows(result)
    rows += _streaming_rows(result, checks)
    rows += _external_rows(result)
    rows += _scale_rows(result)
    if "memory_idle" in f and "pipeline" in f["memory_idle"]:
        idle = f["memory_idle"]["pipeline"]
        waited = f" after {idle['waited_s']:.0f} s" if "waited_s" in idle else ""
        target_row(
            f"Memory at idle: floe pipeline ({idle['max_processes']} processes{waited})",
            "pipeline_idle_rss_mb",
            lambda v: _num(v, ",.0f", " MB RSS"),
        )
    if "memory_after_load" in f and "pipeline" in f["memory_after_load"]:
        loaded = f["memory_after_load"]["pipeline"]
        rows.append(
            (
                f"Memory just after a load: floe pipeline ({loaded['max_processes']} processes)",
                f"{_num(loaded['peak_rss_mb'], ',.0f')} MB RSS",
                f"PSS {_num(loaded['peak_pss_mb'], ',.0f')} MB; Spark keeps its Python workers a minute",
                "",
            )
        )
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


def _throughput_rows(
    result: dict[str, Any], checks: dict[str, dict[str, Any]]
) -> list[tuple[str, str, str, str]]:
    """The throughput figures with their spread, the ratios and whether the checksums agree."""
    f: dict[str, Any] = result.get("figures", {})
    rows: list[tuple[str, str, str, str]] = []

    def target_row(label: str, key: str, fmt: Callable[[Any], str]) -> None:
        c = checks[key]
        rows.append((label, fmt(c["value"]), c["target"], _verdict(c["met"])))

    tp = f.get("throughput", {})
    for key, label in THROUGHPUT_KINDS:
        fig = tp.get(key)
        if fig is None:
            continue
        s = fig.get("rows_per_s_spread") or {}
        span = f"min {_num(s.get('min'))}, max {_num(s.get('max'))} ({len(fig.get('runs', []))} runs)"
        rows.append((label, f"{_num(fig['rows_per_s'])} rows/s", span, ""))
    r = result.get("ratios", {})
    if r.get("floe_over_limit_s3") is not None:
        target_row("  Floe / limit (LocalStack)", "throughput_floe_over_limit", lambda v: _num(v, ".2f"))
    if r.get("floe_over_limit_local") is not None:
        rows.append(("  Floe / limit (local files)", _num(r["floe_over_limit_local"], ".2f"), "", ""))
    if r.get("floe_over_peer") is not None:
        target_row("  Floe / peer", "throughput_floe_over_peer", lambda v: _num(v, ".2f"))
    if r.get("floe_over_peer_paced") is not None:
        rows.append(("  Floe / peer with maxFilesPerTrigger", _num(r["floe_over_peer_paced"], ".2f"), "", ""))
    agree = checksums_agree(f)
    if agree is not None:
        named = ", ".join(k for k in CHECKSUMMED if dig(tp, (k, "checksum")) is not None)
        rows.append(
            (
                "  Per-column checksums of the loaded rows",
                "[green]equal[/]" if agree else "[red]differ[/]",
                named,
                "" if agree else "[red]error[/]",
            )
        )
    return rows


def _curve_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The scaling curves' points (issue 18 sets no target: they show how cost grows)."""
    rows: list[tuple[str, str, str, str]] = []
    for curve, data in result.get("figures", {}).get("curves", {}).items():
        for p in data.get("points", []):
            rows.append(
                (
                    f"Curve {curve}: {p['files']:,} files of {_num(p['bytes_per_file'], ',.0f')} B",
                    f"{_num(p['rows_per_s'])} rows/s",
                    f"{p['seconds_per_file'] * 1000:.1f} ms/file; queued → committed p99 "
                    f"{p['queued_to_committed_p99_s']:.2f} s",
                    "",
                )
            )
        unit = str(data.get("growth_of", "")).replace("_", " ").replace("mb", "MB")
        rows.append(
            (
                f"  {curve} curve: {unit}, last point / first",
                _num(data.get("growth"), ".3g"),
                str(data.get("png", "")),
                "",
            )
        )
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


def render(result: dict[str, Any], slow_label: str, fast_label: str = "20_per_s") -> Table:
    """The summary table."""
    table = Table(title=f"Floe benchmark ({result.get('mode', '?')}, {result['machine']['cores']} cores)")
    for column in ("figure", "value", "target / notes", ""):
        table.add_column(column)
    for row in table_rows(result, slow_label, fast_label):
        table.add_row(*row)
    return table
