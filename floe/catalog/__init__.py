"""The catalog: stages, tables, pipes, users and roles, their Snowflake DDL, and their store in Redis."""

from floe.catalog.models import (
    ADMIN_ROLE,
    BUILTIN_ROLES,
    PIPE_PRIVILEGES,
    CatalogObject,
    Column,
    CopySpec,
    FileFormat,
    Pipe,
    Role,
    Stage,
    Table,
    User,
    split_s3_url,
)
from floe.catalog.store import Catalog, now_ms

__all__ = [
    "ADMIN_ROLE",
    "BUILTIN_ROLES",
    "PIPE_PRIVILEGES",
    "Catalog",
    "CatalogObject",
    "Column",
    "CopySpec",
    "FileFormat",
    "Pipe",
    "Role",
    "Stage",
    "Table",
    "User",
    "now_ms",
    "split_s3_url",
]
