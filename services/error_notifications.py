"""Error notifications: the files whose load failed, published with Snowflake's payload to the SNS
topic of each pipe's ERROR_INTEGRATION (a notification integration).

Who publishes: the consumers, from the pipe's load events. The registrar's commit, the one step
that makes a file's outcome final, already appends a load event (``{p:<id>}:events``: path, time)
for each file it commits, in the same script as the file's terminal state. Each consumer process
looks every ``error_notifications.poll_s`` at the pipes with an ERROR_INTEGRATION (and an ON_ERROR
other than CONTINUE, for which Snowflake sends none), takes the pipe's lease (``SET NX PX``), reads
the events after the pipe's cursor, publishes one message per event whose file is LOAD_FAILED, and
then moves the cursor past what SNS took. So:

- *Nothing is lost*: the cursor moves only past events whose message SNS accepted (or that needed
  none). A crash between the publish and the cursor's move sends those messages again: delivery is
  at least once, as Snowflake's is. A message keeps its ``messageId`` when sent again (a UUID made
  from the pipe incarnation and the event's id), so a subscriber can drop repeats.
- *Nothing is doubled or held back in a load*: publishing runs apart from loading, after the commit;
  SNS being slow, refusing or gone changes no table, no history and no queue. A message SNS refuses
  is tried again every step (the events after it wait behind it, in order) until it is
  ``give_up_after_s`` old, then dropped with an error in the log.
- *Several consumers*: the lease lets one at a time publish a pipe's messages; it is released after
  each step. One that dies holding it delays the pipe's messages by ``lease_s``; the next holder
  starts from the cursor, so it sends again at most the dead one's last step.
- The integration is read at each step: disabled or dropped, the failures meanwhile are passed over
  (logged), not kept for later.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import boto3

from floe.aws import AWS_ERRORS, client_kwargs
from floe.catalog import Catalog, NotificationIntegration, Pipe, now_ms
from floe.history import FileState, iso_utc
from floe.keys import Keys, RedisClient, one_slot
from floe.settings import AwsSettings, Settings

log = logging.getLogger("floe.errors")

MESSAGE_TYPE = "INGEST_FAILED_FILE"
"""Snowflake's messageType for a file a pipe failed to load."""
_IDS = uuid.UUID("5b3c1a52-7d0e-4c61-9f0b-2f6a2b8e6c11")
"""Namespace of the messageIds (UUID 5 of pipe incarnation and load event), so a message sent again
carries the same id."""
SNS_BATCH = 10
"""SNS's PublishBatch takes at most ten messages."""
MAX_ERROR_CHARS = 4000
"""firstError is cut to this, so ten messages stay far below SNS's 256 KiB per call."""
_ROUNDS = 10
"""Batches of events one step reads per pipe, so one pipe's backlog does not hold up the others."""

# KEYS[1] the lease. ARGV[1] holder, ARGV[2] ms. 1 when this call took it.
_TAKE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
# KEYS[1] the lease, KEYS[2] the cursor. ARGV[1] holder, ARGV[2] event id. 1 when moved: only its
# holder moves the cursor, so one whose lease ran out (and another took over) does not.
_ADVANCE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""
# KEYS[1] the lease. ARGV[1] holder.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS[1] the events stream, KEYS[2] the cursor: the cursor to the latest event, if any.
_SKIP = """
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last > 0 then redis.call('SET', KEYS[2], last[1][1]) end
return 0
"""

Publish = Callable[[str, Sequence[tuple[str, str]]], list[bool]]
"""Publishes (message id, body) pairs to a topic ARN; per pair, whether SNS took it."""


def message_id(pipe_id: str, event_id: str) -> str:
    """The messageId of the notification for one load event: the same each time it is sent."""
    return str(uuid.uuid5(_IDS, f"{pipe_id}/{event_id}"))


def payload(account: str, pipe: Pipe, states: Sequence[FileState], msg_id: str, at_ms: int) -> dict[str, Any]:
    """Snowflake's INGEST_FAILED_FILE message (docs: "Error notifications for Snowpipe", AWS SNS):
    one per failure event here, so ``messages`` holds one file."""
    return {
        "version": "1.0",
        "messageId": msg_id,
        "messageType": MESSAGE_TYPE,
        "timestamp": iso_utc(at_ms),
        "accountName": account,
        "pipeName": pipe.name,
        "tableName": pipe.copy_spec.table,
        "stageLocation": pipe.stage_url,
        "messages": [
            {
                "fileName": s.path,
                "firstError": (s.first_error or s.system_error or "Load failed")[:MAX_ERROR_CHARS],
            }
            for s in states
        ],
    }


class SnsPublisher:
    """Publishes with Floe's AWS credentials, through a client per topic region."""

    def __init__(self, aws: AwsSettings) -> None:
        self.aws = aws
        self._clients: dict[str, Any] = {}
        self._refusing: set[str] = set()
        """Topics whose last call failed: their refusals are logged once, not at every retry."""

    def close(self) -> None:
        """Close the clients' connections."""
        for sns in self._clients.values():
            sns.close()
        self._clients.clear()

    def _client(self, topic_arn: str) -> Any:
        region = topic_arn.split(":")[3] or self.aws.region
        if region not in self._clients:
            kwargs = {**client_kwargs(self.aws), "region_name": region}
            self._clients[region] = boto3.session.Session().client("sns", **kwargs)
        return self._clients[region]

    def __call__(self, topic_arn: str, messages: Sequence[tuple[str, str]]) -> list[bool]:
        """PublishBatch, ten at a time; a call that fails whole fails its messages, logged."""
        ok: list[bool] = []
        for start in range(0, len(messages), SNS_BATCH):
            chunk = messages[start : start + SNS_BATCH]
            try:
                resp = self._client(topic_arn).publish_batch(
                    TopicArn=topic_arn,
                    PublishBatchRequestEntries=[
                        {"Id": str(i), "Message": body} for i, (_, body) in enumerate(chunk)
                    ],
                )
            except AWS_ERRORS as exc:
                self._refused(
                    topic_arn, f"SNS refused {len(chunk)} error notifications for {topic_arn}: {exc}"
                )
                ok += [False] * len(chunk)
                continue
            failed = {str(f.get("Id")) for f in resp.get("Failed", ())}
            for f in resp.get("Failed", ()):
                self._refused(
                    topic_arn, f"SNS refused an error notification for {topic_arn}: {f.get('Message')}"
                )
            if not failed and topic_arn in self._refusing:
                self._refusing.discard(topic_arn)
                log.info("SNS takes error notifications for %s again", topic_arn)
            ok += [str(i) not in failed for i in range(len(chunk))]
        return ok

    def _refused(self, topic_arn: str, message: str) -> None:
        """Log a refusal: a warning when the topic starts refusing, then quietly while it goes on
        (the messages are retried every poll)."""
        log.log(logging.DEBUG if topic_arn in self._refusing else logging.WARNING, message)
        self._refusing.add(topic_arn)


class ErrorNotifier:
    """Publishes the pipes' load failures; one per consumer process (``run_once`` each poll)."""

    def __init__(
        self,
        settings: Settings,
        client: RedisClient,
        catalog: Catalog,
        holder: str,
        publish: Publish | None = None,
    ) -> None:
        self.settings = settings
        self.redis = client
        self.keys = Keys(settings.redis.prefix)
        self.catalog = catalog
        self.holder = holder
        """Names this process in the leases it takes."""
        self._sns: SnsPublisher | None = None
        if publish is None:
            self._sns = publish = SnsPublisher(settings.aws)
        self.publish: Publish = publish
        self._take = client.register_script(_TAKE)
        self._advance = client.register_script(_ADVANCE)
        self._release = client.register_script(_RELEASE)

    def close(self) -> None:
        """Close the SNS clients."""
        if self._sns is not None:
            self._sns.close()

    def run_once(self) -> int:
        """One step over every pipe that notifies; the messages SNS took."""
        sent = 0
        for pipe in self.catalog.all(Pipe).values():
            if notifies(pipe):
                sent += self.notify(pipe)
        return sent

    def notify(self, pipe: Pipe) -> int:
        """Publish the failures of ``pipe``'s load events after its cursor, if this process takes
        its lease; the messages SNS took."""
        lease = self.keys.lease(pipe.id, "errors")
        ms = int(self.settings.error_notifications.lease_s * 1000)
        if not self._take(keys=[lease], args=[self.holder, ms]):
            return 0
        try:
            return self._rounds(pipe, lease)
        finally:
            self._release(keys=[lease], args=[self.holder])

    def _rounds(self, pipe: Pipe, lease: str) -> int:
        cursor_key, batch = self.keys.error_cursor(pipe.id), self.settings.error_notifications.batch_events
        one_slot([lease, cursor_key], "error notification cursor")
        sent = 0
        for _ in range(_ROUNDS):
            cursor = self.redis.get(cursor_key)
            start = f"({cursor.decode()}" if cursor else "-"
            events = self.redis.xrange(self.keys.events(pipe.id), min=start, max="+", count=batch)
            if not events:
                break
            done, n, held_back = self._send(pipe, [(sid.decode(), f[b"path"].decode()) for sid, f in events])
            sent += n
            if done is not None and not self._advance(keys=[lease, cursor_key], args=[self.holder, done]):
                log.warning("lost the error-notification lease mid-step", extra={"pipe": pipe.name})
                break
            if held_back or len(events) < batch:
                break
        return sent

    def _send(self, pipe: Pipe, events: list[tuple[str, str]]) -> tuple[str | None, int, bool]:
        """Publish the failures among ``events`` (id, path), in order; the id the cursor may move
        to (None: not past the first), the messages SNS took, and whether one was held back."""
        integration = self.catalog.find(NotificationIntegration, pipe.error_integration or "")
        names = [self.keys.file(pipe.id, path) for _, path in events]
        one_slot(names, "MGET of file states")
        raw = self.redis.mget(names)
        failed = [
            (sid, FileState.model_validate_json(v))
            for (sid, _), v in zip(events, raw, strict=True)
            if v is not None and json.loads(v).get("status") == "LOAD_FAILED"
        ]
        if integration is None or not integration.enabled:
            if failed:
                log.warning(
                    "%d load failures not notified: integration %s is %s",
                    len(failed),
                    pipe.error_integration,
                    "dropped" if integration is None else "disabled",
                    extra={"pipe": pipe.name},
                )
            return events[-1][0], 0, False
        messages = []
        for sid, state in failed:
            msg = message_id(pipe.id, sid)
            messages.append((msg, json.dumps(payload(self.settings.account, pipe, [state], msg, _ms(sid)))))
        took = self.publish(integration.aws_sns_topic_arn, messages) if messages else []
        refused = {sid for (sid, _), ok in zip(failed, took, strict=True) if not ok}
        done: str | None = None
        now = now_ms()
        give_up = self.settings.error_notifications.give_up_after_s * 1000
        for sid, path in events:
            if sid in refused:
                if now - _ms(sid) < give_up:
                    return done, sum(took), True
                log.error(
                    "gave up the error notification of a load that failed at %s: SNS refused it until "
                    "error_notifications.give_up_after_s passed",
                    iso_utc(_ms(sid)),
                    extra={"pipe": pipe.name, "file": path},
                )
            done = sid
        if took:
            log.info(
                "%d error notifications sent to %s",
                sum(took),
                integration.aws_sns_topic_arn,
                extra={"pipe": pipe.name},
            )
        return done, sum(took), False


def notifies(pipe: Pipe) -> bool:
    """Whether ``pipe``'s failures are published: it names an ERROR_INTEGRATION, loads files, and
    fails whole files (Snowflake sends none with ON_ERROR = CONTINUE)."""
    return (
        pipe.error_integration is not None
        and pipe.source == "stage"
        and pipe.copy_spec.on_error != "CONTINUE"
    )


def skip_past_events(client: RedisClient, keys: Keys, pipe_id: str) -> None:
    """Move the pipe's cursor to its latest load event, so failures from before now are never
    notified: for a pipe incarnation that gains an ERROR_INTEGRATION after it has loaded files."""
    names = [keys.events(pipe_id), keys.error_cursor(pipe_id)]
    one_slot(names, "error notification cursor")
    client.register_script(_SKIP)(keys=names)


def _ms(event_id: str) -> int:
    """The time (ms) of a stream entry's id, ``<ms>-<seq>``."""
    return int(event_id.split("-", 1)[0])
