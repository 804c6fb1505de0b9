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
from front.client import ApiUnavailable, SqlFailed, StatementRejected, auth_header, records, run_sql

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
