"""The official snowflake-ingest SDK, unchanged but for host, port and scheme, against the whole stack."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from snowflake.ingest import SimpleIngestManager, StagedFile

from floe.keypair import new_private_key, private_key_pem, public_key_body
from tests.conftest import Stack, unique, wait_until
from tests.e2e.test_autoingest import csv_file

pytestmark = pytest.mark.e2e


def grant_operate(stack: Stack, pipe: str) -> tuple[str, rsa.RSAPrivateKey]:
    """A user whose role may operate the pipe, and its private key."""
    role, user, key = unique("r_"), unique("u_"), new_private_key()
    stack.sql(f"CREATE ROLE {role}")
    stack.sql(
        f"CREATE USER {user} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}' DEFAULT_ROLE = {role}"
    )
    stack.sql(f"GRANT ROLE {role} TO USER {user}")
    stack.sql(f"GRANT USAGE ON DATABASE FLOE TO ROLE {role}")
    stack.sql(f"GRANT USAGE ON SCHEMA FLOE.PUBLIC TO ROLE {role}")
    stack.sql(f"GRANT OPERATE ON PIPE {pipe} TO ROLE {role}")
    return user, key


def rest_pipe(stack: Stack, bucket: str) -> tuple[str, str, str, str]:
    """A REST-only pipe, its table, a user whose role may operate it, and that user's key (PEM)."""
    stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
    stack.sql(
        f"CREATE STAGE {stage} URL = 's3://{bucket}/rest/'"
        " STORAGE_INTEGRATION = floe_tests FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
    )
    stack.sql(f"CREATE TABLE {table} (id INT, name VARCHAR, amount NUMBER(10,2), day DATE)")
    stack.sql(f"CREATE PIPE {pipe} AUTO_INGEST = FALSE AS COPY INTO {table} FROM @{stage}")
    user, key = grant_operate(stack, pipe)
    return f"FLOE.PUBLIC.{pipe}", table, user, private_key_pem(key)


def manager(stack: Stack, pipe: str, user: str, pem: str, port: int | None = None) -> SimpleIngestManager:
    return SimpleIngestManager(
        account="floe",
        user=user,
        pipe=pipe,
        private_key=pem,
        scheme="http",
        host="127.0.0.1",
        port=port or stack.settings.api.port,
    )


def test_sdk_ingests_reports_and_scans(stack: Stack, bucket: str, s3: Any) -> None:
    pipe, table, user, pem = rest_pipe(stack, bucket)
    names = ["a.csv", "b c+ü.csv"]
    for i, name in enumerate(names):
        s3.put_object(Bucket=bucket, Key=f"rest/{name}", Body=csv_file(i * 10, 4 + i))
    started = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)).isoformat(timespec="seconds")
    sdk = manager(stack, pipe, user, pem)

    resp = sdk.ingest_files([StagedFile(n, None) for n in names])
    assert resp["responseCode"] == "SUCCESS"

    seen: dict[str, dict[str, Any]] = {}

    def loaded() -> bool:
        for f in sdk.get_history()["files"]:  # the SDK keeps nextBeginMark between calls
            seen[f["path"]] = f
        return all(seen.get(n, {}).get("status") == "LOADED" for n in names)

    wait_until(loaded, what="insertReport to show both files LOADED")
    assert seen["a.csv"]["rowsInserted"] == 4 and seen["b c+ü.csv"]["rowsInserted"] == 5
    assert seen["a.csv"]["complete"] is True and seen["a.csv"]["firstError"] is None

    scan = sdk.get_history_range(started)
    assert scan["completeResult"] == "true"
    assert {f["path"]: f["status"] for f in scan["files"]} == dict.fromkeys(names, "LOADED")
    again = sdk.ingest_files([StagedFile(n, None) for n in names])  # a client retry
    assert again["responseCode"] == "SUCCESS"
    # Had the retry queued the files again, they would be pending now: count once nothing is.
    wait_until(lambda: pending_files(stack, pipe) == 0, what="the pipe's queue to be empty")
    assert len(sdk.get_history_range(started)["files"]) == 2
    assert stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"] == 9


def pending_files(stack: Stack, pipe: str) -> int:
    """SYSTEM$PIPE_STATUS's pendingFileCount: files queued and not yet committed."""
    status = stack.sql(f"SELECT SYSTEM$PIPE_STATUS('{pipe}') AS s")[0]["S"]
    return int(json.loads(status)["pendingFileCount"])


class _FlakyProxy(BaseHTTPRequestHandler):
    """Forwards to the API, but answers the first insertFiles with a 503 after it went through."""

    upstream = ""
    port = 0
    failures_left = 1
    lock = threading.Lock()

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        resp = httpx.request(
            self.command, self.upstream + self.path, content=body, headers=headers, timeout=30
        )
        with self.lock:
            fail = "insertFiles" in self.path and resp.status_code == 200 and type(self).failures_left > 0
            if fail:
                type(self).failures_left -= 1
        status, payload = (503, b'{"message": "injected"}') if fail else (resp.status_code, resp.content)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _forward
    do_POST = _forward

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def flaky_proxy(stack: Stack) -> Iterator[type[_FlakyProxy]]:
    """A proxy handler class whose ``port`` the test talks to; ``failures_left`` shows what it did."""
    handler: type[_FlakyProxy] = type(
        "Flaky", (_FlakyProxy,), {"upstream": f"http://127.0.0.1:{stack.settings.api.port}"}
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def test_sdk_retry_after_a_lost_answer_loads_each_file_once(
    stack: Stack, bucket: str, s3: Any, flaky_proxy: type[_FlakyProxy]
) -> None:
    pipe, table, user, pem = rest_pipe(stack, bucket)
    names = [f"retry_{i}.csv" for i in range(5)]
    for i, name in enumerate(names):
        s3.put_object(Bucket=bucket, Key=f"rest/{name}", Body=csv_file(i * 100, 3))
    started = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)).isoformat(timespec="seconds")
    sdk = manager(stack, pipe, user, pem, port=flaky_proxy.port)

    # The first call is applied but its answer lost (503); the SDK retries and succeeds.
    assert sdk.ingest_files([StagedFile(n, None) for n in names])["responseCode"] == "SUCCESS"
    assert flaky_proxy.failures_left == 0, "the proxy must have lost an answer"

    def history() -> list[dict[str, Any]] | None:
        files = sdk.get_history_range(started)["files"]
        return files if len(files) == len(names) and all(f["status"] == "LOADED" for f in files) else None

    files = wait_until(history, what="five files LOADED")
    assert sorted(f["path"] for f in files) == names
    assert sum(f["rowsInserted"] for f in files) == 15
    # A wrong second enqueue by the retry would still be queued or loading: count once none is.
    wait_until(lambda: pending_files(stack, pipe) == 0, what="the pipe's queue to be empty")
    assert stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"] == 15
