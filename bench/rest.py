"""insertFiles throughput and latency of one running API process (100 files per call).

Needs a running stack (`make up`). Creates a REST-only pipe, a user with OPERATE on it, and fires
insertFiles calls with distinct paths from several concurrent clients for a fixed time. Nothing is
put in S3, and the pipe is paused so the Spark job does not compete for the CPU: the figure is the
API plus the dedup-and-enqueue step in Redis.

    .venv/bin/python -m bench.rest [--seconds 10] [--concurrency 16] [--files 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from typing import Any

import httpx

from floe.client import run_sql
from floe.keypair import new_private_key, public_key_body, sign_token
from floe.settings import Settings


def setup(settings: Settings) -> tuple[str, str]:
    """A paused REST pipe and a token of a user that may operate it."""
    tag = uuid.uuid4().hex[:8]
    stage, table, pipe, role, user = (f"bench_{k}_{tag}" for k in ("st", "t", "p", "r", "u"))
    key = new_private_key()
    for statement in (
        f"CREATE STAGE {stage} URL = 's3://bench-rest-{tag}/in/' FILE_FORMAT = (TYPE = CSV)",
        f"CREATE TABLE {table} (a INT)",
        f"CREATE PIPE {pipe} AUTO_INGEST = FALSE AS COPY INTO {table} FROM @{stage}",
        f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = TRUE",
        f"CREATE ROLE {role}",
        f"CREATE USER {user} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}' DEFAULT_ROLE = {role}",
        f"GRANT ROLE {role} TO USER {user}",
        f"GRANT OPERATE ON PIPE {pipe} TO ROLE {role}",
    ):
        run_sql(settings, statement)
    return f"FLOE.PUBLIC.{pipe.upper()}", sign_token(settings.account, user, key)


async def _client(
    http: httpx.AsyncClient, url: str, token: str, files: int, until: float, lat: list[float], worker: int
) -> int:
    calls = 0
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    while time.perf_counter() < until:
        body = json.dumps({"files": [{"path": f"w{worker}/c{calls}/f{i}.csv"} for i in range(files)]})
        started = time.perf_counter()
        resp = await http.post(url, params={"requestId": str(uuid.uuid4())}, content=body, headers=headers)
        lat.append(time.perf_counter() - started)
        resp.raise_for_status()
        calls += 1
    return calls


async def _load(
    base: str, pipe: str, token: str, seconds: float, concurrency: int, files: int
) -> dict[str, Any]:
    url = f"{base}/v1/data/pipes/{pipe}/insertFiles"
    lat: list[float] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        await _client(http, url, token, files, time.perf_counter() + 1.0, [], -1)  # warm-up
        started = time.perf_counter()
        until = started + seconds
        calls = await asyncio.gather(
            *(_client(http, url, token, files, until, lat, w) for w in range(concurrency))
        )
        elapsed = time.perf_counter() - started
    lat.sort()
    return {
        "calls": sum(calls),
        "calls_per_s": sum(calls) / elapsed,
        "files_per_s": sum(calls) * files / elapsed,
        "p50_ms": statistics.median(lat) * 1000,
        "p99_ms": lat[int(len(lat) * 0.99) - 1] * 1000 if lat else None,
        "concurrency": concurrency,
        "files_per_call": files,
    }


def run(settings: Settings, seconds: float = 10, concurrency: int = 16, files: int = 100) -> dict[str, Any]:
    """Measure; returns the figures."""
    pipe, token = setup(settings)
    base = f"http://{settings.api.host}:{settings.api.port}"
    return asyncio.run(_load(base, pipe, token, seconds, concurrency, files))


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10, help="how long to fire calls (default 10)")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument("--files", type=int, default=100, help="files per insertFiles call (default 100)")
    args = parser.parse_args()
    result = run(Settings(), args.seconds, args.concurrency, args.files)
    print(
        f"insertFiles: {result['calls_per_s']:.0f} calls/s ({result['files_per_s']:.0f} files/s), "
        f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, "
        f"{result['concurrency']} clients x {result['files_per_call']} files per call"
    )


if __name__ == "__main__":
    main()
