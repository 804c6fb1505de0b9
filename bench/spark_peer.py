"""The peer baseline's child process: Spark's file-source stream over a directory of CSV files.

Reads every file with ``readStream.schema(...).csv(dir)``, applies the benchmark's casts and writes
Parquet with ``trigger(availableNow=True)``, after a warm-up stream over a few small files in the
same session (as Floe's job is warm when it is measured); each timed stream runs ``--repeats`` times
as it is and with ``maxFilesPerTrigger``. Prints one JSON line with the timings and the checksums of
the first run's rows. Started by ``bench.baselines.PeerRun``; runnable alone for a look:

    .venv/bin/python -m bench.spark_peer --input DIR --work DIR [--warmup DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench.checksum import checksums, parquet_files
from bench.dataset import CSV_COLUMNS, SPARK_SELECT


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start a session, warm it with a stream over ``--warmup``, then run the timed streams: each
    ``--repeats`` times as it is and with ``--max-files-per-trigger``; checksum the first run."""
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
    work = Path(args.work)
    # Spark's scratch files (and the empty artifacts directory each session leaves behind) go to the
    # work directory, which the harness removes, instead of piling up in /tmp.
    scratch = work / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    java_options = f"{args.java_options} -Djava.io.tmpdir={scratch}".strip()
    spark = builder.config("spark.driver.extraJavaOptions", java_options).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    session_s = time.perf_counter() - t0
    schema = StructType([StructField(name, StringType()) for name in CSV_COLUMNS])

    def stream(source: str, name: str, max_files: int | None) -> dict[str, Any]:
        out, checkpoint = work / name / "out", work / name / "checkpoint"
        reader = spark.readStream.schema(schema).option("header", "true")
        if max_files:
            reader = reader.option("maxFilesPerTrigger", max_files)
        started = time.perf_counter()
        query = (
            reader.csv(source)
            .selectExpr(*SPARK_SELECT)
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        seconds = time.perf_counter() - started
        # The Parquet footers say how many rows the stream wrote, without another Spark job.
        files = sorted(out.glob("*.parquet"))
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, "files_written": len(files)}

    warm = stream(args.warmup, "warmup", None) if args.warmup else None
    plain = [stream(args.input, f"run{i}", None) for i in range(args.repeats)]
    paced = [stream(args.input, f"paced{i}", args.max_files_per_trigger) for i in range(args.repeats)]
    for r in plain + paced:
        if args.expect_rows and r["rows"] != args.expect_rows:
            raise SystemExit(f"the stream wrote {r['rows']} rows, expected {args.expect_rows}")
    total = checksums(parquet_files(sorted((work / "run0" / "out").glob("*.parquet")))) if plain else None
    spark.stop()
    return {
        "session_start_s": session_s,
        "warmup_s": warm["seconds"] if warm else None,
        "runs": plain,
        "max_files_per_trigger": args.max_files_per_trigger,
        "paced_runs": paced,
        "checksum": total,
        "master": args.master,
        "java_options": args.java_options,
    }


def main() -> None:
    """Command-line entry point; the last stdout line is the JSON result."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", required=True, help="directory of CSV files with a header line")
    parser.add_argument("--work", required=True, help="directory for each stream's output and checkpoint")
    parser.add_argument(
        "--warmup", default="", help="directory of a few small CSV files streamed first, untimed"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed streams of each kind (default 3)")
    parser.add_argument(
        "--max-files-per-trigger",
        type=int,
        default=20,
        help="maxFilesPerTrigger of the paced streams (default 20)",
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--driver-memory", default="2g", help="spark.driver.memory (default 2g)")
    parser.add_argument("--java-options", default="", help="spark.driver.extraJavaOptions (default none)")
    parser.add_argument("--expect-rows", type=int, default=0, help="fail unless this many rows were written")
    print(json.dumps(run(parser.parse_args())), flush=True)


if __name__ == "__main__":
    main()
