"""Fixtures shared by the services tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
import uvicorn
from fastapi import FastAPI

from floe.catalog import ADMIN_ROLE
from floe.settings import Settings
from services.api import MAX_HEAD_BYTES, bounded_httptools, create_app
from services.auth import Principal
from services.sql import SqlExecutor
from tests.conftest import TEST_INTEGRATION, wait_until


@contextmanager
def serving(settings: Settings, redis_client: redis.Redis[bytes]) -> Iterator[FastAPI]:
    """The API app under uvicorn with its own HTTP protocol, on ``settings.api``'s host and port,
    stopped afterwards with the keys of its prefix removed."""
    app = create_app(settings, redis_client)
    config = uvicorn.Config(
        app,
        host=settings.api.host,
        port=settings.api.port,
        http=bounded_httptools(MAX_HEAD_BYTES, settings.api.body_timeout_s),
        log_config=None,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=20, what="uvicorn to start")
        yield app
    finally:
        server.should_exit = True
        thread.join(20)
        stale = list(redis_client.scan_iter(match=f"{settings.redis.prefix}:*", count=1000))
        if stale:
            redis_client.delete(*stale)


@pytest.fixture
def ex(isolated_settings: Settings, redis_client: redis.Redis) -> Iterator[SqlExecutor]:
    """An executor on a fresh key prefix, whose keys are removed afterwards."""
    executor = SqlExecutor(isolated_settings, redis_client)
    executor.execute(TEST_INTEGRATION, Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"})))
    yield executor
    stale = list(redis_client.scan_iter(match=f"{isolated_settings.redis.prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)
