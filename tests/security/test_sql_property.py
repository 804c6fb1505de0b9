"""Property: random SQL built from DuckDB's own table and scalar functions, with file paths and
setting names as arguments, never returns a file's content, a setting's value or the environment.

Runs the query engine in process (the API's executor on the real Redis, isolated prefix), where
many examples fit in a test run, and then fewer examples through the running API's SQL endpoint.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe import sandbox
from floe.catalog import ADMIN_ROLE
from floe.errors import SqlError
from floe.settings import Settings
from services.auth import Principal
from services.sql import SqlExecutor
from tests.security.attacks.caller import SqlCaller

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
SECRET = "floe-property-secret-7f3a9c"


def _functions() -> tuple[list[str], list[str]]:
    """DuckDB's table and scalar function names, from a plain (not sandboxed) connection."""
    con = duckdb.connect()
    try:
        found = con.execute(
            "SELECT DISTINCT function_name, function_type FROM duckdb_functions() "
            "WHERE function_type IN ('table', 'table_macro', 'scalar', 'macro') "
            "AND regexp_full_match(function_name, '[a-z_][a-z0-9_]*') ORDER BY 1"
        ).fetchall()
    finally:
        con.close()
    tables = [n for n, kind in found if kind.startswith("table")]
    scalars = [n for n, kind in found if not kind.startswith("table")]
    return tables, scalars


TABLE_FUNCTIONS, SCALAR_FUNCTIONS = _functions()
SETTING_NAMES = ["memory_limit", "threads", "home_directory", "temp_directory", "extension_directory"]


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("property") / "secret.txt"
    path.write_text(f"{SECRET}\n")
    return path


@pytest.fixture(scope="module")
def ex(services: Settings, redis_client: redis.Redis, secret_file: Path) -> Iterator[SqlExecutor]:
    """An executor on its own prefix, with a table T the generated SQL may also name."""
    from bench.harness import unique

    prefix = unique("prop")
    settings = services.model_copy(
        update={
            "redis": services.redis.model_copy(update={"prefix": prefix}),
            "query": services.query.model_copy(update={"timeout_s": 2.0, "max_result_rows": 50}),
        }
    )
    executor = SqlExecutor(settings, redis_client)
    executor.execute("CREATE TABLE t (a INT, b VARCHAR)", ADMIN)
    yield executor
    stale = list(redis_client.scan_iter(match=f"{prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)


def _forbidden(secret_file: Path) -> list[str]:
    """What must never come back: file contents, distinctive setting values, environment values."""
    marks = [SECRET, "root:x:0:0"]
    con = sandbox.connect(threads=2, memory_limit="2GB")
    try:
        values = [str(v) for (v,) in con.execute("SELECT value FROM duckdb_settings()").fetchall()]
    finally:
        con.close()
    marks += [v for v in values if len(v) >= 12 and "/" in v]
    marks += [
        v for k, v in os.environ.items() if len(v) >= 16 and ("KEY" in k or "SECRET" in k or k == "HOME")
    ]
    return marks


@st.composite
def attacks(draw: st.DrawFn, secret: str) -> str:
    arg = st.sampled_from(
        [f"'{secret}'", "'/etc/passwd'", "'/proc/self/environ'", "'/etc/*'", "'*'"]
        + [f"'{s}'" for s in SETTING_NAMES]
        + ["1", "a", "b"]
    )

    def call(names: list[str]) -> str:
        name = draw(st.sampled_from(names))
        args = draw(st.lists(arg, min_size=0, max_size=2))
        return f"{name}({', '.join(args)})"

    table_call = call(TABLE_FUNCTIONS)
    scalar_call = call(SCALAR_FUNCTIONS)
    shape = draw(st.integers(0, 5))
    if shape == 0:
        return f"SELECT * FROM {table_call}"
    if shape == 1:
        return f"SELECT * FROM t, LATERAL {table_call}"
    if shape == 2:
        return f"SELECT {scalar_call} AS x FROM t"
    if shape == 3:
        return f"SELECT a FROM t WHERE {scalar_call} IS NOT NULL"
    if shape == 4:
        return f"SELECT {scalar_call} AS x"
    return f"SELECT * FROM (SELECT * FROM {table_call}) AS s WHERE {scalar_call} IS NULL"


def test_collected_function_names() -> None:
    assert "read_text" in TABLE_FUNCTIONS and "range" in TABLE_FUNCTIONS
    assert "current_setting" in SCALAR_FUNCTIONS and "read_blob" in TABLE_FUNCTIONS


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_file_content_or_setting_comes_back(
    ex: SqlExecutor, secret_file: Path, data: st.DataObject
) -> None:
    sql = data.draw(attacks(str(secret_file)))
    forbidden = [m for m in _forbidden_marks(secret_file) if m not in sql]
    try:
        answer = json.dumps(ex.execute(sql, ADMIN).records(), default=str)
    except SqlError as exc:
        answer = exc.message
    leaked = [m for m in forbidden if m in answer]
    assert not leaked, (sql, leaked)


_MARKS: dict[Path, list[str]] = {}


def _forbidden_marks(secret_file: Path) -> list[str]:
    if secret_file not in _MARKS:
        _MARKS[secret_file] = _forbidden(secret_file)
    return _MARKS[secret_file]


def test_the_property_can_fail(secret_file: Path) -> None:
    """Outside the engine, the same kind of SQL does read the file: the property checks a real risk."""
    con = duckdb.connect()
    try:
        (content,) = con.execute(f"SELECT content FROM read_text('{secret_file}')").fetchone() or ("",)
    finally:
        con.close()
    assert SECRET in content and SECRET in _forbidden_marks(secret_file)


@pytest.mark.e2e
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_query_endpoint_returns_no_file_content_or_setting(
    admin: SqlCaller, secret_file: Path, data: st.DataObject
) -> None:
    """The same property through the running API's SQL endpoint, as the administrator."""
    sql = data.draw(attacks(str(secret_file)))
    forbidden = [m for m in _forbidden_marks(secret_file) if m not in sql]
    status, body = admin.sql(sql)
    assert status in (200, 404, 422), (sql, status, body)
    leaked = [m for m in forbidden if m in json.dumps(body, default=str)]
    assert not leaked, (sql, leaked)
