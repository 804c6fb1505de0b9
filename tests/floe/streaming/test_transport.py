"""The streaming client's HTTP layer: token exchange and refresh, retries, error mapping, bodies and
the planning of appends under the 4 MB cap. Also home of the fakes the client and channel tests use:
an in-memory v2 API injected as the transport, and a clock whose sleeps only move it forward."""

from __future__ import annotations

import base64
import os
import random
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import accumulate
from typing import Any
from unittest import mock
from urllib.parse import parse_qs, unquote

import httpcore
import httpx
import jwt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from floe.keypair import load_private_key, new_private_key, private_key_pem, sign_token
from floe.streaming import protocol as wire
from floe.streaming.client import StreamingIngestClient
from floe.streaming.protocol import ChannelStatus, Code
from floe.streaming.rows import decode_body, parse_rows
from floe.streaming.transport import (
    Batch,
    ChannelInvalidError,
    Codec,
    HttpxTransport,
    Planner,
    Session,
    StreamingAuthError,
    StreamingRequestError,
    StreamingUnavailable,
    scope_of,
)

pytestmark = pytest.mark.unit

PEM = private_key_pem(new_private_key())
PROPS = {"url": "https://floe.test:8443", "account": "acme", "user": "loader", "private_key": PEM}
DB, SCHEMA, PIPE = "DB", "PUBLIC", "EVENTS_PIPE"
COLUMNS = [
    {"name": "ID", "type": "NUMBER(38,0)", "nullable": False},
    {"name": "NAME", "type": "VARCHAR(16777216)", "nullable": True},
]

# ------------------------------------------------------------------------------------------------
# Fakes


class FakeClock:
    """Monotonic seconds that move only when told; ``sleep`` records the delay and moves the clock."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.now += seconds


@dataclass
class Call:
    """One request the fake server received."""

    method: str
    path: str
    params: dict[str, str]
    json: Any
    body: bytes | None
    headers: dict[str, str]

    def rows(self) -> list[dict[str, Any]]:
        """The NDJSON rows of an append, decoded with the server's own decoder."""
        assert self.body is not None
        data = parse_rows(decode_body(self.body, self.headers.get("Content-Encoding"))).data
        return [orjson.loads(line) for line in data.splitlines()]


@dataclass
class FakeChannel:
    """A channel as the fake server keeps it."""

    name: str
    generation: int
    token: str
    appends: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    pending_token: str | None = None
    committed: str | None = None
    status_code: str = wire.SUCCESS
    last_error_message: str | None = None


Reply = tuple[int, dict[str, str], bytes]


def error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> Reply:
    """An error answer as the API sends it."""
    return status, dict(headers or {}), orjson.dumps({"code": code, "message": message})


class FakeServer:
    """The v2 API in memory, as a Transport: it checks tokens, continuation tokens and bodies the way
    the real server does, answers scripted faults first, and notifies its condition on every call."""

    def __init__(self, expires_in: int = 3600) -> None:
        self.cond = threading.Condition()
        self.calls: list[Call] = []
        self.faults: dict[str, deque[Reply | Exception]] = defaultdict(deque)
        self.expires_in = expires_in
        self.issued = 0
        self.tokens: list[str] = []
        """Every scoped token issued, in order."""
        self.valid_tokens: set[str] = set()
        self.channels: dict[str, FakeChannel] = {}
        self.generations = 0
        self.on_rows: Callable[[Call], None] | None = None
        self.commit_after_polls = 0
        self.polls = 0
        self.closed = False

    # --------------------------------------------------------------------------- test controls

    def fail(self, kind: str, *replies: Reply | Exception) -> None:
        """Answer the next calls of ``kind`` (token, hostname, open, rows, drop, status) with these."""
        with self.cond:
            self.faults[kind].extend(replies)

    def revoke(self) -> None:
        """Forget every scoped token issued so far (as a server restart with new keys would)."""
        with self.cond:
            self.valid_tokens.clear()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
        """Wait, on the condition every call notifies, until ``predicate()`` holds."""
        with self.cond:
            assert self.cond.wait_for(predicate, timeout), "the fake server never reached the state"

    def of(self, kind: str) -> list[Call]:
        """The calls of one kind, in arrival order."""
        with self.cond:
            return [c for c in self.calls if _kind(c.method, c.path) == kind]

    def sent_rows(self, channel: str) -> list[dict[str, Any]]:
        """The rows the server accepted on a channel, in order."""
        with self.cond:
            return list(self.channels[channel].rows)

    # ------------------------------------------------------------------------------- transport

    def request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        json: Any = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Mapping[str, str], bytes]:
        call = Call(method, path, dict(params or {}), json, body, dict(headers or {}))
        kind = _kind(method, path)
        with self.cond:
            self.calls.append(call)
            self.cond.notify_all()
        if kind == "rows" and self.on_rows is not None:
            self.on_rows(call)  # outside the lock: a test may hold a sender here
        with self.cond:
            try:
                if self.faults[kind]:
                    fault = self.faults[kind].popleft()
                    if isinstance(fault, Exception):
                        raise fault
                    return fault
                return self._answer(kind, call)
            finally:
                self.cond.notify_all()

    def close(self) -> None:
        self.closed = True

    # --------------------------------------------------------------------------------- routes

    def _answer(self, kind: str, call: Call) -> Reply:
        if kind == "token":
            return self._token(call)
        auth = call.headers.get("Authorization", "")
        if call.headers.get("X-Snowflake-Authorization-Token-Type") != "OAUTH" or (
            auth.removeprefix("Bearer ") not in self.valid_tokens
        ):
            return error(401, Code.UNAUTHORIZED, "the scoped token is not valid")
        if kind == "hostname":
            return 200, {}, b"floe.test"  # plain text, a bare host, as the SDK parses it
        name = unquote(call.path.split("/channels/")[1].split("/")[0]) if "/channels/" in call.path else ""
        if kind == "open":
            return self._open(name, call)
        if kind == "rows":
            return self._rows(name, call)
        if kind == "drop":
            if self.channels.pop(name, None) is None:
                return error(404, Code.CHANNEL_DOES_NOT_EXIST, f"Channel '{name}' does not exist")
            return 200, {}, b"{}"
        assert kind == "status", call.path
        return self._status(call)

    def _token(self, call: Call) -> Reply:
        assert call.headers["X-Snowflake-Authorization-Token-Type"] == "KEYPAIR_JWT"
        assert call.headers["Content-Type"] == "application/x-www-form-urlencoded"
        claims = jwt.decode(
            call.headers["Authorization"].removeprefix("Bearer "), options={"verify_signature": False}
        )
        assert claims["sub"] == "ACME.LOADER"
        assert call.body is not None
        form = parse_qs(call.body.decode())
        assert form["grant_type"] == [wire.TOKEN_GRANT_TYPE]
        self.issued += 1
        # Plain text, a JWT whose iat and exp (seconds) give its lifetime, as the API answers.
        claims = {"iat": 1_000, "exp": 1_000 + self.expires_in, "jti": f"tok-{self.issued}"}
        token = jwt.encode(claims, "the-fake-servers-secret-of-32-bytes", algorithm="HS256")
        self.tokens.append(token)
        self.valid_tokens.add(token)
        return 200, {}, token.encode()

    def _open(self, name: str, call: Call) -> Reply:
        assert set(call.json) <= {wire.OFFSET_TOKEN, wire.FAIL_ON_UNCOMMITTED_ROWS}
        self.generations += 1
        old = self.channels.get(name)
        ch = FakeChannel(name, self.generations, f"{name}-g{self.generations}-0")
        ch.committed = call.json.get(wire.OFFSET_TOKEN, old.committed if old else None)
        ch.rows = old.rows if old else []
        self.channels[name] = ch
        status = ChannelStatus(DB, SCHEMA, PIPE, name, last_committed_offset_token=ch.committed)
        answer = {
            wire.NEXT_CONTINUATION_TOKEN: ch.token,
            wire.CHANNEL_STATUS: status.to_json(),
            wire.TABLE_COLUMNS: COLUMNS,
        }
        return 200, {}, orjson.dumps(answer)

    def _rows(self, name: str, call: Call) -> Reply:
        ch = self.channels.get(name)
        if ch is None:
            return error(404, Code.CHANNEL_DOES_NOT_EXIST, f"Channel '{name}' does not exist")
        if call.params.get(wire.CONTINUATION_TOKEN) != ch.token:
            return error(
                409, Code.INVALID_ROW_SEQUENCER, "the continuation token is not the channel's latest"
            )
        assert call.headers["Content-Type"] == "application/x-ndjson"
        assert call.body is not None
        if len(call.body) > wire.MAX_BODY_BYTES:
            return error(413, Code.PAYLOAD_TOO_LARGE, "too large")
        ch.rows.extend(call.rows())
        ch.appends += 1
        ch.token = f"{name}-g{ch.generation}-{ch.appends}"
        if wire.END_OFFSET_TOKEN in call.params:
            ch.pending_token = call.params[wire.END_OFFSET_TOKEN]
            if self.commit_after_polls == 0:
                ch.committed = ch.pending_token
        return 200, {}, orjson.dumps({wire.NEXT_CONTINUATION_TOKEN: ch.token})

    def _status(self, call: Call) -> Reply:
        self.polls += 1
        statuses = {}
        for name in call.json[wire.CHANNEL_NAMES]:
            ch = self.channels.get(name)
            if ch is None:
                continue
            if self.polls > self.commit_after_polls:
                ch.committed = ch.pending_token or ch.committed
            statuses[name] = ChannelStatus(
                DB,
                SCHEMA,
                PIPE,
                name,
                channel_status_code=ch.status_code,
                last_committed_offset_token=ch.committed,
                last_error_message=ch.last_error_message,
            ).to_json()
        return 200, {}, orjson.dumps({wire.CHANNEL_STATUSES: statuses})


def _kind(method: str, path: str) -> str:
    if path == wire.TOKEN_PATH:
        return "token"
    if path == wire.HOSTNAME_PATH:
        return "hostname"
    if path.endswith(":bulk-channel-status"):
        return "status"
    if path.startswith(f"{wire.API_PREFIX}/data/") and path.endswith("/rows"):
        return "rows"
    return {"PUT": "open", "DELETE": "drop"}[method]


def settle(client: StreamingIngestClient) -> None:
    """Wait until the scheduler made a pass after everything done so far (a decision, maybe not to
    send), without sleeping: it counts its passes under the condition it waits on."""
    f = client._flusher
    with f.cond:
        passes = f.passes
        f.schedule.notify()
        assert f.passed.wait_for(lambda: f.passes > passes, 30)


def random_rows(count: int, size: int, tag: str = "r") -> list[dict[str, Any]]:
    """Rows carrying ``size`` bytes of random base64 each: compression gains little on them."""
    return [
        {"ID": f"{tag}{i}", "NAME": base64.b64encode(os.urandom(size * 3 // 4)).decode()}
        for i in range(count)
    ]


def client_factory(server: FakeServer, clock: FakeClock) -> Iterator[Callable[..., StreamingIngestClient]]:
    """The body of each test module's ``make_client`` fixture: clients on the fake server and clock,
    closed without flushing at the end."""
    made: list[StreamingIngestClient] = []

    def make(**props: Any) -> StreamingIngestClient:
        client = StreamingIngestClient(
            "test",
            DB,
            SCHEMA,
            PIPE,
            properties={**PROPS, **props},
            transport=server,
            clock=clock,
            sleep=clock.sleep,
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close(wait_for_flush=False)


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_client(server: FakeServer, clock: FakeClock) -> Iterator[Callable[..., StreamingIngestClient]]:
    yield from client_factory(server, clock)


# ------------------------------------------------------------------------------------------------
# Tokens


def test_first_call_exchanges_the_key_pair_jwt_then_uses_the_scoped_token(
    server: FakeServer, make_client: Callable[..., StreamingIngestClient]
) -> None:
    client = make_client()
    token, hostname = server.calls[:2]
    assert (token.method, token.path) == ("POST", wire.TOKEN_PATH)
    assert token.body is not None
    assert parse_qs(token.body.decode()) == {
        "grant_type": [wire.TOKEN_GRANT_TYPE],
        "scope": ["floe.test:8443"],
    }
    assert (hostname.method, hostname.path) == ("GET", wire.HOSTNAME_PATH)
    assert hostname.headers["Authorization"] == f"Bearer {server.tokens[0]}"
    assert hostname.headers["X-Snowflake-Authorization-Token-Type"] == "OAUTH"
    assert client.hostname == "floe.test"


def test_token_is_exchanged_again_shortly_before_it_expires(
    server: FakeServer, clock: FakeClock, make_client: Callable[..., StreamingIngestClient]
) -> None:
    server.expires_in = 600
    client = make_client()
    clock.advance(600 - 61)
    client.get_channel_statuses(["c"])
    assert server.issued == 1
    clock.advance(2)  # now within the last minute of the token's life
    client.get_channel_statuses(["c"])
    assert server.issued == 2
    assert server.of("status")[-1].headers["Authorization"] == f"Bearer {server.tokens[1]}"


def test_a_401_exchanges_a_fresh_token_once_and_resends(
    server: FakeServer, make_client: Callable[..., StreamingIngestClient]
) -> None:
    client = make_client()
    server.revoke()
    assert client.get_channel_statuses(["c"]) == {}
    assert server.issued == 2
    first, second = server.of("status")
    assert (first.headers["Authorization"], second.headers["Authorization"]) == (
        f"Bearer {server.tokens[0]}",
        f"Bearer {server.tokens[1]}",
    )


def test_a_second_401_gives_up_naming_the_servers_message(
    server: FakeServer, make_client: Callable[..., StreamingIngestClient]
) -> None:
    client = make_client()
    server.fail("status", *[error(401, Code.UNAUTHORIZED, "user LOADER is disabled")] * 2)
    with pytest.raises(StreamingAuthError, match="ERR_UNAUTHORIZED: user LOADER is disabled") as info:
        client.get_channel_statuses(["c"])
    assert info.value.status == 401
    assert server.issued == 2
    assert len(server.of("status")) == 2


def test_a_refused_key_pair_jwt_raises_at_once(server: FakeServer, clock: FakeClock) -> None:
    server.fail("token", error(401, Code.UNAUTHORIZED, "JWT token is invalid: unknown public key"))
    with pytest.raises(StreamingAuthError, match="unknown public key"):
        StreamingIngestClient(
            "c", DB, SCHEMA, PIPE, properties=PROPS, transport=server, clock=clock, sleep=clock.sleep
        )
    assert len(server.calls) == 1
    assert server.closed


def test_a_token_answer_that_is_no_jwt_raises_saying_so(server: FakeServer, clock: FakeClock) -> None:
    # The JSON form Floe answered before: the token is plain text now, as the SDK parses it.
    server.fail("token", (200, {}, orjson.dumps({"token": "t", "expires_in": 3600})))
    with pytest.raises(StreamingRequestError, match="not a scoped token"):
        StreamingIngestClient(
            "c", DB, SCHEMA, PIPE, properties=PROPS, transport=server, clock=clock, sleep=clock.sleep
        )


# ------------------------------------------------------------------------------------------------
# Retries and errors (through a bare Session)


def _session(server: FakeServer, clock: FakeClock, retries: int = 8) -> Session:
    key = load_private_key(PEM)
    return Session(
        server,
        lambda: sign_token("acme", "loader", key),
        "h:1",
        clock=clock,
        sleep=clock.sleep,
        max_retries=retries,
    )


def test_retryable_answers_are_resent_unchanged_and_retry_after_is_honoured(
    server: FakeServer, clock: FakeClock
) -> None:
    session = _session(server, clock)
    server.fail(
        "status",
        error(503, Code.UNAVAILABLE, "metadata store down", {"Retry-After": "7"}),
        error(429, Code.RATE_LIMITED, "slow down"),
        StreamingUnavailable("connection reset"),
    )
    params = {wire.REQUEST_ID: "req-1"}
    assert session.call(
        "POST", wire.bulk_status_path(DB, SCHEMA, PIPE), params=params, json={wire.CHANNEL_NAMES: []}
    )
    calls = server.of("status")
    assert len(calls) == 4
    assert all(c.params == params and c.json == {wire.CHANNEL_NAMES: []} for c in calls)
    assert clock.sleeps[0] == 7.0
    # Exponential backoff with jitter: attempt n waits between half and all of 0.2 * 2**(n-1).
    assert 0.2 <= clock.sleeps[1] <= 0.4 and 0.4 <= clock.sleeps[2] <= 0.8


def test_retries_run_out_with_a_transient_error(server: FakeServer, clock: FakeClock) -> None:
    session = _session(server, clock, retries=2)
    server.fail("status", *[error(503, Code.UNAVAILABLE, "metadata store down")] * 3)
    with pytest.raises(
        StreamingUnavailable, match=r"after 3 attempts.*ERR_SERVICE_UNAVAILABLE: metadata store down"
    ):
        session.call("POST", wire.bulk_status_path(DB, SCHEMA, PIPE), json={wire.CHANNEL_NAMES: []})
    assert len(clock.sleeps) == 2


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, Code.BAD_REQUEST),
        (403, Code.FORBIDDEN),
        (404, Code.PIPE_DOES_NOT_EXIST),
        (413, Code.PAYLOAD_TOO_LARGE),
    ],
)
def test_client_errors_raise_at_once_with_the_servers_code(
    server: FakeServer, clock: FakeClock, status: int, code: str
) -> None:
    session = _session(server, clock)
    server.fail("status", error(status, code, "the server's words"))
    with pytest.raises(StreamingRequestError, match=f"{code}: the server's words") as info:
        session.call(
            "POST", wire.bulk_status_path(DB, SCHEMA, PIPE), json={wire.CHANNEL_NAMES: []}, channel="ch1"
        )
    assert (info.value.status, info.value.code, info.value.channel) == (status, code, "ch1")
    assert "channel ch1" in str(info.value)
    assert clock.sleeps == []


def test_409_is_a_channel_invalid_error_saying_to_reopen(server: FakeServer, clock: FakeClock) -> None:
    session = _session(server, clock)
    server.fail("status", error(409, Code.STALE_CONTINUATION_TOKEN_SEQUENCER, "Channel sequencer is stale"))
    with pytest.raises(ChannelInvalidError, match=r"STALE_CONTINUATION_TOKEN_SEQUENCER.*reopen the channel"):
        session.call("POST", wire.bulk_status_path(DB, SCHEMA, PIPE), json={wire.CHANNEL_NAMES: []})


def test_an_answer_that_is_not_json_is_a_request_error(server: FakeServer, clock: FakeClock) -> None:
    session = _session(server, clock)
    server.fail("status", (200, {}, b"<html>proxy</html>"))
    with pytest.raises(StreamingRequestError, match="not a JSON object"):
        session.call("POST", wire.bulk_status_path(DB, SCHEMA, PIPE), json={wire.CHANNEL_NAMES: []})


# ------------------------------------------------------------------------------------------------
# The real transport (httpx, with a mock network)


def test_httpx_transport_sends_params_json_and_keeps_encoded_channel_names() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True}, headers={"Retry-After": "1"})

    transport = HttpxTransport("https://floe.test:8443/", None)
    transport._client = httpx.Client(base_url=transport.base_url, transport=httpx.MockTransport(handler))
    path = wire.channel_path(DB, SCHEMA, PIPE, "a/b c")
    status, headers, body = transport.request(
        "PUT", path, {wire.REQUEST_ID: "r 1"}, json={"x": 1}, headers={"H": "v"}
    )
    transport.close()
    assert (status, orjson.loads(body), headers["retry-after"]) == (200, {"ok": True}, "1")
    (request,) = seen
    assert request.url.raw_path.decode() == f"{path}?requestId=r+1"
    assert "a%2Fb%20c" in request.url.raw_path.decode()
    assert orjson.loads(request.content) == {"x": 1}
    assert (request.headers["content-type"], request.headers["h"]) == ("application/json", "v")


def test_httpx_transport_turns_a_refused_connection_into_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    transport = HttpxTransport("http://floe.test:1", None)
    transport._client = httpx.Client(base_url=transport.base_url, transport=httpx.MockTransport(handler))
    with pytest.raises(StreamingUnavailable, match=r"cannot reach the Floe API at http://floe\.test:1"):
        transport.request("GET", wire.HOSTNAME_PATH)
    transport.close()


def test_a_request_that_races_close_does_not_leave_its_connection_open() -> None:
    """close() lands while a request is between httpx's open-client check and the pool: the pool
    then opens a connection it no longer tracks (seen as an unclosed socket in the chaos suite)."""
    ended = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: only the client closes the connection

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def finish(self) -> None:
            super().finish()
            ended.set()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    transport = HttpxTransport(f"http://127.0.0.1:{server.server_address[1]}", None)
    entered, closed = threading.Event(), threading.Event()
    original = httpcore.ConnectionPool.handle_request

    def late(pool: httpcore.ConnectionPool, request: httpcore.Request) -> httpcore.Response:
        entered.set()
        assert closed.wait(10)
        return original(pool, request)

    answers: list[int] = []
    try:
        with mock.patch.object(httpcore.ConnectionPool, "handle_request", late):
            sender = threading.Thread(target=lambda: answers.append(transport.request("GET", "/")[0]))
            sender.start()
            assert entered.wait(10), "the request never reached the pool"
            transport.close()
            closed.set()
            sender.join(10)
        assert answers == [200], "the request must have been sent after close(), on a new connection"
        assert ended.wait(10), "the connection opened after close() was left open"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("url", "scope"),
    [
        ("https://floe.test:8443", "floe.test:8443"),
        ("https://floe.test", "floe.test:443"),
        ("http://127.0.0.1", "127.0.0.1:80"),
        ("https://[::1]:9000/", "[::1]:9000"),
    ],
)
def test_scope_is_host_and_port(url: str, scope: str) -> None:
    assert scope_of(url) == scope


# ------------------------------------------------------------------------------------------------
# Bodies and planning


@pytest.mark.parametrize("name", ["zstd", "gzip", "none"])
def test_bodies_decode_with_the_servers_decoder(name: str) -> None:
    codec = Codec(name)
    data = b'{"A":1}\n{"A":2}\n' * 1000
    assert decode_body(codec.compress(data), codec.content_encoding) == data


def of_lines(seq: int, lines: list[bytes], start: str | None, end: str | None) -> Batch:
    """A batch of these NDJSON lines (each ending in a newline), as append_rows buffers them."""
    return Batch(seq, b"".join(lines), list(accumulate(map(len, lines))), start, end, 0.0)


def _batch(seq: int, lines: list[bytes], start: str | None, end: str | None) -> Batch:
    return of_lines(seq, lines, start, end)


def test_merged_batches_send_the_first_start_and_the_last_end_token() -> None:
    planner = Planner(Codec("zstd"))
    batches = [
        _batch(1, [b'{"A":1}\n', b'{"A":2}\n'], None, "2"),  # only an end token: starts at it too
        _batch(2, [b'{"A":3}\n'], "3", "3"),
        _batch(3, [b'{"A":4}\n'], None, None),
    ]
    (request,) = planner.requests(batches)
    assert (request.start, request.end, request.last_seq, request.rows) == ("2", "3", 3, 4)
    (first_untokened,) = planner.requests([_batch(4, [b"{}\n"], None, None), _batch(5, [b"{}\n"], "s", "e")])
    assert (first_untokened.start, first_untokened.end) == ("s", "e")


def _lines(rows: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows]


def test_a_batch_split_over_appends_gives_its_end_token_only_to_the_last() -> None:
    planner = Planner(Codec("zstd"))
    big = _lines(random_rows(2, 3_000_000))  # two rows that cannot share a 4 MB body
    requests = list(planner.requests([_batch(1, big, "s1", "e1"), _batch(2, _lines([{"A": 1}]), None, "e2")]))
    # The second request completes batch 1 and holds all of batch 2, which begins there at "e2".
    assert [(r.start, r.end, r.last_seq, r.rows) for r in requests] == [
        ("s1", None, None, 1),
        ("e2", "e2", 2, 2),
    ]
    assert all(len(r.body) <= wire.MAX_BODY_BYTES for r in requests)


def test_an_over_size_body_is_split_in_half_and_never_sent() -> None:
    planner = Planner(Codec("zstd"))
    planner.ratio = 0.01  # as if the data so far compressed 100:1: the next estimate is far too big
    lines = _lines(random_rows(60, 100_000))
    requests = list(planner.requests([_batch(1, lines, "a", "b")]))
    assert planner.compressions > len(requests) >= 2
    assert all(len(r.body) <= wire.MAX_BODY_BYTES for r in requests)
    sent = b"".join(decode_body(r.body, "zstd") for r in requests)
    assert sent == b"".join(lines)
    assert [r.end for r in requests][-1] == "b" and all(r.end is None for r in requests[:-1])


def test_a_row_that_cannot_fit_one_append_is_recognised() -> None:
    planner = Planner(Codec("zstd"))
    assert planner.fits_alone(b"x" * (wire.MAX_BODY_BYTES + 10))  # compresses well
    (row,) = _lines(random_rows(1, 6_000_000))  # about 4.5 MB once compressed
    assert not planner.fits_alone(row)
    assert not Planner(Codec("none")).fits_alone(b"x" * (wire.MAX_BODY_BYTES + 10))


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(
        st.tuples(
            st.lists(st.integers(1, 3000), min_size=1, max_size=12),  # the rows' lengths
            st.sampled_from([None, "s"]),
            st.sampled_from([None, "e"]),
        ),
        min_size=1,
        max_size=6,
    ),
    codec=st.sampled_from(["none", "zstd"]),
    ratio=st.sampled_from([1.0, 0.5, 0.01]),
    seed=st.integers(0, 2**32),
)
def test_planned_requests_carry_every_row_once_in_order_within_the_cap(
    batches: list[tuple[list[int], str | None, str | None]], codec: str, ratio: float, seed: int
) -> None:
    """A small wire cap, so rows of up to 3 KB make batches span requests and bodies overflow."""
    rnd = random.Random(seed)
    made: list[Batch] = []
    for seq, (lengths, start, end) in enumerate(batches, start=1):
        lines = [bytes(rnd.choices(b"abcdefghijklmnopqrstuvwxyz", k=n - 1)) + b"\n" for n in lengths]
        made.append(of_lines(seq, lines, start and f"{start}{seq}", end and f"{end}{seq}"))
    planner = Planner(Codec(codec))
    planner.ratio = ratio
    cap = 4096
    with (
        mock.patch.object(wire, "MAX_BODY_BYTES", cap),
        mock.patch.object(wire, "MAX_UNCOMPRESSED_BYTES", 2 * cap),
    ):
        requests = list(planner.requests(made))
    # Which (batch, row) each request carries, from the rows' positions in the whole stream.
    owners = [(b, i) for b in made for i in range(b.rows)]
    taken = 0
    for r in requests:
        sent = decode_body(r.body, Codec(codec).content_encoding)
        assert len(r.body) <= cap and sent.endswith(b"\n") and len(sent) == r.raw_bytes
        assert sent.count(b"\n") == r.rows >= 1
        rows = owners[taken : taken + r.rows]
        taken += r.rows
        begun = [b for b, i in rows if i == 0 and b.effective_start is not None]
        ended = [b for b, i in rows if i == b.rows - 1]
        assert r.start == (begun[0].effective_start if begun else None)
        assert r.end == next((b.end for b in reversed(ended) if b.end is not None), None)
        assert r.last_seq == (ended[-1].seq if ended else None)
    assert taken == len(owners)
    assert b"".join(decode_body(r.body, Codec(codec).content_encoding) for r in requests) == b"".join(
        b.data for b in made
    )
