"""A Spark Python streaming source over the per-pipe Redis Streams.

Offsets are ``{pipe_id: last stream id}``. Spark writes the planned range of every micro-batch to
its offset log before running it, so a replayed batch reads the same entries. Entries are deleted
by the registrar in the commit that makes their files' rows visible (never earlier), and
``commit(end)`` trims anything older as a safety net.

Spark hands the source nothing but string options, which it may log or show in its UI, so the Redis
password is never one of them: the options name the password file and the user, and the source
signs in from the file. An explicit password (FLOE_REDIS__PASSWORD, no file) comes from the
environment, which Spark's Python workers inherit from `floe pipeline`; it takes precedence over the
file, as it does in ``RedisSettings.resolve_password``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from floe.catalog import Catalog, Pipe
from floe.keys import Keys
from floe.settings import RedisSettings, Settings

SCHEMA = "pipe_id string, path string, size long, received_ms long, stream_id string"
ZERO = "0-0"


def _next_id(stream_id: str) -> str:
    ms, seq = stream_id.split("-")
    return f"{ms}-{int(seq) + 1}"


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, seq = stream_id.split("-")
    return int(ms), int(seq)


def source_redis_settings(options: dict[str, str]) -> RedisSettings:
    """The Redis settings of a reader, from its options and the environment it inherited."""
    inherited = Settings().redis
    return RedisSettings(
        url=options["redis_url"],
        username=options.get("redis_username", inherited.username),
        password_file=options.get("redis_password_file", inherited.password_file),
        password=inherited.password,
    )


@dataclass
class PipeRange(InputPartition):  # type: ignore[misc]
    """Entries of one pipe's stream after ``start`` up to and including ``end``."""

    pipe_id: str
    start: str
    end: str


class FileStreamReader(DataSourceStreamReader):  # type: ignore[misc]
    """Plans micro-batches over every unpaused pipe's queue."""

    def __init__(self, options: dict[str, str]) -> None:
        self.redis = source_redis_settings(options)
        self.keys = Keys(options["prefix"])
        self.max_files = int(options.get("max_files", "2000"))

    def _client(self) -> redis.Redis:
        return self.redis.client()

    def initialOffset(self) -> dict[str, Any]:
        return {}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_files)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        client = self._client()
        catalog = Catalog(client, self.keys)
        budget = (
            None if isinstance(limit, ReadAllAvailable) else int(getattr(limit, "maxRows", self.max_files))
        )
        end = dict(start)
        for pipe in sorted(catalog.all(Pipe).values(), key=lambda p: p.id):
            if pipe.paused or (budget is not None and budget <= 0):
                continue
            begin = str(start.get(pipe.id, ZERO))
            count = budget if budget is not None else 100_000
            entries = cast(
                list[tuple[bytes, dict[bytes, bytes]]],
                client.xrange(self.keys.queue(pipe.id), min=f"({begin}", max="+", count=count),
            )
            if entries:
                end[pipe.id] = entries[-1][0].decode()
                if budget is not None:
                    budget -= len(entries)
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        parts = []
        for pipe_id, last in sorted(end.items()):
            first = str(start.get(pipe_id, ZERO))
            if _id_key(str(last)) > _id_key(first):
                parts.append(PipeRange(pipe_id, first, str(last)))
        return parts

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        part = cast(PipeRange, partition)
        client = self._client()
        entries = cast(
            list[tuple[bytes, dict[bytes, bytes]]],
            client.xrange(self.keys.queue(part.pipe_id), min=f"({part.start}", max=part.end),
        )
        for sid, fields in entries:
            size = int(fields.get(b"size", b"-1"))
            yield (
                part.pipe_id,
                fields[b"path"].decode(),
                None if size < 0 else size,
                int(fields.get(b"received", b"0")),
                sid.decode(),
            )

    def commit(self, end: dict[str, Any]) -> None:
        client = self._client()
        for pipe_id, last in end.items():
            client.xtrim(self.keys.queue(pipe_id), minid=_next_id(str(last)), approximate=False)


class FloeFileSource(DataSource):  # type: ignore[misc]
    """``spark.readStream.format("floe_files")``: files waiting in pipe queues."""

    @classmethod
    def name(cls) -> str:
        return "floe_files"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FileStreamReader(dict(self.options))
