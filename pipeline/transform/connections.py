"""The COPY transform's DuckDB connections: sandboxed (no files, network or extensions), one thread,
UTC.

``new_connection`` makes one. ``apply_copy`` without a connection of its own uses one per thread
(``connection``); ``compile_copy`` binds its queries on one shared connection, under
``COMPILE_LOCK``.
"""

from __future__ import annotations

import threading
import weakref

import duckdb

from floe import sandbox

_LOCAL = threading.local()
_CONFIGURED: weakref.WeakSet[duckdb.DuckDBPyConnection] = weakref.WeakSet()

COMPILE_LOCK = threading.Lock()
"""Held while using ``compile_connection()``: a DuckDB connection serves one thread at a time."""
_COMPILE_CON: list[duckdb.DuckDBPyConnection] = []


def new_connection(memory_limit: str = "1GB") -> duckdb.DuckDBPyConnection:
    """A sandboxed DuckDB connection for apply_copy: one thread, UTC, no files, network or extensions."""
    con = sandbox.connect(threads=1, memory_limit=memory_limit)
    _CONFIGURED.add(con)
    return con


def _configure(con: duckdb.DuckDBPyConnection) -> None:
    # TIMESTAMP_TZ values without an offset, and NTZ -> TZ casts, use the session zone: it must be
    # UTC. A sandboxed connection already is, and its configuration is locked: only SET when needed.
    zone = con.sql("SELECT current_setting('TimeZone')").fetchall()[0][0]
    if zone != "UTC":
        con.execute("SET TimeZone = 'UTC'")
    _CONFIGURED.add(con)


def connection(con: duckdb.DuckDBPyConnection | None) -> duckdb.DuckDBPyConnection:
    """con, set to UTC if it was not made here; without one, this thread's own ``new_connection()``."""
    if con is None:
        con = getattr(_LOCAL, "con", None)
        if con is None:
            con = new_connection()
            _LOCAL.con = con
        return con
    if con not in _CONFIGURED:
        _configure(con)
    return con


def compile_connection() -> duckdb.DuckDBPyConnection:
    """The connection compile_copy binds queries on; use it under ``COMPILE_LOCK``."""
    if not _COMPILE_CON:
        _COMPILE_CON.append(new_connection())
    return _COMPILE_CON[0]
