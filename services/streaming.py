"""The Snowpipe Streaming v2 REST API: open, append, drop and bulk channel status (the hostname,
token exchange and pipe info are in ``services.streaming_session``).

An append answers 200 only after its rows are stored and queued in one Redis step (``floe.channels``:
durable, since Redis persists with ``appendfsync always``); the Spark job loads them through the
pipe's transform like a file, and the registrar commits them with the channel's offset token. A
retry of an append with the same ``requestId`` and continuation token gets the first answer again,
so a client that lost the answer does not append twice.

Every route checks its privileges through ``services.access.authorize``: OPERATE or OWNERSHIP on
the pipe to open, append and drop; MONITOR, OPERATE or OWNERSHIP to read status. A table's default
pipe (``<TABLE>-STREAMING``) asks INSERT (or OWNERSHIP) on the table instead, as Snowflake's
streaming API does, and SELECT or INSERT for status. A pipe the caller may not see answers the same
404 as one that does not exist; so does one it sees but may not act on, with what it takes in the
message (Snowflake's answer: the SDK retries a 403 as a bad token, for up to 10 hours).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from floe.catalog import Catalog, CopySpec, FileFormat, Pipe, Table, now_ms
from floe.catalog.names import Name, split_parts, unquote
from floe.channel_quotas import Limits, Room, Writer
from floe.channels import ELASTIC_INCARNATION, ChannelError, ChannelStore, PipeRef
from floe.errors import ObjectNotFound, PermissionDenied
from floe.keys import Keys, RedisClient
from floe.metrics import StreamingAppends, new_registry
from floe.settings import Settings
from floe.streaming import protocol as wire
from floe.streaming.protocol import MAX_UNCOMPRESSED_BYTES, Code, ContinuationToken
from floe.streaming.rows import BodyError, BodyTooLarge, RowBatch, TooManyRows, decode_body, parse_rows
from services.access import Need, authorize
from services.answers import RestError, Throttled, answer_for
from services.auth import Authenticator, Principal, RateLimiter
from services.snowpipe import caller_of
from services.streaming_paths import CHANNEL, DATA_PIPE, PIPE

log = logging.getLogger("floe.api.streaming")

DEFAULT_PIPE_SUFFIX = "-STREAMING"
"""Every table has a default pipe named ``<TABLE>-STREAMING`` that matches columns by name."""


PENDING_RETRY_AFTER_S = 1.0
"""The Retry-After of a full bound on rows not yet committed: the pipeline commits within a second or
two (append → committed p50 0.78 s). The official SDK ignores it and backs off 1, 2, 4 ... 60 s."""


class PendingFull(RestError):
    """A bound on rows appended and not yet committed is full: 503 with a Retry-After (decision 120)."""


def streaming_error(exc: ChannelError) -> RestError:
    """A refused channel step as the route answers it."""
    if exc.code == Code.PENDING_FULL:
        return PendingFull(exc.status, exc.code, exc.message)
    return RestError(exc.status, exc.code, exc.message)


def _missing_pipe(name: str) -> RestError:
    return RestError(404, Code.PIPE_DOES_NOT_EXIST, f"Pipe '{name}' does not exist or not authorized.")


def _bad(message: str) -> RestError:
    return RestError(400, Code.BAD_REQUEST, message)


class StreamingService:
    """The channel operations behind the routes."""

    def __init__(
        self,
        settings: Settings,
        client: RedisClient,
        catalog: Catalog,
        keys: Keys,
        appends: StreamingAppends | None = None,
    ) -> None:
        self.settings = settings
        self.appends = appends or StreamingAppends(new_registry())
        self.catalog = catalog
        s = settings.streaming
        self.channels = ChannelStore(client, keys, s.max_pending_bytes_per_channel, Limits.of(s))
        self.rates = RateLimiter(s.appends_per_s_per_channel, s.appends_burst_per_channel)
        # A user's appends over all its channels: 24 channel names each passed their own rate.
        self.user_rates = RateLimiter(s.appends_per_s_per_user, s.appends_burst_per_user)

    # ----------------------------------------------------------------------------------- pipes

    def pipe(self, principal: Principal, database: str, schema: str, name: str, write: bool) -> Pipe:
        """The streaming pipe a route names, checked: a table's default pipe is made on first use."""
        # Each part is one identifier of the URL, a structured name from here on (decision 109).
        named = Name(*(_identifier(part) for part in (database, schema, name)))
        full = str(named)
        pipe = self.catalog.find(Pipe, full)
        if pipe is None and named.name.endswith(DEFAULT_PIPE_SUFFIX):
            pipe = self._default_pipe(principal, named, write)
        if pipe is None:
            raise _missing_pipe(full)
        # Privileges first: a caller who may not see the pipe learns nothing of it, not even that it
        # loads files (a missing pipe and an unseen one answer the same 404).
        self._authorize(principal, pipe, write)
        if pipe.source != "streaming":
            raise RestError(
                400,
                Code.BAD_REQUEST,
                f"Pipe '{full}' loads files from a stage; channels need a streaming pipe (COPY ... "
                "FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING'))) or the table's default pipe "
                f"<TABLE>{DEFAULT_PIPE_SUFFIX}.",
            )
        return pipe

    def _authorize(self, principal: Principal, pipe: Pipe, write: bool) -> None:
        if pipe.default_streaming:
            need = Need(
                "TABLE", pipe.copy_spec.table, ("INSERT", "OWNERSHIP") if write else ("INSERT", "SELECT")
            )
        else:
            need = Need("PIPE", pipe.name, ("OPERATE", "OWNERSHIP") if write else ("MONITOR", "OPERATE"))
        try:
            authorize(self.catalog, principal, need)
        except ObjectNotFound:
            raise _missing_pipe(pipe.name) from None
        except PermissionDenied as exc:
            # The caller sees the pipe (it holds a privilege on it), so what it lacks is no secret.
            why = exc.message.removeprefix("SQL access control error:\n").replace("\n", " ")
            raise RestError(
                404, Code.PIPE_DOES_NOT_EXIST, f"{_missing_pipe(pipe.name).message} {why}"
            ) from None

    def _default_pipe(self, principal: Principal, named: Name, write: bool) -> Pipe | None:
        """The table's default pipe, created the first time a channel names it."""
        table_name = Name(named.database, named.schema, named.name[: -len(DEFAULT_PIPE_SUFFIX)])
        table = self.catalog.find(Table, str(table_name))
        if table is None:
            return None
        spec = CopySpec(
            table=table.name,
            stage="",
            file_format=FileFormat(type="JSON"),
            on_error="CONTINUE",
            sql=f"COPY INTO {table.name} FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')) "
            "MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE",
        )
        pipe = Pipe(
            name=str(named),
            copy_spec=spec,
            table_id=table.id,
            stage_url="",
            source="streaming",
            default_streaming=True,
            owner=table.owner,
            created_ms=now_ms(),
        )
        # Check before creating, so a caller without INSERT on the table creates nothing.
        self._authorize(principal, pipe, write)
        return self.catalog.put_new(pipe)

    @staticmethod
    def ref(pipe: Pipe) -> PipeRef:
        """How answers name the pipe."""
        database, schema, name = split_parts(pipe.name)
        return PipeRef(pipe.id, database, schema, name, pipe.created_ms)

    # -------------------------------------------------------------------------------- channels

    def table_columns(self, pipe: Pipe) -> list[dict[str, Any]]:
        """The target table's columns, for the client's validation (ON_ERROR ABORT / SKIP_BATCH)."""
        table = self.catalog.find(Table, pipe.copy_spec.table)
        if table is None or table.id != pipe.table_id:
            raise RestError(
                409,
                Code.CHANNEL_MUST_BE_REOPENED,
                f"Table '{pipe.copy_spec.table}' of pipe '{pipe.name}' was dropped or replaced.",
            )
        return [{"name": c.name, "type": c.sql_type, "nullable": c.nullable} for c in table.columns]

    def open(self, pipe: Pipe, channel: str, body: dict[str, Any], principal: Principal) -> dict[str, Any]:
        """Create or reopen a channel (fencing the old writer); a new one counts for ``principal``."""
        _named(channel, "opened")
        token = body.get(wire.OFFSET_TOKEN)
        fail = body.get(wire.FAIL_ON_UNCOMMITTED_ROWS, False)
        if token is not None and not isinstance(token, str):
            raise _bad(f"{wire.OFFSET_TOKEN} must be a string or null.")
        token = token or None  # "" is no token, as on an append: the committed token stays
        if not isinstance(fail, bool):
            raise _bad(f"{wire.FAIL_ON_UNCOMMITTED_ROWS} must be true or false.")
        columns = self.table_columns(pipe)
        try:
            opened = self.channels.open(
                self.ref(pipe), channel, now_ms(), token, fail, _writer(pipe, principal)
            )
        except ChannelError as exc:
            raise streaming_error(exc) from None
        log.info(
            "channel opened (client sequencer %d)", opened.token.client_sequencer, extra=_where(pipe, channel)
        )
        return {
            wire.NEXT_CONTINUATION_TOKEN: opened.token.encode(),
            wire.CHANNEL_STATUS: opened.status.to_json(),
            wire.TABLE_COLUMNS: columns,
        }

    def append(
        self,
        pipe: Pipe,
        channel: str,
        params: dict[str, str],
        body: bytes,
        encoding: str | None,
        principal: Principal,
    ) -> dict[str, Any]:
        """Store one append durably; the next continuation token."""
        if channel == wire.ELASTIC:
            return self.append_elastic(pipe, params, body, encoding, principal)
        self._throttle(pipe, channel, principal)
        raw = params.get(wire.CONTINUATION_TOKEN)
        if not raw:
            raise _bad(
                f"{wire.CONTINUATION_TOKEN} is required: the next_continuation_token of the last answer."
            )
        try:
            token = ContinuationToken.decode(raw)
        except ValueError:
            raise _bad(f"{wire.CONTINUATION_TOKEN} is not one this server issued.") from None
        _check_size(body)
        writer = _writer(pipe, principal)
        try:
            # Checked before the body is inflated: a holder with no room refuses it at once, one with
            # little stops inflating and parsing it there (a 3 KB bomb of 32 MB took 1.5 s of CPU).
            room = self.channels.room(self.ref(pipe), channel, token, writer, now_ms())
            batch = _rows(body, encoding, room)
            nxt = self.channels.append(
                self.ref(pipe),
                channel,
                token,
                params.get(wire.REQUEST_ID, ""),
                batch.data,
                batch.count,
                # The SDK sends a token not given as "": no token (the store reads it so too).
                params.get(wire.START_OFFSET_TOKEN) or None,
                params.get(wire.END_OFFSET_TOKEN) or None,
                now_ms(),
                writer,
            )
        except ChannelError as exc:
            raise streaming_error(exc) from None
        self.appends.appended(pipe.name, channel, batch.count)
        return {wire.NEXT_CONTINUATION_TOKEN: nxt.encode()}

    def append_elastic(
        self, pipe: Pipe, params: dict[str, str], body: bytes, encoding: str | None, principal: Principal
    ) -> dict[str, Any]:
        """Store one append to the pipe's elastic channel: no tokens, at least once; a retry under the
        same ``requestId`` is answered, not stored again (floe.channels)."""
        self._throttle(pipe, wire.ELASTIC, principal)
        if params.get(wire.START_OFFSET_TOKEN) or params.get(wire.END_OFFSET_TOKEN):
            raise _bad(
                f"The {wire.ELASTIC} channel takes no offset tokens: its rows load at least once, in no "
                "order. Append to a named channel (PUT .../channels/<name>) to commit offset tokens."
            )
        _check_size(body)
        # Without a requestId no retry can be told from a new append: each is stored.
        request_id = params.get(wire.REQUEST_ID) or secrets.token_hex(16)
        ref, writer = self.ref(pipe), _writer(pipe, principal)
        try:
            room = self.channels.elastic_room(ref, principal.user, request_id, writer, now_ms())
            batch = _rows(body, encoding, room)
            stored = self.channels.append_elastic(
                ref, principal.user, request_id, batch.data, batch.count, now_ms(), writer
            )
        except ChannelError as exc:
            raise streaming_error(exc) from None
        if stored:
            self.appends.appended(pipe.name, wire.ELASTIC, batch.count)
        # The SDK requires a continuation token in the answer, and sends none back.
        return {wire.NEXT_CONTINUATION_TOKEN: ELASTIC_CONTINUATION_TOKEN}

    def _throttle(self, pipe: Pipe, channel: str, principal: Principal) -> None:
        """429 past the channel's or the user's append rate (the elastic channel, which many producers
        share, is bounded by its users' rates only)."""
        wait = None if channel == wire.ELASTIC else self.rates.retry_after(f"{pipe.id}/{channel}")
        if wait is not None:
            raise Throttled(f"Channel '{channel}' is over its append rate; retry in {wait:.2f} s.", wait)
        wait = self.user_rates.retry_after(principal.user)
        if wait is not None:
            rate = self.settings.streaming.appends_per_s_per_user
            raise Throttled(
                f"User '{principal.user}' is over its append rate over all its channels ({rate:g} per "
                f"second, FLOE_STREAMING__APPENDS_PER_S_PER_USER); retry in {wait:.2f} s.",
                wait,
            )

    def drop(self, pipe: Pipe, channel: str, params: dict[str, str]) -> dict[str, Any]:
        """Forget a channel and its offsets; its committed offset token then (the SDK logs it)."""
        _named(channel, "dropped")
        fail = params.get(wire.FAIL_ON_UNCOMMITTED_ROWS, "false").lower() == "true"
        try:
            dropped = self.channels.drop(self.ref(pipe), channel, fail)
        except ChannelError as exc:
            raise streaming_error(exc) from None
        if not dropped:
            raise RestError(
                404, Code.CHANNEL_DOES_NOT_EXIST, f"Channel '{channel}' does not exist or not authorized."
            )
        log.info("channel dropped", extra=_where(pipe, channel))
        return {wire.LAST_COMMITTED_OFFSET_TOKEN: dropped.token}

    def bulk_status(self, pipe: Pipe, body: dict[str, Any]) -> dict[str, Any]:
        """The status of each named channel that exists."""
        names = body.get(wire.CHANNEL_NAMES)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _bad(f'The body must be {{"{wire.CHANNEL_NAMES}": ["channel", ...]}}.')
        if len(names) > 10_000:
            raise _bad("At most 10,000 channel names per request.")
        statuses = self.channels.statuses(self.ref(pipe), list(dict.fromkeys(names)))
        return {wire.CHANNEL_STATUSES: {n: s.to_json() for n, s in statuses.items()}}


ELASTIC_CONTINUATION_TOKEN = ContinuationToken(ELASTIC_INCARNATION, 1, 0).encode()
"""What an elastic append answers as its next continuation token (the SDK needs one, and uses none)."""


def _named(channel: str, done: str) -> None:
    """Refuse to open or drop the elastic channel, as the SDK does: every pipe has it, always."""
    if channel == wire.ELASTIC:
        raise _bad(
            f"'{wire.ELASTIC}' is every pipe's elastic channel: it is not {done}; append to it without "
            "tokens (POST .../channels/ELASTIC/rows), or pick another name for a named channel."
        )


def _check_size(body: bytes) -> None:
    if len(body) > wire.MAX_BODY_BYTES:
        raise RestError(
            413,
            Code.PAYLOAD_TOO_LARGE,
            f"The body is {len(body)} bytes; an append may send at most {wire.MAX_BODY_BYTES} bytes "
            "(after Content-Encoding). Split the rows over several appends.",
        )


def _writer(pipe: Pipe, principal: Principal) -> Writer:
    """Who a channel's appends and a new channel count against besides the channel and its pipe."""
    return Writer(pipe.table_id, pipe.copy_spec.table, principal.user)


def _rows(body: bytes, encoding: str | None, room: Room) -> RowBatch:
    """The append's rows, inflated and parsed no further than ``room`` lets them be stored."""
    try:
        return parse_rows(
            decode_body(body, encoding, room.bytes), room.rows if room.rows_full is not None else None
        )
    except TooManyRows:
        assert room.rows_full is not None
        raise ChannelError(room.rows_full.status, room.rows_full.code, room.rows_full.message) from None
    except BodyTooLarge as exc:
        if room.bytes_full is not None and room.bytes < MAX_UNCOMPRESSED_BYTES:
            full = room.bytes_full
            raise ChannelError(full.status, full.code, full.message) from None
        raise RestError(exc.status, exc.code, str(exc)) from None
    except BodyError as exc:
        raise RestError(exc.status, exc.code, str(exc)) from None


def _where(pipe: Pipe, channel: str) -> dict[str, str]:
    return {"pipe": pipe.name, "file": f"channel {channel}"}


def _json_body(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _bad("The request body is not valid JSON.") from None
    if not isinstance(doc, dict):
        raise _bad("The request body must be a JSON object.")
    return doc


def _pinned(catalog: Catalog, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    with catalog.pinned():
        return work()


async def _answer(request: Request, catalog: Catalog, work: Callable[[], dict[str, Any]]) -> JSONResponse:
    """Run ``work`` in a worker thread on one catalog read; its answer, or the error's."""
    try:
        body = await run_in_threadpool(_pinned, catalog, work)
    except Exception as exc:  # noqa: BLE001 -- the HTTP boundary; answer_for logs what is unexpected
        answer = answer_for(exc, request.url.path)
        if isinstance(exc, PendingFull):
            answer = dataclasses.replace(answer, retry_after_s=PENDING_RETRY_AFTER_S)
        return answer.response()
    return JSONResponse(body)


def router(service: StreamingService, authenticator: Authenticator) -> APIRouter:
    """The /v2/streaming channel routes, routed on the raw path (``services.streaming_paths``)."""
    api = APIRouter(tags=["Snowpipe Streaming"])

    def caller(request: Request) -> Principal:
        return caller_of(request, authenticator)

    async def answer(request: Request, work: Callable[[], dict[str, Any]]) -> JSONResponse:
        return await _answer(request, service.catalog, work)

    @api.put(PIPE + CHANNEL)
    async def open_channel(
        request: Request, database: str, schema: str, pipe: str, channel: str
    ) -> JSONResponse:
        """Open (create or reopen) a channel: a new client sequencer and the last committed offset token."""
        body = await request.body()

        def work() -> dict[str, Any]:
            who = caller(request)
            p = service.pipe(who, database, schema, pipe, write=True)
            return service.open(p, channel, _json_body(body), who)

        return await answer(request, work)

    @api.delete(PIPE + CHANNEL)
    async def drop_channel(
        request: Request, database: str, schema: str, pipe: str, channel: str
    ) -> JSONResponse:
        """Drop a channel and its offset token."""

        def work() -> dict[str, Any]:
            p = service.pipe(caller(request), database, schema, pipe, write=True)
            return service.drop(p, channel, dict(request.query_params))

        return await answer(request, work)

    @api.post(PIPE + ":bulk-channel-status")
    async def bulk_channel_status(request: Request, database: str, schema: str, pipe: str) -> JSONResponse:
        """The status of several channels of the pipe (unknown ones are left out)."""
        body = await request.body()

        def work() -> dict[str, Any]:
            p = service.pipe(caller(request), database, schema, pipe, write=False)
            return service.bulk_status(p, _json_body(body))

        return await answer(request, work)

    @api.post(DATA_PIPE + CHANNEL + "/rows")
    async def append_rows(
        request: Request, database: str, schema: str, pipe: str, channel: str
    ) -> JSONResponse:
        """Append NDJSON rows (gzip or zstd Content-Encoding allowed) with the last continuation token."""
        body = await request.body()

        def work() -> dict[str, Any]:
            who = caller(request)
            p = service.pipe(who, database, schema, pipe, write=True)
            encoding = request.headers.get("content-encoding")
            return service.append(p, channel, dict(request.query_params), body, encoding, who)

        return await answer(request, work)

    return api


def _identifier(part: str) -> str:
    """One name part of a route: a double-quoted one as written (``""`` for a quote), a bare one
    upper-cased, as SQL reads identifiers."""
    if len(part) >= 2 and part.startswith('"') and part.endswith('"'):
        return unquote(part)
    return part.upper()
