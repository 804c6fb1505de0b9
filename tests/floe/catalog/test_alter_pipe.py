"""Parsing ALTER PIPE ... SET | UNSET and CREATE OR ALTER PIPE (floe/catalog/ddl.py). What they do:
tests/services/test_pipe_lifecycle.py; ALTER PIPE ... REFRESH: test_alter_pipe_refresh.py."""

from __future__ import annotations

import pytest

from floe.catalog.ddl import AlterPipe, CreatePipe, Name, parse
from floe.errors import CompilationError

pytestmark = pytest.mark.unit

P = Name("FLOE", "PUBLIC", "P")


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE", AlterPipe(P, True)),
        ("alter pipe p set pipe_execution_paused=false;", AlterPipe(P, False)),
        # Snowflake's documented example, with the string quoted as SQL quotes strings.
        (
            "alter pipe mypipe SET COMMENT = 'Pipe for North American sales data'",
            AlterPipe(Name("FLOE", "PUBLIC", "MYPIPE"), comment="Pipe for North American sales data"),
        ),
        # Several properties, separated by blanks, commas or new lines.
        (
            "ALTER PIPE IF EXISTS d.s.p SET COMMENT = 'it''s' PIPE_EXECUTION_PAUSED = TRUE",
            AlterPipe(Name("D", "S", "P"), True, comment="it's", if_exists=True),
        ),
        (
            "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE,\n COMMENT = 'x'",
            AlterPipe(P, True, comment="x"),
        ),
        ("ALTER PIPE p UNSET COMMENT", AlterPipe(P, unset=("COMMENT",))),
        (
            "ALTER PIPE p UNSET PIPE_EXECUTION_PAUSED , COMMENT",
            AlterPipe(P, unset=("PIPE_EXECUTION_PAUSED", "COMMENT")),
        ),
    ],
)
def test_alter_pipe_set_and_unset(sql: str, expected: AlterPipe) -> None:
    assert parse(sql) == expected


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("ALTER PIPE p SET", "ALTER PIPE ... SET expects a property: PIPE_EXECUTION_PAUSED or COMMENT"),
        ("ALTER PIPE p SET COMMENT 'x'", "expects '=' after COMMENT"),
        ("ALTER PIPE p SET COMMENT = x", "expects a quoted comment after COMMENT ="),
        (
            "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = yes",
            "expects TRUE or FALSE after PIPE_EXECUTION_PAUSED =",
        ),
        ("ALTER PIPE p SET COMMENT = 'a' COMMENT = 'b'", "duplicate property COMMENT"),
        ("ALTER PIPE p UNSET COMMENT PIPE_EXECUTION_PAUSED", "expects ',' between the properties to unset"),
        ("ALTER PIPE p UNSET COMMENT = 'x'", "expects ',' between the properties to unset"),
        ("ALTER PIPE p SET AUTO_INGEST = FALSE", "recreate the pipe with CREATE OR REPLACE PIPE"),
        ("ALTER PIPE p SET TAG t = 'v'", "Floe has no tags"),
        ("ALTER PIPE p SET SIZE = 1", "invalid property 'SIZE' for ALTER PIPE"),
    ],
)
def test_alter_pipe_errors_say_what_is_expected(sql: str, message: str) -> None:
    with pytest.raises(CompilationError, match="SQL compilation error") as info:
        parse(sql)
    assert message in str(info.value)


def test_create_or_alter_pipe_reads_pipe_execution_paused() -> None:
    stmt = parse("CREATE OR ALTER PIPE p PIPE_EXECUTION_PAUSED = TRUE COMMENT = 'c' AS COPY INTO t FROM @s")
    assert isinstance(stmt, CreatePipe)
    assert (stmt.alter, stmt.replace, stmt.paused, stmt.comment) == (True, False, True, "c")
    plain = parse("create or alter pipe p as copy into t from @s")
    assert isinstance(plain, CreatePipe) and plain.alter and plain.paused is None
    assert not parse_pipe("CREATE OR REPLACE PIPE p AS COPY INTO t FROM @s").alter


def parse_pipe(sql: str) -> CreatePipe:
    stmt = parse(sql)
    assert isinstance(stmt, CreatePipe)
    return stmt


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "CREATE PIPE p PIPE_EXECUTION_PAUSED = TRUE AS COPY INTO t FROM @s",
            "PIPE_EXECUTION_PAUSED is a property of CREATE OR ALTER PIPE",
        ),
        (
            "CREATE OR ALTER PIPE p PIPE_EXECUTION_PAUSED = maybe AS COPY INTO t FROM @s",
            "invalid value 'maybe' for PIPE_EXECUTION_PAUSED",
        ),
        ("CREATE OR ALTER PIPE IF NOT EXISTS p AS COPY INTO t FROM @s", "takes no IF NOT EXISTS"),
    ],
)
def test_create_or_alter_pipe_errors(sql: str, message: str) -> None:
    with pytest.raises(CompilationError) as info:
        parse(sql)
    assert message in str(info.value)
