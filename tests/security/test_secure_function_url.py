"""A SECURE external function's URL is its owner's to see (issue 31, item 9).

After its integration was narrowed, a call's refusal named the URL to whoever called the function,
which SHOW and DESC hide from everyone but its owner. The refusal now names the function instead.
"""

from __future__ import annotations

import pytest

from floe.catalog.models import ApiIntegration, Column, ExternalFunction
from floe.external import ExternalFunctionRefused, RemoteFunction

pytestmark = pytest.mark.unit

URL = "https://fx.example.com/v1/internal-scoring"


def _narrowed(secure: bool, blocked: bool) -> RemoteFunction:
    """The function, through an integration narrowed after its creation: its URL now lies outside
    the allowed prefixes, or under a blocked one."""
    integration = ApiIntegration(
        name="API",
        provider="AWS_API_GATEWAY",
        allowed_prefixes=["https://fx.example.com/v1/" if blocked else "https://fx.example.com/v2/"],
        blocked_prefixes=["https://fx.example.com/v1/internal-scoring"] if blocked else [],
    )
    fn = ExternalFunction(
        name="DB.S.SCORE(VARCHAR)",
        function_name="DB.S.SCORE",
        args=[Column(name="X", type="VARCHAR")],
        returns=Column(name="SCORE", type="VARIANT"),
        integration="API",
        url=URL,
        secure=secure,
    )
    return RemoteFunction.of(fn, integration)


@pytest.mark.parametrize("blocked", [False, True])
def test_a_secure_functions_refusal_does_not_show_its_url(blocked: bool) -> None:
    with pytest.raises(ExternalFunctionRefused) as caught:
        _narrowed(secure=True, blocked=blocked).check_egress("b-1")
    message = caught.value.message
    assert "API integration API does not allow" in message, message
    assert URL not in message and "fx.example.com" not in message, message
    assert "secure function DB.S.SCORE(VARCHAR)" in message


@pytest.mark.parametrize("blocked", [False, True])
def test_a_functions_refusal_shows_its_url_when_it_is_not_secure(blocked: bool) -> None:
    with pytest.raises(ExternalFunctionRefused) as caught:
        _narrowed(secure=False, blocked=blocked).check_egress("b-1")
    assert URL in caught.value.message
