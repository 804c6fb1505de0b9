"""The one way Floe opens a DuckDB connection: sandboxed, so SQL can read only what Floe registers.

Users' SQL runs in DuckDB twice: in the API's query engine and in each pipe's COPY transform on the
workers. Neither may read the server's files, environment or network, whoever wrote the SQL
(docs/decisions.md, "The SQL sandbox"). Registered Arrow tables still work under this configuration.
"""

from __future__ import annotations

from typing import Any

import duckdb

# Set at connect time and then locked: a statement cannot change any of them.
_SANDBOX: dict[str, Any] = {
    "enable_external_access": False,  # no files, no URLs, no ATTACH, no extension directory
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "python_enable_replacements": False,  # no scans of Python variables by name
    "allow_community_extensions": False,
}


def connect(*, threads: int, memory_limit: str) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with external access off and its configuration locked."""
    con = duckdb.connect(config={**_SANDBOX, "threads": threads, "memory_limit": memory_limit})
    # TIMESTAMP_TZ values without an offset, and NTZ -> TZ casts, use the session zone: make it UTC.
    # (ICU's setting, so it cannot be given to connect.)
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET lock_configuration = true")
    return con
