"""Fixtures shared by the services tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from floe.catalog import ADMIN_ROLE
from floe.settings import Settings
from services.auth import Principal
from services.sql import SqlExecutor
from tests.conftest import TEST_INTEGRATION


@pytest.fixture
def ex(isolated_settings: Settings, redis_client: redis.Redis) -> Iterator[SqlExecutor]:
    """An executor on a fresh key prefix, whose keys are removed afterwards."""
    executor = SqlExecutor(isolated_settings, redis_client)
    executor.execute(TEST_INTEGRATION, Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"})))
    yield executor
    stale = list(redis_client.scan_iter(match=f"{isolated_settings.redis.prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)
