"""The HTTP side of Floe's Snowpipe Streaming client: errors, the transport seam, the authenticated
and retrying session, body compression and the planning of appends under the 4 MB wire cap.

Everything that touches the network goes through one small :class:`Transport` (``request(method,
path, params, json|body, headers) -> (status, headers, body)``), so the tests inject a fake one and
the rest of the client is pure logic.
"""

from __future__ import annotations

import gzip
import logging
import platform
import random
import ssl
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

import httpx
import jwt
import orjson
import zstandard

from floe.errors import FloeError, TerminalError, TransientError
from floe.streaming import protocol as wire

log = logging.getLogger("floe.streaming.client")

USER_AGENT = f"FloeStreamingPython/0.1.0 ({platform.system()}) PYTHON/{platform.python_version()}"
"""Sent on every request, shaped like the SDK's ``SnowpipeStreamingSDK/{version} ({platform}) ...``."""
COMPRESSIONS = ("zstd", "gzip", "none")
"""Values of the ``compression`` property."""
TOKEN_REFRESH_MARGIN_S = 60.0
"""A scoped token is exchanged again this long before it expires (at most a fifth of its life)."""
MAX_RETRY_AFTER_S = 60.0
"""A Retry-After longer than this is shortened: a client never stalls on one hint for minutes."""
BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 10.0
WIRE_SAFETY = 0.9
"""Appends are planned to this fraction of MAX_BODY_BYTES, so a slightly worse compression than
estimated still fits and the split-and-retry path stays rare."""

# ------------------------------------------------------------------------------------------------
# Errors


class StreamingError(FloeError):
    """Root of the streaming client's errors; names the channel (if any) and the server's code."""

    def __init__(
        self,
        message: str,
        *,
        channel: str | None = None,
        pipe: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        self.channel = channel
        self.detail = message
        """The message without the channel's name."""
        self.code = code
        self.status = status
        super().__init__(f"channel {channel}: {message}" if channel else message, pipe=pipe)


class StreamingUnavailable(StreamingError, TransientError):
    """The server was not reached, or kept answering a retryable status until the retries ran out."""


class StreamingTimeout(StreamingError, TransientError):
    """A wait (for a flush or a commit) did not finish within its timeout."""


class StreamingRequestError(StreamingError, TerminalError):
    """The server refused a request (400, 403, 404, 413, ...); its code and message say why."""


class StreamingAuthError(StreamingRequestError):
    """The credentials were refused (401), also after exchanging a fresh scoped token."""


class StreamingConfigError(StreamingError, TerminalError):
    """A client property or argument is invalid, or the key or CA cannot be read."""


class ChannelInvalidError(StreamingError, TerminalError):
    """The channel can no longer be used (409 from the server, a failed flush, a reopen): reopen it."""


class ChannelClosedError(StreamingError, TerminalError):
    """The channel, or its client, was closed."""


class RowValidationError(StreamingError, TerminalError):
    """A row of an append_rows batch is invalid (ON_ERROR = ABORT), or cannot be sent at all."""

    def __init__(
        self, message: str, *, row_index: int, column: str | None = None, channel: str | None = None
    ) -> None:
        self.row_index = row_index
        self.column = column
        super().__init__(message, channel=channel)


# ------------------------------------------------------------------------------------------------
# Transport


class Transport(Protocol):
    """One HTTP exchange; raises :class:`StreamingUnavailable` when no answer came back."""

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
        """Send the request; the answer's status, headers and body."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


class HttpxTransport:
    """The real transport: one pooled httpx client (thread-safe) on the API's base URL."""

    def __init__(self, base_url: str, context: ssl.SSLContext | None, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        # With TLS only the given CA (or the system's store) vouches for the API; never unverified.
        self._client = httpx.Client(base_url=self.base_url, verify=context or True, timeout=timeout_s)
        self._closed = False

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
        """Send the request; the answer's status, headers and body."""
        sent = dict(headers or {})
        if json is not None:
            body = orjson.dumps(json)
            sent.setdefault("Content-Type", "application/json")
        try:
            resp = self._client.request(method, path, params=params, content=body, headers=sent)
        except httpx.ConnectError as exc:
            if isinstance(exc.__cause__, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(
                exc
            ):
                # Retrying cannot fix a certificate the client does not trust.
                raise StreamingConfigError(
                    f"the Floe API at {self.base_url} presented a certificate that does not verify "
                    f"({exc}); set the ca_file property to the CA that issued it"
                ) from exc
            raise StreamingUnavailable(f"cannot reach the Floe API at {self.base_url} ({exc})") from exc
        except httpx.TransportError as exc:
            raise StreamingUnavailable(
                f"the Floe API at {self.base_url} did not answer ({type(exc).__name__}: {exc})"
            ) from exc
        if self._closed:
            # A request that raced close() can open a connection after the pool was emptied, and
            # nothing else would ever close it.
            stream = resp.extensions.get("network_stream")
            if stream is not None:
                stream.close()
        return resp.status_code, resp.headers, resp.content

    def close(self) -> None:
        """Release connections; a request still in flight closes its own when it returns."""
        self._closed = True  # before the pool closes, so a racing request sees it when it returns
        self._client.close()


def scope_of(url: str) -> str:
    """``host:port`` of a base URL, the ``scope`` of the token exchange (default ports made explicit)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets, as in a URL
        host = f"[{host}]"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{host}:{port}"


# ------------------------------------------------------------------------------------------------
# Session: authentication, retries and error mapping


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Retry-After in seconds; None when absent or an HTTP date (the backoff decides then)."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _number(value: object) -> float | None:
    """A JSON number as a float; None for anything else (a boolean too)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _error_body(body: bytes) -> tuple[str | None, str]:
    """The ``code`` and ``message`` of an error answer (the raw text when it is not one)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, body[:300].decode("utf-8", "replace")
    if not isinstance(doc, dict):
        return None, body[:300].decode("utf-8", "replace")
    return (str(doc["code"]) if doc.get("code") else None), str(doc.get("message", ""))


class Session:
    """Authenticated, retrying calls to the v2 API, shared by a client's threads.

    The key-pair JWT from ``signer`` is exchanged for a scoped token, which every call carries and
    which is exchanged again shortly before it expires, and once on a 401. Retryable statuses are
    resent unchanged (same requestId, continuation token and body) with exponential backoff.
    """

    def __init__(
        self,
        transport: Transport,
        signer: Callable[[], str],
        scope: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
        max_retries: int = 8,
        pipe: str | None = None,
    ) -> None:
        self.transport = transport
        self.scope = scope
        self.pipe = pipe
        self.max_retries = max_retries
        self._signer = signer
        self._clock = clock
        self.aborted = threading.Event()
        # Backoff waits on the abort event, so closing a client without flushing interrupts it.
        self._sleep = sleep or self.aborted.wait
        self._token_lock = threading.Lock()
        self._token: str | None = None
        self._refresh_at = 0.0

    # ----------------------------------------------------------------------------------- tokens

    def token(self) -> str:
        """The current scoped token, exchanged first when there is none or it expires soon."""
        with self._token_lock:
            if self._token is None or self._clock() >= self._refresh_at:
                self._exchange()
            assert self._token is not None
            return self._token

    def _exchange(self) -> None:
        try:
            signed = self._signer()
        except FloeError as exc:
            raise StreamingConfigError(f"cannot sign the key-pair JWT: {exc.message}") from None
        form = urlencode({"grant_type": wire.TOKEN_GRANT_TYPE, "scope": self.scope}).encode()
        headers = {
            "Authorization": f"Bearer {signed}",
            "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        started = self._clock()
        answer = self._send("POST", wire.TOKEN_PATH, None, None, form, headers, None)
        # The token as plain text, as Snowflake answers the SDK: a JWT whose iat and exp (seconds)
        # give its lifetime, read without verifying (only the server can).
        token = answer.decode("utf-8", "replace").strip()
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            claims = {}
        iat, exp = _number(claims.get("iat")), _number(claims.get("exp"))
        if iat is None or exp is None:
            raise StreamingRequestError(
                f"the token exchange answered something that is not a scoped token: {answer[:200]!r}"
            )
        expires_in = exp - iat
        self._token = token
        self._refresh_at = started + expires_in - min(TOKEN_REFRESH_MARGIN_S, expires_in / 5)

    def _drop_token(self, token: str) -> None:
        """Forget ``token`` after a 401, unless another thread already replaced it."""
        with self._token_lock:
            if self._token == token:
                self._token = None

    # ----------------------------------------------------------------------------------- calls

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        channel: str | None = None,
    ) -> dict[str, Any]:
        """One API call with the scoped token; its JSON answer, or the mapped error."""
        answer = self._authorized(method, path, params, json, body, headers, channel)
        return self._decode(answer, channel)

    def call_text(self, method: str, path: str) -> str:
        """One API call with the scoped token whose answer is plain text (the hostname)."""
        return self._authorized(method, path, None, None, None, None, None).decode("utf-8", "replace").strip()

    def _authorized(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        json: Any,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        channel: str | None,
    ) -> bytes:
        """The body of a call's 2xx answer, sent with the scoped token (exchanged again once on a 401)."""
        for refreshed in (False, True):
            token = self.token()
            sent = {
                **(headers or {}),
                "Authorization": f"Bearer {token}",
                "X-Snowflake-Authorization-Token-Type": "OAUTH",
            }
            try:
                return self._send(method, path, params, json, body, sent, channel)
            except StreamingAuthError:
                if refreshed:
                    raise
                # The token may have been revoked or the server restarted with new signing keys:
                # one fresh exchange, then the 401 stands.
                self._drop_token(token)
        raise AssertionError("unreachable")

    def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        json: Any,
        body: bytes | None,
        headers: Mapping[str, str],
        channel: str | None,
    ) -> bytes:
        """Send until a final answer, the body of a 2xx one: retryable statuses and lost connections
        are resent as they were."""
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **headers}
        attempt = 0
        while True:
            if self.aborted.is_set():
                raise ChannelClosedError("the client was closed", channel=channel, pipe=self.pipe)
            retry_after: float | None = None
            try:
                status, answer_headers, answer = self.transport.request(
                    method, path, params, json=json, body=body, headers=headers
                )
            except StreamingUnavailable as exc:
                last = exc.message
            else:
                if 200 <= status < 300:
                    return answer
                if status not in wire.RETRYABLE_STATUSES:
                    raise self._error(status, answer, channel)
                code, message = _error_body(answer)
                last = f"HTTP {status} {code or ''}: {message}".replace(" :", ":")
                retry_after = _retry_after(answer_headers)
            attempt += 1
            if attempt > self.max_retries:
                raise StreamingUnavailable(
                    f"{method} {path} failed after {attempt} attempts; last: {last}",
                    channel=channel,
                    pipe=self.pipe,
                )
            delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
            # Jitter spreads the retries of many channels hit by one outage.
            delay *= random.uniform(0.5, 1.0)
            if retry_after is not None:
                delay = max(delay, retry_after)
            log.debug("%s %s: %s; retry %d in %.2f s", method, path, last, attempt, delay)
            self._sleep(delay)

    def _decode(self, answer: bytes, channel: str | None) -> dict[str, Any]:
        if not answer.strip():
            return {}
        try:
            doc = orjson.loads(answer)
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict):
            raise StreamingRequestError(
                f"the server answered a body that is not a JSON object: {answer[:200]!r}",
                channel=channel,
                pipe=self.pipe,
            )
        return doc

    def _error(self, status: int, answer: bytes, channel: str | None) -> StreamingError:
        code, message = _error_body(answer)
        text = f"{code}: {message}" if code else f"HTTP {status}: {message}"
        kind: type[StreamingError]
        if status in wire.REOPEN_STATUSES:
            kind = ChannelInvalidError
            text += "; reopen the channel (open_channel) and resend from its latest committed offset token"
        elif status == 401:
            kind = StreamingAuthError
        else:
            kind = StreamingRequestError
        return kind(text, channel=channel, pipe=self.pipe, code=code, status=status)


# ------------------------------------------------------------------------------------------------
# Bodies


class Codec:
    """One Content-Encoding: ``zstd`` (default), ``gzip`` or ``none``."""

    def __init__(self, name: str) -> None:
        if name not in COMPRESSIONS:
            raise StreamingConfigError(f"compression must be one of {', '.join(COMPRESSIONS)}, not {name!r}")
        self.name = name
        # A ZstdCompressor must not be shared by threads that compress at once: one per thread.
        self._local = threading.local()

    @property
    def content_encoding(self) -> str | None:
        """The Content-Encoding header's value (None: send the body as it is)."""
        return None if self.name == "none" else self.name

    def compress(self, data: bytes) -> bytes:
        """The body as sent."""
        if self.name == "zstd":
            compressor = getattr(self._local, "zstd", None)
            if compressor is None:
                compressor = self._local.zstd = zstandard.ZstdCompressor(level=3)
            return bytes(compressor.compress(data))
        if self.name == "gzip":
            return gzip.compress(data, compresslevel=6, mtime=0)
        return data


@dataclass
class Batch:
    """The rows of one append_rows call as NDJSON, with its offset tokens.

    One buffer and the end offset of each row in it, not a bytes object per row: a client holding
    millions of rows keeps a few large blocks, which costs a fraction of the per-row allocations.
    """

    seq: int
    """Position among the channel's buffered batches (1, 2, ...): wait_for_flush waits for one."""
    data: bytes
    """The rows' NDJSON lines, each ending in a newline."""
    ends: list[int]
    """Where each row's line ends in ``data`` (ascending; the last is ``len(data)``)."""
    start: str | None
    end: str | None
    appended_at: float

    @property
    def rows(self) -> int:
        """How many rows the batch holds."""
        return len(self.ends)

    @property
    def raw_bytes(self) -> int:
        """The batch's size uncompressed."""
        return len(self.data)

    @property
    def effective_start(self) -> str | None:
        """The start token; a call that gave only an end token starts and ends at it."""
        return self.start if self.start is not None else self.end

    def offset(self, row: int) -> int:
        """Where row ``row`` begins in ``data``."""
        return self.ends[row - 1] if row else 0


@dataclass
class Request:
    """One append, ready to send."""

    body: bytes
    raw_bytes: int
    rows: int
    start: str | None
    end: str | None
    last_seq: int | None
    """The last batch whose final row this request carries: once it succeeds, that batch is flushed."""


@dataclass(frozen=True)
class _Piece:
    """Rows ``lo`` .. ``hi - 1`` of one batch, all in one request."""

    batch: Batch
    lo: int
    hi: int

    @property
    def rows(self) -> int:
        return self.hi - self.lo

    @property
    def first(self) -> bool:
        return self.lo == 0

    @property
    def last(self) -> bool:
        return self.hi == self.batch.rows

    def data(self) -> memoryview:
        return memoryview(self.batch.data)[self.batch.offset(self.lo) : self.batch.ends[self.hi - 1]]

    def split(self, rows: int) -> tuple[_Piece, _Piece]:
        cut = self.lo + rows
        return _Piece(self.batch, self.lo, cut), _Piece(self.batch, cut, self.hi)


class Planner:
    """Cuts a channel's buffered batches into appends whose bodies, as sent, fit MAX_BODY_BYTES.

    The uncompressed size of a request is chosen from the compression ratio seen last (worst case
    1.0 at first); a body that still comes out too big is split in half, and each half retried, so
    no over-size body is ever sent. One planner per channel: its ratio follows that channel's data.
    """

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self.ratio = 1.0
        self.compressions = 0
        """How many bodies were compressed (more than the requests sent when a split happened)."""

    def raw_limit(self) -> int:
        """Uncompressed bytes a request may hold: the estimated wire budget, within the server's
        cap on decompressed bodies."""
        return min(
            wire.MAX_UNCOMPRESSED_BYTES, int(wire.MAX_BODY_BYTES * WIRE_SAFETY / max(self.ratio, 0.001))
        )

    def requests(self, batches: Sequence[Batch]) -> Iterator[Request]:
        """The appends for ``batches``, in order; planned lazily, so only one body is held at a time.

        A request takes whole rows while they fit its budget (a row alone over it goes alone)."""
        chunk: list[_Piece] = []
        room = self.raw_limit()
        for batch in batches:
            lo = 0
            while lo < batch.rows:
                base = batch.offset(lo)
                hi = bisect_right(batch.ends, base + room, lo)
                if hi == lo:
                    if chunk:  # the next row does not fit: send the chunk, then start afresh
                        yield from self._encode(chunk)
                        chunk, room = [], self.raw_limit()
                        continue
                    hi = lo + 1
                chunk.append(_Piece(batch, lo, hi))
                room -= batch.ends[hi - 1] - base
                lo = hi
        if chunk:
            yield from self._encode(chunk)

    def _encode(self, chunk: list[_Piece]) -> Iterator[Request]:
        data = b"".join([piece.data() for piece in chunk])
        body = self.codec.compress(data)
        self.compressions += 1
        self.ratio = max(len(body) / max(len(data), 1), 0.001)
        if len(body) > wire.MAX_BODY_BYTES:
            rows = sum(piece.rows for piece in chunk)
            if rows == 1:
                # Rows are checked at append time (fits_alone), so this means a bug, not bad input.
                raise StreamingRequestError(
                    f"a row of {len(data)} bytes compresses to {len(body)} bytes, over the "
                    f"{wire.MAX_BODY_BYTES}-byte cap of one append"
                )
            yield from self._encode_halves(chunk, rows // 2)
            return
        # The request starts at the first batch beginning in it and ends at the last batch ending
        # in it: a batch split over two requests gives its end token only to the one that completes
        # it, so a committed offset token never claims rows that were not sent yet.
        start = next(
            (p.batch.effective_start for p in chunk if p.first and p.batch.effective_start is not None),
            None,
        )
        enders = [p.batch for p in chunk if p.last]
        end = next((b.end for b in reversed(enders) if b.end is not None), None)
        rows = sum(piece.rows for piece in chunk)
        yield Request(body, len(data), rows, start, end, enders[-1].seq if enders else None)

    def _encode_halves(self, chunk: list[_Piece], rows: int) -> Iterator[Request]:
        """``_encode`` of the first ``rows`` rows of ``chunk``, then of the rest."""
        head: list[_Piece] = []
        tail: list[_Piece] = []
        for i, piece in enumerate(chunk):
            if piece.rows >= rows:
                if piece.rows == rows:
                    head.append(piece)
                    tail = chunk[i + 1 :]
                else:
                    first, second = piece.split(rows)
                    head.append(first)
                    tail = [second, *chunk[i + 1 :]]
                break
            head.append(piece)
            rows -= piece.rows
        yield from self._encode(head)
        yield from self._encode(tail)

    def fits_alone(self, line: bytes) -> bool:
        """Whether one row can be sent at all: within MAX_ROW_BYTES, and small enough once compressed."""
        if len(line) > wire.MAX_ROW_BYTES:
            return False
        # Below the cap with room for the codec's framing, a row always fits; only near it compress.
        return (
            len(line) <= wire.MAX_BODY_BYTES - 65536 or len(self.codec.compress(line)) <= wire.MAX_BODY_BYTES
        )
