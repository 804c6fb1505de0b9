"""S3 event notifications: parsing the messages, and wiring buckets to Floe's queue."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from floe.catalog import Pipe
from floe.errors import TerminalError

NOTIFICATION_ID_PREFIX = "floe-"


class MalformedMessage(TerminalError):
    """A queue message that is not an S3 notification Floe can use."""


@dataclass(frozen=True)
class ObjectCreated:
    """One object-created record of a notification."""

    bucket: str
    key: str
    size: int | None
    event_ms: int | None = None
    """The record's ``eventTime`` (when S3 stored the object), in ms; None when absent or unreadable."""


def parse_message(body: str) -> list[ObjectCreated]:
    """Object-created records of one SQS message body; [] for test events and other event types.

    Accepts plain S3 notifications and SNS-wrapped ones. Keys arrive URL-encoded ('+' for space).
    """
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, TypeError) as exc:
        raise MalformedMessage(f"message body is not JSON: {exc}") from exc
    except RecursionError:
        raise MalformedMessage("message body is not JSON Floe can read: nested too deeply") from None
    if isinstance(doc, dict) and doc.get("Type") == "Notification" and isinstance(doc.get("Message"), str):
        return parse_message(doc["Message"])
    if not isinstance(doc, dict):
        raise MalformedMessage("message body is not a JSON object")
    if doc.get("Event") == "s3:TestEvent":
        return []
    records = doc.get("Records")
    if not isinstance(records, list):
        raise MalformedMessage("message has no Records list (not an S3 event notification)")
    out: list[ObjectCreated] = []
    for rec in records:
        try:
            name = str(rec.get("eventName", ""))
            s3 = rec["s3"]
            bucket = s3["bucket"]["name"]
            raw_key = s3["object"]["key"]
        except (KeyError, TypeError, AttributeError) as exc:
            raise MalformedMessage(f"S3 record lacks {exc}") from exc
        if not isinstance(bucket, str) or not bucket:
            raise MalformedMessage("S3 record has no bucket name")
        if not isinstance(raw_key, str):
            raise MalformedMessage("S3 record has no object key")
        if not name.startswith("ObjectCreated"):
            continue
        size = s3["object"].get("size")
        out.append(
            ObjectCreated(
                bucket,
                unquote_plus(raw_key),
                int(size) if isinstance(size, int) else None,
                event_ms(rec.get("eventTime")),
            )
        )
    return out


MAX_EVENT_TIME_CHARS = 40
"""Longer than any ISO-8601 time S3 writes ('2024-05-01T12:34:56.789Z'): a longer one is not parsed."""


def event_ms(value: object) -> int | None:
    """An S3 record's ``eventTime`` in ms since the epoch; None when it is missing or not an ISO-8601
    time (the file still loads: only its put→queryable latency then starts at its receipt)."""
    if not isinstance(value, str) or len(value) > MAX_EVENT_TIME_CHARS:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)


def route(record: ObjectCreated, pipes: list[Pipe]) -> tuple[list[tuple[Pipe, str]], bool]:
    """Auto-ingest pipes this object belongs to, with its stage-relative path.

    Returns (matches, bucket_known): an object in a bucket no pipe reads is unroutable, which the
    consumer treats as a poison message; an object that a PATTERN filters out is simply skipped.
    """
    matches: list[tuple[Pipe, str]] = []
    known = False
    for pipe in pipes:
        if not pipe.auto_ingest or pipe.bucket != record.bucket:
            continue
        known = True
        rel = pipe.relative_path(record.key)
        if rel is not None and pipe.matches(rel):
            matches.append((pipe, rel))
    return matches, known


def collapse_prefixes(prefixes: list[str]) -> list[str]:
    """Drop prefixes covered by a shorter one: S3 rejects overlapping notification filters."""
    out: list[str] = []
    for p in sorted(set(prefixes)):
        if not any(p.startswith(q) for q in out):
            out.append(p)
    return out


def notification_config(existing: dict[str, Any], queue_arn: str, prefixes: list[str]) -> dict[str, Any]:
    """The bucket's notification configuration with Floe's entries replaced by these prefixes."""
    config = {k: v for k, v in existing.items() if k != "ResponseMetadata"}
    queues = [
        q for q in config.get("QueueConfigurations", []) if not str(q.get("Id", "")).startswith("floe-")
    ]
    for i, prefix in enumerate(collapse_prefixes(prefixes)):
        entry: dict[str, Any] = {
            "Id": f"{NOTIFICATION_ID_PREFIX}{i}",
            "QueueArn": queue_arn,
            "Events": ["s3:ObjectCreated:*"],
        }
        if prefix:
            entry["Filter"] = {"Key": {"FilterRules": [{"Name": "prefix", "Value": prefix}]}}
        queues.append(entry)
    config["QueueConfigurations"] = queues
    return config
