"""Queries with bounded memory (issue 15): tables reach DuckDB as streams of row groups.

On the real Redis and LocalStack: blobs are written with ``floe.blobs.write_blob`` into a fresh
tables bucket and committed into the table's manifest under its pipe, as the registrar does, so the
query engine reads them exactly as it reads loaded ones. Checked here:

* answers are those of the engine as it was (every blob read whole and concatenated) for joins,
  self-joins, subqueries, CTEs read twice, a recursive CTE, GROUP BY, LIMIT and ORDER BY;
* row groups are skipped by their Parquet statistics, and counted beside the blobs;
* ``SELECT COUNT(*)`` alone is answered from the manifest without opening a blob;
* the cache keeps small blobs within its byte budget and never a large one;
* memory: over a table whose decoded size is many times ``query.memory_limit``, the cache budget
  and the bound asserted, COUNT / GROUP BY / LIMIT / top-N queries keep the Arrow memory the engine
  holds at once (``QueryEngine.meter``, pyarrow's pool) under a few row groups.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis
import sqlglot
from pyarrow import fs as pafs
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

import services.query as query_module
from bench.harness import unique
from floe.aws import client as aws_client
from floe.aws import pyarrow_s3_kwargs
from floe.blobs import (
    BlobIdentityError,
    OpenedBlob,
    crypto_from_settings,
    open_blob,
    read_blob,
    row_group_rows,
    write_blob,
)
from floe.catalog import ADMIN_ROLE, Column, Pipe, Table
from floe.catalog.ddl import Defaults, qualify
from floe.errors import SqlError
from floe.keys import Keys
from floe.settings import Settings
from floe.types import arrow_schema
from services.auth import Principal
from services.query import (
    BlobCache,
    BlobScan,
    CachedBlob,
    Predicate,
    QueryEngine,
    _counts_rows_only,
    _duck_message,
    _read_columns,
    _whole_rows,
    held_bytes,
)
from services.sql import SqlExecutor
from tests.conftest import TEST_INTEGRATION

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
D = decimal.Decimal
MB = 1 << 20
COLUMNS_SQL = "(id INT NOT NULL, grp VARCHAR, amount NUMBER(12,2), day DATE, pad VARCHAR)"
TABLE = Table(
    name="FLOE.PUBLIC.T",
    columns=[
        Column(name="ID", type="NUMBER", precision=38, scale=0, nullable=False),
        Column(name="GRP", type="VARCHAR"),
        Column(name="AMOUNT", type="NUMBER", precision=12, scale=2),
        Column(name="DAY", type="DATE"),
        Column(name="PAD", type="VARCHAR"),
    ],
)
DAY0 = dt.date(2026, 1, 1)


def blob_rows(b: int, rows: int, pad: int) -> pa.Table:
    """Blob ``b``'s rows: ids b*rows .. (b+1)*rows-1, the other columns following the id."""
    ids = range(b * rows, (b + 1) * rows)
    return pa.table(
        {
            "ID": list(ids),
            "GRP": [f"g{i % 7}" for i in ids],
            "AMOUNT": [D(i % 997) + D("0.25") for i in ids],
            "DAY": [DAY0 + dt.timedelta(days=i % 60) for i in ids],
            "PAD": [f"{i:08d}" * (pad // 8) for i in ids],
        },
        schema=arrow_schema(TABLE),
    )


# --- a table of blobs on LocalStack and Redis -----------------------------------------------------


def engine_settings(base: Settings, tmp: Path, bucket: str) -> Settings:
    """``base`` (the shared services) with a key prefix and tables bucket of its own."""
    return base.model_copy(
        update={
            "state_dir": str(tmp / "state"),
            "redis": base.redis.model_copy(update={"prefix": unique("qm")}),
            "pipeline": base.pipeline.model_copy(update={"tables_bucket": bucket}),
            "auth": base.auth.model_copy(update={"admin_key_file": str(tmp / "state" / "admin_rsa_key.p8")}),
        },
        deep=True,
    )


@dataclass
class Loaded:
    """A table T of blobs, one per entry of ``blobs``, committed under its pipe."""

    settings: Settings
    table: Table
    pipe: Pipe
    blobs: list[pa.Table]
    row_group_bytes: int

    @property
    def data(self) -> pa.Table:
        """Every row, in manifest order."""
        return pa.concat_tables(self.blobs)

    @property
    def groups_per_blob(self) -> int:
        """Row groups the writer made of each blob (all have the same rows)."""
        rows = int(self.blobs[0].num_rows)
        return math.ceil(rows / row_group_rows(self.blobs[0], self.row_group_bytes))

    def executor(self, client: redis.Redis[bytes], **api: Any) -> SqlExecutor:
        """A fresh executor (an empty cache) on this table, with other ``api`` / ``query__`` settings."""
        settings = self.settings
        query = {k.removeprefix("query__"): v for k, v in api.items() if k.startswith("query__")}
        api = {k: v for k, v in api.items() if not k.startswith("query__")}
        settings = settings.model_copy(
            update={
                "api": settings.api.model_copy(update=api),
                "query": settings.query.model_copy(update=query),
            }
        )
        return SqlExecutor(settings, client)


def load(
    settings: Settings, client: redis.Redis[bytes], s3: Any, blobs: list[pa.Table], row_group_bytes: int
) -> Loaded:
    """Create T and its pipe, write ``blobs`` as encrypted blobs and commit them to T's manifest."""
    ex = SqlExecutor(settings, client)
    for statement in (
        TEST_INTEGRATION,
        "CREATE STAGE st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests",
        f"CREATE TABLE t {COLUMNS_SQL}",
        "CREATE PIPE p AUTO_INGEST = FALSE AS COPY INTO t FROM @st",
    ):
        ex.execute(statement, ADMIN)
    defaults = Defaults(settings.database, settings.schema_name)
    table = ex.catalog.get(Table, str(qualify("t", defaults)))
    pipe = ex.catalog.get(Pipe, str(qualify("p", defaults)))
    assert arrow_schema(table) == arrow_schema(TABLE)  # the blobs are written in T's own types
    bucket = settings.pipeline.tables_bucket
    s3.create_bucket(Bucket=bucket)
    fs = pafs.S3FileSystem(**pyarrow_s3_kwargs(settings.aws))
    enc = settings.encryption
    crypto = crypto_from_settings(enc.master_key_id, enc.resolve_master_key())
    keys = Keys(settings.redis.prefix)
    for i, data in enumerate(blobs):
        name = f"FLOE/PUBLIC/T/{table.id}/{pipe.id}/b{i:03d}.parquet"
        meta = write_blob(
            data,
            fs,
            f"{bucket}/{name}",
            crypto,
            name=name,
            files=[f"f{i}.csv"],
            row_group_bytes=row_group_bytes,
        )
        client.hset(keys.blobs(pipe.id), name, json.dumps(meta.to_dict()))
    return Loaded(settings, table, pipe, blobs, row_group_bytes)


def clean(settings: Settings, client: redis.Redis[bytes], s3: Any) -> None:
    """Remove the keys and the tables bucket ``load`` made."""
    stale = list(client.scan_iter(match=f"{settings.redis.prefix}:*", count=1000))
    if stale:
        client.delete(*stale)
    bucket = settings.pipeline.tables_bucket
    objects = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    if objects:
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": o["Key"]} for o in objects]})
    s3.delete_bucket(Bucket=bucket)


BLOBS = 6
ROWS = 1000
SMALL_GROUPS = 16 * 1024  # bytes per row group: several groups per blob


@pytest.fixture(scope="module")
def six(
    services: Settings, redis_client: redis.Redis[bytes], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Loaded]:
    """T as 6 blobs of 1,000 rows (ids 0 .. 5,999 in order), each in several row groups."""
    s3 = aws_client(services.aws, "s3")
    settings = engine_settings(services, tmp_path_factory.mktemp("six"), unique("qmtables"))
    try:
        yield load(settings, redis_client, s3, [blob_rows(b, ROWS, 16) for b in range(BLOBS)], SMALL_GROUPS)
    finally:
        clean(settings, redis_client, s3)


class Materializing(QueryEngine):
    """The engine as it was before streaming: every blob read whole, the pieces concatenated."""

    def scan(
        self, table: Table, predicates: list[Predicate], columns: list[str], stats: dict[str, int]
    ) -> Any:
        fs, crypto = self._blob_reader()
        schema = arrow_schema(table)
        bucket = self.settings.pipeline.tables_bucket
        pieces = [
            read_blob(fs, f"{bucket}/{b['name']}", crypto, name=b["name"]).cast(schema)
            for b in self.manifest(table)
        ]
        return pa.concat_tables(pieces) if pieces else schema.empty_table()


def run(ex: SqlExecutor, sql: str) -> tuple[list[list[Any]], dict[str, Any]]:
    result = ex.execute(sql, ADMIN)
    return result.rows, result.stats


def before(
    loaded: Loaded, client: redis.Redis[bytes], sql: str, monkeypatch: pytest.MonkeyPatch
) -> list[list[Any]]:
    """The answer of the engine as it was: blobs read whole, no COUNT(*) from the manifest."""
    ex = loaded.executor(client)
    ex.engine = Materializing(ex.settings, client, ex.catalog, ex.queue_arn)
    with monkeypatch.context() as m:
        m.setattr(query_module, "_counts_rows_only", lambda query, source: False)
        return run(ex, sql)[0]


ANSWERS = [
    "SELECT grp, COUNT(*) AS n, SUM(amount) AS total, MIN(id) AS lo, MAX(pad) AS hi FROM t"
    " GROUP BY grp ORDER BY grp",
    "SELECT id, grp, amount FROM t ORDER BY amount DESC, id LIMIT 7",
    "SELECT * FROM t ORDER BY id LIMIT 5",
    "SELECT t.* FROM t WHERE id BETWEEN 2990 AND 3010 ORDER BY id",
    "SELECT id, day FROM t WHERE day = '2026-02-01' AND id < 4000 ORDER BY id",
    # A self-join, then the same table in a scalar and an IN subquery: a scan each.
    "SELECT a.grp, COUNT(*) AS n FROM t a JOIN t b ON a.id = b.id + 1 GROUP BY a.grp ORDER BY a.grp",
    "SELECT COUNT(*) AS n FROM t WHERE amount > (SELECT AVG(amount) FROM t)",
    "SELECT id FROM t WHERE id IN (SELECT id + 7 FROM t WHERE grp = 'g3') AND id < 500 ORDER BY id",
    # One reference that DuckDB scans more than once: a CTE joined with itself, a recursive CTE.
    "WITH c AS (SELECT grp, SUM(amount) AS s FROM t GROUP BY grp)"
    " SELECT x.grp, y.s FROM c x JOIN c y ON x.grp = y.grp",
    "WITH RECURSIVE r (n) AS (SELECT 1 UNION ALL"
    " SELECT n + 1 FROM r WHERE n < (SELECT COUNT(*) FROM t WHERE id < 4)) SELECT MAX(n) AS m FROM r",
    "SELECT grp, id FROM t QUALIFY ROW_NUMBER() OVER (PARTITION BY grp ORDER BY id DESC) = 1 ORDER BY grp",
    "SELECT x.id FROM (SELECT * FROM t WHERE grp = 'g1') AS x ORDER BY x.id DESC LIMIT 3",
    "SELECT id FROM t NATURAL JOIN t AS u ORDER BY id LIMIT 3",
    "SELECT DISTINCT grp FROM t",
    "SELECT COUNT(*) AS n FROM t WHERE id >= 4500",
    "SELECT COUNT(DISTINCT grp) AS n FROM t",
    "SELECT COUNT(*) AS n FROM t LIMIT 0",
    "SELECT COUNT(*) FROM t",
    "SELECT COUNT(*), COUNT(*) AS again FROM t",
    "SELECT COUNT(*) AS n FROM t AS x",
]


@pytest.mark.parametrize("sql", ANSWERS)
def test_answers_are_those_of_the_materializing_engine(
    six: Loaded, redis_client: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    expected = before(six, redis_client, sql, monkeypatch)
    # Streamed from S3 (nothing cached), then read into the cache and answered from it.
    streamed = six.executor(redis_client, query_cache_blob_bytes=0)
    cached = six.executor(redis_client)
    for how, ex in (("streamed", streamed), ("caching", cached), ("cached", cached)):
        got = run(ex, sql)[0]
        if " ORDER BY " not in sql:
            got, expected = sorted(got, key=repr), sorted(expected, key=repr)
        assert got == expected, (sql, how)


def test_row_groups_are_pruned_by_parquet_statistics_and_counted(
    six: Loaded, redis_client: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = six.groups_per_blob
    assert groups >= 4
    sql = "SELECT id FROM t WHERE id BETWEEN 2990 AND 3010 ORDER BY id"
    ex = six.executor(redis_client, query_cache_blob_bytes=0)
    rows, stats = run(ex, sql)
    assert [r[0] for r in rows] == list(range(2990, 3011))
    # Blobs 2 and 3 by the manifest; in each, the one group at the boundary by Parquet's statistics.
    assert stats == {
        "blobs_total": BLOBS,
        "blobs_scanned": 2,
        "row_groups_total": 2 * groups,
        "row_groups_scanned": 2,
    }
    # Row groups of a cached blob are pruned by the statistics kept with it, and counted alike.
    cached = six.executor(redis_client)
    assert run(cached, sql) == (rows, stats)
    assert run(cached, sql) == (rows, stats) and len(cached.engine.cache) == 2
    monkeypatch.setattr(query_module, "may_match", lambda stats, predicates: True)
    every, unpruned = run(ex, sql)
    assert every == rows
    assert unpruned == {
        "blobs_total": BLOBS,
        "blobs_scanned": BLOBS,
        "row_groups_total": BLOBS * groups,
        "row_groups_scanned": BLOBS * groups,
    }


class Opens:
    """Counts the blobs the engine opens (each open is the object's first S3 reads)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        real = open_blob

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.names.append(kwargs["name"])
            return real(*args, **kwargs)

        monkeypatch.setattr(query_module, "open_blob", counting)


def test_count_star_alone_reads_no_blob(
    six: Loaded, redis_client: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    opens = Opens(monkeypatch)
    ex = six.executor(redis_client)
    rows, stats = run(ex, "SELECT COUNT(*) AS n FROM t")
    assert rows == [[BLOBS * ROWS]] and opens.names == []
    assert stats == {"blobs_total": BLOBS, "blobs_scanned": 0, "row_groups_total": 0, "row_groups_scanned": 0}
    assert ex.execute("SELECT COUNT(*) FROM t", ADMIN).columns == ["COUNT(*)"]
    # Anything that changes the count reads the blobs.
    rows, stats = run(ex, "SELECT COUNT(*) AS n FROM t WHERE id >= 0")
    assert rows == [[BLOBS * ROWS]] and len(opens.names) == BLOBS and stats["blobs_scanned"] == BLOBS


def test_a_manifest_entry_without_a_row_count_is_counted_by_reading(
    six: Loaded, redis_client: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    ex = six.executor(redis_client)
    real = QueryEngine.manifest

    def no_rows(self: QueryEngine, table: Table) -> list[dict[str, Any]]:
        return [{k: v for k, v in b.items() if k != "rows"} for b in real(self, table)]

    monkeypatch.setattr(QueryEngine, "manifest", no_rows)
    rows, stats = run(ex, "SELECT COUNT(*) AS n FROM t")
    assert rows == [[BLOBS * ROWS]] and stats["blobs_scanned"] == BLOBS


def test_small_blobs_are_cached_within_the_budget_large_ones_never(
    six: Loaded, redis_client: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    sql = "SELECT grp, SUM(amount) AS s FROM t GROUP BY grp"
    opens = Opens(monkeypatch)
    ex = six.executor(redis_client)
    first = sorted(run(ex, sql)[0])
    assert len(opens.names) == BLOBS and len(ex.engine.cache) == BLOBS
    one = held_bytes(ex.engine.cache.peek(opens.names[0]) or pa.table({}))
    assert one > 0
    assert sorted(run(ex, sql)[0]) == first and len(opens.names) == BLOBS  # all from memory

    # A budget of two blobs and a half: the least recently used are evicted, the bound holds.
    opens.names.clear()
    tight = six.executor(redis_client, query_cache_bytes=int(one * 2.5))
    assert sorted(run(tight, sql)[0]) == first
    cache = tight.engine.cache
    assert len(cache) == 2 and cache.bytes <= cache.budget
    names = sorted(opens.names)  # manifest order, the order the scan reads (and caches) them in
    assert [n for n in names if cache.peek(n) is not None] == names[-2:]

    # Blobs above query_cache_blob_bytes are streamed every time and never held.
    opens.names.clear()
    streamed = six.executor(redis_client, query_cache_blob_bytes=one // 2)
    for _ in range(2):
        assert sorted(run(streamed, sql)[0]) == first
    assert (
        len(opens.names) == 2 * BLOBS and len(streamed.engine.cache) == 0 and streamed.engine.cache.bytes == 0
    )


def test_a_swapped_blob_is_refused_before_the_query_runs(
    services: Settings,
    redis_client: redis.Redis[bytes],
    s3: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = engine_settings(services, tmp_path, unique("qmtables"))
    try:
        loaded = load(settings, redis_client, s3, [blob_rows(b, 10, 8) for b in range(2)], SMALL_GROUPS)
        keys = Keys(settings.redis.prefix)
        first, second = sorted(k.decode() for k in redis_client.hkeys(keys.blobs(loaded.pipe.id)))
        bucket = settings.pipeline.tables_bucket
        s3.copy_object(Bucket=bucket, Key=second, CopySource={"Bucket": bucket, "Key": first})
        ran: list[str] = []
        monkeypatch.setattr(BlobScan, "__arrow_c_stream__", lambda self, schema=None: ran.append("scan"))
        with pytest.raises(BlobIdentityError, match="does not decrypt under its name"):
            loaded.executor(redis_client).execute("SELECT * FROM t LIMIT 1", ADMIN)
        assert ran == []
    finally:
        clean(settings, redis_client, s3)


def test_a_blob_that_fails_mid_scan_fails_the_query_with_its_cause(
    six: Loaded, redis_client: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Any, group: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
        raise OSError("When reading information for key 'x': AWS Error NETWORK_CONNECTION")
        yield  # a generator, as the real one

    monkeypatch.setattr(OpenedBlob, "batches", broken)
    ex = six.executor(redis_client, query_cache_blob_bytes=0)
    with pytest.raises(SqlError) as info:
        ex.execute("SELECT SUM(amount) FROM t", ADMIN)
    message = str(info.value)
    assert "reading a table failed" in message and "NETWORK_CONNECTION" in message, message
    assert "Traceback" not in message and "__floe_t" not in message


# --- memory ---------------------------------------------------------------------------------------

BIG_BLOBS = 24
BIG_ROWS = 50_000
BIG_GROUPS = 512 * 1024  # bytes per row group
HELD_BOUND = 8 * MB
"""What a scan may hold at once: a few row groups and batches in flight (the engine's, DuckDB's)."""


@pytest.fixture(scope="module")
def big(
    services: Settings, redis_client: redis.Redis[bytes], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Loaded]:
    """T as 24 blobs of 50,000 rows: about 4.5 MB each decoded, 110 MB in all."""
    s3 = aws_client(services.aws, "s3")
    settings = engine_settings(services, tmp_path_factory.mktemp("big"), unique("qmtables"))
    try:
        blobs = [blob_rows(b, BIG_ROWS, 48) for b in range(BIG_BLOBS)]
        yield load(settings, redis_client, s3, blobs, BIG_GROUPS)
    finally:
        clean(settings, redis_client, s3)


MEMORY_QUERIES = [
    ("SELECT COUNT(*) AS n, MAX(pad) AS hi FROM t WHERE amount >= 0", 1),
    ("SELECT grp, COUNT(*) AS n, SUM(amount) AS total FROM t GROUP BY grp ORDER BY grp", 7),
    ("SELECT * FROM t LIMIT 10", 10),
    ("SELECT * FROM t ORDER BY amount DESC, id LIMIT 10", 10),
]


@pytest.mark.parametrize(("sql", "answers"), MEMORY_QUERIES)
def test_a_query_holds_a_few_row_groups_not_the_table(
    big: Loaded, redis_client: redis.Redis[bytes], sql: str, answers: int
) -> None:
    decoded = big.data.get_total_buffer_size()
    memory_limit = 32 * MB
    assert decoded > 2 * memory_limit and decoded > 6 * HELD_BOUND
    ex = big.executor(
        redis_client,
        query_cache_bytes=2 * MB,
        query_cache_blob_bytes=1 * MB,  # below a blob's size: every blob is streamed
        query__memory_limit=f"{memory_limit // MB}MB",
    )
    engine = ex.engine
    engine.meter.reset()
    base = engine.meter.peak
    rows, stats = run(ex, sql)
    held = engine.meter.peak - base
    print(
        f"\n{sql}: held at most {held / MB:.1f} MB of Arrow memory at once; "
        f"the table is {decoded / MB:.0f} MB decoded"
    )
    assert len(rows) == answers
    assert stats["blobs_scanned"] == BIG_BLOBS
    assert held < HELD_BOUND, f"{held / MB:.1f} MB held at once"
    assert engine.cache.bytes == 0


def test_answers_over_the_large_table(big: Loaded, redis_client: redis.Redis[bytes]) -> None:
    ex = big.executor(redis_client, query_cache_blob_bytes=0, query__memory_limit="32MB")
    n = BIG_BLOBS * BIG_ROWS
    assert run(ex, "SELECT COUNT(*) AS n, MAX(id) AS hi FROM t WHERE amount >= 0")[0] == [[n, n - 1]]
    groups = run(ex, "SELECT grp, COUNT(*) AS n FROM t GROUP BY grp ORDER BY grp")[0]
    assert groups == [[f"g{g}", len(range(g, n, 7))] for g in range(7)]
    top = run(ex, "SELECT id FROM t ORDER BY amount DESC, id LIMIT 3")[0]
    assert top == [[996], [1993], [2990]]


def test_the_meter_sees_what_is_held(big: Loaded, redis_client: redis.Redis[bytes]) -> None:
    """The same measure over a cache that keeps every blob: it grows with the table, so the bound
    above is a real one."""
    decoded = big.data.get_total_buffer_size()
    ex = big.executor(redis_client, query_cache_bytes=4 * decoded, query_cache_blob_bytes=decoded)
    ex.engine.meter.reset()
    base = ex.engine.meter.peak
    run(ex, "SELECT grp, COUNT(*) AS n FROM t GROUP BY grp")
    assert len(ex.engine.cache) == BIG_BLOBS
    assert ex.engine.meter.peak - base > 0.8 * decoded


# --- pure logic -----------------------------------------------------------------------------------


def entry(rows: int, width: int = 100) -> pa.Table:
    return pa.table({"s": ["x" * width] * rows})


@pytest.mark.unit
def test_the_cache_counts_held_bytes_and_keeps_its_budget() -> None:
    a, b, c = entry(100), entry(100), entry(100)
    size = held_bytes(a)
    assert size >= 100 * 100
    cache = BlobCache(int(size * 2.5))
    assert cache.put("a", a) and cache.put("b", b)
    assert cache.peek("a") is a  # a is now the most recently used
    assert cache.put("c", c)
    assert cache.peek("b") is None and cache.peek("a") is a and cache.peek("c") is c
    assert cache.bytes == 2 * size and len(cache) == 2
    # Putting a name again replaces its entry and its count.
    assert cache.put("a", entry(100))
    assert cache.bytes == 2 * size and len(cache) == 2
    # An entry larger than the budget is not kept (and no longer stands for its name).
    assert not cache.put("a", entry(1000))
    assert cache.peek("a") is None and cache.bytes == size and cache.bytes <= cache.budget
    # get loads on a miss and keeps what fits.
    loads: list[str] = []

    def load() -> pa.Table:
        loads.append("d")
        return entry(100)

    assert cache.get("d", load) is cache.get("d", load)
    assert loads == ["d"]


@pytest.mark.unit
def test_held_bytes_are_the_buffers_an_entry_keeps_alive() -> None:
    whole = entry(1000)
    part = whole.slice(0, 10)
    assert part.nbytes < whole.nbytes
    assert held_bytes(part) == held_bytes(whole)  # a slice keeps its whole buffers alive
    blob = CachedBlob(groups=(whole,), stats=({},), nbytes=held_bytes(whole))
    assert held_bytes(blob) == held_bytes(whole)


def parsed(sql: str) -> exp.Expr:
    return normalize_identifiers(sqlglot.parse_one(sql, read="snowflake"), dialect="snowflake")


def source_of(query: exp.Expr) -> exp.Table:
    table = query.find(exp.Table)
    assert table is not None
    return table


@pytest.mark.unit
@pytest.mark.parametrize(
    ("sql", "columns"),
    [
        ("SELECT id FROM t WHERE grp = 'a'", ["ID", "GRP"]),
        ('SELECT "id", Amount FROM t', ["ID", "AMOUNT"]),  # DuckDB binds names case-insensitively
        ("SELECT COUNT(*) FROM t WHERE 1 = 1", ["DAY"]),  # none named: the narrowest, for the count
        ("SELECT * FROM t", ["ID", "GRP", "AMOUNT", "DAY", "PAD"]),
        ("SELECT t.* FROM t", ["ID", "GRP", "AMOUNT", "DAY", "PAD"]),
        ("SELECT COUNT(*) FROM (SELECT * FROM t)", ["ID", "GRP", "AMOUNT", "DAY", "PAD"]),
        ("SELECT id FROM t NATURAL JOIN u", ["ID", "GRP", "AMOUNT", "DAY", "PAD"]),
        ("SELECT t FROM t", ["ID", "GRP", "AMOUNT", "DAY", "PAD"]),  # DuckDB: the whole row
        ("SELECT x FROM t AS x", ["ID", "GRP", "AMOUNT", "DAY", "PAD"]),
        ("SELECT a FROM t AS x(a, b)", ["ID", "GRP", "AMOUNT", "DAY", "PAD"]),  # positional renames
        ("SELECT u.day FROM t JOIN u USING (id)", ["ID", "DAY"]),
    ],
)
def test_only_the_named_columns_are_read(sql: str, columns: list[str]) -> None:
    query = parsed(sql)
    assert _read_columns(query, source_of(query), TABLE, _whole_rows(query)) == columns


@pytest.mark.unit
@pytest.mark.parametrize(
    ("sql", "from_manifest"),
    [
        ("SELECT COUNT(*) FROM t", True),
        ('SELECT COUNT(*) AS n, COUNT(*) AS "m" FROM t AS x', True),
        ("SELECT COUNT(*) FROM t WHERE id > 1", False),
        ("SELECT COUNT(*) FROM t GROUP BY grp", False),
        ("SELECT COUNT(*) FROM t LIMIT 0", False),
        ("SELECT COUNT(*) FROM t HAVING COUNT(*) > 5", False),
        ("SELECT COUNT(*) FROM t SAMPLE (10)", False),
        ("SELECT COUNT(id) FROM t", False),
        ("SELECT COUNT(DISTINCT id) FROM t", False),
        ("SELECT COUNT(*) OVER () FROM t", False),
        ("SELECT COUNT(*), 1 FROM t", False),
        ("SELECT COUNT(*) FROM t, u", False),
        ("SELECT DISTINCT COUNT(*) FROM t", False),
        ("WITH c AS (SELECT 1) SELECT COUNT(*) FROM t", False),
    ],
)
def test_which_counts_the_manifest_answers(sql: str, from_manifest: bool) -> None:
    query = parsed(sql)
    assert _counts_rows_only(query, source_of(query)) is from_manifest


@pytest.mark.unit
def test_a_failed_scan_reads_as_its_cause() -> None:
    raw = (
        "Invalid Input Error: reading the stream registered as '__floe_t0' failed: IOError: boom. "
        "Detail: Python exception: Traceback (most recent call last):\n  File ..."
    )
    assert _duck_message(Exception(raw)) == "Invalid Input Error: reading a table failed: IOError: boom"
