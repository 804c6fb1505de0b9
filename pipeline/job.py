"""The long-running Spark Structured Streaming job.

One query reads every pipe's queue through the ``floe_files`` source. Each micro-batch
(``foreachBatch``) skips pipes whose share of the batch is already committed (a replay), spreads
the files over ``pipeline.partitions`` tasks that read, transform and write blobs
(``mapInArrow``), and hands the results to the registrar, one atomic commit per pipe.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from floe.aws import AWS_ERRORS
from floe.aws import client as aws_client
from floe.catalog import (
    ApiIntegration,
    Catalog,
    ExternalFunction,
    Pipe,
    Table,
    now_ms,
)
from floe.catalog.locations import refusal, storage_integration
from floe.catalog.pipe_state import pipe_stopped
from floe.heartbeat import PIPELINE, Heartbeat
from floe.history import FileState
from floe.keys import REDIS_ERRORS, Keys, RedisClient
from floe.metrics import CommittedFile, PipelineMetrics, serve
from floe.records import TASK_SCHEMA, WIRE_DDL, LoadTask, PipeResults, decode_results
from floe.runtime import Faults, Readiness, Shutdown, log_context, log_lines, setup_logging
from floe.settings import Settings
from pipeline.loader import BatchContext, batch_prefix, external_entry, process_partition
from pipeline.registrar import ChannelRegistrar, ChannelSettle, Outcome, PipeCommit, Registrar
from pipeline.session import spark_session
from pipeline.source import FileStreamReader, FloeFileSource, last_planned, logged_range

log = logging.getLogger("floe.pipeline")

HEARTBEAT_TIMEOUT_S = 5.0
"""Socket timeouts of the heartbeat's Redis client."""


def external_functions(catalog: Catalog, pipe: Pipe) -> tuple[dict[str, str], str | None]:
    """The external functions ``pipe``'s COPY calls, by call key (``loader.external_entry``), as
    the catalog has them now; and why the pipe cannot load, when one of them or its API
    integration is gone (the files then fail unread, saying so). A disabled integration or a URL
    it no longer admits is the caller's to refuse, per request, naming the function."""
    entries: dict[str, str] = {}
    for key, signature in pipe.copy_spec.functions.items():
        fn = catalog.find(ExternalFunction, signature)
        if fn is None:
            return {}, f"External function {signature}, which pipe {pipe.name} calls, no longer exists."
        integration = catalog.find(ApiIntegration, fn.integration)
        if integration is None:
            return {}, (
                f"API integration {fn.integration} of external function {signature}, which pipe "
                f"{pipe.name} calls, no longer exists."
            )
        entries[key] = external_entry(fn, integration)
    return entries, None


def stored_states(client: RedisClient, keys: Keys, files: list[tuple[str, str]]) -> list[bytes | None]:
    """The stored state of each (pipe id, path), in order, in one round trip: a GET per file in one
    pipeline, which a Redis Cluster client splits by node (one MGET could not span the pipes, whose
    keys lie on different slots, and a cluster pipeline refuses MGET)."""
    if not files:
        return []
    with client.pipeline(transaction=False) as pipe:
        for pipe_id, path in files:
            pipe.get(keys.file(pipe_id, path))
        return cast(list[bytes | None], pipe.execute())


class BatchProcessor:
    """The foreachBatch function, with its Redis handles."""

    def __init__(
        self,
        settings: Settings,
        spark: SparkSession,
        reader: FileStreamReader,
        metrics: PipelineMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.reader = reader
        """The source's reader, to read a micro-batch's entries here."""
        self.metrics = metrics or PipelineMetrics.create()
        self.spark = spark
        self.redis = settings.redis.client()
        self.keys = Keys(settings.redis.prefix)
        self.catalog = Catalog(self.redis, self.keys)
        self.registrar = Registrar(self.redis, self.keys, settings.retention_seconds)
        self.channels = ChannelRegistrar(self.redis, self.keys, settings.retention_seconds)
        self.master_key = settings.encryption.resolve_master_key()
        self.settings_json = settings.worker_json()
        self._query_id: str | None = None
        self.faults = Faults(settings.faults)
        self.batches = 0
        self.replays_through = -1
        """The last micro-batch an earlier run of the query planned (``run`` sets it at each start):
        a batch up to it is a replay, whose killed attempt may have written blobs it does not."""

    def query_id(self) -> str:
        """The streaming query's id, which lives in the checkpoint and survives restarts."""
        if self._query_id is None:
            meta = Path(self.settings.pipeline.checkpoint_dir) / "metadata"
            self._query_id = str(json.loads(meta.read_text())["id"])
        return self._query_id

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        # Every line the driver logs for this micro-batch carries its id.
        token = log_context.set({**(log_context.get() or {}), "batch": batch_id})
        try:
            self._batch(df, batch_id)
        except REDIS_ERRORS:
            self.metrics.redis_errors.inc("batch")  # the batch fails; the next query replays it
            raise
        finally:
            log_context.reset(token)

    def _batch(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        p = self.settings.pipeline
        qid = self.query_id()
        queued = self._queued(df, batch_id)
        collected = time.monotonic()
        by_pipe: dict[str, list[LoadTask]] = defaultdict(list)
        for t in queued:
            by_pipe[t.pipe_id].append(t)
        pipes: dict[str, str] = {}
        tables: dict[str, str] = {}
        refused: dict[str, str] = {}
        functions: dict[str, dict[str, str]] = {}
        integrations: dict[str, str] = {}
        todo: list[LoadTask] = []
        names: dict[str, str] = {}
        """pipe id -> name, for the pipes of staged files (a streaming pipe's appends are no files)."""
        for pipe_id, files in by_pipe.items():
            if self.registrar.committed(pipe_id, qid, batch_id):
                log.info("batch %d already committed for pipe %s: replay skipped", batch_id, pipe_id)
                continue
            pipe = self.catalog.pipe_by_id(pipe_id)
            if pipe is None:
                log.warning("pipe %s is gone; dropping %d queued files", pipe_id, len(files))
                continue
            stopped = pipe_stopped(self.catalog, pipe)
            if stopped is not None and pipe.source == "streaming":
                log.warning("the table of pipe %s is gone; dropping %d appends", pipe_id, len(files))
                continue
            pipes[pipe_id] = pipe.model_dump_json()
            if pipe.source != "streaming":
                names[pipe_id] = pipe.name
            if stopped is not None:
                # Stopped after this batch was planned (the source holds a stopped pipe back): the
                # files fail unread, saying why, so none is left queued with no load to end it.
                refused[pipe_id] = f"{stopped.state}: {stopped.reason}"
                log.warning("%d files refused: %s", len(files), stopped.reason, extra={"pipe": pipe.name})
                todo.extend(files)
                continue
            table = self.catalog.get(Table, pipe.copy_spec.table)
            tables[pipe_id] = table.model_dump_json()
            calls, missing = external_functions(self.catalog, pipe)
            if calls:
                functions[pipe_id] = calls
            if (reason := refusal(self.catalog, self.settings, pipe) or missing) is not None:
                refused[pipe_id] = reason
                log.warning("%d files refused: %s", len(files), reason, extra={"pipe": pipe.name})
            elif (integration := storage_integration(self.catalog, pipe)) is not None:
                integrations[pipe_id] = integration.model_dump_json()  # each file's key is checked too
            todo.extend(files)
        if not todo:
            return
        log_lines(  # the journey's ``picked`` step
            log,
            (
                (
                    logging.INFO,
                    f"picked by micro-batch {batch_id}",
                    {"pipe": names[t.pipe_id], "file": t.path, "step": "picked"},
                )
                for t in todo
                if t.pipe_id in names
            ),
        )
        forced = self.faults.current().load_path
        here = (forced == "driver") if forced else on_driver(todo, p.driver_batch_files, p.driver_batch_bytes)
        n = 1 if here else max(1, min(p.partitions, len(todo)))
        todo.sort(key=lambda t: (t.pipe_id, t.path))
        tasks = [t.in_part(_part(t, i, n)) for i, t in enumerate(todo)]
        ctx = BatchContext(
            self.settings_json,
            self.master_key,
            qid,
            batch_id,
            pipes,
            tables,
            refused,
            functions,
            integrations,
        )
        results = self._load_here(ctx, tasks) if here else self._load_in_spark(ctx, tasks, n)
        self.faults.hit("pipeline.after_blobs")
        if (delay := self.faults.current().commit_delay_s) > 0:
            log.warning("fault injection: batch %d waits %.1f s before its commit", batch_id, delay)
            time.sleep(delay)
        loaded = time.monotonic()
        self._commit(results, by_pipe, qid, batch_id)
        if batch_id <= self.replays_through:
            self._sweep(tables, qid, batch_id)
        self.faults.hit("pipeline.after_commit")
        self.batches += 1
        self.metrics.loads.batch(time.monotonic() - started, len(todo))
        log.info(
            "batch %d: %d files, %d pipes in %.2f s (%.2f s reading the queue, %.2f s loading %s, "
            "%.2f s committing)",
            batch_id,
            len(todo),
            len(pipes),
            time.monotonic() - started,
            collected - started,
            loaded - collected,
            "in the driver" if here else f"in {n} Spark tasks",
            time.monotonic() - loaded,
            extra={"batch": batch_id},
        )

    def _queued(self, df: DataFrame, batch_id: int) -> list[LoadTask]:
        """The micro-batch's tasks, read from Redis here over the range Spark logged for the batch:
        what the source's ``read`` would return, without the Spark job that collecting ``df`` runs
        (0.1-0.2 s a batch). Through ``df`` when the offset log cannot be read."""
        planned = logged_range(self.settings.pipeline.checkpoint_dir, batch_id)
        if planned is not None:
            return self.reader.tasks(self.reader.partitions(*planned))
        log.warning("batch %d: its offsets are not in the offset log; reading it through Spark", batch_id)
        return [LoadTask.from_row(r.asDict()) for r in df.collect()]

    def _load_in_spark(self, ctx: BatchContext, tasks: list[LoadTask], n: int) -> list[dict[str, Any]]:
        """Load the batch in ``n`` Spark tasks; their output rows."""
        # One element per Spark partition, each the list of its tasks' rows: the partitions come out
        # as planned without a shuffle (partitionBy cost a whole extra stage per micro-batch).
        groups = [[t.task_row() for t in tasks if t.part == i] for i in range(n)]
        rdd = self.spark.sparkContext.parallelize(groups, n).flatMap(lambda group: group)
        rows = (
            self.spark.createDataFrame(rdd, TASK_SCHEMA)
            .mapInArrow(lambda it: process_partition(ctx, it), WIRE_DDL)
            .collect()
        )
        return [r.asDict() for r in rows]

    def _load_here(self, ctx: BatchContext, tasks: list[LoadTask]) -> list[dict[str, Any]]:
        """Load a small batch in this process, as one Spark task would: the same code, the same
        blobs and output rows, without a job's scheduling and Python worker round trips."""
        return [
            row
            for out in process_partition(ctx, iter([LoadTask.to_batch(tasks)]), in_driver=True)
            for row in out.to_pylist()
        ]

    def _commit(
        self, results: list[dict[str, Any]], by_pipe: dict[str, list[LoadTask]], qid: str, batch_id: int
    ) -> None:
        now = now_ms()
        received = {(t.pipe_id, t.path): t.received_ms for tasks in by_pipe.values() for t in tasks}
        since = {(t.pipe_id, t.path): t.since_ms for tasks in by_pipe.values() for t in tasks}
        pipes = {pipe_id: self.catalog.pipe_by_id(pipe_id) for pipe_id in by_pipe}
        returned = decode_results(results)
        # From the batch's own entries, not the catalog: a streaming pipe dropped since the batch was
        # planned is gone from the catalog, and its appends must still go to the channel registrar,
        # which refuses them, never to the file registrar.
        streaming = {pipe_id for pipe_id, tasks in by_pipe.items() if any(t.append for t in tasks)}
        for pipe_id in streaming & set(returned):
            self._settle(pipe_id, returned.pop(pipe_id), by_pipe[pipe_id], qid, batch_id, now)
        named = {pipe_id: p.name for pipe_id, p in pipes.items() if p is not None}
        commits = {
            pipe_id: PipeCommit(pipe_id, blobs=res.blobs, pipe_name=named.get(pipe_id, ""))
            for pipe_id, res in returned.items()
        }
        files = [(pipe_id, result) for pipe_id, res in returned.items() for result in res.outcomes]
        olds = stored_states(self.redis, self.keys, [(pipe_id, o.path) for pipe_id, o in files])
        for (pipe_id, result), old in zip(files, olds, strict=True):
            pipe = pipes.get(pipe_id)
            state = (
                FileState.model_validate_json(old)
                if old
                else FileState(
                    path=result.path,
                    stage_location=pipe.stage_url if pipe else "",
                    received_ms=received[(pipe_id, result.path)],
                )
            )
            # The registrar logs each file as it commits it (a failure at WARNING, with its error).
            commits[pipe_id].files.append((result.apply_to(state, now), result.stream_id))
        for c in commits.values():
            outcome = self.registrar.commit(c, qid, batch_id, now)
            if outcome is Outcome.COMMITTED:
                self._count(c, pipes.get(c.pipe_id), since, now)
            if outcome is Outcome.REPLAYED:
                log.info("pipe %s batch %d was committed by an earlier attempt", c.pipe_id, batch_id)
            elif outcome is Outcome.RETIRED:
                self._discard(c, batch_id)
            self.faults.hit("pipeline.between_commits")

    def _settle(
        self, pipe_id: str, res: PipeResults, tasks: list[LoadTask], qid: str, batch_id: int, now: int
    ) -> None:
        """Commit a streaming pipe's appends, channel by channel (pipeline.registrar.ChannelRegistrar)."""
        settles = channel_settles(res, tasks, now)
        settled = self.channels.settle(pipe_id, settles, qid, batch_id, now)
        if settled.outcome is Outcome.RETIRED:
            self._delete_blobs(
                [b["name"] for c in settles for b in c.blobs], batch_id, "the pipe was dropped"
            )
        elif settled.fenced_blobs:
            self._delete_blobs(settled.fenced_blobs, batch_id, "their channels were reopened or dropped")
        if settled.outcome is Outcome.COMMITTED:
            pipe = self.catalog.pipe_by_id(pipe_id)
            fenced = set(settled.fenced_blobs)
            for c in settles:  # a fenced writer's rows were not committed
                if not any(b["name"] in fenced for b in c.blobs):
                    name = pipe.name if pipe else pipe_id
                    self.metrics.loads.settled(name, c.channel, c.rows_inserted, c.latency_ms / 1000)
        self.faults.hit("pipeline.between_commits")

    def _count(self, c: PipeCommit, pipe: Pipe | None, since: dict[tuple[str, str], int], now: int) -> None:
        """The metrics of a pipe's commit that happened (not a replay, not a retired pipe's)."""
        files = [
            CommittedFile(
                state.status,
                state.rows_loaded,
                state.size,
                (now - since.get((c.pipe_id, state.path), now)) / 1000,
            )
            for state, _ in c.files
        ]
        self.metrics.loads.committed(pipe.name if pipe else c.pipe_id, files)

    def _discard(self, c: PipeCommit, batch_id: int) -> None:
        """Delete the blobs of a commit the registrar refused: no manifest will ever name them.

        The pipe was dropped or replaced while the batch loaded; its queued files went to the
        successor, which loads them itself. A failed delete only leaves garbage (docs/decisions.md).
        """
        names = [b["name"] for b in c.blobs]
        log.warning(
            "pipe %s was dropped or replaced while batch %d loaded: %d files not committed, %d blobs deleted",
            c.pipe_id,
            batch_id,
            len(c.files),
            len(names),
            extra={"batch": batch_id},
        )
        self._delete_blobs(names, batch_id, "the pipe was dropped or replaced")

    def _sweep(self, tables: dict[str, str], qid: str, batch_id: int) -> None:
        """Delete the blobs of a replayed batch that no manifest names, once its commits are done.

        A replay loads what is still queued of the batch's logged range: without the files of a pipe
        that committed before the kill, it may load in the driver rather than in Spark tasks, or
        spread over fewer tasks, and so name its blobs otherwise than the killed attempt did. That
        attempt's blobs are then not overwritten, and no manifest will ever name them.
        """
        s3 = aws_client(self.settings.aws, "s3")
        bucket = self.settings.pipeline.tables_bucket
        for pipe_id, table_json in tables.items():
            prefix = batch_prefix(Table.model_validate_json(table_json), pipe_id, qid, batch_id)
            try:
                listed = [
                    o["Key"]
                    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                    for o in page.get("Contents", [])
                ]
            except AWS_ERRORS as exc:  # garbage at worst, as a failed delete
                log.warning("could not list the blobs of replayed batch %d: %s", batch_id, exc)
                continue
            if listed:
                named = self.redis.hmget(self.keys.blobs(pipe_id), listed)
                stray = [n for n, entry in zip(listed, named, strict=True) if entry is None]
                if stray:
                    self._delete_blobs(stray, batch_id, "an earlier attempt of the replayed batch wrote them")

    def _delete_blobs(self, names: list[str], batch_id: int, why: str) -> None:
        """Delete blobs no manifest names; a failed delete only leaves garbage."""
        if names:
            log.info("batch %d: deleting %d uncommitted blobs (%s)", batch_id, len(names), why)
        s3 = aws_client(self.settings.aws, "s3")
        for i in range(0, len(names), 1000):
            try:
                s3.delete_objects(
                    Bucket=self.settings.pipeline.tables_bucket,
                    Delete={"Objects": [{"Key": n} for n in names[i : i + 1000]], "Quiet": True},
                )
            except AWS_ERRORS as exc:  # garbage at worst: never let cleanup fail a batch
                log.warning("could not delete %d unreferenced blobs: %s", len(names[i : i + 1000]), exc)


def run(settings: Settings) -> None:
    """Entry point of `floe pipeline`: run the streaming query until asked to stop."""
    setup_logging(settings, "pipeline")
    ready = Readiness(settings, "pipeline")
    shutdown = Shutdown().install()
    p = settings.pipeline
    # The source plans no new micro-batch while this file exists (see _drain).
    draining = Path(settings.state_dir).absolute() / "run" / "pipeline.draining"
    draining.parent.mkdir(parents=True, exist_ok=True)
    draining.unlink(missing_ok=True)
    aws_client(settings.aws, "s3").create_bucket(Bucket=p.tables_bucket)  # idempotent in us-east-1
    spark = spark_session(settings, "floe-pipeline")
    spark.dataSource.register(FloeFileSource)
    options = source_options(settings, draining)
    processor = BatchProcessor(settings, spark, FileStreamReader(options, settings.redis))
    serve(
        processor.metrics.registry,
        settings.api.host,
        p.metrics_port,
        "pipeline",
        "FLOE_PIPELINE__METRICS_PORT",
        settings.api.resolve_metrics_token(),
    )
    # The API's /readyz counts the job alive while this beats (floe/heartbeat.py); its own client,
    # with timeouts, so a Redis that hangs delays only the beats.
    heartbeat = Heartbeat(
        settings.redis.client(socket_timeout=HEARTBEAT_TIMEOUT_S, socket_connect_timeout=HEARTBEAT_TIMEOUT_S),
        processor.keys,
        PIPELINE,
        p.heartbeat_s,
        now_ms,
        processor.metrics.redis_errors.inc,
    )
    query: Any = None
    heartbeat.start(lambda: query is not None and bool(query.isActive))
    # Alongside the query's start, which starts the source's own Python process: the two overlap,
    # and the first micro-batch's tasks queue behind the warm-up's if a file is that quick.
    threading.Thread(target=_warm_up, args=(spark, p.partitions), name="floe-warm-up", daemon=True).start()
    try:
        while not shutdown.requested:
            stream = spark.readStream.format("floe_files").options(**options).load()
            processor.replays_through = last_planned(p.checkpoint_dir)
            query = (
                stream.writeStream.foreachBatch(processor)
                .option("checkpointLocation", p.checkpoint_dir)
                .trigger(processingTime=f"{p.trigger_interval_ms} milliseconds")
                .start()
            )
            ready.set()
            heartbeat.beat()
            log.info("streaming query %s started (checkpoint %s)", query.id, p.checkpoint_dir)
            failure: BaseException | None = None
            while query.isActive and not shutdown.requested:
                try:
                    query.awaitTermination(1)
                except StreamingQueryException as exc:
                    # A failed batch (a task's S3 error, a killed Python worker, Redis away) ends
                    # the query, not the job: the next query replays the batch from the checkpoint.
                    failure = exc
                    break
            if shutdown.requested:
                _drain(query, draining)
                break
            log.error(
                "streaming query stopped: %s; restarting from the checkpoint in 2 s",
                _first_line(failure or query.exception()),
            )
            time.sleep(2)
    finally:
        ready.clear()
        heartbeat.stop()
        draining.unlink(missing_ok=True)
        spark.stop()
        log.info("pipeline stopped after %d batches", processor.batches)


def on_driver(tasks: list[LoadTask], max_files: int, max_bytes: int) -> bool:
    """Whether a micro-batch is small enough to load in the driver: at most ``max_files`` files
    of known sizes and ``max_bytes`` in all. A Spark job costs about 0.3 s before its tasks do
    anything here, more than a few small files take to load (bench/README.md, decision 95)."""
    if not 0 < len(tasks) <= max_files:
        return False
    sizes = [t.size for t in tasks]
    return all(s is not None for s in sizes) and sum(cast(list[int], sizes)) <= max_bytes


def source_options(settings: Settings, draining: Path) -> dict[str, str]:
    """The ``floe_files`` source's options."""
    p = settings.pipeline
    return {
        # URL, user and password file; never the password itself (see pipeline/source.py).
        "redis_url": settings.redis.url,
        "redis_username": settings.redis.username,
        "redis_password_file": str(Path(settings.redis.password_file).absolute()),
        "redis_cluster": str(settings.redis.cluster).lower(),
        "prefix": settings.redis.prefix,
        "max_files": str(p.max_files_per_batch),
        "max_appends": str(p.max_appends_per_batch),
        "drain_file": str(draining),
    }


def _part(task: LoadTask, index: int, n: int) -> int:
    """The Spark partition of a task: files round robin; a channel's appends all in one, so one
    task loads them in order and writes the channel's one blob."""
    append = task.row_append
    return zlib.crc32(append.channel.encode()) % n if append is not None else index % n


def channel_settles(res: PipeResults, tasks: list[LoadTask], now: int) -> list[ChannelSettle]:
    """What each writer of each channel (its incarnation and client sequencer) came to in the
    batch, from the tasks and what they returned. After a reopen in the middle of a batch a
    channel has two writers; the commit keeps the current one's and drops the other's."""
    outcomes = {o.stream_id: o for o in res.outcomes}
    appends = sorted((a for t in tasks if (a := t.row_append) is not None), key=lambda a: a.row_sequencer)
    settles: dict[tuple[str, str, int], ChannelSettle] = {}
    latency: dict[tuple[str, str, int], list[int]] = {}
    writer_of: dict[str, tuple[str, str, int]] = {}
    for a in appends:
        writer = (a.channel, a.incarnation, a.client_sequencer)
        c = settles.setdefault(writer, ChannelSettle(*writer))
        assert a.stream_id is not None
        writer_of[a.path] = writer
        c.stream_ids.append(a.stream_id)
        c.data_keys.append(a.data_key)
        c.appends += 1
        c.bytes += a.size
        latency.setdefault(writer, []).append(max(0, now - a.received_ms))
        # "" is no token: the official SDK sends endOffsetToken= when an append has none, and an
        # append queued before the API read it so must not make "" the committed token.
        if a.end_offset_token:
            c.token = a.end_offset_token
        o = outcomes.get(a.stream_id)
        if o is None:
            continue
        c.rows_inserted += o.rows_loaded
        c.rows_parsed += o.rows_parsed
        if o.errors_seen:
            c.errors += o.errors_seen
            c.last_error = o.first_error or "error"
            c.last_error_bound = a.end_offset_token or None
    for blob in res.blobs:
        writers = {writer_of.get(f) for f in blob.get("files", [])}
        assert len(writers) == 1 and None not in writers, "a streaming blob holds one writer's rows"
        settles[cast(tuple[str, str, int], writers.pop())].blobs.append(blob)
    for writer, c in settles.items():
        c.latency_ms = sum(latency[writer]) // len(latency[writer])
    return list(settles.values())


def _first_line(exc: object) -> str:
    """The gist of a Spark error, whose text runs to a JVM stack trace."""
    text = str(exc or "unknown error").strip()
    return text.splitlines()[0][:500] if text else "unknown error"


def _warm_up(spark: SparkSession, partitions: int) -> None:
    """Start the Python workers and import the loader's libraries before the first file arrives.

    Without this the first micro-batch pays for worker start-up and the pyarrow/DuckDB imports
    (about 12 s here), which is what a user sees as the first file's latency.
    """
    n = max(1, partitions)

    def touch(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pipeline.loader  # noqa: F401  (the import is the point)

        yield from batches

    started = time.monotonic()
    try:
        spark.range(n, numPartitions=n).mapInArrow(touch, "id long").collect()
    # An optimisation only: whatever stops it (a job stopped at once, before it ran: its context is
    # gone), the first micro-batch starts the workers.
    except Exception as exc:  # noqa: BLE001
        log.warning("python workers not warmed up: %s", _first_line(exc))
        return
    log.info("python workers warmed up in %.1f s", time.monotonic() - started)


def _drain(query: Any, draining: Path) -> None:
    """Let the running micro-batch finish and start no other, then stop the query.

    Under a backlog the triggers run back to back, so waiting for a moment without one could
    wait forever. The flag file makes the source report no new data, so once the batch planned
    before it finishes, the trigger goes idle and the query stops with every planned batch in its
    commit log: nothing is replayed after a restart.
    """
    draining.touch()
    log.info("draining: waiting for the running micro-batch")
    deadline = time.monotonic() + 50
    while time.monotonic() < deadline and query.isActive and query.status.get("isTriggerActive"):
        time.sleep(0.1)
    if query.isActive and query.status.get("isTriggerActive"):
        log.warning(
            "the running micro-batch did not finish within 120 s; it will be replayed after a restart"
        )
    query.stop()
