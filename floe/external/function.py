"""What a call needs to know about one external function overload, and about the query calling it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from floe.catalog.models import (
    ApiIntegration,
    Column,
    ExternalFunction,
    FunctionCompression,
    check_function_url,
    url_within,
)
from floe.external.errors import ExternalFunctionRefused


@dataclass(frozen=True)
class CallContext:
    """Where a call comes from: the query (or pipe load) and the values of the context headers."""

    query_id: str
    """Sent as ``sf-external-function-current-query-id``; part of every batch id."""
    context: Mapping[str, str] = field(default_factory=dict)
    """Values of CONTEXT_HEADERS by CONTEXT_FUNCTIONS name (``CURRENT_USER`` -> ``ALICE``)."""
    call_id: str = ""
    """Tells apart two calls of one function in one query (a pipe load's file and part, say), so
    their batches get different ids; a replay must pass the same value."""


@dataclass(frozen=True)
class RemoteFunction:
    """One external function overload, with the API integration it calls through, as one call sees
    them (build it from the catalog's current objects: ``RemoteFunction.of``)."""

    name: str
    """The overload's signature, ``DB.S.F(NUMBER, VARCHAR)``, for messages and logs."""
    url: str
    """The remote service."""
    args: tuple[Column, ...]
    """The argument types, in order."""
    returns: Column
    """The return type; ``nullable`` False for RETURNS ... NOT NULL."""
    immutable: bool
    """IMMUTABLE: identical arguments are sent once per call and results are cached."""
    integration: str
    """The API integration's name."""
    integration_enabled: bool
    """The integration's ENABLED."""
    allowed_prefixes: tuple[str, ...]
    """The integration's API_ALLOWED_PREFIXES."""
    blocked_prefixes: tuple[str, ...] = ()
    """The integration's API_BLOCKED_PREFIXES."""
    headers: tuple[tuple[str, str], ...] = ()
    """HEADERS, names in lower case."""
    context_headers: tuple[str, ...] = ()
    """CONTEXT_HEADERS: CONTEXT_FUNCTIONS names."""
    max_batch_rows: int | None = None
    """MAX_BATCH_ROWS; None takes ``external_functions.max_batch_rows``."""
    compression: FunctionCompression = "AUTO"
    """COMPRESSION of requests: AUTO (gzip), GZIP, DEFLATE or NONE."""
    strict: bool = False
    """RETURNS NULL ON NULL INPUT: a row with a NULL argument is NULL, and is not sent."""
    created_ms: int = 0
    """When the function was created: a replaced function does not reuse its predecessor's cache."""
    secure: bool = False
    """SECURE: its URL is its owner's to see (DESC), never shown in a refusal its callers read."""
    api_key: str | None = field(default=None, repr=False)
    """The integration's API_KEY: sent as ``x-api-key`` and keying the signature; never logged."""

    @classmethod
    def of(cls, fn: ExternalFunction, integration: ApiIntegration) -> RemoteFunction:
        """The function as the catalog defines it, calling through ``integration`` (the one it names)."""
        if integration.name != fn.integration:
            raise ValueError(f"{fn.name} calls through {fn.integration}, not {integration.name}")
        return cls(
            name=fn.name,
            url=fn.url,
            args=tuple(fn.args),
            returns=fn.returns,
            immutable=fn.immutable,
            integration=integration.name,
            integration_enabled=integration.enabled,
            allowed_prefixes=tuple(integration.allowed_prefixes),
            blocked_prefixes=tuple(integration.blocked_prefixes),
            headers=tuple((name.lower(), value) for name, value in fn.headers),
            context_headers=tuple(fn.context_headers),
            max_batch_rows=fn.max_batch_rows,
            compression=fn.compression,
            # getattr: the catalog's STRICT flag is newer than some stored functions' model.
            strict=bool(getattr(fn, "strict", False)),
            created_ms=fn.created_ms,
            secure=bool(getattr(fn, "secure", False)),
            api_key=integration.api_key,
        )

    @property
    def identity(self) -> str:
        """What a cached result and a batch id are bound to: a function of another name, URL or
        integration, or another incarnation, never shares them."""
        return "\0".join((self.name, self.url, self.integration, str(self.created_ms)))

    def refusal(self) -> str | None:
        """Why no request may go to ``url`` now, or None when one may."""
        try:
            check_function_url(self.url)
        except ValueError as exc:
            return f"its URL is refused: {exc}"
        if not self.integration_enabled:
            return f"API integration {self.integration} is disabled (ENABLED = FALSE)"
        # A refusal reaches whoever called the function; a SECURE function's URL is its owner's.
        shown = "the URL of secure function " + self.name if self.secure else self.url
        if not any(url_within(self.url, prefix) for prefix in self.allowed_prefixes):
            return (
                f"API integration {self.integration} does not allow {shown}: "
                "it lies under none of its API_ALLOWED_PREFIXES"
            )
        if any(url_within(self.url, prefix) for prefix in self.blocked_prefixes):
            return (
                f"API integration {self.integration} does not allow {shown}: "
                "it lies under one of its API_BLOCKED_PREFIXES"
            )
        return None

    def check_egress(self, batch_id: str | None = None) -> None:
        """Raise ExternalFunctionRefused (saying which integration refused and why) unless a request
        may go to ``url``: checked before every request."""
        reason = self.refusal()
        if reason is not None:
            raise ExternalFunctionRefused.of(self.name, batch_id, f"{reason}; no request was sent")
