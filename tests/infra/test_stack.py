"""Integration tests of infra.stack against the real LocalStack and Redis.

They reuse services that already run (``make test`` starts them first) and stop only what they start.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import redis

from floe.settings import Settings
from infra import stack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def settings() -> Iterator[Settings]:
    """Settings with LocalStack and Redis running; stops afterwards only what this module started."""
    settings = Settings()
    started = stack.ensure_services(settings)
    yield settings
    stack.stop(started, settings)


def _listeners(port: int) -> list[str]:
    """Local addresses (hex, as in /proc/net/tcp*) of sockets listening on ``port``."""
    found: list[str] = []
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A = LISTEN
                found.append(address)
    return found


def test_ensure_services_is_idempotent(settings: Settings) -> None:
    assert stack.ensure_services(settings) == []
    states = {row.name: row.state for row in stack.status(settings, stack.SERVICES)}
    assert set(states.values()) <= {"ready", "external"}, states


def test_redis_persists_every_write(settings: Settings) -> None:
    if stack.running_pid("redis", settings) is None:
        pytest.skip("this Redis was not started by Floe; its persistence is its owner's choice")
    client = settings.redis.client(decode_responses=True)
    try:
        assert client.ping()
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "always"}
    finally:
        client.close()


@pytest.mark.parametrize("service", ["localstack", "redis"])
def test_services_started_by_floe_listen_on_loopback_only(settings: Settings, service: str) -> None:
    if stack.running_pid(service, settings) is None:
        pytest.skip(f"this {service} was not started by Floe")
    part = stack.build_part(service, settings)
    assert part.port is not None
    listeners = _listeners(part.port[1])
    if not listeners:
        pytest.skip("/proc/net/tcp shows no listener (not Linux?)")
    loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1 and ::1, as the kernel prints
    assert set(listeners) <= loopback, listeners


def test_localstack_serves_s3_and_sqs(settings: Settings) -> None:
    session = boto3.session.Session(
        aws_access_key_id=settings.aws.access_key_id,
        aws_secret_access_key=settings.aws.secret_access_key.get_secret_value(),
        region_name=settings.aws.region,
    )
    s3 = session.client("s3", endpoint_url=settings.aws.endpoint_url)
    bucket = f"floe-infra-test-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    try:
        s3.put_object(Bucket=bucket, Key="a b.csv", Body=b"1,2\n")
        assert s3.get_object(Bucket=bucket, Key="a b.csv")["Body"].read() == b"1,2\n"
        s3.delete_object(Bucket=bucket, Key="a b.csv")
    finally:
        s3.delete_bucket(Bucket=bucket)

    sqs = session.client("sqs", endpoint_url=settings.aws.endpoint_url)
    queue_url = sqs.create_queue(QueueName=bucket)["QueueUrl"]
    try:
        sqs.send_message(QueueUrl=queue_url, MessageBody="hello")
        messages = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1).get("Messages", [])
        assert [m["Body"] for m in messages] == ["hello"]
    finally:
        sqs.delete_queue(QueueUrl=queue_url)
