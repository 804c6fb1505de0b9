"""The remote service's side of Floe's external functions: read a request, answer it.

This module uses the standard library only and imports nothing from Floe, so a remote service can
copy this one file instead of installing Floe (importing it as ``floe.external.remote`` loads
``floe``'s package, which needs pydantic and redis). Starlette is imported only by ``endpoint``.

The protocol is Snowflake's (a POST whose JSON body is ``{"data": [[row, arg, ...], ...]}`` and
whose answer is ``{"data": [[row, value], ...]}``, with ``sf-external-function-*`` headers), plus one
Floe addition: when the API integration has an API_KEY, every request carries an HMAC-SHA256
signature keyed by it, over ``f"{timestamp}.{batch_id}.".encode() + body`` (the body exactly as
sent, compressed or not), in ``sf-floe-signature: v1=<hex>`` with ``sf-floe-signature-timestamp``
(Unix seconds). ``parse_request`` checks it before it decompresses or parses anything.

Values arrive as Floe writes them: numbers as JSON numbers (parsed here as ``int`` or exact
``Decimal``), VARIANTs as JSON values, DATE as ``YYYY-MM-DD``, timestamps as ISO 8601 with
microseconds (``2014-01-01T16:00:00.000000``, with ``+00:00`` for TIMESTAMP_TZ), FLOAT NaN and
infinities as the strings ``"NaN"``, ``"inf"`` and ``"-inf"``, NULL as ``null``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from datetime import time as dtime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:  # Starlette is needed by ``endpoint`` only, and imported there
    from starlette.requests import Request
    from starlette.responses import Response

FORMAT_HEADER = "sf-external-function-format"
"""Always ``json``."""
FORMAT_VERSION_HEADER = "sf-external-function-format-version"
"""Always ``1.0``."""
QUERY_ID_HEADER = "sf-external-function-current-query-id"
"""The id of the query (or pipe load) that called the function."""
BATCH_ID_HEADER = "sf-external-function-query-batch-id"
"""Names one batch of rows; the same on every retry of that batch (an idempotency token)."""
CONTEXT_HEADER_PREFIX = "sf-context-"
"""CONTEXT_HEADERS travel as ``sf-context-current-user`` and so on."""
API_KEY_HEADER = "x-api-key"
"""The API integration's API_KEY, for gateways that check it."""
SIGNATURE_HEADER = "sf-floe-signature"
"""``v1=<hex HMAC-SHA256>``; several comma-separated values may be given (key rotation)."""
SIGNATURE_TIMESTAMP_HEADER = "sf-floe-signature-timestamp"
"""Unix seconds at which the request was signed."""
SIGNATURE_VERSION = "v1"
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body ``parse_request`` and ``endpoint`` accept, after decompression."""

_COMPRESSED_BODY_MIN = 1024
"""``endpoint`` gzips answers at least this large when the caller accepts gzip; smaller ones gain
nothing."""


class RemoteRequestError(Exception):
    """A request the remote service should refuse; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        self.message = message
        self.status = status
        super().__init__(message)


class SignatureError(RemoteRequestError):
    """The request's signature is missing, does not match, or is too old (answer 401)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=401)


class BodyTooLarge(ValueError):
    """A body inflates past its bound."""


# ------------------------------------------------------------------------------------------------
# Signing and bodies (shared with Floe's caller, so both sides compute the same bytes)


def signature(api_key: str, timestamp: int, batch_id: str, body: bytes) -> str:
    """The ``sf-floe-signature`` value of a request: ``v1=`` and the hex HMAC-SHA256, keyed by the
    API key, of ``f"{timestamp}.{batch_id}."`` followed by the body as sent."""
    mac = hmac.new(api_key.encode(), f"{timestamp}.{batch_id}.".encode(), hashlib.sha256)
    mac.update(body)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def verify_signature(
    body: bytes,
    headers: Mapping[str, str],
    api_key: str,
    *,
    tolerance_s: float = 300.0,
    now: float | None = None,
) -> None:
    """Raise SignatureError unless ``headers`` (lower-case names) sign ``body`` with ``api_key``
    at a time within ``tolerance_s`` of ``now``."""
    stamp, given = headers.get(SIGNATURE_TIMESTAMP_HEADER), headers.get(SIGNATURE_HEADER)
    if not stamp or not given:
        raise SignatureError(
            f"the request is not signed (no {SIGNATURE_HEADER} / {SIGNATURE_TIMESTAMP_HEADER} header)"
        )
    try:
        timestamp = int(stamp)
    except ValueError:
        raise SignatureError(f"{SIGNATURE_TIMESTAMP_HEADER} is not a whole number of seconds") from None
    # A stale timestamp bounds how long a captured request can be replayed.
    age = (time.time() if now is None else now) - timestamp
    if abs(age) > tolerance_s:
        raise SignatureError(
            f"the signature is {abs(age):.0f} s {'old' if age > 0 else 'in the future'}; "
            f"at most {tolerance_s:.0f} s is accepted"
        )
    expected = signature(api_key, timestamp, headers.get(BATCH_ID_HEADER, ""), body)
    offered = [part.strip() for part in given.split(",")]
    # compare_digest on every candidate: the time taken does not tell how much of one matched.
    if not any(hmac.compare_digest(expected, candidate) for candidate in offered):
        raise SignatureError(
            "the signature does not match (a different API key, or the body or batch id was altered)"
        )


def decompress(data: bytes, encoding: str | None, limit: int) -> bytes:
    """``data`` decoded per a Content-Encoding (gzip, deflate, identity or none), never more than
    ``limit`` bytes: BodyTooLarge past it, ValueError for an unknown or corrupt encoding."""
    name = (encoding or "identity").strip().lower()
    if name in ("", "identity"):
        if len(data) > limit:
            raise BodyTooLarge(f"the body is larger than {limit} bytes")
        return data
    if name in ("gzip", "x-gzip"):
        return _inflate(data, zlib.MAX_WBITS | 16, limit)
    if name == "deflate":
        # RFC 9110's deflate is zlib-wrapped, but some servers send raw deflate: accept both.
        try:
            return _inflate(data, zlib.MAX_WBITS, limit)
        except zlib.error:
            return _inflate(data, -zlib.MAX_WBITS, limit)
    raise ValueError(f"unsupported Content-Encoding {name!r} (gzip, deflate or identity)")


def _inflate(data: bytes, wbits: int, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    # max_length keeps a decompression bomb from ever taking more than limit + 1 bytes.
    out = inflater.decompress(data, limit + 1)
    if len(out) > limit or inflater.unconsumed_tail:
        raise BodyTooLarge(f"the body inflates past {limit} bytes")
    if not inflater.eof:
        raise zlib.error("the compressed body is truncated")
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(text: bytes | str) -> Any:
    """Strict JSON: numbers with a fraction or exponent become exact ``Decimal``s, and NaN or
    Infinity (which JSON does not have) are refused."""
    return json.loads(text, parse_float=Decimal, parse_constant=_no_constant)


def json_text(value: Any) -> str:
    """``value`` as JSON text, the way Floe writes values: Decimals exactly, FLOAT NaN and
    infinities as the strings ``"NaN"``, ``"inf"``, ``"-inf"``, dates and times in ISO 8601 (with
    microseconds), bytes as upper-case hex. TypeError for anything else."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return int.__repr__(value)  # an IntEnum's str() would be its name
    if isinstance(value, float | Decimal):
        return _fraction_text(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, datetime | dtime):
        return f'"{value.isoformat(timespec="microseconds")}"'
    if isinstance(value, date):
        return f'"{value.isoformat()}"'
    if isinstance(value, bytes | bytearray | memoryview):
        return f'"{bytes(value).hex().upper()}"'
    if isinstance(value, Mapping):
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be strings, not {type(key).__name__}")
            items.append(f"{json.dumps(key, ensure_ascii=False)}:{json_text(item)}")
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(json_text(item) for item in value) + "]"
    raise TypeError(f"no JSON form for {type(value).__name__}")


def _fraction_text(value: float | Decimal) -> str:
    if isinstance(value, Decimal):
        if value.is_finite():
            return str(value)  # Decimal's text is always a valid JSON number
    elif math.isfinite(value):
        return float.__repr__(value)
    # JSON numbers have no NaN or infinities: Snowflake's spellings of them, as strings.
    is_nan = value.is_nan() if isinstance(value, Decimal) else math.isnan(value)
    return '"NaN"' if is_nan else ('"inf"' if value > 0 else '"-inf"')


# ------------------------------------------------------------------------------------------------
# Requests and responses


@dataclass(frozen=True)
class RemoteRequest:
    """One batch as the remote service received it."""

    rows: list[list[Any]]
    """Each row as sent: ``[row number, arg1, arg2, ...]``."""
    batch_id: str
    """``sf-external-function-query-batch-id``: the same on every retry of this batch."""
    query_id: str
    """``sf-external-function-current-query-id``."""
    context: dict[str, str]
    """CONTEXT_HEADERS by function name (``CURRENT_USER``), from the ``sf-context-*`` headers."""
    headers: dict[str, str]
    """Every request header, names in lower case (the function's HEADERS among them)."""

    @property
    def row_numbers(self) -> list[int]:
        """The row numbers, in order."""
        return [row[0] for row in self.rows]

    @property
    def args(self) -> list[list[Any]]:
        """Each row's arguments, without its row number."""
        return [row[1:] for row in self.rows]


def parse_request(
    body: bytes,
    headers: Mapping[str, str],
    *,
    api_key: str | None = None,
    tolerance_s: float = 300.0,
    max_bytes: int = DEFAULT_MAX_BODY_BYTES,
    now: float | None = None,
) -> RemoteRequest:
    """Check and read one request: its signature (when ``api_key`` is given; before anything is
    decompressed or parsed), its format headers, its compression and its rows. Raises
    RemoteRequestError (SignatureError for the signature) with a message fit to answer with."""
    lower = {name.lower(): value for name, value in headers.items()}
    if api_key is not None:
        verify_signature(body, lower, api_key, tolerance_s=tolerance_s, now=now)
    if lower.get(FORMAT_HEADER, "").lower() != "json":
        raise RemoteRequestError(f"{FORMAT_HEADER} must be json")
    if lower.get(FORMAT_VERSION_HEADER) != "1.0":
        raise RemoteRequestError(f"{FORMAT_VERSION_HEADER} must be 1.0")
    batch_id = lower.get(BATCH_ID_HEADER)
    if not batch_id:
        raise RemoteRequestError(f"no {BATCH_ID_HEADER} header")
    try:
        text = decompress(body, lower.get("content-encoding"), max_bytes)
    except BodyTooLarge as exc:
        raise RemoteRequestError(str(exc), status=413) from None
    except (ValueError, zlib.error) as exc:
        raise RemoteRequestError(f"the body does not decompress: {exc}") from None
    try:
        doc = loads(text)
    except (ValueError, RecursionError):
        raise RemoteRequestError("the body is not JSON") from None
    rows = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise RemoteRequestError('the body is not a JSON object with a "data" array')
    for index, row in enumerate(rows):
        if not isinstance(row, list) or not row or type(row[0]) is not int:
            raise RemoteRequestError(f"row {index} is not an array that starts with its row number")
    context = {
        name[len(CONTEXT_HEADER_PREFIX) :].replace("-", "_").upper(): value
        for name, value in lower.items()
        if name.startswith(CONTEXT_HEADER_PREFIX)
    }
    return RemoteRequest(
        rows=rows,
        batch_id=batch_id,
        query_id=lower.get(QUERY_ID_HEADER, ""),
        context=context,
        headers=lower,
    )


@overload
def build_response(rows: Sequence[tuple[int, Any]], /) -> bytes: ...


@overload
def build_response(request: RemoteRequest, values: Sequence[Any], /) -> bytes: ...


def build_response(first: RemoteRequest | Sequence[tuple[int, Any]], values: Any = None, /) -> bytes:
    """The answer's body: ``{"data": [[row, value], ...]}`` from ``(row, value)`` pairs, or from a
    request and one value per row (in the request's order). Values go through ``json_text``."""
    if isinstance(first, RemoteRequest):
        if values is None or len(values) != len(first.rows):
            given = "no" if values is None else len(values)
            raise ValueError(f"{given} values for {len(first.rows)} rows")
        pairs: Iterable[tuple[int, Any]] = zip(first.row_numbers, values, strict=True)
    else:
        pairs = first
    data = ",".join(f"[{int.__repr__(row)},{json_text(value)}]" for row, value in pairs)
    return f'{{"data":[{data}]}}'.encode()


def endpoint(
    fn: Callable[..., Any],
    *,
    api_key: str | None = None,
    tolerance_s: float = 300.0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint that calls ``fn(*args)`` once per row (in a worker thread) and answers
    with the results. Refused requests get 400, 401 or 413 with ``{"error": ...}``; when ``fn``
    raises ValueError, TypeError, KeyError or ArithmeticError (bad input: retrying would not help)
    the batch gets 400, and any other exception becomes a 500, which Floe retries."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse
    from starlette.responses import Response as PlainResponse

    def answer_all(request: RemoteRequest) -> bytes:
        return build_response(request, [fn(*args) for args in request.args])

    async def handle(request: Request) -> Response:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body_bytes:  # bounded before the whole body is held
                return JSONResponse({"error": "the request body is too large"}, status_code=413)
        try:
            parsed = parse_request(
                bytes(body),
                request.headers,
                api_key=api_key,
                tolerance_s=tolerance_s,
                max_bytes=max_body_bytes,
            )
        except RemoteRequestError as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        try:
            payload = await run_in_threadpool(answer_all, parsed)
        except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=400)
        headers = {}
        accepted = request.headers.get("accept-encoding", "").lower()
        if "gzip" in accepted and len(payload) >= _COMPRESSED_BODY_MIN:
            payload = zlib.compress(payload, wbits=zlib.MAX_WBITS | 16)
            headers["Content-Encoding"] = "gzip"
        return PlainResponse(payload, media_type="application/json", headers=headers)

    return handle
