"""Catalog objects: databases, schemas, stages, tables, pipes (with their file-format and COPY
options), storage and API integrations, external functions, users and roles, and the privileges
each kind of object takes."""

from __future__ import annotations

import ipaddress
import string
import uuid
from functools import cached_property
from typing import Literal
from urllib.parse import SplitResult, unquote, urlsplit

from pydantic import BaseModel, Field, field_validator

from floe.errors import CompilationError
from floe.patterns import stored_pattern

OnError = Literal["SKIP_FILE", "CONTINUE", "SKIP_FILE_N", "SKIP_FILE_PCT"]
MatchBy = Literal["NONE", "CASE_SENSITIVE", "CASE_INSENSITIVE"]
METADATA_COLUMNS = (
    "METADATA$FILENAME",
    "METADATA$FILE_ROW_NUMBER",
    "METADATA$FILE_CONTENT_KEY",
    "METADATA$FILE_LAST_MODIFIED",
    "METADATA$START_SCAN_TIME",
)
"""The METADATA$ columns a COPY can load (a transform's SELECT list, or INCLUDE_METADATA)."""
FormatType = Literal["CSV", "JSON", "PARQUET", "AVRO", "ORC"]

# Snowflake column types Floe stores, by canonical name.
COLUMN_TYPES = (
    "NUMBER",
    "FLOAT",
    "VARCHAR",
    "BINARY",
    "BOOLEAN",
    "DATE",
    "TIME",
    "TIMESTAMP_NTZ",
    "TIMESTAMP_LTZ",
    "TIMESTAMP_TZ",
    "VARIANT",
)


def new_id() -> str:
    """A short random id that names one incarnation of a catalog object."""
    return uuid.uuid4().hex[:16]


class FileFormat(BaseModel):
    """FILE_FORMAT options, with Snowflake's defaults."""

    type: FormatType = "CSV"
    """TYPE."""
    compression: str = "AUTO"
    """COMPRESSION: AUTO, GZIP, BZ2, BROTLI, ZSTD, DEFLATE, RAW_DEFLATE, SNAPPY (Parquet) or NONE."""
    field_delimiter: str = ","
    """CSV FIELD_DELIMITER."""
    record_delimiter: str = "\n"
    """CSV RECORD_DELIMITER; newline is "logical" (``\\r\\n`` too)."""
    multi_line: bool = True
    """CSV and JSON MULTI_LINE: FALSE makes a record delimiter inside a value an error of its record."""
    parse_header: bool = False
    """CSV PARSE_HEADER: the first line names the columns (for MATCH_BY_COLUMN_NAME)."""
    escape: str | None = None
    """CSV ESCAPE: the escape character of enclosed fields, or None (NONE)."""
    escape_unenclosed_field: str | None = "\\"
    """CSV ESCAPE_UNENCLOSED_FIELD: the escape character of unenclosed fields, or None (NONE)."""
    encoding: str = "UTF8"
    """CSV ENCODING: the character set of the file, converted to UTF-8."""
    replace_invalid_characters: bool = False
    """REPLACE_INVALID_CHARACTERS: invalid UTF-8 becomes U+FFFD instead of an error of its row."""
    skip_byte_order_mark: bool = True
    """SKIP_BYTE_ORDER_MARK."""
    binary_format: str = "HEX"
    """BINARY_FORMAT: HEX, BASE64 or UTF8, how text loads into BINARY columns."""

    @field_validator("binary_format")
    @classmethod
    def _binary_format(cls, value: str) -> str:
        form = value.upper().replace("-", "")
        if form not in ("HEX", "BASE64", "UTF8"):
            # Not a ValueError: pydantic passes it through, so the statement fails with this text.
            raise CompilationError(f"invalid value '{value}' for BINARY_FORMAT; use HEX, BASE64 or UTF8")
        return form

    time_format: str = "AUTO"
    """TIME_FORMAT."""
    allow_duplicate: bool = False
    """JSON ALLOW_DUPLICATE: TRUE keeps the last of duplicate keys; FALSE makes them an error."""
    strip_null_values: bool = False
    """JSON STRIP_NULL_VALUES: drop object fields and array elements that are JSON null."""
    ignore_utf8_errors: bool = False
    """JSON IGNORE_UTF8_ERRORS: invalid UTF-8 becomes U+FFFD (REPLACE_INVALID_CHARACTERS's other name)."""
    enable_octal: bool = False
    """JSON ENABLE_OCTAL: numbers with a leading zero are octal."""
    binary_as_text: bool = True
    """Parquet BINARY_AS_TEXT: BINARY columns without a logical type read as UTF-8 text."""
    use_logical_type: bool = False
    """Parquet USE_LOGICAL_TYPE: Parquet logical types decide the types of the values."""
    use_vectorized_scanner: bool = False
    """Parquet USE_VECTORIZED_SCANNER: read as Snowflake's vectorized scanner does (BINARY_AS_TEXT
    taken as FALSE, USE_LOGICAL_TYPE as TRUE, INT96 timestamps as TIMESTAMP_LTZ)."""
    skip_header: int = 0
    """CSV SKIP_HEADER: physical lines skipped at the top."""
    field_optionally_enclosed_by: str | None = None
    """CSV quote character, or None."""
    null_if: list[str] = Field(default_factory=lambda: ["\\N"])
    """Strings read as SQL NULL."""
    empty_field_as_null: bool = True
    """CSV EMPTY_FIELD_AS_NULL."""
    trim_space: bool = False
    """CSV TRIM_SPACE."""
    error_on_column_count_mismatch: bool = True
    """CSV ERROR_ON_COLUMN_COUNT_MISMATCH."""
    skip_blank_lines: bool = False
    """CSV SKIP_BLANK_LINES."""
    strip_outer_array: bool = False
    """JSON STRIP_OUTER_ARRAY."""
    date_format: str = "AUTO"
    """DATE_FORMAT."""
    timestamp_format: str = "AUTO"
    """TIMESTAMP_FORMAT."""

    def merged(self, overrides: dict[str, object]) -> FileFormat:
        """This format with some options replaced (a pipe's FILE_FORMAT over its stage's)."""
        return self.model_copy(update=overrides)


class EvolutionRecord(BaseModel):
    """What last evolved a column by itself (Snowflake's SchemaEvolutionRecord): a file loaded
    through a pipe added it, or dropped its NOT NULL."""

    evolution_type: Literal["ADD_COLUMN", "DROP_NOT_NULL"]
    """EvolutionType."""
    evolution_mode: Literal["SNOWPIPE"] = "SNOWPIPE"
    """EvolutionMode: Floe evolves tables from pipes only."""
    file_name: str
    """FileName: the file whose load evolved the column."""
    triggering_time_ms: int
    """TriggeringTime, ms since the epoch."""
    pipe_id: str
    """PipeID: the pipe incarnation that loaded the file."""


class Column(BaseModel):
    """One table column."""

    name: str
    """Upper-case column name."""
    type: str
    """Canonical Snowflake type name, one of COLUMN_TYPES."""
    precision: int | None = None
    """NUMBER precision, VARCHAR length (characters), BINARY length (bytes), or the fractional-seconds
    digits of TIME and TIMESTAMP_* (None: the type's default)."""
    scale: int | None = None
    """NUMBER scale."""
    nullable: bool = True
    """False for NOT NULL."""
    stored: str | None = None
    """The column's name in blobs, when it is not ``name``: a column added after the table was
    created (ALTER TABLE ... ADD COLUMN, schema evolution) gets a name of its own, so blobs written
    before it, which may hold a dropped column of the same name, never show their values under it;
    a renamed column keeps the name it was stored under (``floe.blob_columns``, decision 81)."""
    evolution: EvolutionRecord | None = None
    """The last schema evolution of the column (DESC TABLE's SchemaEvolutionRecord); cleared when the
    column is altered by hand."""

    @property
    def sql_type(self) -> str:
        """The type as Snowflake spells it, e.g. NUMBER(10,2)."""
        if self.type == "NUMBER":
            return f"NUMBER({self.precision or 38},{self.scale or 0})"
        if self.type != "NUMBER" and self.precision is not None:
            # VARCHAR(n) / BINARY(n) lengths, TIME(p) / TIMESTAMP_*(p) fractional digits
            return f"{self.type}({self.precision})"
        return self.type


ObjectKind = Literal[
    "ACCOUNT",
    "DATABASE",
    "SCHEMA",
    "TABLE",
    "STAGE",
    "FILE_FORMAT",
    "PIPE",
    "INTEGRATION",
    "FUNCTION",
    "ROLE",
    "USER",
]
"""What a privilege can be granted on (Snowflake's securable objects that Floe has)."""

PRIVILEGES: dict[str, tuple[str, ...]] = {
    # MONITOR on the account reads every process's metrics page (their labels name every pipe).
    "ACCOUNT": (
        "CREATE DATABASE",
        "CREATE ROLE",
        "CREATE USER",
        "CREATE INTEGRATION",
        "MANAGE GRANTS",
        "MONITOR",
    ),
    "DATABASE": ("USAGE", "CREATE SCHEMA", "MONITOR"),
    "SCHEMA": (
        "USAGE",
        "CREATE TABLE",
        "CREATE STAGE",
        "CREATE PIPE",
        "CREATE FILE FORMAT",
        "CREATE FUNCTION",
        "MONITOR",
    ),
    "TABLE": ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "EVOLVE SCHEMA"),
    # USAGE for external stages, READ and WRITE for internal ones (as Snowflake).
    "STAGE": ("USAGE", "READ", "WRITE"),
    # SQL spells it FILE FORMAT; one word here, as SHOW GRANTS' granted_on and grant keys spell it.
    "FILE_FORMAT": ("USAGE",),
    "PIPE": ("OPERATE", "MONITOR"),
    "INTEGRATION": ("USAGE",),
    "FUNCTION": ("USAGE",),
    "ROLE": (),
    "USER": ("MONITOR",),
}
"""The privileges each kind of object takes besides OWNERSHIP, in the order SHOW GRANTS lists them.
``ALL [PRIVILEGES]`` on an object stands for all of its kind's; OWNERSHIP is transferred, not shared."""

ADMIN_ROLE = "ACCOUNTADMIN"
"""The top system role: it holds every privilege on every object (see docs/decisions.md)."""

SYSTEM_ROLES = ("ACCOUNTADMIN", "SECURITYADMIN", "USERADMIN", "SYSADMIN", "PUBLIC")
"""Roles that exist without CREATE ROLE and cannot be dropped, replaced or renamed."""

SYSTEM_HIERARCHY: dict[str, tuple[str, ...]] = {
    "ACCOUNTADMIN": ("SECURITYADMIN", "SYSADMIN"),
    "SECURITYADMIN": ("USERADMIN",),
}
"""Role -> the system roles granted to it, as in every Snowflake account."""

SYSTEM_PRIVILEGES: dict[str, tuple[str, ...]] = {
    "SYSADMIN": ("CREATE DATABASE",),
    "SECURITYADMIN": ("MANAGE GRANTS",),
    "USERADMIN": ("CREATE USER", "CREATE ROLE"),
}
"""Account privileges each system role holds by itself (and passes up the hierarchy)."""


class CatalogObject(BaseModel):
    """Anything the catalog stores under a name."""

    name: str
    """Fully qualified upper-case name, DB.SCHEMA.NAME (DB.SCHEMA for a schema; account-level
    objects, databases, users, roles and integrations, have a one-part name)."""
    owner: str = ADMIN_ROLE
    """The role that owns the object (objects stored before owners existed belong to ACCOUNTADMIN)."""
    created_ms: int = 0
    """Creation time, ms since the epoch."""
    comment: str | None = None
    """COMMENT."""


class Database(CatalogObject):
    """A database: a namespace of schemas."""


class Schema(CatalogObject):
    """A schema: a namespace of tables, stages and pipes; ``name`` is DB.SCHEMA."""


class StorageIntegration(CatalogObject):
    """A storage integration: the S3 locations stages that name it may read (the confused deputy's bound)."""

    enabled: bool = True
    """ENABLED; a disabled integration admits no stage and no load."""
    provider: str = "S3"
    """STORAGE_PROVIDER."""
    allowed_locations: list[str] = Field(default_factory=list)
    """STORAGE_ALLOWED_LOCATIONS: s3://bucket/prefix/ URLs, or '*' for any."""
    blocked_locations: list[str] = Field(default_factory=list)
    """STORAGE_BLOCKED_LOCATIONS: s3://bucket/prefix/ URLs no stage may lie under."""

    def admits(self, url: str) -> bool:
        """Whether a stage at ``url`` may read through this integration: inside an allowed
        location and outside every blocked one (ENABLED is the caller's to check)."""
        return any(within(url, loc) for loc in self.allowed_locations) and not any(
            within(url, loc) for loc in self.blocked_locations
        )


LOOPBACK_HOSTS = frozenset({"localhost"})
"""Host names that are loopback besides the 127.0.0.0/8 and ::1 addresses."""


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a URL's host, brackets removed) is this machine."""
    if host.lower() in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_function_url(url: str) -> str:
    """A remote service URL as Floe calls it, or ValueError saying what is wrong: https:// (plain
    http:// only to a loopback host), a host, no user name or password, no fragment."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(f"not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("the URL must be https://host/path")
    if scheme == "http" and not is_loopback_host(parts.hostname):
        raise ValueError("the URL must be https:// (plain http:// is only accepted for loopback hosts)")
    if parts.username is not None or parts.password is not None:
        raise ValueError("the URL must not carry a user name or password")
    if parts.fragment:
        raise ValueError("the URL must not have a #fragment")
    if (problem := _path_problem(parts.path)) is not None:
        raise ValueError(problem)
    del port
    return url


def has_dot_segment(path: str) -> bool:
    """Whether a path holds a ``.`` or ``..`` segment, as written or percent-encoded (``%2e``, also
    encoded again as ``%252e``), with ``/`` or a backslash between segments.

    S3 keys are plain strings, but an HTTP client or a store on the way resolves dot segments: a
    stage-relative ``../secret/x.csv`` was read from outside the stage and its integration's allowed
    locations (issue 31, item 2). Such a path names no file of a stage (decision 108).
    """
    seen = path
    for _ in range(4):  # each layer on the way may decode once; four rounds reach a fixed point
        decoded = unquote(seen)
        if decoded == seen:
            break
        seen = decoded
    return any(segment in (".", "..") for segment in seen.replace("\\", "/").split("/"))


_DEFAULT_PORTS = {"https": 443, "http": 80}

_DECODED_BY_SERVERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/\\")
"""Characters whose percent-encoding a server (or a client on the way) decodes before it routes:
RFC 3986's unreserved ones, which normalisation decodes (section 6.2.2.2), and the path separators."""


def _path_problem(path: str) -> str | None:
    """Why a URL's path is not in the one form Floe compares and sends, or None (linear in its length).

    A server, or the HTTP client on the way, reads ``a/x/../b`` as ``a/b``, ``%2e`` as ``.``, ``%61``
    as ``a``, and often ``a//b`` as ``a/b``. A URL written so would be compared with an integration's
    prefixes in one form and reach the service in another: ``https://gw/prod/x/../admin/f`` lies
    under an allowed ``https://gw/prod/`` and outside a blocked ``https://gw/prod/admin`` as written,
    and is called as ``/prod/admin/f``. Such a URL is refused, not rewritten, so that the URL SHOW
    shows is the one compared and the one sent (decision 105).
    """
    if "\\" in path:
        return "the URL's path must not hold a backslash"
    if "//" in path:
        return "the URL's path must not hold an empty segment (//)"
    if any(segment in (".", "..") for segment in path.split("/")):
        return "the URL's path must not hold a '.' or '..' segment"
    at = path.find("%")
    while at != -1:
        code = path[at + 1 : at + 3]
        if len(code) != 2 or any(c not in string.hexdigits for c in code):
            return "the URL's path holds a '%' that starts no percent-encoding"
        if (char := chr(int(code, 16))) in _DECODED_BY_SERVERS:
            return f"the URL's path must not percent-encode '{char}' (%{code}): write it as it is"
        at = path.find("%", at + 3)
    return None


def _origin(parts: SplitResult) -> tuple[str, str | None, int | None]:
    """(scheme, host, port) with the scheme's default port written out: ``https://h`` is ``https://h:443``."""
    scheme = parts.scheme.lower()
    return scheme, parts.hostname, parts.port or _DEFAULT_PORTS.get(scheme)


def url_within(url: str, prefix: str) -> bool:
    """Whether ``url`` lies under an API_ALLOWED_PREFIXES / API_BLOCKED_PREFIXES entry.

    Scheme, host and port must be equal (the host in any case), and the path must continue the
    prefix's path at a segment boundary: ``https://h/v1`` covers ``https://h/v1`` and
    ``https://h/v1/f`` but not ``https://h/v1evil`` nor ``https://h.evil.net/``, where Snowflake's
    plain string prefix would. A prefix's query string, if any, must match the URL's exactly.
    """
    try:
        u, p = urlsplit(url), urlsplit(prefix)
        same_origin = _origin(u) == _origin(p)
    except ValueError:
        return False
    if not same_origin or u.hostname is None:
        return False
    if p.query and u.query != p.query:
        return False
    base = p.path or "/"
    path = u.path or "/"
    return path == base or path.startswith(base if base.endswith("/") else base + "/")


class ApiIntegration(CatalogObject):
    """An API integration: the remote-service URLs external functions that name it may call."""

    enabled: bool = True
    """ENABLED; a disabled integration admits no function and no call."""
    provider: str
    """API_PROVIDER, upper-case (aws_api_gateway, azure_api_management, google_api_gateway, ...)."""
    allowed_prefixes: list[str] = Field(default_factory=list)
    """API_ALLOWED_PREFIXES: URL prefixes a function's URL must lie under (``url_within``)."""
    blocked_prefixes: list[str] = Field(default_factory=list)
    """API_BLOCKED_PREFIXES: URL prefixes no function's URL may lie under."""
    api_key: str | None = Field(default=None, repr=False)
    """API_KEY: a secret sent as the ``x-api-key`` header and keying the requests' HMAC signature;
    never shown by SHOW or DESC, nor logged."""

    def admits(self, url: str) -> bool:
        """Whether a function may call ``url`` through this integration: inside an allowed prefix
        and outside every blocked one (ENABLED is the caller's to check)."""
        return any(url_within(url, p) for p in self.allowed_prefixes) and not any(
            url_within(url, p) for p in self.blocked_prefixes
        )


class NotificationIntegration(CatalogObject):
    """A notification integration (TYPE = QUEUE, DIRECTION = OUTBOUND, NOTIFICATION_PROVIDER =
    AWS_SNS): the SNS topic a pipe's ERROR_INTEGRATION publishes its failed files to."""

    enabled: bool = True
    """ENABLED; a disabled integration sends nothing (failures meanwhile are not sent later)."""
    provider: str = "AWS_SNS"
    """NOTIFICATION_PROVIDER: Floe publishes to SNS only."""
    direction: str = "OUTBOUND"
    """DIRECTION: OUTBOUND, Floe sending (inbound integrations are for GCS and Azure auto-ingest)."""
    aws_sns_topic_arn: str
    """AWS_SNS_TOPIC_ARN: the standard SNS topic the messages go to."""
    aws_sns_role_arn: str = ""
    """AWS_SNS_ROLE_ARN: recorded and shown; Floe publishes with its own AWS credentials."""


Volatility = Literal["VOLATILE", "IMMUTABLE"]
FunctionCompression = Literal["AUTO", "NONE", "GZIP", "DEFLATE"]
CONTEXT_FUNCTIONS = (
    "CURRENT_ACCOUNT",
    "CURRENT_CLIENT",
    "CURRENT_DATABASE",
    "CURRENT_DATE",
    "CURRENT_IP_ADDRESS",
    "CURRENT_REGION",
    "CURRENT_ROLE",
    "CURRENT_SCHEMA",
    "CURRENT_SCHEMAS",
    "CURRENT_SESSION",
    "CURRENT_STATEMENT",
    "CURRENT_TIME",
    "CURRENT_TIMESTAMP",
    "CURRENT_TRANSACTION",
    "CURRENT_USER",
    "CURRENT_VERSION",
    "CURRENT_WAREHOUSE",
)
"""What CONTEXT_HEADERS may name (Snowflake's list); each is sent as ``sf-context-<name>``, with
dashes for underscores and in lower case."""


def function_signature(name: str, args: list[Column]) -> str:
    """How the catalog keys one overload: ``DB.S.F(NUMBER, VARCHAR)``, the argument types by
    canonical name (as Snowflake's SHOW FUNCTIONS writes them, without precision)."""
    return f"{name}({', '.join(a.type for a in args)})"


class ExternalFunction(CatalogObject):
    """An external function: a scalar function whose body is a remote HTTPS service.

    ``name`` is the overload's signature, ``DB.S.F(NUMBER, VARCHAR)`` (``function_signature``), so
    overloads of one name are distinct objects; ``function_name`` is the name alone."""

    function_name: str
    """DB.SCHEMA.F, upper-case unless quoted."""
    args: list[Column] = Field(default_factory=list)
    """The arguments in order: each one's name and type."""
    returns: Column
    """The return type (``name`` is the function's); ``nullable`` False for RETURNS ... NOT NULL."""
    secure: bool = False
    """SECURE: only the owner sees the URL (DESC FUNCTION's body) and the headers."""
    strict: bool = False
    """RETURNS NULL ON NULL INPUT (or STRICT): a row with a NULL argument is NULL without a call;
    False is CALLED ON NULL INPUT, the default, which sends such rows too."""
    volatility: Volatility = "VOLATILE"
    """VOLATILE (the default) or IMMUTABLE: only an IMMUTABLE function's results are cached."""
    integration: str
    """API_INTEGRATION: the ApiIntegration whose prefixes must admit ``url`` at creation and at
    every call."""
    headers: list[tuple[str, str]] = Field(default_factory=list)
    """HEADERS = ('name' = 'value', ...), in order, names lower-case."""
    context_headers: list[str] = Field(default_factory=list)
    """CONTEXT_HEADERS: names from CONTEXT_FUNCTIONS, in order."""
    max_batch_rows: int | None = None
    """MAX_BATCH_ROWS; None lets Floe choose (``external_functions.max_batch_rows``)."""
    compression: FunctionCompression = "AUTO"
    """COMPRESSION of requests (and accepted for responses); AUTO is GZIP."""
    url: str
    """The remote service (AS '<url>')."""

    @property
    def immutable(self) -> bool:
        """Whether results may be cached and identical arguments sent once."""
        return self.volatility == "IMMUTABLE"


class Stage(CatalogObject):
    """A stage: an external one (an S3 prefix the user owns), or an internal one (files PUT into
    Floe's stages bucket, encrypted; ``floe.catalog.internal``)."""

    url: str
    """s3://bucket/prefix/; for an internal stage, its own prefix in the stages bucket."""
    internal: bool = False
    """An internal stage (CREATE STAGE without URL): READ and WRITE, not USAGE, govern it."""
    file_format: dict[str, object] = Field(default_factory=dict)
    """FILE_FORMAT options given on the stage (pipes may override)."""
    storage_integration: str | None = None
    """STORAGE_INTEGRATION whose allowed locations hold ``url``; None only where settings allow."""
    id: str | None = None
    """Incarnation id, new at every CREATE [OR REPLACE] STAGE: a pipe records the one it was created
    on and stops (STOPPED_STAGE_DROPPED) when its stage's name leads to another (decision 84). None
    for a stage made before stages had ids (and for a table's stage, whose table's id serves)."""

    @property
    def bucket(self) -> str:
        """Bucket part of the URL."""
        return split_s3_url(self.url)[0]

    @property
    def prefix(self) -> str:
        """Key prefix part of the URL ('' or ending in '/')."""
        return split_s3_url(self.url)[1]


class NamedFileFormat(CatalogObject):
    """A named file format (CREATE FILE FORMAT): options that stages and pipes use by name."""

    options: dict[str, object] = Field(default_factory=dict)
    """The options it was given, as FileFormat field names; the others are Snowflake's defaults."""

    @property
    def file_format(self) -> FileFormat:
        """The options with the defaults filled in."""
        return FileFormat().merged(self.options)


class Table(CatalogObject):
    """A Floe table: its columns and the incarnation id its blobs live under."""

    id: str = Field(default_factory=new_id)
    """Incarnation id; CREATE OR REPLACE makes a new, empty table."""
    columns: list[Column]
    """Columns in order."""
    enable_schema_evolution: bool = False
    """ENABLE_SCHEMA_EVOLUTION: loads with MATCH_BY_COLUMN_NAME add the columns their files bring
    and drop NOT NULL where a file lacks a column (``pipeline.evolution``, decision 81)."""

    def column(self, name: str) -> Column:
        """The column with this (case-insensitive) name."""
        for col in self.columns:
            if col.name == name.upper():
                return col
        raise KeyError(name)


class User(CatalogObject):
    """A user that authenticates with an RSA key pair; ``name`` is upper-case and unqualified."""

    rsa_public_key: str | None = None
    """RSA_PUBLIC_KEY: base64 DER (SubjectPublicKeyInfo), without PEM armour."""
    rsa_public_key_2: str | None = None
    """RSA_PUBLIC_KEY_2, so a key can be rotated without downtime."""
    default_role: str | None = None
    """DEFAULT_ROLE."""
    roles: list[str] = Field(default_factory=list)
    """Roles granted to the user (GRANT ROLE r TO USER u); all of them are active."""


def grant_key(kind: str, name: str) -> str:
    """How a role's ``grants`` names an object: its kind, a space, its fully qualified name."""
    return f"{kind} {name}"


def future_key(kind: str, container_kind: str, container: str) -> str:
    """How a role's ``future`` names a future grant: 'TABLE IN SCHEMA DB.S'."""
    return f"{kind} IN {container_kind} {container}"


def granted_name(key: str) -> str:
    """The object's name in a ``grant_key``: everything after the kind, which holds no blank (a
    name may, quoted)."""
    return key.split(" ", 1)[1]


def future_container(key: str) -> str:
    """The container's name in a ``future_key``: after the kind, IN and the container's kind."""
    return key.split(" ", 3)[3]


class Role(CatalogObject):
    """A role; ``name`` is upper-case and unqualified."""

    grants: dict[str, list[str]] = Field(default_factory=dict)
    """``grant_key(kind, name)`` -> privileges granted on that object (never OWNERSHIP)."""
    future: dict[str, list[str]] = Field(default_factory=dict)
    """``future_key(...)`` -> privileges every new object of that kind in the container gets."""
    roles: list[str] = Field(default_factory=list)
    """Roles granted to this role (GRANT ROLE r TO ROLE this): their privileges are this role's too."""

    @field_validator("grants", mode="before")
    @classmethod
    def _kinded(cls, value: object) -> object:
        # Before other objects had privileges, only pipes did, and the key was the pipe's name.
        if isinstance(value, dict):
            return {
                k if k.split(" ", 1)[0] in PRIVILEGES else grant_key("PIPE", k): v for k, v in value.items()
            }
        return value


class CopySpec(BaseModel):
    """The COPY INTO statement a pipe runs."""

    table: str
    """Target table, fully qualified."""
    columns: list[str] | None = None
    """Target column list, or None for all columns in order."""
    select: list[str] | None = None
    """Transform SELECT list as Snowflake SQL expressions, or None for a plain COPY."""
    stage: str
    """Source stage, fully qualified."""
    path: str = ""
    """Path under the stage ('' or 'sub/dir/')."""
    file_format: FileFormat = Field(default_factory=FileFormat)
    """Effective file format (stage format merged with the pipe's)."""
    on_error: OnError = "SKIP_FILE"
    """ON_ERROR rule; Snowpipe's default is SKIP_FILE."""
    on_error_limit: float = 0
    """N for SKIP_FILE_<N>, or the percentage for 'SKIP_FILE_<N>%'."""
    pattern: str | None = None
    """PATTERN regex, matched against the path relative to the stage."""
    sql: str = ""
    """The COPY statement as written."""
    functions: dict[str, str] = Field(default_factory=dict)
    """External functions the SELECT items call: ``floe.catalog.calls.call_key`` of each call ->
    the overload's signature, resolved at CREATE PIPE with its creator's privileges."""
    match_by_column_name: MatchBy = "NONE"
    """MATCH_BY_COLUMN_NAME: load the file's columns (JSON keys) named like the table's."""
    include_metadata: dict[str, str] = Field(default_factory=dict)
    """INCLUDE_METADATA: target column -> METADATA$ column (with MATCH_BY_COLUMN_NAME only)."""
    truncate_columns: bool = False
    """TRUNCATECOLUMNS = TRUE (or ENFORCE_LENGTH = FALSE): a string longer than its VARCHAR(n)
    column is cut to n characters instead of being an error of its row."""

    @property
    def error_limit(self) -> int:
        """ERROR_LIMIT as reported in history: 1 for SKIP_FILE."""
        if self.on_error == "SKIP_FILE_N":
            return int(self.on_error_limit)
        return 1


class Pipe(CatalogObject):
    """A pipe: a COPY statement plus its trigger and runtime flags."""

    id: str = Field(default_factory=new_id)
    """Incarnation id; recreating a pipe resets its history and dedup memory."""
    auto_ingest: bool = False
    """AUTO_INGEST."""
    copy_spec: CopySpec
    """The COPY INTO it runs."""
    table_id: str
    """Incarnation id of the target table when the pipe was created."""
    stage_url: str
    """URL of the stage at creation time."""
    stage_id: str | None = None
    """The named stage's incarnation id at creation time (``Stage.id``; None for a table stage, a
    streaming pipe, or a stage made before stages had ids): ``floe.catalog.pipe_state``."""
    storage_integration: str | None = None
    """The stage's STORAGE_INTEGRATION at creation time: every load re-checks ``stage_url``
    against it, so narrowing or dropping the integration stops the pipe too."""
    source: Literal["stage", "streaming"] = "stage"
    """Where rows come from: files on a stage, or Snowpipe Streaming channels
    (``FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING'))``; no stage, ``stage_url`` is '')."""
    default_streaming: bool = False
    """The table's default pipe ``<TABLE>-STREAMING`` (made on first use; matches columns by name)."""
    paused: bool = False
    """PIPE_EXECUTION_PAUSED."""
    paused_ms: int | None = None
    """When the pipe was last paused (None while it runs): an auto-ingest pipe paused longer than
    the load history's retention (14 days) is stale, and resumes only through
    SYSTEM$PIPE_FORCE_RESUME with STALENESS_CHECK_OVERRIDE."""
    paused_owner: str | None = None
    """The pipe's owner when it was paused: if GRANT OWNERSHIP gave it to another role since, it
    resumes only through SYSTEM$PIPE_FORCE_RESUME (OWNERSHIP_TRANSFER_CHECK_OVERRIDE)."""
    error_integration: str | None = None
    """ERROR_INTEGRATION: the NotificationIntegration whose SNS topic hears of the files whose load
    failed (not with ON_ERROR = CONTINUE, as in Snowflake)."""
    backfill_interval_s: int | None = None
    """BACKFILL_INTERVAL (a Floe extension): every so many seconds a consumer lists the pipe's
    location and queues the files no notification announced; None for none."""

    # Cached: routing and insertFiles ask for these once per file. Pipes are replaced, never
    # changed in place (ALTER writes a new object), so the cache cannot go stale.
    @cached_property
    def bucket(self) -> str:
        """Bucket the pipe reads ('' for a streaming pipe)."""
        return split_s3_url(self.stage_url)[0] if self.stage_url else ""

    @cached_property
    def stage_prefix(self) -> str:
        """Key prefix of the stage definition ('' for a streaming pipe)."""
        return split_s3_url(self.stage_url)[1] if self.stage_url else ""

    @cached_property
    def prefix(self) -> str:
        """Key prefix the pipe reads (stage prefix plus the COPY path)."""
        return self.stage_prefix + self.copy_spec.path

    def relative_path(self, key: str) -> str | None:
        """Path of an object key relative to the stage, or None if outside the pipe's location.

        A key with a dot segment is outside whatever its prefix says (``has_dot_segment``): the
        notifications, REFRESH and insertFiles all map keys through here.
        """
        if not key.startswith(self.prefix) or has_dot_segment(key):
            return None
        return key[len(self.stage_prefix) :]

    def object_key(self, relative: str) -> str:
        """The object key of a stage-relative path."""
        return self.stage_prefix + relative.lstrip("/")

    def matches(self, relative: str) -> bool:
        """Whether a stage-relative path passes PATTERN."""
        if not relative or relative.endswith("/"):
            return False
        if self.copy_spec.pattern is None:
            return True
        # Snowflake applies PATTERN to the path after the stage-definition path, anchored. RE2 runs
        # it in linear time: every insertFiles path and S3 event goes through here.
        return stored_pattern(self.copy_spec.pattern)(relative)


def within(url: str, location: str) -> bool:
    """Whether an S3 URL lies under an integration location ('*' is everywhere), by bucket and
    whole path segments (split_s3_url ends every prefix with '/')."""
    if location == "*":
        return True
    bucket, prefix = split_s3_url(url)
    loc_bucket, loc_prefix = split_s3_url(location)
    return bucket == loc_bucket and prefix.startswith(loc_prefix)


def split_s3_url(url: str) -> tuple[str, str]:
    """Split s3://bucket/some/prefix into ('bucket', 'some/prefix/')."""
    if not url.lower().startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {url!r}")
    rest = url[5:]
    bucket, _, prefix = rest.partition("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix
