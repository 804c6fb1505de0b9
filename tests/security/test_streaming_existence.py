"""The streaming routes check privileges before they say anything of a pipe (issue 31, item 10).

An unprivileged caller got 400 "Pipe ... loads files from a stage" for an existing file pipe and
404 for a missing one: the difference told it which pipes exist. Both are now the same 404.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from bench.harness import unique
from floe.catalog import ADMIN_ROLE
from floe.keys import Keys
from floe.settings import Settings
from services.answers import RestError
from services.auth import Principal
from services.sql import SqlExecutor
from services.streaming import StreamingService
from tests.conftest import TEST_INTEGRATION

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
NOBODY = Principal("MALLORY", frozenset({"PUBLIC"}))


def _refusal(service: StreamingService, principal: Principal, name: str, write: bool) -> tuple[Any, ...]:
    with pytest.raises(RestError) as caught:
        service.pipe(principal, "FLOE", "PUBLIC", name, write)
    return caught.value.status, caught.value.code, str(caught.value).replace(name.upper(), "<PIPE>")


@pytest.mark.parametrize("write", [True, False])
def test_an_unprivileged_caller_cannot_tell_a_file_pipe_from_a_missing_one(
    isolated_settings: Settings, redis_client: redis.Redis[bytes], write: bool
) -> None:
    sql = SqlExecutor(isolated_settings, redis_client)
    for statement in (
        TEST_INTEGRATION,
        f"CREATE STAGE st URL = 's3://{unique('stage')}/in/' STORAGE_INTEGRATION = floe_tests",
        "CREATE TABLE t (a INT)",
        "CREATE PIPE files AUTO_INGEST = FALSE AS COPY INTO t FROM @st",
    ):
        sql.execute(statement, ADMIN)
    service = StreamingService(
        isolated_settings, redis_client, sql.catalog, Keys(isolated_settings.redis.prefix)
    )
    existing = _refusal(service, NOBODY, "files", write)
    missing = _refusal(service, NOBODY, "no_such_pipe", write)
    assert existing == missing and existing[0] == 404, (existing, missing)
    # Its owner still learns why the pipe takes no channel.
    status, _, message = _refusal(service, ADMIN, "files", write)
    assert status == 400 and "loads files from a stage" in message
