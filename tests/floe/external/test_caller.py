"""Calls through real HTTP servers on 127.0.0.1: answers, retries, timeouts, malformed answers,
egress refusal, IMMUTABLE dedup and caching, round trips, and concurrency."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import threading
import zlib
from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from floe.catalog.models import Column
from floe.external import (
    CallContext,
    ExternalFunctionFailed,
    ExternalFunctionRefused,
    ExternalFunctionUnavailable,
    FunctionCaller,
)
from floe.external.remote import RemoteRequest, build_response
from tests.conftest import wait_until
from tests.floe.external.conftest import (
    FAST,
    NUMBER,
    VARIANT,
    Recorder,
    app_of,
    echo,
    json_response,
    remote_function,
    wait_for,
)

pytestmark = pytest.mark.integration

Serve = Callable[[ASGIApp], str]
CTX = CallContext(query_id="01b2-query", context={"CURRENT_USER": "ALICE"})
SECRET_ROW = "SECRET-ROW-DATA"
SECRET_ANSWER = "SECRET-ANSWER"


def echo_service(serve: Serve, recorder: Recorder) -> str:
    """A service that echoes each row's first argument; returns its function URL."""

    async def handle(request: Request) -> Response:
        with recorder.flight():
            return echo(await recorder.receive(request))

    return serve(app_of(handle)) + "/v1/echo"


def strings(*values: str | None) -> list[pa.Array]:
    return [pa.array(values, pa.string())]


# ------------------------------------------------------------------------------------------------
# Answers and retries


def test_a_service_answers_every_row_with_the_protocols_headers(serve: Serve, caller: FunctionCaller) -> None:
    recorder = Recorder(api_key="k3y")
    fn = remote_function(
        echo_service(serve, recorder),
        api_key="k3y",
        headers=[("x-model", "v2")],
        context_headers=["CURRENT_USER"],
        max_batch_rows=2,
    )
    outcome = caller.call(fn, strings("a", "b", "c"), CTX)
    assert outcome.values.to_pylist() == ["a", "b", "c"]
    assert outcome.errors.to_pylist() == [None, None, None]
    assert outcome.failed_rows == 0
    assert (outcome.batches, outcome.requests, outcome.retries) == (2, 2, 0)
    assert recorder.requests == 2  # the service verified both signatures (Recorder.api_key)
    first = recorder.seen[0]
    assert first.content_encoding == "gzip"  # COMPRESSION = AUTO
    # Batches run concurrently, so they may arrive in either order; row numbers start at 0 in each.
    assert sorted(s.request.rows for s in recorder.seen) == [[[0, "a"], [1, "b"]], [[0, "c"]]]
    headers = first.request.headers
    assert headers["sf-external-function-format"] == "json"
    assert headers["sf-external-function-format-version"] == "1.0"
    assert headers["sf-external-function-current-query-id"] == "01b2-query"
    assert headers["x-model"] == "v2" and headers["x-api-key"] == "k3y"
    assert first.request.context == {"CURRENT_USER": "ALICE"}
    assert len(set(recorder.batch_ids)) == 2
    assert caller.call_or_raise(fn, strings("z"), CTX).to_pylist() == ["z"]


def test_a_throttled_batch_is_retried_with_the_same_batch_id(serve: Serve, caller: FunctionCaller) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        if recorder.requests == 1:
            return Response(status_code=429, headers={"Retry-After": "0"})
        return echo(parsed)

    fn = remote_function(serve(app_of(handle)) + "/f")
    outcome = caller.call(fn, strings("a", "b"), CTX)
    assert outcome.values.to_pylist() == ["a", "b"]
    assert recorder.requests == 2, "the 429 was not returned"
    assert (outcome.requests, outcome.retries, outcome.batches) == (2, 1, 1)
    assert len(set(recorder.batch_ids)) == 1


def test_a_batch_survives_two_500s_and_keeps_its_batch_id(serve: Serve, caller: FunctionCaller) -> None:
    recorder = Recorder()
    failures = 0

    async def handle(request: Request) -> Response:
        nonlocal failures
        parsed = await recorder.receive(request)
        if failures < 2:
            failures += 1
            return Response("SECRET-ANSWER oops", status_code=500)
        return echo(parsed)

    fn = remote_function(serve(app_of(handle)) + "/f")
    outcome = caller.call(fn, strings("a"), CTX)
    assert failures == 2
    assert outcome.values.to_pylist() == ["a"]
    assert recorder.requests == 3
    assert len(set(recorder.batch_ids)) == 1, "every retry must carry the batch's id"
    assert outcome.retries == 2


def test_a_service_that_keeps_failing_exhausts_the_retry_budget(serve: Serve) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        await recorder.receive(request)
        return Response(status_code=503)

    fn = remote_function(serve(app_of(handle)) + "/f")
    with FunctionCaller(FAST.model_copy(update={"retry_timeout_s": 0.3})) as short:
        outcome = short.call(fn, strings("a"), CTX)
        tried = recorder.requests
        # The failure tripped the service's breaker: the next call fails without a request.
        with pytest.raises(ExternalFunctionUnavailable, match=r"held back until .*last: HTTP 503"):
            short.call_or_raise(fn, strings("a"), CTX)
    message = outcome.errors[0].as_py()
    assert re.search(
        r"no answer after \d+ attempts? within external_functions.retry_timeout_s \(0.3 s\)", message
    )
    assert message.endswith("last: HTTP 503")
    assert outcome.unavailable == message
    assert tried >= 2, "the batch was retried"
    assert recorder.requests == tried


def test_a_hanging_service_times_out_and_fails_its_rows(serve: Serve, gate: threading.Event) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        await wait_for(gate)  # released at teardown, after the client gave up
        return echo(parsed)

    fn = remote_function(serve(app_of(handle)) + "/f")
    settings = FAST.model_copy(update={"request_timeout_s": 0.2, "retry_timeout_s": 0.5})
    with FunctionCaller(settings) as short:
        outcome = short.call(fn, strings("a", "b"), CTX)
    assert recorder.requests >= 1, "the service never received the request"
    assert len(set(recorder.batch_ids)) == 1
    assert outcome.values.to_pylist() == [None, None]
    message = outcome.errors[0].as_py()
    assert message == outcome.errors[1].as_py()
    assert f"batch {recorder.batch_ids[0]}: no answer after" in message
    assert "within external_functions.retry_timeout_s (0.5 s); last: timed out" in message


# ------------------------------------------------------------------------------------------------
# Answers that break the protocol: terminal, not retried, and never shown


def _gzip(body: bytes) -> Response:
    return json_response(gzip.compress(body), headers={"Content-Encoding": "gzip"})


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            lambda r: json_response(build_response([(0, SECRET_ANSWER)])),
            "the response has 1 rows; 2 were sent",
        ),
        (
            lambda r: json_response(build_response([(0, 1), (1, 2), (2, 3)])),
            "the response has 3 rows; 2 were sent",
        ),
        (
            lambda r: json_response(build_response([(1, SECRET_ANSWER), (0, SECRET_ANSWER)])),
            "response row 0 does not have row number 0",
        ),
        (
            lambda r: json_response(json.dumps({"data": [[0, SECRET_ANSWER, 2], [1, "x", 3]]}).encode()),
            "response row 0 has 2 values; a scalar function returns exactly one",
        ),
        (lambda r: json_response(f"<html>{SECRET_ANSWER}</html>".encode()), "the response body is not JSON"),
        (lambda r: _gzip(f"not json {SECRET_ANSWER}".encode()), "the response body is not JSON"),
        (lambda r: Response(SECRET_ANSWER, status_code=404), "the remote service answered HTTP 404"),
        (lambda r: Response(SECRET_ANSWER, status_code=400), "the remote service answered HTTP 400"),
        (
            lambda r: Response(status_code=302, headers={"Location": "http://169.254.169.254/"}),
            "answered HTTP 302 (redirects are not followed)",
        ),
        (lambda r: Response(status_code=204), "the remote service answered HTTP 204"),
    ],
    ids=[
        "too-few",
        "too-many",
        "reordered",
        "two-values",
        "not-json",
        "gzip-not-json",
        "404",
        "400",
        "302",
        "204",
    ],
)
def test_a_malformed_answer_fails_its_batch_at_once_without_showing_data(
    serve: Serve, caller: FunctionCaller, answer: Callable[[RemoteRequest], Response], expected: str
) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        return answer(await recorder.receive(request))

    fn = remote_function(serve(app_of(handle)) + "/f")
    outcome = caller.call(fn, strings(SECRET_ROW, SECRET_ROW), CTX)
    assert recorder.requests == 1, "a malformed answer must not be retried"
    [batch] = recorder.batch_ids
    message = outcome.errors[0].as_py()
    assert message == outcome.errors[1].as_py()
    assert message.startswith(f"External function DB.S.ECHO(VARCHAR), batch {batch}: ")
    assert expected in message
    assert SECRET_ROW not in message and SECRET_ANSWER not in message
    assert outcome.values.null_count == 2
    with pytest.raises(ExternalFunctionFailed) as caught:
        caller.call_or_raise(fn, strings(SECRET_ROW, SECRET_ROW), CTX)
    assert expected in caught.value.message and SECRET_ANSWER not in str(caught.value)


def test_values_that_do_not_convert_or_null_for_not_null_fail_their_batch(
    serve: Serve, caller: FunctionCaller
) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        return json_response(
            build_response(parsed, [SECRET_ANSWER if row[0] == "text" else None for row in parsed.args])
        )

    url = serve(app_of(handle)) + "/f"
    number = remote_function(url, returns=NUMBER)
    result = caller.call(number, strings("ok", "text"), CTX)
    message = result.errors[1].as_py()
    assert "row 1: expected NUMBER(38,0), got a string that is not a number" in message
    assert SECRET_ANSWER not in message
    not_null = remote_function(url, returns=Column(name="F", type="VARCHAR", nullable=False))
    message = caller.call(not_null, strings("x"), CTX).errors[0].as_py()
    assert "row 0: null returned by a function that RETURNS VARCHAR NOT NULL" in message


def test_a_failed_batch_fails_only_its_rows(serve: Serve, caller: FunctionCaller) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        if ["bad"] in parsed.args:
            return Response(status_code=400)
        return echo(parsed)

    fn = remote_function(serve(app_of(handle)) + "/f", max_batch_rows=2)
    outcome = caller.call(fn, strings("a", "b", "c", "bad", "e"), CTX)
    assert outcome.values.to_pylist() == ["a", "b", None, None, "e"]
    errors = outcome.errors.to_pylist()
    assert errors[:2] == [None, None] and errors[4] is None
    assert errors[2] == errors[3] and "HTTP 400" in errors[2]
    assert recorder.requests == 3


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_answers_are_read(serve: Serve, caller: FunctionCaller, encoding: str) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        body = echo(await recorder.receive(request)).body
        packed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
        return json_response(packed, headers={"Content-Encoding": encoding})

    fn = remote_function(
        serve(app_of(handle)) + "/f", compression="DEFLATE" if encoding == "deflate" else "GZIP"
    )
    assert caller.call_or_raise(fn, strings("a" * 5000, None), CTX).to_pylist() == ["a" * 5000, None]
    assert recorder.seen[0].content_encoding == encoding


def test_an_answer_past_max_response_bytes_fails(serve: Serve) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        return _gzip(build_response(parsed, ["x" * 100_000]))

    fn = remote_function(serve(app_of(handle)) + "/f")
    small = FAST.model_copy(update={"max_response_bytes": 10_000})
    with (
        FunctionCaller(small) as limited,
        pytest.raises(ExternalFunctionFailed, match="larger than 10000 bytes"),
    ):
        limited.call_or_raise(fn, strings("a"), CTX)
    assert recorder.requests == 1


# ------------------------------------------------------------------------------------------------
# Egress


def test_a_url_outside_the_allowed_prefixes_is_refused_before_any_request(
    serve: Serve, caller: FunctionCaller
) -> None:
    recorder = Recorder()
    url = echo_service(serve, recorder)
    outside = remote_function(url, allowed=[url.rsplit("/", 2)[0] + "/v2"])
    outcome = caller.call(outside, strings("a", "b"), CTX)
    assert outcome.failed_rows == 2
    assert "API integration TEST_API does not allow" in outcome.errors[0].as_py()
    with pytest.raises(ExternalFunctionRefused, match="API integration TEST_API is disabled"):
        caller.call_or_raise(remote_function(url, enabled=False), strings("a"), CTX)
    assert recorder.requests == 0
    assert outcome.requests == 0
    caller.call_or_raise(remote_function(url), strings("a"), CTX)
    assert recorder.requests == 1  # the same service, allowed, is reached


# ------------------------------------------------------------------------------------------------
# IMMUTABLE and VOLATILE


def test_immutable_rows_are_sent_once_and_cached_and_volatile_ones_never(
    serve: Serve, caller: FunctionCaller
) -> None:
    recorder = Recorder()
    url = echo_service(serve, recorder)
    args = strings("a", "b", "a", "a", None, None)
    immutable = remote_function(url, immutable=True)
    first = caller.call(immutable, args, CTX)
    assert first.values.to_pylist() == ["a", "b", "a", "a", None, None]
    assert recorder.rows == 3 and first.deduplicated == 3 and first.cache_hits == 0
    second = caller.call(immutable, args, CTX)
    assert second.values.to_pylist() == first.values.to_pylist()
    assert second.cache_hits == 6 and second.requests == 0
    assert recorder.rows == 3, "cached rows were sent again"
    # Another query sees the cache too; another user (a context header value) does not.
    with_user = remote_function(url, immutable=True, context_headers=["CURRENT_USER"])
    caller.call(with_user, strings("a"), CTX)
    caller.call(with_user, strings("a"), CallContext("q-2", {"CURRENT_USER": "ALICE"}))
    caller.call(with_user, strings("a"), CallContext("q-3", {"CURRENT_USER": "BOB"}))
    assert recorder.rows == 5

    volatile = remote_function(url)
    for _ in range(2):
        outcome = caller.call(volatile, args, CTX)
        assert outcome.cache_hits == 0 and outcome.deduplicated == 0
    assert recorder.rows == 5 + 12


def test_failures_are_not_cached(serve: Serve, caller: FunctionCaller) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        return Response(status_code=400) if recorder.requests == 1 else echo(parsed)

    fn = remote_function(serve(app_of(handle)) + "/f", immutable=True)
    assert caller.call(fn, strings("a"), CTX).failed_rows == 1
    assert caller.call(fn, strings("a"), CTX).values.to_pylist() == ["a"]
    assert caller.call(fn, strings("a"), CTX).cache_hits == 1
    assert recorder.requests == 2


def test_strict_functions_do_not_send_null_rows(serve: Serve, caller: FunctionCaller) -> None:
    recorder = Recorder()
    fn = dataclasses.replace(remote_function(echo_service(serve, recorder)), strict=True)
    outcome = caller.call(fn, strings("a", None, "c"), CTX)
    assert outcome.values.to_pylist() == ["a", None, "c"] and outcome.failed_rows == 0
    assert recorder.rows == 2


# ------------------------------------------------------------------------------------------------
# Round trips and concurrency


def test_nulls_empty_values_a_1_mb_string_and_variants_round_trip(
    serve: Serve, caller: FunctionCaller
) -> None:
    recorder = Recorder()
    url = echo_service(serve, recorder)
    texts = ["", None, "ü" * 1_000_000, " spaces ", "null"]
    assert caller.call_or_raise(remote_function(url), strings(*texts), CTX).to_pylist() == texts
    variants = ['{"a":[1,{"b":null}]}', "{}", "[]", '""', "12345678901234567890123", "0.10", None]
    fn = remote_function(url, args=[VARIANT], returns=VARIANT)
    assert caller.call_or_raise(fn, strings(*variants), CTX).to_pylist() == variants
    # The VARIANT object went as an object, not as a string holding JSON.
    assert recorder.seen[-1].request.rows[0] == [0, {"a": [1, {"b": None}]}]
    numbers = [pa.array([Decimal("12345678901234567890.123456789012345678"), None], pa.decimal128(38, 18))]
    wide = Column(name="W", type="NUMBER", precision=38, scale=18)
    assert caller.call_or_raise(
        remote_function(url, args=[wide], returns=wide), numbers, CTX
    ).to_pylist() == [
        Decimal("12345678901234567890.123456789012345678"),
        None,
    ]


def test_batches_run_concurrently(serve: Serve, caller: FunctionCaller) -> None:
    recorder = Recorder()
    together = threading.Event()

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        with recorder.flight() as in_flight:
            if in_flight >= 2:
                together.set()
            # A serial caller would hold the only request here until the wait gives up.
            await wait_for(together, 20)
            return echo(parsed)

    fn = remote_function(serve(app_of(handle)) + "/f", max_batch_rows=1)
    outcome = caller.call(fn, strings("a", "b", "c", "d", "e", "f"), CTX)
    assert together.is_set(), "no two requests were ever in flight at once"
    assert outcome.values.to_pylist() == ["a", "b", "c", "d", "e", "f"]
    assert outcome.batches == 6
    assert recorder.max_in_flight >= 2 and outcome.max_in_flight >= 2
    assert outcome.max_in_flight <= FAST.max_concurrency


def test_call_or_raise_starts_no_batch_after_the_first_failure(serve: Serve) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        await recorder.receive(request)
        return Response(status_code=400)

    fn = remote_function(serve(app_of(handle)) + "/f", max_batch_rows=1)
    with FunctionCaller(FAST.model_copy(update={"max_concurrency": 1})) as serial:
        with pytest.raises(ExternalFunctionFailed, match="HTTP 400"):
            serial.call_or_raise(fn, strings("a", "b", "c", "d"), CTX)
        assert recorder.requests == 1
        outcome = serial.call(fn, strings("a", "b", "c", "d"), CTX)
    assert outcome.failed_rows == 4 and recorder.requests == 5  # call() tries every batch


def test_closing_the_caller_stops_a_call_that_is_retrying(serve: Serve) -> None:
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        await recorder.receive(request)
        return Response(status_code=503)

    fn = remote_function(serve(app_of(handle)) + "/f")
    closing = FunctionCaller(FAST.model_copy(update={"retry_timeout_s": 600.0}))

    def close_after_two_attempts() -> None:
        wait_until(lambda: recorder.requests >= 2, timeout=30, interval=0.01, what="two 503s")
        closing.close()

    closer = threading.Thread(target=close_after_two_attempts)
    closer.start()
    try:
        outcome = closing.call(fn, strings("a"), CTX)
    finally:
        closer.join(30)
        closing.close()
    assert recorder.requests >= 2
    assert "not sent: the call was stopped" in outcome.errors[0].as_py()
    with pytest.raises(RuntimeError, match="closed"):
        closing.call(fn, strings("a"), CTX)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("rows", "max_batch_rows", "expected"),
    [
        (2048, None, 256),  # a query's vector: spread over the 8 requests allowed at once
        (100, None, 128),  # never below MIN_SPREAD_ROWS: one batch
        (100_000, None, 1000),  # the setting caps it
        (2048, 100, 100),  # and MAX_BATCH_ROWS caps it
        (2048, 1, 1),
    ],
)
def test_batches_spread_a_call_over_the_concurrent_requests(
    rows: int, max_batch_rows: int | None, expected: int
) -> None:
    settings = FAST.model_copy(update={"max_concurrency": 8, "max_batch_rows": 1000})
    fn = remote_function("http://127.0.0.1:9/f", max_batch_rows=max_batch_rows)
    with FunctionCaller(settings) as caller:
        assert caller._batch_rows(fn, rows) == expected
