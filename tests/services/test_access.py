"""Access control on every object, through the SQL executor against the real Redis: the issue's
attempt, the role hierarchy, ownership, future grants, SHOW filtering and storage integrations."""

from __future__ import annotations

from typing import Any

import pytest

from floe.catalog import ADMIN_ROLE, Stage, Table, User
from floe.errors import ObjectNotFound, PermissionDenied, SqlError
from services.auth import Principal
from services.sql import SqlExecutor

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
INTEGRATION = (
    "CREATE STORAGE INTEGRATION {name} TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' ENABLED = TRUE "
    "STORAGE_ALLOWED_LOCATIONS = ({allowed}){blocked}"
)


def run(ex: SqlExecutor, sql: str, principal: Principal = ADMIN) -> list[dict[str, Any]]:
    return ex.execute(sql, principal).records()


def user(ex: SqlExecutor, name: str, *roles: str) -> Principal:
    """A user holding ``roles`` (created if missing), as it signs in."""
    for role in roles:
        run(ex, f"CREATE ROLE IF NOT EXISTS {role}")
    run(ex, f"CREATE USER IF NOT EXISTS {name}" + (f" DEFAULT_ROLE = {roles[0]}" if roles else ""))
    for role in roles:
        run(ex, f"GRANT ROLE {role} TO USER {name}")
    return Principal.of(ex.catalog.get(User, name.upper()))


def integration(ex: SqlExecutor, name: str, allowed: str, blocked: str = "") -> None:
    tail = f" STORAGE_BLOCKED_LOCATIONS = ({blocked})" if blocked else ""
    run(ex, INTEGRATION.format(name=name, allowed=allowed, blocked=tail))


def names(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(str(r["name"]) for r in rows)


@pytest.fixture
def world(ex: SqlExecutor) -> SqlExecutor:
    """An ACCOUNTADMIN-made table with a row-less pipe setup: an integration, a stage and a table."""
    integration(ex, "lake", "'s3://lake/'")
    run(ex, "CREATE STAGE st URL = 's3://lake/in/' STORAGE_INTEGRATION = lake")
    run(ex, "CREATE TABLE t (a INT)")
    return ex


def test_the_attempt_from_the_issue_fails_at_every_step(world: SqlExecutor) -> None:
    """A user with only PUBLIC: no SELECT, no DROP of another role's table, no CREATE TABLE, no
    stage on a bucket Floe can reach, no COPY_HISTORY."""
    mallory = user(world, "mallory")
    with pytest.raises(ObjectNotFound, match="does not exist or not authorized"):
        run(world, "SELECT * FROM t", mallory)
    with pytest.raises(ObjectNotFound):
        run(world, "DROP TABLE t", mallory)
    assert world.catalog.find(Table, "FLOE.PUBLIC.T") is not None
    # PUBLIC has no USAGE on the database: for mallory, the schema is not there at all.
    with pytest.raises(ObjectNotFound, match="Database 'FLOE'"):
        run(world, "CREATE TABLE mine (a INT)", mallory)
    with pytest.raises(ObjectNotFound):
        run(world, "CREATE STAGE evil URL = 's3://lake/secret/' STORAGE_INTEGRATION = lake", mallory)
    with pytest.raises(ObjectNotFound):
        run(
            world,
            "SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => 't', "
            "START_TIME => DATEADD(hours, -1, CURRENT_TIMESTAMP())))",
            mallory,
        )
    # Even with USAGE and CREATE on the schema, a stage needs an integration it may use.
    run(world, "GRANT USAGE ON DATABASE floe TO ROLE public")
    run(world, "GRANT USAGE, CREATE STAGE, CREATE TABLE ON SCHEMA floe.public TO ROLE public")
    assert run(world, "CREATE TABLE mine (a INT)", mallory)[0]["STATUS"] == "Table MINE successfully created."
    with pytest.raises(PermissionDenied, match="needs STORAGE_INTEGRATION"):
        run(world, "CREATE STAGE evil URL = 's3://lake/secret/'", mallory)
    with pytest.raises(ObjectNotFound, match="Integration 'LAKE'"):
        run(world, "CREATE STAGE evil URL = 's3://lake/secret/' STORAGE_INTEGRATION = lake", mallory)
    # Now visible but not hers: the table of another role is refused with 003001, not hidden.
    run(world, "GRANT SELECT ON TABLE t TO ROLE public")
    with pytest.raises(PermissionDenied, match="Insufficient privileges to operate on table 'T'") as info:
        run(world, "DROP TABLE t", mallory)
    assert (info.value.code, info.value.sql_state) == ("003001", "42501")
    assert run(world, "SELECT COUNT(*) AS n FROM t", mallory) == [{"N": 0}]


def test_storage_integrations_bound_where_stages_read(world: SqlExecutor) -> None:
    ex = world
    integration(ex, "part", "'s3://lake/open/', 's3://other/'", blocked="'s3://lake/open/private/'")
    run(ex, "CREATE ROLE loader")
    run(ex, "GRANT USAGE ON DATABASE floe TO ROLE loader")
    run(ex, "GRANT USAGE, CREATE STAGE ON SCHEMA floe.public TO ROLE loader")
    run(ex, "GRANT USAGE ON INTEGRATION part TO ROLE loader")
    loader = user(ex, "lou", "loader")
    run(ex, "CREATE STAGE ok URL = 's3://lake/open/data/' STORAGE_INTEGRATION = part", loader)
    assert ex.catalog.get(Stage, "FLOE.PUBLIC.OK").owner == "LOADER"
    for url in ("s3://lake/", "s3://lake/opened/", "s3://lake/open/private/x/", "s3://third/"):
        with pytest.raises(PermissionDenied, match="is not allowed by integration 'PART'"):
            run(ex, f"CREATE STAGE bad URL = '{url}' STORAGE_INTEGRATION = part", loader)
    # The tables bucket is never a stage location, whoever asks and whatever the integration says.
    integration(ex, "everything", "'*'")
    tables = ex.settings.pipeline.tables_bucket
    with pytest.raises(PermissionDenied, match="tables bucket"):
        run(ex, f"CREATE STAGE blobs URL = 's3://{tables}/' STORAGE_INTEGRATION = everything")
    with pytest.raises(SqlError, match="tables bucket"):
        integration(ex, "sneaky", f"'s3://{tables}/x/'")
    # Only ACCOUNTADMIN creates integrations; USAGE is what others get.
    with pytest.raises(PermissionDenied, match="account"):
        run(ex, INTEGRATION.format(name="mine", allowed="'s3://lake/'", blocked=""), loader)
    assert names(run(ex, "SHOW INTEGRATIONS", loader)) == ["PART"]
    assert names(run(ex, "SHOW INTEGRATIONS")) == ["EVERYTHING", "FLOE_TESTS", "LAKE", "PART"]


def test_alter_integration_moves_the_bound_for_new_stages_and_pipes(world: SqlExecutor) -> None:
    ex = world
    desc = {r["property"]: r["value"] for r in run(ex, "DESC INTEGRATION lake")}
    assert desc["STORAGE_BLOCKED_LOCATIONS"] == ""
    run(ex, "ALTER STORAGE INTEGRATION lake SET STORAGE_BLOCKED_LOCATIONS = ('s3://lake/in/') COMMENT = 'n'")
    desc = {r["property"]: r["value"] for r in run(ex, "DESC INTEGRATION lake")}
    assert (desc["STORAGE_BLOCKED_LOCATIONS"], desc["COMMENT"]) == ("s3://lake/in/", "n")
    with pytest.raises(PermissionDenied, match="is not allowed by integration 'LAKE'"):
        run(ex, "CREATE STAGE again URL = 's3://lake/in/x/' STORAGE_INTEGRATION = lake")
    # The stage made before the change stays, but no new pipe may read it.
    with pytest.raises(PermissionDenied, match="is not allowed by integration 'LAKE'"):
        run(ex, "CREATE PIPE p AS COPY INTO t FROM @st")
    run(ex, "ALTER INTEGRATION lake UNSET STORAGE_BLOCKED_LOCATIONS, COMMENT")
    desc = {r["property"]: r["value"] for r in run(ex, "DESC INTEGRATION lake")}
    assert (desc["STORAGE_BLOCKED_LOCATIONS"], desc["COMMENT"]) == ("", None)
    run(ex, "CREATE PIPE p AS COPY INTO t FROM @st")
    run(ex, "ALTER INTEGRATION lake SET ENABLED = FALSE")
    with pytest.raises(SqlError, match="disabled"):
        run(ex, "CREATE OR REPLACE PIPE p AS COPY INTO t FROM @st")
    with pytest.raises(SqlError, match="tables bucket"):
        run(
            ex,
            f"ALTER INTEGRATION lake SET STORAGE_ALLOWED_LOCATIONS = ('s3://{ex.settings.pipeline.tables_bucket}/')",
        )
    assert run(ex, "ALTER INTEGRATION IF EXISTS ghost SET ENABLED = TRUE")[0]["STATUS"].endswith("succeeded.")
    # Only the owner alters it; USAGE is not enough.
    run(ex, "CREATE ROLE loader")
    run(ex, "GRANT USAGE ON INTEGRATION lake TO ROLE loader")
    with pytest.raises(PermissionDenied, match="integration 'LAKE'"):
        run(ex, "ALTER INTEGRATION lake SET ENABLED = TRUE", user(ex, "lou", "loader"))


def test_show_grants_of_role_lists_its_holders(ex: SqlExecutor) -> None:
    run(ex, "CREATE ROLE analyst")
    run(ex, "CREATE ROLE team")
    run(ex, "GRANT ROLE analyst TO ROLE team")
    ann = user(ex, "ann", "analyst")
    rows = run(ex, "SHOW GRANTS OF ROLE analyst")
    assert [(r["granted_to"], r["grantee_name"]) for r in rows] == [("ROLE", "TEAM"), ("USER", "ANN")]
    assert {r["role"] for r in rows} == {"ANALYST"}
    # A holder may list its own role's holders, not another role's.
    assert len(run(ex, "SHOW GRANTS OF ROLE analyst", ann)) == 2
    with pytest.raises(PermissionDenied, match="role 'TEAM'"):
        run(ex, "SHOW GRANTS OF ROLE team", ann)
    with pytest.raises(ObjectNotFound, match="GHOST"):
        run(ex, "SHOW GRANTS OF ROLE ghost")


def test_a_stage_without_integration_is_allowed_only_by_the_setting(ex: SqlExecutor) -> None:
    with pytest.raises(PermissionDenied, match="STORAGE_INTEGRATION"):
        run(ex, "CREATE STAGE loose URL = 's3://lake/in/'")
    open_ex = SqlExecutor(ex.settings.model_copy(update={"stages_without_integration": True}), ex.redis)
    run(open_ex, "CREATE STAGE loose URL = 's3://lake/in/'")
    with pytest.raises(PermissionDenied, match="tables bucket"):
        run(open_ex, f"CREATE STAGE blobs URL = 's3://{ex.settings.pipeline.tables_bucket}/'")


def test_privileges_inherit_up_the_role_hierarchy(world: SqlExecutor) -> None:
    ex = world
    run(ex, "CREATE ROLE reader")
    run(ex, "CREATE ROLE analyst")
    run(ex, "CREATE ROLE lead")
    run(ex, "GRANT USAGE ON DATABASE floe TO ROLE reader")
    run(ex, "GRANT USAGE ON SCHEMA floe.public TO ROLE reader")
    run(ex, "GRANT SELECT ON TABLE t TO ROLE reader")
    run(ex, "GRANT ROLE reader TO ROLE analyst")
    run(ex, "GRANT ROLE analyst TO ROLE lead")
    lea = user(ex, "lea", "lead")
    assert run(ex, "SELECT COUNT(*) AS n FROM t", lea) == [{"N": 0}]
    with pytest.raises(SqlError, match="cycle"):
        run(ex, "GRANT ROLE lead TO ROLE reader")
    run(ex, "REVOKE ROLE reader FROM ROLE analyst")
    with pytest.raises(ObjectNotFound):
        run(ex, "SELECT COUNT(*) AS n FROM t", Principal.of(ex.catalog.get(User, "LEA")))


def test_future_grants_reach_new_tables_only(world: SqlExecutor) -> None:
    ex = world
    run(ex, "CREATE ROLE bi")
    run(ex, "GRANT USAGE ON DATABASE floe TO ROLE bi")
    run(ex, "GRANT USAGE ON SCHEMA floe.public TO ROLE bi")
    run(ex, "GRANT SELECT ON FUTURE TABLES IN SCHEMA floe.public TO ROLE bi")
    bo = user(ex, "bo", "bi")
    with pytest.raises(ObjectNotFound):
        run(ex, "SELECT * FROM t", bo)  # it existed before the future grant
    run(ex, "CREATE TABLE later (a INT)")
    assert run(ex, "SELECT COUNT(*) AS n FROM later", bo) == [{"N": 0}]
    (future,) = run(ex, "SHOW FUTURE GRANTS IN SCHEMA floe.public")
    assert (future["privilege"], future["grant_on"], future["grantee_name"]) == ("SELECT", "TABLE", "BI")
    run(ex, "GRANT SELECT ON ALL TABLES IN SCHEMA floe.public TO ROLE bi")
    assert run(ex, "SELECT COUNT(*) AS n FROM t", bo) == [{"N": 0}]


def test_ownership_moves_with_grant_ownership(world: SqlExecutor) -> None:
    ex = world
    run(ex, "CREATE ROLE team")
    run(ex, "GRANT USAGE ON DATABASE floe TO ROLE team")
    run(ex, "GRANT USAGE ON SCHEMA floe.public TO ROLE team")
    tia = user(ex, "tia", "team")
    with pytest.raises(ObjectNotFound):
        run(ex, "DROP TABLE t", tia)
    run(ex, "GRANT SELECT ON TABLE t TO ROLE public")
    run(ex, "GRANT OWNERSHIP ON TABLE t TO ROLE team REVOKE CURRENT GRANTS")
    assert ex.catalog.get(Table, "FLOE.PUBLIC.T").owner == "TEAM"
    grants = run(ex, "SHOW GRANTS ON TABLE t")
    assert [(g["privilege"], g["grantee_name"]) for g in grants] == [("OWNERSHIP", "TEAM")]
    # The owner grants on what it owns, without MANAGE GRANTS.
    run(ex, "GRANT SELECT ON TABLE t TO ROLE public", tia)
    assert run(ex, "DROP TABLE t", tia)[0]["STATUS"] == "T successfully dropped."


def test_show_lists_only_what_the_role_may_see(world: SqlExecutor) -> None:
    ex = world
    run(ex, "CREATE TABLE hidden (a INT)")
    run(ex, "CREATE ROLE viewer")
    run(ex, "GRANT USAGE ON DATABASE floe TO ROLE viewer")
    run(ex, "GRANT USAGE ON SCHEMA floe.public TO ROLE viewer")
    run(ex, "GRANT SELECT ON TABLE t TO ROLE viewer")
    vic = user(ex, "vic", "viewer")
    assert names(run(ex, "SHOW TABLES", vic)) == ["T"]
    assert names(run(ex, "SHOW TABLES")) == ["HIDDEN", "T"]
    assert names(run(ex, "SHOW STAGES", vic)) == []
    assert names(run(ex, "SHOW DATABASES", vic)) == ["FLOE"]
    assert "T" in names(run(ex, "SHOW TABLES IN SCHEMA floe.public", vic))
    with pytest.raises(ObjectNotFound):
        run(ex, "DESC TABLE hidden", vic)


def test_system_roles_divide_the_duties(ex: SqlExecutor) -> None:
    uma = user(ex, "uma", "useradmin")
    sam = user(ex, "sam", "sysadmin")
    sec = user(ex, "sec", "securityadmin")
    run(ex, "CREATE ROLE helpers", uma)
    run(ex, "CREATE USER helper", uma)
    run(ex, "GRANT ROLE helpers TO USER helper", uma)  # it owns both
    with pytest.raises(PermissionDenied):
        run(ex, "CREATE DATABASE nope", uma)
    run(ex, "CREATE DATABASE sales", sam)
    assert {r["name"]: r["owner"] for r in run(ex, "SHOW DATABASES", sam)}["SALES"] == "SYSADMIN"
    with pytest.raises(PermissionDenied):
        run(ex, "CREATE ROLE nope", sam)
    # SECURITYADMIN holds MANAGE GRANTS, and USERADMIN's duties through the hierarchy.
    run(ex, "GRANT USAGE ON DATABASE sales TO ROLE helpers", sec)
    run(ex, "CREATE ROLE audit", sec)
    with pytest.raises(PermissionDenied, match="ACCOUNTADMIN"):
        run(ex, "GRANT ROLE accountadmin TO USER helper", sec)
    for who in (uma, sam, sec):
        with pytest.raises(PermissionDenied):
            run(ex, INTEGRATION.format(name="x", allowed="'s3://a/'", blocked=""), who)


def test_use_role_picks_the_owner_and_the_active_privileges(world: SqlExecutor) -> None:
    ex = world
    for role in ("a", "b"):
        run(ex, f"CREATE ROLE {role}")
        run(ex, f"GRANT USAGE ON DATABASE floe TO ROLE {role}")
        run(ex, f"GRANT USAGE, CREATE TABLE ON SCHEMA floe.public TO ROLE {role}")
    run(ex, "GRANT SELECT ON TABLE t TO ROLE b")
    ann = user(ex, "ann", "a", "b")
    run(ex, "USE ROLE b; CREATE TABLE tb (x INT)", ann)
    assert ex.catalog.get(Table, "FLOE.PUBLIC.TB").owner == "B"
    run(ex, "CREATE TABLE ta (x INT)", ann)  # the default role
    assert ex.catalog.get(Table, "FLOE.PUBLIC.TA").owner == "A"
    # Secondary roles ALL (the default) lend b's SELECT to a session acting as a; NONE does not.
    assert run(ex, "USE ROLE a; SELECT COUNT(*) AS n FROM t", ann) == [{"N": 0}]
    with pytest.raises(ObjectNotFound):
        run(ex, "USE ROLE a; USE SECONDARY ROLES NONE; SELECT COUNT(*) AS n FROM t", ann)
    with pytest.raises(SqlError, match="not assigned to the executing user") as info:
        run(ex, "USE ROLE accountadmin", ann)
    assert info.value.code == "003013"
    assert ex.execute("SELECT COUNT(*) AS n FROM t", ann, role="b").records() == [{"N": 0}]
