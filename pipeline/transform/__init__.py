"""The COPY transform: raw records of one file -> typed rows of the target table, plus its load result.

``compile_copy`` compiles a pipe's COPY into a ``CompiledCopy`` (DuckDB SQL per target column);
``apply_copy`` (a file read whole) and ``FileCopy`` (a file fed in parts) run a file through it in
DuckDB and apply ON_ERROR; ``copy_group`` runs several small files through one query;
``failed_file`` is the result of a file that could not be read.

Modules, each importing only those listed before it:

- ``messages``: Snowflake's error codes and messages, DuckDB's errors mapped to them, error positions;
- ``dialect``: quoted literals and identifiers, and the DuckDB dialect with Floe's SQL fragments;
- ``conversion``: value conversions with Snowflake's input rules, as DuckDB SQL;
- ``plan``: the compiled form (``CompiledCopy``, its column plans and cached per-file queries);
- ``expressions``: the expression compiler (one SELECT item -> DuckDB SQL over the raw table);
- ``query``: the per-file query (three layers) and the input table it reads;
- ``remote_calls``: the COPY's external-function calls, made before the query, as input columns;
- ``connections``: the sandboxed DuckDB connections;
- ``compiler``: ``compile_copy``;
- ``file_copy``: ``apply_copy``, ``FileCopy``, ``failed_file`` and the ON_ERROR rules.
"""

from pipeline.transform.compiler import compile_copy
from pipeline.transform.connections import new_connection
from pipeline.transform.file_copy import FileCopy, apply_copy, copy_group, failed_file, groupable
from pipeline.transform.plan import CompiledCopy, FileInfo

__all__ = [
    "CompiledCopy",
    "FileCopy",
    "FileInfo",
    "apply_copy",
    "compile_copy",
    "copy_group",
    "failed_file",
    "groupable",
    "new_connection",
]
