"""The API's scrape-time queue gauges (floe.metrics.QueueCollector), against the real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest
from redis.backoff import NoBackoff
from redis.retry import Retry

from floe.catalog import Catalog, CopySpec, Pipe
from floe.heartbeat import PIPELINE
from floe.keys import Keys
from floe.metrics import QueueCollector, RedisErrors
from floe.settings import Settings
from services.dedup import Deduper, FileRef

pytestmark = pytest.mark.integration


class Counting:
    """A Redis client that counts what it is asked: calls, and pipelines with their commands."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.pipelined: list[int] = []

    def pipeline(self, transaction: bool) -> Any:
        real = self.inner.pipeline(transaction=transaction)
        counter = self

        class Pipeline:
            def __enter__(self) -> Any:
                real.__enter__()
                return self

            def __exit__(self, *exc: object) -> None:
                real.__exit__(*exc)

            def execute(self) -> list[Any]:
                counter.pipelined.append(len(real.command_stack))
                return list(real.execute())

            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

        return Pipeline()

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self.inner, name)


def pipes(catalog: Catalog, n: int, streaming: int = 0) -> list[Pipe]:
    made = [
        Pipe(
            name=f"D.S.P{i:04d}",
            copy_spec=CopySpec(table="D.S.T", stage="D.S.S"),
            table_id="t",
            stage_url="s3://b/x/",
            source="streaming" if i < streaming else "stage",
        )
        for i in range(n)
    ]
    for p in made:
        catalog.put(p)
    return made


def samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    out = {}
    for family in registry.collect():
        for s in family.samples:
            out[(s.name, s.labels.get("pipe", ""))] = s.value
    return out


def test_depth_and_oldest_age_per_pipe_in_one_round_trip(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    """Safeguard: a scrape costs one pipelined round trip whatever the number of pipes (two O(1)
    commands each), plus the catalog's version check."""
    keys = Keys(isolated_settings.redis.prefix)
    catalog = Catalog(redis_client, keys)
    made = pipes(catalog, 30, streaming=1)
    Deduper(redis_client, keys, 3600).enqueue(made[1], [FileRef("a.csv"), FileRef("b.csv")], source="rest")
    Deduper(redis_client, keys, 3600).enqueue(made[2], [FileRef("c.csv")], source="rest")
    redis_client.xadd(keys.rows(made[0].id), {"channel": "c"})  # a streaming pipe's append
    redis_client.hset(keys.heartbeat(PIPELINE), "job", "1")
    client = Counting(redis_client)
    registry = CollectorRegistry()
    errors = RedisErrors(registry)
    registry.register(QueueCollector(Catalog(client, keys), client, keys, errors))
    got = samples(registry)
    assert client.pipelined == [2 * 30 + 1]
    assert client.calls == ["get", "hgetall"]  # the catalog: its version, then (not cached yet) its pipes
    assert got[("floe_queue_depth", "D.S.P0000")] == 1
    assert got[("floe_queue_depth", "D.S.P0001")] == 2
    assert got[("floe_queue_depth", "D.S.P0002")] == 1
    assert got[("floe_queue_depth", "D.S.P0003")] == 0
    assert 0 <= got[("floe_queue_oldest_age_seconds", "D.S.P0001")] < 3600
    assert got[("floe_queue_oldest_age_seconds", "D.S.P0003")] == 0
    assert got[("floe_pipeline_heartbeat_age_seconds", "")] > 1_000_000  # beat at 1 ms after the epoch
    client.calls.clear()
    samples(registry)
    assert client.calls == ["get"]  # the catalog is cached by its version
    assert registry.get_sample_value("floe_redis_errors_total", {"operation": "queue_scrape"}) is None


def test_the_scrape_is_bounded_by_pipes(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    catalog = Catalog(redis_client, keys)
    pipes(catalog, 5)
    registry = CollectorRegistry()
    registry.register(QueueCollector(catalog, redis_client, keys, RedisErrors(registry), max_pipes=3))
    depths = [k for k in samples(registry) if k[0] == "floe_queue_depth"]
    assert [pipe for _, pipe in depths] == ["D.S.P0000", "D.S.P0001", "D.S.P0002"]


def test_redis_away_leaves_the_gauges_out_and_is_counted(isolated_settings: Settings) -> None:
    gone = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    keys = Keys(isolated_settings.redis.prefix)
    registry = CollectorRegistry()
    registry.register(QueueCollector(Catalog(gone, keys), gone, keys, RedisErrors(registry)))
    text = generate_latest(registry).decode()
    assert "floe_queue_depth" not in text
    assert registry.get_sample_value("floe_redis_errors_total", {"operation": "queue_scrape"}) == 1
