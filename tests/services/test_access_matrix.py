"""The access-control matrix: every SQL statement and every Snowpipe REST route, each as a role that
holds exactly the privileges it needs (it succeeds) and as one that does not (it fails with
Snowflake's code and text, and changes nothing).

One row per statement form (issue 12, "The whole matrix"). A row gives the statement (or route), the
grants that are exactly enough, as ACCOUNTADMIN statements with ``{role}`` for the caller's role, and
the answer without them. Each row runs as several cases, each on a fresh world:

- ``ok``: with every grant, the statement succeeds;
- ``none``: with none of them, it fails with the row's exception, code, SQL state and text;
- ``without <grant>``: with all grants but that one (rows with several), it fails too: no grant is
  superfluous, so a check missing from a handler shows up here.

A row may also hold ``given`` grants, kept in every case: they make the object visible, so the
refusal is 003001 "Insufficient privileges" rather than 002003 "does not exist or not authorized".
A SHOW row says which name the statement lists; without the grants it lists the rest but not that.
Rows without grants are statements anyone may run, and say so.

Routes have rows too, one family of routes to a runner (``runner_of``): Snowpipe REST, Snowpipe
Streaming, the SQL endpoint, the stage transfers (PUT and GET) and the web console. A console row
runs as the caller signed in to the console; its page or action shows a refusal in the page, as the
statement that failed answered it.

``test_every_statement_and_route_has_a_row`` fails when a statement type, or a route of the real app
(``create_app``, through every router it includes), is added without a row here or a place in
``PUBLIC``; ``test_exactly_the_public_routes_answer_without_authentication`` fails when a route
answers a caller without a token or a console session and is not in ``PUBLIC``, or the reverse.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlencode

import pytest
import redis
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import APIRouter, FastAPI
from fastapi.routing import iter_route_contexts
from pydantic import SecretStr
from starlette.types import Receive, Scope, Send

from bench.harness import unique
from floe.catalog import (
    ADMIN_ROLE,
    ApiIntegration,
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
    now_ms,
)
from floe.catalog.ddl import Defaults, parse
from floe.channels import ChannelStore, PipeRef, channel_state
from floe.errors import ObjectNotFound, PermissionDenied, SqlError
from floe.keypair import new_private_key, public_key_body
from floe.keys import Keys
from floe.settings import Settings
from front.client import auth_header
from services.api import PUBLIC_PATHS, create_app
from services.auth import Principal
from services.console import CODES_PATH, is_console_path
from services.console.routes import COOKIE
from services.console.routes import PREFIX as CONSOLE
from services.sql import SqlExecutor
from services.stages import ROUTES as STAGES
from tests.asgi import AppClient
from tests.conftest import TEST_INTEGRATION
from tests.services.test_console import sign_in
from tests.services.test_snowpipe import bearer, token

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
ROLE = "CALLER"
"""The role every case runs as (its user's DEFAULT_ROLE, and its only granted role)."""
USER = "CALLER_U"

WORLD = (
    "CREATE DATABASE sales",
    "CREATE SCHEMA sales.raw",
    "CREATE STORAGE INTEGRATION lake TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' ENABLED = TRUE "
    "STORAGE_ALLOWED_LOCATIONS = ('s3://lake/')",
    "CREATE STAGE sales.raw.landing URL = 's3://lake/in/' STORAGE_INTEGRATION = lake",
    "CREATE FILE FORMAT sales.raw.pipes TYPE = CSV FIELD_DELIMITER = '|'",
    "CREATE TABLE sales.raw.orders (a INT)",
    "CREATE PIPE sales.raw.loader AUTO_INGEST = FALSE AS COPY INTO sales.raw.orders FROM @sales.raw.landing",
    "CREATE API INTEGRATION remote API_PROVIDER = aws_api_gateway ENABLED = TRUE API_KEY = 'k' "
    "API_ALLOWED_PREFIXES = ('https://fn.example.com/')",
    "CREATE EXTERNAL FUNCTION sales.raw.score(a INT) RETURNS VARIANT API_INTEGRATION = remote "
    "AS 'https://fn.example.com/score'",
    "CREATE ROLE role_a",
    "CREATE ROLE role_b",
    "CREATE USER user_b DEFAULT_ROLE = role_b",
    f"CREATE ROLE {ROLE}",
    f"CREATE USER {USER} DEFAULT_ROLE = {ROLE} RSA_PUBLIC_KEY = '{{key}}'",
    f"GRANT ROLE {ROLE} TO USER {USER}",
)
"""Everything ACCOUNTADMIN makes before a case: objects of every kind, owned by ACCOUNTADMIN (the
database and schema too, so no system role's privileges leak in), grant targets, and the caller."""

PIPE = "SALES.RAW.LOADER"
FUNCTION = "sales.raw.score(NUMBER)"
"""The world's external function, as GRANT and DROP name it (its overload's argument types)."""

# The grants most rows need, with {role} for the caller's role.
DB = "GRANT USAGE ON DATABASE sales TO ROLE {role}"
SCHEMA = "GRANT USAGE ON SCHEMA sales.raw TO ROLE {role}"
INSIDE = (DB, SCHEMA)
"""USAGE on the database and schema the stage, table and pipe live in."""


def on_account(privilege: str) -> str:
    return f"GRANT {privilege} ON ACCOUNT TO ROLE {{role}}"


def on(privilege: str, kind: str, name: str) -> str:
    return f"GRANT {privilege} ON {kind} {name} TO ROLE {{role}}"


def owns(kind: str, name: str) -> str:
    return on("OWNERSHIP", kind, name)


@dataclass(frozen=True)
class Refusal:
    """How a SQL statement fails: the exception's exact class, its code and SQL state, and a fragment
    of its message."""

    exc: type[SqlError]
    code: str
    state: str
    text: str


@dataclass(frozen=True)
class HttpRefusal:
    """How a REST route fails: status, Snowflake's error code, a fragment of the message."""

    status: int
    code: str
    text: str


def denied(text: str) -> Refusal:
    """003001: the role sees the object (or it is the account, or a role) but may not do this."""
    return Refusal(PermissionDenied, "003001", "42501", text)


def unseen(what: str) -> Refusal:
    """002003: the role cannot see the object, which answers as a missing one would."""
    return Refusal(ObjectNotFound, "002003", "02000", f"{what} does not exist or not authorized")


ACCOUNT = denied("Insufficient privileges to operate on account")
NOT_FOUND = HttpRefusal(404, "390404", "Specified object does not exist or not authorized. Pipe")


@dataclass(frozen=True)
class Row:
    """One statement form or route, and what it takes."""

    name: str
    sql: str = ""
    route: tuple[str, str] | None = None
    """(method, path) as the app registers it (``app_routes``); ``{pipe_name}`` is the world's pipe."""
    grants: tuple[str, ...] = ()
    """Exactly enough: with them the statement succeeds, without any one of them it fails."""
    fails: Refusal | HttpRefusal | None = None
    """The answer with none of ``grants``; None for SHOW rows (they filter) and rows needing nothing."""
    lists: str | None = None
    """SHOW rows: the name listed with the grants and left out without them; console page rows: a
    fragment of the page's HTML, shown with the grants and not without."""
    given: tuple[str, ...] = ()
    """Grants held in every case (they make the object visible), never dropped."""
    setup: tuple[str, ...] = ()
    """More ACCOUNTADMIN statements for this row's world (what a REVOKE takes back)."""
    query: str = ""
    """REST rows: the query string after requestId; stage rows: the location; console rows: the
    query string."""
    body: tuple[tuple[str, str], ...] = ()
    """The SQL endpoint's JSON fields, or a console action's form fields."""
    stream_pipe: str = "STREAM"
    """Streaming route rows: the pipe in SALES.RAW the route names."""
    owned: tuple[type[CatalogObject], str] | None = None
    """CREATE rows: the object made, which the caller's role must own afterwards."""


STREAMING_PIPE = (
    "CREATE PIPE sales.raw.stream AS COPY INTO sales.raw.orders FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING'))"
)
PIPE_DEF = "AUTO_INGEST = FALSE AS COPY INTO sales.raw.orders FROM @sales.raw.landing"
HISTORY = (
    "SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => 'sales.raw.orders', "
    "START_TIME => DATEADD(hours, -1, CURRENT_TIMESTAMP())))"
)
INTEGRATION = (
    "STORAGE INTEGRATION {name} TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' ENABLED = TRUE "
    "STORAGE_ALLOWED_LOCATIONS = ('s3://{name}/')"
)
API_INTEGRATION = (
    "API INTEGRATION {name} API_PROVIDER = aws_api_gateway ENABLED = TRUE "
    "API_ALLOWED_PREFIXES = ('https://fn.example.com/')"
)
FUNCTION_DEF = "RETURNS VARIANT API_INTEGRATION = remote AS 'https://fn.example.com/score'"
NOTIFICATION_INTEGRATION = (
    "NOTIFICATION INTEGRATION {name} TYPE = QUEUE DIRECTION = OUTBOUND NOTIFICATION_PROVIDER = AWS_SNS "
    "AWS_SNS_TOPIC_ARN = 'arn:aws:sns:us-east-1:000000000000:{name}' ENABLED = TRUE"
)

NAMESPACES = [
    Row(
        "CREATE DATABASE",
        "CREATE DATABASE mart",
        owned=(Database, "MART"),
        grants=(on_account("CREATE DATABASE"),),
        fails=ACCOUNT,
    ),
    Row(
        "CREATE DATABASE IF NOT EXISTS, existing",
        "CREATE DATABASE IF NOT EXISTS sales",
        grants=(on_account("CREATE DATABASE"),),
        fails=ACCOUNT,
    ),
    Row(
        "CREATE OR REPLACE DATABASE",
        "CREATE OR REPLACE DATABASE sales",
        owned=(Database, "SALES"),
        grants=(on_account("CREATE DATABASE"), owns("DATABASE", "sales")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE SCHEMA",
        "CREATE SCHEMA sales.staging",
        owned=(Schema, "SALES.STAGING"),
        grants=(DB, on("CREATE SCHEMA", "DATABASE", "sales")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE OR REPLACE SCHEMA",
        "CREATE OR REPLACE SCHEMA sales.raw",
        owned=(Schema, "SALES.RAW"),
        grants=(DB, on("CREATE SCHEMA", "DATABASE", "sales"), owns("SCHEMA", "sales.raw")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE OR REPLACE SCHEMA, visible but not owned",
        "CREATE OR REPLACE SCHEMA sales.raw",
        owned=(Schema, "SALES.RAW"),
        given=INSIDE,
        grants=(on("CREATE SCHEMA", "DATABASE", "sales"), owns("SCHEMA", "sales.raw")),
        fails=denied("Insufficient privileges to operate on schema 'RAW'"),
    ),
    Row(
        "CREATE STORAGE INTEGRATION",
        "CREATE " + INTEGRATION.format(name="pond"),
        owned=(StorageIntegration, "POND"),
        grants=(on_account("CREATE INTEGRATION"),),
        fails=ACCOUNT,
    ),
    Row(
        "CREATE OR REPLACE STORAGE INTEGRATION",
        "CREATE OR REPLACE " + INTEGRATION.format(name="lake"),
        owned=(StorageIntegration, "LAKE"),
        grants=(on_account("CREATE INTEGRATION"), owns("INTEGRATION", "lake")),
        fails=unseen("Integration 'LAKE'"),
    ),
    Row(
        "CREATE API INTEGRATION",
        "CREATE " + API_INTEGRATION.format(name="gate"),
        owned=(ApiIntegration, "GATE"),
        grants=(on_account("CREATE INTEGRATION"),),
        fails=ACCOUNT,
    ),
    Row(
        "CREATE OR REPLACE API INTEGRATION",
        "CREATE OR REPLACE " + API_INTEGRATION.format(name="remote"),
        owned=(ApiIntegration, "REMOTE"),
        grants=(on_account("CREATE INTEGRATION"), owns("INTEGRATION", "remote")),
        fails=unseen("Integration 'REMOTE'"),
    ),
    Row(
        "CREATE NOTIFICATION INTEGRATION",
        "CREATE " + NOTIFICATION_INTEGRATION.format(name="alarms"),
        owned=(NotificationIntegration, "ALARMS"),
        grants=(on_account("CREATE INTEGRATION"),),
        fails=ACCOUNT,
    ),
    Row(
        "CREATE OR REPLACE NOTIFICATION INTEGRATION",
        "CREATE OR REPLACE " + NOTIFICATION_INTEGRATION.format(name="alerts"),
        owned=(NotificationIntegration, "ALERTS"),
        setup=("CREATE " + NOTIFICATION_INTEGRATION.format(name="alerts"),),
        grants=(on_account("CREATE INTEGRATION"), owns("INTEGRATION", "alerts")),
        fails=unseen("Integration 'ALERTS'"),
    ),
]

OBJECTS = [
    Row(
        "CREATE STAGE",
        "CREATE STAGE sales.raw.inbox URL = 's3://lake/inbox/' STORAGE_INTEGRATION = lake",
        owned=(Stage, "SALES.RAW.INBOX"),
        grants=(*INSIDE, on("CREATE STAGE", "SCHEMA", "sales.raw"), on("USAGE", "INTEGRATION", "lake")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE STAGE, schema usable without CREATE STAGE",
        "CREATE STAGE sales.raw.inbox URL = 's3://lake/inbox/' STORAGE_INTEGRATION = lake",
        owned=(Stage, "SALES.RAW.INBOX"),
        given=(*INSIDE, on("USAGE", "INTEGRATION", "lake")),
        grants=(on("CREATE STAGE", "SCHEMA", "sales.raw"),),
        fails=denied("Insufficient privileges to operate on schema 'RAW'"),
    ),
    Row(
        "CREATE OR REPLACE STAGE",
        "CREATE OR REPLACE STAGE sales.raw.landing URL = 's3://lake/in/' STORAGE_INTEGRATION = lake",
        owned=(Stage, "SALES.RAW.LANDING"),
        grants=(
            *INSIDE,
            on("CREATE STAGE", "SCHEMA", "sales.raw"),
            on("USAGE", "INTEGRATION", "lake"),
            owns("STAGE", "sales.raw.landing"),
        ),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE TABLE",
        "CREATE TABLE sales.raw.returns (a INT)",
        owned=(Table, "SALES.RAW.RETURNS"),
        grants=(*INSIDE, on("CREATE TABLE", "SCHEMA", "sales.raw")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE OR REPLACE TABLE",
        "CREATE OR REPLACE TABLE sales.raw.orders (a INT)",
        owned=(Table, "SALES.RAW.ORDERS"),
        grants=(*INSIDE, on("CREATE TABLE", "SCHEMA", "sales.raw"), owns("TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE PIPE",
        f"CREATE PIPE sales.raw.second {PIPE_DEF}",
        owned=(Pipe, "SALES.RAW.SECOND"),
        grants=(
            *INSIDE,
            on("CREATE PIPE", "SCHEMA", "sales.raw"),
            on("INSERT", "TABLE", "sales.raw.orders"),
            on("USAGE", "STAGE", "sales.raw.landing"),
        ),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE PIPE with ERROR_INTEGRATION",
        f"CREATE PIPE sales.raw.second ERROR_INTEGRATION = alerts {PIPE_DEF}",
        owned=(Pipe, "SALES.RAW.SECOND"),
        setup=("CREATE " + NOTIFICATION_INTEGRATION.format(name="alerts"),),
        given=(
            *INSIDE,
            on("CREATE PIPE", "SCHEMA", "sales.raw"),
            on("INSERT", "TABLE", "sales.raw.orders"),
            on("USAGE", "STAGE", "sales.raw.landing"),
        ),
        grants=(on("USAGE", "INTEGRATION", "alerts"),),
        fails=unseen("Integration 'ALERTS'"),
    ),
    Row(
        "CREATE PIPE, table visible without INSERT",
        f"CREATE PIPE sales.raw.second {PIPE_DEF}",
        owned=(Pipe, "SALES.RAW.SECOND"),
        given=(
            *INSIDE,
            on("CREATE PIPE", "SCHEMA", "sales.raw"),
            on("USAGE", "STAGE", "sales.raw.landing"),
            on("SELECT", "TABLE", "sales.raw.orders"),
        ),
        grants=(on("INSERT", "TABLE", "sales.raw.orders"),),
        fails=denied("Insufficient privileges to operate on table 'ORDERS'"),
    ),
    Row(
        "CREATE OR REPLACE PIPE",
        f"CREATE OR REPLACE PIPE sales.raw.loader {PIPE_DEF}",
        owned=(Pipe, PIPE),
        grants=(
            *INSIDE,
            on("CREATE PIPE", "SCHEMA", "sales.raw"),
            on("INSERT", "TABLE", "sales.raw.orders"),
            on("USAGE", "STAGE", "sales.raw.landing"),
            owns("PIPE", "sales.raw.loader"),
        ),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE EXTERNAL FUNCTION",
        f"CREATE EXTERNAL FUNCTION sales.raw.rank(a INT) {FUNCTION_DEF}",
        owned=(ExternalFunction, "SALES.RAW.RANK(NUMBER)"),
        grants=(*INSIDE, on("CREATE FUNCTION", "SCHEMA", "sales.raw"), on("USAGE", "INTEGRATION", "remote")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE EXTERNAL FUNCTION, schema usable without CREATE FUNCTION",
        f"CREATE EXTERNAL FUNCTION sales.raw.rank(a INT) {FUNCTION_DEF}",
        owned=(ExternalFunction, "SALES.RAW.RANK(NUMBER)"),
        given=(*INSIDE, on("USAGE", "INTEGRATION", "remote")),
        grants=(on("CREATE FUNCTION", "SCHEMA", "sales.raw"),),
        fails=denied("Insufficient privileges to operate on schema 'RAW'"),
    ),
    Row(
        "CREATE EXTERNAL FUNCTION, another overload",
        f"CREATE EXTERNAL FUNCTION sales.raw.score(a VARCHAR) {FUNCTION_DEF}",
        owned=(ExternalFunction, "SALES.RAW.SCORE(VARCHAR)"),
        grants=(*INSIDE, on("CREATE FUNCTION", "SCHEMA", "sales.raw"), on("USAGE", "INTEGRATION", "remote")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE OR REPLACE EXTERNAL FUNCTION",
        f"CREATE OR REPLACE EXTERNAL FUNCTION sales.raw.score(b NUMBER) {FUNCTION_DEF}",
        owned=(ExternalFunction, "SALES.RAW.SCORE(NUMBER)"),
        grants=(
            *INSIDE,
            on("CREATE FUNCTION", "SCHEMA", "sales.raw"),
            on("USAGE", "INTEGRATION", "remote"),
            owns("FUNCTION", FUNCTION),
        ),
        fails=unseen("Database 'SALES'"),
    ),
]

SHOWS = [
    Row("SHOW DATABASES", "SHOW DATABASES", grants=(DB,), lists="SALES"),
    Row("SHOW SCHEMAS", "SHOW SCHEMAS IN DATABASE sales", given=(DB,), grants=(SCHEMA,), lists="RAW"),
    Row(
        "SHOW ... IN a container it cannot use",
        "SHOW TABLES IN SCHEMA sales.raw",
        grants=INSIDE,
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "SHOW INTEGRATIONS",
        "SHOW INTEGRATIONS",
        grants=(on("USAGE", "INTEGRATION", "lake"),),
        lists="LAKE",
    ),
    Row(
        "SHOW STAGES",
        "SHOW STAGES IN SCHEMA sales.raw",
        given=INSIDE,
        grants=(on("USAGE", "STAGE", "sales.raw.landing"),),
        lists="LANDING",
    ),
    Row(
        "SHOW TABLES",
        "SHOW TABLES IN SCHEMA sales.raw",
        given=INSIDE,
        grants=(on("SELECT", "TABLE", "sales.raw.orders"),),
        lists="ORDERS",
    ),
    Row(
        "SHOW PIPES",
        "SHOW PIPES IN SCHEMA sales.raw",
        given=INSIDE,
        grants=(on("MONITOR", "PIPE", "sales.raw.loader"),),
        lists="LOADER",
    ),
    Row(
        "SHOW INTEGRATIONS, an API integration",
        "SHOW INTEGRATIONS",
        grants=(on("USAGE", "INTEGRATION", "remote"),),
        lists="REMOTE",
    ),
    Row(
        "SHOW API INTEGRATIONS",
        "SHOW API INTEGRATIONS",
        grants=(on("USAGE", "INTEGRATION", "remote"),),
        lists="REMOTE",
    ),
    Row(
        "SHOW EXTERNAL FUNCTIONS",
        "SHOW EXTERNAL FUNCTIONS IN SCHEMA sales.raw",
        given=INSIDE,
        grants=(on("USAGE", "FUNCTION", FUNCTION),),
        lists="SCORE",
    ),
    Row(
        "SHOW EXTERNAL FUNCTIONS, schema not usable",
        "SHOW EXTERNAL FUNCTIONS",
        given=(on("USAGE", "FUNCTION", FUNCTION),),
        grants=INSIDE,
        lists="SCORE",
    ),
    Row("SHOW ROLES (anyone)", "SHOW ROLES", lists="ROLE_A"),
    Row(
        "SHOW USERS, an owned user",
        "SHOW USERS",
        grants=(owns("USER", "user_b"),),
        lists="USER_B",
    ),
    Row(
        "SHOW USERS, via MANAGE GRANTS",
        "SHOW USERS",
        grants=(on_account("MANAGE GRANTS"),),
        lists="USER_B",
    ),
    Row("SHOW USERS, oneself (anyone)", "SHOW USERS", lists=USER),
]

DESCRIBES = [
    Row(
        "DESC TABLE",
        "DESC TABLE sales.raw.orders",
        grants=(*INSIDE, on("SELECT", "TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "DESC STAGE",
        "DESC STAGE sales.raw.landing",
        grants=(*INSIDE, on("USAGE", "STAGE", "sales.raw.landing")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "DESC PIPE",
        "DESC PIPE sales.raw.loader",
        grants=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.loader")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "SHOW CHANNELS IN PIPE",
        "SHOW CHANNELS IN PIPE sales.raw.stream",
        setup=(STREAMING_PIPE,),
        given=INSIDE,
        grants=(on("MONITOR", "PIPE", "sales.raw.stream"),),
        fails=unseen("Pipe 'SALES.RAW.STREAM'"),
    ),
    Row("SHOW CHANNELS (anyone: it lists what the roles see)", "SHOW CHANNELS", setup=(STREAMING_PIPE,)),
    Row(
        "CREATE PIPE, streaming",
        "CREATE PIPE sales.raw.rows AS COPY INTO sales.raw.orders "
        "FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING'))",
        grants=(*INSIDE, on("CREATE PIPE", "SCHEMA", "sales.raw"), on("INSERT", "TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
        owned=(Pipe, "SALES.RAW.ROWS"),
    ),
    Row(
        "DESC PIPE, schema usable",
        "DESC PIPE sales.raw.loader",
        given=INSIDE,
        grants=(on("MONITOR", "PIPE", "sales.raw.loader"),),
        fails=unseen("Pipe 'SALES.RAW.LOADER'"),
    ),
    Row("DESC DATABASE", "DESC DATABASE sales", grants=(DB,), fails=unseen("Database 'SALES'")),
    Row("DESC SCHEMA", "DESC SCHEMA sales.raw", grants=INSIDE, fails=unseen("Database 'SALES'")),
    Row(
        "DESC INTEGRATION",
        "DESC INTEGRATION lake",
        grants=(on("USAGE", "INTEGRATION", "lake"),),
        fails=unseen("Integration 'LAKE'"),
    ),
    Row(
        "DESC API INTEGRATION",
        "DESC API INTEGRATION remote",
        grants=(on("USAGE", "INTEGRATION", "remote"),),
        fails=unseen("Integration 'REMOTE'"),
    ),
    Row(
        "DESC FUNCTION",
        "DESC FUNCTION sales.raw.score(INT)",
        grants=(*INSIDE, on("USAGE", "FUNCTION", FUNCTION)),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "DESC FUNCTION, schema usable",
        "DESC FUNCTION sales.raw.score(INT)",
        given=INSIDE,
        grants=(on("USAGE", "FUNCTION", FUNCTION),),
        fails=unseen("Function 'SALES.RAW.SCORE(NUMBER)'"),
    ),
]

DROPS = [
    Row(
        "DROP TABLE",
        "DROP TABLE sales.raw.orders",
        grants=(*INSIDE, owns("TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "DROP TABLE, visible but not owned",
        "DROP TABLE sales.raw.orders",
        given=(*INSIDE, on("SELECT", "TABLE", "sales.raw.orders")),
        grants=(owns("TABLE", "sales.raw.orders"),),
        fails=denied("Insufficient privileges to operate on table 'ORDERS'"),
    ),
    Row(
        "DROP TABLE IF EXISTS, absent",
        "DROP TABLE IF EXISTS sales.raw.ghost",
        grants=INSIDE,
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "DROP STAGE",
        "DROP STAGE sales.raw.landing",
        grants=(*INSIDE, owns("STAGE", "sales.raw.landing")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "ALTER STAGE SET COMMENT",
        "ALTER STAGE sales.raw.landing SET COMMENT = 'raw files'",
        grants=(*INSIDE, owns("STAGE", "sales.raw.landing")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "ALTER STAGE SET URL (USAGE on its integration)",
        "ALTER STAGE sales.raw.landing SET URL = 's3://lake/moved/'",
        given=INSIDE,
        grants=(owns("STAGE", "sales.raw.landing"), on("USAGE", "INTEGRATION", "lake")),
        fails=unseen("Stage 'SALES.RAW.LANDING'"),
    ),
    Row(
        "DROP PIPE",
        "DROP PIPE sales.raw.loader",
        grants=(*INSIDE, owns("PIPE", "sales.raw.loader")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "DROP PIPE, OPERATE is not OWNERSHIP",
        "DROP PIPE sales.raw.loader",
        given=(*INSIDE, on("OPERATE", "PIPE", "sales.raw.loader")),
        grants=(owns("PIPE", "sales.raw.loader"),),
        fails=denied("Insufficient privileges to operate on pipe 'LOADER'"),
    ),
    Row(
        "DROP DATABASE",
        "DROP DATABASE sales",
        grants=(owns("DATABASE", "sales"),),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "DROP SCHEMA",
        "DROP SCHEMA sales.raw",
        grants=(DB, owns("SCHEMA", "sales.raw")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "DROP INTEGRATION",
        "DROP STORAGE INTEGRATION lake",
        grants=(owns("INTEGRATION", "lake"),),
        fails=unseen("Integration 'LAKE'"),
    ),
    Row(
        "ALTER INTEGRATION",
        "ALTER STORAGE INTEGRATION lake SET STORAGE_BLOCKED_LOCATIONS = ('s3://lake/in/')",
        grants=(owns("INTEGRATION", "lake"),),
        fails=unseen("Integration 'LAKE'"),
    ),
    Row(
        "ALTER INTEGRATION, with USAGE only",
        "ALTER INTEGRATION lake SET ENABLED = FALSE",
        grants=(owns("INTEGRATION", "lake"),),
        given=(on("USAGE", "INTEGRATION", "lake"),),
        fails=denied("Insufficient privileges to operate on integration 'LAKE'"),
    ),
    Row(
        "DROP FUNCTION",
        "DROP FUNCTION sales.raw.score(NUMBER)",
        grants=(*INSIDE, owns("FUNCTION", FUNCTION)),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "DROP FUNCTION, USAGE is not OWNERSHIP",
        "DROP FUNCTION sales.raw.score(NUMBER)",
        given=(*INSIDE, on("USAGE", "FUNCTION", FUNCTION)),
        grants=(owns("FUNCTION", FUNCTION),),
        fails=denied("Insufficient privileges to operate on function 'SCORE(NUMBER)'"),
    ),
    Row(
        "DROP FUNCTION IF EXISTS, absent",
        "DROP FUNCTION IF EXISTS sales.raw.ghost()",
        grants=INSIDE,
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "DROP API INTEGRATION",
        "DROP API INTEGRATION remote",
        grants=(owns("INTEGRATION", "remote"),),
        fails=unseen("Integration 'REMOTE'"),
    ),
    Row(
        "ALTER API INTEGRATION",
        "ALTER API INTEGRATION remote SET API_BLOCKED_PREFIXES = ('https://fn.example.com/admin/')",
        grants=(owns("INTEGRATION", "remote"),),
        fails=unseen("Integration 'REMOTE'"),
    ),
    Row(
        "ALTER API INTEGRATION, with USAGE only",
        "ALTER INTEGRATION remote UNSET API_KEY",
        given=(on("USAGE", "INTEGRATION", "remote"),),
        grants=(owns("INTEGRATION", "remote"),),
        fails=denied("Insufficient privileges to operate on integration 'REMOTE'"),
    ),
    Row(
        "DROP DATABASE IF EXISTS, absent",
        "DROP DATABASE IF EXISTS ghost",
        grants=(on("CREATE DATABASE", "ACCOUNT", ""),),
        fails=unseen("Database 'GHOST'"),
    ),
]

PIPES_AND_QUERIES = [
    Row(
        "ALTER PIPE",
        "ALTER PIPE sales.raw.loader SET PIPE_EXECUTION_PAUSED = TRUE",
        grants=(*INSIDE, on("OPERATE", "PIPE", "sales.raw.loader")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "ALTER PIPE, MONITOR is not OPERATE",
        "ALTER PIPE sales.raw.loader SET PIPE_EXECUTION_PAUSED = TRUE",
        given=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.loader")),
        grants=(on("OPERATE", "PIPE", "sales.raw.loader"),),
        fails=denied("Insufficient privileges to operate on pipe 'LOADER'"),
    ),
    Row(
        "ALTER PIPE SET COMMENT, OPERATE is not OWNERSHIP",
        "ALTER PIPE sales.raw.loader SET COMMENT = 'x'",
        given=(*INSIDE, on("OPERATE", "PIPE", "sales.raw.loader")),
        grants=(owns("PIPE", "sales.raw.loader"),),
        fails=denied("Insufficient privileges to operate on pipe 'LOADER'"),
    ),
    Row(
        "ALTER TABLE",
        "ALTER TABLE sales.raw.orders ADD COLUMN b VARCHAR",
        grants=(*INSIDE, owns("TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "ALTER TABLE SET ENABLE_SCHEMA_EVOLUTION, EVOLVE SCHEMA is not OWNERSHIP",
        "ALTER TABLE sales.raw.orders SET ENABLE_SCHEMA_EVOLUTION = TRUE",
        given=(*INSIDE, on("EVOLVE SCHEMA", "TABLE", "sales.raw.orders")),
        grants=(owns("TABLE", "sales.raw.orders"),),
        fails=denied("Insufficient privileges to operate on table 'ORDERS'"),
    ),
    Row(
        "SYSTEM$PIPE_FORCE_RESUME via OPERATE",
        "SELECT SYSTEM$PIPE_FORCE_RESUME('sales.raw.loader') AS r",
        grants=(*INSIDE, on("OPERATE", "PIPE", "sales.raw.loader")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "VALIDATE_PIPE_LOAD via MONITOR, with the stage and the table",
        "SELECT * FROM TABLE(VALIDATE_PIPE_LOAD(PIPE_NAME => 'sales.raw.loader', "
        "START_TIME => DATEADD(hours, -1, CURRENT_TIMESTAMP())))",
        grants=(
            *INSIDE,
            on("MONITOR", "PIPE", "sales.raw.loader"),
            on("USAGE", "STAGE", "sales.raw.landing"),
            on("SELECT", "TABLE", "sales.raw.orders"),
            on("INSERT", "TABLE", "sales.raw.orders"),
        ),
        fails=unseen("Database 'SALES'"),
    ),
    # REFRESH of an existing pipe lists its stage in S3, which the world has no bucket for; its
    # OPERATE rule is tested with a real bucket in tests/services/test_pipe_refresh.py.
    Row(
        "ALTER PIPE REFRESH IF EXISTS, absent",
        "ALTER PIPE IF EXISTS sales.raw.ghost REFRESH",
        grants=INSIDE,
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "SELECT",
        "SELECT COUNT(*) AS n FROM sales.raw.orders",
        grants=(*INSIDE, on("SELECT", "TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "SELECT, INSERT is not SELECT",
        "SELECT COUNT(*) AS n FROM sales.raw.orders",
        given=(*INSIDE, on("INSERT", "TABLE", "sales.raw.orders")),
        grants=(on("SELECT", "TABLE", "sales.raw.orders"),),
        fails=denied("Insufficient privileges to operate on table 'ORDERS'"),
    ),
    Row(
        "COPY_HISTORY via SELECT on the table",
        HISTORY,
        grants=(*INSIDE, on("SELECT", "TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "COPY_HISTORY via MONITOR on the pipe",
        HISTORY,
        grants=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.loader")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "SYSTEM$PIPE_STATUS via MONITOR",
        "SELECT SYSTEM$PIPE_STATUS('sales.raw.loader') AS s",
        grants=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.loader")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "SYSTEM$PIPE_STATUS via OPERATE",
        "SELECT SYSTEM$PIPE_STATUS('sales.raw.loader') AS s",
        grants=(*INSIDE, on("OPERATE", "PIPE", "sales.raw.loader")),
        fails=unseen("Database 'SALES'"),
    ),
]

SESSIONS = [
    Row("USE ROLE, one's own (anyone)", f"USE ROLE {ROLE}"),
    Row(
        "USE ROLE, granted to one's role",
        "USE ROLE role_a",
        grants=("GRANT ROLE role_a TO ROLE {role}",),
        fails=Refusal(SqlError, "003013", "42501", "Requested role 'ROLE_A' is not assigned"),
    ),
    Row("USE SECONDARY ROLES (anyone)", "USE SECONDARY ROLES NONE"),
]

USERS = [
    Row(
        "CREATE USER",
        "CREATE USER newbie",
        owned=(User, "NEWBIE"),
        grants=(on_account("CREATE USER"),),
        fails=ACCOUNT,
    ),
    Row(
        "CREATE OR REPLACE USER",
        "CREATE OR REPLACE USER user_b",
        grants=(on_account("CREATE USER"), owns("USER", "user_b")),
        fails=ACCOUNT,
    ),
    Row(
        "ALTER USER, another user",
        "ALTER USER user_b SET DEFAULT_ROLE = role_a",
        grants=(owns("USER", "user_b"),),
        fails=unseen("User 'USER_B'"),
    ),
    Row("ALTER USER, one's own default role (anyone)", f"ALTER USER {USER} SET DEFAULT_ROLE = role_a"),
    Row("ALTER USER, one's own key (anyone)", f"ALTER USER {USER} SET RSA_PUBLIC_KEY_2 = '{{key}}'"),
    Row(
        "DROP USER",
        "DROP USER user_b",
        grants=(owns("USER", "user_b"),),
        fails=unseen("User 'USER_B'"),
    ),
    Row(
        "DESC USER, another user",
        "DESC USER user_b",
        grants=(on("MONITOR", "USER", "user_b"),),
        fails=unseen("User 'USER_B'"),
    ),
    Row("DESC USER, oneself (anyone)", f"DESC USER {USER}"),
]

ROLES = [
    Row(
        "CREATE ROLE",
        "CREATE ROLE newrole",
        owned=(Role, "NEWROLE"),
        grants=(on_account("CREATE ROLE"),),
        fails=ACCOUNT,
    ),
    Row(
        "CREATE OR REPLACE ROLE",
        "CREATE OR REPLACE ROLE role_a",
        grants=(on_account("CREATE ROLE"), owns("ROLE", "role_a")),
        fails=ACCOUNT,
    ),
    Row(
        "DROP ROLE",
        "DROP ROLE role_a",
        grants=(owns("ROLE", "role_a"),),
        fails=denied("Insufficient privileges to operate on role 'ROLE_A'"),
    ),
    Row(
        "DROP ROLE IF EXISTS, absent",
        "DROP ROLE IF EXISTS ghost",
        grants=(on_account("CREATE ROLE"),),
        fails=unseen("Role 'GHOST'"),
    ),
    Row(
        "GRANT ROLE TO ROLE",
        "GRANT ROLE role_a TO ROLE role_b",
        grants=(owns("ROLE", "role_a"),),
        fails=denied("Insufficient privileges to operate on role 'ROLE_A'"),
    ),
    Row(
        "GRANT ROLE TO USER",
        "GRANT ROLE role_a TO USER user_b",
        grants=(owns("ROLE", "role_a"),),
        fails=denied("Insufficient privileges to operate on role 'ROLE_A'"),
    ),
    Row(
        "GRANT ROLE, via MANAGE GRANTS",
        "GRANT ROLE role_a TO ROLE role_b",
        grants=(on_account("MANAGE GRANTS"),),
        fails=denied("Insufficient privileges to operate on role 'ROLE_A'"),
    ),
    Row(
        "GRANT ROLE ACCOUNTADMIN, only ACCOUNTADMIN",
        "GRANT ROLE accountadmin TO ROLE role_b",
        given=(on_account("MANAGE GRANTS"),),
        grants=("GRANT ROLE accountadmin TO ROLE {role}",),
        fails=denied("Insufficient privileges to grant role 'ACCOUNTADMIN': only ACCOUNTADMIN may"),
    ),
    Row(
        "REVOKE ROLE FROM ROLE",
        "REVOKE ROLE role_a FROM ROLE role_b",
        setup=("GRANT ROLE role_a TO ROLE role_b",),
        grants=(owns("ROLE", "role_a"),),
        fails=denied("Insufficient privileges to operate on role 'ROLE_A'"),
    ),
    Row(
        "REVOKE ROLE FROM USER",
        "REVOKE ROLE role_a FROM USER user_b",
        setup=("GRANT ROLE role_a TO USER user_b",),
        grants=(owns("ROLE", "role_a"),),
        fails=denied("Insufficient privileges to operate on role 'ROLE_A'"),
    ),
]

GRANTS = [
    Row(
        "GRANT ON ACCOUNT",
        "GRANT CREATE DATABASE ON ACCOUNT TO ROLE role_b",
        grants=(on_account("MANAGE GRANTS"),),
        fails=ACCOUNT,
    ),
    Row(
        "GRANT ON DATABASE",
        "GRANT USAGE ON DATABASE sales TO ROLE role_b",
        grants=(owns("DATABASE", "sales"),),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "GRANT ON SCHEMA",
        "GRANT USAGE ON SCHEMA sales.raw TO ROLE role_b",
        grants=(DB, owns("SCHEMA", "sales.raw")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "GRANT ON TABLE",
        "GRANT SELECT ON TABLE sales.raw.orders TO ROLE role_b",
        grants=(*INSIDE, owns("TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "GRANT ON TABLE, holding the privilege is not granting it",
        "GRANT SELECT ON TABLE sales.raw.orders TO ROLE role_b",
        given=(*INSIDE, on("SELECT", "TABLE", "sales.raw.orders")),
        grants=(owns("TABLE", "sales.raw.orders"),),
        fails=denied("Insufficient privileges to operate on table 'ORDERS'"),
    ),
    Row(
        "GRANT ON TABLE, via MANAGE GRANTS",
        "GRANT SELECT ON TABLE sales.raw.orders TO ROLE role_b",
        grants=(on_account("MANAGE GRANTS"),),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "GRANT ON STAGE",
        "GRANT USAGE ON STAGE sales.raw.landing TO ROLE role_b",
        grants=(*INSIDE, owns("STAGE", "sales.raw.landing")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "GRANT ON PIPE",
        "GRANT MONITOR ON PIPE sales.raw.loader TO ROLE role_b",
        grants=(*INSIDE, owns("PIPE", "sales.raw.loader")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "GRANT ON INTEGRATION",
        "GRANT USAGE ON INTEGRATION lake TO ROLE role_b",
        grants=(owns("INTEGRATION", "lake"),),
        fails=unseen("Integration 'LAKE'"),
    ),
    Row(
        "GRANT ON API INTEGRATION",
        "GRANT USAGE ON API INTEGRATION remote TO ROLE role_b",
        grants=(owns("INTEGRATION", "remote"),),
        fails=unseen("Integration 'REMOTE'"),
    ),
    Row(
        "GRANT ON FUNCTION",
        f"GRANT USAGE ON FUNCTION {FUNCTION} TO ROLE role_b",
        grants=(*INSIDE, owns("FUNCTION", FUNCTION)),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "GRANT ON FUNCTION, holding USAGE is not granting it",
        f"GRANT USAGE ON FUNCTION {FUNCTION} TO ROLE role_b",
        given=(*INSIDE, on("USAGE", "FUNCTION", FUNCTION)),
        grants=(owns("FUNCTION", FUNCTION),),
        fails=denied("Insufficient privileges to operate on function 'SCORE(NUMBER)'"),
    ),
    Row(
        "GRANT ON FUTURE FUNCTIONS IN SCHEMA",
        "GRANT USAGE ON FUTURE FUNCTIONS IN SCHEMA sales.raw TO ROLE role_b",
        grants=(DB, owns("SCHEMA", "sales.raw")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "GRANT ON ROLE (OWNERSHIP)",
        "GRANT OWNERSHIP ON ROLE role_a TO ROLE role_b",
        grants=(owns("ROLE", "role_a"),),
        fails=denied("Insufficient privileges to operate on role 'ROLE_A'"),
    ),
    Row(
        "GRANT ON USER",
        "GRANT MONITOR ON USER user_b TO ROLE role_b",
        grants=(owns("USER", "user_b"),),
        fails=unseen("User 'USER_B'"),
    ),
    Row(
        "GRANT OWNERSHIP ... COPY CURRENT GRANTS",
        "GRANT OWNERSHIP ON TABLE sales.raw.orders TO ROLE role_b COPY CURRENT GRANTS",
        grants=(*INSIDE, owns("TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "GRANT ON ALL TABLES IN SCHEMA",
        "GRANT SELECT ON ALL TABLES IN SCHEMA sales.raw TO ROLE role_b",
        grants=(DB, owns("SCHEMA", "sales.raw")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "GRANT ON FUTURE TABLES IN SCHEMA",
        "GRANT SELECT ON FUTURE TABLES IN SCHEMA sales.raw TO ROLE role_b",
        grants=(DB, owns("SCHEMA", "sales.raw")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "GRANT ON FUTURE PIPES IN DATABASE",
        "GRANT MONITOR ON FUTURE PIPES IN DATABASE sales TO ROLE role_b",
        grants=(owns("DATABASE", "sales"),),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "REVOKE ON ACCOUNT",
        "REVOKE CREATE DATABASE ON ACCOUNT FROM ROLE role_b",
        setup=("GRANT CREATE DATABASE ON ACCOUNT TO ROLE role_b",),
        grants=(on_account("MANAGE GRANTS"),),
        fails=ACCOUNT,
    ),
    Row(
        "REVOKE ON TABLE",
        "REVOKE SELECT ON TABLE sales.raw.orders FROM ROLE role_b",
        setup=("GRANT SELECT ON TABLE sales.raw.orders TO ROLE role_b",),
        grants=(*INSIDE, owns("TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "REVOKE ON FUNCTION",
        f"REVOKE USAGE ON FUNCTION {FUNCTION} FROM ROLE role_b",
        setup=(f"GRANT USAGE ON FUNCTION {FUNCTION} TO ROLE role_b",),
        grants=(*INSIDE, owns("FUNCTION", FUNCTION)),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "REVOKE ON FUTURE TABLES IN SCHEMA",
        "REVOKE SELECT ON FUTURE TABLES IN SCHEMA sales.raw FROM ROLE role_b",
        setup=("GRANT SELECT ON FUTURE TABLES IN SCHEMA sales.raw TO ROLE role_b",),
        grants=(DB, owns("SCHEMA", "sales.raw")),
        fails=unseen("Database 'SALES'"),
    ),
]

SHOW_GRANTS = [
    Row(
        "SHOW GRANTS TO ROLE",
        "SHOW GRANTS TO ROLE role_b",
        grants=(owns("ROLE", "role_b"),),
        fails=denied("Insufficient privileges to operate on role 'ROLE_B'"),
    ),
    Row(
        "SHOW GRANTS TO ROLE, via MANAGE GRANTS",
        "SHOW GRANTS TO ROLE role_b",
        grants=(on_account("MANAGE GRANTS"),),
        fails=denied("Insufficient privileges to operate on role 'ROLE_B'"),
    ),
    Row(
        "SHOW GRANTS TO ROLE, a role one holds",
        "SHOW GRANTS TO ROLE role_b",
        grants=("GRANT ROLE role_b TO ROLE {role}",),
        fails=denied("Insufficient privileges to operate on role 'ROLE_B'"),
    ),
    Row("SHOW GRANTS TO ROLE, one's own (anyone)", f"SHOW GRANTS TO ROLE {ROLE}"),
    Row(
        "SHOW GRANTS OF ROLE",
        "SHOW GRANTS OF ROLE role_b",
        grants=(owns("ROLE", "role_b"),),
        fails=denied("Insufficient privileges to operate on role 'ROLE_B'"),
    ),
    Row("SHOW GRANTS OF ROLE, one's own (anyone)", f"SHOW GRANTS OF ROLE {ROLE}"),
    Row(
        "SHOW GRANTS TO USER",
        "SHOW GRANTS TO USER user_b",
        grants=(owns("USER", "user_b"),),
        fails=unseen("User 'USER_B'"),
    ),
    Row("SHOW GRANTS TO USER, oneself (anyone)", f"SHOW GRANTS TO USER {USER}"),
    Row(
        "SHOW GRANTS ON TABLE",
        "SHOW GRANTS ON TABLE sales.raw.orders",
        grants=(*INSIDE, on("SELECT", "TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "SHOW GRANTS ON FUNCTION",
        f"SHOW GRANTS ON FUNCTION {FUNCTION}",
        grants=(*INSIDE, on("USAGE", "FUNCTION", FUNCTION)),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "SHOW GRANTS ON ACCOUNT",
        "SHOW GRANTS ON ACCOUNT",
        grants=(on_account("CREATE DATABASE"),),
        fails=ACCOUNT,
    ),
    Row(
        "SHOW FUTURE GRANTS",
        "SHOW FUTURE GRANTS IN SCHEMA sales.raw",
        grants=(DB, owns("SCHEMA", "sales.raw")),
        fails=unseen("Database 'SALES'"),
    ),
]

INSERT_FILES = ("POST", "/v1/data/pipes/{pipe_name}/insertFiles")
INSERT_REPORT = ("GET", "/v1/data/pipes/{pipe_name}/insertReport")
LOAD_HISTORY_SCAN = ("GET", "/v1/data/pipes/{pipe_name}/loadHistoryScan")

ROUTES = [
    Row(
        "insertFiles",
        route=INSERT_FILES,
        grants=(*INSIDE, on("OPERATE", "PIPE", "sales.raw.loader")),
        fails=NOT_FOUND,
    ),
    Row(
        "insertFiles, MONITOR is not OPERATE",
        route=INSERT_FILES,
        given=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.loader")),
        grants=(on("OPERATE", "PIPE", "sales.raw.loader"),),
        fails=HttpRefusal(403, "390403", "Insufficient privileges to operate on pipe 'LOADER'"),
    ),
    Row(
        "insertReport",
        route=INSERT_REPORT,
        grants=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.loader")),
        fails=NOT_FOUND,
    ),
    Row(
        "loadHistoryScan",
        route=LOAD_HISTORY_SCAN,
        grants=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.loader")),
        fails=NOT_FOUND,
        query="&startTimeInclusive=2020-01-01T00:00:00Z",
    ),
]

# The streaming routes' names are routed on the raw path (services/streaming_paths.py): each
# parameter has the ``segment`` convertor.
PIPE_PATH = "/v2/streaming/databases/{database:segment}/schemas/{schema:segment}/pipes/{pipe:segment}"
CHANNEL = PIPE_PATH + "/channels/{channel:segment}"
OPEN_CHANNEL = ("PUT", CHANNEL)
DROP_CHANNEL = ("DELETE", CHANNEL)
APPEND_ROWS = (
    "POST",
    "/v2/streaming/data/databases/{database:segment}/schemas/{schema:segment}/pipes/{pipe:segment}"
    "/channels/{channel:segment}/rows",
)
BULK_STATUS = ("POST", PIPE_PATH + ":bulk-channel-status")
PIPE_INFO = ("POST", PIPE_PATH + ":pipe-info")
STREAM_NOT_FOUND = HttpRefusal(404, "ERR_PIPE_DOES_NOT_EXIST_OR_NOT_AUTHORIZED", "Pipe 'SALES.RAW.STREAM'")
DEFAULT_NOT_FOUND = HttpRefusal(
    404, "ERR_PIPE_DOES_NOT_EXIST_OR_NOT_AUTHORIZED", "Pipe 'SALES.RAW.ORDERS-STREAMING'"
)

STREAMING_ROUTES = [
    Row("hostname (anyone)", route=("GET", "/v2/streaming/hostname")),
    Row("token exchange (anyone)", route=("POST", "/oauth/token")),
    Row("SDK telemetry, discarded (anyone)", route=("POST", "/telemetry/send/sessionless")),
    Row(
        "pipe info",
        route=PIPE_INFO,
        setup=(STREAMING_PIPE,),
        grants=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.stream")),
        fails=STREAM_NOT_FOUND,
    ),
    Row(
        "pipe info of a default pipe (SELECT on the table)",
        route=PIPE_INFO,
        stream_pipe="ORDERS-STREAMING",
        grants=(*INSIDE, on("SELECT", "TABLE", "sales.raw.orders")),
        fails=DEFAULT_NOT_FOUND,
    ),
    Row(
        "open channel",
        route=OPEN_CHANNEL,
        setup=(STREAMING_PIPE,),
        grants=(*INSIDE, on("OPERATE", "PIPE", "sales.raw.stream")),
        fails=STREAM_NOT_FOUND,
    ),
    Row(
        "open channel, MONITOR is not OPERATE",
        route=OPEN_CHANNEL,
        setup=(STREAMING_PIPE,),
        given=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.stream")),
        grants=(on("OPERATE", "PIPE", "sales.raw.stream"),),
        # Snowflake's 404 (the SDK retries a 403 as a bad token for hours), saying what it takes.
        fails=HttpRefusal(
            404,
            "ERR_PIPE_DOES_NOT_EXIST_OR_NOT_AUTHORIZED",
            "Insufficient privileges to operate on pipe 'STREAM'",
        ),
    ),
    Row(
        "open channel of a default pipe (INSERT on the table)",
        route=OPEN_CHANNEL,
        stream_pipe="ORDERS-STREAMING",
        grants=(*INSIDE, on("INSERT", "TABLE", "sales.raw.orders")),
        fails=DEFAULT_NOT_FOUND,
    ),
    Row(
        "append rows",
        route=APPEND_ROWS,
        setup=(STREAMING_PIPE,),
        grants=(*INSIDE, on("OPERATE", "PIPE", "sales.raw.stream")),
        fails=STREAM_NOT_FOUND,
    ),
    Row(
        "drop channel",
        route=DROP_CHANNEL,
        setup=(STREAMING_PIPE,),
        grants=(*INSIDE, on("OPERATE", "PIPE", "sales.raw.stream")),
        fails=STREAM_NOT_FOUND,
    ),
    Row(
        "bulk channel status",
        route=BULK_STATUS,
        setup=(STREAMING_PIPE,),
        grants=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.stream")),
        fails=STREAM_NOT_FOUND,
    ),
]

FILE_FORMATS = [
    Row(
        "CREATE FILE FORMAT",
        "CREATE FILE FORMAT sales.raw.tabs TYPE = CSV FIELD_DELIMITER = '\\t'",
        owned=(NamedFileFormat, "SALES.RAW.TABS"),
        grants=(*INSIDE, on("CREATE FILE FORMAT", "SCHEMA", "sales.raw")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE FILE FORMAT, schema usable without CREATE FILE FORMAT",
        "CREATE FILE FORMAT sales.raw.tabs TYPE = CSV",
        owned=(NamedFileFormat, "SALES.RAW.TABS"),
        given=INSIDE,
        grants=(on("CREATE FILE FORMAT", "SCHEMA", "sales.raw"),),
        fails=denied("Insufficient privileges to operate on schema 'RAW'"),
    ),
    Row(
        "CREATE OR REPLACE FILE FORMAT",
        "CREATE OR REPLACE FILE FORMAT sales.raw.pipes TYPE = JSON",
        owned=(NamedFileFormat, "SALES.RAW.PIPES"),
        grants=(
            *INSIDE,
            on("CREATE FILE FORMAT", "SCHEMA", "sales.raw"),
            owns("FILE FORMAT", "sales.raw.pipes"),
        ),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "ALTER FILE FORMAT SET",
        "ALTER FILE FORMAT sales.raw.pipes SET SKIP_HEADER = 1",
        grants=(*INSIDE, owns("FILE FORMAT", "sales.raw.pipes")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "ALTER FILE FORMAT SET, format visible without OWNERSHIP",
        "ALTER FILE FORMAT sales.raw.pipes SET SKIP_HEADER = 1",
        given=(*INSIDE, on("USAGE", "FILE FORMAT", "sales.raw.pipes")),
        grants=(owns("FILE FORMAT", "sales.raw.pipes"),),
        fails=denied("Insufficient privileges to operate on file format 'PIPES'"),
    ),
    Row(
        "ALTER FILE FORMAT RENAME",
        "ALTER FILE FORMAT sales.raw.pipes RENAME TO sales.raw.bars",
        grants=(
            *INSIDE,
            owns("FILE FORMAT", "sales.raw.pipes"),
            on("CREATE FILE FORMAT", "SCHEMA", "sales.raw"),
        ),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "SHOW FILE FORMATS",
        "SHOW FILE FORMATS IN SCHEMA sales.raw",
        given=INSIDE,
        grants=(on("USAGE", "FILE FORMAT", "sales.raw.pipes"),),
        lists="PIPES",
    ),
    Row(
        "DESC FILE FORMAT",
        "DESC FILE FORMAT sales.raw.pipes",
        grants=(*INSIDE, on("USAGE", "FILE FORMAT", "sales.raw.pipes")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "DROP FILE FORMAT",
        "DROP FILE FORMAT sales.raw.pipes",
        grants=(*INSIDE, owns("FILE FORMAT", "sales.raw.pipes")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE STAGE naming a file format",
        "CREATE STAGE sales.raw.inbox URL = 's3://lake/inbox/' STORAGE_INTEGRATION = lake "
        "FILE_FORMAT = (FORMAT_NAME = 'sales.raw.pipes')",
        owned=(Stage, "SALES.RAW.INBOX"),
        given=(*INSIDE, on("CREATE STAGE", "SCHEMA", "sales.raw"), on("USAGE", "INTEGRATION", "lake")),
        grants=(on("USAGE", "FILE FORMAT", "sales.raw.pipes"),),
        fails=unseen("File format 'SALES.RAW.PIPES'"),
    ),
    Row(
        "CREATE PIPE naming a file format",
        f"CREATE PIPE sales.raw.second {PIPE_DEF} FILE_FORMAT = (FORMAT_NAME = 'sales.raw.pipes')",
        owned=(Pipe, "SALES.RAW.SECOND"),
        given=(
            *INSIDE,
            on("CREATE PIPE", "SCHEMA", "sales.raw"),
            on("INSERT", "TABLE", "sales.raw.orders"),
            on("USAGE", "STAGE", "sales.raw.landing"),
        ),
        grants=(on("USAGE", "FILE FORMAT", "sales.raw.pipes"),),
        fails=unseen("File format 'SALES.RAW.PIPES'"),
    ),
]

INBOUND = "CREATE STAGE sales.raw.inbound"
"""An internal stage (no URL): READ and WRITE govern it, not USAGE."""

STAGE_FILES = [
    Row(
        "CREATE STAGE, internal (no integration)",
        "CREATE STAGE sales.raw.inbox COMMENT = 'uploads'",
        owned=(Stage, "SALES.RAW.INBOX"),
        grants=(*INSIDE, on("CREATE STAGE", "SCHEMA", "sales.raw")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "LIST, internal stage",
        "LIST @sales.raw.inbound",
        setup=(INBOUND,),
        grants=(*INSIDE, on("READ", "STAGE", "sales.raw.inbound")),
        fails=unseen("Database 'SALES'"),
    ),
    # WRITE without READ cannot be held: GRANT refuses WRITE before READ (decision 84).
    Row(
        "REMOVE, internal stage",
        "REMOVE @sales.raw.inbound",
        setup=(INBOUND,),
        given=(on("READ", "STAGE", "sales.raw.inbound"),),
        grants=(*INSIDE, on("WRITE", "STAGE", "sales.raw.inbound")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "REMOVE, internal stage: READ is not WRITE",
        "RM @sales.raw.inbound PATTERN = '.*'",
        setup=(INBOUND,),
        given=(*INSIDE, on("READ", "STAGE", "sales.raw.inbound")),
        grants=(on("WRITE", "STAGE", "sales.raw.inbound"),),
        fails=denied("Insufficient privileges to operate on stage 'INBOUND'"),
    ),
    Row(
        "LIST, external stage (USAGE on it and on its integration)",
        "LIST @sales.raw.landing",
        grants=(*INSIDE, on("USAGE", "STAGE", "sales.raw.landing"), on("USAGE", "INTEGRATION", "lake")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "REMOVE, external stage",
        "REMOVE @sales.raw.landing/2026/",
        grants=(*INSIDE, on("USAGE", "STAGE", "sales.raw.landing"), on("USAGE", "INTEGRATION", "lake")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "LIST, table stage (the table's owner)",
        "LIST @sales.raw.%orders",
        grants=(*INSIDE, owns("TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "LIST, table stage: INSERT is not OWNERSHIP",
        "LIST @sales.raw.%orders",
        given=(*INSIDE, on("SELECT, INSERT", "TABLE", "sales.raw.orders")),
        grants=(owns("TABLE", "sales.raw.orders"),),
        fails=denied("Insufficient privileges to operate on table 'ORDERS'"),
    ),
    Row(
        "REMOVE, table stage",
        "REMOVE @sales.raw.%orders",
        grants=(*INSIDE, owns("TABLE", "sales.raw.orders")),
        fails=unseen("Database 'SALES'"),
    ),
    Row(
        "CREATE PIPE on an internal stage (READ on it)",
        "CREATE PIPE sales.raw.second AS COPY INTO sales.raw.orders FROM @sales.raw.inbound",
        owned=(Pipe, "SALES.RAW.SECOND"),
        setup=(INBOUND,),
        given=(*INSIDE, on("CREATE PIPE", "SCHEMA", "sales.raw"), on("INSERT", "TABLE", "sales.raw.orders")),
        grants=(on("READ", "STAGE", "sales.raw.inbound"),),
        fails=unseen("Stage 'SALES.RAW.INBOUND'"),
    ),
    Row(
        "CREATE PIPE on a table stage (the table's owner)",
        "CREATE PIPE sales.raw.second AS COPY INTO sales.raw.orders FROM @sales.raw.%orders",
        owned=(Pipe, "SALES.RAW.SECOND"),
        given=(*INSIDE, on("CREATE PIPE", "SCHEMA", "sales.raw"), on("INSERT", "TABLE", "sales.raw.orders")),
        grants=(owns("TABLE", "sales.raw.orders"),),
        fails=denied("Insufficient privileges to operate on table 'ORDERS'"),
    ),
]

SQL_PATH = "/api/v1/sql"
SELECT_ORDERS = "SELECT * FROM sales.raw.orders"
UNSEEN_SALES = "Database 'SALES' does not exist or not authorized"

SQL_ROUTE = [
    # Each statement's own checks are its SQL row's: this row shows the endpoint runs it as the caller.
    Row(
        "SQL endpoint, a statement as its caller",
        route=("POST", SQL_PATH),
        body=(("sql", SELECT_ORDERS),),
        grants=(*INSIDE, on("SELECT", "TABLE", "sales.raw.orders")),
        fails=HttpRefusal(422, "002003", UNSEEN_SALES),
    ),
]

PUT_FILE = ("PUT", f"{STAGES}/files")
GET_FILE = ("GET", f"{STAGES}/files")
LIST_FILES = ("GET", f"{STAGES}/list")
ON_INBOUND = "location=%40sales.raw.inbound"
ON_ORDERS = "location=%40sales.raw.%25orders"
"""Stage rows' query: the stage; the runner adds the file (``_run_stage_route``)."""

STAGE_ROUTES = [
    Row(
        "PUT a file, internal stage",
        route=PUT_FILE,
        query=ON_INBOUND,
        setup=(INBOUND,),
        given=(on("READ", "STAGE", "sales.raw.inbound"),),  # WRITE comes after READ (decision 84)
        grants=(*INSIDE, on("WRITE", "STAGE", "sales.raw.inbound")),
        fails=HttpRefusal(422, "002003", UNSEEN_SALES),
    ),
    Row(
        "PUT a file, internal stage: READ is not WRITE",
        route=PUT_FILE,
        query=ON_INBOUND,
        setup=(INBOUND,),
        given=(*INSIDE, on("READ", "STAGE", "sales.raw.inbound")),
        grants=(on("WRITE", "STAGE", "sales.raw.inbound"),),
        fails=HttpRefusal(403, "003001", "Insufficient privileges to operate on stage 'INBOUND'"),
    ),
    Row(
        "PUT a file, table stage (the table's owner)",
        route=PUT_FILE,
        query=ON_ORDERS,
        grants=(*INSIDE, owns("TABLE", "sales.raw.orders")),
        fails=HttpRefusal(422, "002003", UNSEEN_SALES),
    ),
    Row("PUT a file, user stage (its own user)", route=PUT_FILE, query="location=%40~"),
    Row(
        "GET a file, internal stage",
        route=GET_FILE,
        query=ON_INBOUND,
        setup=(INBOUND,),
        grants=(*INSIDE, on("READ", "STAGE", "sales.raw.inbound")),
        fails=HttpRefusal(422, "002003", UNSEEN_SALES),
    ),
    Row(
        "GET a file, table stage: INSERT is not OWNERSHIP",
        route=GET_FILE,
        query=ON_ORDERS,
        given=(*INSIDE, on("SELECT, INSERT", "TABLE", "sales.raw.orders")),
        grants=(owns("TABLE", "sales.raw.orders"),),
        fails=HttpRefusal(403, "003001", "Insufficient privileges to operate on table 'ORDERS'"),
    ),
    Row(
        "list files, internal stage",
        route=LIST_FILES,
        query=ON_INBOUND,
        setup=(INBOUND,),
        grants=(*INSIDE, on("READ", "STAGE", "sales.raw.inbound")),
        fails=HttpRefusal(422, "002003", UNSEEN_SALES),
    ),
    Row(
        "list files, table stage (the table's owner)",
        route=LIST_FILES,
        query=ON_ORDERS,
        grants=(*INSIDE, owns("TABLE", "sales.raw.orders")),
        fails=HttpRefusal(422, "002003", UNSEEN_SALES),
    ),
]

PAUSE_LOADER = (("db", "SALES"), ("schema", "RAW"), ("name", "LOADER"))
"""The form of the pipes page's pause and resume buttons, for the world's pipe."""


def shown(code: str, text: str) -> HttpRefusal:
    """A console page or action refused: it answers 200 and shows the statement's refusal."""
    return HttpRefusal(200, code, text)


CONSOLE_ROUTES = [
    # Signing in needs a key-pair JWT and nothing else (the role asked for must be granted); every
    # other console route below runs as the caller signed in that way.
    Row("console sign-in code (anyone)", route=("POST", CODES_PATH)),
    Row(
        "console pipes page",
        route=("GET", CONSOLE),
        given=INSIDE,
        grants=(on("MONITOR", "PIPE", "sales.raw.loader"),),
        lists='data-pipe="SALES.RAW.LOADER"',
    ),
    Row(
        "console pipes page, as /console/",
        route=("GET", f"{CONSOLE}/"),
        given=INSIDE,
        grants=(on("MONITOR", "PIPE", "sales.raw.loader"),),
        lists='data-pipe="SALES.RAW.LOADER"',
    ),
    Row(
        "console history page",
        route=("GET", f"{CONSOLE}/history"),
        query=urlencode(PAUSE_LOADER),
        grants=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.loader")),
        fails=shown("002003", UNSEEN_SALES),
    ),
    Row(
        "console channels page",
        route=("GET", f"{CONSOLE}/channels"),
        setup=(STREAMING_PIPE,),
        given=INSIDE,
        grants=(on("MONITOR", "PIPE", "sales.raw.stream"),),
        lists='data-channel="c"',
    ),
    Row(
        "console tables page",
        route=("GET", f"{CONSOLE}/tables"),
        given=INSIDE,
        grants=(on("SELECT", "TABLE", "sales.raw.orders"),),
        lists='data-table="SALES.RAW.ORDERS"',
    ),
    Row("console SQL page (anyone signed in)", route=("GET", f"{CONSOLE}/sql")),
    Row(
        "console SQL box, a statement as its viewer",
        route=("POST", f"{CONSOLE}/sql"),
        body=(("sql", SELECT_ORDERS),),
        grants=(*INSIDE, on("SELECT", "TABLE", "sales.raw.orders")),
        fails=shown("002003", UNSEEN_SALES),
    ),
    Row(
        "console pause",
        route=("POST", f"{CONSOLE}/pipes/pause"),
        body=PAUSE_LOADER,
        grants=(*INSIDE, on("OPERATE", "PIPE", "sales.raw.loader")),
        fails=shown("002003", UNSEEN_SALES),
    ),
    Row(
        "console pause, MONITOR is not OPERATE",
        route=("POST", f"{CONSOLE}/pipes/pause"),
        body=PAUSE_LOADER,
        given=(*INSIDE, on("MONITOR", "PIPE", "sales.raw.loader")),
        grants=(on("OPERATE", "PIPE", "sales.raw.loader"),),
        fails=shown("003001", "Insufficient privileges to operate on pipe 'LOADER'"),
    ),
    Row(
        "console resume",
        route=("POST", f"{CONSOLE}/pipes/resume"),
        body=PAUSE_LOADER,
        setup=("ALTER PIPE sales.raw.loader SET PIPE_EXECUTION_PAUSED = TRUE",),
        grants=(*INSIDE, on("OPERATE", "PIPE", "sales.raw.loader")),
        fails=shown("002003", UNSEEN_SALES),
    ),
    Row("console, no such page (anyone signed in)", route=("GET", f"{CONSOLE}/{{rest:path}}")),
]

PUBLIC = {
    # Liveness and readiness: probes hold no key (the gate's PUBLIC_PATHS).
    ("GET", "/health"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    # Metrics, while the API binds to loopback only (the tests' app); on any other address a
    # scrape needs a bearer (``ON_A_NETWORK``).
    ("GET", "/metrics"),
    # The OpenAPI schema and its two viewers: they describe the API, they reach no data.
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/docs/oauth2-redirect"),
    ("GET", "/redoc"),
    # The console before a session: the sign-in link's page (which signs nobody in), its form (the
    # one-time code and the page's form token are its credentials), the signed-out page says why,
    # signing out ends whatever session the cookie names, and the static files are the pages'
    # scripts and styles.
    ("GET", f"{CONSOLE}/signin"),
    ("POST", f"{CONSOLE}/signin"),
    ("GET", f"{CONSOLE}/signed-out"),
    ("POST", f"{CONSOLE}/signout"),
    ("GET", f"{CONSOLE}/static/{{name:path}}"),
}
"""Every route that answers without a key-pair JWT or a console session; all others need one."""

ON_A_NETWORK = PUBLIC - {("GET", "/metrics")}
"""The same, for an API bound to an address other than loopback: metrics need a bearer there."""

ROWS = [
    *NAMESPACES,
    *OBJECTS,
    *FILE_FORMATS,
    *SHOWS,
    *DESCRIBES,
    *DROPS,
    *PIPES_AND_QUERIES,
    *SESSIONS,
    *USERS,
    *ROLES,
    *GRANTS,
    *SHOW_GRANTS,
    *ROUTES,
    *STREAMING_ROUTES,
    *STAGE_FILES,
    *SQL_ROUTE,
    *STAGE_ROUTES,
    *CONSOLE_ROUTES,
]


@dataclass(frozen=True)
class Case:
    """One run of a row: the grants the caller's role holds, and whether the row should pass."""

    row: Row
    grants: tuple[str, ...]
    allowed: bool
    label: str


def cases() -> list[Case]:
    out: list[Case] = []
    for row in ROWS:
        out.append(Case(row, row.grants, True, f"{row.name} | ok"))
        if not row.grants:
            continue
        out.append(Case(row, (), False, f"{row.name} | none"))
        if len(row.grants) > 1:
            for i, grant in enumerate(row.grants):
                rest = row.grants[:i] + row.grants[i + 1 :]
                short = grant.removeprefix("GRANT ").removesuffix(" TO ROLE {role}")
                out.append(Case(row, rest, False, f"{row.name} | without {short}"))
    return out


CASES = cases()


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    """The caller's key pair (REST rows sign their tokens with it), generated once."""
    return new_private_key()


def fill(sql: str, key_body: str = "KEY") -> str:
    return sql.format(role=ROLE, user=USER, key=key_body)


def admin(ex: SqlExecutor, sql: str, key_body: str = "KEY") -> None:
    ex.execute(fill(sql, key_body), ADMIN)


@pytest.fixture(scope="module")
def template(
    services: Settings, redis_client: redis.Redis[bytes], key: rsa.RSAPrivateKey
) -> dict[str, bytes]:
    """``WORLD``, made once through SQL as the ``ex`` fixture would (on a key prefix of its own), as
    Redis dumps by key suffix: a case restores a copy in two round trips instead of running it all."""
    settings = services.model_copy(
        update={"redis": services.redis.model_copy(update={"prefix": unique("tm")})}, deep=True
    )
    prefix = settings.redis.prefix
    try:
        maker = SqlExecutor(settings, redis_client)
        maker.execute(TEST_INTEGRATION, ADMIN)
        for sql in WORLD:
            admin(maker, sql, public_key_body(key.public_key()))
    finally:
        names = [n.decode() for n in redis_client.scan_iter(match=f"{prefix}:*", count=1000)]
        dumps = redis_client.pipeline(transaction=False)
        for name in names:
            dumps.dump(name)
        out = {name[len(prefix) :]: dump for name, dump in zip(names, dumps.execute(), strict=True)}
        if names:
            redis_client.delete(*names)
    return out


@pytest.fixture
def world(ex: SqlExecutor, template: dict[str, bytes]) -> SqlExecutor:
    """A fresh world on the executor's own key prefix (the ``ex`` fixture removes it afterwards):
    ``WORLD``, with the caller holding nothing. The version bump drops what the catalog cached."""
    prefix = ex.settings.redis.prefix
    restore = ex.redis.pipeline(transaction=False)
    for suffix, dump in template.items():
        restore.restore(prefix + suffix, 0, dump, replace=True)
    restore.incr(Keys(prefix).catalog_version())
    restore.execute()
    return ex


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_access_matrix(world: SqlExecutor, key: rsa.RSAPrivateKey, case: Case) -> None:
    key_body = public_key_body(key.public_key())
    for sql in (*case.row.setup, *case.row.given, *case.grants):
        admin(world, sql, key_body)
    if case.row.route is not None:
        runner_of(case.row.route[1])(world, key, case)
    else:
        # The caller as it signs in, with the roles granted to it now.
        _run_sql(world, Principal.of(world.catalog.get(User, USER)), case, key_body)


def _run_sql(ex: SqlExecutor, principal: Principal, case: Case, key_body: str) -> None:
    row = case.row
    sql = fill(row.sql, key_body)
    before = ex.catalog.version()
    if row.lists is not None:
        names = [str(r["name"]) for r in ex.execute(sql, principal).records()]
        assert (row.lists in names) == case.allowed, (sql, names)
        assert ex.catalog.version() == before, "SHOW changed the catalog"
        return
    if case.allowed:
        result = ex.execute(sql, principal)
        if result.columns == ["STATUS"]:
            assert "succe" in str(result.rows[0][0]), result.rows
        if row.owned is not None:
            model, name = row.owned
            assert ex.catalog.get(model, name).owner == ROLE
        return
    assert isinstance(row.fails, Refusal)
    with pytest.raises(SqlError) as info:
        ex.execute(sql, principal)
    err = info.value
    if not case.grants:
        # Without any of the grants: exactly the row's answer.
        assert type(err) is row.fails.exc, (type(err).__name__, err.message)
        assert (err.code, err.sql_state) == (row.fails.code, row.fails.state), err.message
        assert row.fails.text in err.message, err.message
    else:
        # With all but one: refused as an access error, whichever.
        assert (err.code, err.sql_state) in {
            ("003001", "42501"),
            ("002003", "02000"),
            (row.fails.code, row.fails.state),
        }, (err.code, err.message)
    assert ex.catalog.version() == before, f"a refused statement changed the catalog: {sql}"


def _run_route(ex: SqlExecutor, key: rsa.RSAPrivateKey, case: Case) -> None:
    row = case.row
    assert row.route is not None
    method, path = row.route
    pipe = ex.catalog.get(Pipe, PIPE)
    url = path.format(pipe_name=PIPE) + "?requestId=r1" + row.query
    client = AppClient(create_app(ex.settings, ex.redis))
    try:
        options: dict[str, Any] = {"headers": bearer(token(USER, key))}
        if method == "POST":
            options["json"] = {"files": [{"path": "a.csv", "size": 1}]}
        resp = client.request(method, url, **options)
    finally:
        client.close()
    queued = int(ex.redis.xlen(Keys(ex.settings.redis.prefix).queue(pipe.id)))
    if case.allowed:
        assert resp.status_code == 200, resp.text
        assert resp.json()["requestId"] == "r1"
        assert resp.json().get("pipe", PIPE) == PIPE
        assert queued == (1 if method == "POST" else 0)
        return
    assert isinstance(row.fails, HttpRefusal)
    body = resp.json()
    assert set(body) == {"code", "success", "message", "data"}, body
    assert body["success"] is False and body["data"] is None, body
    if not case.grants:
        assert (resp.status_code, body["code"]) == (row.fails.status, row.fails.code), body
        assert row.fails.text in body["message"], body
    else:
        assert (resp.status_code, body["code"]) in {(403, "390403"), (404, "390404")}, body
    assert queued == 0, "a refused insertFiles queued files"


def _run_streaming_route(ex: SqlExecutor, key: rsa.RSAPrivateKey, case: Case) -> None:
    """A Snowpipe Streaming route as the caller, on channel 'c' (opened by the admin first for the
    routes that need one): allowed, it answers 200; refused, 404 or 403 with its code, and the
    channel is as it was."""
    row = case.row
    assert row.route is not None
    method, path = row.route
    path = path.replace(":segment}", "}")  # the template without its convertors
    pipe_name = row.stream_pipe
    url = path.format(database="SALES", schema="RAW", pipe=pipe_name, channel="c")
    headers = {**bearer(token(USER, key)), "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT"}
    options: dict[str, Any] = {"headers": headers}
    store = ChannelStore(ex.redis, Keys(ex.settings.redis.prefix), 1 << 20)
    opened = None
    if (path.endswith(("/rows", "{channel}")) and method != "PUT") or path.endswith(":bulk-channel-status"):
        pipe = ex.catalog.get(Pipe, f"SALES.RAW.{pipe_name}")
        opened = store.open(PipeRef(pipe.id, "SALES", "RAW", pipe_name), "c", 1, None, False).token
    if path.endswith("/rows"):
        assert opened is not None
        options["params"] = {"continuationToken": opened.encode()}
        options["content"] = b'{"a": 1}\n'
    elif path.endswith(":bulk-channel-status"):
        options["json"] = {"channel_names": ["c"]}
    elif path == "/oauth/token":
        options["content"] = "grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer"
    elif path.endswith((":pipe-info", "/sessionless")) or method == "PUT":
        options["json"] = {}
    client = AppClient(create_app(ex.settings, ex.redis))
    try:
        resp = client.request(method, url, **options)
    finally:
        client.close()
    pipes = {p.name: p for p in ex.catalog.all(Pipe).values()}
    state = pipes.get(f"SALES.RAW.{pipe_name}")
    channel = channel_state(ex.redis, Keys(ex.settings.redis.prefix), state.id, "c") if state else {}
    if case.allowed:
        assert resp.status_code == 200, resp.text
        if method == "DELETE":
            assert channel == {}
        elif path.endswith("/rows"):
            assert channel["rseq"] == "1"
        return
    assert isinstance(row.fails, HttpRefusal)
    body = resp.json()
    assert set(body) == {"code", "message"}, body
    if not case.grants:
        assert (resp.status_code, body["code"]) == (row.fails.status, row.fails.code), body
        assert row.fails.text in body["message"], body
    else:
        assert (resp.status_code, body["code"]) in {
            (403, "ERR_INSUFFICIENT_PRIVILEGES"),
            (404, "ERR_PIPE_DOES_NOT_EXIST_OR_NOT_AUTHORIZED"),
        }, body
    if opened is not None:
        assert channel.get("cseq") == str(opened.client_sequencer) and channel.get("rseq") == "0", channel
    else:
        assert channel == {}, "a refused open created a channel"


def _run_sql_route(ex: SqlExecutor, key: rsa.RSAPrivateKey, case: Case) -> None:
    """POST /api/v1/sql as the caller: allowed, the statement's answer; refused, its error."""
    row = case.row
    app = create_app(ex.settings, ex.redis)  # it may register the admin's key: before the count
    before = ex.catalog.version()
    with AppClient(app) as client:
        resp = client.post(SQL_PATH, json=dict(row.body), headers=bearer(token(USER, key)))
    if case.allowed:
        assert resp.status_code == 200, resp.text
        assert resp.json()["success"] is True and resp.json()["columns"] == ["A"], resp.text
        return
    _check_sql_refusal(resp, case)
    assert ex.catalog.version() == before, "a refused statement changed the catalog"


def _check_sql_refusal(resp: Any, case: Case) -> None:
    """A refusal in the SQL endpoint's format (the stage routes answer in it too)."""
    row = case.row
    assert isinstance(row.fails, HttpRefusal)
    body = resp.json()
    assert set(body) == {"success", "code", "sqlState", "message"}, body
    assert body["success"] is False, body
    if not case.grants:
        assert (resp.status_code, body["code"]) == (row.fails.status, row.fails.code), body
        assert row.fails.text in body["message"], body
    else:
        assert (resp.status_code, body["code"]) in {(403, "003001"), (422, "002003")}, body


CONTENT = b"a\n1\n"


def _run_stage_route(ex: SqlExecutor, key: rsa.RSAPrivateKey, case: Case) -> None:
    """A transfer route as the caller, on a file of a name of its own (the stages bucket is shared):
    GET and list find it put there first by the admin; a PUT allowed stores it, one refused does
    not. The admin REMOVEs the stage's files afterwards (the caller its own user stage), so the
    bucket keeps none of them."""
    row = case.row
    assert row.route is not None
    method, path = row.route
    name = unique("f") + ".csv"
    caller = bearer(token(USER, key))
    location = unquote(row.query.removeprefix("location="))
    own = location == "@~"
    with AppClient(create_app(ex.settings, ex.redis)) as client:

        def names() -> list[str]:
            # The caller's user stage is its own: nobody else lists it, not even the admin.
            who = caller if own else auth_header(ex.settings)
            listed = client.get(f"{STAGES}/list?{row.query}", headers=who)
            assert listed.status_code == 200, listed.text
            return [f["path"] for f in listed.json()["files"]]

        try:
            if method == "GET":
                admin = auth_header(ex.settings)
                put = client.put(f"{STAGES}/files?{row.query}&name={name}", content=CONTENT, headers=admin)
                assert put.status_code == 200 and put.json()["status"] == "UPLOADED", put.text
            file = {"PUT": f"&name={name}", "GET": f"&path={name}"}[method] if path.endswith("/files") else ""
            body = CONTENT if method == "PUT" else None
            resp = client.request(method, f"{path}?{row.query}{file}", headers=caller, content=body)
            if case.allowed:
                assert resp.status_code == 200, resp.text
                if path.endswith("/list"):
                    assert name in [f["path"] for f in resp.json()["files"]], resp.text
                elif method == "GET":
                    assert resp.content == CONTENT
                else:
                    assert resp.json()["status"] == "UPLOADED" and name in names(), resp.text
                return
            _check_sql_refusal(resp, case)
            if method == "PUT":
                assert name not in names(), "a refused PUT stored its file"
        finally:
            # Through the app, whose S3 client exists already (a new one costs a second). Not
            # checked: a failure here would hide the case's own.
            who = caller if own else auth_header(ex.settings)
            client.post(SQL_PATH, json={"sql": f"REMOVE {location}"}, headers=who)


def _signed_in(client: AppClient, key: rsa.RSAPrivateKey) -> None:
    """Sign the caller in to the console as `floe console` does: a code for its key-pair JWT,
    then the sign-in link's page and its form, which sets the session cookie in ``client``."""
    code = client.post(CODES_PATH, json={}, headers=bearer(token(USER, key)))
    assert code.status_code == 200, code.text
    signin = sign_in(client, code.json()["path"])
    assert signin.status_code == 303 and COOKIE in signin.cookies, signin.text


def _run_console_route(ex: SqlExecutor, key: rsa.RSAPrivateKey, case: Case) -> None:
    """A console route as the caller, signed in: a page lists what the grants let it see, or
    shows the refusal of the statement it ran; an action does what the grants allow, or shows
    the refusal and changes nothing."""
    row = case.row
    assert row.route is not None
    method, path = row.route
    if STREAMING_PIPE in row.setup:  # the channels page lists a channel
        pipe = ex.catalog.get(Pipe, "SALES.RAW.STREAM")
        ChannelStore(ex.redis, Keys(ex.settings.redis.prefix), 1 << 20).open(
            PipeRef(pipe.id, "SALES", "RAW", "STREAM"), "c", now_ms(), None, False
        )  # opened now: SHOW CHANNELS expires channels idle for 30 days
    paused = ex.catalog.get(Pipe, PIPE).paused
    with AppClient(create_app(ex.settings, ex.redis), follow_redirects=False) as client:
        _signed_in(client, key)  # the code route's own row asks no more than this
        if path == CODES_PATH:
            assert case.allowed
            return
        url = path.replace("{rest:path}", "no-such-page") + (f"?{row.query}" if row.query else "")
        form = {"content-type": "application/x-www-form-urlencoded", "origin": "http://testserver"}
        if method == "POST":
            resp = client.post(url, content=urlencode(row.body), headers=form)
        else:
            resp = client.get(url)
    text = html.unescape(resp.text)
    # What the page shows as failed (its statements' refusals among them), but the "API does not
    # answer" notice every page carries for its script to show.
    errors = [
        e for a, e in re.findall(r'<div ([^>]*)class="notice bad"[^>]*>([^<]*)<', text) if "offline" not in a
    ]
    now_paused = ex.catalog.get(Pipe, PIPE).paused
    if row.lists is not None:
        assert resp.status_code == 200 and not errors, (errors, text)
        assert (row.lists in text) == case.allowed, (row.lists, text)
    elif case.allowed:
        missing = "{rest:path}" in path  # signed in, a path the console has no page for
        assert resp.status_code == (404 if missing else 200), text
        assert errors == (["No such page."] if missing else []), errors
        if path.endswith(("/pause", "/resume")):
            done = "paused" if path.endswith("/pause") else "resumed"
            assert now_paused == (done == "paused") and f"Pipe SALES.RAW.LOADER {done}." in text, text
        return
    else:
        assert isinstance(row.fails, HttpRefusal)
        assert resp.status_code == row.fails.status, text
        if not case.grants:
            fails = row.fails
            assert any(f"{fails.code} (" in e and fails.text in e for e in errors), errors
        else:
            assert any("003001 (42501)" in e or "002003 (02000)" in e for e in errors), errors
    assert now_paused == paused, "a refused console action changed the pipe"


def runner_of(path: str) -> Callable[[SqlExecutor, rsa.RSAPrivateKey, Case], None]:
    """The runner of a route row, by the family its path belongs to."""
    if path.startswith(("/v2/", "/oauth/", "/telemetry/")):
        return _run_streaming_route
    if path.startswith("/v1/"):
        return _run_route
    if path.startswith(f"{STAGES}/"):
        return _run_stage_route
    if path == CODES_PATH or is_console_path(path):
        return _run_console_route
    if path == SQL_PATH:
        return _run_sql_route
    raise AssertionError(f"no runner for the route {path}: the matrix needs one for its family")


def app_routes(app: FastAPI) -> set[tuple[str, str]]:
    """Every (method, path) the app serves, through every router it includes. HEAD is left out:
    Starlette adds it to its own GET routes (the docs), where it answers as GET does."""
    out: set[tuple[str, str]] = set()
    for route in iter_route_contexts(app.routes):
        # A mount or a websocket route has no methods: a kind of route the matrix cannot check.
        assert route.path is not None and route.methods, f"a route of no path or method: {route!r}"
        out |= {(m, route.path) for m in route.methods if m != "HEAD"}
    return out


def route_gaps(app: FastAPI) -> dict[str, list[str]]:
    """What the matrix and ``PUBLIC`` miss of ``app``'s routes, or name that it does not have."""
    registered = app_routes(app)
    routed = {r.route for r in ROWS if r.route is not None}
    gaps = {
        "routes neither public nor with a row": registered - routed - PUBLIC,
        "rows for routes that do not exist": routed - registered,
        "public routes that do not exist": PUBLIC - registered,
        "public routes with a row": PUBLIC & routed,
    }
    return {what: sorted(f"{m} {p}" for m, p in found) for what, found in gaps.items() if found}


def test_every_statement_and_route_has_a_row(ex: SqlExecutor) -> None:
    """A statement type, or a route of the real app, added without a row here fails this test."""
    covered = {type(parse(fill(r.sql), Defaults())) for r in ROWS if r.route is None}
    handled = set(ex.handlers().keys())
    gaps = {
        "statement types without a row": sorted(t.__name__ for t in handled - covered),
        "rows whose statement type has no handler": sorted(t.__name__ for t in covered - handled),
    }
    found = {what: names for what, names in gaps.items() if names}
    found |= route_gaps(create_app(ex.settings, ex.redis))
    assert not found, f"the access matrix is out of date: {found}"


def test_a_route_added_to_any_router_without_a_row_is_a_gap(ex: SqlExecutor) -> None:
    """The check above sees the routes of every router the app includes, and of the app itself."""
    app = create_app(ex.settings, ex.redis)
    assert route_gaps(app) == {}
    extra = APIRouter(prefix="/api/v1/extra")
    extra.get("/thing")(lambda: {})
    app.include_router(extra)
    app.post(f"{CONSOLE}/extra")(lambda: {})
    assert route_gaps(app) == {
        "routes neither public nor with a row": ["GET /api/v1/extra/thing", f"POST {CONSOLE}/extra"]
    }


SAMPLE_PARAMS = {"name": "console.css"}
"""A path parameter's value when a route is probed (``answered_without_authentication``); others "x"."""


def answered_without_authentication(app: FastAPI, routes: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of ``routes`` answer a request without a token or a cookie: it reaches the route's
    endpoint (the gate did not refuse it) and is not sent to the console's signed-out page."""
    reached: list[bool] = []

    async def probe(scope: Scope, receive: Receive, send: Send) -> None:
        await app(scope, receive, send)
        # Routing puts the endpoint in the request's scope; a request the gate refuses has none.
        reached.append("endpoint" in scope)

    out = set()
    with AppClient(probe, follow_redirects=False) as client:
        for method, path in sorted(routes):
            url = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: SAMPLE_PARAMS.get(m[1], "x"), path)
            reached.clear()
            resp = client.request(method, url)
            went = resp.headers.get("location") or resp.headers.get("hx-redirect") or ""
            if reached == [True] and not went.startswith(f"{CONSOLE}/signed-out?why=none"):
                out.add((method, path))
    return out


def test_exactly_the_public_routes_answer_without_authentication(ex: SqlExecutor) -> None:
    """Every route of the real app, asked without a token or a session: those that answer are
    ``PUBLIC``, and every route in ``PUBLIC`` answers. A new route anyone can call fails this until
    it is added there."""
    app = create_app(ex.settings, ex.redis)
    answered = answered_without_authentication(app, app_routes(app))
    assert answered == PUBLIC, {"not in PUBLIC": answered - PUBLIC, "refused": PUBLIC - answered}


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.7", "::"])
def test_on_a_network_address_metrics_are_not_public(ex: SqlExecutor, host: str) -> None:
    """Bound anywhere but loopback, the routes that answer without authentication are
    ``ON_A_NETWORK``: ``PUBLIC`` without the metrics page (with or without a scrape token set)."""
    for scrape_token in (None, SecretStr("s" * 40)):
        api = ex.settings.api.model_copy(update={"host": host, "metrics_token": scrape_token})
        app = create_app(ex.settings.model_copy(update={"api": api}), ex.redis)
        answered = answered_without_authentication(app, app_routes(app))
        assert answered == ON_A_NETWORK, {"not public": answered - ON_A_NETWORK}


def test_a_path_let_through_the_gate_answers_without_authentication(
    ex: SqlExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe above tells a route the gate lets through from one it refuses."""
    app = create_app(ex.settings, ex.redis)
    app.get("/api/v1/extra")(lambda: {})
    extra = {("GET", "/api/v1/extra")}
    assert answered_without_authentication(app, extra) == set()
    monkeypatch.setattr("services.api.PUBLIC_PATHS", PUBLIC_PATHS | {"/api/v1/extra"})
    assert answered_without_authentication(app, extra) == extra


def test_the_rows_are_well_formed() -> None:
    """Unique names; a row needing grants says how it fails (or, for SHOW, what it lists); one needing
    nothing says neither how it fails nor has rows given to it."""
    assert len({r.name for r in ROWS}) == len(ROWS)
    for row in ROWS:
        assert bool(row.sql) != (row.route is not None), row.name
        if row.grants:
            assert (row.fails is None) != (row.lists is None), row.name
        else:
            assert row.fails is None and not row.given, row.name
        assert not set(row.given) & set(row.grants), row.name
        if row.route is not None:
            runner_of(row.route[1])
