"""The source's fair sharing of a micro-batch's file budget over pipes.

Unit tests cover the allocation (``fair_shares``); the integration tests drive ``FileStreamReader``
against the real Redis micro-batch by micro-batch, as Spark does, and check that a pipe with a
large backlog no longer holds back the pipes behind it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from bench.harness import unique
from floe.catalog import ADMIN_ROLE, Catalog, CopySpec, ExternalFunction, Pipe, Stage, Table
from floe.catalog.models import Column, new_id
from floe.external import Breaker
from floe.history import FileState, read_state
from floe.keys import Keys
from floe.records import LoadTask
from floe.settings import ExternalFunctionSettings, Settings
from pipeline.source import FileStreamReader, fair_shares, logged_offset, logged_range, rotation
from services.auth import Principal
from services.dedup import Deduper, FileRef
from services.sql import SqlExecutor
from tests.conftest import TEST_INTEGRATION, Stack, wait_until


def make_pipe(pipe_id: str, *, paused: bool = False) -> Pipe:
    return Pipe(
        id=pipe_id,
        name=f"D.S.P_{pipe_id.upper()}",
        copy_spec=CopySpec(table="D.S.T", stage="D.S.S"),
        table_id="t",
        stage_url="s3://b/",
        paused=paused,
    )


def pipes(*ids: str) -> list[Pipe]:
    return [make_pipe(i) for i in ids]


# -- allocation -------------------------------------------------------------------------------


@pytest.mark.unit
def test_equal_split() -> None:
    pending = {"a": 10_000, "b": 10_000, "c": 10_000, "d": 10_000}
    assert fair_shares(pipes(*pending), pending, 2000) == {"a": 500, "b": 500, "c": 500, "d": 500}


@pytest.mark.unit
def test_uneven_split_differs_by_at_most_one_and_rotates() -> None:
    pending = {"a": 10_000, "b": 10_000, "c": 10_000}
    assert fair_shares(pipes(*pending), pending, 2000) == {"a": 667, "b": 667, "c": 666}
    # The files that do not split evenly go to the pipes first after the rotation point.
    assert fair_shares(pipes(*pending), pending, 2000, after="a") == {"b": 667, "c": 667, "a": 666}


@pytest.mark.unit
def test_small_pipes_fully_served_and_their_leftover_goes_to_big_ones() -> None:
    pending = {"a": 10, "b": 5000, "c": 3, "d": 5000}
    shares = fair_shares(pipes(*pending), pending, 2000)
    assert shares["a"] == 10 and shares["c"] == 3
    assert {shares["b"], shares["d"]} == {994, 993}
    assert sum(shares.values()) == 2000


@pytest.mark.unit
def test_one_big_backlog_leaves_room_for_a_single_file() -> None:
    pending = {"a": 5000, "b": 1}
    assert fair_shares(pipes(*pending), pending, 2000) == {"a": 1999, "b": 1}


@pytest.mark.unit
def test_more_pipes_than_budget_rotates() -> None:
    ids = ["p0", "p1", "p2", "p3", "p4"]
    pending = dict.fromkeys(ids, 100)
    assert fair_shares(pipes(*ids), pending, 2) == {"p0": 1, "p1": 1}
    assert fair_shares(pipes(*ids), pending, 2, after="p1") == {"p2": 1, "p3": 1}
    assert fair_shares(pipes(*ids), pending, 2, after="p3") == {"p4": 1, "p0": 1}
    # Moving the rotation point past the last pipe served, every pipe gets a turn within
    # ceil(5 / 2) batches.
    after, served = "", set()
    for _ in range(3):
        shares = fair_shares(pipes(*ids), pending, 2, after=after)
        assert sum(shares.values()) == 2
        served |= set(shares)
        after = list(shares)[-1]
    assert served == set(ids)


@pytest.mark.unit
def test_budget_exactly_used_when_backlog_allows() -> None:
    pending = {"a": 7, "b": 1, "c": 300, "d": 45}
    for budget in (1, 4, 13, 100, 352):
        shares = fair_shares(pipes(*pending), pending, budget)
        assert sum(shares.values()) == min(budget, sum(pending.values())), budget
    # More budget than backlog: everything, and no more.
    assert fair_shares(pipes(*pending), pending, 10_000) == pending


@pytest.mark.unit
def test_zero_pending_pipes_are_ignored() -> None:
    pending = {"a": 0, "b": 5, "c": 0}
    assert fair_shares(pipes("a", "b", "c", "d"), pending, 100) == {"b": 5}
    assert fair_shares(pipes("a", "b"), {"a": 0, "b": 0}, 100) == {}
    assert fair_shares(pipes("a"), {"a": 5}, 0) == {}


@pytest.mark.unit
def test_paused_pipes_are_ignored() -> None:
    catalog = [make_pipe("a", paused=True), make_pipe("b"), make_pipe("c")]
    pending = {"a": 1000, "b": 10, "c": 1000}
    assert fair_shares(catalog, pending, 100) == {"b": 10, "c": 90}


@pytest.mark.unit
def test_rotation_wraps_around() -> None:
    assert rotation(["c", "a", "b"], "") == ["a", "b", "c"]
    assert rotation(["c", "a", "b"], "b") == ["c", "a", "b"]
    assert rotation(["c", "a", "b"], "bb") == ["c", "a", "b"]
    assert rotation(["c", "a", "b"], "z") == ["a", "b", "c"]


@pytest.mark.unit
@given(
    st.dictionaries(st.sampled_from("abcdefghij"), st.integers(0, 50), max_size=10),
    st.integers(0, 300),
    st.sampled_from(["", "c", "f", "z"]),
)
def test_shares_are_max_min_fair(pending: dict[str, int], budget: int, after: str) -> None:
    shares = fair_shares(pipes(*pending), pending, budget, after)
    assert sum(shares.values()) == min(budget, sum(pending.values()))
    assert all(0 < n <= pending[i] for i, n in shares.items())
    # Water-filling: a pipe left wanting has at least as much as any other pipe, give or take the
    # one file that does not split evenly.
    top = max(shares.values(), default=0)
    for i, n in pending.items():
        if shares.get(i, 0) < n:
            assert shares.get(i, 0) >= top - 1


# -- the reader against Redis -----------------------------------------------------------------


def reader(settings: Settings, keys: Keys, max_files: int) -> FileStreamReader:
    return FileStreamReader(
        {"redis_url": settings.redis.url, "prefix": keys.prefix, "max_files": str(max_files)}
    )


def micro_batches(
    r: FileStreamReader, limit: ReadMaxRows, most: int = 100
) -> Iterator[list[tuple[str, str]]]:
    """(pipe id, path) of every file of each micro-batch, planned and run the way Spark does."""
    start = r.initialOffset()
    for _ in range(most):
        end = r.latestOffset(start, limit)
        if end == start:
            return
        yield [(row[0], row[1]) for part in r.partitions(start, end) for row in r.read(part)]
        r.commit(end)
        start = end
    pytest.fail(f"still planning after {most} micro-batches")


def create_pipes(client: redis.Redis, keys: Keys, n: int) -> list[Pipe]:
    """n pipes in the catalog, in id order (the order the old source served them in)."""
    catalog = Catalog(client, keys)
    # The table and stage they were made on: a pipe without them is stopped, and not planned.
    catalog.put(Table(name="D.S.T", id="t", columns=[Column(name="A", type="NUMBER")]))
    catalog.put(Stage(name="D.S.S", url="s3://b/"))
    made = [make_pipe(i) for i in sorted(new_id() for _ in range(n))]
    for p in made:
        catalog.put(p)
    return made


def enqueue(client: redis.Redis, keys: Keys, pipe: Pipe, paths: list[str]) -> None:
    deduper = Deduper(client, keys, 3600)
    for i in range(0, len(paths), 1000):
        assert all(deduper.enqueue(pipe, [FileRef(p, 10) for p in paths[i : i + 1000]], source="rest"))


@pytest.mark.integration
def test_a_backlog_does_not_starve_a_later_pipe(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    a, b = create_pipes(redis_client, keys, 2)  # a's id is lower: the old source served it first
    a_paths = [f"a/{i:05d}.csv" for i in range(5000)]
    enqueue(redis_client, keys, a, a_paths)
    enqueue(redis_client, keys, b, ["b/only.csv"])

    batches = list(micro_batches(reader(isolated_settings, keys, 2000), ReadMaxRows(2000)))

    first = batches[0]
    assert (b.id, "b/only.csv") in first
    assert sum(1 for pipe_id, _ in first if pipe_id == a.id) == 1999  # the rest of the budget
    assert all(len(batch) <= 2000 for batch in batches)
    read_a = Counter(path for batch in batches for pipe_id, path in batch if pipe_id == a.id)
    assert set(read_a) == set(a_paths) and set(read_a.values()) == {1}  # each exactly once
    assert [len(batch) for batch in batches] == [2000, 2000, 1001]
    assert redis_client.xlen(keys.queue(a.id)) == 0 and redis_client.xlen(keys.queue(b.id)) == 0


@pytest.mark.integration
def test_more_pipes_than_budget_take_turns(isolated_settings: Settings, redis_client: redis.Redis) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    made = create_pipes(redis_client, keys, 5)
    for p in made:
        enqueue(redis_client, keys, p, [f"{p.id}/{i}.csv" for i in range(3)])

    batches = list(micro_batches(reader(isolated_settings, keys, 2), ReadMaxRows(2)))

    # Every batch makes progress with the whole budget, and within ceil(5 / 2) batches every pipe
    # has had a turn.
    assert [len(batch) for batch in batches] == [2] * 7 + [1]
    assert {pipe_id for batch in batches[:3] for pipe_id, _ in batch} == {p.id for p in made}
    read = Counter(path for batch in batches for _, path in batch)
    assert len(read) == 15 and set(read.values()) == {1}


@pytest.mark.integration
def test_budget_used_when_planned_entries_are_still_in_the_queue(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """Before entries are deleted the queue length overstates a pipe's backlog; what that pipe
    cannot use goes to the others in the same micro-batch."""
    keys = Keys(isolated_settings.redis.prefix)
    a, b = create_pipes(redis_client, keys, 2)
    enqueue(redis_client, keys, a, [f"a{i}" for i in range(3)])
    enqueue(redis_client, keys, b, [f"b{i}" for i in range(20)])
    r = reader(isolated_settings, keys, 10)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadMaxRows(10))
    first = [row[1] for part in r.partitions(start, end) for row in r.read(part)]
    assert sorted(first) == sorted([f"a{i}" for i in range(3)] + [f"b{i}" for i in range(7)])
    # No commit, no registrar: a's three entries are still in its stream.
    end2 = r.latestOffset(end, ReadMaxRows(10))
    second = [row[1] for part in r.partitions(end, end2) for row in r.read(part)]
    assert second == [f"b{i}" for i in range(7, 17)]


@pytest.mark.integration
@pytest.mark.parametrize("limit", [ReadMaxRows(10), ReadAllAvailable()], ids=["max_rows", "all_available"])
def test_a_pipe_paused_while_its_queue_is_read_plans_nothing(
    isolated_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, limit: ReadLimit
) -> None:
    """ALTER PIPE ... PAUSED lands after the plan read the catalog and before it read the queues,
    where a file sent after the pause already waits: the plan must not take it."""
    keys = Keys(isolated_settings.redis.prefix)
    a, b = create_pipes(redis_client, keys, 2)
    enqueue(redis_client, keys, a, ["a0"])
    enqueue(redis_client, keys, b, ["b0"])
    r = reader(isolated_settings, keys, 10)
    real = r._read_after
    paused: list[str] = []

    def pause_then_read(client: Any, counts: Any, end: Any) -> Any:
        if not paused:  # the pause, then a file sent after it, both between the two reads
            catalog = Catalog(redis_client, keys)
            catalog.put(catalog.get(Pipe, a.name).model_copy(update={"paused": True}))
            enqueue(redis_client, keys, a, ["a1 sent after the pause"])
            paused.append(a.name)
        return real(client, counts, end)

    monkeypatch.setattr(r, "_read_after", pause_then_read)
    start = r.initialOffset()
    end = r.latestOffset(start, limit)
    assert paused == [a.name], "the pause was injected between the catalog's read and the queues'"
    assert [row[1] for part in r.partitions(start, end) for row in r.read(part)] == ["b0"]
    assert a.id not in end
    # Resumed, it loads both files, the one sent while it was paused included.
    catalog = Catalog(redis_client, keys)
    catalog.put(catalog.get(Pipe, a.name).model_copy(update={"paused": False}))
    later = r.latestOffset(end, limit)
    assert [row[1] for part in r.partitions(end, later) for row in r.read(part)] == [
        "a0",
        "a1 sent after the pause",
    ]


@pytest.mark.integration
def test_read_all_available_reads_everything(isolated_settings: Settings, redis_client: redis.Redis) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    a, b = create_pipes(redis_client, keys, 2)
    enqueue(redis_client, keys, a, [f"a{i}" for i in range(2500)])
    enqueue(redis_client, keys, b, ["b0"])
    r = reader(isolated_settings, keys, 10)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    rows = [row for part in r.partitions(start, end) for row in r.read(part)]
    assert len(rows) == 2501


# -- the real Spark job -----------------------------------------------------------------------


@pytest.mark.integration
def test_spark_job_loads_a_later_pipe_while_a_backlog_waits(
    isolated_settings: Settings, redis_client: redis.Redis, bucket: str, s3: Any, tmp_path: Path
) -> None:
    """`floe pipeline` with 100 files per micro-batch, pipe A 5,000 files behind (objects that do
    not exist: each fails fast with LOAD_FAILED), pipe B one real file. Served in id order, B would
    wait the 50 micro-batches A's backlog takes; shared fairly, it loads in the first one."""
    state = Path(isolated_settings.state_dir)
    settings = isolated_settings.model_copy(
        update={
            "pipeline": isolated_settings.pipeline.model_copy(
                update={"max_files_per_batch": 100, "checkpoint_dir": str(tmp_path / "checkpoint")}
            ),
            "encryption": isolated_settings.encryption.model_copy(
                update={"master_key_file": str(state / "master.key")}
            ),
        },
        deep=True,
    )
    settings.encryption.resolve_master_key()  # create the key file before the job reads it
    keys = Keys(settings.redis.prefix)
    sql = SqlExecutor(settings, redis_client)
    admin = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
    stage, table = unique("st_"), unique("t_")
    sql.execute(TEST_INTEGRATION, admin)
    sql.execute(f"CREATE STAGE {stage} URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = floe_tests", admin)
    sql.execute(f"CREATE TABLE {table} (id INT, name VARCHAR)", admin)
    names = [unique("p_"), unique("p_")]
    for name in names:
        sql.execute(f"CREATE PIPE {name} AUTO_INGEST = FALSE AS COPY INTO {table} FROM @{stage}", admin)
    catalog = Catalog(redis_client, keys)
    # A is whichever pipe has the lower id: the one the old source served first.
    a, b = sorted(
        (catalog.get(Pipe, f"{settings.database}.{settings.schema_name}.{n.upper()}") for n in names),
        key=lambda p: p.id,
    )
    s3.put_object(Bucket=bucket, Key="in/b.csv", Body=b"1,one\n2,two\n")
    enqueue(redis_client, keys, a, [f"missing/{i:05d}.csv" for i in range(5000)])
    enqueue(redis_client, keys, b, ["b.csv"])

    (state / "logs").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **settings.child_env(), "PYSPARK_PYTHON": sys.executable}
    job = Stack(settings, env, {}, state / "logs")
    try:
        job.start("pipeline")

        def b_loaded() -> FileState | None:
            s = read_state(redis_client, keys, b.id, "b.csv")
            return s if s is not None and s.status == "LOADED" else None

        loaded = wait_until(b_loaded, timeout=120, what="pipe B's file to load")
        # The registrar deletes a batch's entries in the commit that made B's file LOADED, so A's
        # queue shows how many of A's files went before B's: a batch or so, not all 5,000.
        assert int(redis_client.xlen(keys.queue(a.id))) >= 4000
        # One micro-batch's commits share one time stamp: the first batch was B's file and A's
        # first 99, the rest of the budget.
        last, next_ = (read_state(redis_client, keys, a.id, f"missing/{i:05d}.csv") for i in (98, 99))
        assert last is not None and last.status == "LOAD_FAILED" and last.loaded_ms == loaded.loaded_ms
        assert next_ is not None and next_.loaded_ms != loaded.loaded_ms
    finally:
        # Killed, not drained: a drain waits for a quiet moment between micro-batches, and A's
        # backlog leaves none; nothing of this throwaway prefix and checkpoint needs a clean stop.
        job.stop("pipeline", signal.SIGKILL)
        stale = list(redis_client.scan_iter(match=f"{settings.redis.prefix}:*", count=1000))
        for i in range(0, len(stale), 1000):
            redis_client.delete(*stale[i : i + 1000])


@pytest.mark.integration
def test_a_pipe_whose_service_breaker_is_open_waits_like_a_paused_one(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    catalog = Catalog(redis_client, keys)
    url = f"http://127.0.0.1:1/{unique('svc')}"
    fn = ExternalFunction(
        name="D.S.F(VARCHAR)",
        function_name="D.S.F",
        args=[Column(name="S", type="VARCHAR")],
        returns=Column(name="F", type="VARCHAR"),
        integration="I",
        url=url,
    )
    catalog.put(fn)
    calling, plain = create_pipes(redis_client, keys, 2)
    calling = calling.model_copy(
        update={"copy_spec": calling.copy_spec.model_copy(update={"functions": {"k0": fn.name}})}
    )
    catalog.put(calling)
    enqueue(redis_client, keys, calling, ["c0", "c1"])
    enqueue(redis_client, keys, plain, ["p0"])
    breaker = Breaker(ExternalFunctionSettings(breaker_cooldown_s=600), redis_client, keys)
    trip = breaker.trip(url, "batch b: no answer")

    r = reader(isolated_settings, keys, 10)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadMaxRows(10))
    assert [row[1] for part in r.partitions(start, end) for row in r.read(part)] == ["p0"]
    assert r.latestOffset(end, ReadMaxRows(10)) == end, "held back while the breaker is open"

    breaker.close(url, trip)
    later = r.latestOffset(end, ReadMaxRows(10))
    assert sorted(row[1] for part in r.partitions(end, later) for row in r.read(part)) == ["c0", "c1"]


# -- the offset log, which the job reads a micro-batch's range from -----------------------------


def write_offsets(checkpoint: Path, batch_id: int, text: str) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch_id)).write_text(text)


METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1795906586228,"conf":{}}'


@pytest.mark.unit
def test_a_batch_starts_where_the_one_before_it_ended(tmp_path: Path) -> None:
    write_offsets(tmp_path, 6, f'v1\n{METADATA}\n{{"a": "5-0"}}')
    write_offsets(tmp_path, 7, f'v1\n{METADATA}\n{{"a": "9-1", "b": "8-0"}}')
    assert logged_range(str(tmp_path), 7) == ({"a": "5-0"}, {"a": "9-1", "b": "8-0"})
    assert logged_range(str(tmp_path), 8) is None  # not logged yet
    write_offsets(tmp_path, 0, f'v1\n{METADATA}\n{{"a": "1-0"}}')
    assert logged_range(str(tmp_path), 0) == ({}, {"a": "1-0"})  # the first batch starts at nothing


@pytest.mark.unit
@pytest.mark.parametrize(
    "text",
    [
        "",
        f"v2\n{METADATA}\n{{}}",  # a format this reader does not know
        f'v1\n{METADATA}\n{{"a": "1-0"}}\n{{"b": "2-0"}}',  # two sources: not this job's query
        f"v1\n{METADATA}\n-",  # no offset for the source
        f"v1\n{METADATA}\n[1, 2]",
        f"v1\n{METADATA}\n{{not json",
    ],
)
def test_an_offset_log_entry_in_another_form_is_not_read(tmp_path: Path, text: str) -> None:
    write_offsets(tmp_path, 3, text)
    assert logged_offset(str(tmp_path), 3) is None


@pytest.mark.integration
def test_the_offset_log_names_the_entries_spark_reads_for_each_micro_batch(
    isolated_settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The job reads a micro-batch's entries itself, over the range Spark logged for it: in real
    micro-batches of a real query, and of a second query resuming from its checkpoint, that is
    exactly what collecting the batch through the source gives."""
    from pyspark.sql import DataFrame

    from pipeline.session import spark_session
    from pipeline.source import FloeFileSource

    keys = Keys(isolated_settings.redis.prefix)
    a, b = create_pipes(redis_client, keys, 2)
    checkpoint = tmp_path / "checkpoint"
    options = {"redis_url": isolated_settings.redis.url, "prefix": keys.prefix, "max_files": "10"}
    here = FileStreamReader(options, isolated_settings.redis)
    seen: dict[int, tuple[list[LoadTask], list[LoadTask] | None]] = {}

    def compare(df: DataFrame, batch_id: int) -> None:
        via_spark = [LoadTask.from_row(r.asDict()) for r in df.collect()]
        planned = logged_range(str(checkpoint), batch_id)
        seen[batch_id] = (via_spark, None if planned is None else here.tasks(here.partitions(*planned)))

    def run_until(total: int) -> None:
        query = (
            spark.readStream.format("floe_files")
            .options(**options)
            .load()
            .writeStream.foreachBatch(compare)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            wait_until(
                lambda: sum(len(s) for s, _ in seen.values()) >= total, timeout=120, what=f"{total} files"
            )
        finally:
            query.stop()

    spark = spark_session(isolated_settings, "floe-offset-log-test")
    try:
        spark.dataSource.register(FloeFileSource)
        enqueue(redis_client, keys, a, [f"a/{i:03d}.csv" for i in range(25)])
        enqueue(redis_client, keys, b, [f"b/{i:03d}.csv" for i in range(6)])
        run_until(31)
        first = set(seen)
        enqueue(redis_client, keys, a, [f"a/late{i}.csv" for i in range(4)])
        run_until(35)  # a new query on the same checkpoint
    finally:
        spark.stop()
    assert len(first) >= 4, "31 files at 10 a batch take several micro-batches"
    assert set(seen) - first, "the second query ran micro-batches of its own"
    for batch_id, (via_spark, via_log) in sorted(seen.items()):
        assert via_spark, f"batch {batch_id} read nothing"
        assert via_log == via_spark, f"batch {batch_id}: the logged range reads other entries"
    paths = sorted(t.path for s, _ in seen.values() for t in s)
    assert len(paths) == 35 == len(set(paths)), "every file in exactly one micro-batch"


@pytest.mark.unit
def test_importing_the_source_leaves_the_readers_libraries_out() -> None:
    """Spark's streaming source runner, a Python process as long-lived as the job, imports
    ``pipeline.source``: it needs neither boto3 nor the table reader, which would cost it about
    26 MB (bench/README.md)."""
    code = (
        "import sys, pipeline.source; "
        "print(sorted(m for m in ('boto3', 'pipeline.reader') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
