"""COPY options CREATE PIPE checks against the table and the effective file format."""

from __future__ import annotations

import pytest

from floe.catalog import ADMIN_ROLE, Pipe
from floe.errors import CompilationError
from services.auth import Principal
from services.sql import SqlExecutor

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))


@pytest.fixture
def world(ex: SqlExecutor) -> SqlExecutor:
    ex.execute("CREATE STAGE st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests", ADMIN)
    ex.execute("CREATE TABLE t (a INT, file_name VARCHAR)", ADMIN)
    return ex


def test_match_by_name_is_kept_on_the_pipe(world: SqlExecutor) -> None:
    world.execute(
        "CREATE PIPE p AS COPY INTO t FROM @st FILE_FORMAT = (TYPE = JSON) "
        "MATCH_BY_COLUMN_NAME = CASE_SENSITIVE INCLUDE_METADATA = (file_name = METADATA$FILENAME)",
        ADMIN,
    )
    spec = world.catalog.get(Pipe, "FLOE.PUBLIC.P").copy_spec
    assert spec.match_by_column_name == "CASE_SENSITIVE"
    assert spec.include_metadata == {"FILE_NAME": "METADATA$FILENAME"}


def test_include_metadata_names_a_column_of_the_table(world: SqlExecutor) -> None:
    with pytest.raises(CompilationError, match="invalid identifier 'NOPE' in INCLUDE_METADATA"):
        world.execute(
            "CREATE PIPE p AS COPY INTO t FROM @st FILE_FORMAT = (TYPE = JSON) "
            "MATCH_BY_COLUMN_NAME = CASE_SENSITIVE INCLUDE_METADATA = (nope = METADATA$FILENAME)",
            ADMIN,
        )


def test_csv_needs_its_header_to_match_by_name(world: SqlExecutor) -> None:
    with pytest.raises(CompilationError, match="PARSE_HEADER = TRUE"):
        world.execute("CREATE PIPE p AS COPY INTO t FROM @st MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE", ADMIN)
