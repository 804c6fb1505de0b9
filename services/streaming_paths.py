"""The streaming routes' paths, routed on the raw path so that a name holding ``/`` reaches its route.

Clients percent-encode each name of a streaming URL as one segment: the SDK sends a channel
``a/b`` as ``a%2Fb`` (docs/streaming-sdk-protocol.md, section 4.10). ASGI servers decode the path
before routing, which makes it two segments, so such a route was not found (a code-less 404 the SDK
retries for hours). ``RawStreamingPaths`` rebuilds the path of a streaming request from
``raw_path``: each segment decoded, with only ``%`` and ``/`` encoded again, so routing still
splits on the real separators; the ``segment`` convertor of the route templates below decodes
those two back. A name thus reaches its route exactly as the client wrote it.
"""

from __future__ import annotations

from urllib.parse import unquote, unquote_to_bytes

from starlette.convertors import Convertor, register_url_convertor
from starlette.types import ASGIApp, Receive, Scope, Send

STREAMING_PREFIX = "/v2/streaming/"


def _escaped(name: str) -> str:
    """A decoded name as one segment of the rebuilt path: ``%`` and ``/`` encoded, nothing else."""
    return name.replace("%", "%25").replace("/", "%2F")


class Segment(Convertor[str]):
    """One name of a streaming route, as ``RawStreamingPaths`` left it: ``%25`` and ``%2F`` decoded."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return _escaped(value)


register_url_convertor("segment", Segment())

PIPE = "/v2/streaming/databases/{database:segment}/schemas/{schema:segment}/pipes/{pipe:segment}"
"""A pipe's path; ``:bulk-channel-status`` and ``:pipe-info`` follow it."""
DATA_PIPE = "/v2/streaming/data/databases/{database:segment}/schemas/{schema:segment}/pipes/{pipe:segment}"
"""A pipe's path on the data plane (appends)."""
CHANNEL = "/channels/{channel:segment}"
"""A channel under ``PIPE`` or ``DATA_PIPE``."""


class RawStreamingPaths:
    """Routes a streaming request on its raw path (the module's docstring says how)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(STREAMING_PREFIX):
            raw = scope.get("raw_path")
            if raw:
                # Each segment's bytes as sent, percent-decoded, read as UTF-8 (as Starlette reads
                # a path); a byte that is no UTF-8 becomes U+FFFD, which names nothing.
                segments = [
                    _escaped(unquote_to_bytes(part).decode("utf-8", "replace")) for part in raw.split(b"/")
                ]
            else:
                # No raw path (an ASGI server that does not give one): the decoded path is all
                # there is; its '%' are escaped so the convertor does not decode them twice.
                segments = [_escaped(part) for part in scope["path"].split("/")]
            # In place: the request context reads the route the router puts in this scope.
            scope["path"] = "/".join(segments)
        await self.app(scope, receive, send)
