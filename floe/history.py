"""Load history: the state of each (pipe, path), as written by dedup and the registrar.

Dedup creates the entry (LOAD_IN_PROGRESS) in the same atomic step that enqueues the file; the
registrar turns it terminal in the same transaction that makes the file's rows visible. Readers
(insertReport, loadHistoryScan, COPY_HISTORY, SYSTEM$PIPE_STATUS) only read.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel

from floe.keys import Keys, RedisClient, one_slot

Status = Literal["LOAD_IN_PROGRESS", "LOADED", "LOAD_FAILED", "PARTIALLY_LOADED"]

COPY_HISTORY_STATUS: dict[str, str] = {
    "LOAD_IN_PROGRESS": "Load in progress",
    "LOADED": "Loaded",
    "LOAD_FAILED": "Load failed",
    "PARTIALLY_LOADED": "Partially loaded",
}


def iso_utc(ms: int) -> str:
    """Epoch milliseconds as the reports print them: ISO 8601 in UTC, to the millisecond, with Z."""
    return (
        dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


class FileState(BaseModel):
    """One file's load-history entry."""

    path: str
    """Path relative to the stage."""
    stage_location: str
    """The stage URL."""
    status: Status = "LOAD_IN_PROGRESS"
    """Snowpipe status."""
    size: int | None = None
    """File size in bytes, when known."""
    received_ms: int
    """When the notification or insertFiles call reached Floe."""
    loaded_ms: int | None = None
    """When the load committed."""
    rows_parsed: int | None = None
    """Records read from the file."""
    rows_loaded: int = 0
    """Records that became rows of the table."""
    errors_seen: int = 0
    """Records with errors."""
    error_limit: int = 1
    """ERROR_LIMIT of the pipe's ON_ERROR rule."""
    first_error: str | None = None
    """Message of the first error."""
    first_error_line: int | None = None
    """Physical line of the first error."""
    first_error_character: int | None = None
    """Character position of the first error."""
    first_error_column: str | None = None
    """Column of the first error, as "TABLE"["COL":n]."""
    system_error: str | None = None
    """Error that stopped the whole file (missing object, unreadable format)."""
    source: str = "notification"
    """'notification' (SQS) or 'rest' (insertFiles)."""

    @property
    def complete(self) -> bool:
        """Whether the load reached a terminal status."""
        return self.status != "LOAD_IN_PROGRESS"


def read_states(client: RedisClient, keys: Keys, pipe_id: str, since_ms: int = 0) -> list[FileState]:
    """Every file state of a pipe received at or after ``since_ms``, oldest first."""
    paths = client.zrangebyscore(keys.history(pipe_id), since_ms, "+inf")
    return states_of(client, keys, pipe_id, [p.decode() for p in paths])


def states_of(client: RedisClient, keys: Keys, pipe_id: str, paths: list[str]) -> list[FileState]:
    """The states of these paths, in their order; paths Floe no longer remembers are left out."""
    if not paths:
        return []
    names = [keys.file(pipe_id, p) for p in paths]
    one_slot(names, "MGET of file states")
    values = client.mget(names)
    return [FileState.model_validate_json(v) for v in values if v is not None]


def read_state(client: RedisClient, keys: Keys, pipe_id: str, path: str) -> FileState | None:
    """The state of one (pipe, path), if Floe remembers it."""
    raw = client.get(keys.file(pipe_id, path))
    return FileState.model_validate_json(raw) if raw else None
