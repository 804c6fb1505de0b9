"""Issue 16's types as DDL parses them: BINARY, TIME and TIMESTAMP_LTZ columns, BINARY_FORMAT and
TIME_FORMAT, and the COPY options TRUNCATECOLUMNS / ENFORCE_LENGTH (their loading:
tests/pipeline/transform/test_column_types.py)."""

from __future__ import annotations

import pytest

from floe.catalog.ddl import CreatePipe, CreateStage, CreateTable, parse
from floe.catalog.models import Column, FileFormat
from floe.errors import CompilationError

pytestmark = pytest.mark.unit

HEAD = "CREATE PIPE p AS COPY INTO t FROM @s "


def test_create_table_takes_binary_time_and_both_zoned_timestamps() -> None:
    stmt = parse(
        "CREATE TABLE t (b BINARY(16), vb VARBINARY, tm TIME(3), l TIMESTAMP_LTZ, z TIMESTAMP_TZ(0), "
        "n TIMESTAMP WITH LOCAL TIME ZONE)"
    )
    assert isinstance(stmt, CreateTable)
    assert stmt.columns == [
        Column(name="B", type="BINARY", precision=16),
        Column(name="VB", type="BINARY"),
        Column(name="TM", type="TIME", precision=3),
        Column(name="L", type="TIMESTAMP_LTZ"),
        Column(name="Z", type="TIMESTAMP_TZ", precision=0),
        Column(name="N", type="TIMESTAMP_LTZ"),
    ]


@pytest.mark.parametrize(
    ("options", "truncate"),
    [
        ("", False),
        ("TRUNCATECOLUMNS = TRUE", True),
        ("TRUNCATECOLUMNS = FALSE", False),
        ("ENFORCE_LENGTH = FALSE", True),
        ("ENFORCE_LENGTH = TRUE", False),
        ("truncatecolumns = 'true'", True),
        ("TRUNCATECOLUMNS = TRUE ENFORCE_LENGTH = TRUE", False),  # the last one written wins
    ],
)
def test_truncatecolumns_and_enforce_length_are_inverse_synonyms(options: str, truncate: bool) -> None:
    stmt = parse(HEAD + options)
    assert isinstance(stmt, CreatePipe)
    assert stmt.truncate_columns is truncate


def test_truncatecolumns_takes_a_boolean() -> None:
    with pytest.raises(CompilationError, match="invalid value 'SOMETIMES' for TRUNCATECOLUMNS"):
        parse(HEAD + "TRUNCATECOLUMNS = SOMETIMES")


@pytest.mark.parametrize(
    ("options", "binary_format", "time_format"),
    [
        ("BINARY_FORMAT = BASE64", "BASE64", "AUTO"),
        ("BINARY_FORMAT = 'utf-8'", "UTF8", "AUTO"),
        ("BINARY_FORMAT = hex TIME_FORMAT = 'HH24:MI:SS.FF3'", "HEX", "HH24:MI:SS.FF3"),
    ],
)
def test_binary_format_and_time_format_are_taken(options: str, binary_format: str, time_format: str) -> None:
    stmt = parse(
        f"CREATE STAGE s URL = 's3://b/p/' STORAGE_INTEGRATION = i FILE_FORMAT = (TYPE = CSV {options})"
    )
    assert isinstance(stmt, CreateStage)
    fmt = FileFormat.model_validate(stmt.file_format)
    assert (fmt.binary_format, fmt.time_format) == (binary_format, time_format)


def test_an_unknown_binary_format_is_refused() -> None:
    with pytest.raises(CompilationError, match="invalid value 'OCTAL' for BINARY_FORMAT"):
        parse(HEAD + "FILE_FORMAT = (TYPE = CSV BINARY_FORMAT = OCTAL)")
