"""The consumer alone: how fast it moves S3 notifications through dedup and enqueue.

LocalStack's own S3-to-SQS delivery manages about 25 events a second here, far below what the
consumer can take, so the messages are written straight into the consumer's queue: S3 event
notifications of the exact shape S3 sends, one object per message, for distinct keys under an
auto-ingest pipe's stage. The pipe is paused, so the Spark job leaves the queued files alone.

The consumer's process group is frozen (SIGSTOP) while the queue fills and thawed (SIGCONT) when
the queue holds every message; the clock runs from the thaw until the pipe's Redis queue holds
every file (each one deduplicated and enqueued), and on until SQS reports the queue empty (every
message deleted after its Redis step). Freezing rather than restarting keeps the consumer's own
start-up out of the figure; long polls that were open when it froze may hand it the first few
batches early, which only moves them from the consumer's receive step into the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote_plus

from aiobotocore.session import get_session

from bench.harness import BenchError, FloeStack, Resources, kill_group, wait_for
from bench.throughput import create_pipe
from floe.aws import client as aws_client
from floe.aws import client_kwargs
from floe.keys import Keys
from floe.settings import Settings


def s3_event(bucket: str, key: str, size: int, region: str, when: dt.datetime) -> str:
    """The body S3 sends to SQS for one ObjectCreated:Put (keys URL-encoded, as S3 does)."""
    etag = hashlib.md5(key.encode(), usedforsecurity=False).hexdigest()
    record = {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": region,
        "eventTime": when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
        "eventName": "ObjectCreated:Put",
        "userIdentity": {"principalId": "AWS:AIDAJDPLRKLG7UEXAMPLE"},
        "requestParameters": {"sourceIPAddress": "127.0.0.1"},
        "responseElements": {"x-amz-request-id": etag[:16].upper(), "x-amz-id-2": etag},
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "floe-0",
            "bucket": {
                "name": bucket,
                "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                "arn": f"arn:aws:s3:::{bucket}",
            },
            "object": {
                "key": quote_plus(key, safe="/"),
                "size": size,
                "eTag": etag,
                "sequencer": "0055AED6DCD90281E5",
            },
        },
    }
    return json.dumps({"Records": [record]})


def _queue_depth(sqs: Any, url: str) -> int:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def run_notifications(
    stack: FloeStack,
    resources: Resources,
    count: int,
    *,
    send_threads: int = 8,
    timeout_s: float = 300.0,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Measure the consumer's files per second through dedup and enqueue; returns the figures."""
    s = stack.settings
    bucket = resources.bucket("bench-notif-")
    pipe = create_pipe(stack, bucket, "notif")
    stack.sql(f"ALTER PIPE {pipe.name.split('.')[-1]} SET PIPE_EXECUTION_PAUSED = TRUE")
    sqs = aws_client(s.aws, "sqs")
    url = sqs.get_queue_url(QueueName=s.consumer.queue_name)["QueueUrl"]
    client = s.redis.client()
    queue_key = Keys(s.redis.prefix).queue(pipe.id)

    consumer = stack.sid("consumer")
    kill_group(consumer, signal.SIGSTOP)
    thawed = False
    # Whatever LocalStack still had in flight for the earlier parts (test events, late events) would
    # count as this part's work. PurgeQueueInProgress: purged within the last minute, nothing is left.
    with contextlib.suppress(sqs.exceptions.PurgeQueueInProgress):
        sqs.purge_queue(QueueUrl=url)
    now = dt.datetime.now(dt.UTC)
    bodies = [
        s3_event(bucket, f"in/notif/f{i:06d}.csv", 1000 + i % 997, s.aws.region, now) for i in range(count)
    ]
    batches = [bodies[i : i + 10] for i in range(0, count, 10)]
    sent = 0

    def send(batch: list[str]) -> int:
        entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(batch)]
        resp = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        if resp.get("Failed"):
            raise BenchError(f"SendMessageBatch failed: {resp['Failed'][:2]}")
        return len(batch)

    try:
        with ThreadPoolExecutor(send_threads, thread_name_prefix="bench-sqs-send") as pool:
            for n in pool.map(send, batches):
                sent += n
                if on_progress is not None:
                    on_progress("filling the queue", sent, count)
        wait_for(lambda: _queue_depth(sqs, url) >= count, 60, f"{count} messages in the queue", 0.2)
        t0 = time.perf_counter()
        kill_group(consumer, signal.SIGCONT)
        thawed = True
    finally:
        if not thawed:
            kill_group(consumer, signal.SIGCONT)
    enqueued = 0

    def all_enqueued() -> bool:
        nonlocal enqueued
        enqueued = int(client.xlen(queue_key))
        if on_progress is not None:
            on_progress("consumer", enqueued, count)
        return enqueued >= count

    wait_for(all_enqueued, timeout_s, f"{count} files enqueued by the consumer", 0.01)
    t1 = time.perf_counter()
    wait_for(lambda: _queue_depth(sqs, url) == 0, timeout_s, "the SQS queue to drain", 0.05)
    t2 = time.perf_counter()
    if enqueued != count:
        raise BenchError(f"the consumer enqueued {enqueued} files, expected {count}")
    ceiling = queue_ceiling(sqs, bodies, s.consumer.concurrency, stack.settings)
    return {
        "files": count,
        "seconds": t1 - t0,
        "files_per_s": count / (t1 - t0),
        "seconds_until_queue_empty": t2 - t0,
        "files_per_s_until_queue_empty": count / (t2 - t0),
        "consumer_pollers": s.consumer.concurrency,
        "files_per_message": 1,
        "sqs_ceiling_files_per_s": ceiling,
        "consumer_over_sqs_ceiling": (count / (t2 - t0)) / ceiling if ceiling else None,
    }


def queue_ceiling(sqs: Any, bodies: list[str], pollers: int, settings: Settings) -> float:
    """Messages per second a bare loop receives and deletes (no Floe work) from a fresh queue of
    the same messages, with as many pollers as the consumer: the queue's own limit, measured in
    the same run. (Not the consumer's queue: a frozen consumer's open long polls would hide
    messages from the loop for a visibility timeout.)

    One S3 event per message means one receive per 10 files and one delete per 10 files, whatever
    the consumer does; against LocalStack that, not the Redis step, is what bounds the figure.
    """
    url = sqs.create_queue(QueueName=f"bench-ceiling-{time.time_ns()}")["QueueUrl"]
    try:
        return _drain_rate(sqs, url, bodies, pollers, settings)
    finally:
        sqs.delete_queue(QueueUrl=url)


def _drain_rate(sqs: Any, url: str, bodies: list[str], pollers: int, settings: Settings) -> float:
    with ThreadPoolExecutor(8, thread_name_prefix="bench-sqs-send") as pool:
        list(
            pool.map(
                lambda i: sqs.send_message_batch(
                    QueueUrl=url,
                    Entries=[{"Id": str(k), "MessageBody": b} for k, b in enumerate(bodies[i : i + 10])],
                ),
                range(0, len(bodies), 10),
            )
        )
    wait_for(lambda: _queue_depth(sqs, url) >= len(bodies), 60, "the ceiling run's messages", 0.2)

    async def drain() -> float:
        done = 0
        async with get_session().create_client("sqs", **client_kwargs(settings.aws)) as client:

            async def poll() -> None:
                nonlocal done
                while done < len(bodies):
                    resp = await client.receive_message(
                        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1
                    )
                    messages = resp.get("Messages", [])
                    if messages:
                        entries = [
                            {"Id": m["MessageId"], "ReceiptHandle": m["ReceiptHandle"]} for m in messages
                        ]
                        await client.delete_message_batch(QueueUrl=url, Entries=entries)
                        done += len(messages)

            started = time.perf_counter()
            await asyncio.gather(*(poll() for _ in range(pollers)))
            return len(bodies) / (time.perf_counter() - started)

    return asyncio.run(drain())
