"""Fixtures of the external-function tests: real HTTP servers on 127.0.0.1 (uvicorn serving a
Starlette app in a background thread, on a port the kernel picks), a remote service that records
what it receives, and functions built the way the catalog defines them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from floe.catalog.models import ApiIntegration, Column, ExternalFunction, function_signature
from floe.external import FunctionCaller, RemoteFunction
from floe.external.remote import RemoteRequest, build_response, parse_request
from floe.settings import ExternalFunctionSettings
from tests.conftest import wait_until

Handler = Callable[[Request], Awaitable[Response]]


@contextlib.contextmanager
def running(app: ASGIApp) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 until the block ends; yields its base URL."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="remote-service", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), timeout=20, interval=0.01, what="uvicorn")
        assert server.started, "uvicorn did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)
        assert not thread.is_alive(), "uvicorn did not stop"


@pytest.fixture
def serve() -> Iterator[Callable[[ASGIApp], str]]:
    """Start apps (``serve(app) -> base URL``); all of them stop when the test ends."""
    with contextlib.ExitStack() as stack:
        yield lambda app: stack.enter_context(running(app))


@dataclass
class Seen:
    """One request as the service received it."""

    request: RemoteRequest
    """Its parsed batch."""
    content_encoding: str | None
    """Its Content-Encoding header."""


@dataclass
class Recorder:
    """What a test service received, counted across its (concurrent) requests."""

    api_key: str | None = None
    """Verify Floe's signature with this key."""
    seen: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def receive(self, request: Request) -> RemoteRequest:
        """Read, check and record one request."""
        body = await request.body()
        parsed = parse_request(body, request.headers, api_key=self.api_key)
        with self._lock:
            self.seen.append(Seen(parsed, request.headers.get("content-encoding")))
        return parsed

    @contextlib.contextmanager
    def flight(self) -> Iterator[int]:
        """Count a request in flight; yields how many are, this one included."""
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            now = self.in_flight
        try:
            yield now
        finally:
            with self._lock:
                self.in_flight -= 1

    @property
    def requests(self) -> int:
        """Requests received."""
        with self._lock:
            return len(self.seen)

    @property
    def rows(self) -> int:
        """Rows received, over all requests."""
        with self._lock:
            return sum(len(s.request.rows) for s in self.seen)

    @property
    def batch_ids(self) -> list[str]:
        """The batch id of each request, in arrival order."""
        with self._lock:
            return [s.request.batch_id for s in self.seen]


def echo(parsed: RemoteRequest) -> Response:
    """An answer that returns each row's first argument."""
    return json_response(build_response(parsed, [args[0] for args in parsed.args]))


def json_response(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer with exactly these bytes."""
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def app_of(handler: Handler) -> Starlette:
    """An app that routes every POST to ``handler``."""
    return Starlette(routes=[Route("/{path:path}", handler, methods=["POST"])])


async def wait_for(event: threading.Event, timeout: float | None = None) -> bool:
    """Wait for a thread event without blocking the server's loop."""
    return await asyncio.to_thread(event.wait, timeout)


NUMBER = Column(name="N", type="NUMBER", precision=38, scale=0)
VARCHAR = Column(name="S", type="VARCHAR")
VARIANT = Column(name="V", type="VARIANT")


def remote_function(
    url: str,
    *,
    args: list[Column] | None = None,
    returns: Column | None = None,
    immutable: bool = False,
    api_key: str | None = None,
    allowed: list[str] | None = None,
    blocked: list[str] | None = None,
    enabled: bool = True,
    **options: Any,
) -> RemoteFunction:
    """A function as the catalog would define it (ECHO(VARCHAR) RETURNS VARCHAR by default), calling
    ``url`` through an integration that allows ``allowed`` (default: the URL's origin)."""
    args = [VARCHAR] if args is None else args
    origin = "/".join(url.split("/")[:3]) + "/"
    integration = ApiIntegration(
        name="TEST_API",
        provider="AWS_API_GATEWAY",
        enabled=enabled,
        allowed_prefixes=[origin] if allowed is None else allowed,
        blocked_prefixes=blocked or [],
        api_key=api_key,
    )
    fn = ExternalFunction(
        name=function_signature("DB.S.ECHO", args),
        function_name="DB.S.ECHO",
        args=args,
        returns=returns or VARCHAR,
        volatility="IMMUTABLE" if immutable else "VOLATILE",
        integration="TEST_API",
        url=url,
        **options,
    )
    return RemoteFunction.of(fn, integration)


FAST = ExternalFunctionSettings(
    max_concurrency=4,
    request_timeout_s=10.0,
    retry_timeout_s=10.0,
    backoff_base_s=0.001,
    backoff_max_s=0.01,
)
"""Settings whose retries do not wait long."""


@pytest.fixture
def caller() -> Iterator[FunctionCaller]:
    """A caller with ``FAST`` settings, closed after the test."""
    with FunctionCaller(FAST) as made:
        yield made


@pytest.fixture
def gate(serve: Callable[[ASGIApp], str]) -> Iterator[threading.Event]:
    """An event a test's handlers wait on; set at teardown, before the servers stop (it depends on
    ``serve``, so it is torn down first), so no handler outlives its server."""
    event = threading.Event()
    yield event
    event.set()
