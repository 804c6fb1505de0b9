"""The web console (services/console) in-process against the real Redis: its sign-in and session,
the gate's pass-through, the Origin check, and that every page shows what the user's own statements
answer (a user sees what SHOW shows them, and a refused statement is shown as refused).

The browser end of it (htmx, sparklines, the pages as a user sees them) is tests/e2e/test_console.py.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import redis
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from floe.catalog import ADMIN_ROLE, Catalog, Pipe, now_ms
from floe.history import ErrorDetail, read_state
from floe.keypair import new_private_key, private_key_pem, public_key_body
from floe.keys import Keys
from floe.records import LoadOutcome
from floe.settings import Settings
from front.client import auth_header
from pipeline.registrar import PipeCommit, Registrar
from services.api import create_app
from services.auth import Principal
from services.console import CODES_PATH, Grant, SignIns
from services.console.routes import COOKIE, _Sparklines, next_due_ms
from services.console.views import ObjectName, Spark, ident, literal, minute_starts
from services.dedup import Deduper, FileRef
from services.sql import SqlExecutor
from tests.asgi import AppClient
from tests.conftest import TEST_INTEGRATION, wait_until

pytestmark = pytest.mark.integration

HOST = "http://testserver"
FORM = {"content-type": "application/x-www-form-urlencoded", "origin": HOST}
HTMX = {"hx-request": "true"}
_BATCHES = itertools.count(1)
HIDDEN = re.compile(r'<input type="hidden" name="(code|token)" value="([^"<>]*)">')
"""A hidden field of the sign-in page's form (the page escapes the values; neither has a quote)."""


def signin_fields(browser: AppClient, path: str) -> dict[str, str]:
    """Open a sign-in link as a browser does: the page's form fields (the code and its token)."""
    page = browser.get(path)
    assert page.status_code == 200, page.text
    fields = dict(HIDDEN.findall(page.text))
    assert set(fields) == {"code", "token"}, page.text
    return fields


def sign_in(browser: AppClient, path: str) -> httpx.Response:
    """What a user does with the link `floe console` prints: open it, then press Sign in on the
    page it shows (a POST of the code and the page's form token, from a page of this host)."""
    return browser.post("/console/signin", content=urlencode(signin_fields(browser, path)), headers=FORM)


@dataclass
class Console:
    """An API app with a stage, a table, two pipes on it, and a way to sign browsers in."""

    app: Any
    settings: Settings
    redis: redis.Redis[bytes]
    tmp: Path
    admin: AppClient
    opened: list[AppClient] = field(default_factory=list)
    """The browsers it made, closed with it: an open client's portal thread outlives the test."""

    def sql(self, statement: str, user: str | None = None, key_file: str | None = None) -> dict[str, Any]:
        resp = self.admin.post(
            "/api/v1/sql", json={"sql": statement}, headers=auth_header(self.settings, user, key_file)
        )
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def records(self, statement: str, user: str | None = None, key_file: str | None = None) -> list[Any]:
        body = self.sql(statement, user, key_file)
        return [dict(zip(body["columns"], row, strict=True)) for row in body["rows"]]

    def code(self, user: str | None = None, key_file: str | None = None, role: str | None = None) -> str:
        """A sign-in path from POST /api/v1/console/codes, as `floe console` asks for one."""
        body = {"role": role} if role else {}
        resp = self.admin.post(CODES_PATH, json=body, headers=auth_header(self.settings, user, key_file))
        assert resp.status_code == 200, resp.text
        assert resp.json()["expiresInS"] == self.settings.console.code_ttl_s
        return str(resp.json()["path"])

    def browser(self) -> AppClient:
        """A client of its own (its own cookie jar), redirects not followed."""
        self.opened.append(AppClient(self.app, follow_redirects=False))
        return self.opened[-1]

    def signed_in(
        self, user: str | None = None, key_file: str | None = None, role: str | None = None
    ) -> AppClient:
        browser = self.browser()
        resp = sign_in(browser, self.code(user, key_file, role))
        assert resp.status_code == 303, resp.text
        assert COOKIE in browser._client.cookies
        return browser

    def user(self, name: str, *grants: str, default_role: str | None = None) -> str:
        """A user with a key file of its own and a role holding ``grants``; the key file's path."""
        key: rsa.RSAPrivateKey = new_private_key()
        path = self.tmp / f"{name}.p8"
        path.write_text(private_key_pem(key))
        role = f"{name}_role"
        self.sql(f"CREATE ROLE {role}")
        self.sql(f"GRANT USAGE ON DATABASE FLOE TO ROLE {role}")
        self.sql(f"GRANT USAGE ON SCHEMA FLOE.PUBLIC TO ROLE {role}")
        for grant in grants:
            self.sql(f"GRANT {grant} TO ROLE {role}")
        self.sql(
            f"CREATE USER {name} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}' "
            f"DEFAULT_ROLE = {default_role or role}"
        )
        self.sql(f"GRANT ROLE {role} TO USER {name}")
        return str(path)

    def pipe(self, name: str) -> Pipe:
        return Catalog(self.redis, Keys(self.settings.redis.prefix)).get(Pipe, f"FLOE.PUBLIC.{name.upper()}")

    def state(self, pipe: str) -> str:
        (row,) = self.sql(f"SELECT SYSTEM$PIPE_STATUS('{pipe}')")["rows"]
        return str(re.search(r'"executionState":"(\w+)"', row[0]).group(1))  # type: ignore[union-attr]

    def load(self, pipe: str, outcome: LoadOutcome, at_ms: int | None = None) -> None:
        """Queue a file and commit its outcome as the registrar does after a micro-batch."""
        keys = Keys(self.settings.redis.prefix)
        found = self.pipe(pipe)
        Deduper(self.redis, keys, 3600).enqueue(found, [FileRef(outcome.path, 100)], source="rest")
        state = read_state(self.redis, keys, found.id, outcome.path)
        assert state is not None
        (sid,) = [
            s.decode()
            for s, f in self.redis.xrange(keys.queue(found.id))
            if f[b"path"] == outcome.path.encode()
        ]
        when = at_ms or now_ms()
        commit = PipeCommit(found.id, files=[(outcome.apply_to(state, when), sid)])
        Registrar(self.redis, keys, 3600).commit(commit, "q", next(_BATCHES), when)


@pytest.fixture
def console(
    isolated_settings: Settings, redis_client: redis.Redis[bytes], tmp_path: Path
) -> Iterator[Console]:
    yield from _console(isolated_settings, redis_client, tmp_path)


def _console(
    isolated_settings: Settings, redis_client: redis.Redis[bytes], tmp_path: Path, **console_settings: Any
) -> Iterator[Console]:
    settings = isolated_settings.model_copy(
        update={
            "auth": isolated_settings.auth.model_copy(
                update={"scoped_token_key_file": str(tmp_path / "state" / "scoped.key")}
            ),
            "console": isolated_settings.console.model_copy(update=console_settings),
        },
        deep=True,
    )
    app = create_app(settings, redis_client)
    made = Console(app, settings, redis_client, tmp_path, AppClient(app))
    try:
        made.sql(TEST_INTEGRATION)
        made.sql("CREATE STAGE st URL = 's3://somebucket/in/' STORAGE_INTEGRATION = floe_tests")
        made.sql("CREATE TABLE t (a INT, b VARCHAR)")
        made.sql("CREATE TABLE secret_t (a INT)")
        made.sql("CREATE PIPE p AUTO_INGEST = FALSE AS COPY INTO t FROM @st ON_ERROR = CONTINUE")
        made.sql("CREATE PIPE q AUTO_INGEST = FALSE AS COPY INTO t FROM @st")
        yield made
    finally:
        for client in (made.admin, *made.opened):
            client.close()


def _cookie_attributes(resp: httpx.Response) -> dict[str, str]:
    (header,) = [v for k, v in resp.headers.multi_items() if k == "set-cookie" and v.startswith(COOKIE + "=")]
    parts = [p.strip() for p in header.split(";")]
    name, _, value = parts[0].partition("=")
    assert name == COOKIE and value
    return {p.partition("=")[0].lower(): p.partition("=")[2] for p in parts[1:]}


# --------------------------------------------------------------------------------- sign-in


def test_a_code_signs_in_once_and_the_cookie_is_httponly_strict_and_scoped(console: Console) -> None:
    path = console.code()
    code = path.split("code=")[1]
    browser = console.browser()
    resp = sign_in(browser, path)
    assert resp.status_code == 303
    attributes = _cookie_attributes(resp)
    assert attributes["samesite"].lower() == "strict"
    assert "httponly" in attributes and "secure" not in attributes  # the app serves plain HTTP here
    assert attributes["path"] == "/console"
    assert attributes["max-age"] == str(console.settings.console.session_ttl_s)
    # It goes on to /console (POST, then GET), with the code in neither address.
    assert resp.headers["location"] == "/console" and resp.headers["cache-control"] == "no-store"
    page = browser.get("/console")
    assert page.status_code == 200 and 'id="user">FLOE_ADMIN<' in page.text and code not in page.text
    # The same link again, even in another browser: refused, and no session.
    other = console.browser()
    again = other.get(path)
    assert again.status_code == 401 and "already used" in again.text
    assert not [v for k, v in again.headers.multi_items() if k == "set-cookie"]
    assert other.get("/console").status_code == 303
    # Redis holds neither the code nor the session id, only their digests.
    session = browser._client.cookies[COOKIE]
    for key in console.redis.scan_iter(match=f"{console.settings.redis.prefix}:console:*"):
        value = console.redis.get(key) or b""
        assert code.encode() not in key + value and session.encode() not in key + value


def test_codes_expire_and_sessions_last_their_ttl(console: Console) -> None:
    sign_ins = SignIns(console.redis, console.settings.redis.prefix, code_ttl_s=1, session_ttl_s=3600)
    grant = Grant("FLOE_ADMIN", "SHA256:x", None)
    stale = sign_ins.mint(grant)
    wait_until(
        lambda: not console.redis.exists(sign_ins._code_key(stale)), timeout=10, what="the code to expire"
    )
    assert sign_ins.redeem(stale) is None
    fresh = sign_ins.mint(grant)
    assert 0 < console.redis.pttl(sign_ins._code_key(fresh)) <= 1000
    opened = sign_ins.redeem(fresh)
    assert opened is not None and opened[1] == grant
    assert 3_590_000 < console.redis.pttl(sign_ins._session_key(opened[0])) <= 3_600_000
    assert sign_ins.redeem(fresh) is None  # consumed
    assert sign_ins.session(opened[0]) == grant
    sign_ins.end(opened[0])
    assert sign_ins.session(opened[0]) is None


def test_a_code_needs_a_key_pair_jwt_and_a_granted_role(console: Console) -> None:
    assert console.browser().post(CODES_PATH, json={}).status_code == 401
    alice = console.user("alice", "MONITOR ON PIPE p")
    resp = console.admin.post(
        CODES_PATH, json={"role": "ACCOUNTADMIN"}, headers=auth_header(console.settings, "ALICE", alice)
    )
    assert resp.status_code == 422 and "not assigned" in resp.json()["message"]
    browser = console.signed_in("ALICE", alice, role="alice_role")
    assert 'id="role">ALICE_ROLE<' in browser.get("/console").text


# --------------------------------------------------------------------- no anonymous access


PAGES = [
    "/console",
    "/console/",
    "/console/history?db=FLOE&schema=PUBLIC&name=P",
    "/console/channels",
    "/console/tables",
    "/console/sql",
    "/console/no-such-page",
]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_without_a_session_goes_to_the_signed_out_page(console: Console, path: str) -> None:
    browser = console.browser()
    resp = browser.get(path)
    assert resp.status_code == 303 and resp.headers["location"] == "/console/signed-out?why=none"
    # htmx (a page's live part) is sent there too, rather than given a fragment.
    polled = browser.get(path, headers=HTMX)
    assert polled.headers["hx-redirect"] == "/console/signed-out?why=none"
    # A cookie that names no session is no better.
    resp = browser.get(path, headers={"cookie": f"{COOKIE}=forged"})
    assert resp.status_code == 303 and "why=expired" in resp.headers["location"]


def test_only_the_sign_in_pages_and_static_files_are_public(console: Console) -> None:
    browser = console.browser()
    page = browser.get("/console/signed-out?why=<script>")
    assert page.status_code == 200 and "floe console" in page.text and "<script>" not in page.text
    static = browser.get("/console/static/vendor/htmx.min.js")
    assert static.status_code == 200 and "javascript" in static.headers["content-type"]
    for path in ("/console/static/../sessions.py", "/console/static/%2e%2e/sessions.py", "/console/static/x"):
        resp = browser.get(path)
        assert resp.status_code in (303, 404) and "SignIns" not in resp.text, path
    for action in ("/console/sql", "/console/pipes/pause", "/console/pipes/resume"):
        resp = browser.post(action, content="db=FLOE&schema=PUBLIC&name=P", headers=FORM)
        assert resp.status_code == 303, action
    assert console.state("p") == "RUNNING"


def test_signing_out_ends_the_session_and_a_removed_key_ends_it_too(console: Console) -> None:
    browser = console.signed_in()
    assert browser.post("/console/signout", headers={"origin": "http://elsewhere"}).status_code == 403
    assert browser.get("/console").status_code == 200
    resp = browser.post("/console/signout", headers={"origin": HOST})
    assert resp.status_code == 303 and resp.headers["location"] == "/console/signed-out?why=signout"
    assert browser.get("/console").status_code == 303
    assert not list(console.redis.scan_iter(match=f"{console.settings.redis.prefix}:console:session:*"))
    alice = console.user("alice", "MONITOR ON PIPE p")
    as_alice = console.signed_in("ALICE", alice)
    assert as_alice.get("/console").status_code == 200
    console.sql("ALTER USER alice UNSET RSA_PUBLIC_KEY")
    resp = as_alice.get("/console")
    assert resp.status_code == 303 and "why=revoked" in resp.headers["location"]


# ------------------------------------------------------------------------------ CSRF defence


def test_a_post_must_come_from_a_page_of_this_host(console: Console) -> None:
    browser = console.signed_in()
    body = "db=FLOE&schema=PUBLIC&name=P"
    form = {"content-type": "application/x-www-form-urlencoded"}
    for headers in (
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"referer": "http://evil.example/x"},
        {},
    ):
        resp = browser.post("/console/pipes/pause", content=body, headers={**form, **headers, **HTMX})
        assert resp.status_code == 403 and "did not come from" in resp.text, headers
        assert console.state("p") == "RUNNING"
    resp = browser.post("/console/pipes/pause", content=body, headers={**form, "referer": f"{HOST}/console"})
    assert resp.status_code == 200 and "Pipe FLOE.PUBLIC.P paused." in resp.text
    assert console.state("p") == "PAUSED"
    resp = browser.post("/console/pipes/resume", content=body, headers={**FORM, **HTMX})
    assert "Pipe FLOE.PUBLIC.P resumed." in resp.text and console.state("p") == "RUNNING"


def test_a_form_larger_than_the_api_takes_is_refused_unread(console: Console) -> None:
    settings = console.settings.model_copy(
        update={"api": console.settings.api.model_copy(update={"max_body_bytes": 64})}, deep=True
    )
    app = create_app(settings, console.redis)
    small = Console(app, settings, console.redis, console.tmp, console.admin, console.opened)
    browser = small.signed_in()
    resp = browser.post("/console/sql", content="sql=" + "x" * 100, headers=FORM)
    assert resp.status_code == 413 and "too large" in resp.text


# ------------------------------------------------------------------ the user's own privileges


def test_a_user_sees_what_show_shows_them_and_the_statements_decide(console: Console) -> None:
    alice = console.user("alice", "MONITOR ON PIPE p")
    browser = console.signed_in("ALICE", alice)
    shown = {r["name"] for r in console.records("SHOW PIPES", "ALICE", alice)}
    assert shown == {"P"}
    page = browser.get("/console").text
    assert set(re.findall(r'<tr data-pipe="FLOE\.PUBLIC\.(\w+)"', page)) == shown
    # MONITOR reads the history (and so the sparkline); pausing needs OPERATE: ALTER PIPE says no.
    assert "data-spark=" in page
    resp = browser.post(
        "/console/pipes/pause", content="db=FLOE&schema=PUBLIC&name=P", headers={**FORM, **HTMX}
    )
    assert resp.status_code == 200 and "Insufficient privileges" in resp.text and "003001" in resp.text
    assert console.state("p") == "RUNNING"
    # A pipe it cannot see answers as a missing one, on its history page and to its buttons.
    history = browser.get("/console/history?db=FLOE&schema=PUBLIC&name=Q").text
    assert "does not exist or not authorized" in history
    # Tables: SHOW TABLES shows it none; a sample or a count of one is refused by its SELECT.
    tables = browser.get("/console/tables").text
    assert "No tables you can see." in tables
    sample = browser.get("/console/tables?db=FLOE&schema=PUBLIC&name=SECRET_T").text
    assert 'id="tables"' not in sample and "does not exist or not authorized" in sample
    answer = browser.post("/console/sql", content="sql=SELECT+*+FROM+secret_t", headers={**FORM, **HTMX})
    assert "does not exist or not authorized" in answer.text
    # The administrator sees both, and may pause.
    admin = console.signed_in()
    assert set(re.findall(r'<tr data-pipe="FLOE\.PUBLIC\.(\w+)"', admin.get("/console").text)) == {"P", "Q"}


def test_the_history_page_searches_filters_and_shows_where_a_file_failed(console: Console) -> None:
    bad = ErrorDetail("Numeric value 'zz' is not recognized", line=3, character=5, column_name='"T"["A":1]')
    console.load("p", LoadOutcome("in/Good_1.csv", "LOADED", 2, 2))
    console.load("p", LoadOutcome("in/abc.csv", "LOADED", 2, 2))
    console.load(
        "p",
        LoadOutcome(
            "in/<b>bad</b>.csv",
            "PARTIALLY_LOADED",
            3,
            2,
            1,
            first_error=bad.error,
            first_error_line=3,
            first_error_character=5,
            first_error_column=bad.column_name,
            errors=(bad,),
        ),
    )
    console.load("q", LoadOutcome("in/other.csv", "LOADED", 1, 1))
    browser = console.signed_in()
    url = "/console/history?db=FLOE&schema=PUBLIC&name=P"

    def files(query: str = "") -> list[str]:
        return re.findall(
            r'<tr class="file[^"]*" data-file="([^"]+)"', browser.get(url + query, headers=HTMX).text
        )

    assert sorted(files()) == sorted(["in/Good_1.csv", "in/abc.csv", "in/&lt;b&gt;bad&lt;/b&gt;.csv"])
    assert files("&q=GOOD") == ["in/Good_1.csv"]  # a substring, whatever its case
    assert files("&q=a.c") == []  # not a pattern: '.' is a dot
    assert files("&q=%25") == [] and files("&q=%27%29--") == []  # nor SQL
    failed = browser.get(url + "&status=Partially+loaded", headers=HTMX).text
    assert re.findall(r'data-file="([^"]+)"', failed)[0] == "in/&lt;b&gt;bad&lt;/b&gt;.csv"
    assert "Numeric value &#39;zz&#39; is not recognized" in failed
    assert re.search(r'class="err-line">3<.*class="err-char">5<.*&#34;T&#34;\[&#34;A&#34;:1\]', failed, re.S)
    assert "<b>bad</b>" not in failed  # every value is escaped
    # An unknown status or window is the default, not an error.
    assert sorted(files("&status=nope&window=1y")) == sorted(files())


def test_the_pipes_page_buckets_files_and_rows_by_minute(console: Console) -> None:
    now = now_ms()
    console.load("p", LoadOutcome("a.csv", "LOADED", 5, 5), at_ms=now - 10 * 60_000)
    console.load("p", LoadOutcome("b.csv", "LOADED", 7, 7), at_ms=now - 10 * 60_000)
    console.load("p", LoadOutcome("c.csv", "LOADED", 3, 3), at_ms=now)
    console.load("q", LoadOutcome("d.csv", "LOAD_FAILED", 1, 0, 1, first_error="bad value"), at_ms=now)
    browser = console.signed_in()
    page = browser.get("/console").text
    sparks = dict(re.findall(r'<tr data-pipe="FLOE\.PUBLIC\.(\w+)".*?data-spark=\'([^\']+)\'', page, re.S))
    p_files = json.loads(sparks["P"])
    assert len(p_files["x"]) == 60 and sum(p_files["y"]) == 3 and max(p_files["y"]) == 2
    assert p_files["x"][-1] - p_files["x"][0] == 59 * 60
    q_row = page.split('data-pipe="FLOE.PUBLIC.Q"')[1].split("</tr>")[0]
    assert "bad value" in q_row and "1 failed in the last hour" in q_row


def test_a_page_computes_sparklines_within_its_budget_and_later_polls_fill_in_the_rest(
    isolated_settings: Settings, redis_client: redis.Redis[bytes], tmp_path: Path
) -> None:
    """With hundreds of tables the pipes page would wait for one COPY_HISTORY each: a request
    computes them for at most ``console.sparkline_budget_s`` (here: one table's worth), never-computed
    tables first, and shows the others as being computed."""
    made = _console(isolated_settings, redis_client, tmp_path, sparkline_budget_s=1e-9)
    console = next(made)
    for i in range(3):
        console.sql(f"CREATE TABLE more_{i} (a INT)")
        console.sql(f"CREATE PIPE more_p{i} AUTO_INGEST = FALSE AS COPY INTO more_{i} FROM @st")
    browser = console.signed_in()

    def pending() -> int:
        return browser.get("/console").text.count("computing…")

    # Five pipes on four tables (P and Q load T): each page computes one table more.
    assert [pending() for _ in range(5)] == [4, 3, 2, 0, 0]
    assert "data-spark=" in browser.get("/console").text
    made.close()


def test_the_pipes_page_shows_the_newest_pipes_up_to_its_limit(
    isolated_settings: Settings, redis_client: redis.Redis[bytes], tmp_path: Path
) -> None:
    """Each pipe shown costs a status and a sparkline every refresh: past ``console.max_pipes`` the
    page shows the newest and says how to reach the others."""
    made = _console(isolated_settings, redis_client, tmp_path, max_pipes=2)
    console = next(made)
    console.sql("CREATE PIPE newest AUTO_INGEST = FALSE AS COPY INTO t FROM @st")
    page = console.signed_in().get("/console").text
    assert re.findall(r'<tr data-pipe="FLOE\.PUBLIC\.(\w+)"', page) == ["NEWEST", "Q"]
    assert "The 2 newest of the 3 pipes you can see" in page
    made.close()


def test_sparklines_are_read_once_per_refresh_window() -> None:
    cache = _Sparklines(refresh_s=60)
    viewer: Any = type("V", (), {"grant": Grant("U", "fp"), "role": "R"})()
    table = ObjectName("FLOE", "PUBLIC", "T")
    calls: list[int] = []

    def compute() -> dict[ObjectName, Spark]:
        calls.append(1)
        return {}

    assert cache.get(viewer, table, compute)[0] == {}
    for _ in range(5):
        assert cache.get(viewer, table, compute) == ({}, 0.0)
    assert len(calls) == 1
    other: Any = type("V", (), {"grant": Grant("OTHER", "fp"), "role": "R"})()
    cache.get(other, table, compute)  # another user's statements run as that user
    assert len(calls) == 2


def test_a_page_whose_statements_take_long_refreshes_less_often() -> None:
    now = 1_000_000.0
    assert next_due_ms(0.05, 1.0, now) == 1_000_000_000  # cheap: at the next poll
    assert next_due_ms(3.5, 1.0, now) == 1_000_013_500  # 3.5 s of statements: 14 s later


def test_a_live_fragment_runs_its_statements_only_when_due_and_swaps_only_a_change(console: Console) -> None:
    browser = console.signed_in()
    first = browser.get("/console", headers=HTMX)
    due, shown = re.search(r'name="due" value="(\d+)".*name="shown" value="(\w+)"', first.text).groups()  # type: ignore[union-attr]
    assert "hx-swap-oob" not in first.text and 'data-pipe="FLOE.PUBLIC.P"' in first.text
    # Asked before its time: 204, nothing run.
    assert browser.get(f"/console?due={int(due) + 60_000}&shown={shown}", headers=HTMX).status_code == 204
    same = browser.get(f"/console?due=0&shown={shown}", headers=HTMX)
    assert (
        same.headers["hx-reswap"] == "none"
        and "data-pipe" not in same.text
        and 'hx-swap-oob="true"' in same.text
    )
    console.sql("ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE")
    changed = browser.get(f"/console?due=0&shown={shown}", headers=HTMX)
    assert "hx-reswap" not in changed.headers and 'data-state="PAUSED"' in changed.text


def test_pages_forbid_inline_scripts_and_framing(console: Console) -> None:
    browser = console.signed_in()
    for path in ("/console", "/console/channels", "/console/tables", "/console/sql"):
        resp = browser.get(path)
        assert resp.status_code == 200, path
        assert "script-src 'self'" in resp.headers["content-security-policy"]
        assert resp.headers["x-frame-options"] == "DENY"
        assert "<script>" not in resp.text and " on" + "click=" not in resp.text


def test_the_sql_box_runs_as_the_user_and_shows_errors(console: Console) -> None:
    browser = console.signed_in()
    ok = browser.post("/console/sql", content="sql=SELECT+%27hello%27+AS+greeting", headers={**FORM, **HTMX})
    assert ok.status_code == 200 and ">hello<" in ok.text and ">GREETING<" in ok.text and "1 row" in ok.text
    bad = browser.post("/console/sql", content="sql=SELEC+1", headers={**FORM, **HTMX})
    assert 'id="sql-error"' in bad.text


# ------------------------------------------------------------------------------ SQL spelling


@pytest.fixture(scope="module")
def executor(services: Settings, redis_client: redis.Redis[bytes]) -> Iterator[SqlExecutor]:
    from bench.harness import unique

    settings = services.model_copy(
        update={"redis": services.redis.model_copy(update={"prefix": unique("t")})}, deep=True
    )
    ex = SqlExecutor(settings, redis_client)
    yield ex
    stale = list(redis_client.scan_iter(match=f"{settings.redis.prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)


ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))


@hyp_settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40))
def test_a_literal_is_exactly_its_text(executor: SqlExecutor, text: str) -> None:
    (row,) = executor.execute(f"SELECT {literal(text)} AS x", ADMIN).rows
    assert row == [text]


def test_an_identifier_names_exactly_its_object(executor: SqlExecutor) -> None:
    # (Floe's catalog keeps a name's parts joined by dots, so a dot is the one character it refuses.)
    name = 'odd "name", with; -- stuff'
    executor.execute(f"CREATE TABLE {ident('FLOE', 'PUBLIC', name)} (a INT)", ADMIN)
    shown = [r["name"] for r in executor.execute("SHOW TABLES", ADMIN).records()]
    assert name in shown
    assert executor.execute(f"SELECT COUNT(*) FROM {ident('FLOE', 'PUBLIC', name)}", ADMIN).rows == [[0]]


def test_minute_starts_end_with_the_current_minute() -> None:
    import datetime as dt

    now = dt.datetime(2026, 1, 1, 12, 30, 42, tzinfo=dt.UTC)
    minutes = minute_starts(now)
    assert len(minutes) == 60 and minutes[-1] == int(
        dt.datetime(2026, 1, 1, 12, 30, tzinfo=dt.UTC).timestamp()
    )
