"""The HTTP API: the Snowpipe REST endpoints, the SQL endpoint used by `floe sql`, health, metrics.

Every endpoint but /health, /healthz, /readyz and the OpenAPI docs needs a key-pair JWT; /metrics
does too unless the API binds to loopback, or it is sent the scrape token (``MetricsAccess``).
The ``Gate`` middleware checks it before a byte of the body is read, then reads the body under a size
and a time limit; routes find the caller in ``request.state.identity``. At start-up the app makes sure
the admin user exists with the key in ``auth.admin_key_file`` (creating the key on first start),
which is the key `floe sql` signs with.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from types import FrameType
from typing import Any
from urllib.parse import parse_qs

import anyio
import anyio.from_thread
import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from floe.catalog import ADMIN_ROLE, Catalog, User, now_ms
from floe.catalog.ddl import Defaults
from floe.errors import AuthenticationFailed
from floe.keypair import create_private_file, ensure_key_file, public_key_body
from floe.keys import REDIS_ERRORS, Keys, RedisClient
from floe.metrics import ApiMetrics, ApiProcessMetrics, MetricsAccess, QueueCollector, RedisErrors
from floe.runtime import log_context
from floe.settings import Settings
from services.access import Need, authorize
from services.answers import ErrorAnswer, RestError, Throttled, answer_for, is_rest
from services.auth import (
    Authenticator,
    Identity,
    RateLimiter,
    RejectedToken,
    ScopedTokens,
)
from services.console import console_router, is_console_path
from services.dedup import Deduper
from services.health import HEALTHZ, READYZ, ReadyChecks, health_router
from services.query import Result, RowSink
from services.snowpipe import SnowpipeService, caller_of, router
from services.sql import SqlExecutor
from services.stages import UPLOAD_PATH
from services.stages import router as stages_router
from services.streaming import StreamingService
from services.streaming import router as streaming_router
from services.streaming_paths import RawStreamingPaths
from services.streaming_session import (
    TELEMETRY_MAX_BYTES,
    TELEMETRY_PATH,
    Hostnames,
    session_router,
    unknown_streaming_route,
)

log = logging.getLogger("floe.api")

ADMISSION_ERRORS: tuple[type[Exception], ...] = (AuthenticationFailed, RestError, Throttled, *REDIS_ERRORS)
"""What admitting a request can raise that has an answer of its own (401, 400 for a role the token
names that is not granted, 429, 503)."""

PUBLIC_PATHS = frozenset(
    {"/health", HEALTHZ, READYZ, "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
)
"""Paths served without a token (and without a body)."""
METRICS_PATH = "/metrics"
"""Served without a token while the API binds to loopback; elsewhere to the scrape token, or to a
user whose role holds ``READ_METRICS`` (the gate admits its JWT as any route's)."""
READ_METRICS = Need("ACCOUNT", "", ("MONITOR",))
"""What a user needs to read /metrics off loopback: its labels name every pipe of the account."""
TELEMETRY_TOO_LARGE = (
    f"The telemetry body is larger than {TELEMETRY_MAX_BYTES} bytes; Floe discards the SDK's "
    "telemetry, so the client may send none (property enable_telemetry_reporting=false)."
)
MAX_HEAD_BYTES = 32 * 1024
"""Largest request line plus headers uvicorn's httptools parser is fed; a JWT is under 1 KiB."""


class SqlRequest(BaseModel):
    """Body of POST /api/v1/sql."""

    sql: str
    """Snowflake SQL: one statement, or several separated by ';' that run as one session."""
    role: str | None = None
    """The role to act as (as USE ROLE would); it must be granted to the user. Default: the user's
    DEFAULT_ROLE."""
    stream: bool = False
    """Answer ``application/x-ndjson`` as the rows come, without the ``query.max_result_rows``
    limit: ``{"columns": [...]}``, then ``{"rows": [[...], ...]}`` pages of at most
    ``query.page_rows`` rows, then ``{"success": true, "rows": <total>, "stats": {...}}``, or
    ``{"success": false, "code", "sqlState", "message"}`` when the statement fails after the first
    line (its time limit, memory, a table read); a failure before it answers as without stream."""


class RequestContext:
    """Gives every log line of a request its request id, and counts and times requests per route.

    Plain ASGI: FastAPI's ``@app.middleware("http")`` runs each request in an extra task and
    re-streams its response, which cost more than a whole insertFiles call's own work.
    """

    def __init__(self, app: ASGIApp, metrics: ApiMetrics, redis_errors: RedisErrors) -> None:
        self.app = app
        self.metrics = metrics
        self.redis_errors = redis_errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query = scope.get("query_string", b"")
        rid = parse_qs(query.decode("latin-1")).get("requestId", [""])[0] if b"requestId" in query else ""
        token = log_context.set({"request_id": rid or str(uuid.uuid4())})
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            log_context.reset(token)
            path = getattr(scope.get("route"), "path", None) or route_template(scope)
            self.metrics.observe(path, scope.get("method", "?"), status, time.perf_counter() - started)
            # Within the app only an unavailable metadata store answers 503 (services/answers.py);
            # /readyz counts its own.
            if status == 503 and path != READYZ:
                self.redis_errors.inc("request")


def route_template(scope: Scope) -> str:
    """The template of the route a request's path names, for a request answered before routing
    (the gate's refusals): the metrics label it by route like the others, never by its raw path."""
    for route in getattr(getattr(scope.get("app"), "router", None), "routes", ()):
        if route.matches(scope)[0] is not Match.NONE:
            return str(getattr(route, "path", "unmatched"))
    return "unmatched"


def _log_profile(stats: dict[str, Any]) -> None:
    """Log what a query read, its blob counts as structured fields beside the request id.

    A table scanned whole (blobs_scanned == blobs_total under a WHERE) is then easy to find in the
    logs. The statement itself is not logged: its literals may be data.
    """
    total, scanned = int(stats["blobs_total"]), int(stats["blobs_scanned"])
    log.info(
        "query read %d of %d blobs (%d skipped by min/max statistics)",
        scanned,
        total,
        total - scanned,
        extra={"blobs_total": total, "blobs_scanned": scanned},
    )


NDJSON = "application/x-ndjson"
STREAM_PAGES = 2
"""Pages of a streamed SQL answer held between the query's thread and the client: past them the
query waits for the client (back-pressure), so a slow reader never makes the API hold its result."""


def _line(value: Any) -> bytes:
    """One NDJSON line, encoded as JSONResponse encodes a body."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode() + b"\n"


class _Pages:
    """The query thread's side of a streamed answer (a ``RowSink``): its lines go into a memory
    stream of ``STREAM_PAGES``, so a page is handed over only once there is room for it. The answer
    closes the stream's receiving end when it is done or the client left; a page then fails with
    ``anyio.BrokenResourceError``, which ends the query."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[bytes](STREAM_PAGES)
        self.rows = 0
        self.stop: Callable[[], None] | None = None

    def watch(self, stop: Callable[[], None]) -> None:
        self.stop = stop

    def start(self, columns: list[str]) -> None:
        # The stream is empty before the first line: there is room.
        anyio.from_thread.run_sync(self.send.send_nowait, _line({"columns": columns}))

    def page(self, rows: list[list[Any]], timeout_s: float) -> None:
        line = _line({"rows": rows})  # encoded here, in the query's thread, not on the event loop

        async def put() -> None:
            with anyio.fail_after(timeout_s):
                await self.send.send(line)

        anyio.from_thread.run(put)
        self.rows += len(rows)


async def _until_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` once the client has gone (uvicorn drops what is sent to a gone client)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


class StreamedSql(Response):
    """The answer of POST /api/v1/sql with ``"stream": true`` (``SqlRequest.stream``).

    The statement runs in a thread of ``limiter`` and hands its lines to ``_Pages``; this sends them
    as they come. Until the first line (the columns), a failure is answered as without stream, with
    its HTTP status; after it, in the trailer. A client that leaves cancels the query, which frees
    its connection and its ``query.max_concurrent`` slot."""

    media_type = NDJSON

    def __init__(self, run: Callable[[RowSink], Result], limiter: anyio.CapacityLimiter) -> None:
        super().__init__()
        self._run = run
        self._limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pages = _Pages()
        outcome: list[Result | Exception] = []

        async def work() -> None:
            try:
                outcome.append(await anyio.to_thread.run_sync(self._run, pages, limiter=self._limiter))
            except Exception as exc:  # noqa: BLE001 -- answered: before the first line or in the trailer
                outcome.append(exc)
            finally:
                pages.send.close()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(work)
            async with anyio.create_task_group() as answer:
                answer.start_soon(_until_disconnect, receive, answer.cancel_scope)
                await self._answer(scope, receive, send, pages, outcome)
                answer.cancel_scope.cancel()
            # Done, or the client left: a query still running stops at its next page, or now.
            pages.receive.close()
            if not outcome and pages.stop is not None:
                pages.stop()

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, pages: _Pages, outcome: list[Result | Exception]
    ) -> None:
        first: bytes | None = None
        with contextlib.suppress(anyio.EndOfStream):
            first = await pages.receive.receive()
        if first is None and outcome and isinstance(outcome[0], Exception):
            await answer_for(outcome[0], scope["path"]).response()(scope, receive, send)
            return
        headers = [(b"content-type", NDJSON.encode()), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if first is not None:
            await send({"type": "http.response.body", "body": first, "more_body": True})
        async for line in pages.receive:
            await send({"type": "http.response.body", "body": line, "more_body": True})
        ended = outcome[0]
        if isinstance(ended, Result):
            if "blobs_total" in ended.stats:
                _log_profile(ended.stats)
            trailer = _line({"success": True, "rows": pages.rows, "stats": ended.stats})
        else:
            trailer = _line(answer_for(ended, scope["path"]).body())
        await send({"type": "http.response.body", "body": trailer, "more_body": False})


def client_key(scope: Scope) -> str:
    """Whom the failed-login limit counts: the client address, an IPv6 client by its /64."""
    client = scope.get("client")
    host = str(client[0]) if client else "unknown"
    if ":" in host:
        try:
            return str(ipaddress.IPv6Network(f"{host}/64", strict=False))
        except ValueError:
            return host
    return host


class Gate:
    """Authenticates a request, then reads its body under a size and a time limit, before any route.

    Order matters: an unauthenticated caller must not make the API hold its body, and nothing may
    parse a body before its size is known to be within ``max_body`` bytes. Refusals answer in the
    route's error format without reading the body (uvicorn discards what the client still sends).
    A token verified before is admitted from the authenticator's cache without I/O (its route
    confirms user and key in the catalog read it does anyway); any other is verified here, in a
    worker thread. Well-formed tokens that fail count against the client address; past that
    limit the address gets 429 until it recovers, except for a token verified before.
    """

    def __init__(
        self,
        app: ASGIApp,
        authenticator: Authenticator,
        failed_logins: RateLimiter,
        max_body: int,
        body_timeout_s: float,
        scoped: ScopedTokens | None = None,
        streamed: dict[str, int] | None = None,
        metrics: MetricsAccess | None = None,
        bounded: dict[str, tuple[int, str]] | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics or MetricsAccess("127.0.0.1", None)
        """Who reads /metrics without a JWT (``METRICS_PATH``)."""
        self.authenticator = authenticator
        self.scoped = scoped
        self.failed_logins = failed_logins
        self.max_body = max_body
        self.body_timeout_s = body_timeout_s
        self.streamed = streamed or {}
        """PUT paths whose route reads its body itself, as a stream, with the size bound given
        here (a file PUT on a stage may be gigabytes: it is never held whole)."""
        self.bounded = bounded or {}
        """Paths whose body is bounded below ``max_body``: the bound and the refusal's text."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The console checks its own session cookie, before it reads a body (services/console).
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or is_console_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        if scope["path"] == METRICS_PATH and await self._metrics_without_jwt(scope, receive, send):
            return
        path: str = scope["path"]
        authorization = token_type = length = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
            elif name == b"x-snowflake-authorization-token-type":
                token_type = value.decode("latin-1")
            elif name == b"content-length":
                length = value
        try:
            identity = await self._admit(scope, authorization, token_type)
        except ADMISSION_ERRORS as exc:
            await _send(send, answer_for(exc, path))
            return
        scope.setdefault("state", {})["identity"] = identity
        streamed = self.streamed.get(path) if scope.get("method") == "PUT" else None
        limit, too_large = self.bounded.get(path, (self.max_body, ""))
        if length is not None:
            declared = int(length) if length.isdigit() else -1
            if declared < 0:
                await _refuse(send, path, 400, "390400", "Content-Length must be a non-negative integer.")
                return
            if declared > (limit if streamed is None else streamed):
                await _refuse(send, path, 413, "390413", too_large or self._too_large(streamed))
                return
        if streamed is not None:  # authenticated: its route streams the body under its own bounds
            await self.app(scope, receive, send)
            return
        body = await self._read(scope, receive, send, path, limit, too_large)
        if body is None:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # a later http.disconnect, for routes that watch for it
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _metrics_without_jwt(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Answer /metrics without a JWT: let it through on loopback or with the scrape token,
        refuse it (401, saying what to send) without a bearer that could be a JWT. False: a JWT,
        which the gate admits as any route's, and the route checks ``READ_METRICS``."""
        authorization = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None
        )
        if self.metrics.open or self.metrics.scraper(authorization):
            await self.app(scope, receive, send)
            return True
        _scheme, _, bearer = (authorization or "").strip().partition(" ")
        if bearer.strip().count(".") == 2:  # a JWT's three parts; a scrape token is one
            return False
        answer = answer_for(RestError(401, "390101", self.metrics.refusal(users=True)), METRICS_PATH)
        await _send(send, answer, {"www-authenticate": 'Bearer realm="floe metrics"'})
        return True

    async def _admit(self, scope: Scope, authorization: str | None, token_type: str | None) -> Identity:
        """The caller's identity; Throttled while its address has failed too often."""
        # The type header is optional (Snowflake documents it so): without it a scoped token is
        # told by its form (``ScopedTokens.presented``).
        if self.scoped is not None and self.scoped.presented(authorization, token_type):
            return self._admit_scoped(scope, authorization)
        identity = self.authenticator.admit_cached(authorization, token_type)
        if identity is not None:
            return identity
        address = client_key(scope)
        wait = self.failed_logins.peek(address)
        if wait is not None:
            message = (
                f"Too many failed authentications from {address}; retry in {wait:.1f} s "
                "with a valid key-pair JWT."
            )
            raise Throttled(message, wait)
        try:
            return await run_in_threadpool(self.authenticator.admit, authorization, token_type)
        except RejectedToken:
            self.failed_logins.retry_after(address)
            raise

    def _admit_scoped(self, scope: Scope, authorization: str | None) -> Identity:
        """A scoped token: an HMAC check without I/O, counted against the address when it fails
        (the route's ``resolve`` confirms the user and key in its own catalog read)."""
        assert self.scoped is not None
        address = client_key(scope)
        wait = self.failed_logins.peek(address)
        if wait is not None:
            raise Throttled(f"Too many failed authentications from {address}; retry in {wait:.1f} s.", wait)
        try:
            return self.scoped.admit(authorization, scope["path"])
        except RejectedToken:
            self.failed_logins.retry_after(address)
            raise

    def _too_large(self, streamed: int | None = None) -> str:
        if streamed is not None:
            return f"The file is larger than {streamed} bytes (stages.max_file_bytes); split or compress it."
        return (
            f"The request body is larger than {self.max_body} bytes (api.max_body_bytes); split the "
            "request: insertFiles takes at most 5,000 paths per call."
        )

    async def _read(
        self, scope: Scope, receive: Receive, send: Send, path: str, limit: int, too_large: str
    ) -> bytes | None:
        """The whole body, at most ``limit`` bytes, or None once a refusal was sent (or the client left)."""
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return None  # http.disconnect: nobody is left to answer
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        await _refuse(send, path, 413, "390413", too_large or self._too_large())
                        return None
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            message_text = (
                f"The request body did not arrive within {self.body_timeout_s:g} s (api.body_timeout_s); "
                "send it at once, or check the network between the client and the API."
            )
            await _refuse(send, path, 408, "390408", message_text)
            return None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _refuse(send: Send, path: str, status: int, code: str, message: str) -> None:
    await _send(send, answer_for(RestError(status, code, message), path))


async def _send(send: Send, answer: ErrorAnswer, extra: dict[str, str] | None = None) -> None:
    """An error answer straight through ASGI: the gate answers before any route (or body) exists."""
    payload = json.dumps(answer.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    headers += [
        (name.encode(), value.encode()) for name, value in {**answer.headers(), **(extra or {})}.items()
    ]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def ensure_admin(settings: Settings, catalog: Catalog) -> User:
    """The admin user, with the public half of the admin key file (created on first start)."""
    key = ensure_key_file(settings.auth.admin_key_file)
    name = settings.auth.admin_user.upper()
    body = public_key_body(key.public_key())
    user = catalog.find(User, name)
    if user is None or user.rsa_public_key != body or ADMIN_ROLE not in user.roles:
        user = User(
            name=name,
            rsa_public_key=body,
            rsa_public_key_2=user.rsa_public_key_2 if user else None,
            default_role=ADMIN_ROLE,
            roles=sorted({ADMIN_ROLE, *(user.roles if user else [])}),
            created_ms=user.created_ms if user else now_ms(),
        )
        catalog.put(user)
        log.info("admin user %s registered with the key in %s", name, settings.auth.admin_key_file)
    return user


def create_app(settings: Settings, client: RedisClient | None = None) -> FastAPI:
    """Build the app; the settings are passed in, never read here."""
    app = FastAPI(
        title="Floe",
        version="0.1.0",
        description="Self-hosted Snowpipe: the Snowpipe REST API (key-pair JWT), a SQL endpoint, "
        "health and metrics.",
    )
    rclient = client or settings.redis.client()
    keys = Keys(settings.redis.prefix)
    catalog = Catalog(rclient, keys)
    ensure_admin(settings, catalog)
    process_metrics = ApiProcessMetrics.create()
    executor = SqlExecutor(settings, rclient, process_metrics.files)
    authenticator = Authenticator(settings.auth, settings.account, catalog)
    limiter = RateLimiter(settings.auth.rate_limit_per_s, settings.auth.rate_limit_burst)
    sql_limiter = RateLimiter(settings.auth.sql_rate_limit_per_s, settings.auth.sql_rate_limit_burst)
    failed_logins = RateLimiter(settings.auth.failed_auth_per_s, settings.auth.failed_auth_burst)
    sql_threads = anyio.CapacityLimiter(settings.query.max_concurrent)
    snowpipe = SnowpipeService(
        rclient,
        keys,
        catalog,
        Deduper(rclient, keys, settings.retention_seconds, process_metrics.files),
        Defaults(settings.database, settings.schema_name),
    )
    app.include_router(router(snowpipe, authenticator, limiter))
    secret = create_private_file(settings.auth.scoped_token_key_file, lambda: secrets.token_bytes(32))
    scoped = ScopedTokens(secret, settings.account, settings.auth.scoped_token_lifetime_s)
    streaming = StreamingService(settings, rclient, catalog, keys, process_metrics.appends)
    app.include_router(streaming_router(streaming, authenticator))
    # What the official SDK asks before its first channel (hostname, token, pipe info, telemetry).
    app.include_router(session_router(streaming, authenticator, scoped, Hostnames.of(settings)))
    # PUT and GET's transfers (internal stages), under the REST rate limit.
    app.include_router(
        stages_router(executor.stage_files, lambda r: caller_of(r, authenticator), executor.use_role, limiter)
    )
    app.include_router(
        console_router(settings, rclient, executor, authenticator, sql_threads, sql_limiter, secret)
    )
    # Queue depth and age are read at scrape time, here rather than in the job (floe/metrics.py).
    process_metrics.registry.register(QueueCollector(catalog, rclient, keys, process_metrics.redis_errors))
    app.include_router(health_router(ReadyChecks(settings, rclient, keys, process_metrics.redis_errors)))
    app.state.metrics = process_metrics
    app.state.executor = executor
    metrics_access = MetricsAccess(settings.api.host, settings.api.resolve_metrics_token())
    metrics_access.warn("api")
    app.state.limiters = {"rest": limiter, "sql": sql_limiter, "failed_logins": failed_logins}

    # Added first, runs last (just before routing): a streaming name may hold an encoded '/', so
    # its route is found on the raw path; the gate and the metrics see the path as sent.
    app.add_middleware(RawStreamingPaths)
    # Added last, runs first: the request context (ids, metrics) wraps the gate, so refusals count.
    app.add_middleware(
        Gate,
        authenticator=authenticator,
        failed_logins=failed_logins,
        max_body=settings.api.max_body_bytes,
        body_timeout_s=settings.api.body_timeout_s,
        scoped=scoped,
        streamed={UPLOAD_PATH: settings.stages.max_file_bytes},
        metrics=metrics_access,
        bounded={TELEMETRY_PATH: (TELEMETRY_MAX_BYTES, TELEMETRY_TOO_LARGE)},
    )
    app.add_middleware(
        RequestContext, metrics=process_metrics.requests, redis_errors=process_metrics.redis_errors
    )

    @app.get("/health")
    def health() -> dict[str, str]:
        """Liveness and Redis reachability."""
        rclient.ping()
        return {"status": "ok"}

    @app.get(METRICS_PATH)
    def metrics(request: Request) -> Response:
        """Prometheus metrics: to anyone while the API binds to loopback; elsewhere to the scrape
        token (``api.metrics_token``) or a user whose role holds MONITOR on the account."""
        identity = getattr(request.state, "identity", None)
        if isinstance(identity, Identity):  # the gate admitted a JWT: the caller must hold MONITOR
            try:
                authorize(catalog, authenticator.resolve(identity), READ_METRICS)
            except Exception as exc:  # noqa: BLE001 -- the HTTP boundary; answer_for logs what is unexpected
                return answer_for(exc, request.url.path).response()
        return Response(generate_latest(process_metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        # The streaming routes' 404 and 405 carry a code: the SDK retries a code-less 404 for hours.
        return unknown_streaming_route(request, exc) or await http_exception_handler(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        message = f"invalid request: {where}: {first.get('msg', 'malformed')}"
        code = "390400" if is_rest(request.url.path) else "000904"
        return answer_for(RestError(400, code, message), request.url.path).response()

    @app.post("/api/v1/sql")
    async def sql(request: Request, body: SqlRequest) -> Response:
        """Run one statement as the token's user; answers columns and rows, or a Snowflake-style error.
        With ``"stream": true``, NDJSON lines as the rows come (``SqlRequest.stream``)."""

        def run(sink: RowSink | None = None) -> Result:
            principal = caller_of(request, authenticator)
            # The administrator is exempt: it can drop everything anyway, and `floe sql`, the
            # harness and the tests run as it; the limit keeps other users from starving the API.
            wait = None if principal.is_admin else sql_limiter.retry_after(principal.user)
            if wait is not None:
                raise Throttled(
                    f"Too many statements from user '{principal.user}'; retry in {wait:.2f} s.", wait
                )
            return executor.execute(body.sql, principal, body.role, sink)

        if body.stream:
            # The statement's thread holds one of ``sql_threads`` until its last page is taken.
            return StreamedSql(run, sql_threads)
        try:
            # Statements get threads of their own, so slow queries cannot take the pool's threads
            # that insertFiles and authentication use.
            result = await anyio.to_thread.run_sync(run, limiter=sql_threads)
        except Exception as exc:  # noqa: BLE001 -- the HTTP boundary; answer_for logs what is unexpected
            return answer_for(exc, request.url.path).response()
        if "blobs_total" in result.stats:
            _log_profile(result.stats)
        return JSONResponse(
            {"success": True, "columns": result.columns, "rows": result.rows, "stats": result.stats}
        )

    return app


def bounded_httptools(max_head: int, timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol, bounded: a head over ``max_head`` bytes gets 431, one not
    complete within ``timeout_s`` gets 408 (services/protocol.py says why)."""
    from services.protocol import BoundedHttpTools  # imports httptools, which is optional

    return BoundedHttpTools.limited(max_head, timeout_s)


def serve(settings: Settings) -> None:
    """Entry point of `floe api`: the first SIGTERM drains in-flight requests, the second exits."""
    import uvicorn

    from floe.runtime import Readiness, Shutdown, setup_logging
    from floe.tls import ensure_tls

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.should_exit:
                self.force_exit = True  # a second signal of any kind stops waiting for requests
            super().handle_exit(sig, frame)

    setup_logging(settings, "api")
    # Before the app: with tls=auto a first `floe api` (Docker, no `make up`) creates its certificate.
    tls = ensure_tls(settings)
    for action in tls.actions if tls is not None else ():
        log.info("tls: %s", action)
    ready = Readiness(settings, "api")
    app = create_app(settings)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        ready.set()
        try:
            yield
        finally:
            ready.clear()

    app.router.lifespan_context = lifespan

    # uvicorn re-raises the signal it drained on into the handler it found installed; with ours
    # there, a drained stop ends the process with status 0 rather than death by SIGTERM.
    shutdown = Shutdown().install()
    api = settings.api
    try:
        import httptools  # noqa: F401

        http: Any = bounded_httptools(MAX_HEAD_BYTES, api.body_timeout_s)
    except ImportError:
        http = "h11"  # h11 bounds the head itself (h11_max_incomplete_event_size)
    config = uvicorn.Config(
        app,
        host=api.host,
        port=api.port,
        log_config=None,
        timeout_graceful_shutdown=20,
        http=http,
        limit_concurrency=api.limit_concurrency,
        timeout_keep_alive=api.timeout_keep_alive_s,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        ssl_certfile=tls.files.cert if tls is not None else None,
        ssl_keyfile=tls.files.key if tls is not None else None,
    )
    Server(config).run()
    log.info("stopped (drain requested: %s)", shutdown.requested)
