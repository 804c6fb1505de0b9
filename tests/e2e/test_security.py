"""Security checks on a running stack: secrets stay out of logs, servers stay on loopback, and the
API refuses callers without a valid token.

(That a blob is unreadable without the master key is tests/e2e/test_autoingest.py::
test_blobs_are_encrypted.)
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import jwt
import pytest

from floe.aws import client as aws_client
from floe.keypair import load_private_key, new_private_key, sign_token
from floe.settings import ApiSettings, AwsSettings, RedisSettings, Settings
from front.client import auth_header
from tests.conftest import ROOT, VENV_BIN, Stack, free_port, unique, wait_until
from tests.e2e.test_autoingest import csv_file, make_pipe
from tests.e2e.test_bad_input import row_for

pytestmark = pytest.mark.e2e

# ------------------------------------------------------------------------------------------------
# Secrets in logs

# A JWT's header and payload are base64url JSON objects, which always start with "eyJ" ('{"').
_JWT = re.compile(r"eyJ[A-Za-z0-9_\-]*")
# An AWS secret written out as a value, in the spellings of boto, pydantic and AWS' own APIs.
_AWS_SECRET = re.compile(
    r"(secret_access_key|SecretAccessKey|aws_secret_access_key|secret_key)"
    r"['\"]?\s*[=:]\s*['\"]?(?!\*)[^\s'\",}]+",
    re.IGNORECASE,
)
PASSWORD = "Tr0ub4dor&3-" + "x" * 8
"""A password a user gives in SQL (accepted and ignored); it is a credential too."""


def secrets_of(stack: Stack) -> dict[str, str]:
    """Every secret of the stack that must never be logged, by what it is."""
    settings = stack.settings
    found = {
        "master key": Path(settings.encryption.master_key_file).read_text().strip(),
        "password": PASSWORD,
    }
    pem = Path(settings.auth.admin_key_file).read_text()
    body = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    found["admin private key (joined)"] = "".join(body)
    for i, line in enumerate(body):
        found[f"admin private key line {i + 1}"] = line
    secret = settings.aws.secret_access_key.get_secret_value()
    if len(secret) >= 16:  # LocalStack's 'test' is too common a word to look for as such
        found["aws secret"] = secret
    return found


def leaks(text: str, secrets: dict[str, str]) -> list[str]:
    """What of the secrets, JWTs and AWS secret values appears in text (with where, for the message)."""
    out: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        out += [f"line {number}: {what}" for what, value in secrets.items() if value in line]
        out += [f"line {number}: a JWT ({m.group()[:12]}...)" for m in _JWT.finditer(line)]
        out += [f"line {number}: an AWS secret value ({m.group(1)})" for m in _AWS_SECRET.finditer(line)]
    return out


def test_leak_finder_finds_what_it_looks_for(stack: Stack) -> None:
    """Safeguard: the log grep below can fail, i.e. it recognises each kind of secret in a log line."""
    secrets = secrets_of(stack)
    token = auth_header(stack.settings)["Authorization"].split()[1]
    for what, value in secrets.items():
        assert leaks(f'{{"msg": "got {value}"}}', secrets), what
    assert leaks(f'{{"msg": "Bearer {token}"}}', {})
    assert leaks("aws_secret_access_key='abcd1234'", {})
    assert leaks('{"SecretAccessKey": "abcd1234"}', {})
    assert not leaks('{"secret_access_key": "**********"}', {})


@contextmanager
def debug_process(stack: Stack, command: str, env: dict[str, str], log: Path) -> Iterator[None]:
    """Run one more `floe <command>` of the stack at log level DEBUG, with its own state dir."""
    state = log.parent / f"{command}-debug-state"
    full_env = {**stack.env, "FLOE_LOG_LEVEL": "DEBUG", "FLOE_STATE_DIR": str(state), **env}
    ready = state / "run" / f"{command}.ready"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(VENV_BIN / "floe"), command],
            cwd=ROOT,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(lambda: ready.exists() or proc.poll() is not None, timeout=60, what=f"debug {command}")
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def knock(settings: Settings, port: int, pipe: str) -> None:
    """Requests that carry secrets: good tokens, and bad ones the API must refuse without echoing."""
    base = f"http://127.0.0.1:{port}"
    admin = settings.auth.admin_user
    key = load_private_key(Path(settings.auth.admin_key_file).read_text())
    bad_tokens = [
        sign_token("OTHER", admin, key, 600),  # right key, wrong account
        sign_token(settings.account, admin, new_private_key(), 600),  # a key nobody registered
        sign_token(settings.account, admin, key, -600),  # expired
        jwt.encode({"iss": "x", "sub": "y"}, "k" * 32, algorithm="HS256"),
    ]
    with httpx.Client(base_url=base, timeout=30) as http:
        ok = http.post("/api/v1/sql", json={"sql": "SHOW PIPES"}, headers=auth_header(settings))
        assert ok.status_code == 200, ok.text
        report = f"/v1/data/pipes/FLOE.PUBLIC.{pipe}/insertReport"
        assert http.get(report, headers=auth_header(settings)).status_code == 200
        for token in bad_tokens:
            headers = {"Authorization": f"Bearer {token}"}
            for resp in (
                http.post("/api/v1/sql", json={"sql": "SHOW PIPES"}, headers=headers),
                http.get(report, headers=headers),
            ):
                assert resp.status_code == 401, resp.text
                assert token not in resp.text and token.split(".")[1] not in resp.text


def test_no_key_token_or_credential_in_any_log_line(stack: Stack, bucket: str, s3: Any) -> None:
    """Safeguard: keys never appear in logs. After a run that signs and refuses tokens, sets a
    password, loads (encrypting with the master key) and handles a poison message, no log line of
    the stack, nor of an API and a consumer running at DEBUG, holds the master key, the admin
    private key, a password, a JWT or an AWS secret value."""
    settings = stack.settings
    table, pipe = make_pipe(stack, bucket)
    user = unique("u_")
    stack.sql(f"CREATE USER {user} PASSWORD = '{PASSWORD}' COMMENT = 'not a key user'")
    stack.sql(f"ALTER USER {user} SET PASSWORD = '{PASSWORD}'")
    knock(settings, settings.api.port, pipe.upper())

    logs = Path(stack.logs)
    queue, dlq = unique("q"), unique("dlq")
    consumer_env = {"FLOE_CONSUMER__QUEUE_NAME": queue, "FLOE_CONSUMER__DLQ_NAME": dlq}
    with (
        debug_process(stack, "api", {"FLOE_API__PORT": str(port := free_port())}, logs / "api-debug.log"),
        debug_process(stack, "consumer", consumer_env, logs / "consumer-debug.log"),
    ):
        knock(settings, port, pipe.upper())
        sqs = aws_client(settings.aws, "sqs")
        url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        s3.put_object(Bucket=bucket, Key="in/secret.csv", Body=csv_file(0, 2))
        event = {"s3": {"bucket": {"name": bucket}, "object": {"key": "in/debug.csv", "size": 1}}}
        s3.put_object(Bucket=bucket, Key="in/debug.csv", Body=csv_file(10, 2))
        sqs.send_message(
            QueueUrl=url, MessageBody=json.dumps({"Records": [{"eventName": "ObjectCreated:Put", **event}]})
        )
        sqs.send_message(QueueUrl=url, MessageBody="poison, not json")
        for name in ("secret.csv", "debug.csv"):
            got = wait_until(lambda name=name: row_for(stack, table, name), what=f"load of {name}")
            assert got["STATUS"] == "Loaded"
        wait_until(
            lambda: "poison message" in (logs / "consumer-debug.log").read_text(), what="poison logged"
        )

    secrets = secrets_of(stack)
    texts = {path.name: path.read_text(errors="replace") for path in sorted(logs.glob("*.log"))}
    assert {"api.log", "consumer.log", "pipeline.log", "api-debug.log", "consumer-debug.log"} <= set(texts)
    found = {name: leaks(text, secrets) for name, text in texts.items()}
    assert {name: where for name, where in found.items() if where} == {}


# ------------------------------------------------------------------------------------------------
# Listening sockets


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def _address(hex_address: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """An address of /proc/net/tcp{,6}: each 32-bit word in host (little-endian) order, then the port."""
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.IPv4Address(words) if len(raw) == 4 else ipaddress.IPv6Address(words)
    return ip, int(port, 16)


def _loopback(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket the process listens on."""
    inodes: set[str] = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return []
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    out: list[tuple[str, int]] = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ip, port = _address(fields[1])
                out.append((str(ip), port))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_every_server_listens_on_loopback_only(stack: Stack, services: Settings) -> None:
    """Safeguard: nothing Floe starts is reachable from the network by default. Every listening TCP
    socket of the API, the consumer, the Spark job's JVM and its Python workers, and of LocalStack
    and Redis, is bound to loopback, and the settings default to loopback endpoints."""
    assert ApiSettings().host == "127.0.0.1"
    assert urlparse(AwsSettings().endpoint_url).hostname == "127.0.0.1"
    assert urlparse(RedisSettings().url).hostname == "127.0.0.1"

    sockets: list[tuple[str, int, str, int]] = []  # (process, pid, address, port)
    for name in ("api", "consumer", "pipeline"):
        for pid in _descendants(stack.procs[name].pid):
            command = _cmdline(pid)
            sockets += [(f"{name}: {command[:80]}", pid, ip, port) for ip, port in listening(pid)]
    assert any(ip == "127.0.0.1" and port == stack.settings.api.port for _, _, ip, port in sockets), sockets
    assert any("java" in who for who, _, _, _ in sockets), f"no JVM socket was inspected: {sockets}"
    exposed = [s for s in sockets if not _loopback(ipaddress.ip_address(s[2]))]
    assert exposed == []

    # The services the stack uses (started by infra.stack) share this network namespace.
    ports = {urlparse(services.aws.endpoint_url).port or 80, urlparse(services.redis.url).port or 6379}
    local = [
        _address(line.split()[1]) for t in ("tcp", "tcp6") for line in _proc_net(t) if line.split()[3] == "0A"
    ]
    assert {port for _, port in local} >= ports
    assert [(str(ip), port) for ip, port in local if port in ports and not _loopback(ip)] == []


def _proc_net(table: str) -> list[str]:
    try:
        return Path(f"/proc/self/net/{table}").read_text().splitlines()[1:]
    except OSError:
        return []


# ------------------------------------------------------------------------------------------------
# Authentication


def test_sql_and_rest_endpoints_refuse_calls_without_a_token(stack: Stack, bucket: str) -> None:
    """Safeguard: every data endpoint needs a key-pair JWT. Without one (or with a malformed one)
    the SQL endpoint and the Snowpipe REST endpoints answer 401, and say so without revealing
    whether the pipe exists; with the admin's token the same calls succeed."""
    _, pipe = make_pipe(stack, bucket)
    base = f"http://127.0.0.1:{stack.settings.api.port}"
    rest = f"/v1/data/pipes/FLOE.PUBLIC.{pipe.upper()}"
    missing = "/v1/data/pipes/FLOE.PUBLIC.NO_SUCH_PIPE"
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/api/v1/sql", {"json": {"sql": "SHOW PIPES"}}),
        ("POST", "/api/v1/sql", {"json": {"sql": f"DROP PIPE {pipe}"}}),
        ("POST", f"{rest}/insertFiles", {"json": {"files": [{"path": "a.csv"}]}}),
        ("GET", f"{rest}/insertReport", {}),
        ("GET", f"{rest}/loadHistoryScan", {"params": {"startTimeInclusive": "2026-01-01T00:00:00Z"}}),
        ("POST", f"{missing}/insertFiles", {"json": {"files": [{"path": "a.csv"}]}}),
        ("GET", f"{missing}/insertReport", {}),
    ]
    refusals = [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer not.a.jwt"},
        {"Authorization": "Basic YTpi"},
    ]
    with httpx.Client(base_url=base, timeout=30) as http:
        for method, path, kwargs in calls:
            for headers in refusals:
                resp = http.request(method, path, headers=headers, **kwargs)
                assert resp.status_code == 401, (method, path, headers, resp.status_code, resp.text)
                body = resp.json()
                assert body["success"] is False and body["message"], body
        # The pipe survived the refused DROP, and the same calls pass with a token.
        admin = auth_header(stack.settings)
        for method, path, kwargs in calls[:5]:
            if "DROP PIPE" in json.dumps(kwargs):
                continue
            resp = http.request(method, path, headers=admin, **kwargs)
            assert resp.status_code == 200, (method, path, resp.text)
    assert pipe.upper() in {r["name"] for r in stack.sql("SHOW PIPES")}
