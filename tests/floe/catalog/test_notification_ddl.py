"""Parsing notification integrations and the pipe properties of error notifications and backfill:
ERROR_INTEGRATION, BACKFILL_INTERVAL, and the refused INTEGRATION and AWS_SNS_TOPIC. The statements
run: tests/services/test_sql_notifications.py."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from floe.catalog.ddl import (
    AlterIntegration,
    CreateNotificationIntegration,
    CreatePipe,
    DescribeObject,
    DropObject,
    Show,
    backfill_interval,
    check_topic_arn,
    parse,
)
from floe.errors import CompilationError
from tests.floe.catalog.test_parse_linear import N, _grows_linearly

pytestmark = pytest.mark.unit

TOPIC = "arn:aws:sns:us-east-1:123456789012:pipe-errors"
ROLE = "arn:aws:iam::123456789012:role/floe-sns"
CREATE = (
    "CREATE NOTIFICATION INTEGRATION errs TYPE = QUEUE DIRECTION = OUTBOUND NOTIFICATION_PROVIDER = AWS_SNS "
    f"AWS_SNS_TOPIC_ARN = '{TOPIC}' AWS_SNS_ROLE_ARN = '{ROLE}' ENABLED = TRUE"
)
COPY = "AS COPY INTO t FROM @s"


def pipe(props: str) -> CreatePipe:
    stmt = parse(f"CREATE PIPE p {props} {COPY}")
    assert isinstance(stmt, CreatePipe)
    return stmt


def refused(sql: str) -> str:
    with pytest.raises(CompilationError) as err:
        parse(sql)
    return err.value.message


def test_create_notification_integration_as_snowflake_documents_it() -> None:
    s = parse(CREATE + " COMMENT = 'pipe errors'")
    assert s == CreateNotificationIntegration(
        name="ERRS", enabled=True, topic_arn=TOPIC, role_arn=ROLE, comment="pipe errors"
    )


def test_notification_integration_in_any_order_and_case_without_a_role() -> None:
    s = parse(
        f'create or replace notification integration if not exists "Errs" enabled = false '
        f"aws_sns_topic_arn = '{TOPIC}' notification_provider = aws_sns direction = outbound type = queue"
    )
    assert isinstance(s, CreateNotificationIntegration)
    assert (s.name, s.enabled, s.role_arn, s.replace, s.if_not_exists) == ("Errs", False, "", True, True)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("DIRECTION = OUTBOUND", "needs DIRECTION"),
        ("TYPE = QUEUE", "needs TYPE"),
        (f"AWS_SNS_TOPIC_ARN = '{TOPIC}'", "needs AWS_SNS_TOPIC_ARN"),
        ("DIRECTION = OUTBOUND", "for example: CREATE NOTIFICATION INTEGRATION ERRS TYPE = QUEUE"),
    ],
)
def test_a_missing_property_is_named_with_an_example(change: str, message: str) -> None:
    assert message in refused(CREATE.replace(change, ""))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("DIRECTION = OUTBOUND", "DIRECTION = INBOUND"), "DIRECTION = INBOUND is not supported"),
        (("NOTIFICATION_PROVIDER = AWS_SNS", "NOTIFICATION_PROVIDER = AZURE_STORAGE_QUEUE"), "Amazon SNS"),
        (("TYPE = QUEUE", "TYPE = EMAIL"), "TYPE = EMAIL is not supported"),
        ((TOPIC, "arn:aws:sqs:us-east-1:123456789012:q"), "expected an SNS topic's ARN"),
        ((TOPIC, TOPIC + ".fifo"), "is a FIFO topic"),
        (("ENABLED = TRUE", "ENABLED = TRUE ENABLED = TRUE"), "duplicate property 'ENABLED'"),
        (("ENABLED = TRUE", "ENABLED = TRUE API_KEY = 'k'"), "invalid property 'API_KEY'"),
    ],
)
def test_create_notification_integration_errors(change: tuple[str, str], message: str) -> None:
    assert message in refused(CREATE.replace(*change))


def test_topic_arns() -> None:
    for ok in (
        TOPIC,
        "arn:aws-us-gov:sns:us-gov-west-1:123456789012:a_b-c",
        "arn:aws-cn:sns:cn-north-1:123456789012:x",
    ):
        assert check_topic_arn(ok) == ok
    for bad in ("", "arn:aws:sns:us-east-1:12345:t", "arn:aws:sns:us-east-1:123456789012:", f"{TOPIC} "):
        with pytest.raises(CompilationError):
            check_topic_arn(bad)


def test_alter_show_desc_drop_notification_integrations() -> None:
    alter = parse(f"ALTER NOTIFICATION INTEGRATION errs SET ENABLED = FALSE AWS_SNS_TOPIC_ARN = '{TOPIC}'")
    assert isinstance(alter, AlterIntegration)
    assert (alter.family, alter.enabled, alter.topic_arn, alter.role_arn) == (
        "NOTIFICATION",
        False,
        TOPIC,
        None,
    )
    # A property only notification integrations have says which kind the bare ALTER INTEGRATION alters.
    alter = parse(f"ALTER INTEGRATION errs SET AWS_SNS_ROLE_ARN = '{ROLE}' COMMENT = 'c'")
    assert isinstance(alter, AlterIntegration)
    assert (alter.family, alter.role_arn, alter.comment) == ("NOTIFICATION", ROLE, "c")
    alter = parse("ALTER NOTIFICATION INTEGRATION IF EXISTS errs UNSET COMMENT")
    assert isinstance(alter, AlterIntegration) and alter.unset == ["COMMENT"] and alter.if_exists
    assert parse("SHOW NOTIFICATION INTEGRATIONS LIKE 'e%'") == Show(
        "INTEGRATION", "e%", family="NOTIFICATION"
    )
    assert parse("DESC NOTIFICATION INTEGRATION errs") == DescribeObject(
        "INTEGRATION", "ERRS", "NOTIFICATION"
    )
    assert parse("DROP NOTIFICATION INTEGRATION IF EXISTS errs") == DropObject(
        "INTEGRATION", "ERRS", True, "NOTIFICATION"
    )


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("ALTER NOTIFICATION INTEGRATION errs SET DIRECTION = INBOUND", "cannot change DIRECTION"),
        ("ALTER NOTIFICATION INTEGRATION errs SET TYPE = QUEUE", "cannot change TYPE"),
        ("ALTER INTEGRATION errs SET TYPE = QUEUE", "cannot change TYPE of a storage integration"),
        ("ALTER NOTIFICATION INTEGRATION errs SET AWS_SNS_TOPIC_ARN = 'x'", "invalid AWS_SNS_TOPIC_ARN 'x'"),
        ("ALTER NOTIFICATION INTEGRATION errs UNSET AWS_SNS_TOPIC_ARN", "Floe unsets COMMENT"),
        (
            f"ALTER INTEGRATION errs SET AWS_SNS_TOPIC_ARN = '{TOPIC}' API_KEY = 'k'",
            "is a property of an API integration, not of a notification integration",
        ),
        ("ALTER NOTIFICATION INTEGRATION errs SET API_KEY = 'k'", "invalid property 'API_KEY'"),
    ],
)
def test_alter_notification_integration_errors(sql: str, message: str) -> None:
    assert message in refused(sql)


def test_pipe_error_integration_and_backfill_interval() -> None:
    s = pipe("AUTO_INGEST = FALSE ERROR_INTEGRATION = errs BACKFILL_INTERVAL = '15 minutes'")
    assert (s.error_integration, s.backfill_interval_s) == ("ERRS", 900)
    s = pipe('ERROR_INTEGRATION = "My ""errs"""')
    assert (s.error_integration, s.backfill_interval_s) == ('My "errs"', None)
    assert pipe("").error_integration is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("'1 second'", 1), ("'90 SECONDS'", 90), ("' 2 Hours '", 7200), ("'7 DAYS'", 604800), ("'1day'", 86400)],
)
def test_backfill_intervals(text: str, seconds: int) -> None:
    assert backfill_interval(text) == seconds


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ("BACKFILL_INTERVAL = 10", "write a quoted interval such as BACKFILL_INTERVAL = '10 MINUTES'"),
        ("BACKFILL_INTERVAL = '10'", "write a quoted interval"),
        ("BACKFILL_INTERVAL = '1 week'", "write a quoted interval"),
        ("BACKFILL_INTERVAL = '0 minutes'", "between 1 second and 7 days"),
        ("BACKFILL_INTERVAL = '169 hours'", "between 1 second and 7 days"),
        ("ERROR_INTEGRATION = 'errs'", "takes the name of a notification integration, not a string"),
        ("INTEGRATION = 'MY_GCS_INT'", "INTEGRATION is not supported"),
        (f"AUTO_INGEST = TRUE AWS_SNS_TOPIC = '{TOPIC}'", "AWS_SNS_TOPIC is not supported"),
    ],
)
def test_pipe_property_errors(props: str, message: str) -> None:
    assert message in refused(f"CREATE PIPE p {props} {COPY}")


def test_refusals_say_what_to_use_instead() -> None:
    assert "use ERROR_INTEGRATION" in refused(f"CREATE PIPE p INTEGRATION = 'i' {COPY}")
    assert "BACKFILL_INTERVAL lists the stage" in refused(f"CREATE PIPE p AWS_SNS_TOPIC = '{TOPIC}' {COPY}")


LINEAR: dict[str, Callable[[int], str]] = {
    "pipe ERROR_INTEGRATION, unterminated quoted name": lambda n: (
        'CREATE PIPE p ERROR_INTEGRATION = "' + "a" * n
    ),
    "pipe ERROR_INTEGRATION, doubled quotes": lambda n: (
        'CREATE PIPE p ERROR_INTEGRATION = "' + '"' * n + " x"
    ),
    "pipe BACKFILL_INTERVAL, spaces": lambda n: f"CREATE PIPE p BACKFILL_INTERVAL = '{' ' * n}1 x' {COPY}",
    "pipe BACKFILL_INTERVAL, digits": lambda n: f"CREATE PIPE p BACKFILL_INTERVAL = '{'1' * n}' {COPY}",
    "notification integration, spaces": lambda n: "CREATE NOTIFICATION" + " " * n + "INTEGRATION i x",
    "notification integration, topic dashes": lambda n: CREATE.replace(TOPIC, "arn:aws" + "-a" * (n // 2)),
    "notification integration, topic region": lambda n: CREATE.replace(TOPIC, "arn:aws:sns:" + "a" * n),
    "alter notification integration, spaces": lambda n: "ALTER NOTIFICATION" + " " * n + "INTEGRATION i SET",
}


@pytest.mark.parametrize("case", list(LINEAR))
def test_parse_time_grows_linearly(case: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="sqlglot")
    small, large = LINEAR[case](N), LINEAR[case](2 * N)
    ok, report = _grows_linearly(small, large)
    if not ok:  # the machine is shared: a real super-linear case fails twice
        ok, report = _grows_linearly(small, large)
    assert ok, f"{case}: super-linear: {report}"


def test_the_linear_cases_reach_their_parsers() -> None:
    near = "syntax error in CREATE PIPE near 'ERROR_INTEGRATION"
    assert near in refused(LINEAR["pipe ERROR_INTEGRATION, unterminated quoted name"](100))
    assert "invalid value" in refused(LINEAR["pipe BACKFILL_INTERVAL, spaces"](100))
    assert "invalid value" in refused(LINEAR["pipe BACKFILL_INTERVAL, digits"](100))
    assert "expected an SNS topic's ARN" in refused(LINEAR["notification integration, topic dashes"](100))
    assert "expected an SNS topic's ARN" in refused(LINEAR["notification integration, topic region"](100))
