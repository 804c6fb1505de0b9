"""AppClient, the in-process ASGI client the API tests use instead of starlette's TestClient."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from tests.asgi import CLIENT_ADDRESS, AppClient

pytestmark = pytest.mark.unit


@dataclass
class Recorder:
    """An ASGI app that answers with what it saw and records the loop and thread serving it."""

    loops: list[asyncio.AbstractEventLoop] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    clients: list[Any] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        if scope["path"] == "/boom":
            raise RuntimeError("the app failed")
        if scope["path"] == "/moved":
            await send({"type": "http.response.start", "status": 307, "headers": [(b"location", b"/")]})
            await send({"type": "http.response.body", "body": b""})
            return
        self.loops.append(asyncio.get_running_loop())
        self.threads.append(threading.current_thread())
        self.clients.append(scope["client"])
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen = {
            "method": scope["method"],
            "path": scope["path"],
            "query": scope["query_string"].decode(),
            "host": dict(scope["headers"]).get(b"host", b"").decode(),
            "marker": dict(scope["headers"]).get(b"x-marker", b"").decode(),
            "body": body.decode(),
        }
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"x-answer", b"yes")],
            }
        )
        await send({"type": "http.response.body", "body": json.dumps(seen).encode()})


def test_one_loop_serves_every_request_off_the_test_thread() -> None:
    app = Recorder()
    with AppClient(app) as client:
        assert client.get("/a").status_code == 200
        assert client.post("/b", json={"x": 1}).status_code == 200
    assert len(app.loops) == 2 and app.loops[0] is app.loops[1]
    assert app.threads[0] is app.threads[1] is not threading.current_thread()


def test_close_stops_the_portal_thread_and_ends_the_client() -> None:
    app = Recorder()
    client = AppClient(app)
    client.get("/")
    portal_thread = app.threads[0]
    assert portal_thread.is_alive()
    client.close()
    assert not portal_thread.is_alive()  # closing joins the thread: nothing holds up exit
    client.close()  # a second close is harmless
    with pytest.raises(RuntimeError):
        client.get("/")


def test_the_client_address_reaches_the_scope() -> None:
    app = Recorder()
    with AppClient(app) as client:
        client.get("/")
    with AppClient(app, client=("10.1.2.3", 40000)) as other:
        other.get("/")
    assert [tuple(c) for c in app.clients] == [CLIENT_ADDRESS, ("10.1.2.3", 40000)]


def test_requests_and_responses_carry_what_the_tests_use() -> None:
    app = Recorder()
    with AppClient(app) as client:
        resp = client.post(
            "/p",
            content="raw body",
            params={"requestId": "r1"},
            headers={"X-Marker": "m", "Content-Type": "text/plain"},
        )
        assert resp.status_code == 200 and resp.headers["x-answer"] == "yes"
        assert resp.json() == {
            "method": "POST",
            "path": "/p",
            "query": "requestId=r1",
            "host": "testserver",
            "marker": "m",
            "body": "raw body",
        }
        assert "raw body" in resp.text
        assert resp.request.headers["x-marker"] == "m"
        assert client.request("PUT", "/q", json={"k": "v"}).json()["body"] == '{"k":"v"}'
        assert client.get("/moved").json()["path"] == "/"  # redirects are followed, as TestClient did
        with pytest.raises(RuntimeError, match="the app failed"):
            client.get("/boom")  # app errors surface in the test, not as a bare 500
