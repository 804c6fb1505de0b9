"""Request limits of the API, in process against the real Redis: authentication before the body,
the body's size and time limits, one answer for every unknown credential, the failed-login and
SQL rate limits, a 503 that keeps the Redis URL to itself, and uvicorn's bounded request head.

Bodies come from async generators through httpx's ASGI transport, which pulls a chunk only when
the app asks for one: a generator that records what it gave proves what the API read.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import redis
import uvicorn
from starlette.types import ASGIApp

from floe.keypair import new_private_key
from floe.runtime import free_port
from floe.settings import Settings
from services.answers import METADATA_STORE_DOWN
from services.api import MAX_HEAD_BYTES, bounded_httptools
from services.auth import NO_MATCHING_KEY, Authenticator, RateLimiter
from tests.conftest import wait_until
from tests.services.test_snowpipe import Api, bearer, make_api, token

pytestmark = pytest.mark.integration

SNOWPIPE_ERROR = {"code", "success", "message", "data"}
SQL_ERROR = {"success", "code", "sqlState", "message"}


def tuned(
    settings: Settings, api: dict[str, Any] | None = None, auth: dict[str, Any] | None = None
) -> Settings:
    """The settings with some API and auth limits changed."""
    return settings.model_copy(
        update={
            "api": settings.api.model_copy(update=api or {}),
            "auth": settings.auth.model_copy(update=auth or {}),
        }
    )


@dataclass
class Body:
    """An async request body that records how much of it the app pulled."""

    chunks: int
    chunk_bytes: int = 64 * 1024
    stall_after: int | None = None
    """Stop sending after this many chunks, until ``release`` is set (a slow client)."""
    pulled: int = 0
    stalled: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def stream(self) -> AsyncIterator[bytes]:
        for i in range(self.chunks):
            if self.stall_after is not None and i == self.stall_after:
                self.stalled = True
                await self.release.wait()
            self.pulled += 1
            yield b"x" * self.chunk_bytes

    @property
    def size(self) -> int:
        return self.chunks * self.chunk_bytes


def post(
    app: ASGIApp,
    url: str,
    body: Body,
    headers: dict[str, str],
    address: str = "127.0.0.1",
    length: bool = False,
) -> httpx.Response:
    """POST the body through the app in process; with ``length``, declare its Content-Length."""

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=(address, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://floe") as client:
            sent = {**headers, "Content-Type": "application/json"}
            if length:
                sent["Content-Length"] = str(body.size)
            return await client.post(url, content=body.stream(), headers=sent)

    return asyncio.run(run())


@pytest.fixture
def small(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> Iterator[Api]:
    """An app that takes bodies up to 256 KiB, waits 0.5 s for one, and forgives 3 failed logins."""
    settings = tuned(
        isolated_settings,
        api={"max_body_bytes": 256 * 1024, "body_timeout_s": 0.5},
        auth={"failed_auth_per_s": 0.001, "failed_auth_burst": 3},
    )
    built = make_api(settings, redis_client)
    with built:
        yield built


def test_unauthenticated_bodies_are_never_read(small: Api) -> None:
    """401 comes before a single chunk of the body is pulled, on the REST and the SQL endpoint,
    however large the body says it is."""
    stranger = bearer(token("GHOST_U", new_private_key()))
    for url, fields in ((small.url("insertFiles"), SNOWPIPE_ERROR), ("/api/v1/sql", SQL_ERROR)):
        for headers in ({}, stranger):
            body = Body(chunks=1000)  # 64 MB, were it read
            resp = post(small.client.app, url, body, headers, length=True)
            assert resp.status_code == 401, resp.text
            assert set(resp.json()) == fields
            assert body.pulled == 0


def test_a_token_is_verified_once(small: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate verifies a new token once; the route does not verify it again, and later calls
    with the same token skip the verification, yet a removed key takes effect at once."""
    calls: list[str | None] = []
    real = Authenticator.authenticate

    def counted(self: Authenticator, authorization: str | None, token_type: str | None = None) -> Any:
        calls.append(authorization)
        return real(self, authorization, token_type)

    monkeypatch.setattr(Authenticator, "authenticate", counted)
    loader = bearer(token("LOADER_U", small.keys["LOADER_U"]))
    url = small.url("insertFiles")
    for i in range(3):
        resp = small.client.post(url, json={"files": [{"path": f"once{i}.csv"}]}, headers=loader)
        assert resp.status_code == 200, resp.text
    assert len(calls) == 1
    resp = small.client.post("/api/v1/sql", json={"sql": "SHOW PIPES"}, headers=loader)
    assert resp.status_code == 200, resp.text
    assert len(calls) == 1
    small.sql("ALTER USER LOADER_U UNSET RSA_PUBLIC_KEY")
    for resp in (
        small.client.post(url, json={"files": [{"path": "late.csv"}]}, headers=loader),
        small.client.post("/api/v1/sql", json={"sql": "SHOW PIPES"}, headers=loader),
    ):
        assert resp.status_code == 401 and NO_MATCHING_KEY in resp.json()["message"], resp.text
    assert small.queued() == 3


def test_a_declared_length_over_the_limit_gets_413_unread(small: Api) -> None:
    loader = bearer(token("LOADER_U", small.keys["LOADER_U"]))
    for url, fields in ((small.url("insertFiles"), SNOWPIPE_ERROR), ("/api/v1/sql", SQL_ERROR)):
        body = Body(chunks=5)  # 320 KiB against 256 KiB
        resp = post(small.client.app, url, body, loader, length=True)
        assert resp.status_code == 413, resp.text
        assert set(resp.json()) == fields and "262144 bytes" in resp.json()["message"]
        assert body.pulled == 0
    assert small.queued() == 0


def test_a_chunked_body_is_cut_off_at_the_limit(small: Api) -> None:
    """Without a Content-Length the body is counted as it comes, and refused at the first chunk
    past the limit: the rest is never pulled."""
    loader = bearer(token("LOADER_U", small.keys["LOADER_U"]))
    body = Body(chunks=1000)
    resp = post(small.client.app, small.url("insertFiles"), body, loader)
    assert resp.status_code == 413, resp.text
    assert set(resp.json()) == SNOWPIPE_ERROR and resp.json()["code"] == "390413"
    assert body.pulled == 5  # 4 chunks are 256 KiB exactly; the fifth crosses the limit
    # A body within the limit still goes through.
    ok = small.insert("LOADER_U", ["fits.csv"])
    assert ok.status_code == 200 and small.queued() == 1


def test_a_slow_body_gets_408(small: Api) -> None:
    loader = bearer(token("LOADER_U", small.keys["LOADER_U"]))
    for url, fields in ((small.url("insertFiles"), SNOWPIPE_ERROR), ("/api/v1/sql", SQL_ERROR)):
        body = Body(chunks=3, chunk_bytes=16, stall_after=1)
        resp = post(small.client.app, url, body, loader)
        assert body.stalled, "the client never stalled"
        assert resp.status_code == 408, resp.text
        assert set(resp.json()) == fields and "0.5 s" in resp.json()["message"]
        assert body.pulled == 1


def test_unknown_users_and_wrong_keys_get_one_answer(api: Api) -> None:
    """Whether the user exists, has a key, or has another key, the caller learns nothing."""
    api.sql("CREATE USER KEYLESS_U")
    key = api.keys["LOADER_U"]
    url = api.url("insertFiles")
    tokens = {
        "unknown user": token("GHOST_U", key),
        "user without a key": token("KEYLESS_U", key),
        "wrong key": token("LOADER_U", new_private_key()),
        "another user's key": token("WATCHER_U", key),
        "right fingerprint, wrong signature": token("LOADER_U", new_private_key(), fp_of=key),
    }
    answers = {}
    for case, tok in tokens.items():
        rest = api.client.post(url, json={"files": [{"path": "a"}]}, headers=bearer(tok))
        sql = api.client.post("/api/v1/sql", json={"sql": "SHOW PIPES"}, headers=bearer(tok))
        assert rest.status_code == sql.status_code == 401, (case, rest.text, sql.text)
        answers[case] = (rest.content, sql.content)
    assert len(set(answers.values())) == 1, answers
    rest_body, sql_body = next(iter(answers.values()))
    assert NO_MATCHING_KEY.encode() in rest_body and NO_MATCHING_KEY.encode() in sql_body
    for name in ("GHOST_U", "KEYLESS_U", "LOADER_U", "WATCHER_U"):
        assert name.encode() not in rest_body + sql_body


def test_failed_logins_from_one_address_get_429(small: Api) -> None:
    """Three rejected tokens are forgiven; the fourth request from that address gets 429 on every
    route, even with a valid token, unless that token was verified before. Other addresses and
    requests without a token are not counted."""
    app = small.client.app
    verified = bearer(token("LOADER_U", small.keys["LOADER_U"]))
    assert (
        small.client.post(
            small.url("insertFiles"), json={"files": [{"path": "v.csv"}]}, headers=verified
        ).status_code
        == 200
    )
    bad = bearer(token("GHOST_U", new_private_key()))
    for _ in range(10):  # no token, or not a JWT: nothing to guess, not counted
        assert post(app, small.url("insertFiles"), Body(1, 8), {}).status_code == 401
        assert post(app, small.url("insertFiles"), Body(1, 8), bearer("not-a-jwt")).status_code == 401
    statuses = [post(app, "/api/v1/sql", Body(1, 8), bad).status_code for _ in range(3)]
    assert statuses == [401, 401, 401]
    fresh = bearer(token("WATCHER_U", small.keys["WATCHER_U"]))
    for url, headers, fields in (
        ("/api/v1/sql", bad, SQL_ERROR),
        (small.url("insertFiles"), bad, SNOWPIPE_ERROR),
        (small.url("insertReport"), fresh, SNOWPIPE_ERROR),  # valid, but never verified here
    ):
        resp = post(app, url, Body(1, 8), headers)
        assert resp.status_code == 429, resp.text
        assert set(resp.json()) == fields and "failed authentications" in resp.json()["message"]
        assert int(resp.headers["retry-after"]) >= 1
    body = Body(1, 8)
    assert post(app, "/api/v1/sql", body, bad).status_code == 429 and body.pulled == 0
    resp = post(app, small.url("insertFiles"), Body(0), verified)  # a token verified before
    assert resp.status_code == 400, resp.text  # past the gate: the empty body is the problem now
    assert post(app, "/api/v1/sql", Body(1, 8), bad, address="10.1.2.3").status_code == 401
    assert small.client.get("/health").status_code == 200


def test_the_sql_endpoint_has_a_rate_limit_per_user(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    with make_api(
        tuned(isolated_settings, auth={"sql_rate_limit_per_s": 0.001, "sql_rate_limit_burst": 3}),
        redis_client,
    ) as api:
        loader = bearer(token("LOADER_U", api.keys["LOADER_U"]))
        statuses = [
            api.client.post("/api/v1/sql", json={"sql": "SHOW PIPES"}, headers=loader).status_code
            for _ in range(4)
        ]
        assert statuses == [200, 200, 200, 429]
        resp = api.client.post("/api/v1/sql", json={"sql": "SHOW PIPES"}, headers=loader)
        assert resp.status_code == 429 and set(resp.json()) == SQL_ERROR
        assert "Too many statements from user 'LOADER_U'" in resp.json()["message"]
        assert int(resp.headers["retry-after"]) >= 1
        for _ in range(5):  # the administrator is exempt
            assert api.sql("SHOW PIPES") is not None
        watcher = bearer(token("WATCHER_U", api.keys["WATCHER_U"]))
        assert api.client.post("/api/v1/sql", json={"sql": "SHOW PIPES"}, headers=watcher).status_code == 200
        assert api.insert("LOADER_U", ["rest.csv"]).status_code == 200  # REST has its own budget


def test_limiter_memory_is_bounded() -> None:
    """Callers rotating names or addresses evict each other, never grow the map past its bound;
    a limited key stays limited while fewer than the bound of others pass by."""
    limiter = RateLimiter(rate=0.001, burst=2, max_keys=100)
    for _ in range(3):
        limiter.retry_after("mallory")
    assert limiter.peek("mallory") is not None
    for i in range(50):
        limiter.retry_after(f"10.0.{i // 256}.{i % 256}")
    assert limiter.peek("mallory") is not None and limiter.retry_after("mallory") is not None
    for i in range(100_000):
        limiter.retry_after(f"user{i}")
    assert len(limiter) == 100
    assert limiter.peek("nobody-yet") is None and len(limiter) == 100  # peeking stores nothing


def test_redis_down_answers_503_without_the_url(isolated_settings: Settings) -> None:
    secret = "hunter2-redis-password"
    settings = isolated_settings.model_copy(
        update={
            "redis": isolated_settings.redis.model_copy(
                update={"url": f"redis://floe:{secret}@127.0.0.1:6379/0"}
            )
        }
    )
    client = isolated_settings.redis.client()
    with make_api(settings, client) as api:
        loader = bearer(token("LOADER_U", api.keys["LOADER_U"]))
        assert api.insert("LOADER_U", ["up.csv"]).status_code == 200
        dead = free_port()
        client.connection_pool.disconnect()
        client.connection_pool = redis.ConnectionPool(host="127.0.0.1", port=dead, socket_connect_timeout=2)
        with pytest.raises(redis.ConnectionError):
            client.ping()  # the fault is in place
        for resp, fields in (
            (api.client.post("/api/v1/sql", json={"sql": "SHOW PIPES"}, headers=loader), SQL_ERROR),
            (
                api.client.post(api.url("insertFiles"), json={"files": [{"path": "a"}]}, headers=loader),
                SNOWPIPE_ERROR,
            ),
        ):
            assert resp.status_code == 503, resp.text
            assert set(resp.json()) == fields and resp.json()["message"] == METADATA_STORE_DOWN
            for leak in (secret, "redis://", "6379", str(dead), "Connection refused", "Error"):
                assert leak not in resp.text


@pytest.fixture
def api(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> Iterator[Api]:
    built = make_api(isolated_settings, redis_client)
    with built:
        yield built


# ------------------------------------------------------------------------------------------------
# uvicorn's request head (a real server: the bounds live in the HTTP protocol, below the app)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    """uvicorn with the API's protocol and a 0.5 s head timeout, serving a trivial app."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=bounded_httptools(MAX_HEAD_BYTES, 0.5),
        log_config=None,
        lifespan="off",
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    wait_until(lambda: srv.started, timeout=20)
    yield "127.0.0.1", port
    srv.should_exit = True
    thread.join(10)


def exchange(address: tuple[str, int], data: bytes, timeout: float = 5.0) -> bytes:
    """Send the bytes and read until the server closes the connection (or ``timeout``)."""
    with socket.create_connection(address, timeout=timeout) as sock:
        if data:
            with contextlib.suppress(OSError):  # the server may answer and close before taking it all
                sock.sendall(data)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except TimeoutError:
            return out + b"<still open>"
        except ConnectionResetError:
            pass
        return out


def test_request_heads_are_bounded_in_size_and_time(server: tuple[str, int]) -> None:
    ok = exchange(server, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 204"), ok
    huge = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (4 * MAX_HEAD_BYTES)
    assert exchange(server, huge).startswith(b"HTTP/1.1 431"), "an endless header was not cut off"
    # Idle and dribbling clients are cut off after the head timeout, instead of holding a slot.
    assert exchange(server, b"").startswith(b"HTTP/1.1 408")
    assert exchange(server, b"GET / HTTP/1.1\r\nHo").startswith(b"HTTP/1.1 408")
    # A head within the bound, followed in the same packet by a body, is not mistaken for a big head.
    body = b"b" * (2 * MAX_HEAD_BYTES)
    post = b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    assert exchange(server, post).startswith(b"HTTP/1.1 204")
