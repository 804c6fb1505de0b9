"""Schema evolution at load time: a file's columns the table lacks are added, and NOT NULL is dropped
from the table's columns the file lacks, before the file is transformed (decision 81).

A load evolves its table when all of Snowflake's conditions hold: the table has
ENABLE_SCHEMA_EVOLUTION = TRUE, the pipe's COPY uses MATCH_BY_COLUMN_NAME, and the pipe's owner
(the role that loads) holds OWNERSHIP or EVOLVE SCHEMA on the table; for CSV (with PARSE_HEADER)
also ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE. Streaming pipes never evolve (Snowpipe Streaming through
the SDK does not).

The task that reads the file changes the catalog itself, by compare-and-set (``TableStore``), then
compiles the pipe's COPY against the table as it now is and loads the file, all in the same
attempt. That is safe whatever happens next, because a change here is idempotent and never undone:

- a replay of the batch (a crash before its commit) finds the columns there and loads the file
  without evolving anything;
- a commit that never comes (the pipe dropped meanwhile) leaves columns that the next load of such
  a file would have added anyway;
- the blob the task writes holds each column under its stored name (``floe.blob_columns``), so it
  reads right under any later version of the table, and blobs written before the change read the
  new columns as NULL.

Types are inferred from the file: Parquet, Avro and ORC from their column types, JSON from the
values of each key, CSV from its text. Floe picks types wide enough for later files (NUMBER(38,0)
for any integer, FLOAT for other numbers, VARIANT for objects, arrays and mixed values), where
Snowflake's INFER_SCHEMA may pick a narrower NUMBER(p,s).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from floe.catalog import Catalog, Column, Pipe, Table, now_ms
from floe.catalog.names import IDENTIFIER_MAX_LENGTH, split_parts
from floe.catalog.schema import (
    MAX_EVOLVED_COLUMNS,
    Evolution,
    TableStore,
    Trigger,
    evolved,
    matches,
    may_evolve,
)
from floe.errors import FileLoadError
from floe.keys import Keys, RedisClient
from floe.settings import Settings
from pipeline.formats import COLUMNAR_FORMATS, RawFile

log = logging.getLogger("floe.pipeline.evolution")

_KEYS_VIEW = "__floe_evolution_docs"


class Worker(Protocol):
    """What evolution needs of a Spark task's worker (``pipeline.loader._Worker``)."""

    settings: Settings
    con: duckdb.DuckDBPyConnection

    def redis(self) -> RedisClient:
        """Floe's Redis, where the catalog is."""
        ...


@dataclass
class TaskTable:
    """A table as one task knows it while it loads a pipe's files: each file may evolve it, and the
    task's blob is written in its last shape (older files' rows read the new columns as NULL)."""

    table: Table


def evolvable(pipe: Pipe, table: Table) -> bool:
    """Whether loads of ``pipe`` into ``table`` evolve it (the privilege is checked per file)."""
    spec = pipe.copy_spec
    return (
        table.enable_schema_evolution
        and spec.match_by_column_name != "NONE"
        and spec.select is None
        and pipe.source != "streaming"
    )


@dataclass(frozen=True)
class FileColumns:
    """A file's columns, as schema evolution sees them."""

    columns: tuple[Column, ...]
    """Each column the file has, named as in the file, with the type inferred from it, in file order."""
    partial: frozenset[str] = frozenset()
    """The names some of its records lack (JSON documents without the key)."""


def file_columns(raw: RawFile, con: duckdb.DuckDBPyConnection) -> FileColumns | None:
    """The columns of a parsed file; None for a format whose records have no names (CSV without
    PARSE_HEADER)."""
    kind = raw.format.upper()
    if kind == "JSON":
        return _json_columns(raw, con)
    if kind in COLUMNAR_FORMATS:
        return FileColumns(tuple(_column(f.name, _arrow_type(f.type)) for f in raw.table.schema))
    if kind == "CSV" and raw.fmt.parse_header:
        # The header names the raw table's columns, as a columnar file's do; the values are text.
        names = raw.table.column_names
        return FileColumns(tuple(_column(n, _text_type(raw.table.column(i))) for i, n in enumerate(names)))
    return None


def plan(table: Table, pipe: Pipe, found: FileColumns) -> Evolution:
    """What loading a file with columns ``found`` changes in ``table`` through ``pipe``: the file's
    columns no table column matches (by MATCH_BY_COLUMN_NAME's rule) are added, named as the file
    names them (CASE_SENSITIVE) or upper-cased (CASE_INSENSITIVE, as an unquoted name would be); the
    NOT NULL table columns the file lacks, or some of its records lack, lose NOT NULL. Columns that
    INCLUDE_METADATA fills are neither."""
    spec = pipe.copy_spec
    exact = spec.match_by_column_name == "CASE_SENSITIVE"
    metadata = set(spec.include_metadata)
    add: list[Column] = []
    for col in found.columns:
        if not 0 < len(col.name) <= IDENTIFIER_MAX_LENGTH:
            continue  # no column can have this name
        name = col.name if exact else col.name.upper()
        known = [*table.columns, *add]
        if any(matches(c.name, name, exact) for c in known):
            continue
        add.append(col.model_copy(update={"name": name}))
    present = {c.name for c in found.columns if c.name not in found.partial}
    drop = [
        c.name
        for c in table.columns
        if not c.nullable
        and c.name not in metadata
        and not any(matches(c.name, name, exact) for name in present)
    ]
    return Evolution(tuple(add), tuple(drop))


def evolve(w: Worker, pipe: Pipe, current: TaskTable, raw: RawFile, path: str) -> Table:
    """The table ``raw`` (the file ``path``) is to be loaded into: ``current.table``, evolved first
    when the file brings columns it lacks or lacks NOT NULL columns and the pipe may evolve it.
    ``current`` follows the change. Raises FileLoadError when the file would add more columns than
    one load may."""
    table = current.table
    if raw.format.upper() == "CSV" and raw.fmt.error_on_column_count_mismatch:
        return table  # Snowflake's rule: CSV evolves only with ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE
    found = file_columns(raw, w.con)
    if found is None:
        return table
    change = plan(table, pipe, found)
    if not change:
        return table
    if len(change.add) > MAX_EVOLVED_COLUMNS:
        raise FileLoadError(
            f"Schema evolution would add {len(change.add)} columns to table "
            f"{split_parts(table.name)[-1]} from this file; one load adds at most {MAX_EVOLVED_COLUMNS}.",
            file=path,
        )
    keys = Keys(w.settings.redis.prefix)
    client = w.redis()
    if not may_evolve(Catalog(client, keys), pipe.owner, table):
        log.info(
            "file %s would evolve table %s, but role %s holds neither OWNERSHIP nor EVOLVE SCHEMA on it",
            path,
            table.name,
            pipe.owner,
            extra={"pipe": pipe.name, "file": path},
        )
        return table
    trigger = Trigger(file_name=path, pipe_id=pipe.id, time_ms=now_ms())
    exact = pipe.copy_spec.match_by_column_name == "CASE_SENSITIVE"
    changed = TableStore(client, keys).update(
        table.name, table.id, lambda t: evolved(t, change, trigger, exact=exact)
    )
    if changed is None:
        return table  # dropped or replaced meanwhile: the load goes on as planned, and its commit decides
    log.info(
        "file %s evolved table %s: added %s, NOT NULL dropped from %s",
        path,
        table.name,
        [c.name for c in change.add] or "nothing",
        list(change.drop_not_null) or "nothing",
        extra={"pipe": pipe.name, "file": path},
    )
    current.table = changed
    return changed


def _column(name: str, typed: tuple[str, int | None, int | None]) -> Column:
    kind, precision, scale = typed
    return Column(name=name, type=kind, precision=precision, scale=scale)


_NUMBER = ("NUMBER", 38, 0)
_FLOAT = ("FLOAT", None, None)
_VARCHAR = ("VARCHAR", None, None)
_VARIANT = ("VARIANT", None, None)


def _arrow_type(t: pa.DataType) -> tuple[str, int | None, int | None]:
    """A column type for a Parquet, Avro or ORC column (as its reader gives it)."""
    if pa.types.is_integer(t):
        return _NUMBER
    if pa.types.is_floating(t):
        return _FLOAT
    if pa.types.is_decimal(t):
        d: Any = t
        return ("NUMBER", d.precision, d.scale) if d.precision <= 38 else _FLOAT
    if pa.types.is_boolean(t):
        return ("BOOLEAN", None, None)
    if pa.types.is_date(t):
        return ("DATE", None, None)
    if pa.types.is_time(t):
        return ("TIME", None, None)
    if pa.types.is_timestamp(t):
        zoned: Any = t
        return ("TIMESTAMP_LTZ" if zoned.tz else "TIMESTAMP_NTZ", None, None)
    if pa.types.is_nested(t):
        return _VARIANT
    return _VARCHAR


def _text_type(values: pa.ChunkedArray) -> tuple[str, int | None, int | None]:
    """A column type for a CSV column's text: NUMBER(38,0) when every value is an integer, FLOAT when
    every value is a number, BOOLEAN for TRUE / FALSE, VARCHAR otherwise."""
    present = values.drop_null()
    if len(present) == 0:
        return _VARCHAR
    for target, typed in ((pa.int64(), _NUMBER), (pa.float64(), _FLOAT)):
        try:
            pc.cast(present, target, safe=True)
            return typed
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    if set(pc.unique(pc.utf8_lower(present)).to_pylist()) <= {"true", "false"}:
        return ("BOOLEAN", None, None)
    return _VARCHAR


# json_type's names -> what a column of only such values would be.
_JSON_SCALARS = {
    "BIGINT": _NUMBER,
    "UBIGINT": _NUMBER,
    "HUGEINT": _NUMBER,
    "DOUBLE": _FLOAT,
    "VARCHAR": _VARCHAR,
    "BOOLEAN": ("BOOLEAN", None, None),
    "OBJECT": _VARIANT,
    "ARRAY": _VARIANT,
}


def _json_type(kinds: list[str]) -> tuple[str, int | None, int | None]:
    """A column type for the JSON types one key's values have (json_type's names)."""
    seen = {k for k in kinds if k != "NULL"}
    if not seen:
        return _VARCHAR
    if seen <= {"BIGINT", "UBIGINT", "HUGEINT"}:
        return _NUMBER
    if seen <= {"BIGINT", "UBIGINT", "HUGEINT", "DOUBLE"}:
        return _FLOAT
    if len(seen) == 1:
        return _JSON_SCALARS.get(seen.pop(), _VARIANT)
    if seen & {"OBJECT", "ARRAY"}:
        return _VARIANT
    return _VARCHAR  # scalars of several kinds: their text


def _json_columns(raw: RawFile, con: duckdb.DuckDBPyConnection) -> FileColumns:
    """The top-level keys of a JSON file's object documents, in the order they first appear, each
    with the type of its values and whether some object lacks it."""
    docs = pa.table({"d": raw.table.column("c1"), "n": pa.array(range(raw.table.num_rows), pa.int64())})
    con.register(_KEYS_VIEW, docs)
    try:
        # A quoted path step (to_json of the key) names one key whatever it holds: dots, quotes.
        rows = con.execute(
            f"""
            SELECT k, count(*) AS docs,
                   list(DISTINCT json_type(d, '$.' || to_json(k))) AS kinds,
                   min(n * 1048576 + p) AS first
            FROM (SELECT d, n, unnest(json_keys(d)) AS k, unnest(range(len(json_keys(d)))) AS p
                  FROM {_KEYS_VIEW} WHERE json_type(d) = 'OBJECT')
            GROUP BY k ORDER BY first
            """
        ).fetchall()
        objects = con.execute(f"SELECT count(*) FROM {_KEYS_VIEW} WHERE json_type(d) = 'OBJECT'").fetchall()
    finally:
        con.unregister(_KEYS_VIEW)
    total = int(objects[0][0])
    columns = tuple(_column(str(k), _json_type(list(kinds))) for k, _, kinds, _ in rows)
    partial = frozenset(str(k) for k, n, _, _ in rows if int(n) < total)
    return FileColumns(columns, partial)
