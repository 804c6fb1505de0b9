"""A circuit breaker per remote service, so that an unreachable service costs one retry budget per
outage rather than one per batch, per file and per query.

When a batch exhausts its retries (``ExternalFunctionUnavailable``), the caller *trips* the breaker
of the function's URL: for a cooldown (``external_functions.breaker_cooldown_s``, doubled on each
trip of one outage up to ``breaker_max_cooldown_s``) calls fail at once without a request, and
the Spark job's source holds back the files of the pipes that call the service (they wait in their
queues, as a paused pipe's do). When the cooldown ends the breaker is *half-open*: the next calls
are sent, and the first answered batch closes it; another failure trips it for twice as long.

With a Redis client the state is one hash shared by every process (the API's queries, each Spark
Python worker, the job's source); without one it is this process's own (unit tests, a caller
outside Floe's stack).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import cast

import redis

from floe.catalog import Catalog, ExternalFunction, Pipe
from floe.keys import REDIS_ERRORS, Keys, RedisClient
from floe.settings import ExternalFunctionSettings

log = logging.getLogger("floe.external")


def service_id(url: str) -> str:
    """The breaker's field for one remote service: a digest, so the hash's fields stay short."""
    return hashlib.sha256(url.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Trip:
    """The last time a service's breaker tripped, and for how long it holds calls back."""

    until_ms: int
    """Calls fail at once until this time (epoch ms); after it the breaker is half-open."""
    trips: int
    """Trips in this outage; each one doubles the cooldown."""
    since_ms: int
    """When the outage's first trip happened."""
    reason: str
    """The error that tripped it (names the function and the batch, never row data)."""

    def is_open(self, now_ms: int) -> bool:
        """Whether calls are held back at ``now_ms``."""
        return now_ms < self.until_ms

    def to_json(self) -> str:
        """The stored form."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Trip:
        """The stored form read back."""
        return cls(**json.loads(text))


def next_trip(old: Trip | None, now_ms: int, reason: str, settings: ExternalFunctionSettings) -> Trip:
    """The breaker's state after a failure at ``now_ms``. A failure while it is open belongs to the
    trip in force (another batch of the same outage) and changes nothing; a failure within
    ``breaker_max_cooldown_s`` of the last cooldown's end continues that outage (the cooldown
    doubles); anything later starts a new one."""
    if old is not None and old.is_open(now_ms):
        return old
    max_ms = int(settings.breaker_max_cooldown_s * 1000)
    continuing = old is not None and now_ms - old.until_ms <= max_ms
    trips = old.trips + 1 if old is not None and continuing else 1
    since = old.since_ms if old is not None and continuing else now_ms
    cooldown = min(max_ms, int(settings.breaker_cooldown_s * 1000 * 2.0 ** min(trips - 1, 30)))
    return Trip(until_ms=now_ms + cooldown, trips=trips, since_ms=since, reason=reason)


class Breaker:
    """Circuit breakers of remote services, shared through Redis when ``client`` is given."""

    def __init__(
        self,
        settings: ExternalFunctionSettings | None = None,
        client: RedisClient | None = None,
        keys: Keys | None = None,
    ) -> None:
        if (client is None) != (keys is None):
            raise ValueError("a shared Breaker needs both a Redis client and the key layout")
        # Only trip() reads the settings: a reader of the states (the job's source) needs none.
        self.settings = settings if settings is not None else ExternalFunctionSettings()
        self._client = client
        self._key = keys.breakers() if keys is not None else ""
        self._local: dict[str, Trip] = {}
        self._lock = threading.Lock()

    def state(self, url: str) -> Trip | None:
        """The service's last trip (open or half-open), or None when its breaker is closed."""
        return self.states([url]).get(url)

    def states(self, urls: Iterable[str]) -> dict[str, Trip]:
        """The trips of those of ``urls`` whose breaker is not closed, in one round trip."""
        wanted = sorted(set(urls))
        if not wanted:
            return {}
        with self._lock:
            found = {u: self._local.get(service_id(u)) for u in wanted}
        if self._client is not None:
            try:
                raws = self._client.hmget(self._key, [service_id(u) for u in wanted])
            except REDIS_ERRORS as exc:
                # Redis trouble must not fail calls the service may well answer: this process's
                # own view of the breakers stands in until Redis is back.
                log.warning("circuit breakers: Redis is not answering (%s); using this process's view", exc)
            else:
                found = {u: Trip.from_json(r) if r else None for u, r in zip(wanted, raws, strict=True)}
        return {u: t for u, t in found.items() if t is not None}

    def trip(self, url: str, reason: str) -> Trip:
        """Record a failure of the service (``next_trip``); returns the trip in force."""
        field = service_id(url)
        now = int(time.time() * 1000)
        with self._lock:
            trip = next_trip(self._local.get(field), now, reason, self.settings)
            self._local[field] = trip
        if self._client is None:
            return trip
        try:
            return self._trip_shared(field, now, reason)
        except REDIS_ERRORS as exc:
            log.warning("circuit breakers: Redis is not answering (%s); tripped in this process only", exc)
            return trip

    def _trip_shared(self, field: str, now: int, reason: str) -> Trip:
        assert self._client is not None
        # WATCH/MULTI: two processes tripping at once count one trip, not two. The one key is one
        # slot; a cluster client WATCHes only in a pipeline that says transaction=True.
        with self._client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(self._key)
                    raw = cast(bytes | None, pipe.hget(self._key, field))
                    old = Trip.from_json(raw) if raw else None
                    trip = next_trip(old, now, reason, self.settings)
                    if trip != old:
                        pipe.multi()
                        pipe.hset(self._key, field, trip.to_json())
                        pipe.execute()
                    return trip
                except redis.WatchError:
                    continue

    def close(self, url: str, seen: Trip) -> None:
        """Close the breaker after an answered batch, if it still holds the trip the caller saw
        (a newer trip, from a failure since, stays)."""
        field = service_id(url)
        with self._lock:
            if self._client is not None or self._local.get(field) == seen:
                self._local.pop(field, None)
        if self._client is None:
            return
        try:
            self._close_shared(field, seen)
        except REDIS_ERRORS as exc:
            log.warning("circuit breakers: Redis is not answering (%s); closed in this process only", exc)

    def _close_shared(self, field: str, seen: Trip) -> None:
        assert self._client is not None
        stored = seen.to_json().encode()
        with self._client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(self._key)
                    if cast(bytes | None, pipe.hget(self._key, field)) == stored:
                        pipe.multi()
                        pipe.hdel(self._key, field)
                        pipe.execute()
                    return
                except redis.WatchError:
                    continue


def held_back(catalog: Catalog, breaker: Breaker, pipes: Iterable[Pipe]) -> dict[str, tuple[str, Trip]]:
    """The pipes (by id) that call a remote service whose breaker is open, each with one such
    function's signature and its trip: the Spark job's source holds their files back, and
    SYSTEM$PIPE_STATUS says why. One catalog read and one Redis round trip, and none when no pipe
    calls external functions."""
    calling = [p for p in pipes if p.copy_spec.functions]
    if not calling:
        return {}
    functions = catalog.all(ExternalFunction)
    used = {
        p.id: [
            (sig, functions[sig].url)
            for sig in sorted(set(p.copy_spec.functions.values()))
            if sig in functions
        ]
        for p in calling
    }
    trips = breaker.states(url for pairs in used.values() for _, url in pairs)
    now = int(time.time() * 1000)
    held: dict[str, tuple[str, Trip]] = {}
    for pipe_id, pairs in used.items():
        for sig, url in pairs:
            trip = trips.get(url)
            if trip is not None and trip.is_open(now):
                held[pipe_id] = (sig, trip)
                break
    return held
