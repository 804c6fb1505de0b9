"""Metrics pages need a bearer unless their process binds to loopback only (issue 31, item 8).

Every Floe process served its Prometheus page to anyone who reached it, and the pages label
series with pipe and channel names. Bound to any address but loopback, a page now answers only a
scrape token (``api.metrics_token``) or, on the API, a user's key-pair JWT whose role holds MONITOR
on the account (the privilege check every route makes); everything else gets 401 saying what to
send and which setting to set.
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr, ValidationError

from bench.harness import unique
from floe.keypair import new_private_key, private_key_pem, public_key_body
from floe.metrics import ConsumerMetrics, serve
from floe.runtime import free_port
from floe.settings import ApiSettings, Settings
from front.client import auth_header
from services.api import create_app
from tests.asgi import AppClient

pytestmark = pytest.mark.integration

TOKEN = "scrape-" + "k" * 40
NETWORK_HOSTS = ["0.0.0.0", "", "::", "10.1.2.3", "floe.example.com"]
LOOPBACK_HOSTS = ["127.0.0.1", "127.0.0.2", "::1", "localhost"]


def _settings(settings: Settings, host: str, token: str | None = None) -> Settings:
    api = settings.api.model_copy(
        update={"host": host, "metrics_token": SecretStr(token) if token is not None else None}
    )
    return settings.model_copy(update={"api": api})


@dataclass
class Apps:
    """In-process APIs on one Redis, each as if bound to a host of the test's choosing."""

    settings: Settings
    redis: redis.Redis[bytes]
    clients: list[AppClient] = field(default_factory=list)

    def make(self, host: str, token: str | None = None) -> AppClient:
        client = AppClient(create_app(_settings(self.settings, host, token), self.redis))
        self.clients.append(client)
        return client


@pytest.fixture
def apps(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> Iterator[Apps]:
    made = Apps(isolated_settings, redis_client)
    yield made
    for client in made.clients:
        client.close()


def _is_metrics_page(text: str) -> bool:
    return "floe_api_requests_total" in text or "process_cpu_seconds_total" in text


@pytest.mark.parametrize("host", NETWORK_HOSTS)
def test_off_loopback_a_scrape_without_a_bearer_is_refused_and_told_what_to_set(
    apps: Apps, host: str
) -> None:
    for token in (None, TOKEN):
        client = apps.make(host, token)
        resp = client.get("/metrics")
        assert resp.status_code == 401, (host, token, resp.text[:200])
        assert not _is_metrics_page(resp.text)
        assert "FLOE_API__METRICS_TOKEN" in resp.text and "MONITOR" in resp.text, resp.text
        assert resp.headers["www-authenticate"].startswith("Bearer")


def test_without_a_token_set_the_refusal_says_to_set_one_and_the_start_warns(
    isolated_settings: Settings, redis_client: redis.Redis[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        app = create_app(_settings(isolated_settings, "0.0.0.0"), redis_client)
    assert "FLOE_API__METRICS_TOKEN" in caplog.text and "0.0.0.0" in caplog.text
    with AppClient(app) as client:
        resp = client.get("/metrics", headers={"authorization": "Bearer anything-at-all"})
    assert resp.status_code == 401 and "not set" in resp.text and not _is_metrics_page(resp.text)


def test_the_scrape_token_opens_the_page_and_nothing_close_to_it_does(apps: Apps) -> None:
    client = apps.make("0.0.0.0", TOKEN)
    ok = client.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and _is_metrics_page(ok.text)
    assert client.get("/metrics", headers={"authorization": f"bearer  {TOKEN} "}).status_code == 200
    for wrong in (
        f"Bearer {TOKEN[:-1]}",
        f"Bearer {TOKEN}x",
        f"Basic {TOKEN}",
        TOKEN,
        "Bearer ",
        f"Bearer {TOKEN.upper()}",
    ):
        resp = client.get("/metrics", headers={"authorization": wrong})
        assert resp.status_code == 401 and not _is_metrics_page(resp.text), wrong
    # The token opens the metrics page only, never a route of the API.
    sql = client.post("/api/v1/sql", json={"sql": "SHOW PIPES"}, headers={"authorization": f"Bearer {TOKEN}"})
    assert sql.status_code == 401


def test_a_user_whose_role_holds_monitor_on_the_account_may_read_it(apps: Apps, tmp_path: Path) -> None:
    client = apps.make("0.0.0.0", TOKEN)
    admin = auth_header(apps.settings)

    def sql(statement: str) -> None:
        resp = client.post("/api/v1/sql", json={"sql": statement}, headers=admin)
        assert resp.status_code == 200, resp.text

    key = new_private_key()
    key_file = tmp_path / "watcher.p8"
    key_file.write_text(private_key_pem(key))
    user, role = unique("watcher").upper(), unique("watchers").upper()
    sql(f"CREATE ROLE {role}")
    sql(f"CREATE USER {user} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}' DEFAULT_ROLE = {role}")
    sql(f"GRANT ROLE {role} TO USER {user}")
    as_user = auth_header(apps.settings, user, str(key_file))
    refused = client.get("/metrics", headers=as_user)
    assert refused.status_code == 403 and not _is_metrics_page(refused.text), refused.text
    assert "MONITOR on the account" in refused.json()["message"]
    sql(f"GRANT MONITOR ON ACCOUNT TO ROLE {role}")
    ok = client.get("/metrics", headers=as_user)
    assert ok.status_code == 200 and _is_metrics_page(ok.text)
    assert client.get("/metrics", headers=admin).status_code == 200  # ACCOUNTADMIN holds everything
    sql(f"REVOKE MONITOR ON ACCOUNT FROM ROLE {role}")
    assert client.get("/metrics", headers=as_user).status_code == 403
    # A JWT no registered key signed is refused as on every route.
    other = tmp_path / "other.p8"
    other.write_text(private_key_pem(new_private_key()))
    forged = client.get("/metrics", headers=auth_header(apps.settings, user, str(other)))
    assert forged.status_code == 401 and not _is_metrics_page(forged.text)


@pytest.mark.parametrize("host", LOOPBACK_HOSTS)
def test_on_loopback_the_page_stays_open(apps: Apps, host: str) -> None:
    resp = apps.make(host).get("/metrics")
    assert resp.status_code == 200 and _is_metrics_page(resp.text)


def test_a_short_scrape_token_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="metrics_token"):
        ApiSettings(metrics_token=SecretStr("short"))
    token_file = tmp_path / "metrics.token"
    token_file.write_text(TOKEN + "\n")
    assert ApiSettings(metrics_token_file=str(token_file)).resolve_metrics_token() == TOKEN
    token_file.write_text("short\n")
    with pytest.raises(ValueError, match="FLOE_API__METRICS_TOKEN_FILE"):
        ApiSettings(metrics_token_file=str(token_file)).resolve_metrics_token()
    missing = ApiSettings(metrics_token_file=str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="absent"):
        missing.resolve_metrics_token()


def _fetch(url: str, authorization: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"authorization": authorization} if authorization else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize("token", [TOKEN, None])
def test_the_consumer_and_job_pages_need_the_token_off_loopback(
    token: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    """The consumer's and the Spark job's pages (prometheus-client's server) bind where the API
    binds; on all interfaces they take the scrape token alone (they verify no JWT)."""
    metrics = ConsumerMetrics.create()
    metrics.sqs.deleted.inc(3)
    port = free_port()
    with caplog.at_level(logging.WARNING):
        server = serve(metrics.registry, "0.0.0.0", port, "consumer", "FLOE_CONSUMER__METRICS_PORT", token)
    assert server is not None
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        status, text = _fetch(url)
        assert status == 401 and "floe_sqs" not in text and "FLOE_API__METRICS_TOKEN" in text, text
        status, text = _fetch(url, f"Bearer {TOKEN}")
        if token is None:
            assert status == 401 and "not set" in text
            assert "FLOE_API__METRICS_TOKEN" in caplog.text
        else:
            assert status == 200 and "floe_sqs_messages_deleted_total 3.0" in text
            assert _fetch(url, f"Bearer {TOKEN}x")[0] == 401
    finally:
        server.shutdown()
        server.server_close()
