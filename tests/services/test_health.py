"""/healthz and /readyz (services/health.py): public, and /readyz names the dependency that fails.

In-process against the real Redis and LocalStack; Redis going away is a redis-server of the test's
own, stopped under the app, and a client of a closed port.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import redis
from fastapi import FastAPI
from redis.backoff import NoBackoff
from redis.retry import Retry

from floe.catalog import now_ms
from floe.heartbeat import PIPELINE, STALE_BEATS, Heartbeat
from floe.keys import Keys
from floe.metrics import RedisErrors, new_registry
from floe.runtime import free_port
from floe.settings import Settings
from services.api import create_app
from services.health import ReadyChecks, health_router
from tests.asgi import AppClient
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


def quick_client(port: int) -> redis.Redis[bytes]:
    """A client that fails at once when nothing answers (no retries, short timeouts)."""
    return redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))


def beat(settings: Settings, client: Any, clock: int | None = None) -> None:
    Heartbeat(client, Keys(settings.redis.prefix), PIPELINE, 5.0, lambda: clock or now_ms()).beat()


@pytest.fixture
def app(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> Iterator[AppClient]:
    with AppClient(create_app(isolated_settings, redis_client)) as client:
        yield client


def test_healthz_answers_without_a_token_and_without_asking_anything(app: AppClient) -> None:
    resp = app.get("/healthz")
    assert (resp.status_code, resp.json()) == (200, {"status": "alive"})
    assert app.get("/health").status_code == 200  # the old one stays


def test_readyz_is_ready_once_the_job_beats(
    app: AppClient, isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    """No token needed; without a heartbeat the job is what is missing, with a fresh one all is ok."""
    resp = app.get("/readyz")
    assert resp.status_code == 503, resp.text
    checks = resp.json()["checks"]
    assert (checks["redis"], checks["s3"]) == ("ok", "ok")
    assert checks["pipeline"].startswith("no heartbeat")
    beat(isolated_settings, redis_client)
    resp = app.get("/readyz")
    assert (resp.status_code, resp.json()) == (
        200,
        {"status": "ready", "checks": {"redis": "ok", "s3": "ok", "pipeline": "ok"}},
    )
    assert resp.headers["cache-control"] == "no-store"


def test_a_stale_heartbeat_is_a_job_gone(
    app: AppClient, isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    stale_s = STALE_BEATS * isolated_settings.pipeline.heartbeat_s
    beat(isolated_settings, redis_client, now_ms() - int(stale_s * 1000) - 5_000)
    resp = app.get("/readyz")
    assert resp.status_code == 503
    assert "stopped or hangs" in resp.json()["checks"]["pipeline"]


def test_readyz_with_redis_on_a_closed_port_says_redis(isolated_settings: Settings) -> None:
    registry = new_registry()
    errors = RedisErrors(registry)
    app = FastAPI()
    keys = Keys(isolated_settings.redis.prefix)
    app.include_router(health_router(ReadyChecks(isolated_settings, quick_client(free_port()), keys, errors)))
    with AppClient(app) as client:
        resp = client.get("/readyz")
    assert resp.status_code == 503
    body = resp.json()
    assert body["status"] == "not ready"
    assert body["checks"]["redis"] == "unreachable (ConnectionError)"
    assert body["checks"]["pipeline"] == "unknown: Redis is unreachable"
    assert body["checks"]["s3"] == "ok"
    assert registry.get_sample_value("floe_redis_errors_total", {"operation": "readyz"}) == 1


def test_readyz_with_s3_unreachable_says_s3(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    aws = isolated_settings.aws.model_copy(update={"endpoint_url": f"http://127.0.0.1:{free_port()}"})
    settings = isolated_settings.model_copy(update={"aws": aws})
    checks = ReadyChecks(settings, redis_client, Keys(settings.redis.prefix), RedisErrors(new_registry()))
    assert checks.s3()["s3"] == "unreachable (EndpointConnectionError)"
    ready, answers = anyio.run(checks.run)
    assert not ready and answers["s3"].startswith("unreachable")


def test_redis_going_away_under_the_api(isolated_settings: Settings, tmp_path: Any) -> None:
    """The app's own client: its Redis stops after start-up; /readyz says Redis, the metrics page
    still answers (its queue gauges left out) and both count the errors."""
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
    )
    try:
        client = quick_client(port)
        wait_until(lambda: _pings(client), timeout=20, what="the test's redis-server")
        app = create_app(isolated_settings, client)
        beat(isolated_settings, client)
        with AppClient(app) as http:
            assert http.get("/readyz").status_code == 200
            server.terminate()
            server.wait(20)
            resp = http.get("/readyz")
            assert resp.status_code == 503
            assert resp.json()["checks"]["redis"].startswith("unreachable")
            page = http.get("/metrics")
            assert page.status_code == 200
            registry = app.state.metrics.registry
            assert registry.get_sample_value("floe_redis_errors_total", {"operation": "readyz"}) == 1
            assert registry.get_sample_value("floe_redis_errors_total", {"operation": "queue_scrape"}) == 1
            labels = {"route": "/readyz", "method": "GET", "status": "503"}
            assert registry.get_sample_value("floe_api_requests_total", labels) == 1
    finally:
        server.kill()
        server.wait(20)


def _pings(client: redis.Redis[bytes]) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
