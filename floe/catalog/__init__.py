"""The catalog: stages, tables and pipes, their Snowflake DDL, and their store in Redis."""

from floe.catalog.models import CatalogObject, Column, CopySpec, FileFormat, Pipe, Stage, Table, split_s3_url
from floe.catalog.store import Catalog, now_ms

__all__ = [
    "Catalog",
    "CatalogObject",
    "Column",
    "CopySpec",
    "FileFormat",
    "Pipe",
    "Stage",
    "Table",
    "now_ms",
    "split_s3_url",
]
