"""Streamed SQL answers (services/api.py ``StreamedSql`` over services/query.py ``QueryEngine``),
without services: the real engine and a real sandboxed DuckDB, driven by a hand-written ASGI
client that can read at its own pace, stall, and leave.

A query needs no catalog when it reads no table, so the engine runs here without Redis; where a
test needs a table whose rows are produced lazily, the engine's ``compile`` is replaced by one that
registers an Arrow stream counting the batches DuckDB pulled from it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import pyarrow as pa
import pytest

from floe.catalog import Catalog
from floe.catalog.ddl import Query, parse
from floe.errors import CompilationError, PermissionDenied, SqlError
from floe.keys import Keys
from floe.settings import Settings
from services.answers import Throttled, answer_for
from services.api import STREAM_PAGES, StreamedSql
from services.query import QueryEngine, Result, RowSink

pytestmark = pytest.mark.unit

PATH = "/api/v1/sql"
NUMBERS = "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < {}) SELECT n FROM r"


def engine(**query: Any) -> QueryEngine:
    """An engine with these ``query`` settings (the others the defaults), on no Redis at all."""
    settings = Settings()
    settings = settings.model_copy(update={"query": settings.query.model_copy(update=query)})
    return QueryEngine(settings, cast(Any, None), Catalog(cast(Any, None), Keys("unused")), lambda: "")


def allow(_: Any) -> None:
    """Every privilege check passes (no table is read from the catalog here)."""


def statement(sql: str) -> Any:
    parsed = parse(sql)
    assert isinstance(parsed, Query)
    return parsed.expression


class Lazy:
    """A table of ``batches`` Arrow batches of ``rows`` rows (an id and a ``width``-byte string),
    made only as DuckDB pulls them; ``fail_at`` raises instead of making that batch."""

    def __init__(self, batches: int, rows: int, width: int = 1000, fail_at: int | None = None) -> None:
        self.batches, self.rows, self.width, self.fail_at = batches, rows, width, fail_at
        self.schema = pa.schema([("ID", pa.int64()), ("PAD", pa.string())])
        self.pulled = 0

    @property
    def total(self) -> int:
        return self.batches * self.rows

    def _make(self) -> Iterator[pa.RecordBatch]:
        for b in range(self.batches):
            if b == self.fail_at:
                raise OSError("the blob store went away")
            self.pulled += 1
            ids = pa.array(range(b * self.rows, (b + 1) * self.rows), pa.int64())
            yield pa.record_batch([ids, pa.array(["x" * self.width] * self.rows)], schema=self.schema)

    def __arrow_c_schema__(self) -> object:
        return self.schema.__arrow_c_schema__()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        reader = pa.RecordBatchReader.from_batches(self.schema, self._make())
        return reader.__arrow_c_stream__(requested_schema)


def reading(eng: QueryEngine, table: Lazy, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``eng`` answer every query with ``SELECT ID, PAD FROM table``."""
    monkeypatch.setattr(eng, "compile", lambda *args: ("SELECT ID, PAD FROM src", {"src": table}))


class Watched:
    """A sink passed on to the API's, counting the pages handed over (``entered`` - ``returned`` is
    1 while the query waits for room)."""

    def __init__(self, sink: RowSink) -> None:
        self.sink = sink
        self.entered = 0
        self.returned = 0

    def watch(self, stop: Callable[[], None]) -> None:
        self.sink.watch(stop)

    def start(self, columns: list[str]) -> None:
        self.sink.start(columns)

    def page(self, rows: list[list[Any]], timeout_s: float) -> None:
        self.entered += 1
        self.sink.page(rows, timeout_s)
        self.returned += 1


@dataclass
class Run:
    """The statement as the route runs it, in the API's thread: its sink watched, its end recorded."""

    eng: QueryEngine
    sql: str
    watched: Watched | None = None
    ended: threading.Event = field(default_factory=threading.Event)
    outcome: Result | BaseException | None = None

    def __call__(self, sink: RowSink) -> Result:
        self.watched = Watched(sink)
        try:
            self.outcome = self.eng.run(statement(self.sql), allow, {}, self.watched)
            return self.outcome
        except BaseException as exc:
            self.outcome = exc
            raise
        finally:
            self.ended.set()


@dataclass
class Client:
    """An ASGI client of one answer. It stops reading (its ``send`` blocks, as uvicorn's does on a
    full socket) once it holds ``stall_after`` body messages, until ``resume`` or ``leave``."""

    stall_after: int | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    stalled: bool = False
    _unblock: asyncio.Event = field(default_factory=asyncio.Event)
    _left: asyncio.Event = field(default_factory=asyncio.Event)

    def resume(self) -> None:
        self.stall_after = None
        self._unblock.set()

    def leave(self) -> None:
        self._left.set()
        self._unblock.set()  # uvicorn stops waiting on the socket of a client that is gone

    async def receive(self) -> dict[str, Any]:
        await self._left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        if self.stall_after is not None and len(self.bodies) >= self.stall_after:
            self.stalled = True
            await self._unblock.wait()
            self.stalled = False

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def content_type(self) -> str:
        return dict(self.messages[0]["headers"])[b"content-type"].decode()

    @property
    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.messages if m["type"] == "http.response.body"]

    @property
    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in b"".join(self.bodies).splitlines()]

    @property
    def complete(self) -> bool:
        return any(m["type"] == "http.response.body" and not m.get("more_body") for m in self.messages)


async def until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> None:
    """Wait for an observable state of the app or its query thread."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def serving(
    run: Callable[[RowSink], Result], client: Client, limiter: anyio.CapacityLimiter | None = None
) -> Any:
    """The app answering ``client`` (a coroutine: await it, or make it a task)."""
    scope = {"type": "http", "path": PATH}
    return StreamedSql(run, limiter or anyio.CapacityLimiter(1))(scope, client.receive, client.send)


def answer(run: Callable[[RowSink], Result], client: Client | None = None) -> Client:
    """The whole answer, as ``client`` (a reader that never stalls by default) received it."""
    client = client or Client()

    async def main() -> None:
        await StreamedSql(run, anyio.CapacityLimiter(1))(
            {"type": "http", "path": PATH}, client.receive, client.send
        )

    asyncio.run(main())
    return client


def rows_of(lines: list[dict[str, Any]]) -> list[list[Any]]:
    return [row for line in lines if "rows" in line and "success" not in line for row in line["rows"]]


# --- the format ----------------------------------------------------------------------------------


def test_a_result_larger_than_max_result_rows_streams_whole_in_pages() -> None:
    eng = engine(max_result_rows=50, page_rows=40)
    with pytest.raises(SqlError) as refused:  # unstreamed, the same query is refused
        eng.run(statement(NUMBERS.format(130)), allow)
    assert "more than 50 rows" in refused.value.message and '"stream": true' in refused.value.message
    client = answer(Run(eng, NUMBERS.format(130)))
    assert client.status == 200 and client.content_type == "application/x-ndjson"
    lines = client.lines
    assert lines[0] == {"columns": ["N"]}
    assert [len(line["rows"]) for line in lines[1:-1]] == [40, 40, 40, 10]
    assert rows_of(lines) == [[n] for n in range(1, 131)]
    assert lines[-1]["success"] is True and lines[-1]["rows"] == 130
    assert set(lines[-1]["stats"]) >= {"blobs_total", "blobs_scanned"}


def test_an_empty_result_is_its_columns_and_the_trailer() -> None:
    lines = answer(Run(engine(), "SELECT 1 AS one WHERE 1 = 0")).lines
    assert lines[0] == {"columns": ["ONE"]} and len(lines) == 2
    assert lines[1]["success"] is True and lines[1]["rows"] == 0


def test_errors_before_the_first_line_keep_their_status_and_body() -> None:
    """DuckDB's binder refuses the statement at execute, before the columns are known."""
    client = answer(Run(engine(), "SELECT no_such_column FROM (SELECT 1 AS a) t"))
    assert client.status == 422 and client.content_type == "application/json"
    body = json.loads(b"".join(client.bodies))
    assert set(body) == {"success", "code", "sqlState", "message"}
    assert body["success"] is False and body["code"] == "002003" and "NO_SUCH_COLUMN" in body["message"]


@pytest.mark.parametrize(
    ("failure", "status"),
    [
        (CompilationError("Table 'NOPE' does not exist or not authorized."), 422),
        (PermissionDenied("Insufficient privileges to operate on table 'T'."), 403),
        (Throttled("Too many statements from user 'U'; retry in 0.50 s.", 0.5), 429),
    ],
)
def test_refusals_before_the_engine_answer_as_without_stream(failure: Exception, status: int) -> None:
    def run(sink: RowSink) -> Result:
        raise failure

    client = answer(run)
    assert client.status == status and client.content_type == "application/json"
    body = json.loads(b"".join(client.bodies))
    assert body == answer_for(failure, PATH).body()
    if status == 429:
        assert dict(client.messages[0]["headers"])[b"retry-after"] == b"1"


# --- bounds: back-pressure, the time limit, a client that leaves ----------------------------------


def stalled_run(
    eng: QueryEngine, table: Lazy, stall_after: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[Run, Client]:
    reading(eng, table, monkeypatch)
    return Run(eng, "SELECT * FROM src"), Client(stall_after=stall_after)


def test_a_reader_that_stalls_holds_the_query_at_a_couple_of_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages leave before the query's last row is produced, and a client that stops reading stops
    the query: DuckDB is not asked for more than the pages buffered (plus its own small stream
    buffer), however large the result."""
    page_rows = 1000
    eng = engine(page_rows=page_rows, timeout_s=60.0, max_concurrent=1)
    table = Lazy(batches=400, rows=1000, width=1000)  # 400 MB of rows, were they all made
    run, client = stalled_run(eng, table, stall_after=2, monkeypatch=monkeypatch)  # columns, 1 page

    async def main() -> None:
        app = asyncio.create_task(
            StreamedSql(run, anyio.CapacityLimiter(1))(
                {"type": "http", "path": PATH}, client.receive, client.send
            )
        )
        await until(lambda: client.stalled, what="the client to hold its first page")
        assert table.pulled < table.batches  # the first page came before the last row was made
        watched = run.watched
        assert watched is not None
        buffer = cast(Any, watched.sink).send  # the API's pages between the query's thread and the client

        def waiting_for_room() -> bool:
            stats = buffer.statistics()
            full = stats.current_buffer_used == stats.max_buffer_size == STREAM_PAGES
            return bool(full and stats.tasks_waiting_send == 1)

        await until(waiting_for_room, what="the query to wait for room in a full buffer")
        # The client holds 1 page, STREAM_PAGES more wait in the API, and the next waits for room.
        assert watched.entered == watched.returned + 1 == 2 + STREAM_PAGES
        made = watched.entered * page_rows
        duckdb_buffer = (10 << 20) // table.width  # DuckDB's streaming_buffer_size (10 MiB) of rows
        assert table.pulled * table.rows <= made + duckdb_buffer + 2 * table.rows, table.pulled
        assert table.pulled < table.batches // 10
        client.leave()
        await app

    asyncio.run(main())


def test_a_client_that_leaves_stops_the_query_and_frees_its_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    eng = engine(page_rows=1000, timeout_s=60.0, max_concurrent=1)
    table = Lazy(batches=400, rows=1000)
    run, client = stalled_run(eng, table, stall_after=3, monkeypatch=monkeypatch)
    limiter = anyio.CapacityLimiter(1)

    async def main() -> None:
        app = asyncio.create_task(serving(run, client, limiter))
        await until(lambda: client.stalled, what="the client to stop reading")
        started = time.monotonic()
        client.leave()
        await app  # the answer ends once the query's thread has

        assert run.ended.is_set() and time.monotonic() - started < 10  # long before the 60 s limit
        assert isinstance(run.outcome, Exception)  # canceled, its connection closed
        assert table.pulled < table.batches
        assert not client.complete  # no trailer for a client that is gone

    asyncio.run(main())
    # The slot is free: at max_concurrent = 1 the next query runs at once, streamed or not.
    assert eng._slots.acquire(blocking=False)
    eng._slots.release()
    monkeypatch.undo()
    assert eng.run(statement("SELECT 1 AS one"), allow).rows == [[1]]
    assert answer(Run(eng, NUMBERS.format(3))).lines[-1]["rows"] == 3


def test_the_time_limit_covers_the_whole_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that stalls cannot hold the connection and the slot past query.timeout_s: the query
    ends at its limit, and the answer ends with the timeout's trailer once the client reads again."""
    eng = engine(page_rows=1000, timeout_s=1.0, max_concurrent=1)
    table = Lazy(batches=400, rows=1000)
    run, client = stalled_run(eng, table, stall_after=2, monkeypatch=monkeypatch)

    async def main() -> None:
        started = time.monotonic()
        app = asyncio.create_task(
            StreamedSql(run, anyio.CapacityLimiter(1))(
                {"type": "http", "path": PATH}, client.receive, client.send
            )
        )
        await until(run.ended.is_set, what="the query to end at its time limit")
        assert 1.0 <= time.monotonic() - started < 10
        assert client.stalled  # the client never read on, yet the query is over: its slot is free
        assert eng._slots.acquire(blocking=False)
        eng._slots.release()
        client.resume()
        await app

    asyncio.run(main())
    lines = client.lines
    assert lines[0] == {"columns": ["ID", "PAD"]}
    assert (
        lines[-1]["success"] is False and lines[-1]["code"] == "000630" and lines[-1]["sqlState"] == "57014"
    )
    assert "query.timeout_s" in lines[-1]["message"]
    assert len(rows_of(lines)) == (len(lines) - 2) * 1000 < table.total


def test_a_table_read_failing_mid_stream_ends_with_the_error_trailer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The read fails 30 MB into the table: past DuckDB's 10 MiB stream buffer, so after pages
    went out, whatever DuckDB's threads read ahead."""
    eng = engine(page_rows=1000)
    table = Lazy(batches=400, rows=100, width=1000, fail_at=300)
    reading(eng, table, monkeypatch)
    client = answer(Run(eng, "SELECT * FROM src"))
    lines = client.lines
    assert client.status == 200 and lines[0] == {"columns": ["ID", "PAD"]}
    trailer = lines[-1]
    assert trailer == {
        "success": False,
        "code": "002003",
        "sqlState": "42000",
        "message": trailer["message"],
    }
    assert "the blob store went away" in trailer["message"]
    came = rows_of(lines)
    assert len(came) >= 1000 and came == [[i, "x" * 1000] for i in range(len(came))]  # in order


def test_a_statement_failing_in_its_first_page_is_refused_before_the_first_line() -> None:
    """DuckDB runs a query as it is fetched: the first page is fetched before the answer starts, so
    a statement that fails at once answers with its HTTP status, as without stream."""
    sql = (
        "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3000) "
        "SELECT CAST(CASE WHEN n < 10 THEN '1' ELSE 'x' END AS INT) AS v FROM r"
    )
    client = answer(Run(engine(page_rows=1000), sql))
    assert client.status == 422 and client.content_type == "application/json"
    body = json.loads(b"".join(client.bodies))
    assert body["code"] == "002003" and "Conversion Error" in body["message"]
