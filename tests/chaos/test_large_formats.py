"""Large JSON and Parquet files (decision 83): streamed in parts with bounded memory, exactly once
across a crash between parts, as CSV files are (tests/chaos/test_large_file.py).

The 2 GB tests (marker ``volume``: `make volume` only) build their file on disk a block at a time,
never in memory, and record the Spark job's peak resident size; the smaller ones kill the job
between parts and restart it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.harness import unique
from floe.settings import PipelineSettings
from tests.chaos.oracle import assert_loaded_once, csv_row, repeated_rows, scan_table
from tests.chaos.test_faults import arm, disarm, fired, wait_dead
from tests.chaos.test_large_file import MB, SessionRss, assert_counted_once, upload
from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import done

pytestmark = pytest.mark.chaos

BLOCK_ROWS = 20_000
KILL_GROUP_ROWS = 20_000
"""Rows per row group of the kill test's Parquet file: small groups, so 40 MB streams in parts."""


def make_pipe(stack: Stack, bucket: str, kind: str) -> tuple[str, str]:
    """A stage, table and auto-ingest pipe for ``kind`` (JSON or PARQUET) files under in/; (table, pipe)."""
    stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
    stack.sql(f"CREATE STAGE {stage} URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = floe_tests")
    stack.sql(
        f"CREATE TABLE {table} (id INT NOT NULL, name VARCHAR, amount NUMBER(10,2), day DATE, "
        "file VARCHAR, row_no INT)"
    )
    stack.sql(
        f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} FROM (SELECT $1:id, $1:name, "
        f"$1:amount::NUMBER(10,2), $1:day, METADATA$FILENAME, METADATA$FILE_ROW_NUMBER FROM @{stage}) "
        f"FILE_FORMAT = (TYPE = {kind})"
    )
    return table, pipe


def json_record(i: int) -> tuple[int, str, Decimal, str]:
    """Document ``i`` of a large NDJSON file's repeated block: (id, name, amount, day)."""
    return (i, f"customer {i:08d} {'x' * 40}", Decimal(f"{i % 1000}.25"), f"2026-03-{1 + i % 28:02d}")


def parquet_names(group_rows: int) -> list[str]:
    """The name column of a large Parquet file's repeated row group: random, so it does not compress."""
    rng = np.random.default_rng(83)
    return [bytes(b).hex() for b in rng.integers(0, 256, size=(group_rows, 16), dtype=np.uint8)]


PARQUET_DAY = 20_500
"""The day column of a large Parquet file, in days since 1970-01-01."""


def parquet_records(group_rows: int) -> Callable[[int], tuple[int, str, Decimal, str]]:
    """Row ``i`` of a large Parquet file's repeated row group of ``group_rows`` rows."""
    names = parquet_names(group_rows)
    day = (dt.date(1970, 1, 1) + dt.timedelta(days=PARQUET_DAY)).isoformat()
    return lambda i: (i, names[i], Decimal(f"{i % 1000}.25"), day)


def write_ndjson(path: Path, target_bytes: int) -> int:
    """An NDJSON file of about ``target_bytes`` (documents of ~110 bytes, every 1000th pretty-printed
    over several lines), written a block at a time; returns its documents. One block repeats: the
    checks count rows by METADATA$FILE_ROW_NUMBER, which the loader assigns."""
    docs = []
    for i in range(BLOCK_ROWS):
        id_, name, amount, day = json_record(i)
        doc = {"id": id_, "name": name, "amount": str(amount), "day": day}
        docs.append(json.dumps(doc, indent=1) if i % 1000 == 999 else json.dumps(doc))
    block = ("\n".join(docs) + "\n").encode()
    blocks = max(1, target_bytes // len(block))
    with path.open("wb") as f:
        for _ in range(blocks):
            f.write(block)
    return blocks * BLOCK_ROWS


def write_parquet(path: Path, target_bytes: int, group_rows: int = 250_000) -> int:
    """A Parquet file of about ``target_bytes``: row groups of ``group_rows`` rows (about 14 MB each,
    uncompressed and without dictionaries, so the file is as large as its data), written one row
    group at a time; returns its rows."""
    names = pa.array(parquet_names(group_rows))
    base = pa.table(
        {
            "id": pa.array(np.arange(group_rows, dtype=np.int64)),
            "name": names,
            "amount": pa.array(np.arange(group_rows, dtype=np.float64) % 1000 + 0.25),
            "day": pa.array(np.full(group_rows, PARQUET_DAY, dtype=np.int32), pa.int32()).cast(pa.date32()),
        }
    )
    group_bytes = int(base.nbytes)
    groups = max(1, target_bytes // group_bytes)
    with pq.ParquetWriter(path, base.schema, compression="none", use_dictionary=False) as writer:
        for _ in range(groups):
            writer.write_table(base, row_group_size=group_rows)
    return groups * group_rows


WRITERS = {"JSON": (write_ndjson, "json"), "PARQUET": (write_parquet, "parquet")}


@pytest.mark.parametrize("kind", ["JSON", "PARQUET"])
def test_large_file_killed_between_parts_loads_once(
    stack: Stack, bucket: str, s3: Any, tmp_path: Path, kind: str
) -> None:
    """kill -9 of the Spark job while it loads a large JSON or Parquet file part by part, after some
    parts are written as blobs; then a restart.

    Safeguards: a part's blob is registered only in the batch's atomic commit, and the replay reads
    the file again from its first part under the same blob names, so each row is in the table once
    (row numbers 1..N, no repeat) and history has one entry.
    """
    table, pipe = make_pipe(stack, bucket, kind)
    write, ext = WRITERS[kind]
    path = tmp_path / f"large.{ext}"
    records = (
        write(path, 40 * MB) if kind == "JSON" else write_parquet(path, 40 * MB, group_rows=KILL_GROUP_ROWS)
    )
    size, p = path.stat().st_size, stack.settings.pipeline
    assert p.stream_file_bytes < size and p.chunk_bytes <= size / 4, "the file must stream in several parts"
    # Hit 1 is the fetch that finds the file large, hits 2.. its parts: two blobs exist at hit 4.
    before = fired(stack, "pipeline.reading")
    arm(stack, crash_at="pipeline.reading", crash_on_hit=4)
    upload(s3, path, bucket, f"in/large.{ext}")
    assert wait_dead(stack, "pipeline") == -signal.SIGKILL
    assert fired(stack, "pipeline.reading") == before + 1
    disarm(stack)
    written = scan_table(stack.settings, table, csv_row)
    assert written.committed == [] and written.orphans, "the kill must come after some parts were written"
    stack.start("pipeline")
    wait_until(
        lambda: done(stack, table, 1), timeout=300, interval=1.0, what=f"the large {kind} file in history"
    )
    # The full oracle, value for value, and no orphan: the replay wrote its parts under the same names.
    record, block = (
        (json_record, BLOCK_ROWS) if kind == "JSON" else (parquet_records(KILL_GROUP_ROWS), KILL_GROUP_ROWS)
    )
    scan = assert_loaded_once(stack, table, pipe, repeated_rows(f"large.{ext}", records, record, block))
    print(
        f"large {kind} file: {len(written.orphans)} parts written before the kill; after the replay "
        f"{len(scan.committed)} committed blobs, {len(scan.orphans)} orphans"
    )
    assert len(scan.committed) > 2


@pytest.mark.volume
@pytest.mark.timeout(3600)  # the NDJSON file alone may take 20 minutes on a busy 2-core machine
@pytest.mark.parametrize("kind", ["JSON", "PARQUET"])
def test_two_gigabyte_file_loads_with_bounded_memory(
    stack: Stack, bucket: str, s3: Any, tmp_path: Path, kind: str
) -> None:
    """A 2 GB NDJSON or Parquet file loads, and the Spark job's memory does not grow with the file.

    Safeguard: files above pipeline.stream_file_bytes are loaded in parts of about
    pipeline.chunk_bytes (JSON cut between documents, Parquet by row group, read by ranges), one
    blob each, instead of being read whole; read whole, the file's bytes alone would be 2 GB in one
    Python worker. The test fails if any process of the job reaches half the file's size, or the
    whole job grows by the file's size over its idle size (the JVM's heap grows with any load).
    """
    table, _ = make_pipe(stack, bucket, kind)
    stack.stop("pipeline")
    defaults = PipelineSettings()
    stack.start(
        "pipeline",
        env={
            "FLOE_PIPELINE__STREAM_FILE_BYTES": str(defaults.stream_file_bytes),
            "FLOE_PIPELINE__CHUNK_BYTES": str(defaults.chunk_bytes),
        },
    )
    write, ext = WRITERS[kind]
    path = tmp_path / f"two-gigabytes.{ext}"
    started = time.monotonic()
    records = write(path, 2048 * MB)
    size = path.stat().st_size
    built = time.monotonic() - started
    probe = SessionRss(stack.procs["pipeline"].pid)
    idle = probe.sample()
    mark = stack.log_mark("pipeline")
    started = time.monotonic()
    with probe:
        upload(s3, path, bucket, f"in/two-gigabytes.{ext}")
        os.unlink(path)  # the disk is not the point; LocalStack holds its copy
        uploaded = time.monotonic() - started
        wait_until(
            lambda: done(stack, table, 1), timeout=3000, interval=2.0, what=f"the 2 GB {kind} file in history"
        )
    elapsed = time.monotonic() - started
    assert_counted_once(stack, table, f"two-gigabytes.{ext}", records)
    growth = probe.peak - idle
    # This test's own file (its bucket is its own), logged since it was put.
    mine = f"streamed s3://{bucket}/in/two-gigabytes.{ext}:"
    parts = [line for line in stack.log_since("pipeline", mark).splitlines() if mine in line]
    print(
        f"\n2 GB {kind}: {size / MB:.0f} MiB, {records:,} records, built in {built:.0f} s, put in "
        f"{uploaded:.0f} s, put and loaded in {elapsed:.0f} s ({size / MB / (elapsed - uploaded):.1f} MiB/s "
        f"after the put); Spark job (driver + JVM + workers) idle {idle / MB:.0f} MiB, peak "
        f"{probe.peak / MB:.0f} MiB (+{growth / MB:.0f} MiB), largest single process "
        f"{probe.peak_single / MB:.0f} MiB; {parts[-1].split(': ', 1)[-1] if parts else ''}"
    )
    assert parts, "the file should have been streamed in parts"
    # Read whole, the file's bytes alone would be in one Python worker, and more than that in the
    # job: these are the bounds such a read breaks.
    assert probe.peak_single < size / 2, (
        f"a process of the Spark job reached {probe.peak_single / MB:.0f} MiB"
    )
    assert growth < size, f"the Spark job grew by {growth / MB:.0f} MiB loading a {size / MB:.0f} MiB file"
