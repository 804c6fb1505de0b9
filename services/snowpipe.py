"""The Snowpipe REST API: insertFiles, insertReport and loadHistoryScan, as Snowflake documents them.

``insertFiles`` feeds the same dedup-and-enqueue step as the SQS consumer, and answers 200 only
after that step returned (Redis persists it with ``appendfsync always``), so a client that retries
after a lost answer, as the SDK does on 5xx, finds its files skipped rather than loaded twice. The
reports read load history and never write.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import redis
from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from floe.catalog import Catalog, Pipe, now_ms
from floe.catalog.ddl import Defaults, qualify
from floe.catalog.models import has_dot_segment
from floe.errors import AuthenticationFailed, FloeError, ObjectNotFound
from floe.history import FileState, iso_utc, read_states, states_of
from floe.keys import Keys, RedisClient
from floe.records import QueueEntry
from services.access import Need, authorize
from services.answers import RestError, Throttled, answer_for
from services.auth import Authenticator, Identity, Principal, RateLimiter
from services.dedup import Deduper, FileRef

log = logging.getLogger("floe.api.snowpipe")

MAX_FILES = 5000
"""Files one insertFiles call may name."""
MAX_PATH_BYTES = 1024
"""Longest path, in UTF-8 bytes."""
REPORT_LIMIT = 10_000
"""Entries one insertReport or loadHistoryScan answer holds."""
REPORT_WINDOW_MS = 10 * 60 * 1000
"""insertReport covers events of the last ten minutes."""


def _bad_request(message: str) -> RestError:
    return RestError(400, "390400", message)


def parse_insert_files(content_type: str | None, body: bytes) -> list[FileRef]:
    """The files an insertFiles body names; RestError (400 or 415) for anything else."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media not in ("application/json", "text/plain"):
        raise RestError(
            415,
            "390415",
            f"Unsupported Content-Type '{media or 'none'}': send application/json "
            '({"files": [{"path": ...}]}) or text/plain (one path per line).',
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad_request("The request body is not valid UTF-8.") from None
    raw = _listed(text) if media == "text/plain" else _json_files(text)
    if not raw:
        raise _bad_request("The request names no files.")
    if len(raw) > MAX_FILES:
        raise _bad_request(f"The request names {len(raw)} files; at most {MAX_FILES} are allowed per call.")
    return [_file_ref(i, path, size) for i, (path, size) in enumerate(raw)]


def _listed(text: str) -> list[tuple[object, object]]:
    """A text/plain body: one path per line, no sizes."""
    return [(line.strip("\r"), None) for line in text.split("\n") if line.strip()]


def _json_files(text: str) -> list[tuple[object, object]]:
    """A JSON body's (path, size) pairs, unchecked."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise _bad_request('The request body is not valid JSON: expected {"files": [...]}.') from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list):
        raise _bad_request('The request body must be a JSON object with a "files" array.')
    raw: list[tuple[object, object]] = []
    for i, item in enumerate(files):
        if not isinstance(item, dict):
            raise _bad_request(f'files[{i}] must be an object like {{"path": "a.csv", "size": 10}}.')
        raw.append((item.get("path"), item.get("size")))
    return raw


def _file_ref(i: int, path: object, size: object) -> FileRef:
    """The ``i``th named file, checked: a non-empty UTF-8 path within the limit, a size or null."""
    if not isinstance(path, str) or not path.strip():
        raise _bad_request(f"files[{i}].path must be a non-empty string.")
    try:
        n = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise _bad_request(f"files[{i}].path is not valid UTF-8.") from None
    if n > MAX_PATH_BYTES:
        raise _bad_request(f"files[{i}].path is {n} bytes long; the limit is {MAX_PATH_BYTES} UTF-8 bytes.")
    if "\x00" in path:
        raise _bad_request(f"files[{i}].path contains a NUL character.")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise _bad_request(f"files[{i}].size must be a non-negative integer or null.")
    relative = path.lstrip("/")
    if not relative.strip():
        raise _bad_request(f"files[{i}].path names no file: '{path[:40]}'.")
    if has_dot_segment(relative):
        raise _bad_request(
            f"files[{i}].path has a '.' or '..' segment (as written or percent-encoded): name a file "
            "inside the pipe's stage by its path from the stage's location, such as 'dir/file.csv'."
        )
    return FileRef(relative, size)


def _iso(ms: int | None) -> str | None:
    return None if ms is None else iso_utc(ms)


def _parse_time(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        raise _bad_request(f"{name} must be an ISO-8601 timestamp, e.g. 2026-11-22T10:00:00Z.") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)


def file_entry(state: FileState) -> dict[str, Any]:
    """One file of an insertReport or loadHistoryScan answer."""
    return {
        "path": state.path,
        "stageLocation": state.stage_location,
        "fileSize": state.size,
        "timeReceived": _iso(state.received_ms),
        "lastInsertTime": _iso(state.loaded_ms),
        "rowsInserted": state.rows_loaded,
        "rowsParsed": state.rows_parsed,
        "errorsSeen": state.errors_seen,
        "errorLimit": state.error_limit,
        "firstError": state.first_error,
        "firstErrorLineNum": state.first_error_line,
        "firstErrorCharacterPos": state.first_error_character,
        "firstErrorColumnName": state.first_error_column,
        "systemError": state.system_error,
        "complete": state.complete,
        "status": state.status,
    }


@dataclass
class SnowpipeService:
    """The work behind the endpoints, on plain values (the router adapts HTTP to it)."""

    client: RedisClient
    keys: Keys
    catalog: Catalog
    deduper: Deduper
    defaults: Defaults

    def pipe(self, name: str) -> Pipe:
        """The pipe a URL names (db.schema.pipe, quoted parts kept); 404 if there is none."""
        try:
            fqn = str(qualify(name, self.defaults))
        except FloeError:
            fqn = name
        pipe = self.catalog.find(Pipe, fqn)
        if pipe is None:
            raise self.missing(name)
        return pipe

    @staticmethod
    def missing(name: str) -> RestError:
        """The 404 for a pipe that does not exist, or that the caller may not know of."""
        return RestError(
            404, "390404", f"Specified object does not exist or not authorized. Pipe '{name}' not found."
        )

    def insert_files(self, pipe: Pipe, files: list[FileRef], show_skipped: bool) -> dict[str, Any]:
        """Dedup and enqueue; what insertFiles answers (without requestId)."""
        if pipe.source == "streaming":
            raise _bad_request(
                f"Pipe '{pipe.name}' is a streaming pipe: its rows come from channels (/v2/streaming), "
                "not from staged files."
            )
        matched: list[FileRef] = []
        unmatched: list[str] = []
        for f in files:
            rel = pipe.relative_path(pipe.object_key(f.path))
            if rel is not None and pipe.matches(rel):
                matched.append(FileRef(rel, f.size))
            else:
                unmatched.append(f.path)
        flags = self.deduper.enqueue(pipe, matched, source="rest")
        skipped = [f for f, new in zip(matched, flags, strict=True) if not new]
        log.info(
            "insertFiles: %d enqueued, %d already seen, %d unmatched",
            len(matched) - len(skipped),
            len(skipped),
            len(unmatched),
            extra={"pipe": pipe.name},
        )
        out: dict[str, Any] = {"responseCode": "SUCCESS"}
        if pipe.copy_spec.pattern is not None or unmatched:
            out["unmatchedPatternFiles"] = [{"path": p} for p in unmatched]
        if show_skipped:
            out["skippedFiles"] = [
                {"path": f.path, "reason": "already loaded or queued by this pipe"} for f in skipped
            ]
        return out

    def _states(self, pipe: Pipe, paths: list[str]) -> list[FileState]:
        return states_of(self.client, self.keys, pipe.id, paths)

    def insert_report(self, pipe: Pipe, begin_mark: str | None, recent_seconds: int | None) -> dict[str, Any]:
        """Load events of the last ten minutes after ``begin_mark``, plus files still in flight."""
        now = now_ms()
        since = now - REPORT_WINDOW_MS
        if recent_seconds is not None:
            since = max(since, now - recent_seconds * 1000)
        start = f"({begin_mark}" if begin_mark else f"{since}-0"
        try:
            events = cast(
                list[tuple[bytes, dict[bytes, bytes]]],
                self.client.xrange(self.keys.events(pipe.id), min=start, max="+", count=REPORT_LIMIT + 1),
            )
        except redis.ResponseError:
            raise _bad_request("beginMark is not a mark this endpoint returned.") from None
        complete = len(events) <= REPORT_LIMIT
        events = events[:REPORT_LIMIT]
        mark = events[-1][0].decode() if events else (begin_mark or f"{now}-0")
        paths = [f[b"path"].decode() for sid, f in events if int(sid.split(b"-")[0]) >= since]
        reported = list(dict.fromkeys(paths))
        files = [file_entry(s) for s in self._states(pipe, reported)]
        pending = cast(
            list[tuple[bytes, dict[bytes, bytes]]],
            self.client.xrange(self.keys.queue(pipe.id), count=max(0, REPORT_LIMIT - len(files))),
        )
        # A file REFRESH sent again after a recent failure is both an event and queued: report it
        # once, as it is now.
        queued = [QueueEntry.from_stream(sid, f).path for sid, f in pending]
        in_flight = self._states(pipe, [path for path in queued if path not in set(reported)])
        files += [file_entry(s) for s in in_flight if not s.complete]
        return {
            "pipe": pipe.name,
            "completeResult": complete,
            "nextBeginMark": mark,
            "files": files,
            "statistics": {"activeFilesCount": int(self.client.xlen(self.keys.queue(pipe.id)))},
        }

    def load_history_scan(self, pipe: Pipe, start: str | None, end: str | None) -> dict[str, Any]:
        """Files received in [start, end), oldest first, at most REPORT_LIMIT of them."""
        start_ms = _parse_time(start, "startTimeInclusive")
        if start_ms is None:
            raise _bad_request("startTimeInclusive is required (an ISO-8601 timestamp).")
        end_ms = _parse_time(end, "endTimeExclusive") or now_ms()
        states = [s for s in read_states(self.client, self.keys, pipe.id, start_ms) if s.received_ms < end_ms]
        complete = len(states) <= REPORT_LIMIT
        states = states[:REPORT_LIMIT]
        return {
            "pipe": pipe.name,
            "completeResult": "true" if complete else "false",
            "startTimeInclusive": start,
            "endTimeExclusive": end or _iso(end_ms),
            "rangeStartTime": _iso(states[0].received_ms) if states else None,
            "rangeEndTime": _iso(states[-1].received_ms) if states else None,
            "files": [file_entry(s) for s in states],
        }


def caller_of(request: Request, authenticator: Authenticator) -> Principal:
    """The user the API's gate admitted before the body was read (services/api.py, ``Gate``).

    Does catalog reads: call it in a worker thread, inside ``Catalog.pinned`` when the route reads
    more. Fails closed: a route reached without the gate answers 401, never runs as nobody.
    """
    identity = getattr(request.state, "identity", None)
    if not isinstance(identity, Identity):
        raise AuthenticationFailed("The request was not authenticated; send 'Authorization: Bearer <JWT>'.")
    return authenticator.resolve(identity)


def router(service: SnowpipeService, authenticator: Authenticator, limiter: RateLimiter) -> APIRouter:
    """The /v1/data/pipes endpoints; the API's gate has admitted the caller and read the body."""
    api = APIRouter(prefix="/v1/data/pipes", tags=["Snowpipe REST"])

    def caller(request: Request) -> Principal:
        principal = caller_of(request, authenticator)
        wait = limiter.retry_after(principal.user)
        if wait is not None:
            raise Throttled(f"Too many requests from user '{principal.user}'; retry in {wait:.2f} s.", wait)
        return principal

    def pinned(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        with service.catalog.pinned():
            return work()

    async def answer(request: Request, work: Callable[[], dict[str, Any]]) -> JSONResponse:
        try:
            body = await run_in_threadpool(pinned, work)
        except Exception as exc:  # noqa: BLE001 -- the HTTP boundary; answer_for logs what is unexpected
            return answer_for(exc, request.url.path).response()
        request_id = request.query_params.get("requestId")
        return JSONResponse({"requestId": request_id, **body} if request_id is not None else body)

    def privileged(request: Request, name: str, any_of: tuple[str, ...]) -> Pipe:
        principal = caller(request)
        pipe = service.pipe(name)
        try:
            authorize(service.catalog, principal, Need("PIPE", pipe.name, any_of))
        except ObjectNotFound:
            # The caller may not know the pipe (or its database or schema) exists: the same 404 as
            # for a pipe that does not.
            raise service.missing(name) from None
        return pipe

    @api.post("/{pipe_name}/insertFiles")
    async def insert_files(
        request: Request, pipe_name: str, show_skipped: bool = Query(False, alias="showSkippedFiles")
    ) -> JSONResponse:
        """Queue staged files for loading. Body: {"files": [{"path", "size"}]} or text/plain paths."""
        body = await request.body()

        def work() -> dict[str, Any]:
            pipe = privileged(request, pipe_name, ("OPERATE", "OWNERSHIP"))
            files = parse_insert_files(request.headers.get("content-type"), body)
            return service.insert_files(pipe, files, show_skipped)

        return await answer(request, work)

    @api.get("/{pipe_name}/insertReport")
    async def insert_report(
        request: Request,
        pipe_name: str,
        begin_mark: str | None = Query(None, alias="beginMark"),
        recent_seconds: int | None = Query(None, alias="recentSeconds", ge=0),
    ) -> JSONResponse:
        """Load events of the last 10 minutes (at most 10,000), from beginMark on."""

        def work() -> dict[str, Any]:
            pipe = privileged(request, pipe_name, ("MONITOR", "OPERATE", "OWNERSHIP"))
            return service.insert_report(pipe, begin_mark, recent_seconds)

        return await answer(request, work)

    @api.get("/{pipe_name}/loadHistoryScan")
    async def load_history_scan(
        request: Request,
        pipe_name: str,
        start: str | None = Query(None, alias="startTimeInclusive"),
        end: str | None = Query(None, alias="endTimeExclusive"),
    ) -> JSONResponse:
        """Load history of the last 14 days between two ISO-8601 times (at most 10,000 files)."""

        def work() -> dict[str, Any]:
            pipe = privileged(request, pipe_name, ("MONITOR", "OPERATE", "OWNERSHIP"))
            return service.load_history_scan(pipe, start, end)

        return await answer(request, work)

    return api
