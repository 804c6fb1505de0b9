"""External functions in a COPY transform: the calls are made before the main query, their values
load, and a row whose call failed follows ON_ERROR with the function's message. Real DuckDB, a real
HTTP server on 127.0.0.1 and the real caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlglot
from starlette.requests import Request
from starlette.responses import Response

from floe.catalog.calls import call_sites
from floe.catalog.models import (
    ApiIntegration,
    Column,
    CopySpec,
    ExternalFunction,
    FileFormat,
    OnError,
    Table,
    function_signature,
)
from floe.errors import FileLoadError
from floe.external import FunctionCaller, RemoteFunction
from floe.external.remote import build_response
from floe.records import LoadOutcome
from pipeline.formats import read_raw
from pipeline.transform import apply_copy, compile_copy
from pipeline.transform.remote_calls import RemoteCalls
from tests.floe.external.conftest import FAST, Recorder, app_of, json_response, running

pytestmark = pytest.mark.integration

VARCHAR = Column(name="S", type="VARCHAR")
NUMBER = Column(name="N", type="NUMBER", precision=38, scale=0)
TABLE = Table(
    name="DB.PUBLIC.T",
    columns=[
        Column(name="ID", type="NUMBER", precision=18, scale=0),
        Column(name="NAME", type="VARCHAR"),
    ],
)


@pytest.fixture
def service() -> Iterator[tuple[str, Recorder]]:
    """Upper-cases its one argument (numbers become their text); a batch holding 'bad' gets 400."""
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        if any(a[0] == "bad" for a in parsed.args):
            return json_response(b'{"error": "bad input"}', status=400)
        return json_response(
            build_response(parsed, [None if a[0] is None else str(a[0]).upper() for a in parsed.args])
        )

    with running(app_of(handle)) as url:
        yield url, recorder


@pytest.fixture
def caller() -> Iterator[FunctionCaller]:
    with FunctionCaller(FAST) as made:
        yield made


def function(
    url: str, name: str = "SHOUT", args: list[Column] | None = None, **options: Any
) -> tuple[ExternalFunction, ApiIntegration]:
    args = [VARCHAR] if args is None else args
    fn = ExternalFunction(
        name=function_signature(f"DB.PUBLIC.{name}", args),
        function_name=f"DB.PUBLIC.{name}",
        args=args,
        returns=VARCHAR,
        integration="API",
        url=url + "/shout",
        **options,
    )
    return fn, ApiIntegration(name="API", provider="AWS_API_GATEWAY", allowed_prefixes=[url + "/"])


def load(
    select: list[str],
    data: bytes,
    fns: dict[str, tuple[ExternalFunction, ApiIntegration]],
    caller: FunctionCaller,
    on_error: OnError = "CONTINUE",
    **remote_options: Any,
) -> tuple[list[dict[str, Any]], LoadOutcome]:
    """Compile a COPY of a headerless CSV whose ``select`` calls ``fns`` (by the name as written),
    and load ``data`` through it."""
    keys: dict[str, tuple[ExternalFunction, ApiIntegration]] = {}
    for item in select:
        for site in call_sites(sqlglot.parse_one(item, read="snowflake")):
            if site.parts[-1] in fns:
                keys[site.key] = fns[site.parts[-1]]
    copy = CopySpec(
        table=TABLE.name,
        stage="DB.PUBLIC.ST",
        select=select,
        file_format=FileFormat(),
        on_error=on_error,
        functions={k: fn.name for k, (fn, _) in keys.items()},
    )
    compiled = compile_copy(copy, TABLE, "CSV", {k: fn for k, (fn, _) in keys.items()})
    functions = {k: RemoteFunction.of(fn, i) for k, (fn, i) in keys.items()}
    remote = RemoteCalls(caller, functions, "q-1", **remote_options)
    raw = read_raw(data, compiled.file_format, path="f.csv")
    rows, result = apply_copy(compiled, raw, filename="f.csv", remote=remote)
    return rows.to_pylist(), result


def test_a_transform_loads_the_functions_values(
    service: tuple[str, Recorder], caller: FunctionCaller
) -> None:
    url, recorder = service
    rows, result = load(["$1", "shout($2)"], b"1,ann\n2,bob\n3,\n", {"SHOUT": function(url)}, caller)
    assert result.status == "LOADED", result
    assert rows == [{"ID": 1, "NAME": "ANN"}, {"ID": 2, "NAME": "BOB"}, {"ID": 3, "NAME": None}]
    assert sorted(str(a[0]) for s in recorder.seen for a in s.request.args) == ["None", "ann", "bob"]
    assert {s.request.query_id for s in recorder.seen} == {"q-1"}


def test_a_call_in_anothers_arguments_is_made_first(
    service: tuple[str, Recorder], caller: FunctionCaller
) -> None:
    url, recorder = service
    rows, result = load(["$1", "shout(shout($2) || '!')"], b"1,ann\n", {"SHOUT": function(url)}, caller)
    assert result.status == "LOADED", result
    assert rows == [{"ID": 1, "NAME": "ANN!"}]
    assert [a for s in recorder.seen for a in s.request.args] == [["ann"], ["ANN!"]]


def test_rows_of_a_failed_batch_follow_on_error_with_the_functions_message(
    service: tuple[str, Recorder], caller: FunctionCaller
) -> None:
    url, recorder = service
    fns = {"SHOUT": function(url, max_batch_rows=1)}  # one row per batch: only the bad one fails
    data = b"1,ann\n2,bad\n3,cy\n"
    rows, result = load(["$1", "shout($2)"], data, fns, caller)
    assert result.status == "PARTIALLY_LOADED", result
    assert rows == [{"ID": 1, "NAME": "ANN"}, {"ID": 3, "NAME": "CY"}]
    assert (result.errors_seen, result.first_error_line) == (1, 2)
    message = result.first_error or ""
    assert "DB.PUBLIC.SHOUT(VARCHAR)" in message and "400" in message
    assert "bad input" not in message, "the service's answer is not shown"
    assert recorder.requests == 3, "a 400 is not retried"

    _, skipped = load(["$1", "shout($2)"], data, fns, caller, on_error="SKIP_FILE")
    assert skipped.status == "LOAD_FAILED" and skipped.first_error == result.first_error


def test_an_argument_that_does_not_convert_fails_its_row_unsent(
    service: tuple[str, Recorder], caller: FunctionCaller
) -> None:
    url, recorder = service
    fns = {"SHOUT_N": function(url, name="SHOUT_N", args=[NUMBER])}
    rows, result = load(["$1", "shout_n($2)"], b"1,41\n2,abc\n", fns, caller)
    assert result.status == "PARTIALLY_LOADED", result
    assert rows == [{"ID": 1, "NAME": "41"}]
    assert result.first_error_line == 2 and "could not be converted" in (result.first_error or "")
    assert [a for s in recorder.seen for a in s.request.args] == [[41]]


def test_a_service_that_does_not_answer_fails_the_whole_file_whatever_on_error_says() -> None:
    """Decision 64: the outage is the service's, not the rows': under CONTINUE too, nothing of the
    file loads (so REFRESH can send it all again), and the message says how."""
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        await recorder.receive(request)
        return Response(status_code=503)

    settings = FAST.model_copy(
        update={"max_batch_rows": 1, "max_concurrency": 1, "pipe_retry_timeout_s": 0.2}
    )
    with running(app_of(handle)) as url, FunctionCaller(settings) as caller:
        fns = {"SHOUT": function(url)}
        with pytest.raises(FileLoadError) as failed:
            load(["$1", "shout($2)"], b"1,ann\n2,bo\n", fns, caller, pipe="DB.PUBLIC.P")
    message = failed.value.message
    assert (
        "no answer after" in message and "within external_functions.pipe_retry_timeout_s (0.2 s)" in message
    )
    assert message.endswith("Once the service answers, ALTER PIPE DB.PUBLIC.P REFRESH loads this file again.")
    assert len(set(recorder.batch_ids)) == 1, "the file's other batch was not sent"
