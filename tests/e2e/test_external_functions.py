"""External functions end to end: a remote service on 127.0.0.1 called from a query (the API
process), from a file pipe's COPY transform and from a streaming pipe's transform (the Spark job's
executors), through the real stack."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

from floe.external.remote import build_response
from floe.streaming import StreamingIngestClient
from tests.conftest import Stack, unique, wait_until
from tests.e2e.test_autoingest import done, history
from tests.e2e.test_streaming import client_properties
from tests.floe.external.conftest import Recorder, app_of, json_response, running

pytestmark = pytest.mark.e2e


@pytest.fixture
def service() -> Iterator[tuple[str, Recorder]]:
    """Upper-cases its one argument; a batch holding 'bad' gets 400 (not retried)."""
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        if any(a[0] == "bad" for a in parsed.args):
            return json_response(b'{"error": "refused"}', status=400)
        values = [None if a[0] is None else str(a[0]).upper() for a in parsed.args]
        return json_response(build_response(parsed, values))

    with running(app_of(handle)) as url:
        yield url, recorder


@pytest.fixture
def shout(stack: Stack, service: tuple[str, Recorder]) -> str:
    """An API integration allowing the service and a function SHOUT_<random>(VARCHAR) calling it,
    one row per batch (so one bad row fails alone); returns the function's name."""
    url, _ = service
    integration, fn = unique("api_"), unique("shout_")
    stack.sql(
        f"CREATE API INTEGRATION {integration} API_PROVIDER = aws_api_gateway "
        f"API_ALLOWED_PREFIXES = ('{url}/') ENABLED = TRUE"
    )
    stack.sql(
        f"CREATE EXTERNAL FUNCTION {fn}(s VARCHAR) RETURNS VARCHAR API_INTEGRATION = {integration} "
        f"MAX_BATCH_ROWS = 1 AS '{url}/shout'"
    )
    return fn


def file_pipe(stack: Stack, bucket: str, fn: str) -> str:
    stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
    stack.sql(f"CREATE STAGE {stage} URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = floe_tests")
    stack.sql(f"CREATE TABLE {table} (id INT, name VARCHAR)")
    stack.sql(
        f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} "
        f"FROM (SELECT $1, {fn}($2) FROM @{stage}) FILE_FORMAT = (TYPE = CSV) ON_ERROR = CONTINUE"
    )
    return table


def test_a_file_pipe_loads_the_functions_values_and_a_failed_call_fails_its_row(
    stack: Stack, bucket: str, s3: Any, shout: str, service: tuple[str, Recorder]
) -> None:
    _, recorder = service
    table = file_pipe(stack, bucket, shout)
    s3.put_object(Bucket=bucket, Key="in/a.csv", Body=b"1,ann\n2,bad\n3,cy\n")
    (entry,) = wait_until(lambda: done(stack, table, 1), what="the file in COPY_HISTORY")
    assert entry["STATUS"] == "Partially loaded", entry
    assert (entry["ROW_COUNT"], entry["ERROR_COUNT"], entry["FIRST_ERROR_LINE_NUMBER"]) == (2, 1, 2)
    assert shout.upper() in entry["FIRST_ERROR_MESSAGE"] and "400" in entry["FIRST_ERROR_MESSAGE"]
    assert "refused" not in entry["FIRST_ERROR_MESSAGE"], "the service's answer is not shown"
    rows = stack.sql(f"SELECT id, name FROM {table} ORDER BY id")
    assert rows == [{"ID": 1, "NAME": "ANN"}, {"ID": 3, "NAME": "CY"}]
    assert sorted(a[0] for s in recorder.seen for a in s.request.args) == ["ann", "bad", "cy"]
    # The same function from a query, in the API process, over the loaded rows.
    got = stack.sql(f"SELECT {shout}(LOWER(name)) AS v FROM {table} ORDER BY id")
    assert got == [{"V": "ANN"}, {"V": "CY"}]


def test_a_dropped_function_fails_the_pipes_next_file_saying_so(
    stack: Stack, bucket: str, s3: Any, shout: str, service: tuple[str, Recorder]
) -> None:
    _, recorder = service
    table = file_pipe(stack, bucket, shout)
    stack.sql(f"DROP FUNCTION {shout}(VARCHAR)")
    s3.put_object(Bucket=bucket, Key="in/a.csv", Body=b"1,ann\n")
    (entry,) = wait_until(lambda: done(stack, table, 1), what="the file in COPY_HISTORY")
    assert entry["STATUS"] == "Load failed", entry
    assert "no longer exists" in entry["FIRST_ERROR_MESSAGE"], entry
    assert recorder.requests == 0
    assert history(stack, table)[0]["ROW_COUNT"] == 0


def test_a_streaming_pipes_transform_calls_the_function(
    stack: Stack, shout: str, service: tuple[str, Recorder]
) -> None:
    table, pipe = unique("t_"), unique("p_")
    stack.sql(f"CREATE TABLE {table} (id INT, name VARCHAR)")
    stack.sql(
        f"CREATE PIPE {pipe} AS COPY INTO {table} FROM "
        f"(SELECT $1:id, {shout}($1:name) FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
    )
    with StreamingIngestClient(
        "ef", "FLOE", "PUBLIC", pipe.upper(), properties=client_properties(stack)
    ) as client:
        channel, _ = client.open_channel("c1")
        channel.append_rows([{"id": 1, "name": "ann"}, {"id": 2, "name": "bo"}], end_offset_token="2")
        channel.wait_for_commit(lambda token: token == "2", timeout_seconds=90)
        status = channel.get_channel_status()
    assert status.rows_inserted == 2, status
    rows = stack.sql(f"SELECT id, name FROM {table} ORDER BY id")
    assert rows == [{"ID": 1, "NAME": "ANN"}, {"ID": 2, "NAME": "BO"}]


def test_an_unanswering_service_fails_its_file_whole_and_holds_its_pipe_back_not_the_others(
    stack: Stack, bucket: str, s3: Any
) -> None:
    """Decision 64: a service that does not answer fails the file it was called for, whole (even
    under ON_ERROR = CONTINUE), trips its circuit breaker, and while the breaker is open its pipe's
    next files wait in their queue and cost no request, while another pipe loads; once the
    cooldown ends and the service answers, the waiting file loads."""
    recorder = Recorder()
    up = threading.Event()

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        if not up.is_set():
            return json_response(b"{}", status=503)
        return json_response(build_response(parsed, [str(a[0]).upper() for a in parsed.args]))

    with running(app_of(handle)) as url:
        integration, fn = unique("api_"), unique("flaky_")
        stack.sql(
            f"CREATE API INTEGRATION {integration} API_PROVIDER = aws_api_gateway "
            f"API_ALLOWED_PREFIXES = ('{url}/') ENABLED = TRUE"
        )
        stack.sql(
            f"CREATE EXTERNAL FUNCTION {fn}(s VARCHAR) RETURNS VARCHAR "
            f"API_INTEGRATION = {integration} AS '{url}/up'"
        )
        calling, calling_pipe = unique("t_"), unique("p_")
        plain, plain_pipe = unique("t_"), unique("p_")
        pipes = (("a", calling, calling_pipe, f"{fn}($2)"), ("b", plain, plain_pipe, "$2"))
        for prefix, table, pipe, item in pipes:
            stage = unique("st_")
            stack.sql(
                f"CREATE STAGE {stage} URL = 's3://{bucket}/{prefix}/' STORAGE_INTEGRATION = floe_tests"
            )
            stack.sql(f"CREATE TABLE {table} (id INT, name VARCHAR)")
            stack.sql(
                f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} FROM (SELECT $1, {item} "
                f"FROM @{stage}) FILE_FORMAT = (TYPE = CSV) ON_ERROR = CONTINUE"
            )

        s3.put_object(Bucket=bucket, Key="a/1.csv", Body=b"1,ann\n2,bo\n")
        (failed,) = wait_until(lambda: done(stack, calling, 1), what="a/1.csv in COPY_HISTORY")
        assert failed["STATUS"] == "Load failed" and failed["ROW_COUNT"] == 0, failed
        message = failed["FIRST_ERROR_MESSAGE"]
        assert "no answer" in message and "pipe_retry_timeout_s (3 s)" in message, message
        assert f"ALTER PIPE FLOE.PUBLIC.{calling_pipe.upper()} REFRESH" in message, message
        tried = recorder.requests
        assert tried > 1, "the batch was retried before it failed"

        # The breaker is open (20 s): the calling pipe's next file waits, the other pipe loads.
        s3.put_object(Bucket=bucket, Key="a/2.csv", Body=b"3,cy\n")
        s3.put_object(Bucket=bucket, Key="b/1.csv", Body=b"9,zed\n")
        (loaded,) = wait_until(lambda: done(stack, plain, 1), what="b/1.csv in COPY_HISTORY")
        assert loaded["STATUS"] == "Loaded", loaded
        waiting = {r["FILE_NAME"]: r["STATUS"] for r in history(stack, calling)}
        assert waiting.get("2.csv") == "Load in progress", waiting
        assert recorder.requests == tried, "no request while the breaker is open"
        (status,) = stack.sql(f"SELECT SYSTEM$PIPE_STATUS('{calling_pipe}') AS s")
        pipe_status = json.loads(status["S"])
        assert pipe_status["executionState"] == "STALLED_EXECUTION_ERROR", pipe_status
        assert fn.upper() in pipe_status["error"] and pipe_status["pendingFileCount"] == 1, pipe_status
        assert calling_pipe.upper() in stack.log_text("pipeline").split("held back while")[-1]

        up.set()
        rows = wait_until(lambda: done(stack, calling, 2), what="a/2.csv loaded after the cooldown")
        assert {r["FILE_NAME"]: r["STATUS"] for r in rows} == {"1.csv": "Load failed", "2.csv": "Loaded"}
        assert stack.sql(f"SELECT id, name FROM {calling}") == [{"ID": 3, "NAME": "CY"}]

        # Decision 65: REFRESH sends the failed file again (and only it); it loads whole, once.
        sent = stack.sql(f"ALTER PIPE {calling_pipe} REFRESH")
        assert sorted((r["File"], r["Status"]) for r in sent) == [("1.csv", "SENT"), ("2.csv", "SKIPPED")]
        wait_until(
            lambda: {r["FILE_NAME"]: r["STATUS"] for r in history(stack, calling)}.get("1.csv") == "Loaded",
            what="a/1.csv loaded after REFRESH",
        )
        got = stack.sql(f"SELECT id, name FROM {calling} ORDER BY id")
        assert got == [{"ID": 1, "NAME": "ANN"}, {"ID": 2, "NAME": "BO"}, {"ID": 3, "NAME": "CY"}]
