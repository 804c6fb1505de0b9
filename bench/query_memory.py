"""Queries with bounded memory (issue 15): the API's peak RSS and the query times over a 2 GB table.

* **Table**: ``(ID INT, NAME VARCHAR, AMOUNT NUMBER(10,2), DAY DATE)``, the columns and records of
  the 2 GB CSV of ``tests/chaos/test_large_file.py`` (one block of 20,000 records, repeated), about
  2 GB as CSV and 23M rows. The Spark job loads such a file as one blob per ``pipeline.chunk_bytes``
  (32 MiB) part of it; this part writes the same blobs itself with ``floe.blobs.write_blob`` into the
  run's tables bucket and commits them to the table's manifest under its pipe (a paused REST pipe),
  as the registrar does. That takes about a minute where the job takes about four, and the query
  engine reads the blobs exactly as it reads loaded ones. The load is not timed.
* **Queries**, through the API's SQL endpoint on a kept-alive connection:
  ``SELECT COUNT(*)`` (answered from the manifest's row counts), a ``GROUP BY DAY`` with a count and
  a sum, ``SELECT * ... LIMIT 10``, and a full scan of the widest column
  (``SELECT COUNT(*), MAX(NAME) ... WHERE AMOUNT >= 0``, which reads every blob). Each is run
  ``repeats`` times; the first run's time and the median are reported.
* **Memory**: the API's session RSS (``bench/memory.py``) sampled every 50 ms during each query's
  runs; its peak, and the RSS before the first query. The blobs are larger decoded than
  ``api.query_cache_blob_bytes``, so every run streams them from S3 and none is cached.

The target (issue 15): the API's peak RSS under 1 GB for each query.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyarrow import fs as pafs

from bench.harness import BENCH_INTEGRATION, BenchError, FloeStack, SqlClient, unique
from bench.memory import MemorySampler
from bench.throughput import pipe_model
from floe.aws import pyarrow_s3_kwargs
from floe.blobs import crypto_from_settings, write_blob
from floe.catalog import Catalog, Table
from floe.keys import Keys
from floe.types import arrow_schema

COLUMNS_SQL = "(ID INT NOT NULL, NAME VARCHAR, AMOUNT NUMBER(10,2), DAY DATE)"
"""The queried table, as CREATE TABLE takes it (the 2 GB CSV's columns)."""
BLOCK_RECORDS = 20_000
"""Records of the block the CSV repeats."""
RSS_TARGET_MB = 1024.0
SAMPLE_S = 0.05
WRITERS = 2
"""Blobs written at once (each encodes, compresses and encrypts on a core)."""

OnProgress = Callable[[str, int, int], None]


def queries(table: str) -> dict[str, str]:
    """The timed queries by figure name."""
    return {
        "count_star": f"SELECT COUNT(*) FROM {table}",
        "group_by": f"SELECT day, COUNT(*) AS n, SUM(amount) AS total FROM {table} GROUP BY day ORDER BY day",
        "select_limit_10": f"SELECT * FROM {table} LIMIT 10",
        "full_scan": f"SELECT COUNT(*) AS n, MAX(name) AS top FROM {table} WHERE amount >= 0",
    }


# ------------------------------------------------------------------------------------ pure logic


def csv_record(i: int) -> str:
    """Record ``i`` of the block, as the chaos test's 2 GB CSV writes it."""
    return f"{i},customer {i:08d} {'x' * 48},{i % 1000}.25,2026-03-{1 + i % 28:02d}\n"


def block_table(schema: pa.Schema) -> pa.Table:
    """The block's records as the table's Arrow types."""
    ids = range(BLOCK_RECORDS)
    return pa.table(
        {
            "ID": list(ids),
            "NAME": [f"customer {i:08d} {'x' * 48}" for i in ids],
            "AMOUNT": [Decimal(f"{i % 1000}.25") for i in ids],
            "DAY": [dt.date(2026, 3, 1 + i % 28) for i in ids],
        },
        schema=schema,
    )


def record_bytes() -> float:
    """Average CSV bytes per record of the block."""
    return sum(len(csv_record(i)) for i in range(BLOCK_RECORDS)) / BLOCK_RECORDS


def part_rows(table_bytes: int, part_bytes: int) -> list[int]:
    """Rows of each blob: the CSV of ``table_bytes`` cut into parts of ``part_bytes``."""
    per = record_bytes()
    total = int(table_bytes // per)
    step = max(1, int(part_bytes // per))
    return [min(step, total - start) for start in range(0, total, step)]


def tiled(block: pa.Table, start: int, rows: int) -> pa.Table:
    """Rows ``start`` .. ``start + rows - 1`` of the block repeated without end (zero-copy slices)."""
    pieces: list[pa.Table] = []
    at = start % block.num_rows
    while rows > 0:
        take = min(rows, block.num_rows - at)
        pieces.append(block.slice(at, take))
        rows -= take
        at = 0
    return pa.concat_tables(pieces)


def expected_group_by(total_rows: int) -> dict[str, int]:
    """COUNT(*) by DAY over ``total_rows`` rows of the repeated block."""
    whole, extra = divmod(total_rows, BLOCK_RECORDS)
    counts: dict[str, int] = {}
    for i in range(BLOCK_RECORDS):
        day = f"2026-03-{1 + i % 28:02d}"
        counts[day] = counts.get(day, 0) + whole + (1 if i < extra else 0)
    return counts


# ------------------------------------------------------------------------------------ the run


def load_table(
    stack: FloeStack, table_bytes: int, on_progress: OnProgress | None = None
) -> tuple[str, int, int]:
    """Create the table and its paused pipe, write its blobs and commit them; returns the table's
    name, its rows and its blobs."""
    s = stack.settings
    stage, table, pipe = unique("bench_qm_st_"), unique("bench_qm_t_"), unique("bench_qm_p_")
    stack.sql(BENCH_INTEGRATION)
    stack.sql(
        f"CREATE STAGE {stage} URL = 's3://{unique('bench-qm-')}/in/' STORAGE_INTEGRATION = floe_bench "
        "FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
    )
    stack.sql(f"CREATE TABLE {table} {COLUMNS_SQL}")
    stack.sql(f"CREATE PIPE {pipe} AUTO_INGEST = FALSE AS COPY INTO {table} FROM @{stage}")
    stack.sql(f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = TRUE")
    client = s.redis.client()
    # HSET, which floe.keys.RedisClient does not list, is one key's command: a cluster answers it too.
    manifest: Any = client
    keys = Keys(s.redis.prefix)
    found = Catalog(client, keys).get(Table, f"{s.database}.{s.schema_name}.{table.upper()}")
    model = pipe_model(stack, pipe)
    block = block_table(arrow_schema(found))
    fs = pafs.S3FileSystem(**pyarrow_s3_kwargs(s.aws))
    crypto = crypto_from_settings(s.encryption.master_key_id, s.encryption.resolve_master_key())
    sizes = part_rows(table_bytes, s.pipeline.chunk_bytes)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]

    def write(i: int) -> tuple[str, dict[str, Any]]:
        name = f"{s.database}/{s.schema_name}/{table.upper()}/{found.id}/{model.id}/bench-{i:05d}.parquet"
        path = f"{s.pipeline.tables_bucket}/{name}"
        meta = write_blob(tiled(block, starts[i], sizes[i]), fs, path, crypto, name=name, files=[f"part-{i}"])
        return name, meta.to_dict()

    with ThreadPoolExecutor(WRITERS, thread_name_prefix="bench-qm-write") as pool:
        for done, (name, entry) in enumerate(pool.map(write, range(len(sizes))), start=1):
            manifest.hset(keys.blobs(model.id), name, json.dumps(entry))
            if on_progress is not None:
                on_progress("writing blobs", done, len(sizes))
    return table, sum(sizes), len(sizes)


def timed_query(
    stack: FloeStack, client: SqlClient, sql: str, repeats: int
) -> tuple[list[float], dict[str, Any], list[dict[str, Any]]]:
    """Run ``sql`` ``repeats`` times with the API's RSS sampled; the times, the memory peak and the
    last answer."""
    seconds: list[float] = []
    rows: list[dict[str, Any]] = []
    with MemorySampler({"api": stack.sid("api")}, interval_s=SAMPLE_S) as sampler:
        for _ in range(repeats):
            t0 = time.perf_counter()
            rows = client.sql(sql)
            seconds.append(time.perf_counter() - t0)
    return seconds, sampler.result()["api"], rows


def check(name: str, rows: list[dict[str, Any]], total: int) -> None:
    """BenchError unless a query answered what the table holds."""
    if name == "count_star" and rows != [{"COUNT(*)": total}]:
        raise BenchError(f"COUNT(*) answered {rows}, not {total}")
    if name == "group_by":
        got = {str(r["DAY"]): r["N"] for r in rows}
        if got != expected_group_by(total):
            raise BenchError(f"the GROUP BY answered {len(rows)} days that do not add up to {total} rows")
    if name == "select_limit_10" and len(rows) != 10:
        raise BenchError(f"SELECT * LIMIT 10 answered {len(rows)} rows")
    if name == "full_scan" and (rows[0]["N"] != total or not str(rows[0]["TOP"]).startswith("customer")):
        raise BenchError(f"the full scan answered {rows}")


def run_query_memory(
    stack: FloeStack, table_bytes: int, repeats: int, on_progress: OnProgress | None = None
) -> dict[str, Any]:
    """Load the table (untimed), then time each query and sample the API's RSS; the figures."""
    t0 = time.perf_counter()
    table, total, blobs = load_table(stack, table_bytes, on_progress)
    load_s = time.perf_counter() - t0
    probe = MemorySampler({"api": stack.sid("api")})
    probe.sample()
    idle = probe.result()["api"]["peak_rss_mb"]
    out: dict[str, Any] = {
        "table": {"csv_mb": round(table_bytes / (1 << 20)), "rows": total, "blobs": blobs},
        "load_s": round(load_s, 1),
        "api_rss_before_mb": idle,
        "rss_target_mb": RSS_TARGET_MB,
        "queries": {},
    }
    cache = stack.settings.api
    out["settings"] = {
        "query_memory_limit": stack.settings.query.memory_limit,
        "query_threads": stack.settings.query.threads,
        "api_query_cache_bytes": cache.query_cache_bytes,
        "api_query_cache_blob_bytes": cache.query_cache_blob_bytes,
    }
    with SqlClient(stack.settings, timeout=600.0) as client:
        for done, (name, sql) in enumerate(queries(table).items(), start=1):
            seconds, memory, rows = timed_query(stack, client, sql, repeats)
            check(name, rows, total)
            out["queries"][name] = {
                "sql": sql.replace(table, "t"),
                "first_s": round(seconds[0], 3),
                "median_s": round(statistics.median(seconds), 3),
                "runs_s": [round(x, 3) for x in seconds],
                "peak_rss_mb": memory["peak_rss_mb"],
                "met": memory["peak_rss_mb"] < RSS_TARGET_MB,
            }
            if on_progress is not None:
                on_progress("queries", done, len(queries(table)))
    # One figure for the target (bench.report): the highest peak over every query.
    out["peak_rss_mb"] = max(q["peak_rss_mb"] for q in out["queries"].values())
    return out
