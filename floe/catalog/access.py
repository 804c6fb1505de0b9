"""Access-control statements: users, roles and pipe grants, parsed by hand.

sqlglot parses none of these (it falls back to ``exp.Command``), so a small scanner of anchored
regexes reads them and reports syntax errors the way Snowflake does, with line and position.
User and role names live at account level and are never qualified; pipe names are qualified like
every other object.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from floe.catalog.models import PIPE_PRIVILEGES
from floe.catalog.names import IDENT, QNAME, Defaults, Name, check_identifier, qualify
from floe.errors import CompilationError

KEY_PROPERTIES = ("RSA_PUBLIC_KEY", "RSA_PUBLIC_KEY_2")
"""User properties holding public keys; a user may set or unset these on itself."""

USER_PROPERTIES = (*KEY_PROPERTIES, "DEFAULT_ROLE")
"""User properties Floe stores."""

# Snowflake user properties that Floe accepts so existing scripts run, but does not store: none of
# them affects key-pair authentication or privileges. DISABLED is handled apart (see _user_props).
IGNORED_USER_PROPERTIES = frozenset(
    {
        "COMMENT",
        "PASSWORD",
        "LOGIN_NAME",
        "DISPLAY_NAME",
        "FIRST_NAME",
        "MIDDLE_NAME",
        "LAST_NAME",
        "EMAIL",
        "TYPE",
        "MUST_CHANGE_PASSWORD",
        "DISABLED",
        "DAYS_TO_EXPIRY",
        "MINS_TO_UNLOCK",
        "MINS_TO_BYPASS_MFA",
        "DEFAULT_WAREHOUSE",
        "DEFAULT_NAMESPACE",
        "DEFAULT_SECONDARY_ROLES",
        "NETWORK_POLICY",
    }
)

GRANTABLE = ("OPERATE", "MONITOR")
"""What ALL [PRIVILEGES] on a pipe stands for (OWNERSHIP is transferred, not shared)."""


@dataclass
class CreateUser:
    """CREATE [OR REPLACE] USER [IF NOT EXISTS] name [properties]."""

    name: str
    rsa_public_key: str | None = None
    rsa_public_key_2: str | None = None
    default_role: str | None = None
    replace: bool = False
    if_not_exists: bool = False


@dataclass
class AlterUser:
    """ALTER USER [IF EXISTS] name SET prop = value ... | UNSET prop, ...; None in ``properties`` unsets."""

    name: str
    properties: dict[str, str | None] = field(default_factory=dict)
    if_exists: bool = False


@dataclass
class DropUser:
    """DROP USER [IF EXISTS] name."""

    name: str
    if_exists: bool = False


@dataclass
class CreateRole:
    """CREATE [OR REPLACE] ROLE [IF NOT EXISTS] name [COMMENT = '...']."""

    name: str
    comment: str | None = None
    replace: bool = False
    if_not_exists: bool = False


@dataclass
class DropRole:
    """DROP ROLE [IF EXISTS] name."""

    name: str
    if_exists: bool = False


@dataclass
class GrantRole:
    """GRANT ROLE role TO USER user."""

    role: str
    user: str


@dataclass
class RevokeRole:
    """REVOKE ROLE role FROM USER user."""

    role: str
    user: str


@dataclass
class GrantPrivileges:
    """GRANT priv, ... ON PIPE pipe TO ROLE role [COPY | REVOKE CURRENT GRANTS]."""

    privileges: list[str]
    pipe: Name
    role: str
    current_grants: Literal["COPY", "REVOKE"] | None = None


@dataclass
class RevokePrivileges:
    """REVOKE priv, ... ON PIPE pipe FROM ROLE role."""

    privileges: list[str]
    pipe: Name
    role: str


@dataclass
class ShowUsers:
    """SHOW USERS [LIKE '...']."""

    like: str | None = None


@dataclass
class ShowRoles:
    """SHOW ROLES [LIKE '...']."""

    like: str | None = None


@dataclass
class ShowGrantsToRole:
    """SHOW GRANTS TO ROLE role."""

    role: str


@dataclass
class ShowGrantsToUser:
    """SHOW GRANTS TO USER user: the roles granted to the user."""

    user: str


@dataclass
class ShowGrantsOnPipe:
    """SHOW GRANTS ON PIPE pipe."""

    pipe: Name


@dataclass
class DescribeUser:
    """DESC[RIBE] USER name."""

    name: str


AccessStatement = (
    CreateUser
    | AlterUser
    | DropUser
    | CreateRole
    | DropRole
    | GrantRole
    | RevokeRole
    | GrantPrivileges
    | RevokePrivileges
    | ShowUsers
    | ShowRoles
    | ShowGrantsToRole
    | ShowGrantsToUser
    | ShowGrantsOnPipe
    | DescribeUser
)

# Strings and parenthesised values are written as "unrolled loops" (`[^']*(?:''[^']*)*`, not
# `(?:[^']|'')*`): one way to match each character, and no stack of group repetitions to unwind.
_STRING = r"'[^']*(?:''[^']*)*'"
_VALUE = rf"{_STRING}|\([^()']*(?:{_STRING}[^()']*)*\)|\"[^\"]+\"|[^\s,;()']+"
_PROPERTY = rf"(?P<key>[A-Za-z_]\w*)\s*=\s*(?P<value>{_VALUE})"
_HEAD = re.compile(
    r"^\s*(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:USER|ROLE)\b|ALTER\s+USER\b|DROP\s+(?:USER|ROLE)\b"
    r"|GRANT\b|REVOKE\b|SHOW\s+(?:USERS|ROLES|GRANTS)\b|DESC(?:RIBE)?\s+USER\b)",
    re.IGNORECASE,
)
_PATTERNS: dict[str, re.Pattern[str]] = {}
_REST_IS_BLANK = re.compile(r"\s*\Z")

# The scanner's patterns see user SQL, so each must stay linear under Python's backtracking engine:
# every one is matched at the cursor only (never searched), and none has two neighbouring quantified
# parts that can match the same characters. A failed step rescans at most the blanks before it, and
# every loop consumes text or ends (tests/floe/catalog/test_parse_linear.py times 100k inputs).


class _Scanner:
    """A cursor over one statement; every step is an anchored regex, so an error can say where."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.what = ""

    def take(self, pattern: str) -> re.Match[str] | None:
        """Match ``pattern`` (after optional whitespace) at the cursor and move past it."""
        compiled = _PATTERNS.get(pattern)
        if compiled is None:
            compiled = _PATTERNS[pattern] = re.compile(rf"\s*(?:{pattern})", re.IGNORECASE | re.DOTALL)
        m = compiled.match(self.text, self.pos)
        if m is not None:
            self.pos = m.end()
        return m

    def expect(self, pattern: str, expected: str) -> re.Match[str]:
        """Like take, but a syntax error naming ``expected`` if the text does not match."""
        m = self.take(pattern)
        if m is None:
            raise self.error(expected)
        return m

    def at_end(self) -> bool:
        """Whether only whitespace is left."""
        return _REST_IS_BLANK.match(self.text, self.pos) is not None

    def end(self) -> None:
        """A syntax error unless the statement is over."""
        if not self.at_end():
            raise self.error("the end of the statement")

    def error(self, expected: str) -> CompilationError:
        """Snowflake's 'syntax error line L at position P unexpected T', plus what was expected."""
        rest = self.text[self.pos :]
        at = self.pos + len(rest) - len(rest.lstrip())
        line = self.text.count("\n", 0, at) + 1
        col = at - (self.text.rfind("\n", 0, at) + 1)
        tok = re.match(rf"{_STRING}|\"[^\"]*\"|\w+|\S", self.text[at:])
        token = tok.group(0) if tok else "<EOF>"
        if len(token) > 24:  # a quoted key body would drown the message
            token = token[:20] + "..."
        return CompilationError(
            f"syntax error line {line} at position {col} unexpected '{token}'. "
            f"{self.what} expects {expected}."
        )


def _ident(token: str) -> str:
    """A user or role name: upper-cased unless double-quoted."""
    return check_identifier(token[1:-1] if token.startswith('"') else token.upper())


def _string(token: str) -> str:
    """A property value: a quoted string unescaped, a bare word as written."""
    if token.startswith("'"):
        return token[1:-1].replace("''", "'")
    return token


def _role_value(token: str) -> str:
    """DEFAULT_ROLE's value, an identifier even when written as a string ('analyst' = ANALYST)."""
    text = _string(token).strip()
    if not re.fullmatch(IDENT, text):
        raise CompilationError(f"invalid value '{text}' for property DEFAULT_ROLE; expected a role name")
    return _ident(text)


def _name(sc: _Scanner, kind: str) -> str:
    return _ident(sc.expect(IDENT, f"a {kind} name").group(0).strip())


def _pipe(sc: _Scanner, defaults: Defaults) -> Name:
    return qualify(sc.expect(QNAME, "a pipe name").group(0).strip(), defaults)


def _like(sc: _Scanner) -> str | None:
    if sc.take(r"LIKE\b") is None:
        return None
    return _string(sc.expect(_STRING, "a quoted pattern after LIKE").group(0).strip())


def _user_props(sc: _Scanner, need_one: bool) -> dict[str, str]:
    """``NAME = value`` pairs, optionally comma-separated, with user property names checked."""
    props: dict[str, str] = {}
    while not sc.at_end():
        if props:
            sc.take(",")
        m = sc.expect(_PROPERTY, "a property (NAME = value)")
        key, value = m.group("key").upper(), m.group("value")
        if key not in USER_PROPERTIES and key not in IGNORED_USER_PROPERTIES:
            raise CompilationError(
                f"invalid property '{key}' for USER. Floe stores {', '.join(USER_PROPERTIES)} and "
                "accepts (ignoring them) the other Snowflake user properties such as COMMENT."
            )
        if key in props:
            raise CompilationError(f"duplicate property '{key}' in {sc.what}")
        if key == "DISABLED" and _string(value).upper() == "TRUE":
            # Ignoring it would leave a user the admin means to lock out able to log in.
            raise CompilationError(
                "DISABLED = TRUE is not supported; to lock a user out, DROP USER or UNSET its RSA keys."
            )
        props[key] = value
    if need_one and not props:
        raise sc.error("at least one property (NAME = value)")
    return props


def _create_user(sc: _Scanner, replace: bool) -> CreateUser:
    sc.what = "CREATE USER"
    ine = sc.take(r"IF\s+NOT\s+EXISTS\b") is not None
    name = _name(sc, "user")
    props = _user_props(sc, need_one=False)
    role = props.get("DEFAULT_ROLE")
    return CreateUser(
        name=name,
        rsa_public_key=_string(props["RSA_PUBLIC_KEY"]) if "RSA_PUBLIC_KEY" in props else None,
        rsa_public_key_2=_string(props["RSA_PUBLIC_KEY_2"]) if "RSA_PUBLIC_KEY_2" in props else None,
        default_role=_role_value(role) if role is not None else None,
        replace=replace,
        if_not_exists=ine,
    )


def _alter_user(sc: _Scanner) -> AlterUser:
    sc.what = "ALTER USER"
    ie = sc.take(r"IF\s+EXISTS\b") is not None
    name = _name(sc, "user")
    out: dict[str, str | None] = {}
    if sc.take(r"SET\b"):
        for key, value in _user_props(sc, need_one=True).items():
            if key == "DEFAULT_ROLE":
                out[key] = _role_value(value)
            else:
                out[key] = _string(value)
        return AlterUser(name, out, ie)
    sc.expect(r"UNSET\b", "SET or UNSET (Floe does not support other ALTER USER forms)")
    while True:
        key = sc.expect(r"[A-Za-z_]\w*", "a property name").group(0).strip().upper()
        if key not in USER_PROPERTIES and key not in IGNORED_USER_PROPERTIES:
            raise CompilationError(f"invalid property '{key}' for USER")
        out[key] = None
        if sc.take(",") is None:
            break
    sc.end()
    return AlterUser(name, out, ie)


def _create_role(sc: _Scanner, replace: bool) -> CreateRole:
    sc.what = "CREATE ROLE"
    ine = sc.take(r"IF\s+NOT\s+EXISTS\b") is not None
    name = _name(sc, "role")
    comment: str | None = None
    if sc.take(r"COMMENT\s*=") is not None:
        comment = _string(sc.expect(_STRING, "a quoted comment").group(0).strip())
    sc.end()
    return CreateRole(name, comment, replace, ine)


def _privileges(sc: _Scanner) -> list[str]:
    """Privilege list, ALL [PRIVILEGES] expanded, in PIPE_PRIVILEGES order without duplicates."""
    found: set[str] = set()
    while True:
        word = sc.expect(r"ALL(?:\s+PRIVILEGES)?\b|[A-Za-z_]\w*", "a privilege").group(0).strip().upper()
        if word.split()[0] == "ALL":
            found.update(GRANTABLE)
        elif word in PIPE_PRIVILEGES:
            found.add(word)
        else:
            raise CompilationError(
                f"invalid privilege '{word}' on a pipe; pipe privileges are "
                f"{', '.join(PIPE_PRIVILEGES)} and ALL [PRIVILEGES] (= {' and '.join(GRANTABLE)})."
            )
        if sc.take(",") is None:
            break
    return [p for p in PIPE_PRIVILEGES if p in found]


def _grant(sc: _Scanner, defaults: Defaults) -> GrantRole | GrantPrivileges:
    sc.what = "GRANT"
    if sc.take(r"ROLE\b"):
        sc.what = "GRANT ROLE"
        role = _name(sc, "role")
        sc.expect(r"TO\b", "TO USER <user>")
        if sc.take(r"ROLE\b"):
            raise CompilationError("granting a role to a role is not supported; GRANT ROLE r TO USER u")
        sc.expect(r"USER\b", "USER <user> (Floe grants roles to users only)")
        user = _name(sc, "user")
        sc.end()
        return GrantRole(role, user)
    privileges = _privileges(sc)
    if "OWNERSHIP" in privileges and len(privileges) > 1:
        raise CompilationError("OWNERSHIP must be granted on its own: GRANT OWNERSHIP ON PIPE p TO ROLE r")
    sc.expect(r"ON\s+PIPE\b", "ON PIPE <pipe> (Floe grants privileges on pipes only)")
    pipe = _pipe(sc, defaults)
    sc.expect(r"TO\s+ROLE\b", "TO ROLE <role> (privileges are granted to roles)")
    role = _name(sc, "role")
    current: Literal["COPY", "REVOKE"] | None = None
    if "OWNERSHIP" in privileges and (m := sc.take(r"(?P<how>COPY|REVOKE)\s+CURRENT\s+GRANTS\b")):
        current = "COPY" if m.group("how").upper() == "COPY" else "REVOKE"
    if sc.take(r"WITH\s+GRANT\s+OPTION\b"):
        raise CompilationError("WITH GRANT OPTION is not supported; only ACCOUNTADMIN grants privileges")
    sc.end()
    return GrantPrivileges(privileges, pipe, role, current)


def _revoke(sc: _Scanner, defaults: Defaults) -> RevokeRole | RevokePrivileges:
    sc.what = "REVOKE"
    if sc.take(r"ROLE\b"):
        sc.what = "REVOKE ROLE"
        role = _name(sc, "role")
        sc.expect(r"FROM\s+USER\b", "FROM USER <user>")
        user = _name(sc, "user")
        sc.end()
        return RevokeRole(role, user)
    if sc.take(r"GRANT\s+OPTION\s+FOR\b"):
        raise CompilationError("grant options are not supported; REVOKE priv ON PIPE p FROM ROLE r")
    privileges = _privileges(sc)
    sc.expect(r"ON\s+PIPE\b", "ON PIPE <pipe> (Floe grants privileges on pipes only)")
    pipe = _pipe(sc, defaults)
    sc.expect(r"FROM\s+ROLE\b", "FROM ROLE <role>")
    role = _name(sc, "role")
    sc.take(r"RESTRICT\b|CASCADE\b")
    sc.end()
    return RevokePrivileges(privileges, pipe, role)


def _show(sc: _Scanner, defaults: Defaults) -> AccessStatement:
    sc.what = "SHOW"
    if sc.take(r"USERS\b"):
        stmt: AccessStatement = ShowUsers(_like(sc))
    elif sc.take(r"ROLES\b"):
        stmt = ShowRoles(_like(sc))
    else:
        sc.expect(r"GRANTS\b", "USERS, ROLES or GRANTS")
        sc.what = "SHOW GRANTS"
        target = sc.expect(r"TO\s+ROLE\b|TO\s+USER\b|ON\s+PIPE\b", "TO ROLE r, TO USER u or ON PIPE p")
        kind = target.group(0).split()[-1].upper()
        if kind == "ROLE":
            stmt = ShowGrantsToRole(_name(sc, "role"))
        elif kind == "USER":
            stmt = ShowGrantsToUser(_name(sc, "user"))
        else:
            stmt = ShowGrantsOnPipe(_pipe(sc, defaults))
    sc.end()
    return stmt


def parse(sql: str, defaults: Defaults) -> AccessStatement | None:
    """The statement if it is an access-control one; None for any other statement."""
    text = sql.strip().rstrip(";").strip()
    if not _HEAD.match(text):
        return None
    sc = _Scanner(text)
    if sc.take(r"CREATE\b"):
        replace = sc.take(r"OR\s+REPLACE\b") is not None
        if sc.take(r"USER\b"):
            return _create_user(sc, replace)
        sc.take(r"ROLE\b")
        return _create_role(sc, replace)
    if sc.take(r"ALTER\s+USER\b"):
        return _alter_user(sc)
    if m := sc.take(r"DROP\s+(?P<kind>USER|ROLE)\b"):
        kind = m.group("kind").upper()
        sc.what = f"DROP {kind}"
        ie = sc.take(r"IF\s+EXISTS\b") is not None
        name = _name(sc, kind.lower())
        sc.end()
        return DropUser(name, ie) if kind == "USER" else DropRole(name, ie)
    if sc.take(r"GRANT\b"):
        return _grant(sc, defaults)
    if sc.take(r"REVOKE\b"):
        return _revoke(sc, defaults)
    if sc.take(r"SHOW\b"):
        return _show(sc, defaults)
    sc.expect(r"DESC(?:RIBE)?\s+USER\b", "DESC USER")
    sc.what = "DESC USER"
    name = _name(sc, "user")
    sc.end()
    return DescribeUser(name)
