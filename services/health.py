"""The API's health endpoints, public like /health: ``/healthz`` (the process answers) and ``/readyz``
(what a load needs answers: Redis, S3, and the Spark job).

/readyz runs its checks at once, each in a thread of its own limiter and within ``PROBE_TIMEOUT_S``,
so a store that hangs makes the probe answer 503 in time rather than hold it (or the API's threads).
The answer names each dependency with ``ok`` or what is wrong, never a URL or an error text that
could carry a host or a credential. The job is alive while its heartbeat in Redis is fresh
(``floe.heartbeat`` says why a heartbeat rather than its ready file).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from floe.aws import client_kwargs
from floe.catalog import now_ms
from floe.heartbeat import PIPELINE, STALE_BEATS, newest_beat_ms
from floe.keys import REDIS_ERRORS, Keys, RedisClient
from floe.metrics import RedisErrors
from floe.settings import Settings

HEALTHZ, READYZ = "/healthz", "/readyz"
PROBE_TIMEOUT_S = 2.0
"""Longest a readiness check may take; past it the dependency counts as not answering."""
PROBE_THREADS = 4
"""Threads the readiness checks may hold at once (a hung one holds its thread until it fails)."""
OK = "ok"


class ReadyChecks:
    """The checks behind /readyz."""

    def __init__(
        self, settings: Settings, client: RedisClient, keys: Keys, errors: RedisErrors, s3: Any | None = None
    ) -> None:
        self.client = client
        self.keys = keys
        self.errors = errors
        self.bucket = settings.pipeline.tables_bucket
        self.stale_ms = int(STALE_BEATS * settings.pipeline.heartbeat_s * 1000)
        self._aws = settings.aws
        self._s3 = s3
        self._s3_lock = threading.Lock()
        self.limiter = anyio.CapacityLimiter(PROBE_THREADS)

    def redis_and_job(self) -> dict[str, str]:
        """Redis answers PING; the job's newest heartbeat is fresh."""
        try:
            self.client.ping()
            beats = self.client.hgetall(self.keys.heartbeat(PIPELINE))
        except REDIS_ERRORS as exc:
            self.errors.inc("readyz")
            return {
                "redis": f"unreachable ({type(exc).__name__})",
                "pipeline": "unknown: Redis is unreachable",
            }
        newest = newest_beat_ms(beats)
        if newest is None:
            job = "no heartbeat: no Spark job (floe pipeline) has run its streaming query"
        elif (age := now_ms() - newest) > self.stale_ms:
            job = f"heartbeat {age / 1000:.0f} s old: the Spark job (floe pipeline) stopped or hangs"
        else:
            job = OK
        return {"redis": OK, "pipeline": job}

    def s3(self) -> dict[str, str]:
        """S3 answers a HEAD of the tables bucket (404, before the job first created it, answers too)."""
        try:
            self._client().head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "?"))
            if code in ("404", "NoSuchBucket", "NotFound"):
                return {"s3": OK}
            return {"s3": f"refused ({code})"}
        except (BotoCoreError, OSError) as exc:
            return {"s3": f"unreachable ({type(exc).__name__})"}
        return {"s3": OK}

    def _client(self) -> Any:
        with self._s3_lock:
            if self._s3 is None:
                kwargs = client_kwargs(self._aws)
                # A probe asks once and briefly: the caller retries, every few seconds.
                quick = Config(
                    connect_timeout=PROBE_TIMEOUT_S, read_timeout=PROBE_TIMEOUT_S, retries={"max_attempts": 1}
                )
                kwargs["config"] = kwargs["config"].merge(quick)
                self._s3 = boto3.session.Session().client("s3", **kwargs)
            return self._s3

    async def run(self) -> tuple[bool, dict[str, str]]:
        """Every check, at once; whether all are ok, and each one's answer."""
        results: dict[str, str] = {}

        async def one(check: Callable[[], dict[str, str]], names: tuple[str, ...]) -> None:
            with anyio.move_on_after(PROBE_TIMEOUT_S + 0.5):
                results.update(
                    await anyio.to_thread.run_sync(check, limiter=self.limiter, abandon_on_cancel=True)
                )
                return
            results.update({n: f"no answer within {PROBE_TIMEOUT_S:g} s" for n in names})

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(one, self.redis_and_job, ("redis", "pipeline"))
            tasks.start_soon(one, self.s3, ("s3",))
        checks = {name: results[name] for name in ("redis", "s3", "pipeline")}
        return all(v == OK for v in checks.values()), checks


def health_router(checks: ReadyChecks) -> APIRouter:
    """/healthz and /readyz (both in the API's PUBLIC_PATHS)."""
    api = APIRouter(tags=["Health"])

    @api.get(HEALTHZ)
    def healthz() -> dict[str, str]:
        """Alive: the process answers. Checks nothing else."""
        return {"status": "alive"}

    @api.get(READYZ)
    async def readyz() -> JSONResponse:
        """Ready: Redis and S3 answer and the Spark job's heartbeat is fresh; 503 naming what is not."""
        ready, answers = await checks.run()
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "checks": answers},
            status_code=200 if ready else 503,
            headers={"cache-control": "no-store"},
        )

    return api
