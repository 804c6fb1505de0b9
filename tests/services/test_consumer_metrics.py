"""What the consumer counts (floe.metrics.ConsumerMetrics): files per pipe, Redis errors, and the
dead-letter queue's depth. Against the real Redis and LocalStack; the SQS receive, delete and
release counts of a running consumer are in tests/e2e/test_metrics.py."""

from __future__ import annotations

import json

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from floe.aws import client as aws_client
from floe.catalog import Catalog
from floe.errors import TransientError
from floe.keys import Keys
from floe.records import QueueEntry
from floe.settings import Settings
from services.queues import ensure_queues
from tests.services.test_consumer import consumer_with_pipe

pytestmark = pytest.mark.integration


def event(key: str, event_time: str) -> str:
    record = {
        "eventName": "ObjectCreated:Put",
        "eventTime": event_time,
        "s3": {"bucket": {"name": "inbox"}, "object": {"key": key, "size": 10}},
    }
    return json.dumps({"Records": [record]})


def test_files_are_counted_per_pipe_and_carry_their_event_time(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    consumer, pipe = consumer_with_pipe(isolated_settings, redis_client)
    consumer.handle_bodies([event("in/a.csv", "2026-01-02T03:04:05.678Z"), event("in/b.csv", "?")])
    consumer.handle_bodies([event("in/a.csv", "2026-01-02T03:04:05.678Z")])  # a redelivery
    registry = consumer.metrics.registry
    labels = {"pipe": pipe.name, "source": "notification"}
    assert registry.get_sample_value("floe_files_received_total", labels) == 3
    assert registry.get_sample_value("floe_files_enqueued_total", labels) == 2
    queue = Keys(isolated_settings.redis.prefix).queue(pipe.id)
    entries = [QueueEntry.from_stream(sid, f) for sid, f in redis_client.xrange(queue)]
    assert [(e.path, e.put_ms) for e in entries] == [("a.csv", 1_767_323_045_678), ("b.csv", None)]


def test_redis_away_is_counted(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> None:
    consumer, _ = consumer_with_pipe(isolated_settings, redis_client)
    consumer.redis = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    consumer.catalog = Catalog(consumer.redis, consumer.keys)
    with pytest.raises(TransientError):
        consumer.handle_bodies([event("in/a.csv", "2026-01-02T03:04:05Z")])
    consumer.note_pull()
    registry = consumer.metrics.registry
    assert registry.get_sample_value("floe_redis_errors_total", {"operation": "enqueue"}) == 1
    assert registry.get_sample_value("floe_redis_errors_total", {"operation": "note_pull"}) == 1


def test_the_dead_letter_queue_depth_is_read_from_sqs(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    consumer, _ = consumer_with_pipe(isolated_settings, redis_client)
    sqs = aws_client(isolated_settings.aws, "sqs")
    ensure_queues(sqs, isolated_settings)
    dlq = sqs.get_queue_url(QueueName=isolated_settings.consumer.dlq_name)["QueueUrl"]
    try:
        for i in range(2):
            sqs.send_message(QueueUrl=dlq, MessageBody=f"poison {i}")
        consumer.read_dlq_depth()
        assert consumer.metrics.registry.get_sample_value("floe_sqs_dlq_messages") == 2
    finally:
        sqs.delete_queue(QueueUrl=dlq)
        sqs.delete_queue(
            QueueUrl=sqs.get_queue_url(QueueName=isolated_settings.consumer.queue_name)["QueueUrl"]
        )


def test_a_dead_letter_queue_sqs_cannot_answer_for_is_counted(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    consumer, _ = consumer_with_pipe(isolated_settings, redis_client)  # its queues were never created
    consumer.read_dlq_depth()
    assert (
        consumer.metrics.registry.get_sample_value("floe_sqs_errors_total", {"operation": "dlq_depth"}) == 1
    )
    assert consumer.metrics.registry.get_sample_value("floe_sqs_dlq_messages") == 0
