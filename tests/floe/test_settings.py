"""The settings tree: one root, FLOE_ env names, and secrets that survive the trip to Spark workers."""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path

import pytest
from pydantic import SecretStr

from floe.settings import AwsSettings, EncryptionSettings, RedisSettings, Settings

pytestmark = pytest.mark.unit


def test_worker_json_carries_the_secrets_a_plain_dump_masks() -> None:
    settings = Settings(
        aws=AwsSettings(secret_access_key=SecretStr("real-secret")),
        encryption=EncryptionSettings(master_key=SecretStr("a2V5")),
    )
    assert "real-secret" not in settings.model_dump_json()  # what the job used to ship
    rebuilt = Settings.model_validate_json(settings.worker_json())
    assert rebuilt.aws.secret_access_key.get_secret_value() == "real-secret"
    assert rebuilt.encryption.master_key is not None
    assert rebuilt.encryption.master_key.get_secret_value() == "a2V5"
    # The Redis password travels resolved (from the password file, if any): compare what it signs in with.
    assert rebuilt.redis.resolve_password() == settings.redis.resolve_password()
    assert rebuilt.model_dump(exclude={"redis": {"password"}}) == settings.model_dump(
        exclude={"redis": {"password"}}
    )


def test_every_settings_field_is_documented() -> None:
    """Each field has a docstring (pydantic keeps it as the description), so --help-like docs stay whole."""
    for model in (Settings, *(type(getattr(Settings(), name)) for name in Settings.model_fields)):
        if not hasattr(model, "model_fields"):
            continue
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"


def test_racing_processes_agree_on_one_master_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state" / "master.key"
    racers = 4
    barrier = threading.Barrier(racers)
    real = secrets.token_bytes
    generated: list[int] = []

    def token_bytes(n: int) -> bytes:
        if n == 32:  # the key, not a temporary file's name
            barrier.wait(timeout=60)  # every racer is past the "no file yet" check before any writes
            generated.append(n)
        return real(n)

    monkeypatch.setattr(secrets, "token_bytes", token_bytes)
    keys: list[bytes] = []
    settings = EncryptionSettings(master_key_file=str(path))
    before = os.umask(0)
    try:
        threads = [
            threading.Thread(target=lambda: keys.append(settings.resolve_master_key())) for _ in range(racers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.umask(before)
    assert generated == [32] * racers
    assert len(keys) == racers and len(set(keys)) == 1 and len(keys[0]) == 32
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir()] == ["master.key"]


def test_redis_client_signs_in_only_when_a_password_is_known(tmp_path: Path) -> None:
    missing = RedisSettings(password_file=str(tmp_path / "absent"))
    assert missing.resolve_password() is None
    assert missing.client().connection_pool.connection_kwargs.get("password") is None
    (tmp_path / "pw").write_text("from-file\n")
    from_file = RedisSettings(password_file=str(tmp_path / "pw"), username="loader")
    kwargs = from_file.client().connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"]) == ("loader", "from-file")
    explicit = from_file.model_copy(update={"password": SecretStr("explicit")})
    assert explicit.resolve_password() == "explicit"  # the setting wins over the file


def test_child_env_reproduces_the_settings_keys_case_and_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child process started with ``child_env`` reads back the same settings: a dict setting's
    keys keep their case (Spark's property names are camelCase, and Spark ignores a lowercased one)."""
    conf = {"spark.driver.extraJavaOptions": "-Xms64m", "spark.cores.max": "2"}
    settings = Settings(pipeline={"spark_conf": conf, "driver_batch_files": 3})
    for name in [n for n in os.environ if n.startswith("FLOE_")]:
        monkeypatch.delenv(name)
    for name, value in settings.child_env().items():
        monkeypatch.setenv(name, value)
    child = Settings()
    assert child.pipeline.spark_conf == conf
    assert child.pipeline.driver_batch_files == 3
    assert child.model_dump(exclude={"redis": {"password"}}) == settings.model_dump(
        exclude={"redis": {"password"}}
    )
