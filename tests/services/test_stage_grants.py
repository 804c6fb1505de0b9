"""Privileges on stages by kind (decision 84): USAGE on an external stage, READ and WRITE on an
internal one, READ before WRITE. The rules alone (``services.stage_grants``), then GRANT and REVOKE
through the SQL executor against the real Redis: one stage, ALL STAGES in a schema holding both
kinds, and FUTURE STAGES; and the commands that use a stage asking its kind's privilege.

Snowflake's texts: GRANT <privileges> usage notes ("USAGE only applies to external stages. READ |
WRITE only applies to internal stages. In addition, to grant the WRITE privilege on an internal
stage, the READ privilege must first be granted on the stage."), the access control privileges page
(the mirror rule for REVOKE; ALL grants "all applicable privileges"), and the order violation's
error as users quote it (snowflakedb/terraform-provider-snowflake #1593, #2911)."""

from __future__ import annotations

import pytest

from floe.catalog import Stage
from floe.errors import CompilationError, SqlError
from services.sql import SqlExecutor
from services.stage_grants import (
    applicable,
    checked_bulk,
    checked_future,
    checked_grant,
    checked_revoke,
    stage_privileges,
)
from tests.services.test_sql_access import make_user, run, status

INTERNAL = Stage(name="D.S.IN", url="s3://stages/stages/x/", internal=True)
EXTERNAL = Stage(name="D.S.EX", url="s3://lake/in/", storage_integration="I")
ORDER = "Privilege order violation"

# ------------------------------------------------------------------------------------ the rules


@pytest.mark.unit
def test_each_kind_takes_its_own_privileges() -> None:
    assert stage_privileges(INTERNAL) == ("READ", "WRITE")
    assert stage_privileges(EXTERNAL) == ("USAGE",)
    assert checked_grant(INTERNAL, ["READ"], False, []) == ["READ"]
    assert checked_grant(INTERNAL, ["READ", "WRITE"], False, []) == ["READ", "WRITE"]
    assert checked_grant(INTERNAL, ["WRITE"], False, ["READ"]) == ["WRITE"]
    assert checked_grant(EXTERNAL, ["USAGE"], False, []) == ["USAGE"]
    # ALL [PRIVILEGES] is what the kind takes (the parser expanded it to all three).
    assert checked_grant(INTERNAL, ["USAGE", "READ", "WRITE"], True, []) == ["READ", "WRITE"]
    assert checked_grant(EXTERNAL, ["USAGE", "READ", "WRITE"], True, []) == ["USAGE"]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("stage", "privileges", "said"),
    [
        (INTERNAL, ["USAGE"], "invalid privilege 'USAGE' on internal stage 'D.S.IN': an internal stage "),
        (EXTERNAL, ["READ"], "invalid privilege 'READ' on external stage 'D.S.EX': an external stage takes "),
        (EXTERNAL, ["READ", "WRITE"], "READ and WRITE are an internal stage's"),
        (EXTERNAL, ["USAGE", "WRITE"], "invalid privilege 'WRITE'"),
    ],
)
def test_another_kinds_privilege_is_refused(stage: Stage, privileges: list[str], said: str) -> None:
    with pytest.raises(CompilationError, match=said):
        checked_grant(stage, privileges, False, [])


@pytest.mark.unit
def test_write_comes_with_or_after_read_and_goes_with_or_before_it() -> None:
    with pytest.raises(CompilationError, match=f"{ORDER} for stage 'D.S.IN'. READ should be granted") as info:
        checked_grant(INTERNAL, ["WRITE"], False, [])
    assert (info.value.code, info.value.sql_state) == ("003511", "23001")
    with pytest.raises(CompilationError, match="WRITE should be revoked before/simultaneously with READ"):
        checked_revoke(INTERNAL, ["READ"], False, ["READ", "WRITE"])
    assert checked_revoke(INTERNAL, ["READ"], False, ["READ"]) == ["READ"]
    assert checked_revoke(INTERNAL, ["WRITE", "READ"], False, ["READ", "WRITE"]) == ["WRITE", "READ"]
    assert checked_revoke(INTERNAL, ["USAGE", "READ", "WRITE"], True, ["READ", "WRITE"]) == ["READ", "WRITE"]
    # A grant of the other kind made before Floe checked kinds may still be revoked; none other.
    assert checked_revoke(INTERNAL, ["USAGE"], False, ["USAGE"]) == ["USAGE"]
    with pytest.raises(CompilationError, match="invalid privilege 'USAGE' on internal stage"):
        checked_revoke(INTERNAL, ["USAGE"], False, [])


@pytest.mark.unit
def test_bulk_and_future_grants_take_what_applies() -> None:
    assert applicable(INTERNAL, ["USAGE", "READ"]) == ["READ"]
    assert applicable(EXTERNAL, ["USAGE", "READ"]) == ["USAGE"]
    assert applicable(EXTERNAL, ["READ", "WRITE"]) == []
    checked_bulk([(EXTERNAL, []), (INTERNAL, ["READ"])], ["WRITE"])
    with pytest.raises(CompilationError, match=f"{ORDER} for stage 'D.S.IN'"):
        checked_bulk([(EXTERNAL, []), (INTERNAL, [])], ["WRITE"])
    checked_future(["READ", "WRITE"], [], "GRANT")
    checked_future(["WRITE"], ["READ"], "GRANT")
    # The words users quote from Snowflake for a FUTURE grant of WRITE alone.
    with pytest.raises(
        CompilationError,
        match=r"Privilege order violation for the future grants on stage\. READ should be granted "
        r"before/simultaneously with WRITE\.",
    ):
        checked_future(["WRITE"], [], "GRANT")
    with pytest.raises(CompilationError, match="WRITE should be revoked"):
        checked_future(["READ"], ["READ", "WRITE"], "REVOKE")


# ----------------------------------------------------------------------- through the executor


def _stages(ex: SqlExecutor) -> None:
    run(ex, "CREATE STAGE inbox")  # internal
    run(ex, "CREATE STAGE lake URL = 's3://lake-bucket/in/' STORAGE_INTEGRATION = floe_tests")
    run(ex, "CREATE ROLE IF NOT EXISTS loader")


def held(ex: SqlExecutor, stage: str, role: str = "LOADER") -> list[str]:
    rows = run(ex, f"SHOW GRANTS ON STAGE {stage}")
    return sorted(str(r["privilege"]) for r in rows if r["grantee_name"] == role)


def refused(ex: SqlExecutor, sql: str) -> SqlError:
    with pytest.raises(SqlError) as info:
        run(ex, sql)
    return info.value


@pytest.mark.integration
def test_grant_and_revoke_on_one_stage(ex: SqlExecutor) -> None:
    _stages(ex)
    err = refused(ex, "GRANT USAGE ON STAGE inbox TO ROLE loader")
    assert "invalid privilege 'USAGE' on internal stage 'FLOE.PUBLIC.INBOX'" in err.message
    assert (
        "invalid privilege 'READ' on external stage"
        in refused(ex, "GRANT READ ON STAGE lake TO ROLE loader").message
    )
    err = refused(ex, "GRANT WRITE ON STAGE inbox TO ROLE loader")
    assert (err.code, err.sql_state) == ("003511", "23001") and "READ should be granted" in err.message
    assert held(ex, "inbox") == [] and held(ex, "lake") == []  # a refused grant grants nothing

    status(ex, "GRANT READ ON STAGE inbox TO ROLE loader")
    status(ex, "GRANT WRITE ON STAGE inbox TO ROLE loader")  # READ first: now it may
    status(ex, "GRANT USAGE ON STAGE lake TO ROLE loader")
    assert held(ex, "inbox") == ["READ", "WRITE"] and held(ex, "lake") == ["USAGE"]
    err = refused(ex, "REVOKE READ ON STAGE inbox FROM ROLE loader")
    assert err.code == "003511" and "WRITE should be revoked" in err.message
    status(ex, "REVOKE WRITE ON STAGE inbox FROM ROLE loader")
    status(ex, "REVOKE READ ON STAGE inbox FROM ROLE loader")
    assert held(ex, "inbox") == []

    # ALL [PRIVILEGES] grants what the kind takes, and REVOKE ALL takes it back.
    status(ex, "GRANT ALL PRIVILEGES ON STAGE inbox TO ROLE loader")
    status(ex, "GRANT ALL ON STAGE lake TO ROLE loader")
    assert held(ex, "inbox") == ["READ", "WRITE"] and held(ex, "lake") == ["USAGE"]
    status(ex, "REVOKE ALL ON STAGE inbox FROM ROLE loader")
    status(ex, "REVOKE ALL ON STAGE lake FROM ROLE loader")
    assert held(ex, "inbox") == [] and held(ex, "lake") == []


@pytest.mark.integration
def test_all_and_future_stages_give_each_kind_its_own(ex: SqlExecutor) -> None:
    _stages(ex)
    status(ex, "GRANT READ ON ALL STAGES IN SCHEMA floe.public TO ROLE loader")
    assert held(ex, "inbox") == ["READ"] and held(ex, "lake") == []
    status(ex, "GRANT USAGE ON ALL STAGES IN DATABASE floe TO ROLE loader")
    assert held(ex, "inbox") == ["READ"] and held(ex, "lake") == ["USAGE"]
    status(ex, "GRANT WRITE ON ALL STAGES IN SCHEMA floe.public TO ROLE loader")  # READ is held
    assert held(ex, "inbox") == ["READ", "WRITE"]
    err = refused(ex, "REVOKE READ ON ALL STAGES IN SCHEMA floe.public FROM ROLE loader")
    assert err.code == "003511"
    status(ex, "REVOKE ALL ON ALL STAGES IN SCHEMA floe.public FROM ROLE loader")
    assert held(ex, "inbox") == [] and held(ex, "lake") == []
    err = refused(ex, "GRANT WRITE ON ALL STAGES IN SCHEMA floe.public TO ROLE loader")
    assert err.code == "003511" and "FLOE.PUBLIC.INBOX" in err.message and held(ex, "lake") == []

    # FUTURE STAGES: each new stage gets the privileges its kind takes.
    err = refused(ex, "GRANT WRITE ON FUTURE STAGES IN SCHEMA floe.public TO ROLE loader")
    assert "Privilege order violation for the future grants on stage" in err.message
    status(ex, "GRANT USAGE, READ, WRITE ON FUTURE STAGES IN SCHEMA floe.public TO ROLE loader")
    run(ex, "CREATE STAGE inbox2")
    run(ex, "CREATE STAGE lake2 URL = 's3://lake-bucket/two/' STORAGE_INTEGRATION = floe_tests")
    assert held(ex, "inbox2") == ["READ", "WRITE"] and held(ex, "lake2") == ["USAGE"]
    err = refused(ex, "REVOKE READ ON FUTURE STAGES IN SCHEMA floe.public FROM ROLE loader")
    assert "WRITE should be revoked" in err.message


@pytest.mark.integration
def test_each_stage_command_asks_its_kinds_privilege(ex: SqlExecutor) -> None:
    """CREATE PIPE reads the stage with READ (internal) or USAGE (external), through ``authorize``:
    the kind's privilege is the only one that can be granted, and the one that is asked."""
    _stages(ex)
    run(ex, "CREATE TABLE t (a INT)")
    maker = make_user(ex, "maker", "loader")
    status(ex, "GRANT CREATE PIPE ON SCHEMA floe.public TO ROLE loader")
    status(ex, "GRANT INSERT ON TABLE t TO ROLE loader")
    for stage in ("inbox", "lake"):
        with pytest.raises(SqlError, match="does not exist or not authorized"):
            run(ex, f"CREATE PIPE p_{stage} AS COPY INTO t FROM @{stage}", maker)
    status(ex, "GRANT READ ON STAGE inbox TO ROLE loader")
    status(
        ex, "GRANT USAGE ON STAGE lake TO ROLE loader; GRANT USAGE ON INTEGRATION floe_tests TO ROLE loader"
    )
    run(ex, "CREATE PIPE p_inbox AS COPY INTO t FROM @inbox", maker)
    run(ex, "CREATE PIPE p_lake AS COPY INTO t FROM @lake", maker)
    # LIST: READ on the internal stage (held), USAGE on the external one (held, with its integration).
    assert run(ex, "LIST @inbox", maker) == []
