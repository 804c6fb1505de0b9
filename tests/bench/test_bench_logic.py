"""The benchmark harness's pure logic: statistics, targets, data, message shapes, /proc parsing."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import zlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pytest

from bench.dataset import CSV_COLUMNS, csv_text, ensure_dataset, target_schema
from bench.harness import isolated_settings
from bench.latency import percentile, summary
from bench.memory import parse_kib, parse_stat_session
from bench.notifications import s3_event
from bench.report import STREAM_CHANNEL_KEYS, evaluate, missing_figures, ratios, table_rows
from bench.run import PARTS, build_parser, parse_parts, resolve
from bench.streaming import (
    CHANNEL_COUNTS,
    JSON_READ_SCHEMA,
    balanced_channels,
    channel_label,
    ndjson,
    parse_machine_ticks,
    parse_stat_cpu_ticks,
    slices,
    spread,
    stream_rows,
    stream_table,
    to_table_schema,
)
from floe.settings import Settings
from floe.streaming.rows import parse_rows
from floe.types import arrow_schema
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


def test_streaming_rows_are_deterministic_and_load_as_the_tables_types() -> None:
    assert stream_rows(100, 50) == stream_rows(100, 50)
    assert stream_rows(100, 50) != stream_rows(100, 50, seed=8)
    rows = stream_rows(0, 500)
    assert [r["id"] for r in rows] == list(range(500))
    data = ndjson(rows)
    assert parse_rows(data).count == 500  # the server takes the bytes the limit reads
    schema = arrow_schema(stream_table())
    assert [f.name for f in schema] == [n.upper() for n in JSON_READ_SCHEMA.names]
    raw = pajson.read_json(
        io.BytesIO(data), parse_options=pajson.ParseOptions(explicit_schema=JSON_READ_SCHEMA)
    )
    typed = to_table_schema(raw, schema)
    assert typed.schema == schema and typed.num_rows == 500
    first = typed.slice(0, 1).to_pylist()[0]
    assert first["AMOUNT"] == Decimal(rows[0]["amount"]) and first["ID"] == 0
    assert first["TS"] == dt.datetime.fromisoformat(rows[0]["ts"])
    assert set(typed["FLAG"].to_pylist()) == {True, False}


def test_balanced_channels_spread_over_the_partitions() -> None:
    for count, parts in ((8, 2), (1, 2), (3, 2), (5, 3), (4, 1)):
        names = balanced_channels("ch-", count, parts)
        assert len(set(names)) == count
        per_part = [sum(1 for n in names if zlib.crc32(n.encode()) % parts == p) for p in range(parts)]
        assert max(per_part) - min(per_part) <= 1
    assert balanced_channels("ch-", 8, 2) == balanced_channels("ch-", 8, 2)
    assert balanced_channels("ch-", 2, 0) == balanced_channels("ch-", 2, 1)


def test_slices_and_spread() -> None:
    assert slices(10, 3) == [range(0, 3), range(3, 6), range(6, 10)]
    assert [len(r) for r in slices(20_000, 8)] == [2_500] * 8
    assert slices(2, 8)[0] == range(0, 0) and sum(len(r) for r in slices(2, 8)) == 2
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}


def test_cpu_parsing() -> None:
    stat = "99 (python (x) y) S 1 99 99 0 -1 4194560 10 0 0 0 150 25 3 4 20 0 1 0"
    assert parse_stat_cpu_ticks(stat) == 175
    busy, total = parse_machine_ticks("cpu  100 5 50 800 20 3 2 0 7 0\ncpu0 1 2 3 4\n")
    assert (busy, total) == (160, 980)


def test_streaming_ratios_targets_and_rows() -> None:
    assert tuple(channel_label(n) for n in CHANNEL_COUNTS) == STREAM_CHANNEL_KEYS

    def fig(rate: float) -> dict[str, Any]:
        return {"rows_per_s": rate, "rows_per_s_spread": spread([rate]), "runs": [{}]}

    r = _result(
        streaming={
            "limit": {"rows_per_s": 1_000_000.0, "ndjson_mb": 250.0},
            "throughput": {"1_channel": fig(100_000.0), "8_channels": fig(250_000.0)},
            "latency": {
                "rate_rows_per_s": 1000.0,
                "poll_interval_s": 0.05,
                "append_to_committed": {"p50_s": 1.0, "p99_s": 3.5},
            },
        }
    )
    assert r["ratios"]["streaming_1_channel_over_limit"] == pytest.approx(0.1)
    assert r["ratios"]["streaming_8_channels_over_limit"] == pytest.approx(0.25)
    checks = evaluate(r, "1_per_s")
    assert checks["streaming_rows_per_s"]["met"] is True
    assert checks["streaming_latency_p50_s"]["met"] is True
    assert checks["streaming_latency_p99_s"]["met"] is False
    assert missing_figures(r, {"streaming"}, []) == []
    labels = [row[0] for row in table_rows(r, "1_per_s")]
    assert labels[:2] == ["Streaming 1 channel into one table", "  1 channel / streaming limit"]
    assert sum("Streaming append→committed" in label for label in labels) == 2
    missing = missing_figures(_result(streaming={"limit": {"rows_per_s": 1.0}}), {"streaming"}, [])
    assert "figures.streaming.throughput.8_channels.rows_per_s" in missing
    assert "ratios.streaming_1_channel_over_limit" in missing
    assert "figures.streaming.latency.append_to_committed.p99_s" in missing
