"""Fixtures shared by the services tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from floe.settings import Settings
from services.sql import SqlExecutor


@pytest.fixture
def ex(isolated_settings: Settings, redis_client: redis.Redis) -> Iterator[SqlExecutor]:
    """An executor on a fresh key prefix, whose keys are removed afterwards."""
    yield SqlExecutor(isolated_settings, redis_client)
    stale = list(redis_client.scan_iter(match=f"{isolated_settings.redis.prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)
