"""The metric families' bookkeeping (floe/metrics.py), each on a registry of its own, and the server
the consumer and the Spark job serve them on."""

from __future__ import annotations

import logging
import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from floe.metrics import (
    OTHER,
    ApiMetrics,
    ApiProcessMetrics,
    ChannelLabels,
    CommittedFile,
    ConsumerMetrics,
    FileFlow,
    LoadMetrics,
    PipelineMetrics,
    RedisErrors,
    metrics_url,
    serve,
    stream_id_ms,
)
from floe.runtime import free_port

pytestmark = pytest.mark.unit


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value; 0 when the series does not exist (yet)."""
    return registry.get_sample_value(name, labels) or 0.0


def test_file_flow_counts_received_and_enqueued_per_pipe_and_source() -> None:
    r = CollectorRegistry()
    flow = FileFlow(r)
    flow.record("DB.S.P1", "notification", [True, False, True])
    flow.record("DB.S.P1", "rest", [False])
    flow.record("DB.S.P2", "notification", [])  # nothing routed: no series
    assert value(r, "floe_files_received_total", pipe="DB.S.P1", source="notification") == 3
    assert value(r, "floe_files_enqueued_total", pipe="DB.S.P1", source="notification") == 2
    assert value(r, "floe_files_received_total", pipe="DB.S.P1", source="rest") == 1
    assert value(r, "floe_files_enqueued_total", pipe="DB.S.P1", source="rest") == 0
    assert (
        r.get_sample_value("floe_files_received_total", {"pipe": "DB.S.P2", "source": "notification"}) is None
    )


def test_a_commit_counts_files_by_status_and_rows_and_bytes_of_the_loaded_ones() -> None:
    r = CollectorRegistry()
    loads = LoadMetrics(r)
    loads.committed(
        "P",
        [
            CommittedFile("LOADED", 10, 100, 1.5),
            CommittedFile("PARTIALLY_LOADED", 4, 50, 3.0),
            CommittedFile("LOAD_FAILED", 0, 70, 0.2),
            CommittedFile("LOADED", 1, None, -0.5),  # size unknown; a clock a little behind S3's
        ],
    )
    assert value(r, "floe_files_committed_total", pipe="P", status="LOADED") == 2
    assert value(r, "floe_files_committed_total", pipe="P", status="PARTIALLY_LOADED") == 1
    assert value(r, "floe_files_committed_total", pipe="P", status="LOAD_FAILED") == 1
    assert value(r, "floe_rows_loaded_total", pipe="P") == 15
    assert value(r, "floe_bytes_loaded_total", pipe="P") == 150  # the failed file's bytes are not loaded
    assert value(r, "floe_load_latency_seconds_count", pipe="P") == 4
    assert value(r, "floe_load_latency_seconds_sum", pipe="P") == pytest.approx(4.7)  # -0.5 counts as 0
    assert value(r, "floe_load_latency_seconds_bucket", pipe="P", le="0.5") == 2


def test_batches_are_timed_and_sized() -> None:
    r = CollectorRegistry()
    loads = LoadMetrics(r)
    loads.batch(0.3, 7)
    loads.batch(12.0, 1500)
    assert value(r, "floe_batch_duration_seconds_count") == 2
    assert value(r, "floe_batch_duration_seconds_bucket", le="0.5") == 1
    assert value(r, "floe_batch_files_sum") == 1507
    assert value(r, "floe_batch_files_bucket", le="10.0") == 1


def test_channels_count_committed_rows_and_keep_their_last_lag() -> None:
    r = CollectorRegistry()
    loads = LoadMetrics(r)
    loads.settled("P", "c1", 5, 2.0)
    loads.settled("P", "c1", 3, 0.5)
    assert value(r, "floe_streaming_rows_committed_total", pipe="P", channel="c1") == 8
    assert value(r, "floe_streaming_commit_lag_seconds", pipe="P", channel="c1") == 0.5


def test_channel_labels_are_capped_per_process() -> None:
    """Safeguard: clients name channels; past the cap new ones share one series, old ones keep theirs."""
    labels = ChannelLabels(limit=2)
    assert [labels("P", "a"), labels("P", "b"), labels("P", "c"), labels("Q", "a")] == [
        "a",
        "b",
        OTHER,
        OTHER,
    ]
    assert labels("P", "a") == "a"


def test_api_requests_are_counted_and_timed_by_route_method_and_status() -> None:
    r = CollectorRegistry()
    api = ApiMetrics(r)
    api.observe("/api/v1/sql", "POST", 200, 0.02)
    api.observe("/api/v1/sql", "POST", 422, 0.01)
    api.observe("/api/v1/sql", "POST", 200, 3.0)
    assert value(r, "floe_api_requests_total", route="/api/v1/sql", method="POST", status="200") == 2
    assert value(r, "floe_api_requests_total", route="/api/v1/sql", method="POST", status="422") == 1
    labels = {"route": "/api/v1/sql", "method": "POST", "status": "200"}
    assert value(r, "floe_api_latency_seconds_count", **labels) == 2
    assert value(r, "floe_api_latency_seconds_bucket", le="0.025", **labels) == 1


def test_redis_errors_by_operation() -> None:
    r = CollectorRegistry()
    errors = RedisErrors(r)
    errors.inc("enqueue")
    errors.inc("enqueue")
    assert value(r, "floe_redis_errors_total", operation="enqueue") == 2


def test_each_process_has_its_own_registry() -> None:
    """Safeguard: two consumers (or apps) in one process never count into each other."""
    a, b = ConsumerMetrics.create(), ConsumerMetrics.create()
    a.sqs.received.inc(3)
    assert value(a.registry, "floe_sqs_messages_received_total") == 3
    assert value(b.registry, "floe_sqs_messages_received_total") == 0
    assert PipelineMetrics.create().registry is not PipelineMetrics.create().registry
    assert ApiProcessMetrics.create().registry.get_sample_value("process_cpu_seconds_total") is not None


def test_stream_ids_carry_the_time_they_were_added() -> None:
    assert stream_id_ms(b"1795000000123-4") == 1_795_000_000_123
    assert stream_id_ms("7-0") == 7


def test_metrics_urls_name_where_a_client_reaches_the_server() -> None:
    assert metrics_url("127.0.0.1", 9401) == "http://127.0.0.1:9401/metrics"
    assert metrics_url("0.0.0.0", 9402) == "http://127.0.0.1:9402/metrics"
    assert metrics_url("::", 9402) == "http://[::1]:9402/metrics"


def test_serve_answers_the_registry_over_http_and_says_where(caplog: pytest.LogCaptureFixture) -> None:
    metrics = ConsumerMetrics.create()
    metrics.sqs.deleted.inc(4)
    port = free_port()
    with caplog.at_level(logging.INFO, "floe.metrics"):
        server = serve(metrics.registry, "127.0.0.1", port, "consumer", "FLOE_CONSUMER__METRICS_PORT")
    assert server is not None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        assert "floe_sqs_messages_deleted_total 4.0" in text
        assert f"consumer metrics at http://127.0.0.1:{port}/metrics" in caplog.text
    finally:
        server.shutdown()
        server.server_close()


def test_port_zero_serves_nothing() -> None:
    assert serve(CollectorRegistry(), "127.0.0.1", 0, "pipeline", "FLOE_PIPELINE__METRICS_PORT") is None


def test_a_port_in_use_is_logged_with_the_setting_that_fixes_it(caplog: pytest.LogCaptureFixture) -> None:
    """A second consumer on a host whose port the first holds still runs: it logs why it serves no
    metrics and which setting gives it a port of its own."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.ERROR, "floe.metrics"):
            server = serve(CollectorRegistry(), "127.0.0.1", port, "consumer", "FLOE_CONSUMER__METRICS_PORT")
    assert server is None
    assert "FLOE_CONSUMER__METRICS_PORT" in caplog.text
    assert f"127.0.0.1:{port}" in caplog.text
