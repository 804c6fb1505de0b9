"""Parsing and routing S3 notifications."""

from __future__ import annotations

import json

import pytest

from floe.catalog import CopySpec, Pipe
from services.notifications import (
    MalformedMessage,
    collapse_prefixes,
    notification_config,
    parse_message,
    route,
)

pytestmark = pytest.mark.unit


def event(key: str, bucket: str = "b", name: str = "ObjectCreated:Put") -> str:
    return json.dumps(
        {
            "Records": [
                {"eventName": name, "s3": {"bucket": {"name": bucket}, "object": {"key": key, "size": 7}}}
            ]
        }
    )


def pipe(url: str = "s3://b/in/", path: str = "", pattern: str | None = None, auto: bool = True) -> Pipe:
    spec = CopySpec(table="D.S.T", stage="D.S.ST", path=path, pattern=pattern)
    return Pipe(name="D.S.P", auto_ingest=auto, copy_spec=spec, table_id="t1", stage_url=url)


def test_keys_are_url_decoded() -> None:
    (rec,) = parse_message(event("in/a+b%2Bc/%C3%BC%20x.csv"))
    assert rec.key == "in/a b+c/ü x.csv" and rec.size == 7 and rec.bucket == "b"


def test_test_event_and_removals_are_ignored() -> None:
    assert parse_message(json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent"})) == []
    assert parse_message(event("in/x", name="ObjectRemoved:Delete")) == []


def test_sns_envelope() -> None:
    wrapped = json.dumps({"Type": "Notification", "Message": event("in/x.csv")})
    assert [r.key for r in parse_message(wrapped)] == ["in/x.csv"]


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1,2]",
        json.dumps({"Records": [{"s3": {}}]}),
        json.dumps({"a": 1}),
        "[" * 100_000,
        json.dumps(
            {
                "Records": [
                    {
                        "eventName": "ObjectCreated:Put",
                        "s3": {"bucket": {"name": [1]}, "object": {"key": "k"}},
                    }
                ]
            }
        ),
    ],
    ids=["text", "array", "no-bucket", "no-records", "nested-too-deep", "bucket-not-a-string"],
)
def test_malformed_messages(body: str) -> None:
    """Safeguard: anything but a usable notification is a MalformedMessage (the consumer's poison
    path, which names the reason), never another exception."""
    with pytest.raises(MalformedMessage):
        parse_message(body)


def test_routing_by_prefix_path_and_pattern() -> None:
    (rec,) = parse_message(event("in/sub/f1.csv"))
    p1, p2, p3 = pipe(), pipe(path="sub/", pattern=r"sub/.*\.csv"), pipe(pattern=r".*\.json")
    matches, known = route(rec, [p1, p2, p3, pipe(auto=False)])
    assert known and [(p is p1 or p is p2, rel) for p, rel in matches] == [
        (True, "sub/f1.csv"),
        (True, "sub/f1.csv"),
    ]
    (other,) = parse_message(event("x.csv", bucket="unknown"))
    assert route(other, [p1]) == ([], False)


def test_notification_config_keeps_foreign_entries_and_collapses_prefixes() -> None:
    assert collapse_prefixes(["a/b/", "a/", "c/"]) == ["a/", "c/"]
    existing = {"QueueConfigurations": [{"Id": "theirs", "QueueArn": "x", "Events": ["s3:ObjectCreated:*"]}]}
    cfg = notification_config(existing, "arn:q", ["in/", "in/sub/"])
    ids = [q["Id"] for q in cfg["QueueConfigurations"]]
    assert ids == ["theirs", "floe-0"]
    assert cfg["QueueConfigurations"][1]["Filter"]["Key"]["FilterRules"] == [
        {"Name": "prefix", "Value": "in/"}
    ]
