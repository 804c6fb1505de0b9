"""A table's columns changing: ALTER TABLE's changes and schema evolution, applied to the catalog.

Both go through ``update_table``, a compare-and-set of the table's stored JSON (one script on the
``{catalog}`` slot), so an ALTER TABLE and the evolutions several Spark tasks make at once never
lose one another's changes, and a change meant for a table that was replaced (CREATE OR REPLACE)
or dropped meanwhile changes nothing.

Columns keep their identity in blobs through their stored names (``floe.blob_columns``): a column
added here gets a new one, a renamed column keeps its own. So nothing here touches a blob, and every
change is a catalog change only (decision 81).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from floe.blob_columns import new_stored_name, stored_name
from floe.catalog.alter_table import (
    AddColumns,
    DropColumns,
    DropNotNull,
    RenameColumn,
    SetTable,
    TableChange,
    UnsetTable,
)
from floe.catalog.models import (
    ADMIN_ROLE,
    Column,
    EvolutionRecord,
    Role,
    Table,
    grant_key,
)
from floe.catalog.names import split_parts
from floe.catalog.store import KINDS, Catalog, role_closure
from floe.errors import CompilationError, FloeError
from floe.keys import Keys, RedisClient, one_slot
from floe.types import arrow_schema

MAX_EVOLVED_COLUMNS = 100
"""Columns one file's load may add (Snowflake's default limit per COPY: "a maximum of 100 columns
or evolution of no more than 1 schema per COPY operation")."""

EVOLVE_PRIVILEGES = ("OWNERSHIP", "EVOLVE SCHEMA")
"""What the loading role (the pipe's owner) must hold on the table for its loads to evolve it."""

# KEYS: 1 the tables hash, 2 the catalog version. ARGV: 1 name, 2 the JSON read, 3 the new JSON.
_SWAP = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('INCR', KEYS[2])
return 1
"""
_ATTEMPTS = 50


class TableChanged(FloeError):
    """The table kept changing under a compare-and-set (50 attempts): a writer is stuck in a loop."""


def short_name(table: Table) -> str:
    """The table's own name, as messages say it."""
    return split_parts(table.name)[-1]


def _find(table: Table, name: str) -> Column | None:
    """The column named exactly ``name`` (names are upper-cased unless quoted before they get here)."""
    return next((c for c in table.columns if c.name == name), None)


def _invalid(name: str) -> CompilationError:
    return CompilationError(f"invalid identifier '{name}'", code="000904")


def _exists(name: str) -> CompilationError:
    return CompilationError(f"column '{name}' already exists")


def apply_change(table: Table, change: TableChange, *, has_rows: bool) -> Table:
    """``table`` after an ALTER TABLE change; CompilationError, with Snowflake's text where it has
    one, for a change that cannot be made. ``has_rows``: the table holds committed rows (a NOT NULL
    column cannot be added then)."""
    if isinstance(change, AddColumns):
        return _add(table, change, has_rows)
    if isinstance(change, DropColumns):
        return _drop(table, change)
    if isinstance(change, RenameColumn):
        return _rename(table, change)
    if isinstance(change, DropNotNull):
        return _drop_not_null(table, change)
    if isinstance(change, SetTable):
        update: dict[str, object] = {}
        if change.enable_schema_evolution is not None:
            update["enable_schema_evolution"] = change.enable_schema_evolution
        if change.comment is not None:
            update["comment"] = change.comment
        return table.model_copy(update=update)
    assert isinstance(change, UnsetTable)
    update = {}
    if "ENABLE_SCHEMA_EVOLUTION" in change.properties:
        update["enable_schema_evolution"] = False
    if "COMMENT" in change.properties:
        update["comment"] = None
    return table.model_copy(update=update)


def _checked(table: Table) -> Table:
    """``table``, once its column names pass the blob schema's rules (a TIMESTAMP_TZ column's offset
    column name is reserved)."""
    arrow_schema(table)
    return table


def _add(table: Table, change: AddColumns, has_rows: bool) -> Table:
    columns = list(table.columns)
    for col in change.columns:
        if _find(table, col.name) is not None:
            if change.if_not_exists:
                continue
            raise _exists(col.name)
        if any(c.name == col.name for c in columns):
            raise CompilationError(f"duplicate column name '{col.name}'")
        if not col.nullable and has_rows:
            raise CompilationError(
                f"Non-nullable column '{col.name}' cannot be added to non-empty table "
                f"'{short_name(table)}' unless it has a non-null default value."
            )
        columns.append(col.model_copy(update={"stored": new_stored_name(), "evolution": None}))
    return _checked(table.model_copy(update={"columns": columns}))


def _drop(table: Table, change: DropColumns) -> Table:
    gone: set[str] = set()
    for name in change.names:
        if _find(table, name) is None:
            if change.if_exists:
                continue
            raise _invalid(name)
        gone.add(name)
    columns = [c for c in table.columns if c.name not in gone]
    if not columns:
        raise CompilationError(
            f"cannot drop every column of table '{short_name(table)}': a table keeps at least one column"
        )
    return table.model_copy(update={"columns": columns})


def _rename(table: Table, change: RenameColumn) -> Table:
    col = _find(table, change.old)
    if col is None:
        raise _invalid(change.old)
    if change.new != change.old and _find(table, change.new) is not None:
        raise _exists(change.new)
    renamed = col.model_copy(update={"name": change.new, "stored": stored_name(col), "evolution": None})
    columns = [renamed if c is col else c for c in table.columns]
    return _checked(table.model_copy(update={"columns": columns}))


def _drop_not_null(table: Table, change: DropNotNull) -> Table:
    names = set(change.names)
    for name in change.names:
        if _find(table, name) is None:
            raise _invalid(name)
    columns = [
        c.model_copy(update={"nullable": True, "evolution": None}) if c.name in names else c
        for c in table.columns
    ]
    return table.model_copy(update={"columns": columns})


def describe_table(table: Table) -> tuple[list[str], list[list[Any]]]:
    """DESC TABLE's columns and rows: name, type, kind, null?, and for a table with
    ENABLE_SCHEMA_EVOLUTION, Snowflake's SchemaEvolutionRecord (JSON, NULL for a column no load
    evolved)."""
    columns = ["name", "type", "kind", "null?"]
    rows: list[list[Any]] = [
        [c.name, c.sql_type, "COLUMN", "Y" if c.nullable else "N"] for c in table.columns
    ]
    if table.enable_schema_evolution:
        columns.append("schema evolution record")
        for row, col in zip(rows, table.columns, strict=True):
            row.append(evolution_json(col.evolution) if col.evolution is not None else None)
    return columns, rows


def evolution_json(record: EvolutionRecord) -> str:
    """A SchemaEvolutionRecord as Snowflake shows it: its fields in camel case, the time as text."""
    moment = dt.datetime.fromtimestamp(record.triggering_time_ms / 1000, dt.UTC)
    return json.dumps(
        {
            "evolutionType": record.evolution_type,
            "evolutionMode": record.evolution_mode,
            "fileName": record.file_name,
            "triggeringTime": moment.strftime("%Y-%m-%d %H:%M:%S.")
            + f"{moment.microsecond // 1000:03d} +0000",
            "pipeId": record.pipe_id,
        }
    )


# ------------------------------------------------------------------------------------------------
# Schema evolution


def matches(column: str, name: str, exact: bool) -> bool:
    """Whether a file's column ``name`` loads table column ``column`` under MATCH_BY_COLUMN_NAME
    (``exact``: CASE_SENSITIVE)."""
    return column == name if exact else column.lower() == name.lower()


@dataclass(frozen=True)
class Evolution:
    """What one file's load changes in its table: columns to add (types inferred from the file, no
    stored name yet) and the columns whose NOT NULL it drops."""

    add: tuple[Column, ...] = ()
    drop_not_null: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.add or self.drop_not_null)


@dataclass(frozen=True)
class Trigger:
    """Who evolves a table: the file, its pipe incarnation, and when (the SchemaEvolutionRecord)."""

    file_name: str
    pipe_id: str
    time_ms: int


def evolved(table: Table, evolution: Evolution, trigger: Trigger, *, exact: bool) -> Table:
    """``table`` with ``evolution`` applied, as many times as it is applied: a column already there
    (by ``matches``) is not added again, a nullable column stays as it is. Each column it changes
    records ``trigger``."""

    def record(kind: str) -> EvolutionRecord:
        return EvolutionRecord.model_validate(
            {
                "evolution_type": kind,
                "file_name": trigger.file_name,
                "triggering_time_ms": trigger.time_ms,
                "pipe_id": trigger.pipe_id,
            }
        )

    dropping = set(evolution.drop_not_null)
    columns = [
        c.model_copy(update={"nullable": True, "evolution": record("DROP_NOT_NULL")})
        if c.name in dropping and not c.nullable
        else c
        for c in table.columns
    ]
    for col in evolution.add:
        if any(matches(c.name, col.name, exact) for c in columns):
            continue
        columns.append(
            col.model_copy(update={"stored": new_stored_name(), "evolution": record("ADD_COLUMN")})
        )
    return table.model_copy(update={"columns": columns})


def may_evolve(catalog: Catalog, role: str, table: Table) -> bool:
    """Whether ``role`` (a pipe's owner, which loads its files) holds OWNERSHIP or EVOLVE SCHEMA on
    ``table``, itself or through the roles granted to it.

    The loader cannot reach ``services.access`` (the layers' contract: ``pipeline`` imports
    ``floe`` only), so this follows its rules for one role, one table and these two privileges:
    ACCOUNTADMIN holds everything, the owner holds everything, grants pass up the role graph.
    ``tests/floe/catalog/test_schema.py`` checks that the two agree."""
    roles = role_closure(catalog, [role])
    if ADMIN_ROLE in roles or table.owner in roles:
        return True
    key = grant_key("TABLE", table.name)
    for name in roles:
        found = catalog.find(Role, name)
        if found is not None and set(found.grants.get(key, ())) & set(EVOLVE_PRIVILEGES):
            return True
    return False


# ------------------------------------------------------------------------------------------------
# The compare-and-set


class TableStore:
    """Changes one table at a time by compare-and-set of its stored JSON."""

    def __init__(self, client: RedisClient, keys: Keys) -> None:
        self._r = client
        self._keys = keys
        self._swap = client.register_script(_SWAP)

    def update(self, name: str, table_id: str, change: Callable[[Table], Table]) -> Table | None:
        """Apply ``change`` to the table ``name`` if it is still the incarnation ``table_id``; the
        table afterwards, or None when it is gone or was replaced. ``change`` may run several times
        (once per attempt, on the table as it then is) and raise to refuse."""
        hash_key = self._keys.objects(KINDS[Table])
        keys = [hash_key, self._keys.catalog_version()]
        one_slot(keys, "table compare-and-set")
        for _ in range(_ATTEMPTS):
            raw = self._r.hmget(hash_key, [name])[0]
            if raw is None:
                return None
            table = Table.model_validate_json(raw)
            if table.id != table_id:
                return None
            new = change(table)
            if new == table:
                return table
            if self._swap(keys=keys, args=[name, raw, new.model_dump_json()]):
                return new
        raise TableChanged(f"table {name} changed {_ATTEMPTS} times while it was being altered; try again")
