"""A quoted name that holds a dot names its own object, never another one (issue 31, item 1).

Quoted identifiers may hold any character, dots included, and full names were compared as plain
``DB.S.N`` strings. A role with only USAGE and CREATE SCHEMA on a database created schema
``PROD."HR.SALARIES"``; GRANT OWNERSHIP ON ALL TABLES IN SCHEMA of it then took table
``PROD.HR.SALARIES``, which the role could not see, and DROP SCHEMA of it revoked every grant on
that table. With only CREATE DATABASE, ``CREATE DATABASE "PROD.S"`` and its DROP dropped the tables
and stages of schema ``PROD.S``. A name is now three identifiers past the parser, its key spells
each one quoted where needed, and containment compares identifiers (decision 109).
"""

from __future__ import annotations

import pytest

from bench.harness import unique
from floe.catalog import ADMIN_ROLE, Role
from floe.errors import FloeError
from services.auth import Principal
from services.sql import Result, SqlExecutor
from tests.services.conftest import ex as ex  # the fixture, re-exported

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))


def _tables(ex: SqlExecutor) -> set[tuple[str, str, str]]:
    """Every table, as (database, schema, name), as ACCOUNTADMIN's SHOW TABLES lists them."""
    result = ex.execute("SHOW TABLES IN ACCOUNT", ADMIN)
    at = {c: i for i, c in enumerate(result.columns)}
    return {(r[at["database_name"]], r[at["schema_name"]], r[at["name"]]) for r in result.rows}


def _owner(ex: SqlExecutor, table: str) -> str:
    result = ex.execute(
        f"SHOW TABLES LIKE '{table.split('.')[-1]}' IN SCHEMA {table.rsplit('.', 1)[0]}", ADMIN
    )
    (row,) = result.rows
    return str(row[result.columns.index("owner")])


def _attacker(ex: SqlExecutor, database: str) -> tuple[Principal, str]:
    """A role holding only USAGE and CREATE SCHEMA on ``database`` and CREATE DATABASE, and a
    principal acting as it."""
    role = unique("ATTACKER").upper()
    ex.execute(
        f"CREATE ROLE {role}; GRANT USAGE, CREATE SCHEMA ON DATABASE {database} TO ROLE {role}; "
        f"GRANT CREATE DATABASE ON ACCOUNT TO ROLE {role}",
        ADMIN,
    )
    return Principal(unique("mallory").upper(), frozenset({role, "PUBLIC"}), primary=role), role


@pytest.fixture
def victim(ex: SqlExecutor) -> str:
    """Database PROD_x with schema HR and table SALARIES in it, a stage in schema S, and a grant of
    SELECT on the table to a role of its own: none of it the attacker's."""
    database = unique("PROD").upper()
    ex.execute(
        f"CREATE DATABASE {database}; CREATE SCHEMA {database}.HR; CREATE SCHEMA {database}.S; "
        f"CREATE TABLE {database}.HR.SALARIES (amount NUMBER); CREATE TABLE {database}.S.T (a NUMBER); "
        f"CREATE STAGE {database}.S.ST; CREATE ROLE {database}_READER; "
        f"GRANT SELECT ON TABLE {database}.HR.SALARIES TO ROLE {database}_READER",
        ADMIN,
    )
    return database


def _reader_grants(ex: SqlExecutor, database: str) -> dict[str, list[str]]:
    role = ex.catalog.find(Role, f"{database}_READER")
    assert role is not None
    return dict(role.grants)


def test_grant_on_all_tables_in_a_dotted_schema_takes_only_its_own(ex: SqlExecutor, victim: str) -> None:
    mallory, role = _attacker(ex, victim)
    ex.execute(f'CREATE SCHEMA {victim}."HR.SALARIES"', mallory)
    ex.execute(f'GRANT OWNERSHIP ON ALL TABLES IN SCHEMA {victim}."HR.SALARIES" TO ROLE PUBLIC', mallory)
    assert _owner(ex, f"{victim}.HR.SALARIES") == ADMIN_ROLE
    ex.execute(f'GRANT SELECT ON FUTURE TABLES IN SCHEMA {victim}."HR.SALARIES" TO ROLE {role}', mallory)
    ex.execute(f"CREATE TABLE {victim}.HR.NEW (a NUMBER)", ADMIN)
    assert not any("NEW" in key for key in ex.catalog.get(Role, role).grants)


def test_dropping_a_dotted_schema_leaves_the_grants_of_the_schema_it_spells(
    ex: SqlExecutor, victim: str
) -> None:
    mallory, _ = _attacker(ex, victim)
    before = _reader_grants(ex, victim)
    assert before == {f"TABLE {victim}.HR.SALARIES": ["SELECT"]}
    ex.execute(f'CREATE SCHEMA {victim}."HR.SALARIES"', mallory)
    ex.execute(f'DROP SCHEMA {victim}."HR.SALARIES"', mallory)
    assert _reader_grants(ex, victim) == before
    assert (victim, "HR", "SALARIES") in _tables(ex)


def test_a_dotted_database_is_not_the_schema_it_spells(ex: SqlExecutor, victim: str) -> None:
    mallory, _ = _attacker(ex, victim)
    before = {t for t in _tables(ex) if t[0] == victim}
    ex.execute(f'CREATE DATABASE "{victim}.S"', mallory)
    shown = ex.execute(f'SHOW SCHEMAS IN DATABASE "{victim}.S"', mallory)
    assert sorted(r[shown.columns.index("name")] for r in shown.rows) == ["PUBLIC"]
    ex.execute(f'GRANT OWNERSHIP ON ALL TABLES IN DATABASE "{victim}.S" TO ROLE PUBLIC', mallory)
    ex.execute(f'GRANT OWNERSHIP ON ALL STAGES IN DATABASE "{victim}.S" TO ROLE PUBLIC', mallory)
    assert _owner(ex, f"{victim}.S.T") == ADMIN_ROLE
    ex.execute(f'DROP DATABASE "{victim}.S"', mallory)
    assert {t for t in _tables(ex) if t[0] == victim} == before
    stages = ex.execute(f"SHOW STAGES IN SCHEMA {victim}.S", ADMIN)
    assert [r[stages.columns.index("name")] for r in stages.rows] == ["ST"]


def test_the_attacker_cannot_reach_the_victim_through_its_dotted_names(ex: SqlExecutor, victim: str) -> None:
    mallory, _ = _attacker(ex, victim)
    ex.execute(f'CREATE SCHEMA {victim}."HR.SALARIES"', mallory)
    with pytest.raises(FloeError, match="does not exist or not authorized"):
        ex.execute(f"SELECT * FROM {victim}.HR.SALARIES", mallory)


def test_dotted_and_quoted_names_round_trip_through_show_and_desc(ex: SqlExecutor) -> None:
    database = unique("d.b").lower()
    names = ["a.b", 'q"uote', "with space", "Mixed.Case"]
    quoted = {n: '"' + n.replace('"', '""') + '"' for n in names}
    ex.execute(f'CREATE DATABASE "{database}"', ADMIN)
    for name in names:
        ex.execute(f'CREATE SCHEMA "{database}".{quoted[name]}', ADMIN)
        ex.execute(f'CREATE TABLE "{database}".{quoted[name]}.{quoted[name]} (x NUMBER)', ADMIN)
    shown = _tables(ex)
    assert {t for t in shown if t[0] == database} == {(database, n, n) for n in names}
    for name in names:
        desc: Result = ex.execute(f'DESC TABLE "{database}".{quoted[name]}.{quoted[name]}', ADMIN)
        assert [r[0] for r in desc.rows] == ["X"]
    ex.execute(f'DROP SCHEMA "{database}"."a.b"', ADMIN)
    assert {t for t in _tables(ex) if t[0] == database} == {(database, n, n) for n in names if n != "a.b"}
