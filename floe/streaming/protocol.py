"""The Snowpipe Streaming v2 wire protocol as Floe speaks it: routes, field names, error codes,
continuation tokens and limits, shared by the API (services/streaming.py) and the Python client.

Names follow Snowflake's documentation (``../shared/notes/streaming-reference.md``); where it is
silent or contradicts itself the choice is recorded in docs/decisions.md ("Snowpipe Streaming").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import quote

# ------------------------------------------------------------------------------------------------
# Limits

MAX_BODY_BYTES = 4 * 1024 * 1024
"""An append's body as sent (after Content-Encoding): Snowflake's hard 4 MB cap (HTTP 413 above)."""
MAX_UNCOMPRESSED_BYTES = 32 * 1024 * 1024
"""An append's body after decompression: a gzip or zstd bomb stops here (HTTP 413)."""
MAX_ROW_BYTES = 16 * 1024 * 1024
"""One NDJSON line (a row), as Snowflake's per-value limit bounds a row."""
DEFAULT_MAX_CLIENT_LAG_MS = 1_000
"""How long the client buffers rows before it sends them (MAX_CLIENT_LAG's default)."""

# ------------------------------------------------------------------------------------------------
# Routes

API_PREFIX = "/v2/streaming"
HOSTNAME_PATH = f"{API_PREFIX}/hostname"
TOKEN_PATH = "/oauth/token"
TOKEN_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:jwt-bearer"
"""The form field ``grant_type`` of the token exchange."""

SUCCESS = "SUCCESS"
"""``channel_status_code`` of a healthy channel (the SDK's wait_for_commit checks for it)."""
ELASTIC = "ELASTIC"
"""The name of every pipe's elastic channel: many producers append to it without opening it, with no
offset or continuation tokens, at least once (the SDK's ``get_elastic_channel``)."""


def channel_path(database: str, schema: str, pipe: str, channel: str) -> str:
    """Open (PUT) and drop (DELETE) a channel."""
    return f"{pipe_path(database, schema, pipe)}/channels/{quote(channel, safe='')}"


def rows_path(database: str, schema: str, pipe: str, channel: str) -> str:
    """Append rows (POST, NDJSON body)."""
    under = pipe_path(database, schema, pipe)[len(API_PREFIX) :]
    return f"{API_PREFIX}/data{under}/channels/{quote(channel, safe='')}/rows"


def pipe_path(database: str, schema: str, pipe: str) -> str:
    """The pipe's path; ``+ ':bulk-channel-status'`` is the bulk status route (POST)."""
    db, sc, pi = (quote(part, safe="") for part in (database, schema, pipe))
    return f"{API_PREFIX}/databases/{db}/schemas/{sc}/pipes/{pi}"


def bulk_status_path(database: str, schema: str, pipe: str) -> str:
    """Status of several channels (POST ``{"channel_names": [...]}``)."""
    return pipe_path(database, schema, pipe) + ":bulk-channel-status"


# Query parameters and body fields, as documented.
CONTINUATION_TOKEN = "continuationToken"
START_OFFSET_TOKEN = "startOffsetToken"
END_OFFSET_TOKEN = "endOffsetToken"
REQUEST_ID = "requestId"
OFFSET_TOKEN = "offset_token"
FAIL_ON_UNCOMMITTED_ROWS = "fail_on_uncommitted_rows"
NEXT_CONTINUATION_TOKEN = "next_continuation_token"
LAST_COMMITTED_OFFSET_TOKEN = "last_committed_offset_token"
"""The drop answer's field (the SDK's SfDropChannelResult), as in a channel status."""
CHANNEL_STATUS = "channel_status"
CHANNEL_STATUSES = "channel_statuses"
CHANNEL_NAMES = "channel_names"
TABLE_COLUMNS = "table_columns"
"""Floe's addition to the open-channel answer: the target table's columns (name, type, nullable),
which the client validates rows against for ON_ERROR = ABORT and SKIP_BATCH."""

# ------------------------------------------------------------------------------------------------
# Errors: the body is {"code": ..., "message": ...}


class Code:
    """Error codes of the ``code`` field (documented ones, and Floe's where Snowflake names none)."""

    STALE_CONTINUATION_TOKEN_SEQUENCER = "STALE_CONTINUATION_TOKEN_SEQUENCER"
    """409: the channel was reopened since this token was issued; reopen it."""
    INVALID_ROW_SEQUENCER = "ERR_CHANNEL_HAS_INVALID_ROW_SEQUENCER"
    """409: the token is not the channel's latest (an append was skipped or sent twice)."""
    CHANNEL_HAS_UNCOMMITTED_DATA = "ERR_CHANNEL_HAS_UNCOMMITTED_DATA"
    """409: open or drop with fail_on_uncommitted_rows while appended rows are not committed."""
    CHANNEL_MUST_BE_REOPENED = "ERR_CHANNEL_MUST_BE_REOPENED"
    """409: the channel's table or pipe was replaced; reopen it."""
    CHANNEL_DOES_NOT_EXIST = "ERR_CHANNEL_DOES_NOT_EXIST_OR_NOT_AUTHORIZED"
    """404."""
    PIPE_DOES_NOT_EXIST = "ERR_PIPE_DOES_NOT_EXIST_OR_NOT_AUTHORIZED"
    """404: also a pipe the caller holds no privilege on, so its existence does not leak."""
    TABLE_DOES_NOT_EXIST = "ERR_TABLE_DOES_NOT_EXIST_NOT_AUTHORIZED"
    """404: a default pipe (<TABLE>-STREAMING) whose table does not exist or is not visible."""
    MALFORMED_ROWS = "ERR_MALFORMED_ROWS"
    """400: a line of the NDJSON body is not a JSON object (the message names the line)."""
    BAD_REQUEST = "ERR_BAD_REQUEST"
    """400: a missing or malformed parameter, header or body."""
    PAYLOAD_TOO_LARGE = "ERR_PAYLOAD_TOO_LARGE"
    """413: over MAX_BODY_BYTES as sent, or over MAX_UNCOMPRESSED_BYTES decompressed."""
    RATE_LIMITED = "ERR_CHANNEL_RATE_LIMITED"
    """429: the channel or its user is over its request rate; retry later (Retry-After)."""
    PENDING_FULL = "ERR_PENDING_ROWS_FULL"
    """503 (Floe's): a channel, pipe, table or user holds its bound of rows appended and not yet
    committed: the pipeline is behind, retry once it commits them (Retry-After). Not 429: the
    official SDK takes six 429s in a row on one append as a cue to write files itself (file mode)."""
    TOO_MANY_CHANNELS = "ERR_TOO_MANY_CHANNELS"
    """400 (Floe's): opening a new channel would pass a pipe's, table's or user's bound on channels;
    drop channels no longer used. Not retried: only a drop or an expiry makes room."""
    UNAUTHORIZED = "ERR_UNAUTHORIZED"
    """401: no credentials, or ones that do not authenticate (the message says which check failed)."""
    FORBIDDEN = "ERR_INSUFFICIENT_PRIVILEGES"
    """403: authenticated, but the role may not do this (the message names the privilege)."""
    UNAVAILABLE = "ERR_SERVICE_UNAVAILABLE"
    """503: Floe's metadata store is unreachable; retry."""


RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses a client retries with the same requestId (the documented error handling)."""
REOPEN_STATUSES = frozenset({409})
"""HTTP statuses that invalidate the channel: reopen it, then resend from its committed token."""


# ------------------------------------------------------------------------------------------------
# Channel status


@dataclass(frozen=True)
class ChannelStatus:
    """One channel's ``channel_status`` object, with the documented field names."""

    database_name: str
    schema_name: str
    pipe_name: str
    channel_name: str
    channel_status_code: str = SUCCESS
    last_committed_offset_token: str | None = None
    created_on_ms: int = 0
    rows_inserted: int = 0
    rows_parsed: int = 0
    rows_error_count: int = 0
    last_error_offset_upper_bound: str | None = None
    last_error_message: str | None = None
    last_error_timestamp_ms: int | None = None
    snowflake_avg_processing_latency_ms: int = 0

    @property
    def status_code(self) -> str:
        """The SDK's name for ``channel_status_code``."""
        return self.channel_status_code

    @property
    def latest_committed_offset_token(self) -> str | None:
        """The SDK's name for ``last_committed_offset_token``."""
        return self.last_committed_offset_token

    def to_json(self) -> dict[str, Any]:
        """The wire form."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChannelStatus:
        """From the wire form, ignoring fields this version does not know."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# ------------------------------------------------------------------------------------------------
# Continuation tokens


@dataclass(frozen=True)
class ContinuationToken:
    """What a continuation token encapsulates: the channel incarnation, its client sequencer (which
    a reopen bumps) and its row sequencer (which each accepted append bumps). Opaque to clients."""

    incarnation: str
    client_sequencer: int
    row_sequencer: int

    def encode(self) -> str:
        """The token string."""
        return f"{self.incarnation}_{self.client_sequencer}_{self.row_sequencer}"

    @classmethod
    def decode(cls, token: str) -> ContinuationToken:
        """ValueError unless ``token`` is one ``encode`` made."""
        parts = token.split("_") if len(token) <= 100 else []
        if (
            len(parts) != 3
            or not parts[0].isalnum()
            or not all(p.isascii() and p.isdigit() for p in parts[1:])
        ):
            raise ValueError("not a continuation token this server issued")
        return cls(parts[0], int(parts[1]), int(parts[2]))
