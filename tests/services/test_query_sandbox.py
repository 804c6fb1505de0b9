"""The query engine's sandbox: table resolution, the function allow-list, COPY_HISTORY bounds and
per-query limits, on the real Redis (isolated key prefix) and a real, sandboxed DuckDB."""

from __future__ import annotations

import datetime as dt
import inspect
import threading
import time
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa
import pytest
import redis
import sqlglot

import services.query as query_module
from floe import sandbox
from floe.catalog import ADMIN_ROLE
from floe.errors import CompilationError, SqlError
from floe.settings import Settings
from services.auth import Principal
from services.functions import ALLOWED_NAMES, check_functions
from services.query import evaluate_bound
from services.sql import SqlExecutor
from tests.conftest import TEST_INTEGRATION

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
NOW = dt.datetime(2026, 3, 31, 12, 30, tzinfo=dt.UTC)


@pytest.fixture
def ex(isolated_settings: Settings, redis_client: redis.Redis) -> Iterator[SqlExecutor]:
    """An executor with short query limits, a table T (A INT, B VARCHAR) and a pipe P."""
    settings = isolated_settings.model_copy(
        update={
            "query": isolated_settings.query.model_copy(
                update={
                    "timeout_s": 1.0,
                    "max_result_rows": 100,
                    "memory_limit": "256MB",
                    "max_concurrent": 1,
                }
            )
        }
    )
    executor = SqlExecutor(settings, redis_client)
    for statement in (
        TEST_INTEGRATION,
        "CREATE STAGE st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests",
        "CREATE TABLE t (a INT, b VARCHAR)",
        "CREATE PIPE p AUTO_INGEST = FALSE AS COPY INTO t FROM @st",
    ):
        executor.execute(statement, ADMIN)
    yield executor
    stale = list(redis_client.scan_iter(match=f"{settings.redis.prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)


def rows(ex: SqlExecutor, sql: str) -> list[dict[str, Any]]:
    return ex.execute(sql, ADMIN).records()


def refusal(ex: SqlExecutor, sql: str) -> SqlError:
    with pytest.raises(SqlError) as info:
        ex.execute(sql, ADMIN)
    return info.value


# --- 1. every connection is sandboxed -------------------------------------------------------------


def test_every_connection_comes_from_the_sandbox(ex: SqlExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    real = sandbox.connect

    def spy(**kwargs: Any) -> duckdb.DuckDBPyConnection:
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(query_module.sandbox, "connect", spy)
    assert rows(ex, "SELECT COUNT(*) AS n FROM t") == [{"N": 0}]
    assert calls == [{"threads": 2, "memory_limit": "256MB"}]
    # No other way to open a connection is left in the module.
    assert "duckdb.connect" not in inspect.getsource(query_module)


# --- 2. table references --------------------------------------------------------------------------

FILE_READS = [
    "SELECT filename, content FROM (SELECT 1) AS d, LATERAL read_text('/etc/passwd')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM TABLE(read_text('/etc/passwd'))",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM glob('/*')",
    "SELECT * FROM range(10)",
    "SELECT * FROM generate_series(1, 10)",
    "SELECT * FROM t, LATERAL FLATTEN(input => t.b)",
    "SELECT * FROM UNNEST([1, 2])",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM TABLE(INFORMATION_SCHEMA.other(x => 1))",
    "SELECT * FROM t JOIN read_text('/etc/passwd') r ON true",
    "SELECT (SELECT content FROM read_text('/etc/passwd'))",
    "SELECT * FROM t UNION ALL SELECT 1, content FROM read_text('/etc/passwd')",
    "WITH x AS (SELECT * FROM read_text('/etc/passwd')) SELECT * FROM x",
]


@pytest.mark.parametrize("sql", FILE_READS)
def test_table_functions_are_refused(ex: SqlExecutor, sql: str) -> None:
    err = refusal(ex, sql)
    assert isinstance(err, CompilationError), err
    assert "root:" not in err.message


def test_sibling_cte_cannot_become_a_file_read(ex: SqlExecutor, tmp_path: Any) -> None:
    target = tmp_path / "x.csv"
    target.write_text("secret_column\nsecret-value-42\n")
    name = str(target)
    err = refusal(
        ex,
        f'SELECT * FROM (WITH "{name}" AS (SELECT 1 AS a) SELECT * FROM "{name}") AS a, '
        f'(SELECT * FROM "{name}") AS b',
    )
    assert isinstance(err, CompilationError) and "secret" not in err.message


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("WITH x AS (SELECT 1 AS v) SELECT v FROM X", [{"V": 1}]),
        (
            "WITH a AS (SELECT 2 AS v), b AS (WITH a AS (SELECT 3 AS v) SELECT v FROM a) "
            "SELECT b.v, a.v AS w FROM b, a",
            [{"V": 3, "W": 2}],
        ),
        (
            "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 10) "
            "SELECT SUM(n) AS s FROM r",
            [{"S": 55}],
        ),
        (
            "SELECT (SELECT COUNT(*) FROM t) AS n, x.v FROM (VALUES (1)) x(v), "
            "LATERAL (SELECT x.v + 1 AS w) l",
            [{"N": 0, "V": 1}],
        ),
        ("SELECT COUNT(*) AS n FROM t WHERE a IN (WITH q AS (SELECT 1 AS a) SELECT a FROM q)", [{"N": 0}]),
        ("SELECT COUNT(*) AS n FROM t AS x JOIN t AS y ON x.a = y.a", [{"N": 0}]),
    ],
)
def test_ctes_subqueries_and_joins_resolve(ex: SqlExecutor, sql: str, expected: list[dict[str, Any]]) -> None:
    assert rows(ex, sql) == expected


def test_ctes_are_renamed_and_tables_replaced(ex: SqlExecutor) -> None:
    stats = {"blobs_total": 0, "blobs_scanned": 0}
    sql, tables = ex.engine.compile(
        sqlglot.parse_one("WITH mine AS (SELECT a FROM t) SELECT * FROM mine", read="snowflake"),
        stats,
        lambda need: None,
    )
    assert "MINE" not in sql.upper().replace("AS MINE", "") and "__floe_cte_0" in sql
    assert list(tables) == ["__floe_t0"]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM nope",
        "SELECT * FROM __t0",  # the old "skip names starting with __" hole
        "SELECT * FROM __floe_t0",
        "SELECT * FROM duckdb_settings",
        "SELECT * FROM information_schema.tables",
        "SELECT v FROM t AS x, LATERAL (SELECT * FROM x) y",  # sqlglot and DuckDB differ on x here
    ],
)
def test_other_names_must_be_catalog_tables(ex: SqlExecutor, sql: str) -> None:
    assert "does not exist" in refusal(ex, sql).message


def test_a_quoted_name_is_looked_up_as_written(ex: SqlExecutor) -> None:
    """A quoted path is one identifier, not a dotted name cut at its dots (nor a file)."""
    assert "'FLOE.PUBLIC./etc/passwd' does not exist" in refusal(ex, 'SELECT * FROM "/etc/passwd"').message


# --- 3. the function allow-list -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "current_setting('threads')",
        "getenv('HOME')",
        "read_text('/etc/passwd')",
        "pragma_version()",
        "duckdb_settings()",
        "version()",
        "query('SELECT 1')",
        "getvariable('x')",
        "load_extension('x')",
        "range(10)",
        "generate_series(1, 3)",
        "unnest([1])",
    ],
)
def test_unknown_functions_are_refused_as_snowflake_does(ex: SqlExecutor, name: str) -> None:
    err = refusal(ex, f"SELECT {name}")
    expected = name.split("(")[0].upper()
    assert (err.code, err.sql_state) == ("002140", "42601")
    assert err.message == f"SQL compilation error:\nUnknown function {expected}" or expected in err.message


def test_project_queries_pass_the_allow_list(ex: SqlExecutor) -> None:
    """What the README, demo, bench and tests run, plus common Snowflake functions."""
    for sql in (
        "SELECT kind, COUNT(*), SUM(amount) FROM (SELECT b AS kind, a AS amount FROM t) "
        "GROUP BY kind ORDER BY 2 DESC",
        "SELECT COUNT(*) AS n, COUNT(DISTINCT a) AS d, MIN(a) AS lo, MAX(a) AS hi FROM t",
        "SELECT b, a, COUNT(*) AS n FROM t GROUP BY b, a HAVING COUNT(*) > 1 LIMIT 5",
        "SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => 't', "
        "START_TIME => DATEADD(hours, -1, CURRENT_TIMESTAMP()))) WHERE STATUS = 'Loaded' ORDER BY FILE_NAME",
        "SELECT UPPER(b), LOWER(b), LENGTH(b), SUBSTR(b, 1, 2), TRIM(b), REPLACE(b, 'x', 'y'), "
        "CONCAT(b, 'z'), "
        "IFF(a > 1, 'big', 'small'), NVL(a, 0), COALESCE(a, 1), ROUND(a / 3, 2), ABS(a), "
        "DATEADD(day, 1, CURRENT_DATE()), DATEDIFF(day, CURRENT_DATE(), CURRENT_DATE()), "
        "YEAR(CURRENT_DATE()), "
        "TO_VARCHAR(a), a::VARCHAR, TRY_CAST(b AS INT), CASE WHEN a IS NULL THEN 0 ELSE 1 END, "
        "SUM(a) OVER (PARTITION BY b), ROW_NUMBER() OVER (ORDER BY a), LISTAGG(b, ',') OVER () FROM t",
    ):
        assert isinstance(rows(ex, sql), list)
    (status,) = rows(ex, "SELECT SYSTEM$PIPE_STATUS('p') AS s")
    assert '"executionState":"RUNNING"' in status["S"]


def test_allowed_anonymous_names_are_no_duckdb_table_functions() -> None:
    con = duckdb.connect()
    kinds = dict(con.execute("SELECT upper(function_name), function_type FROM duckdb_functions()").fetchall())
    for name in ALLOWED_NAMES:
        assert kinds.get(name) in (None, "scalar", "aggregate"), name


def test_check_is_deny_by_default() -> None:
    with pytest.raises(CompilationError, match="Unknown function MADE_UP_FN"):
        check_functions(sqlglot.parse_one("SELECT 1 + made_up_fn(2)", read="snowflake"))


# --- 4. COPY_HISTORY bounds -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DATEADD(hours, -1, CURRENT_TIMESTAMP())", NOW - dt.timedelta(hours=1)),
        ("TIMESTAMPADD(minute, 30, SYSDATE())", NOW + dt.timedelta(minutes=30)),
        (
            "DATEADD(month, -1, CURRENT_TIMESTAMP()::TIMESTAMP_LTZ)",
            dt.datetime(2026, 2, 28, 12, 30, tzinfo=dt.UTC),
        ),
        ("'2024-02-29 10:00:00'", dt.datetime(2024, 2, 29, 10, tzinfo=dt.UTC)),
        ("'2024-02-29T10:00:00+02:00'::TIMESTAMP_TZ", dt.datetime(2024, 2, 29, 8, tzinfo=dt.UTC)),
        ("DATEADD(year, 1, '2024-02-29')", dt.datetime(2025, 2, 28, tzinfo=dt.UTC)),
        ("CURRENT_DATE()", dt.datetime(2026, 3, 31, tzinfo=dt.UTC)),
    ],
)
def test_bounds_are_evaluated_by_floe(text: str, expected: dt.datetime) -> None:
    node = sqlglot.parse_one(f"SELECT {text}", read="snowflake").expressions[0]
    assert evaluate_bound(node, NOW) == expected


@pytest.mark.parametrize(
    "text",
    [
        "CASE WHEN 1 > 0 THEN CURRENT_TIMESTAMP() ELSE 'x' END",
        "(SELECT MAX(a) FROM t)",
        "DATEADD(hours, (SELECT 1), CURRENT_TIMESTAMP())",
        "DATEADD(hours, 1.5, CURRENT_TIMESTAMP())",
        "DATEADD(hours, a, CURRENT_TIMESTAMP())",
        "CURRENT_SETTING('threads')",
        "'not a time'",
        "DATEADD(year, 99999999, CURRENT_TIMESTAMP())",
    ],
)
def test_other_bounds_are_refused_with_what_is_accepted(ex: SqlExecutor, text: str) -> None:
    err = refusal(
        ex, f"SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => 't', START_TIME => {text}))"
    )
    assert isinstance(err, CompilationError)
    assert "CURRENT_TIMESTAMP()" in err.message and "DATEADD" in err.message


def test_history_table_name_must_be_a_string_literal(ex: SqlExecutor) -> None:
    err = refusal(
        ex,
        "SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => UPPER('t'), "
        "START_TIME => SYSDATE()))",
    )
    assert "string literal" in err.message


# --- 5. limits ------------------------------------------------------------------------------------

ENDLESS = (
    "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3000) "
    "SELECT COUNT(*) FROM r a, r b, r c"
)


def test_a_long_query_is_interrupted_at_the_time_limit(ex: SqlExecutor) -> None:
    started = time.monotonic()
    err = refusal(ex, ENDLESS)
    elapsed = time.monotonic() - started
    assert err.code == "000630" and "query.timeout_s" in err.message
    # The timer fired (the query was stopped, not refused at once); the error says it was the timer,
    # and the query has no end of its own. No upper bound: a loaded machine may be slow to stop it.
    assert elapsed >= 1.0, elapsed


def test_an_unbounded_recursive_cte_is_stopped(ex: SqlExecutor) -> None:
    err = refusal(
        ex, "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r"
    )
    assert "query.timeout_s" in err.message or "query.memory_limit" in err.message, err.message


def test_memory_limit_is_duckdbs(ex: SqlExecutor) -> None:
    limits = ex.engine.settings.query.model_copy(update={"timeout_s": 30.0})
    ex.engine.settings = ex.engine.settings.model_copy(update={"query": limits})
    err = refusal(
        ex,
        "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3000000) "
        "SELECT LISTAGG(REPEAT('x', 1000), ',') FROM r",
    )
    assert "query.memory_limit (256MB" in err.message


def test_results_are_capped_with_a_hint_to_add_a_limit(ex: SqlExecutor) -> None:
    many = "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < {}) SELECT n FROM r"
    assert len(rows(ex, many.format(100))) == 100
    err = refusal(ex, many.format(101))
    assert "more than 100 rows" in err.message and "LIMIT" in err.message


def test_a_database_is_reused_only_empty_of_what_the_query_before_gave_it() -> None:
    databases = query_module._Databases(threads=1, memory_limit="256MB", keep=1)
    con = databases.take()
    con.register("t_of_query_1", pa.table({"secret": ["x"]}))
    con.create_function("f_of_query_1", lambda v: v, ["BIGINT"], "BIGINT")
    databases.give_back(con, ["t_of_query_1"], ["f_of_query_1"])
    again = databases.take()
    assert again is con, "a clean database is kept for the next query"
    with pytest.raises(duckdb.CatalogException):
        again.execute("SELECT * FROM t_of_query_1")
    with pytest.raises(duckdb.CatalogException):
        again.execute("SELECT f_of_query_1(1)")
    # Still the sandbox: its configuration stays locked.
    with pytest.raises(duckdb.InvalidInputException, match="locked"):
        again.execute("SET enable_external_access = true")
    # Two queries at once never share one.
    other = databases.take()
    assert other is not again
    databases.give_back(other, [], [])
    databases.give_back(again, [], [])  # beyond ``keep``: closed
    with pytest.raises(duckdb.ConnectionException):
        again.execute("SELECT 1")


@pytest.mark.parametrize("how", ["time_up", "abandon"])
def test_an_interrupted_database_is_closed_not_kept(how: str) -> None:
    """An interrupt that lands as the query ends stays pending in the connection: the next query
    to run there would fail at once."""
    con = sandbox.connect(threads=1, memory_limit="256MB")
    cancel = query_module._Cancel(con)
    getattr(cancel, how)()
    kept: list[duckdb.DuckDBPyConnection] = []
    cancel.close(kept.append)
    assert kept == []
    with pytest.raises(duckdb.ConnectionException):
        con.execute("SELECT 1")
    clean = query_module._Cancel(sandbox.connect(threads=1, memory_limit="256MB"))
    clean.close(kept.append)
    assert len(kept) == 1


def test_statements_reuse_databases_and_a_failed_one_is_not_kept(
    ex: SqlExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[duckdb.DuckDBPyConnection] = []
    real = sandbox.connect

    def spy(**kwargs: Any) -> duckdb.DuckDBPyConnection:
        opened.append(real(**kwargs))
        return opened[-1]

    monkeypatch.setattr(query_module.sandbox, "connect", spy)
    ex.engine._databases = query_module._Databases(2, "256MB", keep=1)
    for _ in range(5):
        assert rows(ex, "SELECT COUNT(*) AS n FROM t") == [{"N": 0}]
    assert len(opened) == 1
    assert refusal(ex, ENDLESS).code == "000630"  # timed out: its database is dropped
    assert len(opened) == 1
    assert rows(ex, "SELECT 1 AS one") == [{"ONE": 1}]
    assert len(opened) == 2, "the timed-out query's database was kept"
    with pytest.raises(duckdb.ConnectionException):
        opened[0].execute("SELECT 1")


def test_queries_beyond_max_concurrent_wait_then_give_up(ex: SqlExecutor) -> None:
    slots = ex.engine._slots
    assert slots.acquire(timeout=1)  # a query that holds the only slot
    released = threading.Timer(0.3, slots.release)
    try:
        started = time.monotonic()
        err = refusal(ex, "SELECT 1 AS one")
        assert time.monotonic() - started >= 1.0  # it waited for the time limit
        assert "query.max_concurrent" in err.message
    finally:
        released.start()
    assert rows(ex, "SELECT 1 AS one") == [{"ONE": 1}]  # it got the slot once freed
    released.join()


def test_a_query_the_translator_cannot_handle_is_a_compilation_error(ex: SqlExecutor) -> None:
    """Found by test_sql_property: sqlglot's DuckDB generator raised AttributeError on DATE_PART
    with one argument, which reached the caller as a server fault."""
    err = refusal(ex, "SELECT date_part('x') AS x")
    assert "SQL compilation error" in err.message
