"""Load history: the state of each (pipe, path), as written by dedup and the registrar.

Dedup creates the entry (LOAD_IN_PROGRESS) in the same atomic step that enqueues the file; the
registrar turns it terminal in the same transaction that makes the file's rows visible, and writes
the file's errors (VALIDATE_PIPE_LOAD's rows) under a key of their own in that same step. A file
sent again after its load, changed ("Load skipped"), is a skip record of its own. Readers
(insertReport, loadHistoryScan, COPY_HISTORY, VALIDATE_PIPE_LOAD, SYSTEM$PIPE_STATUS) only read.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast

from pydantic import BaseModel, Field

from floe.keys import Keys, RedisClient, one_slot

Status = Literal["LOAD_IN_PROGRESS", "LOADED", "LOAD_FAILED", "PARTIALLY_LOADED"]

COPY_HISTORY_STATUS: dict[str, str] = {
    "LOAD_IN_PROGRESS": "Load in progress",
    "LOADED": "Loaded",
    "LOAD_FAILED": "Load failed",
    "PARTIALLY_LOADED": "Partially loaded",
}
LOAD_SKIPPED = "Load skipped"
"""COPY_HISTORY's status of a skip record."""
LOAD_HISTORY_STATUS: dict[str, str] = {
    "LOADED": "LOADED",
    "LOAD_FAILED": "LOAD FAILED",
    "PARTIALLY_LOADED": "PARTIALLY LOADED",
}
"""INFORMATION_SCHEMA.LOAD_HISTORY's spelling of the terminal statuses (it has no other)."""

Trouble = Literal["pipe", "internal"]
"""Why a file failed when the file itself was not the cause: ``pipe``, the pipe could not run (the
job refused it, or its COPY did not compile: SYSTEM$PIPE_STATUS's ``error``), or ``internal``, an
error Floe did not foresee (its ``fault``)."""


@dataclass(frozen=True)
class ErrorDetail:
    """One error of one file, as VALIDATE_PIPE_LOAD shows it (its columns, in its order)."""

    error: str
    """The message, Snowflake's text."""
    line: int | None = None
    """Physical line of the error, 1-based, counting header lines."""
    character: int | None = None
    """1-based character position in that line."""
    byte_offset: int | None = None
    """Byte offset of that character in the decompressed file; None where Floe cannot tell."""
    category: str = "conversion"
    """``parsing`` (the record could not be read) or ``conversion`` (a value did not convert, or
    broke a rule of its column), as Snowflake's validation output names them."""
    code: str | None = None
    """Snowflake's error code, e.g. '100038'."""
    sql_state: str | None = None
    """Its SQLSTATE, e.g. '22018'."""
    column_name: str | None = None
    """``"<TABLE>"["<COLUMN>":<ordinal>]``."""
    row_number: int | None = None
    """The record's number in the file (the header lines not counted)."""
    row_start_line: int | None = None
    """The physical line the record starts on."""
    rejected_record: str | None = None
    """The record's text (cut at ``REJECTED_RECORD_CHARS``)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErrorDetail:
        """The error ``asdict`` gave (the wire and the stored forms)."""
        return cls(**data)


REJECTED_RECORD_CHARS = 1000
"""A rejected record is kept to this many characters: the detail of 100 errors stays small."""


def errors_json(errors: list[ErrorDetail]) -> str:
    """The stored form of a file's errors ('' for none: the registrar then deletes the key)."""
    return json.dumps([asdict(e) for e in errors], separators=(",", ":")) if errors else ""


def read_errors(
    client: RedisClient, keys: Keys, pipe_id: str, paths: list[str]
) -> dict[str, list[ErrorDetail]]:
    """The recorded errors of these files of one pipe (one MGET); files without any are left out."""
    if not paths:
        return {}
    names = [keys.file_errors(pipe_id, p) for p in paths]
    one_slot(names, "MGET of file errors")
    out: dict[str, list[ErrorDetail]] = {}
    for path, raw in zip(paths, client.mget(names), strict=True):
        if raw:
            out[path] = [ErrorDetail.from_dict(e) for e in json.loads(raw)]
    return out


@dataclass(frozen=True)
class SkipRecord:
    """A file sent to a pipe again after its load, changed (another size), and skipped: Snowpipe
    loads a path once per 14 days "even if it was later modified". COPY_HISTORY's "Load skipped"."""

    path: str
    size: int | None
    received_ms: int
    """When the notification or insertFiles call that was skipped reached Floe."""
    loaded_ms: int | None
    """When the file at this path had loaded."""
    source: str

    def member(self) -> str:
        """The record as its sorted set holds it."""
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)


# KEYS[1] the skip set. ARGV[1] now ms, ARGV[2] retention ms, ARGV[3] cap, then score/member pairs.
_RECORD_SKIPS = """
for i = 4, #ARGV, 2 do redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -1 - tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
SKIPS_KEPT = 10_000
"""Skip records a pipe keeps (the newest), besides the 14 days: a client that sends changed files
under old names over and over cannot grow the set without bound."""


def record_skips(
    client: RedisClient, keys: Keys, pipe_id: str, skips: list[SkipRecord], now_ms: int, retention_ms: int
) -> None:
    """Add skip records (one script: add, drop the ones past the retention, keep the newest)."""
    if not skips:
        return
    args: list[str | int] = [now_ms, retention_ms, SKIPS_KEPT]
    for s in skips:
        args += [s.received_ms, s.member()]
    script = client.register_script(_RECORD_SKIPS)
    script(keys=[keys.skipped(pipe_id)], args=args)


def read_skips(client: RedisClient, keys: Keys, pipe_id: str, since_ms: int = 0) -> list[SkipRecord]:
    """The pipe's skip records received at or after ``since_ms``, oldest first."""
    raw = client.zrangebyscore(keys.skipped(pipe_id), since_ms, "+inf")
    return [SkipRecord(**cast(dict[str, Any], json.loads(m))) for m in raw]


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
    errors: list[ErrorDetail] = Field(default_factory=list, exclude=True)
    """The load's errors, carried from its outcome to the registrar, which stores them under their
    own key in the commit (never in the state's JSON: COPY_HISTORY reads states by the thousand)."""
    trouble: Trouble | None = Field(default=None, exclude=True)
    """Why the load failed when the file was not the cause (the registrar records it in the pipe's
    status); carried like ``errors``, never stored with the state."""

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
