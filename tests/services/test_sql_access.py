"""Users, roles and pipe grants through the SQL executor, against the real Redis.

Access to every other kind of object, the role hierarchy and integrations: tests/services/test_access.py."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from floe.catalog import ADMIN_ROLE, Pipe, Role, User
from floe.errors import ObjectNotFound, PermissionDenied, SqlError
from floe.keypair import fingerprint, new_private_key, public_key_body
from services.auth import Principal
from services.sql import SqlExecutor

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))


@pytest.fixture(scope="module")
def keys() -> list[rsa.RSAPrivateKey]:
    """A few key pairs, generated once because RSA key generation is slow."""
    return [new_private_key() for _ in range(3)]


def run(ex: SqlExecutor, sql: str, principal: Principal = ADMIN) -> list[dict[str, Any]]:
    return ex.execute(sql, principal).records()


def status(ex: SqlExecutor, sql: str, principal: Principal = ADMIN) -> str:
    return str(run(ex, sql, principal)[0]["STATUS"])


def as_user(ex: SqlExecutor, name: str) -> Principal:
    """The principal a user authenticates as, from its current catalog entry."""
    return Principal.of(ex.catalog.get(User, name))


def body(key: rsa.RSAPrivateKey) -> str:
    return public_key_body(key.public_key())


def make_pipe(ex: SqlExecutor, name: str = "p", principal: Principal = ADMIN, replace: bool = False) -> None:
    """A stage, a table and a pipe; AUTO_INGEST = FALSE, so S3 is never called."""
    run(ex, "CREATE STAGE IF NOT EXISTS st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests")
    run(ex, "CREATE TABLE IF NOT EXISTS t (a INT, b VARCHAR)")
    head = "CREATE OR REPLACE PIPE" if replace else "CREATE PIPE"
    run(ex, f"{head} {name} AUTO_INGEST = FALSE AS COPY INTO t FROM @st", principal)


def make_user(ex: SqlExecutor, name: str, *roles: str, extra: str = "") -> Principal:
    """A user holding ``roles``, each with USAGE on the default database and schema."""
    for role in roles:
        status(ex, f"CREATE ROLE IF NOT EXISTS {role}")
        status(ex, f"GRANT USAGE ON DATABASE floe TO ROLE {role}")
        status(ex, f"GRANT USAGE ON SCHEMA floe.public TO ROLE {role}")
    status(ex, f"CREATE USER {name} {extra}")
    for role in roles:
        status(ex, f"GRANT ROLE {role} TO USER {name}")
    return as_user(ex, name.upper())


def pipe_owner(ex: SqlExecutor, name: str = "P") -> str:
    (row,) = [r for r in run(ex, "SHOW PIPES") if r["name"] == name]
    return str(row["owner"])


def test_admin_creates_roles_users_and_grants(ex: SqlExecutor, keys: list[rsa.RSAPrivateKey]) -> None:
    assert status(ex, "CREATE ROLE etl COMMENT = 'loads'") == "Role ETL successfully created."
    assert status(ex, "CREATE ROLE IF NOT EXISTS etl") == "ETL already exists, statement succeeded."
    key_body = body(keys[0])
    assert (
        status(
            ex,
            f"CREATE USER alice COMMENT = 'first' RSA_PUBLIC_KEY = '{key_body}' DEFAULT_ROLE = etl "
            "PASSWORD = 'ignored'",
        )
        == "User ALICE successfully created."
    )
    assert status(ex, "GRANT ROLE etl TO USER alice") == "Statement executed successfully."
    status(ex, "GRANT ROLE etl TO USER alice")  # granting twice changes nothing

    alice = ex.catalog.get(User, "ALICE")
    assert alice.rsa_public_key == key_body and alice.default_role == "ETL" and alice.roles == ["ETL"]

    users = run(ex, "SHOW USERS LIKE 'al%'")
    assert [u["name"] for u in users] == ["ALICE"]
    fp = fingerprint(keys[0].public_key())
    assert users[0]["has_rsa_public_key"] == "true" and users[0]["rsa_public_key_fp"] == fp
    assert users[0]["rsa_public_key_2_fp"] is None and users[0]["default_role"] == "ETL"
    described = {r["property"]: r["value"] for r in run(ex, "DESC USER alice")}
    assert described == {
        "NAME": "ALICE",
        "DEFAULT_ROLE": "ETL",
        "OWNER": ADMIN_ROLE,
        "RSA_PUBLIC_KEY_FP": fp,
        "RSA_PUBLIC_KEY_2_FP": None,
    }
    shown = str(run(ex, "SHOW USERS")) + str(run(ex, "DESC USER alice"))
    assert key_body[40:80] not in shown  # fingerprints only, never key bodies

    roles = {r["name"]: r for r in run(ex, "SHOW ROLES")}
    assert set(roles) == {"ACCOUNTADMIN", "SECURITYADMIN", "USERADMIN", "SYSADMIN", "PUBLIC", "ETL"}
    assert roles["ETL"]["assigned_to_users"] == 1 and roles["ETL"]["owner"] == ADMIN_ROLE
    assert [r["name"] for r in run(ex, "SHOW ROLES LIKE 'e%'")] == ["ETL"]
    (grant,) = run(ex, "SHOW GRANTS TO USER alice")
    assert grant["created_on"] and {k: v for k, v in grant.items() if k != "created_on"} == {
        "role": "ETL",
        "granted_to": "USER",
        "grantee_name": "ALICE",
    }

    # A PEM key is accepted and stored as Snowflake stores it: base64 DER without armour.
    pem = (
        keys[1]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    status(ex, f"CREATE USER bob RSA_PUBLIC_KEY = '{pem}'")
    assert ex.catalog.get(User, "BOB").rsa_public_key == body(keys[1])


def test_user_and_role_statements_check_their_targets(ex: SqlExecutor) -> None:
    status(ex, "CREATE USER alice")
    with pytest.raises(SqlError, match="Object 'ALICE' already exists"):
        run(ex, "CREATE USER alice")
    assert status(ex, "CREATE USER IF NOT EXISTS alice") == "ALICE already exists, statement succeeded."
    with pytest.raises(ObjectNotFound, match="Role 'NOPE' does not exist"):
        run(ex, "CREATE USER carol DEFAULT_ROLE = nope")
    assert ex.catalog.find(User, "CAROL") is None
    with pytest.raises(ObjectNotFound, match="Role 'NOPE'"):
        run(ex, "GRANT ROLE nope TO USER alice")
    with pytest.raises(ObjectNotFound, match="Role 'NOPE'"):
        run(ex, "ALTER USER alice SET DEFAULT_ROLE = nope")
    status(ex, "CREATE ROLE etl")
    with pytest.raises(ObjectNotFound, match="User 'NOBODY'"):
        run(ex, "GRANT ROLE etl TO USER nobody")
    # Built-in roles exist without CREATE ROLE and can be defaults and grants.
    status(ex, "ALTER USER alice SET DEFAULT_ROLE = public")
    status(ex, "GRANT ROLE accountadmin TO USER alice")
    assert as_user(ex, "ALICE").is_admin
    assert status(ex, "REVOKE ROLE accountadmin FROM USER alice") == "Statement executed successfully."
    assert not as_user(ex, "ALICE").is_admin
    for sql in ("CREATE ROLE public", "CREATE OR REPLACE ROLE accountadmin", "DROP ROLE accountadmin"):
        with pytest.raises(SqlError, match="system role"):
            run(ex, sql)
    assert status(ex, "CREATE ROLE IF NOT EXISTS public") == "PUBLIC already exists, statement succeeded."
    assert status(ex, "DROP USER alice") == "ALICE successfully dropped."
    assert status(ex, "DROP USER IF EXISTS alice").startswith("Drop statement executed successfully")
    with pytest.raises(ObjectNotFound, match="User 'ALICE'"):
        run(ex, "DROP USER alice")
    with pytest.raises(ObjectNotFound, match="Role 'NOPE'"):
        run(ex, "DROP ROLE nope")
    assert (
        status(ex, "ALTER USER IF EXISTS ghost SET DEFAULT_ROLE = etl") == "Statement executed successfully."
    )


def test_a_user_without_admin_roles_is_refused_user_role_and_grant_statements(ex: SqlExecutor) -> None:
    bob = make_user(ex, "bob", "etl")
    status(ex, "CREATE USER alice")
    make_pipe(ex)
    # Seen but not bob's to change: Snowflake's 003001. Not seen at all (another user, a pipe bob holds
    # nothing on): "does not exist or not authorized", so bob cannot probe for names.
    refused: list[tuple[str, type[Exception]]] = [
        ("CREATE USER mallory", PermissionDenied),
        ("ALTER USER alice SET DEFAULT_ROLE = etl", ObjectNotFound),
        ("DROP USER alice", ObjectNotFound),
        ("CREATE ROLE r2", PermissionDenied),
        ("DROP ROLE etl", PermissionDenied),
        ("GRANT ROLE accountadmin TO USER bob", PermissionDenied),
        ("REVOKE ROLE etl FROM USER alice", PermissionDenied),
        ("GRANT MONITOR ON PIPE p TO ROLE etl", ObjectNotFound),
        ("REVOKE MONITOR ON PIPE p FROM ROLE etl", ObjectNotFound),
        ("SHOW GRANTS ON PIPE p", ObjectNotFound),
        ("SHOW GRANTS TO USER alice", ObjectNotFound),
        ("SHOW GRANTS TO ROLE accountadmin", PermissionDenied),
        ("DESC USER alice", ObjectNotFound),
        # Nor create in a schema it only uses.
        ("CREATE TABLE t2 (a INT)", PermissionDenied),
    ]
    for sql, kind in refused:
        with pytest.raises(kind) as info:
            run(ex, sql, bob)
        assert info.value.code == ("003001" if kind is PermissionDenied else "002003"), sql
    assert ex.catalog.find(User, "MALLORY") is None
    assert ex.catalog.get(User, "BOB").roles == ["ETL"]
    # On itself and its own roles a user may look; SHOW USERS lists only what it may see.
    assert [r["role"] for r in run(ex, "SHOW GRANTS TO USER bob", bob)] == ["ETL"]
    assert {r["property"]: r["value"] for r in run(ex, "DESC USER bob", bob)}["NAME"] == "BOB"
    assert [r["privilege"] for r in run(ex, "SHOW GRANTS TO ROLE etl", bob)] == ["USAGE", "USAGE"]
    assert [u["name"] for u in run(ex, "SHOW USERS", bob)] == ["BOB"]
    # Its own keys and default role a user changes itself (Snowflake's self-service properties).
    status(ex, "ALTER USER bob UNSET DEFAULT_ROLE", bob)
    assert ex.catalog.get(User, "BOB").default_role is None


def test_operate_privilege_controls_pausing(ex: SqlExecutor) -> None:
    make_pipe(ex)
    watcher = make_user(ex, "watcher", "mon")
    operator = make_user(ex, "operator", "ops")
    status(ex, "GRANT MONITOR ON PIPE p TO ROLE mon")
    status(ex, "GRANT OPERATE ON PIPE p TO ROLE ops")
    with pytest.raises(PermissionDenied, match="OPERATE or OWNERSHIP"):
        run(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE", watcher)
    assert not ex.catalog.get(Pipe, "FLOE.PUBLIC.P").paused
    nobody = make_user(ex, "nobody")
    with pytest.raises(ObjectNotFound):  # PUBLIC cannot even use the database
        run(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE", nobody)
    status(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE", operator)
    assert ex.catalog.get(Pipe, "FLOE.PUBLIC.P").paused
    # OPERATE is not OWNERSHIP: dropping or replacing the pipe stays with its owner.
    with pytest.raises(PermissionDenied, match="OWNERSHIP"):
        run(ex, "DROP PIPE p", operator)
    with pytest.raises(PermissionDenied, match="OWNERSHIP"):
        make_pipe(ex, principal=operator, replace=True)
    assert ex.catalog.find(Pipe, "FLOE.PUBLIC.P") is not None

    grants = run(ex, "SHOW GRANTS ON PIPE p")
    assert [(g["privilege"], g["grantee_name"]) for g in grants] == [
        ("OWNERSHIP", "ACCOUNTADMIN"),
        ("OPERATE", "OPS"),
        ("MONITOR", "MON"),
    ]
    assert {(g["granted_on"], g["name"], g["granted_to"]) for g in grants} == {
        ("PIPE", "FLOE.PUBLIC.P", "ROLE")
    }
    status(ex, "REVOKE ALL PRIVILEGES ON PIPE p FROM ROLE ops")
    assert "PIPE FLOE.PUBLIC.P" not in ex.catalog.get(Role, "OPS").grants
    with pytest.raises(ObjectNotFound):  # OPS holds nothing on the pipe any more
        run(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = FALSE", as_user(ex, "OPERATOR"))


def test_grant_ownership_transfers_the_pipe(ex: SqlExecutor) -> None:
    make_pipe(ex)
    assert pipe_owner(ex) == ADMIN_ROLE
    owner = make_user(ex, "owner", "etl")
    with pytest.raises(ObjectNotFound):  # ETL holds nothing on the pipe yet
        run(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE", owner)
    assert status(ex, "GRANT OWNERSHIP ON PIPE p TO ROLE etl") == "Statement executed successfully."
    assert pipe_owner(ex) == "ETL"
    assert [(g["privilege"], g["name"]) for g in run(ex, "SHOW GRANTS TO ROLE etl")] == [
        ("USAGE", "FLOE"),
        ("OWNERSHIP", "FLOE.PUBLIC.P"),
        ("USAGE", "FLOE.PUBLIC"),
    ]
    status(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE", owner)
    with pytest.raises(SqlError, match="OWNERSHIP cannot be revoked"):
        run(ex, "REVOKE OWNERSHIP ON PIPE p FROM ROLE etl")
    with pytest.raises(ObjectNotFound, match="Role 'NOPE'"):
        run(ex, "GRANT OWNERSHIP ON PIPE p TO ROLE nope")
    with pytest.raises(ObjectNotFound, match=r"Pipe 'FLOE\.PUBLIC\.NOPE'"):
        run(ex, "GRANT OWNERSHIP ON PIPE nope TO ROLE etl")
    # The owner may replace its pipe (with what creating one takes), which stays its own, and drop it.
    status(ex, "GRANT CREATE PIPE ON SCHEMA floe.public TO ROLE etl")
    status(ex, "GRANT INSERT ON TABLE t TO ROLE etl")
    status(ex, "GRANT USAGE ON STAGE st TO ROLE etl")
    make_pipe(ex, principal=owner, replace=True)
    assert pipe_owner(ex) == "ETL"
    assert status(ex, "DROP PIPE p", owner) == "P successfully dropped."


def test_replace_keeps_grants_and_drop_pipe_clears_them(ex: SqlExecutor) -> None:
    make_pipe(ex)
    make_pipe(ex, "other")
    status(ex, "CREATE ROLE mon")
    status(ex, "GRANT MONITOR, OPERATE ON PIPE p TO ROLE mon")
    status(ex, "GRANT MONITOR ON PIPE other TO ROLE mon")
    status(ex, "GRANT MONITOR ON PIPE p TO ROLE public")
    old_id = ex.catalog.get(Pipe, "FLOE.PUBLIC.P").id

    make_pipe(ex, replace=True)
    assert ex.catalog.get(Pipe, "FLOE.PUBLIC.P").id != old_id
    assert ex.catalog.get(Role, "MON").grants == {
        "PIPE FLOE.PUBLIC.P": ["OPERATE", "MONITOR"],
        "PIPE FLOE.PUBLIC.OTHER": ["MONITOR"],
    }

    status(ex, "DROP PIPE p")
    assert ex.catalog.get(Role, "MON").grants == {"PIPE FLOE.PUBLIC.OTHER": ["MONITOR"]}
    assert ex.catalog.get(Role, "PUBLIC").grants == {}
    assert [g["name"] for g in run(ex, "SHOW GRANTS TO ROLE mon")] == ["FLOE.PUBLIC.OTHER"]
    # A new pipe of the same name starts without grants.
    make_pipe(ex)
    assert [g["grantee_name"] for g in run(ex, "SHOW GRANTS ON PIPE p")] == [ADMIN_ROLE]


def test_drop_role_removes_it_from_users(ex: SqlExecutor) -> None:
    make_user(ex, "alice", "etl", "ops", extra="DEFAULT_ROLE = etl")
    make_user(ex, "bob", "etl")
    make_pipe(ex)
    status(ex, "GRANT OWNERSHIP ON PIPE p TO ROLE etl")
    assert status(ex, "DROP ROLE etl") == "ETL successfully dropped."
    assert ex.catalog.get(User, "ALICE").roles == ["OPS"]
    assert ex.catalog.get(User, "BOB").roles == []
    assert ex.catalog.find(Role, "ETL") is None
    # Its pipes pass to ACCOUNTADMIN rather than to a role nobody holds.
    assert pipe_owner(ex) == ADMIN_ROLE
    assert [r["role"] for r in run(ex, "SHOW GRANTS TO USER alice")] == ["OPS"]
    # Re-creating the name gives a new role: it is not silently granted again.
    status(ex, "CREATE ROLE etl")
    assert ex.catalog.get(User, "BOB").roles == []


def test_create_pipe_owner_follows_the_creators_roles(ex: SqlExecutor) -> None:
    make_pipe(ex, "admins")
    assert pipe_owner(ex, "ADMINS") == ADMIN_ROLE
    # What creating a pipe takes: CREATE PIPE on the schema, INSERT on the table, USAGE on the stage.
    for role in ("ops", "etl", "public"):
        status(ex, f"CREATE ROLE IF NOT EXISTS {role}")
        status(ex, f"GRANT USAGE ON DATABASE floe TO ROLE {role}")
        status(ex, f"GRANT USAGE, CREATE PIPE ON SCHEMA floe.public TO ROLE {role}")
        status(ex, f"GRANT INSERT ON TABLE t TO ROLE {role}")
        status(ex, f"GRANT USAGE ON STAGE st TO ROLE {role}")
    with_default = make_user(ex, "dora", "ops", "etl", extra="DEFAULT_ROLE = etl")
    make_pipe(ex, "doras", with_default)
    assert pipe_owner(ex, "DORAS") == "ETL"
    status(ex, "CREATE ROLE unused")
    # A DEFAULT_ROLE not granted to the user is not its current role: the first granted one by name is.
    ungranted_default = make_user(ex, "ulf", "ops", "etl", extra="DEFAULT_ROLE = unused")
    make_pipe(ex, "ulfs", ungranted_default)
    assert pipe_owner(ex, "ULFS") == "ETL"
    no_roles = make_user(ex, "nora")
    make_pipe(ex, "noras", no_roles)
    assert pipe_owner(ex, "NORAS") == "PUBLIC"
    # The owner may operate its own pipe without any grant; others may not.
    status(ex, "ALTER PIPE doras SET PIPE_EXECUTION_PAUSED = TRUE", with_default)
    with pytest.raises(ObjectNotFound):
        run(ex, "DROP PIPE doras", no_roles)  # nora holds nothing on it
    status(ex, "GRANT MONITOR ON PIPE admins TO ROLE etl")
    with pytest.raises(PermissionDenied, match="OWNERSHIP"):
        run(ex, "DROP PIPE admins", with_default)  # dora sees it, but does not own it
    # Without INSERT on the table, no pipe into it (SELECT keeps the table visible: 003001).
    status(ex, "GRANT SELECT ON TABLE t TO ROLE public")
    status(ex, "REVOKE INSERT ON TABLE t FROM ROLE public")
    with pytest.raises(PermissionDenied, match="INSERT"):
        make_pipe(ex, "noras2", no_roles)


def test_a_user_rotates_its_own_key_but_not_another_users(
    ex: SqlExecutor, keys: list[rsa.RSAPrivateKey]
) -> None:
    alice = make_user(ex, "alice", extra=f"RSA_PUBLIC_KEY = '{body(keys[0])}'")
    status(ex, f"CREATE USER bob RSA_PUBLIC_KEY = '{body(keys[1])}'")
    assert (
        status(ex, f"ALTER USER alice SET RSA_PUBLIC_KEY_2 = '{body(keys[2])}'", alice)
        == "Statement executed successfully."
    )
    assert status(ex, "ALTER USER alice UNSET RSA_PUBLIC_KEY", alice) == "Statement executed successfully."
    user = ex.catalog.get(User, "ALICE")
    assert user.rsa_public_key is None and user.rsa_public_key_2 == body(keys[2])
    fps = run(ex, "DESC USER alice", alice)
    assert {r["property"]: r["value"] for r in fps}["RSA_PUBLIC_KEY_2_FP"] == fingerprint(
        keys[2].public_key()
    )

    with pytest.raises(ObjectNotFound, match="User 'BOB'"):
        run(ex, f"ALTER USER bob SET RSA_PUBLIC_KEY = '{body(keys[0])}'", alice)
    with pytest.raises(ObjectNotFound):
        run(ex, "ALTER USER bob UNSET RSA_PUBLIC_KEY", alice)
    # A missing target answers as an existing one alice may not see, so she cannot probe for names.
    with pytest.raises(ObjectNotFound):
        run(ex, f"ALTER USER IF EXISTS ghost SET RSA_PUBLIC_KEY = '{body(keys[0])}'", alice)
    assert ex.catalog.get(User, "BOB").rsa_public_key == body(keys[1])
    # The administrator may rotate anyone's key.
    status(ex, f"ALTER USER bob SET RSA_PUBLIC_KEY_2 = '{body(keys[0])}'")
    assert ex.catalog.get(User, "BOB").rsa_public_key_2 == body(keys[0])


def test_an_invalid_key_is_refused_without_echoing_it(ex: SqlExecutor) -> None:
    garbage = "NotAKeyAtAll0123456789abcdefXYZ"
    with pytest.raises(SqlError) as info:
        run(ex, f"CREATE USER alice RSA_PUBLIC_KEY = '{garbage}'")
    assert "RSA_PUBLIC_KEY" in info.value.message and "not valid" in info.value.message
    assert garbage not in str(info.value)
    assert ex.catalog.find(User, "ALICE") is None

    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    small_body = public_key_body(small.public_key())
    status(ex, "CREATE USER alice")
    with pytest.raises(SqlError) as info:
        run(ex, f"ALTER USER alice SET RSA_PUBLIC_KEY_2 = '{small_body}'")
    assert "1024 bits" in info.value.message and small_body[:60] not in str(info.value)
    assert ex.catalog.get(User, "ALICE").rsa_public_key_2 is None
