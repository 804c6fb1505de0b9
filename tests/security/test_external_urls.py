"""An external function's URL reaches the service in the form it was compared in (issue 31, item 5).

A server, or the HTTP client on the way, removes dot segments, decodes percent-encoded unreserved
characters and often collapses ``//``: a URL written with them lay under an allowed prefix and
outside a blocked one as written, and was called at the blocked path, with the integration's API key.
Floe refuses such a URL, at CREATE EXTERNAL FUNCTION and before every call (``check_function_url``),
and compares origins with the scheme's default port written out.
"""

from __future__ import annotations

import pytest

from floe.catalog.ddl import CreateExternalFunction, Defaults, parse
from floe.catalog.models import ApiIntegration, check_function_url
from floe.errors import CompilationError

pytestmark = pytest.mark.unit

GATE = ApiIntegration(
    name="GATE",
    owner="ACCOUNTADMIN",
    provider="AWS_API_GATEWAY",
    allowed_prefixes=["https://gw/prod/"],
    blocked_prefixes=["https://gw/prod/admin"],
)
FUNCTION = "CREATE EXTERNAL FUNCTION f(a INT) RETURNS VARIANT API_INTEGRATION = gate AS "

ESCAPES = [
    # The two requests: into the blocked prefix, and out of the allowed one.
    "https://gw/prod/x/../admin/f",
    "https://gw/prod/../other-team/collect",
    # Their encoded and spelled-out forms.
    "https://gw/prod/x/%2e%2e/admin/f",
    "https://gw/prod/x/.%2E/admin/f",
    "https://gw/prod/./admin/f",
    "https://gw/prod/%61dmin/f",
    "https://gw/prod/admin%2ff",
    "https://gw/prod//admin/f",
    "https://gw/prod/x\\..\\admin/f",
    "https://gw/prod/%zz/f",
]


@pytest.mark.parametrize("url", ESCAPES)
def test_a_url_not_in_the_form_it_is_sent_in_is_refused_at_create(url: str) -> None:
    with pytest.raises(CompilationError) as info:
        parse(FUNCTION + f"'{url}'", Defaults("D", "S"))
    assert "invalid URL" in str(info.value) and "after AS" in str(info.value)


@pytest.mark.parametrize("url", ESCAPES)
def test_a_stored_url_not_in_that_form_is_refused_before_any_call(url: str) -> None:
    """A function stored before this check (or by another path) still never calls its URL:
    ``ExternalFunction.refusal`` runs the same check before every request."""
    with pytest.raises(ValueError, match="the URL's path"):
        check_function_url(url)


def test_the_default_port_is_the_same_origin_as_none() -> None:
    """``https://gw:443/prod/admin/f`` is the blocked ``https://gw/prod/admin``'s, and an integration
    that allows ``https://gw:443/prod/`` allows ``https://gw/prod/f``."""
    assert not GATE.admits("https://gw:443/prod/admin/f")
    assert GATE.admits("https://gw:443/prod/f")
    other = GATE.model_copy(update={"allowed_prefixes": ["https://gw:443/prod/"], "blocked_prefixes": []})
    assert other.admits("https://gw/prod/f")
    assert not other.admits("https://gw:8443/prod/f")


@pytest.mark.parametrize(
    "url",
    [
        "https://gw/prod/f",
        "https://gw/prod/",
        "https://gw/prod/a.b/f..g",  # dots inside a segment are names, not dot segments
        "https://gw/prod/a%20b",  # a reserved or other character may stay encoded
        "https://gw/prod/f?x=..%2f",  # the query is compared whole, not as a path
    ],
)
def test_urls_in_normal_form_are_accepted(url: str) -> None:
    statement = parse(FUNCTION + f"'{url}'", Defaults("D", "S"))
    assert isinstance(statement, CreateExternalFunction)
    assert check_function_url(url) == url
