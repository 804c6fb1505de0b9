"""Queries over BINARY, TIME, TIMESTAMP_LTZ and TIMESTAMP_TZ columns: how results show them (a
TIMESTAMP_TZ in its own offset), comparison and ordering by instant, pruning, and blobs written
before TIMESTAMP_TZ kept its offsets."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pytest
import redis
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from floe.blobs import column_stats
from floe.catalog import Column, Table
from floe.settings import Settings
from floe.types import arrow_schema, offset_column
from services.query import QueryEngine, Result, _predicates, _read_columns
from services.tz_results import ResultShape, plan_offsets

pytestmark = pytest.mark.unit

UTC = dt.UTC

TABLE = Table(
    name="FLOE.PUBLIC.T",
    columns=[
        Column(name="ID", type="NUMBER", precision=9, scale=0),
        Column(name="Z", type="TIMESTAMP_TZ"),
        Column(name="L", type="TIMESTAMP_LTZ"),
        Column(name="TM", type="TIME"),
        Column(name="B", type="BINARY"),
    ],
)
OTHER = Table(
    name="FLOE.PUBLIC.U",
    columns=[Column(name="ID", type="NUMBER", precision=9, scale=0), Column(name="Z", type="TIMESTAMP_TZ")],
)


def _instant(hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime(2024, 1, 2, hour, minute, tzinfo=UTC)


# Row 1 is 16:00 at +01:00 (15:00 UTC), row 2 is 14:00 at -03:00 (17:00 UTC), row 3 is 15:00 UTC: by
# instant the order is 1 = 3 < 2, by wall clock it would be 2 < 3 < 1.
ROWS = {
    "ID": [1, 2, 3],
    "Z": [_instant(15), _instant(17), _instant(15)],
    offset_column("Z"): [60, -180, 0],
    "L": [_instant(15), None, _instant(9, 30)],
    "TM": [dt.time(12, 34, 56), dt.time(0, 0, 0, 500000), None],
    "B": [b"HELP", b"\x00\xff", None],
}


def new_blob() -> pa.Table:
    return pa.table(ROWS, schema=arrow_schema(TABLE))


def old_blob() -> pa.Table:
    """A blob written before offsets were kept: the TIMESTAMP_TZ column's instants only."""
    rows = {"ID": [4], "Z": [_instant(8)], "L": [None], "TM": [None], "B": [None]}
    return pa.table(rows, schema=arrow_schema(TABLE, offsets=False))


class FakeCatalog:
    """The tables T and U."""

    def find(self, model: type, name: str) -> Table | None:
        return {t.name: t for t in (TABLE, OTHER)}.get(name)


class FakeCrypto:
    """Statistics as the manifest holds them: `column_stats` through JSON."""

    def __init__(self, blobs: dict[str, pa.Table]) -> None:
        self.stats: dict[str, dict[str, dict[str, Any]]] = {
            name: json.loads(json.dumps(column_stats(t))) for name, t in blobs.items()
        }

    def open_stats(self, entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return self.stats[entry["name"]]


class MemoryEngine(QueryEngine):
    """The query engine over blobs held in its cache: no Redis or S3."""

    def __init__(self, blobs: dict[str, dict[str, pa.Table]]) -> None:
        super().__init__(Settings(), redis.Redis(), FakeCatalog(), lambda: "arn")  # type: ignore[arg-type]
        self.tables = blobs
        every = {name: data for by_name in blobs.values() for name, data in by_name.items()}
        self.crypto = FakeCrypto(every)
        for name, data in every.items():

            def load(table: pa.Table = data) -> pa.Table:
                return table

            self.cache.get(name, load)

    def manifest(self, table: Table) -> list[dict[str, Any]]:
        return [{"name": name} for name in self.tables[table.name]]

    def _blob_reader(self) -> Any:
        return None, self.crypto


@pytest.fixture(scope="module")
def engine() -> MemoryEngine:
    u_rows = {"ID": [1], "Z": [_instant(15)], offset_column("Z"): [-60]}
    return MemoryEngine(
        {
            TABLE.name: {"new": new_blob(), "old": old_blob()},
            OTHER.name: {"u": pa.table(u_rows, schema=arrow_schema(OTHER))},
        }
    )


def run(engine: MemoryEngine, sql: str) -> Result:
    return engine.run(sqlglot.parse_one(sql, read="snowflake"), lambda need: None)


def test_star_shows_each_type_as_snowflakes_clients_do(engine: MemoryEngine) -> None:
    result = run(engine, "SELECT * FROM t ORDER BY id")
    assert result.columns == ["ID", "Z", "L", "TM", "B"]  # no offset column
    assert result.rows == [
        [1, "2024-01-02 16:00:00+01:00", "2024-01-02 15:00:00+00:00", "12:34:56", "48454C50"],
        [2, "2024-01-02 14:00:00-03:00", None, "00:00:00.500000", "00FF"],
        [3, "2024-01-02 15:00:00+00:00", "2024-01-02 09:30:00+00:00", None, None],
        [4, "2024-01-02 08:00:00+00:00", None, None, None],  # an older blob: UTC
    ]


def test_timestamp_tz_orders_and_compares_by_instant(engine: MemoryEngine) -> None:
    result = run(engine, "SELECT id, z FROM t WHERE z >= '2024-01-02 15:00:00+00:00' ORDER BY z DESC, id")
    assert result.rows == [
        [2, "2024-01-02 14:00:00-03:00"],
        [1, "2024-01-02 16:00:00+01:00"],
        [3, "2024-01-02 15:00:00+00:00"],
    ]
    same = run(engine, "SELECT id FROM t WHERE z = '2024-01-02 16:00:00+01:00' ORDER BY id")
    assert same.rows == [[1], [3]]  # the same instant in another offset is equal


def test_positions_in_order_by_are_those_of_the_projections(engine: MemoryEngine) -> None:
    """The hidden offset projections come last, so ORDER BY 2 is still the second column."""
    result = run(engine, "SELECT *, id * 10 AS tens FROM t ORDER BY 6 DESC LIMIT 1")
    assert result.columns == ["ID", "Z", "L", "TM", "B", "TENS"]
    assert result.rows[0][0] == 4 and result.rows[0][5] == 40
    result = run(engine, "SELECT z, id FROM t ORDER BY 2 LIMIT 2")
    assert result.rows == [["2024-01-02 16:00:00+01:00", 1], ["2024-01-02 14:00:00-03:00", 2]]


def test_a_group_of_one_instant_shows_one_of_its_offsets(engine: MemoryEngine) -> None:
    result = run(engine, "SELECT z, COUNT(*) AS n FROM t GROUP BY z ORDER BY n DESC, z")
    assert result.columns == ["Z", "N"]
    assert result.rows[0][1] == 2
    assert result.rows[0][0] in ("2024-01-02 16:00:00+01:00", "2024-01-02 15:00:00+00:00")
    assert [r[1] for r in result.rows[1:]] == [1, 1]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT MAX(z) AS z FROM t WHERE id = 2",
        "SELECT z FROM (SELECT * FROM t) WHERE id = 2",
        "WITH c AS (SELECT * FROM t) SELECT z FROM c WHERE id = 2",
        "SELECT DISTINCT z FROM t WHERE id = 2",
        "SELECT z FROM t WHERE id = 2 UNION ALL SELECT z FROM t WHERE id = 2 LIMIT 1",
    ],
)
def test_elsewhere_a_timestamp_tz_shows_its_instant_in_utc(engine: MemoryEngine, sql: str) -> None:
    result = run(engine, sql)
    assert result.columns == ["Z"]
    assert result.rows == [["2024-01-02 17:00:00+00:00"]]


def test_joined_tables_each_show_their_offsets(engine: MemoryEngine) -> None:
    result = run(engine, "SELECT t.z, u.z AS uz, u.* FROM t JOIN u ON t.id = u.id")
    assert result.columns == ["Z", "UZ", "ID", "Z"]
    assert result.rows == [
        ["2024-01-02 16:00:00+01:00", "2024-01-02 14:00:00-01:00", 1, "2024-01-02 14:00:00-01:00"]
    ]


def test_binary_and_time_compare_and_convert(engine: MemoryEngine) -> None:
    result = run(engine, "SELECT id, HEX_ENCODE(b) AS h FROM t WHERE tm > '12:00' ORDER BY id")
    assert result.rows == [[1, "48454C50"]]


def test_plan_offsets_leaves_queries_without_timestamp_tz_alone() -> None:
    query = sqlglot.parse_one("SELECT id, l FROM t", read="snowflake")
    table = query.args["from_"].this
    before = query.sql()
    shape, reads = plan_offsets(query, {id(table): TABLE})
    assert (shape, reads, query.sql()) == (ResultShape(), {}, before)


def test_result_shape_drops_the_hidden_columns_and_applies_offsets() -> None:
    shape = ResultShape(offsets=[(0, 2)], hidden=1)
    assert shape.names(["Z", "ID", "__floe_offset_0"]) == ["Z", "ID"]
    row = shape.row([_instant(15), 7, 330], lambda v: v.isoformat() if isinstance(v, dt.datetime) else v)
    assert row == ["2024-01-02T20:30:00+05:30", 7]


def _predicates_of(sql: str) -> list[tuple[str, str, Any]]:
    query = normalize_identifiers(sqlglot.parse_one(sql, read="snowflake"), dialect="snowflake")
    source = query.args["from_"].this
    assert isinstance(source, exp.Table)
    return _predicates(query, source, TABLE)


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("tm >= '12:00'", [("TM", ">=", dt.time(12, 0))]),
        ("tm < '01:02:03.5'::TIME", [("TM", "<", dt.time(1, 2, 3, 500000))]),
        (
            "l > '2024-01-02 10:00:00+02:00'",
            [("L", ">", dt.datetime(2024, 1, 2, 10, tzinfo=dt.timezone(dt.timedelta(hours=2))))],
        ),
        ("l = '2024-01-02 10:00'", [("L", "=", dt.datetime(2024, 1, 2, 10, tzinfo=UTC))]),
        ("b = 'AA'", []),  # BINARY: no statistics to compare with
        ("tm = '1:2'", []),  # not the ISO form
    ],
)
def test_time_and_ltz_literals_prune(where: str, expected: list[tuple[str, str, Any]]) -> None:
    assert _predicates_of(f"SELECT * FROM t WHERE {where}") == expected


def test_time_and_ltz_statistics_skip_blobs(engine: MemoryEngine) -> None:
    # The older blob's TM and L are all NULL: no min or max, so it is read; the other is skipped.
    result = run(engine, "SELECT id FROM t WHERE tm > '13:00'")
    assert result.rows == [] and (result.stats["blobs_total"], result.stats["blobs_scanned"]) == (2, 1)
    result = run(engine, "SELECT id FROM t WHERE l < '2024-01-02 09:30:00'")
    assert result.rows == [] and (result.stats["blobs_total"], result.stats["blobs_scanned"]) == (2, 1)
    result = run(engine, "SELECT id FROM t WHERE l <= '2024-01-02 09:30:00'")
    assert result.rows == [[3]]


def test_a_query_naming_no_column_reads_one_every_blob_has(engine: MemoryEngine) -> None:
    """Not an offset column, narrow as it is: older blobs lack it."""
    query = normalize_identifiers(sqlglot.parse_one("SELECT COUNT(*) FROM t WHERE 1 = 1", read="snowflake"))
    source = query.args["from_"].this
    assert _read_columns(query, source, TABLE, whole=False) == ["ID"]
    assert run(engine, "SELECT COUNT(*) AS n FROM t WHERE 1 = 1").rows == [[4]]
