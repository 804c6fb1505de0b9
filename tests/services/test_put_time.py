"""The put time a file's put→queryable latency starts from: an S3 notification's event time, carried
from the message through dedup's queue entry to the Spark task (or, without one, Floe's receipt)."""

from __future__ import annotations

import json

import pytest
import redis

from floe.catalog import CopySpec, Pipe
from floe.keys import Keys
from floe.records import LoadTask, QueueEntry
from floe.settings import Settings
from services.dedup import Deduper, FileRef, retire_pipe
from services.notifications import event_ms, parse_message


def message(key: str, event_time: object) -> str:
    record = {
        "eventName": "ObjectCreated:Put",
        "eventTime": event_time,
        "s3": {"bucket": {"name": "inbox"}, "object": {"key": key, "size": 5}},
    }
    return json.dumps({"Records": [record]})


@pytest.mark.unit
def test_an_s3_event_time_is_read_in_milliseconds() -> None:
    assert event_ms("2026-01-02T03:04:05.678Z") == 1_767_323_045_678
    assert event_ms("2026-01-02T03:04:05Z") == 1_767_323_045_000
    assert event_ms("2026-01-02T04:04:05.678+01:00") == 1_767_323_045_678
    assert event_ms("2026-01-02T03:04:05.678") == 1_767_323_045_678  # no zone: UTC, as S3 means


@pytest.mark.unit
@pytest.mark.parametrize("bad", [None, 17, "", "yesterday", "2026-13-40T00:00:00Z", "2" * 41])
def test_a_missing_or_unreadable_event_time_is_none_and_the_record_still_loads(bad: object) -> None:
    """Safeguard: the event time only starts a metric; a message without a readable one is no poison."""
    assert event_ms(bad) is None
    (record,) = parse_message(message("in/a.csv", bad))
    assert (record.key, record.event_ms) == ("in/a.csv", None)


@pytest.mark.unit
def test_a_notification_carries_its_event_time() -> None:
    (record,) = parse_message(message("in/a.csv", "2026-01-02T03:04:05.678Z"))
    assert record.event_ms == 1_767_323_045_678


@pytest.mark.unit
def test_queue_entries_carry_the_put_time_only_when_known() -> None:
    """Safeguard: entries without it (insertFiles, older entries) keep their old fields, and their
    latency starts at their receipt."""
    with_put = QueueEntry("a.csv", 3, 2_000, "notification", put_ms=1_500)
    assert with_put.stream_fields()[-2:] == ["put", 1_500]
    fields = {
        str(k).encode(): str(v).encode() for k, v in zip(*[iter(with_put.stream_fields())] * 2, strict=True)
    }
    entry = QueueEntry.from_stream(b"2000-0", fields)
    assert entry.put_ms == 1_500
    assert LoadTask.queued("p", entry).since_ms == 1_500
    old = QueueEntry.from_stream(b"2000-1", {b"path": b"b.csv", b"received": b"2000"})
    assert old.put_ms is None
    assert LoadTask.queued("p", old).since_ms == 2_000
    assert "put" not in QueueEntry("c.csv", None, 5, "rest").stream_fields()


@pytest.mark.integration
def test_dedup_writes_the_put_time_into_the_queue_entry_and_a_replace_keeps_it(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    pipe = Pipe(
        name="D.S.P", copy_spec=CopySpec(table="D.S.T", stage="D.S.S"), table_id="t", stage_url="s3://b/x/"
    )
    d = Deduper(redis_client, keys, isolated_settings.retention_seconds)
    assert d.enqueue(
        pipe, [FileRef("a.csv", 3, 1_767_323_045_678), FileRef("b.csv", 4)], source="notification"
    ) == [
        True,
        True,
    ]
    entries = [QueueEntry.from_stream(sid, f) for sid, f in redis_client.xrange(keys.queue(pipe.id))]
    assert [(e.path, e.put_ms) for e in entries] == [("a.csv", 1_767_323_045_678), ("b.csv", None)]
    assert b"put" not in redis_client.xrange(keys.queue(pipe.id))[1][1]
    # CREATE OR REPLACE hands the queued files to the successor with the time they were put.
    handed = retire_pipe(redis_client, keys, pipe.id)
    assert [(f.path, f.put_ms) for f in handed] == [("a.csv", 1_767_323_045_678), ("b.csv", None)]
