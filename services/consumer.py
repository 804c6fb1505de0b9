"""The queue consumer: long-polls SQS, routes S3 notifications to pipes, dedups and enqueues.

A message is deleted only after the dedup-and-enqueue step for every file in it succeeded, so a
crash between the two redelivers the message and dedup makes the redelivery harmless. A message
that cannot be parsed or routed is made visible again at once, so SQS moves it to the dead-letter
queue after maxReceiveCount deliveries; the consumer itself keeps running.

SYSTEM$PIPE_STATUS's channel fields are recorded here, once per received batch (one pipelined
round trip, whatever the number of files): when the queue was last pulled and a message last
received (one hash all auto-ingest pipes share, as Snowflake's share their account's queue), and
per pipe when a notification for it was last forwarded and for which file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiobotocore.session import get_session

from floe.aws import AWS_ERRORS, client_kwargs
from floe.aws import client as aws_client
from floe.catalog import Catalog, Pipe, now_ms
from floe.errors import TransientError
from floe.keys import REDIS_ERRORS, Keys, RedisClient
from floe.metrics import ConsumerMetrics, serve
from floe.runtime import Faults, Readiness, Shutdown, setup_logging
from floe.settings import Settings
from services.backfill import Backfiller
from services.dedup import Deduper, FileRef
from services.error_notifications import ErrorNotifier
from services.notifications import MalformedMessage, ObjectCreated, parse_message, route
from services.queues import ensure_queues

log = logging.getLogger("floe.consumer")

DLQ_DEPTH_S = 30.0
"""How often a consumer reads its dead-letter queue's depth for its metrics."""


class Consumer:
    """One consumer process; several may run side by side on the same queue."""

    def __init__(
        self, settings: Settings, client: RedisClient | None = None, metrics: ConsumerMetrics | None = None
    ) -> None:
        self.settings = settings
        self.redis = client or settings.redis.client()
        self.keys = Keys(settings.redis.prefix)
        self.catalog = Catalog(self.redis, self.keys)
        self.metrics = metrics or ConsumerMetrics.create()
        self.deduper = Deduper(self.redis, self.keys, settings.retention_seconds, self.metrics.files)
        self.stopping = asyncio.Event()
        self.faults = Faults(settings.faults)
        self.handled = 0
        self._dlq: tuple[Any, str] | None = None
        # Names this process in the leases that let one consumer at a time backfill a pipe or send
        # its error notifications.
        holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.backfiller = Backfiller(settings, self.redis, self.catalog, holder, self.metrics.files)
        self.notifier = ErrorNotifier(settings, self.redis, self.catalog, holder)

    def handle_bodies(self, bodies: list[str]) -> list[int | MalformedMessage]:
        """Dedup and enqueue the files of a received batch of messages, in one Redis step per pipe.

        Returns, per message, the files it newly enqueued or the MalformedMessage that makes it a
        poison message. Raises TransientError when Redis is unavailable (nothing is then known to
        be enqueued, and every message of the batch must come back).
        """
        received = now_ms()
        outcomes: list[int | MalformedMessage] = [0] * len(bodies)
        parsed: list[tuple[int, list[ObjectCreated]]] = []
        for i, body in enumerate(bodies):
            try:
                parsed.append((i, parse_message(body)))
            except MalformedMessage as exc:
                outcomes[i] = exc
        if delay := self.faults.current().enqueue_delay_s:
            time.sleep(delay)
        try:
            forwarded = self._enqueue(parsed, outcomes)
            self._note_channel(received, forwarded)
        except REDIS_ERRORS as exc:
            self.metrics.redis_errors.inc("enqueue")
            raise TransientError(f"redis unavailable: {exc}") from exc
        return outcomes

    def _note_channel(self, received: int, forwarded: dict[str, str]) -> None:
        """Record a received batch for SYSTEM$PIPE_STATUS in one pipelined round trip: the queue was
        pulled and a message received at ``received``; each pipe in ``forwarded`` (pipe id -> the
        last of its files in the batch) was forwarded a notification now. After the enqueue, so
        a crash in between redelivers the batch, which records it again."""
        now = now_ms()
        channel = self.keys.notification_channel()
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(channel, "lastPulledFromChannelTimestamp", str(received))
            pipe.hset(channel, "lastReceivedMessageTimestamp", str(received))
            for pipe_id, path in forwarded.items():
                status = self.keys.status(pipe_id)
                pipe.hset(status, "lastForwardedMessageTimestamp", str(now))
                pipe.hset(status, "lastForwardedFilePath", path)
            pipe.execute()

    def note_pull(self) -> None:
        """Record an empty poll of the queue (SYSTEM$PIPE_STATUS's lastPulledFromChannelTimestamp);
        best effort: a failure here is the next poll's to notice."""
        try:
            with self.redis.pipeline(transaction=False) as pipe:
                pipe.hset(self.keys.notification_channel(), "lastPulledFromChannelTimestamp", str(now_ms()))
                pipe.execute()
        except REDIS_ERRORS as exc:
            self.metrics.redis_errors.inc("note_pull")
            log.debug("could not record a poll of the queue: %s", exc)

    def _one_by_one(self, bodies: list[str]) -> list[int | MalformedMessage]:
        """Each message on its own, so one that breaks Floe in an unforeseen way fails alone."""
        outcomes: list[int | MalformedMessage] = []
        for body in bodies:
            try:
                outcomes.append(self.handle_bodies([body])[0])
            except TransientError:
                raise
            except Exception as exc:
                log.exception("unexpected error on a message")
                outcomes.append(MalformedMessage(f"unexpected error: {type(exc).__name__}: {exc}"))
        return outcomes

    def _enqueue(
        self, parsed: list[tuple[int, list[ObjectCreated]]], outcomes: list[int | MalformedMessage]
    ) -> dict[str, str]:
        """Route and enqueue the parsed messages' files; the pipes forwarded a file -> its last one."""
        if not parsed:
            return {}
        pipes = list(self.catalog.all(Pipe).values())
        by_pipe: dict[str, tuple[Pipe, list[FileRef], list[int]]] = {}
        for i, records in parsed:
            unknown: list[str] = []
            routed = False
            for rec in records:
                matches, known = route(rec, pipes)
                if not known:
                    unknown.append(f"s3://{rec.bucket}/{rec.key}")
                elif not matches:  # a PATTERN or prefix filters it out: its journey ends here
                    log.debug("no pipe loads this file", extra={"file": f"s3://{rec.bucket}/{rec.key}"})
                for pipe, rel in matches:
                    _, files, owners = by_pipe.setdefault(pipe.id, (pipe, [], []))
                    files.append(FileRef(rel, rec.size, rec.event_ms))
                    owners.append(i)
                    routed = True
            if unknown and not routed:
                outcomes[i] = MalformedMessage(f"no auto-ingest pipe reads bucket of {', '.join(unknown)}")
        forwarded: dict[str, str] = {}
        for pipe, files, owners in by_pipe.values():
            forwarded[pipe.id] = files[-1].path
            # The Deduper logs each file, enqueued or skipped (its journey's first line).
            flags = self.deduper.enqueue(pipe, files, source="notification")
            for new, owner in zip(flags, owners, strict=True):
                count = outcomes[owner]
                if isinstance(count, int):
                    outcomes[owner] = count + int(new)
        return forwarded

    async def _poll(self, sqs: Any, url: str) -> None:
        c = self.settings.consumer
        while not self.stopping.is_set():
            try:
                resp = await sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=c.wait_time_s,
                    VisibilityTimeout=c.visibility_timeout_s,
                    AttributeNames=["ApproximateReceiveCount"],
                )
            except AWS_ERRORS as exc:  # a broken connection must not kill the loop
                self.metrics.sqs.errors.labels("receive").inc()
                log.warning("receive failed, retrying: %s", exc)
                await asyncio.sleep(1)
                continue
            messages: list[dict[str, Any]] = resp.get("Messages", [])
            self.metrics.sqs.received.inc(len(messages))
            if not messages:
                await asyncio.to_thread(self.note_pull)
                continue
            self.faults.hit("consumer.after_receive")
            pending = {m["MessageId"]: m for m in messages}
            heartbeat = asyncio.create_task(self._keep_invisible(sqs, url, pending))
            done: list[dict[str, str]] = []
            try:
                outcomes = await self._outcomes(messages)
                for msg, outcome in zip(messages, outcomes or [], strict=False):
                    if isinstance(outcome, MalformedMessage):
                        count = msg.get("Attributes", {}).get("ApproximateReceiveCount", "?")
                        log.error(
                            "poison message %s (delivery %s): %s", msg["MessageId"], count, outcome.message
                        )
                        pending.pop(msg["MessageId"])
                        await self._release(sqs, url, msg)
                    else:
                        done.append({"Id": msg["MessageId"], "ReceiptHandle": msg["ReceiptHandle"]})
                if done:
                    self.faults.hit("consumer.after_enqueue")
                    await self._delete(sqs, url, done)
                    self.handled += len(done)
            finally:
                heartbeat.cancel()
            if outcomes is None:
                await self._wait_for_redis()

    async def _outcomes(self, messages: list[dict[str, Any]]) -> list[int | MalformedMessage] | None:
        """handle_bodies for a received batch; None while Redis is unavailable."""
        bodies = [m["Body"] for m in messages]
        try:
            try:
                return await asyncio.to_thread(self.handle_bodies, bodies)
            except TransientError:
                raise
            except Exception:
                log.exception("unexpected error on a batch of %d messages; retrying one by one", len(bodies))
                return await asyncio.to_thread(self._one_by_one, bodies)
        except TransientError as exc:
            # Leave the whole batch invisible: it comes back after the visibility timeout, by when
            # Redis should answer again.
            log.warning("Redis is unavailable; %d messages will be retried: %s", len(bodies), exc.message)
            return None

    async def _keep_invisible(self, sqs: Any, url: str, pending: dict[str, dict[str, Any]]) -> None:
        """Extend the visibility of a received batch until it is handled.

        Messages of one batch are handled one after another, so a slow step (a Redis failover, a
        large message) could outlast the visibility timeout of those still waiting, and SQS would
        hand them to another poller and count a delivery towards the dead-letter queue. Dedup
        would keep such a redelivery harmless; extending the visibility avoids it.
        """
        visibility = self.settings.consumer.visibility_timeout_s
        while pending:
            await asyncio.sleep(max(0.5, visibility / 2))
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": visibility}
                for i, m in enumerate(list(pending.values()))
            ]
            try:
                await sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
                log.info("extended the visibility of %d in-flight messages by %d s", len(entries), visibility)
            except AWS_ERRORS as exc:  # best effort: dedup still protects a redelivery
                self.metrics.sqs.errors.labels("extend").inc()
                log.warning("could not extend the visibility of in-flight messages: %s", exc)

    async def _wait_for_redis(self) -> None:
        """Stop receiving while Redis is away, so messages don't burn deliveries meanwhile."""
        while not self.stopping.is_set():
            try:
                await asyncio.to_thread(self.redis.ping)
                log.info("Redis answers again; resuming")
                return
            except REDIS_ERRORS:
                self.metrics.redis_errors.inc("ping")
                await asyncio.sleep(1)

    async def _release(self, sqs: Any, url: str, msg: dict[str, Any]) -> None:
        try:
            await sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0
            )
            self.metrics.sqs.released.inc()
        except AWS_ERRORS as exc:
            self.metrics.sqs.errors.labels("release").inc()
            log.warning("could not release message %s: %s", msg["MessageId"], exc)

    async def _delete(self, sqs: Any, url: str, entries: list[dict[str, str]]) -> None:
        try:
            resp = await sqs.delete_message_batch(QueueUrl=url, Entries=entries)
            failures = resp.get("Failed", [])
            self.metrics.sqs.deleted.inc(len(entries) - len(failures))
            if failures:
                self.metrics.sqs.errors.labels("delete").inc(len(failures))
            for failed in failures:
                log.warning("delete failed for %s: %s", failed.get("Id"), failed.get("Message"))
        except AWS_ERRORS as exc:
            self.metrics.sqs.errors.labels("delete").inc()
            # Not deleting is safe: the message comes back and dedup skips its files.
            log.warning("delete batch failed: %s", exc)

    async def run(self, ready: Readiness | None = None) -> None:
        """Poll until asked to stop; in-flight messages are finished first."""
        session = get_session()
        async with session.create_client("sqs", **client_kwargs(self.settings.aws)) as sqs:
            url = await self._queue_url(sqs)
            if ready is not None:
                ready.set()
            log.info("consuming %s with %d pollers", url, self.settings.consumer.concurrency)
            tasks = [
                asyncio.create_task(self._poll(sqs, url)) for _ in range(self.settings.consumer.concurrency)
            ]
            # Backfills and error notifications run in the consumers: long-running, several, and
            # with Redis and AWS at hand (decisions 75 and 76).
            rounds = (
                (self.settings.backfill.poll_s, self.backfiller.run_once),
                (self.settings.error_notifications.poll_s, self.notifier.run_once),
                (DLQ_DEPTH_S, self.read_dlq_depth),
            )
            tasks += [asyncio.create_task(self._every(period, step)) for period, step in rounds]
            await self.stopping.wait()
            log.info("draining: finishing in-flight messages")
            await asyncio.gather(*tasks, return_exceptions=True)
            self.backfiller.close()
            self.notifier.close()

    async def _every(self, period_s: float, step: Callable[[], object]) -> None:
        """Run ``step`` (a backfill or error-notification round) in a thread every ``period_s``
        until asked to stop. Its failures are logged and never end the loop or the process: both
        pick up where they were at the next round (their state is in Redis)."""
        while not self.stopping.is_set():
            try:
                await asyncio.to_thread(step)
            except REDIS_ERRORS as exc:
                self.metrics.redis_errors.inc(step.__qualname__)
                log.warning("Redis is unavailable; %s waits for the next round: %s", step.__qualname__, exc)
            except Exception:
                log.exception("%s failed; the next round tries again", step.__qualname__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), period_s)

    def read_dlq_depth(self) -> None:
        """Set ``floe_sqs_dlq_messages`` from the dead-letter queue's ApproximateNumberOfMessages
        (one SQS call every ``DLQ_DEPTH_S``, whatever the number of scrapes); a failure is counted
        and leaves the last value."""
        try:
            if self._dlq is None:
                sqs = aws_client(self.settings.aws, "sqs")
                self._dlq = (sqs, sqs.get_queue_url(QueueName=self.settings.consumer.dlq_name)["QueueUrl"])
            sqs, url = self._dlq
            depth = "ApproximateNumberOfMessages"
            attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[depth])
            self.metrics.sqs.dlq_depth.set(int(attributes["Attributes"][depth]))
        except AWS_ERRORS as exc:
            self.metrics.sqs.errors.labels("dlq_depth").inc()
            log.debug("could not read the dead-letter queue's depth: %s", exc)

    async def _queue_url(self, sqs: Any) -> str:
        del sqs  # the queues are created once, with the sync client, before polling starts
        return (await asyncio.to_thread(ensure_queues, aws_client(self.settings.aws, "sqs"), self.settings))[
            0
        ]


def main(settings: Settings) -> None:
    """Entry point of `floe consumer`."""
    setup_logging(settings, "consumer")
    ready = Readiness(settings, "consumer")
    consumer = Consumer(settings)
    # Before the ready file: its log line says where the metrics are, or why there are none.
    serve(
        consumer.metrics.registry,
        settings.api.host,
        settings.consumer.metrics_port,
        "consumer",
        "FLOE_CONSUMER__METRICS_PORT",
        settings.api.resolve_metrics_token(),
    )
    loop = asyncio.new_event_loop()

    def drain() -> None:
        loop.call_soon_threadsafe(consumer.stopping.set)

    shutdown = Shutdown(on_first=drain).install()
    try:
        loop.run_until_complete(consumer.run(ready))
    finally:
        ready.clear()
        loop.close()
        log.info("stopped after %d messages (drain requested: %s)", consumer.handled, shutdown.requested)
