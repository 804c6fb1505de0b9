"""Large staged files: streamed in parts with bounded memory, exactly once across a crash.

A CSV file above ``pipeline.stream_file_bytes`` is read from S3 as a stream and loaded part by
part, one blob per part. The 2 GB test (marker ``volume``: `make chaos` only) records the Spark
job's peak resident size; the smaller one kills the job between parts and restarts it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from boto3.s3.transfer import TransferConfig

from floe.settings import PipelineSettings
from tests.chaos.oracle import assert_loaded_once, csv_row, repeated_rows, scan_table
from tests.chaos.test_faults import arm, disarm, fired, wait_dead
from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import done, history, make_pipe

pytestmark = pytest.mark.chaos

MB = 1 << 20


BLOCK_RECORDS = 20_000


def csv_record(i: int) -> tuple[int, str, Decimal, str]:
    """Record ``i`` of a large CSV file's repeated block: (id, name, amount, day)."""
    return (i, f"customer {i:08d} {'x' * 48}", Decimal(f"{i % 1000}.25"), f"2026-03-{1 + i % 28:02d}")


def write_csv(path: Path, target_bytes: int) -> int:
    """A CSV file of about ``target_bytes`` (header + records of ~100 bytes); returns its records.

    One block of records repeats: the checks count rows by METADATA$FILE_ROW_NUMBER, which the
    loader assigns, so repeated values do not hide a duplicate or a gap.
    """
    block = "".join(",".join(str(v) for v in csv_record(i)) + "\n" for i in range(BLOCK_RECORDS)).encode()
    per_block = block.count(b"\n")
    blocks = max(1, target_bytes // len(block))
    with path.open("wb") as f:
        f.write(b"id,name,amount,day\n")
        for _ in range(blocks):
            f.write(block)
    return blocks * per_block


def upload(s3: Any, path: Path, bucket: str, key: str) -> None:
    """Multipart upload, as any client puts a large file."""
    s3.upload_file(
        str(path), bucket, key, Config=TransferConfig(multipart_chunksize=64 * MB, max_concurrency=4)
    )


class SessionRss:
    """Samples the summed resident size of every process in one session (the Spark job's driver,
    JVM and Python workers) until stopped; ``peak`` is the largest sum seen.

    By session, not process group: PySpark's worker daemon moves itself and the workers it forks
    into a process group of their own, within the job's session.
    """

    def __init__(self, sid: int, interval: float = 0.2) -> None:
        self.sid = sid
        self.interval = interval
        self.peak = 0
        self.peak_single = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> int:
        total = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if os.getsid(int(entry.name)) != self.sid:
                    continue
                with open(f"/proc/{entry.name}/status") as f:
                    rss = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")), 0)
            except (OSError, ProcessLookupError):
                continue
            total += rss
            self.peak_single = max(self.peak_single, rss)
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.sample())
            self._stop.wait(self.interval)

    def __enter__(self) -> SessionRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def assert_counted_once(stack: Stack, table: str, key: str, records: int) -> None:
    """Every record once by count: row numbers 1..N with no repeat, and one LOADED history entry.

    For the 2 GB files, whose tens of millions of rows the value-for-value oracle would hold in
    memory; their point is the job's memory, and the kill tests check values."""
    stats = stack.sql(
        "SELECT COUNT(*) AS n, COUNT(DISTINCT row_no) AS d, MIN(row_no) AS lo, MAX(row_no) AS hi "
        f"FROM {table}"
    )[0]
    assert (stats["N"], stats["D"], stats["LO"], stats["HI"]) == (records, records, 1, records)
    hist = history(stack, table)
    assert [(h["FILE_NAME"], h["STATUS"], h["ROW_COUNT"]) for h in hist] == [(key, "Loaded", records)]


def test_large_file_killed_between_parts_loads_once(
    stack: Stack, bucket: str, s3: Any, tmp_path: Path
) -> None:
    """kill -9 of the Spark job while it streams a large file, after some of its parts are
    written as blobs; then a restart.

    Safeguards: the parts of a streamed file become blobs that are registered only in the batch's
    atomic commit (the parts written before the kill are never part of the table); the replay
    after the restart streams the file again from its first byte, under the same blob names, so
    the rows are in the table once (row numbers 1..N, no repeat) and history has one entry.
    """
    table, pipe = make_pipe(stack, bucket)
    path = tmp_path / "large.csv"
    records = write_csv(path, 40 * MB)
    # The stack streams files over 8 MB in parts of 4 MB (tests/conftest.py): this one in ten.
    size, p = path.stat().st_size, stack.settings.pipeline
    assert p.stream_file_bytes < size and p.chunk_bytes <= size / 4, "the file must stream in several parts"
    # Hit 1 is the fetch that finds the file large, hits 2.. its parts: two blobs exist at hit 4.
    before = fired(stack, "pipeline.reading")
    arm(stack, crash_at="pipeline.reading", crash_on_hit=4)
    upload(s3, path, bucket, "in/large.csv")
    assert wait_dead(stack, "pipeline") == -signal.SIGKILL
    # The synced record, not the log: the worker's log line dies with the JVM that relays it.
    assert fired(stack, "pipeline.reading") == before + 1
    disarm(stack)
    written = scan_table(stack.settings, table, csv_row)
    assert written.committed == [] and written.orphans, "the kill must come after some parts were written"
    mark = len(stack.log_text("pipeline"))
    stack.start("pipeline")
    wait_until(
        lambda: done(stack, table, 1), timeout=300, interval=1.0, what="the large file in COPY_HISTORY"
    )
    # The full oracle, value for value: the replay wrote its parts under the same names, so the
    # first attempt's parts are committed now, not left behind as orphans.
    scan = assert_loaded_once(
        stack, table, pipe, repeated_rows("large.csv", records, csv_record, BLOCK_RECORDS)
    )
    # This test's own file (its bucket is its own), in what the restarted job wrote.
    assert f"streamed s3://{bucket}/in/large.csv:" in stack.log_text("pipeline")[mark:], (
        "the file should have been streamed in parts"
    )
    print(
        f"large file: {len(written.orphans)} parts written before the kill; after the replay "
        f"{len(scan.committed)} committed blobs, {len(scan.orphans)} orphans"
    )


@pytest.mark.volume
@pytest.mark.timeout(1800)  # the load alone may take up to 1,200 s; pytest's global timeout is 600 s
def test_two_gigabyte_csv_loads_with_bounded_memory(
    stack: Stack, bucket: str, s3: Any, tmp_path: Path
) -> None:
    """A 2 GB CSV loads, and the Spark job's memory does not grow with the file.

    Safeguard: files above pipeline.stream_file_bytes are streamed in parts of
    pipeline.chunk_bytes (one blob each) instead of being read, parsed and written whole. Read
    whole, this file took about 6.4 times its size in the Python worker (13 GB); the test fails
    if any process of the job reaches half the file's size, or the whole job grows by the file's
    size over its idle size, the bounds of the JSON and Parquet files (test_large_formats.py). The
    whole job's growth alone was bounded by half the file before, and a run on a busy machine grew
    by 1,105 MiB (its largest process 809 MiB): the JVM's heap and the idle workers grow with any load.
    """
    table, _ = make_pipe(stack, bucket)
    # The production part sizes, not the stack's small ones (the restore after the test puts those back).
    stack.stop("pipeline")
    defaults = PipelineSettings()
    stack.start(
        "pipeline",
        env={
            "FLOE_PIPELINE__STREAM_FILE_BYTES": str(defaults.stream_file_bytes),
            "FLOE_PIPELINE__CHUNK_BYTES": str(defaults.chunk_bytes),
        },
    )
    path = tmp_path / "two-gigabytes.csv"
    records = write_csv(path, 2048 * MB)
    size = path.stat().st_size
    probe = SessionRss(stack.procs["pipeline"].pid)  # started with start_new_session
    idle = probe.sample()
    started = time.monotonic()
    with probe:
        upload(s3, path, bucket, "in/two-gigabytes.csv")
        path.unlink()  # the disk is not the point; LocalStack holds its copy
        wait_until(
            lambda: done(stack, table, 1), timeout=1200, interval=2.0, what="the 2 GB file in COPY_HISTORY"
        )
    elapsed = time.monotonic() - started
    assert_counted_once(stack, table, "two-gigabytes.csv", records)
    growth = probe.peak - idle
    print(
        f"\n2 GB CSV: {size / MB:.0f} MiB, {records:,} records put and loaded in {elapsed:.0f} s; "
        f"Spark job (driver + JVM + workers) idle {idle / MB:.0f} MiB, peak {probe.peak / MB:.0f} MiB "
        f"(+{growth / MB:.0f} MiB), largest single process {probe.peak_single / MB:.0f} MiB"
    )
    assert probe.peak_single < size / 2, (
        f"a process of the Spark job reached {probe.peak_single / MB:.0f} MiB"
    )
    assert growth < size, f"the Spark job grew by {growth / MB:.0f} MiB loading a {size / MB:.0f} MiB file"
