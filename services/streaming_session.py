"""What the official snowpipe-streaming SDK asks before its first channel, in the forms it parses.

The SDK (1.9.1, docs/streaming-sdk-protocol.md) connects in this order: ``GET /v2/streaming/hostname``
(the host it sends every later call to), ``POST /oauth/token`` (a scoped token), then
``POST <pipe>:pipe-info`` (stage locations, encryption and parameter overrides), and sends telemetry
in the background. The hostname and the token are answered as plain text, which the SDK reads as the
inside of a JSON string. The module also answers the streaming routes Floe does not serve with a
coded error: a code-less 404 is one the SDK retries for hours.

Floe serves the SDK in rowset mode only (rows sent to ``/rows``). ``:pipe-info`` answers the stage
locations the SDK requires in a form that points at no real storage; decision 118 says what keeps
the SDK in rowset mode and what an operator must set on the client.
"""

from __future__ import annotations

import ipaddress
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from cryptography import x509
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException

from floe.catalog import Pipe
from floe.settings import Settings
from floe.streaming import protocol as wire
from floe.streaming.protocol import Code
from floe.tls import required_names, san_names, tls_files
from services.answers import RestError, answer_for
from services.auth import Authenticator, Identity, Principal, ScopedTokens
from services.snowpipe import caller_of
from services.streaming import StreamingService
from services.streaming_paths import PIPE

log = logging.getLogger("floe.api.streaming")

TELEMETRY_PATH = "/telemetry/send/sessionless"
TELEMETRY_MAX_BYTES = 1024 * 1024
"""A telemetry body the API reads before discarding it: the SDK's are 1-3 KB a batch of logs."""
PIPE_INFO_PATH = PIPE + ":pipe-info"
PIPE_INFO_LIFETIME_MS = 3_600_000
"""How long a pipe-info answer holds; the SDK asks again a minute before it ends."""
FLUSH_INTERVAL_MS = 1000
"""``max_append_request_buffer_duration_ms``: how often the SDK sends a channel's rows. The SDK's
default, said explicitly: a shorter one makes smaller appends (less often over the SDK's 1 MB
rowset limit) but more of them against ``streaming.appends_per_s_per_channel``."""
ROWSET_ONLY = "floe-rowset-mode-only"
"""The bucket and credentials of the stage locations: Floe serves no file mode yet, and an SDK
that switches to it must fail on them rather than write anywhere."""
BINARY_INPUT_FORMATS = {"HEX": "HEX", "BASE64": "BASE64", "UTF8": "UTF-8"}
"""A pipe's BINARY_FORMAT as the SDK spells ``binary_input_format`` (it refuses ``UTF8``)."""
UNKNOWN_ROUTE = "ERR_ROUTE_NOT_FOUND"
METHOD_NOT_ALLOWED = "ERR_METHOD_NOT_ALLOWED"
_UNSPECIFIED = ("", "0.0.0.0", "::")


# ------------------------------------------------------------------------------------------------
# Hostname


def _bare(name: str) -> str:
    """A host as certificates name it: lower-case, an IP address canonical, without brackets."""
    name = name.strip().strip("[]").lower()
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def _dns_name(name: str) -> bool:
    """Whether ``name`` is a DNS host name: dot-separated labels of letters, digits and inner hyphens."""
    if not 0 < len(name) <= 253:
        return False
    for label in name.split("."):
        if not 0 < len(label) <= 63 or label[0] == "-" or label[-1] == "-":
            return False
        if not all(c.isascii() and (c.isalnum() or c == "-") for c in label):
            return False
    return True


def host_of(header: str | None) -> str | None:
    """The host of a Host header (``host``, ``host:port``, ``[v6]:port``), or None when it is not
    a host name or an IP address (nothing else may reach an answer the SDK parses as JSON)."""
    text = (header or "").strip()
    if text.startswith("["):
        end = text.find("]")
        rest = text[end + 1 :]
        if end < 0 or (rest and not (rest[0] == ":" and rest[1:].isascii() and rest[1:].isdigit())):
            return None
        try:
            return str(ipaddress.IPv6Address(text[1:end]))
        except ValueError:
            return None
    host, colon, port = text.partition(":")
    if colon and not (port.isascii() and port.isdigit()):
        return None
    host = host.lower()
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        return host if _dns_name(host) else None


class Hostnames:
    """What ``GET /v2/streaming/hostname`` answers: a bare host (the SDK adds the port of its URL)
    that the API's certificate covers, since the SDK verifies TLS against it.

    In order: the host the request was sent to (its Host header), when the certificate covers it:
    the client reached this API by that name, so its later calls do too; else ``api.host`` when it
    is not a bind-all address and is covered; else 127.0.0.1 or localhost, which a ``tls=auto``
    certificate always covers; else the certificate's first other name. With TLS off any valid
    host is answered (the SDK refuses plain HTTP anyway).
    """

    def __init__(self, configured: str, covered: frozenset[str] | None) -> None:
        self.configured = _bare(configured)
        self.covered = covered
        """The certificate's names (lower-case, IP addresses canonical); None: TLS is off."""

    @classmethod
    def of(cls, settings: Settings) -> Hostnames:
        """The names the API's certificate covers, read once (`floe api` makes it before the app)."""
        files = tls_files(settings)
        if files is None:
            return cls(settings.api.host, None)
        try:
            cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        except (OSError, ValueError):
            # Not made yet (an app built without `floe api`): what tls=auto will put in it.
            made = required_names(settings.api.host) if settings.api.tls == "auto" else ()
            return cls(settings.api.host, frozenset(_bare(n) for n in made))
        return cls(settings.api.host, frozenset(san_names(cert)))

    def covers(self, name: str) -> bool:
        """Whether a client verifying the certificate accepts ``name`` (one-label wildcards too)."""
        if name in _UNSPECIFIED:
            return False
        if self.covered is None or name in self.covered:
            return True
        _first, dot, parent = name.partition(".")
        return bool(dot) and f"*.{parent}" in self.covered

    def answer(self, host_header: str | None) -> str:
        """The host for a request whose Host header is ``host_header``."""
        asked = host_of(host_header)
        fallbacks = ("127.0.0.1", "localhost", *sorted(self.covered or ()))
        for name in (asked, self.configured, *fallbacks):
            if name is not None and "*" not in name and self.covers(name):
                return f"[{name}]" if ":" in name else name
        return "127.0.0.1"


# ------------------------------------------------------------------------------------------------
# Token exchange and pipe info


def exchange(identity: Identity | None, body: bytes, scoped: ScopedTokens, default_scope: str) -> str:
    """POST /oauth/token: a scoped token for the caller of a key-pair JWT, as plain text."""
    if identity is None or not identity.fingerprint:
        raise RestError(401, Code.UNAUTHORIZED, "Exchange a key-pair JWT (KEYPAIR_JWT) for a scoped token.")
    form = parse_qs(body.decode("utf-8", "replace"), max_num_fields=10)
    grant = (form.get("grant_type") or [""])[0]
    if grant != wire.TOKEN_GRANT_TYPE:
        raise RestError(400, Code.BAD_REQUEST, f"grant_type must be {wire.TOKEN_GRANT_TYPE}.")
    scope = (form.get("scope") or [default_scope])[0][:256]
    issued = scoped.issue(identity, scope, time.time())
    log.info("scoped token issued to %s", identity.user)
    return issued


def _stage_location(pipe: Pipe, region: str, endpoint: str, now_ms: int) -> dict[str, Any]:
    """A stage location the SDK accepts (all of S3's credentials present, an expiry ahead) that
    leads nowhere: in rowset mode the SDK never uses it. Its own prefix per call, as file mode will
    need (two clients given one prefix write the same keys), and the API itself as the endpoint,
    so an SDK in file mode is refused by this API instead of sending rows to AWS."""
    return {
        "location_type": "S3",
        "location": f"{ROWSET_ONLY}/{pipe.id}/{uuid.uuid4().hex}/",
        "region": region,
        "creds": {"AWS_KEY_ID": ROWSET_ONLY, "AWS_SECRET_KEY": ROWSET_ONLY, "AWS_TOKEN": ROWSET_ONLY},
        "expiry_time_ms": now_ms + PIPE_INFO_LIFETIME_MS,
        "use_s3_regional_url": False,
        "storage_endpoint": endpoint,
    }


def pipe_info(pipe: Pipe, region: str, endpoint: str, now_ms: int) -> dict[str, Any]:
    """The ``:pipe-info`` answer (docs/streaming-sdk-protocol.md, section 4.3) for rowset mode."""
    binary = BINARY_INPUT_FORMATS.get(pipe.copy_spec.file_format.binary_format, "HEX")
    return {
        "rowset_stage_location": _stage_location(pipe, region, endpoint, now_ms),
        "durable_stage_location": _stage_location(pipe, region, endpoint, now_ms),
        # An empty key: the SDK needs one only to encrypt the files of file mode.
        "encryption_info": {"pipe_key_id": 1, "pipe_key": "", "diversifier": ROWSET_ONLY},
        "parameter_overrides": {
            "binary_input_format": binary,
            "max_append_request_buffer_duration_ms": FLUSH_INTERVAL_MS,
        },
    }


# ------------------------------------------------------------------------------------------------
# Routes


def session_router(
    service: StreamingService, authenticator: Authenticator, scoped: ScopedTokens, hostnames: Hostnames
) -> APIRouter:
    """The hostname, token exchange, pipe-info and telemetry routes."""
    api = APIRouter(tags=["Snowpipe Streaming"])

    def caller(request: Request) -> Principal:
        return caller_of(request, authenticator)

    async def run(request: Request, work: Callable[[], Response]) -> Response:
        try:
            return await run_in_threadpool(work)
        except Exception as exc:  # noqa: BLE001 -- the HTTP boundary; answer_for logs what is unexpected
            return answer_for(exc, request.url.path).response()

    @api.get(wire.HOSTNAME_PATH)
    async def get_hostname(request: Request) -> Response:
        """The host that serves the channel routes, as plain text: this API, by a name its
        certificate covers (``Hostnames``)."""

        def work() -> Response:
            caller(request)  # an authenticated user asks; the answer is the same for every one
            return PlainTextResponse(hostnames.answer(request.headers.get("host")))

        return await run(request, work)

    @api.post(wire.TOKEN_PATH)
    async def token(request: Request) -> Response:
        """Exchange a key-pair JWT for a scoped token (plain text) that only the streaming routes
        accept."""
        body = await request.body()

        def work() -> Response:
            caller(request)  # the user still holds its key, and the role its JWT names
            identity = getattr(request.state, "identity", None)
            default = hostnames.answer(request.headers.get("host"))
            issued = exchange(identity, body, scoped, default)
            return PlainTextResponse(issued, headers={"cache-control": "no-store"})

        return await run(request, work)

    @api.post(PIPE_INFO_PATH)
    async def get_pipe_info(request: Request, database: str, schema: str, pipe: str) -> Response:
        """Where the SDK would stage files, how it would encrypt them, and how it sends rows
        (rowset mode only: the locations lead nowhere)."""

        def work() -> Response:
            with service.catalog.pinned():
                found = service.pipe(caller(request), database, schema, pipe, write=False)
            # The port the client reached this API on, as the SDK's own calls use it.
            port = request.url.port or (443 if request.url.scheme == "https" else 80)
            endpoint = f"{hostnames.answer(request.headers.get('host'))}:{port}"
            now_ms = int(time.time() * 1000)
            return JSONResponse(pipe_info(found, service.settings.aws.region, endpoint, now_ms))

        return await run(request, work)

    @api.post(TELEMETRY_PATH)
    async def telemetry(request: Request) -> JSONResponse:
        """The SDK's client metrics: accepted and discarded (the gate bounds the body). ``data``
        must be a string: the SDK 1.9.1 fails to read ``null`` there."""
        return JSONResponse({"data": "discarded", "success": True})

    return api


def unknown_streaming_route(request: Request, exc: HTTPException) -> JSONResponse | None:
    """A streaming route Floe does not serve, answered with a code so the SDK fails at once (it
    retries a code-less 404 for hours); None for any other path."""
    path = request.url.path
    if not path.startswith(("/v2/streaming", wire.TOKEN_PATH)) or exc.status_code not in (404, 405):
        return None
    if exc.status_code == 405:
        message = f"{request.method} is not served on {path}; see the Snowpipe Streaming routes in /docs."
        return answer_for(RestError(405, METHOD_NOT_ALLOWED, message), path).response()
    message = (
        f"Floe serves no route {request.method} {path}: it serves Snowpipe Streaming in rowset mode "
        "(its file mode and /filebuffer are not served yet); see docs/streaming-sdk-protocol.md."
    )
    return answer_for(RestError(404, UNKNOWN_ROUTE, message), path).response()
