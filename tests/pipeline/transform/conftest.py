"""Fixtures of the transform tests."""

from __future__ import annotations

from pathlib import Path

import pytest

# The shared helpers assert too: show their failures as pytest shows a test's own.
pytest.register_assert_rewrite("tests.pipeline.transform.support")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file no COPY transform may read."""
    path = tmp_path / "secret.key"
    path.write_text("TOP-SECRET-MATERIAL\n")
    return path
