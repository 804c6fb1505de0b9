"""Notification integrations and the pipe properties that use them (ERROR_INTEGRATION,
BACKFILL_INTERVAL), through the SQL executor on the real Redis. Parsing:
tests/floe/catalog/test_notification_ddl.py; what the integration sends:
tests/services/test_error_notifications.py."""

from __future__ import annotations

import logging

import pytest

from floe.catalog import NotificationIntegration, Pipe
from floe.errors import CompilationError, ObjectNotFound, PermissionDenied, SqlError
from services.sql import SqlExecutor
from tests.services.test_sql_access import make_user, run, status

pytestmark = pytest.mark.integration

TOPIC = "arn:aws:sns:us-east-1:000000000000:pipe-errors"


def integration(ex: SqlExecutor, name: str = "errs", extra: str = "", head: str = "CREATE") -> str:
    return status(
        ex,
        f"{head} NOTIFICATION INTEGRATION {name} TYPE = QUEUE DIRECTION = OUTBOUND "
        f"NOTIFICATION_PROVIDER = AWS_SNS AWS_SNS_TOPIC_ARN = '{TOPIC}' ENABLED = TRUE {extra}",
    )


def props(ex: SqlExecutor, sql: str) -> dict[str, object]:
    return {str(r["property"]): r["value"] for r in run(ex, sql)}


def stage_and_table(ex: SqlExecutor) -> None:
    status(ex, "CREATE STAGE IF NOT EXISTS st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests")
    status(ex, "CREATE TABLE IF NOT EXISTS t (a INT)")


def test_a_notification_integration_is_shown_altered_and_dropped(ex: SqlExecutor) -> None:
    role = "arn:aws:iam::000000000000:role/floe"
    assert integration(ex, extra=f"AWS_SNS_ROLE_ARN = '{role}' COMMENT = 'errors'") == (
        "Integration ERRS successfully created."
    )
    rows = {r["name"]: r for r in run(ex, "SHOW INTEGRATIONS")}
    assert (rows["ERRS"]["type"], rows["ERRS"]["category"], rows["ERRS"]["enabled"]) == (
        "QUEUE - AWS_SNS",
        "NOTIFICATION",
        "true",
    )
    assert [r["name"] for r in run(ex, "SHOW NOTIFICATION INTEGRATIONS")] == ["ERRS"]
    assert "ERRS" not in [r["name"] for r in run(ex, "SHOW STORAGE INTEGRATIONS")]
    assert "ERRS" not in [r["name"] for r in run(ex, "SHOW API INTEGRATIONS")]
    shown = props(ex, "DESC NOTIFICATION INTEGRATION errs")
    assert {k: shown[k] for k in ("TYPE", "DIRECTION", "NOTIFICATION_PROVIDER", "ENABLED")} == {
        "TYPE": "QUEUE",
        "DIRECTION": "OUTBOUND",
        "NOTIFICATION_PROVIDER": "AWS_SNS",
        "ENABLED": "true",
    }
    assert (shown["AWS_SNS_TOPIC_ARN"], shown["AWS_SNS_ROLE_ARN"], shown["COMMENT"]) == (
        TOPIC,
        role,
        "errors",
    )

    other = TOPIC.replace("pipe-errors", "other")
    run(ex, f"ALTER NOTIFICATION INTEGRATION errs SET AWS_SNS_TOPIC_ARN = '{other}' ENABLED = FALSE")
    run(ex, "ALTER INTEGRATION errs UNSET COMMENT")
    found = ex.catalog.get(NotificationIntegration, "ERRS")
    assert (found.aws_sns_topic_arn, found.enabled, found.comment) == (other, False, None)
    run(ex, "ALTER INTEGRATION errs SET ENABLED = TRUE")  # a bare ALTER INTEGRATION finds the kind
    assert ex.catalog.get(NotificationIntegration, "ERRS").enabled
    with pytest.raises(CompilationError, match="is a notification integration, not a storage integration"):
        run(ex, "DROP STORAGE INTEGRATION errs")
    assert status(ex, "DROP NOTIFICATION INTEGRATION errs") == "ERRS successfully dropped."
    assert ex.catalog.find(NotificationIntegration, "ERRS") is None
    assert integration(ex) == "Integration ERRS successfully created."
    assert integration(ex, "IF NOT EXISTS errs") == "ERRS already exists, statement succeeded."


def test_integrations_of_every_kind_share_one_namespace(ex: SqlExecutor) -> None:
    integration(ex, "errs")
    with pytest.raises(SqlError, match="already exists as a notification integration") as err:
        run(
            ex,
            "CREATE OR REPLACE STORAGE INTEGRATION errs TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' "
            "ENABLED = TRUE STORAGE_ALLOWED_LOCATIONS = ('s3://lake/')",
        )
    assert err.value.code == "002002"
    with pytest.raises(SqlError, match="already exists as a storage integration"):
        integration(ex, "floe_tests", head="CREATE OR REPLACE")
    assert ex.catalog.find(NotificationIntegration, "FLOE_TESTS") is None
    assert integration(ex, "errs", head="CREATE OR REPLACE") == "Integration ERRS successfully created."


def test_only_who_may_create_integrations_creates_one(ex: SqlExecutor) -> None:
    ivy = make_user(ex, "ivy", "ingest")
    with pytest.raises(PermissionDenied, match="Insufficient privileges to operate on account"):
        ex.execute(
            "CREATE NOTIFICATION INTEGRATION errs TYPE = QUEUE DIRECTION = OUTBOUND "
            f"NOTIFICATION_PROVIDER = AWS_SNS AWS_SNS_TOPIC_ARN = '{TOPIC}' ENABLED = TRUE",
            ivy,
        )
    assert ex.catalog.find(NotificationIntegration, "ERRS") is None


def test_a_pipe_names_its_error_integration_with_usage_on_it(ex: SqlExecutor) -> None:
    stage_and_table(ex)
    integration(ex)
    ivy = make_user(ex, "ivy", "ingest")
    for grant in ("CREATE PIPE ON SCHEMA floe.public", "USAGE ON STAGE st", "INSERT ON TABLE t"):
        status(ex, f"GRANT {grant} TO ROLE ingest")
    sql = "CREATE PIPE p ERROR_INTEGRATION = errs AS COPY INTO t FROM @st"
    with pytest.raises(ObjectNotFound, match="Integration 'ERRS' does not exist or not authorized"):
        ex.execute(sql, ivy)
    assert ex.catalog.find(Pipe, "FLOE.PUBLIC.P") is None
    status(ex, "GRANT USAGE ON INTEGRATION errs TO ROLE ingest")
    assert ex.execute(sql, ivy).records()[0]["STATUS"] == "Pipe P successfully created."
    assert ex.catalog.get(Pipe, "FLOE.PUBLIC.P").error_integration == "ERRS"
    (row,) = run(ex, "SHOW PIPES LIKE 'P'")
    assert (row["error_integration"], row["backfill_interval"]) == ("ERRS", None)


@pytest.mark.parametrize(
    ("setup", "props_", "error", "message"),
    [
        ("", "ERROR_INTEGRATION = floe_tests", CompilationError, "is not a notification integration"),
        ("ALTER INTEGRATION errs SET ENABLED = FALSE", "ERROR_INTEGRATION = errs", SqlError, "is disabled"),
        ("", "ERROR_INTEGRATION = nope", ObjectNotFound, "Integration 'NOPE' does not exist"),
        (
            "",
            "BACKFILL_INTERVAL = '30 seconds'",
            CompilationError,
            r"must be at least 1 MINUTE \(FLOE_BACKFILL",
        ),
    ],
)
def test_pipe_properties_are_checked(
    ex: SqlExecutor, setup: str, props_: str, error: type[SqlError], message: str
) -> None:
    stage_and_table(ex)
    integration(ex)
    if setup:
        run(ex, setup)
    with pytest.raises(error, match=message):
        run(ex, f"CREATE PIPE p {props_} AS COPY INTO t FROM @st")
    assert ex.catalog.find(Pipe, "FLOE.PUBLIC.P") is None


def test_streaming_pipes_take_neither_property(ex: SqlExecutor) -> None:
    stage_and_table(ex)
    integration(ex)
    streaming = "AS COPY INTO t FROM (SELECT $1:a FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
    with pytest.raises(CompilationError, match="ERROR_INTEGRATION does not apply to a streaming pipe"):
        run(ex, f"CREATE PIPE p ERROR_INTEGRATION = errs {streaming}")
    with pytest.raises(CompilationError, match="BACKFILL_INTERVAL does not apply to a streaming pipe"):
        run(ex, f"CREATE PIPE p BACKFILL_INTERVAL = '1 hour' {streaming}")


def test_backfill_interval_is_shown_and_kept(ex: SqlExecutor) -> None:
    stage_and_table(ex)
    run(ex, "CREATE PIPE p BACKFILL_INTERVAL = '120 minutes' AS COPY INTO t FROM @st")
    assert ex.catalog.get(Pipe, "FLOE.PUBLIC.P").backfill_interval_s == 7200
    desc = run(ex, "DESC PIPE p")[0]
    assert (desc["backfill_interval"], desc["error_integration"]) == ("2 HOURS", None)


def test_dropping_an_error_integration_keeps_its_pipes(
    ex: SqlExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    stage_and_table(ex)
    integration(ex)
    run(ex, "CREATE PIPE p ERROR_INTEGRATION = errs AS COPY INTO t FROM @st")
    with caplog.at_level(logging.WARNING, logger="floe.sql"):
        run(ex, "DROP INTEGRATION errs")
    assert "pipes FLOE.PUBLIC.P send no error notifications" in caplog.text
    assert ex.catalog.get(Pipe, "FLOE.PUBLIC.P").error_integration == "ERRS"
