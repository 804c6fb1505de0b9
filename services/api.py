"""The HTTP API: the Snowpipe REST endpoints, the SQL endpoint used by `floe sql`, health, metrics.

Every endpoint but /health, /metrics and the OpenAPI docs needs a key-pair JWT. The ``Gate``
middleware checks it before a byte of the body is read, then reads the body under a size and a
time limit; routes find the caller in ``request.state.identity``. At start-up the app makes sure
the admin user exists with the key in ``auth.admin_key_file`` (creating the key on first start),
which is the key `floe sql` signs with.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
import uuid
from types import FrameType
from typing import Any
from urllib.parse import parse_qs

import anyio
import anyio.to_thread
import redis
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from floe.catalog import ADMIN_ROLE, Catalog, User, now_ms
from floe.catalog.ddl import Defaults
from floe.errors import AuthenticationFailed, FloeError, PermissionDenied, SqlError
from floe.keypair import ensure_key_file, public_key_body
from floe.keys import Keys
from floe.runtime import log_context
from floe.settings import Settings
from services.auth import Authenticator, RateLimiter, RejectedToken
from services.dedup import Deduper
from services.snowpipe import METADATA_STORE_DOWN, RestError, SnowpipeService, caller_of, router
from services.sql import SqlExecutor

log = logging.getLogger("floe.api")

PUBLIC_PATHS = frozenset({"/health", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
"""Paths served without a token (and without a body)."""
MAX_HEAD_BYTES = 32 * 1024
"""Largest request line plus headers uvicorn's httptools parser is fed; a JWT is under 1 KiB."""
_SQL_STATES = {401: "08001", 408: "08001", 413: "54000", 429: "53400", 503: "08001"}


class SqlRequest(BaseModel):
    """Body of POST /api/v1/sql."""

    sql: str
    """One Snowflake SQL statement."""


class RequestContext:
    """Gives every log line of a request its request id, and counts and times requests per route.

    Plain ASGI: FastAPI's ``@app.middleware("http")`` runs each request in an extra task and
    re-streams its response, which cost more than a whole insertFiles call's own work.
    """

    def __init__(self, app: ASGIApp, requests: Counter, latency: Histogram) -> None:
        self.app = app
        self.requests = requests
        self.latency = latency

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
            path = getattr(scope.get("route"), "path", "unmatched")
            self.requests.labels(path, str(status)).inc()
            self.latency.labels(path).observe(time.perf_counter() - started)


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


def error_body(path: str, status: int, code: str, message: str) -> dict[str, Any]:
    """An error in the format of the route at ``path``: Snowpipe's under /v1/, the SQL endpoint's else."""
    if path.startswith("/v1/"):
        return {"code": code, "success": False, "message": message, "data": None}
    return {"success": False, "code": code, "sqlState": _SQL_STATES.get(status, "42000"), "message": message}


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
    ) -> None:
        self.app = app
        self.authenticator = authenticator
        self.failed_logins = failed_logins
        self.max_body = max_body
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
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
        identity = self.authenticator.admit_cached(authorization, token_type)
        if identity is None:
            address = client_key(scope)
            wait = self.failed_logins.peek(address)
            if wait is not None:
                message = (
                    f"Too many failed authentications from {address}; retry in {wait:.1f} s "
                    "with a valid key-pair JWT."
                )
                await _answer(send, path, 429, "390429", message, retry_after=wait)
                return
            try:
                identity = await run_in_threadpool(self.authenticator.admit, authorization, token_type)
            except AuthenticationFailed as exc:
                if isinstance(exc, RejectedToken):
                    self.failed_logins.retry_after(address)
                await _answer(send, path, 401, exc.code, exc.message)
                return
            except redis.RedisError as exc:
                log.warning("authentication needs the metadata store, which failed: %s", type(exc).__name__)
                await _answer(send, path, 503, "390503", METADATA_STORE_DOWN)
                return
        scope.setdefault("state", {})["identity"] = identity
        if length is not None:
            declared = int(length) if length.isdigit() else -1
            if declared < 0:
                await _answer(send, path, 400, "390400", "Content-Length must be a non-negative integer.")
                return
            if declared > self.max_body:
                await _answer(send, path, 413, "390413", self._too_large())
                return
        body = await self._read(scope, receive, send, path)
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

    def _too_large(self) -> str:
        return (
            f"The request body is larger than {self.max_body} bytes (api.max_body_bytes); split the "
            "request: insertFiles takes at most 5,000 paths per call."
        )

    async def _read(self, scope: Scope, receive: Receive, send: Send, path: str) -> bytes | None:
        """The whole body, or None once a refusal was sent (or the client left)."""
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
                    if size > self.max_body:
                        await _answer(send, path, 413, "390413", self._too_large())
                        return None
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            message_text = (
                f"The request body did not arrive within {self.body_timeout_s:g} s (api.body_timeout_s); "
                "send it at once, or check the network between the client and the API."
            )
            await _answer(send, path, 408, "390408", message_text)
            return None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _answer(
    send: Send, path: str, status: int, code: str, message: str, retry_after: float | None = None
) -> None:
    payload = json.dumps(error_body(path, status, code, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(max(1, round(retry_after + 0.5))).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
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


def create_app(settings: Settings, client: redis.Redis | None = None) -> FastAPI:
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
    executor = SqlExecutor(settings, rclient)
    authenticator = Authenticator(settings.auth, settings.account, catalog)
    limiter = RateLimiter(settings.auth.rate_limit_per_s, settings.auth.rate_limit_burst)
    sql_limiter = RateLimiter(settings.auth.sql_rate_limit_per_s, settings.auth.sql_rate_limit_burst)
    failed_logins = RateLimiter(settings.auth.failed_auth_per_s, settings.auth.failed_auth_burst)
    sql_threads = anyio.CapacityLimiter(settings.query.max_concurrent)
    snowpipe = SnowpipeService(
        rclient,
        keys,
        catalog,
        Deduper(rclient, keys, settings.retention_seconds),
        Defaults(settings.database, settings.schema_name),
    )
    app.include_router(router(snowpipe, authenticator, limiter))
    registry = CollectorRegistry()
    requests = Counter("floe_api_requests", "API requests", ["route", "status"], registry=registry)
    latency = Histogram("floe_api_latency_seconds", "API latency", ["route"], registry=registry)
    app.state.executor = executor
    app.state.limiters = {"rest": limiter, "sql": sql_limiter, "failed_logins": failed_logins}

    # Added last, runs first: the request context (ids, metrics) wraps the gate, so refusals count.
    app.add_middleware(
        Gate,
        authenticator=authenticator,
        failed_logins=failed_logins,
        max_body=settings.api.max_body_bytes,
        body_timeout_s=settings.api.body_timeout_s,
    )
    app.add_middleware(RequestContext, requests=requests, latency=latency)

    @app.get("/health")
    def health() -> dict[str, str]:
        """Liveness and Redis reachability."""
        rclient.ping()
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics() -> Response:
        """Prometheus metrics."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        message = f"invalid request: {where}: {first.get('msg', 'malformed')}"
        if request.url.path.startswith("/v1/"):
            return RestError(400, "390400", message).response()
        return JSONResponse(
            {"success": False, "code": "000904", "sqlState": "42000", "message": message}, 400
        )

    @app.post("/api/v1/sql")
    async def sql(request: Request, body: SqlRequest) -> JSONResponse:
        """Run one statement as the token's user; answers columns and rows, or a Snowflake-style error."""

        def run() -> Any:
            principal = caller_of(request, authenticator)
            # The administrator is exempt: it can drop everything anyway, and `floe sql`, the
            # harness and the tests run as it; the limit keeps other users from starving the API.
            wait = None if principal.is_admin else sql_limiter.retry_after(principal.user)
            if wait is not None:
                message = f"Too many statements from user '{principal.user}'; retry in {wait:.2f} s."
                retry = {"retry-after": str(max(1, round(wait + 0.5)))}
                return JSONResponse(error_body(request.url.path, 429, "390429", message), 429, retry)
            return executor.execute(body.sql, principal)

        try:
            # Statements get threads of their own, so slow queries cannot take the pool's threads
            # that insertFiles and authentication use.
            result = await anyio.to_thread.run_sync(run, limiter=sql_threads)
            if isinstance(result, JSONResponse):
                return result
        except AuthenticationFailed as exc:
            return JSONResponse(
                {"success": False, "code": exc.code, "sqlState": "08001", "message": exc.message}, 401
            )
        except PermissionDenied as exc:
            return JSONResponse(
                {"success": False, "code": exc.code, "sqlState": exc.sql_state, "message": exc.message}, 403
            )
        except SqlError as exc:
            return JSONResponse(
                {"success": False, "code": exc.code, "sqlState": exc.sql_state, "message": exc.message}, 422
            )
        except FloeError as exc:
            return JSONResponse(
                {"success": False, "code": "000603", "sqlState": "XX000", "message": str(exc)}, 500
            )
        except redis.RedisError as exc:
            # Neither the URL nor redis-py's text: either may carry the host, user or password.
            log.warning("statement failed: the metadata store is unavailable (%s)", type(exc).__name__)
            return JSONResponse(
                {"success": False, "code": "000603", "sqlState": "08001", "message": METADATA_STORE_DOWN}, 503
            )
        except Exception:
            log.exception("statement failed unexpectedly")
            return JSONResponse(
                {
                    "success": False,
                    "code": "000603",
                    "sqlState": "XX000",
                    "message": "internal error; see the API log (.floe/logs/api.log) for details",
                },
                500,
            )
        if "blobs_total" in result.stats:
            _log_profile(result.stats)
        return JSONResponse(
            {"success": True, "columns": result.columns, "rows": result.rows, "stats": result.stats}
        )

    return app


def bounded_httptools(max_head: int, timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with bounds that llhttp and httptools lack.

    Neither bounds a request head: httptools grows one header value, and uvicorn the URL and the
    header list, for as long as the client sends. uvicorn has no timeout for a head either, so
    idle or dribbling connections would hold ``limit_concurrency`` slots for ever. Here a head
    over ``max_head`` bytes gets 431, a head (or a first request) not complete ``timeout_s`` after
    its first byte (or after the connection opened) gets 408, and a body left unread behind an
    early answer (401, 413) may take at most ``timeout_s`` to drain; each then closes.
    """
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class BoundedHttpTools(HttpToolsProtocol):
        """httptools with a bounded request head and bounded waits for a head or a drain."""

        _head_left: int | None = max_head
        _heads = 0
        _timer: asyncio.TimerHandle | None = None

        def _arm(self, callback: Any) -> None:
            self._disarm()
            self._timer = self.loop.call_later(timeout_s, callback)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _refuse(self, status: int, reason: str) -> None:
            if self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete:
                text = reason.encode()
                self.transport.write(
                    b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
                    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (status, text, len(text), text)
                )
            self.transport.close()

        def _head_timed_out(self) -> None:
            self._timer = None
            if self.cycle is not None and not self.cycle.response_complete:
                self._arm(self._head_timed_out)  # a pipelined head waits for the answer before it
                return
            self._refuse(408, "Request Timeout")

        def _drain_timed_out(self) -> None:
            self._timer = None
            self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm(self._head_timed_out)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            left = self._head_left
            if left is not None:
                if self._timer is None:
                    self._arm(self._head_timed_out)
                if len(data) > left:
                    heads = self._heads
                    super().data_received(data[:left])
                    if self._heads == heads:
                        self._refuse(431, "Request Header Fields Too Large")
                        return
                    data = data[left:]
                    if self.transport.is_closing():
                        return
                else:
                    self._head_left = left - len(data)
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self._head_left = None
            self._heads += 1
            self._disarm()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._head_left = max_head
            self._disarm()
            drained = self.cycle is not None and self.cycle.response_complete
            super().on_message_complete()
            if drained:
                self._arm(self._head_timed_out)  # uvicorn's keep-alive timer was spent on the drain

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._head_left is None and not self.transport.is_closing():
                self._arm(self._drain_timed_out)  # answered before its body arrived: bound the drain

    return BoundedHttpTools


def serve(settings: Settings) -> None:
    """Entry point of `floe api`: the first SIGTERM drains in-flight requests, the second exits."""
    import uvicorn

    from floe.runtime import Readiness, Shutdown, setup_logging

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.should_exit:
                self.force_exit = True  # a second signal of any kind stops waiting for requests
            super().handle_exit(sig, frame)

    setup_logging(settings, "api")
    ready = Readiness(settings, "api")
    app = create_app(settings)

    @app.on_event("startup")
    async def _ready() -> None:
        ready.set()

    @app.on_event("shutdown")
    async def _unready() -> None:
        ready.clear()

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
    )
    Server(config).run()
    log.info("stopped (drain requested: %s)", shutdown.requested)
