"""External functions called from queries: resolution, privileges, and the remote service's rows,
through the real query engine (DuckDB) and a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis
from starlette.requests import Request
from starlette.responses import Response

from floe.catalog import ADMIN_ROLE, ApiIntegration, Column, ExternalFunction
from floe.catalog.models import function_signature
from floe.errors import SqlError
from floe.external import Breaker
from floe.external.remote import build_response
from floe.keys import Keys
from floe.settings import Settings
from services.auth import Principal
from services.sql import SqlExecutor
from tests.conftest import wait_until
from tests.floe.external.conftest import Recorder, app_of, json_response, running, wait_for

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
VARCHAR = Column(name="S", type="VARCHAR")
NUMBER = Column(name="N", type="NUMBER", precision=38, scale=0)


@pytest.fixture
def engine_closed(ex: SqlExecutor) -> Iterator[SqlExecutor]:
    """The executor, its external-function caller closed after the test."""
    yield ex
    ex.engine.close()


@pytest.fixture
def service() -> Iterator[tuple[str, Recorder]]:
    """A remote service that upper-cases its one argument (NULL stays NULL) and records requests."""
    recorder = Recorder()

    async def handle(request: Request) -> Response:
        parsed = await recorder.receive(request)
        if request.url.path.endswith("/missing"):
            return json_response(b'{"message": "no such route"}', status=404)
        values = [None if a[0] is None else str(a[0]).upper() for a in parsed.args]
        return json_response(build_response(parsed, values))

    with running(app_of(handle)) as url:
        yield url, recorder


def define(
    ex: SqlExecutor,
    url: str,
    name: str = "SHOUT",
    args: list[Column] | None = None,
    returns: Column = VARCHAR,
    enabled: bool = True,
    path: str = "/shout",
) -> ExternalFunction:
    """An integration admitting ``url`` and a function calling ``url + path``, put in the catalog as
    CREATE API INTEGRATION / CREATE EXTERNAL FUNCTION would."""
    ex.catalog.put(
        ApiIntegration(
            name="TEST_API", provider="AWS_API_GATEWAY", enabled=enabled, allowed_prefixes=[url + "/"]
        )
    )
    args = [VARCHAR] if args is None else args
    fn = ExternalFunction(
        name=function_signature(f"FLOE.PUBLIC.{name}", args),
        function_name=f"FLOE.PUBLIC.{name}",
        args=args,
        returns=returns,
        integration="TEST_API",
        url=url + path,
    )
    ex.catalog.put(fn)
    return fn


def rows(ex: SqlExecutor, sql: str, principal: Principal = ADMIN) -> list[list[object]]:
    return ex.execute(sql, principal).rows


def test_a_query_sends_its_rows_and_gets_the_values_back(
    engine_closed: SqlExecutor, service: tuple[str, Recorder]
) -> None:
    url, recorder = service
    define(engine_closed, url)
    got = rows(engine_closed, "SELECT shout(x) AS v FROM (VALUES ('a'), ('b'), (NULL)) t(x) ORDER BY 1")
    assert got == [["A"], ["B"], [None]]
    sent = sorted((a[0] for s in recorder.seen for a in s.request.args), key=lambda v: (v is None, v))
    assert sent == ["a", "b", None], "NULL is sent to the service, as Snowflake does"
    # Qualified names resolve to the same function.
    assert rows(engine_closed, "SELECT floe.public.shout('q'), public.shout('r')") == [["Q", "R"]]


def test_rows_a_where_clause_drops_are_not_sent(
    engine_closed: SqlExecutor, service: tuple[str, Recorder]
) -> None:
    url, recorder = service
    define(engine_closed, url)
    got = rows(engine_closed, "SELECT shout(x) FROM (VALUES ('keep'), ('drop')) t(x) WHERE x <> 'drop'")
    assert got == [["KEEP"]]
    assert [a for s in recorder.seen for a in s.request.args] == [["keep"]]


def test_arguments_are_cast_to_the_declared_types(
    engine_closed: SqlExecutor, service: tuple[str, Recorder]
) -> None:
    url, recorder = service
    define(engine_closed, url, name="SHOUT_N", args=[NUMBER])
    assert rows(engine_closed, "SELECT shout_n('42')") == [["42"]]
    assert recorder.seen[-1].request.args == [[42]], "a NUMBER argument is sent as a JSON number"


def test_a_role_without_usage_does_not_see_the_function(
    engine_closed: SqlExecutor, service: tuple[str, Recorder]
) -> None:
    url, recorder = service
    define(engine_closed, url)
    nobody = Principal("NOBODY", frozenset({"PUBLIC"}))
    with pytest.raises(SqlError, match="Unknown function SHOUT"):
        engine_closed.execute("SELECT shout('a')", nobody)
    assert recorder.requests == 0


def test_a_failing_service_fails_the_query_naming_the_function_not_the_rows(
    engine_closed: SqlExecutor, service: tuple[str, Recorder]
) -> None:
    url, recorder = service
    define(engine_closed, url, path="/missing")
    with pytest.raises(SqlError) as err:
        rows(engine_closed, "SELECT shout('secret-value')")
    text = str(err.value)
    assert "FLOE.PUBLIC.SHOUT(VARCHAR)" in text and "404" in text
    assert "secret-value" not in text and "no such route" not in text
    assert recorder.requests == 1, "a 404 is not retried"


def test_a_disabled_integration_refuses_the_call_before_any_request(
    engine_closed: SqlExecutor, service: tuple[str, Recorder]
) -> None:
    url, recorder = service
    define(engine_closed, url, enabled=False)
    with pytest.raises(SqlError, match="TEST_API is disabled"):
        rows(engine_closed, "SELECT shout('a')")
    assert recorder.requests == 0


def test_overloads_are_chosen_by_arity_then_by_cast(
    engine_closed: SqlExecutor, service: tuple[str, Recorder]
) -> None:
    url, _ = service
    define(engine_closed, url, name="PICK", args=[VARCHAR])
    define(engine_closed, url, name="PICK", args=[VARCHAR, VARCHAR])
    assert rows(engine_closed, "SELECT pick('a'), pick('b', 'c')") == [["A", "B"]]
    define(engine_closed, url, name="PICK", args=[NUMBER])
    with pytest.raises(SqlError, match="Ambiguous call of PICK"):
        rows(engine_closed, "SELECT pick('a')")
    assert rows(engine_closed, "SELECT pick('7'::NUMBER), pick('x'::VARCHAR)") == [["7", "X"]]
    with pytest.raises(SqlError, match="Invalid argument types for function 'PICK'"):
        rows(engine_closed, "SELECT pick('a', 'b', 'c')")


def test_context_headers_carry_the_session(engine_closed: SqlExecutor, service: tuple[str, Recorder]) -> None:
    url, recorder = service
    fn = define(engine_closed, url)
    engine_closed.catalog.put(
        fn.model_copy(update={"context_headers": ["CURRENT_USER", "CURRENT_STATEMENT"]})
    )
    rows(engine_closed, "SELECT shout('a')\n  AS v")
    context = recorder.seen[-1].request.context
    assert context["CURRENT_USER"] == "FLOE_ADMIN"
    assert context["CURRENT_STATEMENT"] == "SELECT SHOUT('a') AS v"


def test_the_statement_timeout_cuts_a_hanging_call_short(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    """DuckDB's interrupt cannot stop a Python function waiting on a socket: the call itself stops
    at the statement's deadline. The service holds its answer until the query has returned, and
    request_timeout_s is 120 s, so a query that returns at all was cut short by its deadline."""
    recorder = Recorder()
    gate = threading.Event()

    async def handle(request: Request) -> Response:
        await recorder.receive(request)
        await wait_for(gate)
        return Response(status_code=503)

    settings = isolated_settings.model_copy(
        update={
            "query": isolated_settings.query.model_copy(update={"timeout_s": 0.5}),
            "external_functions": isolated_settings.external_functions.model_copy(
                update={"request_timeout_s": 120.0, "retry_timeout_s": 120.0}
            ),
        }
    )
    ex = SqlExecutor(settings, redis_client)
    errors: list[Exception] = []

    def query() -> None:
        try:
            rows(ex, "SELECT shout('a')")
        except Exception as exc:  # noqa: BLE001 - the test checks what it was
            errors.append(exc)

    try:
        with running(app_of(handle)) as url:
            define(ex, url)
            runner = threading.Thread(target=query)
            runner.start()
            try:
                wait_until(lambda: not runner.is_alive(), 60, what="the query to return unanswered")
            finally:
                gate.set()  # the handler returns before its server stops
                runner.join()
        assert len(errors) == 1 and isinstance(errors[0], SqlError), errors
        assert "statement timeout of 0.5 second" in str(errors[0])
        assert recorder.requests == 1
        assert Breaker(client=redis_client, keys=Keys(settings.redis.prefix)).state(url + "/shout") is None
    finally:
        ex.engine.close()


def test_a_service_down_for_a_pipe_fails_queries_at_once(
    engine_closed: SqlExecutor, service: tuple[str, Recorder], redis_client: redis.Redis[bytes]
) -> None:
    """The breaker is shared through Redis: tripped by a pipe's load (another process), it holds
    the API's queries back too, without a request, until its cooldown ends."""
    url, recorder = service
    fn = define(engine_closed, url)
    keys = Keys(engine_closed.settings.redis.prefix)
    Breaker(engine_closed.settings.external_functions, redis_client, keys).trip(fn.url, "batch b: no answer")
    with pytest.raises(SqlError, match=r"held back until .* UTC") as err:
        rows(engine_closed, "SELECT shout('a')")
    assert "it last failed at batch b: no answer" in str(err.value)
    assert recorder.requests == 0
