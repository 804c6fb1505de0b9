"""The Spark Structured Streaming job: queue source, loader (read, transform, blobs) and registrar.

Public API: ``spark_session`` (a local session set up for Floe) and ``read_table`` (a table's
committed rows as a DataFrame, for scans too large for the API's query engine). The job itself
runs through ``floe pipeline``.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.reader import read_table
    from pipeline.session import spark_session

__all__ = ["read_table", "spark_session"]


def __getattr__(name: str) -> Any:
    # Imported when first asked for: Spark's Python processes import ``pipeline.source`` for the
    # streaming source, and the reader's boto3 and Spark SQL would add about 26 MB to each of them
    # (the source's runner lives as long as the job).
    if name == "read_table":
        from pipeline.reader import read_table

        return read_table
    if name == "spark_session":
        from pipeline.session import spark_session

        return spark_session
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
