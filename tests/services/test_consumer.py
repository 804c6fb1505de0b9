"""The consumer's handling of a received batch of messages, against the real Redis."""

from __future__ import annotations

import asyncio
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


def test_a_batch_records_the_channel_and_each_forwarded_pipe_in_one_step(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """SYSTEM$PIPE_STATUS's channel fields: the queue's last pull and received message (shared by
    the auto-ingest pipes), and per pipe the last notification forwarded to it and its file, even
    when dedup skipped it (a notification for a matching path was forwarded all the same)."""
    consumer, pipe = consumer_with_pipe(isolated_settings, redis_client)
    keys = consumer.keys

    def status() -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in redis_client.hgetall(keys.status(pipe.id)).items()}

    def channel() -> dict[str, str]:
        raw = redis_client.hgetall(keys.notification_channel())
        return {k.decode(): v.decode() for k, v in raw.items()}

    consumer.handle_bodies([event("elsewhere", "in/x.csv")])  # no pipe reads it: received, not forwarded
    received = channel()
    assert set(received) == {"lastReceivedMessageTimestamp", "lastPulledFromChannelTimestamp"}
    assert status() == {}
    consumer.handle_bodies([event("inbox", "in/a.csv"), event("inbox", "in/b.csv")])
    assert status()["lastForwardedFilePath"] == "b.csv"
    forwarded = int(status()["lastForwardedMessageTimestamp"])
    assert (
        forwarded
        >= int(channel()["lastReceivedMessageTimestamp"])
        >= int(received["lastReceivedMessageTimestamp"])
    )
    consumer.handle_bodies([event("inbox", "in/a.csv")])  # seen before: still forwarded
    assert status()["lastForwardedFilePath"] == "a.csv"
    pulled = int(channel()["lastPulledFromChannelTimestamp"])
    consumer.note_pull()  # an empty poll moves the last pull only
    assert int(channel()["lastPulledFromChannelTimestamp"]) >= pulled
    assert status()["lastForwardedFilePath"] == "a.csv"


def test_a_failing_backfill_or_notification_round_never_ends_the_loop(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """The consumer's backfill and error-notification rounds log what a round raises (a Redis
    outage, an unforeseen bug) and run again at the next period; only ``stopping`` ends them."""
    consumer, _ = consumer_with_pipe(isolated_settings, redis_client)
    failures: list[BaseException] = [redis.ConnectionError("redis away"), RuntimeError("a bug")]
    rounds: list[int] = []

    def step() -> None:
        rounds.append(1)
        if failures:
            raise failures.pop(0)
        consumer.stopping.set()  # the third round succeeds and asks the loop to stop

    async def run() -> None:
        await asyncio.wait_for(consumer._every(0.01, step), 10)

    asyncio.run(run())
    assert len(rounds) == 3 and not failures
