"""Snowpipe Streaming: the v2 wire protocol and Floe's Python client.

The client's names are re-exported here lazily, so the server, which imports only
``floe.streaming.protocol``, does not load the client (httpx, threads) with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from floe.streaming.channel import InsertValidationResponse, StreamingIngestChannel
    from floe.streaming.client import StreamingIngestClient
    from floe.streaming.protocol import ChannelStatus
    from floe.streaming.transport import (
        ChannelClosedError,
        ChannelInvalidError,
        RowValidationError,
        StreamingAuthError,
        StreamingConfigError,
        StreamingError,
        StreamingRequestError,
        StreamingTimeout,
        StreamingUnavailable,
    )

_EXPORTS = {
    "StreamingIngestClient": "floe.streaming.client",
    "StreamingIngestChannel": "floe.streaming.channel",
    "InsertValidationResponse": "floe.streaming.channel",
    "ChannelStatus": "floe.streaming.protocol",
    "StreamingError": "floe.streaming.transport",
    "StreamingUnavailable": "floe.streaming.transport",
    "StreamingTimeout": "floe.streaming.transport",
    "StreamingRequestError": "floe.streaming.transport",
    "StreamingAuthError": "floe.streaming.transport",
    "StreamingConfigError": "floe.streaming.transport",
    "ChannelInvalidError": "floe.streaming.transport",
    "ChannelClosedError": "floe.streaming.transport",
    "RowValidationError": "floe.streaming.transport",
}

__all__ = [
    "ChannelClosedError",
    "ChannelInvalidError",
    "ChannelStatus",
    "InsertValidationResponse",
    "RowValidationError",
    "StreamingAuthError",
    "StreamingConfigError",
    "StreamingError",
    "StreamingIngestChannel",
    "StreamingIngestClient",
    "StreamingRequestError",
    "StreamingTimeout",
    "StreamingUnavailable",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'floe.streaming' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
