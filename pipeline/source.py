"""A Spark Python streaming source over the per-pipe Redis Streams.

Offsets are ``{pipe_id: last stream id}`` for the file queues, and ``{"rows:" + pipe_id: last
stream id}`` for the rows streams of streaming pipes (their channels' appends; at most
``pipeline.max_appends_per_batch`` per pipe and micro-batch, since an append holds up to 4 MB).
Spark writes the planned range of every micro-batch to its offset log before running it, so a
replayed batch reads the same entries. Entries are deleted by the registrar in the commit that
makes their rows visible (never earlier), and ``commit(end)`` trims anything older as a safety net.

A pipe that calls an external function whose remote service's circuit breaker is open
(``floe.external.Breaker``) is held back like a paused one: its files wait in its queue, rather
than fail one after another, until the cooldown ends and a batch probes the service again.

A micro-batch's file budget (the ReadLimit, ``pipeline.max_files_per_batch``) is shared max-min
fairly over the unpaused pipes with pending entries (``fair_shares``), so a pipe with a large
backlog cannot hold the others back; when there are more such pipes than files in the budget, the
pipes served rotate from batch to batch.

Spark hands the source nothing but string options, which it may log or show in its UI, so the Redis
password is never one of them: the options name the password file and the user, and the source
signs in from the file. An explicit password (FLOE_REDIS__PASSWORD, no file) comes from the
environment, which Spark's Python workers inherit from `floe pipeline`; it takes precedence over the
file, as it does in ``RedisSettings.resolve_password``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from floe.catalog import Catalog, Pipe
from floe.catalog.pipe_state import pipe_stopped
from floe.external import Breaker, held_back
from floe.keys import Keys, RedisClient
from floe.records import SOURCE_SCHEMA, LoadTask, QueueEntry, RowAppend
from floe.settings import RedisSettings, Settings

log = logging.getLogger("floe.pipeline.source")

ZERO = "0-0"
ROWS = "rows:"
"""Offset keys of rows streams start with this; the rest is the pipe id."""
# Entries per pipe and micro-batch under ReadAllAvailable (Trigger.AvailableNow), which sets no budget.
READ_ALL_CAP = 100_000

Entries = list[tuple[bytes, dict[bytes, bytes]]]


def _next_id(stream_id: str) -> str:
    ms, seq = stream_id.split("-")
    return f"{ms}-{int(seq) + 1}"


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, seq = stream_id.split("-")
    return int(ms), int(seq)


def rotation(pipe_ids: Iterable[str], after: str) -> list[str]:
    """Pipe ids in id order, starting with the first one after ``after`` and wrapping around."""
    ids = sorted(pipe_ids)
    return [i for i in ids if i > after] + [i for i in ids if i <= after]


def fair_shares(
    pipes: Iterable[Pipe], pending: Mapping[str, int], budget: int, after: str = ""
) -> dict[str, int]:
    """Max-min fair split of ``budget`` files over the unpaused pipes with pending entries.

    Water-filling: every pipe gets up to an equal share; what a small pipe leaves over is shared
    again among the pipes with more backlog, until the budget or the backlog is used up. Files
    that do not split evenly (and, with more pipes than budget, the single files) go to the pipes
    first in ``rotation(..., after)`` order, so moving ``after`` on from batch to batch gives every
    pipe its turn. Returns only the pipes that get files, in that order.
    """
    live = {p.id for p in pipes if not p.paused and pending.get(p.id, 0) > 0}
    order = rotation(live, after)
    shares = dict.fromkeys(order, 0)
    left = max(0, budget)
    active = order
    while left > 0 and active:
        level = left // len(active)
        if level == 0:
            # Fewer files than pipes still wanting some: one each, in rotation order.
            for pipe_id in active[:left]:
                shares[pipe_id] += 1
            break
        wanting = []
        for pipe_id in active:
            give = min(level, pending[pipe_id] - shares[pipe_id])
            shares[pipe_id] += give
            left -= give
            if shares[pipe_id] < pending[pipe_id]:
                wanting.append(pipe_id)
        active = wanting
    return {pipe_id: n for pipe_id, n in shares.items() if n > 0}


def source_redis_settings(options: dict[str, str]) -> RedisSettings:
    """The Redis settings of a reader, from its options and the environment it inherited."""
    inherited = Settings().redis
    return RedisSettings(
        url=options["redis_url"],
        username=options.get("redis_username", inherited.username),
        password_file=options.get("redis_password_file", inherited.password_file),
        password=inherited.password,
        cluster=options.get("redis_cluster", str(inherited.cluster).lower()) == "true",
        check_slots=inherited.check_slots,
    )


def logged_offset(checkpoint_dir: str, batch_id: int) -> dict[str, Any] | None:
    """This source's end offset for micro-batch ``batch_id``, as the query's offset log holds it
    (``<checkpoint>/offsets/<batch id>``: a version line, the batch's metadata, then one line per
    source, ours the only one); None when the entry is missing or not in that form."""
    try:
        lines = (Path(checkpoint_dir) / "offsets" / str(batch_id)).read_text().splitlines()
        offset = json.loads(lines[2]) if len(lines) == 3 and lines[0] == "v1" else None
    except (OSError, ValueError):
        return None
    return offset if isinstance(offset, dict) else None


def last_planned(checkpoint_dir: str) -> int:
    """The id of the last micro-batch in the query's offset log, or -1 when there is none yet.

    A query started on this checkpoint runs that batch again first if the commit log lacks it.
    """
    folder = Path(checkpoint_dir) / "offsets"
    try:
        return max((int(p.name) for p in folder.iterdir() if p.name.isdigit()), default=-1)
    except OSError:
        return -1


def logged_range(checkpoint_dir: str, batch_id: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(start, end) offsets of micro-batch ``batch_id`` from the offset log, which Spark writes
    before it runs the batch: a batch starts where the one before it ended, the first one at
    ``initialOffset``. None when either is not there to read."""
    end = logged_offset(checkpoint_dir, batch_id)
    start = {} if batch_id == 0 else logged_offset(checkpoint_dir, batch_id - 1)
    return None if end is None or start is None else (start, end)


@dataclass
class PipeRange(InputPartition):
    """Entries of one pipe's stream after ``start`` up to and including ``end``."""

    pipe_id: str
    start: str
    end: str
    rows: bool = False
    """The pipe's rows stream (channel appends) rather than its file queue."""


class FileStreamReader(DataSourceStreamReader):
    """Plans micro-batches over every unpaused pipe's queue."""

    def __init__(self, options: dict[str, str], redis: RedisSettings | None = None) -> None:
        # In Spark's Python processes the options and the inherited environment say how to reach
        # Redis; the job's driver passes its own settings.
        self.redis = redis or source_redis_settings(options)
        self.keys = Keys(options["prefix"])
        self.max_files = int(options.get("max_files", "2000"))
        self.max_appends = int(options.get("max_appends", "64"))
        drain = options.get("drain_file")
        self.drain_file = Path(drain) if drain else None
        # Where the next micro-batch's rotation starts (see fair_shares). Spark keeps one reader
        # for a query's planning, so it carries over from batch to batch; a new query (a restart)
        # starts at a point drawn from its start offset, so restarts do not favour low pipe ids.
        self._after: str | None = None
        self._held: set[str] = set()

    def _client(self) -> closing[RedisClient]:
        # One client per call, closed at once: a cluster client holds reference cycles, so its
        # sockets would otherwise stay open until the cycle collector runs.
        return closing(self.redis.client())

    def initialOffset(self) -> dict[str, Any]:
        return {}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_files)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if self.drain_file is not None and self.drain_file.exists():
            return dict(start)  # `floe pipeline` is draining: plan nothing new (pipeline/job.py)
        with self._client() as client:
            return self._latest(client, start, limit)

    def _latest(self, client: RedisClient, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        catalog = Catalog(client, self.keys)
        # A stopped pipe (its table or stage dropped or replaced) is held back as a paused one: its
        # files wait in its queue for CREATE OR REPLACE PIPE (decision 84).
        every = catalog.all(Pipe).values()
        unpaused = [p for p in every if not p.paused and pipe_stopped(catalog, p) is None]
        held = self._held_back(client, catalog, unpaused)
        unpaused = [p for p in unpaused if p.id not in held]
        pipes = [p for p in unpaused if p.source != "streaming"]
        end = dict(start)
        cap = READ_ALL_CAP if isinstance(limit, ReadAllAvailable) else self.max_appends
        self._plan_rows(client, [p.id for p in unpaused if p.source == "streaming"], end, cap)
        if isinstance(limit, ReadAllAvailable):
            planned = self._read_after(client, {p.id: READ_ALL_CAP for p in pipes}, end)
            end.update({pipe_id: entries[-1][0].decode() for pipe_id, entries in planned.items() if entries})
            return self._still_loadable(client, start, end)
        budget = int(getattr(limit, "maxRows", self.max_files))
        if self._after is None:
            # Pipe ids are 16 hex digits, so this is a point spread evenly over them.
            self._after = hashlib.sha256(json.dumps(start, sort_keys=True).encode()).hexdigest()[:16]
        self._plan_fair(client, pipes, end, budget, self._after)
        return self._still_loadable(client, start, end)

    def _still_loadable(
        self, client: RedisClient, start: dict[str, Any], end: dict[str, Any]
    ) -> dict[str, Any]:
        """``end`` less what it planned for pipes paused, stopped or dropped since the catalog was
        read. The queues are read after the catalog: a pipe paused in between would otherwise load
        files queued after ALTER PIPE ... SET PIPE_EXECUTION_PAUSED = TRUE answered. Read again
        now, after the queues, the catalog shows every pause made before those files were queued
        (one GET of its version when nothing changed)."""
        moved = [key for key, last in end.items() if last != start.get(key)]
        if not moved:
            return end
        catalog = Catalog(client, self.keys)
        pipes = {p.id: p for p in catalog.all(Pipe).values()}
        for key in moved:
            pipe = pipes.get(key[len(ROWS) :] if key.startswith(ROWS) else key)
            if pipe is None or pipe.paused or pipe_stopped(catalog, pipe) is not None:
                if key in start:
                    end[key] = start[key]
                else:
                    del end[key]
        return end

    def _held_back(self, client: RedisClient, catalog: Catalog, pipes: list[Pipe]) -> set[str]:
        """The pipes calling a remote service whose circuit breaker is open."""
        held = set(held_back(catalog, Breaker(client=client, keys=self.keys), pipes))
        if held != self._held:
            names = sorted(p.name for p in pipes if p.id in held)
            log.info("pipes held back while their remote services are unavailable: %s", names or "none")
            self._held = held
        return held

    def _plan_rows(self, client: RedisClient, pipe_ids: list[str], end: dict[str, Any], cap: int) -> None:
        """Move ``end`` on by up to ``cap`` appends of each streaming pipe, in one round trip."""
        if not pipe_ids:
            return
        with client.pipeline(transaction=False) as pipe:
            for pipe_id in pipe_ids:
                begin = str(end.get(ROWS + pipe_id, ZERO))
                pipe.xrange(self.keys.rows(pipe_id), min=f"({begin}", max="+", count=cap)
            results = cast(list[Entries], pipe.execute())
        for pipe_id, entries in zip(pipe_ids, results, strict=True):
            if entries:
                end[ROWS + pipe_id] = entries[-1][0].decode()

    def _read_after(
        self, client: RedisClient, counts: Mapping[str, int], end: Mapping[str, Any]
    ) -> dict[str, Entries]:
        """Up to ``counts[pipe]`` entries of each pipe's queue after its offset in ``end``, in one
        round trip (on a Redis Cluster, redis-py splits a pipeline without a transaction by node:
        one round trip per node)."""
        ids = list(counts)
        with client.pipeline(transaction=False) as pipe:
            for pipe_id in ids:
                begin = str(end.get(pipe_id, ZERO))
                pipe.xrange(self.keys.queue(pipe_id), min=f"({begin}", max="+", count=counts[pipe_id])
            results = cast(list[Entries], pipe.execute())
        return dict(zip(ids, results, strict=True))

    def _plan_fair(
        self, client: RedisClient, pipes: list[Pipe], end: dict[str, Any], budget: int, after: str
    ) -> None:
        """Move ``end`` on by each pipe's fair share of ``budget``.

        XLEN is the backlog estimate (one round trip for all pipes). It counts every entry still in
        the stream, so it is exact once the registrar has deleted the entries up to the start
        offset, and too high while some are left: a pipe that returns fewer entries than its share
        has none left, and a further round shares what it did not use among the others.
        """
        with client.pipeline(transaction=False) as pipe:
            for p in pipes:
                pipe.xlen(self.keys.queue(p.id))
            lengths = cast(list[int], pipe.execute())
        backlog = {p.id: n for p, n in zip(pipes, lengths, strict=True) if n > 0}
        waiting = rotation(backlog, after)
        got = dict.fromkeys(backlog, 0)
        left = budget
        while left > 0:
            shares = fair_shares(pipes, {i: backlog[i] - got[i] for i in backlog}, left, after)
            if not shares:
                break
            for pipe_id, entries in self._read_after(client, shares, end).items():
                if entries:
                    end[pipe_id] = entries[-1][0].decode()
                    got[pipe_id] += len(entries)
                    left -= len(entries)
                if len(entries) < shares[pipe_id]:
                    backlog[pipe_id] = got[pipe_id]  # it has no more
        served = [i for i in waiting if got[i] > 0]
        if served:
            # Next batch: when some waiting pipe got nothing, start after the last one served, so
            # the next ones get their turn; otherwise every pipe was served and starting one pipe
            # later just moves the files that do not split evenly on.
            self._after = served[-1] if len(served) < len(waiting) else served[0]

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        parts = []
        for key, last in sorted(end.items()):
            first = str(start.get(key, ZERO))
            if _id_key(str(last)) > _id_key(first):
                rows = key.startswith(ROWS)
                parts.append(PipeRange(key[len(ROWS) :] if rows else key, first, str(last), rows))
        return parts

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for task in self.tasks([partition]):
            yield task.source_row()

    def tasks(self, parts: Sequence[InputPartition]) -> list[LoadTask]:
        """The tasks of ``parts``' entries, read in one round trip."""
        ranges = [cast(PipeRange, p) for p in parts]
        if not ranges:
            return []
        with self._client() as client, client.pipeline(transaction=False) as pipe:
            for r in ranges:
                stream = self.keys.rows(r.pipe_id) if r.rows else self.keys.queue(r.pipe_id)
                pipe.xrange(stream, min=f"({r.start}", max=r.end)
            results = cast(list[Entries], pipe.execute())
        out: list[LoadTask] = []
        for r, entries in zip(ranges, results, strict=True):
            for sid, fields in entries:
                if r.rows:
                    out.append(LoadTask.appended(r.pipe_id, RowAppend.from_stream(sid, fields)))
                else:
                    out.append(LoadTask.queued(r.pipe_id, QueueEntry.from_stream(sid, fields)))
        return out

    def commit(self, end: dict[str, Any]) -> None:
        with self._client() as client:
            for key, last in end.items():
                stream = self.keys.rows(key[len(ROWS) :]) if key.startswith(ROWS) else self.keys.queue(key)
                client.xtrim(stream, minid=_next_id(str(last)), approximate=False)


class FloeFileSource(DataSource):
    """``spark.readStream.format("floe_files")``: files waiting in pipe queues."""

    @classmethod
    def name(cls) -> str:
        return "floe_files"

    def schema(self) -> str:
        return SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FileStreamReader(dict(self.options))
