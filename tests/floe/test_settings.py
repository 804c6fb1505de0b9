"""The settings tree: one root, FLOE_ env names, and secrets that survive the trip to Spark workers."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from floe.settings import AwsSettings, EncryptionSettings, Settings

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
    assert rebuilt.model_dump() == settings.model_dump()


def test_every_settings_field_is_documented() -> None:
    """Each field has a docstring (pydantic keeps it as the description), so --help-like docs stay whole."""
    for model in (Settings, *(type(getattr(Settings(), name)) for name in Settings.model_fields)):
        if not hasattr(model, "model_fields"):
            continue
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"
