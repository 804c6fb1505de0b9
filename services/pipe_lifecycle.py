"""The rules of a pipe's life after CREATE: pausing and resuming, staleness, ownership transfer while
paused, SYSTEM$PIPE_FORCE_RESUME, and what CREATE OR ALTER PIPE may change.

Snowflake's rules (ALTER PIPE, SYSTEM$PIPE_FORCE_RESUME, "Managing Snowpipe"):

- a pipe paused longer than its notifications' retention (14 days) is *stale* if it is an
  auto-ingest pipe: ``ALTER PIPE ... SET PIPE_EXECUTION_PAUSED = FALSE`` refuses to resume it, and
  ``SYSTEM$PIPE_FORCE_RESUME(p, 'STALENESS_CHECK_OVERRIDE')`` does. In Floe the reason is concrete:
  the files queued first have outlived their 14-day dedup memory by then, so a notification sent
  again for one of them would load it twice;
- a pipe whose ownership moved to another role while it was paused resumes only through
  ``SYSTEM$PIPE_FORCE_RESUME`` (its one-argument form means OWNERSHIP_TRANSFER_CHECK_OVERRIDE), so
  the new owner looks at what is queued first;
- CREATE OR ALTER PIPE changes what ALTER PIPE changes, and refuses the rest (the COPY statement,
  AUTO_INGEST) with what to do instead.

These are pure functions of the catalog's Pipe; ``services.sql`` authorizes and stores.
"""

from __future__ import annotations

from typing import Any

from sqlglot.dialects.snowflake import Snowflake
from sqlglot.errors import TokenError
from sqlglot.tokenizer_core import TokenType

from floe.catalog import Pipe
from floe.catalog.ddl import CreatePipe
from floe.catalog.names import split_parts
from floe.errors import CompilationError, SqlError
from floe.history import iso_utc

FORCE_RESUME = "SYSTEM$PIPE_FORCE_RESUME"
STALENESS = "STALENESS_CHECK_OVERRIDE"
OWNERSHIP_TRANSFER = "OWNERSHIP_TRANSFER_CHECK_OVERRIDE"
_OVERRIDES = (STALENESS, OWNERSHIP_TRANSFER)
_MAX_OPTIONS_CHARS = 200


def stale(pipe: Pipe, now_ms: int, retention_ms: int) -> bool:
    """Whether ``pipe`` is stale: an auto-ingest pipe paused for longer than the retention."""
    return (
        pipe.auto_ingest
        and pipe.paused
        and pipe.paused_ms is not None
        and now_ms - pipe.paused_ms > retention_ms
    )


def transferred(pipe: Pipe) -> bool:
    """Whether ``pipe`` changed owners since it was paused."""
    return pipe.paused and pipe.paused_owner is not None and pipe.paused_owner != pipe.owner


def _short(pipe: Pipe) -> str:
    return split_parts(pipe.name)[-1]


def resume_refusal(pipe: Pipe, now_ms: int, retention_ms: int, overrides: frozenset[str]) -> SqlError | None:
    """Why ``pipe`` may not resume without the overrides it lacks, or None when it may."""
    days = retention_ms // 86_400_000
    if stale(pipe, now_ms, retention_ms) and STALENESS not in overrides:
        assert pipe.paused_ms is not None  # stale() checked it
        return SqlError(
            f"Pipe {_short(pipe)} is stale: it has been paused since {iso_utc(pipe.paused_ms)}, longer "
            f"than the {days} days its notifications are kept, and files queued before then may load "
            f"again if notified again. To resume it anyway, call "
            f"SELECT SYSTEM$PIPE_FORCE_RESUME('{pipe.name}', '{STALENESS}').",
            code="091302",
            sql_state="55000",
        )
    if transferred(pipe) and OWNERSHIP_TRANSFER not in overrides:
        return SqlError(
            f"Pipe {_short(pipe)} was paused by role {pipe.paused_owner} and its ownership has moved to "
            f"role {pipe.owner} since. Check what it has queued (SELECT SYSTEM$PIPE_STATUS('{pipe.name}')), "
            f"then resume it with SELECT SYSTEM$PIPE_FORCE_RESUME('{pipe.name}').",
            code="091303",
            sql_state="55000",
        )
    return None


def pause_update(
    pipe: Pipe, paused: bool, now_ms: int, retention_ms: int, overrides: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The Pipe fields that pausing (``paused``) or resuming it changes; raises when it may not
    resume. Pausing a paused pipe, or resuming a running one, changes nothing (the time it was
    paused stays the first one)."""
    if paused:
        if pipe.paused:
            return {}
        return {"paused": True, "paused_ms": now_ms, "paused_owner": pipe.owner}
    if not pipe.paused:
        return {}
    if (refused := resume_refusal(pipe, now_ms, retention_ms, overrides)) is not None:
        raise refused
    return {"paused": False, "paused_ms": None, "paused_owner": None}


def force_resume_options(text: str | None) -> frozenset[str]:
    """The second argument of SYSTEM$PIPE_FORCE_RESUME: STALENESS_CHECK_OVERRIDE and
    OWNERSHIP_TRANSFER_CHECK_OVERRIDE, in either order, comma-separated, any case. Without it, the
    function means OWNERSHIP_TRANSFER_CHECK_OVERRIDE (Snowflake's backward-compatible form)."""
    if text is None:
        return frozenset({OWNERSHIP_TRANSFER})
    words = [w.strip().upper() for w in text[: _MAX_OPTIONS_CHARS + 1].split(",")]
    unknown = [w for w in words if w not in _OVERRIDES]
    if len(text) > _MAX_OPTIONS_CHARS or unknown or not words:
        shown = (unknown[0] if unknown else text)[:40]
        raise CompilationError(
            f"invalid argument '{shown}' for {FORCE_RESUME}; it takes '{STALENESS}', "
            f"'{OWNERSHIP_TRANSFER}' or both, separated by a comma"
        )
    return frozenset(words)


def force_resume(
    pipe: Pipe, overrides: frozenset[str], now_ms: int, retention_ms: int
) -> tuple[dict[str, Any], str]:
    """SYSTEM$PIPE_FORCE_RESUME on ``pipe``: the fields to change and the function's answer."""
    update = pause_update(pipe, False, now_ms, retention_ms, overrides)
    if not update:
        return {}, f"Pipe {_short(pipe)} is already running."
    return update, f"Pipe {_short(pipe)} successfully resumed."


def copy_text(sql: str) -> str:
    """A COPY statement in a canonical form, so CREATE OR ALTER PIPE compares definitions, not their
    spacing or case: Snowflake's tokens one space apart, upper-cased but for strings and quoted
    names (a PATTERN or a quoted column keeps its case)."""
    try:
        tokens = Snowflake().tokenize(sql)
    except TokenError:
        return " ".join(sql.split())
    kept = (TokenType.STRING, TokenType.IDENTIFIER)
    return " ".join(
        repr(t.text) if t.token_type in kept else t.text.upper()
        for t in tokens
        if t.token_type != TokenType.SEMICOLON
    )


def fixed_changes(s: CreatePipe, old: Pipe) -> list[str]:
    """What a CREATE OR ALTER PIPE would change that ALTER PIPE cannot: Snowflake's COPY statement
    and AUTO_INGEST (its AWS_SNS_TOPIC and INTEGRATION, which Floe refuses at parse)."""
    changed = []
    if copy_text(s.copy_sql) != copy_text(old.copy_spec.sql):
        changed.append("COPY statement")
    if s.auto_ingest != old.auto_ingest:
        changed.append("AUTO_INGEST")
    return changed


def fixed_error(old: Pipe, changed: list[str]) -> CompilationError:
    """CREATE OR ALTER PIPE's refusal of ``changed``."""
    what = " and ".join(changed)
    return CompilationError(
        f"CREATE OR ALTER PIPE cannot change the {what} of existing pipe {_short(old)}: ALTER PIPE "
        "changes only PIPE_EXECUTION_PAUSED, COMMENT and the properties it sets. To change it, recreate "
        "the pipe with CREATE OR REPLACE PIPE (its load history starts afresh: files it loaded may load "
        "again if notified again)."
    )
