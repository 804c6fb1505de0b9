"""Snowflake SQL statements Floe understands, parsed into plain statement objects.

sqlglot's Snowflake dialect parses stages, tables, COPY INTO and queries. It does not cover the
pipe header (``CREATE PIPE ... AS``) or ALTER PIPE, so those headers are matched by hand and
everything after ``AS`` goes back to sqlglot. SHOW, DESC, DROP, CREATE DATABASE | SCHEMA |
STORAGE | API | NOTIFICATION INTEGRATION | EXTERNAL FUNCTION, ALTER INTEGRATION and the options of
ALTER PIPE ... REFRESH are read by the scanner of ``floe.catalog.access``, which parses users, roles
and grants, so that their syntax errors say where and what was expected.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from dataclasses import dataclass, field

import sqlglot
from pydantic import ValidationError
from sqlglot import TokenType, exp
from sqlglot.errors import ParseError, TokenError

from floe.catalog import access
from floe.catalog.access import AccessStatement, Scanner, shortened
from floe.catalog.alter_stage import AlterStage, parse_alter_stage
from floe.catalog.alter_table import AlterTable, parse_alter_table
from floe.catalog.models import (
    CONTEXT_FUNCTIONS,
    METADATA_COLUMNS,
    Column,
    FileFormat,
    FunctionCompression,
    MatchBy,
    OnError,
    Volatility,
    check_function_url,
    function_signature,
    split_s3_url,
)
from floe.catalog.names import QNAME, check_identifier, join_parts, quote_part

# Callers import these from here, as they did before the names had a module of their own.
from floe.catalog.names import Defaults as Defaults
from floe.catalog.names import Name as Name
from floe.catalog.names import qualify as qualify
from floe.catalog.stage_commands import (
    GetFiles,
    ListFiles,
    PutFiles,
    RemoveFiles,
    is_file_command,
    parse_file_command,
    parse_location,
    stage_path,
    transfer_refusal,
)
from floe.errors import CompilationError
from floe.patterns import compile_pattern
from floe.types import parse_column_type

FORMAT_OPTIONS: dict[str, str] = {
    "TYPE": "type",
    "COMPRESSION": "compression",
    "FIELD_DELIMITER": "field_delimiter",
    "RECORD_DELIMITER": "record_delimiter",
    "SKIP_HEADER": "skip_header",
    "FIELD_OPTIONALLY_ENCLOSED_BY": "field_optionally_enclosed_by",
    "NULL_IF": "null_if",
    "EMPTY_FIELD_AS_NULL": "empty_field_as_null",
    "TRIM_SPACE": "trim_space",
    "ERROR_ON_COLUMN_COUNT_MISMATCH": "error_on_column_count_mismatch",
    "SKIP_BLANK_LINES": "skip_blank_lines",
    "STRIP_OUTER_ARRAY": "strip_outer_array",
    "DATE_FORMAT": "date_format",
    "TIME_FORMAT": "time_format",
    "TIMESTAMP_FORMAT": "timestamp_format",
    "MULTI_LINE": "multi_line",
    "PARSE_HEADER": "parse_header",
    "ESCAPE": "escape",
    "ESCAPE_UNENCLOSED_FIELD": "escape_unenclosed_field",
    "ENCODING": "encoding",
    "REPLACE_INVALID_CHARACTERS": "replace_invalid_characters",
    "SKIP_BYTE_ORDER_MARK": "skip_byte_order_mark",
    "BINARY_FORMAT": "binary_format",
    "ALLOW_DUPLICATE": "allow_duplicate",
    "STRIP_NULL_VALUES": "strip_null_values",
    "IGNORE_UTF8_ERRORS": "ignore_utf8_errors",
    "ENABLE_OCTAL": "enable_octal",
    "BINARY_AS_TEXT": "binary_as_text",
    "USE_LOGICAL_TYPE": "use_logical_type",
    "USE_VECTORIZED_SCANNER": "use_vectorized_scanner",
}

# Options Floe parses but cannot honour yet: refused unless given their default value, so no
# statement is accepted that would load differently from what it says.
FORMAT_NOT_YET: frozenset[str] = frozenset()

# The options that only some TYPEs take (CREATE FILE FORMAT's per-type lists); NULL_IF, TRIM_SPACE
# and REPLACE_INVALID_CHARACTERS apply to every type. AVRO and ORC (new in issue 16) are checked
# against the whole table; an older TYPE only for the options that were refused before issue 16, so
# a statement Floe accepted then still is (decision 71).
_TYPE_OPTIONS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        (
            "FIELD_DELIMITER",
            "RECORD_DELIMITER",
            "SKIP_HEADER",
            "FIELD_OPTIONALLY_ENCLOSED_BY",
            "EMPTY_FIELD_AS_NULL",
            "ERROR_ON_COLUMN_COUNT_MISMATCH",
            "SKIP_BLANK_LINES",
            "PARSE_HEADER",
            "ESCAPE",
            "ESCAPE_UNENCLOSED_FIELD",
            "ENCODING",
        ),
        ("CSV",),
    ),
    **dict.fromkeys(
        (
            "MULTI_LINE",
            "DATE_FORMAT",
            "TIME_FORMAT",
            "TIMESTAMP_FORMAT",
            "BINARY_FORMAT",
            "SKIP_BYTE_ORDER_MARK",
        ),
        ("CSV", "JSON"),
    ),
    **dict.fromkeys(
        ("STRIP_OUTER_ARRAY", "ALLOW_DUPLICATE", "STRIP_NULL_VALUES", "IGNORE_UTF8_ERRORS", "ENABLE_OCTAL"),
        ("JSON",),
    ),
    **dict.fromkeys(("BINARY_AS_TEXT", "USE_LOGICAL_TYPE", "USE_VECTORIZED_SCANNER"), ("PARQUET",)),
    "COMPRESSION": ("CSV", "JSON", "AVRO", "PARQUET"),
}
_TYPE_CHECKED_OPTIONS = frozenset(
    {
        "ALLOW_DUPLICATE",
        "STRIP_NULL_VALUES",
        "IGNORE_UTF8_ERRORS",
        "ENABLE_OCTAL",
        "BINARY_AS_TEXT",
        "USE_LOGICAL_TYPE",
        "USE_VECTORIZED_SCANNER",
    }
)
_ANY_TYPE_OPTIONS = ("NULL_IF", "TRIM_SPACE", "REPLACE_INVALID_CHARACTERS")
_AVRO_COMPRESSION = ("AUTO", "GZIP", "BROTLI", "ZSTD", "DEFLATE", "RAW_DEFLATE", "NONE")


@dataclass
class CreateStage:
    """CREATE STAGE."""

    name: Name
    url: str
    file_format: dict[str, object]
    replace: bool = False
    if_not_exists: bool = False
    storage_integration: str | None = None
    """STORAGE_INTEGRATION = i: upper-cased unless quoted."""
    comment: str | None = None

    @property
    def internal(self) -> bool:
        """CREATE STAGE without URL: an internal stage."""
        return not self.url


@dataclass
class CreateFileFormat:
    """CREATE [OR REPLACE] FILE FORMAT [IF NOT EXISTS] f <options> [COMMENT = '...']."""

    name: Name
    options: dict[str, object]
    """FileFormat field names and values (``format_options``)."""
    replace: bool = False
    if_not_exists: bool = False
    comment: str | None = None


@dataclass
class AlterFileFormat:
    """ALTER FILE FORMAT [IF EXISTS] f SET <options> [COMMENT = '...'] | UNSET COMMENT | RENAME TO g."""

    name: Name
    if_exists: bool = False
    options: dict[str, object] = field(default_factory=dict)
    """Options SET (FileFormat field names), over the ones the format has."""
    comment: str | None = None
    """COMMENT SET."""
    unset_comment: bool = False
    rename_to: Name | None = None


@dataclass
class CreateTable:
    """CREATE TABLE."""

    name: Name
    columns: list[Column]
    replace: bool = False
    if_not_exists: bool = False
    enable_schema_evolution: bool = False
    """ENABLE_SCHEMA_EVOLUTION = TRUE (decision 81)."""
    template: exp.Expr | None = None
    """USING TEMPLATE's query or string (decision 82): the columns come from it, ``columns`` is empty."""


@dataclass
class CreatePipe:
    """CREATE PIPE; the stage reference is resolved (and formats merged) by the executor."""

    name: Name
    auto_ingest: bool
    table: Name
    columns: list[str] | None
    select: list[str] | None
    stage: Name | None
    """None for Snowpipe Streaming (FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))."""
    path: str
    table_stage: bool
    """FROM @%t: ``stage`` names the table whose stage the pipe reads."""
    file_format: dict[str, object]
    on_error: OnError
    on_error_limit: float
    pattern: str | None
    copy_sql: str
    match_by_column_name: MatchBy = "NONE"
    include_metadata: dict[str, str] = field(default_factory=dict)
    """INCLUDE_METADATA: target column -> METADATA$ column."""
    truncate_columns: bool = False
    """TRUNCATECOLUMNS = TRUE / ENFORCE_LENGTH = FALSE."""
    replace: bool = False
    if_not_exists: bool = False
    comment: str | None = None
    alter: bool = False
    """CREATE OR ALTER PIPE: an existing pipe is altered in place (its load history kept) into the
    pipe the statement defines, within what ALTER PIPE may change."""
    paused: bool | None = None
    """PIPE_EXECUTION_PAUSED (CREATE OR ALTER PIPE only); None when the statement leaves it out."""
    error_integration: str | None = None
    """ERROR_INTEGRATION = i: the notification integration told of failed files (upper-cased unless
    quoted)."""
    backfill_interval_s: int | None = None
    """BACKFILL_INTERVAL = '<n> SECONDS | MINUTES | HOURS | DAYS' (a Floe extension), in seconds."""


@dataclass
class CreateDatabase:
    """CREATE [OR REPLACE] DATABASE [IF NOT EXISTS] d [COMMENT = '...']."""

    name: str
    replace: bool = False
    if_not_exists: bool = False
    comment: str | None = None


@dataclass
class CreateSchema:
    """CREATE [OR REPLACE] SCHEMA [IF NOT EXISTS] [d.]s [COMMENT = '...']."""

    name: str
    """DB.SCHEMA; an unqualified schema is in the default database."""
    replace: bool = False
    if_not_exists: bool = False
    comment: str | None = None


@dataclass
class CreateIntegration:
    """CREATE [OR REPLACE] STORAGE INTEGRATION [IF NOT EXISTS] i TYPE = EXTERNAL_STAGE
    STORAGE_PROVIDER = 'S3' ENABLED = TRUE | FALSE STORAGE_ALLOWED_LOCATIONS = ('s3://b/p/', ...)
    [STORAGE_BLOCKED_LOCATIONS = (...)] [STORAGE_AWS_ROLE_ARN = '...'] [STORAGE_AWS_OBJECT_ACL = '...']
    [COMMENT = '...']; the AWS properties are accepted and ignored (Floe reads with its own credentials)."""

    name: str
    enabled: bool
    provider: str
    """Always 'S3': Floe reads S3 only."""
    allowed_locations: list[str]
    """At least one; each 's3://bucket/path/' as written, or '*'."""
    blocked_locations: list[str]
    """Each 's3://bucket/path/' as written."""
    replace: bool = False
    if_not_exists: bool = False
    comment: str | None = None


@dataclass
class CreateApiIntegration:
    """CREATE [OR REPLACE] API INTEGRATION [IF NOT EXISTS] i API_PROVIDER = <provider>
    API_ALLOWED_PREFIXES = ('https://...', ...) [API_BLOCKED_PREFIXES = (...)] [API_KEY = '...']
    ENABLED = TRUE | FALSE [COMMENT = '...'], in any order; the cloud identity properties
    (API_AWS_ROLE_ARN, AZURE_TENANT_ID, AZURE_AD_APPLICATION_ID, GOOGLE_AUDIENCE) are accepted and
    ignored: Floe calls the service itself, with the API key."""

    name: str
    provider: str
    """API_PROVIDER, upper-case: one of API_PROVIDERS."""
    allowed_prefixes: list[str]
    """At least one; each passed ``check_function_url``."""
    enabled: bool
    blocked_prefixes: list[str] = field(default_factory=list)
    api_key: str | None = field(default=None, repr=False)
    """API_KEY: a secret; never in a repr, an error or a log line."""
    replace: bool = False
    if_not_exists: bool = False
    comment: str | None = None


@dataclass
class CreateNotificationIntegration:
    """CREATE [OR REPLACE] NOTIFICATION INTEGRATION [IF NOT EXISTS] i TYPE = QUEUE DIRECTION = OUTBOUND
    NOTIFICATION_PROVIDER = AWS_SNS AWS_SNS_TOPIC_ARN = '...' AWS_SNS_ROLE_ARN = '...' ENABLED = TRUE |
    FALSE [COMMENT = '...'], in any order: where pipes' ERROR_INTEGRATION sends failed files."""

    name: str
    enabled: bool
    topic_arn: str
    """A standard SNS topic's ARN (``check_topic_arn``)."""
    role_arn: str
    """Recorded and shown; Floe publishes with its own credentials."""
    replace: bool = False
    if_not_exists: bool = False
    comment: str | None = None


@dataclass
class AlterIntegration:
    """ALTER [STORAGE | API] INTEGRATION [IF EXISTS] i SET [ENABLED = TRUE | FALSE]
    [STORAGE_ALLOWED_LOCATIONS = (...)] [STORAGE_BLOCKED_LOCATIONS = (...)] | [API_ALLOWED_PREFIXES =
    (...)] [API_BLOCKED_PREFIXES = (...)] [API_KEY = '...'] [COMMENT = '...'], or ... UNSET
    STORAGE_BLOCKED_LOCATIONS | API_BLOCKED_PREFIXES | API_KEY | COMMENT [, ...]; a property left out
    keeps its value."""

    name: str
    if_exists: bool = False
    enabled: bool | None = None
    allowed_locations: list[str] | None = None
    blocked_locations: list[str] | None = None
    comment: str | None = None
    unset: list[str] = field(default_factory=list)
    """STORAGE_BLOCKED_LOCATIONS, API_BLOCKED_PREFIXES, API_KEY and COMMENT, back to empty."""
    family: str | None = None
    """STORAGE or API when the statement says which kind of integration it alters (by keyword or by
    a property only that kind has); None when it changes only ENABLED or COMMENT of either kind."""
    allowed_prefixes: list[str] | None = None
    blocked_prefixes: list[str] | None = None
    api_key: str | None = field(default=None, repr=False)
    topic_arn: str | None = None
    """AWS_SNS_TOPIC_ARN of a notification integration."""
    role_arn: str | None = None
    """AWS_SNS_ROLE_ARN of a notification integration."""


@dataclass
class CreateExternalFunction:
    """CREATE [OR REPLACE] [SECURE] EXTERNAL FUNCTION [IF NOT EXISTS] f(a type, ...) RETURNS type
    [[NOT] NULL] [CALLED ON NULL INPUT | RETURNS NULL ON NULL INPUT | STRICT] [VOLATILE | IMMUTABLE]
    [COMMENT = '...'] API_INTEGRATION = i [HEADERS = ('name' = 'value', ...)]
    [CONTEXT_HEADERS = (CURRENT_USER, ...)] [MAX_BATCH_ROWS = n] [COMPRESSION = AUTO | NONE | GZIP |
    DEFLATE] AS '<url>' (the clauses before AS in any order)."""

    name: Name
    args: list[Column]
    returns: Column
    """Named after the function; ``nullable`` False for RETURNS ... NOT NULL."""
    integration: str
    url: str
    """Passed ``check_function_url``."""
    secure: bool = False
    strict: bool = False
    """RETURNS NULL ON NULL INPUT or STRICT."""
    volatility: Volatility = "VOLATILE"
    comment: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    """Names lower-case, none of the protocol's own."""
    context_headers: list[str] = field(default_factory=list)
    max_batch_rows: int | None = None
    compression: FunctionCompression = "AUTO"
    replace: bool = False
    if_not_exists: bool = False

    @property
    def signature(self) -> str:
        """The catalog name of this overload, DB.S.F(NUMBER, VARCHAR)."""
        return function_signature(str(self.name), self.args)


@dataclass
class Show:
    """SHOW DATABASES | SCHEMAS | [STORAGE | API] INTEGRATIONS | STAGES | TABLES | PIPES | EXTERNAL
    FUNCTIONS [LIKE '...'] [IN ACCOUNT | IN DATABASE [d] | IN SCHEMA [s]]."""

    kind: str
    """DATABASE, SCHEMA, INTEGRATION, STAGE, TABLE, PIPE or FUNCTION."""
    like: str | None = None
    in_kind: str | None = None
    """ACCOUNT, DATABASE or SCHEMA; None without IN."""
    in_name: str | None = None
    """'' for ACCOUNT, DB for DATABASE, DB.S for SCHEMA (the defaults' when IN names none)."""
    family: str | None = None
    """SHOW STORAGE | API INTEGRATIONS: only that kind of integration; None lists both."""


@dataclass
class ShowChannels:
    """SHOW CHANNELS [LIKE '...'] [IN ACCOUNT | DATABASE [d] | SCHEMA [s] | TABLE t | PIPE p]:
    Snowpipe Streaming channels, with their sequencers and offset tokens."""

    like: str | None = None
    in_kind: str | None = None
    in_name: str | None = None


@dataclass
class Describe:
    """DESC[RIBE] STAGE | TABLE | PIPE name."""

    kind: str
    name: Name


@dataclass
class DescribeObject:
    """DESC[RIBE] DATABASE d | SCHEMA s | [STORAGE | API] INTEGRATION i | FUNCTION f(types)."""

    kind: str
    """DATABASE, SCHEMA, INTEGRATION or FUNCTION."""
    name: str
    """DB, DB.S, I, or the signature DB.S.F(NUMBER, VARCHAR)."""
    family: str | None = None
    """STORAGE or API when the statement names the kind of integration."""


@dataclass
class Drop:
    """DROP STAGE | TABLE | PIPE [IF EXISTS] name."""

    kind: str
    name: Name
    if_exists: bool = False


@dataclass
class DropObject:
    """DROP DATABASE | SCHEMA [IF EXISTS] name [CASCADE | RESTRICT], DROP [STORAGE | API]
    INTEGRATION [IF EXISTS] i, DROP FUNCTION [IF EXISTS] f(types)."""

    kind: str
    """DATABASE, SCHEMA, INTEGRATION or FUNCTION."""
    name: str
    """DB, DB.S, I, or the signature DB.S.F(NUMBER, VARCHAR)."""
    if_exists: bool = False
    family: str | None = None
    """STORAGE or API when the statement names the kind of integration."""


@dataclass
class AlterPipe:
    """ALTER PIPE [IF EXISTS] name SET prop = value [[,] prop = value ...] | UNSET prop [, prop ...]:
    PIPE_EXECUTION_PAUSED and COMMENT (``ALTER_PIPE_PROPERTIES``)."""

    name: Name
    paused: bool | None = None
    """PIPE_EXECUTION_PAUSED SET (UNSET is in ``unset``: FALSE, its default)."""
    comment: str | None = None
    """COMMENT SET."""
    unset: tuple[str, ...] = ()
    """Properties UNSET, upper-cased, in the order written."""
    if_exists: bool = False
    properties: dict[str, str] = field(default_factory=dict)
    """Other properties of ``ALTER_PIPE_PROPERTIES`` SET, by name: their values as written (a
    quoted string unquoted)."""


@dataclass
class AlterPipeRefresh:
    """ALTER PIPE [IF EXISTS] name REFRESH [PREFIX = '<path>'] [MODIFIED_AFTER = '<timestamp>']
    (the two options in either order): queue the files staged under the pipe's location."""

    name: Name
    if_exists: bool = False
    prefix: str = ""
    """Appended to the pipe's location (stage URL plus the COPY's path), as written: a key prefix,
    not necessarily a folder. '' for the whole location."""
    modified_after: dt.datetime | None = None
    """The oldest LAST_MODIFIED to queue, timezone-aware (a timestamp without an offset is UTC)."""


@dataclass
class Query:
    """Any SELECT; run by the query engine."""

    expression: exp.Expr
    sql: str


Statement = (
    CreateDatabase
    | CreateSchema
    | CreateIntegration
    | CreateApiIntegration
    | CreateNotificationIntegration
    | AlterIntegration
    | CreateExternalFunction
    | CreateStage
    | CreateFileFormat
    | AlterFileFormat
    | CreateTable
    | CreatePipe
    | Show
    | ShowChannels
    | Describe
    | DescribeObject
    | Drop
    | DropObject
    | AlterPipe
    | AlterPipeRefresh
    | AlterTable
    | AlterStage
    | Query
    | AccessStatement
    | ListFiles
    | RemoveFiles
)

_KINDS = {
    "DATABASE": "DATABASE",
    "DATABASES": "DATABASE",
    "SCHEMA": "SCHEMA",
    "SCHEMAS": "SCHEMA",
    "INTEGRATION": "INTEGRATION",
    "INTEGRATIONS": "INTEGRATION",
    "STAGE": "STAGE",
    "STAGES": "STAGE",
    "FILE FORMAT": "FILE_FORMAT",
    "FILE FORMATS": "FILE_FORMAT",
    "TABLE": "TABLE",
    "TABLES": "TABLE",
    "PIPE": "PIPE",
    "PIPES": "PIPE",
    "FUNCTION": "FUNCTION",
    "FUNCTIONS": "FUNCTION",
}
_IN_SCHEMA = ("TABLE", "STAGE", "FILE_FORMAT", "PIPE")
"""Kinds that live in a schema and are named DB.SCHEMA.NAME (the others have one or two parts)."""
_SHOW_SCOPES: dict[str, tuple[str, ...]] = {
    "DATABASE": (),
    "INTEGRATION": (),
    "SCHEMA": ("ACCOUNT", "DATABASE"),
    "TABLE": ("ACCOUNT", "DATABASE", "SCHEMA"),
    "STAGE": ("ACCOUNT", "DATABASE", "SCHEMA"),
    "FILE_FORMAT": ("ACCOUNT", "DATABASE", "SCHEMA"),
    "PIPE": ("ACCOUNT", "DATABASE", "SCHEMA"),
    "FUNCTION": ("ACCOUNT", "DATABASE", "SCHEMA"),
}
"""What SHOW <kind>S ... IN may name, as in Snowflake (SHOW DATABASES and INTEGRATIONS take no IN)."""
_INTEGRATION_REQUIRED = ("TYPE", "STORAGE_PROVIDER", "ENABLED", "STORAGE_ALLOWED_LOCATIONS")
# Floe reads the bucket with its own credentials, so an IAM role, its external id and an object ACL
# for unloads mean nothing here; scripts written for Snowflake still run.
_INTEGRATION_IGNORED = ("STORAGE_AWS_ROLE_ARN", "STORAGE_AWS_EXTERNAL_ID", "STORAGE_AWS_OBJECT_ACL")
_INTEGRATION_PROPERTIES = (
    *_INTEGRATION_REQUIRED,
    "STORAGE_BLOCKED_LOCATIONS",
    *_INTEGRATION_IGNORED,
    "COMMENT",
)
_INTEGRATION_EXAMPLE = (
    "TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' ENABLED = TRUE "
    "STORAGE_ALLOWED_LOCATIONS = ('s3://bucket/path/')"
)
API_PROVIDERS = (
    "AWS_API_GATEWAY",
    "AWS_PRIVATE_API_GATEWAY",
    "AWS_GOV_API_GATEWAY",
    "AWS_GOV_PRIVATE_API_GATEWAY",
    "AZURE_API_MANAGEMENT",
    "AZURE_PRIVATE_API_MANAGEMENT",
    "AZURE_GOV_API_MANAGEMENT",
    "AZURE_GOV_PRIVATE_API_MANAGEMENT",
    "GOOGLE_API_GATEWAY",
    "GIT_HTTPS_API",
)
"""Snowflake's API_PROVIDER values. Floe calls every kind of service the same way (HTTPS, the
API key), so the provider is recorded and shown, nothing more."""
_API_REQUIRED = ("API_PROVIDER", "API_ALLOWED_PREFIXES", "ENABLED")
# The cloud identities Snowflake assumes to reach a gateway. Floe calls the URL itself, with the
# API key when there is one; scripts written for Snowflake still run.
_API_IGNORED = ("API_AWS_ROLE_ARN", "AZURE_TENANT_ID", "AZURE_AD_APPLICATION_ID", "GOOGLE_AUDIENCE")
_API_PROPERTIES = (*_API_REQUIRED, "API_BLOCKED_PREFIXES", "API_KEY", *_API_IGNORED, "COMMENT")
_API_EXAMPLE = "API_PROVIDER = aws_api_gateway API_ALLOWED_PREFIXES = ('https://host/path/') ENABLED = TRUE"
_NOTIFICATION_REQUIRED = (
    "TYPE",
    "DIRECTION",
    "NOTIFICATION_PROVIDER",
    "AWS_SNS_TOPIC_ARN",
    "ENABLED",
)
# Snowflake assumes the role to publish; Floe publishes with its own credentials, so the role is
# recorded and shown but may be left out.
_NOTIFICATION_PROPERTIES = (*_NOTIFICATION_REQUIRED, "AWS_SNS_ROLE_ARN", "COMMENT")
_NOTIFICATION_EXAMPLE = (
    "TYPE = QUEUE DIRECTION = OUTBOUND NOTIFICATION_PROVIDER = AWS_SNS "
    "AWS_SNS_TOPIC_ARN = 'arn:aws:sns:us-east-1:123456789012:pipe-errors' "
    "AWS_SNS_ROLE_ARN = 'arn:aws:iam::123456789012:role/floe-sns' ENABLED = TRUE"
)
# A standard topic's ARN: partition, region, 12-digit account, name. Linear: each part is a run of
# characters that the next separator cannot continue.
_TOPIC_ARN = re.compile(r"arn:aws(?:-[a-z]+)*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}(?:\.fifo)?")
_FAMILY_PROPERTIES = {
    "STORAGE": _INTEGRATION_PROPERTIES,
    "API": _API_PROPERTIES,
    "NOTIFICATION": _NOTIFICATION_PROPERTIES,
}
_FAMILY_IGNORED: dict[str, tuple[str, ...]] = {
    "STORAGE": _INTEGRATION_IGNORED,
    "API": _API_IGNORED,
    "NOTIFICATION": (),
}
_FAMILY_NOUN = {
    "STORAGE": "a storage integration",
    "API": "an API integration",
    "NOTIFICATION": "a notification integration",
    None: "an integration",
}

# Every regex below sees user SQL, so each must run in linear time under Python's backtracking
# engine (issue 9: `(?P<props>.*?)\s+AS\s+` took 9.8 s on 60,000 spaces). The rules that keep
# them linear: each is anchored (``match``/``fullmatch`` on text ``parse`` has stripped), no `.*`
# is followed by anything that could fail, and no two neighbouring quantified parts can match the
# same characters (no `\s*;?\s*`), so a failure gives back each character once, not once per
# start. tests/floe/catalog/test_parse_linear.py times every one on 100k-character inputs.
_PIPE_HEAD = re.compile(
    rf"CREATE\s+(?:(?P<replace>OR\s+REPLACE\s+)|(?P<alter>OR\s+ALTER\s+))?PIPE\s+"
    rf"(?P<ine>IF\s+NOT\s+EXISTS\s+)?(?P<name>{QNAME})",
    re.IGNORECASE,
)
_PIPE_PROP = re.compile(
    r"\s+(?P<key>AUTO_INGEST|COMMENT|INTEGRATION|AWS_SNS_TOPIC|ERROR_INTEGRATION|BACKFILL_INTERVAL"
    r"|PIPE_EXECUTION_PAUSED)\s*=\s*"
    r"(?P<value>'[^']*(?:''[^']*)*'|\"[^\"]*(?:\"\"[^\"]*)*\"|\w+)",
    re.IGNORECASE,
)
_PIPE_AS = re.compile(r"\s+AS\s", re.IGNORECASE)
# The statements the scanner reads (floe.catalog.access.Scanner, linear in the same way); access.parse
# has already taken SHOW USERS | ROLES | GRANTS, DESC USER and DROP USER | ROLE.
_SCANNED = re.compile(
    r"(?:SHOW|DESC(?:RIBE)?|DROP)\b"
    r"|CREATE\s+(?:OR\s+REPLACE\s+)?(?:(?:TRANSIENT\s+)?(?:DATABASE|SCHEMA)"
    r"|(?:STORAGE|API|NOTIFICATION)\s+INTEGRATION|(?:SECURE\s+)?EXTERNAL\s+FUNCTION)\b"
    r"|ALTER\s+(?:(?:STORAGE|API|NOTIFICATION)\s+)?INTEGRATION\b|ALTER\s+STAGE\b",
    re.I,
)
# Only the head: the properties after SET or UNSET are read by the scanner, so their errors say where.
_ALTER_PIPE = re.compile(
    rf"ALTER\s+PIPE\s+(?P<ine>IF\s+EXISTS\s+)?(?P<name>{QNAME})\s+(?P<verb>SET|UNSET)\b",
    re.I,
)
# Only the head: the options after REFRESH are read by the scanner, so their errors say where.
_ALTER_PIPE_REFRESH = re.compile(
    rf"ALTER\s+PIPE\s+(?P<ine>IF\s+EXISTS\s+)?(?P<name>{QNAME})\s+REFRESH\b",
    re.I,
)
_ALTER_FILE_FORMAT = re.compile(rf"ALTER\s+FILE\s+FORMAT\s+(?P<ie>IF\s+EXISTS\s+)?(?P<name>{QNAME})\s+", re.I)
_RENAME_TO = re.compile(rf"RENAME\s+TO\s+(?P<name>{QNAME})", re.I)
_ALTER_TABLE = re.compile(r"ALTER\s+TABLE\b", re.I)
_ALTER_STAGE = re.compile(r"ALTER\s+STAGE\b", re.I)
_UNSET_COMMENT = re.compile(r"UNSET\s+COMMENT", re.I)
_SET = re.compile(r"SET\b", re.I)
_ON_ERROR = re.compile(r"^(CONTINUE|SKIP_FILE|ABORT_STATEMENT|SKIP_FILE_(\d+(?:\.\d+)?)(%?))$", re.I)


def qualify_table(table: exp.Table, defaults: Defaults) -> Name:
    """A table reference's full name: quoted parts as written, unquoted ones upper-cased."""
    parts = [p for p in (table.catalog, table.db, table.name) if p]
    idents = [i for i in table.find_all(exp.Identifier)]
    quoted = {i.name for i in idents if i.quoted}
    norm = [p if p in quoted else p.upper() for p in parts]
    while len(norm) < 3:
        norm.insert(0, defaults.schema if len(norm) == 1 else defaults.database)
    return Name(*map(check_identifier, norm))


def _value(node: exp.Expr | None) -> object:
    """A Python value from an option's value node."""
    if node is None:
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = str(node.this)
        return int(text) if re.fullmatch(r"-?\d+", text) else float(text)
    if isinstance(node, exp.Tuple | exp.Paren | exp.Array):
        items = node.expressions if not isinstance(node, exp.Paren) else [node.this]
        return [_value(i) for i in items]
    if isinstance(node, exp.Null):
        return None
    return node.name if isinstance(node, exp.Var | exp.Identifier | exp.Column) else node.sql("snowflake")


def format_options(props: list[exp.Expr], defaults: Defaults | None = None) -> dict[str, object]:
    """FILE_FORMAT = (...) options as FileFormat field names and values; ``FORMAT_NAME = 'f'`` as
    ``{"format_name": "DB.SCHEMA.F"}``, which the executor resolves (``FORMAT_NAME`` key)."""
    out: dict[str, object] = {}
    named = [p for p in props if isinstance(p, exp.Property) and p.name.upper() == "FORMAT_NAME"]
    if named:
        if len(props) > 1:
            raise CompilationError(
                "FORMAT_NAME and the other file format options (TYPE, ...) are mutually exclusive: "
                "name a file format, or give the options inline"
            )
        return {FORMAT_NAME: str(_format_name(named[0].args.get("value"), defaults or Defaults()))}
    for prop in props:
        if not isinstance(prop, exp.Property):
            continue
        key = prop.name.upper()
        if key not in FORMAT_OPTIONS:
            raise CompilationError(
                f"invalid file format option '{key}'. Supported: {', '.join(sorted(FORMAT_OPTIONS))}"
            )
        value = _value(prop.args.get("value"))
        fieldname = FORMAT_OPTIONS[key]
        if fieldname == "type" and isinstance(value, str):
            value = value.upper()
            if value not in ("CSV", "JSON", "PARQUET", "AVRO", "ORC"):
                raise CompilationError(
                    f"file format TYPE = {value} is not supported (CSV, JSON, PARQUET, AVRO, ORC)"
                )
        if fieldname == "compression" and isinstance(value, str):
            value = value.upper()
        value = csv_option_value(fieldname, value)  # NONE, octal, hex, escapes; ENCODING's name
        if fieldname == "null_if" and not isinstance(value, list):
            value = [value]
        if fieldname == "null_if" and isinstance(value, list):
            value = ["" if v is None else str(v) for v in value]
        if isinstance(value, str) and value.upper() in ("TRUE", "FALSE") and fieldname not in ("null_if",):
            value = value.upper() == "TRUE"
        out[fieldname] = value
    try:
        parsed = FileFormat.model_validate(out)  # reject bad values at DDL time, not at load time
    except ValidationError as exc:
        error = exc.errors()[0]
        field_name = str(error["loc"][0]) if error["loc"] else ""
        key = next((k for k, f in FORMAT_OPTIONS.items() if f == field_name), field_name.upper())
        raise CompilationError(
            f"invalid value {out.get(field_name)!r} for file format option {key}: {error['msg']}"
        ) from exc
    check_csv_format(parsed)
    default = FileFormat()
    for key, fieldname in FORMAT_OPTIONS.items():
        if fieldname in FORMAT_NOT_YET and getattr(parsed, fieldname) != getattr(default, fieldname):
            raise CompilationError(f"file format option {key} is not supported by Floe yet")
    _check_type_options([p.name.upper() for p in props if isinstance(p, exp.Property)], out)
    return out


def _check_type_options(keys: list[str], out: dict[str, object]) -> None:
    """Refuse, in one FILE_FORMAT clause that names its TYPE, an option that TYPE does not take."""
    kind = out.get("type")
    if not isinstance(kind, str):
        return  # the stage's TYPE applies: the options are checked where it was given
    for key in keys:
        types = _TYPE_OPTIONS.get(key)
        checked = kind in ("AVRO", "ORC") or key in _TYPE_CHECKED_OPTIONS
        if types is None or kind in types or not checked:
            continue
        takes = sorted([*(k for k, t in _TYPE_OPTIONS.items() if kind in t), *_ANY_TYPE_OPTIONS])
        raise CompilationError(
            f"file format option {key} does not apply to TYPE = {kind} "
            f"(TYPE = {kind} takes {', '.join(takes)})"
        )
    compression = out.get("compression")
    if kind == "AVRO" and isinstance(compression, str) and compression not in _AVRO_COMPRESSION:
        raise CompilationError(
            f"COMPRESSION = {compression} does not apply to TYPE = AVRO ({' | '.join(_AVRO_COMPRESSION)})"
        )


FORMAT_NAME = "format_name"
"""The key of a FILE_FORMAT that names a file format (FORMAT_NAME = 'f'), by its qualified name."""


def _format_name(value: exp.Expr | None, defaults: Defaults) -> Name:
    """FORMAT_NAME's value: 'db.s.f' (a string, as Snowflake documents it) or db.s.f."""
    if isinstance(value, exp.Table):
        return qualify_table(value, defaults)
    if isinstance(value, exp.Literal) and value.is_string:
        return qualify(value.this, defaults)
    if isinstance(value, exp.Var | exp.Identifier | exp.Column):
        return qualify(value.sql("snowflake"), defaults)
    raise CompilationError("FORMAT_NAME needs the name of a file format: FORMAT_NAME = 'my_format'")


def parse_on_error(text: str) -> tuple[OnError, float]:
    """ON_ERROR value as (rule, limit)."""
    m = _ON_ERROR.match(text.strip())
    if not m:
        raise CompilationError(f"invalid value '{text}' for ON_ERROR")
    word = m.group(1).upper()
    if word == "ABORT_STATEMENT":
        raise CompilationError(
            "ON_ERROR = ABORT_STATEMENT is not allowed in a pipe (use SKIP_FILE or CONTINUE)"
        )
    if m.group(2):
        return ("SKIP_FILE_PCT" if m.group(3) else "SKIP_FILE_N"), float(m.group(2))
    return ("CONTINUE" if word == "CONTINUE" else "SKIP_FILE"), 0.0


def _parse_stage_ref(text: str, defaults: Defaults) -> tuple[Name, str, bool]:
    """A COPY's FROM @stage[/path] or @%table[/path]: the stage (or table), the path as a folder,
    and whether it is a table's stage."""
    location = parse_location(text, defaults, what="a COPY's source")
    path = location.path
    if path and not path.endswith("/"):
        path += "/"
    return location.name, path, location.table


def parse_copy(sql: str, defaults: Defaults) -> dict[str, object]:
    """COPY INTO ... as the keyword arguments of CreatePipe (minus the pipe's own)."""
    try:
        node = sqlglot.parse_one(sql, read="snowflake")
    except (ParseError, TokenError) as exc:
        raise CompilationError(f"syntax error in COPY INTO: {exc}") from exc
    if not isinstance(node, exp.Copy):
        raise CompilationError("a pipe must be defined AS COPY INTO <table> FROM ...")
    table, columns = _copy_target(node, defaults)
    select, source = _copy_source(node)
    stage, path, table_stage = (
        _parse_stage_ref(source.this.name, defaults) if source is not None else (None, "", False)
    )
    options = _copy_options(node, defaults)
    if source is None:
        _streaming_options(options)
    if select is not None and columns is not None and len(columns) != len(select):
        raise CompilationError(
            f"Insert value list does not match column list expecting {len(columns)} but got {len(select)}"
        )
    if options.match_by_column_name != "NONE" and (select is not None or columns is not None):
        # Snowflake's words; a column list is a transform's shape too.
        raise CompilationError("match_by_column_name is not supported with copy transform.")
    return {
        "table": table,
        "columns": columns,
        "select": select,
        "stage": stage,
        "table_stage": table_stage,
        "path": path,
        "file_format": options.file_format,
        "on_error": options.on_error,
        "on_error_limit": options.on_error_limit,
        "pattern": options.pattern,
        "match_by_column_name": options.match_by_column_name,
        "include_metadata": options.include_metadata,
        "truncate_columns": options.truncate_columns,
        "copy_sql": sql.strip().rstrip(";"),
    }


def _copy_target(node: exp.Copy, defaults: Defaults) -> tuple[Name, list[str] | None]:
    """The table COPY INTO loads, and its column list when one is given."""
    target = node.this
    columns: list[str] | None = None
    if isinstance(target, exp.Schema):
        columns = [i.name if i.quoted else i.name.upper() for i in target.expressions]
        target = target.this
    return qualify_table(target, defaults), columns


def _copy_source(node: exp.Copy) -> tuple[list[str] | None, exp.Table | None]:
    """The stage table COPY reads FROM (None for Snowpipe Streaming's
    ``TABLE(DATA_SOURCE(TYPE => 'STREAMING'))``), and the transform's SELECT list when it reads
    through one."""
    files = node.args.get("files") or []
    if len(files) != 1:
        raise CompilationError("COPY INTO must read FROM exactly one stage")
    source = files[0]
    select: list[str] | None = None
    if isinstance(source, exp.Subquery):
        select, source = _copy_transform(source)
    if isinstance(source, exp.Table) and isinstance(source.this, exp.TableFromRows):
        source = source.this
    if isinstance(source, exp.TableFromRows):
        _data_source(source)
        return select, None
    if not isinstance(source, exp.Table) or not str(source.this.name if source.this else "").startswith("@"):
        raise CompilationError(
            "COPY INTO must read FROM @stage, FROM (SELECT ... FROM @stage), or for Snowpipe Streaming "
            "FROM (SELECT ... FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
        )
    return select, source


def _data_source(source: exp.TableFromRows) -> None:
    """TABLE(DATA_SOURCE(TYPE => 'STREAMING')), the only table function a COPY may read."""
    call = source.this
    args = call.expressions if isinstance(call, exp.Anonymous) else []
    kinds = [
        str(a.expression.this).upper()
        for a in args
        if isinstance(a, exp.Kwarg)
        and a.this.name.upper() == "TYPE"
        and isinstance(a.expression, exp.Literal)
    ]
    if (
        not isinstance(call, exp.Anonymous)
        or call.name.upper() != "DATA_SOURCE"
        or kinds != ["STREAMING"]
        or len(args) != 1
    ):
        raise CompilationError(
            "a pipe reads FROM @stage, or FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')) for Snowpipe Streaming"
        )


def _streaming_options(options: _CopyOptions) -> None:
    """A streaming pipe reads NDJSON rows and follows ON_ERROR = CONTINUE, as Snowflake's does."""
    if options.file_format or options.pattern is not None:
        raise CompilationError(
            "FILE_FORMAT and PATTERN do not apply to a streaming pipe: channels send JSON rows"
        )
    if options.on_error != "SKIP_FILE" and options.on_error != "CONTINUE":
        raise CompilationError(
            "a streaming pipe follows ON_ERROR = CONTINUE (Snowpipe Streaming's only mode)"
        )
    options.on_error = "CONTINUE"
    options.file_format = {"type": "JSON"}


def _copy_transform(subquery: exp.Subquery) -> tuple[list[str], exp.Expr | None]:
    """A COPY transform's SELECT list as Snowflake SQL, and what it selects FROM."""
    query = subquery.this
    if not isinstance(query, exp.Select):
        raise CompilationError("the COPY transform must be a simple SELECT")
    for clause in ("where", "group", "order", "limit", "joins", "having", "distinct"):
        if query.args.get(clause):
            raise CompilationError(f"{clause.upper()} is not supported in a COPY transform")
    select = [(e.this if isinstance(e, exp.Alias) else e).sql("snowflake") for e in query.expressions]
    from_ = query.args.get("from_") or query.args.get("from")
    return select, from_.this if from_ is not None else None


@dataclass
class _CopyOptions:
    """The COPY options a pipe keeps, with Snowpipe's defaults (ON_ERROR = SKIP_FILE)."""

    file_format: dict[str, object]
    on_error: OnError = "SKIP_FILE"
    on_error_limit: float = 0.0
    pattern: str | None = None
    match_by_column_name: MatchBy = "NONE"
    include_metadata: dict[str, str] = field(default_factory=dict)
    truncate_columns: bool = False


_NOT_IN_PIPES = ("FILES", "SIZE_LIMIT", "PURGE", "FORCE", "RETURN_FAILED_ONLY", "VALIDATION_MODE")
_NOT_YET: tuple[str, ...] = ()


def _copy_options(node: exp.Copy, defaults: Defaults) -> _CopyOptions:
    """FILE_FORMAT, ON_ERROR and PATTERN, in the order written (a repeated option: the last wins)."""
    options = _CopyOptions(file_format={})
    for param in node.args.get("params") or []:
        key = param.name.upper()
        if key == "FILE_FORMAT":
            options.file_format = format_options(param.expressions, defaults)
        elif key == "ON_ERROR":
            options.on_error, options.on_error_limit = parse_on_error(
                str(_value(param.args.get("expression")))
            )
        elif key == "PATTERN":
            options.pattern = str(_value(param.args.get("expression")))
            compile_pattern(options.pattern)  # refuses what RE2 cannot run, saying what to change
        elif key == "MATCH_BY_COLUMN_NAME":
            options.match_by_column_name = _match_by(param.args.get("expression"))
        elif key == "INCLUDE_METADATA":
            options.include_metadata = _include_metadata(param.args.get("expression"))
        elif key in ("TRUNCATECOLUMNS", "ENFORCE_LENGTH"):
            # Inverse synonyms: TRUNCATECOLUMNS = TRUE is ENFORCE_LENGTH = FALSE.
            options.truncate_columns = _boolean_option(key, param.args.get("expression")) == (
                key == "TRUNCATECOLUMNS"
            )
        else:
            raise _refused_copy_option(key)
    if options.include_metadata and options.match_by_column_name == "NONE":
        raise CompilationError(
            "INCLUDE_METADATA needs MATCH_BY_COLUMN_NAME = CASE_SENSITIVE | CASE_INSENSITIVE"
        )
    return options


def _boolean_option(key: str, value: exp.Expr | None) -> bool:
    """TRUE or FALSE (a string of either too), or CompilationError naming ``key``."""
    word = _value(value)
    if isinstance(word, str) and word.upper() in ("TRUE", "FALSE"):
        word = word.upper() == "TRUE"
    if not isinstance(word, bool):
        raise CompilationError(f"invalid value '{word}' for {key}: TRUE or FALSE")
    return word


def _match_by(value: exp.Expr | None) -> MatchBy:
    word = str(_value(value)).upper()
    if word not in ("CASE_SENSITIVE", "CASE_INSENSITIVE", "NONE"):
        raise CompilationError(
            f"invalid value '{word}' for MATCH_BY_COLUMN_NAME: CASE_SENSITIVE, CASE_INSENSITIVE or NONE"
        )
    return word  # type: ignore[return-value]


def _include_metadata(value: exp.Expr | None) -> dict[str, str]:
    """INCLUDE_METADATA = (col = METADATA$..., ...): target column -> metadata column."""
    items: list[exp.Expr] = []
    if isinstance(value, exp.Tuple):
        items = list(value.expressions)
    elif isinstance(value, exp.Paren):
        items = [value.this]
    out: dict[str, str] = {}
    for item in items:
        target, source = (item.this, item.expression) if isinstance(item, exp.EQ) else (None, None)
        if not isinstance(target, exp.Column) or not isinstance(source, exp.Column):
            raise CompilationError(
                "INCLUDE_METADATA takes (<column> = METADATA$<name>, ...), e.g. "
                "INCLUDE_METADATA = (file_name = METADATA$FILENAME)"
            )
        meta = source.name.upper()
        if meta not in METADATA_COLUMNS:
            raise CompilationError(
                f"invalid metadata column '{source.name}' in INCLUDE_METADATA: "
                f"one of {', '.join(METADATA_COLUMNS)}"
            )
        ident = target.this
        name = ident.name if getattr(ident, "quoted", False) else ident.name.upper()
        if name in out:
            raise CompilationError(f"column '{name}' appears twice in INCLUDE_METADATA")
        out[name] = meta
    return out


def _refused_copy_option(key: str) -> CompilationError:
    """Why COPY option ``key`` is refused: a pipe never takes it, Floe lacks it, or it is unknown."""
    if key in _NOT_IN_PIPES:
        return CompilationError(f"COPY option {key} is not allowed in a pipe definition")
    if key in _NOT_YET:
        return CompilationError(f"COPY option {key} is not supported by Floe yet")
    return CompilationError(f"invalid COPY option '{key}'")


def _parse_pipe(text: str, m: re.Match[str], defaults: Defaults) -> CreatePipe:
    """CREATE PIPE: the header, then properties one at a time from left to right, up to AS."""
    props: dict[str, str] = {}
    pos = m.end()
    while (head := _PIPE_AS.match(text, pos)) is None:
        pm = _PIPE_PROP.match(text, pos)
        if not pm:
            near = text[pos:].lstrip()[:40]
            raise CompilationError(
                f"syntax error in CREATE PIPE near '{near}'; expected pipe properties "
                "(AUTO_INGEST = TRUE, COMMENT = '...') and then AS COPY INTO <table> FROM @<stage>"
                if near
                else "CREATE PIPE needs a definition: CREATE PIPE <name> AS COPY INTO <table> FROM @<stage>"
            )
        props[pm.group("key").upper()] = pm.group("value")
        pos = pm.end()
    auto = props.get("AUTO_INGEST", "FALSE").upper()
    if auto not in ("TRUE", "FALSE"):
        raise CompilationError(f"invalid value '{auto}' for AUTO_INGEST")
    _refuse_pipe_notifications(props)
    if m.group("alter") and m.group("ine"):
        raise CompilationError("CREATE OR ALTER PIPE takes no IF NOT EXISTS: it creates or alters the pipe")
    paused = _pipe_paused(props, alter=bool(m.group("alter")))
    comment = props.get("COMMENT")
    error_integration = props.get("ERROR_INTEGRATION")
    interval = props.get("BACKFILL_INTERVAL")
    copy = parse_copy(text[head.end() :], defaults)
    return CreatePipe(
        name=qualify(m.group("name"), defaults),
        auto_ingest=auto == "TRUE",
        replace=bool(m.group("replace")),
        if_not_exists=bool(m.group("ine")),
        comment=comment[1:-1].replace("''", "'") if comment else None,
        alter=bool(m.group("alter")),
        paused=paused,
        error_integration=_pipe_integration(error_integration) if error_integration else None,
        backfill_interval_s=backfill_interval(interval) if interval is not None else None,
        **copy,  # type: ignore[arg-type]
    )


def _pipe_paused(props: dict[str, str], *, alter: bool) -> bool | None:
    """PIPE_EXECUTION_PAUSED of CREATE OR ALTER PIPE (a property CREATE PIPE does not take)."""
    value = props.get("PIPE_EXECUTION_PAUSED")
    if value is None:
        return None
    if not alter:
        raise CompilationError(
            "PIPE_EXECUTION_PAUSED is a property of CREATE OR ALTER PIPE and ALTER PIPE ... SET, not of "
            "CREATE PIPE: create the pipe, then ALTER PIPE <name> SET PIPE_EXECUTION_PAUSED = TRUE"
        )
    if value.upper() not in ("TRUE", "FALSE"):
        raise CompilationError(
            f"invalid value '{shortened(value)}' for PIPE_EXECUTION_PAUSED; use TRUE or FALSE"
        )
    return value.upper() == "TRUE"


def _refuse_pipe_notifications(props: dict[str, str]) -> None:
    """INTEGRATION and AWS_SNS_TOPIC choose where auto-ingest notifications come from; Floe's come
    from S3 through its own SQS queue, so a pipe that names either is refused, not silently
    notified some other way."""
    if "INTEGRATION" in props:
        raise CompilationError(
            "INTEGRATION is not supported: it names the notification integration of Google Cloud Storage "
            "or Azure event notifications, and Floe reads S3, whose AUTO_INGEST = TRUE notifications reach "
            "Floe's own SQS queue without one. Leave INTEGRATION out; for errors, use ERROR_INTEGRATION"
        )
    if "AWS_SNS_TOPIC" in props:
        raise CompilationError(
            "AWS_SNS_TOPIC is not supported: Floe does not subscribe to SNS topics for auto-ingest. Leave it "
            "out: AUTO_INGEST = TRUE points the bucket's S3 event notifications at Floe's SQS queue itself "
            "(SHOW PIPES, notification_channel; to keep an SNS topic in between, subscribe that queue to "
            "it and set FLOE_AUTO_CONFIGURE_NOTIFICATIONS=false), and BACKFILL_INTERVAL lists the stage "
            "for files no notification announced"
        )


def _pipe_integration(value: str) -> str:
    """ERROR_INTEGRATION's value: an integration name, upper-cased unless double-quoted."""
    if value.startswith("'"):
        raise CompilationError(
            "ERROR_INTEGRATION takes the name of a notification integration, not a string: "
            "ERROR_INTEGRATION = my_integration"
        )
    return check_identifier(value[1:-1].replace('""', '"') if value.startswith('"') else value.upper())


_INTERVAL = re.compile(r"\s*(?P<n>\d{1,9})\s*(?P<unit>SECOND|MINUTE|HOUR|DAY)S?\s*", re.I)
_UNIT_SECONDS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400}
MAX_BACKFILL_INTERVAL_S = 7 * 86400
"""The longest BACKFILL_INTERVAL: a backfill lists the files of the last 7 days (as ALTER PIPE ...
REFRESH does), so a longer interval would leave files unlisted."""


def backfill_interval(value: str) -> int:
    """BACKFILL_INTERVAL's quoted '<n> SECONDS | MINUTES | HOURS | DAYS' in seconds (the minimum is
    a setting, which the executor checks)."""
    m = _INTERVAL.fullmatch(value[1:-1]) if value.startswith("'") else None
    if m is None:
        raise CompilationError(
            f"invalid value {shortened(value)} for BACKFILL_INTERVAL; write a quoted interval such as "
            "BACKFILL_INTERVAL = '10 MINUTES' (SECONDS, MINUTES, HOURS or DAYS)"
        )
    seconds = int(m.group("n")) * _UNIT_SECONDS[m.group("unit").upper()]
    if not 0 < seconds <= MAX_BACKFILL_INTERVAL_S:
        raise CompilationError(
            f"BACKFILL_INTERVAL must lie between 1 second and 7 days (the window a backfill lists), not "
            f"{shortened(value)}"
        )
    return seconds


def _parse_create(node: exp.Create, defaults: Defaults, text: str) -> Statement:
    kind = str(node.args.get("kind") or "").upper()
    replace = bool(node.args.get("replace"))
    ine = bool(node.args.get("exists"))
    if kind == "TABLE":
        return _parse_create_table(node, defaults, replace, ine)
    if kind == "STAGE":
        return _parse_create_stage(node, defaults, replace, ine, text)
    if kind == "FILE FORMAT":
        return _parse_create_file_format(node, defaults, replace, ine)
    raise CompilationError(f"CREATE {kind} is not supported")


def _file_format_properties(node: exp.Create, defaults: Defaults) -> tuple[dict[str, object], str | None]:
    """CREATE FILE FORMAT's options (as ``format_options`` reads FILE_FORMAT = (...)) and COMMENT."""
    props = node.args["properties"].expressions if node.args.get("properties") else []
    comment: str | None = None
    options: list[exp.Expr] = []
    for prop in props:
        if isinstance(prop, exp.SchemaCommentProperty):
            comment = str(_value(prop.this))
        elif isinstance(prop, exp.Property) and prop.name.upper() == "COMMENT":
            comment = str(_value(prop.args.get("value")))
        elif isinstance(prop, exp.Property):
            options.append(prop)
        else:
            raise CompilationError(f"invalid file format option '{prop.sql('snowflake')}'")
    fmt = format_options(options, defaults)
    if "format_name" in fmt:
        raise CompilationError("FORMAT_NAME names a file format; CREATE FILE FORMAT takes its options")
    return fmt, comment


def _parse_create_file_format(
    node: exp.Create, defaults: Defaults, replace: bool, ine: bool
) -> CreateFileFormat:
    if replace and ine:
        raise CompilationError("OR REPLACE and IF NOT EXISTS are incompatible.")
    options, comment = _file_format_properties(node, defaults)
    return CreateFileFormat(qualify_table(node.this, defaults), options, replace, ine, comment)


def _alter_file_format(text: str, head: re.Match[str], defaults: Defaults) -> AlterFileFormat:
    """ALTER FILE FORMAT: RENAME TO and UNSET COMMENT by hand, SET's options by sqlglot (as CREATE
    FILE FORMAT reads them: the text after SET is the same option list)."""
    stmt = AlterFileFormat(qualify(head.group("name"), defaults), head.group("ie") is not None)
    rest = text[head.end() :].strip()
    if m := _RENAME_TO.fullmatch(rest):
        stmt.rename_to = qualify(m.group("name"), defaults)
        return stmt
    if _UNSET_COMMENT.fullmatch(rest):
        stmt.unset_comment = True
        return stmt
    if m := _SET.match(rest):
        try:
            node = sqlglot.parse_one("CREATE FILE FORMAT f " + rest[m.end() :], read="snowflake")
        except (ParseError, TokenError) as exc:
            raise CompilationError(f"syntax error in ALTER FILE FORMAT ... SET: {exc}") from exc
        if not isinstance(node, exp.Create):
            raise CompilationError(
                "ALTER FILE FORMAT ... SET takes file format options: SET SKIP_HEADER = 1 ..."
            )
        stmt.options, stmt.comment = _file_format_properties(node, defaults)
        if not stmt.options and stmt.comment is None:
            raise CompilationError("ALTER FILE FORMAT ... SET needs at least one option or COMMENT")
        return stmt
    raise CompilationError(
        "syntax error in ALTER FILE FORMAT: expected SET <options>, UNSET COMMENT or RENAME TO <name>"
    )


def _parse_create_table(node: exp.Create, defaults: Defaults, replace: bool, ine: bool) -> CreateTable:
    schema = node.this
    props = node.args["properties"].expressions if node.args.get("properties") else []
    template = next((p.this for p in props if isinstance(p, exp.UsingTemplateProperty)), None)
    if template is not None:  # CREATE TABLE ... USING TEMPLATE: services.infer_schema evaluates it
        if not isinstance(schema, exp.Table):
            raise CompilationError("CREATE TABLE ... USING TEMPLATE has no column list: the template has it")
        stmt = CreateTable(qualify_table(schema, defaults), [], replace, ine, template=template)
        stmt.enable_schema_evolution = _schema_evolution(node)
        return stmt
    if not isinstance(schema, exp.Schema):
        raise CompilationError("CREATE TABLE needs a column list (CTAS and LIKE are not supported)")
    cols = [_column(cdef) for cdef in schema.expressions]
    if len({c.name for c in cols}) != len(cols):
        raise CompilationError("duplicate column name in CREATE TABLE")
    stmt = CreateTable(qualify_table(schema.this, defaults), cols, replace, ine)
    stmt.enable_schema_evolution = _schema_evolution(node)
    return stmt


def _schema_evolution(node: exp.Create) -> bool:
    """CREATE TABLE's ENABLE_SCHEMA_EVOLUTION = TRUE | FALSE (FALSE when absent)."""
    props = node.args["properties"].expressions if node.args.get("properties") else []
    for prop in props:
        if isinstance(prop, exp.Property) and prop.name.upper() == "ENABLE_SCHEMA_EVOLUTION":
            value = prop.args.get("value")
            if not isinstance(value, exp.Boolean):
                raise CompilationError("ENABLE_SCHEMA_EVOLUTION takes TRUE or FALSE")
            return bool(value.this)
    return False


def _column(cdef: exp.Expr) -> Column:
    """One column definition of CREATE TABLE."""
    if not isinstance(cdef, exp.ColumnDef):
        raise CompilationError(f"unsupported table element: {cdef.sql('snowflake')}")
    dtype = cdef.args.get("kind")
    if dtype is None:
        raise CompilationError(f"column {cdef.name} needs a type")
    ctype, precision, scale = parse_column_type(dtype)
    not_null = any(isinstance(c.args.get("kind"), exp.NotNullColumnConstraint) for c in cdef.constraints)
    ident = cdef.this
    name = ident.name if getattr(ident, "quoted", False) else ident.name.upper()
    return Column(name=name, type=ctype, precision=precision, scale=scale, nullable=not not_null)


def _parse_create_stage(
    node: exp.Create, defaults: Defaults, replace: bool, ine: bool, text: str
) -> CreateStage:
    url: str | None = None
    fmt: dict[str, object] = {}
    integration: str | None = None
    comment: str | None = None
    encryption: str | None = None
    for prop in node.args["properties"].expressions if node.args.get("properties") else []:
        if isinstance(prop, exp.FileFormatProperty):
            fmt = format_options(prop.expressions, defaults)
            continue
        if isinstance(prop, exp.SchemaCommentProperty):
            comment = str(_value(prop.this))
            continue
        if isinstance(prop, exp.CredentialsProperty):
            # Floe reads S3 with its own credentials, bounded by the stage's storage integration;
            # keys given here would be ignored, so the stage would not read what its author meant.
            raise CompilationError(
                "CREDENTIALS is not supported: Floe reads S3 with its own credentials; name a storage "
                "integration that allows the URL instead: STORAGE_INTEGRATION = <integration>"
            )
        name = prop.name.upper() if isinstance(prop, exp.Property) else None
        if name == "URL":
            url = str(_value(prop.args.get("value")))
        elif name == "STORAGE_INTEGRATION":
            if integration is not None:
                raise CompilationError("duplicate property 'STORAGE_INTEGRATION' in CREATE STAGE")
            integration = _stage_integration(prop.args.get("value"), text)
        elif name == "ENCRYPTION":
            encryption = _stage_encryption(prop.args.get("value"))
        else:
            raise CompilationError(f"unsupported stage property: {prop.sql('snowflake')}")
    if url is not None and not url.lower().startswith("s3://"):
        raise CompilationError(
            "an external stage's URL is an S3 location: URL = 's3://bucket/prefix/' "
            "(without URL, CREATE STAGE makes an internal stage)"
        )
    if url is not None:  # its keys would resolve elsewhere than its integration admitted (decision 115)
        stage_path(url[len("s3://") :], f"URL '{shortened(url, 200)}'")
    if url is None and integration is not None:
        raise CompilationError(
            "STORAGE_INTEGRATION applies to external stages: give the stage a URL = 's3://bucket/prefix/', "
            "or leave STORAGE_INTEGRATION out for an internal stage"
        )
    if url is not None and encryption is not None:
        raise CompilationError(
            "ENCRYPTION = (TYPE = 'SNOWFLAKE_FULL') applies to internal stages; Floe reads an external "
            "stage's objects as S3 serves them"
        )
    stage = CreateStage(qualify_table(node.this, defaults), url or "", fmt, replace, ine, integration)
    stage.comment = comment
    return stage


def _stage_format(value: str, defaults: Defaults) -> dict[str, object]:
    """ALTER STAGE's FILE_FORMAT = (...) (``value``: the balanced parentheses), read as CREATE STAGE
    reads its own, so the options and their refusals are the same."""
    stage = parse(f"CREATE STAGE alter_stage_format FILE_FORMAT = {value}", defaults)
    assert isinstance(stage, CreateStage)
    return stage.file_format


def _stage_encryption(value: exp.Expr | None) -> str:
    """An internal stage's ENCRYPTION = (TYPE = 'SNOWFLAKE_FULL'), the one Floe does: every file is
    sealed with a key of its own under Floe's master key. SNOWFLAKE_SSE (server-side only, so that
    presigned URLs can serve the files) is refused: Floe serves no presigned URLs."""
    pairs = value.this if isinstance(value, exp.Paren) else None
    kind = (
        str(_value(pairs.expression)).upper()
        if isinstance(pairs, exp.EQ) and pairs.this.name.upper() == "TYPE"
        else None
    )
    if kind != "SNOWFLAKE_FULL":
        raise CompilationError(
            "Floe encrypts every internal stage's files with its own key, as ENCRYPTION = (TYPE = "
            "'SNOWFLAKE_FULL') says; leave ENCRYPTION out, or write that (SNOWFLAKE_SSE is not supported)"
        )
    return kind


def _stage_integration(value: exp.Expr | None, text: str) -> str:
    """STORAGE_INTEGRATION's name, upper-cased unless quoted. sqlglot turns both ``i`` and ``"i"``
    into the same Var, so the statement's tokens tell which one was written."""
    if not isinstance(value, exp.Var):
        raise CompilationError(
            "STORAGE_INTEGRATION takes the name of a storage integration, not a string: "
            "STORAGE_INTEGRATION = my_integration"
        )
    tokens = sqlglot.tokenize(text, read="snowflake")
    quoted = any(
        tokens[i].text.upper() == "STORAGE_INTEGRATION"
        and tokens[i + 1].token_type == TokenType.EQ
        and tokens[i + 2].token_type == TokenType.IDENTIFIER
        and tokens[i + 2].text == value.name
        for i in range(len(tokens) - 2)
    )
    return check_identifier(value.name if quoted else value.name.upper())


_CHANNEL_SCOPES = ("ACCOUNT", "DATABASE", "SCHEMA", "TABLE", "PIPE")


def _show_channels(sc: Scanner, defaults: Defaults) -> ShowChannels:
    """SHOW CHANNELS [LIKE '...'] [IN ...], after SHOW CHANNELS."""
    sc.what = "SHOW CHANNELS"
    show = ShowChannels(sc.like())
    if sc.take(r"IN\b"):
        show.in_kind = sc.word("|".join(rf"{s}\b" for s in _CHANNEL_SCOPES), _one_of(_CHANNEL_SCOPES))
        if show.in_kind in ("TABLE", "PIPE"):
            show.in_name = str(sc.qualified(show.in_kind.lower(), defaults))
        else:
            show.in_name = _show_scope(sc, show.in_kind, defaults)
    sc.end()
    return show


def _family(word: str) -> str | None:
    """STORAGE, API or NOTIFICATION from 'STORAGE INTEGRATION', 'API INTEGRATIONS', ...; None for
    the bare noun."""
    first = word.split()[0]
    return first if first in ("STORAGE", "API", "NOTIFICATION") else None


def _show(sc: Scanner, defaults: Defaults) -> Show | ShowChannels:
    """SHOW <kind>S [LIKE '...'] [IN ...], after SHOW."""
    sc.what = "SHOW"
    plural = sc.word(
        r"DATABASES\b|SCHEMAS\b|(?:STORAGE\s+|API\s+|NOTIFICATION\s+)?INTEGRATIONS\b|STAGES\b|TABLES\b|PIPES\b"
        r"|CHANNELS\b|EXTERNAL\s+FUNCTIONS\b|FILE\s+FORMATS\b",
        "DATABASES, SCHEMAS, INTEGRATIONS, STAGES, FILE FORMATS, TABLES, PIPES, CHANNELS, USERS, ROLES, "
        "GRANTS or EXTERNAL FUNCTIONS",
    )
    if plural == "CHANNELS":
        return _show_channels(sc, defaults)
    kind = _KINDS[plural if plural == "FILE FORMATS" else plural.split()[-1]]
    sc.what = f"SHOW {plural}"
    show = Show(kind, sc.like(), family=_family(plural) if kind == "INTEGRATION" else None)
    scopes = _SHOW_SCOPES[kind]
    if scopes and sc.take(r"IN\b"):
        show.in_kind = sc.word("|".join(rf"{s}\b" for s in scopes), _one_of(scopes))
        show.in_name = _show_scope(sc, show.in_kind, defaults)
        if sc.take(r"LIKE\b"):
            raise CompilationError(
                f"LIKE goes before IN: SHOW {plural} LIKE '<pattern>' IN {show.in_kind} ..."
            )
    if not sc.at_end():
        expected = ["the end of the statement"]
        if show.in_kind is None and scopes:
            expected.insert(0, f"IN {' | '.join(scopes)}")
        if show.in_kind is None and show.like is None:
            expected.insert(0, "LIKE '<pattern>'")
        raise sc.error(_one_of(expected))
    return show


def word_of(kind: str) -> str:
    """How SQL spells a kind: FILE FORMAT for FILE_FORMAT, the kind itself otherwise."""
    return kind.replace("_", " ")


def _one_of(options: tuple[str, ...] | list[str]) -> str:
    """'A', 'A or B', 'A, B or C'."""
    return " or ".join([", ".join(options[:-1]), options[-1]]) if len(options) > 1 else options[0]


def _show_scope(sc: Scanner, in_kind: str, defaults: Defaults) -> str:
    """The name after IN ACCOUNT | DATABASE | SCHEMA; without one, Snowflake means the current one."""
    if in_kind == "ACCOUNT":
        return ""
    if sc.at_end():
        return (
            quote_part(defaults.database)
            if in_kind == "DATABASE"
            else join_parts(defaults.database, defaults.schema)
        )
    return sc.object_name(in_kind, defaults)


def _object_kind(sc: Scanner, others: tuple[str, ...]) -> tuple[str, str | None]:
    """STAGE, TABLE, PIPE, DATABASE, SCHEMA, [STORAGE | API] INTEGRATION or [EXTERNAL] FUNCTION,
    after DESC or DROP (which ``access.parse`` has already read for the ``others``, USER and ROLE),
    with the integration's family when the statement names one."""
    word = sc.word(
        r"STAGE\b|TABLE\b|PIPE\b|DATABASE\b|SCHEMA\b|(?:STORAGE\s+|API\s+|NOTIFICATION\s+)?INTEGRATION\b"
        r"|(?:EXTERNAL\s+)?FUNCTION\b|FILE\s+FORMAT\b",
        _one_of(
            (
                *("STAGE", "FILE FORMAT", "TABLE", "PIPE", "DATABASE", "SCHEMA", "INTEGRATION", "FUNCTION"),
                *others,
            )
        ),
    )
    kind = _KINDS[word if word == "FILE FORMAT" else word.split()[-1]]
    return kind, _family(word) if kind == "INTEGRATION" else None


def _describe(sc: Scanner, defaults: Defaults) -> Describe | DescribeObject:
    """DESC[RIBE] <kind> name, after DESC."""
    sc.what = "DESC"
    kind, family = _object_kind(sc, ("USER",))
    sc.what = f"DESC {word_of(kind)}"
    stmt: Describe | DescribeObject
    if kind in _IN_SCHEMA:
        stmt = Describe(kind, sc.qualified(word_of(kind).lower(), defaults))
    else:
        stmt = DescribeObject(kind, sc.object_name(kind, defaults), family)
    sc.end()
    return stmt


def _drop(sc: Scanner, defaults: Defaults) -> Drop | DropObject:
    """DROP <kind> [IF EXISTS] name, after DROP."""
    sc.what = "DROP"
    kind, family = _object_kind(sc, ("USER", "ROLE"))
    sc.what = f"DROP {word_of(kind)}"
    ie = sc.take(r"IF\s+EXISTS\b") is not None
    if kind in _IN_SCHEMA:
        stmt: Drop | DropObject = Drop(kind, sc.qualified(word_of(kind).lower(), defaults), ie)
    else:
        stmt = DropObject(kind, sc.object_name(kind, defaults), ie, family)
        if kind in ("DATABASE", "SCHEMA"):
            # Snowflake's RESTRICT only refuses a drop that foreign keys point into; Floe has none,
            # so both spellings drop the database or schema with everything in it, as Snowflake does.
            sc.take(r"CASCADE\b|RESTRICT\b")
    sc.end()
    return stmt


def _create_namespace(sc: Scanner, defaults: Defaults, replace: bool) -> CreateDatabase | CreateSchema:
    """CREATE DATABASE | SCHEMA, after CREATE [OR REPLACE]."""
    if sc.take(r"TRANSIENT\b"):
        raise CompilationError("TRANSIENT databases and schemas are not supported; leave TRANSIENT out")
    kind = sc.word(r"DATABASE\b|SCHEMA\b", "DATABASE or SCHEMA")
    sc.what = f"CREATE {kind}"
    ine = sc.take(r"IF\s+NOT\s+EXISTS\b") is not None
    name = sc.object_name(kind, defaults)
    comment: str | None = None
    if sc.take(r"COMMENT\s*=") is not None:
        comment = sc.string("a quoted comment")
    if not sc.at_end():
        raise sc.error(
            "the end of the statement"
            if comment is not None
            else "COMMENT = '<text>' or the end of the statement"
        )
    if kind == "DATABASE":
        return CreateDatabase(name, replace, ine, comment)
    return CreateSchema(name, replace, ine, comment)


def _union(*groups: tuple[str, ...]) -> tuple[str, ...]:
    """The names of ``groups`` in order, each once."""
    return tuple(dict.fromkeys(name for group in groups for name in group))


def _integration_properties(sc: Scanner, family: str | None) -> tuple[dict[str, str], dict[str, list[str]]]:
    """An integration's ``NAME = value`` pairs in any order: single values (upper-cased words,
    unescaped strings) and location or prefix lists, apart. ``family`` None (ALTER INTEGRATION)
    takes the properties of either kind."""
    valid = _FAMILY_PROPERTIES[family] if family else _union(*_FAMILY_PROPERTIES.values())
    values: dict[str, str] = {}
    lists: dict[str, list[str]] = {}
    while not sc.at_end():
        key = sc.expect(r"(?P<key>[A-Za-z_]\w*)\s*=", "a property (NAME = value)").group("key").upper()
        if key not in valid:
            what = f"{family} INTEGRATION" if family else "INTEGRATION"
            raise CompilationError(
                f"invalid property '{shortened(key)}' for {what}; Floe takes {', '.join(valid)}"
            )
        if key in values or key in lists:
            raise CompilationError(f"duplicate property '{key}' in {sc.what}")
        if key.endswith("_LOCATIONS"):
            lists[key] = _locations(sc, key, "locations", "'s3://bucket/path/'")
        elif key.endswith("_PREFIXES"):
            lists[key] = _locations(sc, key, "prefixes", "'https://host/path/'")
        elif key == "ENABLED":
            values[key] = sc.word(r"TRUE\b|FALSE\b", "TRUE or FALSE after ENABLED =")
        elif key in ("TYPE", "STORAGE_PROVIDER", "API_PROVIDER", "DIRECTION", "NOTIFICATION_PROVIDER"):
            values[key] = sc.value(f"a value for {key}").upper()
        elif key == "API_KEY":
            values[key] = sc.secret(key)
        else:
            values[key] = sc.string(f"a quoted value for {key}")
    return values, lists


def _locations(sc: Scanner, key: str, what: str, example: str) -> list[str]:
    """A parenthesised list of quoted locations (or prefixes)."""
    sc.expect(r"\(", f"a list of quoted {what} in parentheses after {key} =, such as ({example})")
    out: list[str] = []
    if sc.take(r"\)") is not None:
        return out
    while True:
        out.append(sc.string(f"a quoted {what[:-1] if what == 'locations' else 'prefix'} such as {example}"))
        if sc.take(r"\)") is not None:
            return out
        sc.expect(",", f"',' or ')' in the list of {what}")


def _check_locations(key: str, locations: list[str]) -> list[str]:
    """``locations`` if each is an s3:// URL with a bucket, or '*' for allowed locations."""
    allowed = key == "STORAGE_ALLOWED_LOCATIONS"
    if allowed and not locations:
        raise CompilationError(f"{key} needs at least one location: ('s3://bucket/path/'), or ('*') for any")
    for location in locations:
        if location == "*":
            if allowed:
                continue
            raise CompilationError(
                f"'*' cannot be a location in {key}; list the s3://bucket/path/ prefixes to block, "
                "or set ENABLED = FALSE to admit no stage at all"
            )
        if not location.lower().startswith("s3://") or not split_s3_url(location)[0]:
            star = " or '*' for any location" if allowed else ""
            raise CompilationError(
                f"invalid location '{shortened(location, 60)}' in {key}; Floe reads S3: "
                f"write 's3://bucket/path/'{star}"
            )
        stage_path(location[len("s3://") :], f"location '{shortened(location, 200)}' of {key}")
    return locations


def _check_prefixes(key: str, prefixes: list[str]) -> list[str]:
    """``prefixes`` if each is a URL Floe would call (``check_function_url``)."""
    if key == "API_ALLOWED_PREFIXES" and not prefixes:
        raise CompilationError(
            f"{key} needs at least one prefix, such as ('https://host/path/'); to admit no function, "
            "set ENABLED = FALSE"
        )
    for prefix in prefixes:
        try:
            check_function_url(prefix)
        except ValueError as exc:
            raise CompilationError(
                f"invalid prefix '{shortened(prefix, 60)}' in {key}: {exc}; write 'https://host/path/' "
                "(http:// only for localhost, 127.0.0.1 or ::1)"
            ) from None
    return prefixes


def _create_integration(sc: Scanner, replace: bool) -> CreateIntegration:
    """CREATE [OR REPLACE] STORAGE INTEGRATION ..., after STORAGE INTEGRATION."""
    sc.what = "CREATE STORAGE INTEGRATION"
    ine = sc.take(r"IF\s+NOT\s+EXISTS\b") is not None
    name = sc.ident("integration")
    values, lists = _integration_properties(sc, "STORAGE")
    missing = [k for k in _INTEGRATION_REQUIRED if k not in values and k not in lists]
    if missing:
        raise CompilationError(
            f"CREATE STORAGE INTEGRATION needs {', '.join(missing)}; for example: "
            f"CREATE STORAGE INTEGRATION {name} {_INTEGRATION_EXAMPLE}"
        )
    if values["TYPE"] != "EXTERNAL_STAGE":
        raise CompilationError(
            f"invalid value '{values['TYPE']}' for TYPE; a storage integration is TYPE = EXTERNAL_STAGE"
        )
    if values["STORAGE_PROVIDER"] != "S3":
        raise CompilationError(
            f"STORAGE_PROVIDER = '{values['STORAGE_PROVIDER']}' is not supported; Floe reads S3: "
            "STORAGE_PROVIDER = 'S3'"
        )
    return CreateIntegration(
        name=name,
        enabled=values["ENABLED"] == "TRUE",
        provider="S3",
        allowed_locations=_check_locations("STORAGE_ALLOWED_LOCATIONS", lists["STORAGE_ALLOWED_LOCATIONS"]),
        blocked_locations=_check_locations(
            "STORAGE_BLOCKED_LOCATIONS", lists.get("STORAGE_BLOCKED_LOCATIONS", [])
        ),
        replace=replace,
        if_not_exists=ine,
        comment=values.get("COMMENT"),
    )


def _create_api_integration(sc: Scanner, replace: bool) -> CreateApiIntegration:
    """CREATE [OR REPLACE] API INTEGRATION ..., after API INTEGRATION."""
    sc.what = "CREATE API INTEGRATION"
    ine = sc.take(r"IF\s+NOT\s+EXISTS\b") is not None
    name = sc.ident("integration")
    values, lists = _integration_properties(sc, "API")
    missing = [k for k in _API_REQUIRED if k not in values and k not in lists]
    if missing:
        raise CompilationError(
            f"CREATE API INTEGRATION needs {', '.join(missing)}; for example: "
            f"CREATE API INTEGRATION {name} {_API_EXAMPLE}"
        )
    provider = values["API_PROVIDER"]
    if provider not in API_PROVIDERS:
        raise CompilationError(
            f"invalid value '{shortened(provider)}' for API_PROVIDER; Snowflake's providers are "
            f"{', '.join(p.lower() for p in API_PROVIDERS)}"
        )
    return CreateApiIntegration(
        name=name,
        provider=provider,
        allowed_prefixes=_check_prefixes("API_ALLOWED_PREFIXES", lists["API_ALLOWED_PREFIXES"]),
        enabled=values["ENABLED"] == "TRUE",
        blocked_prefixes=_check_prefixes("API_BLOCKED_PREFIXES", lists.get("API_BLOCKED_PREFIXES", [])),
        api_key=values.get("API_KEY"),
        replace=replace,
        if_not_exists=ine,
        comment=values.get("COMMENT"),
    )


def check_topic_arn(arn: str) -> str:
    """``arn`` if it names a standard SNS topic; CompilationError otherwise."""
    if arn.endswith(".fifo") and _TOPIC_ARN.fullmatch(arn):
        raise CompilationError(
            f"AWS_SNS_TOPIC_ARN '{shortened(arn, 80)}' is a FIFO topic; error notifications go to a "
            "standard SNS topic"
        )
    if not _TOPIC_ARN.fullmatch(arn):
        raise CompilationError(
            f"invalid AWS_SNS_TOPIC_ARN '{shortened(arn, 80)}'; expected an SNS topic's ARN, such as "
            "'arn:aws:sns:us-east-1:123456789012:pipe-errors'"
        )
    return arn


def _create_notification_integration(sc: Scanner, replace: bool) -> CreateNotificationIntegration:
    """CREATE [OR REPLACE] NOTIFICATION INTEGRATION ..., after NOTIFICATION INTEGRATION."""
    sc.what = "CREATE NOTIFICATION INTEGRATION"
    ine = sc.take(r"IF\s+NOT\s+EXISTS\b") is not None
    name = sc.ident("integration")
    values, _lists = _integration_properties(sc, "NOTIFICATION")
    missing = [k for k in _NOTIFICATION_REQUIRED if k not in values]
    if missing:
        raise CompilationError(
            f"CREATE NOTIFICATION INTEGRATION needs {', '.join(missing)}; for example: "
            f"CREATE NOTIFICATION INTEGRATION {name} {_NOTIFICATION_EXAMPLE}"
        )
    wanted = {"TYPE": "QUEUE", "DIRECTION": "OUTBOUND", "NOTIFICATION_PROVIDER": "AWS_SNS"}
    for key, value in wanted.items():
        if values[key] != value:
            raise CompilationError(
                f"{key} = {shortened(values[key])} is not supported: Floe's notification integrations "
                "send pipe errors to Amazon SNS (TYPE = QUEUE DIRECTION = OUTBOUND NOTIFICATION_PROVIDER "
                "= AWS_SNS); S3 auto-ingest needs no integration, and GCS and Azure are not read"
            )
    return CreateNotificationIntegration(
        name=name,
        enabled=values["ENABLED"] == "TRUE",
        topic_arn=check_topic_arn(values["AWS_SNS_TOPIC_ARN"]),
        role_arn=values.get("AWS_SNS_ROLE_ARN", ""),
        replace=replace,
        if_not_exists=ine,
        comment=values.get("COMMENT"),
    )


_ALTERABLE = {
    "STORAGE": ("ENABLED", "STORAGE_ALLOWED_LOCATIONS", "STORAGE_BLOCKED_LOCATIONS", "COMMENT"),
    "API": ("ENABLED", "API_ALLOWED_PREFIXES", "API_BLOCKED_PREFIXES", "API_KEY", "COMMENT"),
    "NOTIFICATION": ("ENABLED", "AWS_SNS_TOPIC_ARN", "AWS_SNS_ROLE_ARN", "COMMENT"),
}
_UNSETTABLE = {
    "STORAGE": ("STORAGE_BLOCKED_LOCATIONS", "COMMENT"),
    "API": ("API_BLOCKED_PREFIXES", "API_KEY", "COMMENT"),
    "NOTIFICATION": ("COMMENT",),
}
_GENERIC = ("ENABLED", "COMMENT")
"""The properties both kinds of integration have: they do not say which kind a statement alters."""


def _implied_family(keys: list[str], family: str | None) -> str | None:
    """The kind of integration ``keys`` belong to (a property only one kind has), checked against
    the one the statement names; None when they are all generic."""
    found = family
    for key in keys:
        for kind, names in _FAMILY_PROPERTIES.items():
            if key in names and key not in _GENERIC and found != kind:
                if found is not None and key in _FAMILY_PROPERTIES[found]:
                    continue  # TYPE: storage and notification integrations both have it
                if found is not None:
                    raise CompilationError(
                        f"'{key}' is a property of {_FAMILY_NOUN[kind]}, not of {_FAMILY_NOUN[found]}; "
                        "an integration is one kind or the other"
                    )
                found = kind
    return found


def _alter_integration(sc: Scanner) -> AlterIntegration:
    """ALTER [STORAGE | API] INTEGRATION ..., after ALTER."""
    word = sc.word(r"(?:STORAGE\s+|API\s+|NOTIFICATION\s+)?INTEGRATION\b", "INTEGRATION")
    named = _family(word)
    sc.what = f"ALTER {word}"
    alter = AlterIntegration(name="", if_exists=sc.take(r"IF\s+EXISTS\b") is not None)
    alter.name = sc.ident("integration")
    if sc.word(r"SET\b|UNSET\b", "SET or UNSET") == "UNSET":
        unsettable = _UNSETTABLE[named] if named else _union(*_UNSETTABLE.values())
        while True:
            key = sc.word(r"[A-Za-z_]\w*", "a property to unset")
            if key not in unsettable:
                raise CompilationError(
                    f"cannot UNSET '{shortened(key)}' of {_FAMILY_NOUN[named]}; Floe unsets "
                    f"{_one_of(unsettable).replace(' or ', ' and ')}"
                )
            alter.unset.append(key)
            if sc.take(",") is None:
                sc.end()
                alter.family = _implied_family(alter.unset, named)
                return alter
    values, lists = _integration_properties(sc, named)
    family = _implied_family([*values, *lists], named)
    ignored = _FAMILY_IGNORED[family] if family else _union(*_FAMILY_IGNORED.values())
    alterable = _ALTERABLE[family] if family else _union(*_ALTERABLE.values())
    changed = [k for k in (*values, *lists) if k not in ignored]
    if not changed:
        raise sc.error(f"at least one of {', '.join(alterable)}")
    if fixed := [k for k in changed if k not in alterable]:
        raise CompilationError(
            f"cannot change {fixed[0]} of {_FAMILY_NOUN[family]}; Floe changes {', '.join(alterable)}"
        )
    alter.family = family
    if "ENABLED" in values:
        alter.enabled = values["ENABLED"] == "TRUE"
    if "STORAGE_ALLOWED_LOCATIONS" in lists:
        alter.allowed_locations = _check_locations(
            "STORAGE_ALLOWED_LOCATIONS", lists["STORAGE_ALLOWED_LOCATIONS"]
        )
    if "STORAGE_BLOCKED_LOCATIONS" in lists:
        alter.blocked_locations = _check_locations(
            "STORAGE_BLOCKED_LOCATIONS", lists["STORAGE_BLOCKED_LOCATIONS"]
        )
    if "API_ALLOWED_PREFIXES" in lists:
        alter.allowed_prefixes = _check_prefixes("API_ALLOWED_PREFIXES", lists["API_ALLOWED_PREFIXES"])
    if "API_BLOCKED_PREFIXES" in lists:
        alter.blocked_prefixes = _check_prefixes("API_BLOCKED_PREFIXES", lists["API_BLOCKED_PREFIXES"])
    alter.api_key = values.get("API_KEY")
    alter.comment = values.get("COMMENT")
    if "AWS_SNS_TOPIC_ARN" in values:
        alter.topic_arn = check_topic_arn(values["AWS_SNS_TOPIC_ARN"])
    alter.role_arn = values.get("AWS_SNS_ROLE_ARN")
    return alter


# The remote-service protocol's own headers (Floe sets them on every request; floe/external), and
# the hop-by-hop ones an HTTP client manages: a function may not set or override any of them.
_RESERVED_HEADERS = frozenset(
    {
        "content-type",
        "content-encoding",
        "content-length",
        "accept-encoding",
        "transfer-encoding",
        "connection",
        "host",
        "x-api-key",
    }
)
_RESERVED_HEADER_PREFIXES = ("sf-external-function-", "sf-context-")
# RFC 9110's token characters: a header name with anything else is not a header name.
_HEADER_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9a-z]+")
_MAX_BATCH_ROWS = 2**31 - 1
_FUNCTION_CLAUSE = (
    r"(?P<null>CALLED\s+ON\s+NULL\s+INPUT|RETURNS\s+NULL\s+ON\s+NULL\s+INPUT|STRICT)\b"
    r"|(?P<volatility>VOLATILE|IMMUTABLE)\b"
    r"|(?P<key>COMMENT|API_INTEGRATION|HEADERS|CONTEXT_HEADERS|MAX_BATCH_ROWS|COMPRESSION"
    r"|REQUEST_TRANSLATOR|RESPONSE_TRANSLATOR)\s*="
    r"|(?P<as>AS)\b"
)
_FUNCTION_CLAUSES = (
    "CALLED ON NULL INPUT, RETURNS NULL ON NULL INPUT, STRICT, VOLATILE, IMMUTABLE, COMMENT = '<text>', "
    "API_INTEGRATION = <integration>, HEADERS = (...), CONTEXT_HEADERS = (...), MAX_BATCH_ROWS = <n>, "
    "COMPRESSION = <type> or AS '<url>'"
)


def _arguments(sc: Scanner) -> list[Column]:
    """CREATE EXTERNAL FUNCTION's ``(name type, ...)``."""
    sc.expect(r"\(", "the arguments in parentheses, such as f(a NUMBER, b VARCHAR), or f() for none")
    args: list[Column] = []
    names: set[str] = set()  # a set, not a scan of ``args``: thousands of arguments stay linear
    if sc.take(r"\)") is not None:
        return args
    while True:
        name = sc.ident("argument")
        kind, precision, scale = sc.data_type("the argument's type, such as NUMBER or VARCHAR")
        if name in names:
            raise CompilationError(f"duplicate argument name '{name}' in {sc.what}")
        names.add(name)
        args.append(Column(name=name, type=kind, precision=precision, scale=scale))
        if sc.take(r"\)") is not None:
            return args
        sc.expect(",", "',' or ')' in the argument list")


def _header(name: str, value: str) -> tuple[str, str]:
    """One HEADERS pair, its name lower-cased: a valid name the protocol does not use itself, and a
    value without line breaks or other control characters (which would forge more headers)."""
    low = name.lower()
    if not _HEADER_NAME.fullmatch(low):
        raise CompilationError(
            f"invalid header name '{shortened(name)}' in HEADERS: use letters, digits and dashes, "
            "such as 'x-team'"
        )
    if low in _RESERVED_HEADERS or low.startswith(_RESERVED_HEADER_PREFIXES):
        raise CompilationError(
            f"header '{low}' is the remote-service protocol's own (Floe sets sf-external-function-*, "
            "sf-context-*, content-type, content-encoding, x-api-key and the connection's headers); "
            "choose another name"
        )
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value):
        raise CompilationError(f"the value of header '{low}' has a line break or control character")
    return low, value


def _headers(sc: Scanner) -> list[tuple[str, str]]:
    """HEADERS' ``('name' = 'value', ...)``, after HEADERS =."""
    sc.expect(r"\(", "a list of 'name' = 'value' pairs in parentheses after HEADERS =")
    out: list[tuple[str, str]] = []
    names: set[str] = set()
    if sc.take(r"\)") is not None:
        return out
    while True:
        name = sc.string("a quoted header name, such as 'x-team'")
        sc.expect("=", "'=' after the header name")
        pair = _header(name, sc.string("the header's value in quotes"))
        if pair[0] in names:
            raise CompilationError(f"duplicate header '{pair[0]}' in HEADERS")
        names.add(pair[0])
        out.append(pair)
        if sc.take(r"\)") is not None:
            return out
        sc.expect(",", "',' or ')' in the list of headers")


def _context_headers(sc: Scanner) -> list[str]:
    """CONTEXT_HEADERS' ``(CURRENT_USER, ...)``, after CONTEXT_HEADERS =."""
    sc.expect(r"\(", "a list of context functions in parentheses, such as (CURRENT_USER)")
    out: list[str] = []
    if sc.take(r"\)") is not None:
        return out
    while True:
        name = sc.word(r"[A-Za-z_]\w*", "a context function, such as CURRENT_TIMESTAMP")
        if name not in CONTEXT_FUNCTIONS:
            raise CompilationError(
                f"'{shortened(name)}' cannot be a context header; CONTEXT_HEADERS takes "
                f"{', '.join(CONTEXT_FUNCTIONS)}"
            )
        if name in out:
            raise CompilationError(f"duplicate context header '{name}' in CONTEXT_HEADERS")
        out.append(name)
        if sc.take(r"\)") is not None:
            return out
        sc.expect(",", "',' or ')' in the list of context functions")


def _max_batch_rows(sc: Scanner) -> int:
    """MAX_BATCH_ROWS' positive integer, after MAX_BATCH_ROWS =."""
    digits = sc.expect(r"-?\d+", "a positive integer after MAX_BATCH_ROWS =").group(0).strip()
    # Compared as text first: int() of a 100,000-digit number is refused by Python, and slow.
    if digits.startswith("-") or len(digits) > 10 or not 0 < int(digits) <= _MAX_BATCH_ROWS:
        raise CompilationError(
            f"invalid value '{shortened(digits)}' for MAX_BATCH_ROWS; it takes a positive integer, "
            f"at most {_MAX_BATCH_ROWS}"
        )
    return int(digits)


def _create_function(sc: Scanner, defaults: Defaults, replace: bool, secure: bool) -> CreateExternalFunction:
    """CREATE [OR REPLACE] [SECURE] EXTERNAL FUNCTION ..., after EXTERNAL FUNCTION."""
    sc.what = "CREATE EXTERNAL FUNCTION"
    ine = sc.take(r"IF\s+NOT\s+EXISTS\b") is not None
    name = sc.qualified("function", defaults)
    args = _arguments(sc)
    sc.expect(r"RETURNS\b", "RETURNS <type>")
    if sc.take(r"TABLE\b"):
        raise CompilationError("an external function is scalar: RETURNS TABLE is not supported")
    kind, precision, scale = sc.data_type("the type the function returns, such as VARIANT")
    nullable = sc.take(r"NOT\s+NULL\b") is None
    if nullable:
        sc.take(r"NULL\b")
    returns = Column(name=name.name, type=kind, precision=precision, scale=scale, nullable=nullable)
    fn = CreateExternalFunction(
        name, args, returns, integration="", url="", secure=secure, replace=replace, if_not_exists=ine
    )
    seen: set[str] = set()
    while not (m := sc.expect(_FUNCTION_CLAUSE, _FUNCTION_CLAUSES)).group("as"):
        _function_clause(sc, m, fn, seen)
    fn.url = sc.string("the remote service's URL in quotes after AS, such as AS 'https://host/path'")
    sc.end()
    if not fn.integration:
        raise CompilationError(
            "CREATE EXTERNAL FUNCTION needs API_INTEGRATION = <api integration>, the integration whose "
            "API_ALLOWED_PREFIXES admit its URL"
        )
    try:
        check_function_url(fn.url)
    except ValueError as exc:
        raise CompilationError(f"invalid URL '{shortened(fn.url, 60)}' after AS: {exc}") from None
    return fn


def _function_clause(sc: Scanner, m: re.Match[str], fn: CreateExternalFunction, seen: set[str]) -> None:
    """One clause of CREATE EXTERNAL FUNCTION before AS (``m`` matched its head), into ``fn``;
    ``seen`` holds the clauses read so far, as each may come once."""
    key = (m.group("key") or "").upper()
    if key in ("REQUEST_TRANSLATOR", "RESPONSE_TRANSLATOR"):
        raise CompilationError(
            f"{key} is not supported: Floe sends Snowflake's own request body "
            '({"data": [[row, args...]]}) and reads its answer; translate in the remote service'
        )
    slot = "NULL HANDLING" if m.group("null") else "VOLATILITY" if m.group("volatility") else key
    if slot in seen:
        raise CompilationError(f"duplicate clause {slot} in {sc.what}")
    seen.add(slot)
    if m.group("null"):
        fn.strict = not m.group("null").upper().startswith("CALLED")
    elif m.group("volatility"):
        fn.volatility = "IMMUTABLE" if m.group("volatility").upper() == "IMMUTABLE" else "VOLATILE"
    elif key == "COMMENT":
        fn.comment = sc.string("a quoted comment")
    elif key == "API_INTEGRATION":
        fn.integration = sc.ident("integration")
    elif key == "HEADERS":
        fn.headers = _headers(sc)
    elif key == "CONTEXT_HEADERS":
        fn.context_headers = _context_headers(sc)
    elif key == "MAX_BATCH_ROWS":
        fn.max_batch_rows = _max_batch_rows(sc)
    else:
        fn.compression = _compression(
            sc.word(r"AUTO\b|NONE\b|GZIP\b|DEFLATE\b", "AUTO, NONE, GZIP or DEFLATE")
        )


def _compression(word: str) -> FunctionCompression:
    """COMPRESSION's word (the scanner admitted only these) as the model's literal."""
    if word == "NONE":
        return "NONE"
    if word == "GZIP":
        return "GZIP"
    return "DEFLATE" if word == "DEFLATE" else "AUTO"


_TIMESTAMP_MAX = 40
"""The longest MODIFIED_AFTER: '2026-11-20T13:56:46.123456+05:30' is 32 characters."""
_REFRESH_OPTIONS = "PREFIX = '<path>' or MODIFIED_AFTER = '<timestamp>'"


ALTER_PIPE_PROPERTIES = ("PIPE_EXECUTION_PAUSED", "COMMENT")
"""What ALTER PIPE ... SET and UNSET change (Snowflake's COPY statement, AUTO_INGEST, AWS_SNS_TOPIC
and INTEGRATION are fixed at CREATE: a pipe is recreated to change them)."""
_FIXED_PIPE_PROPERTIES = ("AUTO_INGEST", "AWS_SNS_TOPIC", "INTEGRATION")


def _alter_pipe(text: str, head: re.Match[str], defaults: Defaults) -> AlterPipe:
    """ALTER PIPE ... SET | UNSET: the head ``_ALTER_PIPE`` matched, then the properties, separated
    by blanks or commas (SET) or commas (UNSET), as Snowflake's ALTER PIPE takes them."""
    alter = AlterPipe(qualify(head.group("name"), defaults), if_exists=bool(head.group("ine")))
    sc = Scanner(text)
    sc.pos = head.end()
    verb = head.group("verb").upper()
    sc.what = f"ALTER PIPE ... {verb}"
    names = " or ".join(ALTER_PIPE_PROPERTIES)
    seen: list[str] = []
    while True:
        key = _alter_pipe_property(sc, names)
        if key in seen:
            raise CompilationError(f"duplicate property {key} in ALTER PIPE ... {verb}")
        seen.append(key)
        if verb == "SET":
            sc.expect("=", f"'=' after {key}")
            _set_pipe_property(alter, key, sc)
        if sc.at_end():
            break
        if verb == "UNSET":
            sc.expect(",", "',' between the properties to unset")
        else:
            sc.take(",")
    if verb == "UNSET":
        alter.unset = tuple(seen)
    return alter


def _alter_pipe_property(sc: Scanner, names: str) -> str:
    """One property name of ALTER PIPE ... SET | UNSET, refused unless ALTER PIPE changes it."""
    key = sc.word(r"[A-Za-z_]\w*", f"a property: {names}")
    if key in ALTER_PIPE_PROPERTIES:
        return key
    if key == "TAG":
        raise CompilationError("ALTER PIPE ... SET TAG / UNSET TAG is not supported: Floe has no tags")
    if key in _FIXED_PIPE_PROPERTIES:
        raise CompilationError(
            f"{key} of a pipe cannot be changed by ALTER PIPE; recreate the pipe with CREATE OR REPLACE "
            "PIPE (which starts its load history afresh)"
        )
    raise CompilationError(f"invalid property '{shortened(key)}' for ALTER PIPE; it changes {names}")


def _set_pipe_property(alter: AlterPipe, key: str, sc: Scanner) -> None:
    """The value of one property after SET key =."""
    if key == "PIPE_EXECUTION_PAUSED":
        value = sc.word(r"TRUE\b|FALSE\b", "TRUE or FALSE after PIPE_EXECUTION_PAUSED =")
        alter.paused = value == "TRUE"
    elif key == "COMMENT":
        alter.comment = sc.string("a quoted comment after COMMENT =, such as COMMENT = 'sales data'")
    else:
        alter.properties[key] = sc.value(f"a value after {key} =")


def _alter_pipe_refresh(text: str, head: re.Match[str], defaults: Defaults) -> AlterPipeRefresh:
    """ALTER PIPE ... REFRESH: the head ``_ALTER_PIPE_REFRESH`` matched, then its options."""
    refresh = AlterPipeRefresh(qualify(head.group("name"), defaults), if_exists=bool(head.group("ine")))
    sc = Scanner(text)
    sc.pos = head.end()
    sc.what = "ALTER PIPE ... REFRESH"
    seen: set[str] = set()
    while not sc.at_end():
        key = sc.word(r"PREFIX\b|MODIFIED_AFTER\b", _REFRESH_OPTIONS)
        if key in seen:
            raise CompilationError(f"duplicate option {key} in ALTER PIPE ... REFRESH")
        seen.add(key)
        sc.expect("=", f"'=' after {key}")
        if key == "PREFIX":
            refresh.prefix = sc.string("a quoted path after PREFIX =, such as PREFIX = 'd1/'")
        else:
            refresh.modified_after = _timestamp(
                sc.string("a quoted timestamp after MODIFIED_AFTER =, such as '2026-11-20T13:56:46-07:00'")
            )
    return refresh


def _timestamp(text: str) -> dt.datetime:
    """MODIFIED_AFTER's ISO-8601 timestamp, timezone-aware; one without an offset is UTC (Floe has
    no session time zone)."""
    when: dt.datetime | None = None
    # fromisoformat also reads ISO's basic form and any run of fraction digits: the length bound
    # keeps a long string of digits from passing as a time.
    if len(text.strip()) <= _TIMESTAMP_MAX:
        with contextlib.suppress(ValueError):
            when = dt.datetime.fromisoformat(text.strip())
    if when is None:
        raise CompilationError(
            f"invalid MODIFIED_AFTER '{shortened(text)}': expected an ISO-8601 timestamp, such as "
            "'2026-11-20T13:56:46-07:00' or '2026-11-20 20:56:46' (UTC)"
        )
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def _parse_scanned(text: str, defaults: Defaults) -> Statement:
    """A statement ``_SCANNED`` recognised, read by the scanner."""
    sc = Scanner(text)
    verb = sc.word(r"SHOW\b|DESC(?:RIBE)?\b|DROP\b|CREATE\b|ALTER\b", "SHOW, DESC, DROP, CREATE or ALTER")
    if verb == "ALTER":
        if _ALTER_STAGE.match(text):
            return parse_alter_stage(text, defaults, lambda value: _stage_format(value, defaults))
        return _alter_integration(sc)
    if verb == "SHOW":
        return _show(sc, defaults)
    if verb.startswith("DESC"):
        return _describe(sc, defaults)
    if verb == "DROP":
        return _drop(sc, defaults)
    sc.what = "CREATE"
    replace = sc.take(r"OR\s+REPLACE\b") is not None
    if sc.take(r"STORAGE\s+INTEGRATION\b"):
        return _create_integration(sc, replace)
    if sc.take(r"API\s+INTEGRATION\b"):
        return _create_api_integration(sc, replace)
    if sc.take(r"NOTIFICATION\s+INTEGRATION\b"):
        return _create_notification_integration(sc, replace)
    if m := sc.take(r"(?P<secure>SECURE\s+)?EXTERNAL\s+FUNCTION\b"):
        return _create_function(sc, defaults, replace, m.group("secure") is not None)
    return _create_namespace(sc, defaults, replace)


def parse(sql: str, defaults: Defaults | None = None) -> Statement:
    """Parse one statement."""
    defaults = defaults or Defaults()
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise CompilationError("empty SQL statement")
    if m := _PIPE_HEAD.match(text):
        return _parse_pipe(text, m, defaults)
    if (stmt := access.parse(text, defaults)) is not None:
        return stmt
    if is_file_command(text):
        command = parse_file_command(text, defaults)
        if isinstance(command, PutFiles | GetFiles):
            raise transfer_refusal(command)  # the client runs them: they never reach a handler
        return command
    if _SCANNED.match(text):
        return _parse_scanned(text, defaults)
    if m := _ALTER_PIPE.match(text):
        return _alter_pipe(text, m, defaults)
    if m := _ALTER_PIPE_REFRESH.match(text):
        return _alter_pipe_refresh(text, m, defaults)
    if m := _ALTER_FILE_FORMAT.match(text):
        return _alter_file_format(text, m, defaults)
    if _ALTER_TABLE.match(text):
        return parse_alter_table(text, defaults)
    try:
        node = sqlglot.parse_one(text, read="snowflake")
    except ParseError as exc:
        raise CompilationError(
            f"syntax error: {exc.errors[0]['description'] if exc.errors else exc}"
        ) from exc
    except TokenError as exc:  # an unterminated string or quoted name
        raise CompilationError(f"syntax error: {exc}") from exc
    if isinstance(node, exp.Create):
        return _parse_create(node, defaults, text)
    if isinstance(node, exp.Query):
        return Query(node, text)
    raise CompilationError(f"unsupported statement: {text.split()[0].upper()} (see `floe sql --help`)")


# ---------------------------------------------------------------------------------------------
# CSV delimiters, quote, escapes and ENCODING: read as Snowflake spells them, checked at CREATE

CSV_ENCODINGS: dict[str, str] = {
    "UTF8": "utf-8",
    "UTF16": "utf-16",
    "UTF16BE": "utf-16-be",
    "UTF16LE": "utf-16-le",
    "UTF32": "utf-32",
    "UTF32BE": "utf-32-be",
    "UTF32LE": "utf-32-le",
    "BIG5": "big5",
    "EUCJP": "euc_jp",
    "EUCKR": "euc_kr",
    "GB18030": "gb18030",
    "IBM424": "cp424",
    "IBM949": "cp949",
    "ISO2022JP": "iso2022_jp",
    "ISO2022KR": "iso2022_kr",
    "ISO88591": "latin-1",
    "LATIN1": "latin-1",
    "ISO88592": "iso8859_2",
    "ISO88595": "iso8859_5",
    "ISO88596": "iso8859_6",
    "ISO88597": "iso8859_7",
    "ISO88598": "iso8859_8",
    "ISO88599": "iso8859_9",
    "ISO885915": "iso8859_15",
    "KOI8R": "koi8_r",
    "SHIFTJIS": "shift_jis",
    "WINDOWS874": "cp874",
    "WINDOWS949": "cp949",
    "WINDOWS1250": "cp1250",
    "WINDOWS1251": "cp1251",
    "WINDOWS1252": "cp1252",
    "WINDOWS1253": "cp1253",
    "WINDOWS1254": "cp1254",
    "WINDOWS1255": "cp1255",
    "WINDOWS1256": "cp1256",
}
"""CSV ENCODING values Floe reads, each with the Python codec that converts it to UTF-8. UTF16 and
UTF32 take their byte order from a byte-order mark, big-endian without one. Snowflake also lists
IBM420 and ISO2022CN, for which Python has no codec: Floe refuses them."""

_CSV_CHARACTER_OPTIONS = {
    "field_delimiter": "FIELD_DELIMITER",
    "record_delimiter": "RECORD_DELIMITER",
    "field_optionally_enclosed_by": "FIELD_OPTIONALLY_ENCLOSED_BY",
    "escape": "ESCAPE",
    "escape_unenclosed_field": "ESCAPE_UNENCLOSED_FIELD",
}
_DELIMITER_MAX_CHARS = 20
_COMMON_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "b": "\b", "f": "\f", "\\": "\\", "'": "'", '"': '"'}
# What is left of a sequence once the SQL string literal was read ('\\136' is \136): octal, \xNN or
# a common escape. Bounded repeats only, so the scan is linear in the value.
_CHARACTER_SEQUENCE = re.compile(r"\\(?:([0-7]{1,3})|[xX]([0-9A-Fa-f]{2})|(.))", re.S)
_HEX_VALUE = re.compile(r"0[xX]((?:[0-9A-Fa-f]{2}){1,80})")
_SQL_HEX = re.compile(r"[xX]'((?:[0-9A-Fa-f]{2}){1,80})'")  # an unquoted 0x5e, as sqlglot writes it


def csv_option_value(fieldname: str, value: object) -> object:
    """A CSV option's value as Floe stores it: the characters a delimiter, quote or escape stands for
    (NONE is "" for a delimiter, None for the others; octal ``\\\\136``, hex ``0x5e`` / ``\\x5e``,
    multibyte hex ``\\xC2\\xA2`` and common escape sequences are decoded), ENCODING's canonical name
    (``'utf-16'`` is UTF16); other options unchanged."""
    if fieldname == "encoding" and isinstance(value, str):
        return _encoding_name(value)
    key = _CSV_CHARACTER_OPTIONS.get(fieldname)
    if key is None or not isinstance(value, str):
        return value
    if value.upper() == "NONE":
        return "" if fieldname in ("field_delimiter", "record_delimiter") else None
    return _characters(key, value)


def _characters(key: str, value: str) -> str:
    """The characters ``value`` spells. Bytes written as octal or hex must form UTF-8; a string the
    SQL literal already decoded to Latin-1 code points (sqlglot reads ``'\\xC2\\xA2'`` as two of
    them) is read as those bytes when they form UTF-8 (so it is the cent sign)."""
    hexed = _SQL_HEX.fullmatch(value) or _HEX_VALUE.fullmatch(value)
    if hexed is not None:
        raw = bytes.fromhex(hexed.group(1))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CompilationError(f"{key} = {value} is not a valid UTF-8 character") from None
    pieces: list[str | bytes] = []
    pos = 0
    for m in _CHARACTER_SEQUENCE.finditer(value):
        pieces.append(value[pos : m.start()])
        octal, hexa, other = m.groups()
        if octal is not None:
            if int(octal, 8) > 0xFF:
                raise CompilationError(f"{key}: octal value \\{octal} is more than one byte")
            pieces.append(bytes([int(octal, 8)]))
        elif hexa is not None:
            pieces.append(bytes([int(hexa, 16)]))
        else:
            pieces.append(_COMMON_ESCAPES.get(other, "\\" + other))
        pos = m.end()
    pieces.append(value[pos:])
    raw = b"".join(p if isinstance(p, bytes) else _as_bytes(p) for p in pieces)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        if any(isinstance(p, bytes) for p in pieces):
            raise CompilationError(f"{key} = '{value}' is not a valid UTF-8 character sequence") from None
        return "".join(p for p in pieces if isinstance(p, str))  # typed as such: 'é' is é


def _as_bytes(text: str) -> bytes:
    """Code points below 256 as the byte they may stand for, others as UTF-8."""
    return b"".join(bytes([ord(c)]) if ord(c) < 0x100 else c.encode("utf-8") for c in text)


def _encoding_name(value: str) -> str:
    name = re.sub(r"[-_ ]", "", value.upper())
    if name in CSV_ENCODINGS:
        return name
    hint = " (Python has no codec for it)" if name in ("IBM420", "ISO2022CN") else ""
    raise CompilationError(
        f"ENCODING = '{value}' is not supported{hint}. Supported: {', '.join(CSV_ENCODINGS)}"
    )


PARSE_HEADER_ONLY = (
    'Invalid file format "PARSE_HEADER" is only allowed for CSV INFER_SCHEMA and MATCH_BY_COLUMN_NAME'
)
"""Snowflake's refusal of PARSE_HEADER = TRUE where the header would not name the columns (a COPY
without MATCH_BY_COLUMN_NAME); text as reported in dbt-labs/dbt-external-tables#254 (decision 82)."""
SKIP_HEADER_WITH_PARSE_HEADER = (
    "The SKIP_HEADER option is not supported with PARSE_HEADER = TRUE: the first line is the header "
    "that names the columns; set SKIP_HEADER = 0"
)
"""Snowflake's documented rule (copy-into-table, PARSE_HEADER), refused wherever both are in force."""


def check_csv_format(fmt: FileFormat) -> None:
    """Refuse CSV options that cannot work together, as Snowflake does at CREATE: delimiters longer
    than 20 characters or one inside the other, a quote or escape of more than one character, a
    quote or escape that is a delimiter, an unknown ENCODING, an ENCODING for another TYPE,
    SKIP_HEADER with PARSE_HEADER = TRUE."""
    fields, records = fmt.field_delimiter, fmt.record_delimiter
    for key, delimiter in (("FIELD_DELIMITER", fields), ("RECORD_DELIMITER", records)):
        if len(delimiter) > _DELIMITER_MAX_CHARS:
            raise CompilationError(f"{key} is limited to {_DELIMITER_MAX_CHARS} characters")
    if fields and records and (fields in records or records in fields):
        raise CompilationError(
            "The delimiter for RECORD_DELIMITER or FIELD_DELIMITER cannot be a substring of the "
            f"delimiter for the other file format option (FIELD_DELIMITER = '{_shown(fields)}', "
            f"RECORD_DELIMITER = '{_shown(records)}')"
        )
    for fieldname in ("field_optionally_enclosed_by", "escape", "escape_unenclosed_field"):
        char = getattr(fmt, fieldname)
        key = _CSV_CHARACTER_OPTIONS[fieldname]
        if char is None:
            continue
        if len(char) != 1:
            raise CompilationError(f"{key} '{_shown(char)}' must be one character (or NONE)")
        if char in (fields, records) or (fieldname != "escape" and (char in fields or char in records)):
            raise CompilationError(f"{key} cannot be the field or record delimiter, or part of one")
    if fmt.encoding not in CSV_ENCODINGS:
        _encoding_name(fmt.encoding)
    if fmt.parse_header and fmt.skip_header:
        raise CompilationError(SKIP_HEADER_WITH_PARSE_HEADER)
    if fmt.type != "CSV" and fmt.encoding != "UTF8":
        raise CompilationError(f"ENCODING applies to TYPE = CSV only; TYPE = {fmt.type} is read as UTF-8")


def _shown(text: str) -> str:
    """Control characters as the escape sequences people write them with."""
    return text.encode("unicode_escape").decode("ascii")
