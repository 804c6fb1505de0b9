"""The console's routes: sign-in, the pages and their live fragments, and the few actions.

The API's gate lets every ``/console`` path through without a key-pair JWT (``is_console_path``);
each route here checks the session cookie itself before it reads a body or runs a statement, and
the only routes that answer without one are the sign-in, the signed-out page and the static files.
A POST must also come from a page of this host (its ``Origin``, else its ``Referer``): the
``SameSite=Strict`` cookie already keeps other sites' forms out, and this holds if a browser does
not. The code a POST /api/v1/console/codes mints is the only secret in a URL, and it works once.
No GET changes anything: the sign-in link shows a page whose form signs in, by a POST that carries
the code and a form token bound to the browser (``forms``, decision 114).

A page is served whole to a browser, and its live part as a fragment to htmx (``HX-Request``),
which polls it every ``console.refresh_s``. The fragment carries when its statements may run again
(``Console.due_ms``: at the next poll, or after four times as long as they took), so a page whose
statements are costly refreshes less often rather than keep a thread busy.
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import logging
import mimetypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import anyio
import anyio.to_thread
import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from markupsafe import Markup
from pydantic import BaseModel

from floe.catalog.ddl import Defaults
from floe.errors import AuthenticationFailed, FloeError
from floe.keys import RedisClient
from floe.settings import Settings
from services.answers import Throttled, answer_for
from services.auth import Authenticator, Identity, Principal, RateLimiter
from services.console import views
from services.console.forms import SIGNIN_COOKIE, SignInForms, read_form, same_origin
from services.console.sessions import Grant, SignIns
from services.query import Result
from services.sql import SqlExecutor

log = logging.getLogger("floe.console")

PREFIX = "/console"
"""Where the console lives; the gate lets these paths through to its own cookie check."""
CODES_PATH = "/api/v1/console/codes"
"""Where `floe console` asks for a sign-in code (with its key-pair JWT, through the gate)."""
SIGNIN_PATH = f"{PREFIX}/signin"
"""The sign-in link's page (GET, with the code) and its form (POST)."""
SIGNIN_FORM_BYTES = 1024
"""The sign-in form's bound, whatever ``api.max_body_bytes``: its code and token take 120 bytes."""
COOKIE = "floe_console"
"""The session cookie's name."""
HERE = Path(__file__).resolve().parent
POLL_FACTOR = 4
"""A page waits this many times as long as its statements took before it refreshes again."""
SPARKLINES_KEPT = 1024
"""Sparklines cached (per user, role and table) at most; the least recently used go first."""
SECURITY_HEADERS = {
    # Scripts and styles only from the console's own static files: a value a page shows can never
    # run, even if a template forgot to escape it. htmx's eval features are off (base.html's htmx-config).
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    # A page's address goes only to this host (whose POSTs check it), never to another site.
    "referrer-policy": "same-origin",
}
FOREIGN_FORM = "Refused: this form did not come from a page of this console (Origin / Referer)."
AGAIN = (
    "Open the link `floe console` printed in this browser and press Sign in there: the link still "
    "works, once, until it expires."
)
FOREIGN_SIGNIN = (
    f"Refused: this sign-in did not come from the console's own sign-in page (Origin / Referer). {AGAIN}"
)
BAD_FORM_TOKEN = (
    "Refused: the sign-in form's token is missing, or was not made for this browser and this link "
    f"(it is bound to a cookie the sign-in page sets). {AGAIN}"
)
SIGNED_OUT_REASONS = {
    "none": "You are not signed in.",
    "used": "That sign-in link was already used, or it has expired (links work once, for a minute).",
    "expired": "Your session has ended.",
    "revoked": "Your session no longer applies: the user, its key or its role changed.",
    "signout": "You signed out.",
}
"""What the signed-out page says, by the reason in its URL (never text taken from the URL)."""

T = TypeVar("T")


def is_console_path(path: str) -> bool:
    """Whether the API's gate should pass ``path`` to the console's own session check."""
    return path == PREFIX or path.startswith(PREFIX + "/")


class CodeRequest(BaseModel):
    """Body of POST /api/v1/console/codes."""

    role: str | None = None
    """The role the console acts as (it must be granted to the user); default: DEFAULT_ROLE."""


@dataclass(frozen=True)
class Viewer:
    """The signed-in user a request acts for."""

    grant: Grant
    principal: Principal

    @property
    def role(self) -> str:
        return self.principal.owner_role


class _Static:
    """The files under static/, read once: served by name from this map, so no request path
    ever reaches the file system."""

    def __init__(self, root: Path) -> None:
        self.files: dict[str, tuple[bytes, str]] = {}
        digest = hashlib.sha256()
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            name = path.relative_to(root).as_posix()
            body = path.read_bytes()
            kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
            if kind.startswith("text/") or kind == "application/javascript":
                kind += "; charset=utf-8"
            self.files[name] = (body, kind)
            digest.update(name.encode() + body)
        self.version = digest.hexdigest()[:12]
        """Part of every static URL, so a browser's cached copy never outlives a change."""

    def url(self, name: str) -> str:
        if name not in self.files:
            raise KeyError(f"no static file {name}")
        return f"{PREFIX}/static/{name}?v={self.version}"


class _Sparklines:
    """Each viewer's sparklines by table, kept ``sparkline_refresh_s`` (or four times what their
    COPY_HISTORY took) so the pipes page can refresh its state every second without reading the
    tables' load history every second (decision 89)."""

    def __init__(self, refresh_s: float) -> None:
        self.refresh_s = refresh_s
        self._kept: collections.OrderedDict[tuple[str, str, views.ObjectName], tuple[float, Any]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    def kept(self, viewer: Viewer, table: views.ObjectName) -> tuple[float, Any] | None:
        """The table's sparklines kept for the viewer, with when they expire (past or not)."""
        with self._lock:
            return self._kept.get((viewer.grant.user, viewer.role, table))

    def get(
        self, viewer: Viewer, table: views.ObjectName, compute: Callable[[], Any]
    ) -> tuple[dict[views.ObjectName, views.Spark] | str, float]:
        """The table's sparklines for the viewer, and the seconds spent computing them now (0 when
        they were kept: the page's own refresh does not wait for this cost, which is bounded here)."""
        key = (viewer.grant.user, viewer.role, table)
        now = time.monotonic()
        with self._lock:
            hit = self._kept.get(key)
            if hit is not None and hit[0] > now:
                self._kept.move_to_end(key)
                return hit[1], 0.0
        timer = views.Timed()
        try:
            value: dict[views.ObjectName, views.Spark] | str = compute()
        except Exception as exc:  # noqa: BLE001 -- the refusal is shown on the table's pipes
            value = views.refusal(exc)
        until = time.monotonic() + max(self.refresh_s, POLL_FACTOR * timer.seconds())
        with self._lock:
            self._kept[key] = (until, value)
            self._kept.move_to_end(key)
            while len(self._kept) > SPARKLINES_KEPT:
                self._kept.popitem(last=False)
        return value, timer.seconds()


def _environment(static: _Static) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["static"] = static.url
    env.globals["urlencode"] = urlencode
    env.globals["numeric_columns"] = _numeric_columns
    env.filters["number"] = lambda v: "—" if v is None else f"{int(v):,}"
    env.filters["bytes"] = _human_bytes
    env.filters["when"] = _when
    return env


def _numeric_columns(rows: list[list[Any]], width: int) -> list[bool]:
    """Which columns of a result hold numbers only (they are right-aligned, as numbers read best)."""
    out = [False] * width
    for i in range(width):
        values = [r[i] for r in rows if r[i] is not None]
        out[i] = bool(values) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return out


def _human_bytes(value: Any) -> str:
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(value)


def _when(value: Any) -> str:
    """A time as the pages show it: UTC, to the second."""
    if value is None or value == "":
        return "—"
    when = value
    if isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if isinstance(when, dt.datetime):
        if when.tzinfo is not None:
            when = when.astimezone(dt.UTC)
        return when.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def next_due_ms(seconds: float, refresh_s: float, now_s: float) -> int:
    """When (epoch ms) a page whose statements took ``seconds`` runs them again: at its next poll,
    unless they took long; then after ``POLL_FACTOR`` times as long, so each open page keeps at
    most a fifth of a thread busy. Half a poll early, so that a cheap page is not skipped by a poll
    that comes a moment before its time."""
    wait = POLL_FACTOR * seconds - refresh_s / 2
    return int((now_s + max(0.0, wait)) * 1000)


class Console:
    """The console's state: sign-ins, templates, static files, and how statements run."""

    def __init__(
        self,
        settings: Settings,
        sign_ins: SignIns,
        executor: SqlExecutor,
        authenticator: Authenticator,
        threads: anyio.CapacityLimiter,
        limiter: RateLimiter,
        forms: SignInForms,
    ) -> None:
        self.settings = settings
        self.sign_ins = sign_ins
        self.forms = forms
        self.executor = executor
        self.authenticator = authenticator
        self.threads = threads
        self.limiter = limiter
        self.defaults = Defaults(settings.database, settings.schema_name)
        self.static = _Static(HERE / "static")
        self.templates = _environment(self.static)
        self.sparklines = _Sparklines(settings.console.sparkline_refresh_s)
        self.secure = settings.api.tls != "off"

    # ----------------------------------------------------------------------------- sessions

    def viewer(self, grant: Grant) -> Viewer:
        """The principal a session acts as, checked now: its user must still hold the key that
        minted the code, and its role must still be granted (AuthenticationFailed or SqlError)."""
        principal = self.authenticator.resolve(Identity(grant.user, grant.fingerprint, None))
        if grant.role is not None:
            principal = self.executor.use_role(principal, grant.role)
        return Viewer(grant, principal)

    def session(self, request: Request) -> tuple[Viewer | None, str]:
        """The request's viewer, or None and the reason the signed-out page gives."""
        grant = self.sign_ins.session(request.cookies.get(COOKIE))
        if grant is None:
            return None, "expired" if COOKIE in request.cookies else "none"
        try:
            return self.viewer(grant), ""
        except (AuthenticationFailed, FloeError):
            self.sign_ins.end(request.cookies.get(COOKIE))
            return None, "revoked"

    def runner(self, viewer: Viewer) -> views.Run:
        """Statements as the viewer, each checked by the executor; the SQL rate limit applies to
        users other than the administrator, as on the SQL endpoint."""
        principal = viewer.principal

        def run(statement: str) -> Result:
            return self.executor.execute(statement, principal)

        return run

    def throttle(self, viewer: Viewer) -> None:
        """One token of the user's SQL rate limit per page or action (the administrator is exempt,
        as on the SQL endpoint)."""
        if viewer.principal.is_admin:
            return
        wait = self.limiter.retry_after(viewer.principal.user)
        if wait is not None:
            raise Throttled(
                f"Too many requests from user '{viewer.principal.user}'; retry in {wait:.2f} s.", wait
            )

    # ---------------------------------------------------------------------------- responses

    def render(self, template: str, **context: Any) -> str:
        template_ = self.templates.get_template(template)
        return str(template_.render(refresh_s=self.settings.console.refresh_s, **context))

    def html(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        response = HTMLResponse(self.render(template, **context), status)
        response.headers.update(SECURITY_HEADERS)
        response.headers["cache-control"] = "no-store"
        response.headers["vary"] = "HX-Request"
        return response

    def signed_out(self, request: Request, why: str) -> Response:
        """Where a request without a valid session goes: a redirect to the signed-out page (for
        htmx, HX-Redirect, which makes the browser go there rather than swap it into a fragment)."""
        target = f"{PREFIX}/signed-out?{urlencode({'why': why})}"
        if request.headers.get("hx-request") == "true":
            response: Response = Response(status_code=204, headers={"hx-redirect": target})
        else:
            response = RedirectResponse(target, status_code=303)
        response.headers.update(SECURITY_HEADERS)
        if why in ("expired", "revoked"):
            response.delete_cookie(COOKIE, path=PREFIX, secure=self.secure, httponly=True, samesite="strict")
        return response

    def due_ms(self, seconds: float) -> int:
        """When a page whose statements took ``seconds`` may run them again (``next_due_ms``)."""
        return next_due_ms(seconds, self.settings.console.refresh_s, time.time())

    async def in_thread(self, work: Callable[[], T]) -> T:
        """Blocking work (Redis, the executor) in one of the SQL statements' threads."""
        return await anyio.to_thread.run_sync(work, limiter=self.threads)


def _fragment(request: Request) -> bool:
    """Whether htmx asks for the page's fragment (not the whole page, not a history restore)."""
    return request.headers.get("hx-request") == "true" and "hx-history-restore-request" not in request.headers


def _name(params: dict[str, str]) -> views.ObjectName | None:
    parts = [params.get(k, "") for k in ("db", "schema", "name")]
    return views.ObjectName(*parts) if all(parts) else None


def router(console: Console) -> APIRouter:  # noqa: C901 -- one closure per route
    """The console's routes and the code route `floe console` calls."""
    api = APIRouter(include_in_schema=False)
    cfg = console.settings.console

    async def page(request: Request, template: str, build: Callable[[Viewer], dict[str, Any]]) -> Response:
        """A page, or its live fragment for htmx: the session, then ``build``'s statements, in
        one thread. A fragment asked for before its ``due`` time answers 204 without running
        anything; one whose content is what the browser shows (``shown``, its digest) answers only
        its new live state, so an unchanged page is not swapped under the user's pointer."""
        fragment = _fragment(request)
        due, shown = request.query_params.get("due", ""), request.query_params.get("shown", "")

        def work() -> tuple[Viewer | None, str, dict[str, Any] | None]:
            viewer, why = console.session(request)
            if viewer is None:
                return None, why, None
            if fragment and due.isdigit() and int(due) > time.time() * 1000:
                return viewer, "", None
            timer = views.Timed()
            try:
                console.throttle(viewer)
                context = build(viewer)
            except Throttled as exc:
                context = {"throttled": exc.message}
            # Sparklines bound their own cost (``_Sparklines``): the state still refreshes each poll.
            context["due_ms"] = console.due_ms(timer.seconds() - context.pop("exempt_s", 0.0))
            return viewer, "", context

        try:
            viewer, why, context = await console.in_thread(work)
        except Exception as exc:  # noqa: BLE001 -- Redis down, say: the page says so
            return console.html("error.html", 503, viewer=None, message=views.refusal(exc))
        if viewer is None:
            return console.signed_out(request, why)
        if context is None:
            return Response(status_code=204, headers={"cache-control": "no-store"})
        context.setdefault("throttled", None)
        base = {"viewer": viewer, "request_path": request.url.path, **context}
        live = console.render(f"_{template}", **base)
        digest = hashlib.sha256(live.encode()).hexdigest()[:16]
        state = {"due_ms": context["due_ms"], "digest": digest}
        if fragment and shown == digest:
            response = console.html("_live_state.html", oob=True, **state)
            response.headers["hx-reswap"] = "none"
            return response
        if fragment:
            return console.html("_live_state.html", oob=False, prefix=Markup(live), **state)
        return console.html(template, live=Markup(live), **{**base, **state})

    async def action(
        request: Request, act: Callable[[Viewer, dict[str, str]], dict[str, Any]], template: str
    ) -> Response:
        """A POST: session, then origin, then the body (bounded), then ``act`` as the viewer."""
        try:
            viewer, why = await console.in_thread(lambda: console.session(request))
        except Exception as exc:  # noqa: BLE001 -- Redis down, say: the page says so
            return console.html("_flash.html", 503, error=views.refusal(exc), message=None)
        if viewer is None:
            return console.signed_out(request, why)
        if not same_origin(request):
            return console.html("_flash.html", 403, error=FOREIGN_FORM, message=None)
        limits = console.settings.api
        fields = await read_form(request, limits.max_body_bytes, limits.body_timeout_s)
        if fields is None:
            return console.html("_flash.html", 413, error="Refused: the form is too large.", message=None)

        def work() -> dict[str, Any]:
            try:
                console.throttle(viewer)
                return act(viewer, fields)
            except Throttled as exc:
                return {"error": exc.message, "message": None, "answer": None}
            except Exception as exc:  # noqa: BLE001 -- Redis down, say: shown where the answer goes
                return {"error": views.refusal(exc), "message": None, "answer": None}

        context = await console.in_thread(work)
        return console.html(template, viewer=viewer, **context)

    # ------------------------------------------------------------------------------- sign-in

    @api.post(CODES_PATH, include_in_schema=True, tags=["Console"])
    async def mint_code(request: Request, body: CodeRequest) -> Response:
        """A one-time code that signs a browser in to the console as the token's user (and role):
        open ``path`` on the API within ``expiresInS`` seconds. `floe console` prints the link."""

        def work() -> dict[str, Any]:
            identity = getattr(request.state, "identity", None)
            if not isinstance(identity, Identity):
                raise AuthenticationFailed(
                    "The request was not authenticated; send 'Authorization: Bearer <JWT>'."
                )
            principal = console.authenticator.resolve(identity)
            if not principal.is_admin:
                wait = console.limiter.retry_after(principal.user)
                if wait is not None:
                    raise Throttled(
                        f"Too many requests from user '{principal.user}'; retry in {wait:.2f} s.", wait
                    )
            role = console.executor.use_role(principal, body.role).primary if body.role is not None else None
            code = console.sign_ins.mint(Grant(principal.user, identity.fingerprint, role))
            path = f"{PREFIX}/signin?{urlencode({'code': code})}"
            return {"success": True, "path": path, "expiresInS": cfg.code_ttl_s}

        try:
            return JSONResponse(await console.in_thread(work), headers={"cache-control": "no-store"})
        except Exception as exc:  # noqa: BLE001 -- the HTTP boundary; answer_for logs what is unexpected
            return answer_for(exc, request.url.path).response()

    @api.get(SIGNIN_PATH)
    async def sign_in_page(request: Request, code: str = "") -> Response:
        """The page a sign-in link opens: whom the code signs in as, and a button. It consumes
        nothing and sets no session: a link another site sends a browser to must not sign it in
        (as the site's own user), nor use up the code of the user it was printed for."""
        grant = await console.in_thread(lambda: console.sign_ins.peek(code))
        if grant is None:
            return console.html("signed_out.html", 401, message=SIGNED_OUT_REASONS["used"], viewer=None)
        pre_session = console.forms.pre_session(request)
        response = console.html(
            "signin.html", grant=grant, code=code, token=console.forms.token(pre_session, code), viewer=None
        )
        response.set_cookie(
            SIGNIN_COOKIE,
            pre_session,
            max_age=cfg.code_ttl_s,
            path=SIGNIN_PATH,
            secure=console.secure,
            httponly=True,
            samesite="strict",
        )
        return response

    @api.post(SIGNIN_PATH)
    async def sign_in(request: Request) -> Response:
        """The sign-in page's form: from a page of this host, with the form token of this browser
        and this code, it consumes the code, sets the session cookie and goes on to the console."""
        if not same_origin(request):
            return console.html("error.html", 403, viewer=None, message=FOREIGN_SIGNIN)
        fields = await read_form(request, SIGNIN_FORM_BYTES, console.settings.api.body_timeout_s)
        if fields is None:
            return console.html("error.html", 413, viewer=None, message="Refused: the form is too large.")
        code = fields.get("code", "")
        if not console.forms.valid(request.cookies.get(SIGNIN_COOKIE), code, fields.get("token", "")):
            return console.html("error.html", 403, viewer=None, message=BAD_FORM_TOKEN)

        def work() -> tuple[str, Viewer] | None:
            redeemed = console.sign_ins.redeem(code)
            if redeemed is None:
                return None
            session, grant = redeemed
            try:
                return session, console.viewer(grant)
            except (AuthenticationFailed, FloeError):
                console.sign_ins.end(session)
                return None

        opened = await console.in_thread(work)
        if opened is None:
            return console.html("signed_out.html", 401, message=SIGNED_OUT_REASONS["used"], viewer=None)
        session, viewer = opened
        old = request.cookies.get(COOKIE)
        if old:
            await console.in_thread(lambda: console.sign_ins.end(old))
        # A 303 of a POST from this host's own page: the browser sends the SameSite=Strict cookie
        # with the GET that follows (a chain another site's link started would go without it).
        response = RedirectResponse(PREFIX, status_code=303)
        response.headers.update(SECURITY_HEADERS)
        response.headers["cache-control"] = "no-store"
        response.set_cookie(
            COOKIE,
            session,
            max_age=cfg.session_ttl_s,
            path=PREFIX,
            secure=console.secure,
            httponly=True,
            samesite="strict",
        )
        response.delete_cookie(
            SIGNIN_COOKIE, path=SIGNIN_PATH, secure=console.secure, httponly=True, samesite="strict"
        )
        log.info("console: %s signed in", viewer.grant.user)
        return response

    @api.get(f"{PREFIX}/signed-out")
    async def signed_out_page(why: str = "none") -> Response:
        message = SIGNED_OUT_REASONS.get(why, SIGNED_OUT_REASONS["none"])
        return console.html("signed_out.html", message=message, viewer=None)

    @api.post(f"{PREFIX}/signout")
    async def sign_out(request: Request) -> Response:
        if not same_origin(request):
            return console.html("error.html", 403, viewer=None, message=FOREIGN_FORM)
        cookie = request.cookies.get(COOKIE)
        await console.in_thread(lambda: console.sign_ins.end(cookie))
        response = RedirectResponse(f"{PREFIX}/signed-out?why=signout", status_code=303)
        response.delete_cookie(COOKIE, path=PREFIX, secure=console.secure, httponly=True, samesite="strict")
        return response

    @api.get(f"{PREFIX}/static/{{name:path}}")
    async def static(name: str) -> Response:
        found = console.static.files.get(name)
        if found is None:
            return Response(status_code=404)
        body, kind = found
        headers = {"cache-control": "public, max-age=86400, immutable", "x-content-type-options": "nosniff"}
        return Response(body, media_type=kind, headers=headers)

    # --------------------------------------------------------------------------------- pages

    def pipes_context(viewer: Viewer) -> dict[str, Any]:
        run = console.runner(viewer)
        now = dt.datetime.now(dt.UTC)
        try:
            pipes, total = views.show_pipes(run, console.defaults, cfg.max_pipes)
        except Exception as exc:  # noqa: BLE001 -- shown instead of the list
            return {"pipes": [], "total": 0, "error": views.refusal(exc)}
        views.pipe_statuses(run, pipes)
        by_table: dict[views.ObjectName, dict[views.ObjectName, views.Spark] | str] = {}
        spent = 0.0
        # One COPY_HISTORY a table: with many tables the page would wait for all of them. So a
        # request computes those due (never computed, or expired) for at most
        # ``sparkline_budget_s``, in the page's order (the newest pipes first), and shows what is
        # kept (or "computing") for the others: the next polls reach them, as fresh ones cost nothing.
        for table in dict.fromkeys(p.table for p in pipes if p.table is not None):
            hit = console.sparklines.kept(viewer, table)
            if spent >= cfg.sparkline_budget_s and (hit is None or hit[0] <= time.monotonic()):
                if hit is not None:
                    by_table[table] = hit[1]  # due, but this request's budget is spent: the last figures
                continue
            by_table[table], seconds = console.sparklines.get(
                viewer,
                table,
                lambda table=table: views.sparklines(run, table, now),  # type: ignore[misc]
            )
            spent += seconds
        views.attach_sparklines(pipes, by_table, now)
        return {"pipes": pipes, "total": total, "error": None, "exempt_s": spent}

    @api.get(PREFIX)
    @api.get(f"{PREFIX}/")
    async def pipes_page(request: Request) -> Response:
        return await page(request, "pipes.html", pipes_context)

    @api.get(f"{PREFIX}/history")
    async def history_page(
        request: Request,
        db: str = "",
        schema: str = "",
        name: str = "",
        q: str = "",
        status: str = "",
        window: str = "",
    ) -> Response:
        pipe = _name({"db": db, "schema": schema, "name": name})
        want = views.HistoryFilter.of(q, status, window)

        def build(viewer: Viewer) -> dict[str, Any]:
            context: dict[str, Any] = {
                "pipe": pipe,
                "want": want,
                "statuses": views.STATUSES,
                "windows": list(views.WINDOWS),
                "limit": cfg.history_rows,
                "history": None,
                "error": None,
            }
            if pipe is None:
                context["error"] = "Pick a pipe on the pipes page."
                return context
            try:
                context["history"] = views.history(
                    console.runner(viewer), pipe, want, cfg.history_rows, console.defaults
                )
            except Exception as exc:  # noqa: BLE001 -- shown instead of the files
                context["error"] = views.refusal(exc)
            return context

        return await page(request, "history.html", build)

    @api.get(f"{PREFIX}/channels")
    async def channels_page(request: Request) -> Response:
        def build(viewer: Viewer) -> dict[str, Any]:
            try:
                return {"tables": views.channels(console.runner(viewer)), "error": None}
            except Exception as exc:  # noqa: BLE001 -- shown instead of the channels
                return {"tables": [], "error": views.refusal(exc)}

        return await page(request, "channels.html", build)

    @api.get(f"{PREFIX}/tables")
    async def tables_page(request: Request, db: str = "", schema: str = "", name: str = "") -> Response:
        picked = _name({"db": db, "schema": schema, "name": name})

        def build(viewer: Viewer) -> dict[str, Any]:
            run = console.runner(viewer)
            try:
                tables = views.show_tables(run)
            except Exception as exc:  # noqa: BLE001 -- shown instead of the tables
                return {
                    "tables": [],
                    "sample": None,
                    "error": views.refusal(exc),
                    "picked": picked,
                    "sample_rows": 0,
                }
            chosen = picked or (tables[0].name if tables else None)
            shown = views.sample(run, chosen, cfg.sample_rows) if chosen is not None else None
            return {
                "tables": tables,
                "sample": shown,
                "error": None,
                "picked": chosen,
                "sample_rows": cfg.sample_rows,
            }

        return await page(request, "tables.html", build)

    @api.get(f"{PREFIX}/sql")
    async def sql_page(request: Request) -> Response:
        return await page(request, "sql.html", lambda viewer: {"answer": None})

    # ------------------------------------------------------------------------------- actions

    @api.post(f"{PREFIX}/sql")
    async def run_sql(request: Request) -> Response:
        def act(viewer: Viewer, fields: dict[str, str]) -> dict[str, Any]:
            statement = fields.get("sql", "").strip()
            if not statement:
                return {"answer": None, "error": "Type a statement first."}
            return {"answer": views.run_box(console.runner(viewer), statement, cfg.sql_rows), "error": None}

        return await action(request, act, "_sql_answer.html")

    def pause(paused: bool) -> Callable[[Viewer, dict[str, str]], dict[str, Any]]:
        def act(viewer: Viewer, fields: dict[str, str]) -> dict[str, Any]:
            pipe = _name(fields)
            if pipe is None:
                return {"error": "No pipe named.", "message": None}
            try:
                views.set_paused(console.runner(viewer), pipe, paused)
            except Exception as exc:  # noqa: BLE001 -- the statement's refusal is the answer shown
                return {
                    "error": f"{'Pause' if paused else 'Resume'} {pipe.shown}: {views.refusal(exc)}",
                    "message": None,
                }
            log.info(
                "console: %s %s pipe %s", viewer.grant.user, "paused" if paused else "resumed", pipe.shown
            )
            return {"error": None, "message": f"Pipe {pipe.shown} {'paused' if paused else 'resumed'}."}

        return act

    @api.post(f"{PREFIX}/pipes/pause")
    async def pause_pipe(request: Request) -> Response:
        response = await action(request, pause(True), "_flash.html")
        response.headers["hx-trigger"] = "floe-refresh"
        return response

    @api.post(f"{PREFIX}/pipes/resume")
    async def resume_pipe(request: Request) -> Response:
        response = await action(request, pause(False), "_flash.html")
        response.headers["hx-trigger"] = "floe-refresh"
        return response

    @api.get(f"{PREFIX}/{{rest:path}}")
    async def not_found(request: Request, rest: str) -> Response:
        viewer, why = await console.in_thread(lambda: console.session(request))
        if viewer is None:
            return console.signed_out(request, why)
        return console.html("error.html", 404, viewer=viewer, message="No such page.")

    return api


def console_router(
    settings: Settings,
    client: RedisClient,
    executor: SqlExecutor,
    authenticator: Authenticator,
    threads: anyio.CapacityLimiter,
    limiter: RateLimiter,
    secret: bytes,
) -> APIRouter:
    """The console's routes for the API's app (``services.api.create_app``): its sign-ins in
    ``client`` under the API's key prefix, its statements through ``executor`` in ``threads``
    (the SQL endpoint's), one token of ``limiter`` (the SQL rate limit) per page or action, and
    its sign-in form tokens keyed from ``secret`` (the API's scoped-token secret)."""
    sign_ins = SignIns(
        client, settings.redis.prefix, settings.console.code_ttl_s, settings.console.session_ttl_s
    )
    forms = SignInForms(secret)
    return router(Console(settings, sign_ins, executor, authenticator, threads, limiter, forms))
