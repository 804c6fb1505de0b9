"""Integration tests of infra.stack against the real LocalStack and Redis.

They reuse services that already run (``make test`` starts them first) and stop only what they start.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import redis

from floe.runtime import free_port
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


def test_cli_runs_a_passworded_redis_in_its_own_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`up`, `status` and `down` of a Redis of our own (free port, own state_dir), as on a fresh clone."""
    state = tmp_path / "state"
    port = free_port()
    monkeypatch.setenv("FLOE_STATE_DIR", str(state))
    monkeypatch.setenv("FLOE_REDIS__URL", f"redis://127.0.0.1:{port}/0")
    monkeypatch.setenv("FLOE_REDIS__PASSWORD_FILE", str(state / "redis.password"))
    monkeypatch.delenv("FLOE_REDIS__PASSWORD", raising=False)
    settings = Settings()
    umask = os.umask(0o022)
    try:
        assert stack.main(["up", "redis"]) == 0
        try:
            assert stack.main(["status", "redis"]) == 0
            assert "ready" in capsys.readouterr().out
            password = (state / "redis.password").read_text()
            client = settings.redis.client()
            assert client.ping()  # signs in with the generated password
            client.close()
            anonymous = redis.Redis(port=port, socket_timeout=2.0)
            with pytest.raises(redis.AuthenticationError):
                anonymous.ping()
            assert stack.main(["up", "redis"]) == 0  # a second `up` finds it ready
            assert (state / "redis.password").read_text() == password
        finally:
            assert stack.main(["down", "redis"]) == 0
        assert "stopped" in capsys.readouterr().out
        assert stack.running_pid("redis", settings) is None
        assert os.umask(0o022) == 0o077  # the command made its own files owner-only
    finally:
        os.umask(umask)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    modes = {p.relative_to(state).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in state.rglob("*")}
    assert all(mode in (0o600, 0o700) for mode in modes.values()), modes


def test_a_redis_that_refuses_our_password_gets_a_precise_error(settings: Settings, tmp_path: Path) -> None:
    """A password file next to a Redis that has none: no start, and a hint what to do."""
    port = free_port()
    bare = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        client = redis.Redis(port=port, socket_connect_timeout=1.0)
        deadline = time.monotonic() + 30
        while True:
            try:
                assert client.ping()  # it needs no password
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the password-less redis-server did not start"
                time.sleep(0.05)
        wrong = settings.model_copy(
            update={
                "state_dir": str(tmp_path / "state"),
                "redis": settings.redis.model_copy(
                    update={
                        "url": f"redis://127.0.0.1:{port}/0",
                        "password": None,
                        "password_file": str(tmp_path / "redis.password"),
                    }
                ),
            }
        )
        (tmp_path / "redis.password").write_text("a-password-this-redis-does-not-have")
        with pytest.raises(stack.StackError, match=r"remove .*redis\.password") as failure:
            stack.ensure(["redis"], wrong)
        assert "a redis answers" in str(failure.value)
        assert stack.running_pid("redis", wrong) is None
    finally:
        bare.terminate()
        bare.wait(10)
