"""PySpark's daemon with pyspark imported compiled from its package, not from Spark's zip
(pipeline/spark_daemon.py, decision 97), and the bench's count of the workers it forks."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pyspark
import pytest

from bench.memory import forked_workers
from floe.settings import Settings
from pipeline.session import spark_session
from pipeline.spark_daemon import settle_path, zip_version

SPARK_PYTHON = Path(pyspark.__file__).parent / "python" / "lib"


def spark_archives() -> list[str]:
    """The archives Spark puts on its workers' PYTHONPATH, as this pyspark ships them."""
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    return [*(str(p) for p in sorted(SPARK_PYTHON.glob("*.zip"))), *(str(j) for j in jars)]


def fake_pyspark_zip(path: Path, version: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pyspark/version.py", f'__version__: str = "{version}"\n')
    return path


@pytest.mark.unit
def test_the_archives_leave_the_path_when_the_installed_pyspark_is_their_version() -> None:
    archives = spark_archives()
    assert len(archives) == 3, archives  # pyspark.zip, the py4j zip, spark-core's jar
    assert zip_version(str(SPARK_PYTHON / "pyspark.zip")) == pyspark.__version__
    path = [*archives, "/somewhere/else", *sys.path]
    assert settle_path(path) == ["/somewhere/else", *sys.path]


@pytest.mark.unit
def test_the_archives_stay_when_the_zip_is_another_version_or_missing(tmp_path: Path) -> None:
    other = fake_pyspark_zip(tmp_path / "pyspark.zip", "0.0.1")
    path = [str(other), *sys.path]
    assert settle_path(path) == path
    unreadable = tmp_path / "x" / "pyspark.zip"
    unreadable.parent.mkdir()
    unreadable.write_bytes(b"not a zip")
    assert settle_path([str(unreadable), *sys.path]) == [str(unreadable), *sys.path]
    assert settle_path(sys.path[:]) == sys.path  # no pyspark.zip: nothing to settle


def _worker_view(_: object) -> tuple[str, list[str], int]:
    """Where a Python worker's pyspark came from, the archives on its path, and its pid."""
    import pyspark as worker_pyspark

    return (
        str(worker_pyspark.__file__),
        [p for p in sys.path if p.endswith((".zip", ".jar")) and "pyspark" in p],
        os.getpid(),
    )


@pytest.mark.integration
def test_the_jobs_workers_import_the_compiled_package(isolated_settings: Settings) -> None:
    spark = spark_session(isolated_settings, "floe-daemon-test")
    try:
        assert spark.sparkContext.getConf().get("spark.python.daemon.module") == "pipeline.spark_daemon"
        views = spark.sparkContext.parallelize(range(2), 2).map(_worker_view).collect()
        # The bench's idle-memory figure waits for these workers to go: it counts them, and only
        # them (not the daemon, whose parent's command line names its module too).
        assert forked_workers(os.getsid(0)) == len({pid for _, _, pid in views})
    finally:
        spark.stop()
    assert views, "the tasks ran"
    for origin, archives, pid in views:
        assert pid != os.getpid(), "a Python worker, not this process, ran the task"
        assert ".zip" not in origin and origin == pyspark.__file__, origin
        assert archives == [], archives
