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
import statistics
import time
import uuid
from typing import Any

from bench.harness import BENCH_INTEGRATION
from floe.keypair import new_private_key, public_key_body, sign_token
from floe.settings import Settings
from front.client import run_sql


def setup(settings: Settings) -> tuple[str, str]:
    """A paused REST pipe and a token of a user that may operate it."""
    tag = uuid.uuid4().hex[:8]
    stage, table, pipe, role, user = (f"bench_{k}_{tag}" for k in ("st", "t", "p", "r", "u"))
    key = new_private_key()
    for statement in (
        BENCH_INTEGRATION,
        f"CREATE STAGE {stage} URL = 's3://bench-rest-{tag}/in/'"
        " STORAGE_INTEGRATION = floe_bench FILE_FORMAT = (TYPE = CSV)",
        f"CREATE TABLE {table} (a INT)",
        f"CREATE PIPE {pipe} AUTO_INGEST = FALSE AS COPY INTO {table} FROM @{stage}",
        f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = TRUE",
        f"CREATE ROLE {role}",
        f"CREATE USER {user} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}' DEFAULT_ROLE = {role}",
        f"GRANT ROLE {role} TO USER {user}",
        f"GRANT USAGE ON DATABASE FLOE TO ROLE {role}",
        f"GRANT USAGE ON SCHEMA FLOE.PUBLIC TO ROLE {role}",
        f"GRANT OPERATE ON PIPE {pipe} TO ROLE {role}",
    ):
        run_sql(settings, statement)
    return f"FLOE.PUBLIC.{pipe.upper()}", sign_token(settings.account, user, key)


def _request(host: str, port: int, path: str, token: str, body: bytes) -> bytes:
    """One insertFiles request as it goes on the wire (HTTP/1.1, keep-alive)."""
    head = (
        f"POST {path}?requestId={uuid.uuid4()} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _body(worker: int, call: int, files: int) -> bytes:
    paths = ",".join(f'{{"path":"w{worker}/c{call}/f{i}.csv"}}' for i in range(files))
    return f'{{"files":[{paths}]}}'.encode()


async def _client(
    host: str, port: int, path: str, token: str, files: int, until: float, lat: list[float], worker: int
) -> int:
    """One keep-alive connection firing calls back to back until ``until``; returns the calls made.

    A bare HTTP/1.1 client: httpx spent more CPU per call than the API it measured (the load and
    the API share this machine's cores), which capped the figure at the client's speed.
    """
    reader, writer = await asyncio.open_connection(host, port)
    calls = 0
    try:
        while time.perf_counter() < until:
            request = _request(host, port, path, token, _body(worker, calls, files))
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            lat.append(time.perf_counter() - started)
            status = int(head[9:12])
            if status != 200:
                raise RuntimeError(f"insertFiles answered {status}: {body[:300]!r}")
            calls += 1
    finally:
        writer.close()
    return calls


async def _load(
    host: str, port: int, pipe: str, token: str, seconds: float, concurrency: int, files: int
) -> dict[str, Any]:
    path = f"/v1/data/pipes/{pipe}/insertFiles"
    lat: list[float] = []
    await _client(host, port, path, token, files, time.perf_counter() + 1.0, [], -1)  # warm-up
    started = time.perf_counter()
    until = started + seconds
    calls = await asyncio.gather(
        *(_client(host, port, path, token, files, until, lat, w) for w in range(concurrency))
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
    return asyncio.run(_load(settings.api.host, settings.api.port, pipe, token, seconds, concurrency, files))


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
