"""Per-column checksums of the rows a system wrote, so the benchmark compares what Floe, the limits
and the peer loaded, not only how many rows.

Each system's output is read back as Arrow (Floe's committed blobs, the limit's blobs, the peer's
Parquet files), conformed to the target table's Arrow schema (lower-case names, the same types),
and summed per column by DuckDB as ``SUM(hash(column))`` over every row, NULLs included, with the
row and NULL counts. The sum does not depend on the order of rows or files, so three systems that
loaded the same rows agree whatever their blob layout.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from bench.dataset import target_schema
from floe.blobs import BlobCrypto, read_blob
from floe.keys import Keys, RedisClient

_MOD = 1 << 64


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns by the schema's (lower-case) names, cast to its types."""
    named = table.rename_columns([c.lower() for c in table.column_names])
    return named.select(schema.names).cast(schema)


def checksums(tables: Iterable[pa.Table]) -> dict[str, Any]:
    """Rows, and per column its NULLs and its hash sum (hex, modulo 2**64), over every table."""
    schema = target_schema()
    rows = 0
    nulls = dict.fromkeys(schema.names, 0)
    sums = dict.fromkeys(schema.names, 0)
    con = duckdb.connect()
    try:
        for table in tables:
            con.register("t", conform(table, schema))
            parts = ", ".join(f'COUNT("{c}"), SUM(hash("{c}"))::HUGEINT' for c in schema.names)
            (got,) = con.execute(f"SELECT COUNT(*), {parts} FROM t").fetchall()
            con.unregister("t")
            n = int(got[0])
            rows += n
            for i, name in enumerate(schema.names):
                nulls[name] += n - int(got[1 + 2 * i])
                sums[name] = (sums[name] + int(got[2 + 2 * i] or 0)) % _MOD
    finally:
        con.close()
    return {
        "rows": rows,
        "columns": {name: {"nulls": nulls[name], "hash_sum": f"{sums[name]:016x}"} for name in schema.names},
    }


def parquet_files(paths: Iterable[Path]) -> Iterable[pa.Table]:
    """Plain Parquet files (the peer's output), one table each."""
    for path in paths:
        yield pq.read_table(path)


def blob_files(
    fs: pafs.FileSystem, blobs: Iterable[tuple[str, str | None]], crypto: BlobCrypto
) -> Iterable[pa.Table]:
    """Encrypted blobs (Floe's, the limit's) as (path, the name it was written under, None for
    ``<tables bucket>/<name>``), decrypted with the master key, one table each."""
    for path, name in blobs:
        yield read_blob(fs, path, crypto, name=name)


def committed_blobs(client: RedisClient, prefix: str, pipe_id: str, bucket: str) -> list[tuple[str, None]]:
    """The blobs a pipe committed (``bucket/name``), from its manifest in Redis, for ``blob_files``."""
    raw = client.hgetall(Keys(prefix).blobs(pipe_id))
    return [(f"{bucket}/{json.loads(v)['name']}", None) for _, v in sorted(raw.items())]
