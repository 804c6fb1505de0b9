"""What Snowpipe Streaming holds in Redis, bounded per channel, pipe, table and user.

An append's rows wait in Redis until the pipeline commits them, and a channel's state stays until
the channel is dropped or expires. Redis also holds the catalog, so what one tenant can make it hold
is bounded: the rows' bytes as stored (decompressed) and their number, per channel, per pipe, per
table and per user, and the channels per pipe, per table and per user (``settings.streaming``).

A pipe's keys share its hash tag, but a table's or a user's channels span pipes, so the counts live
in a ledger under a tag of its own (``Keys.quota``):

- ``held``: one entry per thing held, named by the Redis key that holds it (an append's row data
  key, a channel's state hash), with what it counts (bytes and rows, or one channel) and for which
  holders (``c:``, ``p:``, ``t:``, ``u:`` ids);
- ``since``: the entries by the time they were made (ms);
- ``totals``: per holder and measure (``<holder>|b``, ``|r``, ``|n``), the sum of its entries.

An entry is made before its key is written, in one script that checks every bound it counts
against (``reserve``), so appends running at once never pass a bound together: a bound is overshot
by at most the one append a holder that holds nothing always takes (so a bound below one append
never stops a channel for good). An entry is released once its key is gone: the registrar releases
an append's after the commit that deleted its rows, the channel store a channel's when it drops it;
releasing is idempotent. A crash between deleting a key and releasing its entry, or a DROP PIPE that
deletes a pipe's keys wholesale, leaves an entry whose key no longer exists. Before anyone is told
that a bound is full, ``reconcile`` releases the entries older than RECONCILE_GRACE_MS whose keys are
gone (a younger one may be an append whose rows are being written), so the counts are those of what
Redis holds: they never drift for good, and a lost release costs a refusal at most.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from floe.keys import Keys, RedisClient, one_slot
from floe.streaming.protocol import Code

if TYPE_CHECKING:
    from floe.settings import StreamingSettings

APPEND_OVERHEAD_BYTES = 512
"""What an append costs Redis besides its rows and the copies of its row data key's name: its entry
in the pipe's rows stream, its ledger entry, and Redis's own overhead of each. Counted with the
rows (with four times the key's name: the key itself, the stream field, the ledger's hash field and
sorted-set member), so a flood of tiny appends fills a bound as the memory it takes does: measured
with MEMORY USAGE, 2,000 appends of one 3-byte row took 726 bytes each, and count 815."""
RECONCILE_GRACE_MS = 60_000
"""An entry this young is never taken for a leftover: its append may be between its reservation
and the script that writes its rows."""
RECONCILE_EVERY_MS = 1_000
"""Reconciling runs at most this often (a refusal triggers it), whoever asks."""
RECONCILE_BATCH = 10_000
"""Entries one reconciling looks at; the next one goes on after the last (oldest first, then round)."""

SMALLEST_APPEND = 3
"""Bytes of the smallest append, one empty object: ``{}`` and its newline."""
_APPEND, _CHANNEL = "a", "c"
_UNITS = {"b": "bytes", "r": "rows", "n": "channels"}
_SETTING = {"b": "MAX_PENDING_BYTES_PER_", "r": "MAX_PENDING_ROWS_PER_", "n": "MAX_CHANNELS_PER_"}

# KEYS: 1 held, 2 since, 3 totals. ARGV: 1 entry id ('' only checks), 2 now ms, 3 kind, 4 bytes,
# 5 rows, 6 '1' to count without checking (a channel that exists already), then per holder: its id,
# and its bounds on bytes, rows and channels (0: none).
# Returns {'OK', 1} counted, {'OK', 0} the entry was there already (nothing counted twice), or
# {'FULL', holder index (1-based), measure ('b', 'r' or 'n')}.
_RESERVE = f"""
local id, kind = ARGV[1], ARGV[3]
if id ~= '' and redis.call('HEXISTS', KEYS[1], id) == 1 then return {{'OK', 0}} end
local bytes, rows = tonumber(ARGV[4]), tonumber(ARGV[5])
local holders = {{}}
for i = 7, #ARGV, 4 do
  local h = ARGV[i]
  holders[#holders + 1] = h
  if ARGV[6] ~= '1' then
    if kind == '{_APPEND}' then
      local got = redis.call('HMGET', KEYS[3], h .. '|b', h .. '|r')
      local b, r = tonumber(got[1] or '0'), tonumber(got[2] or '0')
      local lb, lr = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
      -- A holder with nothing takes one append whatever its size.
      if lb > 0 and b > 0 and b + bytes > lb then return {{'FULL', #holders, 'b'}} end
      if lr > 0 and r > 0 and r + rows > lr then return {{'FULL', #holders, 'r'}} end
    else
      local lc = tonumber(ARGV[i + 3])
      local n = tonumber(redis.call('HGET', KEYS[3], h .. '|n') or '0')
      if lc > 0 and n + 1 > lc then return {{'FULL', #holders, 'n'}} end
    end
  end
end
if id == '' then return {{'OK', 0}} end
redis.call('HSET', KEYS[1], id, cjson.encode({{k = kind, b = bytes, r = rows, h = holders}}))
redis.call('ZADD', KEYS[2], ARGV[2], id)
for _, h in ipairs(holders) do
  if kind == '{_APPEND}' then
    redis.call('HINCRBY', KEYS[3], h .. '|b', bytes)
    redis.call('HINCRBY', KEYS[3], h .. '|r', rows)
  else
    redis.call('HINCRBY', KEYS[3], h .. '|n', 1)
  end
end
return {{'OK', 1}}
"""

# KEYS: 1 held, 2 since, 3 totals. ARGV: entry ids. Returns how many were held (and are released).
_RELEASE = f"""
local function take(field, amount)
  if redis.call('HINCRBY', KEYS[3], field, -amount) <= 0 then redis.call('HDEL', KEYS[3], field) end
end
local released = 0
for _, id in ipairs(ARGV) do
  local entry = redis.call('HGET', KEYS[1], id)
  if entry then
    local e = cjson.decode(entry)
    for _, h in ipairs(e.h) do
      if e.k == '{_APPEND}' then
        take(h .. '|b', e.b)
        take(h .. '|r', e.r)
      else
        take(h .. '|n', 1)
      end
    end
    redis.call('HDEL', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    released = released + 1
  end
end
return released
"""

# KEYS: 1 since, 2 reconciled marker, 3 cursor. ARGV: 1 now ms, 2 grace ms, 3 every ms, 4 batch.
# Returns the ids of up to ``batch`` entries older than the grace, after the cursor (none when a
# reconciling ran within ``every``), and moves the cursor past them (back to the start at the end).
_CANDIDATES = """
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[3]) then return {} end
local from = redis.call('GET', KEYS[3]) or '-inf'
local upto = tonumber(ARGV[1]) - tonumber(ARGV[2])
local batch = tonumber(ARGV[4])
local got = redis.call('ZRANGEBYSCORE', KEYS[1], from, upto, 'WITHSCORES', 'LIMIT', 0, batch)
local ids = {}
for i = 1, #got, 2 do ids[#ids + 1] = got[i] end
if #ids < batch then redis.call('DEL', KEYS[3]) else redis.call('SET', KEYS[3], '(' .. got[#got]) end
return ids
"""


@dataclass(frozen=True)
class Limits:
    """The bounds of ``settings.streaming`` by scope; a scope left out is unbounded."""

    bytes: Mapping[str, int]
    rows: Mapping[str, int]
    channels: Mapping[str, int]

    @classmethod
    def of(cls, s: StreamingSettings) -> Limits:
        """Every bound the settings give."""
        return cls(
            bytes={
                "channel": s.max_pending_bytes_per_channel,
                "pipe": s.max_pending_bytes_per_pipe,
                "table": s.max_pending_bytes_per_table,
                "user": s.max_pending_bytes_per_user,
            },
            rows={
                "pipe": s.max_pending_rows_per_pipe,
                "table": s.max_pending_rows_per_table,
                "user": s.max_pending_rows_per_user,
            },
            channels={
                "pipe": s.max_channels_per_pipe,
                "table": s.max_channels_per_table,
                "user": s.max_channels_per_user,
            },
        )


NO_LIMITS = Limits(bytes={}, rows={}, channels={})
"""No bound: for a ledger that only releases (the registrar's)."""


@dataclass(frozen=True)
class Holder:
    """Something whose holdings are counted: a channel, a pipe, a table or a user."""

    scope: str
    id: str
    """The ledger's id: ``c:<pipe id>:<channel>``, ``p:<pipe id>``, ``t:<table id>``, ``u:<user>``."""
    name: str
    """For messages."""

    @property
    def title(self) -> str:
        return f"{self.scope.capitalize()} '{self.name}'"


@dataclass(frozen=True)
class Writer:
    """Who an append or a new channel counts against besides its channel and pipe: its table and
    the user who sends it (empty: not counted, as in tests of the channel steps alone)."""

    table_id: str = ""
    table: str = ""
    user: str = ""


def holders(pipe_id: str, pipe: str, writer: Writer, channel: str | None) -> list[Holder]:
    """The holders an append on ``channel`` (or, with None, a new channel) counts against."""
    out = [Holder("channel", f"c:{pipe_id}:{channel}", channel)] if channel is not None else []
    out.append(Holder("pipe", f"p:{pipe_id}", pipe))
    if writer.table_id:
        out.append(Holder("table", f"t:{writer.table_id}", writer.table))
    if writer.user:
        out.append(Holder("user", f"u:{writer.user}", writer.user))
    return out


@dataclass(frozen=True)
class Full:
    """A bound that refuses: which holder, which measure and its limit."""

    holder: Holder
    measure: str
    """``b`` (bytes), ``r`` (rows) or ``n`` (channels)."""
    limit: int

    @property
    def setting(self) -> str:
        return f"FLOE_STREAMING__{_SETTING[self.measure]}{self.holder.scope.upper()}"

    @property
    def status(self) -> int:
        # Rows free up when the pipeline commits them: a 503 to retry, as the client's pace is not
        # what refuses it (and six 429s in a row send the official SDK to file mode, decision 120).
        # Channels free up only when dropped.
        return 400 if self.measure == "n" else 503

    @property
    def code(self) -> str:
        return Code.TOO_MANY_CHANNELS if self.measure == "n" else Code.PENDING_FULL

    @property
    def message(self) -> str:
        # The bound, not what the holder holds: a table's or a pipe's count includes other users'.
        bound = f"its bound of {self.limit:,} {_UNITS[self.measure]}"
        if self.measure == "n":
            return (
                f"{self.holder.title} has reached {bound} ({self.setting}). Drop the channels no longer "
                f"used (DELETE .../channels/<name>), or raise {self.setting}."
            )
        return (
            f"{self.holder.title} has reached {bound} appended and not yet committed ({self.setting}). "
            f"Retry once the pipeline commits them, or raise {self.setting}."
        )


@dataclass(frozen=True)
class Room:
    """What one more append may still bring before a bound refuses it (``full`` says which)."""

    bytes: int
    bytes_full: Full | None
    rows: int
    rows_full: Full | None


UNBOUNDED = 1 << 62


def _overhead(entry: str) -> int:
    """What an append stored under ``entry`` counts besides its rows (see APPEND_OVERHEAD_BYTES)."""
    return APPEND_OVERHEAD_BYTES + 4 * len(entry)


class Ledger:
    """The counts of what streaming holds (see the module's docstring)."""

    def __init__(self, client: RedisClient, keys: Keys, limits: Limits) -> None:
        self._r = client
        self._keys = keys
        self.limits = limits
        self._reserve = client.register_script(_RESERVE)
        self._release = client.register_script(_RELEASE)
        self._candidates = client.register_script(_CANDIDATES)

    def _ledger_keys(self) -> list[str]:
        keys = [self._keys.quota("held"), self._keys.quota("since"), self._keys.quota("totals")]
        one_slot(keys, "streaming ledger script")
        return keys

    def _limit(self, holder: Holder, measure: str) -> int:
        table = {"b": self.limits.bytes, "r": self.limits.rows, "n": self.limits.channels}[measure]
        return table.get(holder.scope, 0)

    # ------------------------------------------------------------------------------- counting

    def reserve_append(self, entry: str, size: int, rows: int, where: Sequence[Holder], now_ms: int) -> bool:
        """Count an append stored under key ``entry``: True if counted now, False if it was already
        (a retry of an append still waiting). Raises FullError when a bound refuses it, after
        reconciling once."""
        return self._reserve_or_raise(entry, _APPEND, size + _overhead(entry), rows, where, now_ms, False)

    def reserve_channel(self, entry: str, where: Sequence[Holder], exists: bool, now_ms: int) -> bool:
        """Count the channel whose state hash is ``entry``; one that ``exists`` already is counted
        whatever the bounds (reopening a channel is never refused)."""
        return self._reserve_or_raise(entry, _CHANNEL, 0, 0, where, now_ms, exists)

    def _reserve_or_raise(
        self, entry: str, kind: str, size: int, rows: int, where: Sequence[Holder], now: int, force: bool
    ) -> bool:
        full = self._try(entry, kind, size, rows, where, now, force)
        if isinstance(full, Full) and self.reconcile(now):
            full = self._try(entry, kind, size, rows, where, now, force)
        if isinstance(full, Full):
            raise FullError(full)
        return full

    def _try(
        self, entry: str, kind: str, size: int, rows: int, where: Sequence[Holder], now: int, force: bool
    ) -> bool | Full:
        args: list[str | int] = [entry, now, kind, size, rows, "1" if force else "0"]
        for h in where:
            args += [h.id, self._limit(h, "b"), self._limit(h, "r"), self._limit(h, "n")]
        out = cast(list[Any], self._reserve(keys=self._ledger_keys(), args=args))
        if out[0] == b"FULL":
            holder = where[int(out[1]) - 1]
            measure = out[2].decode()
            return Full(holder, measure, self._limit(holder, measure))
        return bool(out[1])

    def room(self, entry: str, where: Sequence[Holder], now_ms: int) -> Room:
        """What the append to be stored under ``entry`` may still bring; raises FullError when not
        even the smallest one fits (after reconciling once). Read without a lock:
        ``reserve_append`` decides."""
        room = self._room(where, _overhead(entry))
        if (room.bytes < SMALLEST_APPEND or room.rows < 1) and self.reconcile(now_ms):
            room = self._room(where, _overhead(entry))
        if room.bytes < SMALLEST_APPEND and room.bytes_full is not None:
            raise FullError(room.bytes_full)
        if room.rows < 1 and room.rows_full is not None:
            raise FullError(room.rows_full)
        return room

    def _room(self, where: Sequence[Holder], overhead: int) -> Room:
        fields = [f"{h.id}|{m}" for h in where for m in ("b", "r")]
        got = self._r.hmget(self._keys.quota("totals"), fields)
        room = Room(UNBOUNDED, None, UNBOUNDED, None)
        for i, h in enumerate(where):
            held_b, held_r = (int(v or 0) for v in got[2 * i : 2 * i + 2])
            limit_b, limit_r = self._limit(h, "b"), self._limit(h, "r")
            # An empty holder takes any one append: it limits nothing here.
            if limit_b and held_b and limit_b - held_b - overhead < room.bytes:
                room = Room(limit_b - held_b - overhead, Full(h, "b", limit_b), room.rows, room.rows_full)
            if limit_r and held_r and limit_r - held_r < room.rows:
                room = Room(room.bytes, room.bytes_full, limit_r - held_r, Full(h, "r", limit_r))
        return room

    def release(self, entries: Sequence[str]) -> int:
        """Forget the entries of keys that are gone (their rows committed, their channel dropped);
        how many were held. Releasing one that is not held does nothing."""
        if not entries:
            return 0
        return int(cast(int, self._release(keys=self._ledger_keys(), args=list(entries))))

    # ---------------------------------------------------------------------------- reconciling

    def reconcile(self, now_ms: int) -> int:
        """Release the entries older than RECONCILE_GRACE_MS whose keys are gone; how many. Runs at
        most every RECONCILE_EVERY_MS (0 when it did not run)."""
        k = self._keys
        keys = [k.quota("since"), k.quota("reconciled"), k.quota("cursor")]
        one_slot(keys, "streaming ledger candidates script")
        args = [now_ms, RECONCILE_GRACE_MS, RECONCILE_EVERY_MS, RECONCILE_BATCH]
        ids = [i.decode() for i in cast(list[bytes], self._candidates(keys=keys, args=args))]
        if not ids:
            return 0
        # Each entry's key lies in its own pipe's slot: one EXISTS each, in one round trip.
        with self._r.pipeline(transaction=False) as p:
            for entry in ids:
                p.exists(entry)
            found = p.execute()
        return self.release([entry for entry, n in zip(ids, found, strict=True) if not n])

    def totals(self) -> dict[str, int]:
        """Every holder's counts (tests and diagnostics)."""
        return {a.decode(): int(b) for a, b in self._r.hgetall(self._keys.quota("totals")).items()}


class FullError(Exception):
    """A bound refused an append or a new channel."""

    def __init__(self, full: Full) -> None:
        self.full = full
        super().__init__(full.message)
