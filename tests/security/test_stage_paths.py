"""A path a client or a notification names stays inside the pipe's stage (issue 31, item 2).

insertFiles stripped a leading ``/`` only: with OPERATE on a pipe whose stage is
``s3://b/allowed/``, ``../secret/x.csv`` and ``a/../../secret/x.csv`` answered 200, and
``s3://b/secret/x.csv`` loaded into the table. A dot segment, as written or percent-encoded, now
names no file of a stage: insertFiles refuses it with 400, and every mapping of an object key to a
pipe (S3 notifications, REFRESH, insertFiles, the queue a replaced pipe hands over) finds it
outside the pipe's location (decision 108).

So does every other path a client names (decision 115): the location of LIST, REMOVE, PUT and GET
(named, table and user stages), a PUT's file name and a GET's path, a COPY's FROM, INFER_SCHEMA's
LOCATION and REFRESH's PREFIX. And the job checks the key it reads, as pyarrow's S3 filesystem (the
AWS SDK) resolves dot segments where boto3 sends them as written: a path that got past the API
fails its file alone, and so does a key in a blocked location of the pipe's integration.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bench.harness import unique
from floe.catalog.ddl import parse
from floe.catalog.models import CopySpec, FileFormat, Pipe, StorageIntegration, has_dot_segment
from floe.catalog.names import Defaults
from floe.catalog.stage_commands import parse_file_command, parse_location
from floe.errors import CompilationError, FloeError
from floe.records import LoadTask
from floe.settings import Settings
from front.client import download_file, upload_file
from pipeline import loader
from pipeline.loader import BatchContext, process_partition, stream_file
from services.answers import RestError
from services.backfill import list_staged
from services.snowpipe import parse_insert_files
from services.stages import file_name_error
from tests.pipeline.test_loader import TABLE, FakeWorker, pipe_for
from tests.services.test_stages import Served
from tests.services.test_stages import served as served  # the fixture, re-exported

ESCAPES = [
    "../secret/x.csv",
    "a/../../secret/x.csv",
    "./x.csv",
    "a/./b.csv",
    "a/..",
    "%2e%2e/secret/x.csv",
    "%2E%2e/secret/x.csv",
    "a/%2e/b.csv",
    "%252e%252e/secret/x.csv",  # encoded twice: a layer that decodes twice resolves it
    "..%2fsecret/x.csv",
    "..%5csecret/x.csv",
    "a\\..\\..\\secret\\x.csv",
]


@pytest.mark.unit
@pytest.mark.parametrize("path", ESCAPES)
def test_insert_files_refuses_a_path_with_a_dot_segment(path: str) -> None:
    for content_type, body in (
        ("application/json", json.dumps({"files": [{"path": "ok.csv"}, {"path": path}]})),
        ("text/plain", f"ok.csv\n{path}\n"),
    ):
        with pytest.raises(RestError) as caught:
            parse_insert_files(content_type, body.encode())
        assert caught.value.status == 400
        assert "files[1].path has a '.' or '..' segment" in str(caught.value)


def _pipe() -> Pipe:
    spec = CopySpec(table="D.S.T", stage="D.S.ST", file_format=FileFormat(type="CSV"), on_error="SKIP_FILE")
    return Pipe(name="D.S.P", copy_spec=spec, table_id="t1", stage_url="s3://b/allowed/", owner="R")


@pytest.mark.unit
@pytest.mark.parametrize("path", ESCAPES)
def test_a_key_with_a_dot_segment_is_outside_every_pipe(path: str) -> None:
    """What a notification, REFRESH or insertFiles maps through ``Pipe.relative_path``."""
    pipe = _pipe()
    assert pipe.relative_path("allowed/" + path) is None
    assert pipe.relative_path(pipe.object_key(path)) is None


NAMES = ["x.csv", "a/b.csv", "a.b/..c.csv", "...", "a/.../b.csv", "100%.csv", "a%20b.csv", ".hidden/x.csv"]
"""Paths with dots or percent signs inside their names, which stay names."""


@pytest.mark.unit
@pytest.mark.parametrize("path", NAMES)
def test_dots_inside_a_name_are_a_name(path: str) -> None:
    assert not has_dot_segment(path)
    assert parse_insert_files("text/plain", path.encode())[0].path == path
    assert _pipe().relative_path("allowed/" + path) == path


# ------------------------------------------------------------------------------------------------
# The paths of the file commands, a COPY's FROM, INFER_SCHEMA and REFRESH (decision 115)

D = Defaults()
LOCATIONS = ["@ST/{}", "'@ST/{}'", "@DB.SC.%T/{}", "@~/{}"]
"""A named stage, quoted, a table's stage and the user's stage."""
COMMANDS = [
    "LIST {}",
    "LS {} PATTERN = '.*'",
    "REMOVE {}",
    "RM {}",
    "GET {} file:///tmp/out/",
    "PUT file:///tmp/x.csv {}",
]


def _refusal_names(error: CompilationError, path: str) -> None:
    assert "'.' or '..' segment" in error.message, error.message
    assert f"'{path}'" in error.message, error.message


@pytest.mark.unit
@pytest.mark.parametrize("path", ESCAPES)
def test_the_file_commands_refuse_a_path_with_a_dot_segment(path: str) -> None:
    for command in COMMANDS:
        for location in LOCATIONS:
            statement = command.format(location.format(path))
            with pytest.raises(CompilationError) as caught:
                parse_file_command(statement, D)
            _refusal_names(caught.value, path)
            with pytest.raises(CompilationError):  # what the API parses a statement with
                parse(statement, D)


@pytest.mark.unit
@pytest.mark.parametrize("path", ESCAPES)
def test_a_pipes_copy_and_infer_schema_refuse_a_location_with_a_dot_segment(path: str) -> None:
    with pytest.raises(CompilationError) as caught:
        parse(f"CREATE PIPE p AS COPY INTO t FROM @ST/{path}", D)
    _refusal_names(caught.value, path)
    with pytest.raises(CompilationError) as caught:
        parse_location(f"@ST/{path}", D, what="INFER_SCHEMA's LOCATION", user=True)
    _refusal_names(caught.value, path)


@pytest.mark.unit
@pytest.mark.parametrize("path", NAMES)
def test_the_file_commands_take_dots_inside_a_name(path: str) -> None:
    for command in COMMANDS:
        for location in LOCATIONS:
            parsed: Any = parse_file_command(command.format(location.format(path)), D)
            assert parsed.location.path == path


@pytest.mark.unit
@pytest.mark.parametrize("name", ["..", ".", "%2e%2e", "%2E", "%252e%252e", "..%5cx.csv", "a/../b.csv"])
def test_a_put_name_or_get_path_with_a_dot_segment_is_refused(name: str) -> None:
    """What the transfer routes check a PUT's file name and a GET's path with."""
    assert file_name_error(name) == (
        "a file's path may not hold empty, '.' or '..' segments (as written or percent-encoded)"
    )


@pytest.mark.unit
@pytest.mark.parametrize("path", ["in/../secret/", "in/%2e%2e/secret/", "in/./", "in/..%2fsecret/"])
def test_a_stage_url_or_integration_location_with_a_dot_segment_is_refused(path: str) -> None:
    """An integration compares a stage's URL with its locations as strings: 's3://b/in/../secret/'
    passed an integration allowing 's3://b/in/', and its keys resolve under 's3://b/secret/'."""
    url = f"s3://b/{path}"
    for statement in (
        f"CREATE STAGE s URL = '{url}' STORAGE_INTEGRATION = i",
        f"ALTER STAGE s SET URL = '{url}'",
        "CREATE STORAGE INTEGRATION i TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' ENABLED = TRUE "
        f"STORAGE_ALLOWED_LOCATIONS = ('{url}')",
        "CREATE STORAGE INTEGRATION i TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' ENABLED = TRUE "
        f"STORAGE_ALLOWED_LOCATIONS = ('s3://b/') STORAGE_BLOCKED_LOCATIONS = ('{url}')",
        f"ALTER STORAGE INTEGRATION i SET STORAGE_ALLOWED_LOCATIONS = ('{url}')",
    ):
        with pytest.raises(CompilationError) as caught:
            parse(statement, D)
        assert "'.' or '..' segment" in caught.value.message, statement
        assert url in caught.value.message, statement
    assert parse("CREATE STAGE s URL = 's3://b/a.b/..c/' STORAGE_INTEGRATION = i", D) is not None


class _Listing:
    """An S3 client whose listing is recorded: nothing may be listed for a refused PREFIX."""

    def __init__(self) -> None:
        self.listed: list[str] = []

    def get_paginator(self, operation: str) -> Any:
        outer = self

        class Pages:
            def paginate(self, Bucket: str, Prefix: str, **_: Any) -> Any:
                outer.listed.append(Prefix)
                return iter([{"Contents": []}])

        return Pages()


@pytest.mark.unit
@pytest.mark.parametrize("path", ESCAPES)
def test_refresh_prefix_with_a_dot_segment_is_refused_before_listing(path: str) -> None:
    s3 = _Listing()
    since = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with pytest.raises(CompilationError) as caught:
        list_staged(s3, _pipe(), path, since)
    assert "PREFIX" in caught.value.message
    _refusal_names(caught.value, path)
    assert s3.listed == []
    assert list_staged(s3, _pipe(), "a.b/..c", since) == [] and s3.listed == ["allowed/a.b/..c"]


# ------------------------------------------------------------------------------------------------
# The job checks the key it reads (defence in depth: these paths never passed the API)


def _task(path: str, i: int = 0) -> dict[str, Any]:
    return {"pipe_id": "", "path": path, "size": 20, "received_ms": 0, "stream_id": f"{i}-0", "part": 0}


def _records(
    monkeypatch: pytest.MonkeyPatch,
    worker: Any,
    pipe: Pipe,
    paths: list[str],
    integration: StorageIntegration | None = None,
) -> dict[str, dict[str, Any]]:
    """Each file's load record when one task of ``pipe`` loads ``paths`` (process_partition)."""
    monkeypatch.setattr(loader, "_WORKER", worker)
    integrations = {pipe.id: integration.model_dump_json()} if integration is not None else {}
    ctx = BatchContext(
        worker.source_json,
        b"",
        "query",
        7,
        {pipe.id: pipe.model_dump_json()},
        {pipe.id: TABLE.model_dump_json()},
        integrations=integrations,
    )
    rows = [{**_task(p, i), "pipe_id": pipe.id} for i, p in enumerate(paths)]
    out: dict[str, dict[str, Any]] = {}
    for batch in process_partition(ctx, iter([pa.RecordBatch.from_pylist(rows)]), in_driver=True):
        for row in batch.to_pylist():
            if row["kind"] == "file":
                payload = json.loads(row["payload"])
                out[payload["path"]] = payload
    return out


def _put_local(root: Path, key: str, data: bytes) -> None:
    path = root / "bucket" / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


LOADER_ESCAPES = [
    "../secret/x.csv",
    "a/../../secret/x.csv",
    "%2e%2e/secret/x.csv",
    "a\\..\\..\\secret\\x.csv",
]


@pytest.mark.unit
def test_the_loader_fails_a_key_outside_its_stage_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local filesystem resolves '..' as pyarrow's S3 filesystem does (the next test, on
    LocalStack): the secret was read before the job checked the key."""
    _put_local(tmp_path, "secret/x.csv", b"id,name\n666,secret\n")
    _put_local(tmp_path, "in/ok.csv", b"id,name\n1,a\n")
    pipe = pipe_for()  # s3://bucket/in/
    records = _records(monkeypatch, FakeWorker(tmp_path), pipe, ["ok.csv", *LOADER_ESCAPES])
    assert (records["ok.csv"]["status"], records["ok.csv"]["rows_loaded"]) == ("LOADED", 1)
    for path in LOADER_ESCAPES:
        record = records[path]
        assert (record["status"], record["rows_loaded"]) == ("LOAD_FAILED", 0), path
        assert record["first_error"] == (
            f"File '{path}' is not a file of stage s3://bucket/in/: its path has a '.' or '..' segment "
            "(as written or percent-encoded), so it was not read."
        )


@pytest.mark.unit
def test_the_loader_fails_a_key_in_a_blocked_location_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stage's URL is allowed; a folder inside it is blocked: its files are not read."""
    _put_local(tmp_path, "in/private/x.csv", b"id,name\n666,secret\n")
    _put_local(tmp_path, "in/ok.csv", b"id,name\n1,a\n")
    integration = StorageIntegration(
        name="I", allowed_locations=["s3://bucket/in/"], blocked_locations=["s3://bucket/in/private/"]
    )
    records = _records(
        monkeypatch, FakeWorker(tmp_path), pipe_for(), ["ok.csv", "private/x.csv"], integration
    )
    assert records["ok.csv"]["status"] == "LOADED"
    assert (records["private/x.csv"]["status"], records["private/x.csv"]["rows_loaded"]) == ("LOAD_FAILED", 0)
    assert records["private/x.csv"]["first_error"] == (
        "File 'private/x.csv' (s3://bucket/in/private/x.csv) is not allowed by storage integration 'I'; "
        "it was not read. Please use DESC INTEGRATION to check out allowed and blocked locations."
    )


@pytest.mark.unit
def test_the_loader_fails_every_file_of_a_stage_whose_url_has_a_dot_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CREATE STAGE takes a URL such as 's3://bucket/in/../secret/' (its integration compares it
    as a string); whatever the path, its keys resolve elsewhere, and the job reads none of them."""
    _put_local(tmp_path, "secret/x.csv", b"id,name\n666,secret\n")
    _put_local(tmp_path, "in/ok.csv", b"id,name\n1,a\n")  # a local 'in/..' resolves once 'in' exists
    pipe = Pipe.model_validate({**pipe_for().model_dump(), "stage_url": "s3://bucket/in/../secret/"})
    records = _records(monkeypatch, FakeWorker(tmp_path), pipe, ["x.csv"])
    assert (records["x.csv"]["status"], records["x.csv"]["rows_loaded"]) == ("LOAD_FAILED", 0)
    assert records["x.csv"]["first_error"] == (
        "File 'x.csv' is not a file of stage s3://bucket/in/../secret/: its object key "
        "'in/../secret/x.csv' resolves outside the stage's location, so it was not read. Recreate the "
        "stage with a URL without '.' or '..' segments."
    )


@pytest.mark.unit
def test_a_streamed_file_is_checked_too(tmp_path: Path) -> None:
    _put_local(tmp_path, "secret/x.csv", b"id,name\n666,secret\n")
    _put_local(tmp_path, "in/ok.csv", b"id,name\n1,a\n")
    ctx = BatchContext("", b"", "query", 7, {}, {})
    task = LoadTask("", "../secret/x.csv", None, 0, "")
    worker: Any = FakeWorker(tmp_path, stream_file_bytes=1)
    blobs, record = stream_file(worker, ctx, pipe_for(), TABLE, task, 0, 20)
    assert blobs == [] and record.status == "LOAD_FAILED"
    assert "has a '.' or '..' segment" in (record.first_error or "")


@pytest.mark.integration
def test_the_job_on_s3_reads_no_key_outside_its_stage(
    isolated_settings: Settings, s3: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real worker on LocalStack: pyarrow's S3 filesystem resolves 'in/../secret/x.csv' to
    'secret/x.csv', which the job then loaded (measured before the check: 1 row of the secret)."""
    s3.create_bucket(Bucket=isolated_settings.pipeline.tables_bucket)
    s3.put_object(Bucket=bucket, Key="secret/x.csv", Body=b"id,name\n666,secret\n")
    s3.put_object(Bucket=bucket, Key="in/ok.csv", Body=b"id,name\n1,a\n")
    pipe = Pipe.model_validate({**pipe_for().model_dump(), "stage_url": f"s3://{bucket}/in/"})
    monkeypatch.setattr(loader, "_WORKER", None)
    ctx = BatchContext(
        isolated_settings.model_dump_json(),
        os.urandom(32),
        "query",
        7,
        {pipe.id: pipe.model_dump_json()},
        {pipe.id: TABLE.model_dump_json()},
    )
    paths = ["ok.csv", *LOADER_ESCAPES]
    rows = [{**_task(p, i), "pipe_id": pipe.id} for i, p in enumerate(paths)]
    records: dict[str, dict[str, Any]] = {}
    for batch in process_partition(ctx, iter([pa.RecordBatch.from_pylist(rows)]), in_driver=True):
        for row in batch.to_pylist():
            payload = json.loads(row["payload"])
            if row["kind"] == "file":
                records[payload["path"]] = payload
    monkeypatch.setattr(loader, "_WORKER", None)
    loaded = {p: (r["status"], r["rows_loaded"]) for p, r in records.items()}
    print("job on LocalStack:", loaded)
    assert loaded == {"ok.csv": ("LOADED", 1), **dict.fromkeys(LOADER_ESCAPES, ("LOAD_FAILED", 0))}
    for path in LOADER_ESCAPES:  # refused unread, not missing: the encoded ones were "not found" before
        assert records[path]["first_error"].startswith(
            f"File '{path}' is not a file of stage s3://{bucket}/in/"
        )


# ------------------------------------------------------------------------------------------------
# Through the real API on LocalStack: what each verb reached (measured before and after)


def _got(settings: Settings, location: str, path: str) -> bytes:
    """What a GET of ``path`` downloads."""
    into = io.BytesIO()
    download_file(settings, location, path, into)
    return into.getvalue()


def _answer(call: Any) -> str:
    """What a call answered: 'ok: ...' or the refusal's first line."""
    try:
        return f"ok: {call()}"
    except FloeError as exc:
        return "refused: " + exc.message.splitlines()[-1][:160]


@pytest.mark.integration
def test_no_stage_verb_reaches_outside_its_stage(served: Served) -> None:
    settings, bucket = served.settings, served.settings.stages.bucket
    mine, other, table, pipe = unique("st_"), unique("st_"), unique("t_"), unique("p_")
    served.sql(f"CREATE STAGE {mine} FILE_FORMAT = (TYPE = CSV)")
    served.sql(f"CREATE STAGE {other}")
    served.sql(f"CREATE TABLE {table} (a INT)")
    served.sql(f"CREATE PIPE {pipe} AS COPY INTO {table} FROM @{mine}")
    upload_file(settings, f"@{mine}", "mine.csv", b"1\n")
    upload_file(settings, f"@{other}", "x.csv", b"2\n")
    keys = set(served.objects())
    (other_root,) = {k.rsplit("/", 1)[0] + "/" for k in keys if k.endswith("/x.csv")}
    oid = other_root.split("/")[-2]
    secret = "stages/secret.csv"
    served.s3.put_object(Bucket=bucket, Key=secret, Body=b"not a stage's file")
    before = set(served.objects())

    escapes = [f"../{oid}/", f"%2e%2e/{oid}/", f"..%2f{oid}/", f"a/../../{oid}/"]
    seen: dict[str, str] = {}
    for e in escapes:
        seen[f"PUT @{{mine}}/{e}"] = _answer(
            lambda e=e: upload_file(settings, f"@{mine}/{e}", "w.csv", b"3\n")
        )
        seen[f"GET {e}x.csv"] = _answer(lambda e=e: _got(settings, f"@{mine}", f"{e}x.csv"))
        seen[f"LIST @{{mine}}/{e}"] = _answer(lambda e=e: served.sql(f"LIST @{mine}/{e}"))
        seen[f"LIST @~/{e}"] = _answer(lambda e=e: served.sql(f"LIST @~/{e}"))
        seen[f"REMOVE @{{mine}}/{e}"] = _answer(lambda e=e: served.sql(f"REMOVE @{mine}/{e}"))
        seen[f"REFRESH PREFIX '{e}'"] = _answer(
            lambda e=e: served.sql(f"ALTER PIPE {pipe} REFRESH PREFIX = '{e}'")
        )
    for name in ["..", "%2e%2e", "..%5csecret.csv", "%252e%252e"]:
        seen[f"PUT name {name}"] = _answer(lambda n=name: upload_file(settings, f"@{mine}", n, b"4\n"))
    seen["GET ../secret.csv"] = _answer(lambda: _got(settings, f"@{mine}", "../secret.csv"))
    after = set(served.objects())
    written = sorted(after - before)
    print("\n".join(f"{k}: {v}" for k, v in seen.items()))
    print("keys written:", written, "keys gone:", sorted(before - after))
    assert written == [] and before <= after
    refused = [k for k, v in seen.items() if not v.startswith("refused:") or "'.' or '..' segment" not in v]
    assert refused == []
