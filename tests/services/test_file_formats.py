"""Named file formats through the SQL executor, against the real Redis: what a stage and a pipe
take from one, and how ALTER, RENAME and DROP change that. Privileges: test_access_matrix.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from floe.catalog import ADMIN_ROLE, FileFormat, Pipe
from floe.errors import CompilationError, ObjectNotFound, SqlError
from services.auth import Principal
from services.sql import SqlExecutor

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
STAGE = "CREATE OR REPLACE STAGE st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests"


def run(ex: SqlExecutor, sql: str) -> list[dict[str, Any]]:
    return ex.execute(sql, ADMIN).records()


def pipe_format(ex: SqlExecutor, copy: str = "COPY INTO t FROM @st") -> FileFormat:
    run(ex, "CREATE TABLE IF NOT EXISTS t (a INT, b VARCHAR)")
    run(ex, f"CREATE OR REPLACE PIPE p AUTO_INGEST = FALSE AS {copy}")
    return ex.catalog.get(Pipe, "FLOE.PUBLIC.P").copy_spec.file_format


def test_a_pipe_takes_the_options_of_the_format_its_stage_names(ex: SqlExecutor) -> None:
    assert run(ex, "CREATE FILE FORMAT pipes TYPE = CSV FIELD_DELIMITER = '|' SKIP_HEADER = 1") == [
        {"STATUS": "File format PIPES successfully created."}
    ]
    run(ex, f"{STAGE} FILE_FORMAT = (FORMAT_NAME = 'pipes')")
    fmt = pipe_format(ex)
    assert (fmt.type, fmt.field_delimiter, fmt.skip_header) == ("CSV", "|", 1)
    # The pipe's own options win over the stage's format, one by one.
    fmt = pipe_format(ex, "COPY INTO t FROM @st FILE_FORMAT = (SKIP_HEADER = 2)")
    assert (fmt.field_delimiter, fmt.skip_header) == ("|", 2)


def test_a_format_named_by_the_pipe_itself(ex: SqlExecutor) -> None:
    run(ex, "CREATE FILE FORMAT floe.public.js TYPE = JSON STRIP_OUTER_ARRAY = TRUE")
    run(ex, f"{STAGE} FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 3)")
    fmt = pipe_format(ex, "COPY INTO t FROM @st FILE_FORMAT = (FORMAT_NAME = js)")
    assert (fmt.type, fmt.strip_outer_array) == ("JSON", True)
    with pytest.raises(ObjectNotFound, match=r"File format 'FLOE\.PUBLIC\.NOPE' does not exist"):
        pipe_format(ex, "COPY INTO t FROM @st FILE_FORMAT = (FORMAT_NAME = 'nope')")


def test_alter_changes_what_the_next_pipe_reads_not_the_pipes_made_before(ex: SqlExecutor) -> None:
    run(ex, "CREATE FILE FORMAT f TYPE = CSV FIELD_DELIMITER = ';' COMMENT = 'semicolons'")
    run(ex, f"{STAGE} FILE_FORMAT = (FORMAT_NAME = 'f')")
    assert pipe_format(ex).field_delimiter == ";"
    run(ex, "ALTER FILE FORMAT f SET FIELD_DELIMITER = '\\t' COMMENT = 'tabs'")
    assert ex.catalog.get(Pipe, "FLOE.PUBLIC.P").copy_spec.file_format.field_delimiter == ";"
    assert pipe_format(ex).field_delimiter == "\t"
    (shown,) = run(ex, "SHOW FILE FORMATS LIKE 'F'")
    assert (shown["name"], shown["type"], shown["comment"]) == ("F", "CSV", "tabs")
    assert json.loads(shown["format_options"])["FIELD_DELIMITER"] == "\t"
    run(ex, "ALTER FILE FORMAT f UNSET COMMENT")
    assert run(ex, "SHOW FILE FORMATS LIKE 'F'")[0]["comment"] == ""


def test_a_dropped_format_leaves_its_stage_with_the_defaults(ex: SqlExecutor) -> None:
    """Snowflake's DROP FILE FORMAT: 'the object uses the file format defaults in place of the
    dropped file format' (docs.snowflake.com/en/sql-reference/sql/drop-file-format)."""
    run(ex, "CREATE FILE FORMAT f TYPE = CSV FIELD_DELIMITER = '|'")
    run(ex, f"{STAGE} FILE_FORMAT = (FORMAT_NAME = 'f')")
    run(ex, "DROP FILE FORMAT f")
    assert pipe_format(ex).field_delimiter == ","
    assert {r["property"]: r["value"] for r in run(ex, "DESC STAGE st")}["FORMAT_NAME"] == "FLOE.PUBLIC.F"


def test_rename_moves_the_format_and_its_grants(ex: SqlExecutor) -> None:
    run(ex, "CREATE FILE FORMAT f TYPE = JSON")
    run(ex, "CREATE ROLE reader")
    run(ex, "GRANT USAGE ON FILE FORMAT f TO ROLE reader")
    run(ex, "ALTER FILE FORMAT f RENAME TO g")
    assert [r["name"] for r in run(ex, "SHOW FILE FORMATS")] == ["G"]
    granted = run(ex, "SHOW GRANTS TO ROLE reader")
    assert [(r["privilege"], r["granted_on"], r["name"]) for r in granted] == [
        ("USAGE", "FILE_FORMAT", "FLOE.PUBLIC.G")
    ]
    run(ex, "CREATE FILE FORMAT h")
    with pytest.raises(SqlError, match="already exists"):
        run(ex, "ALTER FILE FORMAT g RENAME TO h")
    assert run(ex, "ALTER FILE FORMAT IF EXISTS nope RENAME TO z") == [
        {"STATUS": "Statement executed successfully."}
    ]


def test_desc_lists_every_option_with_its_default(ex: SqlExecutor) -> None:
    run(ex, "CREATE FILE FORMAT f TYPE = CSV NULL_IF = ('NULL', '') FIELD_OPTIONALLY_ENCLOSED_BY = '\"'")
    rows = {r["property"]: r for r in run(ex, "DESC FILE FORMAT f")}
    assert rows["TYPE"]["property_value"] == "CSV"
    assert rows["NULL_IF"]["property_value"] == "[NULL, ]" and rows["NULL_IF"]["property_default"] == "[\\N]"
    assert rows["FIELD_OPTIONALLY_ENCLOSED_BY"]["property_value"] == '"'
    assert rows["FIELD_OPTIONALLY_ENCLOSED_BY"]["property_default"] == "NONE"
    assert rows["SKIP_HEADER"]["property_type"] == "Long"
    assert set(rows) == {k.upper() for k in FileFormat.model_fields}


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("CREATE FILE FORMAT f TYPE = XML", "TYPE = XML is not supported"),
        ("CREATE FILE FORMAT f BOGUS = 1", "invalid file format option 'BOGUS'"),
        ("CREATE FILE FORMAT f FORMAT_NAME = 'g'", "FORMAT_NAME"),
        ("CREATE FILE FORMAT f SKIP_HEADER = 'abc'", "invalid value 'abc' for file format option"),
        ("CREATE OR REPLACE FILE FORMAT IF NOT EXISTS f", "incompatible"),
        ("ALTER FILE FORMAT f SET", "needs at least one option"),
        ("ALTER FILE FORMAT f RESET", "expected SET <options>, UNSET COMMENT or RENAME TO"),
        (
            "CREATE STAGE s URL = 's3://b/' FILE_FORMAT = (FORMAT_NAME = 'f' TYPE = CSV)",
            "mutually exclusive",
        ),
    ],
)
def test_refusals_say_what_to_write(ex: SqlExecutor, sql: str, message: str) -> None:
    with pytest.raises(CompilationError, match=message):
        run(ex, sql)
