"""Errors of external function calls. Their messages name the function and the batch, never a row's
data nor the remote service's answer (Snowflake shows no payload in errors either)."""

from __future__ import annotations

from typing import Self

from floe.errors import FloeError, TerminalError, TransientError


class ExternalFunctionError(FloeError):
    """A call to an external function failed; ``function`` is its signature, ``batch_id`` the batch
    that failed (None when no batch was involved)."""

    def __init__(
        self, message: str, *, function: str, batch_id: str | None = None, reason: str | None = None
    ) -> None:
        self.function = function
        self.batch_id = batch_id
        self.reason = reason if reason is not None else message
        """What went wrong, without the function and batch the message starts with."""
        super().__init__(message)

    @classmethod
    def of(cls, function: str, batch_id: str | None, reason: str) -> Self:
        """The error with Floe's message shape: ``External function F(...), batch <id>: <reason>``."""
        where = f"External function {function}" + (f", batch {batch_id}" if batch_id else "")
        return cls(f"{where}: {reason}", function=function, batch_id=batch_id, reason=reason)


class ExternalFunctionRefused(ExternalFunctionError, TerminalError):
    """The call may not leave Floe: the URL is not acceptable, or the API integration is disabled or
    does not admit it. Nothing was sent."""


class ExternalFunctionFailed(ExternalFunctionError, TerminalError):
    """The remote service answered, but not with a valid result (a status other than 200 and not
    retried, a malformed body, a value that does not convert to the return type)."""


class ExternalFunctionUnavailable(ExternalFunctionError, TransientError):
    """The remote service did not answer within the retry budget (transport errors, 429, 5xx)."""
