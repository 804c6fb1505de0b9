"""What a principal may do: Snowflake's privilege model, and the one check every statement and route uses.

A role holds a privilege on an object when it owns the object (OWNERSHIP implies every privilege on
it), when the privilege was granted to it, or when either is true of a role granted to it: privileges
inherit upward through ``GRANT ROLE r1 TO ROLE r2``. The system roles form Snowflake's hierarchy
(ACCOUNTADMIN over SECURITYADMIN over USERADMIN, and over SYSADMIN; PUBLIC under every role) and
hold its account privileges. ACCOUNTADMIN holds every privilege on every object: the administrator
must be able to repair anything (Snowflake lets an object owned by a role outside SYSADMIN's tree
escape ACCOUNTADMIN; Floe does not, docs/decisions.md).

An object inside a schema is reachable only with USAGE on its database and its schema (a function's
schema is its name's, without the argument types). An object the principal's roles hold no privilege
on at all is reported as not existing ("does not exist or not authorized"), so its existence does
not leak; one it can see but not act on gets Snowflake's 003001 "Insufficient privileges".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from floe.catalog import (
    ADMIN_ROLE,
    PRIVILEGES,
    SYSTEM_PRIVILEGES,
    SYSTEM_ROLES,
    ApiIntegration,
    Catalog,
    CatalogObject,
    Database,
    ExternalFunction,
    NamedFileFormat,
    NotificationIntegration,
    Pipe,
    Role,
    Schema,
    Stage,
    StorageIntegration,
    Table,
    User,
    grant_key,
)
from floe.catalog.names import Defaults, join_parts, quote_part, split_parts
from floe.catalog.store import role_closure
from floe.errors import ObjectNotFound, PermissionDenied
from services.auth import Principal

MODELS: dict[str, tuple[type[CatalogObject], ...]] = {
    "DATABASE": (Database,),
    "SCHEMA": (Schema,),
    "TABLE": (Table,),
    "STAGE": (Stage,),
    "FILE_FORMAT": (NamedFileFormat,),
    "PIPE": (Pipe,),
    # Storage, API and notification integrations share one namespace (as in Snowflake): a name is
    # one of them.
    "INTEGRATION": (StorageIntegration, ApiIntegration, NotificationIntegration),
    "FUNCTION": (ExternalFunction,),
    "ROLE": (Role,),
    "USER": (User,),
}
"""The catalog models of each kind of securable object (ACCOUNT has none)."""

NAMES = {
    "INTEGRATION": "integration",
    "ACCOUNT": "account",
    "FUNCTION": "function",
    "FILE_FORMAT": "file format",
}
"""How messages name a kind, where the lower-cased kind will not do."""


@dataclass(frozen=True)
class Need:
    """One of ``any_of`` on the object ``kind`` ``name`` (fully qualified; "" for the account)."""

    kind: str
    name: str
    any_of: tuple[str, ...]


def everything(kind: str) -> tuple[str, ...]:
    """Every privilege an object of ``kind`` takes, OWNERSHIP first: holding any of them shows it."""
    return ("OWNERSHIP", *PRIVILEGES[kind])


def active_roles(catalog: Catalog, principal: Principal) -> frozenset[str]:
    """The roles whose privileges the principal holds: its current role (``owner_role``) and, with
    secondary roles ALL (the default), every role granted to its user, each with the roles granted
    to it."""
    start = [principal.owner_role]
    if principal.secondary:
        start += sorted(principal.roles)
    return closure(catalog, start)


def closure(catalog: Catalog, roles: Iterable[str]) -> frozenset[str]:
    """``roles`` with every role granted to them, transitively, and PUBLIC."""
    return role_closure(catalog, roles)


def find(catalog: Catalog, kind: str, name: str) -> CatalogObject | None:
    """The object ``kind`` ``name``; system roles exist without a catalog entry."""
    if kind == "ACCOUNT":
        return CatalogObject(name="")
    for model in MODELS[kind]:
        obj = catalog.find(model, name)
        if obj is not None:
            return obj
    if kind == "ROLE" and name in SYSTEM_ROLES:
        return Role(name=name, owner="")
    return None


def held(catalog: Catalog, roles: frozenset[str], kind: str, name: str) -> set[str]:
    """The privileges ``roles`` (already closed over the hierarchy) hold on an object."""
    if ADMIN_ROLE in roles:
        return set(everything(kind))
    obj = find(catalog, kind, name)
    if obj is not None and obj.owner and obj.owner in roles:
        return set(everything(kind))
    out: set[str] = set()
    if kind == "ACCOUNT":
        for role_name in roles:
            out.update(SYSTEM_PRIVILEGES.get(role_name, ()))
    key = grant_key(kind, name)
    for role_name in roles:
        role = catalog.find(Role, role_name)
        if role is not None:
            out.update(role.grants.get(key, ()))
    return out


def containers(kind: str, name: str) -> list[tuple[str, str]]:
    """The database and schema an object lives in, outermost first."""
    if kind not in _CONTAINED:
        return []
    parts = _parts(kind, name)
    database = ("DATABASE", quote_part(parts[0]))
    if kind == "SCHEMA":
        return [database]
    return [database, ("SCHEMA", join_parts(*parts[:2]))]


_CONTAINED = ("SCHEMA", "TABLE", "STAGE", "FILE_FORMAT", "PIPE", "FUNCTION")
"""The kinds that live in a database (a schema) or in a schema (the others)."""


def _parts(kind: str, name: str) -> tuple[str, ...]:
    """The identifiers of a database's, schema's or object's key, parsed (decision 109): never
    split on dots, which a quoted name may hold. A function's key loses its argument types first:
    ``DB.S.F(NUMBER, VARCHAR)``'s types never hold a parenthesis, the name before them may."""
    if kind == "FUNCTION":
        name = name[: name.rindex("(")]
    return split_parts(name)


def own_name(kind: str, name: str) -> str:
    """An object's own name as a refusal says it: the last identifier (a function's with its
    argument types); a user's, role's or integration's name whole."""
    if not name or kind not in (*_CONTAINED, "DATABASE"):
        return name
    signature = name[name.rindex("(") :] if kind == "FUNCTION" else ""
    return _parts(kind, name)[-1] + signature


def _usable(catalog: Catalog, roles: frozenset[str], kind: str, name: str) -> bool:
    return find(catalog, kind, name) is not None and bool(
        held(catalog, roles, kind, name) & {"USAGE", "OWNERSHIP"}
    )


def visible(catalog: Catalog, roles: frozenset[str], kind: str, name: str) -> bool:
    """Whether ``roles`` may know the object exists: USAGE on its containers and any privilege on it."""
    if not all(_usable(catalog, roles, k, n) for k, n in containers(kind, name)):
        return False
    return bool(held(catalog, roles, kind, name))


def _missing(kind: str, name: str) -> ObjectNotFound:
    return ObjectNotFound(NAMES.get(kind, kind.lower()), name)


def authorize(catalog: Catalog, principal: Principal, *needs: Need) -> None:
    """The check every statement and REST route makes: each need must be met.

    ObjectNotFound when an object (or its database or schema) does not exist or the principal's
    roles cannot see it; PermissionDenied when they can see it but hold none of ``any_of``.
    """
    roles = active_roles(catalog, principal)
    for need in needs:
        for kind, name in containers(need.kind, need.name):
            if not _usable(catalog, roles, kind, name):
                raise _missing(kind, name)
        if find(catalog, need.kind, need.name) is None:
            raise _missing(need.kind, need.name)
        have = held(catalog, roles, need.kind, need.name)
        if have & set(need.any_of):
            continue
        # Roles are no secret (SHOW ROLES lists them all), nor is the account.
        if not have and need.kind not in ("ACCOUNT", "ROLE"):
            raise _missing(need.kind, need.name)
        raise insufficient(need, roles)


def may_know_absence(catalog: Catalog, principal: Principal, kind: str, name: str) -> bool:
    """Whether telling the principal that an object does not exist (DROP ... IF EXISTS succeeding)
    says nothing it could not learn anyway: it can list the object's container, or all of its kind."""
    roles = active_roles(catalog, principal)
    if kind in ("USER", "ROLE", "DATABASE", "INTEGRATION"):
        # Account-level objects: SHOW lists only the visible ones, so only a role that may create
        # (or grant on) them all may learn that one is absent.
        return bool(held(catalog, roles, "ACCOUNT", "") & {"MANAGE GRANTS", f"CREATE {kind}"})
    return all(_usable(catalog, roles, k, n) for k, n in containers(kind, name))


def allowed(catalog: Catalog, principal: Principal, *needs: Need) -> bool:
    """Whether ``authorize`` would let the needs pass."""
    try:
        authorize(catalog, principal, *needs)
    except (ObjectNotFound, PermissionDenied):
        return False
    return True


Check = Callable[[Need], None]
"""One principal's ``authorize``, as the query engine gets it: raises unless the need is met."""


def passes(check: Check, need: Need) -> bool:
    """Whether ``check`` lets ``need`` through (refused or unknown: False)."""
    try:
        check(need)
    except (ObjectNotFound, PermissionDenied):
        return False
    return True


def function_name(name_parts: Sequence[str], defaults: Defaults) -> str | None:
    """DB.SCHEMA.F for a call's one to three name parts, completed with the defaults; None for
    more parts than a function name has."""
    parts = list(name_parts)
    if not 1 <= len(parts) <= 3:
        return None
    while len(parts) < 3:
        parts.insert(0, defaults.schema if len(parts) == 1 else defaults.database)
    return join_parts(*parts)


def resolve_function(
    catalog: Catalog, check: Check, name_parts: Sequence[str], arg_count: int | None, defaults: Defaults
) -> list[ExternalFunction]:
    """The overloads of a function name, with ``arg_count`` arguments (None: any), that ``check``'s
    principal may call: USAGE or OWNERSHIP on the function, and USAGE on its database and schema
    (``authorize``'s rule). ``name_parts`` are one to three identifiers as the catalog spells them
    (upper-cased unless they were quoted). Sorted by signature; empty when the principal may call
    none, whether or not any exists (the caller says "does not exist or not authorized")."""
    base = function_name(name_parts, defaults)
    return [
        fn
        for signature, fn in sorted(catalog.all(ExternalFunction).items())
        if fn.function_name == base
        and (arg_count is None or len(fn.args) == arg_count)
        and passes(check, Need("FUNCTION", signature, ("USAGE", "OWNERSHIP")))
    ]


def insufficient(need: Need, roles: Iterable[str]) -> PermissionDenied:
    """Snowflake's 003001 for ``need``, with what would have sufficed."""
    kind = NAMES.get(need.kind, need.kind.lower())
    short = own_name(need.kind, need.name)
    where = f"{kind} '{short}'" if need.kind != "ACCOUNT" else "account"
    target = f"{kind} {need.name}" if need.name else "the account"
    return PermissionDenied(
        f"SQL access control error:\nInsufficient privileges to operate on {where}.\n"
        f"It takes {' or '.join(need.any_of)} on {target}; the active roles are "
        f"{', '.join(sorted(roles))}."
    )
