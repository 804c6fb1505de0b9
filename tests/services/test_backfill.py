"""Backfill on the real LocalStack and Redis: what a listing queues (only files the pipe has no
state for, modified since it was created), and that one consumer lists a pipe per interval. End to
end with notifications off: tests/e2e/test_backfill.py."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from floe.catalog import Pipe
from floe.metrics import FileFlow, new_registry
from floe.settings import Settings
from services.backfill import LISTING_WINDOW, Backfiller, backfill_since
from services.dedup import retire_pipe
from services.sql import SqlExecutor
from tests.conftest import TEST_INTEGRATION, wait_until
from tests.services.test_pipe_refresh import failed, notified, put, queued, settle, state
from tests.services.test_sql_access import ADMIN, run

pytestmark = pytest.mark.integration


@pytest.fixture
def ex(isolated_settings: Settings, redis_client: Any) -> Iterator[SqlExecutor]:
    """An executor on a fresh key prefix (as tests/services/conftest.py's), with a one-second
    minimum BACKFILL_INTERVAL, so a test sees an interval end."""
    settings = isolated_settings.model_copy(deep=True)
    settings.backfill.min_interval_s = 1
    executor = SqlExecutor(settings, redis_client)
    executor.execute(TEST_INTEGRATION, ADMIN)
    yield executor
    stale = list(redis_client.scan_iter(match=f"{settings.redis.prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)


def make_pipe(ex: SqlExecutor, bucket: str, props: str = "BACKFILL_INTERVAL = '1 second'") -> Pipe:
    run(ex, f"CREATE STAGE IF NOT EXISTS st URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = floe_tests")
    run(ex, "CREATE TABLE IF NOT EXISTS t (a INT)")
    run(
        ex,
        f"CREATE OR REPLACE PIPE p AUTO_INGEST = FALSE {props} AS COPY INTO t FROM @st PATTERN = '.*[.]csv'",
    )
    return ex.catalog.get(Pipe, "FLOE.PUBLIC.P")


def backfiller(ex: SqlExecutor, holder: str = "consumer-a", flow: FileFlow | None = None) -> Backfiller:
    return Backfiller(ex.settings, ex.redis, ex.catalog, holder, flow)


def test_a_backfill_queues_only_what_the_pipe_never_saw(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    put(s3, bucket, "in/before.csv")  # staged before the pipe: never its to be notified of
    (before,) = s3.list_objects_v2(Bucket=bucket)["Contents"]
    # S3 dates objects to the second, and a listing takes the second the pipe was created: the pipe
    # is made in a later second than before.csv's.
    wait_until(lambda: dt.datetime.now(dt.UTC).replace(microsecond=0) > before["LastModified"], 5, 0.05)
    pipe = make_pipe(ex, bucket)
    put(
        s3,
        bucket,
        "in/a.csv",
        "in/2026/b.csv",
        "in/notified.csv",
        "in/loaded.csv",
        "in/failed.csv",
        "in/x.json",
    )
    notified(ex, pipe, "notified.csv", "loaded.csv")
    settle(ex, pipe, "loaded.csv", "LOADED")
    failed(ex, pipe, "failed.csv")
    registry = new_registry()
    b = backfiller(ex, flow=FileFlow(registry))
    try:
        assert b.run_once() == {"FLOE.PUBLIC.P": 2}
        # Only what it found missing counts: the stage's other files are listed every interval.
        labels = {"pipe": "FLOE.PUBLIC.P", "source": "backfill"}
        assert registry.get_sample_value("floe_files_received_total", labels) == 2
        assert registry.get_sample_value("floe_files_enqueued_total", labels) == 2
        assert queued(ex, pipe) == ["notified.csv", "2026/b.csv", "a.csv"]  # in key order, after
        assert (state(ex, pipe, "a.csv").source, state(ex, pipe, "a.csv").status) == (
            "backfill",
            "LOAD_IN_PROGRESS",
        )
        # A failed load is left failed (REFRESH sends it again when asked); nothing is queued twice.
        assert state(ex, pipe, "failed.csv").status == "LOAD_FAILED"
        assert b.backfill(pipe) == []
    finally:
        b.close()


def test_the_listing_window(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    pipe = make_pipe(ex, bucket)
    created = dt.datetime.fromtimestamp(pipe.created_ms // 1000, tz=dt.UTC)
    now = created + dt.timedelta(days=1)
    assert backfill_since(pipe, now, 14 * 86400) == created
    later = created + dt.timedelta(days=30)
    assert backfill_since(pipe, later, 14 * 86400) == later - LISTING_WINDOW
    # Never more than half the dedup memory back: the pipe still remembers what it lists.
    assert backfill_since(pipe, later, 4 * 86400) == later - dt.timedelta(days=2)


def test_one_consumer_lists_a_pipe_per_interval(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    # A long interval, so the lease surely holds while consumer-b looks, however slow the machine.
    pipe = make_pipe(ex, bucket, "BACKFILL_INTERVAL = '1 hour'")
    put(s3, bucket, "in/a.csv")
    first, second = backfiller(ex, "consumer-a"), backfiller(ex, "consumer-b")
    lease = ex.keys.lease(pipe.id, "backfill")
    try:
        assert first.run_once() == {"FLOE.PUBLIC.P": 1}
        assert second.run_once() == {}  # the interval has not ended: consumer-a's lease holds
        assert ex.redis.get(lease) == b"consumer-a"
        assert 3000 < int(ex.redis.ttl(lease)) <= 3600  # the lease lasts the interval
        put(s3, bucket, "in/b.csv")
        # The interval ends (its lease expires); whoever looks next lists, and queues b.csv once.
        ex.redis.pexpire(lease, 1)
        listed = wait_until(lambda: second.run_once() or first.run_once(), 10, 0.1, what="the next interval")
        assert listed == {"FLOE.PUBLIC.P": 1}
        assert queued(ex, pipe) == ["a.csv", "b.csv"]
    finally:
        first.close()
        second.close()


def test_pipes_without_an_interval_or_out_of_their_integration_are_not_listed(
    ex: SqlExecutor, s3: Any, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    pipe = make_pipe(ex, bucket, props="")
    put(s3, bucket, "in/a.csv")
    b = backfiller(ex)
    try:
        assert b.run_once() == {}
        pipe = make_pipe(ex, bucket)
        put(s3, bucket, "in/b.csv")
        run(ex, "ALTER INTEGRATION floe_tests SET ENABLED = FALSE")
        with caplog.at_level(logging.WARNING, logger="floe.backfill"):
            assert b.run_once() == {"FLOE.PUBLIC.P": 0}
        assert "backfill skipped" in caplog.text and "FLOE_TESTS" in caplog.text.upper()
        assert queued(ex, pipe) == []
    finally:
        b.close()


def test_a_pipe_retired_during_its_listing_gets_nothing(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    pipe = make_pipe(ex, bucket)
    put(s3, bucket, "in/a.csv")
    retire_pipe(ex.redis, ex.keys, pipe.id)  # DROP or CREATE OR REPLACE between listing and queueing
    b = backfiller(ex)
    try:
        assert b.backfill(pipe) == []
        assert queued(ex, pipe) == []
    finally:
        b.close()


def test_a_listing_that_fails_waits_for_the_next_interval(
    ex: SqlExecutor, s3: Any, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    make_pipe(ex, bucket)
    s3.delete_bucket(Bucket=bucket)
    b = backfiller(ex)
    try:
        with caplog.at_level(logging.WARNING, logger="floe.backfill"):
            assert b.run_once() == {}
        assert "backfill could not list the stage" in caplog.text
    finally:
        b.close()
