"""Errors as HTTP answers: one map from exception to status, for every route, in the route's format.

Snowpipe's routes (``/v1/...``) answer Snowflake's REST body ``{code, success, message, data}``; the
SQL route answers ``{success, code, sqlState, message}``. Which exception means which status, and
what a client is told, is decided only in ``answer_for``: the gate in front of the routes, the SQL
route and the Snowpipe routes all use it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from fastapi.responses import JSONResponse

from floe.errors import (
    AuthenticationFailed,
    FloeError,
    PermissionDenied,
    SqlError,
    TerminalError,
    TransientError,
)
from floe.keys import REDIS_ERRORS

log = logging.getLogger("floe.api")

METADATA_STORE_DOWN = (
    "The metadata store (Redis) is unavailable; retry the request. Is the stack up? Try `make up`."
)
"""The 503 text; never the Redis URL (it may hold a password) nor redis-py's error text."""
INTERNAL_ERROR = "internal error; see the API log (.floe/logs/api.log) for details"
"""The 500 text for a failure Floe did not raise on purpose; its traceback goes to the log only."""

_SQL_STATES = {401: "08001", 408: "08001", 413: "54000", 429: "53400", 500: "XX000", 503: "08001"}


class RestError(TerminalError):
    """A request refused as sent: an HTTP status and a Snowflake error code; the message says why."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        super().__init__(message)


class Throttled(TransientError):
    """Too many requests from one caller; the same request succeeds after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


def is_rest(path: str) -> bool:
    """Whether ``path`` is a Snowpipe REST route (which answers in Snowflake's REST error format)."""
    return path.startswith("/v1/")


def is_streaming(path: str) -> bool:
    """Whether ``path`` is a Snowpipe Streaming route (which answers ``{code, message}``)."""
    return path.startswith(("/v2/streaming", "/oauth/"))


# The streaming routes' codes by status, for errors that carry a numeric Snowflake code instead.
_STREAMING_CODES = {
    400: "ERR_BAD_REQUEST",
    401: "ERR_UNAUTHORIZED",
    403: "ERR_INSUFFICIENT_PRIVILEGES",
    404: "ERR_PIPE_DOES_NOT_EXIST_OR_NOT_AUTHORIZED",
    408: "ERR_REQUEST_TIMEOUT",
    413: "ERR_PAYLOAD_TOO_LARGE",
    429: "ERR_CHANNEL_RATE_LIMITED",
    503: "ERR_SERVICE_UNAVAILABLE",
}


@dataclass(frozen=True)
class ErrorAnswer:
    """An error as a route answers it: status, Snowflake code, SQL state and message."""

    path: str
    status: int
    code: str
    message: str
    sql_state: str | None = None
    retry_after_s: float | None = None

    def body(self) -> dict[str, Any]:
        """The JSON body, in the format of the route at ``path``."""
        if is_rest(self.path):
            return {"code": self.code, "success": False, "message": self.message, "data": None}
        if is_streaming(self.path):
            numeric = self.code.isdigit()
            return {
                "code": _STREAMING_CODES.get(self.status, "ERR_INTERNAL_ERROR") if numeric else self.code,
                "message": self.message,
            }
        state = self.sql_state or _SQL_STATES.get(self.status, "42000")
        return {"success": False, "code": self.code, "sqlState": state, "message": self.message}

    def headers(self) -> dict[str, str]:
        """Retry-After in whole seconds, rounded up, for a throttled request."""
        if self.retry_after_s is None:
            return {}
        return {"retry-after": str(max(1, round(self.retry_after_s + 0.5)))}

    def response(self) -> JSONResponse:
        """The answer as a Starlette response."""
        return JSONResponse(self.body(), self.status, self.headers())


def answer_for(exc: BaseException, path: str) -> ErrorAnswer:
    """How the route at ``path`` answers ``exc``; a failure Floe did not raise on purpose is logged."""
    rest = is_rest(path) or is_streaming(path)
    if isinstance(exc, Throttled):
        return ErrorAnswer(path, 429, "390429", exc.message, retry_after_s=exc.retry_after_s)
    if isinstance(exc, RestError):
        return ErrorAnswer(path, exc.status, exc.code, exc.message)
    if isinstance(exc, AuthenticationFailed):
        return ErrorAnswer(path, 401, exc.code, exc.message)
    if isinstance(exc, PermissionDenied):
        return ErrorAnswer(path, 403, "390403" if rest else exc.code, exc.message, exc.sql_state)
    if isinstance(exc, SqlError):
        return ErrorAnswer(path, 422, exc.code, exc.message, exc.sql_state)
    if isinstance(exc, FloeError):
        return ErrorAnswer(path, 500, "000603", str(exc))
    if isinstance(exc, REDIS_ERRORS):
        # Neither the URL nor redis-py's text: either may carry the host, user or password.
        log.warning("the metadata store is unavailable (%s)", type(exc).__name__)
        return ErrorAnswer(path, 503, "390503" if rest else "000603", METADATA_STORE_DOWN)
    log.error("request failed unexpectedly", exc_info=exc)
    return ErrorAnswer(path, 500, "000603", INTERNAL_ERROR)
