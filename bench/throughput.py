"""Floe's throughput: the pipeline over staged files, and end to end from the puts.

End to end, the path measured is the whole of auto-ingest: S3 put, LocalStack's event to SQS, the
consumer's dedup and enqueue, the Spark job (read, COPY transform with casts, encrypted blobs) and
the registrar's commit; the clock starts at the first put and stops when ``SELECT COUNT(*)`` through
the API returns every row. The pipeline figure, the one compared with the limits and the peer (which
do not put files either), stages the files with the pipe paused and times from its resume to the
complete count. The file states in Redis then tell where the time went.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyarrow import fs as pafs

from bench.checksum import blob_files, checksums, committed_blobs
from bench.dataset import FLOE_SELECT, TABLE_COLUMNS_SQL, Dataset, csv_text
from bench.harness import BENCH_INTEGRATION, BenchError, FloeStack, Resources, SqlClient, unique, wait_for
from floe.aws import pyarrow_s3_kwargs
from floe.blobs import crypto_from_settings
from floe.catalog import Catalog, Pipe
from floe.history import FileState, read_states
from floe.keys import Keys

POLL_S = 0.1
COUNT_EVERY_S = 0.5


def create_pipe(
    stack: FloeStack, bucket: str, tag: str, *, extra_columns: str = "", extra_select: str = ""
) -> Pipe:
    """A stage on ``s3://bucket/in/``, the benchmark table and an auto-ingest pipe with the casts."""
    stage, table, pipe = unique(f"bench_{tag}_st_"), unique(f"bench_{tag}_t_"), unique(f"bench_{tag}_p_")
    columns = TABLE_COLUMNS_SQL[:-1] + extra_columns + ")"
    stack.sql(BENCH_INTEGRATION)
    stack.sql(
        f"CREATE STAGE {stage} URL = 's3://{bucket}/in/'"
        " STORAGE_INTEGRATION = floe_bench FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
    )
    stack.sql(f"CREATE TABLE {table} {columns}")
    stack.sql(
        f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} "
        f"FROM (SELECT {FLOE_SELECT}{extra_select} FROM @{stage})"
    )
    return pipe_model(stack, pipe)


def pipe_model(stack: FloeStack, name: str) -> Pipe:
    """The catalog's record of a pipe (its id names its Redis keys)."""
    s = stack.settings
    catalog = Catalog(s.redis.client(), Keys(s.redis.prefix))
    return catalog.get(Pipe, f"{s.database}.{s.schema_name}.{name.upper()}")


def table_name(pipe: Pipe) -> str:
    """The pipe's target table, unqualified (the benchmark uses the default schema)."""
    return pipe.copy_spec.table.split(".")[-1]


def states(stack: FloeStack, pipe: Pipe) -> list[FileState]:
    """Every file state of the pipe."""
    s = stack.settings
    return read_states(s.redis.client(), Keys(s.redis.prefix), pipe.id)


def run_floe(
    stack: FloeStack,
    resources: Resources,
    dataset: Dataset,
    *,
    staged: bool = False,
    checksum: bool = False,
    put_threads: int = 8,
    timeout_s: float | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Load the data set through Floe; returns the figures. ``on_progress(rows_visible, files_done)``.

    End to end (default) the clock runs from the first put until ``SELECT COUNT(*)`` returns every
    row. ``staged`` times the pipeline alone: the files are put while the pipe is paused, and once
    every one is queued the clock runs from ALTER PIPE ... RESUME's answer until the count is
    complete. ``checksum`` adds the checksums of the rows in the committed blobs.
    """
    bucket = resources.bucket("bench-tp-")
    pipe = create_pipe(stack, bucket, "tp")
    table = table_name(pipe)
    bodies = [(f"in/{p.name}", p.read_bytes()) for p in dataset.paths]
    s3 = resources.s3
    client = stack.settings.redis.client()
    keys = Keys(stack.settings.redis.prefix)
    total = dataset.total_rows
    timeout_s = timeout_s or max(300.0, total / 5_000)
    put_done: list[float] = []

    def put(item: tuple[str, bytes]) -> None:
        s3.put_object(Bucket=bucket, Key=item[0], Body=item[1])
        put_done.append(time.perf_counter())

    def queued() -> int:
        return int(client.zcard(keys.history(pipe.id)))

    if staged:
        stack.sql(f"ALTER PIPE {pipe.name} SET PIPE_EXECUTION_PAUSED = TRUE")
        with ThreadPoolExecutor(put_threads, thread_name_prefix="bench-put") as pool:
            list(pool.map(put, bodies))
        wait_for(lambda: queued() >= len(bodies), timeout_s, "the staged files to queue", 0.05)
    poll = SqlClient(stack.settings)
    wall0 = time.time()
    t0 = time.perf_counter()
    if staged:
        stack.sql(f"ALTER PIPE {pipe.name} SET PIPE_EXECUTION_PAUSED = FALSE")
    with poll, ThreadPoolExecutor(put_threads, thread_name_prefix="bench-put") as pool:
        futures = [] if staged else [pool.submit(put, item) for item in bodies]
        visible = 0
        next_count = t0
        end: float | None = None
        while end is None:
            now = time.perf_counter()
            if now - t0 > timeout_s:
                raise BenchError(
                    f"Floe throughput: {visible} of {total} rows visible after {timeout_s:.0f} s "
                    f"(pipeline log tail:\n{stack.log_tail('pipeline')})"
                )
            for f in [f for f in futures if f.done()]:
                f.result()  # a failed put ends the part with its error
            pending = int(client.xlen(keys.queue(pipe.id)))
            committed = max(0, queued() - pending)
            # The COUNT(*) answers from the same committed blobs the registrar published; asking it
            # twice a second keeps the API's blob cache warm, as a user's queries would, at little CPU.
            if now >= next_count or committed >= len(bodies):
                visible = int(poll.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"])
                next_count = time.perf_counter() + COUNT_EVERY_S
                if visible >= total:
                    end = time.perf_counter()
                    break
            if on_progress is not None:
                on_progress(visible, committed)
            time.sleep(POLL_S)
    elapsed = end - t0
    if visible != total:
        raise BenchError(f"Floe throughput: the table holds {visible} rows, expected {total}")
    files = states(stack, pipe)
    bad = [f.path for f in files if f.status != "LOADED"]
    if len(files) != dataset.files or bad:
        raise BenchError(f"Floe throughput: {len(files)} file states, not LOADED: {bad[:5]}")
    received_ms = [f.received_ms for f in files]
    loaded_ms = [f.loaded_ms or 0 for f in files]
    start_ms = wall0 * 1000
    breakdown = {
        "first_commit": (min(loaded_ms) - start_ms) / 1000,
        "last_commit": (max(loaded_ms) - start_ms) / 1000,
        "queryable": elapsed,
    }
    if not staged:
        breakdown = {
            "puts_done": max(put_done) - t0,
            "first_notification": (min(received_ms) - start_ms) / 1000,
            "last_notification": (max(received_ms) - start_ms) / 1000,
            **breakdown,
        }
    figures: dict[str, Any] = {
        "rows": total,
        "files": dataset.files,
        "seconds": elapsed,
        "rows_per_s": total / elapsed,
        "mb_per_s": dataset.total_bytes / 1e6 / elapsed,
        "breakdown_s": breakdown,
        "put_threads": put_threads,
        "timed": "resume → queryable" if staged else "first put → queryable",
        "pipe_id": pipe.id,
    }
    if checksum:
        s = stack.settings
        fs = pafs.S3FileSystem(**pyarrow_s3_kwargs(s.aws))
        crypto = crypto_from_settings(s.encryption.master_key_id, s.encryption.resolve_master_key())
        blobs = committed_blobs(client, s.redis.prefix, pipe.id, s.pipeline.tables_bucket)
        figures["checksum"] = checksums(blob_files(fs, blobs, crypto))
    return figures


class WarmUp:
    """Small files loaded through a pipe of their own before the timed parts.

    The first micro-batches after the Spark job starts pay for starting PySpark's Python daemons
    and importing the loader into them, and the first batch the driver loads itself for its S3
    and DuckDB handles; a running Floe has paid that long before, so the timed parts start on a
    warm job. Two loads: ``pipeline.driver_batch_files`` + 2 files queued while the pipe is paused
    and then resumed, one micro-batch too large for the driver, so it runs in Spark's tasks (at
    least one file per task, so every worker is warmed); then one file, which the driver loads.
    ``start`` returns once the consumer has queued the first files, so parts that leave the Spark
    job alone can run while it loads them.
    """

    def __init__(self, stack: FloeStack, resources: Resources) -> None:
        self.stack = stack
        self.resources = resources
        self.in_spark = (
            max(stack.settings.pipeline.driver_batch_files, stack.settings.pipeline.partitions) + 2
        )
        self.files = self.in_spark + 1
        self.started = 0.0
        self.bucket = ""
        self.pipe: Pipe | None = None

    def start(self, timeout_s: float = 120.0) -> WarmUp:
        """Put the files of the Spark batch, wait until they are queued, and resume the pipe."""
        self.bucket = self.resources.bucket("bench-warm-")
        self.pipe = pipe = create_pipe(self.stack, self.bucket, "warm")
        self.stack.sql(f"ALTER PIPE {pipe.name} SET PIPE_EXECUTION_PAUSED = TRUE")
        self.started = time.perf_counter()
        for i in range(self.in_spark):
            self._put(i)
        wait_for(
            lambda: len(states(self.stack, pipe)) >= self.in_spark,
            timeout_s,
            "the warm-up files to queue",
            0.05,
        )
        self.stack.sql(f"ALTER PIPE {pipe.name} SET PIPE_EXECUTION_PAUSED = FALSE")
        return self

    def _put(self, i: int) -> None:
        body = csv_text(i, 10).encode()
        self.resources.s3.put_object(Bucket=self.bucket, Key=f"in/warm{i}.csv", Body=body)

    def wait(self, timeout_s: float = 300.0) -> float:
        """Wait until the Spark batch is queryable, then load the driver's file; returns the
        seconds since the first put."""
        assert self.pipe is not None, "start() first"
        pipe, table = self.pipe, table_name(self.pipe)

        def loaded(files: int) -> bool:
            done = [f for f in states(self.stack, pipe) if f.status != "LOAD_IN_PROGRESS"]
            if len(done) < files:
                return False
            return int(self.stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"]) == files * 10

        wait_for(lambda: loaded(self.in_spark), timeout_s, "the warm-up files to load", 0.1)
        self._put(self.in_spark)
        wait_for(lambda: loaded(self.files), timeout_s, "the driver's warm-up file to load", 0.1)
        return time.perf_counter() - self.started
