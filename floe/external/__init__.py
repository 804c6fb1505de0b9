"""External functions: the client side of Snowflake's remote-service protocol.

``FunctionCaller`` sends rows to an external function's remote service and returns its values;
``RemoteFunction.of`` builds what it needs from the catalog's function and API integration.
``floe.external.remote`` is the remote service's side (standard library only).

The names are re-exported lazily, so a remote service importing ``floe.external.remote`` does not
load the caller's dependencies (httpx, pyarrow) with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from floe.external.breaker import Breaker, Trip, held_back
    from floe.external.cache import ResultCache
    from floe.external.caller import CallOutcome, FunctionCaller
    from floe.external.errors import (
        ExternalFunctionError,
        ExternalFunctionFailed,
        ExternalFunctionRefused,
        ExternalFunctionUnavailable,
    )
    from floe.external.function import CallContext, RemoteFunction

_EXPORTS = {
    "Breaker": "floe.external.breaker",
    "Trip": "floe.external.breaker",
    "held_back": "floe.external.breaker",
    "FunctionCaller": "floe.external.caller",
    "CallOutcome": "floe.external.caller",
    "CallContext": "floe.external.function",
    "RemoteFunction": "floe.external.function",
    "ResultCache": "floe.external.cache",
    "ExternalFunctionError": "floe.external.errors",
    "ExternalFunctionFailed": "floe.external.errors",
    "ExternalFunctionRefused": "floe.external.errors",
    "ExternalFunctionUnavailable": "floe.external.errors",
}

__all__ = [
    "Breaker",
    "CallContext",
    "CallOutcome",
    "ExternalFunctionError",
    "ExternalFunctionFailed",
    "ExternalFunctionRefused",
    "ExternalFunctionUnavailable",
    "FunctionCaller",
    "RemoteFunction",
    "ResultCache",
    "Trip",
    "held_back",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'floe.external' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
