"""Users, roles and grants: the statements ``floe.catalog.access`` parses, run against the catalog.

Snowflake's division of duties: USERADMIN (and the roles above it) creates users and roles and owns
what it creates; the owner of an object, or a role with MANAGE GRANTS on the account
(SECURITYADMIN), grants privileges on it and transfers its ownership; ACCOUNTADMIN may do all of it.
A role granted to another passes its privileges up; granting a role into its own descendants (a
cycle) is refused, and only ACCOUNTADMIN grants a role that leads to ACCOUNTADMIN.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from floe.catalog import (
    ADMIN_ROLE,
    PRIVILEGES,
    SYSTEM_ROLES,
    Catalog,
    CatalogObject,
    Role,
    Stage,
    User,
    future_key,
    grant_key,
    now_ms,
)
from floe.catalog.access import (
    KEY_PROPERTIES,
    AlterUser,
    Bulk,
    CreateRole,
    CreateUser,
    DescribeUser,
    DropRole,
    DropUser,
    GrantPrivileges,
    GrantRole,
    RevokePrivileges,
    RevokeRole,
    Securable,
    ShowFutureGrants,
    ShowGrantsOf,
    ShowGrantsOn,
    ShowGrantsToRole,
    ShowGrantsToUser,
    ShowRoles,
    ShowUsers,
)
from floe.catalog.models import future_container, granted_name
from floe.catalog.names import inside, join_parts, quote_part, split_parts, within
from floe.errors import CompilationError, ObjectNotFound, PermissionDenied, SqlError
from floe.keypair import InvalidKey, fingerprint, load_public_key, public_key_body
from floe.patterns import like_matcher
from services.access import (
    MODELS,
    Need,
    active_roles,
    allowed,
    authorize,
    closure,
    everything,
    find,
    insufficient,
    may_know_absence,
)
from services.auth import Principal
from services.query import Result
from services.stage_grants import (
    applicable,
    checked_bulk,
    checked_bulk_revoke,
    checked_future,
    checked_grant,
    checked_revoke,
)

MANAGE_GRANTS = Need("ACCOUNT", "", ("MANAGE GRANTS",))
"""What lets a role (SECURITYADMIN, and ACCOUNTADMIN above it) grant on any object."""

USER_COLUMNS = [
    "name",
    "created_on",
    "default_role",
    "owner",
    "has_rsa_public_key",
    "rsa_public_key_fp",
    "rsa_public_key_2_fp",
]
ROLE_COLUMNS = ["created_on", "name", "assigned_to_users", "granted_to_roles", "granted_roles", "owner"]
GRANT_COLUMNS = ["created_on", "privilege", "granted_on", "name", "granted_to", "grantee_name"]
FUTURE_COLUMNS = ["created_on", "privilege", "grant_on", "name", "grant_to", "grantee_name"]
USER_GRANT_COLUMNS = ["created_on", "role", "granted_to", "grantee_name"]
_STATEMENT_DONE = "Statement executed successfully."


def created(ms: int) -> str | None:
    """A creation time as SHOW prints it."""
    if not ms:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(sep=" ", timespec="milliseconds")


def status(text: str) -> Result:
    """A one-row STATUS answer."""
    return Result(["STATUS"], [[text]])


def like(rows: list[dict[str, Any]], pattern: str | None) -> list[dict[str, Any]]:
    """Rows whose name matches a SHOW ... LIKE pattern (% and _ wildcards, case-insensitive)."""
    if pattern is None:
        return rows
    # Not a regex: a backtracking `.*` per % froze the API (issue 9); like_matcher is O(n*m).
    match = like_matcher(pattern)
    return [r for r in rows if match(str(r["name"]))]


def table(columns: list[str], rows: list[dict[str, Any]]) -> Result:
    """Rows as a Result with these columns, in order."""
    return Result(columns, [[r[c] for c in columns] for r in rows])


def already_exists(name: str) -> SqlError:
    """Snowflake's 002002."""
    return SqlError(f"Object '{name}' already exists.", code="002002", sql_state="42710")


def _fingerprint(body: str | None) -> str | None:
    if not body:
        return None
    try:
        return fingerprint(load_public_key(body))
    except InvalidKey:
        return None


def _key_body(prop: str, text: str) -> str:
    """A key as stored (normalised base64 DER); the error never repeats the key text."""
    try:
        return public_key_body(load_public_key(text))
    except InvalidKey as exc:
        raise CompilationError(f"invalid value for property {prop}: {exc.message}") from None


def _system_role(name: str) -> CompilationError:
    return CompilationError(
        f"Role '{name}' is a system role ({', '.join(SYSTEM_ROLES)}); it cannot be created, replaced or "
        "dropped.",
        code="002002",
        sql_state="42710",
    )


class GrantStatements:
    """Runs user, role and grant statements for one API process."""

    def __init__(self, catalog: Catalog, dropped: Callable[[CatalogObject], None] | None = None) -> None:
        self.catalog = catalog
        self._dropped = dropped
        """Told of a user dropped or replaced, whose stage (``@~``) goes with it."""

    def user_gone(self, user: User | None) -> None:
        """A user was dropped or replaced: its stage's files go too, as Snowflake's do."""
        if user is not None and self._dropped is not None:
            self._dropped(user)

    def handlers(self) -> dict[type, Callable[[Any, Principal], Result]]:
        """Statement type -> the method that checks its privileges and runs it."""
        return {
            CreateUser: self.create_user,
            AlterUser: self.alter_user,
            DropUser: self.drop_user,
            CreateRole: self.create_role,
            DropRole: self.drop_role,
            GrantRole: self.grant_role,
            RevokeRole: self.revoke_role,
            GrantPrivileges: self.grant_privileges,
            RevokePrivileges: self.revoke_privileges,
            ShowUsers: self.show_users,
            ShowRoles: self.show_roles,
            ShowGrantsToRole: self.show_grants_to_role,
            ShowGrantsToUser: self.show_grants_to_user,
            ShowGrantsOf: self.show_grants_of,
            ShowGrantsOn: self.show_grants_on,
            ShowFutureGrants: self.show_future_grants,
            DescribeUser: self.describe_user,
        }

    # ------------------------------------------------------------------------------ bookkeeping

    def require_role(self, name: str) -> None:
        """ObjectNotFound unless the role exists."""
        if name not in SYSTEM_ROLES and self.catalog.find(Role, name) is None:
            raise ObjectNotFound("role", name)

    def role(self, name: str) -> Role:
        """A role's catalog entry; a system role gets one on its first grant."""
        found = self.catalog.find(Role, name)
        if found is not None:
            return found
        if name in SYSTEM_ROLES:
            return Role(name=name, owner="")
        raise ObjectNotFound("role", name)

    def set_grants(self, role: Role, key: str, privileges: list[str], *, future: bool = False) -> None:
        """Replace what ``role`` holds under ``key`` (in its grants, or its future grants)."""
        kind = key.split(" ", 1)[0]
        order = PRIVILEGES[kind]
        current = dict(role.future if future else role.grants)
        if privileges:
            current[key] = [p for p in order if p in privileges]
        else:
            current.pop(key, None)
        field = "future" if future else "grants"
        # Copy: the catalog's cached objects must not change before the write is committed.
        self.catalog.put(role.model_copy(update={field: current}))

    def revoke_all(self, kind: str, name: str) -> None:
        """Remove every role's grants on an object (it was dropped)."""
        key = grant_key(kind, name)
        for role in list(self.catalog.all(Role).values()):
            if key in role.grants:
                self.set_grants(role, key, [])

    def rename_all(self, kind: str, old: str, new: str) -> None:
        """Move every role's grants on an object to its new name (ALTER ... RENAME TO)."""
        before, after = grant_key(kind, old), grant_key(kind, new)
        for role in list(self.catalog.all(Role).values()):
            if before in role.grants:
                grants = {after if k == before else k: v for k, v in role.grants.items()}
                self.catalog.put(role.model_copy(update={"grants": grants}))

    def revoke_all_under(self, prefix: str) -> None:
        """Remove every grant and future grant on objects and containers named ``prefix``... (a
        dropped database or schema)."""
        for role in list(self.catalog.all(Role).values()):
            grants = {k: v for k, v in role.grants.items() if not _under(k, _granted(k), prefix)}
            future = {k: v for k, v in role.future.items() if not _under(k, future_container(k), prefix)}
            if grants != role.grants or future != role.future:
                self.catalog.put(role.model_copy(update={"grants": grants, "future": future}))

    def apply_future(self, kind: str, name: str) -> None:
        """Give a new object the future grants of its schema (or, when its schema has none for the
        kind, of its database), as Snowflake does."""
        database, schema = split_parts(_without_signature(kind, name))[:2]
        keys = (
            future_key(kind, "SCHEMA", join_parts(database, schema)),
            future_key(kind, "DATABASE", quote_part(database)),
        )
        roles = list(self.catalog.all(Role).values())
        for key in keys:
            holders = [r for r in roles if key in r.future]
            stage = self.catalog.find(Stage, name) if kind == "STAGE" else None
            if holders:
                for role in holders:
                    # FUTURE STAGES may hold USAGE, READ and WRITE: each stage gets its kind's.
                    privileges = applicable(stage, role.future[key]) if stage else role.future[key]
                    if privileges:
                        self.set_grants(role, grant_key(kind, name), privileges)
                return

    def forget_role(self, name: str) -> None:
        """Take a dropped role away from users and roles; what it owned passes to ACCOUNTADMIN."""
        for user in list(self.catalog.all(User).values()):
            if name in user.roles or user.owner == name:
                roles = [r for r in user.roles if r != name]
                owner = ADMIN_ROLE if user.owner == name else user.owner
                self.catalog.put(user.model_copy(update={"roles": roles, "owner": owner}))
        for role in list(self.catalog.all(Role).values()):
            if name in role.roles or role.owner == name:
                owner = ADMIN_ROLE if role.owner == name else role.owner
                roles = [r for r in role.roles if r != name]
                self.catalog.put(role.model_copy(update={"roles": roles, "owner": owner}))
        for model in (m for models in MODELS.values() for m in models):
            if model in (Role, User):
                continue
            for obj in list(self.catalog.all(model).values()):
                if obj.owner == name:
                    self.catalog.put(obj.model_copy(update={"owner": ADMIN_ROLE}))

    def target(self, principal: Principal, kind: str, name: str, if_exists: bool) -> bool:
        """Authorize OWNERSHIP of the object a statement changes; False when IF EXISTS finds nothing
        to do (only for a principal that may learn so, see ``may_know_absence``)."""
        missing = find(self.catalog, kind, name) is None
        if missing and if_exists and may_know_absence(self.catalog, principal, kind, name):
            return False
        authorize(self.catalog, principal, Need(kind, name, ("OWNERSHIP",)))
        return True

    def _grantable(self, principal: Principal, on: Securable) -> None:
        """The owner of an object, or MANAGE GRANTS, may grant on it."""
        if on.kind == "ACCOUNT":
            authorize(self.catalog, principal, MANAGE_GRANTS)
        elif not allowed(self.catalog, principal, MANAGE_GRANTS):
            authorize(self.catalog, principal, Need(on.kind, on.name, ("OWNERSHIP",)))
        elif find(self.catalog, on.kind, on.name) is None:
            raise ObjectNotFound(on.kind.lower(), on.name)

    def _container(self, principal: Principal, kind: str, name: str) -> None:
        """Grants on all or future objects of a schema or database: its owner, or MANAGE GRANTS; it
        must exist either way."""
        if not allowed(self.catalog, principal, MANAGE_GRANTS):
            authorize(self.catalog, principal, Need(kind, name, ("OWNERSHIP",)))
        elif find(self.catalog, kind, name) is None:
            raise ObjectNotFound(kind.lower(), name)

    def _bulk_objects(self, on: Bulk) -> list[CatalogObject]:
        (model,) = MODELS[on.kind]  # tables, stages, pipes and functions: one model each
        return [
            o
            for name, o in sorted(self.catalog.all(model).items())
            if inside(_without_signature(on.kind, name), on.container)
        ]

    # ------------------------------------------------------------------------------------ users

    def create_user(self, s: CreateUser, principal: Principal) -> Result:
        authorize(self.catalog, principal, Need("ACCOUNT", "", ("CREATE USER",)))
        old = self.catalog.find(User, s.name)
        if old is not None:
            if s.if_not_exists:
                return status(f"{s.name} already exists, statement succeeded.")
            if not s.replace:
                raise already_exists(s.name)
            authorize(self.catalog, principal, Need("USER", s.name, ("OWNERSHIP",)))
        if s.default_role is not None:
            self.require_role(s.default_role)
        key = _key_body("RSA_PUBLIC_KEY", s.rsa_public_key) if s.rsa_public_key is not None else None
        key2 = _key_body("RSA_PUBLIC_KEY_2", s.rsa_public_key_2) if s.rsa_public_key_2 is not None else None
        # OR REPLACE makes a new user, so the old one's role grants go with it (as in Snowflake).
        self.catalog.put(
            User(
                name=s.name,
                rsa_public_key=key,
                rsa_public_key_2=key2,
                default_role=s.default_role,
                owner=principal.owner_role,
                created_ms=now_ms(),
            )
        )
        self.user_gone(old)  # a new user starts with an empty stage (@~)
        return status(f"User {s.name} successfully created.")

    def alter_user(self, s: AlterUser, principal: Principal) -> Result:
        # Key rotation is self-service; anything else about a user is its owner's.
        # A user may change its own keys and default role (Snowflake's self-service properties).
        own_keys = s.name == principal.user and set(s.properties) <= {*KEY_PROPERTIES, "DEFAULT_ROLE"}
        need = Need("USER", s.name, ("OWNERSHIP",))
        if s.name == principal.user and not own_keys and not allowed(self.catalog, principal, need):
            # A user knows it exists: refuse with 003001 rather than "does not exist".
            raise insufficient(need, active_roles(self.catalog, principal))
        if not own_keys and not self.target(principal, "USER", s.name, s.if_exists):
            return status(_STATEMENT_DONE)
        user = self.catalog.find(User, s.name)
        if user is None:
            if s.if_exists:
                return status(_STATEMENT_DONE)
            raise ObjectNotFound("user", s.name)
        update: dict[str, str | None] = {}
        for prop, value in s.properties.items():
            if prop in KEY_PROPERTIES:
                update[prop.lower()] = None if value is None else _key_body(prop, value)
            elif prop == "DEFAULT_ROLE":
                if value is not None:
                    self.require_role(value)
                update["default_role"] = value
        if update:
            self.catalog.put(user.model_copy(update=update))
        return status(_STATEMENT_DONE)

    def drop_user(self, s: DropUser, principal: Principal) -> Result:
        if not self.target(principal, "USER", s.name, s.if_exists):
            return status(f"Drop statement executed successfully ({s.name} already dropped).")
        self.user_gone(self.catalog.delete(User, s.name))
        return status(f"{s.name} successfully dropped.")

    def describe_user(self, s: DescribeUser, principal: Principal) -> Result:
        if s.name != principal.user and not allowed(self.catalog, principal, MANAGE_GRANTS):
            authorize(self.catalog, principal, Need("USER", s.name, ("OWNERSHIP", "MONITOR")))
        user = self.catalog.get(User, s.name)
        return Result(
            ["property", "value"],
            [
                ["NAME", user.name],
                ["DEFAULT_ROLE", user.default_role],
                ["OWNER", user.owner],
                ["RSA_PUBLIC_KEY_FP", _fingerprint(user.rsa_public_key)],
                ["RSA_PUBLIC_KEY_2_FP", _fingerprint(user.rsa_public_key_2)],
            ],
        )

    def show_users(self, s: ShowUsers, principal: Principal) -> Result:
        # Snowflake lists the users the role owns or monitors; MANAGE GRANTS sees them all.
        every = allowed(self.catalog, principal, MANAGE_GRANTS)
        roles = active_roles(self.catalog, principal)
        rows = [
            {
                "name": u.name,
                "created_on": created(u.created_ms),
                "default_role": u.default_role,
                "owner": u.owner,
                "has_rsa_public_key": "true" if u.rsa_public_key or u.rsa_public_key_2 else "false",
                "rsa_public_key_fp": _fingerprint(u.rsa_public_key),
                "rsa_public_key_2_fp": _fingerprint(u.rsa_public_key_2),
            }
            for u in self.catalog.all(User).values()
            if every or u.owner in roles or u.name == principal.user
        ]
        return table(USER_COLUMNS, sorted(like(rows, s.like), key=lambda r: str(r["name"])))

    # ------------------------------------------------------------------------------------ roles

    def create_role(self, s: CreateRole, principal: Principal) -> Result:
        authorize(self.catalog, principal, Need("ACCOUNT", "", ("CREATE ROLE",)))
        exists = s.name in SYSTEM_ROLES or self.catalog.find(Role, s.name) is not None
        if exists and s.if_not_exists:
            return status(f"{s.name} already exists, statement succeeded.")
        if s.name in SYSTEM_ROLES:
            raise _system_role(s.name)
        if exists:
            if not s.replace:
                raise already_exists(s.name)
            authorize(self.catalog, principal, Need("ROLE", s.name, ("OWNERSHIP",)))
            # OR REPLACE is DROP + CREATE: the old role's grants and its place in users go with it.
            self.forget_role(s.name)
        self.catalog.put(
            Role(name=s.name, owner=principal.owner_role, created_ms=now_ms(), comment=s.comment)
        )
        return status(f"Role {s.name} successfully created.")

    def drop_role(self, s: DropRole, principal: Principal) -> Result:
        if s.name in SYSTEM_ROLES:
            raise _system_role(s.name)
        if not self.target(principal, "ROLE", s.name, s.if_exists):
            return status(f"Drop statement executed successfully ({s.name} already dropped).")
        self.catalog.delete(Role, s.name)
        self.forget_role(s.name)
        return status(f"{s.name} successfully dropped.")

    def show_roles(self, s: ShowRoles, principal: Principal) -> Result:
        users = list(self.catalog.all(User).values())
        stored = self.catalog.all(Role)
        # A system role is in the catalog only once something was granted to it.
        roles = {name: Role(name=name, owner="") for name in SYSTEM_ROLES} | stored
        rows = [
            {
                "created_on": created(r.created_ms),
                "name": r.name,
                "assigned_to_users": sum(r.name in u.roles for u in users),
                "granted_to_roles": sum(r.name in o.roles for o in stored.values()),
                "granted_roles": len(r.roles),
                "owner": r.owner,
            }
            for r in roles.values()
        ]
        return table(ROLE_COLUMNS, sorted(like(rows, s.like), key=lambda r: str(r["name"])))

    def _role_grant_check(self, principal: Principal, role: str, grantee_kind: str, grantee: str) -> None:
        self.require_role(role)
        if grantee_kind == "ROLE":
            self.require_role(grantee)
        else:
            self.catalog.get(User, grantee)
        if not allowed(self.catalog, principal, MANAGE_GRANTS):
            authorize(self.catalog, principal, Need("ROLE", role, ("OWNERSHIP",)))
        if ADMIN_ROLE in closure(self.catalog, [role]) and ADMIN_ROLE not in active_roles(
            self.catalog, principal
        ):
            raise authorize_error(f"grant role '{role}'", ADMIN_ROLE)

    def grant_role(self, s: GrantRole, principal: Principal) -> Result:
        self._role_grant_check(principal, s.role, s.to_kind, s.grantee)
        if s.to_kind == "USER":
            user = self.catalog.get(User, s.grantee)
            if s.role not in user.roles:
                self.catalog.put(user.model_copy(update={"roles": [*user.roles, s.role]}))
            return status(_STATEMENT_DONE)
        if s.grantee in closure(self.catalog, [s.role]):
            raise CompilationError(
                f"Granting role '{s.role}' to role '{s.grantee}' would make a cycle: '{s.grantee}' is "
                f"already granted to '{s.role}', directly or through other roles."
            )
        grantee = self.role(s.grantee)
        if s.role not in grantee.roles:
            self.catalog.put(grantee.model_copy(update={"roles": [*grantee.roles, s.role]}))
        return status(_STATEMENT_DONE)

    def revoke_role(self, s: RevokeRole, principal: Principal) -> Result:
        self._role_grant_check(principal, s.role, s.from_kind, s.grantee)
        if s.from_kind == "USER":
            user = self.catalog.get(User, s.grantee)
            if s.role in user.roles:
                self.catalog.put(user.model_copy(update={"roles": [r for r in user.roles if r != s.role]}))
            return status(_STATEMENT_DONE)
        grantee = self.role(s.grantee)
        if s.role in grantee.roles:
            self.catalog.put(grantee.model_copy(update={"roles": [r for r in grantee.roles if r != s.role]}))
        return status(_STATEMENT_DONE)

    # ------------------------------------------------------------------------------- privileges

    def grant_privileges(self, s: GrantPrivileges, principal: Principal) -> Result:
        self.require_role(s.role)
        if isinstance(s.on, Bulk):
            return self._grant_bulk(s, principal)
        self._grantable(principal, s.on)
        if s.privileges == ["OWNERSHIP"]:
            return self._transfer(s.on, s.role, s.current_grants)
        role = self.role(s.role)
        key = grant_key(s.on.kind, s.on.name)
        privileges = s.privileges
        if s.on.kind == "STAGE":
            stage = self.catalog.get(Stage, s.on.name)
            privileges = checked_grant(stage, privileges, s.all_privileges, role.grants.get(key, []))
        self.set_grants(role, key, [*role.grants.get(key, []), *privileges])
        return status(_STATEMENT_DONE)

    def _transfer(self, on: Securable, role: str, current: str | None) -> Result:
        if on.kind == "ACCOUNT":
            raise CompilationError("OWNERSHIP cannot be granted on the account.")
        if on.kind == "ROLE" and on.name in SYSTEM_ROLES:
            raise _system_role(on.name)
        obj = find(self.catalog, on.kind, on.name)
        assert obj is not None  # _grantable checked it exists
        if current == "REVOKE":
            self.revoke_all(on.kind, on.name)
        self.catalog.put(obj.model_copy(update={"owner": role}))
        return status(_STATEMENT_DONE)

    def _grant_bulk(self, s: GrantPrivileges, principal: Principal) -> Result:
        on = s.on
        assert isinstance(on, Bulk)
        self._container(principal, on.container_kind, on.container)
        if on.future:
            if s.privileges == ["OWNERSHIP"]:
                raise CompilationError("Future grants of OWNERSHIP are not supported; grant the privileges.")
            role = self.role(s.role)
            key = future_key(on.kind, on.container_kind, on.container)
            if on.kind == "STAGE":
                checked_future(s.privileges, role.future.get(key, []), "GRANT")
            self.set_grants(role, key, [*role.future.get(key, []), *s.privileges], future=True)
            return status(_STATEMENT_DONE)
        objects = self._bulk_objects(on)
        if on.kind == "STAGE" and s.privileges != ["OWNERSHIP"]:
            checked_bulk(self._stages_held(objects, s.role), s.privileges)
        for obj in objects:
            target = Securable(on.kind, obj.name)
            if s.privileges == ["OWNERSHIP"]:
                self._transfer(target, s.role, s.current_grants)
                continue
            role = self.role(s.role)
            key = grant_key(on.kind, obj.name)
            # A schema's stages of both kinds each get the privileges their kind takes.
            privileges = applicable(obj, s.privileges) if isinstance(obj, Stage) else s.privileges
            if privileges:
                self.set_grants(role, key, [*role.grants.get(key, []), *privileges])
        return status(_STATEMENT_DONE)

    def _stages_held(self, objects: list[CatalogObject], role_name: str) -> list[tuple[Stage, list[str]]]:
        """Each stage of a bulk statement, with what the role holds on it directly."""
        role = self.role(role_name)
        return [(o, role.grants.get(grant_key("STAGE", o.name), [])) for o in objects if isinstance(o, Stage)]

    def revoke_privileges(self, s: RevokePrivileges, principal: Principal) -> Result:
        if "OWNERSHIP" in s.privileges:
            raise CompilationError(
                "OWNERSHIP cannot be revoked; transfer it with "
                "GRANT OWNERSHIP ON <kind> <name> TO ROLE <role>."
            )
        self.require_role(s.role)
        if isinstance(s.on, Bulk):
            on = s.on
            self._container(principal, on.container_kind, on.container)
            role = self.role(s.role)
            if on.future:
                key = future_key(on.kind, on.container_kind, on.container)
                held = role.future.get(key, [])
                if on.kind == "STAGE":
                    checked_future(s.privileges, held, "REVOKE")
                self.set_grants(role, key, [p for p in held if p not in s.privileges], future=True)
                return status(_STATEMENT_DONE)
            objects = self._bulk_objects(on)
            if on.kind == "STAGE":
                checked_bulk_revoke(self._stages_held(objects, s.role), s.privileges)
            for obj in objects:
                role = self.role(s.role)
                key = grant_key(on.kind, obj.name)
                self.set_grants(role, key, [p for p in role.grants.get(key, []) if p not in s.privileges])
            return status(_STATEMENT_DONE)
        self._grantable(principal, s.on)
        role = self.role(s.role)
        key = grant_key(s.on.kind, s.on.name)
        held = role.grants.get(key, [])
        privileges = s.privileges
        if s.on.kind == "STAGE":
            stage = self.catalog.get(Stage, s.on.name)
            privileges = checked_revoke(stage, privileges, s.all_privileges, held)
        if held:
            self.set_grants(role, key, [p for p in held if p not in privileges])
        return status(_STATEMENT_DONE)

    # ------------------------------------------------------------------------------ SHOW GRANTS

    @staticmethod
    def _grant_row(privilege: str, kind: str, name: str, role: str, when: int) -> dict[str, Any]:
        return {
            "created_on": created(when),
            "privilege": privilege,
            "granted_on": kind,
            "name": name,
            "granted_to": "ROLE",
            "grantee_name": role,
        }

    def _owned_rows(self, role: str) -> list[dict[str, Any]]:
        rows = []
        for kind, models in MODELS.items():
            for obj in (o for model in models for o in self.catalog.all(model).values()):
                if obj.owner == role:
                    rows.append(self._grant_row("OWNERSHIP", kind, obj.name, role, obj.created_ms))
        return rows

    def show_grants_to_role(self, s: ShowGrantsToRole, principal: Principal) -> Result:
        mine = s.role in active_roles(self.catalog, principal)
        if not mine and not allowed(self.catalog, principal, MANAGE_GRANTS):
            authorize(self.catalog, principal, Need("ROLE", s.role, ("OWNERSHIP",)))
        role = self.role(s.role)
        rows = self._owned_rows(role.name)
        for key, privileges in role.grants.items():
            kind, name = key.split(" ", 1)
            obj = find(self.catalog, kind, name)
            if obj is not None:  # skips grants on an object dropped meanwhile
                rows += [self._grant_row(p, kind, name, role.name, obj.created_ms) for p in privileges]
        rows += [self._grant_row("USAGE", "ROLE", r, role.name, role.created_ms) for r in role.roles]
        rows.sort(key=lambda r: (r["granted_on"], r["name"], _rank(r["granted_on"], r["privilege"])))
        return table(GRANT_COLUMNS, rows)

    def show_grants_of(self, s: ShowGrantsOf, principal: Principal) -> Result:
        """Who holds the role: the same privileges as SHOW GRANTS TO ROLE."""
        if s.role not in active_roles(self.catalog, principal) and not allowed(
            self.catalog, principal, MANAGE_GRANTS
        ):
            authorize(self.catalog, principal, Need("ROLE", s.role, ("OWNERSHIP",)))
        self.require_role(s.role)
        holders: list[User | Role] = [*self.catalog.all(User).values(), *self.catalog.all(Role).values()]
        rows = [
            {
                "created_on": created(h.created_ms),
                "role": s.role,
                "granted_to": "USER" if isinstance(h, User) else "ROLE",
                "grantee_name": h.name,
            }
            for h in holders
            if s.role in h.roles
        ]
        rows.sort(key=lambda r: (r["granted_to"], r["grantee_name"]))
        return table(USER_GRANT_COLUMNS, rows)

    def show_grants_on(self, s: ShowGrantsOn, principal: Principal) -> Result:
        on = s.on
        if not allowed(self.catalog, principal, MANAGE_GRANTS):
            authorize(self.catalog, principal, Need(on.kind, on.name, everything(on.kind)))
        obj = find(self.catalog, on.kind, on.name)
        if obj is None:
            raise ObjectNotFound(on.kind.lower(), on.name)
        rows = []
        if obj.owner:
            rows.append(self._grant_row("OWNERSHIP", on.kind, on.name, obj.owner, obj.created_ms))
        key = grant_key(on.kind, on.name)
        for role in self.catalog.all(Role).values():
            rows += [
                self._grant_row(p, on.kind, on.name, role.name, obj.created_ms)
                for p in role.grants.get(key, [])
            ]
            if on.kind == "ROLE" and on.name in role.roles:
                rows.append(self._grant_row("USAGE", "ROLE", on.name, role.name, role.created_ms))
        rows.sort(key=lambda r: (_rank(on.kind, r["privilege"]), r["grantee_name"]))
        return table(GRANT_COLUMNS, rows)

    def show_future_grants(self, s: ShowFutureGrants, principal: Principal) -> Result:
        self._container(principal, s.container_kind, s.container)
        rows: list[dict[str, str]] = []
        suffix = f" IN {s.container_kind} {s.container}"
        for role in self.catalog.all(Role).values():
            for key, privileges in role.future.items():
                if key.endswith(suffix) and key[: -len(suffix)] in PRIVILEGES:
                    kind = key[: -len(suffix)]
                    rows += [
                        {
                            "created_on": created(role.created_ms) or "",
                            "privilege": p,
                            "grant_on": kind,
                            "name": f"{s.container}.<{kind}>",
                            "grant_to": "ROLE",
                            "grantee_name": role.name,
                        }
                        for p in privileges
                    ]
        rows.sort(key=lambda r: (r["grant_on"], r["grantee_name"], _rank(r["grant_on"], r["privilege"])))
        return table(FUTURE_COLUMNS, rows)

    def show_grants_to_user(self, s: ShowGrantsToUser, principal: Principal) -> Result:
        if s.user != principal.user and not allowed(self.catalog, principal, MANAGE_GRANTS):
            authorize(self.catalog, principal, Need("USER", s.user, ("OWNERSHIP",)))
        user = self.catalog.get(User, s.user)
        roles = self.catalog.all(Role)
        rows = []
        for name in user.roles:
            role = roles.get(name)
            rows.append(
                {
                    "created_on": created(max(user.created_ms, role.created_ms if role else 0)),
                    "role": name,
                    "granted_to": "USER",
                    "grantee_name": user.name,
                }
            )
        return table(USER_GRANT_COLUMNS, rows)


def authorize_error(action: str, role: str) -> PermissionDenied:
    """A refusal that only ``role`` may lift."""
    return PermissionDenied(
        f"SQL access control error:\nInsufficient privileges to {action}: only {role} may."
    )


def _rank(kind: str, privilege: str) -> int:
    order = everything(kind) if kind in PRIVILEGES else ("OWNERSHIP", "USAGE")
    return order.index(privilege) if privilege in order else len(order)


def _under(key: str, name: str, container: str) -> bool:
    """Whether the grant or future grant ``key`` on ``name`` (a function's without its types) is on
    ``container`` or on something inside it (a
    database's schemas, a schema's tables), compared part by part (decision 109). Account and
    role grants, and integrations' (one name, no container), are never under a database."""
    kind = key.split(" ", 1)[0]
    if not name or kind in ("ACCOUNT", "ROLE", "USER", "INTEGRATION"):
        return False
    return within(name, container)


def _granted(key: str) -> str:
    """The name a grant key is on, a function's without its argument types."""
    return _without_signature(key.split(" ", 1)[0], granted_name(key))


def _without_signature(kind: str, name: str) -> str:
    """A function's key without its argument types (``DB.S.F(NUMBER)`` is ``DB.S.F``); any other
    name as it is. The types never hold a parenthesis; a quoted name before them may."""
    return name[: name.rindex("(")] if kind == "FUNCTION" else name
