"""ALTER PIPE ... REFRESH through the SQL executor, against the real LocalStack and Redis.

A file's terminal state is written the way the registrar writes it after a micro-batch
(``pipeline.registrar.Registrar.commit``), so what REFRESH reads is what a load leaves behind.
Parsing: tests/floe/catalog/test_alter_pipe_refresh.py."""

from __future__ import annotations

import datetime as dt
import itertools
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from floe.catalog import Pipe, now_ms
from floe.catalog.names import Defaults
from floe.errors import CompilationError, ObjectNotFound, PermissionDenied, SqlError
from floe.history import FileState, read_state
from floe.records import LoadOutcome, LoadStatus, QueueEntry
from pipeline.registrar import PipeCommit, Registrar
from services import backfill, dedup
from services.dedup import Deduper, FileRef, PipeRetired, Refreshed, retire_pipe
from services.snowpipe import SnowpipeService
from services.sql import REFRESH_WINDOW, SqlExecutor, refresh_since
from tests.conftest import unique
from tests.services.test_sql_access import ADMIN, make_user, run, status

pytestmark = pytest.mark.integration

_BATCHES = itertools.count(1)


def make_pipe(ex: SqlExecutor, bucket: str, *, source: str = "@st", extra: str = "", name: str = "p") -> Pipe:
    """A stage on s3://<bucket>/in/, a table, and a pipe on the stage (AUTO_INGEST = FALSE: no
    notifications to configure)."""
    status(ex, f"CREATE STAGE IF NOT EXISTS st URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = floe_tests")
    status(ex, "CREATE TABLE IF NOT EXISTS t (a INT)")
    status(ex, f"CREATE PIPE {name} AUTO_INGEST = FALSE AS COPY INTO t FROM {source} {extra}")
    return ex.catalog.get(Pipe, f"FLOE.PUBLIC.{name.upper()}")


def put(s3: Any, bucket: str, *keys: str) -> None:
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"1\n2\n")


def refresh(ex: SqlExecutor, sql: str = "ALTER PIPE p REFRESH", principal: Any = ADMIN) -> dict[str, str]:
    """File -> SENT or SKIPPED, in the statement's order."""
    result = ex.execute(sql, principal)
    assert result.columns == ["File", "Status"]
    return {str(r["File"]): str(r["Status"]) for r in result.records()}


def queued(ex: SqlExecutor, pipe: Pipe) -> list[str]:
    """The paths in the pipe's queue, in queue order (duplicates kept)."""
    return [QueueEntry.from_stream(sid, f).path for sid, f in ex.redis.xrange(ex.keys.queue(pipe.id))]


def state(ex: SqlExecutor, pipe: Pipe, path: str) -> FileState:
    found = read_state(ex.redis, ex.keys, pipe.id, path)
    assert found is not None, path
    return found


def settle(ex: SqlExecutor, pipe: Pipe, path: str, outcome: LoadStatus, error: str | None = None) -> None:
    """Commit a queued file's load as the registrar does: terminal state, queue entry deleted."""
    (sid,) = [sid for sid, f in ex.redis.xrange(ex.keys.queue(pipe.id)) if f[b"path"].decode() == path]
    rows = 0 if outcome == "LOAD_FAILED" else 2
    errors = 0 if outcome == "LOADED" else 1
    result = LoadOutcome(path, outcome, rows + errors, rows, errors, first_error=error)
    now = now_ms()
    commit = PipeCommit(pipe.id, files=[(result.apply_to(state(ex, pipe, path), now), sid.decode())])
    Registrar(ex.redis, ex.keys, ex.settings.retention_seconds).commit(commit, "query", next(_BATCHES), now)


def notified(ex: SqlExecutor, pipe: Pipe, *paths: str) -> None:
    """The paths as an S3 notification queues them."""
    Deduper(ex.redis, ex.keys, ex.settings.retention_seconds).enqueue(
        pipe, [FileRef(p, 4) for p in paths], source="notification"
    )


def failed(ex: SqlExecutor, pipe: Pipe, *paths: str) -> None:
    """The paths notified and loaded with LOAD_FAILED (a remote service down, say)."""
    notified(ex, pipe, *paths)
    for path in paths:
        settle(ex, pipe, path, "LOAD_FAILED", error="External function TO_USD failed: 503")


# ------------------------------------------------------------------------------------ what is sent


def test_new_files_are_sent_and_queued(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    pipe = make_pipe(ex, bucket)
    put(s3, bucket, "in/a.csv", "in/2026/b.csv", "elsewhere/c.csv", "in/folder/")
    assert refresh(ex) == {"2026/b.csv": "SENT", "a.csv": "SENT"}
    assert queued(ex, pipe) == ["2026/b.csv", "a.csv"]
    sizes = {QueueEntry.from_stream(sid, f).size for sid, f in ex.redis.xrange(ex.keys.queue(pipe.id))}
    assert sizes == {4}
    a = state(ex, pipe, "a.csv")
    assert (a.status, a.size, a.stage_location, a.source) == (
        "LOAD_IN_PROGRESS",
        4,
        pipe.stage_url,
        "refresh",
    )
    history = {p.decode() for p in ex.redis.zrange(ex.keys.history(pipe.id), 0, -1)}
    assert history == {"a.csv", "2026/b.csv"}


def test_pending_and_loaded_files_are_skipped(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    pipe = make_pipe(ex, bucket)
    put(s3, bucket, "in/pending.csv", "in/loaded.csv", "in/partial.csv", "in/new.csv")
    notified(ex, pipe, "pending.csv", "loaded.csv", "partial.csv")
    settle(ex, pipe, "loaded.csv", "LOADED")
    settle(ex, pipe, "partial.csv", "PARTIALLY_LOADED", error="Numeric value 'x' is not recognized")
    assert refresh(ex) == {
        "loaded.csv": "SKIPPED",
        "new.csv": "SENT",
        "partial.csv": "SKIPPED",  # its good rows are in the table: sending it again would double them
        "pending.csv": "SKIPPED",
    }
    assert queued(ex, pipe) == ["pending.csv", "new.csv"]
    assert state(ex, pipe, "partial.csv").status == "PARTIALLY_LOADED"
    assert state(ex, pipe, "loaded.csv").status == "LOADED"
    # A second REFRESH finds every file known: nothing is queued twice.
    assert set(refresh(ex).values()) == {"SKIPPED"}
    assert queued(ex, pipe) == ["pending.csv", "new.csv"]


def test_a_failed_file_is_sent_again_with_a_fresh_state(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    pipe = make_pipe(ex, bucket)
    put(s3, bucket, "in/a.csv")
    failed(ex, pipe, "a.csv")
    before = state(ex, pipe, "a.csv")
    assert before.status == "LOAD_FAILED" and before.first_error and before.loaded_ms
    assert queued(ex, pipe) == []
    # Without REFRESH the dedup memory keeps the path out for 14 days: a new notification is dropped.
    notified(ex, pipe, "a.csv")
    assert queued(ex, pipe) == []

    started = now_ms()
    assert refresh(ex) == {"a.csv": "SENT"}
    after = state(ex, pipe, "a.csv")
    assert after.status == "LOAD_IN_PROGRESS"
    assert (after.first_error, after.errors_seen, after.loaded_ms, after.rows_parsed) == (None, 0, None, None)
    assert after.received_ms >= started and after.source == "refresh" and after.size == 4
    assert queued(ex, pipe) == ["a.csv"]
    assert ex.redis.zscore(ex.keys.history(pipe.id), "a.csv") == after.received_ms
    assert 0 < ex.redis.ttl(ex.keys.file(pipe.id, "a.csv")) <= ex.settings.retention_seconds
    # It is pending now: neither REFRESH nor a notification queues it a second time.
    assert refresh(ex) == {"a.csv": "SKIPPED"}
    notified(ex, pipe, "a.csv")
    assert queued(ex, pipe) == ["a.csv"]
    # Its next load decides again.
    settle(ex, pipe, "a.csv", "LOADED")
    assert state(ex, pipe, "a.csv").status == "LOADED"
    assert refresh(ex) == {"a.csv": "SKIPPED"}


def test_concurrent_refreshes_send_each_failed_file_once(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    pipe = make_pipe(ex, bucket)
    paths = [f"f{i:02}.csv" for i in range(40)]
    put(s3, bucket, *(f"in/{p}" for p in paths))
    failed(ex, pipe, *paths)
    other = SqlExecutor(ex.settings, ex.redis)
    both = threading.Barrier(2)

    def run_one(executor: SqlExecutor) -> dict[str, str]:
        both.wait(timeout=30)
        return refresh(executor)

    with ThreadPoolExecutor(2) as pool:
        first, second = (f.result(timeout=60) for f in [pool.submit(run_one, e) for e in (ex, other)])
    sent_first = {p for p, s in first.items() if s == "SENT"}
    sent_second = {p for p, s in second.items() if s == "SENT"}
    assert set(first) == set(second) == set(paths)
    assert not sent_first & sent_second, "a failed file was sent twice"
    assert sent_first | sent_second == set(paths)
    assert sorted(queued(ex, pipe)) == paths


def test_the_script_decides_on_the_state_it_reads(ex: SqlExecutor, bucket: str) -> None:
    """The Deduper step alone: of two refreshes of one failed file, the second finds it pending."""
    pipe = make_pipe(ex, bucket)
    failed(ex, pipe, "a.csv")
    deduper = Deduper(ex.redis, ex.keys, ex.settings.retention_seconds)
    files = [FileRef("a.csv", 4), FileRef("b.csv", None)]
    assert deduper.refresh(pipe, files, source="refresh") == [Refreshed.RETRIED, Refreshed.NEW]
    assert deduper.refresh(pipe, files, source="refresh") == [Refreshed.SKIPPED, Refreshed.SKIPPED]
    sizes = [QueueEntry.from_stream(sid, f).size for sid, f in ex.redis.xrange(ex.keys.queue(pipe.id))]
    assert queued(ex, pipe) == ["a.csv", "b.csv"] and sizes == [4, None]


def test_refresh_works_in_chunks(ex: SqlExecutor, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = make_pipe(ex, bucket)
    failed(ex, pipe, "f1.csv", "f4.csv")
    monkeypatch.setattr(dedup, "REFRESH_CHUNK", 2)
    files = [FileRef(f"f{i}.csv", i) for i in range(5)]
    got = Deduper(ex.redis, ex.keys, 60).refresh(pipe, files, source="refresh")
    assert got == [Refreshed.NEW, Refreshed.RETRIED, Refreshed.NEW, Refreshed.NEW, Refreshed.RETRIED]
    assert sorted(queued(ex, pipe)) == [f.path for f in files]


def test_a_retired_pipe_takes_no_files(ex: SqlExecutor, bucket: str) -> None:
    pipe = make_pipe(ex, bucket)
    retire_pipe(ex.redis, ex.keys, pipe.id)
    with pytest.raises(PipeRetired):
        Deduper(ex.redis, ex.keys, 60).refresh(pipe, [FileRef("a.csv")], source="refresh")
    assert queued(ex, pipe) == [] and read_state(ex.redis, ex.keys, pipe.id, "a.csv") is None


# ----------------------------------------------------------------------------- what is listed


def test_prefix_is_appended_to_the_pipes_path(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    """Snowflake's example: a pipe on @st/path1/ with PREFIX = 'd1/' reads /path1/d1/."""
    make_pipe(ex, bucket, source="@st/path1/")
    put(s3, bucket, "in/path1/d1/a.csv", "in/path1/d1x/b.csv", "in/path1/d2/c.csv", "in/d1/elsewhere.csv")
    assert refresh(ex, "ALTER PIPE p REFRESH PREFIX = 'd1/'") == {"path1/d1/a.csv": "SENT"}
    # A key prefix, not a folder: 'd1' takes d1x/ too.
    assert refresh(ex, "ALTER PIPE p REFRESH PREFIX = 'd1'") == {
        "path1/d1/a.csv": "SKIPPED",
        "path1/d1x/b.csv": "SENT",
    }
    assert refresh(ex, "ALTER PIPE p REFRESH PREFIX = 'nothing/'") == {}
    assert refresh(ex) == {
        "path1/d1/a.csv": "SKIPPED",
        "path1/d1x/b.csv": "SKIPPED",
        "path1/d2/c.csv": "SENT",
    }


def _last_modified(s3: Any, bucket: str, key: str) -> dt.datetime:
    return s3.head_object(Bucket=bucket, Key=key)["LastModified"]  # type: ignore[no-any-return]


class Pages:
    """A RowSink that keeps what it was given, in order, each page with ``depth()`` as it came."""

    def __init__(self, depth: Callable[[], int] = lambda: 0) -> None:
        self.got: list[Any] = []
        self.depth = depth

    def watch(self, stop: Any) -> None:
        pass

    def start(self, columns: list[str]) -> None:
        self.got.append(columns)

    def page(self, rows: list[list[Any]], timeout_s: float) -> None:
        self.got.append((rows, self.depth()))


def test_a_streamed_refresh_sends_each_listing_page_once_queued(
    ex: SqlExecutor, s3: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The progress `floe sql` shows: a page of rows per page of S3's listing, as it is queued."""
    monkeypatch.setattr(backfill, "LISTING_PAGE_KEYS", 2)
    pipe = make_pipe(ex, bucket)
    put(s3, bucket, "in/a.csv", "in/b.csv", "in/c.csv", "in/d.csv", "in/e.csv")
    notified(ex, pipe, "c.csv")
    sink = Pages(lambda: len(queued(ex, pipe)))  # each page's files are queued before it is sent
    result = ex.execute("ALTER PIPE p REFRESH", ADMIN, sink=sink)
    assert result.rows == []
    assert sink.got == [
        ["File", "Status"],
        ([["a.csv", "SENT"], ["b.csv", "SENT"]], 3),
        ([["c.csv", "SKIPPED"], ["d.csv", "SENT"]], 4),
        ([["e.csv", "SENT"]], 5),
    ]


def test_a_streamed_refresh_of_a_missing_bucket_fails_before_its_answer(ex: SqlExecutor) -> None:
    make_pipe(ex, unique("gone"))
    sink = Pages()
    with pytest.raises(SqlError, match="does not exist; create it first"):
        ex.execute("ALTER PIPE p REFRESH", ADMIN, sink=sink)
    assert sink.got == []


def test_modified_after_bounds_the_listing(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    make_pipe(ex, bucket)
    put(s3, bucket, "in/a.csv")
    staged = _last_modified(s3, bucket, "in/a.csv")
    later = (staged + dt.timedelta(milliseconds=1)).isoformat()
    assert refresh(ex, f"ALTER PIPE p REFRESH MODIFIED_AFTER = '{later}'") == {}
    # The oldest LAST_MODIFIED to queue: a file staged at that very time is in; any offset works.
    pacific = staged.astimezone(dt.timezone(dt.timedelta(hours=-7))).isoformat()
    assert refresh(ex, f"ALTER PIPE p REFRESH MODIFIED_AFTER = '{pacific}'") == {"a.csv": "SENT"}
    # Before the 7-day window: the window's start instead, so today's file is still listed.
    long_ago = (staged - dt.timedelta(days=30)).isoformat()
    assert refresh(ex, f"ALTER PIPE p REFRESH MODIFIED_AFTER = '{long_ago}'") == {"a.csv": "SKIPPED"}


def test_files_older_than_seven_days_are_not_listed(
    ex: SqlExecutor, s3: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = make_pipe(ex, bucket)
    put(s3, bucket, "in/a.csv")
    staged = _last_modified(s3, bucket, "in/a.csv")
    # REFRESH as if run 7 days and a minute after the file was staged, with and without an older
    # MODIFIED_AFTER: the file is out of the window either way.
    then = int((staged + REFRESH_WINDOW + dt.timedelta(minutes=1)).timestamp() * 1000)
    monkeypatch.setattr("services.sql.now_ms", lambda: then)
    assert refresh(ex) == {}
    assert refresh(ex, f"ALTER PIPE p REFRESH MODIFIED_AFTER = '{staged.isoformat()}'") == {}
    assert queued(ex, pipe) == []
    # A minute inside the window it is listed.
    soon = int((staged + REFRESH_WINDOW - dt.timedelta(minutes=1)).timestamp() * 1000)
    monkeypatch.setattr("services.sql.now_ms", lambda: soon)
    assert refresh(ex) == {"a.csv": "SENT"}


@pytest.mark.unit
def test_the_window_starts_at_modified_after_but_never_earlier_than_seven_days() -> None:
    now = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)
    week = now - dt.timedelta(days=7)
    assert refresh_since(None, now) == week
    assert refresh_since(now - dt.timedelta(days=2), now) == now - dt.timedelta(days=2)
    assert refresh_since(now - dt.timedelta(days=8), now) == week
    assert refresh_since(now + dt.timedelta(days=1), now) == now + dt.timedelta(days=1)


def test_pattern_filters_the_listing(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    make_pipe(ex, bucket, extra="PATTERN = '.*/[a-z]+[.]csv'")
    put(s3, bucket, "in/d/a.csv", "in/d/b.json", "in/d/c1.csv", "in/top.csv")
    assert refresh(ex) == {"d/a.csv": "SENT"}


def test_a_paused_pipe_queues_the_files_for_when_it_resumes(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    pipe = make_pipe(ex, bucket)
    status(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE")
    put(s3, bucket, "in/a.csv")
    assert refresh(ex) == {"a.csv": "SENT"}
    assert queued(ex, pipe) == ["a.csv"]


# ---------------------------------------------------------------------------------- refusals


def test_refresh_needs_operate_or_ownership(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    pipe = make_pipe(ex, bucket)
    put(s3, bucket, "in/a.csv")
    watcher = make_user(ex, "watcher", "mon")
    operator = make_user(ex, "operator", "ops")
    nobody = make_user(ex, "nobody", "bystander")
    status(ex, "GRANT MONITOR ON PIPE p TO ROLE mon")
    status(ex, "GRANT OPERATE ON PIPE p TO ROLE ops")
    with pytest.raises(PermissionDenied) as denied:
        refresh(ex, principal=watcher)
    assert denied.value.code == "003001"
    assert "Insufficient privileges to operate on pipe 'P'" in denied.value.message
    assert "OPERATE or OWNERSHIP" in denied.value.message
    with pytest.raises(
        ObjectNotFound, match=re.escape("Pipe 'FLOE.PUBLIC.P' does not exist or not authorized")
    ):
        refresh(ex, principal=nobody)
    assert queued(ex, pipe) == []
    assert refresh(ex, principal=operator) == {"a.csv": "SENT"}
    status(ex, "GRANT OWNERSHIP ON PIPE p TO ROLE bystander")
    assert refresh(ex, principal=nobody) == {"a.csv": "SKIPPED"}


def test_if_exists(ex: SqlExecutor) -> None:
    result = run(ex, "ALTER PIPE IF EXISTS ghost REFRESH")
    assert result == [{"STATUS": "Statement executed successfully."}]
    with pytest.raises(ObjectNotFound, match=re.escape("Pipe 'FLOE.PUBLIC.GHOST' does not exist")):
        run(ex, "ALTER PIPE ghost REFRESH")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            "ALTER INTEGRATION narrow SET STORAGE_BLOCKED_LOCATIONS = ('s3://{bucket}/in/')",
            "URL 's3://{bucket}/in/' is no longer allowed by storage integration 'NARROW'",
        ),
        ("ALTER INTEGRATION narrow SET ENABLED = FALSE", "Storage integration 'NARROW' is disabled"),
        ("DROP INTEGRATION narrow", "Storage integration 'NARROW' of stage FLOE.PUBLIC.ST no longer exists"),
    ],
)
def test_the_storage_integration_is_checked_before_listing(
    ex: SqlExecutor, s3: Any, bucket: str, change: str, reason: str
) -> None:
    status(
        ex,
        "CREATE STORAGE INTEGRATION narrow TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' ENABLED = TRUE "
        f"STORAGE_ALLOWED_LOCATIONS = ('s3://{bucket}/in/')",
    )
    status(ex, f"CREATE STAGE st URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = narrow")
    pipe = make_pipe(ex, bucket)
    put(s3, bucket, "in/a.csv")
    status(ex, change.format(bucket=bucket))
    with pytest.raises(PermissionDenied) as refused:
        refresh(ex)
    assert refused.value.code == "003001"
    assert reason.format(bucket=bucket) in refused.value.message
    assert queued(ex, pipe) == [] and read_state(ex.redis, ex.keys, pipe.id, "a.csv") is None


def test_a_streaming_pipe_is_refused(ex: SqlExecutor) -> None:
    status(ex, "CREATE TABLE t (a INT)")
    status(
        ex, "CREATE PIPE sp AS COPY INTO t FROM (SELECT $1:a FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
    )
    with pytest.raises(CompilationError, match="Pipe SP is a streaming pipe: its rows come from channels"):
        run(ex, "ALTER PIPE sp REFRESH")


def test_a_missing_bucket_is_named(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    make_pipe(ex, bucket)
    s3.delete_bucket(Bucket=bucket)
    with pytest.raises(SqlError) as missing:
        run(ex, "ALTER PIPE p REFRESH")
    assert missing.value.code == "091003"
    assert f"Stage bucket '{bucket}' does not exist" in missing.value.message


def test_a_replaced_pipe_during_refresh_is_reported(
    ex: SqlExecutor, s3: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CREATE OR REPLACE between the listing and the Redis step: nothing goes to the retired queue."""
    old = make_pipe(ex, bucket)
    put(s3, bucket, "in/a.csv")
    staged: Callable[..., list[FileRef]] = ex._staged

    def list_then_replace(pipe: Pipe, prefix: str, since: dt.datetime) -> list[FileRef]:
        files = staged(pipe, prefix, since)
        status(ex, "CREATE OR REPLACE PIPE p AUTO_INGEST = FALSE AS COPY INTO t FROM @st")
        return files

    monkeypatch.setattr(ex, "_staged", list_then_replace)
    with pytest.raises(
        SqlError, match=re.escape("Pipe P was dropped or replaced while ALTER PIPE ... REFRESH")
    ):
        run(ex, "ALTER PIPE p REFRESH")
    assert not ex.redis.exists(ex.keys.queue(old.id))
    monkeypatch.undo()
    assert refresh(ex) == {"a.csv": "SENT"}  # the new incarnation, as it is now


def test_insert_report_lists_a_file_sent_again_once(ex: SqlExecutor, s3: Any, bucket: str) -> None:
    """Its failure is a recent event and it is queued again: insertReport shows it once, as now."""
    pipe = make_pipe(ex, bucket)
    put(s3, bucket, "in/a.csv")
    failed(ex, pipe, "a.csv")
    assert refresh(ex) == {"a.csv": "SENT"}
    service = SnowpipeService(
        ex.redis, ex.keys, ex.catalog, Deduper(ex.redis, ex.keys, 60), Defaults(ex.settings.database)
    )
    files = service.insert_report(pipe, None, None)["files"]
    assert [(f["path"], f["status"]) for f in files] == [("a.csv", "LOAD_IN_PROGRESS")], files
