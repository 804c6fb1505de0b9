"""Blob pruning by min/max statistics: which WHERE terms `_predicates` keeps, what `may_match`
decides, and, through the query engine over in-memory blobs and a real DuckDB, that pruning reads
fewer blobs yet returns exactly the rows an unpruned run returns. `floe sql --profile` is tested in
tests/front/test_cli.py."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import pyarrow as pa
import pytest
import redis
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

import services.query as query_module
from floe.blobs import column_stats
from floe.catalog import Column, Table
from floe.settings import Settings
from floe.types import arrow_schema
from services.query import QueryEngine, _predicates, may_match

pytestmark = pytest.mark.unit

D = decimal.Decimal
UTC = dt.UTC

TABLE = Table(
    name="FLOE.PUBLIC.T",
    columns=[
        Column(name="ID", type="NUMBER", precision=38, scale=0),  # decimal128: string statistics
        Column(name="N", type="NUMBER", precision=10, scale=0),  # int64: integer statistics
        Column(name="AMOUNT", type="NUMBER", precision=10, scale=2),
        Column(name="X", type="FLOAT"),
        Column(name="D", type="DATE"),
        Column(name="TS", type="TIMESTAMP_NTZ"),
        Column(name="TZ", type="TIMESTAMP_TZ"),
        Column(name="S", type="VARCHAR"),
        Column(name="V", type="VARIANT"),
        Column(name="B", type="BOOLEAN"),
    ],
)


def predicates(sql: str) -> list[tuple[str, str, Any]]:
    """`_predicates` of a query over T, with identifiers normalized as `QueryEngine.compile` does."""
    query = normalize_identifiers(sqlglot.parse_one(sql, read="snowflake"), dialect="snowflake")
    source = query.args["from_"].this
    assert isinstance(source, exp.Table)
    return _predicates(query, source, TABLE)


# --- _predicates ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        # The bug: a bare comparison arrives wrapped in exp.Where and used to yield nothing.
        ("id > 5", [("ID", ">", D(5))]),
        ("id = 5 AND n <= 7", [("ID", "=", D(5)), ("N", "<=", D(7))]),
        ("5 < id", [("ID", ">", D(5))]),  # literal first: the operator is flipped
        ("t.id >= 2", [("ID", ">=", D(2))]),  # qualified by the table's name
        ("(id < 9)", [("ID", "<", D(9))]),
        ("(id > 1 AND (n < 3)) AND (s = 'a')", [("ID", ">", D(1)), ("N", "<", D(3)), ("S", "=", "a")]),
        ("id BETWEEN 10 AND 20", [("ID", ">=", D(10)), ("ID", "<=", D(20))]),
        ("id = -3", [("ID", "=", D(-3))]),
        ("amount <= 10.25", [("AMOUNT", "<=", D("10.25"))]),
        ("x <= 2.5 AND x = 3 AND x < 1e2", [("X", "<=", 2.5), ("X", "=", 3.0), ("X", "<", 100.0)]),
        ("d = '2026-01-11'", [("D", "=", dt.date(2026, 1, 11))]),
        ("d < DATE '2026-01-05'", [("D", "<", dt.date(2026, 1, 5))]),
        ("d >= TO_DATE('2026-01-05')", [("D", ">=", dt.date(2026, 1, 5))]),
        ("ts >= '2026-01-03 10:00:00'", [("TS", ">=", dt.datetime(2026, 1, 3, 10))]),
        ("ts < '2026-01-03T10:00:00.5'", [("TS", "<", dt.datetime(2026, 1, 3, 10, 0, 0, 500000))]),
        ("ts <= '2026-01-03'::TIMESTAMP", [("TS", "<=", dt.datetime(2026, 1, 3))]),
        (
            "tz > '2026-01-03 11:30:00+02:00'",
            [("TZ", ">", dt.datetime(2026, 1, 3, 11, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))))],
        ),
        (
            "tz = '2026-01-03 09:30'",
            [("TZ", "=", dt.datetime(2026, 1, 3, 9, 30, tzinfo=UTC))],
        ),  # session zone
        ("s >= 'k03' AND s < 'k04'", [("S", ">=", "k03"), ("S", "<", "k04")]),
        ('"id" = 4', [("ID", "=", D(4))]),  # DuckDB binds "id" to ID (case-insensitive), and so do we
    ],
)
def test_terms_statistics_can_decide_are_kept(where: str, expected: list[tuple[str, str, Any]]) -> None:
    assert predicates(f"SELECT * FROM t WHERE {where}") == expected


@pytest.mark.parametrize(
    "where",
    [
        "id = 1 OR id = 50",  # a term under OR prunes nothing
        "(id = 1 OR n = 2)",
        "NOT id = 3",
        "NOT id BETWEEN 1 AND 5",
        "id BETWEEN SYMMETRIC 20 AND 10",
        "id <> 3",
        "id IN (1, 2)",
        "id IS NULL",
        "id = NULL",
        "id = n",  # two columns
        "id + 1 = 5",
        "id > (SELECT 1)",
        "u.id = 5",  # a qualifier that is not this table
        "public.t.id = 5",
        "nope = 5",  # not a column of T (an alias, say)
        "x > 1 AND x >= 2",  # FLOAT: NaN sorts above everything and min/max do not see it
        "x = 0.1",  # not a double exactly: DuckDB's rounding is not ours to guess
        "id = 2.5e1",  # exponent: DuckDB compares it as a DOUBLE
        "id = 1234567890123456789",  # 19 digits: past what DuckDB compares exactly
        "id = '5'",  # string literal against a number
        "s = 5",  # number against a string column (DuckDB refuses it anyway)
        "d = '2026-1-5'",  # DuckDB reads it as a date; we read ISO only
        "d = '2026-01-05 10:00:00'",  # DuckDB truncates it to a date
        "d = '2026-02-30'",
        "d < '2026-01-05'::TIMESTAMP",  # a cast to another type than the column's
        "ts = '2026-01-05 10:00:00+02'",  # an offset on a TIMESTAMP_NTZ
        "ts = '2026-01-05 10:00:00.1234567'",
        "d = -'2026-01-05'",
        "v = 'a'",  # VARIANT
        "b = TRUE",
        "s = TRY_CAST('a' AS VARCHAR)",
    ],
)
def test_terms_statistics_cannot_decide_are_left_out(where: str) -> None:
    assert predicates(f"SELECT * FROM t WHERE {where}") == []


def test_only_and_terms_that_qualify_are_kept_beside_others() -> None:
    got = predicates("SELECT * FROM t WHERE (id = 1 OR id = 9) AND n > 4 AND x > 3 AND s = 'z'")
    assert got == [("N", ">", D(4)), ("S", "=", "z")]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM t AS x(n, id) WHERE id = 5",  # the alias's column list renames T's columns
        "SELECT * FROM t SAMPLE (10 ROWS) WHERE id = 5",  # sampled before WHERE
        "SELECT * FROM t AT(TIMESTAMP => '2026-01-01'::TIMESTAMP) WHERE id = 5",
        "SELECT id FROM t START WITH id = 1 CONNECT BY PRIOR id = n WHERE id = 5",
        "SELECT s AS id FROM t WHERE id = 5",  # ID is also an output name for another value
        "SELECT n + 1 AS id FROM t WHERE id = 5",
        "SELECT * FROM t AS x WHERE t.id = 5",  # aliased: T no longer names it
    ],
)
def test_queries_where_the_where_clause_is_not_all_that_filters_are_not_pruned(sql: str) -> None:
    assert predicates(sql) == []


def test_an_alias_qualifier_and_plain_outputs_still_prune() -> None:
    assert predicates("SELECT x.id, t2 FROM t AS x WHERE x.id = 5") == [("ID", "=", D(5))]
    assert predicates("SELECT id AS id, n FROM t WHERE id = 5") == [("ID", "=", D(5))]
    assert predicates("SELECT COUNT(*) FROM t WHERE id = 5 GROUP BY n HAVING COUNT(*) > 1") == [
        ("ID", "=", D(5))
    ]


# --- may_match --------------------------------------------------------------------------------------

STATS: dict[str, dict[str, Any]] = {
    "ID": {"min": "10", "max": "19", "null_count": 0},  # decimal128 in the manifest: strings
    "N": {"min": 10, "max": 19, "null_count": 0},
    "X": {"min": 10.5, "max": 19.5, "null_count": 0},
    "D": {"min": "2026-01-11", "max": "2026-01-20", "null_count": 1},
    "TS": {"min": "2026-01-01T10:00:00", "max": "2026-01-01T19:00:00", "null_count": 0},
    "TZ": {"min": "2026-01-01T10:00:00+00:00", "max": "2026-01-01T19:00:00+00:00", "null_count": 0},
    "S": {"min": "k010", "max": "k019", "null_count": 0, "max_length": 4},
    "EMPTY": {"null_count": 10},
}


@pytest.mark.parametrize(
    ("predicate", "match"),
    [
        (("ID", "=", D(15)), True),
        (("ID", "=", D(20)), False),
        (("ID", "=", D(9)), False),
        (("ID", ">", D(19)), False),
        (("ID", ">", D("18.5")), True),
        (("ID", ">=", D(19)), True),
        (("ID", "<", D(10)), False),
        (("ID", "<=", D(10)), True),
        (("ID", "<=", D("9.99")), False),
        (("N", "=", D(19)), True),
        (("N", ">", D(19)), False),
        (("X", "<=", 10.5), True),
        (("X", "<", 10.5), False),
        (("D", "=", dt.date(2026, 1, 10)), False),
        (("D", ">=", dt.date(2026, 1, 20)), True),
        (("TS", ">", dt.datetime(2026, 1, 1, 19)), False),
        (("TS", ">=", dt.datetime(2026, 1, 1, 19)), True),
        # 21:00+02:00 is 19:00 UTC, the blob's last instant.
        (("TZ", ">", dt.datetime(2026, 1, 1, 21, tzinfo=dt.timezone(dt.timedelta(hours=2)))), False),
        (("TZ", ">=", dt.datetime(2026, 1, 1, 21, tzinfo=dt.timezone(dt.timedelta(hours=2)))), True),
        (("S", "=", "k02"), False),
        (("S", "<", "k010"), False),
        (("S", ">", "k01"), True),
        # No statistics, or statistics of another type than the literal: never pruned.
        (("EMPTY", "=", D(1)), True),
        (("MISSING", "=", D(1)), True),
        (("S", "=", D(1)), True),
        (("D", "=", dt.datetime(2026, 1, 1)), True),
        (("TS", "=", dt.datetime(2020, 1, 1, tzinfo=UTC)), True),  # aware literal, naive statistics
        (("TZ", "=", dt.datetime(2020, 1, 1)), True),
        (("ID", "=", 99.0), True),
    ],
)
def test_may_match(predicate: tuple[str, str, Any], match: bool) -> None:
    assert may_match(STATS, [predicate]) is match


def test_every_predicate_must_be_possible() -> None:
    assert may_match(STATS, [("ID", ">=", D(10)), ("N", "<", D(20))])
    assert not may_match(STATS, [("ID", ">=", D(10)), ("N", "<", D(5))])


def test_nan_statistics_prune_nothing() -> None:
    nan = json.loads(json.dumps({"X": column_stats(pa.table({"X": [float("nan")]}))["X"]}))
    assert all(may_match(nan, [("X", op, 1.0)]) for op in ("=", "<", "<=", ">", ">="))


def test_unparseable_statistics_prune_nothing() -> None:
    bad = {"ID": {"min": "abc", "max": "19"}, "D": {"min": "yesterday", "max": "2026-01-01"}}
    assert may_match(bad, [("ID", "=", D(50))]) and may_match(bad, [("D", "=", dt.date(2027, 1, 1))])
    assert may_match({"N": {"min": True, "max": True}}, [("N", "=", D(5))])


# --- through the query engine ---------------------------------------------------------------------

BLOBS = 6
ROWS = 10
DAY0 = dt.date(2026, 1, 1)
T0 = dt.datetime(2026, 1, 1)


def blob(b: int) -> pa.Table:
    """Blob ``b``: ids b*10 .. b*10+9, every other column following the id; the last blob's last X
    is NaN (above every number in DuckDB, invisible to min/max), blob 4 has NULLs."""
    ids = range(b * ROWS, (b + 1) * ROWS)
    x = [i + 0.5 for i in ids]
    if b == BLOBS - 1:
        x[-1] = float("nan")
    rows = {
        "ID": [D(i) for i in ids],
        "N": list(ids),
        "AMOUNT": [D(i) + D("0.25") for i in ids],
        "X": x,
        "D": [None if b == 4 and i % 2 else DAY0 + dt.timedelta(days=i) for i in ids],
        "TS": [T0 + dt.timedelta(hours=i) for i in ids],
        "TZ": [(T0 + dt.timedelta(hours=i)).replace(tzinfo=UTC) for i in ids],
        "S": [None if b == 4 else f"k{i:03d}" for i in ids],
        "V": [json.dumps({"i": i}) for i in ids],
        "B": [i % 2 == 0 for i in ids],
    }
    # Without offset columns, as blobs written before TIMESTAMP_TZ kept its offsets: still read.
    return pa.table(rows, schema=arrow_schema(TABLE, offsets=False))


class FakeCatalog:
    """The one table T."""

    def find(self, model: type, name: str) -> Table | None:
        return TABLE if name == TABLE.name else None


class FakeCrypto:
    """Statistics as the manifest holds them: `column_stats` through JSON."""

    def __init__(self, blobs: dict[str, pa.Table]) -> None:
        self.stats = {name: json.loads(json.dumps(column_stats(t))) for name, t in blobs.items()}

    def open_stats(self, entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return self.stats[entry["name"]]


class MemoryEngine(QueryEngine):
    """The query engine over blobs held in memory (its cache), so no Redis or S3 is needed."""

    def __init__(self) -> None:
        settings = Settings()
        super().__init__(settings, redis.Redis(), FakeCatalog(), lambda: "arn")  # type: ignore[arg-type]
        self.blobs = {f"blob-{b}": blob(b) for b in range(BLOBS)}
        self.crypto = FakeCrypto(self.blobs)
        for name, data in self.blobs.items():

            def load(table: pa.Table = data) -> pa.Table:
                return table

            self.cache.get(name, load)

    def manifest(self, table: Table) -> list[dict[str, Any]]:
        return [{"name": name} for name in self.blobs]

    def _blob_reader(self) -> Any:
        return None, self.crypto


@pytest.fixture(scope="module")
def engine() -> MemoryEngine:
    return MemoryEngine()


def run(engine: MemoryEngine, sql: str) -> tuple[list[list[Any]], dict[str, Any]]:
    # Pruning is the subject here, not privileges: every read is allowed.
    result = engine.run(sqlglot.parse_one(sql, read="snowflake"), lambda need: None)
    return sorted(result.rows, key=repr), result.stats


CASES = [
    # (WHERE / query, blobs read of 6)
    ("id = 23", 1),
    ("id BETWEEN 15 AND 24", 2),
    ("t.id >= 20 AND t.id < 30", 1),
    ("(id > 50)", 1),
    ("25 > id AND id > 18", 2),
    ("n = 42", 1),
    ("amount <= 10.25", 2),
    ("amount = 10.250", 1),
    ("d = '2026-01-11'", 1),
    ("d < DATE '2026-01-05'", 1),
    ("ts >= '2026-01-03 10:00:00'", 1),
    ("tz > '2026-01-03 11:30:00+02:00'", 1),
    ("s = 'k033'", 2),  # blob 4's S is all NULL: no min/max, so it is read (it could be skipped)
    ("x <= 5.5", 1),
    ("s = 'k033' AND id > 100", 0),
    ("id < -1", 0),
    ("id > -1", 6),
    # Not prunable: every blob is read, and the answer is still right.
    ("id = 1 OR id = 55", 6),
    ("NOT id = 3", 6),
    ("x > 100", 6),  # the NaN row matches, although the NaN blob's max is 58.5
    ("x >= 58.5", 6),
    ("id = 2.5e1", 6),
    ("id = '23'", 6),
    ("id IN (1, 2)", 6),
    ("ts < DATE '2026-01-02'", 6),
    ("d = '2026-1-11'", 6),
    ("d IS NULL", 6),
]


@pytest.mark.parametrize(("where", "read"), CASES)
def test_pruned_queries_read_fewer_blobs_and_answer_the_same(
    engine: MemoryEngine, monkeypatch: pytest.MonkeyPatch, where: str, read: int
) -> None:
    sql = f"SELECT id, n, x, d, s FROM t WHERE {where}"
    rows, stats = run(engine, sql)
    # Each blob is one row group (a table put into the cache by hand), so row groups count as blobs.
    assert stats == {
        "blobs_total": BLOBS,
        "blobs_scanned": read,
        "row_groups_total": read,
        "row_groups_scanned": read,
    }
    monkeypatch.setattr(query_module, "may_match", lambda stats, predicates: True)
    every, unpruned = run(engine, sql)
    assert unpruned == {
        "blobs_total": BLOBS,
        "blobs_scanned": BLOBS,
        "row_groups_total": BLOBS,
        "row_groups_scanned": BLOBS,
    }
    assert repr(rows) == repr(every)  # repr: NaN == NaN


def test_answers_of_a_pruned_query(engine: MemoryEngine) -> None:
    rows, stats = run(engine, "SELECT id FROM t WHERE id BETWEEN 15 AND 24 ORDER BY id")
    assert [r[0] for r in rows] == list(range(15, 25)) and stats["blobs_scanned"] == 2
    rows, _ = run(engine, "SELECT id FROM t WHERE x > 100")
    assert rows == [[59]]


@pytest.mark.parametrize(
    ("sql", "total"),
    [
        ("SELECT id FROM (SELECT * FROM t) WHERE id = 23", 6),
        ("WITH c AS (SELECT * FROM t) SELECT id FROM c WHERE id = 23", 6),
        ("SELECT a.id FROM t a JOIN t b ON a.id = b.id WHERE a.id = 23", 12),
        ("SELECT id FROM t WHERE id = 23 AND id IN (SELECT id FROM t)", 12),
        ("SELECT id FROM t WHERE id = 23 UNION ALL SELECT 1", 6),
        ("SELECT s AS id FROM t WHERE id = 23", 6),
        ("SELECT c1 FROM t AS x(c1) WHERE c1 = 23", 6),
    ],
)
def test_other_shapes_read_every_blob(engine: MemoryEngine, sql: str, total: int) -> None:
    _, stats = run(engine, sql)
    assert stats == {
        "blobs_total": total,
        "blobs_scanned": total,
        "row_groups_total": total,
        "row_groups_scanned": total,
    }
