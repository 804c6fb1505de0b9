"""`floe console` (front/console.py) when no link can be had; the link itself, opened in a browser,
is tests/e2e/test_console.py, and the API's side of it is tests/services/test_console.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from floe.keypair import ensure_key_file
from floe.runtime import free_port
from floe.settings import Settings
from front import cli as cli_module
from front.console import run_console

pytestmark = pytest.mark.unit


def settings_for(key_file: Path) -> Settings:
    base = Settings()
    return base.model_copy(
        update={
            "api": base.api.model_copy(update={"port": free_port()}),  # nothing listens there
            "auth": base.auth.model_copy(update={"admin_key_file": str(key_file)}),
        }
    )


def test_without_a_key_or_an_api_there_is_no_link_and_the_note_says_why(tmp_path: Path) -> None:
    link, note = run_console(settings_for(tmp_path / "missing.p8"), None, None, None)
    assert link is None and "cannot read the private key" in note
    ensure_key_file(tmp_path / "admin.p8")
    link, note = run_console(settings_for(tmp_path / "admin.p8"), None, None, None)
    assert link is None and "cannot reach the Floe API" in note


def test_a_user_needs_its_key_file() -> None:
    result = CliRunner().invoke(cli_module.app, ["console", "--user", "alice"])
    assert result.exit_code == 2 and "--private-key-file" in result.output
