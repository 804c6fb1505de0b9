"""PySpark's worker daemon (``spark.python.daemon.module``), with pyspark imported from its installed
package instead of Spark's ``pyspark.zip``.

Spark starts the daemon with its own ``python/lib/pyspark.zip`` and py4j zip first on PYTHONPATH,
and its spark-core jar further on. A zip holds no bytecode, so every Python worker the daemon forks
compiled the pyspark modules it imports from source again: about 1 s of CPU a worker, paid again
whenever Spark has stopped its idle workers (decision 97). And each worker's first task reread the
index of every archive on the path (pyspark's ``setup_spark_files`` invalidates the import caches),
the jar's thousands of entries too. The pip package Spark runs from has the same modules, compiled.
The archives stay where the installed package is missing or is another version than the zip's.

Nothing here may import pyspark before the path is settled: the daemon forks its workers, and they
keep the modules it imported.
"""

from __future__ import annotations

import importlib.util
import os
import re
import runpy
import sys
import zipfile

_SPARK_ZIP = re.compile(r"(pyspark|py4j-[0-9.]+-src)\.zip|spark-core_[0-9.]+-[0-9A-Za-z.-]+\.jar")
"""The archives Spark puts on the workers' PYTHONPATH: python/lib's zips under SPARK_HOME, and the
spark-core jar, its fallback source of pyspark (``PythonUtils.sparkPythonPath``)."""

_VERSION = re.compile(r"""__version__(?::\s*str)?\s*=\s*["']([^"']+)["']""")


def zip_version(archive: str) -> str | None:
    """The pyspark version a ``pyspark.zip`` holds, or None when it cannot be read."""
    try:
        with zipfile.ZipFile(archive) as z:
            text = z.read("pyspark/version.py").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    found = _VERSION.search(text)
    return found.group(1) if found else None


def installed_version() -> str | None:
    """The version of the pyspark ``sys.path`` finds, or None if it finds none."""
    spec = importlib.util.find_spec("pyspark")  # the package itself: nothing of it is run
    if spec is None or spec.origin is None:
        return None
    version_file = os.path.join(os.path.dirname(spec.origin), "version.py")
    try:
        with open(version_file, encoding="utf-8") as f:
            found = _VERSION.search(f.read())
    except OSError:
        return None
    return found.group(1) if found else None


def settle_path(path: list[str]) -> list[str]:
    """``path`` without Spark's zips when the installed pyspark (and py4j) can stand in for them;
    ``path`` unchanged otherwise."""
    zips = [p for p in path if _SPARK_ZIP.fullmatch(os.path.basename(p))]
    archive = next((p for p in zips if os.path.basename(p) == "pyspark.zip"), None)
    if archive is None:
        return path
    rest = [p for p in path if p not in zips]
    saved = sys.path[:]
    sys.path[:] = rest
    importlib.invalidate_caches()
    try:
        installed = installed_version()
        has_py4j = importlib.util.find_spec("py4j") is not None
    finally:
        sys.path[:] = saved
    if installed is None or not has_py4j or installed != zip_version(archive):
        return path
    return rest


def main() -> None:
    """Run pyspark's daemon as Spark would, over the settled path."""
    settled = settle_path(sys.path)
    for dropped in set(sys.path) - set(settled):
        # Finding this module made an importer for each zip; left cached, every task's
        # importlib.invalidate_caches (pyspark's setup_spark_files) would read the zip's index again.
        sys.path_importer_cache.pop(dropped, None)
    sys.path[:] = settled
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
