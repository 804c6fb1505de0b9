"""Where internal stages keep their files: one prefix per stage incarnation in Floe's stages bucket.

A named internal stage (``CREATE STAGE s`` without a URL) lives under ``stages/<stage id>/``, the
stage of table ``t`` (``@%t``) under ``tables/<table id>/``. Both ids are incarnation ids, so a
stage or table that is replaced starts empty, as in Snowflake, and its old files are unreachable
by name even before they are deleted. The catalog records the location as an ``s3://`` URL, as
for an external stage, so a pipe on an internal stage is routed, listed (ALTER PIPE ... REFRESH)
and read like any other; what tells the two apart is the bucket (``is_internal``).
"""

from __future__ import annotations

from floe.catalog.models import Stage, Table, new_id, split_s3_url
from floe.catalog.names import join_parts, split_parts
from floe.settings import Settings

NAMED_PREFIX = "stages/"
"""Key prefix of named internal stages in the stages bucket."""
TABLE_PREFIX = "tables/"
"""Key prefix of table stages in the stages bucket."""
TABLE_STAGE_MARK = "%"
"""A table stage is named ``@%t``: the table's name after this mark."""


def new_stage_url(settings: Settings) -> str:
    """The location of a new named internal stage."""
    return f"s3://{settings.stages.bucket}/{NAMED_PREFIX}{new_id()}/"


def table_stage_url(settings: Settings, table: Table) -> str:
    """The location of a table's stage (``@%t``), for this incarnation of the table."""
    return f"s3://{settings.stages.bucket}/{TABLE_PREFIX}{table.id}/"


def is_internal(url: str, settings: Settings) -> bool:
    """Whether a stage location is an internal stage's (in Floe's stages bucket)."""
    return bool(url) and split_s3_url(url)[0] == settings.stages.bucket


def table_stage_name(table: str) -> str:
    """How a pipe records a table stage as its COPY's stage: ``DB.S.%T`` for table ``DB.S.T``."""
    db, schema, name = split_parts(table)
    return join_parts(db, schema, f"{TABLE_STAGE_MARK}{name}")


def stage_kind(stage: Stage) -> str:
    """SHOW STAGES' type: INTERNAL or EXTERNAL."""
    return "INTERNAL" if stage.internal else "EXTERNAL"
