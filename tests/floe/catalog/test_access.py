"""Parsing the access-control statements: users, roles and pipe grants."""

from __future__ import annotations

import pytest

from floe.catalog import access
from floe.catalog.access import (
    AlterUser,
    CreateRole,
    CreateUser,
    DescribeUser,
    DropRole,
    DropUser,
    GrantPrivileges,
    GrantRole,
    RevokePrivileges,
    RevokeRole,
    ShowGrantsOnPipe,
    ShowGrantsToRole,
    ShowGrantsToUser,
    ShowRoles,
    ShowUsers,
)
from floe.catalog.ddl import Defaults, Drop, Name, Show, parse
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
        ("GRANT USAGE ON DATABASE d TO ROLE r", "invalid privilege 'USAGE'"),
        ("GRANT MONITOR ON TABLE t TO ROLE r", "GRANT expects ON PIPE <pipe>"),
        ("GRANT MONITOR ON PIPE p TO USER u", "GRANT expects TO ROLE <role>"),
        ("GRANT MONITOR ON PIPE p TO ROLE", "GRANT expects a role name"),
        ("GRANT OWNERSHIP, MONITOR ON PIPE p TO ROLE r", "OWNERSHIP must be granted on its own"),
        ("GRANT MONITOR ON PIPE p TO ROLE r WITH GRANT OPTION", "WITH GRANT OPTION is not supported"),
        ("GRANT ROLE r TO ROLE s", "granting a role to a role is not supported"),
        ("GRANT ROLE r TO USER", "GRANT ROLE expects a user name"),
        ("REVOKE ROLE r TO USER u", "REVOKE ROLE expects FROM USER <user>"),
        ("REVOKE GRANT OPTION FOR MONITOR ON PIPE p FROM ROLE r", "grant options are not supported"),
        ("REVOKE MONITOR ON PIPE p TO ROLE r", "REVOKE expects FROM ROLE <role>"),
        ("SHOW GRANTS", "SHOW GRANTS expects TO ROLE r, TO USER u or ON PIPE p"),
        ("SHOW GRANTS OF ROLE r", "unexpected 'OF'"),
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


def test_role_grants_to_users() -> None:
    assert parse("GRANT ROLE etl TO USER alice;") == GrantRole("ETL", "ALICE")
    assert parse('revoke role "Etl" from user alice') == RevokeRole("Etl", "ALICE")


def test_pipe_privileges_are_qualified_and_normalised() -> None:
    s = parse("grant monitor, operate, MONITOR on pipe raw.p to role etl")
    assert s == GrantPrivileges(["OPERATE", "MONITOR"], Name("FLOE", "RAW", "P"), "ETL")
    s = parse('GRANT ALL PRIVILEGES ON PIPE db.s."p" TO ROLE r')
    assert s == GrantPrivileges(["OPERATE", "MONITOR"], Name("DB", "S", "p"), "R")
    assert parse("GRANT ALL ON PIPE p TO ROLE r", Defaults("D", "S")) == GrantPrivileges(
        ["OPERATE", "MONITOR"], Name("D", "S", "P"), "R"
    )
    s = parse("GRANT OWNERSHIP ON PIPE p TO ROLE etl REVOKE CURRENT GRANTS")
    assert s == GrantPrivileges(["OWNERSHIP"], Name("FLOE", "PUBLIC", "P"), "ETL", "REVOKE")
    s = parse("GRANT OWNERSHIP ON PIPE p TO ROLE etl COPY CURRENT GRANTS;")
    assert isinstance(s, GrantPrivileges) and s.current_grants == "COPY"


def test_revoke_pipe_privileges() -> None:
    s = parse("REVOKE OPERATE ON PIPE p FROM ROLE etl")
    assert s == RevokePrivileges(["OPERATE"], Name("FLOE", "PUBLIC", "P"), "ETL")
    s = parse("revoke all privileges on pipe p from role etl restrict;")
    assert s == RevokePrivileges(["OPERATE", "MONITOR"], Name("FLOE", "PUBLIC", "P"), "ETL")
    # The parser accepts it so the executor can say how ownership moves instead.
    s = parse("REVOKE OWNERSHIP ON PIPE p FROM ROLE etl")
    assert isinstance(s, RevokePrivileges) and s.privileges == ["OWNERSHIP"]


def test_show_and_describe() -> None:
    assert parse("SHOW USERS") == ShowUsers()
    assert parse("show users like 'AL%';") == ShowUsers("AL%")
    assert parse("SHOW ROLES LIKE 'it''s'") == ShowRoles("it's")
    assert parse("SHOW GRANTS TO ROLE etl") == ShowGrantsToRole("ETL")
    assert parse('SHOW GRANTS TO USER "al"') == ShowGrantsToUser("al")
    assert parse("show grants on pipe s.p") == ShowGrantsOnPipe(Name("FLOE", "S", "P"))
    assert parse("DESC USER alice") == DescribeUser("ALICE")
    assert parse("DESCRIBE USER alice;") == DescribeUser("ALICE")
    # The catalog SHOWs are unchanged.
    assert parse("SHOW PIPES LIKE 'x%'") == Show("PIPE", "x%")


def test_other_statements_are_not_access_statements() -> None:
    for sql in ("SELECT 1", "CREATE TABLE t (a INT)", "SHOW PIPES", "DESC PIPE p", "CREATE USERS_X"):
        assert access.parse(sql, Defaults()) is None
