"""The benchmark's input: deterministic CSV files with six mixed-type columns, and the one transform
that every measured system applies to them.

Each file has a header line and ``rows`` records of ``id, amount, name, day, ts, flag``: an integer,
a decimal with two places, a string of varying length, a date, a timestamp and a boolean. The same
seed gives byte-identical files, so runs (and the three systems of one run) read the same input.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from floe.catalog.models import Column, Table
from floe.types import arrow_schema

HEADER = "id,amount,name,day,ts,flag"
CSV_COLUMNS: tuple[str, ...] = tuple(HEADER.split(","))

TABLE_COLUMNS_SQL = (
    "(id NUMBER(18,0) NOT NULL, amount NUMBER(12,2), name VARCHAR, day DATE, ts TIMESTAMP_NTZ, flag BOOLEAN)"
)
"""The target table, as Floe's CREATE TABLE takes it."""

FLOE_SELECT = "$1::NUMBER(18,0), $2::NUMBER(12,2), $3::VARCHAR, $4::DATE, $5::TIMESTAMP_NTZ, $6::BOOLEAN"
"""The COPY transform: every column cast from the CSV text to its table type."""

SPARK_SELECT: tuple[str, ...] = (
    "CAST(id AS BIGINT) AS id",
    "CAST(amount AS DECIMAL(12,2)) AS amount",
    "CAST(name AS STRING) AS name",
    "CAST(day AS DATE) AS day",
    "CAST(ts AS TIMESTAMP_NTZ) AS ts",
    "CAST(flag AS BOOLEAN) AS flag",
)
"""The same transform in Spark SQL (BIGINT is what Floe stores NUMBER(18,0) as)."""

_DAYS_PER_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # 2024 is a leap year
_DATES: tuple[str, ...] = tuple(
    f"2024-{m + 1:02d}-{d + 1:02d}" for m, n in enumerate(_DAYS_PER_MONTH) for d in range(n)
)


def floe_table(name: str = "FLOE.PUBLIC.BENCH") -> Table:
    """The target table as Floe's catalog models it (used for its Arrow schema)."""
    return Table(
        name=name,
        columns=[
            Column(name="ID", type="NUMBER", precision=18, scale=0, nullable=False),
            Column(name="AMOUNT", type="NUMBER", precision=12, scale=2),
            Column(name="NAME", type="VARCHAR"),
            Column(name="DAY", type="DATE"),
            Column(name="TS", type="TIMESTAMP_NTZ"),
            Column(name="FLAG", type="BOOLEAN"),
        ],
    )


def target_schema() -> pa.Schema:
    """The Arrow schema of Floe's blobs for the target table; the limit baseline casts to it too."""
    schema = arrow_schema(floe_table())
    return pa.schema([f.with_name(f.name.lower()) for f in schema])


def csv_text(file_no: int, rows: int, seed: int = 7) -> str:
    """File ``file_no`` of a data set: its header and ``rows`` records (ids continue across files)."""
    rnd = random.Random(seed * 1_000_003 + file_no)
    out = [HEADER]
    base = file_no * rows
    for j in range(rows):
        i = base + j
        cents = rnd.randrange(10**9)
        sec = i * 37 % 86_400
        clock = f"{sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"
        out.append(
            f"{i},{cents // 100}.{cents % 100:02d},name_{rnd.randrange(36**5):x}{'x' * (i % 7)},"
            f"{_DATES[i % 366]},{_DATES[(i // 7) % 366]} {clock},"
            f"{'true' if rnd.random() < 0.5 else 'false'}"
        )
    return "\n".join(out) + "\n"


def file_name(file_no: int) -> str:
    """The name of one file of a data set."""
    return f"f{file_no:05d}.csv"


@dataclass(frozen=True)
class Dataset:
    """A directory of generated CSV files."""

    directory: Path
    files: int
    rows: int

    @property
    def paths(self) -> list[Path]:
        """The files, in order."""
        return [self.directory / file_name(i) for i in range(self.files)]

    @property
    def total_rows(self) -> int:
        """Records over all files."""
        return self.files * self.rows

    @property
    def total_bytes(self) -> int:
        """Bytes over all files."""
        return sum(p.stat().st_size for p in self.paths)


def ensure_dataset(root: Path, files: int, rows: int, seed: int = 7) -> Dataset:
    """The data set for these sizes under ``root``, generated on first use and reused afterwards."""
    directory = root / f"{files}x{rows}-s{seed}"
    stamp = directory / "complete.json"
    expected = {"files": files, "rows": rows, "seed": seed, "header": HEADER}
    if stamp.exists() and json.loads(stamp.read_text()) == expected:
        return Dataset(directory / "csv", files, rows)
    shutil.rmtree(directory, ignore_errors=True)
    # The files live in a subdirectory of their own: Spark's file source reads every file in it.
    data = directory / "csv"
    data.mkdir(parents=True)
    for i in range(files):
        (data / file_name(i)).write_text(csv_text(i, rows, seed))
    stamp.write_text(json.dumps(expected))
    return Dataset(data, files, rows)
