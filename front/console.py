"""`floe console`: a one-time link that signs a browser in to the web console (services/console).

The CLI signs a key-pair JWT as `floe sql` does (the admin's key by default, or --user with
--private-key-file) and asks the API for a one-time code; the link carries that code, which works
once, within ``console.code_ttl_s`` seconds. The browser then holds a session of its own, as that
user (and role), and never sees a key or a JWT.
"""

from __future__ import annotations

import httpx

from floe.settings import Settings
from floe.tls import TlsError, api_base_url, client_ssl_context
from front.client import SqlFailed, StatementRejected, auth_header, json_answer, reaching

CODES_ROUTE = "/api/v1/console/codes"
"""Where the API mints sign-in codes (``services.console.CODES_PATH``)."""


def signin_link(
    settings: Settings,
    *,
    user: str | None = None,
    key_file: str | None = None,
    role: str | None = None,
    timeout: float = 30.0,
) -> str:
    """A one-time sign-in link to the console for ``user`` (the admin by default), acting as
    ``role`` (its DEFAULT_ROLE if None); SqlFailed if the API refuses or cannot be reached."""
    base = api_base_url(settings)
    url = f"{base}{CODES_ROUTE}"
    try:
        context = client_ssl_context(settings)
    except TlsError as exc:
        raise StatementRejected(exc.message) from None
    body = {"role": role} if role is not None else {}
    with reaching(url):
        resp = httpx.post(
            url,
            json=body,
            headers=auth_header(settings, user, key_file),
            verify=context or True,
            timeout=timeout,
        )
    answer = json_answer(resp)
    public = settings.console.public_url.rstrip("/") or base
    return f"{public}{answer['path']}"


def run_console(
    settings: Settings, user: str | None, key_file: str | None, role: str | None
) -> tuple[str | None, str]:
    """What `floe console` prints: the link (None on failure) and the line that goes with it."""
    try:
        link = signin_link(settings, user=user, key_file=key_file, role=role)
    except SqlFailed as exc:
        return None, str(exc)
    seconds = settings.console.code_ttl_s
    return link, f"Open this link in a browser within {seconds} s and press Sign in; it works once."
