"""Executor-side work of a micro-batch: read staged files, transform them, write blobs.

Runs inside ``mapInArrow`` on Spark's Python workers. Input rows are LoadTasks; output rows carry
the files' LoadOutcomes and the blobs' manifest entries (in the wire form of ``floe.records``),
which the driver hands to the registrar. Data never travels through Spark itself: pyarrow reads the
files from S3 and writes the blobs to S3.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
from botocore.exceptions import ClientError
from pyarrow import fs as pafs
from redis import RedisError

from floe.aws import client as aws_client
from floe.aws import object_gone, pyarrow_s3_kwargs
from floe.blob_columns import blob_schema, fill, to_blob
from floe.blobs import BlobCrypto, BlobMeta, crypto_from_settings, write_blob
from floe.catalog import ApiIntegration, ExternalFunction, Pipe, StorageIntegration, Table
from floe.catalog.locations import key_refusal
from floe.catalog.models import CONTEXT_FUNCTIONS, FileFormat
from floe.catalog.names import split_parts
from floe.errors import CompilationError, FileLoadError
from floe.external import Breaker, FunctionCaller, RemoteFunction
from floe.keys import Keys, RedisClient, one_slot
from floe.records import LoadOutcome, LoadTask, RowAppend, encode_results
from floe.runtime import Faults, log_lines, setup_logging
from floe.settings import Settings
from floe.stage_crypto import StageFileError, plain_size, stage_cipher
from pipeline.chunks import (
    STREAMABLE_COMPRESSION,
    PartTooLarge,
    Readable,
    TransportError,
    decompressed,
    record_chunks,
)
from pipeline.evolution import TaskTable, evolvable, evolve
from pipeline.formats import (
    FileParseError,
    RawFile,
    open_parquet,
    read_checked_lines,
    read_csv_part,
    read_raw,
)
from pipeline.large_files import RangeReader, is_gzip, json_parts, parquet_parts, read_json_part, spooled
from pipeline.transform import (
    CompiledCopy,
    FileCopy,
    FileInfo,
    apply_copy,
    compile_copy,
    copy_group,
    failed_file,
    groupable,
    new_connection,
)
from pipeline.transform.remote_calls import RemoteCalls

log = logging.getLogger("floe.pipeline.loader")


@dataclass
class BatchContext:
    """Everything a task needs, shipped from the driver in the closure."""

    settings_json: str
    master_key: bytes
    query_id: str
    batch_id: int
    pipes: dict[str, str]
    """pipe id -> Pipe JSON"""
    tables: dict[str, str]
    """pipe id -> Table JSON"""
    refused: dict[str, str] = field(default_factory=dict)
    """pipe id -> why the pipe may not read its stage now: its files fail unread."""
    functions: dict[str, dict[str, str]] = field(default_factory=dict)
    """pipe id -> call key -> ``external_entry`` JSON: the external functions its COPY calls, and
    their API integrations, as the catalog has them at the start of the micro-batch."""
    integrations: dict[str, str] = field(default_factory=dict)
    """pipe id -> the StorageIntegration JSON its stage reads through, as the driver checked the
    stage's URL against it: each file's key is checked against it too (``key_refusal``)."""

    def integration(self, pipe_id: str) -> StorageIntegration | None:
        """The storage integration of a pipe's stage (None: an internal stage, or none recorded)."""
        found = self.integrations.get(pipe_id)
        return StorageIntegration.model_validate_json(found) if found is not None else None


def external_entry(fn: ExternalFunction, integration: ApiIntegration) -> str:
    """One BatchContext.functions value."""
    return json.dumps({"function": fn.model_dump_json(), "integration": integration.model_dump_json()})


class _Worker:
    """Per-process caches: S3 client, crypto, DuckDB connection, compiled pipes."""

    def __init__(self, ctx: BatchContext, in_driver: bool = False) -> None:
        self.settings = Settings.model_validate_json(ctx.settings_json)
        if not in_driver:  # the driver's logging is the job's own, set up at its start
            setup_logging(self.settings, "pipeline.worker")  # stderr reaches the job's log through Spark
        self.source_json = ctx.settings_json
        self.fs = pafs.S3FileSystem(**pyarrow_s3_kwargs(self.settings.aws))
        self.crypto: BlobCrypto = crypto_from_settings(self.settings.encryption.master_key_id, ctx.master_key)
        self.stage_cipher = stage_cipher(self.settings.encryption.master_key_id, ctx.master_key)
        """Opens internal stages' files (in ``stages.bucket``), which PUT sealed."""
        self.con = new_connection(memory_limit=self.settings.pipeline.duckdb_memory_limit)
        self.compiled: dict[str, tuple[str, CompiledCopy]] = {}
        self.batch = ctx
        """The micro-batch being loaded (its pipes' external functions)."""
        self._caller: FunctionCaller | None = None
        self._remote: dict[str, tuple[tuple[str, int, str], RemoteCalls]] = {}
        self.faults = Faults(self.settings.faults)
        self.pool = ThreadPoolExecutor(max(1, self.settings.pipeline.prefetch_files), "floe-fetch")
        self._s3: Any = None
        self._redis: RedisClient | None = None

    def redis(self) -> RedisClient:
        """A client of Floe's Redis, where channel appends keep their rows until they commit."""
        if self._redis is None:
            self._redis = self.settings.redis.client()
        return self._redis

    def get_object(self, bucket: str, key: str) -> Any:
        """An object's GetObject response through boto3; FileNotFoundError if there is none."""
        return self._boto("get_object", bucket, key)

    def file_info(self, bucket: str, key: str) -> FileInfo:
        """A staged object's ETag and last-modified time (one HEAD), for the COPYs that read them."""
        head = self._boto("head_object", bucket, key)
        modified = head["LastModified"].astimezone(dt.UTC).replace(tzinfo=None)
        return FileInfo(content_key=str(head["ETag"]).strip('"'), last_modified=modified.isoformat())

    def _boto(self, call: str, bucket: str, key: str) -> Any:
        """An S3 call on one object through boto3; FileNotFoundError if there is no such object."""
        if self._s3 is None:
            self._s3 = aws_client(self.settings.aws, "s3")
        try:
            return getattr(self._s3, call)(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(f"s3://{bucket}/{key}") from exc
            raise OSError(f"reading s3://{bucket}/{key} failed: {exc}") from exc

    def compiled_for(self, pipe: Pipe, table: Table) -> CompiledCopy:
        entries = self.batch.functions.get(pipe.id, {})
        key = pipe.id + table.model_dump_json() + json.dumps(entries, sort_keys=True)
        hit = self.compiled.get(pipe.id)
        if hit is None or hit[0] != key:
            functions = {
                k: ExternalFunction.model_validate_json(json.loads(e)["function"]) for k, e in entries.items()
            }
            hit = (key, compile_copy(pipe.copy_spec, table, pipe.copy_spec.file_format.type, functions))
            self.compiled[pipe.id] = hit
        return hit[1]

    def remote_for(self, pipe: Pipe) -> RemoteCalls | None:
        """How this batch's loads of ``pipe`` call its external functions (None: it calls none)."""
        entries = self.batch.functions.get(pipe.id)
        if not entries:
            return None
        # Built once per pipe and micro-batch, not per file (a replay may ship other definitions).
        batch = (self.batch.query_id, self.batch.batch_id, json.dumps(entries, sort_keys=True))
        hit = self._remote.get(pipe.id)
        if hit is not None and hit[0] == batch:
            return hit[1]
        functions = {}
        for k, e in entries.items():
            doc = json.loads(e)
            functions[k] = RemoteFunction.of(
                ExternalFunction.model_validate_json(doc["function"]),
                ApiIntegration.model_validate_json(doc["integration"]),
            )
        if self._caller is None:
            settings = self.settings.external_functions
            breaker = Breaker(settings, self.redis(), Keys(self.settings.redis.prefix))
            self._caller = FunctionCaller(settings, breaker=breaker)
        database, schema, _ = split_parts(pipe.name)
        context = dict.fromkeys(CONTEXT_FUNCTIONS, "")
        context.update(
            CURRENT_ACCOUNT="FLOE",
            CURRENT_CLIENT="Floe pipe",
            CURRENT_DATABASE=database,
            CURRENT_SCHEMA=schema,
            CURRENT_ROLE=pipe.owner,
            CURRENT_REGION=self.settings.aws.region,
            CURRENT_STATEMENT=" ".join(pipe.copy_spec.sql.split()),
        )
        # One id per pipe and micro-batch: a replay of the batch sends the same one.
        query_id = f"{self.batch.query_id}-{self.batch.batch_id}-{pipe.id}"
        remote = RemoteCalls(
            self._caller,
            functions,
            query_id,
            context,
            pipe=pipe.name,
        )
        self._remote[pipe.id] = (batch, remote)
        return remote


_WORKER: _Worker | None = None


def _worker(ctx: BatchContext, in_driver: bool = False) -> _Worker:
    global _WORKER
    if _WORKER is None or _WORKER.source_json != ctx.settings_json:
        _WORKER = _Worker(ctx, in_driver)
    _WORKER.batch = ctx
    return _WORKER


def blob_name(
    pipe: Pipe,
    table: Table,
    query_id: str,
    batch_id: int,
    part: int,
    streamed: tuple[int, int] | None = None,
    channel: int | None = None,
) -> str:
    """Deterministic per (table, pipe, batch, partition): a replay overwrites its own blob.

    ``streamed``: (the file's place in its task, the part number) for the blobs of a streamed file.
    ``channel``: the channel's place among the task's channels, for a streaming pipe's blobs (one
    per channel, so that a channel fenced at commit leaves the others' rows alone).
    """
    suffix = f"-{streamed[0]:05d}-{streamed[1]:05d}" if streamed else ""
    suffix += f"-c{channel:05d}" if channel is not None else ""
    return f"{batch_prefix(table, pipe.id, query_id, batch_id)}{part:04d}{suffix}.parquet"


def batch_prefix(table: Table, pipe_id: str, query_id: str, batch_id: int) -> str:
    """The start of every blob name a micro-batch writes for one pipe (``blob_name``)."""
    return f"{table_prefix(table)}{pipe_id}/{query_id}-{batch_id:010d}-"


def table_prefix(table: Table) -> str:
    """Where every blob of this incarnation of ``table`` lies: ``DB/SCHEMA/NAME/<table id>/``.

    One key segment per identifier, each percent-encoded, dots included: a quoted name may hold a
    '/' or be '..', and the key must name one place whatever the table is called (decision 109).
    A plain name is its own segment, so the keys of existing tables stay what they were."""
    db, schema, name = (quote(p, safe="$").replace(".", "%2E") for p in split_parts(table.name))
    return f"{db}/{schema}/{name}/{table.id}/"


@dataclass(frozen=True)
class Streamed:
    """A staged file too large to read whole: the task reads it as a stream, in parts."""

    size: int
    """Its stored (possibly compressed) size in bytes."""


def load_file(w: _Worker, pipe: Pipe, table: Table, path: str) -> tuple[pa.Table | None, LoadOutcome]:
    """Read one file whole and transform it; returns its rows (or None) and its outcome."""
    fetched = fetch_file(w, pipe, path, stream=False)
    assert not isinstance(fetched, Streamed)
    if isinstance(fetched, LoadOutcome):
        return None, fetched
    return transform_file(w, pipe, table, path, fetched)


def fetch_file(w: _Worker, pipe: Pipe, path: str, *, stream: bool = True) -> bytes | LoadOutcome | Streamed:
    """A staged file's bytes (or, with ``stream``, Streamed for a large CSV file), or its failed
    outcome if it is gone or too large to read whole; other S3 errors raise."""
    key = pipe.object_key(path)
    location = f"{pipe.bucket}/{key}"
    whole_limit = w.settings.pipeline.max_part_bytes
    stream_limit = _stream_limit(w, pipe) if stream else None
    try:
        if stream_limit is not None:
            data = _read(w, pipe.bucket, key, min(stream_limit, whole_limit))
        else:
            data = _read(w, pipe.bucket, key, whole_limit)
            if isinstance(data, Streamed):  # its stored bytes alone are over the bound
                kind = {"JSON": "JSON", "PARQUET": "Parquet", "AVRO": "Avro", "ORC": "ORC"}.get(
                    pipe.copy_spec.file_format.type.upper(), ""
                )
                message = PartTooLarge(path, whole_limit, record=False, kind=kind).message
                return LoadOutcome.stopped(path, message, system=False, size=data.size)
        w.faults.hit("pipeline.reading")
        if (delay := w.faults.current().read_delay_s) > 0:
            # On the executor's log: a test sees which worker is in the middle of a batch.
            log.warning("fault injection: s3://%s waits %.1f s after its fetch", location, delay)
            time.sleep(delay)
        return data
    except FileNotFoundError:
        return LoadOutcome.stopped(path, _not_found(location), system=True)
    except StageFileError as exc:  # an internal stage's file that does not decrypt: replays would not help
        return LoadOutcome.stopped(path, exc.message, system=False)
    except OSError as exc:
        if object_gone(exc):
            return LoadOutcome.stopped(path, _not_found(location), system=True)
        raise  # transient: the task fails and the batch is replayed


def transform_file(
    w: _Worker,
    pipe: Pipe,
    table: Table,
    path: str,
    data: bytes,
    *,
    streamable: bool = False,
    checked_lines: bool = False,
    evolving: TaskTable | None = None,
) -> tuple[pa.Table | None, LoadOutcome]:
    """Parse one file's bytes and apply the pipe's COPY; returns its rows (or None), by their blob
    columns (``floe.blob_columns.to_blob``), and its outcome.

    A file that decompresses past ``pipeline.max_part_bytes`` fails, or with ``streamable`` raises
    PartTooLarge for the caller to stream it instead. ``checked_lines``: the bytes are a streaming
    append the API checked (one JSON object per line), split rather than parsed. ``evolving``: the
    table as the task knows it, which the file may evolve first (``pipeline.evolution``); it then
    replaces ``table``.
    """
    location = f"{pipe.bucket}/{pipe.object_key(path)}"
    compiled: CompiledCopy | None = None
    try:
        compiled = w.compiled_for(pipe, table)
        fmt = pipe.copy_spec.file_format
        if checked_lines:
            raw = read_checked_lines(data, fmt, path)
        else:
            raw = read_raw(data, fmt, path=path, max_bytes=w.settings.pipeline.max_part_bytes)
        if evolving is not None:
            table = evolve(w, pipe, evolving, raw, path)
            compiled = w.compiled_for(pipe, table)
        info = None
        if compiled.file_info and not checked_lines:
            info = w.file_info(pipe.bucket, pipe.object_key(path))
        rows, result = apply_copy(
            compiled,
            raw,
            filename=path,
            con=w.con,
            remote=w.remote_for(pipe),
            info=info,
            max_errors=w.settings.pipeline.max_errors_per_file,
        )
    except (FileLoadError, CompilationError) as exc:
        if streamable and isinstance(exc, PartTooLarge):
            raise
        # A COPY that no longer compiles (its table changed under it, decision 81) is the pipe's error.
        if compiled is None or isinstance(exc, CompilationError):
            return None, LoadOutcome.stopped(path, exc.message, system=False, size=len(data), trouble="pipe")
        return None, failed_file(compiled, exc, path).sized(len(data))
    except (MemoryError, RedisError):
        raise  # may pass on a retry (more room; Redis back, for a schema evolution): the batch is replayed
    except Exception as exc:
        # Parsing and transforming a file is deterministic: a failure Floe did not foresee would
        # fail every replay of the batch too, stalling every pipe behind this one file. The file
        # fails alone, and says why.
        log.exception("unexpected error loading s3://%s", location, extra={"pipe": pipe.name, "file": path})
        message = f"Internal error while loading the file: {type(exc).__name__}: {exc}"
        failed = LoadOutcome.stopped(path, message[:1000], system=True, size=len(data), trouble="internal")
        return None, failed
    return _finished(rows, result, len(data), table)


def _finished(
    rows: pa.Table, result: LoadOutcome, size: int, table: Table
) -> tuple[pa.Table | None, LoadOutcome]:
    """A transformed file's blob rows (None when it loads none) and its outcome with its size."""
    outcome = result.sized(size)
    if outcome.status == "LOAD_FAILED" or rows.num_rows == 0:
        return None, outcome
    return to_blob(rows, table), outcome


GROUP_FILE_BYTES = 1024 * 1024
"""Staged files up to this size (stored) share one transform query with their neighbours."""
GROUP_FILES = 64
"""Most files in one shared transform query."""
GROUP_BYTES = 16 * 1024 * 1024
"""Most stored bytes in one shared transform query."""


def transform_group(
    w: _Worker, pipe: Pipe, table: Table, files: list[tuple[str, bytes]]
) -> list[tuple[pa.Table | None, LoadOutcome] | None]:
    """``transform_file``'s result for each (path, bytes) the files' one shared query could load
    (``transform.copy_group``: a small file costs DuckDB more to plan than to run); None for each
    of the others (a parse error, a row in error), which the caller transforms alone, so that
    what it says of them is what it always said."""
    out: list[tuple[pa.Table | None, LoadOutcome] | None] = [None] * len(files)
    if len(files) < 2:
        return out
    try:
        compiled = w.compiled_for(pipe, table)
        fmt = pipe.copy_spec.file_format
        parsed: list[tuple[int, str, RawFile]] = []
        for i, (path, data) in enumerate(files):
            try:
                parsed.append(
                    (i, path, read_raw(data, fmt, path=path, max_bytes=w.settings.pipeline.max_part_bytes))
                )
            except FileLoadError:
                continue  # alone, it fails saying why (or, too large inflated, is streamed)
        grouped = copy_group(
            compiled,
            [(path, raw) for _, path, raw in parsed],
            w.con,
            max_errors=w.settings.pipeline.max_errors_per_file,
        )
    except (MemoryError, RedisError):
        raise
    except Exception:  # each file alone then fails on its own, or loads
        log.warning(
            "files of pipe %s transformed one by one", pipe.name, exc_info=True, extra={"pipe": pipe.name}
        )
        return out
    for (i, _, _), done in zip(parsed, grouped, strict=True):
        if done is not None:
            out[i] = _finished(*done, len(files[i][1]), table)
    return out


def _stream_limit(w: _Worker, pipe: Pipe) -> int | None:
    """Size above which this pipe's files are streamed; None when its format is always read whole
    (Avro, ORC). Parquet is read by row group whatever its COMPRESSION (its pages' own)."""
    fmt = pipe.copy_spec.file_format
    kind = fmt.type.upper()
    if kind == "PARQUET":
        return w.settings.pipeline.stream_file_bytes
    if kind not in ("CSV", "JSON") or (fmt.compression or "AUTO").upper() not in STREAMABLE_COMPRESSION:
        return None
    return w.settings.pipeline.stream_file_bytes


def _read(w: _Worker, bucket: str, key: str, limit: int | None = None) -> bytes | Streamed:
    """A staged object's bytes, or Streamed when it is larger than ``limit``; FileNotFoundError
    (or an OSError saying so) when it is gone."""
    try:
        with w.fs.open_input_file(f"{bucket}/{key}") as f:
            size = f.size()
            if limit is not None and size > limit:
                return _streamed(w, bucket, size)
            data: bytes = f.readall()
            return _opened(w, bucket, key, data)
    except pa.ArrowInvalid:
        # pyarrow refuses keys it cannot express as a path (an empty component, as in 'a//b.csv'),
        # which S3 allows; without this, such a key would fail its batch on every replay.
        response = w.get_object(bucket, key)
        size = int(response["ContentLength"])
        if limit is not None and size > limit:
            response["Body"].close()
            return _streamed(w, bucket, size)
        return _opened(w, bucket, key, bytes(response["Body"].read()))


def _streamed(w: _Worker, bucket: str, stored: int) -> Streamed:
    """A file to stream, with the size it has as its stage shows it (an internal stage's file as PUT)."""
    return Streamed(plain_size(stored) if bucket == w.settings.stages.bucket else stored)


def _opened(w: _Worker, bucket: str, key: str, data: bytes) -> bytes:
    """A staged object's content: an internal stage's file decrypted (StageFileError if it does
    not open under its key), any other as stored."""
    if bucket != w.settings.stages.bucket:
        return data
    return w.stage_cipher.open(data, key)


@contextmanager
def _open_stream(w: _Worker, bucket: str, key: str, data: bytes | None = None) -> Iterator[Readable]:
    """A staged object as a buffered stream (pyarrow, or boto3 for keys pyarrow refuses), or
    ``data``, its bytes already read."""
    if data is not None:
        yield io.BytesIO(data)
        return
    try:
        stream: Any = w.fs.open_input_stream(f"{bucket}/{key}", buffer_size=8 << 20)
    except pa.ArrowInvalid:
        stream = w.get_object(bucket, key)["Body"]
    if bucket == w.settings.stages.bucket:  # decrypted a segment at a time, as it is parsed
        try:
            stream = w.stage_cipher.reader(stream, key)
        except BaseException:
            stream.close()
            raise
    try:
        yield stream
    finally:
        stream.close()


def stream_file(
    w: _Worker,
    ctx: BatchContext,
    pipe: Pipe,
    table: Table,
    task: LoadTask,
    index: int,
    size: int,
    data: bytes | None = None,
    evolving: TaskTable | None = None,
) -> tuple[list[BlobMeta], LoadOutcome]:
    """Load one large CSV, JSON or Parquet file part by part (``_file_parts``): each part is parsed,
    transformed and written as its own blob, so memory is bounded by ``pipeline.chunk_bytes``, not
    by the file. ``task`` is the file's task and ``index`` its place in the task (both name the
    blobs); ``data``, the file's stored bytes when they are already in memory (a small file that
    inflates too much to read whole); ``evolving``, the table as the task knows it, which each part
    may evolve (``pipeline.evolution``).

    ON_ERROR is applied to the whole file's counts: when it fails the file, the blobs already
    written are deleted and none is returned. So is a file that decompresses past
    ``pipeline.max_file_bytes``, or with a part past ``pipeline.max_part_bytes`` that has not
    reached a record end. Returns the blobs and the file's outcome.
    """
    path = task.path
    if (refused := key_refusal(pipe, path, ctx.integration(pipe.id))) is not None:
        return [], LoadOutcome.stopped(path, refused, system=False, size=size)  # defence in depth
    key = pipe.object_key(path)
    location = f"{pipe.bucket}/{key}"
    extra: dict[str, object] = {"pipe": pipe.name, "file": path, "batch": ctx.batch_id}
    blobs: list[BlobMeta] = []
    compiled: CompiledCopy | None = None
    started = time.monotonic()
    parts = 0
    try:
        compiled = w.compiled_for(pipe, table)
        info = w.file_info(pipe.bucket, key) if compiled.file_info else None
        copy = FileCopy(
            compiled, path, w.remote_for(pipe), info, max_errors=w.settings.pipeline.max_errors_per_file
        )
        schema = blob_schema(table)
        with _file_parts(w, pipe, key, path, data) as raws:
            for part, raw in enumerate(raws):
                w.faults.hit("pipeline.reading")
                if evolving is not None and (evolved := evolve(w, pipe, evolving, raw, path)) is not table:
                    # A part brought columns (decision 81): it and the parts after it load them; the
                    # blobs of the parts before read them as NULL.
                    table, compiled = evolved, w.compiled_for(pipe, evolved)
                    copy.compiled, schema = compiled, blob_schema(table)
                rows = copy.add(raw, w.con)
                parts += 1
                del raw
                if rows.num_rows and not copy.doomed:
                    name = blob_name(pipe, table, ctx.query_id, ctx.batch_id, task.part, (index, part))
                    target = f"{w.settings.pipeline.tables_bucket}/{name}"
                    stored = to_blob(rows, table).cast(schema)
                    meta = write_blob(stored, w.fs, target, w.crypto, name=name, files=[path])
                    blobs.append(meta)
                del rows
        outcome = copy.result().sized(size)
    except FileNotFoundError:
        outcome = LoadOutcome.stopped(path, _not_found(location), system=True, size=size)
    except (FileLoadError, CompilationError) as exc:
        if compiled is None or isinstance(exc, CompilationError):
            outcome = LoadOutcome.stopped(path, exc.message, system=False, size=size, trouble="pipe")
        else:
            outcome = failed_file(compiled, exc, path).sized(size)
    except (MemoryError, TransportError):
        _delete_blobs(w, blobs)
        raise  # may pass on a replay
    except OSError as exc:
        _delete_blobs(w, blobs)
        if object_gone(exc):
            return [], LoadOutcome.stopped(path, _not_found(location), system=True, size=size)
        raise
    except Exception as exc:
        log.exception("unexpected error loading s3://%s", location, extra=extra)
        message = f"Internal error while loading the file: {type(exc).__name__}: {exc}"
        outcome = LoadOutcome.stopped(path, message[:1000], system=True, size=size, trouble="internal")
    if outcome.status == "LOAD_FAILED":
        _delete_blobs(w, blobs)
        blobs = []
    log.info(
        "streamed s3://%s: %d parts, %d blobs, %s rows loaded, %s in %.1f s",
        location,
        parts,
        len(blobs),
        outcome.rows_loaded,
        outcome.status,
        time.monotonic() - started,
        extra={**extra, "step": "loaded", "status": outcome.status, "rows": outcome.rows_loaded},
    )
    return blobs, outcome


@contextmanager
def _file_parts(
    w: _Worker, pipe: Pipe, key: str, path: str, data: bytes | None
) -> Iterator[Iterator[RawFile]]:
    """A large staged file's parts, each a RawFile placed in the file (``_placed``): CSV and JSON
    from its decompressed stream (``pipeline.chunks``, ``pipeline.large_files``), Parquet a run of
    row groups at a time, read by ranges."""
    fmt = pipe.copy_spec.file_format
    limits = w.settings.pipeline
    kind = fmt.type.upper()
    if kind == "PARQUET":
        with _random_access(w, pipe.bucket, key, path, data) as source:
            parquet = open_parquet(source, path)
            yield _placed(
                parquet_parts(
                    parquet,
                    fmt,
                    path,
                    chunk_bytes=limits.chunk_bytes,
                    max_part_bytes=limits.max_part_bytes,
                    max_file_bytes=limits.max_file_bytes,
                    source=source,
                )
            )
        return
    with _open_stream(w, pipe.bucket, key, data) as raw_stream:
        body = decompressed(raw_stream, fmt.compression, path, max_bytes=limits.max_file_bytes)
        if kind == "JSON":
            pieces = json_parts(
                body, limits.chunk_bytes, fmt, max_part_bytes=limits.max_part_bytes, path=path
            )
            yield _placed(
                read_json_part(p, fmt, path, first=n == 0, max_bytes=limits.max_part_bytes)
                for n, p in enumerate(pieces)
            )
        else:
            yield _placed(_csv_parts(body, fmt, path, limits.chunk_bytes, limits.max_part_bytes))


def _csv_parts(
    body: Readable, fmt: FileFormat, path: str, chunk_bytes: int, max_part_bytes: int
) -> Iterator[RawFile]:
    """A CSV file's record-aligned parts, parsed; the first fixes the record width of the others."""
    width: int | None = None
    chunks = record_chunks(body, chunk_bytes, fmt, max_part_bytes=max_part_bytes, path=path)
    for part, chunk in enumerate(chunks):
        raw = read_csv_part(chunk, fmt, path, first=part == 0, width=width)
        width = width or raw.width
        del chunk
        yield raw
        del raw  # the caller holds the only reference while it loads the part


def _placed(parts: Iterator[RawFile]) -> Iterator[RawFile]:
    """``parts`` (each numbered from 1) with the records and lines of the parts before them as
    offsets, so row numbers and error lines are the file's; so is the line of a part's whole-part
    failure (FileParseError: invalid UTF-8 in a JSON part)."""
    rows_before = lines_before = 0
    while True:
        try:
            raw = next(parts)
        except StopIteration:
            return
        except FileParseError as exc:
            exc.line += lines_before
            raise
        raw.row_offset, raw.line_offset = rows_before, lines_before
        rows_before += raw.rows_parsed
        lines_before += raw.lines
        yield raw
        del raw


@contextmanager
def _random_access(w: _Worker, bucket: str, key: str, path: str, data: bytes | None) -> Iterator[Any]:
    """A staged Parquet file open for reading by ranges: the object in S3 itself, or ``data``, its
    bytes already in memory. One that cannot be read by ranges (an internal stage's sealed file, a
    whole-file gzip wrapper, a key pyarrow refuses) is copied to a local temporary file first
    (``pipeline.large_files.spooled``)."""
    limit = w.settings.pipeline.max_file_bytes
    if data is not None:
        if not is_gzip(data[:2]):
            yield pa.BufferReader(data)
            return
        with spooled(io.BytesIO(data), path, limit) as spool:
            yield spool
        return
    if bucket != w.settings.stages.bucket:
        try:
            opened: Any = w.fs.open_input_file(f"{bucket}/{key}")
        except pa.ArrowInvalid:
            opened = None
        if opened is not None:
            with opened:
                reader = RangeReader(opened)
                if not is_gzip(reader.read(2)):
                    reader.seek(0)
                    yield reader
                    return
    with _open_stream(w, bucket, key) as stream, spooled(stream, path, limit) as spool:
        yield spool


def _delete_blobs(w: _Worker, blobs: list[BlobMeta]) -> None:
    """Remove blobs of a file that did not load (unregistered blobs are never read; this is tidiness)."""
    for blob in blobs:
        try:
            w.fs.delete_file(blob.path)
        except OSError:
            log.warning("could not delete unregistered blob %s", blob.path)


def _not_found(location: str) -> str:
    """Snowflake's text (091016) for a notified file that is gone by the time it is loaded."""
    return (
        f"Remote file 's3://{location}' was not found. If you are running a copy command, please make "
        "sure files are not deleted when they are being loaded or files are not being loaded into two "
        "different tables concurrently with auto purge option."
    )


def _prefetched(w: _Worker, pipe: Pipe, tasks: list[LoadTask]) -> Iterator[bytes | LoadOutcome | Streamed]:
    """fetch_file for each task, in order, with reads running ahead of the caller.

    Small files spend more time waiting on S3 than being parsed; a few reads in flight hide that
    wait. The window is bounded in files and in known bytes, so large files are read one at a time.
    """
    budget = w.settings.pipeline.prefetch_bytes
    window: deque[tuple[Future[bytes | LoadOutcome | Streamed], int]] = deque()
    in_flight = 0
    pending = iter(tasks)
    exhausted = False
    while True:
        while (
            not exhausted
            and len(window) < w.settings.pipeline.prefetch_files
            and (not window or in_flight < budget)
        ):
            task = next(pending, None)
            if task is None:
                exhausted = True
                break
            size = task.size if task.size is not None else budget
            window.append((w.pool.submit(fetch_file, w, pipe, task.path), size))
            in_flight += size
        if not window:
            return
        future, size = window.popleft()
        in_flight -= size
        yield future.result()


def load_appends(
    w: _Worker, ctx: BatchContext, pipe: Pipe, table: Table, tasks: list[LoadTask], part: int
) -> list[LoadOutcome | BlobMeta]:
    """A streaming pipe's share of a task: each channel's appends in row-sequencer order through
    the pipe's transform, and one blob per channel (per writer of the channel)."""
    # One blob per writer of a channel (its incarnation and client sequencer): after a reopen in
    # the middle of a batch, the old writer's rows must stay out of the new writer's blob.
    by_writer: dict[tuple[str, str, int], list[tuple[LoadTask, RowAppend]]] = {}
    for task in tasks:
        append = task.row_append
        assert append is not None, "a streaming pipe's tasks are appends"
        writer = (append.channel, append.incarnation, append.client_sequencer)
        by_writer.setdefault(writer, []).append((task, append))
    out: list[LoadOutcome | BlobMeta] = []
    for index, (_writer, appends) in enumerate(sorted(by_writer.items())):
        appends.sort(key=lambda ta: ta[1].row_sequencer)
        data_keys = [a.data_key for _, a in appends]
        one_slot(data_keys, "MGET of a channel's appends")
        stored = w.redis().mget(data_keys)
        pieces: list[pa.Table] = []
        loaded: list[str] = []
        for (task, _append), data in zip(appends, stored, strict=True):
            if data is None:
                # Only a DROP of the channel (or of the pipe) deletes rows before their commit, and
                # the commit then drops this append anyway.
                outcome = LoadOutcome.stopped(
                    task.path, "the rows are gone: the channel was dropped", system=False
                )
            else:
                rows, outcome = transform_file(w, pipe, table, task.path, data, checked_lines=True)
                if rows is not None and rows.num_rows:
                    pieces.append(rows)
                    loaded.append(task.path)
            out.append(outcome.of_task(task))
        if pieces:
            name = blob_name(pipe, table, ctx.query_id, ctx.batch_id, part, channel=index)
            combined = pa.concat_tables(pieces).cast(blob_schema(table))
            path = f"{w.settings.pipeline.tables_bucket}/{name}"
            out.append(write_blob(combined, w.fs, path, w.crypto, name=name, files=loaded))
    return out


def _groupable(w: _Worker, pipe: Pipe, table: Table) -> bool:
    """Whether the pipe's small files may share transform queries (``transform.groupable``)."""
    try:
        return groupable(w.compiled_for(pipe, table))
    except CompilationError:
        return False  # each file then fails alone, saying why


def executor_id() -> str:
    """The Spark executor this task runs in: a standalone worker runs each executor in
    ``<work dir>/<app id>/<executor id>``, and its Python workers inherit that directory; in local
    mode there is only the driver."""
    here = Path.cwd()
    return here.name if here.parent.name.startswith("app-") else "driver"


def process_partition(
    ctx: BatchContext, batches: Iterator[pa.RecordBatch], *, in_driver: bool = False
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: load every file of this partition, write one blob per (pipe, part).
    ``in_driver``: the job's driver loads a small micro-batch itself (``pipeline.job``)."""
    w = _worker(ctx, in_driver)
    groups: dict[tuple[str, int], list[LoadTask]] = {}
    for batch in batches:
        for task in LoadTask.from_batch(batch):
            groups.setdefault((task.pipe_id, task.part), []).append(task)
    for (pipe_id, part), tasks in sorted(groups.items()):
        if (reason := ctx.refused.get(pipe_id)) is not None:
            yield encode_results(
                pipe_id,
                [LoadOutcome.stopped(t.path, reason, system=False, trouble="pipe").of_task(t) for t in tasks],
            )
            continue
        pipe = Pipe.model_validate_json(ctx.pipes[pipe_id])
        table = Table.model_validate_json(ctx.tables[pipe_id])
        if pipe.source == "streaming":
            yield encode_results(pipe_id, load_appends(w, ctx, pipe, table, tasks, part))
            continue
        yield encode_results(pipe_id, _TaskFiles(w, ctx, pipe, table).load(tasks, part))


class _TaskFiles:
    """One task's files of one (non-streaming) pipe: each loaded whole, streamed, or with small
    neighbours through one shared transform query, and the rows of all of them in one blob."""

    def __init__(self, w: _Worker, ctx: BatchContext, pipe: Pipe, table: Table) -> None:
        self.w, self.ctx, self.pipe, self.table = w, ctx, pipe, table
        self.clock = _TaskClock()
        self.streamable = _stream_limit(w, pipe) is not None
        # The table as this task knows it: a file may evolve it, and later files load into that.
        self.evolving = TaskTable(table) if evolvable(pipe, table) else None
        self.pieces: list[pa.Table] = []
        self.loaded: list[str] = []
        self.out: list[LoadOutcome | BlobMeta] = []
        self.whole: list[tuple[LoadOutcome, bool]] = []
        """Each file read whole: its outcome and whether its rows are in the task's blob
        (stream_file logs the streamed ones itself)."""
        self.held: list[tuple[int, LoadTask, bytes]] = []
        """Small files waiting to share one transform query (``transform_group``), in file order."""
        self.held_bytes = 0

    def load(self, tasks: list[LoadTask], part: int) -> list[LoadOutcome | BlobMeta]:
        """Load the files in path order and write the blob; every outcome, then the blob's entry."""
        w, pipe, clock = self.w, self.pipe, self.clock
        ordered = self._readable(sorted(tasks, key=lambda t: t.path))
        fetches = _prefetched(w, pipe, ordered)
        group = self.evolving is None and _groupable(w, pipe, self.table)
        for index, task in enumerate(ordered):
            with clock.waiting():
                fetched = next(fetches)
            if self.evolving is not None:
                self.table = self.evolving.table
            if group and isinstance(fetched, bytes) and len(fetched) <= GROUP_FILE_BYTES:
                self.held.append((index, task, fetched))
                self.held_bytes += len(fetched)
                if len(self.held) >= GROUP_FILES or self.held_bytes >= GROUP_BYTES:
                    self._flush()
                continue
            self._flush()  # the held files first: the blob keeps the files' order
            if isinstance(fetched, Streamed):
                self._stream(index, task, fetched.size)
            elif isinstance(fetched, LoadOutcome):
                self._record(task, None, fetched, False)
            else:
                self._alone(index, task, fetched)
        self._flush()
        name = self._write(part)
        log.info(
            "batch %d task %d on executor %s: %d files, %.2f s waiting for S3, %.2f s parsing and "
            "transforming, %.2f s writing the blob",
            self.ctx.batch_id,
            part,
            executor_id(),
            len(ordered),
            clock.wait,
            clock.work,
            clock.write,
            extra={"pipe": pipe.name, "batch": self.ctx.batch_id},
        )
        _log_files(self.ctx, pipe, self.whole, name)
        return self.out

    def _readable(self, tasks: list[LoadTask]) -> list[LoadTask]:
        """The tasks whose object key the job may read (``key_refusal``); each other one fails
        alone, unread. The API lets no such path through: this is defence in depth, as pyarrow's
        S3 filesystem would resolve a '..' in it and read outside the stage (decision 115)."""
        integration = self.ctx.integration(self.pipe.id)
        readable = []
        for task in tasks:
            if (reason := key_refusal(self.pipe, task.path, integration)) is None:
                readable.append(task)
                continue
            log.warning("file refused unread: %s", reason, extra={"pipe": self.pipe.name, "file": task.path})
            self._record(task, None, LoadOutcome.stopped(task.path, reason, system=False), False)
        return readable

    def _record(self, task: LoadTask, data: pa.Table | None, outcome: LoadOutcome, streamed: bool) -> None:
        self.out.append(outcome.of_task(task))
        if data is not None:
            self.pieces.append(data)
            self.loaded.append(task.path)
        if not streamed:
            self.whole.append((outcome, data is not None))

    def _stream(self, index: int, task: LoadTask, size: int, data: bytes | None = None) -> None:
        streamed, outcome = stream_file(
            self.w, self.ctx, self.pipe, self.table, task, index, size, data, evolving=self.evolving
        )
        self.out.extend(streamed)
        self._record(task, None, outcome, True)

    def _alone(self, index: int, task: LoadTask, fetched: bytes) -> None:
        try:
            with self.clock.working():
                data, outcome = transform_file(
                    self.w,
                    self.pipe,
                    self.table,
                    task.path,
                    fetched,
                    streamable=self.streamable,
                    evolving=self.evolving,
                )
        except PartTooLarge:
            # Small stored, too large inflated to hold whole: stream the bytes already here.
            self._stream(index, task, len(fetched), fetched)
            return
        self._record(task, data, outcome, False)

    def _flush(self) -> None:
        if not self.held:
            return
        with self.clock.working():
            grouped = transform_group(self.w, self.pipe, self.table, [(t.path, b) for _, t, b in self.held])
        for (index, task, fetched), done in zip(self.held, grouped, strict=True):
            if done is None:
                self._alone(index, task, fetched)
            else:
                self._record(task, *done, False)
        self.held.clear()
        self.held_bytes = 0

    def _write(self, part: int) -> str:
        """The task's blob of every loaded file's rows; its name ('' when no file loaded rows)."""
        if not self.pieces:
            return ""
        w, ctx = self.w, self.ctx
        with self.clock.writing():
            name = blob_name(self.pipe, self.table, ctx.query_id, ctx.batch_id, part)
            # Rows of files loaded before an evolution lack its columns: NULL (floe.blob_columns).
            schema = blob_schema(self.evolving.table if self.evolving is not None else self.table)
            combined = pa.concat_tables([fill(piece, schema) for piece in self.pieces])
            path = f"{w.settings.pipeline.tables_bucket}/{name}"
            self.out.append(write_blob(combined, w.fs, path, w.crypto, name=name, files=self.loaded))
        return name


def _log_files(ctx: BatchContext, pipe: Pipe, whole: list[tuple[LoadOutcome, bool]], blob: str) -> None:
    """One line per file a task read whole, once its blob is written: the journey's ``loaded`` step
    (the worker's stderr, which Spark copies into the job's log in local mode, and into the
    executor's stderr in its work directory on a standalone cluster)."""
    log_lines(
        log,
        (
            (
                logging.INFO,
                f"read and transformed: {outcome.status}, {outcome.rows_loaded} of {outcome.rows_parsed} rows"
                + (f", written to blob {blob}" if in_blob else ""),
                {
                    "pipe": pipe.name,
                    "file": outcome.path,
                    "batch": ctx.batch_id,
                    "step": "loaded",
                    "status": outcome.status,
                    "rows": outcome.rows_loaded,
                },
            )
            for outcome, in_blob in whole
        ),
    )


class _TaskClock:
    """Where a task's time goes (logged per task: the first thing to read when a batch is slow)."""

    def __init__(self) -> None:
        self.wait = self.work = self.write = 0.0

    @contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, name, getattr(self, name) + time.perf_counter() - started)

    def waiting(self) -> AbstractContextManager[None]:
        """Time spent waiting for a staged file's bytes."""
        return self._timed("wait")

    def working(self) -> AbstractContextManager[None]:
        """Time spent parsing and transforming."""
        return self._timed("work")

    def writing(self) -> AbstractContextManager[None]:
        """Time spent writing the task's blob."""
        return self._timed("write")
