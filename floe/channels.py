"""Snowpipe Streaming channels in Redis: open (which fences the old writer), durable append, drop and
status. The API runs these steps; the registrar settles appends (pipeline/registrar.py).

A channel is (pipe incarnation, name), one hash under the pipe's hash tag, so every step here and
the registrar's commit are one Lua script over one slot:

- ``incarnation`` is new each time the channel is created (after a DROP, appends of the old one
  are recognised and dropped); ``cseq``, the client sequencer, grows on every open; ``rseq``, the
  row sequencer, grows on every accepted append. A continuation token carries all three.
- An append stores its rows under their own key and adds a reference to the pipe's rows stream,
  in one script with the sequencer checks: acknowledged means durable (AOF, appendfsync always).
- Fencing is decided at commit: the registrar adds an append's rows to the table only when the
  channel still has the append's incarnation and client sequencer. A reopen therefore returns at
  once, and rows the old writer had buffered are never committed after it.
- What may wait is bounded by the ledger of floe.channel_quotas, per channel, pipe, table and user:
  an append and a new channel are counted there before they are written, and stay counted until
  their keys are gone, whatever opens and drops happen meanwhile. The channel hash's ``pending``
  and ``pending_bytes`` are its current writer's appends (``fail_on_uncommitted_rows``), which a
  reopen resets; they bound nothing.
- An open with ``fail_on_uncommitted_rows`` (the official SDK sends it on every open) is refused
  while the current writer's appends wait, and seals that writer: it appends nothing new, and what
  it appended commits. The SDK retries the open for about 120 s; it gets the channel once those
  rows committed, with their offset token, so a restarted producer resumes right after them, and a
  writer of its last life still running cannot hold the reopen off (decision 120).
- Every pipe has an elastic channel, ``ELASTIC``: many producers append to it without opening it,
  with no tokens, at least once. Its appends settle as any channel's (one writer that is never
  fenced); a retry of one (the same user and ``requestId``) is answered, not stored again, while it
  waits and until ELASTIC_REQUEST_TTL_MS after it was stored.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from floe.channel_quotas import NO_LIMITS, FullError, Ledger, Limits, Room, Writer, holders
from floe.keys import Keys, RedisClient, one_slot
from floe.records import RowAppend
from floe.streaming.protocol import ELASTIC, ChannelStatus, Code, ContinuationToken

INACTIVE_CHANNEL_MS = 30 * 24 * 3600 * 1000
"""Channels without an open or append for this long expire with their offset tokens (Snowflake's 30
days)."""
ELASTIC_INCARNATION = "elastic"
"""The elastic channel's one incarnation and writer (client sequencer 1): it is never dropped nor
reopened, so nothing of it is ever fenced."""
ELASTIC_REQUEST_TTL_MS = 15 * 60 * 1000
"""How long after an elastic append was stored a retry of it (same user and requestId) is still
answered rather than stored again; while it waits to commit it always is. The SDK 1.9.1 retries an
append under its requestId every 60 to 90 s once its backoff is long, for more than 15 minutes (so
far as measured), so a lost answer is retried within this while the API is down for up to about 13
minutes; a later retry is stored again (at least once). Each append keeps a marker this long: at a
user's append rate (50/s per API process) 45,000 markers, about 8 MB."""

# KEYS: 1 channel hash, 2 channels zset. ARGV: 1 name, 2 now ms, 3 new incarnation, 4 offset token
# or '', 5 '1' when an offset token is given, 6 '1' to fail on uncommitted rows.
# Returns {incarnation, cseq, rseq} or {'ERR', code}.
_OPEN = """
local h = KEYS[1]
if redis.call('EXISTS', h) == 0 then
  redis.call('HSET', h, 'incarnation', ARGV[3], 'cseq', 0, 'rseq', 0, 'pending', 0, 'pending_bytes', 0,
    'created_ms', ARGV[2], 'rows_inserted', 0, 'rows_parsed', 0, 'rows_error_count', 0,
    'latency_ms', 0)
elseif ARGV[6] == '1' and tonumber(redis.call('HGET', h, 'pending')) > 0 then
  -- Sealed: the current writer appends nothing new, so its appends commit and a retried open gets
  -- the channel, however busy that writer still is.
  redis.call('HSET', h, 'sealed', redis.call('HGET', h, 'cseq'))
  return {'ERR', 'UNCOMMITTED'}
end
if ARGV[5] == '1' then redis.call('HSET', h, 'token', ARGV[4]) end
local cseq = redis.call('HINCRBY', h, 'cseq', 1)
-- The old writer's appends in flight are dropped at commit: nothing of theirs is pending any more.
redis.call('HSET', h, 'pending', 0, 'pending_bytes', 0, 'last_request_id', '', 'active_ms', ARGV[2])
redis.call('HDEL', h, 'sealed')
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return {redis.call('HGET', h, 'incarnation'), cseq, redis.call('HGET', h, 'rseq')}
"""

# KEYS: 1 channel hash, 2 rows stream, 3 row data key, 4 channels zset.
# ARGV: 1 name, 2 incarnation, 3 cseq, 4 rseq (the token's), 5 request id, 6 rows (NDJSON),
# 7 row count, 8 and 9 start and end offset tokens as JSON (null when not given), 10 now ms.
# Returns {'OK', next rseq, 1} stored, {'OK', next rseq, 0} a retry of the last append (answered
# with its own result, nothing stored), or {'ERR', code}. The bounds on what may wait are the
# ledger's (floe.channel_quotas), which counted the append before this runs.
_APPEND = f"""
local h = KEYS[1]
local st = redis.call('HMGET', h, 'incarnation', 'cseq', 'rseq', 'last_request_id', 'sealed')
if not st[1] then return {{'ERR', 'NO_CHANNEL'}} end
if st[1] ~= ARGV[2] then return {{'ERR', 'REOPEN'}} end
if st[2] ~= ARGV[3] then return {{'ERR', 'STALE'}} end
local rseq = tonumber(st[3])
local given = tonumber(ARGV[4])
if ARGV[5] ~= '' and st[4] == ARGV[5] and given == rseq - 1 then return {{'OK', rseq, 0}} end
if st[5] == ARGV[3] then return {{'ERR', 'SEALED'}} end
if given ~= rseq then return {{'ERR', 'ROW_SEQ'}} end
local size = string.len(ARGV[6])
redis.call('SET', KEYS[3], ARGV[6])
redis.call('XADD', KEYS[2], '*', {RowAppend.lua_stream_fields()})
redis.call('HSET', h, 'rseq', rseq + 1, 'last_request_id', ARGV[5], 'active_ms', ARGV[10])
redis.call('HINCRBY', h, 'pending', 1)
redis.call('HINCRBY', h, 'pending_bytes', size)
redis.call('ZADD', KEYS[4], ARGV[10], ARGV[1])
return {{'OK', rseq + 1, 1}}
"""

# KEYS: 1 channel hash, 2 channels zset. ARGV: 1 name, 2 '1' to fail on uncommitted rows.
# Returns {'OK', its committed offset token or ''} dropped, 0 no such channel, or {'ERR', code}. The
# appends still queued are dropped at commit (their incarnation is gone) and their row data with them.
_DROP = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[2] == '1' and tonumber(redis.call('HGET', KEYS[1], 'pending')) > 0 then
  return {'ERR', 'UNCOMMITTED'}
end
local token = redis.call('HGET', KEYS[1], 'token') or ''
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return {'OK', token}
"""

# KEYS: 1 the elastic channel's hash, 2 rows stream, 3 row data key, 4 the request's marker.
# ARGV: as _APPEND's, so that the stream entry is the same (ARGV[4] is the request's id, in place of a
# row sequencer; ARGV[5] is unused), and 11 the marker's lifetime ms.
# Returns 1 stored, 0 a retry of an append stored before (nothing stored).
_ELASTIC_APPEND = f"""
local h = KEYS[1]
if redis.call('EXISTS', KEYS[4]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('HGET', h, 'incarnation') ~= ARGV[2] then
  -- First used: an elastic channel's state, as a named channel's, that its settles update.
  redis.call('HSET', h, 'incarnation', ARGV[2], 'cseq', ARGV[3], 'rseq', 0, 'pending', 0,
    'pending_bytes', 0, 'created_ms', ARGV[10], 'rows_inserted', 0, 'rows_parsed', 0,
    'rows_error_count', 0, 'latency_ms', 0)
end
local size = string.len(ARGV[6])
redis.call('SET', KEYS[3], ARGV[6])
redis.call('XADD', KEYS[2], '*', {RowAppend.lua_stream_fields()})
redis.call('HINCRBY', h, 'pending', 1)
redis.call('HINCRBY', h, 'pending_bytes', size)
redis.call('HSET', h, 'active_ms', ARGV[10])
redis.call('SET', KEYS[4], ARGV[10], 'PX', ARGV[11])
return 1
"""

_ERRORS: dict[str, tuple[int, str, str]] = {
    "NO_CHANNEL": (404, Code.CHANNEL_DOES_NOT_EXIST, "Channel '{channel}' does not exist or not authorized."),
    "REOPEN": (
        409,
        Code.CHANNEL_MUST_BE_REOPENED,
        "Channel '{channel}' was dropped and created again since this token was issued. Please reopen "
        "the channel.",
    ),
    "STALE": (
        409,
        Code.STALE_CONTINUATION_TOKEN_SEQUENCER,
        "Channel sequencer in the continuation token is stale. Please reopen the channel",
    ),
    "ROW_SEQ": (
        409,
        Code.INVALID_ROW_SEQUENCER,
        "The continuation token of channel '{channel}' is not its latest: send each append with the "
        "next_continuation_token of the one before. Please reopen the channel.",
    ),
    "UNCOMMITTED": (
        409,
        Code.CHANNEL_HAS_UNCOMMITTED_DATA,
        "Channel '{channel}' has appended rows that are not committed yet (fail_on_uncommitted_rows = true). "
        "Its writer appends no more; retry the open once the pipeline commits them (the SDK does), or "
        "open with fail_on_uncommitted_rows = false to drop them.",
    ),
    "SEALED": (
        409,
        Code.STALE_CONTINUATION_TOKEN_SEQUENCER,
        "Channel '{channel}' is being reopened by another client (fail_on_uncommitted_rows): this writer's "
        "appends are no longer taken, and those it made commit. Please reopen the channel.",
    ),
}


class ChannelError(Exception):
    """A channel step refused: its HTTP status, Snowflake-style code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


def _refusal(reason: bytes | str, channel: str) -> ChannelError:
    key = reason.decode() if isinstance(reason, bytes) else reason
    status, code, text = _ERRORS[key]
    return ChannelError(status, code, text.format(channel=channel))


def _full(exc: FullError) -> ChannelError:
    return ChannelError(exc.full.status, exc.full.code, exc.full.message)


@dataclass(frozen=True)
class Opened:
    """What opening a channel returns: its token and status."""

    token: ContinuationToken
    status: ChannelStatus


NO_WRITER = Writer()
"""An append or a channel counted against its channel and pipe only."""


@dataclass(frozen=True)
class Dropped:
    """What dropping a channel returns: its committed offset token then."""

    token: str | None


@dataclass(frozen=True)
class PipeRef:
    """The pipe a channel belongs to, as the API names it in answers."""

    pipe_id: str
    database: str
    schema: str
    pipe: str
    created_ms: int = 0
    """When the pipe was made: its elastic channel's ``created_on_ms`` before its first append."""


class ChannelStore:
    """The channel steps of the API, over one Redis client.

    ``max_pending_bytes`` bounds what one channel may hold; ``limits`` adds the other bounds
    (pipes, tables, users: floe.channel_quotas), which count only appends and channels given a
    ``Writer``.
    """

    def __init__(
        self, client: RedisClient, keys: Keys, max_pending_bytes: int, limits: Limits | None = None
    ) -> None:
        self._r = client
        self._keys = keys
        base = limits or NO_LIMITS
        self.ledger = Ledger(
            client, keys, Limits({**base.bytes, "channel": max_pending_bytes}, base.rows, base.channels)
        )
        self._open = client.register_script(_OPEN)
        self._append = client.register_script(_APPEND)
        self._drop = client.register_script(_DROP)
        self._elastic_append = client.register_script(_ELASTIC_APPEND)

    def open(
        self,
        ref: PipeRef,
        channel: str,
        now_ms: int,
        offset_token: str | None,
        fail_on_uncommitted: bool,
        writer: Writer = NO_WRITER,
    ) -> Opened:
        """Create the channel or reopen it: a new client sequencer, which fences the old writer.
        A new channel counts against its pipe's, table's and writer's bounds on channels."""
        k = self._keys
        keys = [k.channel(ref.pipe_id, channel), k.channels(ref.pipe_id)]
        one_slot(keys, "channel open script")
        try:
            self.ledger.reserve_channel(
                keys[0],
                holders(ref.pipe_id, _pipe_name(ref), writer, None),
                bool(self._r.exists(keys[0])),
                now_ms,
            )
        except FullError as exc:
            raise _full(exc) from None
        out = cast(
            list[Any],
            self._open(
                keys=keys,
                args=[
                    channel,
                    now_ms,
                    secrets.token_hex(8),
                    offset_token or "",
                    "1" if offset_token is not None else "0",
                    "1" if fail_on_uncommitted else "0",
                ],
            ),
        )
        if out[0] == b"ERR":
            raise _refusal(out[1], channel)
        token = ContinuationToken(out[0].decode(), int(out[1]), int(out[2]))
        status = self.statuses(ref, [channel])[channel]
        return Opened(token, status)

    def room(self, ref: PipeRef, channel: str, token: ContinuationToken, writer: Writer, now_ms: int) -> Room:
        """What the channel's append with ``token`` may bring before a bound refuses it; a
        ChannelError when a bound has no room even for the smallest append (checked before a body
        is decompressed)."""
        try:
            return self.ledger.room(
                self._data_key(ref, channel, token),
                holders(ref.pipe_id, _pipe_name(ref), writer, channel),
                now_ms,
            )
        except FullError as exc:
            raise _full(exc) from None

    def _data_key(self, ref: PipeRef, channel: str, token: ContinuationToken) -> str:
        return self._keys.row_data(
            ref.pipe_id, channel, token.incarnation, token.client_sequencer, token.row_sequencer
        )

    def append(
        self,
        ref: PipeRef,
        channel: str,
        token: ContinuationToken,
        request_id: str,
        rows: bytes,
        count: int,
        start: str | None,
        end: str | None,
        now_ms: int,
        writer: Writer = NO_WRITER,
    ) -> ContinuationToken:
        """Store one append durably and queue it for the pipeline; the next continuation token.

        An empty offset token is none: the official SDK sends ``""`` for a token not given, and the
        committed token must stay as it was. The append is counted against its channel's, pipe's,
        table's and writer's bounds first (a ChannelError when one refuses it), and uncounted again
        if it is not stored after all."""
        start, end = start or None, end or None
        k = self._keys
        data_key = self._data_key(ref, channel, token)
        keys = [k.channel(ref.pipe_id, channel), k.rows(ref.pipe_id), data_key, k.channels(ref.pipe_id)]
        one_slot(keys, "channel append script")
        where = holders(ref.pipe_id, _pipe_name(ref), writer, channel)
        try:
            counted = self.ledger.reserve_append(data_key, len(rows), count, where, now_ms)
        except FullError as exc:
            raise _full(exc) from None
        stored = False
        try:
            out = cast(
                list[Any],
                self._append(
                    keys=keys,
                    args=[
                        channel,
                        token.incarnation,
                        token.client_sequencer,
                        token.row_sequencer,
                        request_id,
                        rows,
                        count,
                        json.dumps(start),
                        json.dumps(end),
                        now_ms,
                    ],
                ),
            )
            stored = out[0] == b"OK" and out[2] == 1
        finally:
            # Counted for this call but not stored by it (refused, a retry's answer, or Redis failed
            # midway): nothing of it waits, so it must not count. An entry left by a crash right
            # here is found gone by the ledger's reconciling.
            if counted and not stored:
                self.ledger.release([data_key])
        if out[0] == b"ERR":
            raise _refusal(out[1], channel)
        return ContinuationToken(token.incarnation, token.client_sequencer, int(out[1]))

    def drop(self, ref: PipeRef, channel: str, fail_on_uncommitted: bool) -> Dropped | None:
        """Forget the channel and its offsets: its committed offset token then, or None when there
        was no channel. Its appends still waiting keep counting until the pipeline settles them
        (dropped then), as they still take Redis."""
        k = self._keys
        keys = [k.channel(ref.pipe_id, channel), k.channels(ref.pipe_id)]
        one_slot(keys, "channel drop script")
        out = self._drop(
            keys=keys,
            args=[channel, "1" if fail_on_uncommitted else "0"],
        )
        if not out:
            return None
        if out[0] == b"ERR":
            raise _refusal(out[1], channel)
        self.ledger.release([keys[0]])
        return Dropped(out[1].decode() or None)

    # ------------------------------------------------------------------------- the elastic channel

    def elastic_room(self, ref: PipeRef, user: str, request_id: str, writer: Writer, now_ms: int) -> Room:
        """What the elastic append of ``request_id`` may bring (as ``room``)."""
        try:
            return self.ledger.room(
                self._elastic_data_key(ref, user, request_id),
                holders(ref.pipe_id, _pipe_name(ref), writer, ELASTIC),
                now_ms,
            )
        except FullError as exc:
            raise _full(exc) from None

    def append_elastic(
        self, ref: PipeRef, user: str, request_id: str, rows: bytes, count: int, now_ms: int, writer: Writer
    ) -> bool:
        """Store one append to the pipe's elastic channel durably and queue it: True if stored, False
        if it is a retry of one stored before (the same ``user`` and ``request_id``, still waiting or
        stored within ELASTIC_REQUEST_TTL_MS). Counted against the bounds as any append, the elastic
        channel being one channel."""
        k = self._keys
        data_key = self._elastic_data_key(ref, user, request_id)
        keys = [
            k.channel(ref.pipe_id, ELASTIC),
            k.rows(ref.pipe_id),
            data_key,
            f"{k.channel(ref.pipe_id, ELASTIC)}:request:{_request_digest(user, request_id)}",
        ]
        one_slot(keys, "elastic append script")
        where = holders(ref.pipe_id, _pipe_name(ref), writer, ELASTIC)
        try:
            counted = self.ledger.reserve_append(data_key, len(rows), count, where, now_ms)
        except FullError as exc:
            raise _full(exc) from None
        stored = False
        try:
            # The append script's arguments: no offset tokens (JSON null), the request's number for a
            # row sequencer.
            number = _request_number(user, request_id)
            args = [ELASTIC, ELASTIC_INCARNATION, 1, number, request_id, rows, count, "null", "null"]
            stored = bool(self._elastic_append(keys=keys, args=[*args, now_ms, ELASTIC_REQUEST_TTL_MS]))
        finally:
            if counted and not stored:
                self.ledger.release([data_key])
        return stored

    def _elastic_data_key(self, ref: PipeRef, user: str, request_id: str) -> str:
        # Named by the request: a retry finds the rows it stored, and two producers never meet.
        number = _request_number(user, request_id)
        return self._keys.row_data(ref.pipe_id, ELASTIC, ELASTIC_INCARNATION, 1, number)

    def names(self, pipe_id: str, now_ms: int) -> list[str]:
        """The pipe's channels, after expiring those inactive for 30 days."""
        self.expire(pipe_id, now_ms)
        return sorted(n.decode() for n in self._r.zrange(self._keys.channels(pipe_id), 0, -1))

    def expire(self, pipe_id: str, now_ms: int) -> int:
        """Drop the channels with no open or append for INACTIVE_CHANNEL_MS; how many."""
        k = self._keys
        stale = self._r.zrangebyscore(k.channels(pipe_id), "-inf", now_ms - INACTIVE_CHANNEL_MS)
        for name in stale:
            self.drop(PipeRef(pipe_id, "", "", ""), name.decode(), fail_on_uncommitted=False)
        return len(stale)

    def states(self, pipe_id: str, channels: Sequence[str]) -> dict[str, dict[str, str]]:
        """The raw state hash of each named channel that exists, in one round trip."""
        with self._r.pipeline(transaction=False) as p:
            for name in channels:
                p.hgetall(self._keys.channel(pipe_id, name))
            found = cast(list[dict[bytes, bytes]], p.execute())
        return {
            name: {a.decode(): b.decode() for a, b in state.items()}
            for name, state in zip(channels, found, strict=True)
            if state
        }

    def statuses(self, ref: PipeRef, channels: Sequence[str]) -> dict[str, ChannelStatus]:
        """The status of each named channel that exists (the others are left out), and of the
        elastic channel when asked, which every pipe has."""
        found = self.states(ref.pipe_id, channels)
        if ELASTIC in channels and ELASTIC not in found:
            found[ELASTIC] = {"created_ms": str(ref.created_ms)}
        return {name: _status(ref, name, found[name]) for name in channels if name in found}


def _request_digest(user: str, request_id: str) -> str:
    """An elastic append's request as its keys name it, 128 bits: the user's, so no one else's
    request can stand for it, and too many for two to meet."""
    return hashlib.sha256(f"{user}\0{request_id}".encode()).hexdigest()[:32]


def _request_number(user: str, request_id: str) -> int:
    """An elastic append's place in its stream entry and data key, where a named channel's row
    sequencer goes: its request's digest (elastic rows load in no particular order)."""
    return int(_request_digest(user, request_id), 16)


def _pipe_name(ref: PipeRef) -> str:
    return f"{ref.database}.{ref.schema}.{ref.pipe}" if ref.database else ref.pipe_id


def _status(ref: PipeRef, name: str, h: dict[str, str]) -> ChannelStatus:
    def number(field: str) -> int:
        return int(h.get(field) or 0)

    return ChannelStatus(
        database_name=ref.database,
        schema_name=ref.schema,
        pipe_name=ref.pipe,
        channel_name=name,
        # "" is no token: a channel whose append carried the SDK's "" before Floe read it so.
        last_committed_offset_token=h.get("token") or None,
        created_on_ms=number("created_ms"),
        rows_inserted=number("rows_inserted"),
        rows_parsed=number("rows_parsed"),
        rows_error_count=number("rows_error_count"),
        last_error_offset_upper_bound=h.get("last_error_offset_upper_bound") or None,
        last_error_message=h.get("last_error_message"),
        last_error_timestamp_ms=int(h["last_error_timestamp_ms"])
        if h.get("last_error_timestamp_ms")
        else None,
        snowflake_avg_processing_latency_ms=number("latency_ms"),
    )


def channel_state(client: RedisClient, keys: Keys, pipe_id: str, name: str) -> dict[str, str]:
    """A channel's raw state hash (tests and SHOW CHANNELS)."""
    return {a.decode(): b.decode() for a, b in client.hgetall(keys.channel(pipe_id, name)).items()}
