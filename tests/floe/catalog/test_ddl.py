"""Parsing Snowflake DDL into statements."""

from __future__ import annotations

import pytest

from floe.catalog.ddl import (
    AlterPipe,
    CreatePipe,
    CreateStage,
    CreateTable,
    Describe,
    Drop,
    Query,
    Show,
    ShowChannels,
    parse,
)
from floe.errors import CompilationError

pytestmark = pytest.mark.unit


def test_create_stage_with_format() -> None:
    s = parse(
        "create or replace stage my_stage URL = 's3://b/p/x' FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
    )
    assert isinstance(s, CreateStage)
    assert str(s.name) == "FLOE.PUBLIC.MY_STAGE" and s.replace
    assert s.url == "s3://b/p/x" and s.file_format == {"type": "CSV", "skip_header": 1}


def test_create_table_types_and_not_null() -> None:
    s = parse(
        'CREATE TABLE db1.s1.t (a NUMBER(10,2) NOT NULL, "b" VARCHAR(5), c TIMESTAMP_NTZ, d VARIANT, e INT)'
    )
    assert isinstance(s, CreateTable)
    assert str(s.name) == "DB1.S1.T"
    cols = {c.name: c for c in s.columns}
    assert cols["A"].type == "NUMBER" and (cols["A"].precision, cols["A"].scale) == (10, 2)
    assert not cols["A"].nullable and cols["b"].type == "VARCHAR" and cols["b"].precision == 5
    assert cols["C"].type == "TIMESTAMP_NTZ" and cols["D"].type == "VARIANT"
    assert cols["E"].type == "NUMBER" and cols["E"].scale == 0


def test_create_pipe_with_transform_and_options() -> None:
    s = parse(
        "CREATE OR REPLACE PIPE p AUTO_INGEST = TRUE COMMENT = 'it''s' AS COPY INTO t (a, b) "
        "FROM (SELECT $1, $2:x::date FROM @s/sub) FILE_FORMAT = (TYPE = JSON STRIP_OUTER_ARRAY = TRUE) "
        "ON_ERROR = 'skip_file_10%' PATTERN = '.*[.]json'"
    )
    assert isinstance(s, CreatePipe)
    assert s.auto_ingest and s.replace and s.comment == "it's"
    assert str(s.table) == "FLOE.PUBLIC.T" and s.columns == ["A", "B"]
    assert s.select is not None and s.select[0] == "$1"
    assert str(s.stage) == "FLOE.PUBLIC.S" and s.path == "sub/"
    assert s.file_format == {"type": "JSON", "strip_outer_array": True}
    assert (s.on_error, s.on_error_limit) == ("SKIP_FILE_PCT", 10.0)
    assert s.pattern == ".*[.]json"


def test_plain_copy_pipe_defaults() -> None:
    s = parse("CREATE PIPE p AS COPY INTO t FROM @s")
    assert isinstance(s, CreatePipe)
    assert not s.auto_ingest and s.select is None and s.on_error == "SKIP_FILE" and s.path == ""


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("CREATE PIPE p AS COPY INTO t FROM @s ON_ERROR = ABORT_STATEMENT", "ABORT_STATEMENT"),
        ("CREATE PIPE p AS COPY INTO t FROM @s FILES = ('a')", "FILES"),
        ("CREATE PIPE p AS COPY INTO t FROM (SELECT $1 FROM @s WHERE $1 > 0)", "WHERE"),
        ("CREATE PIPE p AS COPY INTO t (a) FROM (SELECT $1, $2 FROM @s)", "does not match"),
        ("CREATE PIPE p AS COPY INTO t FROM @s FILE_FORMAT = (TYPE = XML)", "XML"),
        ("CREATE PIPE p AS COPY INTO t FROM @s FILE_FORMAT = (BOGUS = 1)", "BOGUS"),
        ("CREATE STAGE s URL = 'gcs://x'", "s3://"),
        ("CREATE TABLE t (a GEOGRAPHY)", "GEOGRAPHY"),
        ("FROB THE WIDGET", "syntax error"),
    ],
)
def test_bad_statements_raise_compilation_errors(sql: str, message: str) -> None:
    with pytest.raises(CompilationError, match=message):
        parse(sql)


def test_show_desc_drop_alter_query() -> None:
    assert parse("show pipes like 'P%'") == Show("PIPE", "P%")
    d = parse("DESC PIPE x.y.z")
    assert isinstance(d, Describe) and str(d.name) == "X.Y.Z"
    dr = parse("DROP TABLE IF EXISTS t")
    assert isinstance(dr, Drop) and dr.if_exists and dr.kind == "TABLE"
    a = parse("ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE")
    assert isinstance(a, AlterPipe) and a.paused
    assert isinstance(parse("SELECT COUNT(*) FROM t WHERE a > 1"), Query)


def test_a_streaming_pipe_reads_data_source_streaming() -> None:
    s = parse(
        "CREATE PIPE p AS COPY INTO t FROM (SELECT $1:id, $1:kind, $1:amount::NUMBER(10,2) "
        "FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
    )
    assert isinstance(s, CreatePipe)
    assert s.stage is None and s.path == "" and s.pattern is None
    assert s.select == [
        "GET_PATH($1, 'id')",
        "GET_PATH($1, 'kind')",
        "CAST(GET_PATH($1, 'amount') AS DECIMAL(10, 2))",
    ]
    assert s.file_format == {"type": "JSON"} and s.on_error == "CONTINUE"
    plain = parse("create pipe p as copy into t from table(data_source(type => 'streaming'))")
    assert isinstance(plain, CreatePipe) and plain.stage is None and plain.select is None


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "CREATE PIPE p AS COPY INTO t FROM (SELECT $1 FROM TABLE(DATA_SOURCE(TYPE => 'KAFKA')))",
            "TABLE(DATA_SOURCE(TYPE => 'STREAMING'))",
        ),
        ("CREATE PIPE p AS COPY INTO t FROM (SELECT $1 FROM TABLE(FLATTEN(x)))", "DATA_SOURCE"),
        (
            "CREATE PIPE p AS COPY INTO t FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')) "
            "FILE_FORMAT = (TYPE = CSV)",
            "FILE_FORMAT and PATTERN do not apply to a streaming pipe",
        ),
        (
            "CREATE PIPE p AS COPY INTO t FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')) "
            "ON_ERROR = SKIP_FILE_3",
            "ON_ERROR = CONTINUE",
        ),
    ],
)
def test_streaming_pipe_errors(sql: str, message: str) -> None:
    with pytest.raises(CompilationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(sql)


def test_show_channels() -> None:
    assert parse("SHOW CHANNELS") == ShowChannels()
    assert parse("show channels like 'p%' in table t") == ShowChannels("p%", "TABLE", "FLOE.PUBLIC.T")
    assert parse('SHOW CHANNELS IN PIPE "T-STREAMING"') == ShowChannels(
        None, "PIPE", "FLOE.PUBLIC.T-STREAMING"
    )
    assert parse("SHOW CHANNELS IN SCHEMA") == ShowChannels(None, "SCHEMA", "FLOE.PUBLIC")
    with pytest.raises(
        CompilationError, match="SHOW CHANNELS expects ACCOUNT, DATABASE, SCHEMA, TABLE or PIPE"
    ):
        parse("SHOW CHANNELS IN STAGE s")
