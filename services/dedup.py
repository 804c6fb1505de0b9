"""Dedup and enqueue: the one atomic Redis step both triggers (SQS and insertFiles) go through.

For each path of one pipe, in a single Lua script: create the file's state with ``SET NX EX``
(the 14-day dedup memory), and only if that succeeded, add the file to the pipe's queue stream and
to its history index. A path the pipe already saw within the retention window is skipped, even if
the object was overwritten since. All keys share the pipe's hash tag.

``ALTER PIPE ... REFRESH`` goes through a sibling script (``Deduper.refresh``) that also sends a
file again whose load failed (LOAD_FAILED), deciding on the state as it is at that moment.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from floe.catalog import Pipe, now_ms
from floe.errors import TerminalError
from floe.history import FileState, SkipRecord, Status, record_skips, states_of
from floe.keys import Keys, RedisClient, one_slot
from floe.metrics import FileFlow
from floe.records import Origin, QueueEntry
from floe.runtime import log_lines

log = logging.getLogger("floe.dedup")

_LOAD_FAILED: Status = "LOAD_FAILED"
"""The one status REFRESH sends a known file again for."""

# KEYS[1] queue stream, KEYS[2] history zset, KEYS[3..] file keys.
# ARGV[1] ttl seconds, ARGV[2] now ms, ARGV[3] retention ms, ARGV[4] origin, then per file: path, size
# (QueueEntry.stream_size), state json, put time ms ('' when unknown: the entry then has no 'put').
# The queue entry's field names come from floe.records.
_SCRIPT = f"""
local ttl = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local origin = ARGV[4]
local out = {{}}
for i = 3, #KEYS do
  local base = 5 + (i - 3) * 4
  local path, size, state, put = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]
  if redis.call('SET', KEYS[i], state, 'NX', 'EX', ttl) then
    if put == '' then
      redis.call('XADD', KEYS[1], '*', {QueueEntry.lua_stream_fields("path", "size", "ARGV[2]", "origin")})
    else
      redis.call('XADD', KEYS[1], '*', {QueueEntry.lua_stream_fields("path", "size", "ARGV[2]", "origin")},
        {QueueEntry.lua_put_field("put")})
    end
    redis.call('ZADD', KEYS[2], now, path)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[3]))
return out
"""


# KEYS[1] queue stream, KEYS[2] history zset, KEYS[3] retired flag, KEYS[4..] file keys.
# ARGV as _SCRIPT's, but ARGV[5] is '1' to send failed loads again, '0' not to (a backfill), and the
# files' values start at ARGV[6]. Per file: 1 no state, queued as new; 2 its load had failed
# (LOAD_FAILED, and ARGV[5] is '1'), its state replaced by the fresh one and queued again; 0 anything
# else (pending, loaded, partially loaded), left alone. The status is read and replaced in the same
# script, so of two REFRESHes racing for one failed file exactly one sends it. {-1}, and nothing
# written, when DROP or CREATE OR REPLACE retired the pipe incarnation before this ran: its queue
# would never be read again.
_REFRESH = f"""
if redis.call('EXISTS', KEYS[3]) == 1 then return {{-1}} end
local ttl = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local origin = ARGV[4]
local out = {{}}
for i = 4, #KEYS do
  local base = 6 + (i - 4) * 3
  local path, size, state = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  local old = redis.call('GET', KEYS[i])
  local sent = 0
  if not old then
    sent = 1
  elseif ARGV[5] == '1' and cjson.decode(old)['status'] == '{_LOAD_FAILED}' then
    sent = 2
  end
  if sent > 0 then
    redis.call('SET', KEYS[i], state, 'EX', ttl)
    redis.call('XADD', KEYS[1], '*', {QueueEntry.lua_stream_fields("path", "size", "ARGV[2]", "origin")})
    redis.call('ZADD', KEYS[2], now, path)
  end
  out[#out + 1] = sent
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[3]))
return out
"""

REFRESH_CHUNK = 1000
"""Files per call of the refresh script: a stage's listing can be long, and one script blocks Redis
while it runs."""

# KEYS[1] retired flag, KEYS[2] queue stream. ARGV[1] now ms.
# Returns the queue's entries (QueueEntry.from_flat decodes them) the first time, nothing once the
# pipe is retired.
_RETIRE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then return {} end
return redis.call('XRANGE', KEYS[2], '-', '+')
"""


class Refreshed(enum.Enum):
    """What ``Deduper.refresh`` did with one file."""

    SKIPPED = 0
    """Pending, loaded or partially loaded: left alone (a partial load's rows are in the table)."""
    NEW = 1
    """The pipe had no state for it: queued as a new file."""
    RETRIED = 2
    """Its load had failed: its state is pending again and it is queued again."""


_REFRESHED = {
    Refreshed.NEW: "enqueued",
    Refreshed.RETRIED: "enqueued again: its last load had failed",
    Refreshed.SKIPPED: "skipped: pending, loaded or partially loaded already",
}
_STEP = {Refreshed.NEW: "enqueued", Refreshed.RETRIED: "enqueued", Refreshed.SKIPPED: "skipped"}


class PipeRetired(TerminalError):
    """The pipe incarnation was dropped or replaced while a REFRESH queued its files."""


@dataclass(frozen=True)
class FileRef:
    """A file to load: its path relative to the stage, its size if known, and when it was put if
    known (an S3 notification's event time; the start of its put→queryable latency)."""

    path: str
    size: int | None = None
    put_ms: int | None = None


class _StateTemplate:
    """The initial FileState JSON of one call's files, which differ only in path and size.

    Building and dumping a model per file was most of an insertFiles call of 100 files; the JSON is
    the model's own, with the two values spliced in.
    """

    _PATH = "\x00path\x00"
    _SIZE = -7_777_777_777

    def __init__(self, pipe: Pipe, now: int, source: Origin) -> None:
        text = FileState(
            path=self._PATH,
            stage_location=pipe.stage_url,
            size=self._SIZE,
            received_ms=now,
            error_limit=pipe.copy_spec.error_limit,
            source=source,
        ).model_dump_json()
        path_at = text.index(json.dumps(self._PATH))
        head, rest = text[:path_at], text[path_at + len(json.dumps(self._PATH)) :]
        mid, tail = rest.split(str(self._SIZE), 1)
        self._parts = (head, mid, tail)

    def json(self, f: FileRef) -> str:
        """The state JSON of one file."""
        head, mid, tail = self._parts
        return f"{head}{json.dumps(f.path)}{mid}{'null' if f.size is None else int(f.size)}{tail}"


class Deduper:
    """Runs the dedup-and-enqueue script, and counts what it let in on ``flow`` (when given)."""

    def __init__(
        self, client: RedisClient, keys: Keys, retention_seconds: int, flow: FileFlow | None = None
    ) -> None:
        self._r = client
        self._keys = keys
        self._ttl = retention_seconds
        self._flow = flow
        self._script = client.register_script(_SCRIPT)
        self._refresh = client.register_script(_REFRESH)

    def enqueue(self, pipe: Pipe, files: Sequence[FileRef], *, source: Origin) -> list[bool]:
        """Enqueue the files this pipe has not seen; True where a file was newly enqueued."""
        if not files:
            return []
        now = now_ms()
        keys = [self._keys.queue(pipe.id), self._keys.history(pipe.id)]
        args: list[str | int] = [self._ttl, now, self._ttl * 1000, source]
        state = _StateTemplate(pipe, now, source)
        file_key, stream_size = self._keys.file, QueueEntry.stream_size
        for f in files:
            keys.append(file_key(pipe.id, f.path))
            args += [f.path, stream_size(f.size), state.json(f), "" if f.put_ms is None else f.put_ms]
        one_slot(keys, "dedup script")
        flags = cast(list[int], self._script(keys=keys, args=args))
        # The first step of a file's journey through the logs, in the process that received it
        # (the consumer for a notification, the API for insertFiles). The message texts are what
        # the chaos tests look for.
        log_lines(
            log,
            (
                (
                    logging.INFO,
                    "enqueued" if new else "skipped: already seen by this pipe",
                    {
                        "pipe": pipe.name,
                        "file": f.path,
                        "step": "enqueued" if new else "skipped",
                        "source": source,
                    },
                )
                for f, new in zip(files, flags, strict=True)
            ),
        )
        if not all(flags):
            self._note_skips(pipe, [f for f, new in zip(files, flags, strict=True) if not new], now, source)
        enqueued = [bool(x) for x in flags]
        if self._flow is not None:
            self._flow.record(pipe.name, source, enqueued)
        return enqueued

    def _note_skips(self, pipe: Pipe, seen: list[FileRef], now: int, source: Origin) -> None:
        """Record a "Load skipped" for each file sent again after its load with another size: the
        object was overwritten, and Snowpipe loads a path once in 14 days "even if it was later
        modified". A file sent again unchanged (a retry, a redelivered notification) is Floe's
        at-least-once delivery at work and leaves no record. One MGET, only when dedup skipped."""
        sized = [f for f in seen if f.size is not None]
        if not sized:
            return
        states = {s.path: s for s in states_of(self._r, self._keys, pipe.id, [f.path for f in sized])}
        skips = [
            SkipRecord(f.path, f.size, now, state.loaded_ms, source)
            for f in sized
            if (state := states.get(f.path)) is not None
            and state.complete
            and state.size is not None
            and state.size != f.size
        ]
        record_skips(self._r, self._keys, pipe.id, skips, now, self._ttl * 1000)

    def refresh(
        self, pipe: Pipe, files: Sequence[FileRef], *, source: Origin, retry_failed: bool = True
    ) -> list[Refreshed]:
        """ALTER PIPE ... REFRESH's step: queue the files this pipe has no state for, and queue again
        the ones whose load failed (their state becomes a fresh pending one, as a new file's; not
        with ``retry_failed`` False, a backfill's), each in one atomic step per chunk; leave every
        other file alone. PipeRetired when the pipe
        incarnation was dropped or replaced before a chunk ran (the files of earlier chunks were
        in its queue by then, so they went where the rest of it went: to a CREATE OR REPLACE's
        successor, or nowhere after DROP)."""
        out: list[Refreshed] = []
        for start in range(0, len(files), REFRESH_CHUNK):
            chunk = files[start : start + REFRESH_CHUNK]
            now = now_ms()
            keys = [self._keys.queue(pipe.id), self._keys.history(pipe.id), self._keys.retired(pipe.id)]
            args: list[str | int] = [self._ttl, now, self._ttl * 1000, source, int(retry_failed)]
            state = _StateTemplate(pipe, now, source)
            for f in chunk:
                keys.append(self._keys.file(pipe.id, f.path))
                args += [f.path, QueueEntry.stream_size(f.size), state.json(f)]
            one_slot(keys, "refresh script")
            flags = cast(list[int], self._refresh(keys=keys, args=args))
            if flags == [-1]:
                raise PipeRetired(f"pipe {pipe.name} was dropped or replaced", pipe=pipe.name)
            done = [Refreshed(int(x)) for x in flags]
            # A backfill lists the whole stage every interval: the files left alone, nearly all of
            # them, only at DEBUG.
            log_lines(
                log,
                (
                    (
                        logging.DEBUG if what is Refreshed.SKIPPED else logging.INFO,
                        _REFRESHED[what],
                        {"pipe": pipe.name, "file": f.path, "step": _STEP[what], "source": source},
                    )
                    for f, what in zip(chunk, done, strict=True)
                ),
            )
            if self._flow is not None:
                sent = [what is not Refreshed.SKIPPED for what in done]
                # A backfill lists the whole stage every interval: only what it found missing was
                # received, or the counter would grow by the stage's size each time.
                self._flow.record(pipe.name, source, [True] * sum(sent) if source == "backfill" else sent)
            out += done
        return out


def retire_pipe(client: RedisClient, keys: Keys, pipe_id: str) -> list[FileRef]:
    """Retire a pipe incarnation (DROP, CREATE OR REPLACE) and return the files still queued for it.

    One script sets the retired flag the registrar checks and reads the queue, so every queued file
    is either committed by a batch already in flight or returned here, never both. A second call
    returns nothing.
    """
    retire = client.register_script(_RETIRE)
    names = [keys.retired(pipe_id), keys.queue(pipe_id)]
    one_slot(names, "retire script")
    raw = cast(list[list[Any]], retire(keys=names, args=[now_ms()]))
    entries = [QueueEntry.from_flat(e) for e in raw]
    return [FileRef(e.path, e.size, e.put_ms) for e in entries]
