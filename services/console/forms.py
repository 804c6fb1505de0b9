"""What the console checks of a form before it acts on it: that it came from a page of this host,
that its body is within the API's bounds, and, for the sign-in form, its form token.

Opening a sign-in link changes nothing: the page it shows sets a pre-session cookie (random,
``SameSite=Strict``, ``HttpOnly``, only for the sign-in path) and carries a form token, an HMAC of
that cookie and the code under a key derived from the API's secret. Only a POST that brings the
code, the token and the cookie, from a page of this host, signs in (decision 114). Another site
can neither read the token nor send the cookie, and a token is worth nothing with another cookie,
another code or another API's secret.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from urllib.parse import parse_qs, urlsplit

from fastapi import Request

SIGNIN_COOKIE = "floe_console_signin"
"""The pre-session cookie the sign-in page sets, which its form token is bound to."""
_KEY_LABEL = b"floe console sign-in form tokens"
"""What the form key is derived for, so it is no other key derived from the same secret."""
MAX_FIELD = 128
"""Longest cookie or code worth hashing: both are 43 characters."""


def same_origin(request: Request) -> bool:
    """Whether a POST comes from a page of this host: its Origin, or without one its Referer,
    names the host the request was sent to. Neither (or Origin ``null``) is refused."""
    host = request.headers.get("host", "")
    for header in ("origin", "referer"):
        value = request.headers.get(header)
        if value and value != "null":
            return bool(host) and urlsplit(value).netloc == host
    return False


async def read_form(request: Request, limit: int, timeout_s: float) -> dict[str, str] | None:
    """A urlencoded body read under the API's size and time limits (the gate did not read it:
    the session was checked first); None if it is too large or too slow."""
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    return None
                chunks.append(chunk)
    except TimeoutError:
        return None
    try:
        text = b"".join(chunks).decode("utf-8", "replace")
        fields = parse_qs(text, keep_blank_values=True, max_num_fields=16)
    except ValueError:  # more fields than any console form has
        return None
    return {k: v[0] for k, v in fields.items()}


class SignInForms:
    """The sign-in form's tokens, keyed by a key derived from ``secret`` (the API's scoped-token
    secret, the same in every API process of a deployment, so a page and its POST may be served
    by different processes)."""

    def __init__(self, secret: bytes) -> None:
        self._key = hmac.new(secret, _KEY_LABEL, hashlib.sha256).digest()

    @staticmethod
    def pre_session(request: Request) -> str:
        """The browser's pre-session cookie, or a new one (kept when there is one, so two tabs
        with two links both work)."""
        cookie = request.cookies.get(SIGNIN_COOKIE, "")
        return cookie if 0 < len(cookie) <= MAX_FIELD else secrets.token_urlsafe(32)

    def token(self, pre_session: str, code: str) -> str:
        """The form token of ``code``'s page in the browser holding ``pre_session``."""
        message = hashlib.sha256(pre_session.encode()).digest() + hashlib.sha256(code.encode()).digest()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def valid(self, pre_session: str | None, code: str, token: str) -> bool:
        """Whether a POST's token is its page's: the same code, the same browser, this secret."""
        if not pre_session or len(pre_session) > MAX_FIELD or len(code) > MAX_FIELD or not token:
            return False
        return hmac.compare_digest(token.encode(), self.token(pre_session, code).encode())
