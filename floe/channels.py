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
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from floe.channel_quotas import NO_LIMITS, FullError, Ledger, Limits, Room, Writer, holders
from floe.keys import Keys, RedisClient, one_slot
from floe.records import RowAppend
from floe.streaming.protocol import ChannelStatus, Code, ContinuationToken

INACTIVE_CHANNEL_MS = 30 * 24 * 3600 * 1000
"""Channels without an open or append for this long expire with their offset tokens (Snowflake's 30
days)."""

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
  return {'ERR', 'UNCOMMITTED'}
end
if ARGV[5] == '1' then redis.call('HSET', h, 'token', ARGV[4]) end
local cseq = redis.call('HINCRBY', h, 'cseq', 1)
-- The old writer's appends in flight are dropped at commit: nothing of theirs is pending any more.
redis.call('HSET', h, 'pending', 0, 'pending_bytes', 0, 'last_request_id', '', 'active_ms', ARGV[2])
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
local st = redis.call('HMGET', h, 'incarnation', 'cseq', 'rseq', 'last_request_id')
if not st[1] then return {{'ERR', 'NO_CHANNEL'}} end
if st[1] ~= ARGV[2] then return {{'ERR', 'REOPEN'}} end
if st[2] ~= ARGV[3] then return {{'ERR', 'STALE'}} end
local rseq = tonumber(st[3])
local given = tonumber(ARGV[4])
if ARGV[5] ~= '' and st[4] == ARGV[5] and given == rseq - 1 then return {{'OK', rseq, 0}} end
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
# Returns 1 dropped, 0 no such channel, or {'ERR', code}. The appends still queued are dropped at
# commit (their incarnation is gone) and their row data with them.
_DROP = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[2] == '1' and tonumber(redis.call('HGET', KEYS[1], 'pending')) > 0 then
  return {'ERR', 'UNCOMMITTED'}
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
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
        "Channel '{channel}' has appended rows that are not committed yet (fail_on_uncommitted_rows = true).",
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
class PipeRef:
    """The pipe a channel belongs to, as the API names it in answers."""

    pipe_id: str
    database: str
    schema: str
    pipe: str


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

        The append is counted against its channel's, pipe's, table's and writer's bounds first (a
        ChannelError when one refuses it), and uncounted again if it is not stored after all."""
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

    def drop(self, ref: PipeRef, channel: str, fail_on_uncommitted: bool) -> bool:
        """Forget the channel and its offsets; False when there was none. Its appends still waiting
        keep counting until the pipeline settles them (dropped then), as they still take Redis."""
        k = self._keys
        keys = [k.channel(ref.pipe_id, channel), k.channels(ref.pipe_id)]
        one_slot(keys, "channel drop script")
        out = self._drop(
            keys=keys,
            args=[channel, "1" if fail_on_uncommitted else "0"],
        )
        if isinstance(out, list):
            raise _refusal(out[1], channel)
        if out:
            self.ledger.release([keys[0]])
        return bool(out)

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
        """The status of each named channel that exists (the others are left out)."""
        return {name: _status(ref, name, h) for name, h in self.states(ref.pipe_id, channels).items()}


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
        last_committed_offset_token=h.get("token"),
        created_on_ms=number("created_ms"),
        rows_inserted=number("rows_inserted"),
        rows_parsed=number("rows_parsed"),
        rows_error_count=number("rows_error_count"),
        last_error_offset_upper_bound=h.get("last_error_offset_upper_bound"),
        last_error_message=h.get("last_error_message"),
        last_error_timestamp_ms=int(h["last_error_timestamp_ms"])
        if h.get("last_error_timestamp_ms")
        else None,
        snowflake_avg_processing_latency_ms=number("latency_ms"),
    )


def channel_state(client: RedisClient, keys: Keys, pipe_id: str, name: str) -> dict[str, str]:
    """A channel's raw state hash (tests and SHOW CHANNELS)."""
    return {a.decode(): b.decode() for a, b in client.hgetall(keys.channel(pipe_id, name)).items()}
