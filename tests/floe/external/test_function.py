"""A function as one call sees it, and the egress check made before every request."""

from __future__ import annotations

import pytest

from floe.catalog.models import ApiIntegration, Column, ExternalFunction
from floe.external import ExternalFunctionRefused, RemoteFunction
from tests.floe.external.conftest import remote_function

pytestmark = pytest.mark.unit

URL = "https://fx.example.com/v1/echo"


def test_of_takes_everything_a_call_needs_and_keeps_the_key_out_of_repr() -> None:
    integration = ApiIntegration(
        name="API",
        provider="AWS_API_GATEWAY",
        allowed_prefixes=["https://fx.example.com/v1"],
        blocked_prefixes=["https://fx.example.com/v1/admin"],
        api_key="very-secret",
    )
    fn = ExternalFunction(
        name="DB.S.F(VARCHAR)",
        function_name="DB.S.F",
        args=[Column(name="X", type="VARCHAR")],
        returns=Column(name="F", type="NUMBER", precision=10, scale=2, nullable=False),
        volatility="IMMUTABLE",
        integration="API",
        headers=[("X-Model", "v2")],
        context_headers=["CURRENT_USER"],
        max_batch_rows=50,
        compression="DEFLATE",
        url=URL,
        created_ms=7,
    )
    remote = RemoteFunction.of(fn, integration)
    assert remote.name == "DB.S.F(VARCHAR)"
    assert remote.immutable and remote.max_batch_rows == 50 and remote.compression == "DEFLATE"
    assert remote.headers == (("x-model", "v2"),)
    assert remote.context_headers == ("CURRENT_USER",)
    assert remote.blocked_prefixes == ("https://fx.example.com/v1/admin",)
    assert remote.api_key == "very-secret"
    assert "very-secret" not in repr(remote)
    assert remote.refusal() is None
    with pytest.raises(ValueError, match="calls through API, not OTHER"):
        RemoteFunction.of(fn, integration.model_copy(update={"name": "OTHER"}))


@pytest.mark.parametrize(
    ("url", "options", "expected"),
    [
        (URL, {"enabled": False}, "API integration TEST_API is disabled"),
        (URL, {"allowed": ["https://fx.example.com/v2"]}, "lies under none of its API_ALLOWED_PREFIXES"),
        # Segment boundaries, not string prefixes: /v1evil is not under /v1.
        ("https://fx.example.com/v1evil", {"allowed": ["https://fx.example.com/v1"]}, "none of its"),
        (URL, {"blocked": ["https://fx.example.com/v1/"]}, "lies under one of its API_BLOCKED_PREFIXES"),
        ("http://fx.example.com/v1/echo", {}, "plain http:// is only accepted for loopback hosts"),
    ],
)
def test_refusals_say_which_integration_refused_and_why(
    url: str, options: dict[str, object], expected: str
) -> None:
    fn = remote_function(url, **options)  # type: ignore[arg-type]
    with pytest.raises(ExternalFunctionRefused) as caught:
        fn.check_egress("b-1")
    assert expected in caught.value.message
    assert caught.value.message.startswith("External function DB.S.ECHO(VARCHAR), batch b-1: ")
    assert "no request was sent" in caught.value.message


def test_identity_changes_with_name_url_integration_and_incarnation() -> None:
    base = remote_function(URL)
    assert base.identity == remote_function(URL).identity
    assert base.identity != remote_function(URL + "2").identity
    assert base.identity != remote_function(URL, created_ms=5).identity
