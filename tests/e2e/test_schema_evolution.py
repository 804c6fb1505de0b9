"""A table changed while its pipe runs (decision 81): ALTER TABLE between loads, then schema evolution,
through the whole stack; the query engine and the Spark reader see every file's rows under the
table's present columns."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Stack, unique, wait_until
from tests.e2e.test_autoingest import done

pytestmark = pytest.mark.e2e


def put_json(s3: Any, bucket: str, name: str, doc: dict[str, Any]) -> None:
    s3.put_object(Bucket=bucket, Key=f"evo/{name}", Body=json.dumps(doc).encode() + b"\n")


def test_schema_evolution_while_the_pipe_runs(stack: Stack, bucket: str, s3: Any) -> None:
    stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
    stack.sql(f"CREATE STAGE {stage} URL = 's3://{bucket}/evo/' STORAGE_INTEGRATION = floe_tests")
    stack.sql(f"CREATE TABLE {table} (id INT, kind VARCHAR, at TIMESTAMP_TZ)")
    stack.sql(
        f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} FROM @{stage} "
        "FILE_FORMAT = (TYPE = JSON) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE"
    )
    put_json(s3, bucket, "1.json", {"id": 1, "kind": "old", "at": "2024-05-01 13:00:00 +01:00"})
    wait_until(lambda: done(stack, table, 1), what="the first file")

    # Changed while the pipe runs: its next load compiles against the new columns.
    stack.sql(f"ALTER TABLE {table} ADD COLUMN score FLOAT")
    stack.sql(f"ALTER TABLE {table} DROP COLUMN kind")
    stack.sql(f"ALTER TABLE {table} ADD COLUMN kind NUMBER")
    stack.sql(f"ALTER TABLE {table} RENAME COLUMN at TO happened")
    put_json(
        s3, bucket, "2.json", {"id": 2, "kind": 7, "score": 0.5, "happened": "2024-05-01 12:00:00 +00:00"}
    )
    wait_until(lambda: done(stack, table, 2), what="the second file")
    expected = [
        # The dropped KIND's 'old' never shows under the new KIND; the renamed column keeps its offset.
        {"ID": 1, "HAPPENED": "2024-05-01 13:00:00+01:00", "SCORE": None, "KIND": None},
        {"ID": 2, "HAPPENED": "2024-05-01 12:00:00+00:00", "SCORE": 0.5, "KIND": 7},
    ]
    assert stack.sql(f"SELECT * FROM {table} ORDER BY id") == expected

    # [EVO] with ENABLE_SCHEMA_EVOLUTION the next file's new key becomes a column.
    stack.sql(f"ALTER TABLE {table} SET ENABLE_SCHEMA_EVOLUTION = TRUE")
    put_json(s3, bucket, "3.json", {"id": 3, "fresh": "new"})
    wait_until(lambda: done(stack, table, 3), what="the third file")
    assert [h["STATUS"] for h in done(stack, table, 3) or []] == ["Loaded"] * 3
    assert stack.sql(f"SELECT id, kind, fresh FROM {table} ORDER BY id") == [
        {"ID": 1, "KIND": None, "FRESH": None},
        {"ID": 2, "KIND": 7, "FRESH": None},
        {"ID": 3, "KIND": None, "FRESH": "new"},
    ]
    described = {r["name"]: r for r in stack.sql(f"DESC TABLE {table}")}
    record = json.loads(described["FRESH"]["schema evolution record"])
    assert (record["evolutionType"], record["evolutionMode"], record["fileName"]) == (
        "ADD_COLUMN",
        "SNOWPIPE",
        "3.json",
    )
    assert described["KIND"]["schema evolution record"] is None

    # The Spark reader maps the blobs the same way (a TIMESTAMP_TZ as its instant).
    from pipeline import read_table, spark_session

    spark = spark_session(stack.settings, "floe-evolution-test")
    try:
        rows = sorted(read_table(spark, stack.settings, table).collect(), key=lambda r: r["ID"])
    finally:
        spark.stop()
    assert [(r["ID"], r["SCORE"], r["KIND"], r["FRESH"]) for r in rows] == [
        (1, None, None, None),
        (2, 0.5, 7, None),
        (3, None, None, "new"),
    ]
    assert rows[0]["HAPPENED"].isoformat().startswith("2024-05-01T12:00")
