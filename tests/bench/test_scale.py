"""The scale part's pure logic (bench/scale.py): run order, the job's environment, the summary and
its ratio, the evidence from the executors' logs, and its rows in the result and the table."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, cast

import pytest

from bench.harness import BenchError, FloeStack
from bench.report import QUERY_NAMES, SCALE_RATIO, missing_figures, ratios, table_rows
from bench.run import PARTS, SMOKE_SKIPS, build_parser, parse_parts, resolve
from bench.scale import (
    LOCAL_MASTER,
    JobSwitch,
    cluster_conf,
    files_per_worker,
    job_env,
    overhead_note,
    run_order,
    summarize,
    task_files,
    worker_files,
)
from floe.settings import Settings
from infra.spark_cluster import Cluster

pytestmark = pytest.mark.unit


def test_runs_alternate_and_swap_the_first_every_round() -> None:
    assert run_order(1) == ["local", "cluster"]
    assert run_order(3) == ["local", "cluster", "cluster", "local", "local", "cluster"]
    assert run_order(0) == []


def test_the_job_env_names_the_master_and_only_the_clusters_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {
        "PATH": "/bin",
        "FLOE_PIPELINE__SPARK_MASTER": "spark://elsewhere:7077",
        "FLOE_PIPELINE__SPARK_CONF__SPARK.EXECUTOR.MEMORY": "8g",  # child_env's spelling of a dict
        "FLOE_PIPELINE__PARTITIONS": "2",
    }
    conf = cluster_conf()
    env = job_env(base, "spark://127.0.0.1:7999", conf)
    assert env["PATH"] == "/bin" and env["FLOE_PIPELINE__PARTITIONS"] == "2"
    assert not any(k.startswith("FLOE_PIPELINE__SPARK_CONF__") for k in env)
    assert base["FLOE_PIPELINE__SPARK_MASTER"] == "spark://elsewhere:7077"  # the base is left alone
    # What the job reads back from that environment.
    monkeypatch.setenv("FLOE_PIPELINE__SPARK_MASTER", env["FLOE_PIPELINE__SPARK_MASTER"])
    monkeypatch.setenv("FLOE_PIPELINE__SPARK_CONF", env["FLOE_PIPELINE__SPARK_CONF"])
    monkeypatch.setenv("FLOE_PIPELINE__DRIVER_BATCH_FILES", env["FLOE_PIPELINE__DRIVER_BATCH_FILES"])
    p = Settings().pipeline
    assert p.spark_master == "spark://127.0.0.1:7999"
    assert p.driver_batch_files == 0  # every batch in the tasks whose placement the part compares
    assert p.spark_conf == {
        "spark.cores.max": "2",
        "spark.executor.cores": "1",
        "spark.executor.memory": "1g",
    }
    local = job_env(base, LOCAL_MASTER, {})
    assert local["FLOE_PIPELINE__SPARK_MASTER"] == "local[2]"
    assert not any(k.startswith("FLOE_PIPELINE__SPARK_CONF") for k in local)


def _run(mode: str, round_: int, rows_per_s: float) -> dict[str, Any]:
    return {"mode": mode, "round": round_, "rows_per_s": rows_per_s, "seconds": 2_000_000 / rows_per_s}


def test_summary_takes_medians_and_each_rounds_ratio() -> None:
    runs = [
        _run("local", 1, 100_000.0),
        _run("cluster", 1, 50_000.0),
        _run("cluster", 2, 80_000.0),
        _run("local", 2, 160_000.0),
        _run("local", 3, 120_000.0),
        _run("cluster", 3, 60_000.0),
    ]
    out = summarize(runs)
    assert out["local"]["rows_per_s"] == 120_000.0
    assert out["cluster"]["rows_per_s"] == 60_000.0
    assert out["cluster"]["rows_per_s_spread"] == {"median": 60_000.0, "min": 50_000.0, "max": 80_000.0}
    assert [r["round"] for r in out["local"]["runs"]] == [1, 2, 3]
    assert out["local"]["seconds"] == [20.0, 12.5, 16.667]
    assert out["round_ratios"] == [0.5, 0.5, 0.5]
    with pytest.raises(ValueError, match="cluster"):
        summarize(runs[:1])


def test_executor_task_lines_count_the_files_each_worker_read(tmp_path: Path) -> None:
    log = (
        "26/01/01 INFO Executor: Running task 0.0\n"
        "2026-01-01 floe.pipeline INFO batch 3 task 0 on executor 1: 12 files, 0.20 s waiting for S3, "
        "1.10 s parsing and transforming, 0.30 s writing the blob\n"
        "batch 4 task 1 on executor 1: 7 files, 0.1 s waiting\n"
        "batch x task 1 on executor 1: 99 files\n"  # not a task line
    )
    assert task_files(log) == 19
    app = f"app-{uuid.uuid4().hex[:8]}"
    dirs = (tmp_path / "worker-1", tmp_path / "worker-2")
    for n, work in enumerate(dirs):
        (work / app / str(n)).mkdir(parents=True)
        (work / app / str(n) / "stderr").write_text(log if n == 0 else "")
    (dirs[1] / "app-older" / "0").mkdir(parents=True)  # another application's executor
    (dirs[1] / "app-older" / "0" / "stderr").write_text(log)
    cluster = Cluster("spark://127.0.0.1:1", "http://127.0.0.1:1", dirs)
    assert worker_files(cluster, app) == {"worker-1": 19, "worker-2": 0}
    with pytest.raises(BenchError, match="worker-2 idle"):
        files_per_worker(cluster, app, {}, 19)
    (dirs[1] / app / "1" / "stderr").write_text("batch 5 task 0 on executor 2: 5 files\n")
    assert files_per_worker(cluster, app, {"worker-1": 10}, 14) == {"worker-1": 9, "worker-2": 5}


class _Proc:
    def __init__(self) -> None:
        self.code: int | None = None

    def poll(self) -> int | None:
        return self.code


class _Stack:
    """What JobSwitch uses of a FloeStack, recording the environment each start saw."""

    def __init__(self) -> None:
        self.env = {"FLOE_PIPELINE__SPARK_MASTER": "local[2]", "PATH": "/bin"}
        self.procs: dict[str, _Proc] = {"pipeline": _Proc()}
        self.started: list[dict[str, str]] = []

    def stop(self, names: list[str]) -> dict[str, int | None]:
        for name in names:
            self.procs.pop(name)
        return dict.fromkeys(names, 0)

    def start(self, names: tuple[str, ...]) -> None:
        self.started.append(dict(self.env))
        for name in names:
            self.procs[name] = _Proc()


def test_the_job_switch_gives_the_cluster_env_to_one_start_and_restores_the_job() -> None:
    fake = _Stack()
    switch = JobSwitch(cast(FloeStack, fake))
    assert switch.is_restored()
    switch.restore()
    assert fake.started == []  # nothing to do
    switch.on("spark://127.0.0.1:7999", cluster_conf())
    assert fake.started[-1]["FLOE_PIPELINE__SPARK_MASTER"] == "spark://127.0.0.1:7999"
    assert fake.env == {"FLOE_PIPELINE__SPARK_MASTER": "local[2]", "PATH": "/bin"}  # other launches
    assert not switch.is_restored()
    switch.on(LOCAL_MASTER, {})
    # local[2] and no conf, but every batch in Spark's tasks: not how the run started it.
    assert fake.started[-1]["FLOE_PIPELINE__DRIVER_BATCH_FILES"] == "0"
    assert not switch.is_restored()
    switch.restore()
    assert fake.started[-1] == fake.env and switch.is_restored()
    fake.procs["pipeline"].code = 1  # the job died
    assert not switch.is_restored()
    switch.restore()
    assert fake.started[-1] == fake.env and switch.is_restored()
    assert switch.exit_codes == [0, 0, 0, 0]


def _scale_figures() -> dict[str, Any]:
    runs = [_run("local", 1, 150_000.0), _run("cluster", 1, 100_000.0)]
    out = summarize(runs)
    out["cluster"].update(workers=2, cores_per_worker=1)
    out.update(baseline=LOCAL_MASTER, repeats=1, files=200, note=overhead_note(2))
    return out


def _query_memory() -> dict[str, Any]:
    return {
        "table": {"csv_mb": 2048, "rows": 23_000_000, "blobs": 64},
        "api_rss_before_mb": 180.0,
        "rss_target_mb": 1024.0,
        "queries": {
            name: {"first_s": 2.0, "median_s": 1.5, "peak_rss_mb": 400.0 if name != "full_scan" else 1100.0}
            | {"met": name != "full_scan"}
            for name in QUERY_NAMES
        },
    }


def test_scale_ratio_missing_figures_and_rows_under_one_heading() -> None:
    figures = {"scale": _scale_figures(), "query_memory": _query_memory()}
    result: dict[str, Any] = {"figures": figures, "ratios": ratios(figures), "machine": {"cores": 2}}
    assert result["ratios"][SCALE_RATIO] == pytest.approx(100_000 / 150_000)
    assert missing_figures(result, {"spark_cluster", "query_memory"}, []) == []
    empty: dict[str, Any] = {"figures": {}, "ratios": ratios({})}
    missing = missing_figures(empty, parse_parts("scale"), [])
    assert "figures.scale.cluster.rows_per_s" in missing and f"ratios.{SCALE_RATIO}" in missing
    assert "figures.query_memory.queries.full_scan.peak_rss_mb" in missing
    assert table_rows(empty, "1_per_s") == []
    rows = table_rows(result, "1_per_s")
    labels = [r[0] for r in rows]
    assert labels[0] == "[bold]Scale[/]"
    assert "local[2]" in labels[1] and "cluster, 2 workers of 1 core" in labels[2]
    assert rows[1][1] == "150,000 rows/s" and rows[2][1] == "100,000 rows/s"
    assert rows[3][:2] == ("  cluster / local", "0.67") and "more hosts" in rows[3][2]
    by_name = {r[0].strip(): r for r in rows}
    assert by_name["full_scan"][1] == "1.50 s, API peak 1,100 MB" and "missed" in by_name["full_scan"][3]
    assert "met" in by_name["count_star"][3]


def test_scale_is_an_alias_a_smoke_run_leaves_out() -> None:
    assert parse_parts("scale") == {"spark_cluster", "query_memory"}
    assert parse_parts("spark_cluster") == {"spark_cluster"}
    assert "spark_cluster" in PARTS and "spark_cluster" in SMOKE_SKIPS
    smoke = resolve(build_parser().parse_args(["--smoke"]))
    assert "spark_cluster" not in smoke.only and smoke.scale_repeats == 1
    full = resolve(build_parser().parse_args([]))
    assert "spark_cluster" in full.only and full.scale_repeats == 3
    only = resolve(build_parser().parse_args(["--smoke", "--only", "scale", "--scale-repeats", "2"]))
    assert only.only == {"spark_cluster", "query_memory"} and only.scale_repeats == 2


def test_the_note_says_what_one_machine_shows() -> None:
    note = overhead_note(2)
    assert "same 2-core machine" in note and "more hosts" in note and "costs" in note
