"""ALTER TABLE through the SQL executor, and the query engine reading blobs written before and after
each change, from the real LocalStack and Redis (decision 81): a column added later is NULL in older
blobs, a dropped column never shows nor resurfaces under a new column of its name, a renamed column
and its TIMESTAMP_TZ offsets read from older blobs, and pruning and COUNT(*) stay right."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import pyarrow as pa
import pytest
import redis
from pyarrow import fs as pafs

from floe.aws import pyarrow_s3_kwargs
from floe.blob_columns import blob_schema, to_blob
from floe.blobs import crypto_from_settings, write_blob
from floe.catalog import ADMIN_ROLE, Catalog, Column, Table
from floe.errors import CompilationError, PermissionDenied, SqlError
from floe.keys import Keys
from floe.types import arrow_schema, offset_column
from services.auth import Principal
from services.sql import SqlExecutor

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
AT = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)


def sql(ex: SqlExecutor, statement: str, principal: Principal = ADMIN) -> Any:
    return ex.execute(statement, principal)


def table_of(ex: SqlExecutor, name: str = "T") -> Table:
    return ex.catalog.get(Table, f"FLOE.PUBLIC.{name}")


def load_blob(ex: SqlExecutor, s3: Any, table: Table, rows: dict[str, list[Any]], n: int) -> None:
    """Commit a blob as a pipe would: the rows as the table is now, under their blob columns."""
    settings = ex.settings
    bucket = settings.pipeline.tables_bucket
    s3.create_bucket(Bucket=bucket)
    fs = pafs.S3FileSystem(**pyarrow_s3_kwargs(settings.aws))
    crypto = crypto_from_settings(settings.encryption.master_key_id, settings.encryption.resolve_master_key())
    data = to_blob(pa.table(rows, schema=arrow_schema(table)), table).cast(blob_schema(table))
    name = f"FLOE/PUBLIC/T/{table.id}/pipe0/blob-{n}.parquet"
    meta = write_blob(data, fs, f"{bucket}/{name}", crypto, name=name, files=[f"{n}.json"])
    keys = Keys(settings.redis.prefix)
    ex.redis.sadd(keys.table_segments(table.id), "pipe0")  # type: ignore[attr-defined]
    ex.redis.hset(keys.blobs("pipe0"), name, json.dumps(meta.to_dict()))  # type: ignore[attr-defined]


def test_old_and_new_blobs_after_each_change(ex: SqlExecutor, s3: Any) -> None:
    sql(ex, "CREATE TABLE t (id INT, kind VARCHAR, at TIMESTAMP_TZ)")
    load_blob(
        ex,
        s3,
        table_of(ex),
        {"ID": [1, 2], "KIND": ["a", "b"], "AT": [AT, AT], offset_column("AT"): [60, -120]},
        1,
    )
    sql(ex, "ALTER TABLE t ADD COLUMN score FLOAT")
    sql(ex, "ALTER TABLE t DROP COLUMN kind")
    sql(ex, "ALTER TABLE t ADD COLUMN kind NUMBER(10,0)")
    sql(ex, "ALTER TABLE t RENAME COLUMN at TO happened")
    table = table_of(ex)
    assert [c.name for c in table.columns] == ["ID", "HAPPENED", "SCORE", "KIND"]
    load_blob(
        ex,
        s3,
        table,
        {"ID": [3], "HAPPENED": [AT], offset_column("HAPPENED"): [0], "SCORE": [0.5], "KIND": [7]},
        2,
    )
    result = sql(ex, "SELECT * FROM t ORDER BY id")
    assert result.columns == ["ID", "HAPPENED", "SCORE", "KIND"]
    assert result.rows == [
        [1, "2024-05-01 13:00:00+01:00", None, None],  # the dropped KIND's 'a' stays out of the new one
        [2, "2024-05-01 10:00:00-02:00", None, None],
        [3, "2024-05-01 12:00:00+00:00", 0.5, 7],
    ]
    # Statistics by blob column: the old blob has none for the new KIND, so it is read, never
    # wrongly skipped; the new blob's rule it out.
    missing = sql(ex, "SELECT id FROM t WHERE kind = 99")
    assert missing.rows == [] and missing.stats["blobs_scanned"] == 1
    assert sql(ex, "SELECT id FROM t WHERE kind IS NULL ORDER BY id").rows == [[1], [2]]
    assert sql(ex, "SELECT id FROM t WHERE score > 0.1").rows == [[3]]
    assert sql(ex, "SELECT COUNT(*) FROM t").rows == [[3]]  # from the manifest
    assert sql(ex, "SELECT COUNT(*) FROM t WHERE 1 = 1").rows == [[3]]  # reads one column
    with pytest.raises(SqlError, match='"AT"'):
        sql(ex, "SELECT at FROM t")  # renamed


def test_alter_table_rules(ex: SqlExecutor, s3: Any) -> None:
    sql(ex, "CREATE TABLE t (id INT NOT NULL)")
    sql(ex, "ALTER TABLE t ADD COLUMN must INT NOT NULL")  # empty, and no pipe loads it
    assert not table_of(ex).column("MUST").nullable
    sql(ex, "ALTER TABLE t ALTER COLUMN must DROP NOT NULL")
    assert table_of(ex).column("MUST").nullable
    load_blob(ex, s3, table_of(ex), {"ID": [1], "MUST": [None]}, 1)
    with pytest.raises(CompilationError, match="cannot be added to non-empty table 'T'"):
        sql(ex, "ALTER TABLE t ADD COLUMN other INT NOT NULL")
    assert sql(ex, "ALTER TABLE IF EXISTS nope ADD COLUMN x INT").rows == [
        ["Statement executed successfully."]
    ]
    with pytest.raises(CompilationError, match="does not exist or not authorized"):
        sql(ex, "ALTER TABLE nope ADD COLUMN x INT")
    sql(ex, "ALTER TABLE t SET ENABLE_SCHEMA_EVOLUTION = TRUE COMMENT = 'events'")
    described = sql(ex, "DESC TABLE t")
    assert described.columns[-1] == "schema evolution record"
    assert described.rows == [
        ["ID", "NUMBER(38,0)", "COLUMN", "N", None],
        ["MUST", "NUMBER(38,0)", "COLUMN", "Y", None],
    ]
    shown = {r[1]: r for r in sql(ex, "SHOW TABLES").rows}
    assert shown["T"][sql(ex, "SHOW TABLES").columns.index("comment")] == "events"
    sql(ex, "ALTER TABLE t UNSET ENABLE_SCHEMA_EVOLUTION")
    assert sql(ex, "DESC TABLE t").columns == ["name", "type", "kind", "null?"]


def test_a_required_column_waits_for_the_table_s_pipes(ex: SqlExecutor) -> None:
    """A batch compiled before the change could commit rows without the column."""
    sql(ex, "CREATE TABLE t (id INT)")
    sql(ex, "CREATE PIPE p AS COPY INTO t FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING'))")
    with pytest.raises(CompilationError, match=re.escape("while pipe FLOE.PUBLIC.P loads it")):
        sql(ex, "ALTER TABLE t ADD COLUMN must INT NOT NULL")
    sql(ex, "ALTER TABLE t ADD COLUMN may INT")


def test_only_the_owner_alters(ex: SqlExecutor, redis_client: redis.Redis) -> None:
    """[ALT] ALTER TABLE takes OWNERSHIP of the table (the one check, services.access.authorize)."""
    for statement in (
        "CREATE TABLE t (id INT)",
        "CREATE ROLE r",
        "GRANT USAGE ON DATABASE floe TO ROLE r",
        "GRANT USAGE ON SCHEMA floe.public TO ROLE r",
        "GRANT SELECT, INSERT, EVOLVE SCHEMA ON TABLE t TO ROLE r",
    ):
        sql(ex, statement)
    reader = Principal("U", frozenset({"R", "PUBLIC"}), "R")
    with pytest.raises(PermissionDenied, match=re.escape("It takes OWNERSHIP on table FLOE.PUBLIC.T")):
        sql(ex, "ALTER TABLE t ADD COLUMN x INT", reader)
    sql(ex, "GRANT OWNERSHIP ON TABLE t TO ROLE r")
    sql(ex, "ALTER TABLE t ADD COLUMN x INT", reader)
    assert [c.name for c in Catalog(redis_client, ex.keys).get(Table, "FLOE.PUBLIC.T").columns] == ["ID", "X"]
    assert Column(name="ID", type="NUMBER", precision=38, scale=0) == table_of(ex).columns[0]
