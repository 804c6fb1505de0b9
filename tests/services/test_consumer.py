"""The consumer's handling of a received batch of messages, against the real Redis."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
import redis
from redis.exceptions import SlotNotCoveredError

from floe.catalog import Catalog, CopySpec, Pipe
from floe.errors import TransientError
from floe.keys import Keys, RedisClient
from floe.settings import Settings
from services.consumer import Consumer
from services.notifications import MalformedMessage

pytestmark = pytest.mark.integration


def event(bucket: str, key: str, size: int = 10) -> str:
    record = {
        "eventSource": "aws:s3",
        "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": bucket}, "object": {"key": key, "size": size}},
    }
    return json.dumps({"Records": [record]})


def consumer_with_pipe(settings: Settings, client: redis.Redis) -> tuple[Consumer, Pipe]:
    pipe = Pipe(
        name="D.S.P",
        copy_spec=CopySpec(table="D.S.T", stage="D.S.S"),
        table_id="t",
        stage_url="s3://inbox/in/",
        auto_ingest=True,
    )
    Catalog(client, Keys(settings.redis.prefix)).put(pipe)
    return Consumer(settings, client), pipe


def test_a_batch_is_one_redis_step_per_pipe_and_poison_messages_stand_alone(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """Safeguard: a received batch is deduplicated and enqueued together, but each message keeps
    its own outcome: the poison ones are singled out (for the dead-letter queue), the others are
    acknowledged with the files they enqueued, a repeated path enqueues once."""
    consumer, pipe = consumer_with_pipe(isolated_settings, redis_client)
    bodies = [
        event("inbox", "in/a.csv"),
        "not json",
        event("elsewhere", "in/x.csv"),
        event("inbox", "in/b.csv"),
        event("inbox", "in/a.csv"),
        event("inbox", "out/filtered.csv"),  # outside the stage path: skipped, not poison
    ]
    outcomes = consumer.handle_bodies(bodies)
    assert [type(o).__name__ if isinstance(o, MalformedMessage) else o for o in outcomes] == [
        1,
        "MalformedMessage",
        "MalformedMessage",
        1,
        0,
        0,
    ]
    keys = Keys(isolated_settings.redis.prefix)
    queued = [fields[b"path"].decode() for _, fields in redis_client.xrange(keys.queue(pipe.id))]
    assert queued == ["a.csv", "b.csv"]


def test_redis_away_fails_the_whole_batch_as_transient(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """Safeguard: while Redis is unreachable nothing is acknowledged (every message of the batch
    comes back), and the error is transient, not poison."""
    consumer, _ = consumer_with_pipe(isolated_settings, redis_client)
    consumer.redis = redis.Redis(port=1, socket_connect_timeout=0.2)
    consumer.catalog = Catalog(consumer.redis, consumer.keys)
    with pytest.raises(TransientError):
        consumer.handle_bodies([event("inbox", "in/a.csv"), event("inbox", "in/b.csv")])


class NoSlotServed:
    """A Redis Cluster client whose nodes serve none of Floe's slots: every command raises what
    redis-py raises then, a RedisClusterException, which is not a RedisError."""

    def __getattr__(self, name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise SlotNotCoveredError(f"{name}: slot 866 is not covered by the cluster")

        return refuse


def test_a_cluster_with_a_slot_no_node_serves_fails_the_batch_as_transient(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """Safeguard: a cluster's own exception is 'Redis unavailable' too, not an unexpected error that
    would send every message through the one-by-one path and, as poison, towards the dead-letter queue."""
    consumer, _ = consumer_with_pipe(isolated_settings, redis_client)
    consumer.redis = cast(RedisClient, NoSlotServed())
    consumer.catalog = Catalog(consumer.redis, consumer.keys)
    with pytest.raises(TransientError, match="not covered"):
        consumer.handle_bodies([event("inbox", "in/a.csv")])
