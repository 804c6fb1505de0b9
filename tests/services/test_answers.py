"""One map from exceptions to HTTP answers, in each route's format (services/answers.py)."""

from __future__ import annotations

import logging

import pytest
import redis
from redis.exceptions import RedisClusterException, SlotNotCoveredError

from floe.errors import AuthenticationFailed, CompilationError, FloeError, PermissionDenied
from services.answers import INTERNAL_ERROR, METADATA_STORE_DOWN, RestError, Throttled, answer_for

pytestmark = pytest.mark.unit

REST = "/v1/data/pipes/DB.S.P/insertFiles"
SQL = "/api/v1/sql"


@pytest.mark.parametrize(
    ("exc", "status", "rest_code", "sql_code", "sql_state"),
    [
        (RestError(404, "390404", "Pipe 'P' not found."), 404, "390404", "390404", "42000"),
        (Throttled("slow down", 2.2), 429, "390429", "390429", "53400"),
        (AuthenticationFailed("JWT token is invalid."), 401, "390144", "390144", "08001"),
        (PermissionDenied("Insufficient privileges"), 403, "390403", "003001", "42501"),
        (CompilationError("unknown table"), 422, "001003", "001003", "42000"),
        (FloeError("a blob could not be sealed"), 500, "000603", "000603", "XX000"),
        (redis.ConnectionError("redis://:hunter2@db:6379 refused"), 503, "390503", "000603", "08001"),
        # A Redis Cluster none of whose nodes answers, or with a slot no node serves: not RedisErrors.
        (RedisClusterException("Redis Cluster cannot be connected"), 503, "390503", "000603", "08001"),
        (SlotNotCoveredError("slot 866 is not covered"), 503, "390503", "000603", "08001"),
        (KeyError("surprise"), 500, "000603", "000603", "XX000"),
    ],
)
def test_each_exception_has_one_status_in_both_formats(
    exc: Exception, status: int, rest_code: str, sql_code: str, sql_state: str
) -> None:
    rest, sql = answer_for(exc, REST), answer_for(exc, SQL)
    assert rest.status == sql.status == status
    assert rest.body()["code"] == rest_code and set(rest.body()) == {"code", "success", "message", "data"}
    assert sql.body() == {"success": False, "code": sql_code, "sqlState": sql_state, "message": sql.message}
    assert rest.body()["success"] is False and rest.body()["data"] is None


def test_throttled_answers_say_when_to_retry_in_whole_seconds() -> None:
    assert answer_for(Throttled("slow down", 2.2), SQL).headers() == {"retry-after": "3"}
    assert answer_for(Throttled("slow down", 0.01), REST).headers() == {"retry-after": "1"}
    assert answer_for(RestError(400, "390400", "bad"), REST).headers() == {}


def test_redis_failures_never_leak_the_url_or_redis_text() -> None:
    answer = answer_for(redis.ConnectionError("redis://:hunter2@db:6379 refused"), SQL)
    assert answer.message == METADATA_STORE_DOWN and "hunter2" not in str(answer.body())


def test_an_unexpected_failure_is_logged_and_answered_without_its_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="floe.api"):
        answer = answer_for(KeyError("/etc/secret-path"), SQL)
    assert answer.message == INTERNAL_ERROR and "secret-path" not in str(answer.body())
    assert any(r.exc_info and r.exc_info[0] is KeyError for r in caplog.records)
