"""Blobs bound to their identity, and statistics sealed in the manifest (issue 9, "Medium: local
exposure"): a blob object swapped for another table's or another blob's is refused by the real
query engine instead of serving the wrong rows, and the manifest in Redis holds no column values."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Stack, unique, wait_until
from tests.security.attacks.blobs import blob_names, manifest, swap_blob
from tests.security.attacks.caller import SqlCaller

pytestmark = pytest.mark.e2e


def loaded_files(stack: Stack, table: str) -> int:
    rows = stack.sql(
        f"SELECT STATUS FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => '{table}', "
        "START_TIME => DATEADD(hours, -1, CURRENT_TIMESTAMP())))"
    )
    return sum(r["STATUS"] == "Loaded" for r in rows)


def loaded_table(stack: Stack, s3: Any, files: list[bytes]) -> str:
    """A table loaded through an auto-ingest pipe, one file per batch (so one blob per file). The
    table is never queried here, so the API has none of its blobs cached."""
    bucket, stage, table, pipe = unique("stage"), unique("st_"), unique("t_"), unique("p_")
    s3.create_bucket(Bucket=bucket)
    stack.sql(
        f"CREATE STAGE {stage} URL = 's3://{bucket}/in/'"
        " STORAGE_INTEGRATION = floe_tests FILE_FORMAT = (TYPE = CSV)"
    )
    stack.sql(f"CREATE TABLE {table} (id INT, secret VARCHAR)")
    stack.sql(f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} FROM @{stage}")
    for i, body in enumerate(files):
        s3.put_object(Bucket=bucket, Key=f"in/f{i}.csv", Body=body)
        wait_until(lambda n=i + 1: loaded_files(stack, table) >= n, what=f"file {i} of {table} loaded")
    return table


@pytest.mark.parametrize("source", ["another table", "another blob of the table"])
def test_a_swapped_blob_is_refused_not_served(stack: Stack, s3: Any, admin: SqlCaller, source: str) -> None:
    client = stack.settings.redis.client()
    bucket = stack.settings.pipeline.tables_bucket
    victim = loaded_table(stack, s3, [b"1,victim-row-one\n", b"2,victim-row-two\n"])
    if source == "another table":
        donor = loaded_table(stack, s3, [b"66,donor-secret-q\n"])
        (src,) = blob_names(stack.settings, client, donor)
        leaked = "donor-secret-q"
    else:
        src = blob_names(stack.settings, client, victim)[0]
        leaked = "victim-row-one"
    target = blob_names(stack.settings, client, victim)[-1]
    assert src != target
    swap_blob(s3, bucket, src, target)

    status, body = admin.sql(f"SELECT id, secret FROM {victim} ORDER BY id")

    assert status == 500, body
    assert f"Blob '{target}' does not decrypt under its name" in body["message"], body
    assert "restore the original object" in body["message"]
    if source == "another table":
        assert leaked not in json.dumps(body)


def test_the_manifest_holds_no_statistic_values(stack: Stack, s3: Any, admin: SqlCaller) -> None:
    client = stack.settings.redis.client()
    table = loaded_table(stack, s3, [b"7301,zq-min-secret\n7399,zq-max-secret\n"])
    entries = manifest(stack.settings, client, table)
    assert len(entries) == 1
    (raw,) = entries.values()
    entry = json.loads(raw)
    assert "stats" not in entry and entry["sealed_stats"] and entry["rows"] == 2
    for value in ("7301", "7399", "zq-min-secret", "zq-max-secret", '"min"', '"max"'):
        assert value not in raw, value
    status, body = admin.sql(f"SELECT COUNT(*) AS n FROM {table} WHERE id = 7399")
    assert status == 200 and body["rows"] == [[1]], body
