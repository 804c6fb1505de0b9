"""The HTTP API: the Snowpipe REST endpoints, the SQL endpoint used by `floe sql`, health, metrics.

Every endpoint but /health, /metrics and the OpenAPI docs needs a key-pair JWT. At start-up the
app makes sure the admin user exists with the key in ``auth.admin_key_file`` (creating the key on
first start), which is the key `floe sql` signs with.
"""

from __future__ import annotations

import logging
import time
import uuid
from types import FrameType
from typing import Any
from urllib.parse import parse_qs

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
from services.auth import Authenticator, RateLimiter
from services.dedup import Deduper
from services.snowpipe import RestError, SnowpipeService, router
from services.sql import SqlExecutor

log = logging.getLogger("floe.api")


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
            principal = authenticator.authenticate(
                request.headers.get("authorization"),
                request.headers.get("x-snowflake-authorization-token-type"),
            )
            return executor.execute(body.sql, principal)

        try:
            result = await run_in_threadpool(run)
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
            return JSONResponse(
                {
                    "success": False,
                    "code": "000603",
                    "sqlState": "08001",
                    "message": f"the metadata store (Redis at {settings.redis.url}) is unavailable: {exc}. "
                    "Is the stack up? Try `make up`.",
                },
                503,
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
        return JSONResponse(
            {"success": True, "columns": result.columns, "rows": result.rows, "stats": result.stats}
        )

    return app


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
    config = uvicorn.Config(
        app, host=settings.api.host, port=settings.api.port, log_config=None, timeout_graceful_shutdown=20
    )
    Server(config).run()
    log.info("stopped (drain requested: %s)", shutdown.requested)
