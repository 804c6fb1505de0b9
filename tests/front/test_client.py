"""The API client the CLI, the demo, the benchmarks and the tests share (front/client.py)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest

from floe.errors import TerminalError, TransientError
from floe.keypair import new_private_key, private_key_pem
from floe.settings import Settings
from front.client import (
    MAX_CLIENTS,
    ApiUnavailable,
    SqlFailed,
    StatementRejected,
    auth_header,
    http_client,
    records,
    run_sql,
    stream_sql,
)

pytestmark = pytest.mark.unit


def test_records_key_rows_by_column() -> None:
    body = {"columns": ["ID", "NAME"], "rows": [[1, "a"], [2, None]]}
    assert records(body) == [{"ID": 1, "NAME": "a"}, {"ID": 2, "NAME": None}]


def test_auth_header_signs_a_key_pair_token_for_the_user(tmp_path: Path) -> None:
    key_file = tmp_path / "user.p8"
    key_file.write_text(private_key_pem(new_private_key()))
    settings = Settings()
    header = auth_header(settings, "alice", str(key_file))
    assert header["X-Snowflake-Authorization-Token-Type"] == "KEYPAIR_JWT"
    claims = jwt.decode(header["Authorization"].removeprefix("Bearer "), options={"verify_signature": False})
    assert claims["sub"] == f"{settings.account.upper()}.ALICE"
    # The token is cached per (account, user, key file): a second call does not sign again.
    assert auth_header(settings, "alice", str(key_file)) == header


def test_auth_header_without_the_key_file_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(SqlFailed, match=r"cannot read the private key .*missing\.p8"):
        auth_header(Settings(), "alice", str(tmp_path / "missing.p8"))


class _Canned(BaseHTTPRequestHandler):
    """Answers every POST with the status and JSON body the test put on the server."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        status, body = self.server.canned  # type: ignore[attr-defined]
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def canned_api() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


class _KeepAlive(_Canned):
    """As _Canned, over HTTP/1.1 keep-alive, noting the client's address of each request."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.server.peers.append(self.client_address)  # type: ignore[attr-defined]
        super().do_POST()


def test_statements_share_one_pooled_connection(tmp_path: Path) -> None:
    """A client per statement cost 35 ms of CPU for its SSL context and a connection each."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    server.canned = (200, {"success": True, "columns": ["ONE"], "rows": [[1]]})  # type: ignore[attr-defined]
    server.peers = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    key_file = tmp_path / "admin.p8"
    key_file.write_text(private_key_pem(new_private_key()))
    settings = Settings(api={"host": "127.0.0.1", "port": server.server_address[1]})
    try:
        for _ in range(3):
            assert records(run_sql(settings, "SELECT 1", key_file=str(key_file))) == [{"ONE": 1}]
        assert len(server.peers) == 3 and len(set(server.peers)) == 1, server.peers  # type: ignore[attr-defined]
        assert http_client(settings) is http_client(settings.model_copy(deep=True))
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_pooled_clients_are_per_api_and_the_oldest_is_closed_past_the_cap() -> None:
    first = http_client(Settings(api={"host": "127.0.0.1", "port": 1}))
    others = [http_client(Settings(api={"host": "127.0.0.1", "port": 2 + i})) for i in range(MAX_CLIENTS)]
    assert first not in others and len({id(c) for c in others}) == MAX_CLIENTS
    assert first.is_closed and not any(c.is_closed for c in others)


@pytest.mark.parametrize(
    ("status", "kind", "transient"),
    [
        (422, StatementRejected, False),
        (403, StatementRejected, False),
        (429, ApiUnavailable, True),
        (503, ApiUnavailable, True),
    ],
)
def test_run_sql_tells_a_refused_statement_from_an_unavailable_api(
    canned_api: ThreadingHTTPServer, tmp_path: Path, status: int, kind: type[SqlFailed], transient: bool
) -> None:
    key_file = tmp_path / "admin.p8"
    key_file.write_text(private_key_pem(new_private_key()))
    canned_api.canned = (status, {"success": False, "code": "002003", "sqlState": "02000", "message": "no"})  # type: ignore[attr-defined]
    settings = Settings(api={"host": "127.0.0.1", "port": canned_api.server_address[1]})
    with pytest.raises(kind, match="002003") as failed:
        run_sql(settings, "SELECT 1", key_file=str(key_file))
    assert isinstance(failed.value, TransientError) is transient
    assert isinstance(failed.value, TerminalError) is not transient


def test_run_sql_without_an_api_is_transient_and_says_how_to_start_one(tmp_path: Path) -> None:
    key_file = tmp_path / "admin.p8"
    key_file.write_text(private_key_pem(new_private_key()))
    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        settings = Settings(api={"host": "127.0.0.1", "port": sock.getsockname()[1]})
        with pytest.raises(ApiUnavailable, match="make up"):
            run_sql(settings, "SELECT 1", key_file=str(key_file))


# --- stream_sql: the NDJSON answer of "stream": true ---------------------------------------------


class _Streaming(BaseHTTPRequestHandler):
    """Answers a POST with the NDJSON lines the test put on the server (chunked, one write each),
    recording the body it was sent; ``None`` in the lines ends the answer there, abruptly."""

    def do_POST(self) -> None:
        self.server.received = json.loads(self.rfile.read(int(self.headers["content-length"])))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("content-type", "application/x-ndjson")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for line in self.server.lines:  # type: ignore[attr-defined]
            if line is None:
                self.wfile.flush()
                self.close_connection = True
                return
            data = json.dumps(line).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def streaming_api() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Streaming)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def _settings_for(server: ThreadingHTTPServer, tmp_path: Path) -> tuple[Settings, str]:
    key_file = tmp_path / "admin.p8"
    key_file.write_text(private_key_pem(new_private_key()))
    return Settings(api={"host": "127.0.0.1", "port": server.server_address[1]}), str(key_file)


COLUMNS = {"columns": ["N"]}
PAGES = [{"rows": [[1], [2]]}, {"rows": [[3]]}]


def test_stream_sql_yields_columns_pages_and_trailer(
    streaming_api: ThreadingHTTPServer, tmp_path: Path
) -> None:
    trailer = {"success": True, "rows": 3, "stats": {"blobs_total": 0}}
    streaming_api.lines = [COLUMNS, *PAGES, trailer]  # type: ignore[attr-defined]
    settings, key_file = _settings_for(streaming_api, tmp_path)
    assert list(stream_sql(settings, "SELECT n FROM t", key_file=key_file, role="r")) == [
        COLUMNS,
        *PAGES,
        trailer,
    ]
    assert streaming_api.received == {"sql": "SELECT n FROM t", "role": "r", "stream": True}  # type: ignore[attr-defined]


def test_stream_sql_raises_the_failure_trailer_after_the_pages(
    streaming_api: ThreadingHTTPServer, tmp_path: Path
) -> None:
    failure = {"success": False, "code": "000630", "sqlState": "57014", "message": "statement timeout"}
    streaming_api.lines = [COLUMNS, *PAGES, failure]  # type: ignore[attr-defined]
    settings, key_file = _settings_for(streaming_api, tmp_path)
    got: list[dict[str, Any]] = []
    with pytest.raises(StatementRejected, match=r"000630 \(57014\): statement timeout"):
        got.extend(stream_sql(settings, "SELECT n FROM t", key_file=key_file))
    assert got == [COLUMNS, *PAGES]


def test_stream_sql_says_an_answer_cut_short_is_incomplete(
    streaming_api: ThreadingHTTPServer, tmp_path: Path
) -> None:
    streaming_api.lines = [COLUMNS, PAGES[0], None]  # type: ignore[attr-defined]
    settings, key_file = _settings_for(streaming_api, tmp_path)
    got: list[dict[str, Any]] = []
    with pytest.raises(ApiUnavailable, match=r"incomplete|did not answer"):
        got.extend(stream_sql(settings, "SELECT n FROM t", key_file=key_file))
    assert got == [COLUMNS, PAGES[0]]


@pytest.mark.parametrize(
    ("status", "kind"), [(422, StatementRejected), (429, ApiUnavailable), (503, ApiUnavailable)]
)
def test_stream_sql_refused_before_the_first_line_raises_as_run_sql(
    canned_api: ThreadingHTTPServer, tmp_path: Path, status: int, kind: type[SqlFailed]
) -> None:
    canned_api.canned = (status, {"success": False, "code": "002003", "sqlState": "02000", "message": "no"})  # type: ignore[attr-defined]
    settings, key_file = _settings_for(canned_api, tmp_path)
    with pytest.raises(kind, match=r"002003 \(02000\): no"):
        next(stream_sql(settings, "SELECT 1", key_file=key_file))


def test_stream_sql_reads_an_unstreamed_answer_as_one_page(
    canned_api: ThreadingHTTPServer, tmp_path: Path
) -> None:
    """An API that does not stream (one JSON body) gives the same lines, the rows as one page."""
    canned_api.canned = (200, {"success": True, "columns": ["N"], "rows": [[1], [2]], "stats": {}})  # type: ignore[attr-defined]
    settings, key_file = _settings_for(canned_api, tmp_path)
    assert list(stream_sql(settings, "SELECT 1", key_file=key_file)) == [
        COLUMNS,
        {"rows": [[1], [2]]},
        {"success": True, "rows": 2, "stats": {}},
    ]


def test_stream_sql_without_an_api_is_transient(tmp_path: Path) -> None:
    key_file = tmp_path / "admin.p8"
    key_file.write_text(private_key_pem(new_private_key()))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        settings = Settings(api={"host": "127.0.0.1", "port": sock.getsockname()[1]})
        with pytest.raises(ApiUnavailable, match="make up"):
            next(stream_sql(settings, "SELECT 1", key_file=str(key_file)))
