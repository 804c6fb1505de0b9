"""Who is calling: key-pair JWT authentication, the principal a request acts as, rate limits.

What a principal may do is decided in ``services.access``.

Authentication follows Snowflake's key-pair scheme. A token is an RS256 JWT whose ``sub`` is
``ACCOUNT.USER`` and whose ``iss`` is ``ACCOUNT.USER.SHA256:<fingerprint>``; the fingerprint picks
one of the user's two registered public keys (RSA_PUBLIC_KEY or RSA_PUBLIC_KEY_2) and the
signature must verify with it. A failure of the token's form (malformed, wrong algorithm or
account, expired) names the check that failed; an unknown user, a user without a key, a fingerprint
that matches none of the user's keys and a bad signature all get the one message ``NO_MATCHING_KEY``,
so an answer never tells whether a user exists. No answer echoes the token or a key.

A JWT's ``scp`` claim ``session:role:<role>`` (the SDK's ``role`` property) makes that role the
current one, as ``USE ROLE`` does; a role not granted to the user is refused on every request, so
revoking it ends the tokens that name it at once.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, replace

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from floe.catalog import ADMIN_ROLE, Catalog, User
from floe.catalog.names import IDENTIFIER_MAX_LENGTH, unquote
from floe.catalog.store import role_closure
from floe.errors import AuthenticationFailed
from floe.keypair import InvalidKey, fingerprint, load_public_key
from floe.settings import AuthSettings
from services.answers import RestError

log = logging.getLogger("floe.api.auth")

TOKEN_TYPE = "KEYPAIR_JWT"
SCOPED_TOKEN_TYPE = "OAUTH"
"""X-Snowflake-Authorization-Token-Type of a scoped token from POST /oauth/token."""
STREAMING_PATHS = ("/v2/streaming/",)
"""The only routes a scoped token opens."""
NO_MATCHING_KEY = (
    "JWT token is invalid: no user of this account has a registered public key that matches the "
    "fingerprint in 'iss' and verifies the signature. Check the user in 'sub' and 'iss', and register "
    "the key's public half with ALTER USER ... SET RSA_PUBLIC_KEY."
)
"""The one answer for an unknown user, a user without a key, a wrong fingerprint and a bad signature."""
_MS_THRESHOLD = 10**11  # a timestamp above this (year 5138 in seconds) must be in milliseconds
ROLE_SCOPE = "session:role:"
"""How the ``scp`` claim of a key-pair JWT names the role to act as (Snowflake's scope syntax)."""
ROLE_NOT_GRANTED = "390189"
"""Snowflake's code for a connection's role that is not granted to its user."""


@dataclass(frozen=True)
class Principal:
    """An authenticated user, the roles granted to it, and the role it acts as."""

    user: str
    roles: frozenset[str]
    """The roles granted to the user, and PUBLIC (services.access adds the roles granted to them)."""
    primary: str | None = None
    """The current role: the owner of what the user creates. None: the user's only granted role
    other than PUBLIC, or PUBLIC (see ``owner_role``)."""
    secondary: bool = True
    """Secondary roles ALL (Snowflake's default): every granted role's privileges are active."""

    @property
    def is_admin(self) -> bool:
        """Whether ACCOUNTADMIN is granted to the user directly."""
        return ADMIN_ROLE in self.roles

    @property
    def owner_role(self) -> str:
        """The role that owns what this principal creates: the current role, else ACCOUNTADMIN for
        an administrator, else the first granted role other than PUBLIC, else PUBLIC."""
        if self.primary is not None:
            return self.primary
        if self.is_admin:
            return ADMIN_ROLE
        return next((r for r in sorted(self.roles) if r != "PUBLIC"), "PUBLIC")

    def acting_as(self, role: str | None, secondary: bool | None = None) -> Principal:
        """This principal with another current role (USE ROLE) or secondary-roles setting."""
        return replace(
            self,
            primary=self.primary if role is None else role,
            secondary=self.secondary if secondary is None else secondary,
        )

    @classmethod
    def of(cls, user: User) -> Principal:
        """A user as it signs in: its DEFAULT_ROLE (when granted) is current, all granted roles active."""
        granted = frozenset(user.roles) | {"PUBLIC"}
        primary = user.default_role if user.default_role in granted else None
        return cls(user.name, granted, primary)


class RoleNotGranted(RestError):
    """The role a token asks for (``scp``) is not granted to its user: a 400, not a failed login (the
    token is the user's own), and one the SDK does not retry."""

    def __init__(self, role: str, user: str) -> None:
        super().__init__(
            400,
            ROLE_NOT_GRANTED,
            f"Role '{role}' named in the token's scp claim (the client's role property) is not granted "
            f"to user '{user}'. Ask an administrator to GRANT ROLE {role} TO USER {user}, or connect "
            "with a granted role, or with none for the user's DEFAULT_ROLE.",
        )


class RejectedToken(AuthenticationFailed):
    """A well-formed token that does not authenticate: an attempt the failed-login limit counts.

    Requests without a token, or with one that is not even a JWT, cost nothing to refuse and
    tell an attacker nothing, so they are not counted.
    """


@dataclass(frozen=True)
class Identity:
    """Who a request's token names, as the API's gate admitted it before the body was read.

    ``principal`` is set when the token was verified for this request; a token verified before
    carries only its user and key fingerprint, which ``Authenticator.resolve`` confirms.
    """

    user: str
    fingerprint: str
    principal: Principal | None
    role: str | None = None
    """The role the token asks to act as (``scp``), checked against the user's grants by
    ``Authenticator.resolve``; None: the user's DEFAULT_ROLE."""


def scope_role(claims: dict[str, object]) -> str | None:
    """The role a key-pair JWT's ``scp`` claim names (``session:role:<role>``), as SQL reads an
    identifier: quoted, as written; bare, upper-cased (the SDK sends the role as the user wrote
    it). None when there is no such claim or it names no role."""
    scp = claims.get("scp")
    if scp is None:
        return None
    if not isinstance(scp, str):
        raise AuthenticationFailed(
            f"JWT token is invalid: the 'scp' claim must be a string such as '{ROLE_SCOPE}<role>'."
        )
    if not scp.lower().startswith(ROLE_SCOPE):
        return None
    written = scp[len(ROLE_SCOPE) :].strip()
    quoted = len(written) >= 2 and written.startswith('"') and written.endswith('"')
    role = unquote(written) if quoted else written.upper()
    if not role or len(role) > IDENTIFIER_MAX_LENGTH:
        raise AuthenticationFailed(
            f"JWT token is invalid: the role in its 'scp' claim must be 1 to {IDENTIFIER_MAX_LENGTH} "
            "characters; set the client's role property to a role granted to the user."
        )
    return role


def _seconds(value: object, claim: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RejectedToken(f"JWT token is invalid: the '{claim}' claim must be a number.")
    return value / 1000 if value > _MS_THRESHOLD else float(value)


class Authenticator:
    """Verifies bearer tokens against the users in the catalog."""

    def __init__(self, settings: AuthSettings, account: str, catalog: Catalog) -> None:
        self.settings = settings
        self.account = account.upper()
        self.catalog = catalog
        self._keys: dict[str, tuple[str, rsa.RSAPublicKey]] = {}
        # Verified tokens -> (user, fingerprint, exp); the SDK reuses one token for ~54 minutes,
        # so this saves an RSA verification per request while still honouring key changes.
        self._verified: dict[str, tuple[str, str, float, str | None]] = {}
        self._lock = threading.Lock()

    def _user_keys(self, user: User) -> dict[str, rsa.RSAPublicKey]:
        out: dict[str, rsa.RSAPublicKey] = {}
        for body in (user.rsa_public_key, user.rsa_public_key_2):
            if not body:
                continue
            hit = self._keys.get(body)
            if hit is None:
                try:
                    key = load_public_key(body)
                except InvalidKey:
                    continue
                hit = (fingerprint(key), key)
                self._keys[body] = hit
            out[hit[0]] = hit[1]
        return out

    def authenticate(self, authorization: str | None, token_type: str | None = None) -> Principal:
        """The caller of a request, from its Authorization header; AuthenticationFailed otherwise."""
        if token_type is not None and token_type.strip().upper() != TOKEN_TYPE:
            raise AuthenticationFailed(
                f"unsupported X-Snowflake-Authorization-Token-Type; only {TOKEN_TYPE} is accepted."
            )
        if not authorization:
            raise AuthenticationFailed(
                "Authorization header is missing: send 'Authorization: Bearer <key-pair JWT>'.",
                code="390101",
            )
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationFailed("Authorization header must be 'Bearer <key-pair JWT>'.", code="390101")
        now = time.time()
        with self._lock:
            cached = self._verified.get(token)
        if cached is not None:
            name, fp, exp, role = cached
            user = self.catalog.find(User, name)
            if user is not None and fp in self._user_keys(user):
                if now > exp + self.settings.clock_skew_s:
                    raise RejectedToken("JWT token is invalid: it has expired; sign a new one.")
                return self.acting(user, role)
        return self._verify(token, now)

    def admit(self, authorization: str | None, token_type: str | None = None) -> Identity:
        """``authenticate``, as an Identity the request carries to its route (with the fingerprint
        of the key that signed it, which a scoped token exchanged for it is bound to)."""
        principal = self.authenticate(authorization, token_type)
        _scheme, _, token = (authorization or "").strip().partition(" ")
        with self._lock:
            cached = self._verified.get(token.strip())
        fp, role = (cached[1], cached[3]) if cached else ("", None)
        return Identity(principal.user, fp, principal, role)

    def admit_cached(self, authorization: str | None, token_type: str | None = None) -> Identity | None:
        """The Identity of a token this process verified before and that has not expired, without
        any I/O (so on the event loop); None sends the caller to ``admit``.

        Its user and key are confirmed by ``resolve`` in the route's own catalog read: the SDK
        sends one token for ~54 minutes, and a second lookup per call would cost a Redis round
        trip and a thread hop on the insertFiles path.
        """
        if not authorization or (token_type is not None and token_type.strip().upper() != TOKEN_TYPE):
            return None
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        with self._lock:
            cached = self._verified.get(token.strip())
        if cached is None or time.time() > cached[2] + self.settings.clock_skew_s:
            return None
        return Identity(cached[0], cached[1], None, cached[3])

    def resolve(self, identity: Identity) -> Principal:
        """The Principal an admitted request acts as, read from the catalog (pin it to share the read).

        A token admitted from the cache must still name a user that holds its key, so removing a
        key takes effect at once.
        """
        if identity.principal is not None:
            return identity.principal
        user = self.catalog.find(User, identity.user)
        if user is None or identity.fingerprint not in self._user_keys(user):
            raise AuthenticationFailed(NO_MATCHING_KEY)
        return self.acting(user, identity.role)

    def acting(self, user: User, role: str | None) -> Principal:
        """The user as it signs in, acting as ``role`` when its token names one: the role must be
        granted to it, directly or through other roles (``USE ROLE``'s rule)."""
        principal = Principal.of(user)
        if role is None:
            return principal
        if role not in role_closure(self.catalog, principal.roles):
            raise RoleNotGranted(role, user.name)
        return principal.acting_as(role)

    def _verify(self, token: str, now: float) -> Principal:
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise AuthenticationFailed("JWT token is invalid: it is not a well-formed JWT.") from None
        alg = str(header.get("alg"))
        if alg != "RS256":
            raise RejectedToken(
                f"JWT token is invalid: algorithm '{alg}' is not accepted; sign with RS256 and a key pair."
            )
        sub, iss = claims.get("sub"), claims.get("iss")
        if not isinstance(sub, str) or not isinstance(iss, str):
            raise RejectedToken("JWT token is invalid: the 'sub' and 'iss' claims are required.")
        account, _, user_name = sub.upper().partition(".")
        if not user_name:
            raise RejectedToken("JWT token is invalid: 'sub' must be ACCOUNT.USER.")
        if account != self.account:
            raise RejectedToken(
                f"JWT token is invalid: it is for account '{account}', but this is account "
                f"'{self.account}'. Pass account='{self.account}' to the client."
            )
        prefix = f"{account}.{user_name}."
        if not iss.upper().startswith(prefix) or not iss[len(prefix) :].startswith("SHA256:"):
            raise RejectedToken(
                "JWT token is invalid: 'iss' must be ACCOUNT.USER.SHA256:<public key fingerprint> "
                "for the same user as 'sub'."
            )
        fp = iss[len(prefix) :]
        user = self.catalog.find(User, user_name)
        keys = self._user_keys(user) if user is not None else {}
        key = keys.get(fp)
        if user is None or key is None:
            # The operator's log says which; the caller's answer must not (user enumeration).
            why = "no such user" if user is None else "no registered key has this fingerprint"
            log.info("authentication failed for user %r: %s", user_name[:128], why)
            raise RejectedToken(NO_MATCHING_KEY)
        try:
            jwt.decode(
                token,
                key,
                algorithms=["RS256"],
                options={"verify_exp": False, "verify_iat": False, "verify_nbf": False, "verify_aud": False},
            )
        except jwt.PyJWTError:
            log.info("authentication failed for user %r: the signature does not verify", user_name[:128])
            raise RejectedToken(NO_MATCHING_KEY) from None
        if "iat" not in claims or "exp" not in claims:
            raise RejectedToken("JWT token is invalid: the 'iat' and 'exp' claims are required.")
        iat, exp = _seconds(claims["iat"], "iat"), _seconds(claims["exp"], "exp")
        skew = self.settings.clock_skew_s
        if now > exp + skew:
            raise RejectedToken("JWT token is invalid: it has expired; sign a new one.")
        if iat > now + skew:
            raise RejectedToken("JWT token is invalid: it was issued in the future (check the clock).")
        if exp - iat > self.settings.max_token_lifetime_s + skew:
            raise RejectedToken(
                f"JWT token is invalid: exp is more than {self.settings.max_token_lifetime_s} s after iat."
            )
        role = scope_role(claims)
        principal = self.acting(user, role)
        with self._lock:
            if len(self._verified) > 10_000:
                self._verified = {t: v for t, v in self._verified.items() if v[2] + skew > now}
            self._verified[token] = (user.name, fp, exp, role)
        return principal


class ScopedTokens:
    """Short-lived tokens that POST /oauth/token exchanges for a key-pair JWT (Snowpipe Streaming's
    scoped token), accepted only by the streaming routes.

    A token is an HS256 JWT signed with a secret only the API holds. It names the user and the
    fingerprint of the key that signed the exchanged JWT, so removing that key or the user ends it
    at once (``Authenticator.resolve``), as it does for key-pair tokens; and the role the exchanged
    JWT asked for, checked on every request. Each exchange makes a new token (``jti``): the SDK
    exchanges again after a 401, and given the token that failed it loops (1,393 exchanges in
    1.3 s, docs/streaming-sdk-protocol.md section 2).
    """

    AUDIENCE = "floe:streaming"

    def __init__(self, secret: bytes, account: str, lifetime_s: int) -> None:
        self._secret = secret
        self.account = account.upper()
        self.lifetime_s = lifetime_s

    def issue(self, identity: Identity, scope: str, now: float) -> str:
        """A scoped token for the admitted caller of the exchange."""
        claims: dict[str, object] = {
            "sub": f"{self.account}.{identity.user}",
            "fp": identity.fingerprint,
            "aud": self.AUDIENCE,
            "scope": scope,
            "iat": int(now),
            "exp": int(now) + self.lifetime_s,  # seconds: the SDK reads it so
            "jti": uuid.uuid4().hex,
        }
        if identity.role is not None:
            claims["role"] = identity.role
        return jwt.encode(claims, self._secret, algorithm="HS256")

    @classmethod
    def presented(cls, authorization: str | None, token_type: str | None) -> bool:
        """Whether a request carries a scoped token: its X-Snowflake-Authorization-Token-Type says
        OAUTH or, that optional header left out (as Snowflake documents it), its bearer has a
        scoped token's form: HS256 (no key-pair JWT is) for this audience. Read without
        verifying: ``admit`` verifies; any other JWT goes to the key-pair check, which says what
        is wrong with it."""
        if token_type is not None and token_type.strip():
            return token_type.strip().upper() == SCOPED_TOKEN_TYPE
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        try:
            header = jwt.get_unverified_header(token.strip())
            claims = jwt.decode(token.strip(), options={"verify_signature": False})
        except jwt.PyJWTError:
            return False
        return header.get("alg") == "HS256" and claims.get("aud") == cls.AUDIENCE

    def admit(self, authorization: str | None, path: str) -> Identity:
        """The Identity a scoped token names; AuthenticationFailed (401) saying why otherwise."""
        if not path.startswith(STREAMING_PATHS):
            raise AuthenticationFailed(
                "A scoped token (X-Snowflake-Authorization-Token-Type: OAUTH) opens only the "
                "/v2/streaming routes; sign this request with a key-pair JWT (KEYPAIR_JWT)."
            )
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationFailed(
                "Authorization header must be 'Bearer <scoped token>' from POST /oauth/token.", code="390101"
            )
        try:
            claims = jwt.decode(
                token.strip(),
                self._secret,
                algorithms=["HS256"],
                audience=self.AUDIENCE,
                options={"require": ["exp", "iat", "sub", "fp"]},
                leeway=0,
            )
        except jwt.ExpiredSignatureError:
            raise RejectedToken(
                "The scoped token has expired; exchange a new one at POST /oauth/token."
            ) from None
        except jwt.PyJWTError:
            raise RejectedToken(
                "The scoped token is invalid: it was not issued by this server's POST /oauth/token."
            ) from None
        account, _, user = str(claims["sub"]).partition(".")
        if account != self.account or not user:
            raise RejectedToken("The scoped token is invalid: it is for another account.")
        role = claims.get("role")
        return Identity(user, str(claims["fp"]), None, role if isinstance(role, str) else None)


class RateLimiter:
    """A token bucket per key (a user, a client address); ``rate`` 0 turns it off.

    At most ``max_keys`` buckets are kept, least recently used dropped first, so callers that
    rotate user names or addresses cannot grow it without bound. A dropped bucket starts full
    again, which only helps a caller that touched none of the other ``max_keys`` keys since.
    """

    def __init__(self, rate: float, burst: int, max_keys: int = 65_536) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self.max_keys = max(1, max_keys)
        # Insertion order is recency: every touch pops and re-inserts its key.
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buckets)

    def _tokens(self, key: str, now: float) -> float:
        hit = self._buckets.get(key)
        if hit is None:
            return float(self.burst)
        return min(float(self.burst), hit[0] + (now - hit[1]) * self.rate)

    def retry_after(self, key: str) -> float | None:
        """Take one token: None if the request may go ahead, else seconds until it may."""
        if self.rate <= 0:
            return None
        now = time.monotonic()
        with self._lock:
            tokens = self._tokens(key, now)
            self._buckets.pop(key, None)
            if tokens < 1:
                self._buckets[key] = (tokens, now)
                return (1 - tokens) / self.rate
            self._buckets[key] = (tokens - 1, now)
            while len(self._buckets) > self.max_keys:
                del self._buckets[next(iter(self._buckets))]
            return None

    def peek(self, key: str) -> float | None:
        """Like ``retry_after``, but takes no token and remembers nothing."""
        if self.rate <= 0:
            return None
        with self._lock:
            tokens = self._tokens(key, time.monotonic())
        return None if tokens >= 1 else (1 - tokens) / self.rate
