"""Error notifications end to end: a pipe with ERROR_INTEGRATION loads through the whole stack, and
the SNS topic of its notification integration receives Snowflake's payload for each file whose
load failed, read here from an SQS queue subscribed to the topic. An SNS topic that does not exist
neither stops the loads nor the consumer, and loses no message: it goes out once the integration
names a topic that does. The notifier's rules in detail: tests/services/test_error_notifications.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from bench.harness import unique
from floe.aws import client as aws_client
from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import csv_file, history

pytestmark = pytest.mark.e2e

BAD = b"id,name,amount,day\n1,a,1.0,2026-01-01\n2,b,abc,2026-01-02\n"
"""A file whose second record fails its NUMBER column: under SKIP_FILE the whole file fails."""
FIRST_ERROR = "Numeric value 'abc' is not recognized"


@dataclass
class Topic:
    """An SNS topic with an SQS queue subscribed to it (SNS's envelope, not raw delivery)."""

    arn: str
    queue: str
    sqs: Any

    def messages(self, n: int) -> list[dict[str, Any]]:
        """The next ``n`` payloads the topic delivered, each checked to come in SNS's envelope."""
        got: list[dict[str, Any]] = []

        def more() -> bool:
            resp = self.sqs.receive_message(QueueUrl=self.queue, MaxNumberOfMessages=10, WaitTimeSeconds=2)
            for m in resp.get("Messages", []):
                envelope = json.loads(m["Body"])
                assert envelope["Type"] == "Notification" and envelope["TopicArn"] == self.arn
                got.append(json.loads(envelope["Message"]))  # the payload is a string of JSON
                self.sqs.delete_message(QueueUrl=self.queue, ReceiptHandle=m["ReceiptHandle"])
            return len(got) >= n

        wait_until(more, 120, 0, what=lambda: f"{n} notifications (got {got})")
        return got


@pytest.fixture
def topic(stack: Stack) -> Iterator[Topic]:
    sns, sqs = aws_client(stack.settings.aws, "sns"), aws_client(stack.settings.aws, "sqs")
    arn = sns.create_topic(Name=unique("pipe-errors"))["TopicArn"]
    queue = sqs.create_queue(QueueName=unique("pipe-errors"))["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=queue_arn)
    try:
        yield Topic(arn, queue, sqs)
    finally:
        sns.delete_topic(TopicArn=arn)
        sqs.delete_queue(QueueUrl=queue)
        sns.close()
        sqs.close()


def make_pipe(stack: Stack, bucket: str, topic_arn: str, on_error: str = "SKIP_FILE") -> tuple[str, str, str]:
    """A notification integration on ``topic_arn``, and an auto-ingest pipe that names it."""
    integration, stage, table, pipe = unique("errs_"), unique("st_"), unique("t_"), unique("p_")
    stack.sql(
        f"CREATE NOTIFICATION INTEGRATION {integration} TYPE = QUEUE DIRECTION = OUTBOUND "
        f"NOTIFICATION_PROVIDER = AWS_SNS AWS_SNS_TOPIC_ARN = '{topic_arn}' "
        "AWS_SNS_ROLE_ARN = 'arn:aws:iam::000000000000:role/floe' ENABLED = TRUE"
    )
    stack.sql(
        f"CREATE STAGE {stage} URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = floe_tests "
        "FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
    )
    stack.sql(f"CREATE TABLE {table} (id INT NOT NULL, name VARCHAR, amount NUMBER(10,2), day DATE)")
    stack.sql(
        f"CREATE PIPE {pipe} AUTO_INGEST = TRUE ERROR_INTEGRATION = {integration} AS COPY INTO {table} "
        f"FROM @{stage} ON_ERROR = {on_error}"
    )
    return integration, table, pipe


def statuses(stack: Stack, table: str) -> dict[str, str]:
    return {str(r["FILE_NAME"]): str(r["STATUS"]) for r in history(stack, table)}


def test_a_failed_file_is_published_with_snowflakes_payload(
    stack: Stack, bucket: str, s3: Any, topic: Topic
) -> None:
    _, table, pipe = make_pipe(stack, bucket, topic.arn)
    try:
        s3.put_object(Bucket=bucket, Key="in/good.csv", Body=csv_file(0, 3))
        s3.put_object(Bucket=bucket, Key="in/2026/bad.csv", Body=BAD)
        wanted = {"good.csv": "Loaded", "2026/bad.csv": "Load failed"}
        wait_until(
            lambda: statuses(stack, table) == wanted,
            what=lambda: f"good.csv loaded, bad.csv failed: {statuses(stack, table)}",
        )
        # A later failure, so that every earlier load event has been looked at when it arrives:
        # the notifier sends a pipe's failures in the order they happened.
        s3.put_object(Bucket=bucket, Key="in/worse.csv", Body=BAD)
        (first, second) = topic.messages(2)
        assert first == {
            "version": "1.0",
            "messageId": first["messageId"],
            "messageType": "INGEST_FAILED_FILE",
            "timestamp": first["timestamp"],
            "accountName": "FLOE",
            "pipeName": f"FLOE.PUBLIC.{pipe.upper()}",
            "tableName": f"FLOE.PUBLIC.{table.upper()}",
            "stageLocation": f"s3://{bucket}/in/",
            "messages": [{"fileName": "2026/bad.csv", "firstError": FIRST_ERROR}],
        }
        assert second["messages"] == [{"fileName": "worse.csv", "firstError": FIRST_ERROR}]
        assert first["messageId"] != second["messageId"] and first["timestamp"] <= second["timestamp"]
        (bad,) = [h for h in history(stack, table) if h["FILE_NAME"] == "2026/bad.csv"]
        assert bad["FIRST_ERROR_MESSAGE"] == FIRST_ERROR
        assert stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"] == 3  # good.csv only, once
    finally:
        stack.sql(f"DROP PIPE {pipe}")


def test_a_topic_that_refuses_loses_no_message_and_stops_nothing(
    stack: Stack, bucket: str, s3: Any, topic: Topic
) -> None:
    missing = topic.arn.rsplit(":", 1)[0] + ":" + unique("no-such-topic")
    integration, table, pipe = make_pipe(stack, bucket, missing)
    try:
        s3.put_object(Bucket=bucket, Key="in/bad.csv", Body=BAD)
        s3.put_object(Bucket=bucket, Key="in/good.csv", Body=csv_file(0, 2))
        wanted = {"good.csv": "Loaded", "bad.csv": "Load failed"}
        wait_until(
            lambda: statuses(stack, table) == wanted,
            what=lambda: f"the loads, whatever SNS says: {statuses(stack, table)}",
        )
        wait_until(lambda: f"for {missing}" in stack.log_text("consumer"), 30, what="a refused publish")
        assert stack.procs["consumer"].poll() is None  # the consumer runs on
        # Loading goes on while SNS refuses: the next file loads too.
        s3.put_object(Bucket=bucket, Key="in/later.csv", Body=csv_file(10, 2))
        wait_until(lambda: statuses(stack, table).get("later.csv") == "Loaded", what="later.csv loaded")
        # The message was held, not dropped: it goes out once the integration names a topic that is.
        stack.sql(f"ALTER NOTIFICATION INTEGRATION {integration} SET AWS_SNS_TOPIC_ARN = '{topic.arn}'")
        (message,) = topic.messages(1)
        assert message["messages"] == [{"fileName": "bad.csv", "firstError": FIRST_ERROR}]
        assert stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"] == 4
    finally:
        stack.sql(f"DROP PIPE {pipe}")
