"""The author helper's Starlette endpoint (``remote.endpoint``) on a real server: bad input is a
400 that Floe does not retry, a crash a 500 that it does, and large answers come back gzipped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

from floe.external import CallContext, FunctionCaller
from floe.external.remote import endpoint
from tests.floe.external.conftest import NUMBER, remote_function

pytestmark = pytest.mark.integration

CTX = CallContext(query_id="endpoint-query")


class Counted:
    """A per-row function that counts its calls and fails on chosen inputs."""

    def __init__(self) -> None:
        self.calls = 0
        self.crashes = 0

    def __call__(self, text: str | None) -> Any:
        self.calls += 1
        if text == "bad input":
            raise ValueError("not a number")
        if text == "crash" and self.crashes == 0:
            self.crashes += 1
            raise RuntimeError("the model is not loaded yet")
        return None if text is None else len(text)


def test_endpoint_answers_refuses_bad_input_and_lets_crashes_retry(
    serve: Callable[[ASGIApp], str], caller: FunctionCaller
) -> None:
    fn_impl = Counted()
    app = Starlette(routes=[Route("/len", endpoint(fn_impl), methods=["POST"])])
    fn = remote_function(serve(app) + "/len", returns=NUMBER)
    assert caller.call_or_raise(fn, [pa.array(["abc", None, "x" * 3000])], CTX).to_pylist() == [3, None, 3000]

    outcome = caller.call(fn, [pa.array(["ok", "bad input"])], CTX)
    assert "the remote service answered HTTP 400" in outcome.errors[0].as_py()
    assert outcome.requests == 1  # bad input is not retried

    calls_before = fn_impl.calls
    outcome = caller.call(fn, [pa.array(["crash"])], CTX)
    assert fn_impl.crashes == 1, "the crash was not injected"
    assert outcome.values.to_pylist() == [5] and outcome.retries == 1
    assert fn_impl.calls == calls_before + 2


def test_zero_argument_functions_and_empty_calls(
    serve: Callable[[ASGIApp], str], caller: FunctionCaller
) -> None:
    app = Starlette(routes=[Route("/one", endpoint(lambda: 1), methods=["POST"])])
    fn = remote_function(serve(app) + "/one", args=[], returns=NUMBER)
    assert caller.call_or_raise(fn, [], CTX, num_rows=3).to_pylist() == [1, 1, 1]
    with pytest.raises(ValueError, match="pass num_rows"):
        caller.call(fn, [], CTX)
    empty = caller.call(remote_function(serve(app) + "/one"), [pa.array([], pa.string())], CTX)
    assert len(empty.values) == 0 and empty.requests == 0
