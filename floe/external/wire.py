"""One batch on the wire: how rows are cut into batches, the body and headers of a request, the
batch id, and the checks an answer must pass (the seed's format, to the letter)."""

from __future__ import annotations

import gzip
import hashlib
import time
import uuid
import zlib
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from typing import Any

from floe.external import remote
from floe.external.function import CallContext, RemoteFunction

_BODY_OVERHEAD = len(b'{"data":[]}')
# Headers a function's HEADERS may not set: they frame the request, or Floe sets them itself.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "content-type",
        "content-encoding",
        "accept",
        "accept-encoding",
        remote.API_KEY_HEADER,
        remote.SIGNATURE_HEADER,
        remote.SIGNATURE_TIMESTAMP_HEADER,
    }
)
_CONTENT_ENCODINGS = {"AUTO": "gzip", "GZIP": "gzip", "DEFLATE": "deflate", "NONE": None}


class ProtocolViolation(ValueError):
    """An answer that breaks the protocol; the reason never shows the answer's content."""


def plan_batches(arg_sizes: Sequence[int], max_rows: int, max_bytes: int) -> list[range]:
    """Cut rows, given the byte length of each one's argument text, into consecutive batches of at
    most ``max_rows`` rows whose body stays within ``max_bytes``; a row too large for any body goes
    alone (it cannot be split, and a smaller batch would not help it)."""
    batches: list[range] = []
    start, size = 0, _BODY_OVERHEAD
    for index, arg_size in enumerate(arg_sizes):
        row = _row_size(index - start, arg_size)
        if index > start and (index - start >= max_rows or size + row > max_bytes):
            batches.append(range(start, index))
            start, size = index, _BODY_OVERHEAD
            row = _row_size(0, arg_size)
        size += row
    if start < len(arg_sizes):
        batches.append(range(start, len(arg_sizes)))
    return batches


def _row_size(row_number: int, arg_size: int) -> int:
    # "[", the row number, "," before non-empty arguments, "]", and the "," between rows.
    return len(str(row_number)) + arg_size + (4 if arg_size else 3)


def build_body(args: Sequence[bytes]) -> bytes:
    """``{"data": [[0, args...], [1, args...], ...]}`` from each row's comma-joined argument text."""
    rows = b",".join(b"[%d,%s]" % (n, a) if a else b"[%d]" % n for n, a in enumerate(args))
    return b'{"data":[' + rows + b"]}"


def batch_id(fn: RemoteFunction, ctx: CallContext, position: int, body: bytes) -> str:
    """The batch's id: a UUID-shaped digest of the query id, the call id, the function's identity,
    the batch's position in the call and its body. A replay of the same batch sends the same id;
    two batches with different rows never share one, so a service may use it to deduplicate."""
    digest = hashlib.sha256()
    for part in (ctx.query_id, ctx.call_id, fn.identity, str(position)):
        digest.update(part.encode())
        digest.update(b"\0")
    digest.update(hashlib.sha256(body).digest())
    return str(uuid.UUID(bytes=digest.digest()[:16]))


def compress(body: bytes, fn: RemoteFunction) -> tuple[bytes, str | None]:
    """The body as sent per the function's COMPRESSION, and its Content-Encoding (None: as is)."""
    encoding = _CONTENT_ENCODINGS[fn.compression]
    if encoding == "gzip":
        return gzip.compress(body, compresslevel=6, mtime=0), encoding
    if encoding == "deflate":
        return zlib.compress(body, 6), encoding
    return body, None


def request_headers(fn: RemoteFunction, ctx: CallContext, batch: str, encoding: str | None) -> dict[str, str]:
    """A batch's headers, the same on every attempt (``sign`` adds the per-attempt signature): the
    function's HEADERS, its CONTEXT_HEADERS as ``sf-context-<name>``, the protocol's headers, the
    API key and the compression."""
    headers = {name: value for name, value in fn.headers if name not in _RESERVED_HEADERS}
    for name in fn.context_headers:
        value = ctx.context.get(name)
        if value is None:
            raise ValueError(f"CONTEXT_HEADERS names {name}, and the call context has no value for it")
        headers[remote.CONTEXT_HEADER_PREFIX + name.lower().replace("_", "-")] = value
    headers.update(
        {
            "content-type": "application/json",
            "accept": "application/json",
            remote.FORMAT_HEADER: "json",
            remote.FORMAT_VERSION_HEADER: "1.0",
            remote.QUERY_ID_HEADER: ctx.query_id,
            remote.BATCH_ID_HEADER: batch,
            "accept-encoding": encoding or "identity",
        }
    )
    if encoding:
        headers["content-encoding"] = encoding
    if fn.api_key:
        headers[remote.API_KEY_HEADER] = fn.api_key
    return headers


def sign(headers: dict[str, str], fn: RemoteFunction, batch: str, sent: bytes) -> dict[str, str]:
    """``headers`` with a fresh signature of the body as sent, when the integration has an API key
    (without one there is no shared secret to key it)."""
    if not fn.api_key:
        return headers
    now = int(time.time())
    return {
        **headers,
        remote.SIGNATURE_TIMESTAMP_HEADER: str(now),
        remote.SIGNATURE_HEADER: remote.signature(fn.api_key, now, batch, sent),
    }


def retry_after(value: str | None) -> float | None:
    """Seconds a Retry-After header (seconds or an HTTP date) asks to wait, or None."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        return max(0.0, parsedate_to_datetime(text).timestamp() - time.time())
    except (ValueError, TypeError, IndexError):
        return None


def decode_answer(raw: bytes, content_encoding: str | None, sent_rows: int, max_bytes: int) -> list[Any]:
    """The values of a 200 answer, one per row sent, in order; ProtocolViolation when the body does
    not decompress within ``max_bytes``, is not JSON, or does not hold exactly ``[row, value]`` for
    each row sent, with the same row numbers in the same order."""
    try:
        text = remote.decompress(raw, content_encoding, max_bytes)
    except remote.BodyTooLarge:
        raise ProtocolViolation(
            f"the response is larger than {max_bytes} bytes (external_functions.max_response_bytes)"
        ) from None
    except (ValueError, zlib.error):
        raise ProtocolViolation(
            f"the response body does not decode as Content-Encoding {content_encoding or 'identity'}"
        ) from None
    try:
        doc = remote.loads(text)
    except (ValueError, RecursionError):
        raise ProtocolViolation("the response body is not JSON") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise ProtocolViolation('the response is not a JSON object with a "data" array')
    if len(data) != sent_rows:
        raise ProtocolViolation(f"the response has {len(data)} rows; {sent_rows} were sent")
    values = []
    for index, row in enumerate(data):
        if not isinstance(row, list) or not row:
            raise ProtocolViolation(f"response row {index} is not an array [row number, value]")
        if type(row[0]) is not int:
            raise ProtocolViolation(f"response row {index} does not start with a row number")
        if row[0] != index:
            raise ProtocolViolation(
                f"response row {index} does not have row number {index}; rows must come back "
                "with the numbers sent, in the order sent"
            )
        if len(row) != 2:
            raise ProtocolViolation(
                f"response row {index} has {len(row) - 1} values; a scalar function returns exactly one"
            )
        values.append(row[1])
    return values
