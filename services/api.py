"""The HTTP API: the SQL endpoint used by `floe sql`, health and Prometheus metrics.

The Snowpipe REST endpoints (insertFiles, insertReport, loadHistoryScan) join this app next.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel

from floe.errors import FloeError, SqlError
from floe.runtime import log_context
from floe.settings import Settings
from services.sql import SqlExecutor

log = logging.getLogger("floe.api")


class SqlRequest(BaseModel):
    """Body of POST /api/v1/sql."""

    sql: str
    """One Snowflake SQL statement."""


def create_app(settings: Settings, client: redis.Redis | None = None) -> FastAPI:
    """Build the app; the settings are passed in, never read here."""
    app = FastAPI(
        title="Floe", version="0.1.0", description="Self-hosted Snowpipe: SQL and REST ingestion API"
    )
    rclient = client or redis.Redis.from_url(settings.redis.url)
    executor = SqlExecutor(settings, rclient)
    registry = CollectorRegistry()
    requests = Counter("floe_api_requests", "API requests", ["route", "status"], registry=registry)
    latency = Histogram("floe_api_latency_seconds", "API latency", ["route"], registry=registry)
    app.state.executor = executor

    @app.middleware("http")
    async def _context(request: Request, call_next: Any) -> Response:
        rid = request.query_params.get("requestId") or str(uuid.uuid4())
        token = log_context.set({"request_id": rid})
        started = time.perf_counter()
        try:
            response: Response = await call_next(request)
        finally:
            log_context.reset(token)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        requests.labels(path, str(response.status_code)).inc()
        latency.labels(path).observe(time.perf_counter() - started)
        return response

    @app.get("/health")
    def health() -> dict[str, str]:
        """Liveness and Redis reachability."""
        rclient.ping()
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics() -> Response:
        """Prometheus metrics."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/api/v1/sql")
    async def sql(body: SqlRequest) -> JSONResponse:
        """Run one statement; answers columns and rows, or a Snowflake-style error."""
        try:
            result = await run_in_threadpool(executor.execute, body.sql)
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
    """Entry point of `floe api`."""
    import uvicorn

    from floe.runtime import Readiness, setup_logging

    setup_logging(settings, "api")
    ready = Readiness(settings, "api")
    app = create_app(settings)

    @app.on_event("startup")
    async def _ready() -> None:
        ready.set()

    @app.on_event("shutdown")
    async def _unready() -> None:
        ready.clear()

    uvicorn.run(
        app, host=settings.api.host, port=settings.api.port, log_config=None, timeout_graceful_shutdown=20
    )
