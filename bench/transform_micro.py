"""Micro-benchmark of the per-file COPY path: read_raw + apply_copy on a 10k-row, 6-column CSV.

Prints rows/s on one core (DuckDB threads=1, pyarrow use_threads=False). Run:
    .venv/bin/python bench/transform_micro.py
"""

from __future__ import annotations

import random
import statistics
import time

from floe.catalog.models import Column, CopySpec, FileFormat, Table
from pipeline.formats import read_raw
from pipeline.transform import apply_copy, compile_copy, new_connection

ROWS = 10_000
REPEATS = 30


def make_csv(rows: int, seed: int = 7) -> bytes:
    """A CSV with a header: id, name, amount, timestamp, boolean word, date."""
    rnd = random.Random(seed)
    out = ["id,name,amount,ts,flag,day"]
    for i in range(rows):
        out.append(
            f"{i},name_{rnd.randrange(10**6)},{rnd.random() * 10000:.2f},"
            f"2024-{1 + i % 12:02d}-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:{i % 59:02d},"
            f"{rnd.choice(['true', 'false', 'yes', 'no'])},2024-{1 + i % 12:02d}-{1 + i % 28:02d}"
        )
    return ("\n".join(out) + "\n").encode()


def main() -> None:
    table = Table(
        name="BENCH.PUBLIC.ORDERS",
        columns=[
            Column(name="ID", type="NUMBER", precision=18, scale=0, nullable=False),
            Column(name="NAME", type="VARCHAR", precision=64),
            Column(name="AMOUNT", type="NUMBER", precision=12, scale=2),
            Column(name="TS", type="TIMESTAMP_NTZ"),
            Column(name="FLAG", type="BOOLEAN"),
            Column(name="DAY", type="DATE"),
        ],
    )
    fmt = FileFormat(skip_header=1)
    data = make_csv(ROWS)
    cases = {
        "plain COPY": CopySpec(table=table.name, stage="BENCH.PUBLIC.S", file_format=fmt),
        "transform": CopySpec(
            table=table.name,
            stage="BENCH.PUBLIC.S",
            file_format=fmt,
            select=["$1", "UPPER($2)", "$3::NUMBER(12,2)", "TO_TIMESTAMP($4)", "$5", "$6::DATE"],
        ),
    }
    con = new_connection()
    for label, copy in cases.items():
        compiled = compile_copy(copy, table, "CSV")
        timings = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            raw = read_raw(data, fmt, path="bench.csv")
            rows, result = apply_copy(compiled, raw, filename="bench.csv", con=con)
            timings.append(time.perf_counter() - t0)
            assert result.status == "LOADED" and rows.num_rows == ROWS, result
        best = min(timings)
        median = statistics.median(timings)
        print(
            f"{label:11s}: {ROWS} rows x 6 cols  median {median * 1000:6.2f} ms ({ROWS / median:,.0f} rows/s)"
            f"  best {best * 1000:6.2f} ms ({ROWS / best:,.0f} rows/s)"
        )


if __name__ == "__main__":
    main()
