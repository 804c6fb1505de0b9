"""Parsing the access-control statements: users, roles, grants on every kind of object, and the
session's roles."""

from __future__ import annotations

import pytest

from floe.catalog import access
from floe.catalog.access import (
    AlterUser,
    Bulk,
    CreateRole,
    CreateUser,
    DescribeUser,
    DropRole,
    DropUser,
    GrantPrivileges,
    GrantRole,
    RevokePrivileges,
    RevokeRole,
    Securable,
    ShowFutureGrants,
    ShowGrantsOf,
    ShowGrantsOn,
    ShowGrantsToRole,
    ShowGrantsToUser,
    ShowRoles,
    ShowUsers,
    UseRole,
    UseSecondaryRoles,
)
from floe.catalog.ddl import Defaults, Drop, Show, parse
from floe.catalog.models import PRIVILEGES
from floe.errors import CompilationError

pytestmark = pytest.mark.unit


def test_create_user_with_every_stored_property() -> None:
    s = parse("CREATE USER alice RSA_PUBLIC_KEY = 'MIIBkey' RSA_PUBLIC_KEY_2='MIIBtwo' DEFAULT_ROLE = etl")
    assert s == CreateUser("ALICE", "MIIBkey", "MIIBtwo", "ETL")


def test_create_user_properties_in_any_order_with_ignored_ones() -> None:
    s = parse(
        "create or replace user if not exists bob\n  comment = 'it''s bob', default_role = 'etl'\n"
        "  PASSWORD = 'x' LOGIN_NAME = bob_login DISPLAY_NAME = \"Bob B\" rsa_public_key = 'k==';"
    )
    assert s == CreateUser("BOB", rsa_public_key="k==", default_role="ETL", replace=True, if_not_exists=True)


def test_create_user_without_properties_and_quoted_names() -> None:
    assert parse('CREATE USER "mixed Case"') == CreateUser("mixed Case")
    assert parse('CREATE USER u DEFAULT_ROLE = "Etl"') == CreateUser("U", default_role="Etl")
    assert parse("CREATE USER u DEFAULT_ROLE = '\"Etl\"'") == CreateUser("U", default_role="Etl")
    assert parse("CREATE USER u DEFAULT_SECONDARY_ROLES = ('ALL') DISABLED = FALSE") == CreateUser("U")


def test_quoted_key_keeps_escapes_and_newlines() -> None:
    pem = "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----"
    s = parse(f"CREATE USER u RSA_PUBLIC_KEY = '{pem}'")
    assert isinstance(s, CreateUser) and s.rsa_public_key == pem
    s = parse("CREATE USER u RSA_PUBLIC_KEY = 'a''b'")
    assert isinstance(s, CreateUser) and s.rsa_public_key == "a'b"


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("CREATE USER", "position 11 unexpected '<EOF>'. CREATE USER expects a user name"),
        ("CREATE USER ;", "CREATE USER expects a user name"),
        ("CREATE USER u RSA_PUBLIC_KEY 'x'", "CREATE USER expects a property (NAME = value)"),
        ("CREATE USER u FAVOURITE_COLOUR = blue", "invalid property 'FAVOURITE_COLOUR' for USER"),
        ("CREATE USER u COMMENT = 'a' COMMENT = 'b'", "duplicate property 'COMMENT'"),
        ("CREATE USER u DISABLED = TRUE", "DISABLED = TRUE is not supported"),
        ("CREATE USER u DEFAULT_ROLE = 'not a role'", "invalid value 'not a role' for property DEFAULT_ROLE"),
        ("CREATE ROLE", "CREATE ROLE expects a role name"),
        ("CREATE ROLE r OWNER = x", "unexpected 'OWNER'. CREATE ROLE expects the end of the statement"),
        ("ALTER USER u", "ALTER USER expects SET or UNSET"),
        ("ALTER USER u SET", "ALTER USER expects at least one property"),
        ("ALTER USER u UNSET", "ALTER USER expects a property name"),
        ("ALTER USER u UNSET NICKNAME", "invalid property 'NICKNAME' for USER"),
        ("ALTER USER u RENAME TO v", "unexpected 'RENAME'"),
        ("DROP USER", "DROP USER expects a user name"),
        ("DROP ROLE a b", "unexpected 'b'. DROP ROLE expects the end of the statement"),
        ("GRANT FLY ON PIPE p TO ROLE r", "invalid privilege 'FLY' on a pipe"),
        ("GRANT MONITOR ON PIPE p TO USER u", "GRANT expects TO ROLE <role>"),
        ("GRANT MONITOR ON PIPE p TO ROLE", "GRANT expects a role name"),
        ("GRANT OWNERSHIP, MONITOR ON PIPE p TO ROLE r", "OWNERSHIP must be granted on its own"),
        ("GRANT MONITOR ON PIPE p TO ROLE r WITH GRANT OPTION", "WITH GRANT OPTION is not supported"),
        ("GRANT ROLE r TO USER", "GRANT ROLE expects a user name"),
        ("GRANT ROLE r TO SHARE s", "GRANT ROLE expects TO ROLE <role> or TO USER <user>"),
        ("REVOKE ROLE r TO USER u", "REVOKE ROLE expects FROM ROLE <role> or FROM USER <user>"),
        ("REVOKE GRANT OPTION FOR MONITOR ON PIPE p FROM ROLE r", "grant options are not supported"),
        ("REVOKE MONITOR ON PIPE p TO ROLE r", "REVOKE expects FROM ROLE <role>"),
        ("SHOW GRANTS", "SHOW GRANTS expects TO ROLE <role>, TO USER <user>, OF ROLE <role> or ON <object>"),
        ("SHOW GRANTS OF USER u", "unexpected 'OF'"),
        ("SHOW USERS LIKE alice", "SHOW expects a quoted pattern after LIKE"),
        ("DESC USER", "DESC USER expects a user name"),
    ],
)
def test_malformed_statements(sql: str, message: str) -> None:
    with pytest.raises(CompilationError) as info:
        parse(sql)
    assert message in str(info.value)
    assert str(info.value).startswith("SQL compilation error:\n")


def test_syntax_error_positions_count_lines() -> None:
    with pytest.raises(CompilationError, match="line 2 at position 2 unexpected '='"):
        parse("CREATE USER u\n  = 'x'")


def test_syntax_errors_do_not_echo_a_whole_key() -> None:
    key = "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAx" * 3
    with pytest.raises(CompilationError) as info:
        parse(f"CREATE USER u RSA_PUBLIC_KEY '{key}'")
    assert key not in str(info.value)


def test_alter_user_set_and_unset() -> None:
    s = parse("ALTER USER IF EXISTS u SET RSA_PUBLIC_KEY_2 = 'k2' default_role = analyst COMMENT = 'x'")
    assert s == AlterUser("U", {"RSA_PUBLIC_KEY_2": "k2", "DEFAULT_ROLE": "ANALYST", "COMMENT": "x"}, True)
    s = parse('alter user "me" unset rsa_public_key, DEFAULT_ROLE;')
    assert s == AlterUser("me", {"RSA_PUBLIC_KEY": None, "DEFAULT_ROLE": None})
    assert parse("ALTER USER u SET RSA_PUBLIC_KEY='a', RSA_PUBLIC_KEY_2='b'") == AlterUser(
        "U", {"RSA_PUBLIC_KEY": "a", "RSA_PUBLIC_KEY_2": "b"}
    )


def test_drop_and_create_roles_and_users() -> None:
    assert parse("DROP USER IF EXISTS u;") == DropUser("U", True)
    assert parse('drop user "u"') == DropUser("u")
    assert parse("CREATE OR REPLACE ROLE IF NOT EXISTS etl COMMENT = 'loads ''stuff'''") == CreateRole(
        "ETL", "loads 'stuff'", True, True
    )
    assert parse("create role analyst") == CreateRole("ANALYST")
    assert parse("DROP ROLE IF EXISTS analyst") == DropRole("ANALYST", True)
    # DROP of catalog objects still goes to the DDL parser.
    assert isinstance(parse("DROP PIPE p"), Drop)


def test_role_grants_to_users_and_roles() -> None:
    assert parse("GRANT ROLE etl TO USER alice;") == GrantRole("ETL", "USER", "ALICE")
    assert parse('revoke role "Etl" from user alice') == RevokeRole("Etl", "USER", "ALICE")
    assert parse("grant role etl to role sysadmin") == GrantRole("ETL", "ROLE", "SYSADMIN")
    assert parse('REVOKE ROLE etl FROM ROLE "Loader";') == RevokeRole("ETL", "ROLE", "Loader")


def test_pipe_privileges_are_qualified_and_normalised() -> None:
    s = parse("grant monitor, operate, MONITOR on pipe raw.p to role etl")
    assert s == GrantPrivileges(["OPERATE", "MONITOR"], Securable("PIPE", "FLOE.RAW.P"), "ETL")
    s = parse('GRANT ALL PRIVILEGES ON PIPE db.s."p" TO ROLE r')
    assert s == GrantPrivileges(["OPERATE", "MONITOR"], Securable("PIPE", "DB.S.p"), "R")
    assert parse("GRANT ALL ON PIPE p TO ROLE r", Defaults("D", "S")) == GrantPrivileges(
        ["OPERATE", "MONITOR"], Securable("PIPE", "D.S.P"), "R"
    )
    s = parse("GRANT OWNERSHIP ON PIPE p TO ROLE etl REVOKE CURRENT GRANTS")
    assert s == GrantPrivileges(["OWNERSHIP"], Securable("PIPE", "FLOE.PUBLIC.P"), "ETL", "REVOKE")
    s = parse("GRANT OWNERSHIP ON PIPE p TO ROLE etl COPY CURRENT GRANTS;")
    assert isinstance(s, GrantPrivileges) and s.current_grants == "COPY"


def test_revoke_pipe_privileges() -> None:
    s = parse("REVOKE OPERATE ON PIPE p FROM ROLE etl")
    assert s == RevokePrivileges(["OPERATE"], Securable("PIPE", "FLOE.PUBLIC.P"), "ETL")
    s = parse("revoke all privileges on pipe p from role etl restrict;")
    assert s == RevokePrivileges(["OPERATE", "MONITOR"], Securable("PIPE", "FLOE.PUBLIC.P"), "ETL")
    # The parser accepts it so the executor can say how ownership moves instead.
    s = parse("REVOKE OWNERSHIP ON PIPE p FROM ROLE etl CASCADE")
    assert isinstance(s, RevokePrivileges) and s.privileges == ["OWNERSHIP"]


def test_show_and_describe() -> None:
    assert parse("SHOW USERS") == ShowUsers()
    assert parse("show users like 'AL%';") == ShowUsers("AL%")
    assert parse("SHOW ROLES LIKE 'it''s'") == ShowRoles("it's")
    assert parse("SHOW GRANTS TO ROLE etl") == ShowGrantsToRole("ETL")
    assert parse('SHOW GRANTS TO USER "al"') == ShowGrantsToUser("al")
    assert parse("show grants of role etl") == ShowGrantsOf("ETL")
    assert parse("show grants on pipe s.p") == ShowGrantsOn(Securable("PIPE", "FLOE.S.P"))
    assert parse("DESC USER alice") == DescribeUser("ALICE")
    assert parse("DESCRIBE USER alice;") == DescribeUser("ALICE")
    # The catalog SHOWs are unchanged.
    assert parse("SHOW PIPES LIKE 'x%'") == Show("PIPE", "x%")


def test_other_statements_are_not_access_statements() -> None:
    for sql in ("SELECT 1", "CREATE TABLE t (a INT)", "SHOW PIPES", "DESC PIPE p", "CREATE USERS_X"):
        assert access.parse(sql, Defaults()) is None


@pytest.mark.parametrize(
    ("on", "securable"),
    [
        ("ACCOUNT", Securable("ACCOUNT", "")),
        ("DATABASE raw", Securable("DATABASE", "RAW")),
        ('DATABASE "Raw"', Securable("DATABASE", "Raw")),
        ("SCHEMA s", Securable("SCHEMA", "D.S")),
        ('SCHEMA "Db" . s', Securable("SCHEMA", "Db.S")),
        ("TABLE t", Securable("TABLE", "D.S.T")),
        ('TABLE x."y".z', Securable("TABLE", "X.y.Z")),
        ("STAGE s2.st", Securable("STAGE", "D.S2.ST")),
        ("PIPE p", Securable("PIPE", "D.S.P")),
        ("INTEGRATION i", Securable("INTEGRATION", "I")),
        ('STORAGE  INTEGRATION "i"', Securable("INTEGRATION", "i")),
        ("ROLE etl", Securable("ROLE", "ETL")),
        ("USER alice", Securable("USER", "ALICE")),
    ],
)
def test_every_kind_of_object_takes_grants_and_shows_them(on: str, securable: Securable) -> None:
    defaults = Defaults("D", "S")
    privileges = list(PRIVILEGES[securable.kind])
    if privileges:
        sql = f"GRANT ALL PRIVILEGES ON {on} TO ROLE r"
        assert parse(sql, defaults) == GrantPrivileges(privileges, securable, "R")
        sql = f"REVOKE {', '.join(reversed(privileges))} ON {on} FROM ROLE r"
        assert parse(sql, defaults) == RevokePrivileges(privileges, securable, "R")
    if securable.kind != "ACCOUNT":
        sql = f"GRANT OWNERSHIP ON {on} TO ROLE r COPY CURRENT GRANTS"
        assert parse(sql, defaults) == GrantPrivileges(["OWNERSHIP"], securable, "R", "COPY")
    assert parse(f"SHOW GRANTS ON {on}", defaults) == ShowGrantsOn(securable)


def test_multi_word_privileges_in_any_order_come_back_in_the_kinds_order() -> None:
    s = parse("grant create  pipe, usage, CREATE\n FILE FORMAT, create table, usage on schema s to role etl")
    assert s == GrantPrivileges(
        ["USAGE", "CREATE TABLE", "CREATE PIPE", "CREATE FILE FORMAT"], Securable("SCHEMA", "FLOE.S"), "ETL"
    )
    s = parse("GRANT MANAGE GRANTS, CREATE DATABASE, CREATE INTEGRATION ON ACCOUNT TO ROLE admin")
    assert s == GrantPrivileges(
        ["CREATE DATABASE", "CREATE INTEGRATION", "MANAGE GRANTS"], Securable("ACCOUNT", ""), "ADMIN"
    )
    s = parse("GRANT SELECT, ALL, SELECT ON TABLE t TO ROLE r")
    assert isinstance(s, GrantPrivileges) and s.privileges == list(PRIVILEGES["TABLE"])


def test_schema_names_take_the_default_database_and_at_most_two_parts() -> None:
    assert parse("GRANT USAGE ON SCHEMA raw TO ROLE r", Defaults("LAKE", "X")) == GrantPrivileges(
        ["USAGE"], Securable("SCHEMA", "LAKE.RAW"), "R"
    )
    with pytest.raises(
        CompilationError, match=r"invalid schema name 'a\.b\.c'; name a schema as <schema> or"
    ):
        parse("GRANT USAGE ON SCHEMA a.b.c TO ROLE r")


@pytest.mark.parametrize(
    ("sql", "bulk"),
    [
        ("ON ALL TABLES IN SCHEMA s", Bulk(False, "TABLE", "SCHEMA", "D.S")),
        ("on future tables in schema x.y", Bulk(True, "TABLE", "SCHEMA", "X.Y")),
        ("ON FUTURE TABLES IN DATABASE raw", Bulk(True, "TABLE", "DATABASE", "RAW")),
        ('ON ALL STAGES IN DATABASE "Raw"', Bulk(False, "STAGE", "DATABASE", "Raw")),
        ("ON FUTURE PIPES IN SCHEMA s", Bulk(True, "PIPE", "SCHEMA", "D.S")),
    ],
)
def test_grants_on_all_and_future_objects_in_a_container(sql: str, bulk: Bulk) -> None:
    defaults = Defaults("D", "S")
    privileges = ["OPERATE"] if bulk.kind == "PIPE" else ["USAGE"] if bulk.kind == "STAGE" else ["SELECT"]
    assert parse(f"GRANT {privileges[0]} {sql} TO ROLE r", defaults) == GrantPrivileges(privileges, bulk, "R")
    assert parse(f"REVOKE {privileges[0]} {sql} FROM ROLE r", defaults) == RevokePrivileges(
        privileges, bulk, "R"
    )
    s = parse(f"GRANT ALL {sql} TO ROLE r", defaults)
    assert isinstance(s, GrantPrivileges) and s.privileges == list(PRIVILEGES[bulk.kind])
    s = parse(f"GRANT OWNERSHIP {sql} TO ROLE r REVOKE CURRENT GRANTS", defaults)
    assert s == GrantPrivileges(["OWNERSHIP"], bulk, "R", "REVOKE")


def test_show_future_grants_and_use_role() -> None:
    assert parse("SHOW FUTURE GRANTS IN SCHEMA s") == ShowFutureGrants("SCHEMA", "FLOE.S")
    assert parse('show future grants in database "Raw";') == ShowFutureGrants("DATABASE", "Raw")
    assert parse("USE ROLE etl") == UseRole("ETL")
    assert parse('use role "Mixed";') == UseRole("Mixed")
    assert parse("USE SECONDARY ROLES ALL") == UseSecondaryRoles(True)
    assert parse("use secondary roles none") == UseSecondaryRoles(False)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "GRANT OPERATE ON TABLE t TO ROLE r",
            "invalid privilege 'OPERATE' on a table; table privileges are SELECT, INSERT, UPDATE, DELETE, "
            "TRUNCATE, REFERENCES, EVOLVE SCHEMA and ALL [PRIVILEGES], or OWNERSHIP on its own",
        ),
        ("GRANT SELECT ON PIPE p TO ROLE r", "pipe privileges are OPERATE, MONITOR and ALL [PRIVILEGES]"),
        ("GRANT CREATE VIEW ON SCHEMA s TO ROLE r", "invalid privilege 'CREATE VIEW' on a schema"),
        (
            "GRANT CREATE TABLE ON DATABASE d TO ROLE r",
            "database privileges are USAGE, CREATE SCHEMA, MONITOR",
        ),
        (
            "GRANT USAGE ON ACCOUNT TO ROLE r",
            "account privileges are CREATE DATABASE, CREATE ROLE, CREATE USER",
        ),
        ("GRANT MONITOR ON INTEGRATION i TO ROLE r", "integration privileges are USAGE and ALL"),
        ("GRANT SELECT ON ALL STAGES IN SCHEMA s TO ROLE r", "invalid privilege 'SELECT' on a stage"),
        ("GRANT USAGE ON ROLE r TO ROLE s", "a role takes only OWNERSHIP (GRANT OWNERSHIP ON ROLE <name>"),
        ("GRANT ALL ON ROLE r TO ROLE s", "invalid privilege 'ALL PRIVILEGES' on a role"),
        ("GRANT OWNERSHIP ON ACCOUNT TO ROLE r", "the account has no owner"),
        ("GRANT OWNERSHIP, USAGE ON ACCOUNT TO ROLE r", "the account has no owner"),
        (
            "GRANT SELECT, OWNERSHIP ON TABLE t TO ROLE r",
            "OWNERSHIP must be granted on its own: GRANT OWNERSHIP ON TABLE <name> TO ROLE <role>",
        ),
        ("GRANT ALL, OWNERSHIP ON SCHEMA s TO ROLE r", "OWNERSHIP must be granted on its own"),
        ("REVOKE OWNERSHIP, SELECT ON TABLE t FROM ROLE r", "OWNERSHIP must be revoked on its own: REVOKE"),
        (
            "GRANT SELECT ON TABLE t TO ROLE r COPY CURRENT GRANTS",
            "COPY CURRENT GRANTS goes with GRANT OWNERSHIP",
        ),
        ("GRANT SELECT ON TABLE t TO ROLE r WITH GRANT OPTION", "leave WITH GRANT OPTION out"),
        ("GRANT OWNERSHIP ON TABLE t TO ROLE r WITH GRANT OPTION", "WITH GRANT OPTION is not supported"),
        (
            "GRANT SELECT ON VIEW v TO ROLE r",
            "GRANT expects ACCOUNT, DATABASE, SCHEMA, TABLE, STAGE, FILE FORMAT, PIPE, INTEG",
        ),
        ("GRANT SELECT ON t TO ROLE r", "unexpected 't'. GRANT expects ACCOUNT, DATABASE"),
        ("GRANT SELECT TO ROLE r", "unexpected 'TO'. GRANT expects ON <object>"),
        ("GRANT ON TABLE t TO ROLE r", "unexpected 'ON'. GRANT expects a privilege"),
        ("GRANT CREATE ON SCHEMA s TO ROLE r", "GRANT expects the kind of object after CREATE"),
        ("GRANT MANAGE ON ACCOUNT TO ROLE r", "GRANT expects GRANTS (MANAGE GRANTS)"),
        (
            "GRANT SELECT ON ALL VIEWS IN SCHEMA s TO ROLE r",
            "GRANT expects TABLES, STAGES, FILE FORMATS, PIPES or FUNCTIONS after ON ALL",
        ),
        (
            "GRANT SELECT ON FUTURE TABLE IN SCHEMA s TO ROLE r",
            "TABLES, STAGES, FILE FORMATS, PIPES or FUNCTIONS after ON FUTURE",
        ),
        (
            "GRANT SELECT ON ALL TABLES s TO ROLE r",
            "GRANT expects IN SCHEMA <schema> or IN DATABASE <database>",
        ),
        ("GRANT SELECT ON ALL TABLES IN ACCOUNT TO ROLE r", "unexpected 'IN'. GRANT expects IN SCHEMA"),
        ("GRANT SELECT ON TABLE t TO ROLE r RESTRICT", "GRANT expects the end of the statement"),
        ("SHOW GRANTS ON ALL TABLES IN SCHEMA s", "unexpected 'ALL'. SHOW GRANTS expects ACCOUNT, DATABASE"),
        ("SHOW GRANTS ON ACCOUNT a", "SHOW GRANTS expects the end of the statement"),
        ("SHOW FUTURE GRANTS TO ROLE r", "SHOW FUTURE GRANTS expects IN SCHEMA <schema> or IN DATABASE"),
        ("USE ROLE", "USE ROLE expects a role name"),
        ("USE ROLE a b", "unexpected 'b'. USE ROLE expects the end of the statement"),
        ("USE SECONDARY ROLES a, b", "USE SECONDARY ROLES expects ALL or NONE (Floe does not take a list"),
    ],
)
def test_malformed_grants(sql: str, message: str) -> None:
    with pytest.raises(CompilationError) as info:
        parse(sql)
    assert message in str(info.value)


def test_quoted_names_keep_their_case_everywhere() -> None:
    s = parse('GRANT USAGE ON DATABASE "raw" TO ROLE "Loader"')
    assert s == GrantPrivileges(["USAGE"], Securable("DATABASE", "raw"), "Loader")
    s = parse('GRANT SELECT ON FUTURE TABLES IN SCHEMA "raw"."in" TO ROLE r')
    assert s == GrantPrivileges(["SELECT"], Bulk(True, "TABLE", "SCHEMA", "raw.in"), "R")
    assert parse('GRANT ROLE "a" TO ROLE "b"') == GrantRole("a", "ROLE", "b")


def test_a_role_name_longer_than_snowflake_allows_is_refused() -> None:
    parse(f"GRANT USAGE ON DATABASE d TO ROLE {'r' * 255}")
    with pytest.raises(CompilationError, match="is too long"):
        parse(f"GRANT USAGE ON DATABASE d TO ROLE {'r' * 256}")
    with pytest.raises(CompilationError, match="is too long"):
        parse(f"USE ROLE {'r' * 256}")


def test_namespace_statements_are_not_access_statements() -> None:
    for sql in ("SHOW DATABASES", "DROP DATABASE d", "DESC SCHEMA s", "USE DATABASE d", "CREATE SCHEMA s"):
        assert access.parse(sql, Defaults()) is None
