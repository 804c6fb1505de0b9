"""The Redis key layout. Every key Floe writes is named here and nowhere else.

Keys that one atomic step touches share a hash tag (``{...}``) so the same scripts run on Redis
Cluster: the catalog lives under ``{catalog}``; everything about one pipe incarnation (its queue,
file states, load history, committed blobs and batch markers) lives under ``{p:<pipe id>}``; the
circuit breakers under ``{breakers}``; process heartbeats under ``{proc}``.

Every Lua script, MULTI and multi-key command passes its keys through :func:`one_slot` first. On a
Redis Cluster a step over two slots fails anyway; on a single Redis it would work, so with
``redis.check_slots`` on (the tests turn it on) ``one_slot`` refuses it there too, and a step that
could not run on a cluster fails every test that takes it.

:class:`RedisClient` is the part of redis-py's client that Floe uses, which ``redis.Redis`` and
``redis.cluster.RedisCluster`` both answer; ``RedisSettings.client()`` returns one or the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.crc import key_slot
from redis.exceptions import RedisClusterException, RedisError

REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisClusterException)
"""What a client raises when the store does not answer. redis-py's cluster client raises
``RedisClusterException``, which is not a ``RedisError``, when no node answers or a slot has none."""


@dataclass(frozen=True)
class Keys:
    """Key names under one prefix."""

    prefix: str

    # -- catalog -------------------------------------------------------------------------------
    def objects(self, kind: str) -> str:
        """Hash name -> JSON of every stage, table, pipe, user or role."""
        return f"{self.prefix}:{{catalog}}:{kind}"

    def table_segments(self, table_id: str) -> str:
        """Set of pipe ids whose committed blobs make up a table incarnation."""
        return f"{self.prefix}:{{catalog}}:segments:{table_id}"

    def catalog_version(self) -> str:
        """Counter bumped on every DDL, so readers can cache the catalog."""
        return f"{self.prefix}:{{catalog}}:version"

    # -- per pipe ------------------------------------------------------------------------------
    def _pipe(self, pipe_id: str) -> str:
        return f"{self.prefix}:{{p:{pipe_id}}}"

    def queue(self, pipe_id: str) -> str:
        """Redis Stream of files waiting to load (the Spark source reads it)."""
        return f"{self._pipe(pipe_id)}:queue"

    def file(self, pipe_id: str, path: str) -> str:
        """JSON state of one (pipe, path); its existence is the 14-day dedup memory."""
        return f"{self._pipe(pipe_id)}:file:{path}"

    def history(self, pipe_id: str) -> str:
        """Sorted set of paths by received time (ms): the load-history index."""
        return f"{self._pipe(pipe_id)}:history"

    def events(self, pipe_id: str) -> str:
        """Stream of recent load events (insertReport reads it)."""
        return f"{self._pipe(pipe_id)}:events"

    def blobs(self, pipe_id: str) -> str:
        """Hash blob name -> JSON manifest entry (path, row count, column statistics)."""
        return f"{self._pipe(pipe_id)}:blobs"

    def batch_marker(self, pipe_id: str, query_id: str, batch_id: int) -> str:
        """Exists once the registrar committed this pipe's share of a micro-batch."""
        return f"{self._pipe(pipe_id)}:commit:{query_id}:{batch_id}"

    def status(self, pipe_id: str) -> str:
        """Hash of pipe runtime facts (last ingested file and time, last error)."""
        return f"{self._pipe(pipe_id)}:status"

    def file_errors(self, pipe_id: str, path: str) -> str:
        """JSON list of one file's errors (VALIDATE_PIPE_LOAD), set with its terminal state, TTL 14 days."""
        return f"{self._pipe(pipe_id)}:fileerrors:{path}"

    def skipped(self, pipe_id: str) -> str:
        """Sorted set of the files the pipe was sent again and skipped ("Load skipped"), by time (ms)."""
        return f"{self._pipe(pipe_id)}:skipped"

    def retired(self, pipe_id: str) -> str:
        """Set when DROP or CREATE OR REPLACE retires a pipe incarnation; the registrar then refuses
        its commits, so a batch in flight at that moment never becomes visible."""
        return f"{self._pipe(pipe_id)}:retired"

    def lease(self, pipe_id: str, task: str) -> str:
        """Held by the one consumer doing ``task`` for the pipe: 'backfill' until its next listing is
        due, 'errors' while it sends error notifications. The value names the holder."""
        return f"{self._pipe(pipe_id)}:lease:{task}"

    def error_cursor(self, pipe_id: str) -> str:
        """Id of the last load event (in ``events``) past which error notifications are done: sent,
        or not needed."""
        return f"{self._pipe(pipe_id)}:errors:cursor"

    # -- per pipe: streaming channels (Snowpipe Streaming) ----------------------------------
    def channel(self, pipe_id: str, name: str) -> str:
        """Hash of one channel's state: incarnation, sequencers, committed offset token, counters."""
        return f"{self._pipe(pipe_id)}:channel:{name}"

    def channels(self, pipe_id: str) -> str:
        """Sorted set of the pipe's channel names by last activity (ms): listing and expiry."""
        return f"{self._pipe(pipe_id)}:channels"

    def rows(self, pipe_id: str) -> str:
        """Redis Stream of accepted appends waiting to load (the Spark source reads it)."""
        return f"{self._pipe(pipe_id)}:rows"

    def row_data(self, pipe_id: str, channel: str, incarnation: str, client_seq: int, row_seq: int) -> str:
        """The NDJSON rows of one accepted append, deleted by the commit that settles it."""
        return f"{self._pipe(pipe_id)}:rowdata:{incarnation}:{client_seq}:{row_seq}:{channel}"

    def pipe_pattern(self, pipe_id: str) -> str:
        """Glob over every key of one pipe (for DROP PIPE)."""
        return f"{self._pipe(pipe_id)}:*"

    # -- what streaming holds, per channel, pipe, table and user (floe.channel_quotas) ----------
    def quota(self, part: str) -> str:
        """The streaming ledger's keys, under one tag of their own: a table's or a user's channels
        and rows span pipes, so no pipe's tag can hold their counts. ``part`` is ``held``, ``since``,
        ``totals``, ``reconciled`` or ``cursor``."""
        return f"{self.prefix}:{{quota}}:{part}"

    # -- the notification channel --------------------------------------------------------------
    def notification_channel(self) -> str:
        """Hash of the SQS queue's facts the consumers record (last pull, last message received),
        which every auto-ingest pipe shares, as Snowflake's pipes share their account's queue."""
        return f"{self.prefix}:{{channel}}:notifications"

    # -- external functions --------------------------------------------------------------------
    def breakers(self) -> str:
        """Hash of remote services whose circuit breaker is not closed -> their last trip (JSON)."""
        return f"{self.prefix}:{{breakers}}"

    # -- processes -----------------------------------------------------------------------------
    def heartbeat(self, component: str) -> str:
        """Hash of live processes of a component -> last heartbeat (ms)."""
        return f"{self.prefix}:{{proc}}:{component}"


# -- one slot per step ---------------------------------------------------------------------------


class SlotError(AssertionError):
    """A step's keys lie in more than one Redis Cluster slot: a bug in the key layout or a caller."""


_checking = False


def check_slots() -> None:
    """Make :func:`one_slot` refuse multi-slot steps in this process from now on.

    ``RedisSettings.client()`` calls it when ``redis.check_slots`` is set, so every process of a
    test stack (they inherit the setting) checks its own steps.
    """
    global _checking
    _checking = True


def checking_slots() -> bool:
    """Whether :func:`one_slot` refuses multi-slot steps in this process."""
    return _checking


def slot(key: str | bytes) -> int:
    """The Redis Cluster slot of a key: CRC16 of its hash tag (or of the whole key without one)."""
    return key_slot(key.encode() if isinstance(key, str) else key)


def one_slot(keys: Iterable[str | bytes], step: str) -> None:
    """Refuse a step whose keys lie in more than one cluster slot, when checking is on.

    ``step`` names the script or command for the message. Checking costs a CRC16 per key, so it is
    off unless ``redis.check_slots`` turned it on (the tests do).
    """
    if not _checking:
        return
    slots: dict[int, str | bytes] = {}
    for key in keys:
        slots.setdefault(slot(key), key)
        if len(slots) > 1:
            first, second = list(slots.values())
            raise SlotError(
                f"{step} touches keys of two Redis Cluster slots ({first!r} and {second!r}); "
                "every key of one atomic step must share a hash tag (floe/keys.py)"
            )


def scan_keys(client: RedisClient, pattern: str, count: int = 1000) -> Iterator[bytes]:
    """Every key matching ``pattern``, on every primary of a cluster.

    redis-py's cluster client sends a SCAN to every primary by default; naming them here keeps it
    so whatever its defaults become. Every primary, not just the one owning the pattern's tag:
    while a slot migrates, its keys lie on two nodes.
    """
    if isinstance(client, RedisCluster):
        return iter(client.scan_iter(match=pattern, count=count, target_nodes=RedisCluster.PRIMARIES))
    return client.scan_iter(match=pattern, count=count)


# -- the client surface --------------------------------------------------------------------------


class RedisPipeline(Protocol):
    """A pipeline or transaction (MULTI, WATCH) of :class:`RedisClient`; commands queue until
    ``execute``, and answer at once while WATCHing. A cluster's pipeline refuses multi-key
    commands such as MGET, so none is here."""

    def __enter__(self) -> RedisPipeline: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> None: ...

    def watch(self, *names: str) -> bool: ...

    def multi(self) -> None: ...

    def execute(self) -> list[Any]: ...

    def get(self, name: str) -> Any: ...

    def exists(self, *names: str) -> Any: ...

    def delete(self, *names: str) -> Any: ...

    def incr(self, name: str) -> Any: ...

    def hget(self, name: str, key: str) -> Any: ...

    def hgetall(self, name: str) -> Any: ...

    def hset(self, name: str, key: str, value: str) -> Any: ...

    def hsetnx(self, name: str, key: str, value: str) -> Any: ...

    def hdel(self, name: str, *keys: str) -> Any: ...

    def sadd(self, name: str, *values: str) -> Any: ...

    def xrange(self, name: str, min: str = "-", max: str = "+", count: int | None = None) -> Any: ...

    def xlen(self, name: str) -> Any: ...


class RedisClient(Protocol):
    """The commands Floe sends, which a single Redis (``redis.Redis``) and a Redis Cluster
    (``redis.cluster.RedisCluster``) both answer. Multi-key commands, scripts and transactions
    keep to one slot (:func:`one_slot`). A cluster spreads the keys over its nodes, so KEYS is not
    here, and Floe's own SCANs go through :func:`scan_keys`, which names every primary."""

    def ping(self) -> Any: ...

    def info(self, section: str) -> Mapping[str, Any]: ...

    def close(self) -> None: ...

    def pipeline(self, transaction: bool) -> RedisPipeline: ...

    def register_script(self, script: str) -> Script: ...

    def scan_iter(self, match: str, count: int) -> Iterator[bytes]: ...

    def get(self, name: str) -> bytes | None: ...

    def mget(self, keys: list[str]) -> list[bytes | None]: ...

    def exists(self, *names: str) -> int: ...

    def delete(self, *names: str | bytes) -> int: ...

    def unlink(self, *names: str | bytes) -> int: ...

    def hgetall(self, name: str) -> dict[bytes, bytes]: ...

    def hmget(self, name: str, keys: list[str]) -> list[bytes | None]: ...

    def hkeys(self, name: str) -> list[bytes]: ...

    def smembers(self, name: str) -> set[bytes]: ...

    def srem(self, name: str, *values: str) -> int: ...

    def zrange(self, name: str, start: int, end: int) -> list[bytes]: ...

    def zrangebyscore(self, name: str, min: int | str, max: int | str) -> list[bytes]: ...

    def zcard(self, name: str) -> int: ...

    def xrange(self, name: str, min: str = "-", max: str = "+", count: int | None = None) -> Any: ...

    def xlen(self, name: str) -> int: ...

    def xtrim(self, name: str, *, minid: str, approximate: bool) -> Any: ...
