"""The API's TLS files: the local CA and server certificate (floe/tls.py), and the clients that use them."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import ssl
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from pydantic import ValidationError

from floe.keypair import new_private_key, private_key_pem
from floe.settings import ApiSettings, AuthSettings, Settings
from floe.tls import (
    CA_CERT,
    CA_KEY,
    SERVER_CERT,
    SERVER_KEY,
    TlsError,
    api_base_url,
    client_ssl_context,
    ensure_local_ca,
    ensure_tls,
    san_names,
    tls_files,
)
from front.client import StatementRejected, run_sql
from infra.stack import StackError, _api_answers

pytestmark = pytest.mark.unit

FILES = (CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _contents(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in FILES}


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, name: str) -> None:
    """A TLS handshake in memory (no socket) between the two contexts, the client asking for ``name``."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(to_client, to_server, server_hostname=name)
    server = server_ctx.wrap_bio(to_server, to_client, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for side, end in (("client", client), ("server", server)):
            if not done[side]:
                try:
                    end.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        if all(done.values()):
            return
    raise AssertionError(f"handshake did not finish: {done}")


def _server_context(directory: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / SERVER_CERT, directory / SERVER_KEY)
    return context


def test_creates_a_ca_and_a_server_certificate_for_the_host(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    issued = ensure_local_ca(directory, "api.example.test")
    assert [a.split(" (")[0] for a in issued.actions] == [
        "created a local CA",
        "issued a server certificate for 127.0.0.1, localhost, api.example.test",
    ]
    assert issued.files.ca == directory / CA_CERT
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in FILES:
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, name
    assert sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) == sorted(FILES)

    ca, server = _cert(directory / CA_CERT), _cert(directory / SERVER_CERT)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    server.verify_directly_issued_by(ca)
    assert san_names(server) == {"127.0.0.1", "localhost", "api.example.test"}
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    # 127.0.0.1 must be an IP entry: clients match an address only against IP entries.
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


def test_clients_that_trust_the_ca_verify_each_name_and_others_do_not(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    ensure_local_ca(directory, "10.1.2.3")
    server_ctx = _server_context(directory)
    trusting = ssl.create_default_context(cafile=str(directory / CA_CERT))
    for name in ("127.0.0.1", "localhost", "10.1.2.3"):
        _handshake(server_ctx, trusting, name)
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        _handshake(server_ctx, trusting, "elsewhere.example.test")
    untrusting = ssl.create_default_context()  # the system's store knows nothing of a local CA
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        _handshake(server_ctx, untrusting, "localhost")


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    ensure_local_ca(directory, "localhost")
    before = _contents(directory)
    again = ensure_local_ca(directory, "LOCALHOST")  # a name differing in case is the same name
    assert again.actions == ()
    assert _contents(directory) == before


def test_a_new_host_reissues_the_server_certificate_under_the_same_ca(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    ensure_local_ca(directory, "127.0.0.1")
    before = _contents(directory)
    issued = ensure_local_ca(directory, "floe.internal")
    assert len(issued.actions) == 1 and "does not name floe.internal" in issued.actions[0]
    after = _contents(directory)
    assert (after[CA_CERT], after[CA_KEY]) == (before[CA_CERT], before[CA_KEY])  # clients keep their trust
    assert after[SERVER_KEY] != before[SERVER_KEY]
    assert "floe.internal" in san_names(_cert(directory / SERVER_CERT))


def test_a_server_certificate_close_to_expiry_is_renewed(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    ensure_local_ca(directory, "localhost")
    expires = _cert(directory / SERVER_CERT).not_valid_after_utc
    ca_before = (directory / CA_CERT).read_bytes()
    assert ensure_local_ca(directory, "localhost", now=expires - dt.timedelta(days=31)).actions == ()
    later = expires - dt.timedelta(days=29)
    issued = ensure_local_ca(directory, "localhost", now=later)
    assert len(issued.actions) == 1 and "expires" in issued.actions[0]
    assert (directory / CA_CERT).read_bytes() == ca_before
    assert _cert(directory / SERVER_CERT).not_valid_after_utc > later + dt.timedelta(days=300)


def test_a_ca_close_to_expiry_is_replaced_and_the_server_certificate_with_it(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    ensure_local_ca(directory, "localhost")
    old_ca = _cert(directory / CA_CERT)
    issued = ensure_local_ca(directory, "localhost", now=old_ca.not_valid_after_utc - dt.timedelta(days=1))
    assert [a.split(" (")[1] for a in issued.actions] == [
        f"the old one expires {old_ca.not_valid_after_utc:%Y-%m-%d})",
        "the old one came from another CA)",
    ]
    assert _cert(directory / CA_CERT).subject != old_ca.subject


def test_lost_or_damaged_files_are_replaced(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    ensure_local_ca(directory, "localhost")
    (directory / SERVER_KEY).write_text("not a key")
    issued = ensure_local_ca(directory, "localhost")
    assert issued.actions and "none was usable" in issued.actions[0]
    # A server key that does not belong to the certificate is as good as none.
    (directory / SERVER_KEY).write_bytes(private_key_pem(new_private_key()).encode())
    assert ensure_local_ca(directory, "localhost").actions
    (directory / CA_KEY).unlink()
    assert [a.split(" (")[0] for a in ensure_local_ca(directory, "localhost").actions] == [
        "created a local CA",
        "issued a server certificate for 127.0.0.1, localhost",
    ]
    _handshake(
        _server_context(directory), ssl.create_default_context(cafile=str(directory / CA_CERT)), "localhost"
    )


def test_processes_starting_at_once_agree_on_one_ca(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            barrier.wait()
            ensure_local_ca(directory, "localhost")
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert ensure_local_ca(directory, "localhost").actions == ()
    _cert(directory / SERVER_CERT).verify_directly_issued_by(_cert(directory / CA_CERT))


# ------------------------------------------------------------------------------------------ settings


def test_tls_is_off_by_default() -> None:
    settings = Settings(state_dir="/nonexistent")
    assert tls_files(settings) is None and client_ssl_context(settings) is None
    assert ensure_tls(settings) is None
    assert api_base_url(settings) == f"http://127.0.0.1:{settings.api.port}"


def test_auto_puts_everything_under_the_state_dir(tmp_path: Path) -> None:
    settings = Settings(state_dir=str(tmp_path / "state"), api=ApiSettings(tls="auto", host="::1", port=9443))
    assert api_base_url(settings) == "https://[::1]:9443"
    with pytest.raises(TlsError, match=r"ca\.crt.*FLOE_API__TLS=auto"):
        client_ssl_context(settings)  # nothing issued yet: the error says who creates it
    issued = ensure_tls(settings)
    assert issued is not None and issued.files == tls_files(settings)
    assert issued.files.cert == tmp_path / "state" / "tls" / SERVER_CERT
    assert "::1" in san_names(_cert(issued.files.cert))
    context = client_ssl_context(settings)
    assert context is not None and context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED


def test_auto_refuses_files_it_would_ignore() -> None:
    with pytest.raises(ValidationError, match="tls=auto creates its own files"):
        ApiSettings(tls="auto", tls_cert_file="/etc/ssl/mine.pem")


def test_files_are_checked_before_serving(tmp_path: Path) -> None:
    own = tmp_path / "own"
    ensure_local_ca(own, "localhost")
    api = ApiSettings(tls="files", tls_cert_file=str(own / SERVER_CERT), tls_key_file=str(own / SERVER_KEY))
    issued = ensure_tls(Settings(state_dir=str(tmp_path / "state"), api=api))
    assert issued is not None and issued.actions == () and issued.files.ca is None
    with pytest.raises(TlsError, match="needs FLOE_API__TLS_CERT_FILE"):
        ensure_tls(Settings(api=ApiSettings(tls="files")))
    wrong_key = api.model_copy(update={"tls_key_file": str(own / CA_KEY)})
    with pytest.raises(TlsError, match="cannot serve with certificate"):
        ensure_tls(Settings(api=wrong_key))


# --------------------------------------------------------------------------------- clients, in process


class _Answers(BaseHTTPRequestHandler):
    """Answers /health and the SQL endpoint like the API would, over whatever socket it is given."""

    def do_GET(self) -> None:
        self._send(200, {"status": "ok"})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self._send(200, {"success": True, "columns": ["X"], "rows": [[1]]})

    def _send(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # the default writes to stderr
        pass


@pytest.fixture
def https_settings(tmp_path: Path) -> Iterator[Settings]:
    """Settings with tls=auto whose port is a small HTTPS server in this process, serving the issued cert."""
    state = tmp_path / "state"
    key = state / "admin.p8"
    state.mkdir()
    key.write_text(private_key_pem(new_private_key()))
    settings = Settings(
        state_dir=str(state),
        api=ApiSettings(tls="auto", host="127.0.0.1", port=0),
        auth=AuthSettings(admin_key_file=str(key)),
    )
    issued = ensure_tls(settings)
    assert issued is not None
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(issued.files.cert, issued.files.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield settings.model_copy(
            update={"api": settings.api.model_copy(update={"port": server.server_port})}
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_run_sql_speaks_https_verified_against_the_ca(https_settings: Settings) -> None:
    assert run_sql(https_settings, "SELECT 1")["rows"] == [[1]]


def test_run_sql_refuses_a_certificate_its_ca_did_not_sign(https_settings: Settings, tmp_path: Path) -> None:
    other = tmp_path / "other"
    ensure_local_ca(other, "localhost")
    api = https_settings.api.model_copy(update={"tls": "files", "tls_ca_file": str(other / CA_CERT)})
    with pytest.raises(StatementRejected, match="certificate that does not verify"):
        run_sql(https_settings.model_copy(update={"api": api}), "SELECT 1")


def test_the_stack_probes_health_over_https(https_settings: Settings, tmp_path: Path) -> None:
    assert _api_answers(https_settings) is True
    other = tmp_path / "other"
    ensure_local_ca(other, "localhost")
    api = https_settings.api.model_copy(update={"tls": "files", "tls_ca_file": str(other / CA_CERT)})
    with pytest.raises(StackError, match="does not verify"):
        _api_answers(https_settings.model_copy(update={"api": api}))
    plain = https_settings.api.model_copy(update={"tls": "off"})
    assert _api_answers(https_settings.model_copy(update={"api": plain})) is False  # http to a TLS port
