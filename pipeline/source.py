"""A Spark Python streaming source over the per-pipe Redis Streams.

Offsets are ``{pipe_id: last stream id}``. Spark writes the planned range of every micro-batch to
its offset log before running it, so a replayed batch reads the same entries. Entries are deleted
by the registrar in the commit that makes their files' rows visible (never earlier), and
``commit(end)`` trims anything older as a safety net.
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

SCHEMA = "pipe_id string, path string, size long, received_ms long, stream_id string"
ZERO = "0-0"


def _next_id(stream_id: str) -> str:
    ms, seq = stream_id.split("-")
    return f"{ms}-{int(seq) + 1}"


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, seq = stream_id.split("-")
    return int(ms), int(seq)


@dataclass
class PipeRange(InputPartition):  # type: ignore[misc]
    """Entries of one pipe's stream after ``start`` up to and including ``end``."""

    pipe_id: str
    start: str
    end: str


class FileStreamReader(DataSourceStreamReader):  # type: ignore[misc]
    """Plans micro-batches over every unpaused pipe's queue."""

    def __init__(self, options: dict[str, str]) -> None:
        self.url = options["redis_url"]
        self.keys = Keys(options["prefix"])
        self.max_files = int(options.get("max_files", "2000"))

    def _client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

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
