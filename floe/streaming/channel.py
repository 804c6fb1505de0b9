"""Channels of Floe's Snowpipe Streaming client, and the client's background flusher.

A channel serializes rows when they are appended and buffers them; the :class:`Flusher` (one per
client) sends a channel's buffer once its oldest row is ``max_client_lag`` old, once it fills one
append's wire budget, on ``initiate_flush`` / ``wait_for_flush``, and whenever the client's buffered
bytes reach ``max_buffer_bytes`` (appenders then block until the senders drain it). A channel's
appends go one at a time, in order, each with the continuation token of the answer before it;
different channels are sent by a few threads at once.

All buffer state of a client is guarded by the flusher's one lock: the critical sections are a few
list and counter updates, while serializing, validating, compressing and sending happen outside.
Each kind of waiter has its own condition on that lock (the scheduler, the senders, appenders and
flush waiters), so a wake-up only reaches those it concerns and no two waiters wake each other in a
loop: a throttled appender sleeps until bytes are freed, nothing polls.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from floe.streaming import protocol as wire
from floe.streaming.protocol import ChannelStatus
from floe.streaming.transport import (
    Batch,
    ChannelClosedError,
    ChannelInvalidError,
    Codec,
    Planner,
    Request,
    RowValidationError,
    Session,
    StreamingError,
    StreamingRequestError,
    StreamingTimeout,
)
from floe.streaming.validation import ColumnSpec, RowError, row_line, validate_rows

log = logging.getLogger("floe.streaming.client")

ON_ERROR_OPTIONS = ("CONTINUE", "ABORT", "SKIP_BATCH")
"""What append_rows does with invalid rows, as in the classic SDK: CONTINUE sends them (the server
counts them), ABORT raises on the first and buffers nothing of the batch, SKIP_BATCH buffers
nothing of a batch with an error and returns the errors."""

_REOPEN_HINT = "reopen the channel (open_channel) and resend from its latest committed offset token"


@dataclass
class InsertValidationResponse:
    """What append_rows refused: one error per problem, with the row's index in the batch."""

    errors: list[RowError] = field(default_factory=list)

    def has_errors(self) -> bool:
        """Whether any row of the batch was refused."""
        return bool(self.errors)

    @property
    def error_row_count(self) -> int:
        """How many rows of the batch had an error."""
        return len({e.row_index for e in self.errors})


@dataclass(frozen=True)
class ChannelContext:
    """What the channels of one client share."""

    session: Session
    flusher: Flusher
    codec: Codec
    db_name: str
    schema_name: str
    pipe_name: str
    clock: Callable[[], float]
    sleep: Callable[[float], object]
    poll_interval_s: float

    @property
    def fully_qualified_pipe_name(self) -> str:
        """``DB.SCHEMA.PIPE``."""
        return f"{self.db_name}.{self.schema_name}.{self.pipe_name}"

    def deadline(self, timeout_s: float | None) -> float | None:
        """The clock reading at which a wait of ``timeout_s`` gives up (None: never)."""
        return None if timeout_s is None else self.clock() + timeout_s

    def remaining(self, deadline: float | None) -> float | None:
        """Seconds left until ``deadline`` (None: no deadline)."""
        return None if deadline is None else deadline - self.clock()


# ------------------------------------------------------------------------------------------------
# Calls that are not appends


def fetch_statuses(ctx: ChannelContext, names: Sequence[str]) -> dict[str, ChannelStatus]:
    """The status of each named channel the server knows (unknown ones are left out)."""
    doc = ctx.session.call(
        "POST",
        wire.bulk_status_path(ctx.db_name, ctx.schema_name, ctx.pipe_name),
        json={wire.CHANNEL_NAMES: list(names)},
    )
    statuses = doc.get(wire.CHANNEL_STATUSES)
    if not isinstance(statuses, dict):
        raise StreamingRequestError(f"the bulk status answer has no {wire.CHANNEL_STATUSES} object")
    try:
        return {name: ChannelStatus.from_json(value) for name, value in statuses.items()}
    except TypeError as exc:
        raise StreamingRequestError(f"the bulk status answer has a malformed channel status: {exc}") from None


def drop_remote(ctx: ChannelContext, name: str) -> None:
    """DELETE the channel on the server (its offset token goes with it)."""
    ctx.session.call(
        "DELETE",
        wire.channel_path(ctx.db_name, ctx.schema_name, ctx.pipe_name, name),
        params={wire.REQUEST_ID: str(uuid.uuid4())},
        channel=name,
    )


# ------------------------------------------------------------------------------------------------
# The flusher


class Flusher:
    """A client's background sending: a scheduler thread picks the channels that are due, a few
    sender threads send them. Its lock guards every channel's buffer and the byte budget."""

    def __init__(
        self, name: str, *, clock: Callable[[], float], lag_s: float, max_buffer_bytes: int, threads: int
    ) -> None:
        self.name = name
        lock = threading.Lock()
        self.cond = threading.Condition(lock)
        """Buffer state changed (bytes freed, rows sent, a channel failed or closed): for appenders
        and flush waiters. ``with flusher.cond`` takes the one lock."""
        self.schedule = threading.Condition(lock)
        """Something the scheduler should look at: new rows, a flush request, a sender done."""
        self.work = threading.Condition(lock)
        """Channels handed to the senders."""
        self.passed = threading.Condition(lock)
        """The scheduler finished a pass (observed by tests)."""
        self.clock = clock
        self.lag_s = lag_s
        self.max_buffer_bytes = max_buffer_bytes
        self.buffered_bytes = 0
        """Bytes appended and not yet acknowledged by the server (buffered or in flight)."""
        self.throttled = 0
        """Appenders blocked until the buffered bytes drop below max_buffer_bytes."""
        self.passes = 0
        """Scheduling passes made: lets tests observe a decision not to send, without sleeping."""
        self.stopping = False
        self.open: dict[str, StreamingIngestChannel] = {}
        self.waiting: set[StreamingIngestChannel] = set()
        """Channels with buffered rows, which the scheduler looks at."""
        self._ready: deque[StreamingIngestChannel] = deque()
        self._threads: list[threading.Thread] = []
        self._senders = threads

    def start(self) -> None:
        """Start the scheduler and the sender threads (daemons: an exiting interpreter never waits)."""
        self._threads.append(threading.Thread(target=self._schedule, name=f"{self.name}-flush", daemon=True))
        for i in range(self._senders):
            self._threads.append(
                threading.Thread(target=self._send, name=f"{self.name}-send-{i}", daemon=True)
            )
        for thread in self._threads:
            thread.start()

    def wake(self) -> None:
        """Make the scheduler, and every waiter with a deadline, look again (after the clock moved)."""
        with self.cond:
            self.schedule.notify()
            self.cond.notify_all()

    def _schedule(self) -> None:
        with self.cond:
            while not self.stopping:
                timeout = self._pass()
                self.passes += 1
                self.passed.notify_all()
                self.schedule.wait(timeout)

    def _pass(self) -> float | None:
        """Hand the due channels to the senders; seconds until the next one falls due (None: none)."""
        now = self.clock()
        # Blocked appenders, or a full budget, make everything due: waiting for the lag then could
        # deadlock when many channels each hold less than one append's worth.
        pressed = self.throttled > 0 or self.buffered_bytes >= self.max_buffer_bytes
        next_at: float | None = None
        for ch in list(self.waiting):
            if ch._sending:
                continue  # its sender notifies when done, and it is looked at again then
            if not ch._pending:
                self.waiting.discard(ch)
                continue
            due_at = ch._pending[0].appended_at + self.lag_s
            if (
                pressed
                or ch._flush_upto > ch._taken_seq
                or ch._pending_bytes >= ch._planner.raw_limit()
                or now >= due_at
            ):
                ch._sending = True
                self._ready.append(ch)
                self.work.notify()
            else:
                next_at = due_at if next_at is None else min(next_at, due_at)
        return None if next_at is None else max(next_at - now, 0.0)

    def _send(self) -> None:
        while True:
            with self.cond:
                while not self._ready and not self.stopping:
                    self.work.wait()
                if self.stopping:
                    return
                ch = self._ready.popleft()
            try:
                ch._send_pending()
            finally:
                with self.cond:
                    ch._sending = False
                    self.schedule.notify()  # rows appended meanwhile may be due already

    def flush_all(self) -> dict[StreamingIngestChannel, int]:
        """Make every open channel's buffered rows due now; what each must reach to be flushed.

        A channel that is invalid already is left out: its loss was reported when it failed, and
        its own calls keep raising, so it does not make every later client-wide flush fail.
        """
        with self.cond:
            targets = {ch: ch._request_flush_locked() for ch in self.open.values() if ch._usable_locked()}
            self.schedule.notify()
            return targets

    def wait_flushed(self, targets: Mapping[StreamingIngestChannel, int], deadline: float | None) -> None:
        """Wait until each channel sent its batches up to its target; raise for one that cannot."""
        with self.cond:
            while True:
                behind = [ch for ch, seq in targets.items() if ch._sent_seq < seq and ch._usable_locked()]
                if not behind:
                    break
                remaining = None if deadline is None else deadline - self.clock()
                if remaining is not None and remaining <= 0:
                    names = ", ".join(sorted(ch.channel_name for ch in behind))
                    raise StreamingTimeout(
                        f"wait_for_flush timed out with rows of channel(s) {names} not yet sent",
                        channel=behind[0].channel_name if len(behind) == 1 else None,
                    )
                self.cond.wait(remaining)
            for ch, seq in targets.items():
                if ch._sent_seq < seq:
                    ch._raise_if_unusable_locked()

    def shutdown(self) -> int:
        """Stop the threads (without waiting for them) and close every channel; the rows dropped."""
        with self.cond:
            self.stopping = True
            dropped = sum(b.rows for ch in self.open.values() for b in ch._pending)
            for ch in list(self.open.values()):
                ch._close_locked("the client was closed")
            for condition in (self.cond, self.schedule, self.work, self.passed):
                condition.notify_all()
        return dropped

    def join(self, timeout_s: float) -> None:
        """Wait for the threads to end, at most ``timeout_s`` each (a sender may be in a request)."""
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout_s)


# ------------------------------------------------------------------------------------------------
# Channels


class StreamingIngestChannel:
    """A named channel of a pipe: appended rows are sent in order, with their offset tokens."""

    def __init__(
        self,
        ctx: ChannelContext,
        channel_name: str,
        continuation_token: str,
        *,
        on_error: str = "CONTINUE",
        table_columns: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self._ctx = ctx
        self._flusher = ctx.flusher
        self._name = channel_name
        self._on_error = on_error
        self._table_columns = [dict(c) for c in table_columns]
        self._columns: list[ColumnSpec] | None = None
        self._planner = Planner(ctx.codec)
        # Sender-owned: only the one sender of this channel at a time reads and replaces it.
        self._continuation = continuation_token
        # Guarded by the flusher's lock:
        self._pending: list[Batch] = []
        self._pending_bytes = 0
        self._sending = False
        self._appended_seq = 0
        self._taken_seq = 0
        self._sent_seq = 0
        self._flush_upto = 0
        self._invalid: StreamingError | None = None
        self._closed_reason: str | None = None

    # ------------------------------------------------------------------------------- properties

    @property
    def channel_name(self) -> str:
        """The channel's name."""
        return self._name

    @property
    def db_name(self) -> str:
        """The pipe's database."""
        return self._ctx.db_name

    @property
    def schema_name(self) -> str:
        """The pipe's schema."""
        return self._ctx.schema_name

    @property
    def pipe_name(self) -> str:
        """The pipe's name."""
        return self._ctx.pipe_name

    @property
    def fully_qualified_pipe_name(self) -> str:
        """``DB.SCHEMA.PIPE``."""
        return self._ctx.fully_qualified_pipe_name

    @property
    def fully_qualified_channel_name(self) -> str:
        """``DB.SCHEMA.PIPE.CHANNEL``."""
        return f"{self._ctx.fully_qualified_pipe_name}.{self._name}"

    @property
    def on_error(self) -> str:
        """CONTINUE, ABORT or SKIP_BATCH."""
        return self._on_error

    @property
    def table_columns(self) -> list[dict[str, Any]]:
        """The target table's columns as the open answer gave them (name, type, nullable)."""
        return [dict(c) for c in self._table_columns]

    @property
    def is_closed(self) -> bool:
        """Whether close() was called (or the client closed, or the channel was dropped)."""
        with self._flusher.cond:
            return self._closed_reason is not None

    def is_valid(self) -> bool:
        """False once the server or this client invalidated the channel: reopen it then."""
        with self._flusher.cond:
            return self._invalid is None

    # ---------------------------------------------------------------------------------- appends

    def append_row(self, row: Mapping[str, Any], offset_token: str | None = None) -> InsertValidationResponse:
        """Append one row; ``offset_token`` becomes the channel's committed token once it commits."""
        return self.append_rows([row], None, offset_token)

    def append_rows(
        self,
        rows: Iterable[Mapping[str, Any]],
        start_offset_token: str | None = None,
        end_offset_token: str | None = None,
    ) -> InsertValidationResponse:
        """Append a batch of rows (serialized now, sent later); the rows refused, per ON_ERROR.

        Blocks while the client's buffered bytes are at ``max_buffer_bytes``. Raises
        ChannelInvalidError / ChannelClosedError when the channel cannot take rows, and
        RowValidationError under ON_ERROR = ABORT.
        """
        with self._flusher.cond:
            self._raise_if_unusable_locked()  # fail before the work of serializing
        batch = list(rows)
        if not batch:
            return InsertValidationResponse()
        data, ends, errors = self._serialize(batch)
        if self._on_error != "CONTINUE":
            flagged = validate_rows(batch, self._column_specs())
            seen = {e.row_index for e in flagged}
            errors = sorted(
                flagged + [e for e in errors if e.row_index not in seen], key=lambda e: e.row_index
            )
            if errors and self._on_error == "ABORT":
                first = errors[0]
                raise RowValidationError(
                    f"ON_ERROR = ABORT: {first}; nothing of this batch was buffered",
                    row_index=first.row_index,
                    column=first.column,
                    channel=self._name,
                )
            if errors:
                return InsertValidationResponse(errors)
        # CONTINUE: the server counts invalid rows, but rows that cannot even be encoded or sent
        # are left out here and reported, as the classic SDK's CONTINUE returns its errors.
        if ends:
            self._buffer(data, ends, start_offset_token, end_offset_token)
        return InsertValidationResponse(errors)

    def _column_specs(self) -> list[ColumnSpec]:
        if self._columns is None:
            try:
                self._columns = [ColumnSpec.from_json(c) for c in self._table_columns]
            except ValueError as exc:
                raise StreamingRequestError(
                    f"the open answer's {wire.TABLE_COLUMNS} cannot be read: {exc}", channel=self._name
                ) from None
        return self._columns

    def _serialize(self, rows: list[Mapping[str, Any]]) -> tuple[bytes, list[int], list[RowError]]:
        """The rows that can be sent as NDJSON, where each one's line ends, and why the others not."""
        buf = bytearray()
        ends: list[int] = []
        errors: list[RowError] = []
        fits_alone = self._planner.fits_alone
        for i, row in enumerate(rows):
            if type(row) is not dict and not isinstance(row, Mapping):
                errors.append(RowError(i, None, f"a row must be a mapping (dict), not {type(row).__name__}"))
                continue
            try:
                line = row_line(row)
            except TypeError as exc:  # orjson.JSONEncodeError is one too (say, a lone surrogate)
                errors.append(RowError(i, None, f"the row cannot be sent: {exc}"))
                continue
            if not fits_alone(line):
                errors.append(
                    RowError(
                        i,
                        None,
                        f"the row is {len(line)} bytes as JSON; a row may have at most "
                        f"{wire.MAX_ROW_BYTES} bytes and must fit one {wire.MAX_BODY_BYTES}-byte append",
                    )
                )
                continue
            buf += line
            ends.append(len(buf))
        return bytes(buf), ends, errors

    def _buffer(self, data: bytes, ends: list[int], start: str | None, end: str | None) -> None:
        raw = len(data)
        f = self._flusher
        with f.cond:
            self._wait_for_room_locked()
            self._appended_seq += 1
            was_empty = not self._pending
            self._pending.append(Batch(self._appended_seq, data, ends, start, end, self._ctx.clock()))
            self._pending_bytes += raw
            f.buffered_bytes += raw
            f.waiting.add(self)
            if (
                was_empty
                or self._pending_bytes >= self._planner.raw_limit()
                or f.buffered_bytes >= f.max_buffer_bytes
            ):
                # A new deadline, a full append or a full budget: the scheduler must look now.
                f.schedule.notify()

    def _wait_for_room_locked(self) -> None:
        f = self._flusher
        self._raise_if_unusable_locked()
        if f.buffered_bytes < f.max_buffer_bytes:
            return
        f.throttled += 1
        try:
            # Once, not per wake-up: the scheduler now sends everything buffered, and every byte a
            # sender frees notifies ``cond``, so this waits without polling anyone.
            f.schedule.notify()
            f.cond.notify_all()  # for observers of ``throttled`` (the tests)
            while True:
                f.cond.wait()
                self._raise_if_unusable_locked()
                if f.buffered_bytes < f.max_buffer_bytes:
                    return
        finally:
            f.throttled -= 1

    # ---------------------------------------------------------------------------------- sending

    def _send_pending(self) -> None:
        """Send what is buffered, one append after the other (run by a sender thread)."""
        f = self._flusher
        with f.cond:
            if not self._usable_locked():
                return
            batches, self._pending = self._pending, []
            self._pending_bytes = 0
            if batches:
                self._taken_seq = batches[-1].seq
        in_flight = sum(b.raw_bytes for b in batches)
        try:
            for request in self._planner.requests(batches):
                with f.cond:
                    if not self._usable_locked():
                        return  # closed or invalidated meanwhile: the rest is dropped
                nxt = self._post(request)
                with f.cond:
                    self._continuation = nxt
                    in_flight -= request.raw_bytes
                    f.buffered_bytes -= request.raw_bytes
                    if request.last_seq is not None:
                        self._sent_seq = request.last_seq
                    f.cond.notify_all()
        except StreamingError as exc:
            with f.cond:
                if self._closed_reason is None:  # a close that aborted the send is no failure
                    self._invalidate_locked(exc)
        except Exception as exc:
            log.exception(
                "sending the rows of channel %s failed unexpectedly", self.fully_qualified_channel_name
            )
            with f.cond:
                self._invalidate_locked(StreamingError(f"sending failed: {type(exc).__name__}: {exc}"))
        finally:
            with f.cond:
                f.buffered_bytes -= in_flight
                f.cond.notify_all()

    def _post(self, request: Request) -> str:
        params = {wire.CONTINUATION_TOKEN: self._continuation, wire.REQUEST_ID: str(uuid.uuid4())}
        if request.start is not None:
            params[wire.START_OFFSET_TOKEN] = request.start
        if request.end is not None:
            params[wire.END_OFFSET_TOKEN] = request.end
        headers = {"Content-Type": "application/x-ndjson"}
        if self._ctx.codec.content_encoding:
            headers["Content-Encoding"] = self._ctx.codec.content_encoding
        doc = self._ctx.session.call(
            "POST",
            wire.rows_path(self.db_name, self.schema_name, self.pipe_name, self._name),
            params=params,
            body=request.body,
            headers=headers,
            channel=self._name,
        )
        nxt = doc.get(wire.NEXT_CONTINUATION_TOKEN)
        if not isinstance(nxt, str) or not nxt:
            raise StreamingRequestError(
                f"the append answer has no {wire.NEXT_CONTINUATION_TOKEN}", channel=self._name, status=200
            )
        return nxt

    # ------------------------------------------------------------------------------ state (locked)

    def _usable_locked(self) -> bool:
        return self._invalid is None and self._closed_reason is None

    def _raise_if_unusable_locked(self) -> None:
        if self._closed_reason is not None:
            raise ChannelClosedError(
                self._closed_reason, channel=self._name, pipe=self.fully_qualified_pipe_name
            )
        if self._invalid is not None:
            cause = self._invalid
            text = cause.detail if _REOPEN_HINT in cause.detail else f"{cause.detail}; {_REOPEN_HINT}"
            raise ChannelInvalidError(
                f"the channel is invalid: {text}",
                channel=self._name,
                pipe=self.fully_qualified_pipe_name,
                code=cause.code,
                status=cause.status,
            ) from cause

    def _invalidate_locked(self, cause: StreamingError) -> None:
        """Mark the channel invalid (the first cause stays) and drop its buffered rows."""
        if self._invalid is None:
            self._invalid = cause
            log.warning("channel %s is invalid: %s", self.fully_qualified_channel_name, cause.detail)
        self._drop_pending_locked()

    def _close_locked(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        self._drop_pending_locked()
        if self._flusher.open.get(self._name) is self:
            del self._flusher.open[self._name]

    def _drop_pending_locked(self) -> None:
        f = self._flusher
        f.buffered_bytes -= self._pending_bytes
        self._pending, self._pending_bytes = [], 0
        f.waiting.discard(self)
        f.cond.notify_all()

    def _request_flush_locked(self) -> int:
        """Make the buffered rows due now; the batch number that flushes them."""
        self._flush_upto = self._appended_seq
        if self._pending:
            self._flusher.waiting.add(self)
        return self._appended_seq

    # ------------------------------------------------------------------------------- flush, status

    def initiate_flush(self) -> None:
        """Send the buffered rows now, without waiting for max_client_lag."""
        with self._flusher.cond:
            self._raise_if_unusable_locked()
            self._request_flush_locked()
            self._flusher.schedule.notify()

    def wait_for_flush(self, timeout_seconds: float | None = None) -> None:
        """Send the rows appended so far and wait until the server accepted them (not committed:
        see wait_for_commit). Raises StreamingTimeout, or ChannelInvalidError when rows were lost."""
        deadline = self._ctx.deadline(timeout_seconds)
        with self._flusher.cond:
            self._raise_if_unusable_locked()
            target = self._request_flush_locked()
            self._flusher.schedule.notify()
        self._flusher.wait_flushed({self: target}, deadline)

    def get_channel_status(self) -> ChannelStatus:
        """The channel's status on the server (ChannelInvalidError once the channel is invalid: the
        reopened channel's status is the one that counts)."""
        with self._flusher.cond:
            if self._invalid is not None:
                self._raise_if_unusable_locked()
        status = fetch_statuses(self._ctx, [self._name]).get(self._name)
        if status is None:
            raise ChannelInvalidError(
                f"the server does not know the channel (dropped, or never opened); {_REOPEN_HINT}",
                channel=self._name,
                pipe=self.fully_qualified_pipe_name,
                code=wire.Code.CHANNEL_DOES_NOT_EXIST,
            )
        return status

    def get_latest_committed_offset_token(self) -> str | None:
        """The offset token of the last committed rows (None before any commit)."""
        return self.get_channel_status().last_committed_offset_token

    def wait_for_commit(
        self, token_checker: Callable[[str | None], bool], timeout_seconds: float | None = None
    ) -> None:
        """Flush, then poll the status until ``token_checker(latest committed token)`` is true.

        Raises StreamingTimeout when ``timeout_seconds`` pass first, and ChannelInvalidError when
        the server reports the channel in another state than SUCCESS.
        """
        deadline = self._ctx.deadline(timeout_seconds)
        self.wait_for_flush(self._ctx.remaining(deadline))
        while True:
            status = self.get_channel_status()
            if status.channel_status_code != wire.SUCCESS:
                error = ChannelInvalidError(
                    f"the server reports the channel as {status.channel_status_code}"
                    + (f" ({status.last_error_message})" if status.last_error_message else ""),
                    channel=self._name,
                    pipe=self.fully_qualified_pipe_name,
                    code=status.channel_status_code,
                )
                with self._flusher.cond:
                    self._invalidate_locked(error)
                self._raise_invalid()
            if token_checker(status.last_committed_offset_token):
                return
            remaining = self._ctx.remaining(deadline)
            if remaining is not None and remaining <= 0:
                raise StreamingTimeout(
                    f"wait_for_commit timed out; the latest committed offset token is "
                    f"{status.last_committed_offset_token!r}",
                    channel=self._name,
                    pipe=self.fully_qualified_pipe_name,
                )
            poll = self._ctx.poll_interval_s
            self._ctx.sleep(poll if remaining is None else min(poll, remaining))

    def _raise_invalid(self) -> None:
        with self._flusher.cond:
            self._raise_if_unusable_locked()

    # ------------------------------------------------------------------------------------ close

    def close(
        self, drop: bool = False, wait_for_flush: bool = True, timeout_seconds: float | None = None
    ) -> None:
        """Close the channel: first flush (when asked), then forget it, and drop it on the server
        when ``drop``. Raises the flush's error after closing, when rows could not be sent; an
        invalid channel closes quietly (its loss was reported when it failed)."""
        with self._flusher.cond:
            if self._closed_reason is not None:
                return
            invalid = self._invalid is not None
        failure: StreamingError | None = None
        if wait_for_flush and not invalid:
            try:
                self.wait_for_flush(timeout_seconds)
            except (ChannelInvalidError, StreamingTimeout) as exc:
                failure = exc
        with self._flusher.cond:
            self._close_locked("the channel was closed")
        if drop:
            drop_remote(self._ctx, self._name)
        if failure is not None:
            raise failure

    def __repr__(self) -> str:
        return f"StreamingIngestChannel({self.fully_qualified_channel_name!r})"
