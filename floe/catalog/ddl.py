"""Snowflake SQL statements Floe understands, parsed into plain statement objects.

sqlglot's Snowflake dialect parses stages, tables, COPY INTO and queries. It does not cover the
pipe header (``CREATE PIPE ... AS``) or ALTER PIPE, so those headers are matched by hand and
everything after ``AS`` goes back to sqlglot. SHOW, DESC, DROP, CREATE DATABASE | SCHEMA |
STORAGE INTEGRATION | API INTEGRATION | EXTERNAL FUNCTION, ALTER INTEGRATION and the options of
ALTER PIPE ... REFRESH are read by the scanner of ``floe.catalog.access``, which parses users, roles
and grants, so that their syntax errors say where and what was expected.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import TokenType, exp
from sqlglot.errors import ParseError, TokenError

from floe.catalog import access
from floe.catalog.access import AccessStatement, Scanner, shortened
from floe.catalog.models import (
    CONTEXT_FUNCTIONS,
    Column,
    FileFormat,
    FunctionCompression,
    OnError,
    Volatility,
    check_function_url,
    function_signature,
    split_s3_url,
)
from floe.catalog.names import QNAME, check_identifier

# Callers import these from here, as they did before the names had a module of their own.
from floe.catalog.names import Defaults as Defaults
from floe.catalog.names import Name as Name
from floe.catalog.names import qualify as qualify
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
}

# Options Floe parses but cannot honour yet: refused unless given their default value, so no
# statement is accepted that would load differently from what it says.
FORMAT_NOT_YET: frozenset[str] = frozenset(
    {
        "multi_line",
        "parse_header",
        "escape",
        "escape_unenclosed_field",
        "encoding",
        "replace_invalid_characters",
        "skip_byte_order_mark",
        "binary_format",
        "time_format",
        "allow_duplicate",
        "strip_null_values",
        "ignore_utf8_errors",
        "enable_octal",
        "binary_as_text",
        "use_logical_type",
    }
)


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


@dataclass
class CreateTable:
    """CREATE TABLE."""

    name: Name
    columns: list[Column]
    replace: bool = False
    if_not_exists: bool = False


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
    file_format: dict[str, object]
    on_error: OnError
    on_error_limit: float
    pattern: str | None
    copy_sql: str
    replace: bool = False
    if_not_exists: bool = False
    comment: str | None = None


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
    """ALTER PIPE name SET PIPE_EXECUTION_PAUSED = TRUE | FALSE."""

    name: Name
    paused: bool


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
    | AlterIntegration
    | CreateExternalFunction
    | CreateStage
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
    | Query
    | AccessStatement
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
    "TABLE": "TABLE",
    "TABLES": "TABLE",
    "PIPE": "PIPE",
    "PIPES": "PIPE",
    "FUNCTION": "FUNCTION",
    "FUNCTIONS": "FUNCTION",
}
_IN_SCHEMA = ("TABLE", "STAGE", "PIPE")
"""Kinds that live in a schema and are named DB.SCHEMA.NAME (the others have one or two parts)."""
_SHOW_SCOPES: dict[str, tuple[str, ...]] = {
    "DATABASE": (),
    "INTEGRATION": (),
    "SCHEMA": ("ACCOUNT", "DATABASE"),
    "TABLE": ("ACCOUNT", "DATABASE", "SCHEMA"),
    "STAGE": ("ACCOUNT", "DATABASE", "SCHEMA"),
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
_FAMILY_PROPERTIES = {"STORAGE": _INTEGRATION_PROPERTIES, "API": _API_PROPERTIES}
_FAMILY_IGNORED = {"STORAGE": _INTEGRATION_IGNORED, "API": _API_IGNORED}
_FAMILY_NOUN = {"STORAGE": "a storage integration", "API": "an API integration", None: "an integration"}

# Every regex below sees user SQL, so each must run in linear time under Python's backtracking
# engine (issue 9: `(?P<props>.*?)\s+AS\s+` took 9.8 s on 60,000 spaces). The rules that keep
# them linear: each is anchored (``match``/``fullmatch`` on text ``parse`` has stripped), no `.*`
# is followed by anything that could fail, and no two neighbouring quantified parts can match the
# same characters (no `\s*;?\s*`), so a failure gives back each character once, not once per
# start. tests/floe/catalog/test_parse_linear.py times every one on 100k-character inputs.
_PIPE_HEAD = re.compile(
    rf"CREATE\s+(?P<replace>OR\s+REPLACE\s+)?PIPE\s+(?P<ine>IF\s+NOT\s+EXISTS\s+)?(?P<name>{QNAME})",
    re.IGNORECASE,
)
_PIPE_PROP = re.compile(
    r"\s+(?P<key>AUTO_INGEST|COMMENT|INTEGRATION|AWS_SNS_TOPIC|ERROR_INTEGRATION)\s*=\s*"
    r"(?P<value>'[^']*(?:''[^']*)*'|\w+)",
    re.IGNORECASE,
)
_PIPE_AS = re.compile(r"\s+AS\s", re.IGNORECASE)
# The statements the scanner reads (floe.catalog.access.Scanner, linear in the same way); access.parse
# has already taken SHOW USERS | ROLES | GRANTS, DESC USER and DROP USER | ROLE.
_SCANNED = re.compile(
    r"(?:SHOW|DESC(?:RIBE)?|DROP)\b"
    r"|CREATE\s+(?:OR\s+REPLACE\s+)?(?:(?:TRANSIENT\s+)?(?:DATABASE|SCHEMA)|(?:STORAGE|API)\s+INTEGRATION"
    r"|(?:SECURE\s+)?EXTERNAL\s+FUNCTION)\b"
    r"|ALTER\s+(?:(?:STORAGE|API)\s+)?INTEGRATION\b",
    re.I,
)
_ALTER_PIPE = re.compile(
    rf"ALTER\s+PIPE\s+(?:IF\s+EXISTS\s+)?(?P<name>{QNAME})\s+SET\s+PIPE_EXECUTION_PAUSED\s*=\s*"
    r"(?P<value>TRUE|FALSE)",
    re.I,
)
# Only the head: the options after REFRESH are read by the scanner, so their errors say where.
_ALTER_PIPE_REFRESH = re.compile(
    rf"ALTER\s+PIPE\s+(?P<ine>IF\s+EXISTS\s+)?(?P<name>{QNAME})\s+REFRESH\b",
    re.I,
)
_STAGE_REF = re.compile(rf"@(?P<name>{QNAME})(?P<path>/.*)?", re.DOTALL)
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


def format_options(props: list[exp.Expr]) -> dict[str, object]:
    """FILE_FORMAT = (...) options as FileFormat field names and values."""
    out: dict[str, object] = {}
    for prop in props:
        if not isinstance(prop, exp.Property):
            continue
        key = prop.name.upper()
        if key == "FORMAT_NAME":
            raise CompilationError(
                "named file formats (FORMAT_NAME) are not supported; give the options inline"
            )
        if key not in FORMAT_OPTIONS:
            raise CompilationError(
                f"invalid file format option '{key}'. Supported: {', '.join(sorted(FORMAT_OPTIONS))}"
            )
        value = _value(prop.args.get("value"))
        fieldname = FORMAT_OPTIONS[key]
        if fieldname == "type" and isinstance(value, str):
            value = value.upper()
            if value not in ("CSV", "JSON", "PARQUET"):
                raise CompilationError(f"file format TYPE = {value} is not supported (CSV, JSON, PARQUET)")
        if fieldname == "compression" and isinstance(value, str):
            value = value.upper()
        if fieldname == "field_optionally_enclosed_by" and isinstance(value, str) and value.upper() == "NONE":
            value = None
        if fieldname == "null_if" and not isinstance(value, list):
            value = [value]
        if fieldname == "null_if" and isinstance(value, list):
            value = ["" if v is None else str(v) for v in value]
        if isinstance(value, str) and value.upper() in ("TRUE", "FALSE") and fieldname not in ("null_if",):
            value = value.upper() == "TRUE"
        out[fieldname] = value
    parsed = FileFormat.model_validate(out)  # reject bad values at DDL time, not at load time
    default = FileFormat()
    for key, fieldname in FORMAT_OPTIONS.items():
        if fieldname in FORMAT_NOT_YET and getattr(parsed, fieldname) != getattr(default, fieldname):
            raise CompilationError(f"file format option {key} is not supported by Floe yet")
    return out


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


def _parse_stage_ref(text: str, defaults: Defaults) -> tuple[Name, str]:
    m = _STAGE_REF.fullmatch(text.strip())
    if not m:
        raise CompilationError(f"invalid stage reference '{text}'; expected @stage[/path]")
    path = (m.group("path") or "").lstrip("/")
    if path and not path.endswith("/"):
        path += "/"
    return qualify(m.group("name"), defaults), path


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
    stage, path = _parse_stage_ref(source.this.name, defaults) if source is not None else (None, "")
    options = _copy_options(node)
    if source is None:
        _streaming_options(options)
    if select is not None and columns is not None and len(columns) != len(select):
        raise CompilationError(
            f"Insert value list does not match column list expecting {len(columns)} but got {len(select)}"
        )
    return {
        "table": table,
        "columns": columns,
        "select": select,
        "stage": stage,
        "path": path,
        "file_format": options.file_format,
        "on_error": options.on_error,
        "on_error_limit": options.on_error_limit,
        "pattern": options.pattern,
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


_NOT_IN_PIPES = ("FILES", "SIZE_LIMIT", "PURGE", "FORCE", "RETURN_FAILED_ONLY", "VALIDATION_MODE")
_NOT_YET = ("MATCH_BY_COLUMN_NAME", "TRUNCATECOLUMNS", "ENFORCE_LENGTH")


def _copy_options(node: exp.Copy) -> _CopyOptions:
    """FILE_FORMAT, ON_ERROR and PATTERN, in the order written (a repeated option: the last wins)."""
    options = _CopyOptions(file_format={})
    for param in node.args.get("params") or []:
        key = param.name.upper()
        if key == "FILE_FORMAT":
            options.file_format = format_options(param.expressions)
        elif key == "ON_ERROR":
            options.on_error, options.on_error_limit = parse_on_error(
                str(_value(param.args.get("expression")))
            )
        elif key == "PATTERN":
            options.pattern = str(_value(param.args.get("expression")))
            compile_pattern(options.pattern)  # refuses what RE2 cannot run, saying what to change
        else:
            raise _refused_copy_option(key)
    return options


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
    comment = props.get("COMMENT")
    copy = parse_copy(text[head.end() :], defaults)
    return CreatePipe(
        name=qualify(m.group("name"), defaults),
        auto_ingest=auto == "TRUE",
        replace=bool(m.group("replace")),
        if_not_exists=bool(m.group("ine")),
        comment=comment[1:-1].replace("''", "'") if comment else None,
        **copy,  # type: ignore[arg-type]
    )


def _parse_create(node: exp.Create, defaults: Defaults, text: str) -> Statement:
    kind = str(node.args.get("kind") or "").upper()
    replace = bool(node.args.get("replace"))
    ine = bool(node.args.get("exists"))
    if kind == "TABLE":
        return _parse_create_table(node, defaults, replace, ine)
    if kind == "STAGE":
        return _parse_create_stage(node, defaults, replace, ine, text)
    raise CompilationError(f"CREATE {kind} is not supported")


def _parse_create_table(node: exp.Create, defaults: Defaults, replace: bool, ine: bool) -> CreateTable:
    schema = node.this
    if not isinstance(schema, exp.Schema):
        raise CompilationError("CREATE TABLE needs a column list (CTAS and LIKE are not supported)")
    cols = [_column(cdef) for cdef in schema.expressions]
    if len({c.name for c in cols}) != len(cols):
        raise CompilationError("duplicate column name in CREATE TABLE")
    return CreateTable(qualify_table(schema.this, defaults), cols, replace, ine)


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
    url = ""
    fmt: dict[str, object] = {}
    integration: str | None = None
    for prop in node.args["properties"].expressions if node.args.get("properties") else []:
        if isinstance(prop, exp.FileFormatProperty):
            fmt = format_options(prop.expressions)
            continue
        if isinstance(prop, exp.SchemaCommentProperty):  # its ``name`` is the comment's text
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
        else:
            raise CompilationError(f"unsupported stage property: {prop.sql('snowflake')}")
    if not url.lower().startswith("s3://"):
        raise CompilationError(
            "only external stages are supported: CREATE STAGE s URL = 's3://bucket/prefix/'"
        )
    return CreateStage(qualify_table(node.this, defaults), url, fmt, replace, ine, integration)


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
    """STORAGE or API from 'STORAGE INTEGRATION', 'API INTEGRATIONS'; None for the bare noun."""
    first = word.split()[0]
    return first if first in ("STORAGE", "API") else None


def _show(sc: Scanner, defaults: Defaults) -> Show | ShowChannels:
    """SHOW <kind>S [LIKE '...'] [IN ...], after SHOW."""
    sc.what = "SHOW"
    plural = sc.word(
        r"DATABASES\b|SCHEMAS\b|(?:STORAGE\s+|API\s+)?INTEGRATIONS\b|STAGES\b|TABLES\b|PIPES\b"
        r"|CHANNELS\b|EXTERNAL\s+FUNCTIONS\b",
        "DATABASES, SCHEMAS, INTEGRATIONS, STAGES, TABLES, PIPES, CHANNELS, USERS, ROLES, GRANTS or "
        "EXTERNAL FUNCTIONS",
    )
    if plural == "CHANNELS":
        return _show_channels(sc, defaults)
    kind = _KINDS[plural.split()[-1]]
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


def _one_of(options: tuple[str, ...] | list[str]) -> str:
    """'A', 'A or B', 'A, B or C'."""
    return " or ".join([", ".join(options[:-1]), options[-1]]) if len(options) > 1 else options[0]


def _show_scope(sc: Scanner, in_kind: str, defaults: Defaults) -> str:
    """The name after IN ACCOUNT | DATABASE | SCHEMA; without one, Snowflake means the current one."""
    if in_kind == "ACCOUNT":
        return ""
    if sc.at_end():
        return defaults.database if in_kind == "DATABASE" else f"{defaults.database}.{defaults.schema}"
    return sc.object_name(in_kind, defaults)


def _object_kind(sc: Scanner, others: tuple[str, ...]) -> tuple[str, str | None]:
    """STAGE, TABLE, PIPE, DATABASE, SCHEMA, [STORAGE | API] INTEGRATION or [EXTERNAL] FUNCTION,
    after DESC or DROP (which ``access.parse`` has already read for the ``others``, USER and ROLE),
    with the integration's family when the statement names one."""
    word = sc.word(
        r"STAGE\b|TABLE\b|PIPE\b|DATABASE\b|SCHEMA\b|(?:STORAGE\s+|API\s+)?INTEGRATION\b"
        r"|(?:EXTERNAL\s+)?FUNCTION\b",
        _one_of(("STAGE", "TABLE", "PIPE", "DATABASE", "SCHEMA", "INTEGRATION", "FUNCTION", *others)),
    )
    kind = _KINDS[word.split()[-1]]
    return kind, _family(word) if kind == "INTEGRATION" else None


def _describe(sc: Scanner, defaults: Defaults) -> Describe | DescribeObject:
    """DESC[RIBE] <kind> name, after DESC."""
    sc.what = "DESC"
    kind, family = _object_kind(sc, ("USER",))
    sc.what = f"DESC {kind}"
    stmt: Describe | DescribeObject
    if kind in _IN_SCHEMA:
        stmt = Describe(kind, sc.qualified(kind.lower(), defaults))
    else:
        stmt = DescribeObject(kind, sc.object_name(kind, defaults), family)
    sc.end()
    return stmt


def _drop(sc: Scanner, defaults: Defaults) -> Drop | DropObject:
    """DROP <kind> [IF EXISTS] name, after DROP."""
    sc.what = "DROP"
    kind, family = _object_kind(sc, ("USER", "ROLE"))
    sc.what = f"DROP {kind}"
    ie = sc.take(r"IF\s+EXISTS\b") is not None
    if kind in _IN_SCHEMA:
        stmt: Drop | DropObject = Drop(kind, sc.qualified(kind.lower(), defaults), ie)
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
        elif key in ("TYPE", "STORAGE_PROVIDER", "API_PROVIDER"):
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


_ALTERABLE = {
    "STORAGE": ("ENABLED", "STORAGE_ALLOWED_LOCATIONS", "STORAGE_BLOCKED_LOCATIONS", "COMMENT"),
    "API": ("ENABLED", "API_ALLOWED_PREFIXES", "API_BLOCKED_PREFIXES", "API_KEY", "COMMENT"),
}
_UNSETTABLE = {
    "STORAGE": ("STORAGE_BLOCKED_LOCATIONS", "COMMENT"),
    "API": ("API_BLOCKED_PREFIXES", "API_KEY", "COMMENT"),
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
                if found is not None:
                    raise CompilationError(
                        f"'{key}' is a property of {_FAMILY_NOUN[kind]}, not of {_FAMILY_NOUN[found]}; "
                        "an integration is one kind or the other"
                    )
                found = kind
    return found


def _alter_integration(sc: Scanner) -> AlterIntegration:
    """ALTER [STORAGE | API] INTEGRATION ..., after ALTER."""
    word = sc.word(r"(?:STORAGE\s+|API\s+)?INTEGRATION\b", "INTEGRATION")
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
    if _SCANNED.match(text):
        return _parse_scanned(text, defaults)
    if m := _ALTER_PIPE.fullmatch(text):
        return AlterPipe(qualify(m.group("name"), defaults), m.group("value").upper() == "TRUE")
    if m := _ALTER_PIPE_REFRESH.match(text):
        return _alter_pipe_refresh(text, m, defaults)
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
