"""Metrics and health end to end: load files through the session stack, then scrape each process's
metrics over HTTP, as Prometheus (or curl) would, and see them move.

Two pipes: an auto-ingest one sent a good file and a failing one through S3 notifications (the
consumer), and a REST one sent a file through insertFiles (the API). Counters are compared with a
scrape taken before the load (the SQS ones are shared with the other tests of the session: at
least what this test sent); per-pipe series are new. Every wait is on scraped or queried state.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import closing
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from floe.catalog import now_ms
from floe.heartbeat import PIPELINE, newest_beat_ms
from floe.keys import Keys
from floe.metrics import metrics_url
from floe.tls import api_base_url, client_ssl_context
from front.client import auth_header
from tests.conftest import Stack, unique, wait_until
from tests.e2e.test_autoingest import csv_file, done, make_pipe
from tests.e2e.test_streaming import Rest, committed, rest_for  # noqa: F401 -- the fixture

pytestmark = pytest.mark.e2e

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

BAD = b"id,name,amount,day\n1,a,1.0,2026-01-01\n2,b,abc,2026-01-02\n"
"""A file whose second row fails (SKIP_FILE: the file fails)."""


def urls(stack: Stack) -> dict[str, str]:
    s = stack.settings
    return {
        "api": f"{api_base_url(s)}/metrics",
        "consumer": metrics_url(s.api.host, s.consumer.metrics_port),
        "pipeline": metrics_url(s.api.host, s.pipeline.metrics_port),
    }


def scrape(stack: Stack, process: str) -> Samples:
    """One process's metrics page, parsed as Prometheus parses it."""
    context = client_ssl_context(stack.settings) if process == "api" else None
    page = httpx.get(urls(stack)[process], timeout=10, verify=context or True)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/plain; version=")  # the text exposition format
    assert "# TYPE floe_redis_errors_total counter" in page.text  # every process counts Redis errors
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(page.text)
        for sample in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def moved(stack: Stack, process: str, check: Callable[[Samples], bool]) -> Samples:
    """Scrape until ``check`` holds (the commit's metrics follow its history by a moment)."""
    last: list[Samples] = []

    def ok() -> bool:
        last[:] = [scrape(stack, process)]
        return check(last[0])

    def shown() -> str:
        per_pipe = {k: v for k, v in (last[0] if last else {}).items() if any(n == "pipe" for n, _ in k[1])}
        return f"{process}'s metrics to move (per pipe, last scrape: {per_pipe})"

    wait_until(ok, timeout=60, what=shown)
    return last[0]


def newest_beat(stack: Stack) -> int | None:
    """The Spark job's newest heartbeat in Redis (ms since the epoch), as the API reads it."""
    with closing(stack.settings.redis.client()) as client:
        return newest_beat_ms(client.hgetall(Keys(stack.settings.redis.prefix).heartbeat(PIPELINE)))


def heartbeat_gauge(stack: Stack) -> tuple[int, int, float, int] | None:
    """(beat, clock before, the API's heartbeat age gauge, clock after) of one scrape of the API,
    the clock in ms as the API reads it; None when the job beat during the scrape, which leaves
    it open which beat the API read."""
    beat, before = newest_beat(stack), now_ms()
    age = total(scrape(stack, "api"), "floe_pipeline_heartbeat_age_seconds")
    after = now_ms()
    return (beat, before, age, after) if beat is not None and newest_beat(stack) == beat else None


def insert_files(stack: Stack, pipe: str, paths: list[str]) -> None:
    url = f"{api_base_url(stack.settings)}/v1/data/pipes/{pipe}/insertFiles?requestId={uuid.uuid4()}"
    context = client_ssl_context(stack.settings)
    resp = httpx.post(
        url,
        json={"files": [{"path": p} for p in paths]},
        headers=auth_header(stack.settings),
        timeout=30,
        verify=context or True,
    )
    assert resp.status_code == 200, resp.text


def test_a_load_moves_every_process_metrics(stack: Stack, bucket: str, s3: Any) -> None:
    before = {process: scrape(stack, process) for process in ("api", "consumer", "pipeline")}
    auto_table, auto = make_pipe(stack, bucket)
    rest_bucket = unique("stage")
    s3.create_bucket(Bucket=rest_bucket)
    rest_table, rest = make_pipe(stack, rest_bucket, auto_ingest=False)
    auto_name, rest_name = f"FLOE.PUBLIC.{auto.upper()}", f"FLOE.PUBLIC.{rest.upper()}"
    good = csv_file(0, 3)
    s3.put_object(Bucket=bucket, Key="in/good.csv", Body=good)
    s3.put_object(Bucket=bucket, Key="in/bad.csv", Body=BAD)
    s3.put_object(Bucket=rest_bucket, Key="in/rest.csv", Body=csv_file(10, 2))
    insert_files(stack, rest_name, ["rest.csv"])
    wait_until(lambda: done(stack, auto_table, 2), what="the auto-ingest pipe's two files in its history")
    wait_until(lambda: done(stack, rest_table, 1), what="the REST pipe's file in its history")

    # The job: files by status, rows and bytes of the loaded one, put→queryable, batches.
    job = moved(
        stack,
        "pipeline",
        lambda m: (
            total(m, "floe_load_latency_seconds_count", pipe=auto_name) == 2
            and total(m, "floe_load_latency_seconds_count", pipe=rest_name) == 1
        ),
    )
    committed = "floe_files_committed_total"
    assert total(job, committed, pipe=auto_name, status="LOADED") == 1
    assert total(job, committed, pipe=auto_name, status="LOAD_FAILED") == 1
    assert total(job, committed, pipe=auto_name, status="PARTIALLY_LOADED") == 0
    assert total(job, committed, pipe=rest_name, status="LOADED") == 1
    assert total(job, "floe_rows_loaded_total", pipe=auto_name) == 3
    assert total(job, "floe_rows_loaded_total", pipe=rest_name) == 2
    assert total(job, "floe_bytes_loaded_total", pipe=auto_name) == len(good)  # not the failed file's
    latency = total(job, "floe_load_latency_seconds_sum", pipe=auto_name)
    assert 0 < latency < 3600  # a units check: seconds since the S3 event, not milliseconds or an epoch
    batches = total(job, "floe_batch_duration_seconds_count") - total(
        before["pipeline"], "floe_batch_duration_seconds_count"
    )
    assert batches >= 1
    files = total(job, "floe_batch_files_sum") - total(before["pipeline"], "floe_batch_files_sum")
    assert files >= 3

    # The consumer: the two notified files, their messages received and deleted.
    consumer = moved(stack, "consumer", lambda m: total(m, "floe_files_enqueued_total", pipe=auto_name) == 2)
    assert total(consumer, "floe_files_received_total", pipe=auto_name, source="notification") == 2
    for name in ("floe_sqs_messages_received_total", "floe_sqs_messages_deleted_total"):
        assert total(consumer, name) - total(before["consumer"], name) >= 2, name

    # The API: insertFiles' file, the requests of this test, and the queues read at scrape time:
    # empty again.
    api = moved(
        stack,
        "api",
        lambda m: (
            total(m, "floe_queue_depth", pipe=auto_name) == 0
            and total(m, "floe_queue_depth", pipe=rest_name) == 0
        ),
    )
    assert total(api, "floe_files_received_total", pipe=rest_name, source="rest") == 1
    assert total(api, "floe_files_enqueued_total", pipe=rest_name, source="rest") == 1
    assert total(api, "floe_queue_oldest_age_seconds", pipe=auto_name) == 0
    route = "/v1/data/pipes/{pipe_name}/insertFiles"
    assert (
        total(api, "floe_api_requests_total", route=route, status="200")
        - total(before["api"], "floe_api_requests_total", route=route, status="200")
        == 1
    )
    sql = total(api, "floe_api_latency_seconds_count", route="/api/v1/sql", status="200")
    assert (
        sql - total(before["api"], "floe_api_latency_seconds_count", route="/api/v1/sql", status="200") >= 6
    )

    # The job's heartbeat: it beats on (its newest beat in Redis moves), and the API's gauge is that
    # beat's age in seconds at scrape time, between the clock's readings around the scrape.
    first = newest_beat(stack)
    assert first is not None, "the job never beat"
    wait_until(lambda: (newest_beat(stack) or 0) > first, what=f"a heartbeat newer than {first} ms")
    beat, clock0, age, clock1 = wait_until(
        lambda: heartbeat_gauge(stack), what="a scrape of the heartbeat's gauge between two beats"
    )
    assert (clock0 - beat) / 1000 <= age <= (clock1 - beat) / 1000, (beat, clock0, age, clock1)

    # No label names a file or a request.
    for samples in (job, consumer, api):
        assert not any(".csv" in v or "requestId" in v for _, labels in samples for _, v in labels)


def test_readyz_and_healthz_of_the_running_stack(stack: Stack) -> None:
    base, context = api_base_url(stack.settings), client_ssl_context(stack.settings)
    assert httpx.get(f"{base}/healthz", verify=context or True).json() == {"status": "alive"}
    ready = httpx.get(f"{base}/readyz", verify=context or True)
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == {"redis": "ok", "s3": "ok", "pipeline": "ok"}
    for process in ("consumer", "pipeline"):  # each says in its log where its metrics are
        assert f"{process} metrics at {urls(stack)[process]}" in stack.log_text(process)


def test_a_channels_rows_are_counted_appended_and_committed(
    stack: Stack,
    rest_for: Callable[[str], Rest],  # noqa: F811 -- the fixture
) -> None:
    table, pipe = unique("t_"), unique("p_")
    stack.sql(f"CREATE TABLE {table} (id INT)")
    stack.sql(
        f"CREATE PIPE {pipe} AS COPY INTO {table} "
        "FROM (SELECT $1:id FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
    )
    rest = rest_for(pipe)
    opened = rest.open("ch-0")
    first = rest.append("ch-0", opened["next_continuation_token"], [{"id": i} for i in range(5)], "1", "5")
    assert first.status_code == 200, first.text
    second = rest.append("ch-0", first.json()["next_continuation_token"], [{"id": 9}], "6", "6")
    assert second.status_code == 200, second.text
    wait_until(lambda: committed(rest, "ch-0", "6"), what="offset token 6 committed")
    labels = {"pipe": f"FLOE.PUBLIC.{pipe.upper()}", "channel": "ch-0"}
    job = moved(stack, "pipeline", lambda m: total(m, "floe_streaming_rows_committed_total", **labels) == 6)
    lag = [
        v
        for (n, ls), v in job.items()
        if n == "floe_streaming_commit_lag_seconds" and set(labels.items()) <= ls
    ]
    assert len(lag) == 1 and 0 <= lag[0] < 3600  # seconds (a units check)
    api = scrape(stack, "api")
    assert total(api, "floe_streaming_rows_appended_total", **labels) == 6
    assert total(api, "floe_queue_depth", pipe=labels["pipe"]) == 0  # its appends are all committed
