"""Parsing databases, schemas and storage integrations, and SHOW, DESC and DROP for every kind."""

from __future__ import annotations

import pytest

from floe.catalog.ddl import (
    AlterIntegration,
    CreateDatabase,
    CreateIntegration,
    CreateSchema,
    CreateStage,
    Defaults,
    Describe,
    DescribeObject,
    Drop,
    DropObject,
    Name,
    Show,
    parse,
)
from floe.errors import CompilationError

pytestmark = pytest.mark.unit

DEFAULTS = Defaults("D", "S")
INTEGRATION = (
    "CREATE STORAGE INTEGRATION i TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' ENABLED = TRUE "
    "STORAGE_ALLOWED_LOCATIONS = ('s3://b/p/')"
)


def _error(sql: str) -> str:
    with pytest.raises(CompilationError) as info:
        parse(sql, DEFAULTS)
    text = str(info.value)
    assert text.startswith("SQL compilation error:\n")
    return text


def test_create_database() -> None:
    assert parse("CREATE DATABASE raw") == CreateDatabase("RAW")
    assert parse("create or replace database if not exists \"Raw\" comment = 'it''s raw';") == CreateDatabase(
        "Raw", replace=True, if_not_exists=True, comment="it's raw"
    )


def test_create_schema_qualifies_against_the_default_database() -> None:
    assert parse("CREATE SCHEMA landing", DEFAULTS) == CreateSchema("D.LANDING")
    assert parse("CREATE OR REPLACE SCHEMA IF NOT EXISTS raw.\"In\" COMMENT='x'", DEFAULTS) == CreateSchema(
        "RAW.In", replace=True, if_not_exists=True, comment="x"
    )


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("CREATE DATABASE", "CREATE DATABASE expects a database name"),
        (
            "CREATE SCHEMA a.b.c",
            "invalid schema name 'a.b.c'; name a schema as <schema> or <database>.<schema>",
        ),
        (
            "CREATE TRANSIENT DATABASE d",
            "TRANSIENT databases and schemas are not supported; leave TRANSIENT out",
        ),
        (
            "CREATE SCHEMA s WITH MANAGED ACCESS",
            "unexpected 'WITH'. CREATE SCHEMA expects COMMENT = '<text>' or the end of the statement",
        ),
        ("CREATE DATABASE d DATA_RETENTION_TIME_IN_DAYS = 1", "CREATE DATABASE expects COMMENT = '<text>'"),
        ("CREATE DATABASE d COMMENT = x", "CREATE DATABASE expects a quoted comment"),
        ("CREATE DATABASE d COMMENT = 'x' CLONE e", "unexpected 'CLONE'. CREATE DATABASE expects the end"),
        ("CREATE DATABASE " + "d" * 256, "is too long (256 characters)"),
    ],
)
def test_create_database_and_schema_errors(sql: str, message: str) -> None:
    assert message in _error(sql)


def test_create_storage_integration_with_every_property() -> None:
    s = parse(
        "CREATE STORAGE INTEGRATION s3_int\n  TYPE = EXTERNAL_STAGE\n  STORAGE_PROVIDER = 'S3'\n"
        "  ENABLED = TRUE\n  STORAGE_AWS_ROLE_ARN = 'arn:aws:iam::001234567890:role/myrole'\n"
        "  STORAGE_AWS_OBJECT_ACL = 'bucket-owner-full-control'\n  STORAGE_AWS_EXTERNAL_ID = 'x'\n"
        "  STORAGE_ALLOWED_LOCATIONS = ('s3://b1/data/', 's3://b2/')\n"
        "  STORAGE_BLOCKED_LOCATIONS = ('s3://b1/data/secret/')\n  COMMENT = 'the lake''s'"
    )
    assert s == CreateIntegration(
        name="S3_INT",
        enabled=True,
        provider="S3",
        allowed_locations=["s3://b1/data/", "s3://b2/"],
        blocked_locations=["s3://b1/data/secret/"],
        comment="the lake's",
    )


def test_create_storage_integration_in_any_order_and_case() -> None:
    s = parse(
        "create or replace storage integration if not exists \"Lake\" storage_allowed_locations=('*') "
        "enabled=false storage_provider=s3 type='external_stage';"
    )
    assert s == CreateIntegration("Lake", False, "S3", ["*"], [], replace=True, if_not_exists=True)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            INTEGRATION.replace("ENABLED = TRUE ", ""),
            "CREATE STORAGE INTEGRATION needs ENABLED; for example:",
        ),
        (
            INTEGRATION.replace("STORAGE_ALLOWED_LOCATIONS = ('s3://b/p/')", ""),
            "needs STORAGE_ALLOWED_LOCATIONS; for example: CREATE STORAGE INTEGRATION I TYPE = EXTERNAL",
        ),
        ("CREATE STORAGE INTEGRATION i", "needs TYPE, STORAGE_PROVIDER, ENABLED, STORAGE_ALLOWED_LOCATIONS"),
        (INTEGRATION.replace("'s3://b/p/'", "'gcs://b/p/'"), "invalid location 'gcs://b/p/' in STORAGE_ALL"),
        (INTEGRATION.replace("'s3://b/p/'", "'b/p/'"), "Floe reads S3: write 's3://bucket/path/' or '*'"),
        (INTEGRATION.replace("'s3://b/p/'", "'s3:///p/'"), "invalid location 's3:///p/'"),
        (
            INTEGRATION + " STORAGE_BLOCKED_LOCATIONS = ('azure://x/')",
            "invalid location 'azure://x/' in STORAGE_B",
        ),
        (
            INTEGRATION + " STORAGE_BLOCKED_LOCATIONS = ('*')",
            "'*' cannot be a location in STORAGE_BLOCKED_LOCATIONS",
        ),
        (INTEGRATION.replace("('s3://b/p/')", "()"), "STORAGE_ALLOWED_LOCATIONS needs at least one location"),
        (
            INTEGRATION.replace("('s3://b/p/')", "'s3://b/p/'"),
            "expects a list of quoted locations in parentheses",
        ),
        (INTEGRATION.replace("('s3://b/p/')", "('s3://a/' 's3://b/')"), "expects ',' or ')' in the list"),
        (
            INTEGRATION.replace("('s3://b/p/')", "(s3)"),
            "expects a quoted location such as 's3://bucket/path/'",
        ),
        (INTEGRATION.replace("'S3'", "'GCS'"), "STORAGE_PROVIDER = 'GCS' is not supported; Floe reads S3"),
        (INTEGRATION.replace("'S3'", "'S3GOV'"), "STORAGE_PROVIDER = 'S3GOV' is not supported"),
        (INTEGRATION.replace("EXTERNAL_STAGE", "INTERNAL"), "a storage integration is TYPE = EXTERNAL_STAGE"),
        (
            INTEGRATION.replace("TRUE", "YES"),
            "unexpected 'YES'. CREATE STORAGE INTEGRATION expects TRUE or FALSE",
        ),
        (INTEGRATION + " ENABLED = FALSE", "duplicate property 'ENABLED' in CREATE STORAGE INTEGRATION"),
        (
            INTEGRATION + " USE_PRIVATELINK_ENDPOINT = TRUE",
            "invalid property 'USE_PRIVATELINK_ENDPOINT' for STOR",
        ),
        (INTEGRATION + " COMMENT = x", "expects a quoted value for COMMENT"),
        (INTEGRATION + " COMMENT 'x'", "unexpected 'COMMENT'. CREATE STORAGE INTEGRATION expects a property"),
        ("CREATE STORAGE INTEGRATION", "CREATE STORAGE INTEGRATION expects an integration name"),
    ],
)
def test_create_storage_integration_errors(sql: str, message: str) -> None:
    assert message in _error(sql)


def test_a_long_location_is_shortened_in_the_error() -> None:
    location = "gcs://" + "x" * 10_000
    text = _error(INTEGRATION.replace("s3://b/p/", location))
    assert "gcs://xxx" in text and location not in text


def test_stage_names_its_storage_integration() -> None:
    s = parse(
        "CREATE STAGE st URL = 's3://b/p/' STORAGE_INTEGRATION = lake FILE_FORMAT = (TYPE = CSV)", DEFAULTS
    )
    assert s == CreateStage(Name("D", "S", "ST"), "s3://b/p/", {"type": "CSV"}, storage_integration="LAKE")
    s = parse(
        "CREATE STAGE st storage_integration = \"lake\" URL = 's3://b/p/' COMMENT = 'STORAGE_INTEGRATION = x'"
    )
    assert isinstance(s, CreateStage) and s.storage_integration == "lake"
    s = parse("CREATE STAGE st URL = 's3://b/' STORAGE_INTEGRATION = \"My Lake\"")
    assert isinstance(s, CreateStage) and s.storage_integration == "My Lake"
    s = parse("CREATE STAGE st URL = 's3://b/'")
    assert isinstance(s, CreateStage) and s.storage_integration is None


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "CREATE STAGE st URL = 's3://b/' STORAGE_INTEGRATION = 'lake'",
            "STORAGE_INTEGRATION = my_integration",
        ),
        (
            "CREATE STAGE st URL = 's3://b/' STORAGE_INTEGRATION = a STORAGE_INTEGRATION = b",
            "duplicate property 'STORAGE_INTEGRATION'",
        ),
        ("CREATE STAGE st URL = 's3://b/' STORAGE_INTEGRATION = " + "i" * 256, "is too long"),
    ],
)
def test_stage_integration_errors(sql: str, message: str) -> None:
    assert message in _error(sql)


def test_stage_comment_is_accepted_and_credentials_are_refused() -> None:
    s = parse("CREATE STAGE st URL = 's3://b/' STORAGE_INTEGRATION = i COMMENT = 'landing'")
    assert isinstance(s, CreateStage) and s.storage_integration == "I"
    text = _error("CREATE STAGE st URL = 's3://b/' CREDENTIALS = (AWS_KEY_ID = 'a' AWS_SECRET_KEY = 'b')")
    assert "CREDENTIALS is not supported" in text and "STORAGE_INTEGRATION = <integration>" in text


@pytest.mark.parametrize(
    ("sql", "show"),
    [
        ("SHOW DATABASES", Show("DATABASE")),
        ("show databases like 'R%';", Show("DATABASE", "R%")),
        ("SHOW SCHEMAS", Show("SCHEMA")),
        ("SHOW SCHEMAS IN DATABASE raw", Show("SCHEMA", None, "DATABASE", "RAW")),
        ("SHOW SCHEMAS LIKE 'x' IN ACCOUNT", Show("SCHEMA", "x", "ACCOUNT", "")),
        ("SHOW INTEGRATIONS", Show("INTEGRATION")),
        ("SHOW STORAGE INTEGRATIONS LIKE 'it''s'", Show("INTEGRATION", "it's", family="STORAGE")),
        ("SHOW TABLES", Show("TABLE")),
        ("SHOW TABLES LIKE 'A%' IN SCHEMA x", Show("TABLE", "A%", "SCHEMA", "D.X")),
        ('SHOW STAGES IN SCHEMA "Raw".landing', Show("STAGE", None, "SCHEMA", "Raw.LANDING")),
        ("SHOW PIPES IN DATABASE raw", Show("PIPE", None, "DATABASE", "RAW")),
        ("SHOW PIPES IN ACCOUNT", Show("PIPE", None, "ACCOUNT", "")),
        # Without a name, IN DATABASE and IN SCHEMA mean the current ones, as in Snowflake.
        ("SHOW TABLES IN DATABASE", Show("TABLE", None, "DATABASE", "D")),
        ("SHOW TABLES IN SCHEMA;", Show("TABLE", None, "SCHEMA", "D.S")),
    ],
)
def test_show_every_kind_with_like_and_in(sql: str, show: Show) -> None:
    assert parse(sql, DEFAULTS) == show


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SHOW VIEWS",
            "SHOW expects DATABASES, SCHEMAS, INTEGRATIONS, STAGES, FILE FORMATS, TABLES, PIPES, CHANNELS, "
            "USERS, ROLES, "
            "GRANTS or EXTERNAL FUNCTIONS",
        ),
        (
            "SHOW TABLES x",
            "SHOW TABLES expects LIKE '<pattern>', IN ACCOUNT | DATABASE | SCHEMA or the end of",
        ),
        (
            "SHOW TABLES LIKE 'x' y",
            "SHOW TABLES expects IN ACCOUNT | DATABASE | SCHEMA or the end of the state",
        ),
        ("SHOW TABLES LIKE x", "SHOW TABLES expects a quoted pattern after LIKE"),
        (
            "SHOW TABLES IN SCHEMA s LIKE 'x'",
            "LIKE goes before IN: SHOW TABLES LIKE '<pattern>' IN SCHEMA ...",
        ),
        (
            "SHOW TABLES IN WAREHOUSE w",
            "unexpected 'WAREHOUSE'. SHOW TABLES expects ACCOUNT, DATABASE or SCHEMA",
        ),
        ("SHOW SCHEMAS IN SCHEMA s", "unexpected 'SCHEMA'. SHOW SCHEMAS expects ACCOUNT or DATABASE"),
        ("SHOW DATABASES IN ACCOUNT", "SHOW DATABASES expects LIKE '<pattern>' or the end of the statement"),
        ("SHOW INTEGRATIONS LIKE 'x' IN ACCOUNT", "SHOW INTEGRATIONS expects the end of the statement"),
        ("SHOW TABLES IN SCHEMA a.b.c", "invalid schema name 'a.b.c'"),
        ("SHOW TABLES IN DATABASE a.b", "unexpected '.'. SHOW TABLES expects the end of the statement"),
    ],
)
def test_show_errors(sql: str, message: str) -> None:
    assert message in _error(sql)


def test_describe_every_kind() -> None:
    assert parse("DESC DATABASE raw") == DescribeObject("DATABASE", "RAW")
    assert parse("describe schema landing", DEFAULTS) == DescribeObject("SCHEMA", "D.LANDING")
    assert parse('DESC STORAGE INTEGRATION "lake"') == DescribeObject("INTEGRATION", "lake", "STORAGE")
    assert parse("DESC INTEGRATION lake;") == DescribeObject("INTEGRATION", "LAKE")
    assert parse("DESC TABLE a.b", DEFAULTS) == Describe("TABLE", Name("D", "A", "B"))
    expected = "DESC expects STAGE, FILE FORMAT, TABLE, PIPE, DATABASE, SCHEMA, INTEGRATION, FUNCTION or USER"
    assert expected in _error("DESC VIEW v")
    assert "unexpected 'x'. DESC DATABASE expects the end of the statement" in _error("DESC DATABASE d x")


def test_drop_every_kind() -> None:
    assert parse("DROP DATABASE raw") == DropObject("DATABASE", "RAW")
    assert parse("drop database if exists raw cascade;") == DropObject("DATABASE", "RAW", True)
    assert parse('DROP SCHEMA IF EXISTS "Raw".x RESTRICT') == DropObject("SCHEMA", "Raw.X", True)
    assert parse("DROP SCHEMA landing", DEFAULTS) == DropObject("SCHEMA", "D.LANDING")
    assert parse("DROP STORAGE INTEGRATION lake") == DropObject("INTEGRATION", "LAKE", family="STORAGE")
    assert parse('DROP INTEGRATION IF EXISTS "lake"') == DropObject("INTEGRATION", "lake", True)
    assert parse("DROP PIPE IF EXISTS p", DEFAULTS) == Drop("PIPE", Name("D", "S", "P"), True)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "DROP VIEW v",
            "DROP expects STAGE, FILE FORMAT, TABLE, PIPE, DATABASE, SCHEMA, INTEGRATION, FUNCTION, USER "
            "or ROLE",
        ),
        (
            "DROP INTEGRATION i CASCADE",
            "unexpected 'CASCADE'. DROP INTEGRATION expects the end of the statement",
        ),
        ("DROP DATABASE", "DROP DATABASE expects a database name"),
        ("DROP DATABASE a.b", "unexpected '.'. DROP DATABASE expects the end of the statement"),
        ("DROP SCHEMA a.b.c", "invalid schema name 'a.b.c'"),
        ("DROP TABLE t CASCADE", "DROP TABLE expects the end of the statement"),
    ],
)
def test_drop_errors(sql: str, message: str) -> None:
    assert message in _error(sql)


def test_alter_storage_integration_sets_what_it_names() -> None:
    s = parse(
        "ALTER STORAGE INTEGRATION IF EXISTS lake SET STORAGE_ALLOWED_LOCATIONS = ('s3://b/new/') "
        "ENABLED = FALSE STORAGE_BLOCKED_LOCATIONS = ('s3://b/new/secret/') COMMENT = 'narrowed'"
    )
    assert s == AlterIntegration(
        name="LAKE",
        if_exists=True,
        enabled=False,
        allowed_locations=["s3://b/new/"],
        blocked_locations=["s3://b/new/secret/"],
        comment="narrowed",
        family="STORAGE",
    )
    assert parse("alter integration lake set enabled = true") == AlterIntegration("LAKE", enabled=True)


def test_alter_storage_integration_unsets() -> None:
    s = parse("ALTER INTEGRATION lake UNSET STORAGE_BLOCKED_LOCATIONS, COMMENT")
    assert s == AlterIntegration("LAKE", unset=["STORAGE_BLOCKED_LOCATIONS", "COMMENT"], family="STORAGE")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("ALTER INTEGRATION lake", "ALTER INTEGRATION expects SET or UNSET"),
        ("ALTER STORAGE INTEGRATION lake", "ALTER STORAGE INTEGRATION expects SET or UNSET"),
        ("ALTER INTEGRATION lake SET", "expects at least one of ENABLED, STORAGE_ALLOWED_LOCATIONS"),
        (
            "ALTER INTEGRATION lake SET STORAGE_AWS_ROLE_ARN = 'arn:x'",
            "expects at least one of ENABLED",
        ),
        ("ALTER INTEGRATION lake SET TYPE = EXTERNAL_STAGE", "cannot change TYPE of a storage integration"),
        ("ALTER INTEGRATION lake SET STORAGE_ALLOWED_LOCATIONS = ()", "needs at least one location"),
        ("ALTER INTEGRATION lake SET STORAGE_BLOCKED_LOCATIONS = ('*')", "'*' cannot be a location"),
        ("ALTER STORAGE INTEGRATION lake UNSET ENABLED", "cannot UNSET 'ENABLED' of a storage integration"),
        ("ALTER INTEGRATION lake UNSET ENABLED", "cannot UNSET 'ENABLED' of an integration"),
        ("ALTER INTEGRATION lake UNSET COMMENT x", "expects the end of the statement"),
        ("ALTER INTEGRATION lake SET ENABLED = TRUE ENABLED = FALSE", "duplicate property 'ENABLED'"),
    ],
)
def test_alter_storage_integration_errors(sql: str, message: str) -> None:
    assert message in _error(sql)
