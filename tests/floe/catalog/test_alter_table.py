"""ALTER TABLE as floe.catalog.ddl.parse reads it: each form Snowflake documents that Floe runs, and
a clear refusal for the rest (decision 81)."""

from __future__ import annotations

import logging

import pytest

from floe.catalog.alter_table import (
    AddColumns,
    AlterTable,
    DropColumns,
    DropNotNull,
    RenameColumn,
    SetTable,
    UnsetTable,
)
from floe.catalog.ddl import CreateTable, Name, parse
from floe.catalog.models import Column
from floe.errors import CompilationError
from tests.floe.catalog.test_parse_linear import N, _grows_linearly

pytestmark = pytest.mark.unit

T = Name("FLOE", "PUBLIC", "T")
INT = {"type": "NUMBER", "precision": 38, "scale": 0}


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        # [ALT] https://docs.snowflake.com/en/sql-reference/sql/alter-table (tableColumnAction)
        ("ALTER TABLE t ADD COLUMN c INT", AlterTable(T, AddColumns([Column(name="C", **INT)]))),
        (
            "alter table t add c1 number, c2 varchar(10) not null",
            AlterTable(
                T,
                AddColumns(
                    [
                        Column(name="C1", **INT),
                        Column(name="C2", type="VARCHAR", precision=10, nullable=False),
                    ]
                ),
            ),
        ),
        (
            'ALTER TABLE IF EXISTS db.s.t ADD COLUMN IF NOT EXISTS "Mixed" TIMESTAMP_TZ NULL',
            AlterTable(
                Name("DB", "S", "T"),
                AddColumns([Column(name="Mixed", type="TIMESTAMP_TZ")], if_not_exists=True),
                if_exists=True,
            ),
        ),
        ("ALTER TABLE t DROP COLUMN c", AlterTable(T, DropColumns(["C"]))),
        ('ALTER TABLE t DROP COLUMN IF EXISTS a, "b"', AlterTable(T, DropColumns(["A", "b"], True))),
        ('ALTER TABLE t DROP a, "b c"', AlterTable(T, DropColumns(["A", "b c"]))),
        ("ALTER TABLE t DROP IF EXISTS a", AlterTable(T, DropColumns(["A"], True))),
        ('ALTER TABLE t RENAME COLUMN a TO "b"', AlterTable(T, RenameColumn("A", "b"))),
        ("ALTER TABLE t ALTER COLUMN c DROP NOT NULL", AlterTable(T, DropNotNull(["C"]))),
        ("ALTER TABLE t MODIFY c DROP NOT NULL", AlterTable(T, DropNotNull(["C"]))),
        (
            'ALTER TABLE t ALTER c DROP NOT NULL, COLUMN "d" DROP NOT NULL, e DROP NOT NULL',
            AlterTable(T, DropNotNull(["C", "d", "E"])),
        ),
        # [EVO] https://docs.snowflake.com/en/user-guide/data-load-schema-evolution
        ("ALTER TABLE t SET ENABLE_SCHEMA_EVOLUTION = TRUE", AlterTable(T, SetTable(True))),
        (
            "ALTER TABLE t SET ENABLE_SCHEMA_EVOLUTION = FALSE COMMENT = 'raw events'",
            AlterTable(T, SetTable(False, "raw events")),
        ),
        (
            "ALTER TABLE t UNSET ENABLE_SCHEMA_EVOLUTION, COMMENT;",
            AlterTable(T, UnsetTable(["ENABLE_SCHEMA_EVOLUTION", "COMMENT"])),
        ),
    ],
)
def test_each_supported_form(sql: str, expected: AlterTable) -> None:
    assert parse(sql) == expected


def test_create_table_takes_enable_schema_evolution() -> None:
    """[EVO] 'set the ENABLE_SCHEMA_EVOLUTION parameter to TRUE when you use the CREATE TABLE command'."""
    stmt = parse("CREATE TABLE t (a INT) ENABLE_SCHEMA_EVOLUTION = TRUE")
    assert isinstance(stmt, CreateTable) and stmt.enable_schema_evolution
    stmt = parse("CREATE TABLE t (a INT)")
    assert isinstance(stmt, CreateTable) and not stmt.enable_schema_evolution
    with pytest.raises(CompilationError, match="TRUE or FALSE"):
        parse("CREATE TABLE t (a INT) ENABLE_SCHEMA_EVOLUTION = 'yes'")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("ALTER TABLE t ALTER COLUMN c SET DATA TYPE VARCHAR(20)", "changing the type of column C"),
        ("ALTER TABLE t MODIFY c TYPE NUMBER(10,2)", "changing the type of column C"),
        ("ALTER TABLE t ALTER c DROP NOT NULL, d SET DATA TYPE INT", "changing the type of column D"),
        ("ALTER TABLE t ALTER COLUMN c SET NOT NULL", "SET NOT NULL is not supported"),
        ("ALTER TABLE t ALTER COLUMN c DROP DEFAULT", "DROP NOT NULL is"),
        ("ALTER TABLE t ADD COLUMN c INT DEFAULT 0", "no DEFAULT"),
        ("ALTER TABLE t ADD COLUMN c INT AUTOINCREMENT", "no DEFAULT, AUTOINCREMENT"),
        ("ALTER TABLE t ADD COLUMN c VARCHAR COMMENT 'x'", "a new column takes a type and NOT NULL only"),
        ("ALTER TABLE t ADD COLUMN c GEOGRAPHY", "Unsupported data type 'GEOGRAPHY'"),
        ("ALTER TABLE t ADD COLUMN c INT, DROP COLUMN d", "one kind of change at a time"),
        ("ALTER TABLE t RENAME TO u", "RENAME TO is not supported"),
        ("ALTER TABLE t SWAP WITH u", "SWAP WITH u is not supported"),
        ("ALTER TABLE t CLUSTER BY (a)", "is not supported by Floe"),
        ("ALTER TABLE t SET DATA_RETENTION_TIME_IN_DAYS = 1", "SET takes ENABLE_SCHEMA_EVOLUTION"),
        ("ALTER TABLE t SET ENABLE_SCHEMA_EVOLUTION = 1", "takes TRUE or FALSE"),
        ("ALTER TABLE t UNSET CHANGE_TRACKING", "UNSET takes ENABLE_SCHEMA_EVOLUTION and COMMENT"),
        ("ALTER TABLE t DROP a b", "column names separated by commas"),
        ("ALTER TABLE t ADD COLUMN c", "syntax error"),
        ("ALTER TABLE t", "syntax error"),
    ],
)
def test_what_floe_does_not_do_is_refused_saying_what(sql: str, message: str) -> None:
    with pytest.raises(CompilationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(sql)


LINEAR = {
    "spaces after ALTER TABLE": lambda n: "ALTER TABLE" + " " * n + "t DROP COLUMN c",
    "long table name": lambda n: "ALTER TABLE " + "a" * min(n, 200) + " ADD " + "x" * n + " INT",
    "many dropped columns": lambda n: "ALTER TABLE t DROP " + ", ".join(["c"] * (n // 3)),
    "many DROP NOT NULL": lambda n: "ALTER TABLE t ALTER c DROP NOT NULL" + ", c DROP NOT NULL" * (n // 18),
    "unterminated comment": lambda n: "ALTER TABLE t SET COMMENT = '" + "a" * n,
}


@pytest.mark.parametrize("case", list(LINEAR))
def test_parse_time_grows_linearly(case: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="sqlglot")
    small, large = LINEAR[case](N // 5), LINEAR[case](2 * N // 5)
    ok, report = _grows_linearly(small, large)
    if not ok:  # the machine is shared: a real super-linear case fails twice
        ok, report = _grows_linearly(small, large)
    assert ok, f"{case}: super-linear: {report}"
