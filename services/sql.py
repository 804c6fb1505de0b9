"""Executes `floe sql` statements: DDL against the catalog, queries through the query engine."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

import redis

from floe.aws import client as aws_client
from floe.catalog import (
    ADMIN_ROLE,
    BUILTIN_ROLES,
    PIPE_PRIVILEGES,
    Catalog,
    CatalogObject,
    CopySpec,
    FileFormat,
    Pipe,
    Role,
    Stage,
    Table,
    User,
    now_ms,
)
from floe.catalog.access import (
    KEY_PROPERTIES,
    AlterUser,
    CreateRole,
    CreateUser,
    DescribeUser,
    DropRole,
    DropUser,
    GrantPrivileges,
    GrantRole,
    RevokePrivileges,
    RevokeRole,
    ShowGrantsOnPipe,
    ShowGrantsToRole,
    ShowGrantsToUser,
    ShowRoles,
    ShowUsers,
)
from floe.catalog.ddl import (
    AlterPipe,
    CreatePipe,
    CreateStage,
    CreateTable,
    Defaults,
    Describe,
    Drop,
    Query,
    Show,
    Statement,
    parse,
)
from floe.errors import CompilationError, ObjectNotFound, SqlError
from floe.keypair import InvalidKey, fingerprint, load_public_key, public_key_body
from floe.keys import Keys
from floe.patterns import like_matcher
from floe.settings import Settings
from services.auth import Principal, require_admin, require_pipe_privilege
from services.dedup import Deduper, retire_pipe
from services.query import QueryEngine, Result
from services.queues import configure_bucket, ensure_queues

log = logging.getLogger("floe.sql")


def _created(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(sep=" ", timespec="milliseconds")


def _status(text: str) -> Result:
    return Result(["STATUS"], [[text]])


def _like(rows: list[dict[str, Any]], like: str | None) -> list[dict[str, Any]]:
    """Rows whose name matches a SHOW ... LIKE pattern (% and _ wildcards, case-insensitive)."""
    if like is None:
        return rows
    # Not a regex: a backtracking `.*` per % froze the API (issue 9); like_matcher is O(n*m).
    match = like_matcher(like)
    return [r for r in rows if match(str(r["name"]))]


def _table(columns: list[str], rows: list[dict[str, Any]]) -> Result:
    return Result(columns, [[r[c] for c in columns] for r in rows])


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


USER_COLUMNS = [
    "name",
    "created_on",
    "default_role",
    "has_rsa_public_key",
    "rsa_public_key_fp",
    "rsa_public_key_2_fp",
]
ROLE_COLUMNS = ["created_on", "name", "assigned_to_users", "granted_to_roles", "granted_roles", "owner"]
GRANT_COLUMNS = ["created_on", "privilege", "granted_on", "name", "granted_to", "grantee_name"]
USER_GRANT_COLUMNS = ["created_on", "role", "granted_to", "grantee_name"]


class SqlExecutor:
    """One instance per API process."""

    def __init__(self, settings: Settings, client: redis.Redis[bytes]) -> None:
        self.settings = settings
        self.redis = client
        self.keys = Keys(settings.redis.prefix)
        self.catalog = Catalog(client, self.keys)
        self.defaults = Defaults(settings.database, settings.schema_name)
        self._queue_arn: str | None = None
        self.engine = QueryEngine(settings, client, self.catalog, self.queue_arn)

    def queue_arn(self) -> str:
        """ARN of Floe's ingest queue (created on first use)."""
        if self._queue_arn is None:
            self._queue_arn = ensure_queues(aws_client(self.settings.aws, "sqs"), self.settings)[1]
        return self._queue_arn

    def execute(self, sql: str, principal: Principal) -> Result:
        """Run one statement as ``principal``; PermissionDenied if its roles may not."""
        stmt = parse(sql, self.defaults)
        handler: dict[type, Callable[[Any, Principal], Result]] = {
            CreateStage: lambda s, _: self._create_stage(s),
            CreateTable: lambda s, _: self._create_table(s),
            CreatePipe: self._create_pipe,
            Show: lambda s, _: self._show(s),
            Describe: lambda s, _: self._describe(s),
            Drop: self._drop,
            AlterPipe: self._alter_pipe,
            Query: lambda q, _: self.engine.run(q.expression),
            CreateUser: self._create_user,
            AlterUser: self._alter_user,
            DropUser: self._drop_user,
            CreateRole: self._create_role,
            DropRole: self._drop_role,
            GrantRole: self._grant_role,
            RevokeRole: self._revoke_role,
            GrantPrivileges: self._grant_privileges,
            RevokePrivileges: self._revoke_privileges,
            ShowUsers: self._show_users,
            ShowRoles: self._show_roles,
            ShowGrantsToRole: self._show_grants_to_role,
            ShowGrantsToUser: self._show_grants_to_user,
            ShowGrantsOnPipe: self._show_grants_on_pipe,
            DescribeUser: self._describe_user,
        }
        return handler[type(stmt)](stmt, principal)

    def _exists(self, model: type[CatalogObject], name: str, stmt: Statement) -> Result | None:
        if self.catalog.find(model, name) is None:
            return None
        if getattr(stmt, "if_not_exists", False):
            return _status(f"{name.split('.')[-1]} already exists, statement succeeded.")
        if not getattr(stmt, "replace", False):
            raise SqlError(f"Object '{name}' already exists.", code="002002", sql_state="42710")
        return None

    def _create_stage(self, s: CreateStage) -> Result:
        name = str(s.name)
        if (done := self._exists(Stage, name, s)) is not None:
            return done
        FileFormat().merged(s.file_format)
        self.catalog.put(Stage(name=name, url=s.url, file_format=s.file_format, created_ms=now_ms()))
        return _status(f"Stage area {s.name.name} successfully created.")

    def _create_table(self, s: CreateTable) -> Result:
        name = str(s.name)
        if (done := self._exists(Table, name, s)) is not None:
            return done
        self.catalog.put(Table(name=name, columns=s.columns, created_ms=now_ms()))
        return _status(f"Table {s.name.name} successfully created.")

    def _create_pipe(self, s: CreatePipe, principal: Principal) -> Result:
        name = str(s.name)
        if (done := self._exists(Pipe, name, s)) is not None:
            return done
        old = self.catalog.find(Pipe, name)
        if old is not None:
            require_pipe_privilege(self.catalog, principal, old, any_of=("OWNERSHIP",), action="replace")
        stage = self.catalog.get(Stage, str(s.stage))
        table = self.catalog.get(Table, str(s.table))
        targets = s.columns if s.columns is not None else [c.name for c in table.columns]
        for col in targets:
            if col not in {c.name for c in table.columns}:
                raise CompilationError(f"invalid identifier '{col}'", code="000904")
        if s.select is not None and s.columns is None and len(s.select) > len(table.columns):
            raise CompilationError(
                f"Insert value list does not match column list expecting {len(table.columns)} "
                f"but got {len(s.select)}",
                code="002020",
            )
        fmt = FileFormat().merged(stage.file_format).merged(s.file_format)
        spec = CopySpec(
            table=str(s.table),
            columns=s.columns,
            select=s.select,
            stage=str(s.stage),
            path=s.path,
            file_format=fmt,
            on_error=s.on_error,
            on_error_limit=s.on_error_limit,
            pattern=s.pattern,
            sql=s.copy_sql,
        )
        pipe = Pipe(
            name=name,
            auto_ingest=s.auto_ingest,
            copy_spec=spec,
            table_id=table.id,
            stage_url=stage.url,
            # A replaced pipe keeps its owner as it keeps its grants (docs/decisions.md).
            owner=old.owner if old is not None else self._owner_for(principal),
            created_ms=now_ms(),
            comment=s.comment,
        )
        if pipe.auto_ingest and self.settings.auto_configure_notifications:
            self._configure_notifications(pipe.bucket, extra=pipe, without=old)
        self.catalog.put(pipe)
        if old is not None:
            self._forget_pipe(old, successor=pipe)
        return _status(f"Pipe {s.name.name} successfully created.")

    def _owner_for(self, principal: Principal) -> str:
        """The role that owns a pipe the principal creates."""
        if principal.is_admin:
            return ADMIN_ROLE
        user = self.catalog.find(User, principal.user)
        if user is not None and user.default_role is not None and user.default_role in principal.roles:
            return user.default_role
        granted = user.roles if user is not None else sorted(principal.roles)
        return next((r for r in granted if r != "PUBLIC" and r in principal.roles), "PUBLIC")

    def _configure_notifications(
        self, bucket: str, extra: Pipe | None = None, without: Pipe | None = None
    ) -> None:
        pipes = [p for p in self.catalog.all(Pipe).values() if without is None or p.name != without.name]
        if extra is not None:
            pipes.append(extra)
        s3 = aws_client(self.settings.aws, "s3")
        try:
            configure_bucket(s3, bucket, self.queue_arn(), pipes)
        except s3.exceptions.NoSuchBucket as exc:
            raise SqlError(
                f"Stage bucket '{bucket}' does not exist; create it first (aws s3 mb s3://{bucket}).",
                code="091003",
            ) from exc

    def _forget_pipe(self, pipe: Pipe, successor: Pipe | None = None) -> None:
        """Retire a pipe incarnation, then drop its queue, file states and history.

        Its committed blobs stay in the table. Files still queued go to the successor of a
        CREATE OR REPLACE when it reads the same stage and would accept them, so a file notified
        before the replacement is neither lost nor loaded twice (docs/decisions.md).
        """
        queued = retire_pipe(self.redis, self.keys, pipe.id)
        if successor is not None and queued:
            carried = [f for f in queued if _accepts(successor, pipe, f.path)]
            if carried:
                Deduper(self.redis, self.keys, self.settings.retention_seconds).enqueue(
                    successor, carried, source="replace"
                )
            if len(carried) < len(queued):
                log.warning(
                    "%d files queued for the replaced pipe are outside its successor's stage or PATTERN "
                    "and were not carried over",
                    len(queued) - len(carried),
                    extra={"pipe": pipe.name},
                )
            log.info("%d queued files carried over to the new pipe", len(carried), extra={"pipe": pipe.name})
        keep = {self.keys.blobs(pipe.id), self.keys.retired(pipe.id)}
        batch: list[bytes] = []
        for key in self.redis.scan_iter(match=self.keys.pipe_pattern(pipe.id), count=1000):
            if key.decode() not in keep:
                batch.append(key)
            if len(batch) >= 1000:
                self.redis.delete(*batch)
                batch = []
        if batch:
            self.redis.delete(*batch)

    def _show(self, s: Show) -> Result:
        rows: list[dict[str, Any]] = []
        if s.kind == "STAGE":
            for st in self.catalog.all(Stage).values():
                db, schema, name = st.name.split(".")
                rows.append(
                    {
                        "created_on": _created(st.created_ms),
                        "name": name,
                        "database_name": db,
                        "schema_name": schema,
                        "url": st.url,
                        "has_credentials": "N",
                        "type": "EXTERNAL",
                        "region": self.settings.aws.region,
                    }
                )
        elif s.kind == "TABLE":
            for t in self.catalog.all(Table).values():
                db, schema, name = t.name.split(".")
                blobs = self.engine.manifest(t)
                rows.append(
                    {
                        "created_on": _created(t.created_ms),
                        "name": name,
                        "database_name": db,
                        "schema_name": schema,
                        "kind": "TABLE",
                        "rows": sum(b["rows"] for b in blobs),
                        "bytes": sum(b["bytes"] for b in blobs),
                        "owner": ADMIN_ROLE,
                    }
                )
        else:
            rows = [self._pipe_row(p) for p in self.catalog.all(Pipe).values()]
        rows = _like(rows, s.like)
        rows.sort(key=lambda r: str(r["name"]))
        columns = list(rows[0].keys()) if rows else self._show_columns(s.kind)
        return Result(columns, [[r[c] for c in columns] for r in rows])

    @staticmethod
    def _show_columns(kind: str) -> list[str]:
        return {
            "STAGE": [
                "created_on",
                "name",
                "database_name",
                "schema_name",
                "url",
                "has_credentials",
                "type",
                "region",
            ],
            "TABLE": ["created_on", "name", "database_name", "schema_name", "kind", "rows", "bytes", "owner"],
            "PIPE": [
                "created_on",
                "name",
                "database_name",
                "schema_name",
                "definition",
                "owner",
                "notification_channel",
                "comment",
                "pattern",
                "execution_state",
            ],
        }[kind]

    def _pipe_row(self, p: Pipe) -> dict[str, Any]:
        db, schema, name = p.name.split(".")
        return {
            "created_on": _created(p.created_ms),
            "name": name,
            "database_name": db,
            "schema_name": schema,
            "definition": p.copy_spec.sql,
            "owner": p.owner,
            "notification_channel": self.queue_arn() if p.auto_ingest else None,
            "comment": p.comment or "",
            "pattern": p.copy_spec.pattern,
            "execution_state": "PAUSED" if p.paused else "RUNNING",
        }

    def _describe(self, s: Describe) -> Result:
        name = str(s.name)
        if s.kind == "PIPE":
            row = self._pipe_row(self.catalog.get(Pipe, name))
            return Result(list(row), [list(row.values())])
        if s.kind == "TABLE":
            t = self.catalog.get(Table, name)
            cols = ["name", "type", "kind", "null?"]
            return Result(
                cols, [[c.name, c.sql_type, "COLUMN", "Y" if c.nullable else "N"] for c in t.columns]
            )
        st = self.catalog.get(Stage, name)
        return Result(
            ["property", "value"],
            [["URL", st.url], *[[k.upper(), str(v)] for k, v in st.file_format.items()]],
        )

    def _drop(self, s: Drop, principal: Principal) -> Result:
        name = str(s.name)
        kinds: dict[str, type[CatalogObject]] = {"STAGE": Stage, "TABLE": Table, "PIPE": Pipe}
        model = kinds[s.kind]
        if model is Pipe and (pipe := self.catalog.find(Pipe, name)) is not None:
            require_pipe_privilege(self.catalog, principal, pipe, any_of=("OWNERSHIP",), action="drop")
        removed = self.catalog.delete(model, name)
        if removed is None:
            if s.if_exists:
                return _status(f"Drop statement executed successfully ({s.name.name} already dropped).")
            self.catalog.get(model, name)  # raises the Snowflake-style "does not exist" error
        if isinstance(removed, Pipe):
            self._revoke_all(removed.name)
            self._forget_pipe(removed)
            if removed.auto_ingest and self.settings.auto_configure_notifications:
                try:
                    self._configure_notifications(removed.bucket)
                except SqlError as exc:
                    log.warning("could not update notifications of %s: %s", removed.bucket, exc)
        return _status(f"{s.name.name} successfully dropped.")

    def _alter_pipe(self, s: AlterPipe, principal: Principal) -> Result:
        pipe = self.catalog.get(Pipe, str(s.name))
        require_pipe_privilege(
            self.catalog, principal, pipe, any_of=("OPERATE", "OWNERSHIP"), action="operate"
        )
        self.catalog.put(pipe.model_copy(update={"paused": s.paused}))
        return _status("Statement executed successfully.")

    # ------------------------------------------------------------------ users, roles and grants

    def _require_role(self, name: str) -> None:
        if name not in BUILTIN_ROLES and self.catalog.find(Role, name) is None:
            raise ObjectNotFound("role", name)

    def _grantee(self, name: str) -> Role:
        """The role that receives pipe grants; built-in roles get a catalog entry on first grant."""
        role = self.catalog.find(Role, name)
        if role is not None:
            return role
        if name in BUILTIN_ROLES:
            return Role(name=name)
        raise ObjectNotFound("role", name)

    def _set_grants(self, role: Role, pipe: str, privileges: list[str]) -> None:
        # Copy: the catalog's cached objects must not change before the write is committed.
        grants = dict(role.grants)
        if privileges:
            grants[pipe] = [p for p in PIPE_PRIVILEGES if p in privileges]
        else:
            grants.pop(pipe, None)
        self.catalog.put(role.model_copy(update={"grants": grants}))

    def _revoke_all(self, pipe: str) -> None:
        """Remove every role's grants on a pipe."""
        for role in list(self.catalog.all(Role).values()):
            if pipe in role.grants:
                self._set_grants(role, pipe, [])

    def _forget_role(self, name: str) -> None:
        """Take a dropped role away from its users; its pipes go to ACCOUNTADMIN, as in Snowflake."""
        for user in list(self.catalog.all(User).values()):
            if name in user.roles:
                roles = [r for r in user.roles if r != name]
                self.catalog.put(user.model_copy(update={"roles": roles}))
        for pipe in list(self.catalog.all(Pipe).values()):
            if pipe.owner == name:
                self.catalog.put(pipe.model_copy(update={"owner": ADMIN_ROLE}))

    def _create_user(self, s: CreateUser, principal: Principal) -> Result:
        require_admin(principal, "create users")
        if self.catalog.find(User, s.name) is not None:
            if s.if_not_exists:
                return _status(f"{s.name} already exists, statement succeeded.")
            if not s.replace:
                raise SqlError(f"Object '{s.name}' already exists.", code="002002", sql_state="42710")
        if s.default_role is not None:
            self._require_role(s.default_role)
        key = _key_body("RSA_PUBLIC_KEY", s.rsa_public_key) if s.rsa_public_key is not None else None
        key2 = _key_body("RSA_PUBLIC_KEY_2", s.rsa_public_key_2) if s.rsa_public_key_2 is not None else None
        # OR REPLACE makes a new user, so the old one's role grants go with it (as in Snowflake).
        self.catalog.put(
            User(
                name=s.name,
                rsa_public_key=key,
                rsa_public_key_2=key2,
                default_role=s.default_role,
                created_ms=now_ms(),
            )
        )
        return _status(f"User {s.name} successfully created.")

    def _alter_user(self, s: AlterUser, principal: Principal) -> Result:
        # Key rotation is self-service; anything else about a user is the administrator's.
        if s.name != principal.user or not set(s.properties) <= set(KEY_PROPERTIES):
            action = (
                f"alter user '{s.name}' beyond its own RSA_PUBLIC_KEY and RSA_PUBLIC_KEY_2"
                if s.name == principal.user
                else f"alter user '{s.name}'"
            )
            require_admin(principal, action)
        user = self.catalog.find(User, s.name)
        if user is None:
            if s.if_exists:
                return _status("Statement executed successfully.")
            raise ObjectNotFound("user", s.name)
        update: dict[str, str | None] = {}
        for prop, value in s.properties.items():
            if prop in KEY_PROPERTIES:
                update[prop.lower()] = None if value is None else _key_body(prop, value)
            elif prop == "DEFAULT_ROLE":
                if value is not None:
                    self._require_role(value)
                update["default_role"] = value
        if update:
            self.catalog.put(user.model_copy(update=update))
        return _status("Statement executed successfully.")

    def _drop_user(self, s: DropUser, principal: Principal) -> Result:
        require_admin(principal, "drop users")
        if self.catalog.delete(User, s.name) is None:
            if s.if_exists:
                return _status(f"Drop statement executed successfully ({s.name} already dropped).")
            raise ObjectNotFound("user", s.name)
        return _status(f"{s.name} successfully dropped.")

    def _create_role(self, s: CreateRole, principal: Principal) -> Result:
        require_admin(principal, "create roles")
        exists = s.name in BUILTIN_ROLES or self.catalog.find(Role, s.name) is not None
        if exists and s.if_not_exists:
            return _status(f"{s.name} already exists, statement succeeded.")
        if s.name in BUILTIN_ROLES:
            raise CompilationError(
                f"Role '{s.name}' is built in ({', '.join(BUILTIN_ROLES)}); it cannot be created, "
                "replaced or dropped.",
                code="002002",
                sql_state="42710",
            )
        if exists:
            if not s.replace:
                raise SqlError(f"Object '{s.name}' already exists.", code="002002", sql_state="42710")
            # OR REPLACE is DROP + CREATE: grants on the old role and its place in users go with it.
            self._forget_role(s.name)
        self.catalog.put(Role(name=s.name, created_ms=now_ms()))
        return _status(f"Role {s.name} successfully created.")

    def _drop_role(self, s: DropRole, principal: Principal) -> Result:
        require_admin(principal, "drop roles")
        if s.name in BUILTIN_ROLES:
            raise CompilationError(
                f"Role '{s.name}' is built in ({', '.join(BUILTIN_ROLES)}); it cannot be created, "
                "replaced or dropped."
            )
        if self.catalog.delete(Role, s.name) is None:
            if s.if_exists:
                return _status(f"Drop statement executed successfully ({s.name} already dropped).")
            raise ObjectNotFound("role", s.name)
        self._forget_role(s.name)
        return _status(f"{s.name} successfully dropped.")

    def _grant_role(self, s: GrantRole, principal: Principal) -> Result:
        require_admin(principal, "grant roles")
        self._require_role(s.role)
        user = self.catalog.get(User, s.user)
        if s.role not in user.roles:
            self.catalog.put(user.model_copy(update={"roles": [*user.roles, s.role]}))
        return _status("Statement executed successfully.")

    def _revoke_role(self, s: RevokeRole, principal: Principal) -> Result:
        require_admin(principal, "revoke roles")
        self._require_role(s.role)
        user = self.catalog.get(User, s.user)
        if s.role in user.roles:
            self.catalog.put(user.model_copy(update={"roles": [r for r in user.roles if r != s.role]}))
        return _status("Statement executed successfully.")

    def _grant_privileges(self, s: GrantPrivileges, principal: Principal) -> Result:
        require_admin(principal, "grant privileges")
        pipe = self.catalog.get(Pipe, str(s.pipe))
        if s.privileges == ["OWNERSHIP"]:
            self._require_role(s.role)
            if s.current_grants == "REVOKE":
                self._revoke_all(pipe.name)
            self.catalog.put(pipe.model_copy(update={"owner": s.role}))
        else:
            role = self._grantee(s.role)
            self._set_grants(role, pipe.name, [*role.grants.get(pipe.name, []), *s.privileges])
        return _status("Statement executed successfully.")

    def _revoke_privileges(self, s: RevokePrivileges, principal: Principal) -> Result:
        require_admin(principal, "revoke privileges")
        if "OWNERSHIP" in s.privileges:
            raise CompilationError(
                "OWNERSHIP cannot be revoked; transfer it with GRANT OWNERSHIP ON PIPE <pipe> TO ROLE <role>."
            )
        pipe = self.catalog.get(Pipe, str(s.pipe))
        role = self._grantee(s.role)
        held = role.grants.get(pipe.name, [])
        if held:
            self._set_grants(role, pipe.name, [p for p in held if p not in s.privileges])
        return _status("Statement executed successfully.")

    def _show_users(self, s: ShowUsers, principal: Principal) -> Result:
        require_admin(principal, "show users")
        rows = [
            {
                "name": u.name,
                "created_on": _created(u.created_ms),
                "default_role": u.default_role,
                "has_rsa_public_key": "true" if u.rsa_public_key or u.rsa_public_key_2 else "false",
                "rsa_public_key_fp": _fingerprint(u.rsa_public_key),
                "rsa_public_key_2_fp": _fingerprint(u.rsa_public_key_2),
            }
            for u in self.catalog.all(User).values()
        ]
        return _table(USER_COLUMNS, sorted(_like(rows, s.like), key=lambda r: str(r["name"])))

    def _show_roles(self, s: ShowRoles, principal: Principal) -> Result:
        require_admin(principal, "show roles")
        users = list(self.catalog.all(User).values())
        # A built-in role is in the catalog only once something was granted to it.
        roles = {name: Role(name=name) for name in BUILTIN_ROLES} | self.catalog.all(Role)
        rows = [
            {
                "created_on": _created(r.created_ms) if r.created_ms else None,
                "name": r.name,
                "assigned_to_users": sum(r.name in u.roles for u in users),
                "granted_to_roles": 0,
                "granted_roles": 0,
                "owner": "" if r.name in BUILTIN_ROLES else ADMIN_ROLE,
            }
            for r in roles.values()
        ]
        return _table(ROLE_COLUMNS, sorted(_like(rows, s.like), key=lambda r: str(r["name"])))

    @staticmethod
    def _grant_row(privilege: str, pipe: Pipe, role: str, role_created_ms: int) -> dict[str, Any]:
        # Grants carry no timestamp of their own; neither can predate the pipe or the role.
        return {
            "created_on": _created(max(pipe.created_ms, role_created_ms)),
            "privilege": privilege,
            "granted_on": "PIPE",
            "name": pipe.name,
            "granted_to": "ROLE",
            "grantee_name": role,
        }

    def _show_grants_to_role(self, s: ShowGrantsToRole, principal: Principal) -> Result:
        require_admin(principal, "show grants")
        role = self._grantee(s.role)
        pipes = self.catalog.all(Pipe)
        rows = [
            self._grant_row("OWNERSHIP", p, role.name, role.created_ms)
            for p in pipes.values()
            if p.owner == role.name
        ]
        for name, privileges in role.grants.items():
            if name in pipes:  # skips grants on a pipe dropped meanwhile
                rows += [
                    self._grant_row(priv, pipes[name], role.name, role.created_ms) for priv in privileges
                ]
        rows.sort(key=lambda r: (r["name"], PIPE_PRIVILEGES.index(r["privilege"])))
        return _table(GRANT_COLUMNS, rows)

    def _show_grants_on_pipe(self, s: ShowGrantsOnPipe, principal: Principal) -> Result:
        require_admin(principal, "show grants")
        pipe = self.catalog.get(Pipe, str(s.pipe))
        roles = self.catalog.all(Role)
        owner = roles.get(pipe.owner)
        rows = [self._grant_row("OWNERSHIP", pipe, pipe.owner, owner.created_ms if owner else 0)]
        for role in roles.values():
            for priv in role.grants.get(pipe.name, []):
                rows.append(self._grant_row(priv, pipe, role.name, role.created_ms))
        rows.sort(key=lambda r: (PIPE_PRIVILEGES.index(r["privilege"]), r["grantee_name"]))
        return _table(GRANT_COLUMNS, rows)

    def _show_grants_to_user(self, s: ShowGrantsToUser, principal: Principal) -> Result:
        if s.user != principal.user:
            require_admin(principal, f"show the grants of user '{s.user}'")
        user = self.catalog.get(User, s.user)
        roles = self.catalog.all(Role)
        rows = []
        for name in user.roles:
            role = roles.get(name)
            rows.append(
                {
                    "created_on": _created(max(user.created_ms, role.created_ms if role else 0)),
                    "role": name,
                    "granted_to": "USER",
                    "grantee_name": user.name,
                }
            )
        return _table(USER_GRANT_COLUMNS, rows)

    def _describe_user(self, s: DescribeUser, principal: Principal) -> Result:
        if s.name != principal.user:
            require_admin(principal, f"describe user '{s.name}'")
        user = self.catalog.get(User, s.name)
        return Result(
            ["property", "value"],
            [
                ["NAME", user.name],
                ["DEFAULT_ROLE", user.default_role],
                ["RSA_PUBLIC_KEY_FP", _fingerprint(user.rsa_public_key)],
                ["RSA_PUBLIC_KEY_2_FP", _fingerprint(user.rsa_public_key_2)],
            ],
        )


def _accepts(successor: Pipe, old: Pipe, path: str) -> bool:
    """Whether a file queued for ``old`` is one ``successor`` would have been notified of."""
    return (
        successor.stage_url == old.stage_url
        and successor.relative_path(successor.object_key(path)) is not None
        and successor.matches(path)
    )
