"""The Spark Structured Streaming job: queue source, loader (read, transform, blobs) and registrar.

Public API: ``spark_session`` (a local session set up for Floe) and ``read_table`` (a table's
committed rows as a DataFrame, for scans too large for the API's query engine). The job itself
runs through ``floe pipeline``.
"""

from pipeline.reader import read_table
from pipeline.session import spark_session

__all__ = ["read_table", "spark_session"]
