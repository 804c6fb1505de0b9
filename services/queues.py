"""Floe's SQS queue and dead-letter queue, and the S3 notifications that feed them."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from floe.catalog import Pipe
from floe.settings import Settings
from services.notifications import notification_config


def ensure_queues(sqs: Any, settings: Settings) -> tuple[str, str]:
    """Create the ingest queue and its DLQ if missing; returns (queue URL, queue ARN)."""
    c = settings.consumer
    dlq_url = sqs.create_queue(QueueName=c.dlq_name)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    attrs = {
        "VisibilityTimeout": str(c.visibility_timeout_s),
        "RedrivePolicy": json.dumps(
            {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(c.max_receive_count)}
        ),
    }
    try:
        url = sqs.create_queue(QueueName=c.queue_name, Attributes=attrs)["QueueUrl"]
    except ClientError as exc:
        # An existing queue with other attributes: keep it and bring its attributes in line.
        if exc.response["Error"]["Code"] not in ("QueueAlreadyExists", "QueueNameExists"):
            raise
        url = sqs.get_queue_url(QueueName=c.queue_name)["QueueUrl"]
        sqs.set_queue_attributes(QueueUrl=url, Attributes=attrs)
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def configure_bucket(s3: Any, bucket: str, queue_arn: str, pipes: list[Pipe]) -> None:
    """Point the bucket's object-created events for every auto-ingest pipe's prefix at the queue."""
    prefixes = [p.prefix for p in pipes if p.auto_ingest and p.bucket == bucket]
    existing = s3.get_bucket_notification_configuration(Bucket=bucket)
    s3.put_bucket_notification_configuration(
        Bucket=bucket, NotificationConfiguration=notification_config(existing, queue_arn, prefixes)
    )
