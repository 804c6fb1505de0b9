"""Fixtures of the streaming client's unit tests: a fake server, a fake clock, and clients on them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from floe.streaming import StreamingIngestClient
from tests.floe.streaming.test_transport import FakeClock, FakeServer, client_factory

MakeClient = Callable[..., StreamingIngestClient]
"""Builds a client on the fake server and clock (properties and options as keyword arguments)."""


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_client(server: FakeServer, clock: FakeClock) -> Iterator[MakeClient]:
    yield from client_factory(server, clock)
