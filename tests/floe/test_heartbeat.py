"""The Spark job's heartbeat in Redis (floe/heartbeat.py), against the real Redis."""

from __future__ import annotations

import threading

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from floe.catalog import now_ms
from floe.heartbeat import FORGET_AFTER_MS, PIPELINE, Heartbeat, newest_beat_ms
from floe.keys import Keys
from floe.settings import Settings
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


@pytest.mark.unit
def test_the_newest_beat_of_a_hash() -> None:
    assert newest_beat_ms({}) is None
    assert newest_beat_ms({b"a": b"5", b"b": b"9", b"c": b"junk"}) == 9


def test_a_beat_is_a_field_per_process_and_stop_deletes_it(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    beat = Heartbeat(redis_client, keys, PIPELINE, 60.0, lambda: 1_000)
    other = Heartbeat(redis_client, keys, PIPELINE, 60.0, lambda: 2_000)
    assert beat.beat() and other.beat()
    assert redis_client.hgetall(keys.heartbeat(PIPELINE)) == {
        beat.holder.encode(): b"1000",
        other.holder.encode(): b"2000",
    }
    beat.stop()  # never started: stopping still withdraws its field
    assert list(redis_client.hgetall(keys.heartbeat(PIPELINE))) == [other.holder.encode()]


def test_the_thread_beats_only_while_alive(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    beat = Heartbeat(redis_client, keys, PIPELINE, 0.02, now_ms)
    asked = threading.Semaphore(0)
    live = threading.Event()

    def alive() -> bool:
        asked.release()
        return live.is_set()

    beat.start(alive)
    try:
        for _ in range(3):  # three intervals asked and answered "not alive"
            assert asked.acquire(timeout=10)
        assert redis_client.hget(keys.heartbeat(PIPELINE), beat.holder) is None
        live.set()
        wait_until(
            lambda: redis_client.hget(keys.heartbeat(PIPELINE), beat.holder), timeout=10, what="a beat"
        )
    finally:
        beat.stop()
    assert redis_client.hget(keys.heartbeat(PIPELINE), beat.holder) is None


def test_a_starting_job_forgets_the_fields_of_jobs_killed_long_ago(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    now = now_ms()
    redis_client.hset(keys.heartbeat(PIPELINE), "killed-long-ago", str(now - FORGET_AFTER_MS - 1))
    redis_client.hset(keys.heartbeat(PIPELINE), "killed-lately", str(now - 60_000))
    beat = Heartbeat(redis_client, keys, PIPELINE, 60.0, now_ms)
    beat.start(lambda: False)
    beat.stop()
    assert list(redis_client.hgetall(keys.heartbeat(PIPELINE))) == [b"killed-lately"]


def test_a_failed_beat_is_counted_and_the_process_goes_on(isolated_settings: Settings) -> None:
    errors: list[str] = []
    gone = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    beat = Heartbeat(gone, Keys(isolated_settings.redis.prefix), PIPELINE, 60.0, now_ms, errors.append)
    assert beat.beat() is False
    beat.stop()
    assert errors == ["heartbeat", "heartbeat"]
