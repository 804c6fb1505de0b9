"""Issue 9, "Medium: local exposure": Redis credentials and owner-only files.

Most tests start their own Redis through the stack (``infra.stack``), in a temporary state
directory on a free port, with the test process's umask opened wide (000): whatever the caller's
umask, what the stack creates must come out owner-only. The shared Redis is never touched.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr

from bench.harness import unique
from floe.runtime import free_port
from floe.settings import RedisSettings, Settings
from infra import stack
from tests.conftest import Stack
from tests.security.attacks.local import (
    anonymous_redis,
    processes_showing,
    race,
    readable_by_others,
    redis_cmdlines,
)


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A Redis the stack starts for this module alone, as on a fresh clone: no password file yet."""
    state = tmp_path_factory.mktemp("local-exposure") / "state"
    settings = Settings(
        state_dir=str(state),
        redis=RedisSettings(
            url=f"redis://127.0.0.1:{free_port()}/0",
            password_file=str(state / "redis.password"),
            prefix=unique("sec"),
        ),
    )
    before = os.umask(0)  # the most careless caller: without Floe's own modes, everything is 0666/0777
    try:
        assert stack.ensure(["redis"], settings) == ["redis"]
    finally:
        os.umask(before)
    try:
        yield settings
    finally:
        stack.stop(["redis"], settings)


pytestmark = pytest.mark.integration


def test_redis_refuses_anonymous_clients(own_redis: Settings) -> None:
    attempt = anonymous_redis(own_redis.redis.url, f"{own_redis.redis.prefix}:objects:users")
    assert not attempt.pinged and not attempt.wrote, attempt
    assert "auth" in attempt.error.lower(), attempt  # refused for want of credentials, not unreachable

    client = own_redis.redis.client()
    try:
        assert client.ping()
        assert client.exists(f"{own_redis.redis.prefix}:objects:users") == 0  # the attack wrote nothing
    finally:
        client.close()


def test_redis_refuses_a_wrong_password(own_redis: Settings) -> None:
    wrong = own_redis.redis.model_copy(update={"password": SecretStr("not-the-password")})
    with pytest.raises(redis.AuthenticationError):
        wrong.client(socket_timeout=2.0).ping()
    default_user = redis.Redis.from_url(
        own_redis.redis.url, username="default", password=own_redis.redis.resolve_password()
    )
    with pytest.raises(redis.AuthenticationError):
        default_user.ping()  # only Floe's user exists; the default user is off


def test_the_password_is_on_no_command_line(own_redis: Settings) -> None:
    password = own_redis.redis.resolve_password()
    assert password is not None and len(password) >= 32
    pid = stack.running_pid("redis", own_redis)
    assert pid is not None and pid in redis_cmdlines()  # we look at the right process
    assert processes_showing(password) == []
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert password.encode() not in environ
    users = stack.redis_users_file(own_redis).read_text()
    assert password not in users and "user default off" in users


def test_everything_the_stack_created_is_owner_only(own_redis: Settings) -> None:
    state = stack.state_dir(own_redis)
    client = own_redis.redis.client()
    try:
        client.set(f"{own_redis.redis.prefix}:probe", "1")  # the AOF holds a write
    finally:
        client.close()
    created = {p.relative_to(state).as_posix() for p in state.rglob("*") if p.is_file()}
    expected = {"redis.password", "redis/users.conf", "logs/redis.log", "run/redis.pid"}
    assert expected <= created, created
    assert any(name.startswith("redis/appendonlydir/") for name in created), created
    assert readable_by_others(state) == []
    assert stat.S_IMODE(state.stat().st_mode) == 0o700


def test_a_second_start_keeps_the_password(own_redis: Settings, tmp_path: Path) -> None:
    password = own_redis.redis.resolve_password()
    assert stack.redis_password(own_redis.redis) == password  # the file is read, not regenerated
    stack.write_redis_users(own_redis)
    client = own_redis.redis.client()
    try:
        assert client.ping()
    finally:
        client.close()


def test_transactions_survive_a_restart(own_redis: Settings) -> None:
    """The registrar commits with MULTI/EXEC and scripts; the AOF must replay both under the ACL
    (Redis 7.0 replays as the default user, which once had no rights and dropped every EXEC)."""
    key = f"{own_redis.redis.prefix}:restart"
    client = own_redis.redis.client()
    try:
        with client.pipeline(transaction=True) as tx:
            tx.set(f"{key}:tx", "committed").incr(f"{key}:n")
            tx.execute()
        client.eval("redis.call('set', KEYS[1], 'scripted') return 1", 1, f"{key}:lua")
    finally:
        client.close()
    stack.stop(["redis"], own_redis)
    assert stack.ensure(["redis"], own_redis) == ["redis"]  # a restart, from the AOF
    client = own_redis.redis.client()
    try:
        assert client.mget(f"{key}:tx", f"{key}:n", f"{key}:lua") == [b"committed", b"1", b"scripted"]
    finally:
        client.close()


def test_the_spark_source_signs_in_from_the_password_file(own_redis: Settings) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pipeline.source import FileStreamReader

    password = own_redis.redis.resolve_password()
    assert password is not None
    # The options job.py gives the source: they name the file, never the password.
    options = {
        "redis_url": own_redis.redis.url,
        "redis_username": own_redis.redis.username,
        "redis_password_file": own_redis.redis.password_file,
        "prefix": own_redis.redis.prefix,
    }
    assert not any(password in value for value in options.values())
    reader = FileStreamReader(options)
    assert reader.latestOffset({}, ReadAllAvailable()) == {}  # signed in: no pipes, no offsets
    anonymous = FileStreamReader({**options, "redis_password_file": "/nonexistent"})
    with pytest.raises(redis.AuthenticationError):
        anonymous.latestOffset({}, ReadAllAvailable())


@pytest.mark.parametrize("kind", ["master key", "admin key", "redis password"])
def test_racing_processes_create_one_key(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "keys" / "secret"
    before = os.umask(0)  # the children inherit it: the 0600 must not come from the umask
    try:
        results = race(kind, path, racers=4)
    finally:
        os.umask(before)
    assert len(results) == 4 and len(set(results)) == 1, results
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["secret"]  # no temporary file left behind


@pytest.mark.e2e
def test_files_of_running_floe_processes_are_owner_only(stack: Stack) -> None:
    state = Path(stack.settings.state_dir)
    # logs/ is the test harness's own (it redirects each process's output there). Spark's checkpoint
    # files follow Hadoop's own umask (fs.permissions.umask-mode, 022 by default), not the process's:
    # the Spark session must set spark.hadoop.fs.permissions.umask-mode=077.
    found = [line for line in readable_by_others(state) if f"{state}/logs" not in line]
    created = {p.relative_to(state).parts[0] for p in state.iterdir()}
    assert {"checkpoint", "run", "master.key", "admin_rsa_key.p8"} <= created, created
    assert found == []
