"""What the API's /metrics shows of its own work: insertFiles' files, streaming appends, requests by
route template and status, and the queues read at scrape time. In-process against the real Redis."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import unique
from floe.settings import Settings
from front.client import auth_header
from services.api import create_app
from tests.asgi import AppClient
from tests.conftest import TEST_INTEGRATION
from tests.services.test_streaming import Streams, ndjson, streams  # noqa: F401 -- the fixture

pytestmark = pytest.mark.integration


def scraped(client: AppClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the /metrics page, as a scraper parses it."""
    page = client.get("/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(page.text)
        for s in family.samples
    }


@dataclass
class Admin:
    """The admin's statements and insertFiles calls on an in-process API."""

    client: AppClient
    headers: dict[str, str]

    def sql(self, statement: str) -> list[list[Any]]:
        resp = self.client.post("/api/v1/sql", json={"sql": statement}, headers=self.headers)
        assert resp.status_code == 200, resp.text
        return list(resp.json()["rows"])

    def pipe_on(self, bucket: str) -> tuple[str, str]:
        """A new pipe on s3://<bucket>/in/: its name as created and fully qualified."""
        stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
        self.sql(TEST_INTEGRATION)
        self.sql(f"CREATE STAGE {stage} URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = floe_tests")
        self.sql(f"CREATE TABLE {table} (a INT)")
        self.sql(f"CREATE PIPE {pipe} AS COPY INTO {table} FROM @{stage}")
        return pipe, f"FLOE.PUBLIC.{pipe.upper()}"

    def insert(self, name: str, *paths: str) -> None:
        resp = self.client.post(
            f"/v1/data/pipes/{name}/insertFiles?requestId={uuid.uuid4()}",
            json={"files": [{"path": p} for p in paths]},
            headers=self.headers,
        )
        assert resp.status_code == 200, resp.text


def test_insert_files_moves_the_file_counters_queue_gauges_and_request_counts(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    with AppClient(create_app(isolated_settings, redis_client)) as client:
        admin = Admin(client, auth_header(isolated_settings))
        _, name = admin.pipe_on(unique("b"))
        admin.insert(name, "a.csv", "b.csv")
        admin.insert(name, "a.csv", "c.csv")
        assert client.post("/api/v1/sql", json={"sql": "SHOW PIPES"}).status_code == 401
        got = scraped(client)
        rest = frozenset({("pipe", name), ("source", "rest")})
        assert got[("floe_files_received_total", rest)] == 4
        assert got[("floe_files_enqueued_total", rest)] == 3
        assert got[("floe_queue_depth", frozenset({("pipe", name)}))] == 3
        assert got[("floe_queue_oldest_age_seconds", frozenset({("pipe", name)}))] >= 0
        route = "/v1/data/pipes/{pipe_name}/insertFiles"
        ok = frozenset({("route", route), ("method", "POST"), ("status", "200")})
        assert got[("floe_api_requests_total", ok)] == 2
        assert got[("floe_api_latency_seconds_count", ok)] == 2
        refused = frozenset({("route", "/api/v1/sql"), ("method", "POST"), ("status", "401")})
        assert got[("floe_api_requests_total", refused)] == 1  # the gate's refusals count too
        # Never a file path or a request id in a label.
        assert not any("a.csv" in v or "requestId" in v for _, labels in got for _, v in labels)


def test_refresh_counts_the_files_it_listed_and_queued(
    isolated_settings: Settings, redis_client: redis.Redis[bytes], s3: Any, bucket: str
) -> None:
    """ALTER PIPE ... REFRESH runs in the API: its files count with source="refresh", the ones it
    skipped (already queued by insertFiles) as received only."""
    with AppClient(create_app(isolated_settings, redis_client)) as client:
        admin = Admin(client, auth_header(isolated_settings))
        pipe, name = admin.pipe_on(bucket)
        for key in ("in/a.csv", "in/b.csv", "in/c.csv"):
            s3.put_object(Bucket=bucket, Key=key, Body=b"1\n")
        admin.insert(name, "a.csv")
        assert sorted(admin.sql(f"ALTER PIPE {pipe} REFRESH")) == [
            ["a.csv", "SKIPPED"],
            ["b.csv", "SENT"],
            ["c.csv", "SENT"],
        ]
        got = scraped(client)
        refreshed = frozenset({("pipe", name), ("source", "refresh")})
        assert got[("floe_files_received_total", refreshed)] == 3
        assert got[("floe_files_enqueued_total", refreshed)] == 2
        assert got[("floe_queue_depth", frozenset({("pipe", name)}))] == 3


def test_streaming_appends_are_counted_per_channel(streams: Streams) -> None:  # noqa: F811 -- the fixture
    opened = streams.open("WRITER_U", "ch-1")
    assert opened.status_code == 200, opened.text
    cont = opened.json()["next_continuation_token"]
    first = streams.append("WRITER_U", "ch-1", cont, ndjson('{"id": 1}', '{"id": 2}'))
    assert first.status_code == 200, first.text
    second = streams.append("WRITER_U", "ch-1", first.json()["next_continuation_token"], ndjson('{"id": 3}'))
    assert second.status_code == 200, second.text
    got = scraped(streams.client)
    labels = frozenset({("pipe", f"FLOE.PUBLIC.{streams.pipe.upper()}"), ("channel", "ch-1")})
    assert got[("floe_streaming_rows_appended_total", labels)] == 3
    # A streaming pipe's queue is its channel appends.
    assert got[("floe_queue_depth", frozenset({("pipe", f"FLOE.PUBLIC.{streams.pipe.upper()}")}))] == 2
