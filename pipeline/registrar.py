"""The registrar: the only writer of table manifests and terminal load history.

A pipe's share of a micro-batch commits in one Lua script keyed by (pipe, query id, batch id):
the blobs join the manifest, the files' states turn terminal, their errors are stored (or a
stale detail deleted), their queue entries are deleted, the pipe's status (last ingested file,
last pipe error and fault) is updated and a batch marker is set, all at once. Replaying the
batch finds the marker and changes nothing, so a crash anywhere around the commit neither loses
nor doubles a file, nor its errors. A pipe incarnation that DROP or
CREATE OR REPLACE retired commits nothing: its queued files went to its successor (if any) when it
was retired, and the same script decides which of the two happened first.
"""

from __future__ import annotations

import enum
import json
import logging
from dataclasses import dataclass, field
from typing import Any, cast

from floe.channel_quotas import NO_LIMITS, Ledger
from floe.history import FileState, errors_json
from floe.keys import Keys, RedisClient, one_slot
from floe.runtime import log_lines

log = logging.getLogger("floe.pipeline.registrar")

# KEYS: 1 marker, 2 blobs hash, 3 status hash, 4 events stream, 5 queue stream, 6 retired flag, then
# one file key per file, then one errors key per file (in the same order).
# ARGV: 1 ttl s, 2 now ms, 3 n blobs, then blob name/json pairs, then per file: path, state json,
# stream id, errors json ('' for none), kind (_LOADED, _FAILED, _PIPE_ERROR or _FAULT), and the
# message of a pipe error or fault ('' otherwise).
# Returns 1 committed, 0 committed before (a replay), -1 the pipe incarnation is retired.
_LOADED, _FAILED, _PIPE_ERROR, _FAULT = "L", "F", "P", "I"
_COMMIT = f"""
if redis.call('EXISTS', KEYS[6]) == 1 then return -1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local ttl = tonumber(ARGV[1])
local now = ARGV[2]
local nblobs = tonumber(ARGV[3])
local i = 4
for _ = 1, nblobs do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
local nfiles = (#KEYS - 6) / 2
local last_path, pipe_error, fault = nil, nil, nil
for f = 1, nfiles do
  local path, state, sid, errors, kind = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  redis.call('SET', KEYS[6 + f], state, 'EX', ttl)
  if errors == '' then
    redis.call('DEL', KEYS[6 + nfiles + f])
  else
    redis.call('SET', KEYS[6 + nfiles + f], errors, 'EX', ttl)
  end
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', 10000, '*', 'path', path, 'time', now)
  if sid ~= '' then redis.call('XDEL', KEYS[5], sid) end
  if kind == '{_LOADED}' then last_path = path end
  if kind == '{_PIPE_ERROR}' then pipe_error = ARGV[i + 5] end
  if kind == '{_FAULT}' then fault = ARGV[i + 5] end
  i = i + 6
end
if last_path then
  redis.call('HSET', KEYS[3], 'lastIngestedTimestamp', now, 'lastIngestedFilePath', last_path)
end
if pipe_error then
  redis.call('HSET', KEYS[3], 'error', pipe_error, 'lastPipeErrorTimestamp', now)
elseif last_path then
  redis.call('HDEL', KEYS[3], 'error')
end
if fault then redis.call('HSET', KEYS[3], 'fault', fault, 'lastPipeFaultTimestamp', now) end
redis.call('SET', KEYS[1], now, 'EX', ttl)
return 1
"""


def _kind(state: FileState) -> str:
    """How a committed file counts in the pipe's status: loaded (its last ingested file), failed
    for its own sake, or failed for its pipe's (``error``) or for Floe's (``fault``)."""
    if state.status in ("LOADED", "PARTIALLY_LOADED"):
        return _LOADED
    return {"pipe": _PIPE_ERROR, "internal": _FAULT}.get(state.trouble or "", _FAILED)


@dataclass
class PipeCommit:
    """What one pipe's share of a micro-batch commits."""

    pipe_id: str
    blobs: list[dict[str, Any]] = field(default_factory=list)
    files: list[tuple[FileState, str]] = field(default_factory=list)
    """(new state, queue stream id) per file."""
    pipe_name: str = ""
    """For the logs (the pipe id when empty)."""


class Outcome(enum.Enum):
    """What a commit did."""

    COMMITTED = 1
    REPLAYED = 0
    """The batch had been committed by an earlier attempt; nothing changed."""
    RETIRED = -1
    """The pipe incarnation was dropped or replaced; nothing changed, and the batch's blobs are
    unreferenced."""


class Registrar:
    """Commits micro-batches to Redis."""

    def __init__(self, client: RedisClient, keys: Keys, retention_seconds: int) -> None:
        self._r = client
        self._keys = keys
        self._ttl = retention_seconds
        self._script = client.register_script(_COMMIT)

    def committed(self, pipe_id: str, query_id: str, batch_id: int) -> bool:
        """Whether this pipe's share of the batch is already committed."""
        return bool(self._r.exists(self._keys.batch_marker(pipe_id, query_id, batch_id)))

    def commit(self, c: PipeCommit, query_id: str, batch_id: int, now_ms: int) -> Outcome:
        """Commit atomically, unless an earlier attempt did or the pipe incarnation is retired."""
        k = self._keys
        keys = [
            k.batch_marker(c.pipe_id, query_id, batch_id),
            k.blobs(c.pipe_id),
            k.status(c.pipe_id),
            k.events(c.pipe_id),
            k.queue(c.pipe_id),
            k.retired(c.pipe_id),
        ]
        args: list[str | int] = [self._ttl, now_ms, len(c.blobs)]
        for blob in c.blobs:
            args += [blob["name"], json.dumps(blob)]
        for state, sid in c.files:
            keys.append(k.file(c.pipe_id, state.path))
            kind = _kind(state)
            message = (state.first_error or "") if kind in (_PIPE_ERROR, _FAULT) else ""
            args += [state.path, state.model_dump_json(), sid, errors_json(state.errors), kind, message]
        keys += [k.file_errors(c.pipe_id, state.path) for state, _ in c.files]
        one_slot(keys, "commit script")
        outcome = Outcome(int(cast(int, self._script(keys=keys, args=args))))
        if outcome is Outcome.COMMITTED:
            _log_commit(c, batch_id)
        return outcome


def _log_commit(c: PipeCommit, batch_id: int) -> None:
    """The journey's last step, one line per file: its load is in the table and in the load history
    (a failure at WARNING, with its first error)."""
    pipe = c.pipe_name or c.pipe_id
    log_lines(log, (_commit_line(state, pipe, batch_id) for state, _ in c.files))


def _commit_line(state: FileState, pipe: str, batch_id: int) -> tuple[int, str, dict[str, object]]:
    extra: dict[str, object] = {
        "pipe": pipe,
        "file": state.path,
        "batch": batch_id,
        "step": "committed",
        "status": state.status,
        "rows": state.rows_loaded,
    }
    if state.status == "LOAD_FAILED":
        return logging.WARNING, f"load failed: {state.first_error}", extra
    return logging.INFO, f"committed: {state.status}, {state.rows_loaded} rows", extra


# ------------------------------------------------------------------------------------------------
# Streaming channels

# KEYS: 1 marker, 2 blobs hash, 3 rows stream, 4 retired flag, then one hash per channel, then the
# row data keys to delete.
# ARGV: 1 ttl s, 2 now ms, 3 n channels, then per channel: incarnation, client sequencer, appends,
# bytes, rows inserted, rows parsed, errors, '1' if an offset token, the token, the last error or
# '', its offset upper bound, latency ms, n blobs, the blobs' name/json pairs, n stream ids, the ids.
# Returns {1, fenced blob names...} committed, {0} committed before, {-1} the pipe is retired.
_SETTLE = """
if redis.call('EXISTS', KEYS[4]) == 1 then return {-1} end
if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end
local now = ARGV[2]
local n = tonumber(ARGV[3])
local i = 4
local fenced = {1}
for c = 1, n do
  local h = KEYS[4 + c]
  local inc, cseq = ARGV[i], ARGV[i + 1]
  local appends, bytes = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local inserted, parsed, errors = ARGV[i + 4], ARGV[i + 5], tonumber(ARGV[i + 6])
  local has_token, token, err = ARGV[i + 7], ARGV[i + 8], ARGV[i + 9]
  local bound, latency = ARGV[i + 10], ARGV[i + 11]
  local nblobs = tonumber(ARGV[i + 12])
  i = i + 13
  local st = redis.call('HMGET', h, 'incarnation', 'cseq')
  local live = st[1] == inc and st[2] == cseq
  for _ = 1, nblobs do
    if live then redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) else table.insert(fenced, ARGV[i]) end
    i = i + 2
  end
  if live then
    redis.call('HINCRBY', h, 'rows_inserted', inserted)
    redis.call('HINCRBY', h, 'rows_parsed', parsed)
    redis.call('HINCRBY', h, 'pending', -appends)
    redis.call('HINCRBY', h, 'pending_bytes', -bytes)
    redis.call('HSET', h, 'latency_ms', latency)
    if has_token == '1' then redis.call('HSET', h, 'token', token) end
    if errors > 0 then
      redis.call('HINCRBY', h, 'rows_error_count', errors)
      redis.call('HSET', h, 'last_error_message', err, 'last_error_offset_upper_bound', bound,
        'last_error_timestamp_ms', now)
    end
  end
  local nsids = tonumber(ARGV[i])
  i = i + 1
  for _ = 1, nsids do
    redis.call('XDEL', KEYS[3], ARGV[i])
    i = i + 1
  end
end
for k = 5 + n, #KEYS do redis.call('DEL', KEYS[k]) end
redis.call('SET', KEYS[1], now, 'EX', tonumber(ARGV[1]))
return fenced
"""


@dataclass
class ChannelSettle:
    """What one channel's appends in a micro-batch come to."""

    channel: str
    incarnation: str
    client_sequencer: int
    appends: int = 0
    bytes: int = 0
    rows_inserted: int = 0
    rows_parsed: int = 0
    errors: int = 0
    token: str | None = None
    """The end offset token of the last append that carried one; None (or "") if none did."""
    last_error: str = ""
    last_error_bound: str | None = None
    latency_ms: int = 0
    blobs: list[dict[str, Any]] = field(default_factory=list)
    stream_ids: list[str] = field(default_factory=list)
    data_keys: list[str] = field(default_factory=list)


@dataclass
class Settled:
    """What a streaming commit did: its outcome, and the blobs of fenced channels (unreferenced)."""

    outcome: Outcome
    fenced_blobs: list[str] = field(default_factory=list)


class ChannelRegistrar:
    """Commits a streaming pipe's share of a micro-batch: each channel's blobs, offset token and
    counters at once, unless a reopen or a DROP fenced the writer since (then none of its rows)."""

    def __init__(self, client: RedisClient, keys: Keys, retention_seconds: int) -> None:
        self._keys = keys
        self._ttl = retention_seconds
        self._script = client.register_script(_SETTLE)
        self._ledger = Ledger(client, keys, NO_LIMITS)

    def settle(
        self, pipe_id: str, channels: list[ChannelSettle], query_id: str, batch_id: int, now_ms: int
    ) -> Settled:
        """Commit atomically, unless an earlier attempt did or the pipe incarnation is retired."""
        k = self._keys
        keys = [
            k.batch_marker(pipe_id, query_id, batch_id),
            k.blobs(pipe_id),
            k.rows(pipe_id),
            k.retired(pipe_id),
        ]
        keys += [k.channel(pipe_id, c.channel) for c in channels]
        keys += [key for c in channels for key in c.data_keys]
        args: list[str | int] = [self._ttl, now_ms, len(channels)]
        for c in channels:
            args += [
                c.incarnation,
                c.client_sequencer,
                c.appends,
                c.bytes,
                c.rows_inserted,
                c.rows_parsed,
                c.errors,
                "1" if c.token else "0",  # "" is no token (the SDK's endOffsetToken= for none)
                c.token or "",
                c.last_error,
                c.last_error_bound or "",
                c.latency_ms,
                len(c.blobs),
            ]
            for blob in c.blobs:
                args += [blob["name"], json.dumps(blob)]
            args += [len(c.stream_ids), *c.stream_ids]
        one_slot(keys, "settle script")
        out = cast(list[Any], self._script(keys=keys, args=args))
        outcome = Outcome(int(out[0]))
        if outcome is not Outcome.RETIRED:
            # The commit (this one or the earlier attempt) deleted these rows: they no longer count
            # against their channel's, pipe's, table's and user's bounds. A crash before this line
            # is repaired by the ledger's reconciling, which finds the keys gone.
            self._ledger.release([key for c in channels for key in c.data_keys])
        return Settled(outcome, [b.decode() if isinstance(b, bytes) else str(b) for b in out[1:]])
