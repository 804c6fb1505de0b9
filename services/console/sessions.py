"""The console's sign-in: one-time codes that `floe console` asks for, and the sessions they open.

A code is minted for a caller the API's gate authenticated with a key-pair JWT, and names that
caller's user, the fingerprint of the key that signed the JWT, and the role it asked for. It lives
``console.code_ttl_s`` seconds and is consumed by the first sign-in that presents it (GETDEL: two
browsers racing with one link cannot both win); opening the link only reads it (``peek``), and the
sign-in page's form redeems it. A session is a random id in an ``HttpOnly`` cookie
that names the same three things for ``console.session_ttl_s`` seconds.

Redis holds only the SHA-256 of a code or a session id, so a copy of its data (a dump, a replica, the
AOF) opens no session. Each request re-checks the user and key through ``Authenticator.resolve``,
as a scoped token does: dropping the user or removing the key ends its sessions at once.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import asdict, dataclass
from typing import cast

from floe.keys import RedisClient

CODE_BYTES = 32
"""Random bytes in a code and in a session id (256 bits: not guessable within their lifetimes)."""
_STORE = "return redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2], 'NX')"
"""Store a grant under a new key for a number of seconds (a key already there is kept)."""
_TAKE = "return redis.call('GETDEL', KEYS[1])"
"""Read and delete at once: a code is consumed by the first sign-in that presents it."""


@dataclass(frozen=True)
class Grant:
    """Who a code or a session acts as."""

    user: str
    fingerprint: str
    """The key that signed the JWT the code was minted for (``Identity.fingerprint``)."""
    role: str | None = None
    """The role to act as (USE ROLE); None: the user's DEFAULT_ROLE, as `floe sql` without --role."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class SignIns:
    """One-time sign-in codes and the sessions they open, in Redis under the API's key prefix."""

    def __init__(self, client: RedisClient, prefix: str, code_ttl_s: int, session_ttl_s: int) -> None:
        self.redis = client
        self.prefix = prefix
        self.code_ttl_s = code_ttl_s
        self.session_ttl_s = session_ttl_s
        self._store = client.register_script(_STORE)
        self._take = client.register_script(_TAKE)

    def _code_key(self, code: str) -> str:
        return f"{self.prefix}:console:code:{_digest(code)}"

    def _session_key(self, session: str) -> str:
        return f"{self.prefix}:console:session:{_digest(session)}"

    def mint(self, grant: Grant) -> str:
        """A new one-time code for ``grant``, valid for ``code_ttl_s`` seconds."""
        code = secrets.token_urlsafe(CODE_BYTES)
        self._store(keys=[self._code_key(code)], args=[json.dumps(asdict(grant)), self.code_ttl_s])
        return code

    def peek(self, code: str) -> Grant | None:
        """The grant a live code would sign in as, leaving the code where it is (the sign-in
        page shows whom it signs in as; only its form's POST redeems it)."""
        if not code or len(code) > 128:
            return None
        raw = self.redis.get(self._code_key(code))
        return Grant(**json.loads(raw)) if raw is not None else None

    def redeem(self, code: str) -> tuple[str, Grant] | None:
        """Consume ``code`` and open a session for its grant: (session id, grant); None if the code
        is unknown, already used or expired."""
        if not code or len(code) > 128:  # a code is 43 characters; longer is not worth a round trip
            return None
        raw = cast(bytes | None, self._take(keys=[self._code_key(code)]))
        if raw is None:
            return None
        grant = Grant(**json.loads(raw))
        session = secrets.token_urlsafe(CODE_BYTES)
        self._store(keys=[self._session_key(session)], args=[json.dumps(asdict(grant)), self.session_ttl_s])
        return session, grant

    def session(self, session: str | None) -> Grant | None:
        """The grant of a live session; None for no cookie, an unknown or an expired session."""
        if not session or len(session) > 128:
            return None
        raw = self.redis.get(self._session_key(session))
        return Grant(**json.loads(raw)) if raw is not None else None

    def end(self, session: str | None) -> None:
        """Sign out: the session is gone at once."""
        if session and len(session) <= 128:
            self.redis.delete(self._session_key(session))
