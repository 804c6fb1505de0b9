"""The benchmark harness's pure logic: statistics, targets, data, message shapes, /proc parsing."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import zlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pytest

from bench.baselines import peer_figures, repeated
from bench.checksum import checksums, conform
from bench.curves import count_points, growth, plot, size_points
from bench.dataset import CSV_COLUMNS, csv_text, ensure_dataset, target_schema
from bench.echo_service import Counters, create_app
from bench.external import (
    FUNCTION,
    as_int,
    baseline_query,
    expected_sum,
    external_rows,
    function_query,
    function_sql,
    integration_sql,
    summarize,
    with_query_timeout,
)
from bench.harness import BenchError, isolated_settings
from bench.latency import percentile, summary
from bench.memory import parse_kib, parse_stat_session, runs_module
from bench.notifications import s3_event
from bench.report import (
    EXTERNAL_RATIO,
    STREAM_CHANNEL_KEYS,
    THROUGHPUT_KINDS,
    checksums_agree,
    evaluate,
    missing_figures,
    ratios,
    table_rows,
)
from bench.run import PARTS, build_parser, int_list, parse_parts, resolve
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
from floe.catalog.ddl import CreateApiIntegration, CreateExternalFunction, parse
from floe.settings import Settings
from floe.streaming.rows import parse_rows
from floe.types import arrow_schema
from services.notifications import parse_message
from tests.asgi import AppClient

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


def _tp(rate: float, **more: Any) -> dict[str, Any]:
    """A throughput figure as the harness records it: the median of runs, with its spread."""
    return {
        "rows_per_s": rate,
        "rows_per_s_spread": spread([rate * 0.9, rate, rate * 1.1]),
        "runs": [{}] * 3,
        **more,
    }


def test_ratios_and_targets() -> None:
    r = _result(
        throughput={
            "floe": _tp(900_000.0, files=200, seconds=2.2),
            "floe_e2e": _tp(400_000.0),
            "limit_s3": _tp(1_200_000.0),
            "limit_local": _tp(1_800_000.0),
            "peer": _tp(300_000.0, session_start_s=7.0),
            "peer_paced": _tp(600_000.0),
        },
        latency={
            "1_per_s": {
                "samples": 30,
                "put_to_queryable": {"p50_s": 0.4, "p99_s": 1.5},
                "put_to_loaded": {"p50_s": 0.4, "p99_s": 1.0},
            },
            "20_per_s": {
                "samples": 100,
                "put_to_queryable": {"p50_s": 1.5, "p99_s": 1.9},
                "put_to_loaded": {"p50_s": 1.4, "p99_s": 1.8},
            },
        },
        notifications={"files_per_s": 2500.0},
        rest={"calls_per_s": 550.0, "p99_ms": 80.0},
        memory_idle={"pipeline": {"peak_rss_mb": 1300.0, "max_processes": 9}},
    )
    assert r["ratios"]["floe_over_limit_s3"] == pytest.approx(0.75)
    assert r["ratios"]["floe_over_limit_local"] == pytest.approx(0.5)
    assert r["ratios"]["floe_over_peer"] == pytest.approx(3.0)
    assert r["ratios"]["floe_over_peer_paced"] == pytest.approx(1.5)
    checks = evaluate(r, "1_per_s", "20_per_s")
    assert checks["throughput_floe_over_limit"]["met"] is True  # against the LocalStack limit
    assert checks["throughput_floe_over_peer"]["met"] is True
    assert checks["latency_queryable_p50_s"]["met"] is True
    assert checks["latency_queryable_p99_s"]["met"] is False
    assert checks["latency_fast_queryable_p50_s"]["met"] is False
    assert checks["latency_fast_queryable_p99_s"]["met"] is True
    assert checks["notifications_files_per_s"]["met"] is True
    assert checks["rest_calls_per_s"]["met"] is False  # 600 now
    assert checks["rest_p99_ms"]["met"] is True
    assert checks["pipeline_idle_rss_mb"]["met"] is False
    assert checks["query_peak_rss_mb"]["met"] is None
    rows = table_rows(r, "1_per_s", "20_per_s")
    labels = [row[0] for row in rows]
    assert labels[:6] == [label for _, label in THROUGHPUT_KINDS]
    assert rows[0][2] == "min 810,000, max 990,000 (3 runs)"
    assert sum(label.startswith("Latency at 20 files/s put→queryable p") for label in labels) == 2
    assert missing_figures(r, {"floe", "limit", "peer", "latency"}, ["1_per_s", "20_per_s"]) == [
        f"figures.memory.{name}.peak_rss_mb" for name in ("api", "consumer", "pipeline")
    ]


def test_checksums_compare_the_rows_whatever_their_order_types_or_files() -> None:
    schema = target_schema()
    table = pacsv.read_csv(
        io.BytesIO(csv_text(0, 50).encode()),
        convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in CSV_COLUMNS}),
    )
    ours = conform(table, schema)
    # Another system's output: upper-case names, the rows in another order and in two files,
    # a timestamp in nanoseconds and an int32 id, as Spark or another writer might give them.
    theirs = ours.rename_columns([c.upper() for c in ours.column_names]).take(list(range(49, -1, -1)))
    theirs = theirs.set_column(0, "ID", pc.cast(theirs["ID"], pa.int32())).set_column(
        4, "TS", pc.cast(theirs["TS"], pa.timestamp("ns"))
    )
    a = checksums([ours])
    assert a == checksums([theirs.slice(0, 20), theirs.slice(20)])
    assert a["rows"] == 50 and a["columns"]["amount"]["nulls"] == 0
    names = pa.array(["changed", *ours["name"].to_pylist()[1:]])
    assert checksums([ours.set_column(2, "name", names)])["columns"]["name"] != a["columns"]["name"]
    assert checksums([ours.slice(1)])["rows"] == 49
    figures = {"throughput": {"floe": {"checksum": a}, "peer": {"checksum": a}, "limit_s3": {}}}
    assert checksums_agree(figures) is True
    figures["throughput"]["limit_local"] = {"checksum": checksums([ours.slice(1)])}
    assert checksums_agree(figures) is False
    assert checksums_agree({"throughput": {"floe": {"checksum": a}}}) is None


def test_repeated_runs_keep_the_median_and_the_peer_both_kinds() -> None:
    runs = [{"rows": 10, "seconds": s, "rows_per_s": 10 / s} for s in (2.0, 1.0, 4.0)]
    got = repeated(runs)
    assert (got["rows_per_s"], got["seconds"], got["rows_per_s_spread"]) == (
        5.0,
        2.0,
        {"median": 5.0, "min": 2.5, "max": 10.0},
    )
    raw = {
        "runs": runs,
        "paced_runs": runs[:1],
        "max_files_per_trigger": 20,
        "session_start_s": 6.0,
        "warmup_s": 3.0,
        "checksum": None,
        "master": "local[2]",
        "java_options": "",
    }
    peer = peer_figures(raw)
    assert peer["plain"]["rows_per_s"] == 5.0 and peer["paced"]["max_files_per_trigger"] == 20
    assert peer["paced"]["rows_per_s_spread"] == {"median": 5.0, "min": 5.0, "max": 5.0}


@pytest.mark.parametrize(("peak", "met"), [(356.0, True), (1023.9, True), (1024.0, False), (4800.0, False)])
def test_query_memory_target_is_under_1_gb(peak: float, met: bool) -> None:
    r = _result(query_memory={"peak_rss_mb": peak, "queries": {}})
    assert evaluate(r, "1_per_s")["query_peak_rss_mb"]["met"] is met


def test_missing_figures_follow_the_selected_parts() -> None:
    r = _result(throughput={"limit_s3": {"rows_per_s": 1.0}, "limit_local": {"rows_per_s": 2.0}})
    assert missing_figures(r, {"limit"}, []) == []
    missing = missing_figures(r, {"limit", "floe"}, [])
    assert "figures.throughput.floe.rows_per_s" in missing
    assert "figures.throughput.floe_e2e.rows_per_s" in missing
    assert "ratios.floe_over_limit_s3" in missing and "ratios.floe_over_limit_local" in missing
    assert "ratios.floe_over_peer" not in missing
    assert "figures.memory.pipeline.peak_rss_mb" in missing
    assert "figures.memory_idle.pipeline.peak_rss_mb" in missing
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
            "throughput": {"1_channel": fig(100_000.0), "8_channels": fig(350_000.0)},
            "latency": {
                "rate_rows_per_s": 1000.0,
                "poll_interval_s": 0.05,
                "append_to_committed": {"p50_s": 1.0, "p99_s": 3.5},
            },
        }
    )
    assert r["ratios"]["streaming_1_channel_over_limit"] == pytest.approx(0.1)
    assert r["ratios"]["streaming_8_channels_over_limit"] == pytest.approx(0.35)
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


def test_external_statements_parse_and_allow_the_service() -> None:
    base = "http://127.0.0.1:8123/"
    integration = parse(integration_sql(base))
    assert isinstance(integration, CreateApiIntegration)
    assert integration.allowed_prefixes == [base] and integration.enabled
    function = parse(function_sql(base))
    assert isinstance(function, CreateExternalFunction)
    assert function.volatility == "VOLATILE"  # every row is sent: nothing deduplicated or cached
    assert function.url == f"{base}echo" and function.integration == integration.name
    assert [(c.type, c.scale) for c in function.args] == [("NUMBER", 0)]
    assert FUNCTION in function_query("t") and FUNCTION not in baseline_query("t")


def test_external_rows_sum_and_answer_parsing() -> None:
    rows = external_rows(10, 5)
    assert [r["id"] for r in rows] == list(range(10, 15)) and set(rows[0]) == {"id", "kind"}
    assert expected_sum(1_000_000) == sum(range(1_000_000))
    assert expected_sum(1) == 0
    assert as_int(499999500000) == as_int("499999500000") == as_int(Decimal("499999500000.000"))
    with pytest.raises(BenchError):
        as_int("12.5")
    with pytest.raises(BenchError):
        as_int("twelve")


def test_external_query_timeout_survives_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = with_query_timeout(isolated_settings(Settings(), tmp_path / "run"), 600.0)
    assert mine.query.timeout_s == 600.0
    assert with_query_timeout(mine, 10.0).query.timeout_s == 600.0  # never lowered
    monkeypatch.setenv("FLOE_QUERY__TIMEOUT_S", mine.child_env()["FLOE_QUERY__TIMEOUT_S"])
    assert Settings().query.timeout_s == 600.0


def test_external_parts_and_sizes() -> None:
    assert "external" in parse_parts("all") and parse_parts("external") == {"external"}
    smoke = resolve(build_parser().parse_args(["--smoke"]))
    full = resolve(build_parser().parse_args(["--external-rows", "5000"]))
    assert (smoke.external_rows, full.external_rows, full.external_repeats) == (20_000, 5000, 3)
    assert resolve(build_parser().parse_args([])).external_rows == 1_000_000


def _echo_request(rows: list[list[Any]], batch: str) -> tuple[bytes, dict[str, str]]:
    headers = {
        "sf-external-function-format": "json",
        "sf-external-function-format-version": "1.0",
        "sf-external-function-query-batch-id": batch,
        "content-type": "application/json",
    }
    return json.dumps({"data": rows}).encode(), headers


def test_echo_service_echoes_and_counts() -> None:
    with AppClient(create_app()) as client:
        body, headers = _echo_request([[0, 5], [1, None], [2, 12345678901234567890123]], "b1")
        answer = client.post("/echo", content=body, headers=headers)
        assert answer.status_code == 200
        assert answer.json() == {"data": [[0, 5], [1, None], [2, 12345678901234567890123]]}
        client.post("/echo", content=body, headers=headers)  # a retry: same batch id
        body, headers = _echo_request([[0, 7]], "b2")
        client.post("/echo", content=body, headers=headers)
        stats = client.get("/stats").json()
        assert stats == {"requests": 3, "batches": 2, "rows": 7, "in_flight": 0, "max_in_flight": 1}
        bad = client.post("/echo", content=b"{}", headers={"content-type": "application/json"})
        assert bad.status_code == 400
        assert client.post("/stats/reset").json()["requests"] == 0
        assert client.get("/stats").json() == {
            "requests": 0,
            "batches": 0,
            "rows": 0,
            "in_flight": 0,
            "max_in_flight": 0,
        }


def test_echo_counters_track_the_most_requests_in_flight() -> None:
    c = Counters()
    c.begin()
    c.begin()
    c.end()
    c.begin()
    c.begin()
    assert (c.requests, c.in_flight, c.max_in_flight) == (4, 3, 3)
    c.reset()
    assert (c.requests, c.max_in_flight) == (0, 3)  # the three still in flight stay counted
    for _ in range(3):
        c.end()
    assert c.snapshot()["in_flight"] == 0


def _ef_run(seconds: float, batches: int = 0, in_flight: int = 0, api_cpu: float = 1.0) -> dict[str, Any]:
    run: dict[str, Any] = {"seconds": seconds, "cpu_s": {"api": api_cpu, "service": 0.5}}
    if batches:
        run.update(requests=batches, batches=batches, rows_sent=1000, max_in_flight=in_flight)
    return run


def test_external_summary_ratio_missing_and_rows() -> None:
    baseline = [_ef_run(0.01), _ef_run(0.02), _ef_run(0.04)]
    function = [_ef_run(1.0, 8, 8), _ef_run(2.0, 8, 16, 3.0), _ef_run(0.5, 8, 12)]
    ext = summarize(1000, baseline, function)
    assert ext["baseline"]["rows_per_s"] == pytest.approx(50_000.0)
    fn = ext["function"]
    assert fn["rows_per_s"] == pytest.approx(1000.0)
    assert fn["rows_per_s_spread"] == {"median": 1000.0, "min": 500.0, "max": 2000.0}
    assert fn["batches_per_s"] == pytest.approx(8.0) and fn["rows_per_batch"] == pytest.approx(125.0)
    assert (fn["max_concurrency"], fn["max_concurrency_per_run"], fn["retries"]) == (16, [8, 16, 12], 0)
    assert fn["cpu_s"] == {"api": 1.0, "service": 0.5} and fn["api_cpu_us_per_row"] == 1000.0
    with pytest.raises(ValueError):
        summarize(1000, [], function)
    fn["runs"] = function
    r = _result(external=ext)
    assert r["ratios"][EXTERNAL_RATIO] == pytest.approx(0.02)
    assert missing_figures(r, {"external"}, []) == []
    assert "figures.external.function.max_concurrency" in missing_figures(_result(), {"external"}, [])
    rows = table_rows(r, "1_per_s")
    labels = [row[0] for row in rows]
    assert labels[0].startswith("External function") and "  function / baseline" in labels
    assert rows[0][1] == "1,000 rows/s" and "median of 3" in rows[0][2]
    assert all(row[3] == "" for row in rows)  # issue 14 sets no target
    assert not any(key.startswith("external") for key in evaluate(r, "1_per_s"))


def test_curve_points_sizes_and_growth(tmp_path: Path) -> None:
    files = count_points([100, 1_000])
    assert [p.files for p in files] == [100, 1_000]
    assert 900 <= len(csv_text(0, files[0].rows).encode()) <= 1_100  # about 1 KB a file, header included
    sizes = size_points([1_000, 10_000_000, 100_000_000])
    assert [p.files for p in sizes] == [50, 40, 4]  # as many as 400 MB allows, 2 to 50
    assert [p.files for p in size_points([300_000_000])] == [2]
    assert abs(len(csv_text(0, sizes[0].rows).encode()) - 1_000) < 100
    points = [
        {
            "files": n,
            "bytes_per_file": 1000.0,
            "rows_per_s": r,
            "seconds_per_file": s,
            "queued_to_committed_p99_s": q,
        }
        for n, r, s, q in (
            (100, 5_000.0, 0.010, 0.5),
            (1_000, 8_000.0, 0.006, 2.0),
            (10_000, 9_000.0, 0.005, 9.0),
        )
    ]
    assert growth(points) == pytest.approx(0.5)
    assert growth(points, "queued_to_committed_p99_s") == pytest.approx(18.0)
    assert growth(points[:1]) is None
    out = tmp_path / "curves" / "curve_files.png"
    plot(points, "files", out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_curve_arguments_and_table_rows() -> None:
    assert int_list("100, 1000,10000") == (100, 1_000, 10_000)
    for bad in ("", "a,b", "0,5"):
        with pytest.raises(argparse.ArgumentTypeError):
            int_list(bad)
    full = resolve(build_parser().parse_args([]))
    assert full.curve_counts == (100, 1_000, 10_000) and "curves" in full.only
    assert "curves" not in resolve(build_parser().parse_args(["--smoke"])).only
    point = {
        "files": 100,
        "bytes_per_file": 1_010.0,
        "rows_per_s": 5_000.0,
        "seconds_per_file": 0.01,
        "queued_to_committed_p99_s": 0.5,
    }
    curve = {"points": [point], "growth": None, "growth_of": "seconds_per_file", "png": "x.png"}
    r = _result(curves={"files": curve})
    labels = [row[0] for row in table_rows(r, "1_per_s")]
    assert labels == [
        "Curve files: 100 files of 1,010 B",
        "  files curve: seconds per file, last point / first",
    ]
    assert missing_figures(r, {"curves"}, []) == [
        "figures.curves.files.growth",
        "figures.curves.size.growth",
    ]


def test_a_daemon_is_the_process_that_runs_its_module_not_one_that_names_it() -> None:
    modules = (b"pyspark.daemon", b"pipeline.spark_daemon")
    assert runs_module(b"/venv/bin/python\0-m\0pipeline.spark_daemon\0pyspark.worker\0", modules)
    assert runs_module(b"python\0-m\0pyspark.daemon\0pyspark.sql.worker.create_data_source\0", modules)
    jvm = b"java\0SparkSubmit\0--conf\0spark.python.daemon.module=pipeline.spark_daemon\0pyspark-shell\0"
    assert not runs_module(jvm, modules)
    assert not runs_module(b"python\0-m\0pyspark.sql.streaming.python_streaming_source_runner\0", modules)
    assert not runs_module(b"", modules)
