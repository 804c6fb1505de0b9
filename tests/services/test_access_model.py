"""Property test of the privilege model (issue 12): Hypothesis runs random sequences of GRANT and
REVOKE (of privileges, future grants and roles), GRANT OWNERSHIP, CREATE and DROP TABLE, CREATE and
DROP ROLE and ALTER USER ... DEFAULT_ROLE through the SQL executor (as ACCOUNTADMIN, and CREATE TABLE
also as a user), against the real Redis. After each statement its outcome, and every user's answer
from ``services.access`` on every privilege of every object of a small universe, must be those of
``Model``, a reference model of the rules written apart from ``services.access``; at the end, so
must the grants SHOW GRANTS and SHOW FUTURE GRANTS list.

The rules the model states (Snowflake's, as Floe documents them in docs/architecture.md):
- a role holds what is granted to it, what it owns (every privilege), and what the roles granted to
  it hold; PUBLIC is under every role; the system roles form Snowflake's hierarchy; a role that
  reaches ACCOUNTADMIN holds everything;
- an object in a schema needs USAGE (or ownership) on its database and its schema;
- an object the roles hold nothing on is "not found", one they hold something else on is "denied";
- granting twice is granting once; REVOKE removes; a role grant that would close a cycle (PUBLIC
  included, as it is under every role) is refused; GRANT OWNERSHIP moves the owner, and with REVOKE
  CURRENT GRANTS drops every grant on the object; DROP TABLE drops its grants;
- future grants reach tables created afterwards only, and a schema's future grants for tables,
  when there are any, replace its database's;
- a stage takes its kind's privileges only (USAGE an external stage, READ and WRITE an internal one;
  ALL means those): another is refused, and WRITE is granted only with or after READ, READ revoked
  only with or after WRITE (decision 84);
- a user's active roles are its DEFAULT_ROLE (when granted to it directly) and, with secondary roles
  ALL, every role granted to it; with NONE, only its current role, which without a usable default
  role is the role that owns what it creates (``Principal.owner_role``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench.harness import unique
from floe.catalog import ADMIN_ROLE, PRIVILEGES, User
from floe.errors import ObjectNotFound, PermissionDenied, SqlError
from floe.settings import Settings
from services.access import Need, active_roles, allowed, authorize
from services.auth import Principal
from services.sql import SqlExecutor
from tests.conftest import TEST_INTEGRATION, reference_model_examples

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))

Obj = tuple[str, str]
"""(kind, fully qualified name)."""

CUSTOM = ("R1", "R2", "R3")
GRANTEES = (*CUSTOM, "SYSADMIN", "PUBLIC")
"""Roles that privileges, ownership, future grants and role grants go to."""
USERS = {"U1": "R1", "U2": "R2"}
"""Each user and its DEFAULT_ROLE, granted to it at the start."""

DATABASE: Obj = ("DATABASE", "FLOE")
SCHEMAS: tuple[Obj, ...] = (("SCHEMA", "FLOE.PUBLIC"), ("SCHEMA", "FLOE.EXTRA"))
TABLES: tuple[Obj, ...] = (("TABLE", "FLOE.PUBLIC.T1"), ("TABLE", "FLOE.EXTRA.T2"))
NEW_TABLES: tuple[Obj, ...] = (("TABLE", "FLOE.PUBLIC.N1"), ("TABLE", "FLOE.EXTRA.N2"))
"""Tables CREATE TABLE may make (before that, a grant on them is refused)."""
STAGE: Obj = ("STAGE", "FLOE.PUBLIC.ST")
"""An external stage: USAGE governs it."""
INTERNAL_STAGE: Obj = ("STAGE", "FLOE.PUBLIC.IST")
"""An internal stage: READ and WRITE govern it."""
PIPE: Obj = ("PIPE", "FLOE.PUBLIC.P")
INTEGRATION: Obj = ("INTEGRATION", "FLOE_TESTS")
CHECKED: tuple[Obj, ...] = (
    DATABASE,
    *SCHEMAS,
    *TABLES,
    *NEW_TABLES,
    STAGE,
    INTERNAL_STAGE,
    PIPE,
    INTEGRATION,
)
"""Every object whose every privilege is checked for every user after a sequence."""
CONTAINERS: tuple[Obj, ...] = (*SCHEMAS, DATABASE)

SETUP = (
    "CREATE SCHEMA floe.extra",
    "CREATE ROLE r1",
    "CREATE ROLE r2",
    "CREATE ROLE r3",
    "CREATE USER u1 DEFAULT_ROLE = r1",
    "CREATE USER u2 DEFAULT_ROLE = r2",
    "GRANT ROLE r1 TO USER u1",
    "GRANT ROLE r2 TO USER u2",
    "GRANT USAGE ON DATABASE floe TO ROLE r1",
    "GRANT USAGE ON SCHEMA floe.public TO ROLE r1",
    "CREATE TABLE floe.public.t1 (a INT)",
    "CREATE TABLE floe.extra.t2 (a INT)",
    "CREATE STAGE floe.public.st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests",
    "CREATE STAGE floe.public.ist",
    "CREATE PIPE floe.public.p AUTO_INGEST = FALSE AS COPY INTO floe.public.t1 FROM @floe.public.st",
)
"""The world every sequence starts from, made by ACCOUNTADMIN, with the `ex` fixture's integration
(R1 may use FLOE.PUBLIC from the start, so shorter sequences reach the objects in it)."""

OK, NOT_FOUND, DENIED, EXISTS, CYCLE = "ok", "not found", "denied", "exists", "cycle"
"""What a statement or a check comes to."""
WRONG_KIND, ORDER = "wrong kind", "order"
"""A stage privilege of the other kind of stage; READ and WRITE out of order (decision 84)."""


# ------------------------------------------------------------------------------ the operations


def _privs(privileges: tuple[str, ...]) -> str:
    return ", ".join(privileges)


def _current(option: str) -> str:
    return f" {option} CURRENT GRANTS" if option else ""


@dataclass(frozen=True)
class GrantOn:
    """GRANT | REVOKE privileges ON one object TO | FROM ROLE."""

    grant: bool
    privileges: tuple[str, ...]
    obj: Obj
    role: str

    def __str__(self) -> str:
        on = f"{_privs(self.privileges)} ON {self.obj[0]} {self.obj[1]}"
        return f"GRANT {on} TO ROLE {self.role}" if self.grant else f"REVOKE {on} FROM ROLE {self.role}"


@dataclass(frozen=True)
class GrantBulk:
    """GRANT | REVOKE privileges ON ALL | FUTURE TABLES IN SCHEMA | DATABASE TO | FROM ROLE."""

    grant: bool
    future: bool
    privileges: tuple[str, ...]
    container: Obj
    role: str

    def __str__(self) -> str:
        when = "FUTURE" if self.future else "ALL"
        on = f"{_privs(self.privileges)} ON {when} TABLES IN {self.container[0]} {self.container[1]}"
        return f"GRANT {on} TO ROLE {self.role}" if self.grant else f"REVOKE {on} FROM ROLE {self.role}"


@dataclass(frozen=True)
class Transfer:
    """GRANT OWNERSHIP ON one object, or ON ALL TABLES IN a container, TO ROLE [COPY | REVOKE ...]."""

    obj: Obj
    role: str
    option: str
    every: bool = False

    def __str__(self) -> str:
        on = f"ALL TABLES IN {self.obj[0]} {self.obj[1]}" if self.every else f"{self.obj[0]} {self.obj[1]}"
        return f"GRANT OWNERSHIP ON {on} TO ROLE {self.role}{_current(self.option)}"


@dataclass(frozen=True)
class RoleToRole:
    """GRANT ROLE role TO ROLE grantee | REVOKE ROLE role FROM ROLE grantee."""

    grant: bool
    role: str
    grantee: str

    def __str__(self) -> str:
        if self.grant:
            return f"GRANT ROLE {self.role} TO ROLE {self.grantee}"
        return f"REVOKE ROLE {self.role} FROM ROLE {self.grantee}"


@dataclass(frozen=True)
class RoleToUser:
    """GRANT ROLE role TO USER user | REVOKE ROLE role FROM USER user."""

    grant: bool
    role: str
    user: str

    def __str__(self) -> str:
        if self.grant:
            return f"GRANT ROLE {self.role} TO USER {self.user}"
        return f"REVOKE ROLE {self.role} FROM USER {self.user}"


@dataclass(frozen=True)
class CreateTable:
    """CREATE TABLE, by ACCOUNTADMIN (user None) or by a user as it signs in."""

    name: str
    user: str | None

    @property
    def sql(self) -> str:
        return f"CREATE TABLE {self.name} (a INT)"

    def __str__(self) -> str:
        return f"[as {self.user}] {self.sql}" if self.user else self.sql


@dataclass(frozen=True)
class DropTable:
    """DROP TABLE, by ACCOUNTADMIN."""

    name: str

    def __str__(self) -> str:
        return f"DROP TABLE {self.name}"


@dataclass(frozen=True)
class DefaultRole:
    """ALTER USER user SET DEFAULT_ROLE = role."""

    user: str
    role: str

    def __str__(self) -> str:
        return f"ALTER USER {self.user} SET DEFAULT_ROLE = {self.role}"


@dataclass(frozen=True)
class CreateRole:
    """CREATE ROLE (again, after a DROP ROLE)."""

    role: str

    def __str__(self) -> str:
        return f"CREATE ROLE {self.role}"


@dataclass(frozen=True)
class DropRole:
    """DROP ROLE."""

    role: str

    def __str__(self) -> str:
        return f"DROP ROLE {self.role}"


Op = (
    GrantOn
    | GrantBulk
    | Transfer
    | RoleToRole
    | RoleToUser
    | CreateTable
    | DropTable
    | DefaultRole
    | CreateRole
    | DropRole
)


# --------------------------------------------------------------------------- the reference model

SYSTEM_ROLES = ("ACCOUNTADMIN", "SECURITYADMIN", "USERADMIN", "SYSADMIN", "PUBLIC")
"""Roles that always exist."""
SYSTEM_BELOW = {"ACCOUNTADMIN": ("SECURITYADMIN", "SYSADMIN"), "SECURITYADMIN": ("USERADMIN",)}
"""Snowflake's system role hierarchy: role -> the system roles granted to it."""


def privileges_of(kind: str) -> tuple[str, ...]:
    """Every privilege an object of ``kind`` takes, OWNERSHIP included."""
    return ("OWNERSHIP", *PRIVILEGES[kind])


def expand(kind: str, privileges: tuple[str, ...]) -> set[str]:
    """ALL stands for every privilege of the kind (OWNERSHIP is transferred, never granted)."""
    return set(PRIVILEGES[kind]) if privileges == ("ALL",) else set(privileges)


def stage_takes(obj: Obj) -> set[str]:
    """The privileges a stage's kind takes: READ and WRITE the internal one, USAGE the external."""
    return {"READ", "WRITE"} if obj == INTERNAL_STAGE else {"USAGE"}


def containers(obj: Obj) -> list[Obj]:
    """The database and schema an object lives in."""
    parts = obj[1].split(".")
    if obj[0] == "SCHEMA":
        return [("DATABASE", parts[0])]
    if obj[0] in ("TABLE", "STAGE", "PIPE"):
        return [("DATABASE", parts[0]), ("SCHEMA", f"{parts[0]}.{parts[1]}")]
    return []


def inside(obj: Obj, container: Obj) -> bool:
    return obj[1].startswith(container[1] + ".")


@dataclass
class Model:
    """The catalog's privilege state as sets, and the rules as plain set arithmetic."""

    owner: dict[Obj, str]
    """Every existing object, with its owner role."""
    grants: set[tuple[str, str, Obj]] = field(default_factory=set)
    """(role, privilege, object)."""
    future: set[tuple[str, str, Obj]] = field(default_factory=set)
    """(role, privilege, container): what every table created in the container later gets."""
    edges: set[tuple[str, str]] = field(default_factory=set)
    """(holder, granted): GRANT ROLE granted TO ROLE holder."""
    roles: set[str] = field(default_factory=lambda: set(CUSTOM))
    """The custom roles that exist."""
    user_roles: dict[str, set[str]] = field(default_factory=dict)
    default_role: dict[str, str] = field(default_factory=dict)

    @classmethod
    def initial(cls) -> Model:
        """The state after SETUP: SYSADMIN owns the default database and schema, ACCOUNTADMIN the rest."""
        owner = dict.fromkeys((*SCHEMAS[1:], *TABLES, STAGE, INTERNAL_STAGE, PIPE, INTEGRATION), ADMIN_ROLE)
        owner |= {DATABASE: "SYSADMIN", SCHEMAS[0]: "SYSADMIN"}
        return cls(
            owner=owner,
            grants={("R1", "USAGE", DATABASE), ("R1", "USAGE", SCHEMAS[0])},
            user_roles={u: {r} for u, r in USERS.items()},
            default_role=dict(USERS),
        )

    # -- who holds what

    def below(self, roles: set[str]) -> set[str]:
        """``roles``, every role granted to them (transitively), and PUBLIC."""
        seen: set[str] = set()
        stack = [*roles, "PUBLIC"]
        while stack:
            role = stack.pop()
            if role not in seen:
                seen.add(role)
                stack += SYSTEM_BELOW.get(role, ())
                stack += [granted for holder, granted in self.edges if holder == role]
        return seen

    def primary(self, user: str) -> str | None:
        """The user's current role: its DEFAULT_ROLE when that is granted to it directly (or PUBLIC)."""
        role = self.default_role.get(user)
        return role if role in self.user_roles[user] | {"PUBLIC"} else None

    def active(self, user: str, secondary: bool) -> set[str]:
        """The roles whose privileges the user holds: its current role, and with secondary roles ALL
        every role granted to it. (With NONE and no DEFAULT_ROLE, the current role is the owner role.)"""
        if not secondary:
            return self.below({self.owner_role(user)})
        primary = self.primary(user)
        return self.below(self.user_roles[user] | ({primary} if primary else set()))

    def owner_role(self, user: str) -> str:
        """Who owns what the user creates: its current role, else ACCOUNTADMIN when granted directly,
        else its first granted role by name other than PUBLIC, else PUBLIC."""
        primary = self.primary(user)
        if primary is not None:
            return primary
        roles = self.user_roles[user]
        if ADMIN_ROLE in roles:
            return ADMIN_ROLE
        return min(roles - {"PUBLIC"}, default="PUBLIC")

    def holds(self, roles: set[str], obj: Obj, privilege: str) -> bool:
        if obj not in self.owner:
            return False
        if ADMIN_ROLE in roles or self.owner[obj] in roles:
            return True
        return any((role, privilege, obj) in self.grants for role in roles)

    def verdict(self, roles: set[str], obj: Obj, privilege: str) -> str:
        for container in containers(obj):
            if not (self.holds(roles, container, "USAGE") or self.holds(roles, container, "OWNERSHIP")):
                return NOT_FOUND
        if self.holds(roles, obj, privilege):
            return OK
        if any(self.holds(roles, obj, p) for p in privileges_of(obj[0])):
            return DENIED
        return NOT_FOUND

    # -- what each statement does (ACCOUNTADMIN may do all of it; only a user's CREATE TABLE is checked)

    def apply(self, op: Op) -> str:
        """Run ``op`` on the model; what it comes to. A statement naming a role that does not exist
        is refused whatever else it does."""
        named = [] if isinstance(op, CreateTable | DropTable | CreateRole) else [op.role]
        named += [op.grantee] if isinstance(op, RoleToRole) else []
        if any(r not in SYSTEM_ROLES and r not in self.roles for r in named):
            return NOT_FOUND
        match op:
            case GrantOn():
                return self._grant_on(op)
            case GrantBulk():
                return self._grant_bulk(op)
            case Transfer():
                return self._transfer(op)
            case RoleToRole():
                return self._role_to_role(op)
            case RoleToUser():
                if op.grant:
                    self.user_roles[op.user].add(op.role)
                else:
                    self.user_roles[op.user].discard(op.role)
                return OK
            case CreateTable():
                return self._create_table(op)
            case DropTable():
                return self._drop_table(("TABLE", op.name))
            case DefaultRole():
                self.default_role[op.user] = op.role
                return OK
            case CreateRole():
                if op.role in self.roles:
                    return EXISTS
                self.roles.add(op.role)
                return OK
            case DropRole():
                self._drop_role(op.role)
                return OK
        raise AssertionError(op)

    def _drop_role(self, role: str) -> None:
        """The role goes from every user and role; what it owned passes to ACCOUNTADMIN."""
        self.roles.discard(role)
        self.grants = {g for g in self.grants if g[0] != role}
        self.future = {f for f in self.future if f[0] != role}
        self.edges = {e for e in self.edges if role not in e}
        for roles in self.user_roles.values():
            roles.discard(role)
        self.owner = {obj: ADMIN_ROLE if owner == role else owner for obj, owner in self.owner.items()}

    def _grant_on(self, op: GrantOn) -> str:
        if op.obj not in self.owner:
            return NOT_FOUND
        privileges = expand(op.obj[0], op.privileges)
        if op.obj[0] == "STAGE":
            held = {p for r, p, o in self.grants if r == op.role and o == op.obj}
            verdict = self._stage_rules(op, privileges, held)
            if verdict != OK:
                return verdict
            if op.privileges == ("ALL",):
                privileges = stage_takes(op.obj) if op.grant else set(PRIVILEGES["STAGE"])
        rows = {(op.role, p, op.obj) for p in privileges}
        self.grants = self.grants | rows if op.grant else self.grants - rows
        return OK

    @staticmethod
    def _stage_rules(op: GrantOn, privileges: set[str], held: set[str]) -> str:
        """A stage's privileges: its kind's only (a revoke may take back what is held), WRITE with
        or after READ, READ revoked with or after WRITE."""
        if op.privileges == ("ALL",):
            return OK
        takes = stage_takes(op.obj)
        if privileges - takes - (set() if op.grant else held):
            return WRONG_KIND
        if op.grant and "WRITE" in privileges and not {"READ"} & (privileges | held):
            return ORDER
        if not op.grant and "READ" in privileges and "WRITE" not in privileges and "WRITE" in held:
            return ORDER
        return OK

    def _grant_bulk(self, op: GrantBulk) -> str:
        privileges = expand("TABLE", op.privileges)
        if op.future:
            rows = {(op.role, p, op.container) for p in privileges}
            self.future = self.future | rows if op.grant else self.future - rows
            return OK
        tables = [obj for obj in self.owner if obj[0] == "TABLE" and inside(obj, op.container)]
        rows = {(op.role, p, t) for t in tables for p in privileges}
        self.grants = self.grants | rows if op.grant else self.grants - rows
        return OK

    def _transfer(self, op: Transfer) -> str:
        if op.obj not in self.owner:
            return NOT_FOUND
        objects = [o for o in self.owner if o[0] == "TABLE" and inside(o, op.obj)] if op.every else [op.obj]
        for obj in objects:
            self.owner[obj] = op.role
            if op.option == "REVOKE":
                self.grants = {g for g in self.grants if g[2] != obj}
        return OK

    def _role_to_role(self, op: RoleToRole) -> str:
        if not op.grant:
            self.edges.discard((op.grantee, op.role))
            return OK
        if op.grantee in self.below({op.role}):
            return CYCLE
        self.edges.add((op.grantee, op.role))
        return OK

    def _create_table(self, op: CreateTable) -> str:
        obj: Obj = ("TABLE", op.name)
        schema = containers(obj)[1]
        if op.user is not None:
            roles = self.active(op.user, secondary=True)
            for privilege in ("USAGE", "CREATE TABLE"):
                verdict = self.verdict(roles, schema, privilege)
                if verdict != OK:
                    return verdict
        if obj in self.owner:
            return EXISTS
        self.owner[obj] = ADMIN_ROLE if op.user is None else self.owner_role(op.user)
        # The schema's future grants for tables, when it has any, replace the database's.
        future = {(r, p) for r, p, c in self.future if c == schema}
        future = future or {(r, p) for r, p, c in self.future if c == containers(obj)[0]}
        self.grants |= {(r, p, obj) for r, p in future}
        return OK

    def _drop_table(self, obj: Obj) -> str:
        if obj not in self.owner:
            return NOT_FOUND
        del self.owner[obj]
        self.grants = {g for g in self.grants if g[2] != obj}
        return OK


# ------------------------------------------------------------------------------ the strategies
#
# Swarm testing: each sequence first draws a focus (some kinds of statement, some tables, some
# roles), then only statements within it. Uniform choices over the whole universe almost never line
# up the three or four statements a rule needs (a grant on a table, DROP TABLE and CREATE TABLE of
# the same name; future grants on a schema and on its database, then a table in that schema).


def privilege_lists(kind: str) -> st.SearchStrategy[tuple[str, ...]]:
    """One or two of the kind's privileges, or (a third as often) ALL; and where the kind takes USAGE,
    USAGE alone as often as ALL (containers are the gate to everything else). ALL hides what a
    privilege that should not be there adds, so it is not the most common."""
    some = st.lists(st.sampled_from(PRIVILEGES[kind]), min_size=1, max_size=2, unique=True).map(tuple)
    usage = [st.just(("USAGE",))] if "USAGE" in PRIVILEGES[kind] else []
    return st.one_of(some, some, some, st.just(("ALL",)), *usage)


GRANTING = st.sampled_from((True, True, False))
"""Grants twice as often as revokes: a revoke of nothing teaches little."""
OPTIONS = st.sampled_from(("", "COPY", "REVOKE"))
USER_NAMES = st.sampled_from(sorted(USERS))
KINDS = (
    "grant",
    "grant on a container",
    "future grant",
    "grant on all tables",
    "ownership",
    "ownership of all tables",
    "role to role",
    "role to user",
    "create or drop table",
    "default role",
    "create or drop role",
)
"""The kinds of statement a focus picks from."""


def statements(kinds: list[str], tables: list[Obj], roles: list[str]) -> st.SearchStrategy[Op]:
    """One statement of one of ``kinds``, on ``tables``, their schemas and database (or an object that
    is not a table), naming ``roles`` (and, as the role granted, sometimes a system role)."""
    role = st.sampled_from(roles)
    around = st.sampled_from(sorted({c for t in tables for c in containers(t)}))
    owner = st.sampled_from([*roles, ADMIN_ROLE])
    # ACCOUNTADMIN holds everything: a user who gets it shows nothing more, so it comes up least.
    granted = st.sampled_from([*roles, *roles, *roles, "SYSADMIN", "PUBLIC", ADMIN_ROLE])
    names = st.sampled_from([name for _, name in tables])
    objects = st.sampled_from(
        (*tables, *tables, *tables, DATABASE, *SCHEMAS, STAGE, INTERNAL_STAGE, PIPE, INTEGRATION)
    )

    def grant_on(obj: Obj) -> st.SearchStrategy[Op]:
        return st.builds(
            GrantOn, grant=GRANTING, privileges=privilege_lists(obj[0]), obj=st.just(obj), role=role
        )

    made: dict[str, st.SearchStrategy[Op]] = {
        "grant": objects.flatmap(grant_on),
        "grant on a container": around.flatmap(grant_on),
        "future grant": st.builds(
            GrantBulk,
            grant=GRANTING,
            future=st.just(True),
            privileges=privilege_lists("TABLE"),
            container=around,
            role=role,
        ),
        "grant on all tables": st.builds(
            GrantBulk,
            grant=GRANTING,
            future=st.just(False),
            privileges=privilege_lists("TABLE"),
            container=around,
            role=role,
        ),
        "ownership": st.builds(Transfer, obj=objects, role=owner, option=OPTIONS),
        "ownership of all tables": st.builds(
            Transfer, obj=around, role=owner, option=OPTIONS, every=st.just(True)
        ),
        "role to role": st.builds(RoleToRole, grant=GRANTING, role=granted, grantee=role),
        "role to user": st.builds(RoleToUser, grant=GRANTING, role=granted, user=USER_NAMES),
        "create or drop table": st.builds(
            CreateTable, name=names, user=st.sampled_from((None, *sorted(USERS)))
        )
        | st.builds(DropTable, name=names),
        "default role": st.builds(DefaultRole, user=USER_NAMES, role=granted),
        "create or drop role": st.builds(CreateRole, role=st.sampled_from(CUSTOM))
        | st.builds(DropRole, role=st.sampled_from(CUSTOM)),
    }
    # Privilege grants twice as often as the rest: most of what the checks see comes from them.
    return st.one_of([made[kind] for kind in kinds for _ in range(2 if "grant" in kind else 1)])


@st.composite
def sequences(draw: st.DrawFn) -> list[Op]:
    """1 to 25 statements within a focus drawn first: each kind of statement in or out at the toss of
    a coin, one or two tables, a few roles."""
    length = draw(st.integers(1, 25))
    kinds = [kind for kind in KINDS if draw(st.booleans())] or list(KINDS)
    tables = draw(st.lists(st.sampled_from((*TABLES, *NEW_TABLES)), min_size=1, max_size=2, unique=True))
    roles = draw(st.lists(st.sampled_from(GRANTEES), min_size=1, max_size=3, unique=True))
    statement = statements(kinds, tables, roles)
    return [draw(statement) for _ in range(length)]


# ------------------------------------------------------------------------------ the harness


@contextmanager
def fresh_executor(base: Settings, client: redis.Redis[bytes]) -> Iterator[SqlExecutor]:
    """An executor on a new key prefix (one per Hypothesis example) in SETUP's world; its keys are
    removed afterwards."""
    prefix = unique("t")
    try:
        ex = SqlExecutor(
            base.model_copy(update={"redis": base.redis.model_copy(update={"prefix": prefix})}), client
        )
        for sql in (TEST_INTEGRATION, *SETUP):
            ex.execute(sql, ADMIN)
        yield ex
    finally:
        stale = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if stale:
            client.delete(*stale)


def outcome(ex: SqlExecutor, op: Op) -> str:
    """Run ``op`` through the executor; what it came to."""
    principal, sql = ADMIN, str(op)
    if isinstance(op, CreateTable):
        sql = op.sql
        if op.user is not None:
            principal = Principal.of(ex.catalog.get(User, op.user))
    try:
        ex.execute(sql, principal)
    except ObjectNotFound:
        return NOT_FOUND
    except PermissionDenied:
        return DENIED
    except SqlError as exc:
        if exc.code == "002002":
            return EXISTS
        if "cycle" in exc.message:
            return CYCLE
        if exc.code == "003511":
            return ORDER
        if "invalid privilege" in exc.message and " stage '" in exc.message:
            return WRONG_KIND
        return f"error {exc.code}: {exc.message}"
    return OK


def floe_verdict(ex: SqlExecutor, principal: Principal, need: Need, *, with_allowed: bool) -> str:
    """What ``authorize`` says (and, when asked, that ``allowed`` says the same)."""
    try:
        authorize(ex.catalog, principal, need)
        verdict = OK
    except ObjectNotFound:
        verdict = NOT_FOUND
    except PermissionDenied:
        verdict = DENIED
    if with_allowed:
        assert allowed(ex.catalog, principal, need) == (verdict == OK), need
    return verdict


def differences(ex: SqlExecutor, model: Model, *, with_allowed: bool = False) -> list[str]:
    """Every (user, secondary roles, privilege, object) where Floe and the model disagree."""
    out: list[str] = []
    with ex.catalog.pinned():
        for user in sorted(USERS):
            signed_in = Principal.of(ex.catalog.get(User, user))
            for secondary in (True, False):
                principal = signed_in if secondary else signed_in.acting_as(None, secondary=False)
                mode = f"{user} (secondary roles {'ALL' if secondary else 'NONE'})"
                roles = model.active(user, secondary)
                floe_roles = set(active_roles(ex.catalog, principal))
                if floe_roles != roles:
                    out.append(f"{mode}: active roles: Floe {sorted(floe_roles)}, model {sorted(roles)}")
                for obj in CHECKED:
                    for privilege in privileges_of(obj[0]):
                        need = Need(obj[0], obj[1], (privilege,))
                        floe = floe_verdict(ex, principal, need, with_allowed=with_allowed)
                        want = model.verdict(roles, obj, privilege)
                        if floe != want:
                            out.append(
                                f"{mode}: {privilege} on {obj[0]} {obj[1]}: Floe {floe!r}, model {want!r}"
                            )
    return out


def listings(ex: SqlExecutor, model: Model) -> list[str]:
    """Where SHOW GRANTS ON each object, or SHOW FUTURE GRANTS IN each container, lists other
    (privilege, role) pairs than the model holds: what grants exist, whether or not a user sees it."""
    out: list[str] = []
    for obj in CHECKED:
        if obj in model.owner:
            rows = ex.execute(f"SHOW GRANTS ON {obj[0]} {obj[1]}", ADMIN).records()
            floe = {(str(r["privilege"]), str(r["grantee_name"])) for r in rows}
            want = {("OWNERSHIP", model.owner[obj])} | {(p, r) for r, p, o in model.grants if o == obj}
            if floe != want:
                out.append(f"SHOW GRANTS ON {obj[0]} {obj[1]}: Floe {sorted(floe)}, model {sorted(want)}")
    for container in CONTAINERS:
        rows = ex.execute(f"SHOW FUTURE GRANTS IN {container[0]} {container[1]}", ADMIN).records()
        floe = {(str(r["privilege"]), str(r["grantee_name"])) for r in rows if r["grant_on"] == "TABLE"}
        want = {(p, r) for r, p, c in model.future if c == container}
        if floe != want:
            where = f"{container[0]} {container[1]}"
            out.append(f"SHOW FUTURE GRANTS IN {where}: Floe {sorted(floe)}, model {sorted(want)}")
    return out


def story(lines: list[str]) -> str:
    return "\n".join(f"  {i}. {line}" for i, line in enumerate(lines, 1)) or "  (no statements)"


# Sequences every run tries first: rules that take several statements to line up, which random
# sequences meet only now and then.
SCHEMA_FUTURE_WINS: list[Op] = [
    # A schema's future grants for tables replace its database's: R1 (so U1) gets nothing on N1.
    GrantBulk(True, True, ("SELECT",), SCHEMAS[0], "R2"),
    GrantBulk(True, True, ("INSERT",), DATABASE, "R1"),
    CreateTable(NEW_TABLES[0][1], None),
]
DROP_TAKES_GRANTS: list[Op] = [
    # A new table of a dropped one's name starts without the old one's grants.
    GrantOn(True, ("SELECT",), TABLES[0], "R1"),
    DropTable(TABLES[0][1]),
    CreateTable(TABLES[0][1], None),
]
CURRENT_GRANTS: list[Op] = [
    # GRANT OWNERSHIP ... COPY CURRENT GRANTS keeps the other grants; REVOKE CURRENT GRANTS drops them.
    GrantOn(True, ("SELECT",), TABLES[0], "PUBLIC"),
    Transfer(TABLES[0], "R3", "COPY"),
    GrantOn(True, ("INSERT",), TABLES[0], "R2"),
    Transfer(TABLES[0], "R3", "REVOKE"),
]
STAGE_KINDS: list[Op] = [
    # Each kind of stage takes its own privileges; READ comes before WRITE and goes after it.
    GrantOn(True, ("READ",), STAGE, "R1"),
    GrantOn(True, ("USAGE",), INTERNAL_STAGE, "R1"),
    GrantOn(True, ("WRITE",), INTERNAL_STAGE, "R1"),
    GrantOn(True, ("ALL",), INTERNAL_STAGE, "R1"),
    GrantOn(False, ("READ",), INTERNAL_STAGE, "R1"),
    GrantOn(True, ("ALL",), STAGE, "R2"),
    GrantOn(False, ("WRITE", "READ"), INTERNAL_STAGE, "R1"),
    GrantOn(True, ("READ",), INTERNAL_STAGE, "R2"),
    GrantOn(True, ("WRITE",), INTERNAL_STAGE, "R2"),
]
CYCLES: list[Op] = [
    # Cycles are refused, through PUBLIC (under every role) too.
    RoleToRole(True, "R1", "R2"),
    RoleToRole(True, "R2", "R1"),
    RoleToRole(True, "R3", "PUBLIC"),
]


@settings(
    max_examples=reference_model_examples(dev=60, ci=200),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@example(ops=SCHEMA_FUTURE_WINS)
@example(ops=DROP_TAKES_GRANTS)
@example(ops=CURRENT_GRANTS)
@example(ops=CYCLES)
@example(ops=STAGE_KINDS)
@given(ops=sequences())
def test_random_grant_sequences_match_the_reference_model(
    isolated_settings: Settings, redis_client: redis.Redis[bytes], ops: list[Op]
) -> None:
    """After every statement, its outcome and every user's answer on every privilege of every
    object are the model's (a difference can be masked by a later statement, so not only at the
    end); at the end, so are the grants SHOW GRANTS and SHOW FUTURE GRANTS list."""
    with fresh_executor(isolated_settings, redis_client) as ex:
        model = Model.initial()
        wrong = differences(ex, model, with_allowed=True)
        assert not wrong, "the starting world differs:\n" + "\n".join(f"  {w}" for w in wrong[:15])
        done: list[str] = []
        for i, op in enumerate(ops, 1):
            want = model.apply(op)
            got = outcome(ex, op)
            done.append(f"{op}  -> {got}")
            assert got == want, f"statement {i}: Floe {got!r}, model {want!r}, after:\n{story(done)}"
            wrong = differences(ex, model, with_allowed=i == len(ops))
            assert not wrong, f"{len(wrong)} answers differ after:\n{story(done)}\n" + "\n".join(
                f"  {w}" for w in wrong[:15]
            )
        wrong = listings(ex, model)
        assert not wrong, f"the grants listed differ after:\n{story(done)}\n" + "\n".join(
            f"  {w}" for w in wrong
        )
