"""The console's sign-in link cannot be used against a browser from another site (issue 31, item 11).

``GET /console/signin?code=`` consumed the code and set the session cookie: any site could sign a
visitor in to the console as the site's own user (a link, an image, a redirect), or burn the code
a user had just been given. Opening the link now only shows a page that says whom it signs in as;
signing in is a POST of the code and a form token, which is bound to a cookie the page set
(``SameSite=Strict``) and keyed by the API's secret, from a page of this host.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
import redis
from fastapi.routing import iter_route_contexts

from floe.settings import Settings
from services.console.forms import SIGNIN_COOKIE
from services.console.routes import COOKIE
from tests.asgi import AppClient
from tests.services.test_console import FORM, Console, _console, sign_in, signin_fields

pytestmark = pytest.mark.integration

SIGNIN = "/console/signin"
EVIL = "http://evil.example"


@pytest.fixture
def console(
    isolated_settings: Settings, redis_client: redis.Redis[bytes], tmp_path: Path
) -> Iterator[Console]:
    """The console of an in-process API, with tests/services/test_console.py's pipes."""
    yield from _console(isolated_settings, redis_client, tmp_path)


def _session_keys(console: Console) -> set[bytes]:
    return set(console.redis.scan_iter(match=f"{console.settings.redis.prefix}:console:session:*"))


def _code_key_count(console: Console) -> int:
    return len(list(console.redis.scan_iter(match=f"{console.settings.redis.prefix}:console:code:*")))


def _signed_in(browser: AppClient) -> bool:
    return browser.get("/console").status_code == 200


def test_opening_the_link_signs_nobody_in_and_keeps_the_code(console: Console) -> None:
    """The GET a link, an image or a redirect from another site makes: a page, no session, and
    the code still there for the user it was minted for."""
    path = console.code()
    browser = console.browser()
    for headers in ({"referer": f"{EVIL}/x", "sec-fetch-site": "cross-site"}, {}):
        page = browser.get(path, headers=headers)
        assert page.status_code == 200, page.text
        cookies = [v for k, v in page.headers.multi_items() if k == "set-cookie"]
        assert not [c for c in cookies if c.startswith(COOKIE + "=")], cookies
        assert re.search(r'<form method="post" action="/console/signin"', page.text), page.text
        assert "FLOE_ADMIN" in page.text  # whom the button signs in as
    assert not _session_keys(console) and _code_key_count(console) == 1
    assert not _signed_in(browser)
    # The user the code was for signs in with it afterwards.
    assert sign_in(console.browser(), path).status_code == 303


def test_a_post_from_another_site_or_without_the_pages_token_is_refused(console: Console) -> None:
    path = console.code()
    code = path.split("code=")[1]
    browser = console.browser()
    fields = signin_fields(browser, path)
    assert fields["code"] == code and fields["token"]
    other = console.browser()
    other_fields = signin_fields(other, path)
    attempts: list[tuple[AppClient, dict[str, str], dict[str, str]]] = [
        # Another site's form: the browser names it in Origin (and would withhold the Strict cookie).
        (browser, fields, {**FORM, "origin": EVIL}),
        (browser, fields, {**FORM, "origin": "null"}),
        (browser, fields, {"content-type": FORM["content-type"], "referer": f"{EVIL}/x"}),
        (browser, fields, {"content-type": FORM["content-type"]}),
        # From this host, but without the page's token, or with a wrong one.
        (browser, {"code": code}, FORM),
        (browser, {"code": code, "token": ""}, FORM),
        (browser, {"code": code, "token": "0" * len(fields["token"])}, FORM),
        # Another browser's token (bound to that browser's cookie), and a token without its cookie.
        (browser, {"code": code, "token": other_fields["token"]}, FORM),
        (console.browser(), fields, FORM),
    ]
    for client, body, headers in attempts:
        resp = client.post(SIGNIN, content=urlencode(body), headers=headers)
        assert resp.status_code == 403, (body, headers, resp.status_code, resp.text)
        assert "Refused" in resp.text and "floe console" in resp.text, resp.text
        assert COOKIE not in client._client.cookies, (body, headers)
    assert not _session_keys(console) and _code_key_count(console) == 1
    # None of them used the code up: the page's own form still signs in, once.
    resp = browser.post(SIGNIN, content=urlencode(fields), headers=FORM)
    assert resp.status_code == 303 and resp.headers["location"] == "/console"
    assert _signed_in(browser)
    again = other.post(SIGNIN, content=urlencode(other_fields), headers=FORM)
    assert again.status_code == 401 and "already used" in again.text


def test_the_form_token_is_bound_to_the_code_it_was_shown_for(console: Console) -> None:
    """A token a page showed for one code does not sign in with another (an attacker's own)."""
    browser = console.browser()
    first = signin_fields(browser, console.code())
    second = signin_fields(browser, console.code())
    resp = browser.post(SIGNIN, content=urlencode({**second, "token": first["token"]}), headers=FORM)
    assert resp.status_code == 403 and not _session_keys(console)


def test_the_pre_session_cookie_is_strict_httponly_and_scoped_to_the_sign_in(console: Console) -> None:
    browser = console.browser()
    page = browser.get(console.code())
    (header,) = [v for k, v in page.headers.multi_items() if k == "set-cookie"]
    parts = [p.strip().lower() for p in header.split(";")]
    assert parts[0].startswith(SIGNIN_COOKIE + "=")
    assert "samesite=strict" in parts and "httponly" in parts and "path=/console/signin" in parts
    assert page.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


def test_no_console_get_changes_what_redis_holds(console: Console) -> None:
    """Every GET route of the console, signed in or not, with a live code in its query: the console's
    codes and sessions, and the pipes' state, are as they were."""
    signed = console.signed_in()
    path = console.code()
    code = path.split("code=")[1]

    def held() -> tuple[set[bytes], str, str]:
        keys = set(console.redis.scan_iter(match=f"{console.settings.redis.prefix}:console:*"))
        return keys, console.state("p"), console.state("q")

    before = held()
    gets = sorted(
        str(r.path)
        for r in iter_route_contexts(console.app.routes)
        if str(r.path).startswith("/console") and "GET" in (r.methods or ())
    )
    assert f"{SIGNIN}" in gets and len(gets) >= 8, gets
    for route in gets:
        url = route.replace("{name:path}", "console.css").replace("{rest:path}", "x")
        for client in (signed, console.browser()):
            client.get(f"{url}?{urlencode({'code': code, 'db': 'FLOE', 'schema': 'PUBLIC', 'name': 'P'})}")
    assert held() == before
    assert sign_in(console.browser(), path).status_code == 303


def test_a_signed_in_browser_opening_another_link_stays_who_it_was_until_it_confirms(
    console: Console,
) -> None:
    """Login CSRF: another site's link to its own user's code does not swap the session."""
    browser = console.signed_in()
    alice = console.user("alice", "MONITOR ON PIPE p")
    foreign = console.code("ALICE", alice)
    page = browser.get(foreign, headers={"referer": f"{EVIL}/x"})
    assert page.status_code == 200 and "ALICE" in page.text
    assert 'id="user">FLOE_ADMIN<' in browser.get("/console").text
