"""Executes `floe sql` statements: DDL against the catalog, queries through the query engine.

Every statement checks its privileges through ``services.access.authorize`` before it changes or
reads anything; ``handlers`` names the method of each statement type, and each method begins with
its check. What each statement needs is Snowflake's rule (docs/architecture.md, "Access control").
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import logging
from collections.abc import Callable, Generator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from sqlglot import exp
from sqlglot.dialects.snowflake import Snowflake
from sqlglot.errors import TokenError
from sqlglot.tokenizer_core import TokenType

from floe.aws import AWS_ERRORS
from floe.aws import client as aws_client
from floe.catalog import (
    ADMIN_ROLE,
    ApiIntegration,
    Catalog,
    CatalogObject,
    CopySpec,
    Database,
    ExternalFunction,
    FileFormat,
    NamedFileFormat,
    NotificationIntegration,
    Pipe,
    Schema,
    Stage,
    StorageIntegration,
    Table,
    now_ms,
    split_s3_url,
)
from floe.catalog.access import UseRole, UseSecondaryRoles
from floe.catalog.alter_stage import AlterStage
from floe.catalog.alter_table import AddColumns, AlterTable
from floe.catalog.ddl import (
    FORMAT_NAME,
    PARSE_HEADER_ONLY,
    AlterFileFormat,
    AlterIntegration,
    AlterPipe,
    AlterPipeRefresh,
    CreateApiIntegration,
    CreateDatabase,
    CreateExternalFunction,
    CreateFileFormat,
    CreateIntegration,
    CreateNotificationIntegration,
    CreatePipe,
    CreateSchema,
    CreateStage,
    CreateTable,
    Defaults,
    Describe,
    DescribeObject,
    Drop,
    DropObject,
    Query,
    Show,
    ShowChannels,
    check_csv_format,
    parse,
    qualify,
)
from floe.catalog.internal import new_stage_url, stage_kind
from floe.catalog.locations import refusal
from floe.catalog.models import new_id
from floe.catalog.names import inside, join_parts, quote_part, split_parts
from floe.catalog.pipe_state import pipe_stopped
from floe.catalog.schema import TableStore, apply_change, describe_table
from floe.channels import ChannelStore
from floe.errors import CompilationError, ObjectNotFound, PermissionDenied, SqlError
from floe.keys import Keys, RedisClient, one_slot, scan_keys
from floe.metrics import FileFlow
from floe.settings import Settings
from services.access import (
    MODELS,
    Need,
    active_roles,
    allowed,
    authorize,
    closure,
    everything,
    find,
    may_know_absence,
    visible,
)
from services.auth import Principal
from services.backfill import LISTING_WINDOW, staged_pages
from services.dedup import Deduper, FileRef, PipeRetired, Refreshed, retire_pipe
from services.error_notifications import skip_past_events
from services.external_calls import pipe_functions
from services.grants import GrantStatements, already_exists, created, like, status
from services.infer_schema import SchemaInference
from services.pipe_lifecycle import (
    FORCE_RESUME,
    fixed_changes,
    fixed_error,
    force_resume,
    force_resume_options,
    pause_update,
)
from services.query import QueryEngine, Result, RowSink, send_result
from services.queues import configure_bucket, ensure_queues
from services.stages import StageFiles

try:
    FLOE_VERSION = version("floe")
except PackageNotFoundError:  # run from a checkout that was never installed
    FLOE_VERSION = "0.0.0"

log = logging.getLogger("floe.sql")

SYSADMIN = "SYSADMIN"
"""Owns the default database and schema, as it owns what administrators create in Snowflake."""

SHOW_COLUMNS: dict[str, list[str]] = {
    "DATABASE": ["created_on", "name", "owner", "comment"],
    "SCHEMA": ["created_on", "name", "database_name", "owner", "comment"],
    "INTEGRATION": ["name", "type", "category", "enabled", "comment", "created_on"],
    "STAGE": [
        "created_on",
        "name",
        "database_name",
        "schema_name",
        "url",
        "has_credentials",
        "storage_integration",
        "owner",
        "comment",
        "type",
        "region",
    ],
    "FILE_FORMAT": [
        "created_on",
        "name",
        "database_name",
        "schema_name",
        "type",
        "owner",
        "comment",
        "format_options",
    ],
    "TABLE": [
        "created_on",
        "name",
        "database_name",
        "schema_name",
        "kind",
        "comment",
        "rows",
        "bytes",
        "owner",
        "enable_schema_evolution",
    ],
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
        "error_integration",
        "execution_state",
        "backfill_interval",
    ],
    "FUNCTION": [
        "created_on",
        "name",
        "schema_name",
        "is_builtin",
        "is_aggregate",
        "is_ansi",
        "min_num_arguments",
        "max_num_arguments",
        "arguments",
        "description",
        "catalog_name",
        "is_table_function",
        "valid_for_clustering",
        "is_secure",
        "is_external_function",
        "language",
    ],
}
"""The columns of each SHOW, in Snowflake's order (of the ones Floe has)."""
MASKED = "********"
"""How DESC INTEGRATION shows an API key that is set: never the key, nor its length."""
CHANNEL_COLUMNS = [
    "created_on",
    "name",
    "database_name",
    "schema_name",
    "pipe_name",
    "table_name",
    "client_sequencer",
    "row_sequencer",
    "offset_token",
    "rows_inserted",
    "rows_error_count",
    "last_error_message",
]
"""SHOW CHANNELS' columns."""
REFRESH_COLUMNS = ["File", "Status"]
"""ALTER PIPE ... REFRESH's columns, as Snowflake names them: one row per file listed."""
REFRESH_WINDOW = LISTING_WINDOW
"""How far back ALTER PIPE ... REFRESH looks, by LAST_MODIFIED: Snowflake's 7 days (MODIFIED_AFTER's
default and its limit). Older files load with a bulk COPY in Snowflake; Floe has none."""


def _parts(name: str) -> tuple[str, ...]:
    return split_parts(name)


class SqlExecutor:
    """One instance per API process."""

    def __init__(self, settings: Settings, client: RedisClient, flow: FileFlow | None = None) -> None:
        self.settings = settings
        self.redis = client
        self.keys = Keys(settings.redis.prefix)
        self.refresher = Deduper(client, self.keys, settings.retention_seconds, flow)
        """Queues REFRESH's files, counted on the process's ``flow`` (the API's, when it serves)."""
        self.catalog = Catalog(client, self.keys)
        self.defaults = Defaults(settings.database, settings.schema_name)
        self._queue_arn: str | None = None
        self.engine = QueryEngine(settings, client, self.catalog, self.queue_arn)
        self.stage_files = StageFiles(settings, self.catalog, self.defaults, self.check_location)
        self.inference = SchemaInference(
            settings, self.catalog, self.defaults, self.stage_files, self.resolve_format
        )
        self.grants = GrantStatements(self.catalog, dropped=self.stage_files.dropped)
        self.channels = ChannelStore(client, self.keys, settings.streaming.max_pending_bytes_per_channel)
        self.ensure_namespaces()

    def queue_arn(self) -> str:
        """ARN of Floe's ingest queue (created on first use)."""
        if self._queue_arn is None:
            self._queue_arn = ensure_queues(aws_client(self.settings.aws, "sqs"), self.settings)[1]
        return self._queue_arn

    def ensure_namespaces(self) -> None:
        """The default database and schema, and one for every object stored before databases and
        schemas were objects, so an older catalog keeps working (those belong to ACCOUNTADMIN)."""
        default_db, default_schema = (
            self.defaults.database,
            join_parts(self.defaults.database, self.defaults.schema),
        )
        databases = {quote_part(default_db): SYSADMIN}
        schemas = {default_schema: SYSADMIN}
        placed: list[str] = [*self.catalog.all(Table), *self.catalog.all(Stage), *self.catalog.all(Pipe)]
        for name in placed:
            db, schema = _parts(name)[:2]
            databases.setdefault(quote_part(db), ADMIN_ROLE)
            schemas.setdefault(join_parts(db, schema), ADMIN_ROLE)
        for db, owner in databases.items():
            if self.catalog.find(Database, db) is None:
                self.catalog.put(Database(name=db, owner=owner, created_ms=now_ms()))
        for schema, owner in schemas.items():
            if self.catalog.find(Schema, schema) is None:
                self.catalog.put(Schema(name=schema, owner=owner, created_ms=now_ms()))

    def handlers(self) -> dict[type, Callable[[Any, Principal], Result]]:
        """Statement type -> the method that checks its privileges and runs it."""
        return {
            CreateDatabase: self._create_database,
            CreateSchema: self._create_schema,
            CreateIntegration: self._create_integration,
            CreateApiIntegration: self._create_api_integration,
            CreateNotificationIntegration: self._create_notification_integration,
            AlterIntegration: self._alter_integration,
            CreateExternalFunction: self._create_function,
            CreateStage: self._create_stage,
            AlterStage: self._alter_stage,
            CreateFileFormat: self._create_file_format,
            AlterFileFormat: self._alter_file_format,
            CreateTable: self._create_table,
            CreatePipe: self._create_pipe,
            Show: self._show,
            ShowChannels: self._show_channels,
            Describe: self._describe,
            DescribeObject: self._describe_object,
            Drop: self._drop,
            DropObject: self._drop_object,
            AlterPipe: self._alter_pipe,
            AlterPipeRefresh: self._refresh_pipe,
            AlterTable: self._alter_table,
            Query: self._query,
            UseRole: self._use_role,
            UseSecondaryRoles: self._use_secondary_roles,
            **self.grants.handlers(),
            **self.stage_files.handlers(),
        }

    def session_context(self, principal: Principal, query: exp.Expr) -> dict[str, str]:
        """What external functions' CONTEXT_HEADERS send, by CONTEXT_FUNCTIONS name: Floe's values
        of Snowflake's context functions for this statement ('' where Floe has no such thing)."""
        now = dt.datetime.now(dt.UTC)
        db, schema = self.defaults.database, self.defaults.schema
        return {
            "CURRENT_ACCOUNT": "FLOE",
            "CURRENT_CLIENT": "Floe",
            "CURRENT_DATABASE": db,
            "CURRENT_DATE": now.date().isoformat(),
            "CURRENT_IP_ADDRESS": "",
            "CURRENT_REGION": self.settings.aws.region,
            "CURRENT_ROLE": principal.owner_role,
            "CURRENT_SCHEMA": schema,
            "CURRENT_SCHEMAS": json.dumps([f"{db}.{schema}"]),
            "CURRENT_SESSION": "",
            # A header value is one line: the statement's whitespace runs become single spaces.
            "CURRENT_STATEMENT": " ".join(query.sql("snowflake").split()),
            "CURRENT_TIME": now.time().isoformat(),
            "CURRENT_TIMESTAMP": now.isoformat(),
            "CURRENT_TRANSACTION": "",
            "CURRENT_USER": principal.user,
            "CURRENT_VERSION": FLOE_VERSION,
            "CURRENT_WAREHOUSE": "",
        }

    def execute(
        self, sql: str, principal: Principal, role: str | None = None, sink: RowSink | None = None
    ) -> Result:
        """Run the statements in ``sql`` (one, or several separated by ';') as ``principal``, acting
        as ``role`` when given. They form one session: USE ROLE and USE SECONDARY ROLES hold for
        the statements after them. The answer is the last statement's.

        With a ``sink``, the last statement's answer goes to it: a query's rows page by page as the
        sink takes them (``QueryEngine.run``; the Result returned then has no rows), any other
        statement's rows at once, in pages too."""
        if role is not None:
            principal = self.use_role(principal, role)
        handlers = self.handlers()
        result: Result | None = None
        texts = statements(sql)
        for n, text in enumerate(texts, 1):
            stmt = parse(text, self.defaults)
            if isinstance(stmt, UseRole):
                principal = self.use_role(principal, stmt.role)
            elif isinstance(stmt, UseSecondaryRoles):
                principal = principal.acting_as(None, secondary=stmt.all)
            if sink is not None and n == len(texts) and isinstance(stmt, Query):
                return self._query(stmt, principal, sink)
            if sink is not None and n == len(texts) and isinstance(stmt, AlterPipeRefresh):
                return self._refresh_pipe(stmt, principal, sink)
            result = handlers[type(stmt)](stmt, principal)
        if result is None:
            raise CompilationError("empty SQL statement")
        if sink is not None:
            limits = self.settings.query
            send_result(sink, result, limits.page_rows, limits.timeout_s)
        return result

    def _query(self, q: Query, principal: Principal, sink: RowSink | None = None) -> Result:
        """A query, checked table by table as the engine reads them; streamed into ``sink`` if given."""
        expression = self._force_resumes(q.expression, principal)
        expression = self.inference.inline(expression, principal)  # TABLE(INFER_SCHEMA(...)): its rows
        context = self.session_context(principal, expression)
        return self.engine.run(expression, self._check(principal), context, sink)

    def _force_resumes(self, query: exp.Expr, principal: Principal) -> exp.Expr:
        """Run the query's SYSTEM$PIPE_FORCE_RESUME calls (OPERATE or OWNERSHIP on the pipe), each
        replaced by its answer, before the engine sees the query: a SELECT that changes a pipe is a
        statement of the executor's, not a read of the engine's."""
        calls = [c for c in query.find_all(exp.Anonymous) if c.name.upper() == FORCE_RESUME]
        if not calls:
            return query
        query = query.copy()
        for call in [c for c in query.find_all(exp.Anonymous) if c.name.upper() == FORCE_RESUME]:
            args = call.expressions
            if not 1 <= len(args) <= 2 or not all(isinstance(a, exp.Literal) and a.is_string for a in args):
                raise CompilationError(
                    f"{FORCE_RESUME} takes the pipe's name and, optionally, its overrides, as string "
                    f"literals: {FORCE_RESUME}('<pipe>'[, 'STALENESS_CHECK_OVERRIDE, "
                    "OWNERSHIP_TRANSFER_CHECK_OVERRIDE'])"
                )
            overrides = force_resume_options(str(args[1].this) if len(args) == 2 else None)
            name = str(qualify(str(args[0].this), self.defaults))
            self._authorize(principal, Need("PIPE", name, ("OPERATE", "OWNERSHIP")))
            pipe = self.catalog.get(Pipe, name)
            update, answer = force_resume(pipe, overrides, now_ms(), self.settings.retention_seconds * 1000)
            if update:
                self.catalog.put(pipe.model_copy(update=update))
            call.replace(exp.Literal.string(answer))
        return query

    def use_role(self, principal: Principal, role: str) -> Principal:
        """``principal`` acting as ``role``, which must be granted to its user (directly or through
        other roles)."""
        name = role if role.startswith('"') else role.upper()
        name = name.strip('"')
        if name not in closure(self.catalog, principal.roles):
            raise SqlError(
                f"Requested role '{name}' is not assigned to the executing user. Specify another role to "
                "activate.",
                code="003013",
                sql_state="42501",
            )
        return principal.acting_as(name)

    def _authorize(self, principal: Principal, *needs: Need) -> None:
        authorize(self.catalog, principal, *needs)

    def _check(self, principal: Principal) -> Callable[[Need], None]:
        """What the query engine calls for each table, pipe and load history a query reads."""
        return lambda need: authorize(self.catalog, principal, need)

    def _creating(self, principal: Principal, kind: str, schema: str) -> None:
        """USAGE and CREATE <kind> on the schema a new object goes into."""
        self._authorize(
            principal, Need("SCHEMA", schema, ("USAGE",)), Need("SCHEMA", schema, (f"CREATE {kind}",))
        )

    def _existing(
        self, principal: Principal, kind: str, name: str, stmt: Any
    ) -> tuple[CatalogObject | None, Result | None]:
        """The object a CREATE would replace, and the answer when IF NOT EXISTS means nothing to do.
        (``_replacing`` checked the OWNERSHIP that replacing needs.)"""
        old = find(self.catalog, kind, name)
        if old is None:
            return None, None
        if getattr(stmt, "if_not_exists", False):
            return old, status(f"{_parts(name)[-1]} already exists, statement succeeded.")
        if not getattr(stmt, "replace", False):
            raise already_exists(name)
        return old, None

    def _replacing(self, principal: Principal, kind: str, name: str, stmt: Any) -> None:
        """OR REPLACE of an existing object needs its OWNERSHIP (checked first: the most specific
        refusal), besides what creating it needs."""
        if getattr(stmt, "replace", False) and find(self.catalog, kind, name) is not None:
            self._authorize(principal, Need(kind, name, ("OWNERSHIP",)))

    # ------------------------------------------------------------------ databases and schemas

    def _create_database(self, s: CreateDatabase, principal: Principal) -> Result:
        self._replacing(principal, "DATABASE", s.name, s)
        self._authorize(principal, Need("ACCOUNT", "", ("CREATE DATABASE",)))
        old, done = self._existing(principal, "DATABASE", s.name, s)
        if done is not None:
            return done
        if old is not None:
            self._drop_namespace("DATABASE", s.name)
        owner = principal.owner_role
        when = now_ms()
        self.catalog.put(Database(name=s.name, owner=owner, created_ms=when, comment=s.comment))
        # Snowflake gives every new database a PUBLIC schema, owned by the database's owner.
        self.catalog.put(Schema(name=join_parts(*_parts(s.name), "PUBLIC"), owner=owner, created_ms=when))
        return status(f"Database {s.name} successfully created.")

    def _create_schema(self, s: CreateSchema, principal: Principal) -> Result:
        database = quote_part(_parts(s.name)[0])
        self._replacing(principal, "SCHEMA", s.name, s)
        self._authorize(
            principal, Need("DATABASE", database, ("USAGE",)), Need("DATABASE", database, ("CREATE SCHEMA",))
        )
        old, done = self._existing(principal, "SCHEMA", s.name, s)
        if done is not None:
            return done
        if old is not None:
            self._drop_namespace("SCHEMA", s.name)
        self.catalog.put(
            Schema(name=s.name, owner=principal.owner_role, created_ms=now_ms(), comment=s.comment)
        )
        return status(f"Schema {_parts(s.name)[-1]} successfully created.")

    def _drop_namespace(self, kind: str, name: str) -> None:
        """Drop a database or schema and everything in it (Snowflake's DROP ... CASCADE)."""
        for pipe in [p for n, p in self.catalog.all(Pipe).items() if inside(n, name)]:
            self._remove_pipe(pipe)
        for model in (Stage, Table, ExternalFunction) + ((Schema,) if kind == "DATABASE" else ()):
            for obj_name, obj in [(n, o) for n, o in self.catalog.all(model).items() if inside(n, name)]:
                self.catalog.delete(model, obj_name)
                self.stage_files.dropped(obj)  # an internal stage's files, a table's stage's
        self.catalog.delete(Database if kind == "DATABASE" else Schema, name)
        self.grants.revoke_all_under(name)

    def _drop_object(self, s: DropObject, principal: Principal) -> Result:
        short = _short(s.kind, s.name)
        if not self.grants.target(principal, s.kind, s.name, s.if_exists):
            return status(f"Drop statement executed successfully ({short} already dropped).")
        if s.kind == "INTEGRATION":
            integration = self._integration(s.name, s.family, "DROP")
            # Functions and stages stay: they fail when used, as in Snowflake (and work again if
            # an integration of the name comes back). The log says which.
            if isinstance(integration, ApiIntegration):
                users = [
                    f.name for f in self.catalog.all(ExternalFunction).values() if f.integration == s.name
                ]
                effect = "functions %s can no longer be called"
            elif isinstance(integration, NotificationIntegration):
                users = [p.name for p in self.catalog.all(Pipe).values() if p.error_integration == s.name]
                effect = "pipes %s send no error notifications"
            else:
                users = [
                    st.name for st in self.catalog.all(Stage).values() if st.storage_integration == s.name
                ]
                effect = "stages %s can no longer load"
            self.catalog.delete(type(integration), s.name)
            self.grants.revoke_all("INTEGRATION", s.name)
            if users:
                log.warning("integration %s dropped; " + effect, s.name, ", ".join(sorted(users)))
        elif s.kind == "FUNCTION":
            self.catalog.delete(ExternalFunction, s.name)
            self.grants.revoke_all("FUNCTION", s.name)
        else:
            self._drop_namespace(s.kind, s.name)
        return status(f"{short} successfully dropped.")

    # ------------------------------------------------------------------------- integrations

    def _integration(
        self, name: str, family: str | None, verb: str
    ) -> StorageIntegration | ApiIntegration | NotificationIntegration:
        """The integration ``name`` (the caller has authorized), of the kind the statement names."""
        found = find(self.catalog, "INTEGRATION", name)
        if not isinstance(found, StorageIntegration | ApiIntegration | NotificationIntegration):
            raise ObjectNotFound("integration", name)
        kind = _integration_kind(found)
        if family is not None and family != kind:
            raise CompilationError(
                f"Integration '{name}' is {_INTEGRATION_NOUN[kind]}, not {_INTEGRATION_NOUN[family]}; "
                f"{verb} {kind} INTEGRATION {name} (or {verb} INTEGRATION {name})"
            )
        return found

    def _refuse_other_kind(self, name: str, model: type[CatalogObject]) -> None:
        """Storage, API and notification integrations share one namespace, as in Snowflake: creating
        one refuses a name an integration of another kind has (even with OR REPLACE or IF NOT EXISTS,
        which would otherwise replace or keep an object of another kind)."""
        found = find(self.catalog, "INTEGRATION", name)
        if found is not None and not isinstance(found, model):
            kind = _integration_kind(found)
            raise SqlError(
                f"Integration '{name}' already exists as {_INTEGRATION_NOUN[kind]}: storage, API and "
                f"notification integrations share one namespace. Choose another name, or DROP INTEGRATION "
                f"{name} first.",
                code="002002",
                sql_state="42710",
            )

    def _integration_slot(self, principal: Principal, s: Any, model: type[CatalogObject]) -> Result | None:
        """What every CREATE ... INTEGRATION checks first: OWNERSHIP to replace, CREATE INTEGRATION
        on the account, the name not taken by another family; the answer when IF NOT EXISTS finds
        it (None: go on and store it)."""
        self._replacing(principal, "INTEGRATION", s.name, s)
        self._authorize(principal, Need("ACCOUNT", "", ("CREATE INTEGRATION",)))
        self._refuse_other_kind(s.name, model)
        return self._existing(principal, "INTEGRATION", s.name, s)[1]

    def _create_integration(self, s: CreateIntegration, principal: Principal) -> Result:
        if (done := self._integration_slot(principal, s, StorageIntegration)) is not None:
            return done
        self._refuse_tables_bucket(s.allowed_locations)
        self.catalog.put(
            StorageIntegration(
                name=s.name,
                enabled=s.enabled,
                provider=s.provider,
                allowed_locations=s.allowed_locations,
                blocked_locations=s.blocked_locations,
                owner=principal.owner_role,
                created_ms=now_ms(),
                comment=s.comment,
            )
        )
        return status(f"Integration {s.name} successfully created.")

    def _create_api_integration(self, s: CreateApiIntegration, principal: Principal) -> Result:
        # Authorized as CREATE STORAGE INTEGRATION is: CREATE INTEGRATION on the account, which only
        # ACCOUNTADMIN holds unless it grants it. The API key is stored, and shown to no one.
        if (done := self._integration_slot(principal, s, ApiIntegration)) is not None:
            return done
        self.catalog.put(
            ApiIntegration(
                name=s.name,
                enabled=s.enabled,
                provider=s.provider,
                allowed_prefixes=s.allowed_prefixes,
                blocked_prefixes=s.blocked_prefixes,
                api_key=s.api_key,
                owner=principal.owner_role,
                created_ms=now_ms(),
                comment=s.comment,
            )
        )
        return status(f"Integration {s.name} successfully created.")

    def _create_notification_integration(
        self, s: CreateNotificationIntegration, principal: Principal
    ) -> Result:
        # Authorized as the other integrations are: CREATE INTEGRATION on the account (ACCOUNTADMIN
        # unless granted). Floe publishes to the topic with its own credentials, as it reads stages.
        if (done := self._integration_slot(principal, s, NotificationIntegration)) is not None:
            return done
        self.catalog.put(
            NotificationIntegration(
                name=s.name,
                enabled=s.enabled,
                aws_sns_topic_arn=s.topic_arn,
                aws_sns_role_arn=s.role_arn,
                owner=principal.owner_role,
                created_ms=now_ms(),
                comment=s.comment,
            )
        )
        return status(f"Integration {s.name} successfully created.")

    def _alter_integration(self, s: AlterIntegration, principal: Principal) -> Result:
        # Snowflake lets only the owner alter an integration (ACCOUNTADMIN holds everything here).
        if not self.grants.target(principal, "INTEGRATION", s.name, s.if_exists):
            return status(f"Integration {s.name} does not exist, statement succeeded.")
        found = self._integration(s.name, s.family, "ALTER")
        if isinstance(found, ApiIntegration):
            return self._alter_api_integration(s, found)
        if isinstance(found, NotificationIntegration):
            fields = {"enabled": s.enabled, "aws_sns_topic_arn": s.topic_arn, "aws_sns_role_arn": s.role_arn}
            update: dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
            if s.comment is not None or "COMMENT" in s.unset:
                update["comment"] = s.comment
            self.catalog.put(found.model_copy(update=update))
            return status("Statement executed successfully.")
        old = found
        update = {}
        if s.enabled is not None:
            update["enabled"] = s.enabled
        if s.allowed_locations is not None:
            self._refuse_tables_bucket(s.allowed_locations)
            update["allowed_locations"] = s.allowed_locations
        if s.blocked_locations is not None:
            update["blocked_locations"] = s.blocked_locations
        if s.comment is not None:
            update["comment"] = s.comment
        if "STORAGE_BLOCKED_LOCATIONS" in s.unset:
            update["blocked_locations"] = []
        if "COMMENT" in s.unset:
            update["comment"] = None
        new = old.model_copy(update=update)
        self.catalog.put(new)
        # Existing stages keep their URLs; the pipes on the ones now outside fail their next files
        # (pipeline/job.py re-checks every load), so say which.
        outside = sorted(
            st.name
            for st in self.catalog.all(Stage).values()
            if st.storage_integration == s.name and not (new.enabled and new.admits(st.url))
        )
        if outside:
            log.warning("integration %s altered; stages %s can no longer load", s.name, ", ".join(outside))
        return status("Statement executed successfully.")

    def _alter_api_integration(self, s: AlterIntegration, old: ApiIntegration) -> Result:
        update: dict[str, Any] = {}
        if s.enabled is not None:
            update["enabled"] = s.enabled
        if s.allowed_prefixes is not None:
            update["allowed_prefixes"] = s.allowed_prefixes
        if s.blocked_prefixes is not None:
            update["blocked_prefixes"] = s.blocked_prefixes
        if s.api_key is not None:
            update["api_key"] = s.api_key
        if s.comment is not None:
            update["comment"] = s.comment
        fields = {"API_BLOCKED_PREFIXES": "blocked_prefixes", "API_KEY": "api_key", "COMMENT": "comment"}
        for key in s.unset:
            update[fields[key]] = [] if key == "API_BLOCKED_PREFIXES" else None
        new = old.model_copy(update=update)
        self.catalog.put(new)
        # Functions keep their URLs; calls to the ones now outside fail (floe/external re-checks
        # every call), so say which.
        outside = sorted(
            f.name
            for f in self.catalog.all(ExternalFunction).values()
            if f.integration == s.name and not (new.enabled and new.admits(f.url))
        )
        if outside:
            log.warning(
                "integration %s altered; functions %s can no longer be called", s.name, ", ".join(outside)
            )
        return status("Statement executed successfully.")

    def _refuse_tables_bucket(self, locations: list[str]) -> None:
        """No integration may admit Floe's tables bucket, which holds every table's blobs."""
        tables_bucket = self.settings.pipeline.tables_bucket
        if any(loc != "*" and split_s3_url(loc)[0] == tables_bucket for loc in locations):
            raise CompilationError(
                f"STORAGE_ALLOWED_LOCATIONS may not include Floe's tables bucket (s3://{tables_bucket}/): it "
                "holds every table's encrypted blobs."
            )
        stages_bucket = self.settings.stages.bucket
        if any(loc != "*" and split_s3_url(loc)[0] == stages_bucket for loc in locations):
            raise CompilationError(
                f"STORAGE_ALLOWED_LOCATIONS may not include Floe's internal stages bucket "
                f"(s3://{stages_bucket}/): it holds every internal stage's files."
            )

    def check_location(self, principal: Principal, url: str, integration: str | None) -> None:
        """A stage may read ``url`` only through an integration the principal may use, inside its
        allowed locations and outside its blocked ones, and never Floe's tables bucket."""
        bucket = split_s3_url(url)[0]
        if bucket == self.settings.pipeline.tables_bucket:
            raise PermissionDenied(
                f"SQL access control error:\nURL '{url}' is in Floe's tables bucket, which holds every "
                "table's blobs; no stage may read it."
            )
        if bucket == self.settings.stages.bucket:
            raise PermissionDenied(
                f"SQL access control error:\nURL '{url}' is in Floe's internal stages bucket, which holds "
                "every internal stage's files; no external stage may read it."
            )
        if integration is None:
            if self.settings.stages_without_integration:
                return
            raise PermissionDenied(
                "SQL access control error:\nA stage needs STORAGE_INTEGRATION = <integration>: Floe reads S3 "
                "with its own credentials, and the integration bounds where. Ask an ACCOUNTADMIN to "
                "CREATE STORAGE INTEGRATION ... STORAGE_ALLOWED_LOCATIONS = (...) and GRANT USAGE on it "
                "to your role."
            )
        self._authorize(principal, Need("INTEGRATION", integration, ("USAGE",)))
        found = self.catalog.get(StorageIntegration, integration)
        if not found.enabled:
            raise SqlError(
                f"Integration '{integration}' is disabled (ENABLED = FALSE).",
                code="003001",
                sql_state="42501",
            )
        if not found.admits(url):
            raise PermissionDenied(
                f"SQL access control error:\nURL '{url}' is not allowed by integration '{integration}'. "
                "Please use DESC INTEGRATION to check out allowed and blocked locations."
            )

    # ------------------------------------------------------------------- external functions

    def _create_function(self, s: CreateExternalFunction, principal: Principal) -> Result:
        name = s.signature
        self._replacing(principal, "FUNCTION", name, s)
        self._creating(principal, "FUNCTION", s.name.schema_key)
        old, done = self._existing(principal, "FUNCTION", name, s)
        if done is not None:
            return done
        self.check_function_integration(principal, s.integration, s.url)
        self.catalog.put(
            ExternalFunction(
                name=name,
                function_name=str(s.name),
                args=s.args,
                returns=s.returns,
                secure=s.secure,
                strict=s.strict,
                volatility=s.volatility,
                integration=s.integration,
                headers=s.headers,
                context_headers=s.context_headers,
                max_batch_rows=s.max_batch_rows,
                compression=s.compression,
                url=s.url,
                # A replaced function keeps its owner, as a replaced table or pipe does.
                owner=old.owner if old is not None else principal.owner_role,
                created_ms=now_ms(),
                comment=s.comment,
            )
        )
        if old is None:
            self.grants.apply_future("FUNCTION", name)
        return status(f"Function {s.name.name} successfully created.")

    def check_function_integration(self, principal: Principal, integration: str, url: str) -> None:
        """A function may call ``url`` only through an API integration the principal may use, that
        is enabled and admits the URL (``ApiIntegration.admits``)."""
        self._authorize(principal, Need("INTEGRATION", integration, ("USAGE",)))
        found = find(self.catalog, "INTEGRATION", integration)
        if not isinstance(found, ApiIntegration):
            raise CompilationError(
                f"Integration '{integration}' is a storage integration; API_INTEGRATION names an API "
                "integration (CREATE API INTEGRATION ... API_ALLOWED_PREFIXES = (...))"
            )
        if not found.enabled:
            raise SqlError(
                f"API integration '{integration}' is disabled (ENABLED = FALSE).",
                code="003001",
                sql_state="42501",
            )
        if not found.admits(url):
            raise PermissionDenied(
                f"SQL access control error:\nURL '{url}' is not allowed by API integration '{integration}': "
                "it must lie under one of its API_ALLOWED_PREFIXES and outside its API_BLOCKED_PREFIXES "
                f"(DESC INTEGRATION {integration} lists them)."
            )

    # --------------------------------------------------------------------- stages, tables, pipes

    def _create_stage(self, s: CreateStage, principal: Principal) -> Result:
        name = str(s.name)
        self._replacing(principal, "STAGE", name, s)
        self._creating(principal, "STAGE", s.name.schema_key)
        old, done = self._existing(principal, "STAGE", name, s)
        if done is not None:
            return done
        if not s.internal:  # an internal stage's files are Floe's own: no integration bounds them
            self.check_location(principal, s.url, s.storage_integration)
        # A named format must exist and be usable now; the stage keeps its name, so it reads the
        # format as it is when a pipe is created on the stage (dropped: the defaults, as Snowflake).
        self.resolve_format(principal, s.file_format)
        owner = old.owner if old is not None else principal.owner_role
        self.catalog.put(
            Stage(
                name=name,
                url=s.url or new_stage_url(self.settings),
                internal=s.internal,
                file_format=s.file_format,
                storage_integration=s.storage_integration,
                owner=owner,
                created_ms=now_ms(),
                comment=s.comment,
                # A new incarnation, OR REPLACE included: the pipes on the old one stop (decision 84).
                id=new_id(),
            )
        )
        self.stage_files.dropped(old)  # a replaced internal stage starts empty, as in Snowflake
        if old is None:
            self.grants.apply_future("STAGE", name)
        return status(f"Stage area {s.name.name} successfully created.")

    def _alter_stage(self, s: AlterStage, principal: Principal) -> Result:
        """ALTER STAGE ... SET (its owner): the stage stays the same object, with its id, grants and
        files. A new URL or storage integration (an external stage's, checked as CREATE STAGE checks
        them) stops the pipes created on it, STOPPED_STAGE_ALTERED, until they are recreated; a new
        FILE_FORMAT reaches the pipes created from now on (decision 79)."""
        name = str(s.name)
        if not self.grants.target(principal, "STAGE", name, s.if_exists):
            return status("Statement executed successfully.")
        stage = self.catalog.get(Stage, name)
        update: dict[str, Any] = {}
        if s.relocates:
            if stage.internal:
                raise CompilationError(
                    f"URL and STORAGE_INTEGRATION apply to external stages; stage '{s.name.name}' is an "
                    "internal stage, whose files are in Floe's own bucket"
                )
            url = s.url if s.url is not None else stage.url
            integration = s.storage_integration or stage.storage_integration
            self.check_location(principal, url, integration)
            update |= {"url": url, "storage_integration": integration}
        if s.file_format is not None:
            self.resolve_format(principal, s.file_format)  # a named format must exist and be usable
            update["file_format"] = s.file_format
        if s.comment is not None:
            update["comment"] = s.comment
        self.catalog.put(stage.model_copy(update=update))
        on_it = [p for p in self.catalog.all(Pipe).values() if p.copy_spec.stage == name]
        stopped = sorted(p.name for p in on_it if pipe_stopped(self.catalog, p) is not None)
        if stopped:
            log.warning("stage %s altered; pipes %s stopped until recreated", name, ", ".join(stopped))
        return status("Statement executed successfully.")

    def resolve_format(
        self, principal: Principal, options: dict[str, object], *, dropped_ok: bool = False
    ) -> dict[str, object]:
        """FILE_FORMAT options with a FORMAT_NAME replaced by the named format's options (USAGE on
        it needed). ``dropped_ok``: a stage's format that was dropped means the defaults, as
        Snowflake documents for DROP FILE FORMAT; a format named by the statement itself must exist."""
        name = options.get(FORMAT_NAME)
        if not isinstance(name, str):
            return options
        if dropped_ok and find(self.catalog, "FILE_FORMAT", name) is None:
            return {}
        self._authorize(principal, Need("FILE_FORMAT", name, ("USAGE",)))
        return dict(self.catalog.get(NamedFileFormat, name).options)

    def _create_file_format(self, s: CreateFileFormat, principal: Principal) -> Result:
        name = str(s.name)
        self._replacing(principal, "FILE_FORMAT", name, s)
        self._creating(principal, "FILE FORMAT", s.name.schema_key)
        old, done = self._existing(principal, "FILE_FORMAT", name, s)
        if done is not None:
            return done
        owner = old.owner if old is not None else principal.owner_role
        self.catalog.put(
            NamedFileFormat(name=name, options=s.options, owner=owner, created_ms=now_ms(), comment=s.comment)
        )
        if old is None:
            self.grants.apply_future("FILE_FORMAT", name)
        return status(f"File format {s.name.name} successfully created.")

    def _alter_file_format(self, s: AlterFileFormat, principal: Principal) -> Result:
        name = str(s.name)
        absent = find(self.catalog, "FILE_FORMAT", name) is None
        if s.if_exists and absent and may_know_absence(self.catalog, principal, "FILE_FORMAT", name):
            return status("Statement executed successfully.")
        self._authorize(principal, Need("FILE_FORMAT", name, ("OWNERSHIP",)))
        fmt = self.catalog.get(NamedFileFormat, name)
        if s.rename_to is not None:
            new = str(s.rename_to)
            self._creating(principal, "FILE FORMAT", s.rename_to.schema_key)
            if find(self.catalog, "FILE_FORMAT", new) is not None:
                raise already_exists(new)
            self.catalog.put(fmt.model_copy(update={"name": new}))
            self.catalog.delete(NamedFileFormat, name)
            self.grants.rename_all("FILE_FORMAT", name, new)
            return status("Statement executed successfully.")
        update: dict[str, Any] = {"options": {**fmt.options, **s.options}}
        if s.comment is not None or s.unset_comment:
            update["comment"] = s.comment
        self.catalog.put(fmt.model_copy(update=update))
        return status("Statement executed successfully.")

    def _create_table(self, s: CreateTable, principal: Principal) -> Result:
        name = str(s.name)
        self._replacing(principal, "TABLE", name, s)
        self._creating(principal, "TABLE", s.name.schema_key)
        old, done = self._existing(principal, "TABLE", name, s)
        if done is not None:
            return done
        columns = s.columns
        if s.template is not None:  # USING TEMPLATE: the stage's and format's privileges are checked there
            columns = self.inference.template_columns(principal, s.template)
        owner = old.owner if old is not None else principal.owner_role
        if old is not None:
            self._drop_default_pipe(name)
        self.catalog.put(
            Table(
                name=name,
                columns=columns,
                owner=owner,
                created_ms=now_ms(),
                enable_schema_evolution=s.enable_schema_evolution,
            )
        )
        self.stage_files.dropped(old)  # the replaced table's stage goes with it
        if old is None:
            self.grants.apply_future("TABLE", name)
        return status(f"Table {s.name.name} successfully created.")

    def _alter_table(self, s: AlterTable, principal: Principal) -> Result:
        """ALTER TABLE: its owner adds, drops and renames columns, drops NOT NULL, and sets
        ENABLE_SCHEMA_EVOLUTION and COMMENT (decision 81). Only the catalog changes: blobs keep the
        columns they were written with, and readers map them by stored name (floe.blob_columns)."""
        name = str(s.name)
        if not self.grants.target(principal, "TABLE", name, s.if_exists):
            return status("Statement executed successfully.")
        table = self.catalog.get(Table, name)
        has_rows = False
        if isinstance(s.change, AddColumns):
            existing = {c.name for c in table.columns}
            required = [c.name for c in s.change.columns if not c.nullable and c.name not in existing]
            if required:
                has_rows = any(b.get("rows") for b in self.engine.manifest(table))
                self._refuse_required_column(table, required[0], has_rows)
        done = TableStore(self.redis, self.keys).update(
            name, table.id, lambda t: apply_change(t, s.change, has_rows=has_rows)
        )
        if done is None:
            raise ObjectNotFound("table", name)
        return status("Statement executed successfully.")

    def _refuse_required_column(self, table: Table, column: str, has_rows: bool) -> None:
        """A NOT NULL column may join an empty table (``apply_change`` refuses it otherwise, with
        Snowflake's text) that no pipe loads: a batch compiled before the change could still commit
        rows without the column."""
        pipes = sorted(p.name for p in self.catalog.pipes_for_table(table))
        if pipes and not has_rows:
            raise CompilationError(
                f"Non-nullable column '{column}' cannot be added to table '{_short('TABLE', table.name)}' "
                f"while pipe {pipes[0]} loads it (a batch loaded under its present columns would commit "
                "rows without the new one); add the column without NOT NULL, or add it before creating "
                "the pipe"
            )

    def _create_pipe(self, s: CreatePipe, principal: Principal) -> Result:
        name = str(s.name)
        if s.alter and isinstance(existing := find(self.catalog, "PIPE", name), Pipe):
            return self._create_or_alter_pipe(s, existing, principal)
        self._replacing(principal, "PIPE", name, s)
        self._creating(principal, "PIPE", s.name.schema_key)
        # The pipe loads with its owner's rights: it must be able to read the stage and write the table.
        needs = [Need("TABLE", str(s.table), ("INSERT",))]
        if s.stage is not None:
            needs.append(self.stage_files.source_need(s.stage, s.table_stage))
        self._authorize(principal, *needs)
        old_obj, done = self._existing(principal, "PIPE", name, s)
        if done is not None:
            return done
        old = old_obj if isinstance(old_obj, Pipe) else None
        stage = self.stage_files.pipe_source(s) if s.stage is not None else None
        table = self.catalog.get(Table, str(s.table))
        if stage is not None and not stage.internal:
            # A stage whose integration narrowed or went away since it was created reads nothing more.
            self.check_location(principal.acting_as(ADMIN_ROLE), stage.url, stage.storage_integration)
        if s.auto_ingest and stage is None:
            raise CompilationError(
                "AUTO_INGEST = TRUE needs a stage; a streaming pipe's rows come from channels"
            )
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
        fmt = (
            FileFormat()
            .merged(self.resolve_format(principal, stage.file_format, dropped_ok=True) if stage else {})
            .merged(self.resolve_format(principal, s.file_format))
        )
        _check_match_by(s, fmt, table)
        spec = CopySpec(
            table=str(s.table),
            columns=s.columns,
            select=s.select,
            stage=stage.name if stage is not None else "",
            path=s.path,
            file_format=fmt,
            on_error=s.on_error,
            on_error_limit=s.on_error_limit,
            pattern=s.pattern,
            match_by_column_name=s.match_by_column_name,
            include_metadata=s.include_metadata,
            truncate_columns=s.truncate_columns,
            sql=s.copy_sql,
            functions=pipe_functions(self.catalog, self.defaults, self._check(principal), s.select or []),
        )
        pipe = Pipe(
            name=name,
            auto_ingest=s.auto_ingest,
            copy_spec=spec,
            table_id=table.id,
            stage_url=stage.url if stage is not None else "",
            stage_id=stage.id if stage is not None else None,
            storage_integration=stage.storage_integration if stage is not None else None,
            source="stage" if stage is not None else "streaming",
            # A replaced pipe keeps its owner as it keeps its grants (docs/decisions.md).
            owner=old.owner if old is not None else principal.owner_role,
            created_ms=now_ms(),
            comment=s.comment,
            error_integration=self.check_error_integration(principal, s),
            backfill_interval_s=self.check_backfill(s),
        )
        if s.paused:  # CREATE OR ALTER PIPE ... PIPE_EXECUTION_PAUSED = TRUE of a new pipe
            pipe = pipe.model_copy(update=pause_update(pipe, True, now_ms(), 0))
        if pipe.auto_ingest and self.settings.auto_configure_notifications:
            self._configure_notifications(pipe.bucket, extra=pipe, without=old)
        self.catalog.put(pipe)
        if old is not None:
            self._forget_pipe(old, successor=pipe)
        else:
            self.grants.apply_future("PIPE", name)
        return status(f"Pipe {s.name.name} successfully created.")

    def check_error_integration(self, principal: Principal, s: CreatePipe) -> str | None:
        """A pipe's ERROR_INTEGRATION: USAGE on it, and an enabled notification integration (a file
        pipe's: a streaming pipe fails rows, never files)."""
        if s.error_integration is None:
            return None
        self._authorize(principal, Need("INTEGRATION", s.error_integration, ("USAGE",)))
        found = find(self.catalog, "INTEGRATION", s.error_integration)
        if not isinstance(found, NotificationIntegration):
            raise CompilationError(
                f"Integration '{s.error_integration}' is not a notification integration; ERROR_INTEGRATION "
                "names one (CREATE NOTIFICATION INTEGRATION ... NOTIFICATION_PROVIDER = AWS_SNS)"
            )
        if not found.enabled:
            raise SqlError(
                f"Notification integration '{s.error_integration}' is disabled (ENABLED = FALSE).",
                code="003001",
                sql_state="42501",
            )
        if s.stage is None:
            raise CompilationError(
                "ERROR_INTEGRATION does not apply to a streaming pipe: its bad rows are counted in their "
                "channel (SHOW CHANNELS), no file fails"
            )
        return s.error_integration

    def check_backfill(self, s: CreatePipe) -> int | None:
        """A pipe's BACKFILL_INTERVAL: on a stage, and not shorter than ``backfill.min_interval_s``."""
        if s.backfill_interval_s is None:
            return None
        if s.stage is None:
            raise CompilationError(
                "BACKFILL_INTERVAL does not apply to a streaming pipe: it has no stage to list"
            )
        least = self.settings.backfill.min_interval_s
        if s.backfill_interval_s < least:
            raise CompilationError(
                f"BACKFILL_INTERVAL must be at least {_interval(least)} (FLOE_BACKFILL__MIN_INTERVAL_S): "
                "each backfill lists the stage's last 7 days"
            )
        return s.backfill_interval_s

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
        # On a cluster, scan_keys goes over every primary; the pipe's keys share one slot, so each DEL
        # stays on one node.
        for key in scan_keys(self.redis, self.keys.pipe_pattern(pipe.id)):
            if key.decode() not in keep:
                batch.append(key)
            if len(batch) >= 1000:
                self._delete(batch)
                batch = []
        if batch:
            self._delete(batch)

    def _delete(self, keys: list[bytes]) -> None:
        """DEL keys of one pipe."""
        one_slot(keys, "DEL of a dropped pipe's keys")
        self.redis.delete(*keys)

    def _drop_default_pipe(self, table: str) -> None:
        """A table's default streaming pipe goes with the table incarnation it loads (and its
        channels and offset tokens with it, as Snowflake forgets them when a table is recreated)."""
        default = self.catalog.find(Pipe, f"{table}-STREAMING")
        if default is not None and default.default_streaming:
            self._remove_pipe(default)

    def _remove_pipe(self, pipe: Pipe) -> None:
        """Delete a pipe with its queue, history and grants, and stop notifying it."""
        self.catalog.delete(Pipe, pipe.name)
        self.grants.revoke_all("PIPE", pipe.name)
        self._forget_pipe(pipe)
        if pipe.auto_ingest and self.settings.auto_configure_notifications:
            try:
                self._configure_notifications(pipe.bucket)
            except SqlError as exc:
                log.warning("could not update notifications of %s: %s", pipe.bucket, exc)

    # ------------------------------------------------------------------------ SHOW and DESC

    def _show(self, s: Show, principal: Principal) -> Result:
        if s.in_kind in ("DATABASE", "SCHEMA") and s.in_name:
            # A container the roles cannot use answers as a missing one, not as an empty list.
            self._authorize(principal, Need(s.in_kind, s.in_name, ("USAGE", "OWNERSHIP")))
        roles = active_roles(self.catalog, principal)
        models = MODELS[s.kind]
        if s.family is not None:
            models = (_INTEGRATION_MODELS[s.family],)
        objects = [
            o
            for model in models
            for n, o in self.catalog.all(model).items()
            if visible(self.catalog, roles, s.kind, n) and (not s.in_name or inside(n, s.in_name))
        ]
        rows = [self._row(s.kind, o) for o in objects]
        rows = like(rows, s.like)
        # Overloads share a name; their arguments tell them apart.
        rows.sort(key=lambda r: (str(r["name"]), str(r.get("arguments", ""))))
        columns = SHOW_COLUMNS[s.kind]
        return Result(columns, [[r[c] for c in columns] for r in rows])

    def _show_channels(self, s: ShowChannels, principal: Principal) -> Result:
        """Channels of the streaming pipes the roles may see (a default pipe: its table)."""
        if s.in_kind is not None and s.in_kind != "ACCOUNT" and s.in_name:
            self._authorize(principal, Need(s.in_kind, s.in_name, everything(s.in_kind)))
        roles = active_roles(self.catalog, principal)
        now = now_ms()
        rows: list[dict[str, Any]] = []
        for pipe in self.catalog.all(Pipe).values():
            seen_as = ("TABLE", pipe.copy_spec.table) if pipe.default_streaming else ("PIPE", pipe.name)
            if pipe.source != "streaming" or not visible(self.catalog, roles, *seen_as):
                continue
            if s.in_kind in ("TABLE", "PIPE") and s.in_name != (
                pipe.copy_spec.table if s.in_kind == "TABLE" else pipe.name
            ):
                continue
            if s.in_kind in ("DATABASE", "SCHEMA") and s.in_name and not inside(pipe.name, s.in_name):
                continue
            rows += self._channel_rows(pipe, now)
        rows = like(rows, s.like)
        rows.sort(key=lambda r: (str(r["pipe_name"]), str(r["name"])))
        return Result(CHANNEL_COLUMNS, [[r[c] for c in CHANNEL_COLUMNS] for r in rows])

    def _channel_rows(self, pipe: Pipe, now: int) -> list[dict[str, Any]]:
        db, schema, name = _parts(pipe.name)
        out = []
        states = self.channels.states(pipe.id, self.channels.names(pipe.id, now))
        for channel, state in states.items():
            out.append(
                {
                    "created_on": created(int(state.get("created_ms") or 0)),
                    "name": channel,
                    "database_name": db,
                    "schema_name": schema,
                    "pipe_name": name,
                    "table_name": _parts(pipe.copy_spec.table)[-1],
                    "client_sequencer": int(state.get("cseq") or 0),
                    "row_sequencer": int(state.get("rseq") or 0),
                    "offset_token": state.get("token"),
                    "rows_inserted": int(state.get("rows_inserted") or 0),
                    "rows_error_count": int(state.get("rows_error_count") or 0),
                    "last_error_message": state.get("last_error_message"),
                }
            )
        return out

    def _row(self, kind: str, obj: CatalogObject) -> dict[str, Any]:
        if isinstance(obj, ExternalFunction):
            return _function_row(obj)
        parts = _parts(obj.name)
        base = {
            "created_on": created(obj.created_ms),
            "name": parts[-1],
            "owner": obj.owner,
            "comment": obj.comment or "",
        }
        if kind == "DATABASE":
            return base
        if kind == "SCHEMA":
            return {**base, "database_name": parts[0]}
        if isinstance(obj, ApiIntegration):
            return {**base, "type": "EXTERNAL_API", "category": "API", "enabled": str(obj.enabled).lower()}
        if isinstance(obj, NotificationIntegration):
            return {
                **base,
                "type": f"QUEUE - {obj.provider}",
                "category": "NOTIFICATION",
                "enabled": str(obj.enabled).lower(),
            }
        if isinstance(obj, StorageIntegration):
            return {
                **base,
                "type": "EXTERNAL_STAGE",
                "category": "STORAGE",
                "enabled": str(obj.enabled).lower(),
            }
        placed = {**base, "database_name": parts[0], "schema_name": parts[1]}
        if isinstance(obj, NamedFileFormat):
            shown = obj.file_format.model_dump(mode="json")
            return {
                **placed,
                "type": shown.pop("type"),
                "format_options": json.dumps({k.upper(): v for k, v in shown.items()}),
            }
        if isinstance(obj, Stage):
            return {
                **placed,
                # An internal stage's location is Floe's business: Snowflake shows no URL for one.
                "url": "" if obj.internal else obj.url,
                "has_credentials": "N",
                "storage_integration": obj.storage_integration,
                "type": stage_kind(obj),
                "region": self.settings.aws.region,
            }
        if isinstance(obj, Table):
            blobs = self.engine.manifest(obj)
            return {
                **placed,
                "kind": "TABLE",
                "rows": sum(b["rows"] for b in blobs),
                "bytes": sum(b["bytes"] for b in blobs),
                "enable_schema_evolution": "Y" if obj.enable_schema_evolution else "N",
            }
        assert isinstance(obj, Pipe)
        return self._pipe_row(obj)

    def _pipe_row(self, p: Pipe) -> dict[str, Any]:
        db, schema, name = _parts(p.name)
        return {
            "created_on": created(p.created_ms),
            "name": name,
            "database_name": db,
            "schema_name": schema,
            "definition": p.copy_spec.sql,
            "owner": p.owner,
            "notification_channel": self.queue_arn() if p.auto_ingest else None,
            "comment": p.comment or "",
            "pattern": p.copy_spec.pattern,
            "error_integration": p.error_integration,
            "execution_state": _execution_state(self.catalog, p),
            "backfill_interval": _interval(p.backfill_interval_s),
        }

    def _describe(self, s: Describe, principal: Principal) -> Result:
        name = str(s.name)
        self._authorize(principal, Need(s.kind, name, everything(s.kind)))
        if s.kind == "PIPE":
            row = self._pipe_row(self.catalog.get(Pipe, name))
            return Result(list(row), [list(row.values())])
        if s.kind == "TABLE":
            return Result(*describe_table(self.catalog.get(Table, name)))
        if s.kind == "FILE_FORMAT":
            return _describe_file_format(self.catalog.get(NamedFileFormat, name))
        st = self.catalog.get(Stage, name)
        return Result(
            ["property", "value"],
            [
                ["URL", "" if st.internal else st.url],
                ["STORAGE_INTEGRATION", st.storage_integration],
                *[[k.upper(), str(v)] for k, v in st.file_format.items()],
            ],
        )

    def _describe_object(self, s: DescribeObject, principal: Principal) -> Result:
        self._authorize(principal, Need(s.kind, s.name, everything(s.kind)))
        if s.kind == "FUNCTION":
            return self._describe_function(s.name, principal)
        obj = find(self.catalog, s.kind, s.name)
        if obj is None:
            raise ObjectNotFound(s.kind.lower(), s.name)
        if s.kind == "INTEGRATION":
            self._integration(s.name, s.family, "DESC")
        rows: list[list[Any]] = [
            ["NAME", _parts(obj.name)[-1]],
            ["OWNER", obj.owner],
            ["COMMENT", obj.comment],
        ]
        if isinstance(obj, StorageIntegration):
            rows += [
                ["ENABLED", str(obj.enabled).lower()],
                ["STORAGE_PROVIDER", obj.provider],
                ["STORAGE_ALLOWED_LOCATIONS", ",".join(obj.allowed_locations)],
                ["STORAGE_BLOCKED_LOCATIONS", ",".join(obj.blocked_locations)],
            ]
        if isinstance(obj, ApiIntegration):
            rows += [
                ["ENABLED", str(obj.enabled).lower()],
                ["API_PROVIDER", obj.provider],
                ["API_ALLOWED_PREFIXES", ",".join(obj.allowed_prefixes)],
                ["API_BLOCKED_PREFIXES", ",".join(obj.blocked_prefixes)],
                # Whether a key is set, never the key: not to ACCOUNTADMIN, not to the owner.
                ["API_KEY", MASKED if obj.api_key else ""],
            ]
        if isinstance(obj, NotificationIntegration):
            rows += [
                ["ENABLED", str(obj.enabled).lower()],
                ["TYPE", "QUEUE"],
                ["DIRECTION", obj.direction],
                ["NOTIFICATION_PROVIDER", obj.provider],
                ["AWS_SNS_TOPIC_ARN", obj.aws_sns_topic_arn],
                ["AWS_SNS_ROLE_ARN", obj.aws_sns_role_arn],
            ]
        return Result(["property", "value"], rows)

    def _describe_function(self, name: str, principal: Principal) -> Result:
        """DESC FUNCTION's property rows (``_describe_object`` has authorized). A SECURE function's
        definition, its URL and headers, is its owner's to see, as in Snowflake."""
        fn = self.catalog.get(ExternalFunction, name)
        shown = not fn.secure or allowed(self.catalog, principal, Need("FUNCTION", name, ("OWNERSHIP",)))
        returns = fn.returns.sql_type + ("" if fn.returns.nullable else " NOT NULL")
        rows: list[list[Any]] = [
            ["signature", "(" + ", ".join(f"{a.name} {a.type}" for a in fn.args) + ")"],
            ["returns", returns],
            ["language", "EXTERNAL"],
            ["null handling", "RETURNS NULL ON NULL INPUT" if fn.strict else "CALLED ON NULL INPUT"],
            ["volatility", fn.volatility],
            ["body", fn.url if shown else None],
            ["headers", json.dumps(dict(fn.headers)) if shown else None],
            ["context_headers", "[" + ", ".join(fn.context_headers) + "]"],
            ["max_batch_rows", str(fn.max_batch_rows) if fn.max_batch_rows is not None else "not set"],
            ["compression", fn.compression],
            ["api_integration", fn.integration],
        ]
        return Result(["property", "value"], rows)

    # -------------------------------------------------------------------------- DROP and ALTER

    def _drop(self, s: Drop, principal: Principal) -> Result:
        name = str(s.name)
        (model,) = MODELS[s.kind]
        if not self.grants.target(principal, s.kind, name, s.if_exists):
            return status(f"Drop statement executed successfully ({s.name.name} already dropped).")
        removed = self.catalog.find(model, name)
        if isinstance(removed, Pipe):
            self._remove_pipe(removed)
        else:
            if isinstance(removed, Table):
                self._drop_default_pipe(name)
            self.catalog.delete(model, name)
            self.grants.revoke_all(s.kind, name)
            self.stage_files.dropped(removed)  # an internal stage's files, or the table's stage's
        return status(f"{s.name.name} successfully dropped.")

    def _create_or_alter_pipe(self, s: CreatePipe, old: Pipe, principal: Principal) -> Result:
        """CREATE OR ALTER PIPE of an existing pipe: altered in place into the pipe the statement
        defines, keeping its id, so its load history, queue and dedup memory stay. What ALTER PIPE
        cannot change (the COPY statement, AUTO_INGEST) must be as it was; a property the statement
        leaves out is unset (COMMENT, ERROR_INTEGRATION, BACKFILL_INTERVAL), and PIPE_EXECUTION_PAUSED
        left out is FALSE: the pipe resumes, under ALTER PIPE's rules (staleness, ownership)."""
        self._authorize(principal, Need("PIPE", old.name, ("OWNERSHIP",)))
        if changed := fixed_changes(s, old):
            raise fixed_error(old, changed)
        update: dict[str, Any] = {
            "comment": s.comment,
            "error_integration": self.check_error_integration(principal, s),
            "backfill_interval_s": self.check_backfill(s),
        }
        update |= pause_update(old, bool(s.paused), now_ms(), self.settings.retention_seconds * 1000)
        if update["error_integration"] is not None and old.error_integration is None:
            # Failures from before the pipe had an integration are not told to it (decision 75).
            skip_past_events(self.redis, self.keys, old.id)
        self.catalog.put(old.model_copy(update=update))
        return status("Statement executed successfully.")

    def _alter_pipe(self, s: AlterPipe, principal: Principal) -> Result:
        """ALTER PIPE ... SET | UNSET: the owner sets and unsets properties; OPERATE (or ownership)
        is enough to pause and resume, as in Snowflake."""
        name = str(s.name)
        absent = find(self.catalog, "PIPE", name) is None
        if s.if_exists and absent and may_know_absence(self.catalog, principal, "PIPE", name):
            return status("Statement executed successfully.")
        owns = (
            s.comment is not None or bool(s.properties) or any(u != "PIPE_EXECUTION_PAUSED" for u in s.unset)
        )
        self._authorize(principal, Need("PIPE", name, ("OWNERSHIP",) if owns else ("OPERATE", "OWNERSHIP")))
        pipe = self.catalog.get(Pipe, name)
        update: dict[str, Any] = {}
        if s.comment is not None:
            update["comment"] = s.comment
        if "COMMENT" in s.unset:
            update["comment"] = None
        paused = False if "PIPE_EXECUTION_PAUSED" in s.unset else s.paused
        if paused is not None:
            update |= pause_update(pipe, paused, now_ms(), self.settings.retention_seconds * 1000)
        if update:
            self.catalog.put(pipe.model_copy(update=update))
        return status("Statement executed successfully.")

    def _refresh_pipe(self, s: AlterPipeRefresh, principal: Principal, sink: RowSink | None = None) -> Result:
        """Queue the files staged under the pipe's location in the last 7 days that it has not seen,
        and again the ones whose load failed; one row per file listed, SENT or SKIPPED. A paused
        pipe queues them too: they load when it resumes.

        With a ``sink``, each page of the stage's listing goes to it once queued, so a client sees
        the REFRESH's progress (the Result returned then has no rows)."""
        name = str(s.name)
        absent = find(self.catalog, "PIPE", name) is None
        if s.if_exists and absent and may_know_absence(self.catalog, principal, "PIPE", name):
            answer = status("Statement executed successfully.")
            if sink is not None:
                send_result(sink, answer, self.settings.query.page_rows, self.settings.query.timeout_s)
            return answer
        # Snowflake's OPERATE: view, pause or resume, and refresh the pipe (its owner holds it too).
        self._authorize(principal, Need("PIPE", name, ("OPERATE", "OWNERSHIP")))
        pipe = self.catalog.get(Pipe, name)
        if pipe.source == "streaming":
            raise CompilationError(
                f"Pipe {s.name.name} is a streaming pipe: its rows come from channels, not from a stage, "
                "so ALTER PIPE ... REFRESH has no staged files to queue."
            )
        if (stopped := pipe_stopped(self.catalog, pipe)) is not None:
            # It would queue files it never loads: its stage or table is not the one it was made on.
            raise SqlError(
                f"Pipe {s.name.name} is stopped ({stopped.state}): {stopped.reason}",
                code="091304",
                sql_state="55000",
            )
        # The check every load makes (pipeline/job.py): Floe's credentials list nothing the pipe's
        # storage integration does not admit any more.
        if (reason := refusal(self.catalog, self.settings, pipe)) is not None:
            raise PermissionDenied(f"SQL access control error:\n{reason}")
        with contextlib.closing(self._refreshed(s, pipe)) as pages:
            if sink is None:
                return Result(list(REFRESH_COLUMNS), [row for page in pages for row in page])
            # The first page is listed before the answer starts: a stage S3 refuses fails before it.
            first = next(pages, [])
            sink.start(list(REFRESH_COLUMNS))
            for page in itertools.chain([first], pages):
                try:
                    if page:
                        sink.page(page, self.settings.query.timeout_s)
                except TimeoutError:
                    raise SqlError(
                        "The client stopped reading the answer of ALTER PIPE ... REFRESH; the files "
                        "listed so far are queued.",
                        code="000604",
                        sql_state="57014",
                    ) from None
        return Result(list(REFRESH_COLUMNS), [])

    def _refreshed(self, s: AlterPipeRefresh, pipe: Pipe) -> Generator[list[list[Any]], None, None]:
        """Queue each page of the stage's listing in turn, and yield its rows; log the totals."""
        now = dt.datetime.fromtimestamp(now_ms() / 1000, tz=dt.UTC)
        listed = retried = skipped = 0
        with contextlib.closing(self._staged(pipe, s.prefix, refresh_since(s.modified_after, now))) as pages:
            for files in pages:
                try:
                    done = self.refresher.refresh(pipe, files, source="refresh")
                except PipeRetired as exc:
                    raise SqlError(
                        f"Pipe {s.name.name} was dropped or replaced while ALTER PIPE ... REFRESH queued "
                        "its files; run it again on the pipe as it is now.",
                        code="002003",
                        sql_state="02000",
                    ) from exc
                listed += len(done)
                retried += sum(r is Refreshed.RETRIED for r in done)
                skipped += sum(r is Refreshed.SKIPPED for r in done)
                yield [
                    [f.path, "SKIPPED" if r is Refreshed.SKIPPED else "SENT"]
                    for f, r in zip(files, done, strict=True)
                ]
        log.info(
            "REFRESH: %d files sent (%d of them after a failed load), %d skipped",
            listed - skipped,
            retried,
            skipped,
            extra={"pipe": pipe.name},
        )

    def _staged(self, pipe: Pipe, prefix: str, since: dt.datetime) -> Generator[list[FileRef], None, None]:
        """``staged_pages`` of the pipe's location plus ``prefix`` (a key prefix: Snowflake appends
        it to the pipe's path), with S3's errors as the statement's."""
        key_prefix = pipe.prefix + prefix.lstrip("/")
        s3 = aws_client(self.settings.aws, "s3")
        try:
            yield from staged_pages(s3, pipe, prefix, since)  # the listing a backfill makes too
        except s3.exceptions.NoSuchBucket as exc:
            raise SqlError(
                f"Stage bucket '{pipe.bucket}' does not exist; create it first (aws s3 mb s3://{pipe.bucket}).",
                code="091003",
            ) from exc
        except AWS_ERRORS as exc:
            raise SqlError(
                f"Failure using stage area s3://{pipe.bucket}/{key_prefix}. Cause: "
                f"[{str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}]",
                code="091003",
            ) from exc
        finally:
            s3.close()  # a client per statement: its pooled connections go with it

    # ------------------------------------------------------------------------------ sessions

    def _use_role(self, s: UseRole, principal: Principal) -> Result:
        # ``execute`` switched the session's role already (use_role checks it is granted).
        return status("Statement executed successfully.")

    def _use_secondary_roles(self, s: UseSecondaryRoles, principal: Principal) -> Result:
        return status("Statement executed successfully.")


def refresh_since(modified_after: dt.datetime | None, now: dt.datetime) -> dt.datetime:
    """The oldest LAST_MODIFIED an ALTER PIPE ... REFRESH at ``now`` queues: MODIFIED_AFTER, but
    never more than ``REFRESH_WINDOW`` back (an earlier MODIFIED_AFTER is the window's start)."""
    oldest = now - REFRESH_WINDOW
    return oldest if modified_after is None else max(oldest, modified_after)


def statements(sql: str) -> list[str]:
    """The statements of a request, split at the semicolons outside strings and quoted names."""
    if ";" not in sql:
        return [sql]
    try:
        tokens = Snowflake().tokenize(sql)
    except TokenError as exc:  # an unterminated string or quoted name
        raise CompilationError(f"syntax error: {exc}") from exc
    out, start = [], 0
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            out.append(sql[start : token.start])
            start = token.end + 1
    out.append(sql[start:])
    return [text for text in out if text.strip()]


_INTEGRATION_NOUN = {
    "STORAGE": "a storage integration",
    "API": "an API integration",
    "NOTIFICATION": "a notification integration",
}
_INTEGRATION_MODELS: dict[str, type[CatalogObject]] = {
    "STORAGE": StorageIntegration,
    "API": ApiIntegration,
    "NOTIFICATION": NotificationIntegration,
}
"""Each kind of integration, as statements name it (SHOW API INTEGRATIONS), and its model."""


def _interval(seconds: int | None) -> str | None:
    """A BACKFILL_INTERVAL as SHOW PIPES writes it: '90 SECONDS', '10 MINUTES', '2 HOURS'."""
    if seconds is None:
        return None
    units = (("DAY", 86400), ("HOUR", 3600), ("MINUTE", 60), ("SECOND", 1))
    unit, size = next(u for u in units if seconds % u[1] == 0)
    n = seconds // size
    return f"{n} {unit}" if n == 1 else f"{n} {unit}S"


def _integration_kind(integration: CatalogObject) -> str:
    """STORAGE, API or NOTIFICATION: the kind of an integration, as statements name it."""
    return next(kind for kind, model in _INTEGRATION_MODELS.items() if isinstance(integration, model))


def _short(kind: str, name: str) -> str:
    """An object's own name, as messages say it: the last part, and a function without its types."""
    if kind == "FUNCTION":
        name = name[: name.rindex("(")]
    return _parts(name)[-1]


def _check_match_by(s: CreatePipe, fmt: FileFormat, table: Table) -> None:
    """MATCH_BY_COLUMN_NAME's rules that need the table and the effective format."""
    for name in s.include_metadata:
        if name not in {c.name for c in table.columns}:
            raise CompilationError(f"invalid identifier '{name}' in INCLUDE_METADATA", code="000904")
    if s.match_by_column_name != "NONE" and fmt.type == "CSV" and not fmt.parse_header:
        raise CompilationError(
            "MATCH_BY_COLUMN_NAME on CSV files needs the column names from the header: "
            "FILE_FORMAT = (TYPE = CSV PARSE_HEADER = TRUE)"
        )
    if fmt.type == "CSV" and fmt.parse_header:  # the stage's options and the pipe's, together
        if s.match_by_column_name == "NONE":
            raise CompilationError(PARSE_HEADER_ONLY)
        check_csv_format(fmt)


def _describe_file_format(fmt: NamedFileFormat) -> Result:
    """DESC FILE FORMAT: every option with its type, value and default, as Snowflake lists them."""
    default = FileFormat().model_dump(mode="json")
    rows = []
    for key, value in fmt.file_format.model_dump(mode="json").items():
        kind = "Boolean" if isinstance(value, bool) else "Long" if isinstance(value, int) else "String"
        if isinstance(value, list):
            kind = "List"
        rows.append([key.upper(), kind, _shown(value, key), _shown(default[key], key)])
    return Result(["property", "property_type", "property_value", "property_default"], rows)


def _shown(value: object, key: str) -> str:
    """An option's value as DESC FILE FORMAT prints it: NONE for none (a delimiter of NONE is
    stored as ''), lists in brackets."""
    if value is None or (value == "" and key.endswith("_delimiter")):
        return "NONE"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _function_row(fn: ExternalFunction) -> dict[str, Any]:
    """SHOW EXTERNAL FUNCTIONS' row, with Snowflake's columns."""
    db, schema, short = _parts(fn.function_name)
    types = ", ".join(a.type for a in fn.args)
    return {
        "created_on": created(fn.created_ms),
        "name": short,
        "schema_name": schema,
        "is_builtin": "N",
        "is_aggregate": "N",
        "is_ansi": "N",
        "min_num_arguments": len(fn.args),
        "max_num_arguments": len(fn.args),
        "arguments": f"{short}({types}) RETURN {fn.returns.type}",
        "description": fn.comment or "user-defined function",
        "catalog_name": db,
        "is_table_function": "N",
        "valid_for_clustering": "N",
        "is_secure": "Y" if fn.secure else "N",
        "is_external_function": "Y",
        "language": "EXTERNAL",
    }


def _execution_state(catalog: Catalog, pipe: Pipe) -> str:
    """SHOW PIPES' execution_state: a stopped pipe's state (decision 84), else PAUSED or RUNNING."""
    stopped = pipe_stopped(catalog, pipe)
    if stopped is not None:
        return stopped.state
    return "PAUSED" if pipe.paused else "RUNNING"


def _accepts(successor: Pipe, old: Pipe, path: str) -> bool:
    """Whether a file queued for ``old`` is one ``successor`` would have been notified of."""
    return (
        successor.stage_url == old.stage_url
        and successor.relative_path(successor.object_key(path)) is not None
        and successor.matches(path)
    )
