"""``BatchProcessor``, the Spark job's foreachBatch, called directly: real Redis, catalog (through
the SQL executor), source reader and registrars, and LocalStack S3 for the tables bucket.

Only Spark is left out. A batch's range is written to the offset log as Spark writes it before it
runs a batch (the processor reads the batch back with the real ``FileStreamReader``), and the
batch's Spark tasks (``process_partition``) are a stand-in, ``Tasks``: it writes one real object
per blob, under the loader's own deterministic blob name, and answers in the executors' wire
format. What happens meanwhile (a DROP, another attempt's commit) runs at the processor's own fault
points (``Points``). The registrar's scripts alone: test_registrar.py; the whole stack: tests/e2e.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from pyspark.sql import DataFrame, SparkSession

from bench.harness import unique
from floe.blobs import BlobMeta
from floe.catalog import ADMIN_ROLE, Pipe, Table, now_ms
from floe.channels import ChannelStore, PipeRef
from floe.history import read_states
from floe.keys import Keys
from floe.records import LoadOutcome, LoadTask, encode_results
from floe.runtime import Faults
from floe.settings import FaultSettings, Settings
from pipeline.job import BatchProcessor, source_options
from pipeline.loader import BatchContext, blob_name
from pipeline.registrar import PipeCommit, Registrar
from pipeline.source import FileStreamReader, logged_offset
from services.auth import Principal
from services.dedup import Deduper, FileRef
from services.sql import SqlExecutor
from tests.conftest import TEST_INTEGRATION

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
ROWS = 2
"""Rows the stand-in loads from every file."""


class Tasks:
    """Stand-in for a micro-batch's Spark tasks: each file loads ``ROWS`` rows and each append its
    own rows; each (pipe, part) writes one blob, or for a streaming pipe one per channel writer."""

    def __init__(self, settings: Settings, s3: Any) -> None:
        self.bucket = settings.pipeline.tables_bucket
        self.s3 = s3
        self.calls: list[list[LoadTask]] = []
        self.contexts: list[BatchContext] = []

    def __call__(self, ctx: BatchContext, tasks: list[LoadTask]) -> list[dict[str, Any]]:
        self.calls.append(list(tasks))
        self.contexts.append(ctx)
        groups: dict[tuple[str, int], list[LoadTask]] = defaultdict(list)
        for t in tasks:
            groups[(t.pipe_id, t.part)].append(t)
        rows: list[dict[str, Any]] = []
        for (pipe_id, part), group in sorted(groups.items()):
            pipe = Pipe.model_validate_json(ctx.pipes[pipe_id])
            table = Table.model_validate_json(ctx.tables[pipe_id])
            writers: dict[tuple[Any, ...], list[LoadTask]] = defaultdict(list)
            for t in group:
                a = t.row_append
                writers[(a.channel, a.incarnation, a.client_sequencer) if a else ()].append(t)
            items: list[LoadOutcome | BlobMeta] = []
            for i, (writer, mine) in enumerate(sorted(writers.items())):
                counts = [t.row_append.rows if t.row_append else ROWS for t in mine]
                items += [
                    LoadOutcome(t.path, "LOADED", n, n).of_task(t) for t, n in zip(mine, counts, strict=True)
                ]
                name = blob_name(pipe, table, ctx.query_id, ctx.batch_id, part, channel=i if writer else None)
                items.append(self._write(name, [t.path for t in mine], sum(counts)))
            rows += encode_results(pipe_id, items).to_pylist()
        return rows

    def _write(self, name: str, files: list[str], rows: int) -> BlobMeta:
        self.s3.put_object(Bucket=self.bucket, Key=name, Body=b"blob")
        return BlobMeta(name, f"{self.bucket}/{name}", rows, 4, {}, files)

    def loaded(self) -> list[tuple[str, str]]:
        """(pipe id, path) of every task loaded, over every call."""
        return [(t.pipe_id, t.path) for call in self.calls for t in call]


class Points(Faults):
    """The processor's fault points, each of which may run one hook when a batch reaches it
    (pipeline.after_blobs: the tasks are done and nothing is committed; pipeline.between_commits:
    after each pipe's commit). No fault is armed, whatever the environment says."""

    def __init__(self) -> None:
        super().__init__(FaultSettings())
        self.at: dict[str, Callable[[], object]] = {}

    def hit(self, point: str) -> None:
        if (hook := self.at.pop(point, None)) is not None:
            hook()
        super().hit(point)


class Processor(BatchProcessor):
    """The job's processor with ``Tasks`` in place of the Spark tasks (and of the driver's own
    load of a small batch, which runs the same ``process_partition``)."""

    def __init__(self, settings: Settings, tasks: Tasks) -> None:
        reader = FileStreamReader(
            source_options(settings, Path(settings.state_dir) / "draining"), settings.redis
        )
        super().__init__(settings, cast(SparkSession, None), reader)
        self.tasks = tasks
        self.faults = self.points = Points()

    def _load_here(self, ctx: BatchContext, tasks: list[LoadTask]) -> list[dict[str, Any]]:
        return self.tasks(ctx, tasks)

    def _load_in_spark(self, ctx: BatchContext, tasks: list[LoadTask], n: int) -> list[dict[str, Any]]:
        assert len({t.part for t in tasks}) == n
        return self.tasks(ctx, tasks)


@dataclass
class Job:
    """A catalog, a checkpoint with a query id, the stand-in tasks and the processor."""

    settings: Settings
    redis: redis.Redis[bytes]
    s3: Any
    sql: SqlExecutor
    tasks: Tasks
    qid: str = field(default_factory=lambda: unique("query"))

    def __post_init__(self) -> None:
        self.keys = Keys(self.settings.redis.prefix)
        self.checkpoint = Path(self.settings.pipeline.checkpoint_dir)
        (self.checkpoint / "offsets").mkdir(parents=True)
        (self.checkpoint / "metadata").write_text(json.dumps({"id": self.qid}))
        self.restart()

    def restart(self) -> Processor:
        """A new processor on the same checkpoint, as after a restart of the job."""
        self.processor = Processor(self.settings, self.tasks)
        return self.processor

    def pipe(self, name: str, *, streaming: bool = False, replace: bool = False) -> Pipe:
        """A pipe on table T (and, unless streaming, on stage ST), made through SQL."""
        self.run_sql("CREATE TABLE IF NOT EXISTS t (a INT)")
        source = "TABLE(DATA_SOURCE(TYPE => 'STREAMING'))" if streaming else "@st"
        create = "CREATE OR REPLACE PIPE" if replace else "CREATE PIPE"
        self.run_sql(f"{create} {name} AUTO_INGEST = FALSE AS COPY INTO t FROM {source}")
        return self.sql.catalog.get(Pipe, f"FLOE.PUBLIC.{name.upper()}")

    def run_sql(self, statement: str) -> None:
        self.sql.execute(statement, ADMIN)

    def queue(self, pipe: Pipe, *paths: str) -> None:
        """Queue files as insertFiles does."""
        Deduper(self.redis, self.keys, self.settings.retention_seconds).enqueue(
            pipe, [FileRef(p, 10) for p in paths], source="rest"
        )

    def plan(self, batch_id: int) -> None:
        """Plan micro-batch ``batch_id`` as Spark does: the source's latest offset after the
        previous batch's, written to the offset log."""
        start = {} if batch_id == 0 else logged_offset(str(self.checkpoint), batch_id - 1)
        assert start is not None
        reader = FileStreamReader(source_options(self.settings, Path("/nonexistent")), self.settings.redis)
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        (self.checkpoint / "offsets" / str(batch_id)).write_text(f"v1\n{{}}\n{json.dumps(end)}")

    def at(self, point: str, hook: Callable[[], object]) -> None:
        """Run ``hook`` once when the current processor's batch reaches ``point``."""
        self.processor.points.at[point] = hook

    def run(self, batch_id: int) -> None:
        """Call the processor as foreachBatch does (its DataFrame is not read: the offset log is)."""
        self.processor(cast(DataFrame, None), batch_id)

    def states(self, pipe: Pipe) -> dict[str, tuple[str, int]]:
        """The pipe's load history: path -> (status, rows loaded)."""
        return {s.path: (s.status, s.rows_loaded) for s in read_states(self.redis, self.keys, pipe.id)}

    def manifest(self, pipe: Pipe) -> set[str]:
        """The blob names the pipe's manifest holds."""
        return {k.decode() for k in self.redis.hkeys(self.keys.blobs(pipe.id))}

    def stored(self) -> set[str]:
        """The object keys in the tables bucket."""
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.settings.pipeline.tables_bucket)
        return {o["Key"] for page in pages for o in page.get("Contents", [])}

    def marked(self, pipe: Pipe, batch_id: int, qid: str | None = None) -> bool:
        return bool(self.redis.exists(self.keys.batch_marker(pipe.id, qid or self.qid, batch_id)))

    def snapshot(self, pipe: Pipe) -> dict[str, Any]:
        """Everything a commit of the pipe writes: states (with their load times), manifest,
        load events, queue and status."""
        r, k = self.redis, self.keys
        return {
            "states": sorted(s.model_dump_json() for s in read_states(r, k, pipe.id)),
            "blobs": r.hgetall(k.blobs(pipe.id)),
            "events": r.xrange(k.events(pipe.id)),
            "queue": r.xrange(k.queue(pipe.id)),
            "status": r.hgetall(k.status(pipe.id)),
        }

    def channels(self, pipe: Pipe, *names: str) -> tuple[ChannelStore, PipeRef]:
        """Open channels of a streaming pipe, each with two appends of one row (offset tokens
        <channel>1 and <channel>2), as the streaming API does."""
        store = ChannelStore(self.redis, self.keys, 1 << 20)
        ref = PipeRef(pipe.id, *pipe.name.split("."))
        for channel in names:
            token = store.open(ref, channel, now_ms(), None, False).token
            for i in (1, 2):
                token = store.append(
                    ref, channel, token, f"r{i}", b'{"A": 1}\n', 1, None, f"{channel}{i}", now_ms()
                )
        return store, ref

    def files_counted(self, pipe: Pipe, processor: Processor | None = None) -> float:
        """Files the (current) processor's metrics counted as committed for the pipe."""
        registry = (processor or self.processor).metrics.registry
        sample = registry.get_sample_value(
            "floe_files_committed_total", {"pipe": pipe.name, "status": "LOADED"}
        )
        return sample or 0.0


@pytest.fixture
def job(
    isolated_settings: Settings, redis_client: redis.Redis[bytes], s3: Any, tmp_path: Path
) -> Iterator[Job]:
    settings = isolated_settings.model_copy(
        update={
            "pipeline": isolated_settings.pipeline.model_copy(
                update={"checkpoint_dir": str(tmp_path / "checkpoint")}
            )
        }
    )
    bucket = settings.pipeline.tables_bucket
    s3.create_bucket(Bucket=bucket)
    sql = SqlExecutor(settings, redis_client)
    sql.execute(TEST_INTEGRATION, ADMIN)
    sql.execute(f"CREATE STAGE st URL = 's3://{unique('stage')}/in/' STORAGE_INTEGRATION = floe_tests", ADMIN)
    yield Job(settings, redis_client, s3, sql, Tasks(settings, s3))
    stale = list(redis_client.scan_iter(match=f"{settings.redis.prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=o["Key"])
    s3.delete_bucket(Bucket=bucket)


def test_a_batch_commits_its_files_and_their_load_history(job: Job) -> None:
    p = job.pipe("p")
    job.queue(p, "a.csv", "b.csv", "c.csv")
    job.plan(0)
    job.run(0)
    assert sorted(job.tasks.loaded()) == [(p.id, "a.csv"), (p.id, "b.csv"), (p.id, "c.csv")]
    assert job.states(p) == {f: ("LOADED", ROWS) for f in ("a.csv", "b.csv", "c.csv")}
    (blob,) = job.manifest(p)
    assert blob.startswith(f"FLOE/PUBLIC/T/{p.table_id}/{p.id}/{job.qid}-0000000000-")
    assert job.stored() == {blob}
    assert json.loads(job.redis.hget(job.keys.blobs(p.id), blob) or b"{}")["rows"] == 3 * ROWS
    assert job.redis.xlen(job.keys.queue(p.id)) == 0
    assert job.redis.xlen(job.keys.events(p.id)) == 3
    assert job.marked(p, 0)
    assert job.files_counted(p) == 3


def test_the_tasks_get_each_pipes_storage_integration_to_check_its_keys(job: Job) -> None:
    """The integration the driver checked the stage's URL with goes to the tasks, which check
    each file's key against it (``floe.catalog.locations.key_refusal``, decision 115)."""
    job.run_sql("CREATE STAGE ist")
    p = job.pipe("p")
    job.run_sql("CREATE PIPE pi AS COPY INTO t FROM @ist")
    internal = job.sql.catalog.get(Pipe, "FLOE.PUBLIC.PI")
    job.queue(p, "a.csv")
    job.queue(internal, "b.csv")
    job.plan(0)
    job.run(0)
    (ctx,) = job.tasks.contexts
    integration = ctx.integration(p.id)
    assert integration is not None and integration.name == "FLOE_TESTS"
    assert integration.allowed_locations == ["*"]
    assert ctx.integration(internal.id) is None  # an internal stage reads through none


def test_a_replayed_batch_loads_nothing_and_changes_nothing(job: Job) -> None:
    """The same batch id after a restart, and an attempt that loses the race to commit it: the
    registrar answers REPLAYED, and the blobs stay (the manifest names them: a replay writes the
    same names)."""
    p = job.pipe("p")
    job.queue(p, "a.csv", "b.csv")
    job.plan(0)
    loser = job.processor
    committed: dict[str, Any] = {}

    def another_attempt_commits() -> None:
        job.restart()
        job.run(0)
        assert job.files_counted(p) == 2
        committed.update(job.snapshot(p))

    job.at("pipeline.after_blobs", another_attempt_commits)
    loser(cast(DataFrame, None), 0)
    assert len(job.tasks.calls) == 2, "both attempts loaded"
    assert committed and job.snapshot(p) == committed
    assert job.redis.xlen(job.keys.events(p.id)) == 2, "one commit's events"
    assert job.stored() == job.manifest(p) and len(job.stored()) == 1
    assert job.files_counted(p, loser) == 0, "the losing attempt counts nothing"
    # After a restart the batch is replayed from the offset log: nothing left to load.
    job.restart()
    job.run(0)
    assert len(job.tasks.calls) == 2
    assert job.snapshot(p) == committed and job.files_counted(p) == 0


def test_the_replay_skip_is_keyed_by_pipe_query_and_batch(job: Job) -> None:
    """A pipe whose share of this batch of this query is committed is not loaded again (its entries
    are left queued here, so that the batch marker is all that stands between the replay and a
    second load); markers of another pipe, query or batch do not hold a pipe back."""
    a, b = job.pipe("a"), job.pipe("b")
    job.queue(a, "a1.csv", "a2.csv")
    job.queue(b, "b1.csv")
    job.plan(0)
    registrar = Registrar(job.redis, job.keys, job.settings.retention_seconds)
    registrar.commit(PipeCommit(a.id), job.qid, 0, now_ms())
    registrar.commit(PipeCommit(b.id), unique("other"), 0, now_ms())
    registrar.commit(PipeCommit(b.id), job.qid, 1, now_ms())
    before = job.snapshot(a)
    job.run(0)
    assert job.tasks.loaded() == [(b.id, "b1.csv")]
    assert job.snapshot(a) == before and job.redis.xlen(job.keys.queue(a.id)) == 2
    assert job.states(b) == {"b1.csv": ("LOADED", ROWS)} and job.marked(b, 0)
    assert job.stored() == job.manifest(b) and len(job.stored()) == 1, "no blob of a's written"


def test_a_batch_over_two_pipes_commits_each_pipes_share(job: Job) -> None:
    """Loaded in Spark tasks (not in the driver), over two parts, with a path in both pipes."""
    job.settings.pipeline.driver_batch_files = 0
    job.settings.pipeline.partitions = 2
    a, b = job.pipe("a"), job.pipe("b")
    job.queue(a, "x.csv", "a.csv", "c.csv")
    job.queue(b, "x.csv", "b.csv")
    job.restart()
    job.plan(0)
    job.run(0)
    (call,) = job.tasks.calls
    assert len(call) == 5 and {t.part for t in call} == {0, 1}
    assert job.states(a) == {f: ("LOADED", ROWS) for f in ("x.csv", "a.csv", "c.csv")}
    assert job.states(b) == {f: ("LOADED", ROWS) for f in ("x.csv", "b.csv")}
    for p, files in ((a, 3), (b, 2)):
        assert job.marked(p, 0) and job.redis.xlen(job.keys.queue(p.id)) == 0
        manifest = job.manifest(p)
        assert all(f"/{p.id}/" in name for name in manifest)
        entries = [json.loads(v) for v in job.redis.hvals(job.keys.blobs(p.id))]
        assert sorted(f for e in entries for f in e["files"]) == sorted(job.states(p))
        assert sum(e["rows"] for e in entries) == files * ROWS
        assert job.files_counted(p) == files
    assert job.stored() == job.manifest(a) | job.manifest(b)


@pytest.mark.parametrize("retire", ["DROP PIPE a", "CREATE OR REPLACE PIPE"])
def test_a_pipe_retired_while_its_batch_loads_commits_nothing_and_its_blobs_go(job: Job, retire: str) -> None:
    """DROP or CREATE OR REPLACE between the batch's planning and its commit: RETIRED, and its
    blobs are deleted; the batch's other pipe commits. A replacement loads the files itself."""
    a, b = job.pipe("a"), job.pipe("b")
    job.queue(a, "a1.csv", "a2.csv")
    job.queue(b, "b1.csv")
    job.plan(0)
    successor: list[Pipe] = []
    if retire.startswith("DROP"):
        job.at("pipeline.after_blobs", lambda: job.run_sql(retire))
    else:
        job.at("pipeline.after_blobs", lambda: successor.append(job.pipe("a", replace=True)))
    job.run(0)
    assert {pipe_id for pipe_id, _ in job.tasks.loaded()} == {a.id, b.id}, "both pipes loaded"
    assert job.manifest(a) == set() and not job.marked(a, 0)
    assert job.redis.exists(job.keys.retired(a.id))
    assert job.states(b) == {"b1.csv": ("LOADED", ROWS)} and len(job.manifest(b)) == 1
    assert job.stored() == job.manifest(b), "a's blob is deleted, b's kept"
    assert job.files_counted(b) == 1
    if successor:
        (new,) = successor
        job.plan(1)
        job.run(1)
        assert job.states(new) == {"a1.csv": ("LOADED", ROWS), "a2.csv": ("LOADED", ROWS)}
        assert job.stored() == job.manifest(b) | job.manifest(new)


@pytest.mark.parametrize("meanwhile", ["reopen", "drop"])
def test_a_streaming_pipe_settles_its_channels_and_deletes_what_it_cannot_commit(
    job: Job, meanwhile: str
) -> None:
    """Channel b reopened while the batch loads: a's rows commit, b's old writer is fenced and its
    blob deleted. The pipe dropped instead: nothing commits and every blob of the batch goes (the
    pipe is gone from the catalog at the commit, so this goes through ``_discard``)."""
    sp = job.pipe("sp", streaming=True)
    store, ref = job.channels(sp, "a", "b")
    job.plan(0)
    if meanwhile == "reopen":
        job.at("pipeline.after_blobs", lambda: store.open(ref, "b", now_ms(), None, False))
    else:
        job.at("pipeline.after_blobs", lambda: job.run_sql("DROP PIPE sp"))
    job.run(0)
    assert len(job.tasks.loaded()) == 4
    if meanwhile == "reopen":
        status = store.statuses(ref, ["a", "b"])
        assert status["a"].last_committed_offset_token == "a2" and status["a"].rows_inserted == 2
        assert status["b"].last_committed_offset_token is None and status["b"].rows_inserted == 0
        (kept,) = job.manifest(sp)
        assert kept.endswith("-c00000.parquet"), "channel a's blob"
        assert job.stored() == {kept}
        assert job.redis.xlen(job.keys.rows(sp.id)) == 0
    else:
        assert job.manifest(sp) == set() and not job.marked(sp, 0)
        assert job.stored() == set()


def test_a_streaming_pipe_retired_at_its_commit_deletes_its_blobs(job: Job) -> None:
    """DROP of a streaming pipe after the commit read the catalog, before the pipe's own settle (two
    pipes: the other one's settle comes first): the channel registrar answers RETIRED and
    ``_settle`` deletes the pipe's blobs; the other pipe's rows commit."""
    s1, s2 = job.pipe("s1", streaming=True), job.pipe("s2", streaming=True)
    stores = {p.id: job.channels(p, "c") for p in (s1, s2)}
    job.plan(0)
    dropped: list[Pipe] = []

    def drop_the_other() -> None:
        (other,) = [p for p in (s1, s2) if not job.marked(p, 0)]
        job.run_sql(f"DROP PIPE {other.name}")
        dropped.append(other)

    job.at("pipeline.between_commits", drop_the_other)
    job.run(0)
    (gone,) = dropped
    (kept,) = [p for p in (s1, s2) if p is not gone]
    assert job.manifest(gone) == set() and not job.marked(gone, 0)
    store, ref = stores[kept.id]
    assert store.statuses(ref, ["c"])["c"].last_committed_offset_token == "c2"
    assert len(job.manifest(kept)) == 1 and job.stored() == job.manifest(kept)


class Killed(Exception):
    """Stands for a kill -9 at a fault point: the batch ends there, nothing after it runs."""


def _kill() -> None:
    raise Killed


def test_a_replay_planned_otherwise_deletes_what_its_killed_attempt_named_otherwise(job: Job) -> None:
    """Two pipes in a batch; the attempt loads in two tasks, commits the first pipe and dies. The
    replay finds only the second pipe's files queued and loads them in one: its blob names differ
    from the attempt's, whose blobs of that pipe no manifest will name. The replay deletes them
    (``BatchProcessor._sweep``) and keeps every committed one."""
    a, b = job.pipe("a"), job.pipe("b")
    for p in (a, b):
        job.queue(p, *(f"{p.name[-1].lower()}{i}.csv" for i in range(4)))
    job.plan(0)
    job.processor.settings = job.settings.model_copy(
        update={"pipeline": job.settings.pipeline.model_copy(update={"driver_batch_files": 0})}
    )
    job.at("pipeline.between_commits", _kill)
    with pytest.raises(Killed):
        job.run(0)
    (first,) = [p for p in (a, b) if job.marked(p, 0)]
    (second,) = [p for p in (a, b) if p is not first]
    attempt = {n for n in job.stored() if f"/{second.id}/" in n}
    assert len(attempt) == 2, "the attempt wrote the second pipe's blobs in two tasks"
    job.restart().replays_through = 0  # as run() sets it from the offset log
    job.run(0)
    assert {t.part for t in job.tasks.calls[-1]} == {0}, "the replay loads in one task"
    stale = attempt - job.manifest(second)
    assert stale, "the replay named its blobs otherwise (the attempt's task 1 has no namesake)"
    assert job.stored() == job.manifest(first) | job.manifest(second), "the attempt's other blobs are gone"
    assert set(job.states(second)) == {f"{second.name[-1].lower()}{i}.csv" for i in range(4)}


def test_a_batch_that_is_no_replay_lists_nothing_to_sweep(job: Job) -> None:
    """Only a replay sweeps: a blob of the batch's names that no manifest holds stays when the batch
    is the query's first run of it (the sweep is a LIST a pipe, paid only in replays)."""
    p = job.pipe("p")
    job.queue(p, "a.csv")
    job.plan(0)
    table = job.sql.catalog.get(Table, "FLOE.PUBLIC.T")
    stray = blob_name(p, table, job.qid, 0, 7)
    job.s3.put_object(Bucket=job.settings.pipeline.tables_bucket, Key=stray, Body=b"blob")
    job.run(0)
    assert stray in job.stored() and stray not in job.manifest(p)
    job.restart().replays_through = 1
    job.queue(p, "b.csv")
    job.plan(1)
    job.run(1)
    assert stray in job.stored(), "batch 0's names are not batch 1's to sweep"


def test_a_streaming_pipe_gone_from_the_catalog_mid_batch_settles_as_a_channel(job: Job) -> None:
    """DROP PIPE deletes the catalog entry before it retires the pipe: a batch that commits in
    between finds no pipe in the catalog. Its appends still go to the channel registrar (the batch
    knows they are appends), never to the file registrar, which wrote a file state per append and
    left the rows stream as it was."""
    s = job.pipe("s", streaming=True)
    store, ref = job.channels(s, "c")
    job.plan(0)
    job.at("pipeline.after_blobs", lambda: job.sql.catalog.delete(Pipe, s.name))
    job.run(0)
    assert job.states(s) == {}, "no file state for an append"
    assert store.statuses(ref, ["c"])["c"].last_committed_offset_token == "c2"
    assert job.redis.xlen(job.keys.rows(s.id)) == 0
