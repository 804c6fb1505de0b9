"""Error notifications from load events, on the real Redis (and LocalStack's SNS and SQS for the
publisher): what is sent, at least once and in order, by one consumer at a time. Load events and
file states are written the way the registrar writes them (tests/services/test_pipe_refresh.py's
``settle``). End to end through a pipe: tests/e2e/test_error_notifications.py."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from redis import Redis

from bench.harness import unique
from floe.aws import client as aws_client
from floe.catalog import Pipe, now_ms
from floe.history import FileState, iso_utc
from services.error_notifications import ErrorNotifier, SnsPublisher, message_id, skip_past_events
from services.sql import SqlExecutor
from tests.services.test_pipe_refresh import failed, notified, settle
from tests.services.test_sql_access import run

pytestmark = pytest.mark.integration

TOPIC = "arn:aws:sns:us-east-1:000000000000:pipe-errors"
ERROR = "External function TO_USD failed: 503"


class Recorder:
    """A publisher that keeps what it was given and answers with ``answers`` (True by default)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = []
        self.answers: list[bool] | None = None
        self.lock = threading.Lock()

    def __call__(self, topic: str, messages: Sequence[tuple[str, str]]) -> list[bool]:
        with self.lock:
            self.calls.append((topic, [(mid, json.loads(body)) for mid, body in messages]))
            return list(self.answers) if self.answers is not None else [True] * len(messages)

    @property
    def files(self) -> list[str]:
        return [m["messages"][0]["fileName"] for _, msgs in self.calls for _, m in msgs]


def make_pipe(ex: SqlExecutor, props: str = "ERROR_INTEGRATION = errs", extra: str = "") -> Pipe:
    run(
        ex,
        "CREATE NOTIFICATION INTEGRATION IF NOT EXISTS errs TYPE = QUEUE DIRECTION = OUTBOUND "
        f"NOTIFICATION_PROVIDER = AWS_SNS AWS_SNS_TOPIC_ARN = '{TOPIC}' ENABLED = TRUE",
    )
    run(ex, "CREATE STAGE IF NOT EXISTS st URL = 's3://somebucket/in/' STORAGE_INTEGRATION = floe_tests")
    run(ex, "CREATE TABLE IF NOT EXISTS t (a INT)")
    run(ex, f"CREATE OR REPLACE PIPE p {props} AS COPY INTO t FROM @st {extra}")
    return ex.catalog.get(Pipe, "FLOE.PUBLIC.P")


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def notifier(ex: SqlExecutor, recorder: Recorder) -> Iterator[ErrorNotifier]:
    n = ErrorNotifier(ex.settings, ex.redis, ex.catalog, "consumer-a", recorder)
    yield n
    n.close()


def events(ex: SqlExecutor, pipe: Pipe) -> list[str]:
    return [sid.decode() for sid, _ in ex.redis.xrange(ex.keys.events(pipe.id))]


def test_each_failed_file_is_published_once_with_snowflakes_payload(
    ex: SqlExecutor, notifier: ErrorNotifier, recorder: Recorder
) -> None:
    pipe = make_pipe(ex)
    failed(ex, pipe, "2026/a.csv")
    notified(ex, pipe, "b.csv", "c.csv", "d.csv")
    settle(ex, pipe, "b.csv", "LOADED")
    settle(ex, pipe, "c.csv", "PARTIALLY_LOADED", error="Numeric value 'x' is not recognized")
    assert notifier.run_once() == 1
    ((topic, [(mid, message)]),) = recorder.calls
    first = events(ex, pipe)[0]
    assert topic == TOPIC and mid == message_id(pipe.id, first) == message["messageId"]
    assert message == {
        "version": "1.0",
        "messageId": mid,
        "messageType": "INGEST_FAILED_FILE",
        "timestamp": message["timestamp"],
        "accountName": "FLOE",
        "pipeName": "FLOE.PUBLIC.P",
        "tableName": "FLOE.PUBLIC.T",
        "stageLocation": "s3://somebucket/in/",
        "messages": [{"fileName": "2026/a.csv", "firstError": ERROR}],
    }
    assert message["timestamp"] == iso_utc(int(first.split("-")[0]))  # when the load failed
    # Nothing new: nothing sent. A later failure (the pending d.csv) is sent on its own.
    assert notifier.run_once() == 0
    settle(ex, pipe, "d.csv", "LOAD_FAILED", error="boom")
    assert notifier.run_once() == 1
    assert recorder.files == ["2026/a.csv", "d.csv"]


def test_continue_pipes_and_pipes_without_an_integration_send_nothing(
    ex: SqlExecutor, notifier: ErrorNotifier, recorder: Recorder
) -> None:
    for props, extra in (("ERROR_INTEGRATION = errs", "ON_ERROR = CONTINUE"), ("", "")):
        pipe = make_pipe(ex, props, extra)
        failed(ex, pipe, "a.csv")
        assert notifier.run_once() == 0
    assert recorder.calls == []
    # SKIP_FILE_<n> skips files as SKIP_FILE does: its failures are sent.
    pipe = make_pipe(ex, extra="ON_ERROR = SKIP_FILE_3")
    failed(ex, pipe, "a.csv")
    assert notifier.run_once() == 1


def test_a_refused_message_holds_back_the_ones_after_it_and_is_sent_again_with_its_id(
    ex: SqlExecutor, notifier: ErrorNotifier, recorder: Recorder
) -> None:
    pipe = make_pipe(ex)
    failed(ex, pipe, "a.csv", "b.csv")
    recorder.answers = [False, True]  # SNS takes b but not a: b waits behind a, in order
    assert notifier.run_once() == 1
    assert ex.redis.get(ex.keys.error_cursor(pipe.id)) is None
    recorder.answers = None
    assert notifier.run_once() == 2
    assert recorder.files == ["a.csv", "b.csv", "a.csv", "b.csv"]
    ids = [[mid for mid, _ in msgs] for _, msgs in recorder.calls]
    assert ids[0] == ids[1]  # the same messageIds: a subscriber can drop the repeat of b
    assert ex.redis.get(ex.keys.error_cursor(pipe.id)) == events(ex, pipe)[-1].encode()
    assert notifier.run_once() == 0


def test_a_message_refused_past_the_give_up_age_is_dropped(
    ex: SqlExecutor, redis_client: Redis[bytes], recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    pipe = make_pipe(ex)
    old = now_ms() - 10_000
    state = FileState(path="old.csv", stage_location=pipe.stage_url, status="LOAD_FAILED", received_ms=old)
    redis_client.set(ex.keys.file(pipe.id, "old.csv"), state.model_dump_json())
    redis_client.xadd(ex.keys.events(pipe.id), {"path": "old.csv", "time": old}, id=f"{old}-0")
    failed(ex, pipe, "new.csv")
    settings = ex.settings.model_copy(deep=True)
    settings.error_notifications.give_up_after_s = 5
    notifier = ErrorNotifier(settings, ex.redis, ex.catalog, "consumer-a", recorder)
    recorder.answers = [False, False]
    assert notifier.run_once() == 0
    assert "gave up the error notification" in caplog.text
    assert ex.redis.get(ex.keys.error_cursor(pipe.id)) == f"{old}-0".encode()  # new.csv waits
    recorder.answers = None
    assert notifier.run_once() == 1 and recorder.files[-1] == "new.csv"


def test_a_disabled_or_dropped_integration_passes_failures_over(
    ex: SqlExecutor, notifier: ErrorNotifier, recorder: Recorder
) -> None:
    pipe = make_pipe(ex)
    run(ex, "ALTER INTEGRATION errs SET ENABLED = FALSE")
    failed(ex, pipe, "while-disabled.csv")
    assert notifier.run_once() == 0
    run(ex, "ALTER INTEGRATION errs SET ENABLED = TRUE")
    failed(ex, pipe, "after.csv")
    assert notifier.run_once() == 1
    run(ex, "DROP INTEGRATION errs")
    failed(ex, pipe, "while-dropped.csv")
    assert notifier.run_once() == 0
    assert recorder.files == ["after.csv"]


def test_the_integration_is_read_at_each_step(
    ex: SqlExecutor, notifier: ErrorNotifier, recorder: Recorder
) -> None:
    pipe = make_pipe(ex)
    other = TOPIC.replace("pipe-errors", "other")
    run(ex, f"ALTER INTEGRATION errs SET AWS_SNS_TOPIC_ARN = '{other}'")
    failed(ex, pipe, "a.csv")
    assert notifier.run_once() == 1 and recorder.calls[0][0] == other


def test_one_consumer_at_a_time_sends_each_failure(
    ex: SqlExecutor, redis_client: Redis[bytes], recorder: Recorder
) -> None:
    pipe = make_pipe(ex)
    failed(ex, pipe, *(f"f{i}.csv" for i in range(30)))
    notifiers = [
        ErrorNotifier(ex.settings, ex.redis, ex.catalog, f"consumer-{i}", recorder) for i in range(4)
    ]
    # A lease held elsewhere: nobody sends.
    redis_client.set(ex.keys.lease(pipe.id, "errors"), "someone-else")
    assert [n.run_once() for n in notifiers] == [0, 0, 0, 0]
    ex.redis.delete(ex.keys.lease(pipe.id, "errors"))
    threads = [threading.Thread(target=n.run_once) for n in notifiers for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(recorder.files) == sorted(f"f{i}.csv" for i in range(30))
    assert ex.redis.get(ex.keys.lease(pipe.id, "errors")) is None  # released after each step


def test_a_crash_before_the_cursor_moves_sends_again_with_the_same_ids(
    ex: SqlExecutor, notifier: ErrorNotifier, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = make_pipe(ex)
    failed(ex, pipe, "a.csv")

    def crash(**_: Any) -> int:
        raise RuntimeError("killed between publish and cursor")

    monkeypatch.setattr(notifier, "_advance", crash)
    with pytest.raises(RuntimeError):
        notifier.run_once()
    monkeypatch.undo()
    assert notifier.run_once() == 1
    (first,), (second,) = ([mid for mid, _ in msgs] for _, msgs in recorder.calls)
    assert first == second and recorder.files == ["a.csv", "a.csv"]


def test_skip_past_events_leaves_earlier_failures_unsent(
    ex: SqlExecutor, notifier: ErrorNotifier, recorder: Recorder
) -> None:
    pipe = make_pipe(ex)
    skip_past_events(ex.redis, ex.keys, pipe.id)  # no events yet: nothing to skip
    assert ex.redis.get(ex.keys.error_cursor(pipe.id)) is None
    failed(ex, pipe, "before.csv")
    skip_past_events(ex.redis, ex.keys, pipe.id)  # as when a pipe gains its ERROR_INTEGRATION now
    failed(ex, pipe, "after.csv")
    assert notifier.run_once() == 1 and recorder.files == ["after.csv"]


def test_sns_delivers_to_a_subscribed_queue(ex: SqlExecutor, caplog: pytest.LogCaptureFixture) -> None:
    aws = ex.settings.aws
    sns, sqs = aws_client(aws, "sns"), aws_client(aws, "sqs")
    topic = sns.create_topic(Name=unique("errors"))["TopicArn"]
    queue = sqs.create_queue(QueueName=unique("errors"))["QueueUrl"]
    try:
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
        publisher = SnsPublisher(aws)
        try:
            bodies = [(str(i), json.dumps({"n": i})) for i in range(12)]  # two PublishBatch calls
            assert publisher(topic, bodies) == [True] * 12
            gone = topic.replace(topic.rsplit(":", 1)[1], unique("gone"))
            with caplog.at_level(logging.DEBUG, logger="floe.errors"):
                for _ in range(3):  # retried every poll: warned of once, while it goes on
                    assert publisher(gone, bodies[:2]) == [False, False]
            warned = [r for r in caplog.records if r.levelno == logging.WARNING and gone in r.getMessage()]
            assert len(warned) == 1 and "Topic does not exist" in warned[0].getMessage()
        finally:
            publisher.close()
        got: list[int] = []
        while len(got) < 12:
            resp = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=5)
            assert resp.get("Messages"), f"only {sorted(got)} arrived"
            for m in resp["Messages"]:
                envelope = json.loads(m["Body"])  # SNS's envelope; the payload is its Message string
                assert envelope["Type"] == "Notification" and envelope["TopicArn"] == topic
                got.append(json.loads(envelope["Message"])["n"])
        assert sorted(got) == list(range(12))
    finally:
        sns.delete_topic(TopicArn=topic)
        sqs.delete_queue(QueueUrl=queue)
        sns.close()
        sqs.close()
