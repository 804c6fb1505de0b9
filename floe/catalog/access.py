"""Access-control statements: users, roles, grants and the session's roles, parsed by hand.

sqlglot parses none of these (it falls back to ``exp.Command``), so a small scanner of anchored
regexes reads them and reports syntax errors the way Snowflake does, with line and position.
``floe.catalog.ddl`` uses the same scanner for the statements sqlglot does not read either.
User, role, database and integration names live at account level and are one identifier; a
schema's name is DB.SCHEMA, and tables, stages and pipes are qualified to DB.SCHEMA.NAME. A function
is named by its overload's signature, DB.SCHEMA.F(NUMBER, VARCHAR): its argument types decide which
of the functions of one name a statement means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from floe.catalog.models import PRIVILEGES, Column, function_signature
from floe.catalog.names import (
    IDENT,
    QNAME,
    Defaults,
    Name,
    check_identifier,
    identifiers,
    join_parts,
    qualify,
    quote_part,
    unquote,
)
from floe.errors import CompilationError
from floe.types import parse_column_type

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
class Securable:
    """An object a privilege is granted on."""

    kind: str
    """One of ObjectKind: ACCOUNT, DATABASE, SCHEMA, TABLE, STAGE, FILE_FORMAT, PIPE, INTEGRATION,
    FUNCTION, ROLE or USER."""
    name: str
    """'' for ACCOUNT; DB for DATABASE; DB.S for SCHEMA; DB.S.N for TABLE, STAGE, FILE_FORMAT and PIPE; the
    signature DB.S.F(NUMBER, VARCHAR) for FUNCTION; one identifier for INTEGRATION, ROLE and USER."""


@dataclass
class Bulk:
    """ON ALL | FUTURE <kind>S IN SCHEMA s | IN DATABASE d."""

    future: bool
    """FUTURE (objects created from now on) rather than ALL (the objects there now)."""
    kind: str
    """TABLE, STAGE, FILE_FORMAT, PIPE or FUNCTION (TABLES, STAGES, FILE FORMATS, PIPES, FUNCTIONS in
    the SQL)."""
    container_kind: str
    """SCHEMA or DATABASE."""
    container: str
    """DB.S for a schema, DB for a database."""


@dataclass
class GrantPrivileges:
    """GRANT priv, ... | ALL [PRIVILEGES] | OWNERSHIP ON <object> | ON ALL | FUTURE ... TO ROLE role."""

    privileges: list[str]
    """Valid for the object's kind, in PRIVILEGES order without duplicates; or ['OWNERSHIP'] alone."""
    on: Securable | Bulk
    role: str
    current_grants: Literal["COPY", "REVOKE"] | None = None
    """COPY | REVOKE CURRENT GRANTS, only with OWNERSHIP."""
    all_privileges: bool = field(default=False, compare=False)
    """Written as ALL [PRIVILEGES]: on a stage, the ones its kind takes (decision 84). Left out of
    equality: the statement means the same privileges either way on other objects."""


@dataclass
class RevokePrivileges:
    """REVOKE priv, ... ON <object> | ON ALL | FUTURE ... FROM ROLE role [RESTRICT | CASCADE]."""

    privileges: list[str]
    on: Securable | Bulk
    role: str
    all_privileges: bool = field(default=False, compare=False)
    """Written as ALL [PRIVILEGES] (see GrantPrivileges)."""


@dataclass
class GrantRole:
    """GRANT ROLE role TO ROLE grantee | TO USER grantee."""

    role: str
    to_kind: Literal["ROLE", "USER"]
    grantee: str


@dataclass
class RevokeRole:
    """REVOKE ROLE role FROM ROLE grantee | FROM USER grantee."""

    role: str
    from_kind: Literal["ROLE", "USER"]
    grantee: str


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
class ShowGrantsOf:
    """SHOW GRANTS OF ROLE role: the users and roles the role is granted to."""

    role: str


@dataclass
class ShowGrantsOn:
    """SHOW GRANTS ON ACCOUNT | ON <kind> <name>."""

    on: Securable


@dataclass
class ShowFutureGrants:
    """SHOW FUTURE GRANTS IN SCHEMA s | IN DATABASE d."""

    container_kind: str
    """SCHEMA or DATABASE."""
    container: str
    """DB.S for a schema, DB for a database."""


@dataclass
class UseRole:
    """USE ROLE role."""

    role: str


@dataclass
class UseSecondaryRoles:
    """USE SECONDARY ROLES ALL | NONE."""

    all: bool


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
    | ShowGrantsOf
    | ShowGrantsOn
    | ShowFutureGrants
    | UseRole
    | UseSecondaryRoles
    | DescribeUser
)

# Strings and parenthesised values are written as "unrolled loops" (`[^']*(?:''[^']*)*`, not
# `(?:[^']|'')*`): one way to match each character, and no stack of group repetitions to unwind.
_STRING = r"'[^']*(?:''[^']*)*'"
_VALUE = rf"{_STRING}|\([^()']*(?:{_STRING}[^()']*)*\)|\"[^\"]+\"|[^\s,;()']+"
_PROPERTY = rf"(?P<key>[A-Za-z_]\w*)\s*=\s*(?P<value>{_VALUE})"
_HEAD = re.compile(
    r"^\s*(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:USER|ROLE)\b|ALTER\s+USER\b|DROP\s+(?:USER|ROLE)\b"
    r"|GRANT\b|REVOKE\b|SHOW\s+(?:USERS|ROLES|GRANTS|FUTURE\s+GRANTS)\b|DESC(?:RIBE)?\s+USER\b"
    r"|USE\s+(?:ROLE|SECONDARY\s+ROLES)\b)",
    re.IGNORECASE,
)
_PATTERNS: dict[str, re.Pattern[str]] = {}
_REST_IS_BLANK = re.compile(r"\s*\Z")
_WORD = r"[A-Za-z_]\w*"
# What GRANT ... ON names, in the SQL. Snowflake spells an integration with or without its kind in
# grants; storage and API integrations share one namespace, so the name alone says which.
_ON_KIND = (
    r"(?P<kind>ACCOUNT|DATABASE|SCHEMA|TABLE|STAGE|FILE\s+FORMAT|PIPE|(?:STORAGE\s+|API\s+)?INTEGRATION|FUNCTION"
    r"|ROLE|USER)\b"
)
_ON_KINDS = "ACCOUNT, DATABASE, SCHEMA, TABLE, STAGE, FILE FORMAT, PIPE, INTEGRATION, FUNCTION, ROLE or USER"
_IN_CONTAINER = r"IN\s+(?P<kind>SCHEMA|DATABASE)\b"
_THREE_PARTS = ("TABLE", "STAGE", "FILE_FORMAT", "PIPE")
"""Kinds named DB.SCHEMA.NAME (a schema is DB.SCHEMA; the others are one identifier)."""
_NOUNS = {
    "ACCOUNT": "the account",
    "DATABASE": "a database",
    "SCHEMA": "a schema",
    "TABLE": "a table",
    "STAGE": "a stage",
    "FILE_FORMAT": "a file format",
    "PIPE": "a pipe",
    "INTEGRATION": "an integration",
    "FUNCTION": "a function",
    "ROLE": "a role",
    "USER": "a user",
}

# The scanner's patterns see user SQL, so each must stay linear under Python's backtracking engine:
# every one is matched at the cursor only (never searched), and none has two neighbouring quantified
# parts that can match the same characters. A failed step rescans at most the blanks before it, and
# every loop consumes text or ends (tests/floe/catalog/test_parse_linear.py times 100k inputs).

# A data type as written in a function's signature: a word (DOUBLE PRECISION and CHARACTER VARYING
# take a second one), then its precision and scale or length. sqlglot reads what this matched.
_TYPE = r"[A-Za-z_]\w*(?:\s+(?:PRECISION|VARYING)\b)?(?:\s*\(\s*\d+\s*(?:,\s*\d+\s*)?\))?"


class Scanner:
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

    def word(self, pattern: str, expected: str) -> str:
        """The upper-cased keyword(s) ``pattern`` matched, blanks between words made single spaces."""
        return " ".join(self.expect(pattern, expected).group(0).split()).upper()

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

    def ident(self, kind: str) -> str:
        """One identifier naming a ``kind`` (user, role, database, integration)."""
        article = "an" if kind[:1] in "aeio" else "a"  # an integration, a user
        return _ident(self.expect(IDENT, f"{article} {kind} name").group(0).strip())

    def qualified(self, kind: str, defaults: Defaults) -> Name:
        """A table, stage or pipe name, qualified against ``defaults``."""
        return qualify(self.expect(QNAME, f"a {kind} name").group(0).strip(), defaults)

    def schema(self, defaults: Defaults) -> str:
        """A schema name as DB.SCHEMA."""
        return qualify_schema(self.expect(QNAME, "a schema name").group(0).strip(), defaults)

    def data_type(self, expected: str) -> tuple[str, int | None, int | None]:
        """A data type as CREATE TABLE reads it: (canonical type, precision or length, scale)."""
        text = " ".join(self.expect(_TYPE, expected).group(0).split())
        try:
            dtype = exp.DataType.build(text, dialect="snowflake")
        except (ParseError, TokenError, ValueError):
            raise CompilationError(
                f"unsupported data type '{shortened(text)}'; Floe's types are NUMBER, FLOAT, VARCHAR, "
                "BINARY, BOOLEAN, DATE, TIME, TIMESTAMP_NTZ, TIMESTAMP_LTZ, TIMESTAMP_TZ and VARIANT "
                "(and their synonyms)"
            ) from None
        return parse_column_type(dtype)

    def signature(self, defaults: Defaults) -> str:
        """A function overload as DROP, DESC and GRANT name it, ``f(NUMBER, VARCHAR)``: its argument
        types, each by its canonical type (INT is NUMBER, STRING is VARCHAR), as the catalog keys it."""
        name = self.qualified("function", defaults)
        self.expect(r"\(", "the argument types in parentheses after the function's name, such as f(NUMBER)")
        types: list[Column] = []
        if self.take(r"\)") is None:
            while True:
                kind = self.data_type("an argument type, such as NUMBER or VARCHAR")[0]
                types.append(Column(name=f"ARG{len(types) + 1}", type=kind))
                if self.take(r"\)") is not None:
                    break
                self.expect(",", "',' or ')' in the argument types")
        return function_signature(str(name), types)

    def object_name(self, kind: str, defaults: Defaults) -> str:
        """The name of an object of ``kind`` as grants and the catalog spell it (see Securable)."""
        if kind == "ACCOUNT":
            return ""
        if kind == "FUNCTION":
            return self.signature(defaults)
        if kind == "SCHEMA":
            return self.schema(defaults)
        if kind in _THREE_PARTS:
            return str(self.qualified(kind.lower().replace("_", " "), defaults))
        if kind == "DATABASE":
            # A database's key is its name as a key spells it: "PROD.S" quoted, so that it never
            # reads as schema S of database PROD (decision 109).
            return quote_part(self.ident("database"))
        return self.ident(kind.lower())

    def string(self, expected: str) -> str:
        """A quoted string, unescaped."""
        return _string(self.expect(_STRING, expected).group(0).strip())

    def secret(self, key: str) -> str:
        """A quoted secret (API_KEY), unescaped. Its error says what is missing but, unlike
        ``error``, never repeats the text it found: that text is likely the secret, unquoted."""
        m = self.take(_STRING)
        if m is None:
            raise CompilationError(
                f"{self.what} expects a quoted value after {key} =, such as {key} = '<value>' "
                "(what was written there is not repeated: it may be a secret)"
            )
        return _string(m.group(0).strip())

    def value(self, expected: str) -> str:
        """An option's value: a quoted string unescaped, or a bare word as written."""
        return _string(self.expect(rf"{_STRING}|{_WORD}", expected).group(0).strip())

    def like(self) -> str | None:
        """The pattern of an optional LIKE '...'."""
        if self.take(r"LIKE\b") is None:
            return None
        return self.string("a quoted pattern after LIKE")


def qualify_schema(text: str, defaults: Defaults) -> str:
    """A schema name as DB.SCHEMA: quoted parts as written, bare ones upper-cased, the database
    from ``defaults`` when only the schema is named."""
    parts = identifiers(text)
    if not 1 <= len(parts) <= 2:
        raise CompilationError(
            f"invalid schema name '{text}'; name a schema as <schema> or <database>.<schema>"
        )
    if len(parts) == 1:
        parts.insert(0, defaults.database)
    return join_parts(*(check_identifier(p) for p in parts))


def _ident(token: str) -> str:
    """An identifier: upper-cased unless double-quoted."""
    return check_identifier(unquote(token))


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


def _user_props(sc: Scanner, need_one: bool) -> dict[str, str]:
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


def _create_user(sc: Scanner, replace: bool) -> CreateUser:
    sc.what = "CREATE USER"
    ine = sc.take(r"IF\s+NOT\s+EXISTS\b") is not None
    name = sc.ident("user")
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


def _alter_user(sc: Scanner) -> AlterUser:
    sc.what = "ALTER USER"
    ie = sc.take(r"IF\s+EXISTS\b") is not None
    name = sc.ident("user")
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
        key = sc.expect(_WORD, "a property name").group(0).strip().upper()
        if key not in USER_PROPERTIES and key not in IGNORED_USER_PROPERTIES:
            raise CompilationError(f"invalid property '{key}' for USER")
        out[key] = None
        if sc.take(",") is None:
            break
    sc.end()
    return AlterUser(name, out, ie)


def _create(sc: Scanner) -> CreateUser | CreateRole:
    replace = sc.take(r"OR\s+REPLACE\b") is not None
    if sc.take(r"USER\b"):
        return _create_user(sc, replace)
    sc.expect(r"ROLE\b", "USER or ROLE")
    sc.what = "CREATE ROLE"
    ine = sc.take(r"IF\s+NOT\s+EXISTS\b") is not None
    name = sc.ident("role")
    comment: str | None = None
    if sc.take(r"COMMENT\s*=") is not None:
        comment = sc.string("a quoted comment")
    sc.end()
    return CreateRole(name, comment, replace, ine)


def _drop(sc: Scanner) -> DropUser | DropRole:
    kind = sc.word(r"USER\b|ROLE\b", "USER or ROLE")
    sc.what = f"DROP {kind}"
    ie = sc.take(r"IF\s+EXISTS\b") is not None
    name = sc.ident(kind.lower())
    sc.end()
    return DropUser(name, ie) if kind == "USER" else DropRole(name, ie)


def _privilege(sc: Scanner) -> str:
    """One privilege as written, upper-cased: a word, ALL [PRIVILEGES], or two words (CREATE TABLE,
    CREATE FILE FORMAT, MANAGE GRANTS, EVOLVE SCHEMA)."""
    word = sc.word(rf"(?!ON\b){_WORD}", "a privilege")
    if word == "ALL":
        sc.take(r"PRIVILEGES\b")
    elif word == "CREATE":
        # Any word, not just Floe's kinds, so CREATE VIEW is refused as a privilege, not as syntax.
        return "CREATE " + sc.word(
            rf"FILE\s+FORMAT\b|(?!ON\b){_WORD}", "the kind of object after CREATE, such as CREATE TABLE"
        )
    elif word == "MANAGE":
        return "MANAGE " + sc.word(r"GRANTS\b", "GRANTS (MANAGE GRANTS)")
    elif word == "EVOLVE":
        return "EVOLVE " + sc.word(r"SCHEMA\b", "SCHEMA (EVOLVE SCHEMA)")
    return word


def _privilege_words(sc: Scanner) -> list[str]:
    """The comma-separated privileges before ON, not yet checked against the object's kind."""
    words = [_privilege(sc)]
    while sc.take(",") is not None:
        words.append(_privilege(sc))
    return words


def shortened(text: str, limit: int = 40) -> str:
    """``text``, cut to ``limit`` characters for an error message that echoes it."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _invalid_privilege(word: str, kind: str) -> CompilationError:
    """A privilege ``kind`` does not take, and the ones it does."""
    word = shortened(word)
    if not PRIVILEGES[kind]:
        return CompilationError(
            f"invalid privilege '{word}' on {_NOUNS[kind]}; {_NOUNS[kind]} takes only OWNERSHIP "
            f"(GRANT OWNERSHIP ON {kind} <name> TO ROLE <role>); to pass a role's privileges on to another "
            "role, GRANT ROLE <role> TO ROLE <other role>"
        )
    ownership = "" if kind == "ACCOUNT" else ", or OWNERSHIP on its own"
    return CompilationError(
        f"invalid privilege '{word}' on {_NOUNS[kind]}; {kind.lower()} privileges are "
        f"{', '.join(PRIVILEGES[kind])} and ALL [PRIVILEGES]{ownership}"
    )


def _checked(words: list[str], kind: str, verb: str) -> list[str]:
    """``words`` as privileges on ``kind``: ALL expanded, in PRIVILEGES order, no duplicates; or
    OWNERSHIP alone, which is transferred rather than shared."""
    if "OWNERSHIP" in words:
        if kind == "ACCOUNT":
            raise CompilationError(
                "the account has no owner: OWNERSHIP cannot be granted on it; account privileges are "
                f"{', '.join(PRIVILEGES['ACCOUNT'])} and ALL [PRIVILEGES]"
            )
        if len(set(words)) > 1:
            to, done = ("TO", "granted") if verb == "GRANT" else ("FROM", "revoked")
            raise CompilationError(
                f"OWNERSHIP must be {done} on its own: {verb} OWNERSHIP ON {kind} <name> {to} ROLE "
                f"<role>, and the other privileges in a {verb} of their own"
            )
        return ["OWNERSHIP"]
    valid = PRIVILEGES[kind]
    found: set[str] = set()
    for word in words:
        if word == "ALL" and valid:
            found.update(valid)
        elif word in valid:
            found.add(word)
        else:
            raise _invalid_privilege("ALL PRIVILEGES" if word == "ALL" else word, kind)
    return [p for p in valid if p in found]


def _container(sc: Scanner, defaults: Defaults) -> tuple[str, str]:
    """IN SCHEMA s | IN DATABASE d, as (kind, name)."""
    kind = sc.expect(_IN_CONTAINER, "IN SCHEMA <schema> or IN DATABASE <database>").group("kind").upper()
    return kind, sc.object_name(kind, defaults)


def _securable(sc: Scanner, defaults: Defaults) -> Securable:
    """ACCOUNT, or a kind and a name."""
    words = sc.expect(_ON_KIND, _ON_KINDS).group("kind").upper().split()
    kind = "FILE_FORMAT" if words[0] == "FILE" else words[-1]
    return Securable(kind, sc.object_name(kind, defaults))


def _target(sc: Scanner, defaults: Defaults) -> Securable | Bulk:
    """What follows GRANT's or REVOKE's ON: one object, or ALL | FUTURE objects in a container."""
    m = sc.take(r"(?P<when>ALL|FUTURE)\b")
    if m is None:
        return _securable(sc, defaults)
    when = m.group("when").upper()
    plural = sc.word(
        r"TABLES\b|STAGES\b|FILE\s+FORMATS\b|PIPES\b|FUNCTIONS\b",
        f"TABLES, STAGES, FILE FORMATS, PIPES or FUNCTIONS after ON {when}",
    )
    container_kind, container = _container(sc, defaults)
    kind = "FILE_FORMAT" if plural.startswith("FILE") else plural[:-1]
    return Bulk(when == "FUTURE", kind, container_kind, container)


def _role_grant(sc: Scanner, verb: str) -> tuple[str, Literal["ROLE", "USER"], str]:
    """GRANT ROLE's or REVOKE ROLE's role, grantee kind and grantee, after the ROLE keyword."""
    sc.what = f"{verb} ROLE"
    role = sc.ident("role")
    to = "TO" if verb == "GRANT" else "FROM"
    grantee_kind = sc.word(rf"{to}\s+(?:ROLE|USER)\b", f"{to} ROLE <role> or {to} USER <user>")
    kind: Literal["ROLE", "USER"] = "ROLE" if grantee_kind.endswith("ROLE") else "USER"
    grantee = sc.ident(kind.lower())
    sc.end()
    return role, kind, grantee


def _grant(sc: Scanner, defaults: Defaults) -> GrantRole | GrantPrivileges:
    sc.what = "GRANT"
    if sc.take(r"ROLE\b"):
        return GrantRole(*_role_grant(sc, "GRANT"))
    words = _privilege_words(sc)
    sc.expect(r"ON\b", "ON <object>")
    on = _target(sc, defaults)
    privileges = _checked(words, on.kind, "GRANT")
    sc.expect(r"TO\s+ROLE\b", "TO ROLE <role> (Floe grants privileges to roles only)")
    role = sc.ident("role")
    current: Literal["COPY", "REVOKE"] | None = None
    if m := sc.take(r"(?P<how>COPY|REVOKE)\s+CURRENT\s+GRANTS\b"):
        current = "COPY" if m.group("how").upper() == "COPY" else "REVOKE"
        if privileges != ["OWNERSHIP"]:
            raise CompilationError(
                f"{current} CURRENT GRANTS goes with GRANT OWNERSHIP only; leave it out of "
                f"GRANT {', '.join(privileges)}"
            )
    if sc.take(r"WITH\s+GRANT\s+OPTION\b"):
        # Floe keeps who may grant simple: the owner, MANAGE GRANTS, or ACCOUNTADMIN (docs/decisions.md).
        raise CompilationError(
            "WITH GRANT OPTION is not supported: an object's owner and roles with MANAGE GRANTS grant "
            "privileges on it; leave WITH GRANT OPTION out"
        )
    sc.end()
    return GrantPrivileges(privileges, on, role, current, all_privileges="ALL" in words)


def _revoke(sc: Scanner, defaults: Defaults) -> RevokeRole | RevokePrivileges:
    sc.what = "REVOKE"
    if sc.take(r"ROLE\b"):
        return RevokeRole(*_role_grant(sc, "REVOKE"))
    if sc.take(r"GRANT\s+OPTION\s+FOR\b"):
        raise CompilationError(
            "grant options are not supported; REVOKE <privileges> ON <object> FROM ROLE <role> "
            "revokes the privileges themselves"
        )
    words = _privilege_words(sc)
    sc.expect(r"ON\b", "ON <object>")
    on = _target(sc, defaults)
    privileges = _checked(words, on.kind, "REVOKE")
    sc.expect(r"FROM\s+ROLE\b", "FROM ROLE <role>")
    role = sc.ident("role")
    # Snowflake's RESTRICT | CASCADE concern grant options passed on, which Floe does not have.
    sc.take(r"RESTRICT\b|CASCADE\b")
    sc.end()
    return RevokePrivileges(privileges, on, role, all_privileges="ALL" in words)


def _show_grants(sc: Scanner, defaults: Defaults) -> AccessStatement:
    sc.what = "SHOW GRANTS"
    target = sc.word(
        r"TO\s+ROLE\b|TO\s+USER\b|OF\s+ROLE\b|ON\b",
        "TO ROLE <role>, TO USER <user>, OF ROLE <role> or ON <object>",
    )
    if target == "OF ROLE":
        return ShowGrantsOf(sc.ident("role"))
    if target == "TO ROLE":
        return ShowGrantsToRole(sc.ident("role"))
    if target == "TO USER":
        return ShowGrantsToUser(sc.ident("user"))
    return ShowGrantsOn(_securable(sc, defaults))


def _show(sc: Scanner, defaults: Defaults) -> AccessStatement:
    sc.what = "SHOW"
    what = sc.word(r"USERS\b|ROLES\b|FUTURE\s+GRANTS\b|GRANTS\b", "USERS, ROLES or GRANTS")
    stmt: AccessStatement
    if what == "USERS":
        stmt = ShowUsers(sc.like())
    elif what == "ROLES":
        stmt = ShowRoles(sc.like())
    elif what == "FUTURE GRANTS":
        sc.what = "SHOW FUTURE GRANTS"
        stmt = ShowFutureGrants(*_container(sc, defaults))
    else:
        stmt = _show_grants(sc, defaults)
    sc.end()
    return stmt


def _use(sc: Scanner) -> UseRole | UseSecondaryRoles:
    sc.what = "USE"
    if sc.take(r"SECONDARY\s+ROLES\b"):
        sc.what = "USE SECONDARY ROLES"
        which = sc.word(r"ALL\b|NONE\b", "ALL or NONE (Floe does not take a list of secondary roles)")
        sc.end()
        return UseSecondaryRoles(which == "ALL")
    sc.expect(r"ROLE\b", "ROLE <role> or SECONDARY ROLES ALL | NONE")
    sc.what = "USE ROLE"
    role = sc.ident("role")
    sc.end()
    return UseRole(role)


def parse(sql: str, defaults: Defaults) -> AccessStatement | None:
    """The statement if it is an access-control one; None for any other statement."""
    text = sql.strip().rstrip(";").strip()
    if not _HEAD.match(text):
        return None
    sc = Scanner(text)
    verb = sc.word(
        r"CREATE\b|ALTER\s+USER\b|DROP\b|GRANT\b|REVOKE\b|SHOW\b|USE\b|DESC(?:RIBE)?\b", "a statement"
    )
    if verb == "CREATE":
        return _create(sc)
    if verb == "ALTER USER":
        return _alter_user(sc)
    if verb == "DROP":
        return _drop(sc)
    if verb == "GRANT":
        return _grant(sc, defaults)
    if verb == "REVOKE":
        return _revoke(sc, defaults)
    if verb == "SHOW":
        return _show(sc, defaults)
    if verb == "USE":
        return _use(sc)
    sc.expect(r"USER\b", "USER")
    sc.what = "DESC USER"
    name = sc.ident("user")
    sc.end()
    return DescribeUser(name)
