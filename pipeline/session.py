"""The local Spark session every Floe Spark program starts from (the job, the table reader)."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from floe.settings import Settings


def spark_session(settings: Settings, app_name: str) -> SparkSession:
    """A Spark session on ``pipeline.spark_master`` whose Python workers run this interpreter."""
    # PySpark takes the workers' interpreter only from the environment (spark.pyspark.python is read
    # by spark-submit alone), and it must be the venv's, which has Floe and pyarrow installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    p = settings.pipeline
    builder = SparkSession.builder.master(p.spark_master).appName(app_name)
    if p.spark_master.startswith("local"):
        # Left alone, Spark binds its driver RPC and block manager to the address the hostname
        # resolves to, or to the first non-loopback interface when that is loopback: the job would
        # listen on the network. A local job needs no peer, so it stays on loopback.
        # SPARK_LOCAL_IP covers what else Spark derives from the host name (and its warning).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    else:
        # A cluster's executors connect back to the driver: on one host (make cluster-up) at
        # loopback, on several at this host's address (pipeline.spark_driver_host).
        builder = builder.config("spark.driver.host", p.spark_driver_host)
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Hadoop applies its own umask (022) to checkpoint files, not the process's 077.
        .config("spark.hadoop.fs.permissions.umask-mode", "077")
        .config("spark.driver.memory", p.driver_memory)
        .config("spark.sql.shuffle.partitions", str(max(1, p.partitions)))
        .config("spark.python.worker.reuse", "true")
        # Workers that import pyspark compiled, not from Spark's zip (pipeline/spark_daemon.py).
        .config("spark.python.daemon.module", "pipeline.spark_daemon")
        .config("spark.sql.streaming.pollingDelay", "50ms")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    for key, value in p.spark_conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
