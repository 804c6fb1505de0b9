"""Catalog objects: stages, tables, pipes (with their file-format and COPY options), users and roles."""

from __future__ import annotations

import uuid
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, Field

from floe.patterns import stored_pattern

OnError = Literal["SKIP_FILE", "CONTINUE", "SKIP_FILE_N", "SKIP_FILE_PCT"]
FormatType = Literal["CSV", "JSON", "PARQUET"]

# Snowflake column types Floe stores, by canonical name.
COLUMN_TYPES = (
    "NUMBER",
    "FLOAT",
    "VARCHAR",
    "BOOLEAN",
    "DATE",
    "TIMESTAMP_NTZ",
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
    """AUTO, GZIP or NONE."""
    field_delimiter: str = ","
    """CSV FIELD_DELIMITER."""
    record_delimiter: str = "\n"
    """CSV RECORD_DELIMITER (only newline is supported)."""
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


class Column(BaseModel):
    """One table column."""

    name: str
    """Upper-case column name."""
    type: str
    """Canonical Snowflake type name, one of COLUMN_TYPES."""
    precision: int | None = None
    """NUMBER precision, or VARCHAR length."""
    scale: int | None = None
    """NUMBER scale."""
    nullable: bool = True
    """False for NOT NULL."""

    @property
    def sql_type(self) -> str:
        """The type as Snowflake spells it, e.g. NUMBER(10,2)."""
        if self.type == "NUMBER":
            return f"NUMBER({self.precision or 38},{self.scale or 0})"
        if self.type == "VARCHAR" and self.precision:
            return f"VARCHAR({self.precision})"
        return self.type


class CatalogObject(BaseModel):
    """Anything the catalog stores under a name."""

    name: str
    """Fully qualified upper-case name, DB.SCHEMA.NAME."""


class Stage(CatalogObject):
    """An external stage: an S3 prefix the user owns."""

    url: str
    """s3://bucket/prefix/"""
    file_format: dict[str, object] = Field(default_factory=dict)
    """FILE_FORMAT options given on the stage (pipes may override)."""
    created_ms: int = 0
    """Creation time, ms since the epoch."""

    @property
    def bucket(self) -> str:
        """Bucket part of the URL."""
        return split_s3_url(self.url)[0]

    @property
    def prefix(self) -> str:
        """Key prefix part of the URL ('' or ending in '/')."""
        return split_s3_url(self.url)[1]


class Table(CatalogObject):
    """A Floe table: its columns and the incarnation id its blobs live under."""

    id: str = Field(default_factory=new_id)
    """Incarnation id; CREATE OR REPLACE makes a new, empty table."""
    columns: list[Column]
    """Columns in order."""
    created_ms: int = 0
    """Creation time, ms since the epoch."""

    def column(self, name: str) -> Column:
        """The column with this (case-insensitive) name."""
        for col in self.columns:
            if col.name == name.upper():
                return col
        raise KeyError(name)


PIPE_PRIVILEGES = ("OWNERSHIP", "OPERATE", "MONITOR")
"""Privileges a role can hold on a pipe."""

ADMIN_ROLE = "ACCOUNTADMIN"
"""The built-in role that holds every privilege and alone may manage users, roles and grants."""

BUILTIN_ROLES = (ADMIN_ROLE, "PUBLIC")
"""Roles that exist without CREATE ROLE."""


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
    created_ms: int = 0
    """Creation time, ms since the epoch."""


class Role(CatalogObject):
    """A role; ``name`` is upper-case and unqualified."""

    grants: dict[str, list[str]] = Field(default_factory=dict)
    """Fully qualified pipe name -> privileges granted on it (OPERATE, MONITOR)."""
    created_ms: int = 0
    """Creation time, ms since the epoch."""


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
    paused: bool = False
    """PIPE_EXECUTION_PAUSED."""
    owner: str = ADMIN_ROLE
    """Role that owns the pipe."""
    created_ms: int = 0
    """Creation time, ms since the epoch."""
    comment: str | None = None
    """COMMENT."""

    # Cached: routing and insertFiles ask for these once per file. Pipes are replaced, never
    # changed in place (ALTER writes a new object), so the cache cannot go stale.
    @cached_property
    def bucket(self) -> str:
        """Bucket the pipe reads."""
        return split_s3_url(self.stage_url)[0]

    @cached_property
    def stage_prefix(self) -> str:
        """Key prefix of the stage definition."""
        return split_s3_url(self.stage_url)[1]

    @cached_property
    def prefix(self) -> str:
        """Key prefix the pipe reads (stage prefix plus the COPY path)."""
        return self.stage_prefix + self.copy_spec.path

    def relative_path(self, key: str) -> str | None:
        """Path of an object key relative to the stage, or None if outside the pipe's location."""
        if not key.startswith(self.prefix):
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


def split_s3_url(url: str) -> tuple[str, str]:
    """Split s3://bucket/some/prefix into ('bucket', 'some/prefix/')."""
    if not url.lower().startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {url!r}")
    rest = url[5:]
    bucket, _, prefix = rest.partition("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix
