"""Floe's error hierarchy: one root, transient vs terminal, each naming the pipe and file."""

from __future__ import annotations


class FloeError(Exception):
    """Root of every error Floe raises on purpose."""

    def __init__(self, message: str, *, pipe: str | None = None, file: str | None = None) -> None:
        self.message = message
        self.pipe = pipe
        self.file = file
        where = ", ".join(f"{k}={v}" for k, v in (("pipe", pipe), ("file", file)) if v)
        super().__init__(f"{message} ({where})" if where else message)


class TransientError(FloeError):
    """Retrying later may succeed (a service is down, a timeout)."""


class TerminalError(FloeError):
    """Retrying will not help (bad input, bad definition)."""


class SqlError(TerminalError):
    """A statement failed; carries a Snowflake-like code and SQL state."""

    def __init__(self, message: str, *, code: str = "002003", sql_state: str = "02000") -> None:
        self.code = code
        self.sql_state = sql_state
        super().__init__(message)


class CompilationError(SqlError):
    """SQL compilation error (syntax, unknown object)."""

    def __init__(self, message: str, *, code: str = "001003", sql_state: str = "42000") -> None:
        super().__init__(f"SQL compilation error:\n{message}", code=code, sql_state=sql_state)


class ObjectNotFound(CompilationError):
    """A named stage, table or pipe does not exist."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(
            f"{kind.capitalize()} '{name}' does not exist or not authorized.",
            code="002003",
            sql_state="02000",
        )


class FileLoadError(TerminalError):
    """A whole file cannot be loaded (missing object, corrupt compression, unreadable format)."""


class AuthenticationFailed(TerminalError):
    """A request's credentials were missing or invalid (HTTP 401); the message says which check failed."""

    def __init__(self, message: str, *, code: str = "390144") -> None:
        self.code = code
        super().__init__(message)


class PermissionDenied(SqlError):
    """The caller's roles lack a privilege (HTTP 403)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="003001", sql_state="42501")
