"""Files on stages: LIST and REMOVE (statements), and the transfers behind PUT and GET (routes).

Internal stages keep their files in Floe's stages bucket (``stages.bucket``), each sealed under
Floe's master key (``floe.stage_crypto``): the API encrypts an upload as it arrives and decrypts a
download as it leaves, so no client needs S3 credentials, and a user of the bucket reads nothing
without Floe's key. External stages are listed and cleaned with Floe's credentials, within their
storage integration, as every load reads them.

Who may do what is Snowflake's rule, checked through ``services.access.authorize``:

- a named internal stage: READ to LIST and GET, WRITE to PUT and REMOVE (OWNERSHIP holds both);
- a table's stage (``@%t``): OWNERSHIP of the table, for everything (it has no privileges of its own);
- a user's stage (``@~``): its user, for everything; it has no privileges to grant, and no other
  user reaches it, whatever their roles (``floe.catalog.user_stages``);
- an external stage: USAGE on it, and USAGE on its storage integration, which must still admit its
  URL, to LIST and REMOVE; PUT and GET refuse it (091003), as Snowflake does.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import anyio.to_thread
from botocore.exceptions import ClientError
from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from floe.aws import AWS_ERRORS
from floe.aws import client as aws_client
from floe.catalog import Catalog, Stage, Table, User, split_s3_url
from floe.catalog.ddl import CreatePipe
from floe.catalog.internal import table_stage_name, table_stage_url
from floe.catalog.models import has_dot_segment
from floe.catalog.names import Defaults, Name
from floe.catalog.stage_commands import (
    ListFiles,
    RemoveFiles,
    StageLocation,
    parse_location,
    stage_path,
)
from floe.catalog.user_stages import user_stage_url
from floe.errors import CompilationError, ObjectNotFound, SqlError
from floe.patterns import compile_pattern
from floe.settings import Settings
from floe.stage_crypto import SEGMENT, StageCipher, plain_size, stage_cipher
from services.access import Need, authorize, find
from services.answers import RestError, Throttled, answer_for
from services.auth import Principal, RateLimiter
from services.query import Result

log = logging.getLogger("floe.stages")

LIST_COLUMNS = ["name", "size", "md5", "last_modified"]
"""LIST's columns, as Snowflake names them."""
REMOVE_COLUMNS = ["name", "result"]
"""REMOVE's columns, as Snowflake names them."""
DELETE_BATCH = 1000
"""Keys one S3 DeleteObjects call takes."""
ROUTES = "/api/v1/stages"
"""Prefix of the transfer routes."""
UPLOAD_PATH = f"{ROUTES}/files"
"""PUT here streams a file into a stage; the gate lets its body through unread (``services.api``)."""

DROP_ERRORS: tuple[type[Exception], ...] = (SqlError, *AWS_ERRORS)
"""What deleting a dropped stage's files may raise; logged, not raised (``drop_files``)."""

Action = Literal["read", "write"]
Check = Callable[[Principal, str, str | None], None]
"""``SqlExecutor.check_location``: may the principal read this URL through this integration?"""


@dataclass(frozen=True)
class Place:
    """A stage location the principal was allowed to act on."""

    bucket: str
    root: str
    """The stage's key prefix ('' or ending in '/')."""
    path: str
    """The location's path within the stage, as written (a key prefix)."""
    internal: bool
    shown: str
    """What LIST prints before a file's path in the stage: 'stage/' for a named internal stage, ''
    for a table's stage, 's3://bucket/prefix/' for an external stage."""
    label: str
    """The stage as messages name it."""

    @property
    def prefix(self) -> str:
        """The key prefix the location covers."""
        return self.root + self.path

    def name_of(self, key: str) -> str:
        """A file's name as LIST and REMOVE show it."""
        return self.shown + key[len(self.root) :]


@dataclass(frozen=True)
class StagedFile:
    """One file on a stage, as listed."""

    key: str
    name: str
    """As LIST shows it."""
    path: str
    """Its path in the stage (what GET downloads by)."""
    size: int
    """Its size as PUT (decrypted) for an internal stage, as stored for an external one."""
    md5: str
    last_modified: dt.datetime


def http_date(when: dt.datetime) -> str:
    """LIST's last_modified, as Snowflake prints it: 'Tue, 05 Mar 2024 10:00:00 GMT'."""
    return email.utils.format_datetime(when.astimezone(dt.UTC), usegmt=True)


def file_name_error(name: str) -> str | None:
    """Why ``name`` cannot be a staged file's name (a PUT's target, a GET's path), or None. A dot
    segment counts percent-encoded too (``has_dot_segment``): '%2e%2e' was stored as a file's name."""
    if not name or "\x00" in name:
        return "a file name must be non-empty and hold no NUL character"
    if len(name.encode()) > 1024:
        return "a file's path may be at most 1,024 UTF-8 bytes"
    if "" in name.split("/") or has_dot_segment(name):
        return "a file's path may not hold empty, '.' or '..' segments (as written or percent-encoded)"
    return None


class StageFiles:
    """LIST, REMOVE and the transfers, for one API process."""

    def __init__(self, settings: Settings, catalog: Catalog, defaults: Defaults, check: Check) -> None:
        self.settings = settings
        self.catalog = catalog
        self.defaults = defaults
        self._check = check
        self._s3: Any = None
        self._lock = threading.Lock()
        self._cipher: StageCipher | None = None
        self.transfers = anyio.CapacityLimiter(settings.stages.max_concurrent_transfers)

    def handlers(self) -> dict[type, Callable[[Any, Principal], Result]]:
        """Statement type -> its method (``SqlExecutor.handlers`` takes these in)."""
        return {
            ListFiles: self.list_statement,
            RemoveFiles: self.remove_statement,
        }

    def s3(self) -> Any:
        """Floe's S3 client, with the stages bucket made on first use."""
        with self._lock:
            if self._s3 is None:
                s3 = aws_client(self.settings.aws, "s3")
                bucket, region = self.settings.stages.bucket, self.settings.aws.region
                extra = (
                    {}
                    if region == "us-east-1"
                    else {"CreateBucketConfiguration": {"LocationConstraint": region}}
                )
                # Made once per process; in us-east-1 an existing bucket of ours answers 200 anyway.
                with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
                    s3.create_bucket(Bucket=bucket, **extra)
                self._s3 = s3
            return self._s3

    def cipher(self) -> StageCipher:
        """The cipher of the stage files, under the master key from settings."""
        if self._cipher is None:
            enc = self.settings.encryption
            self._cipher = stage_cipher(enc.master_key_id, enc.resolve_master_key())
        return self._cipher

    # ------------------------------------------------------------------ who may act where

    def place(self, principal: Principal, location: StageLocation, action: Action) -> Place:
        """Where ``location`` is, once ``principal`` may ``action`` (read: LIST, GET; write: PUT,
        REMOVE) there; ObjectNotFound or PermissionDenied otherwise."""
        # parse_location refused it already; a location built otherwise is checked here too.
        stage_path(location.path, f"stage location '{location}'")
        if location.user:
            # The caller's own stage: nothing to authorize, as nothing can be granted on it and
            # nobody else's is ever named (``@~`` means the caller's).
            bucket, root = split_s3_url(user_stage_url(self.settings, self.catalog.get(User, principal.user)))
            return Place(bucket, root, location.path, True, "", "@~")
        name = str(location.name)
        if location.table:
            # A table's stage has no privileges of its own: its table's owner acts on it.
            authorize(self.catalog, principal, Need("TABLE", name, ("OWNERSHIP",)))
            table = self.catalog.get(Table, name)
            bucket, root = split_s3_url(table_stage_url(self.settings, table))
            return Place(bucket, root, location.path, True, "", f"@%{location.name.name}")
        found = find(self.catalog, "STAGE", name)
        if not isinstance(found, Stage):
            raise ObjectNotFound("stage", name)
        bucket, root = split_s3_url(found.url)
        label = f"@{location.name.name}"
        if found.internal:
            authorize(
                self.catalog, principal, Need("STAGE", name, ("READ",) if action == "read" else ("WRITE",))
            )
            return Place(bucket, root, location.path, True, location.name.name.lower() + "/", label)
        authorize(self.catalog, principal, Need("STAGE", name, ("USAGE",)))
        # Floe's credentials list or delete only what the stage's integration still admits.
        self._check(principal, found.url, found.storage_integration)
        return Place(bucket, root, location.path, False, f"s3://{bucket}/{root}", label)

    def source_need(self, stage: Name, table_stage: bool) -> Need:
        """What creating a pipe that reads ``stage`` needs on it: OWNERSHIP of the table for a table
        stage, READ on an internal stage, USAGE on an external one (Snowflake's CREATE PIPE)."""
        if table_stage:
            return Need("TABLE", str(stage), ("OWNERSHIP",))
        found = find(self.catalog, "STAGE", str(stage))
        internal = isinstance(found, Stage) and found.internal
        return Need("STAGE", str(stage), ("READ",) if internal else ("USAGE",))

    def pipe_source(self, s: CreatePipe) -> Stage:
        """The stage a new pipe reads (``source_need`` was authorized): the named stage, or a table
        stage as a Stage named ``DB.S.%T``. An internal stage's pipe loads what ``insertFiles`` (or
        ALTER PIPE ... REFRESH) names: AUTO_INGEST is refused, as Snowflake refuses it."""
        assert s.stage is not None
        if s.table_stage:
            table = self.catalog.get(Table, str(s.stage))
            if s.select is not None:
                # Snowflake's documented limit of table stages.
                raise CompilationError(
                    "Table stages don't support transforming data while loading it: load "
                    f"@%{s.stage.name} with a plain COPY, or stage the files on a named stage"
                )
            stage = Stage(
                name=table_stage_name(table.name),
                url=table_stage_url(self.settings, table),
                internal=True,
                owner=table.owner,
            )
        else:
            stage = self.catalog.get(Stage, str(s.stage))
        if s.auto_ingest and stage.internal:
            raise CompilationError(
                f"AUTO_INGEST = TRUE is not supported for internal stages (stage '{s.stage.name}'): an "
                "internal stage sends no event notifications. Create the pipe with AUTO_INGEST = FALSE "
                "and load its files with the Snowpipe REST API (insertFiles) or ALTER PIPE ... REFRESH."
            )
        return stage

    def dropped(self, obj: object) -> None:
        """Delete the files of an internal stage, of a table's stage or of a user's stage, whose
        stage, table or user was just dropped or replaced: Snowflake drops a stage's files with it."""
        if isinstance(obj, Stage) and obj.internal:
            self.drop_files(obj.url)
        elif isinstance(obj, Table):
            self.drop_files(table_stage_url(self.settings, obj))
        elif isinstance(obj, User):
            self.drop_files(user_stage_url(self.settings, obj))

    def internal_place(self, principal: Principal, location: StageLocation, action: Action) -> Place:
        """``place``, for PUT and GET: an external stage is refused as Snowflake refuses it."""
        place = self.place(principal, location, action)
        if not place.internal:
            raise SqlError(
                f"Failure using stage area. Cause: [{location.name.name} GET and PUT commands are not "
                "supported with external stage]",
                code="091003",
                sql_state="22000",
            )
        return place

    # --------------------------------------------------------------------------- listing

    def files(self, place: Place, pattern: str | None) -> list[StagedFile]:
        """The files under ``place`` whose LIST name passes ``pattern`` (RE2, whole name), in key
        order; at most ``stages.max_list_files`` of them."""
        matches = compile_pattern(pattern) if pattern is not None else None
        limit = self.settings.stages.max_list_files
        out: list[StagedFile] = []
        for obj in self._objects(place):
            key = str(obj["Key"])
            name = place.name_of(key)
            if key.endswith("/") or (matches is not None and not matches(name)):
                continue
            if len(out) >= limit:
                raise SqlError(
                    f"{place.label}/{place.path} holds more than {limit} files (stages.max_list_files): "
                    "name a narrower path, or a PATTERN.",
                    code="091003",
                    sql_state="22000",
                )
            size = int(obj["Size"])
            out.append(
                StagedFile(
                    key=key,
                    name=name,
                    path=key[len(place.root) :],
                    size=plain_size(size) if place.internal else size,
                    md5=str(obj.get("ETag", "")).strip('"'),
                    last_modified=obj["LastModified"],
                )
            )
        return out

    def _objects(self, place: Place) -> Iterator[dict[str, Any]]:
        s3 = self.s3()
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(
                Bucket=place.bucket, Prefix=place.prefix
            ):
                yield from page.get("Contents", ())
        except s3.exceptions.NoSuchBucket:
            return  # an external stage whose bucket is gone holds no files
        except AWS_ERRORS as exc:
            raise _stage_failure(place, exc) from exc

    def list_statement(self, s: ListFiles, principal: Principal) -> Result:
        """LIST: name, size, md5, last_modified of each file."""
        place = self.place(principal, s.location, "read")
        rows = [[f.name, f.size, f.md5, http_date(f.last_modified)] for f in self.files(place, s.pattern)]
        return Result(list(LIST_COLUMNS), rows)

    def remove_statement(self, s: RemoveFiles, principal: Principal) -> Result:
        """REMOVE: delete the files LIST would show; one row per file, 'removed'."""
        place = self.place(principal, s.location, "write")
        listed = self.files(place, s.pattern)
        self._delete(place.bucket, [f.key for f in listed], place)
        return Result(list(REMOVE_COLUMNS), [[f.name, "removed"] for f in listed])

    def _delete(self, bucket: str, keys: list[str], place: Place | None = None) -> None:
        s3 = self.s3()
        for start in range(0, len(keys), DELETE_BATCH):
            batch = keys[start : start + DELETE_BATCH]
            try:
                answer = s3.delete_objects(
                    Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
            except AWS_ERRORS as exc:
                if place is None:
                    raise
                raise _stage_failure(place, exc) from exc
            if answer.get("Errors"):
                first = answer["Errors"][0]
                raise SqlError(
                    f"Failure removing '{first.get('Key')}': {first.get('Code')} {first.get('Message')}",
                    code="091003",
                    sql_state="22000",
                )

    def drop_files(self, url: str) -> None:
        """Delete every file of an internal stage (a dropped or replaced stage, or table). Best
        effort: the statement has already changed the catalog, and a file left behind is sealed
        under a name no stage will have again."""
        bucket, root = split_s3_url(url)
        if bucket != self.settings.stages.bucket or not root:
            return
        try:
            keys = [str(o["Key"]) for o in self._objects(Place(bucket, root, "", True, "", url))]
            self._delete(bucket, keys)
        except DROP_ERRORS as exc:
            log.warning("could not delete the files of the dropped stage %s: %s", url, exc)

    # ------------------------------------------------------------------------ transfers

    def target_key(self, place: Place, name: str) -> str:
        """The key a PUT of file ``name`` into ``place`` writes: the path as a folder, then the name."""
        if "/" in name:
            raise RestError(
                400, "000904", f"invalid file name '{name[:80]}': a PUT names one file, without '/'"
            )
        if (why := file_name_error(name)) is not None:
            raise RestError(400, "000904", f"invalid file name '{name[:80]}': {why}")
        folder = place.path if not place.path or place.path.endswith("/") else place.path + "/"
        key = place.root + folder + name
        if (why := file_name_error(key[len(place.root) :])) is not None:
            raise RestError(400, "000904", f"invalid stage path '{place.path[:80]}': {why}")
        return key

    def exists(self, bucket: str, key: str) -> bool:
        """Whether an object is there."""
        s3 = self.s3()
        try:
            s3.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    async def upload(self, place: Place, key: str, chunks: AsyncIterator[bytes]) -> dict[str, Any]:
        """Seal and store one file as its bytes arrive: parts of ``stages.part_bytes`` go to S3 as
        they fill (one put for a small file), so the API holds about one part. Past
        ``stages.max_file_bytes`` the upload fails with 413 and nothing is stored."""
        limits = self.settings.stages
        enc = self.cipher().encryptor(key)
        s3 = self.s3()
        pending = bytearray(enc.header)
        parts: list[dict[str, Any]] = []
        upload_id: str | None = None

        async def send_part() -> None:
            nonlocal upload_id
            if upload_id is None:
                started = await anyio.to_thread.run_sync(
                    lambda: s3.create_multipart_upload(Bucket=place.bucket, Key=key)
                )
                upload_id = str(started["UploadId"])
            number, body = len(parts) + 1, bytes(pending)
            pending.clear()
            answer = await anyio.to_thread.run_sync(
                lambda: s3.upload_part(
                    Bucket=place.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
                )
            )
            parts.append({"PartNumber": number, "ETag": answer["ETag"]})

        received = 0
        incoming = bytearray()
        try:
            async for chunk in chunks:
                received += len(chunk)
                if received > limits.max_file_bytes:
                    raise RestError(
                        413,
                        "390413",
                        f"The file is larger than {limits.max_file_bytes} bytes (stages.max_file_bytes); "
                        "split it, or compress it before PUT.",
                    )
                incoming += chunk
                if len(incoming) < SEGMENT:
                    continue  # a thread hop per segment, not per network read
                data = bytes(incoming)
                incoming.clear()
                pending += await anyio.to_thread.run_sync(enc.update, data)
                if len(pending) >= limits.part_bytes:
                    await send_part()
            pending += enc.update(bytes(incoming)) + enc.finish()
            if upload_id is None:
                body = bytes(pending)
                answer = await anyio.to_thread.run_sync(
                    lambda: s3.put_object(Bucket=place.bucket, Key=key, Body=body)
                )
                etag = str(answer.get("ETag", ""))
            else:
                await send_part()
                done = await anyio.to_thread.run_sync(
                    lambda: s3.complete_multipart_upload(
                        Bucket=place.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
                    )
                )
                etag = str(done.get("ETag", ""))
        except BaseException:
            if upload_id is not None:
                uid = upload_id
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(
                        lambda: s3.abort_multipart_upload(Bucket=place.bucket, Key=key, UploadId=uid)
                    )
            raise
        return {"size": enc.plain_bytes, "md5": etag.strip('"')}

    def opened(self, place: Place, key: str) -> tuple[Any, int]:
        """A stored file's decrypting reader and its size as PUT; RestError 404 if it is not there."""
        s3 = self.s3()
        try:
            answer = s3.get_object(Bucket=place.bucket, Key=key)
        except s3.exceptions.NoSuchKey:
            raise RestError(
                404, "000904", f"File '{key[len(place.root) :]}' does not exist on {place.label}."
            ) from None
        return self.cipher().reader(answer["Body"], key), plain_size(int(answer["ContentLength"]))


def _stage_failure(place: Place, exc: BaseException) -> SqlError:
    """An S3 failure on a stage, as Snowflake words it (091003)."""
    text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    return SqlError(
        f"Failure using stage area. Cause: [{place.label}: {text}]", code="091003", sql_state="22000"
    )


class Download(Response):
    """A stored file, decrypted a segment at a time as the client takes it. Each segment waits at
    most ``idle_s`` for the client; a file that fails to decrypt midway ends the connection before
    its Content-Length, so the client never takes a cut file for a whole one."""

    media_type = "application/octet-stream"

    def __init__(self, reader: Any, size: int, idle_s: float, limiter: anyio.CapacityLimiter) -> None:
        super().__init__()
        self._reader = reader
        self._size = size
        self._idle_s = idle_s
        self._limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", self.media_type.encode()),
            (b"content-length", str(self._size).encode()),
            (b"cache-control", b"no-store"),
        ]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            while True:
                piece = await anyio.to_thread.run_sync(self._reader.read, SEGMENT, limiter=self._limiter)
                with anyio.fail_after(self._idle_s):
                    await send({"type": "http.response.body", "body": piece, "more_body": bool(piece)})
                if not piece:
                    return
        finally:
            await anyio.to_thread.run_sync(self._reader.close)


async def _timed(request: Request, idle_s: float) -> AsyncIterator[bytes]:
    """A request body's chunks, each arriving within ``idle_s`` (else 408)."""
    stream = request.stream().__aiter__()
    while True:
        try:
            with anyio.fail_after(idle_s):
                chunk = await stream.__anext__()
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise RestError(
                408, "390408", f"The upload sent nothing for {idle_s:g} s (stages.idle_timeout_s)."
            ) from None
        if chunk:
            yield chunk


def router(
    files: StageFiles,
    caller_of: Callable[[Request], Principal],
    use_role: Callable[[Principal, str], Principal],
    limiter: RateLimiter,
) -> APIRouter:
    """The transfer routes behind PUT and GET: upload, download, and the listing GET works from.

    Each takes ``location`` (``@stage[/path]`` or ``@%table[/path]``, as PUT and GET write it) and
    an optional ``role``; errors answer as the SQL endpoint's do."""
    api = APIRouter(prefix=ROUTES, tags=["Internal stages"])

    def principal(request: Request, role: str | None) -> Principal:
        who = caller_of(request)
        wait = limiter.retry_after(who.user)
        if wait is not None:
            raise Throttled(f"Too many requests from user '{who.user}'; retry in {wait:.2f} s.", wait)
        return use_role(who, role) if role is not None else who

    def placed(request: Request, location: str, role: str | None, action: Action) -> Place:
        with files.catalog.pinned():
            who = principal(request, role)
            return files.internal_place(who, parse_location(location, files.defaults, user=True), action)

    @api.put("/files")
    async def upload(
        request: Request,
        location: str = Query(description="@stage[/path] or @%table[/path]: where the file goes"),
        name: str = Query(description="The file's name on the stage (its path is the location's)"),
        overwrite: bool = Query(default=False, description="Replace a file of the same name"),
        role: str | None = Query(default=None, description="The role to act as"),
    ) -> Response:
        """Store the request body as one file on an internal stage (WRITE on it, or OWNERSHIP of the
        table of a table stage), encrypted as it arrives. A file of that name already there is
        kept unless ``overwrite``: the answer then says SKIPPED."""
        try:
            place = await run_in_threadpool(placed, request, location, role, "write")
            key = files.target_key(place, name)
            async with files.transfers:
                if not overwrite and await anyio.to_thread.run_sync(files.exists, place.bucket, key):
                    return JSONResponse({"success": True, "status": "SKIPPED", "target": name, "size": None})
                stored = await files.upload(place, key, _timed(request, files.settings.stages.idle_timeout_s))
        except Exception as exc:  # noqa: BLE001 -- the HTTP boundary; answer_for logs what is unexpected
            return answer_for(exc, request.url.path).response()
        log.info("PUT %s/%s: %d bytes", place.label, key[len(place.root) :], stored["size"])
        return JSONResponse({"success": True, "status": "UPLOADED", "target": name, **stored})

    @api.get("/files")
    async def download(
        request: Request,
        location: str = Query(description="@stage or @%table: the stage the file is on"),
        path: str = Query(description="The file's path in the stage, as /list gives it"),
        role: str | None = Query(default=None, description="The role to act as"),
    ) -> Response:
        """One file of an internal stage, decrypted (READ on it, or OWNERSHIP of the table)."""
        try:
            if (why := file_name_error(path)) is not None:
                raise RestError(400, "000904", f"invalid path '{path[:80]}': {why}")
            place = await run_in_threadpool(placed, request, location, role, "read")
            reader, size = await run_in_threadpool(files.opened, place, place.root + path)
        except Exception as exc:  # noqa: BLE001 -- the HTTP boundary
            return answer_for(exc, request.url.path).response()
        return Download(reader, size, files.settings.stages.idle_timeout_s, files.transfers)

    @api.get("/list")
    async def listing(
        request: Request,
        location: str = Query(description="@stage[/path] or @%table[/path]"),
        pattern: str | None = Query(default=None, description="RE2 regular expression on LIST's name"),
        role: str | None = Query(default=None, description="The role to act as"),
    ) -> Response:
        """The files GET would download: LIST's columns plus each file's path in the stage."""

        def work() -> list[dict[str, Any]]:
            place = placed(request, location, role, "read")
            return [
                {
                    "name": f.name,
                    "path": f.path,
                    "size": f.size,
                    "md5": f.md5,
                    "last_modified": http_date(f.last_modified),
                }
                for f in files.files(place, pattern)
            ]

        try:
            listed = await run_in_threadpool(work)
        except Exception as exc:  # noqa: BLE001 -- the HTTP boundary
            return answer_for(exc, request.url.path).response()
        return JSONResponse({"success": True, "files": listed})

    return api
