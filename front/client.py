"""A small client for the Floe API's SQL endpoint (for the CLI, the demo, the benchmarks and the tests)."""

from __future__ import annotations

import atexit
import contextlib
import json
import ssl
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from floe.errors import FloeError, TerminalError, TransientError
from floe.keypair import load_private_key, sign_token
from floe.settings import Settings
from floe.tls import TlsError, api_base_url, client_ssl_context, tls_files

_TOKEN_LIFETIME_S = 3540
_tokens: dict[tuple[str, str, str], tuple[str, float]] = {}
_tokens_lock = threading.Lock()
_clients: dict[tuple[str, str, int], httpx.Client] = {}
_clients_lock = threading.Lock()
MAX_CLIENTS = 8
"""Pooled clients kept at once (one per API and CA file); the oldest is closed past this."""


@atexit.register
def _close_clients() -> None:
    with _clients_lock:
        for client in _clients.values():
            client.close()
        _clients.clear()


NDJSON = "application/x-ndjson"
"""The content type of a streamed answer."""


class SqlFailed(FloeError):
    """A statement did not run: the API answered with an error, or could not be reached."""


class StatementRejected(SqlFailed, TerminalError):
    """The API refused the statement (a SQL error, a missing privilege, bad credentials)."""


class ApiUnavailable(SqlFailed, TransientError):
    """The API was not reached, or answered that it cannot serve now (429, 5xx); retrying may work."""


def _failure(status: int, message: str) -> SqlFailed:
    return ApiUnavailable(message) if status == 429 or status >= 500 else StatementRejected(message)


def auth_header(settings: Settings, user: str | None = None, key_file: str | None = None) -> dict[str, str]:
    """A bearer token for ``user`` (the admin by default), signed with its private key file."""
    user = (user or settings.auth.admin_user).upper()
    path = key_file or settings.auth.admin_key_file
    cache_key = (settings.account, user, path)
    with _tokens_lock:
        hit = _tokens.get(cache_key)
    if hit is None or hit[1] - time.time() < 60:
        try:
            pem = Path(path).read_text()
        except OSError as exc:
            where = path if Path(path).is_absolute() else f"{path} (relative to {Path.cwd()})"
            raise StatementRejected(
                f"cannot read the private key {where}: {exc.strerror}. The API creates the admin key "
                "on its first start (`make up`); run floe from the Floe checkout, or set "
                "FLOE_AUTH__ADMIN_KEY_FILE to the key's absolute path."
            ) from None
        try:
            token = sign_token(settings.account, user, load_private_key(pem), _TOKEN_LIFETIME_S)
        except FloeError as exc:
            raise StatementRejected(f"cannot sign with {path}: {exc.message}") from None
        hit = (token, time.time() + _TOKEN_LIFETIME_S)
        with _tokens_lock:
            _tokens[cache_key] = hit
    return {"Authorization": f"Bearer {hit[0]}", "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT"}


def http_client(settings: Settings) -> httpx.Client:
    """The pooled HTTP client for the API these settings name, shared by the process's statements.

    A client per statement cost about 35 ms of CPU to build its SSL context (it loads a CA store),
    more than most statements take: `floe status` on 400 pipes spent 48 s of CPU in it. A new CA
    file (``tls=auto`` renews it) gets a new client.
    """
    files = tls_files(settings)
    ca = files.ca if files is not None else None
    try:
        stamp = ca.stat().st_mtime_ns if ca is not None else 0
    except OSError:
        stamp = -1  # client_ssl_context below says what is wrong with it
    key = (api_base_url(settings), str(ca), stamp)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            try:
                context = client_ssl_context(settings)
            except TlsError as exc:
                raise StatementRejected(exc.message) from None
            # With TLS, only the configured CA (or the system's store) vouches for the API; never
            # unverified.
            # An idle connection is reused for half the API's keep-alive, so the API never closes
            # one just as a statement is sent on it (which would leave unknown whether it ran).
            keepalive = httpx.Limits(keepalive_expiry=settings.api.timeout_keep_alive_s / 2)
            client = httpx.Client(verify=context or True, limits=keepalive)
            if len(_clients) >= MAX_CLIENTS:  # a process that reached many APIs: the tests
                _clients.pop(next(iter(_clients))).close()
            _clients[key] = client
    return client


def _request(
    settings: Settings,
    statement: str,
    user: str | None,
    key_file: str | None,
    role: str | None,
    stream: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The SQL endpoint's URL and the request's arguments for a statement: body and auth header."""
    url = f"{api_base_url(settings)}/api/v1/sql"
    body: dict[str, Any] = {"sql": statement}
    if role is not None:
        body["role"] = role
    if stream:
        body["stream"] = True
    return url, {"json": body, "headers": auth_header(settings, user, key_file)}


@contextlib.contextmanager
def reaching(url: str) -> Iterator[None]:
    """httpx's transport errors as SqlFailed, saying what to check."""
    try:
        yield
    except httpx.ConnectError as exc:
        if isinstance(exc.__cause__, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(exc):
            # Retrying cannot fix a certificate the client does not trust: a configuration error.
            raise StatementRejected(
                f"the Floe API at {url} presented a certificate that does not verify ({exc}); "
                "check FLOE_API__TLS and FLOE_API__TLS_CA_FILE (tls=auto trusts <state_dir>/tls/ca.crt)."
            ) from exc
        raise ApiUnavailable(
            f"cannot reach the Floe API at {url} ({exc}). Start the stack with `make up` "
            "or point FLOE_API__HOST/FLOE_API__PORT (and FLOE_API__TLS) at a running API."
        ) from exc
    except httpx.TransportError as exc:
        # Connected, then lost: the API stopped or restarted mid-statement, or the answer took
        # longer than ``timeout``. Whether the statement ran is unknown.
        raise ApiUnavailable(
            f"the Floe API at {url} did not answer ({type(exc).__name__}: {exc}); whether the "
            "statement ran is unknown. Check `make status` and the API log (.floe/logs/api.log)."
        ) from exc


def _refusal(status: int, body: dict[str, Any]) -> SqlFailed:
    """The SqlFailed of an error answer (or of a streamed answer's failure trailer, ``status`` 200)."""
    return _failure(status, f"{body.get('code', status)} ({body.get('sqlState', '')}): {body.get('message')}")


def json_answer(resp: httpx.Response) -> dict[str, Any]:
    """A JSON answer's body; SqlFailed if it is an error, or not JSON."""
    try:
        body = resp.json()
    except ValueError:
        raise _failure(
            resp.status_code, f"the API answered {resp.status_code} without a JSON body: {resp.text[:200]}"
        ) from None
    if resp.status_code != 200 or not body.get("success"):
        raise _refusal(resp.status_code, body)
    return dict(body)


def run_sql(
    settings: Settings,
    statement: str,
    timeout: float = 120.0,
    *,
    user: str | None = None,
    key_file: str | None = None,
    role: str | None = None,
) -> dict[str, Any]:
    """POST a statement (or several, separated by ';') to the API as ``user`` (the admin by default),
    acting as ``role`` (the user's default role if None); the JSON answer or SqlFailed."""
    url, options = _request(settings, statement, user, key_file, role)
    client = http_client(settings)
    with reaching(url):
        resp = client.post(url, timeout=timeout, **options)
    return json_answer(resp)


def stream_sql(
    settings: Settings,
    statement: str,
    timeout: float = 120.0,
    *,
    user: str | None = None,
    key_file: str | None = None,
    role: str | None = None,
) -> Generator[dict[str, Any], None, None]:
    """``run_sql`` with ``"stream": true``: yields ``{"columns": [...]}``, then each
    ``{"rows": [[...], ...]}`` page as it arrives, then the trailer ``{"success": true, "rows": n,
    "stats": {...}}``. A statement refused before its first line, a failure trailer, or an answer cut
    short raise SqlFailed (after the pages that came). ``timeout`` bounds each wait for a line."""
    url, options = _request(settings, statement, user, key_file, role, stream=True)
    client = http_client(settings)
    with reaching(url), client.stream("POST", url, timeout=timeout, **options) as resp:
        if not resp.headers.get("content-type", "").startswith(NDJSON):
            # An error answered before the first line (or an API that does not stream): one JSON body.
            resp.read()
            body = json_answer(resp)
            yield {"columns": body["columns"]}
            yield {"rows": body["rows"]}
            yield {"success": True, "rows": len(body["rows"]), "stats": body.get("stats") or {}}
            return
        for line in resp.iter_lines():
            if not line:
                continue
            try:
                item = json.loads(line)
            except ValueError:
                raise ApiUnavailable(
                    f"the Floe API at {url} sent a line that is not JSON: {line[:200]}"
                ) from None
            if "success" in item:
                if not item["success"]:
                    raise _refusal(resp.status_code, item)
                yield item
                return
            yield item
    raise ApiUnavailable(
        f"the answer of the Floe API at {url} ended before its last line: the result is incomplete. "
        "Check `make status` and the API log (.floe/logs/api.log)."
    )


def records(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of an answer as objects keyed by upper-case column name."""
    return [dict(zip(body["columns"], row, strict=True)) for row in body["rows"]]


# ------------------------------------------------------------------ internal stages' transfers

STAGE_ROUTES = "/api/v1/stages"
"""The API's transfer routes behind PUT and GET (``services.stages``)."""
UPLOAD_ROUTE = f"{STAGE_ROUTES}/files"
"""PUT (upload) and GET (download) of one file."""


def _stage_client(settings: Settings, timeout: float) -> httpx.Client:
    """An HTTP client for the transfer routes, verifying the API as ``run_sql`` does."""
    try:
        context = client_ssl_context(settings)
    except TlsError as exc:
        raise StatementRejected(exc.message) from None
    # Each wait for bytes is bounded, not the transfer: a large file may take long.
    return httpx.Client(base_url=api_base_url(settings), verify=context or True, timeout=timeout)


def _stage_params(location: str, role: str | None, **extra: str | None) -> dict[str, str]:
    params = {"location": location, **{k: v for k, v in extra.items() if v is not None}}
    if role is not None:
        params["role"] = role
    return params


def list_stage(
    settings: Settings,
    location: str,
    pattern: str | None = None,
    *,
    user: str | None = None,
    key_file: str | None = None,
    role: str | None = None,
    timeout: float = 120.0,
) -> list[dict[str, Any]]:
    """The files on an internal stage location (``@s/path``, ``@%t``) that GET would download:
    each with name, path (in the stage), size, md5 and last_modified."""
    url = f"{api_base_url(settings)}{STAGE_ROUTES}/list"
    with reaching(url), _stage_client(settings, timeout) as http:
        resp = http.get(
            f"{STAGE_ROUTES}/list",
            params=_stage_params(location, role, pattern=pattern),
            headers=auth_header(settings, user, key_file),
        )
    return list(json_answer(resp)["files"])


def upload_file(
    settings: Settings,
    location: str,
    name: str,
    content: bytes | Iterator[bytes],
    *,
    overwrite: bool = False,
    user: str | None = None,
    key_file: str | None = None,
    role: str | None = None,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Store ``content`` (the bytes, or an iterator of pieces streamed as they come) as file
    ``name`` on an internal stage location; the answer: status UPLOADED or SKIPPED, and for an
    upload the stored size and md5."""
    url = f"{api_base_url(settings)}{UPLOAD_ROUTE}"
    with reaching(url), _stage_client(settings, timeout) as http:
        resp = http.put(
            UPLOAD_ROUTE,
            params=_stage_params(location, role, name=name, overwrite="true" if overwrite else "false"),
            headers={**auth_header(settings, user, key_file), "Content-Type": "application/octet-stream"},
            content=content,
        )
    return json_answer(resp)


def download_file(
    settings: Settings,
    location: str,
    path: str,
    into: BinaryIO,
    *,
    progress: Callable[[int], None] | None = None,
    user: str | None = None,
    key_file: str | None = None,
    role: str | None = None,
    timeout: float = 120.0,
) -> int:
    """Write the decrypted file ``path`` of an internal stage into ``into``; its size. An answer
    cut short (the API stopped, or the file failed to decrypt midway) raises SqlFailed."""
    url = f"{api_base_url(settings)}{UPLOAD_ROUTE}"
    written = 0
    with (
        reaching(url),
        _stage_client(settings, timeout) as http,
        http.stream(
            "GET",
            UPLOAD_ROUTE,
            params=_stage_params(location, role, path=path),
            headers=auth_header(settings, user, key_file),
        ) as resp,
    ):
        if resp.status_code != 200:
            resp.read()
            json_answer(resp)
        for piece in resp.iter_bytes(1 << 20):
            into.write(piece)
            written += len(piece)
            if progress is not None:
                progress(len(piece))
    return written
