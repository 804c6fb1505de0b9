"""TLS for the API: where its certificate, key and CA live, and a local CA that issues them.

``api.tls`` is ``off`` (plain HTTP), ``files`` (the operator's certificate and key) or ``auto``: a
local CA and a server certificate under ``<state_dir>/tls/``, created when missing by
:func:`ensure_tls` (`make up` and `floe api` call it). The server certificate is issued again when
its names no longer cover the API's host, when it expires within :data:`RENEW_BEFORE`, or when the
CA it came from is gone; the CA is kept for as long as it is valid, so clients that trust it keep
trusting the API. Every file is 0600 in a 0700 directory, written under a temporary name and renamed
into place, and one lock file serialises processes that start at once.

Clients (``floe sql``, the stack's readiness probe, the tests) take the URL and the SSL context
from :func:`api_base_url` and :func:`client_ssl_context`, so they verify against the same CA.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import ipaddress
import os
import secrets
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from floe.errors import TerminalError
from floe.runtime import private_dir
from floe.settings import Settings

CA_LIFETIME = dt.timedelta(days=3650)
"""A local CA outlives many server certificates, so clients seldom need to trust a new one."""
SERVER_LIFETIME = dt.timedelta(days=397)
"""The longest lifetime browsers accept for a server certificate."""
RENEW_BEFORE = dt.timedelta(days=30)
"""A certificate that expires sooner than this is replaced at the next start."""
BACKDATE = dt.timedelta(minutes=5)
"""Certificates start a little in the past, so a client whose clock lags accepts them at once."""
BASE_NAMES: tuple[str, ...] = ("127.0.0.1", "localhost")
"""Names every generated server certificate carries besides the configured host."""

CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY = "ca.crt", "ca.key", "server.crt", "server.key"

_Name: TypeAlias = x509.DNSName | x509.IPAddress
_Pair: TypeAlias = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


class TlsError(TerminalError):
    """TLS is configured but its files are missing or unusable."""


@dataclass(frozen=True)
class TlsFiles:
    """The files the API serves with and the CA its clients verify against."""

    cert: Path
    key: Path
    ca: Path | None
    """None: clients use the system's trust store."""


@dataclass(frozen=True)
class Issued:
    """What :func:`ensure_tls` did: the files to serve, and a line per certificate it (re)created."""

    files: TlsFiles
    actions: tuple[str, ...]


def tls_dir(settings: Settings) -> Path:
    """``<state_dir>/tls``, where ``tls=auto`` keeps its CA and server certificate."""
    return Path(settings.state_dir) / "tls"


def tls_files(settings: Settings) -> TlsFiles | None:
    """Where the certificate, key and CA are for these settings; None when TLS is off."""
    api = settings.api
    if api.tls == "off":
        return None
    if api.tls == "auto":
        directory = tls_dir(settings)
        return TlsFiles(directory / SERVER_CERT, directory / SERVER_KEY, directory / CA_CERT)
    return TlsFiles(
        Path(api.tls_cert_file), Path(api.tls_key_file), Path(api.tls_ca_file) if api.tls_ca_file else None
    )


def api_base_url(settings: Settings) -> str:
    """``http(s)://host:port`` of the API, as its clients reach it."""
    scheme = "http" if settings.api.tls == "off" else "https"
    host = settings.api.host
    if ":" in host:  # an IPv6 literal needs brackets in a URL
        host = f"[{host}]"
    return f"{scheme}://{host}:{settings.api.port}"


def client_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The context a client verifies the API with: None when TLS is off.

    It trusts the configured CA (the generated one with ``tls=auto``), else the system's store;
    hostname checking stays on. Raises :class:`TlsError` when the CA file cannot be read.
    """
    files = tls_files(settings)
    if files is None:
        return None
    if files.ca is None:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=str(files.ca))
    except (OSError, ssl.SSLError) as exc:
        hint = (
            " (`make up` or `floe api` creates it with FLOE_API__TLS=auto)"
            if settings.api.tls == "auto"
            else ""
        )
        raise TlsError(f"cannot read the API's CA certificate {files.ca}: {exc}{hint}") from None


def ensure_tls(settings: Settings, now: dt.datetime | None = None) -> Issued | None:
    """Make the API's TLS files ready for these settings: None when TLS is off.

    ``auto`` creates or renews the local CA and the server certificate (:func:`ensure_local_ca`);
    ``files`` only checks that the certificate and key load and belong together.
    """
    files = tls_files(settings)
    if files is None:
        return None
    if settings.api.tls == "auto":
        return ensure_local_ca(tls_dir(settings), settings.api.host, now=now)
    if not settings.api.tls_cert_file or not settings.api.tls_key_file:
        raise TlsError("FLOE_API__TLS=files needs FLOE_API__TLS_CERT_FILE and FLOE_API__TLS_KEY_FILE")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"cannot serve with certificate {files.cert} and key {files.key}: {exc}") from None
    return Issued(files, ())


def required_names(host: str) -> tuple[str, ...]:
    """The names the server certificate must carry: the base names and the configured host."""
    return tuple(dict.fromkeys((*BASE_NAMES, host.strip("[]").lower())))


def ensure_local_ca(
    directory: Path, host: str, *, now: dt.datetime | None = None, renew_before: dt.timedelta = RENEW_BEFORE
) -> Issued:
    """Create or renew the local CA and the server certificate in ``directory``; idempotent.

    The CA is replaced only when it is missing, unreadable, or expires within ``renew_before``; the
    server certificate also when its names do not cover ``host`` or another CA issued it.
    """
    moment = now or dt.datetime.now(dt.UTC)
    names = required_names(host)
    private_dir(directory)
    actions: list[str] = []
    with _locked(directory / ".lock"):
        loaded = _load_pair(directory / CA_CERT, directory / CA_KEY)
        why_ca = _ca_problem(loaded, moment, renew_before)
        if loaded is None or why_ca:
            ca = _new_ca(moment)
            _write_private(directory / CA_KEY, _key_pem(ca[1]))
            _write_private(directory / CA_CERT, ca[0].public_bytes(serialization.Encoding.PEM))
            actions.append(f"created a local CA ({why_ca})")
        else:
            ca = loaded
        server = _load_pair(directory / SERVER_CERT, directory / SERVER_KEY)
        why_server = _server_problem(server, ca[0], names, moment, renew_before)
        if why_server:
            cert, key = _new_server_cert(ca, names, moment)
            _write_private(directory / SERVER_KEY, _key_pem(key))
            _write_private(directory / SERVER_CERT, cert.public_bytes(serialization.Encoding.PEM))
            actions.append(f"issued a server certificate for {', '.join(names)} ({why_server})")
    files = TlsFiles(directory / SERVER_CERT, directory / SERVER_KEY, directory / CA_CERT)
    return Issued(files, tuple(actions))


def san_names(cert: x509.Certificate) -> set[str]:
    """The DNS names (lower-case) and IP addresses (canonical text) a certificate is valid for."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    dns = {name.lower() for name in san.get_values_for_type(x509.DNSName)}
    return dns | {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}


# ----------------------------------------------------------------------------------------- checks


def _load_pair(cert_path: Path, key_path: Path) -> _Pair | None:
    """A certificate and its EC key, or None when either is missing, garbled or they do not match."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        return None
    return cert, key


def _expiry_problem(cert: x509.Certificate, now: dt.datetime, renew_before: dt.timedelta) -> str:
    """Why ``cert`` is not good for long enough at ``now``, or ""."""
    if cert.not_valid_after_utc - now < renew_before:
        return f"the old one expires {cert.not_valid_after_utc:%Y-%m-%d}"
    if cert.not_valid_before_utc > now:
        return "the old one is not valid yet"
    return ""


def _ca_problem(ca: _Pair | None, now: dt.datetime, renew_before: dt.timedelta) -> str:
    """Why the CA in the directory cannot be used, or ""."""
    if ca is None:
        return "none was usable"
    return _expiry_problem(ca[0], now, renew_before)


def _server_problem(
    server: _Pair | None,
    ca: x509.Certificate,
    names: tuple[str, ...],
    now: dt.datetime,
    renew_before: dt.timedelta,
) -> str:
    """Why the server certificate in the directory cannot be served, or ""."""
    if server is None:
        return "none was usable"
    cert = server[0]
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "the old one came from another CA"
    missing = [name for name in names if _canonical(name) not in san_names(cert)]
    if missing:
        return f"the old one does not name {', '.join(missing)}"
    return _expiry_problem(cert, now, renew_before)


# ---------------------------------------------------------------------------------------- issuing


def _canonical(name: str) -> str:
    """An IP address in the form :func:`san_names` gives it, any other name lower-case."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name.lower()


def _general_name(name: str) -> _Name:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name.lower())


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256: every TLS client supports it, and it is generated in microseconds, unlike RSA.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _new_ca(now: dt.datetime) -> _Pair:
    """A self-signed CA that may sign server certificates only (path length 0)."""
    key = _new_key()
    # A random suffix keeps two Floe CAs in one trust store apart (OpenSSL looks issuers up by name).
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Floe"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"Floe local CA {secrets.token_hex(4)}"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _new_server_cert(ca: _Pair, names: tuple[str, ...], now: dt.datetime) -> _Pair:
    """A server certificate for ``names`` signed by ``ca``, with a fresh key."""
    ca_cert, ca_key = ca
    key = _new_key()
    not_after = min(now + SERVER_LIFETIME, ca_cert.not_valid_after_utc)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[-1])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


# ------------------------------------------------------------------------------------------ files


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created 0600), so two starts do not issue at once."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, mode 0600 from the first byte; readers see old or new, never half."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
