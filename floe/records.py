"""The records a file passes through on its way to a table, and every external form they take.

A file is queued (``QueueEntry``, an entry of its pipe's Redis stream), planned into a Spark task
of a micro-batch (``LoadTask``), loaded by an executor (``LoadOutcome``, shipped back to the driver
next to the manifest entries of the blobs written), and committed (``LoadOutcome.apply_to`` turns
it into the file's terminal ``FileState``). The Redis stream fields, the Spark rows and the
executor-to-driver rows are encoded and decoded here and nowhere else, so a field is renamed or
added in one place, and a new kind of input (a row batch from a streaming channel) is a new
``Origin`` and record, not a new dict shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, Literal, cast, get_args, get_type_hints

import pyarrow as pa

from floe.blobs import BlobMeta
from floe.history import ErrorDetail, FileState, Trouble

Origin = Literal["notification", "rest", "replace", "refresh", "backfill"]
"""How a file reached its queue: an S3 event notification (through SQS), an insertFiles call, the
queue of the pipe incarnation a CREATE OR REPLACE retired, ALTER PIPE ... REFRESH, or a pipe's
BACKFILL_INTERVAL listing."""

LoadStatus = Literal["LOADED", "PARTIALLY_LOADED", "LOAD_FAILED"]
"""The terminal statuses of a file's load (history's LOAD_IN_PROGRESS is never an outcome)."""

_ORIGINS: frozenset[str] = frozenset(get_args(Origin))

# ------------------------------------------------------------------------------------------------
# Queue entries (Redis stream fields)

# The stream's field names. 'origin' came later: entries without it are read as notifications.
# 'put' later still, and only in the entries of notifications that carry an event time.
_PATH, _SIZE, _RECEIVED, _ORIGIN, _PUT = "path", "size", "received", "origin", "put"
_B_PATH, _B_SIZE, _B_RECEIVED, _B_ORIGIN, _B_PUT = (
    f.encode() for f in (_PATH, _SIZE, _RECEIVED, _ORIGIN, _PUT)
)


@dataclass(frozen=True)
class QueueEntry:
    """One file waiting in a pipe's queue stream."""

    path: str
    """Path relative to the stage."""
    size: int | None
    """Stored size in bytes; None when the notification or the insertFiles call did not say."""
    received_ms: int
    """When the notification or the insertFiles call reached Floe."""
    origin: Origin = "notification"
    """How the file got here. Entries queued before Floe recorded it read as 'notification': both
    older kinds are whole files, which is all a reader needs to know."""
    stream_id: str | None = None
    """The entry's id in its stream; None until it is added."""
    put_ms: int | None = None
    """When the object was put: the S3 notification's event time. None when the trigger did not say
    (insertFiles, REFRESH, entries queued before Floe recorded it): ``received_ms`` stands in."""

    def stream_fields(self) -> list[str | int]:
        """The entry's stream fields as flat name/value pairs, in XADD order."""
        fields: list[str | int] = [
            _PATH,
            self.path,
            _SIZE,
            self.stream_size(self.size),
            _RECEIVED,
            self.received_ms,
            _ORIGIN,
            self.origin,
        ]
        return fields if self.put_ms is None else [*fields, _PUT, self.put_ms]

    @staticmethod
    def stream_size(size: int | None) -> int:
        """A size as the stream holds it: -1 when unknown."""
        return -1 if size is None else size

    @staticmethod
    def lua_stream_fields(path: str, size: str, received: str, origin: str) -> str:
        """The XADD field/value list of an entry as Lua source, for a script that adds entries (the
        dedup step): each argument is a Lua expression for that value, encoded as ``stream_fields``
        encodes it. The names are spelled into the script, not passed per entry: a call of the dedup
        script carries up to hundreds of entries, and passing them cost it about a tenth."""
        return f"'{_PATH}', {path}, '{_SIZE}', {size}, '{_RECEIVED}', {received}, '{_ORIGIN}', {origin}"

    @staticmethod
    def lua_put_field(put: str) -> str:
        """The optional last field/value pair of ``lua_stream_fields``: the put time, as a Lua
        expression (the script adds it only when the trigger gave one)."""
        return f"'{_PUT}', {put}"

    @classmethod
    def from_stream(cls, stream_id: bytes | str, values: Mapping[bytes, bytes]) -> QueueEntry:
        """An entry as XRANGE returns it: its id and its fields."""
        size = int(values.get(_B_SIZE, b"-1"))
        origin = values.get(_B_ORIGIN, b"notification").decode()
        put = values.get(_B_PUT)
        if origin not in _ORIGINS:
            raise ValueError(f"queue entry {stream_id!r} has an unknown origin {origin!r}")
        return cls(
            path=values[_B_PATH].decode(),
            size=None if size < 0 else size,
            received_ms=int(values.get(_B_RECEIVED, b"0")),
            origin=cast(Origin, origin),  # checked above
            stream_id=stream_id.decode() if isinstance(stream_id, bytes) else stream_id,
            put_ms=None if put is None else int(put),
        )

    @classmethod
    def from_flat(cls, entry: Sequence[Any]) -> QueueEntry:
        """An entry as a Lua script returns XRANGE's output: [id, [name, value, ...]]."""
        sid, flat = entry
        return cls.from_stream(sid, dict(zip(flat[::2], flat[1::2], strict=True)))


# ------------------------------------------------------------------------------------------------
# Row appends (a streaming channel's entries in its pipe's rows stream)


@dataclass(frozen=True)
class RowAppend:
    """One accepted append of a channel, waiting in its pipe's rows stream; its rows are stored
    under ``data_key`` until the commit that settles it."""

    channel: str
    incarnation: str
    """The channel incarnation that accepted it; a channel dropped since drops it at commit."""
    client_sequencer: int
    """The writer's client sequencer; a reopen since fences it at commit."""
    row_sequencer: int
    """Its place in the channel: appends load in this order."""
    rows: int
    size: int
    """Bytes of NDJSON."""
    start_offset_token: str | None
    end_offset_token: str | None
    received_ms: int
    data_key: str
    stream_id: str | None = None

    # The stream field names, and the Lua expressions of the append script that fill them
    # (floe/channels.py: ARGV and KEYS as that script documents).
    _LUA: ClassVar[tuple[tuple[str, str], ...]] = (
        ("channel", "ARGV[1]"),
        ("incarnation", "ARGV[2]"),
        ("client_sequencer", "ARGV[3]"),
        ("row_sequencer", "ARGV[4]"),
        ("rows", "ARGV[7]"),
        ("size", "size"),
        ("start_offset_token", "ARGV[8]"),
        ("end_offset_token", "ARGV[9]"),
        ("received_ms", "ARGV[10]"),
        ("data_key", "KEYS[3]"),
    )

    @classmethod
    def lua_stream_fields(cls) -> str:
        """The XADD field/value list of the append script, as Lua source."""
        return ", ".join(f"'{name}', {expr}" for name, expr in cls._LUA)

    @classmethod
    def from_stream(cls, stream_id: bytes | str, values: Mapping[bytes, bytes]) -> RowAppend:
        """An entry as XRANGE returns it (offset tokens are stored as JSON: null when not given)."""
        v = {k.decode(): x.decode() for k, x in values.items()}
        return cls(
            channel=v["channel"],
            incarnation=v["incarnation"],
            client_sequencer=int(v["client_sequencer"]),
            row_sequencer=int(v["row_sequencer"]),
            rows=int(v["rows"]),
            size=int(v["size"]),
            start_offset_token=json.loads(v["start_offset_token"]),
            end_offset_token=json.loads(v["end_offset_token"]),
            received_ms=int(v["received_ms"]),
            data_key=v["data_key"],
            stream_id=stream_id.decode() if isinstance(stream_id, bytes) else stream_id,
        )

    def to_json(self) -> str:
        """The form a LoadTask carries it in."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RowAppend:
        """The append ``to_json`` gave."""
        return cls(**json.loads(text))

    @property
    def path(self) -> str:
        """How load outcomes and blob manifests name it: channel, incarnation and row sequencer. The
        incarnation matters: after a DROP and a new open, row sequencers start again, and the two
        incarnations' appends may meet in one micro-batch (tests/pipeline/test_channel_model.py)."""
        return f"{self.channel}/{self.incarnation}/{self.row_sequencer:012d}"


# ------------------------------------------------------------------------------------------------
# Tasks (the streaming source's rows and the mapInArrow input)

_SPARK_TYPES: dict[Any, str] = {str: "string", int: "long", int | None: "long"}


def _spark_ddl(cls: type, skip: frozenset[str] = frozenset()) -> str:
    hints = get_type_hints(cls)
    return ", ".join(f"{f.name} {_SPARK_TYPES[hints[f.name]]}" for f in fields(cls) if f.name not in skip)


@dataclass(frozen=True)
class LoadTask:
    """One queued file planned into a micro-batch: the pipe, the queue entry and the Spark task."""

    pipe_id: str
    """The pipe incarnation whose queue holds the file."""
    path: str
    """Path relative to the stage."""
    size: int | None
    """Stored size in bytes, when known."""
    received_ms: int
    """When the file reached Floe."""
    stream_id: str
    """Its queue entry, deleted when the load commits."""
    part: int = 0
    """The Spark partition (task) that loads it; 0 until the job plans the batch."""
    append: str = ""
    """For a streaming channel's append, its RowAppend as JSON ('' for a file)."""
    put_ms: int | None = None
    """The queue entry's ``put_ms``: when the object was put, if its notification said."""

    @classmethod
    def queued(cls, pipe_id: str, entry: QueueEntry) -> LoadTask:
        """The task of a queue entry read from the stream (so it has its id)."""
        assert entry.stream_id is not None, "an entry read from its stream has an id"
        return cls(pipe_id, entry.path, entry.size, entry.received_ms, entry.stream_id, put_ms=entry.put_ms)

    @property
    def since_ms(self) -> int:
        """Where the file's put→queryable latency starts: its S3 event time when known, else when
        Floe received it (the insertFiles call, the notification's arrival, an append)."""
        return self.received_ms if self.put_ms is None else self.put_ms

    @classmethod
    def appended(cls, pipe_id: str, append: RowAppend) -> LoadTask:
        """The task of a channel's append read from its pipe's rows stream."""
        assert append.stream_id is not None, "an append read from its stream has an id"
        return cls(
            pipe_id, append.path, append.size, append.received_ms, append.stream_id, append=append.to_json()
        )

    @property
    def row_append(self) -> RowAppend | None:
        """The channel append this task loads, or None for a file."""
        return RowAppend.from_json(self.append) if self.append else None

    def in_part(self, part: int) -> LoadTask:
        """The same task, planned into Spark partition ``part``."""
        return replace(self, part=part)

    def source_row(self) -> tuple[str, str, int | None, int, str, str, int | None]:
        """The streaming source's row (``SOURCE_SCHEMA``)."""
        return (
            self.pipe_id,
            self.path,
            self.size,
            self.received_ms,
            self.stream_id,
            self.append,
            self.put_ms,
        )

    def task_row(self) -> tuple[str, str, int | None, int, str, int, str, int | None]:
        """The mapInArrow input row (``TASK_SCHEMA``)."""
        return (
            self.pipe_id,
            self.path,
            self.size,
            self.received_ms,
            self.stream_id,
            self.part,
            self.append,
            self.put_ms,
        )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> LoadTask:
        """A task from a row by column name: a source row (no part yet) or a task row."""
        return cls(**row)

    @classmethod
    def from_batch(cls, batch: pa.RecordBatch) -> list[LoadTask]:
        """The tasks of one mapInArrow input batch."""
        return [cls(**row) for row in batch.to_pylist()]

    @classmethod
    def to_batch(cls, tasks: Sequence[LoadTask]) -> pa.RecordBatch:
        """The mapInArrow input batch of ``tasks``, as Spark would hand it over."""
        return pa.RecordBatch.from_pylist([asdict(t) for t in tasks], schema=_TASK_ARROW)


_TASK_ARROW = pa.schema(
    [
        (f.name, pa.string() if get_type_hints(LoadTask)[f.name] is str else pa.int64())
        for f in fields(LoadTask)
    ]
)
SOURCE_SCHEMA = _spark_ddl(LoadTask, frozenset({"part"}))
"""Spark DDL of the ``floe_files`` source's rows: a task before the job plans it."""
TASK_SCHEMA = _spark_ddl(LoadTask)
"""Spark DDL of the mapInArrow input rows."""

# ------------------------------------------------------------------------------------------------
# Load outcomes


@dataclass(frozen=True)
class LoadOutcome:
    """What loading one file came to (COPY_HISTORY's columns): the transform's result, the
    executor's report to the driver, and the update the commit applies to the file's state."""

    path: str
    """Path relative to the stage (the file name apply_copy was given)."""
    status: LoadStatus
    """LOADED, PARTIALLY_LOADED or LOAD_FAILED."""
    rows_parsed: int = 0
    """Records seen, good and bad."""
    rows_loaded: int = 0
    """Rows that went into the table (0 when LOAD_FAILED)."""
    errors_seen: int = 0
    """Records with an error (parse or conversion)."""
    error_limit: int | None = None
    """Errors that fail the file: 1 for SKIP_FILE, N for SKIP_FILE_N, rows_parsed for CONTINUE,
    and for 'SKIP_FILE_N%' the smallest error count above N% of rows_parsed. None when the file
    failed before its COPY ran (gone, too large, internal error): its state keeps the pipe's."""
    first_error: str | None = None
    """Message of the earliest error in the file."""
    first_error_line: int | None = None
    """Its physical line."""
    first_error_character: int | None = None
    """Its 1-based character position in that line."""
    first_error_column: str | None = None
    """Its column, ``"<TABLE>"["<COLUMN>":<ordinal>]``."""
    code: str | None = None
    """Its Snowflake error code, e.g. '100038' (not part of load history)."""
    system_error: str | None = None
    """Error that stopped the whole file (missing object, internal error)."""
    size: int | None = None
    """Stored size in bytes as read; None keeps the size the file's state has."""
    stream_id: str = ""
    """The file's queue entry, set by the executor from its task."""
    errors: tuple[ErrorDetail, ...] = ()
    """Every error of the file, in file order, up to ``pipeline.max_errors_per_file``
    (VALIDATE_PIPE_LOAD's rows; the registrar stores them with the file's state)."""
    trouble: Trouble | None = None
    """Why the file failed when the file was not the cause (see ``floe.history.Trouble``)."""

    @classmethod
    def failed(
        cls,
        path: str,
        message: str,
        *,
        code: str | None = None,
        line: int | None = None,
        character: int | None = None,
        column: str | None = None,
        detail: ErrorDetail | None = None,
    ) -> LoadOutcome:
        """A file that could not be read at all (a FileLoadError), with its place when known;
        ``detail``: the error as VALIDATE_PIPE_LOAD shows it."""
        return cls(
            path,
            "LOAD_FAILED",
            errors_seen=1,
            error_limit=1,
            first_error=message,
            first_error_line=line,
            first_error_character=character,
            first_error_column=column,
            code=code,
            errors=(detail,) if detail is not None else (),
        )

    @classmethod
    def stopped(
        cls,
        path: str,
        message: str,
        *,
        system: bool,
        size: int | None = None,
        trouble: Trouble | None = None,
    ) -> LoadOutcome:
        """A file that failed before its COPY ran: gone, too large to read, refused, or an internal
        error (``system``: the message is also its system error; ``trouble``: the pipe's or Floe's
        fault rather than the file's, which SYSTEM$PIPE_STATUS reports)."""
        return cls(
            path,
            "LOAD_FAILED",
            errors_seen=1,
            first_error=message,
            system_error=message if system else None,
            size=size,
            trouble=trouble,
        )

    def sized(self, size: int) -> LoadOutcome:
        """The same outcome with the file's stored size."""
        return replace(self, size=size)

    def of_task(self, task: LoadTask) -> LoadOutcome:
        """The same outcome, tied to the task's file and queue entry."""
        return replace(self, path=task.path, stream_id=task.stream_id)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (the wire payload), with the field names as keys."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadOutcome:
        """The outcome ``to_dict`` gave."""
        errors = tuple(ErrorDetail.from_dict(e) for e in data.get("errors", ()))
        return cls(**{**data, "errors": errors})

    def apply_to(self, state: FileState, loaded_ms: int) -> FileState:
        """The file's terminal state: ``state`` (as dedup wrote it) updated with this outcome.

        A size or error limit the outcome does not know (None) keeps the state's: the size the
        notification gave, and the pipe's ERROR_LIMIT.
        """
        update: dict[str, Any] = {
            "status": self.status,
            "rows_parsed": self.rows_parsed,
            "rows_loaded": self.rows_loaded,
            "errors_seen": self.errors_seen,
            "first_error": self.first_error,
            "first_error_line": self.first_error_line,
            "first_error_character": self.first_error_character,
            "first_error_column": self.first_error_column,
            "system_error": self.system_error,
            "loaded_ms": loaded_ms,
            "errors": list(self.errors),
            "trouble": self.trouble,
        }
        if self.error_limit is not None:
            update["error_limit"] = self.error_limit
        if self.size is not None:
            update["size"] = self.size
        return state.model_copy(update=update)


# ------------------------------------------------------------------------------------------------
# Executor -> driver: the mapInArrow output rows

_FILE, _BLOB = "file", "blob"
_ARROW_TO_SPARK = {pa.string(): "string"}
WIRE_SCHEMA = pa.schema([("kind", pa.string()), ("pipe_id", pa.string()), ("payload", pa.string())])
"""One row per file outcome and per blob written: its kind, its pipe and its JSON."""
WIRE_DDL = ", ".join(f"{f.name} {_ARROW_TO_SPARK[f.type]}" for f in WIRE_SCHEMA)
"""``WIRE_SCHEMA`` as the Spark DDL mapInArrow takes."""


@dataclass
class PipeResults:
    """What a micro-batch's tasks returned for one pipe, in the order they returned it."""

    outcomes: list[LoadOutcome] = field(default_factory=list)
    blobs: list[dict[str, Any]] = field(default_factory=list)
    """Manifest entries (``BlobMeta.to_dict``) of the blobs written."""


def encode_results(pipe_id: str, items: Iterable[LoadOutcome | BlobMeta]) -> pa.RecordBatch:
    """A task's output for one pipe, in ``WIRE_SCHEMA``."""
    rows = [
        {
            "kind": _FILE if isinstance(item, LoadOutcome) else _BLOB,
            "pipe_id": pipe_id,
            "payload": json.dumps(item.to_dict()),
        }
        for item in items
    ]
    return pa.RecordBatch.from_pylist(rows, schema=WIRE_SCHEMA)


def decode_results(rows: Iterable[Mapping[str, Any]]) -> dict[str, PipeResults]:
    """The collected output rows by pipe, pipes in the order they first appear."""
    out: dict[str, PipeResults] = {}
    for row in rows:
        results = out.setdefault(row["pipe_id"], PipeResults())
        payload = json.loads(row["payload"])
        if row["kind"] == _BLOB:
            results.blobs.append(payload)
        else:
            results.outcomes.append(LoadOutcome.from_dict(payload))
    return out
