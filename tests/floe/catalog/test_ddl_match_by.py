"""CREATE PIPE's MATCH_BY_COLUMN_NAME and INCLUDE_METADATA, as parsed (their loading:
tests/pipeline/transform/test_match_by_name.py)."""

from __future__ import annotations

import pytest

from floe.catalog.ddl import CreatePipe, parse
from floe.errors import CompilationError

pytestmark = pytest.mark.unit

HEAD = "CREATE PIPE p AS COPY INTO t FROM @s FILE_FORMAT = (TYPE = PARQUET) "


def test_match_by_and_include_metadata() -> None:
    stmt = parse(
        HEAD + "MATCH_BY_COLUMN_NAME = case_insensitive "
        'INCLUDE_METADATA = (file_name = METADATA$FILENAME, "Seen" = METADATA$FILE_LAST_MODIFIED)'
    )
    assert isinstance(stmt, CreatePipe)
    assert stmt.match_by_column_name == "CASE_INSENSITIVE"
    assert stmt.include_metadata == {"FILE_NAME": "METADATA$FILENAME", "Seen": "METADATA$FILE_LAST_MODIFIED"}
    plain = parse(HEAD)
    assert (
        isinstance(plain, CreatePipe)
        and plain.match_by_column_name == "NONE"
        and plain.include_metadata == {}
    )


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        ("MATCH_BY_COLUMN_NAME = SOMETIMES", "invalid value 'SOMETIMES' for MATCH_BY_COLUMN_NAME"),
        ("INCLUDE_METADATA = (a = METADATA$FILENAME)", "INCLUDE_METADATA needs MATCH_BY_COLUMN_NAME"),
        (
            "MATCH_BY_COLUMN_NAME = CASE_SENSITIVE INCLUDE_METADATA = (a = METADATA$NOPE)",
            "invalid metadata column 'METADATA\\$NOPE'",
        ),
        (
            "MATCH_BY_COLUMN_NAME = CASE_SENSITIVE INCLUDE_METADATA = (a = METADATA$FILENAME, "
            "a = METADATA$FILE_ROW_NUMBER)",
            "appears twice",
        ),
        ("MATCH_BY_COLUMN_NAME = CASE_SENSITIVE INCLUDE_METADATA = (1)", "INCLUDE_METADATA takes"),
    ],
)
def test_refusals(tail: str, message: str) -> None:
    with pytest.raises(CompilationError, match=message):
        parse(HEAD + tail)


def test_a_transform_cannot_match_by_name() -> None:
    """Snowflake: 'SQL compilation error: match_by_column_name is not supported with copy transform.'"""
    with pytest.raises(CompilationError, match="match_by_column_name is not supported with copy transform"):
        parse(
            "CREATE PIPE p AS COPY INTO t FROM (SELECT $1:a FROM @s) FILE_FORMAT = (TYPE = JSON) "
            "MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE"
        )
