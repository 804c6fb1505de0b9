"""How Floe's cost grows with its work: throughput and per-file latency against the number of files
and against the size of each file (issue 18's scaling curves), each plotted to a PNG.

Every point loads its own data set end to end (the puts, the notifications, the Spark job, the
commits) into a fresh stage bucket, table and pipe on the warm stack, with ``run_floe``. Its
latency is Floe's own per file: from the moment dedup queued the file to its commit (the file
states in Redis), so a backlog that grows with the number of files shows in it. A step whose cost
grew faster than the work (a manifest or history read once per file, say) makes the cost per unit
of work rise along the curve: ``growth`` is the last point's over the first's, in seconds per file
on the files curve and seconds per MB on the size curve (``GROWTH_OF``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.dataset import Dataset, csv_text, ensure_dataset
from bench.harness import FloeStack, Resources
from bench.latency import percentile
from bench.throughput import run_floe
from floe.history import read_states
from floe.keys import Keys

FILE_COUNTS: tuple[int, ...] = (100, 1_000, 10_000)
"""The files-curve's points: that many files of about ``COUNT_FILE_BYTES`` each."""
COUNT_FILE_BYTES = 1_000
FILE_SIZES: tuple[int, ...] = (1_000, 100_000, 1_000_000, 10_000_000, 100_000_000)
"""The size-curve's points, bytes per file."""
SIZE_POINT_BYTES = 400_000_000
"""Bytes a size point loads at most: so many files of its size, between 2 and ``SIZE_POINT_FILES``."""
SIZE_POINT_FILES = 50
GROWTH_OF = {"files": "seconds_per_file", "size": "seconds_per_mb"}
"""Each curve's unit of work, whose cost ``growth`` compares from the first point to the last."""


@dataclass(frozen=True)
class Point:
    """One point of a curve: ``files`` files of ``rows`` rows each."""

    curve: str
    files: int
    rows: int
    bytes_per_file: int
    """The size asked for (the files come out within a few per cent of it)."""


def row_bytes() -> float:
    """The data set's mean bytes per CSV row, from a sample file."""
    sample = csv_text(0, 1_000)
    return len(sample.encode()) / 1_000


def count_points(counts: Sequence[int], file_bytes: int = COUNT_FILE_BYTES) -> list[Point]:
    """The files-curve: each count of files of ``file_bytes``."""
    rows = max(1, round(file_bytes / row_bytes()))
    return [Point("files", n, rows, file_bytes) for n in counts]


def size_points(
    sizes: Sequence[int], budget_bytes: int = SIZE_POINT_BYTES, max_files: int = SIZE_POINT_FILES
) -> list[Point]:
    """The size-curve: files of each size, as many as ``budget_bytes`` allows (2 to ``max_files``)."""
    per_row = row_bytes()
    return [
        Point("size", min(max_files, max(2, budget_bytes // size)), max(1, round(size / per_row)), size)
        for size in sizes
    ]


def run_point(stack: FloeStack, resources: Resources, dataset: Dataset, point: Point) -> dict[str, Any]:
    """Load one point's files end to end; its figures."""
    tp = run_floe(stack, resources, dataset, timeout_s=max(300.0, point.files * 0.2))
    s = stack.settings
    loaded = read_states(s.redis.client(), Keys(s.redis.prefix), tp["pipe_id"])
    waits = [(f.loaded_ms or 0) - f.received_ms for f in loaded]
    return {
        "curve": point.curve,
        "files": point.files,
        "rows_per_file": point.rows,
        "bytes_per_file": dataset.total_bytes / point.files,
        "rows": tp["rows"],
        "seconds": tp["seconds"],
        "rows_per_s": tp["rows_per_s"],
        "files_per_s": point.files / tp["seconds"],
        "mb_per_s": tp["mb_per_s"],
        "seconds_per_file": tp["seconds"] / point.files,
        "seconds_per_mb": tp["seconds"] / (dataset.total_bytes / 1e6),
        "queued_to_committed_p50_s": statistics.median(waits) / 1000,
        "queued_to_committed_p99_s": percentile(waits, 99) / 1000,
    }


def growth(points: Sequence[dict[str, Any]], key: str = "seconds_per_file") -> float | None:
    """The last point's cost ``key`` over the first's (None with fewer than two)."""
    if len(points) < 2:
        return None
    return float(points[-1][key]) / float(points[0][key])


def run_curves(
    stack: FloeStack,
    resources: Resources,
    data_dir: Path,
    points: Sequence[Point],
    out_dir: Path,
    on_point: Callable[[dict[str, Any]], None] | None = None,
    prefix: str = "",
) -> dict[str, Any]:
    """Every point, in order, then a PNG per curve in ``out_dir`` (``<prefix>curve_<curve>.png``);
    the figures."""
    out: dict[str, Any] = {}
    for point in points:
        dataset = ensure_dataset(data_dir, point.files, point.rows)
        figure = run_point(stack, resources, dataset, point)
        out.setdefault(point.curve, {"points": []})["points"].append(figure)
        if on_point is not None:
            on_point(figure)
    for curve, data in out.items():
        data["growth_of"] = GROWTH_OF[curve]
        data["growth"] = growth(data["points"], GROWTH_OF[curve])
        path = out_dir / f"{prefix}curve_{curve}.png"
        plot(data["points"], curve, path)
        data["png"] = str(path)
    return out


def plot(points: Sequence[dict[str, Any]], curve: str, path: Path) -> None:
    """Rows/s (left axis) and the p99 wait (right axis) against files or bytes per file, log x."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    x_key, x_label = (
        ("files", "files loaded (about 1 KB each)")
        if curve == "files"
        else ("bytes_per_file", "bytes per file")
    )
    xs = [p[x_key] for p in points]
    fig, left = plt.subplots(figsize=(7, 4.2))
    left.plot(xs, [p["rows_per_s"] for p in points], marker="o", color="tab:blue", label="rows/s")
    left.set_xscale("log")
    left.set_xlabel(x_label)
    left.set_ylabel("rows/s, put → queryable", color="tab:blue")
    left.set_ylim(0, max(p["rows_per_s"] for p in points) * 1.18)  # room for the labels above
    right = left.twinx()
    right.plot(
        xs, [p["queued_to_committed_p99_s"] for p in points], marker="s", color="tab:red", label="p99 wait"
    )
    right.set_ylabel("p99 seconds, queued → committed", color="tab:red")
    right.set_ylim(bottom=0)
    left.margins(x=0.12)
    for p in points:
        left.annotate(
            f"{p['seconds_per_file'] * 1000:,.1f} ms/file",
            (p[x_key], p["rows_per_s"]),
            xytext=(-10, 8),
            textcoords="offset points",
            fontsize=7,
            color="tab:blue",
        )
    left.set_title(f"Floe end to end against {'the number of files' if curve == 'files' else 'file size'}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
