"""Functions whose output size is an argument cannot take the API past its memory (issue 31, item 7).

DuckDB's ``memory_limit`` governs its buffers, not the strings a function makes while evaluating an
expression: ``SELECT length(repeat(repeat('x',1000000),1000))`` took the API to 2.1 GB with
``memory_limit=200MB``. Every allow-listed function whose output can outgrow its inputs is now
checked before it runs, one value against ``query.max_value_bytes`` and the values it makes for the
rows DuckDB evaluates at once against the query's share of ``query.memory_limit``; and one value of
a result is bounded by ``query.max_value_bytes`` too.

Most of these run the real engine on a real sandboxed DuckDB without Redis (a query that reads no
table needs no catalog); one goes through the SQL executor as a user with no privileges, and one
measures the peak memory of a fresh process running the issue's statements.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import pytest
import redis
import sqlglot

from bench.harness import unique
from floe.catalog import Catalog
from floe.catalog.ddl import Query, parse
from floe.errors import SqlError
from floe.keys import Keys
from floe.settings import Settings
from services.auth import Principal
from services.query import QueryEngine
from services.sql import SqlExecutor

pytestmark = pytest.mark.unit

MIB = 1 << 20
LIMIT = 16 * MIB  # query.max_value_bytes' default
ISSUE = "SELECT length(repeat(repeat('x',1000000),1000))"
# 60 x 60 rows: more than DuckDB evaluates at once (2,048), from nothing a user needs privileges for.
ROWS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 60) "
# Each value is about 1 MB, but DuckDB makes 2,048 of them at once.
MANY_ROWS = ROWS + "SELECT sum(length(repeat(to_varchar(a.i * 100 + b.i), 250000))) FROM r a, r b"
SIX = f"WITH c AS (SELECT repeat('x', {6 * MIB}) AS r) "  # a 6 MiB value, under the bound


def engine(**query: Any) -> QueryEngine:
    """An engine with the issue's 200MB memory_limit and these other ``query`` settings, on no Redis."""
    settings = Settings()
    limits = {"memory_limit": "200MB", "threads": 2, "timeout_s": 60.0, **query}
    settings = settings.model_copy(update={"query": settings.query.model_copy(update=limits)})
    return QueryEngine(settings, cast(Any, None), Catalog(cast(Any, None), Keys("unused")), lambda: "")


def allow(_: Any) -> None:
    """Every privilege check passes (these queries read no table)."""


def run(eng: QueryEngine, sql: str) -> list[list[Any]]:
    parsed = parse(sql)
    assert isinstance(parsed, Query)
    return eng.run(parsed.expression, allow).rows


def refusal(eng: QueryEngine, sql: str) -> str:
    with pytest.raises(SqlError) as caught:
        run(eng, sql)
    return caught.value.message


@pytest.fixture(scope="module")
def eng() -> QueryEngine:
    return engine()


def test_the_issues_statement_is_refused_naming_the_setting(eng: QueryEngine) -> None:
    message = refusal(eng, ISSUE)
    assert "REPEAT" in message and "1,000,000,000 bytes" in message, message
    assert "query.max_value_bytes" in message and "FLOE_QUERY__MAX_VALUE_BYTES" in message, message


# One value past the bound, for each class of function whose output can outgrow its inputs: the
# name the message gives, and a statement. Each input is under the bound.
PAST_THE_BOUND = [
    ("REPEAT", f"SELECT length(repeat('ab', {LIMIT // 2 + 1}))"),
    ("SPACE", f"SELECT length(space({LIMIT + 1}))"),
    ("LPAD", f"SELECT length(lpad('x', {LIMIT + 1}, 'ab'))"),
    ("RPAD", f"SELECT length(rpad('x', {LIMIT + 1}))"),
    ("REPLACE", "SELECT length(replace(repeat('a', 100000), 'a', repeat('b', 200)))"),
    ("REGEXP_REPLACE", "SELECT length(regexp_replace(repeat('a', 100000), 'a', repeat('b', 200)))"),
    ("HEX_ENCODE", SIX + "SELECT length(hex_encode(hex_encode(r))) FROM c"),
    (
        "BASE64_ENCODE",  # of BINARY values: DuckDB has no base64 of VARCHAR
        f"WITH c AS (SELECT repeat('x', {10 * MIB}) AS r) "
        "SELECT length(base64_encode(cast(base64_encode(cast(r AS BINARY)) AS BINARY))) FROM c",
    ),
    ("CONCAT", SIX + "SELECT length(concat(r, r, r)) FROM c"),
    ("||", SIX + "SELECT length(r || r || r) FROM c"),
    ("CONCAT_WS", SIX + "SELECT length(concat_ws(',', r, r, r)) FROM c"),
    ("INSERT", SIX + "SELECT length(insert(r || r, 1, 0, r)) FROM c"),
    ("ARRAY_TO_STRING", "SELECT length(array_to_string(split(repeat(',', 100000), ','), repeat('-', 200)))"),
    ("ARRAY_CONSTRUCT", SIX + "SELECT array_size(array_construct(r, r, r)) FROM c"),
    ("OBJECT_CONSTRUCT", SIX + "SELECT object_construct('a', r, 'b', r, 'c', r):a IS NULL FROM c"),
]


@pytest.mark.parametrize(("name", "sql"), PAST_THE_BOUND, ids=[n for n, _ in PAST_THE_BOUND])
def test_each_class_of_function_is_bounded(eng: QueryEngine, name: str, sql: str) -> None:
    message = refusal(eng, sql)
    assert f"{name} would make a value of " in message, message
    assert "query.max_value_bytes" in message, message


def test_values_under_the_bound_made_for_many_rows_at_once_are_bounded_too(eng: QueryEngine) -> None:
    # Each value is about 1 MB, but DuckDB makes 2,048 of them at once: +3.7 GB before.
    message = refusal(eng, MANY_ROWS)
    assert "REPEAT would make " in message and "rows at once" in message, message
    assert "query.memory_limit" in message and "FLOE_QUERY__MEMORY_LIMIT" in message, message


def test_nested_calls_are_each_bounded(eng: QueryEngine) -> None:
    # Each step is under the bound; the outer one is not.
    message = refusal(eng, f"SELECT length(lpad(repeat(repeat('ab', 1024), 1024), {LIMIT + 10}, '-'))")
    assert "LPAD would make a value of " in message, message
    assert run(eng, "SELECT length(repeat(repeat(repeat('ab', 16), 16), 16))") == [[2 * 16**3]]


def test_deep_nesting_compiles_to_sql_of_linear_size(eng: QueryEngine) -> None:
    # CONCAT_WS repeats its arguments when translated for DuckDB: 12 levels made 376 KB of SQL
    # before, and the size doubled with each level.
    for depth in (3, 6, 12):
        nested = "'x'"
        for _ in range(depth):
            nested = f"concat_ws('-', {nested}, repeat('y', 1))"
        sql, _ = eng.compile(sqlglot.parse_one(f"SELECT {nested}", read="snowflake"), {}, allow)
        assert len(sql) < 1000 * depth, (depth, len(sql))
        assert run(eng, f"SELECT {nested}") == [["x" + "-y" * depth]]


# Ordinary uses answer as before: constants, NULLs, and values made row by row.
NORMAL = [
    ("SELECT repeat('ab', 3)", "ababab"),
    ("SELECT repeat('ab', 0)", ""),
    ("SELECT repeat('ab', -2)", ""),
    ("SELECT repeat(NULL, 2)", None),
    ("SELECT repeat('ab', NULL)", None),
    ("SELECT lpad('7', 3, '0')", "007"),
    ("SELECT rpad('7', 3, '0')", "700"),
    ("SELECT lpad('abc', 2, '0')", "ab"),
    ("SELECT lpad('7', 4)", "   7"),
    ("SELECT rpad('ab', 7, 'xyz')", "abxyzxy"),
    ("SELECT lpad(NULL, 3, '0')", None),
    ("SELECT space(2) || '|'", "  |"),
    ("SELECT replace('a.b.c', '.', '--')", "a--b--c"),
    ("SELECT replace('abc', 'b')", "ac"),
    ("SELECT regexp_replace('a1b22', '[0-9]+', '#')", "a#b#"),
    ("SELECT regexp_replace('a1b22', '[0-9]')", "ab"),
    ("SELECT hex_encode('ab')", "6162"),
    ("SELECT base64_encode('ab')", "YWI="),
    ("SELECT concat('a', 'b', 'c')", "abc"),
    ("SELECT concat('a', NULL)", None),
    ("SELECT 'a' || 'b' || 'c'", "abc"),
    ("SELECT 'a' || NULL", None),
    ("SELECT concat_ws('-', 'a', 'b')", "a-b"),
    ("SELECT insert('abcdef', 2, 3, 'X')", "aXef"),
    ("SELECT array_to_string(array_construct(1, 2, 3), ', ')", "1, 2, 3"),
    ("SELECT array_size(array_construct('a', 'b'))", 2),
    ("SELECT object_construct('a', 1, 'b', 'x')", {"a": 1, "b": "x"}),
    ("SELECT lpad(repeat('a', 2), 4, 'b') || rpad(concat('c', 'd'), 3, 'e')", "bbaacde"),
    ("SELECT lpad('é', 4, 'üa')", "üaüé"),
    ("SELECT repeat('x', (SELECT 2))", "xx"),
]


@pytest.mark.parametrize(("sql", "expected"), NORMAL, ids=[s for s, _ in NORMAL])
def test_normal_uses_answer_as_before(eng: QueryEngine, sql: str, expected: Any) -> None:
    assert run(eng, sql) == [[expected]]


def test_values_made_row_by_row_answer_as_before(eng: QueryEngine) -> None:
    rows = run(
        eng,
        ROWS + "SELECT count(*), sum(length(repeat(to_varchar(a.i), 3))),"
        " max(lpad(to_varchar(a.i * b.i), 6, '0')),"
        " min(upper(a.i || '-' || repeat('x', mod(b.i, 4)) || '-' || b.i)),"
        " sum(length(replace(to_varchar(a.i), '1', '<>'))), max(hex_encode(to_varchar(b.i)))"
        " FROM r a, r b",
    )
    numbers = range(1, 61)
    assert rows == [
        [
            3600,
            60 * sum(3 * len(str(i)) for i in numbers),
            max(str(i * j).rjust(6, "0") for i in numbers for j in numbers),
            min(f"{i}-{'X' * (j % 4)}-{j}" for i in numbers for j in numbers),
            60 * sum(len(str(i).replace("1", "<>")) for i in numbers),
            max(str(j).encode().hex().upper() for j in numbers),
        ]
    ]


def test_bounded_calls_still_group_aggregate_and_filter(eng: QueryEngine) -> None:
    grouped = run(
        eng,
        ROWS + "SELECT repeat(to_varchar(mod(i, 3)), 2) AS k, count(*) AS n FROM r "
        "GROUP BY repeat(to_varchar(mod(i, 3)), 2) ORDER BY k",
    )
    assert grouped == [["00", 20], ["11", 20], ["22", 20]]
    assert run(eng, ROWS + "SELECT repeat('x', count(*)) FROM r WHERE i <= 3") == [["xxx"]]
    # A branch no row takes is not refused, though DuckDB tried its constant while optimizing.
    assert run(eng, ROWS + "SELECT count(CASE WHEN i < 0 THEN repeat('x', 1000000000) END) FROM r") == [[0]]
    assert run(eng, ROWS + "SELECT count(*) FROM r WHERE lpad(to_varchar(i), 2, '0') LIKE '0%'") == [[9]]
    windowed = run(
        eng, ROWS + "SELECT repeat('x', row_number() OVER (ORDER BY i)) FROM r WHERE i <= 2 ORDER BY 1"
    )
    assert windowed == [["x"], ["xx"]]
    # Nested calls bind their arguments once (in a lambda): the same expression still groups.
    nested = run(
        eng,
        ROWS + "SELECT repeat(lpad(to_varchar(mod(i, 2)), 2, '-'), 2) AS k, count(*) FROM r "
        "GROUP BY repeat(lpad(to_varchar(mod(i, 2)), 2, '-'), 2) ORDER BY k",
    )
    assert nested == [["-0-0", 30], ["-1-1", 30]]
    joined = run(
        eng,
        ROWS + "SELECT array_to_string(split(repeat(to_varchar(i), 2), '1'), '-') FROM r WHERE i IN (1, 12)",
    )
    assert sorted(row[0] for row in joined) == ["--", "-2-2"]


def test_one_value_of_a_result_is_bounded() -> None:
    small = engine(max_value_bytes=1000)
    message = refusal(small, f"SELECT 1 AS a, upper('{'x' * 1200}') AS big")
    assert "column BIG" in message and "1,200 bytes" in message, message
    assert "query.max_value_bytes" in message and "FLOE_QUERY__MAX_VALUE_BYTES" in message, message
    assert "REPEAT would make a value of 1,200 bytes" in refusal(small, "SELECT repeat('x', 1200)")
    assert run(small, f"SELECT upper('{'x' * 900}')") == [["X" * 900]]


class Pages:
    """A sink that keeps the pages of a streamed result."""

    def __init__(self) -> None:
        self.columns: list[str] = []
        self.rows: list[list[Any]] = []

    def watch(self, stop: Any) -> None:
        pass

    def start(self, columns: list[str]) -> None:
        self.columns = columns

    def page(self, rows: list[list[Any]], timeout_s: float) -> None:
        self.rows.extend(rows)


def test_one_value_of_a_streamed_result_is_bounded() -> None:
    small = engine(max_value_bytes=1000, page_rows=2)
    sql = ROWS + f"SELECT i, CASE WHEN i = 5 THEN upper('{'x' * 1200}') ELSE 'y' END AS v FROM r ORDER BY i"
    parsed = parse(sql)
    assert isinstance(parsed, Query)
    pages = Pages()
    with pytest.raises(SqlError) as caught:
        small.run(parsed.expression, allow, sink=pages)
    assert "column V" in caught.value.message and "query.max_value_bytes" in caught.value.message
    assert pages.rows == [[1, "y"], [2, "y"], [3, "y"], [4, "y"]]  # the pages before it went out


@pytest.mark.integration
def test_a_user_with_no_privileges_is_refused(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    settings = isolated_settings.model_copy(
        update={"query": isolated_settings.query.model_copy(update={"memory_limit": "200MB"})}
    )
    executor = SqlExecutor(settings, redis_client)
    nobody = Principal(unique("nobody").upper(), frozenset({"PUBLIC"}))
    try:
        with pytest.raises(SqlError) as caught:
            executor.execute(ISSUE, nobody)
        assert "query.max_value_bytes" in caught.value.message
        assert executor.execute("SELECT repeat('ab', 3), lpad('7', 3, '0')", nobody).rows == [
            ["ababab", "007"]
        ]
    finally:
        stale = list(redis_client.scan_iter(match=f"{settings.redis.prefix}:*", count=1000))
        if stale:
            redis_client.delete(*stale)


# A fresh process runs the statements of the issue (with memory_limit=200MB) after a warm-up query,
# and reports its peak resident memory (VmHWM) before and after them.
_MEASURE = textwrap.dedent(
    """
    import json, sys
    from tests.security.test_value_bounds import ISSUE, MANY_ROWS, ROWS, engine, run

    def peak():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM"))

    eng = engine()
    run(eng, ROWS + "SELECT count(repeat(to_varchar(i), 100)) FROM r")
    before = peak()
    answers = []
    for sql in [ISSUE, MANY_ROWS]:
        try:
            answers.append(run(eng, sql))
        except Exception as exc:
            answers.append(type(exc).__name__)
    print(json.dumps({"before": before, "after": peak(), "answers": answers}))
    """
)


@pytest.mark.integration
def test_the_process_stays_within_the_memory_limit() -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        check=True,
    )
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    grown = measured["after"] - measured["before"]
    assert measured["answers"] == ["SqlError", "SqlError"], measured
    assert grown < 200_000_000, f"the peak grew by {grown:,} bytes"
