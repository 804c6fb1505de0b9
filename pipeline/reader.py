"""A Spark reader for large scans of a Floe table.

Small queries go through the API's DuckDB engine; a scan too big for one process reads the
committed blobs as a Spark DataFrame instead. The manifest decides which blobs exist (and, given
simple predicates, which can be skipped); executors fetch and decrypt them with pyarrow.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any, cast

import pyarrow as pa
from pyarrow import fs as pafs
from pyspark.sql import DataFrame, SparkSession

from floe.aws import pyarrow_s3_kwargs
from floe.blob_columns import read_as, stored_schema
from floe.blobs import crypto_from_settings, read_blob
from floe.catalog import Catalog, Table
from floe.catalog.ddl import Defaults, qualify
from floe.keys import Keys
from floe.settings import Settings
from floe.types import arrow_schema


def blob_names(settings: Settings, table: Table) -> list[str]:
    """Names of every committed blob of a table."""
    keys = Keys(settings.redis.prefix)
    names: list[str] = []
    # Closed at once: a cluster client's sockets would otherwise wait for the cycle collector.
    with closing(settings.redis.client()) as client:
        for pipe_id in Catalog(client, keys).segments(table):
            names.extend(k.decode() for k in client.hkeys(keys.blobs(pipe_id)))
    return sorted(names)


def read_table(
    spark: SparkSession, settings: Settings, table_name: str, partitions: int | None = None
) -> DataFrame:
    """The committed rows of a table (``t``, ``schema.t`` or ``db.schema.t``) as a DataFrame."""
    name = str(qualify(table_name, Defaults(settings.database, settings.schema_name)))
    with closing(settings.redis.client()) as client:
        table = Catalog(client, Keys(settings.redis.prefix)).get(Table, name)
    # A TIMESTAMP_TZ column as its instant (Spark's timestamps have no per-value offset), a TIME as
    # its text (HH:MM:SS.ffffff: Spark's Arrow exchange has no time of day).
    columns = arrow_schema(table, offsets=False)
    schema = pa.schema([f.with_type(pa.string()) if pa.types.is_time(f.type) else f for f in columns])
    # Each blob holds the columns it was written with, by stored name: a column added since reads
    # as NULL, a dropped one is not asked for, a renamed one is found (floe.blob_columns).
    stored = stored_schema(table, schema)
    names = blob_names(settings, table)
    settings_json = settings.worker_json()
    key = settings.encryption.resolve_master_key()
    n = max(1, min(partitions or spark.sparkContext.defaultParallelism, len(names) or 1))

    def decrypt(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        s = Settings.model_validate_json(settings_json)
        fs = pafs.S3FileSystem(**pyarrow_s3_kwargs(s.aws))
        crypto = crypto_from_settings(s.encryption.master_key_id, key)
        for batch in batches:
            for name in batch.column("name").to_pylist():
                data = read_blob(fs, f"{s.pipeline.tables_bucket}/{name}", crypto, name=name)
                yield from read_as(data, stored, schema).to_batches()

    names_df = spark.createDataFrame([(n_,) for n_ in names], "name string").repartition(n)
    spark_schema = _spark_ddl(schema)
    return names_df.mapInArrow(decrypt, spark_schema)


def _spark_ddl(schema: pa.Schema) -> str:
    def spark_type(t: pa.DataType) -> str:
        if pa.types.is_int64(t):
            return "bigint"
        if pa.types.is_floating(t):
            return "double"
        if pa.types.is_decimal(t):
            d = cast(Any, t)
            return f"decimal({d.precision},{d.scale})"
        if pa.types.is_boolean(t):
            return "boolean"
        if pa.types.is_date(t):
            return "date"
        if pa.types.is_timestamp(t):
            return "timestamp" if cast(Any, t).tz else "timestamp_ntz"
        if pa.types.is_binary(t):
            return "binary"
        return "string"

    return ", ".join(f"`{f.name}` {spark_type(f.type)}" for f in schema)
