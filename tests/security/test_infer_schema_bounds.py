"""INFER_SCHEMA reads staged files in the API process: what it decodes of one is bounded before it is
decoded (decision 117, after decision 110 bounded the job's readers).

Each crafted file (``tests.security.attacks.footers``, and the ORC file of decision 110 whose
statistics hold a 192 MiB value) is read in a process of its own as the API reads it
(``tests.security.attacks.infer_probe``: the file's columns, INFER_SCHEMA's rows and the relation
the query engine gets), which reports its peak resident memory; a baseline process reads a small file
of the same format, so the difference is what the file cost. Then the bound over several files,
through the SQL executor against LocalStack.
"""

from __future__ import annotations

import gzip
import io
import json
import resource
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest
import redis

from bench.harness import unique
from floe.catalog import ADMIN_ROLE
from floe.errors import SqlError
from floe.settings import Settings
from services.auth import Principal
from services.sql import SqlExecutor
from tests.conftest import TEST_INTEGRATION
from tests.security.attacks import bombs, footers
from tests.security.attacks.bombs import MiB

ROOT = Path(__file__).resolve().parents[2]

ADDRESS_SPACE = 2 << 30
"""A probe's address space: a file the bounds miss fails it (MemoryError, or liborc's abort) instead
of taking the machine's memory (a probe's interpreter, pyarrow and DuckDB map about 500 MB)."""

SLACK = 64 * MiB
"""What reading one file's schema may cost the API above a small file's: the footer or sample as
read (16 MiB at most, and a copy), the schema pyarrow or liborc makes of it, 10,000 columns' rows."""


@dataclass(frozen=True)
class Probe:
    error: dict[str, str] | None
    columns: int
    peak: int
    status: int


def probe(tmp_path: Path, name: str, data: bytes, kind: str) -> Probe:
    path = tmp_path / name
    path.write_bytes(data)
    args = [sys.executable, "-m", "tests.security.attacks.infer_probe", kind, str(path)]
    log = tmp_path / f"{name}.stderr"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            args, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, preexec_fn=_bounded_address_space
        )
        assert proc.stdout is not None
        with proc.stdout:
            out = proc.stdout.read()
        status = proc.wait()
    if status != 0:
        print(log.read_text(errors="replace")[-2000:])
    result: dict[str, Any] = (
        json.loads(out) if status == 0 and out.strip() else {"error": None, "columns": -1, "peak": 0}
    )
    return Probe(result["error"], result["columns"], result["peak"], status)


def _bounded_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _parquet() -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"s": ["a", "b"], "l": [[1], [2]]}), sink)
    return bytes(sink.getvalue())


def _orc() -> bytes:
    sink = pa.BufferOutputStream()
    orc.write_table(pa.table({"s": ["a", "b"], "l": [[1], [2]]}), sink)
    return bytes(sink.getvalue())


SMALL: dict[str, Callable[[], bytes]] = {
    "PARQUET": _parquet,
    "ORC": _orc,
    "AVRO": lambda: footers.avro_wide_schema(2),
    "JSON": lambda: gzip.compress(b'{"a": [1, 2]}\n'),
    "CSV": lambda: gzip.compress(b"1,2\n"),
}

_baselines: dict[str, int] = {}


def baseline(tmp_path: Path, kind: str) -> int:
    if kind not in _baselines:
        small = probe(tmp_path, f"small.{kind.lower()}", SMALL[kind](), kind)
        assert small.status == 0 and small.error is None and small.columns > 0, small
        _baselines[kind] = small.peak
    return _baselines[kind]


@dataclass(frozen=True)
class Crafted:
    name: str
    kind: str
    build: Callable[[], bytes]
    refusal: str | None
    """What its failure says (the setting), or None: its columns are read."""
    columns: int = 0
    """Columns read when it is not refused."""


CRAFTED = [
    # liborc inflates the footer, whose statistics hold the 192 MiB value, as it opens the file.
    Crafted(
        "orc-large-statistics",
        "ORC",
        lambda: bombs.orc_one_value(192 * MiB),
        "query.infer_schema_footer_bytes",
    ),
    # 7M empty stripe (or statistics) entries, two bytes each in a 14 MB footer.
    Crafted("orc-many-stripes", "ORC", lambda: footers.orc_dense_footer(7_000_000, 3), None, 1),
    Crafted("orc-many-statistics", "ORC", lambda: footers.orc_dense_footer(7_000_000, 7), None, 1),
    Crafted(
        "orc-many-field-names",
        "ORC",
        lambda: footers.orc_dense_footer(0, 7, field_names=7_000_000),
        "query.infer_schema_max_columns",
    ),
    # Five million column chunks of three bytes each in a 15 MB footer.
    Crafted(
        "parquet-many-column-chunks", "PARQUET", lambda: footers.parquet_row_groups(5, 1_000_000), None, 1
    ),
    Crafted(
        "parquet-wide-schema",
        "PARQUET",
        lambda: footers.parquet_wide_schema(999_999),
        "query.infer_schema_max_columns",
    ),
    Crafted(
        "avro-wide-schema", "AVRO", lambda: footers.avro_wide_schema(25_000), "query.infer_schema_max_columns"
    ),
    Crafted("avro-deep-schema", "AVRO", lambda: footers.avro_deep_schema(20_000), "nests too deep"),
    # 8 MiB of commas: one record of 8M fields.
    Crafted("csv-wide-record", "CSV", footers.csv_one_wide_record, "query.infer_schema_max_columns"),
    # One document of 4M zeros in an array; one of 700k keys; one nested 200k deep.
    Crafted("json-long-array", "JSON", footers.json_long_array, None, 1),
    Crafted(
        "json-many-keys", "JSON", lambda: footers.json_many_keys(700_000), "query.infer_schema_max_columns"
    ),
    Crafted("json-deep-array", "JSON", lambda: footers.json_deep_document(200_000), None, 3),
]


@pytest.mark.unit
@pytest.mark.parametrize("crafted", CRAFTED, ids=[c.name for c in CRAFTED])
def test_infer_schema_reads_a_crafted_file_within_its_bounds(tmp_path: Path, crafted: Crafted) -> None:
    data = crafted.build()
    assert len(data) < 16 * MiB, f"{crafted.name} should fit what INFER_SCHEMA reads ({len(data):,} bytes)"
    base = baseline(tmp_path, crafted.kind)
    got = probe(tmp_path, crafted.name, data, crafted.kind)
    growth = got.peak - base
    print(f"{crafted.name}: {len(data):,} bytes stored, peak RSS +{growth / MiB:.0f} MiB over the baseline")
    assert got.status == 0, f"the reading process died (wait status {got.status})"
    if crafted.refusal is None:
        assert got.error is None and got.columns == crafted.columns, got
    else:
        assert got.error is not None, f"read {got.columns:,} columns"
        assert crafted.refusal in got.error["message"], got.error
    assert growth <= SLACK, f"peak RSS grew by {growth / MiB:.0f} MiB"


# ---------------------------------------------------------------------------------------------
# Over several files, through the executor

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))


@pytest.fixture
def ex(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> Iterator[SqlExecutor]:
    settings = isolated_settings.model_copy(deep=True)
    settings.query.infer_schema_max_columns = 8
    executor = SqlExecutor(settings, redis_client)
    executor.execute(TEST_INTEGRATION, ADMIN)
    yield executor
    stale = list(redis_client.scan_iter(match=f"{settings.redis.prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)


def _parquet_of(names: list[str]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({n: [1] for n in names}), buf)
    return buf.getvalue()


@pytest.mark.integration
def test_the_column_bound_holds_over_all_the_files(ex: SqlExecutor, bucket: str, s3: Any) -> None:
    """With ``query.infer_schema_max_columns`` = 8: files of 5 columns each infer while their names
    repeat, and the call fails, naming the setting, once they name more than 8 between them."""
    run = ex.execute
    run(f"CREATE STAGE st URL = 's3://{bucket}/' STORAGE_INTEGRATION = floe_tests", ADMIN)
    run("CREATE FILE FORMAT pq TYPE = PARQUET", ADMIN)
    folder = unique("f")
    for i in range(3):
        s3.put_object(Bucket=bucket, Key=f"{folder}/same{i}.parquet", Body=_parquet_of(list("abcde")))
    sql = f"SELECT * FROM TABLE(INFER_SCHEMA(LOCATION => '@st/{folder}/', FILE_FORMAT => 'pq'))"
    assert [r["COLUMN_NAME"] for r in run(sql, ADMIN).records()] == list("abcde")
    s3.put_object(Bucket=bucket, Key=f"{folder}/wider.parquet", Body=_parquet_of(list("fghij")))
    with pytest.raises(SqlError, match=r"more than 8 columns.*query\.infer_schema_max_columns"):
        run(sql, ADMIN)
    s3.put_object(Bucket=bucket, Key=f"{folder}/wide.parquet", Body=_parquet_of(list("klmnopqrs")))
    with pytest.raises(
        SqlError, match=r"more than 8 columns.*query\.infer_schema_max_columns.*wide\.parquet"
    ):
        run(
            sql.replace("'pq'", "'pq', FILES => ('wide.parquet')"),
            ADMIN,
        )
