"""The peer baseline's child process: Spark's file-source stream over a directory of CSV files.

Reads every file with ``readStream.schema(...).csv(dir)``, applies the benchmark's casts and writes
Parquet with ``trigger(availableNow=True)``; prints one JSON line with the timings. Started by
``bench.baselines.run_peer``; runnable alone for a look:

    .venv/bin/python -m bench.spark_peer --input DIR --output DIR --checkpoint DIR
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench.dataset import CSV_COLUMNS, SPARK_SELECT


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start a session, run the stream to its end, count what it wrote."""
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StringType, StructField, StructType

    t0 = time.perf_counter()
    builder = (
        SparkSession.builder.master(args.master)
        .appName("floe-bench-peer")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Loopback only, as Floe's own job: a benchmark must not listen on the network.
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", args.driver_memory)
    )
    # Spark's scratch files (and the empty artifacts directory each session leaves behind) go to the
    # work directory, which the harness removes, instead of piling up in /tmp.
    scratch = Path(args.checkpoint).parent / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    java_options = f"{args.java_options} -Djava.io.tmpdir={scratch}".strip()
    spark = builder.config("spark.driver.extraJavaOptions", java_options).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    session_s = time.perf_counter() - t0
    schema = StructType([StructField(name, StringType()) for name in CSV_COLUMNS])
    t1 = time.perf_counter()
    query = (
        spark.readStream.schema(schema)
        .option("header", "true")
        .csv(args.input)
        .selectExpr(*SPARK_SELECT)
        .writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    stream_s = time.perf_counter() - t1
    spark.stop()
    # The Parquet footers say how many rows the stream wrote, without another Spark job.
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in Path(args.output).glob("*.parquet"))
    if args.expect_rows and rows != args.expect_rows:
        raise SystemExit(f"the stream wrote {rows} rows, expected {args.expect_rows}")
    return {
        "rows": rows,
        "session_start_s": session_s,
        "stream_s": stream_s,
        "rows_per_s": rows / stream_s,
        "rows_per_s_with_session_start": rows / (session_s + stream_s),
        "master": args.master,
        "java_options": args.java_options,
    }


def main() -> None:
    """Command-line entry point; the last stdout line is the JSON result."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", required=True, help="directory of CSV files with a header line")
    parser.add_argument("--output", required=True, help="Parquet output directory")
    parser.add_argument("--checkpoint", required=True, help="streaming checkpoint directory")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--driver-memory", default="2g", help="spark.driver.memory (default 2g)")
    parser.add_argument("--java-options", default="", help="spark.driver.extraJavaOptions (default none)")
    parser.add_argument("--expect-rows", type=int, default=0, help="fail unless this many rows were written")
    print(json.dumps(run(parser.parse_args())), flush=True)


if __name__ == "__main__":
    main()
