"""Issue 9, items 5-7: one request must not freeze the API through a backtracking regex.

SHOW ... LIKE runs a hand-written wildcard matcher, a pipe's PATTERN runs under RE2, and the
statement parser scans CREATE PIPE left to right (floe/patterns.py, floe/catalog/ddl.py). Each
attack gets an answer (a result or a refusal), and the API keeps answering /health while the
attack's requests are in flight, with no stall inside any of them (``HealthWatch.check``: a regex
holding the GIL for seconds stops /health for most of the request it runs in). The CPU-time checks
of the matchers and the parser see the same from the inside (tests/floe/test_patterns.py,
tests/floe/catalog/test_parse_linear.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from floe.aws import client as aws_client
from tests.conftest import Stack, unique
from tests.security.attacks import redos
from tests.security.attacks.caller import SqlCaller, watching_health

pytestmark = pytest.mark.e2e


def test_item5_show_like_with_forty_wildcards(mallory: SqlCaller) -> None:
    status, body = redos.show_like(mallory, "TABLES", "%")
    assert status == 200 and body["rows"], "no table to match the attack against"

    def attack() -> list[tuple[int, dict[str, Any]]]:
        return [
            watch.attack(redos.show_like, mallory, kind, pattern)
            for kind in ("TABLES", "PIPES", "STAGES", "USERS", "ROLES")
            for pattern in (redos.LIKE_PERCENT_RUN, redos.LIKE_LONG)
        ]

    # three rounds at most: 30 statements stay within an ordinary user's SQL rate-limit burst
    with watching_health(mallory.url) as watch:
        rounds = watch.until_answered(attack, rounds=3)
    for status, body in (answer for answers in rounds for answer in answers):
        # an answer: no name matches, or a refusal (SHOW USERS needs ACCOUNTADMIN)
        assert (status, body.get("rows")) == (200, []) or status == 403, body
    watch.check()


def test_item6_pipe_pattern_with_nested_quantifiers(admin: SqlCaller, stack: Stack) -> None:
    bucket, stage, table, pipe = unique("redos"), unique("st_"), unique("t_"), unique("p_")
    aws_client(stack.settings.aws, "s3").create_bucket(Bucket=bucket)
    admin.run_all(
        f"CREATE STAGE {stage} URL = 's3://{bucket}/in/'"
        " STORAGE_INTEGRATION = floe_tests FILE_FORMAT = (TYPE = CSV)",
        f"CREATE TABLE {table} (id INT)",
        f"CREATE PIPE {pipe} AS COPY INTO {table} FROM @{stage} PATTERN = '{redos.NESTED_PATTERN}'",
    )
    with watching_health(admin.url) as watch:
        answers = watch.until_answered(
            lambda: watch.attack(
                redos.insert_files, admin, f"FLOE.PUBLIC.{pipe.upper()}", redos.NESTED_PATHS
            ),
            rounds=20,
        )
    for resp in answers:
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["responseCode"] == "SUCCESS"
        assert [f["path"] for f in body["unmatchedPatternFiles"]] == redos.NESTED_PATHS
    watch.check()

    # What RE2 cannot run is refused at CREATE PIPE, saying what to change.
    status, body = admin.sql(
        f"CREATE PIPE {unique('p_')} AS COPY INTO {table} FROM @{stage} PATTERN = '(?=a)(a+)+b'"
    )
    assert status == 422, body
    assert "PATTERN uses a lookahead" in body["message"] and "rewrite it without (?=...)" in body["message"]


def test_item7_create_pipe_with_sixty_thousand_spaces(mallory: SqlCaller) -> None:
    def attack() -> list[tuple[int, dict[str, Any]]]:
        return [
            watch.attack(redos.create_pipe_with_spaces, mallory, unique("p_"), tail)
            for tail in ("x", "AS" + " " * redos.HEADER_SPACES + "x", "COMMENT = '" + "'" * 60_000)
        ]

    with watching_health(mallory.url) as watch:
        rounds = watch.until_answered(attack, rounds=10)
    for status, body in (answer for answers in rounds for answer in answers):
        assert status == 422, body
        assert "CREATE PIPE" in body["message"] or "COPY INTO" in body["message"], body["message"]
    watch.check()
