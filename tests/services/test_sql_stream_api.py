"""POST /api/v1/sql with ``"stream": true`` through the real route, served by uvicorn on the real
Redis, read by ``front.client.stream_sql`` and by `floe sql` itself: results past
``query.max_result_rows`` stream whole, refusals before the first line keep their status, a failure
mid-stream ends with its trailer (and `floe sql` exits 1), and a client that leaves frees the
query's slot at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis
from typer.testing import CliRunner

from floe.runtime import free_port
from floe.settings import Settings
from front import cli as cli_module
from front.client import StatementRejected, auth_header, records, run_sql, stream_sql
from services.query import QueryEngine
from tests.conftest import wait_until
from tests.services.conftest import serving

pytestmark = pytest.mark.integration

PAGE_ROWS = 40
MAX_RESULT_ROWS = 100
NUMBERS = "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < {}) SELECT n FROM r"
# 9 million rows, made as they are read: far more than a client reads before it leaves.
ENDLESS = (
    "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3000) "
    "SELECT a.n AS a, b.n AS b FROM r a, r b"
)
# Rows until n = 15,000, then a value that does not convert: DuckDB fails a late chunk (its threads
# run ahead of the pages fetched, but never thousands of rows before the first page is taken).
FAILS_LATE = (
    "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 20000) "
    "SELECT n, CAST(CASE WHEN n <= 15000 THEN '1' ELSE 'x' END AS INT) AS v FROM r"
)


@dataclass
class Served:
    """The API on a port of its own, with its executor's query engine at hand."""

    settings: Settings
    engine: QueryEngine

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.api.port}/api/v1/sql"


@pytest.fixture
def served(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> Iterator[Served]:
    """uvicorn serving the app (with the API's own HTTP protocol), one query at a time, small pages."""
    port = free_port()
    settings = isolated_settings.model_copy(
        update={
            "api": isolated_settings.api.model_copy(update={"host": "127.0.0.1", "port": port, "tls": "off"}),
            "query": isolated_settings.query.model_copy(
                update={
                    "page_rows": PAGE_ROWS,
                    "max_result_rows": MAX_RESULT_ROWS,
                    "max_concurrent": 1,
                    "timeout_s": 60.0,
                }
            ),
        }
    )
    with serving(settings, redis_client) as app:
        yield Served(settings, app.state.executor.engine)


def test_a_result_past_max_result_rows_streams_whole_in_pages(served: Served) -> None:
    with pytest.raises(StatementRejected, match=f"more than {MAX_RESULT_ROWS} rows") as refused:
        run_sql(served.settings, NUMBERS.format(250))  # unstreamed, still refused
    assert '"stream": true' in str(refused.value) and "floe sql" in str(refused.value)

    lines = list(stream_sql(served.settings, NUMBERS.format(250)))
    assert lines[0] == {"columns": ["N"]}
    pages = [line["rows"] for line in lines[1:-1]]
    assert [len(p) for p in pages] == [40] * 6 + [10]
    assert [row for page in pages for row in page] == [[n] for n in range(1, 251)]
    assert lines[-1]["success"] is True and lines[-1]["rows"] == 250


def test_refusals_before_the_first_line_keep_their_status_and_body(served: Served) -> None:
    headers = auth_header(served.settings)
    for sql, status, code in (
        ("SELECT * FROM no_such_table", 422, "002003"),
        ("SELEC 1", 422, None),
    ):
        resp = httpx.post(served.url, json={"sql": sql, "stream": True}, headers=headers, timeout=30)
        assert resp.status_code == status, resp.text
        assert resp.headers["content-type"] == "application/json"
        body = resp.json()
        assert set(body) == {"success", "code", "sqlState", "message"} and body["success"] is False
        assert code is None or body["code"] == code
        # The same body as without stream.
        unstreamed = httpx.post(served.url, json={"sql": sql}, headers=headers, timeout=30)
        assert (unstreamed.status_code, unstreamed.json()) == (status, body)


def test_statements_other_than_queries_answer_as_one_page(served: Served) -> None:
    lines = list(stream_sql(served.settings, "CREATE TABLE streamed_t (a INT)"))
    assert lines[0]["columns"] and len(lines) == 3 and lines[-1]["rows"] == 1
    lines = list(stream_sql(served.settings, "SHOW TABLES LIKE 'STREAMED_T'"))
    assert [row[lines[0]["columns"].index("name")] for row in lines[1]["rows"]] == ["STREAMED_T"]


def test_a_failure_mid_stream_ends_with_its_trailer_and_floe_sql_exits_1(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    got: list[dict[str, Any]] = []
    with pytest.raises(StatementRejected, match="Conversion Error") as failed:
        got.extend(stream_sql(served.settings, FAILS_LATE))
    assert "002003 (42000)" in str(failed.value)
    assert got[0] == {"columns": ["N", "V"]} and len(got) > 1  # pages came before the failure

    point_cli_at(served, monkeypatch)
    run = CliRunner().invoke(cli_module.app, ["sql", FAILS_LATE])
    assert run.exit_code == 1
    assert "Conversion Error" in run.stderr
    assert "│ 1 " in run.stdout and "┃ N " in run.stdout  # the header and the first rows were printed
    run = CliRunner().invoke(cli_module.app, ["sql", "--json", FAILS_LATE])
    assert run.exit_code == 1 and run.stdout.startswith('[{"N": 1, "V": 1}, {"N": 2, "V": 1}')
    with pytest.raises(json.JSONDecodeError):
        json.loads(run.stdout)  # left open: never mistaken for the whole result


def point_cli_at(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """`floe sql` reads its settings from the environment: this API, this admin key."""
    monkeypatch.setenv("FLOE_API__HOST", "127.0.0.1")
    monkeypatch.setenv("FLOE_API__PORT", str(served.settings.api.port))
    monkeypatch.setenv("FLOE_API__TLS", "off")
    monkeypatch.setenv("FLOE_AUTH__ADMIN_KEY_FILE", served.settings.auth.admin_key_file)


def test_floe_sql_json_parses_as_the_same_array_as_before(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over several pages, the array `floe sql --json` writes as pages arrive is byte for byte the
    one it wrote from the whole answer."""
    sql = "SELECT n, n * 2.5 AS half, 'v' || n AS name, NULL AS nothing FROM (" + NUMBERS.format(90) + ")"
    whole = records(run_sql(served.settings, sql))
    point_cli_at(served, monkeypatch)
    run = CliRunner().invoke(cli_module.app, ["sql", "--json", sql])
    assert run.exit_code == 0, run.output
    assert run.stdout == json.dumps(whole, default=str) + "\n"
    assert json.loads(run.stdout) == whole and len(whole) == 90
    run = CliRunner().invoke(cli_module.app, ["sql", "--json", "--profile", sql])
    assert json.loads(run.stdout) == {"rows": whole, "profile": json.loads(run.stdout)["profile"]}
    assert "blobs_total" in json.loads(run.stdout)["profile"]


def test_a_client_that_disconnects_frees_the_query_slot(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client reads a page of 9 million rows and leaves: the query stops (its connection
    closed, canceled, not finished) and, at max_concurrent = 1, the next query runs at once, long
    before the first's 60 s time limit would have freed the slot."""
    engine = served.engine
    outcomes: list[object] = []
    real_run = engine.run

    def recording_run(*args: Any, **kwargs: Any) -> Any:
        try:
            result = real_run(*args, **kwargs)
        except BaseException as exc:
            outcomes.append(exc)
            raise
        outcomes.append(result)
        return result

    monkeypatch.setattr(engine, "run", recording_run)
    started = time.monotonic()
    with httpx.stream(
        "POST",
        served.url,
        json={"sql": ENDLESS, "stream": True},
        headers=auth_header(served.settings),
        timeout=30,
    ) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        assert json.loads(next(lines)) == {"columns": ["A", "B"]}
        assert len(json.loads(next(lines))["rows"]) == PAGE_ROWS
    # The client has gone.
    wait_until(lambda: outcomes, timeout=20, interval=0.05, what="the query to stop")
    assert isinstance(outcomes[0], Exception), outcomes  # canceled, not run to its end
    assert engine._slots.acquire(blocking=False)  # the only slot is free
    engine._slots.release()
    assert run_sql(served.settings, "SELECT 1 AS one", timeout=30)["rows"] == [[1]]
    assert time.monotonic() - started < 30
