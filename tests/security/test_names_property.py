"""Property: names with dots, quotes, blanks and mixed case are three identifiers, not a string
(issue 31, item 1; decision 109).

First the key functions alone: ``join_parts`` then ``split_parts`` gives the parts back, and
``inside`` is "the parts start with the container's parts". Then the SQL executor on the real
Redis: Hypothesis builds databases, schemas and tables whose names are drawn from a few fragments
chosen so that joined with dots they collide (database ``A`` with schema ``B.A`` and database
``A.B`` with schema ``A`` both spell ``A.B.A``), then runs GRANT and REVOKE on ALL tables in a
database or schema, FUTURE grants, CREATE TABLE, and DROP SCHEMA and DROP DATABASE. After every
statement, the tables SHOW TABLES lists and the tables SHOW GRANTS says the role holds SELECT on
must be those of a model that keeps names as tuples. SHOW's names are read back with sqlglot's
parser, not with Floe's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from bench.harness import unique
from floe.catalog import ADMIN_ROLE
from floe.catalog.names import inside, join_parts, split_parts
from floe.errors import FloeError
from services.auth import Principal
from services.sql import SqlExecutor
from tests.services.conftest import ex as ex  # the fixture, re-exported

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))

FRAGMENTS = ["A", "B", "A.B", "B.A", "a", "A B", 'A"B', "A.B.A", "(A)"]
"""Identifier texts whose dotted joins collide, with a quote, a blank, lower case and parentheses."""

PART = st.text(alphabet=st.sampled_from(list('Ab.". (_)$é')), min_size=1, max_size=6)


# ------------------------------------------------------------------------- the key functions


@pytest.mark.unit
@given(st.lists(PART, min_size=1, max_size=3))
def test_a_key_gives_its_parts_back(parts: list[str]) -> None:
    assert split_parts(join_parts(*parts)) == tuple(parts)


@pytest.mark.unit
@given(st.lists(PART, min_size=1, max_size=3), st.lists(PART, min_size=1, max_size=3))
def test_inside_compares_parts(a: list[str], b: list[str]) -> None:
    assert inside(join_parts(*a), join_parts(*b)) == (len(a) > len(b) and a[: len(b)] == b)
    assert (join_parts(*a) == join_parts(*b)) == (a == b)


# ------------------------------------------------------------------------ the model and SQL

Path = tuple[str, ...]


def _q(part: str) -> str:
    """An identifier as SQL writes it, always quoted."""
    return '"' + part.replace('"', '""') + '"'


def _sql(path: Path) -> str:
    return ".".join(_q(p) for p in path)


@dataclass
class Model:
    """What the catalog holds, by tuples: tables, schemas, databases, SELECT grants, futures."""

    databases: set[Path] = field(default_factory=set)
    schemas: set[Path] = field(default_factory=set)
    tables: set[Path] = field(default_factory=set)
    selects: set[Path] = field(default_factory=set)
    futures: set[Path] = field(default_factory=set)

    def exists(self, path: Path) -> bool:
        return path in (self.databases if len(path) == 1 else self.schemas)

    def drop(self, path: Path) -> None:
        def keep(p: Path) -> bool:
            return p[: len(path)] != path

        self.databases = {p for p in self.databases if keep(p)}
        self.schemas = {p for p in self.schemas if keep(p)}
        self.tables = {p for p in self.tables if keep(p)}
        self.selects = {p for p in self.selects if keep(p)}
        self.futures = {p for p in self.futures if keep(p)}


@dataclass(frozen=True)
class Op:
    verb: str
    path: Path


def _world(prefix: str) -> st.SearchStrategy[list[Path]]:
    """Tables (database, schema, name) with names from FRAGMENTS, databases prefixed."""
    frag = st.sampled_from(FRAGMENTS)
    table = st.tuples(frag.map(lambda f: prefix + f), frag, frag)
    return st.lists(table, min_size=1, max_size=6, unique=True)


def _ops(prefix: str) -> st.SearchStrategy[list[Op]]:
    frag = st.sampled_from(FRAGMENTS)
    db = frag.map(lambda f: (prefix + f,))
    schema = st.tuples(frag.map(lambda f: prefix + f), frag)
    table = st.tuples(frag.map(lambda f: prefix + f), frag, frag)
    op = st.one_of(
        st.builds(Op, st.sampled_from(["grant", "revoke", "drop"]), st.one_of(db, schema)),
        st.builds(Op, st.just("future"), schema),
        st.builds(Op, st.just("create"), table),
    )
    return st.lists(op, min_size=1, max_size=6)


def _show_paths(ex: SqlExecutor, sql: str, prefix: str, *, columns: tuple[str, ...] = ()) -> set[Path]:
    """The (database, schema, name) of what ``sql`` lists under our prefix: from the name columns
    given, or else from the ``name`` column read with sqlglot's parser."""
    result = ex.execute(sql, ADMIN)
    at = {c: i for i, c in enumerate(result.columns)}
    found: set[Path] = set()
    for row in result.rows:
        if columns:
            path = tuple(str(row[at[c]]) for c in columns)
        else:
            if row[at["granted_on"]] != "TABLE":
                continue
            table = sqlglot.parse_one(str(row[at["name"]]), into=exp.Table, read="snowflake")
            path = (table.catalog, table.db, table.name)
        if path[0].startswith(prefix):
            found.add(path)
    return found


@pytest.mark.integration
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_containment_drops_and_bulk_grants_follow_the_parts(ex: SqlExecutor, data: st.DataObject) -> None:
    prefix = unique("N").upper()  # no dot: fragments alone make the collisions
    role = f"{prefix}R"
    ex.execute(f"CREATE ROLE {role}", ADMIN)
    model = Model()
    for path in data.draw(_world(prefix), label="tables"):
        if not model.exists(path[:1]):
            ex.execute(f"CREATE DATABASE {_sql(path[:1])}", ADMIN)
            model.databases.add(path[:1])
            model.schemas.add((path[0], "PUBLIC"))
        if not model.exists(path[:2]):
            ex.execute(f"CREATE SCHEMA {_sql(path[:2])}", ADMIN)
            model.schemas.add(path[:2])
        ex.execute(f"CREATE TABLE {_sql(path)} (x NUMBER)", ADMIN)
        model.tables.add(path)
    for op in data.draw(_ops(prefix), label="statements"):
        kind = "DATABASE" if len(op.path) == 1 else "SCHEMA"
        if op.verb == "create":
            sql = f"CREATE TABLE {_sql(op.path)} (x NUMBER)"
            ok = model.exists(op.path[:2]) and op.path not in model.tables
        elif op.verb == "future":
            sql = f"GRANT SELECT ON FUTURE TABLES IN SCHEMA {_sql(op.path)} TO ROLE {role}"
            ok = model.exists(op.path)
        elif op.verb == "drop":
            sql = f"DROP {kind} {_sql(op.path)}"
            ok = model.exists(op.path)
        else:
            word = "GRANT" if op.verb == "grant" else "REVOKE"
            to = "TO" if op.verb == "grant" else "FROM"
            sql = f"{word} SELECT ON ALL TABLES IN {kind} {_sql(op.path)} {to} ROLE {role}"
            ok = model.exists(op.path)
        try:
            ex.execute(sql, ADMIN)
        except FloeError:
            assert not ok, sql
            continue
        assert ok, sql
        if op.verb == "create":
            model.tables.add(op.path)
            if op.path[:2] in model.futures:
                model.selects.add(op.path)
        elif op.verb == "future":
            model.futures.add(op.path)
        elif op.verb == "drop":
            model.drop(op.path)
        else:
            under = {t for t in model.tables if t[: len(op.path)] == op.path}
            model.selects = model.selects | under if op.verb == "grant" else model.selects - under
        assert (
            _show_paths(
                ex, "SHOW TABLES IN ACCOUNT", prefix, columns=("database_name", "schema_name", "name")
            )
            == model.tables
        ), sql
        assert _show_paths(ex, f"SHOW GRANTS TO ROLE {role}", prefix) == model.selects, sql
