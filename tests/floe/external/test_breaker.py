"""Circuit breakers: the cooldown rule, the state shared through the real Redis, and what a caller
does with them (calls held back without a request, a half-open probe closing the breaker, a batch's
budget cutting a hanging request, a statement's deadline leaving the breaker alone)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pyarrow as pa
import pytest
import redis
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from bench.harness import unique
from floe.external import (
    Breaker,
    CallContext,
    ExternalFunctionFailed,
    ExternalFunctionUnavailable,
    FunctionCaller,
    Trip,
)
from floe.external.breaker import next_trip, service_id
from floe.keys import Keys
from floe.settings import ExternalFunctionSettings
from tests.conftest import wait_until
from tests.floe.external.conftest import FAST, Recorder, app_of, echo, remote_function, wait_for

Serve = Callable[[ASGIApp], str]
CTX = CallContext(query_id="q-breaker")
COOL = ExternalFunctionSettings(breaker_cooldown_s=10.0, breaker_max_cooldown_s=60.0)
URL = "https://svc.example/f"


def strings(*values: str | None) -> list[pa.Array]:
    return [pa.array(list(values), pa.string())]


# ------------------------------------------------------------------------------------------------
# The rule


@pytest.mark.unit
def test_a_first_failure_opens_the_breaker_for_the_cooldown() -> None:
    trip = next_trip(None, 1_000, "batch b: HTTP 503", COOL)
    assert trip == Trip(until_ms=11_000, trips=1, since_ms=1_000, reason="batch b: HTTP 503")
    assert trip.is_open(10_999) and not trip.is_open(11_000)


@pytest.mark.unit
def test_a_failure_while_open_belongs_to_the_trip_in_force() -> None:
    first = next_trip(None, 1_000, "first", COOL)
    assert next_trip(first, 5_000, "another batch of the same outage", COOL) is first


@pytest.mark.unit
def test_each_failed_probe_doubles_the_cooldown_up_to_the_maximum() -> None:
    trip = next_trip(None, 0, "r", COOL)
    cooldowns = []
    for _ in range(5):
        probe_fails_at = trip.until_ms + 1  # half-open: the probe fails just after the cooldown
        trip = next_trip(trip, probe_fails_at, "r", COOL)
        cooldowns.append(trip.until_ms - probe_fails_at)
    assert cooldowns == [20_000, 40_000, 60_000, 60_000, 60_000]
    assert trip.trips == 6 and trip.since_ms == 0


@pytest.mark.unit
def test_a_failure_long_after_the_last_cooldown_starts_a_new_outage() -> None:
    old = next_trip(next_trip(None, 0, "r", COOL), 10_001, "r", COOL)  # 2 trips, until 30_001
    later = next_trip(old, old.until_ms + 60_001, "new", COOL)
    assert (later.trips, later.since_ms) == (1, old.until_ms + 60_001)
    assert later.until_ms - later.since_ms == 10_000


@pytest.mark.unit
def test_a_process_breaker_closes_only_on_the_trip_it_saw() -> None:
    breaker = Breaker(COOL)
    seen = breaker.trip(URL, "r")
    assert breaker.state(URL) == seen
    breaker.close(URL, Trip(until_ms=1, trips=9, since_ms=0, reason="an older trip"))
    assert breaker.state(URL) == seen
    breaker.close(URL, seen)
    assert breaker.state(URL) is None


# ------------------------------------------------------------------------------------------------
# Shared through Redis


@pytest.mark.integration
def test_breakers_are_shared_between_processes_through_redis(redis_client: redis.Redis[bytes]) -> None:
    keys = Keys(unique("brk"))
    api, worker = Breaker(COOL, redis_client, keys), Breaker(COOL, redis_client, keys)
    tripped = worker.trip(URL, "batch b: HTTP 503")
    assert api.state(URL) == tripped
    assert redis_client.hexists(keys.breakers(), service_id(URL))
    assert Breaker(client=redis_client, keys=keys).states([URL, "https://other.example/"]) == {URL: tripped}
    api.close(URL, tripped)
    assert worker.state(URL) is None
    assert not redis_client.exists(keys.breakers())


@pytest.mark.integration
def test_concurrent_trips_of_one_outage_count_once(redis_client: redis.Redis[bytes]) -> None:
    keys = Keys(unique("brk"))
    breakers = [Breaker(COOL, redis_client, keys) for _ in range(8)]
    start = threading.Barrier(len(breakers))
    trips: list[Trip] = []

    def trip(b: Breaker) -> None:
        start.wait()
        trips.append(b.trip(URL, "r"))

    threads = [threading.Thread(target=trip, args=(b,)) for b in breakers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(trips) == 8 and len(set(trips)) == 1, trips
    assert trips[0].trips == 1


@pytest.mark.integration
def test_a_newer_trip_survives_a_close_of_an_older_one(redis_client: redis.Redis[bytes]) -> None:
    keys = Keys(unique("brk"))
    settings = COOL.model_copy(update={"breaker_cooldown_s": 0.001})
    breaker = Breaker(settings, redis_client, keys)
    old = breaker.trip(URL, "old")
    wait_until(lambda: not old.is_open(int(time.time() * 1000)), what="the 1 ms cooldown to pass")
    newer = breaker.trip(URL, "the probe failed")
    breaker.close(URL, old)  # a probe that succeeded before the newer failure
    assert breaker.state(URL) == newer


@pytest.mark.integration
def test_without_redis_a_breaker_keeps_working_in_its_process() -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    try:
        breaker = Breaker(COOL, dead, Keys(unique("brk")))
        tripped = breaker.trip(URL, "r")
        assert breaker.state(URL) == tripped
        breaker.close(URL, tripped)
        assert breaker.state(URL) is None
    finally:
        dead.close()


# ------------------------------------------------------------------------------------------------
# What a caller does with them


def failing_service(serve: Serve, recorder: Recorder, up: threading.Event) -> str:
    """Answers 503 until ``up`` is set, then echoes."""

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        return echo(parsed) if up.is_set() else Response(status_code=503)

    return serve(app_of(handle)) + "/f"


@pytest.mark.integration
def test_one_unavailable_batch_stops_the_calls_other_batches(serve: Serve) -> None:
    recorder, up = Recorder(), threading.Event()
    fn = remote_function(failing_service(serve, recorder, up))
    settings = FAST.model_copy(update={"retry_timeout_s": 0.2, "max_batch_rows": 1, "max_concurrency": 1})
    with FunctionCaller(settings) as caller:
        outcome = caller.call(fn, strings("a", "b", "c", "d"), CTX)
    assert outcome.failed_rows == 4
    assert len(set(recorder.batch_ids)) == 1, "only the first batch was sent"
    assert outcome.unavailable == outcome.errors[0].as_py()
    later = [outcome.errors[i].as_py() for i in (1, 2, 3)]
    assert all("not sent: the remote service is unavailable" in m for m in later), later


@pytest.mark.integration
def test_a_half_open_breaker_lets_a_probe_through_and_its_answer_closes_it(serve: Serve) -> None:
    recorder, up = Recorder(), threading.Event()
    fn = remote_function(failing_service(serve, recorder, up))
    settings = FAST.model_copy(update={"retry_timeout_s": 0.2, "breaker_cooldown_s": 0.5})
    breaker = Breaker(settings)
    with FunctionCaller(settings, breaker=breaker) as caller:
        assert caller.call(fn, strings("a"), CTX).unavailable is not None
        trip = breaker.state(fn.url)
        assert trip is not None
        tried = recorder.requests
        held = caller.call(fn, strings("b"), CTX)
        assert held.unavailable is not None and "held back until" in held.unavailable
        assert recorder.requests == tried, "an open breaker sends nothing"
        up.set()
        wait_until(lambda: not trip.is_open(int(time.time() * 1000)), what="the cooldown to end")
        probe = caller.call(fn, strings("c"), CTX)
        assert probe.values.to_pylist() == ["c"] and probe.unavailable is None
        assert breaker.state(fn.url) is None, "the probe's answer closed the breaker"
        assert recorder.requests == tried + 1


def hanging_service(serve: Serve, recorder: Recorder, gate: threading.Event) -> str:
    """Answers only once ``gate`` is set (at the test's teardown)."""

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        await wait_for(gate)
        return echo(parsed)

    return serve(app_of(handle)) + "/f"


@pytest.mark.integration
def test_a_hanging_request_is_cut_at_the_calls_retry_budget(serve: Serve, gate: threading.Event) -> None:
    recorder = Recorder()
    fn = remote_function(hanging_service(serve, recorder, gate))
    # request_timeout_s alone would wait 120 s, and say so; the batch's budget is 0.3 s.
    settings = FAST.model_copy(update={"request_timeout_s": 120.0, "pipe_retry_timeout_s": 0.3})
    with FunctionCaller(settings) as caller:
        outcome = caller.call(fn, strings("a"), CTX, in_pipe=True)
    message = outcome.errors[0].as_py()
    assert recorder.requests == 1
    assert "no answer after 1 attempt within external_functions.pipe_retry_timeout_s (0.3 s)" in message
    assert "last: timed out after 0.3 s, the rest of the batch's retry budget" in message


@pytest.mark.integration
def test_a_statements_deadline_stops_the_call_without_tripping_the_breaker(
    serve: Serve, gate: threading.Event
) -> None:
    recorder = Recorder()
    fn = remote_function(hanging_service(serve, recorder, gate))
    breaker = Breaker(FAST)
    with (
        FunctionCaller(FAST, breaker=breaker) as caller,
        pytest.raises(ExternalFunctionFailed, match="the statement reached its time limit"),
    ):
        caller.call_or_raise(fn, strings("a"), CTX, deadline=time.monotonic() + 0.3)
    assert recorder.requests == 1
    assert breaker.state(fn.url) is None


@pytest.mark.integration
def test_an_open_breaker_fails_a_query_at_once(serve: Serve) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        return echo(await recorder.receive(request))

    fn = remote_function(serve(app_of(handle)) + "/f")
    breaker = Breaker(COOL)
    breaker.trip(fn.url, "batch x: no answer")
    with (
        FunctionCaller(FAST, breaker=breaker) as caller,
        pytest.raises(ExternalFunctionUnavailable, match=r"held back until .* UTC") as err,
    ):
        caller.call_or_raise(fn, strings("a"), CTX)
    assert "it last failed at batch x: no answer" in str(err.value)
    assert recorder.requests == 0
