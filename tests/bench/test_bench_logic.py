"""The benchmark harness's pure logic: statistics, targets, data, message shapes, /proc parsing."""

from __future__ import annotations

import argparse
import datetime as dt
import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest

from bench.dataset import CSV_COLUMNS, csv_text, ensure_dataset, target_schema
from bench.harness import isolated_settings
from bench.latency import percentile, summary
from bench.memory import parse_kib, parse_stat_session
from bench.notifications import s3_event
from bench.report import evaluate, missing_figures, ratios, table_rows
from bench.run import PARTS, build_parser, parse_parts, resolve
from floe.settings import Settings
from services.notifications import parse_message

pytestmark = pytest.mark.unit


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([3.0, 1.0, 2.0], 99) == 3.0  # few samples: p99 is the slowest one
    assert percentile([7.0], 50) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_summary() -> None:
    s = summary([1.0, 2.0, 3.0, 10.0])
    assert s == {"p50_s": 2.0, "p99_s": 10.0, "mean_s": 4.0, "max_s": 10.0}


def test_parse_parts_expands_aliases_and_rejects_unknown() -> None:
    assert parse_parts("throughput") == {"floe", "limit", "peer"}
    assert parse_parts("memory, rest") == {"floe", "rest"}
    assert parse_parts("all") == set(PARTS)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_parts("speed")
    with pytest.raises(argparse.ArgumentTypeError):
        parse_parts(" , ")


def test_smoke_and_full_defaults_and_overrides() -> None:
    smoke = resolve(build_parser().parse_args(["--smoke"]))
    assert (smoke.files, smoke.rows, smoke.out.name, smoke.overlap) == (4, 1000, "smoke.json", True)
    assert smoke.warmup is True
    full = resolve(build_parser().parse_args(["--files", "40", "--no-overlap"]))
    assert (full.files, full.rows, full.out.name, full.overlap) == (40, 10_000, "latest.json", False)
    assert full.slow_rate == 1.0 and full.fast_rate == 20.0


def _result(**figures: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"figures": figures, "machine": {"cores": 2}, "mode": "full"}
    r["ratios"] = ratios(figures)
    return r


def test_ratios_and_targets() -> None:
    r = _result(
        throughput={
            "floe": {"rows_per_s": 900_000.0, "files": 200, "seconds": 2.2},
            "limit": {"rows_per_s": 1_600_000.0},
            "peer": {"rows_per_s": 300_000.0, "session_start_s": 7.0},
        },
        latency={
            "1_per_s": {
                "samples": 30,
                "put_to_queryable": {"p50_s": 1.5, "p99_s": 5.5},
                "put_to_loaded": {"p50_s": 1.4, "p99_s": 5.0},
            }
        },
        notifications={"files_per_s": 2500.0},
        rest={"calls_per_s": 250.0, "p99_ms": 80.0},
    )
    assert r["ratios"]["floe_over_limit"] == pytest.approx(0.5625)
    assert r["ratios"]["floe_over_peer"] == pytest.approx(3.0)
    checks = evaluate(r, "1_per_s")
    assert checks["throughput_floe_over_limit"]["met"] is True
    assert checks["latency_queryable_p50_s"]["met"] is True
    assert checks["latency_queryable_p99_s"]["met"] is False
    assert checks["notifications_files_per_s"]["met"] is True
    assert checks["rest_calls_per_s"]["met"] is False
    assert checks["rest_p99_ms"]["met"] is True
    assert len(table_rows(r, "1_per_s")) >= 10


def test_missing_figures_follow_the_selected_parts() -> None:
    r = _result(throughput={"limit": {"rows_per_s": 1.0}})
    assert missing_figures(r, {"limit"}, []) == []
    missing = missing_figures(r, {"limit", "floe"}, [])
    assert "figures.throughput.floe.rows_per_s" in missing
    assert "ratios.floe_over_limit" in missing
    assert "figures.memory.pipeline.peak_rss_mb" in missing
    assert (
        missing_figures(_result(), {"latency"}, ["1_per_s"])[0]
        == "figures.latency.1_per_s.put_to_queryable.p50_s"
    )
    assert evaluate(_result(), "1_per_s")["rest_p99_ms"]["met"] is None


def test_csv_files_are_deterministic_and_parse_to_the_target_schema(tmp_path: Path) -> None:
    assert csv_text(3, 50) == csv_text(3, 50)
    assert csv_text(3, 50) != csv_text(4, 50)
    text = csv_text(2, 400)
    assert text.splitlines()[0] == ",".join(CSV_COLUMNS)
    raw = pacsv.read_csv(
        io.BytesIO(text.encode()),
        convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(CSV_COLUMNS, pa.string())),
    )
    schema = target_schema()
    typed = pa.table([pc.cast(raw[f.name], f.type) for f in schema], schema=schema)
    assert typed.num_rows == 400
    assert typed["id"][0].as_py() == 800  # ids continue across files
    assert set(typed["flag"].to_pylist()) == {True, False}
    ds = ensure_dataset(tmp_path, 2, 10)
    assert [p.name for p in ds.paths] == ["f00000.csv", "f00001.csv"]
    assert ds.total_rows == 20
    again = ensure_dataset(tmp_path, 2, 10)
    assert again.paths[0].read_text() == ds.paths[0].read_text()


def test_synthetic_s3_events_parse_like_real_ones() -> None:
    body = s3_event("bkt", "in/notif/a b+c.csv", 123, "us-east-1", dt.datetime(2026, 1, 2, tzinfo=dt.UTC))
    (record,) = parse_message(body)
    assert (record.bucket, record.key, record.size) == ("bkt", "in/notif/a b+c.csv", 123)


def test_proc_parsing() -> None:
    stat = "1234 (java (main) x) S 1 4321 5555 0 -1 4194560 ..."
    assert parse_stat_session(stat) == 5555
    status = "Name:\tjava\nVmPeak:\t 999 kB\nVmRSS:\t  2048 kB\n"
    assert parse_kib(status, "VmRSS") == 2048
    assert parse_kib(status, "Pss") is None


def test_isolated_settings_survive_the_trip_through_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = Settings()
    mine = isolated_settings(base, tmp_path / "run")
    assert mine.redis.prefix != base.redis.prefix and mine.redis.prefix.startswith("bench")
    assert mine.consumer.queue_name != base.consumer.queue_name
    assert mine.pipeline.tables_bucket != base.pipeline.tables_bucket
    assert mine.api.host == "127.0.0.1" and mine.api.port != base.api.port
    assert mine.state_dir == str(tmp_path / "run")
    for name, value in mine.child_env().items():
        monkeypatch.setenv(name, value)
    rebuilt = Settings()
    # The Redis password travels resolved (from the password file, if any): compare what it signs in with.
    assert rebuilt.redis.resolve_password() == mine.redis.resolve_password()
    unsecret = {"redis": {"password"}}
    assert rebuilt.model_dump(exclude=unsecret) == mine.model_dump(exclude=unsecret)
