"""The example remote service (examples/remote_service) called through Floe's caller, signed."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pytest
from starlette.types import ASGIApp

from examples.remote_service.app import create_app
from floe.catalog.models import Column
from floe.external import CallContext, FunctionCaller
from tests.floe.external.conftest import VARCHAR, VARIANT, remote_function

pytestmark = pytest.mark.integration

MONEY = Column(name="AMOUNT", type="NUMBER", precision=38, scale=2)
CTX = CallContext(query_id="example-query")
KEY = "example-key"


def test_convert_and_sentiment_answer_through_the_caller(
    serve: Callable[[ASGIApp], str], caller: FunctionCaller
) -> None:
    base = serve(create_app(api_key=KEY))
    convert = remote_function(
        base + "/convert", args=[MONEY, VARCHAR], returns=MONEY, immutable=True, api_key=KEY
    )
    amounts = pa.array(
        [Decimal("12.50"), Decimal("100"), None, Decimal("3"), Decimal("0.01")], pa.decimal128(38, 2)
    )
    currencies = pa.array(["EUR", "jpy", "USD", "XXX", "GBP"])
    values = caller.call_or_raise(convert, [amounts, currencies], CTX).to_pylist()
    assert values == [Decimal("13.50"), Decimal("0.67"), None, None, Decimal("0.01")]

    sentiment = remote_function(base + "/sentiment", returns=VARIANT, api_key=KEY)
    texts = pa.array(["Great service, I love it", "slow and broken", "it is a table", None])
    out = caller.call_or_raise(sentiment, [texts], CTX).to_pylist()
    assert [json.loads(v) if v is not None else None for v in out] == [
        {"score": 1.0, "label": "positive"},
        {"score": -1.0, "label": "negative"},
        {"score": 0.0, "label": "neutral"},
        None,
    ]


def test_the_example_refuses_requests_signed_with_another_key(
    serve: Callable[[ASGIApp], str], caller: FunctionCaller
) -> None:
    base = serve(create_app(api_key=KEY))
    for key in ("wrong-key", None):
        fn = remote_function(base + "/sentiment", returns=VARIANT, api_key=key)
        outcome = caller.call(fn, [pa.array(["good"])], CTX)
        assert "the remote service answered HTTP 401" in outcome.errors[0].as_py()
