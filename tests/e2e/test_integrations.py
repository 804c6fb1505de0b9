"""A storage integration bounds every load, not just CREATE STAGE and CREATE PIPE: narrowing,
disabling or dropping it fails the files its existing pipes would read next (issue 12)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Stack, unique, wait_until
from tests.e2e.test_autoingest import csv_file, history

pytestmark = pytest.mark.e2e


def outcome(stack: Stack, table: str, name: str) -> dict[str, Any] | None:
    """The file's finished history row, or None while it is not there yet."""
    rows = [r for r in history(stack, table) if r["FILE_NAME"] == name and r["STATUS"] != "Load in progress"]
    return rows[0] if rows else None


def test_an_altered_integration_stops_the_pipes_outside_it(stack: Stack, bucket: str, s3: Any) -> None:
    integration, stage, table, pipe = unique("int_"), unique("st_"), unique("t_"), unique("p_")
    stack.sql(
        f"CREATE STORAGE INTEGRATION {integration} TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' "
        f"ENABLED = TRUE STORAGE_ALLOWED_LOCATIONS = ('s3://{bucket}/')"
    )
    stack.sql(f"CREATE STAGE {stage} URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = {integration}")
    stack.sql(f"CREATE TABLE {table} (id INT, name VARCHAR, amount NUMBER(10,2), day DATE)")
    stack.sql(
        f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} FROM @{stage} "
        "FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
    )

    def load(name: str, start: int) -> dict[str, Any]:
        s3.put_object(Bucket=bucket, Key=f"in/{name}", Body=csv_file(start, 3))
        return wait_until(lambda: outcome(stack, table, name), what=f"{name} in the load history")

    assert load("before.csv", 0)["STATUS"] == "Loaded"

    stack.sql(
        f"ALTER STORAGE INTEGRATION {integration} SET STORAGE_BLOCKED_LOCATIONS = ('s3://{bucket}/in/')"
    )
    blocked = load("blocked.csv", 10)
    assert blocked["STATUS"] == "Load failed"
    assert (
        f"URL 's3://{bucket}/in/' is no longer allowed by storage integration"
        in blocked["FIRST_ERROR_MESSAGE"]
    )

    stack.sql(f"ALTER STORAGE INTEGRATION {integration} UNSET STORAGE_BLOCKED_LOCATIONS")
    assert load("after.csv", 20)["STATUS"] == "Loaded"

    stack.sql(f"ALTER STORAGE INTEGRATION {integration} SET ENABLED = FALSE")
    assert "is disabled" in load("disabled.csv", 30)["FIRST_ERROR_MESSAGE"]

    stack.sql(f"DROP STORAGE INTEGRATION {integration}")
    assert "no longer exists" in load("dropped.csv", 40)["FIRST_ERROR_MESSAGE"]

    # Only the two files read while the integration allowed them are in the table.
    ids = [r["ID"] for r in stack.sql(f"SELECT id FROM {table} ORDER BY id")]
    assert ids == [0, 1, 2, 20, 21, 22]
