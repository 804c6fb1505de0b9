"""ALTER TABLE's changes and schema evolution on a table's catalog entry (floe.catalog.schema), and the
load-time privilege check agreeing with the statements' one (services.access.authorize)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from floe.blob_columns import STORED_PREFIX, stored_name
from floe.catalog.alter_table import AddColumns, DropColumns, DropNotNull, RenameColumn, SetTable, UnsetTable
from floe.catalog.models import ADMIN_ROLE, Column, Database, Role, Schema, Table, grant_key
from floe.catalog.schema import (
    Evolution,
    Trigger,
    apply_change,
    describe_table,
    evolved,
    matches,
    may_evolve,
)
from floe.errors import CompilationError, ObjectNotFound, PermissionDenied
from services.access import Need, authorize
from services.auth import Principal

pytestmark = pytest.mark.unit

TABLE = Table(
    name="DB.S.T",
    owner="LOADER",
    columns=[
        Column(name="ID", type="NUMBER", precision=38, scale=0, nullable=False),
        Column(name="KIND", type="VARCHAR"),
        Column(name="AT", type="TIMESTAMP_TZ"),
    ],
)
TRIGGER = Trigger(file_name="f/1.json", pipe_id="abc", time_ms=1_700_000_000_123)


def names(table: Table) -> list[str]:
    return [c.name for c in table.columns]


def test_added_columns_get_stored_names_of_their_own() -> None:
    """A column added later never reads an older blob's column of the same name (decision 81)."""
    table = apply_change(TABLE, DropColumns(["KIND"]), has_rows=True)
    table = apply_change(table, AddColumns([Column(name="KIND", type="VARCHAR")]), has_rows=True)
    kind = table.column("KIND")
    assert names(table) == ["ID", "AT", "KIND"]
    assert kind.stored is not None and kind.stored.startswith(STORED_PREFIX)
    again = apply_change(table, DropColumns(["KIND"]), has_rows=True)
    again = apply_change(again, AddColumns([Column(name="KIND", type="VARCHAR")]), has_rows=True)
    assert again.column("KIND").stored not in (None, "KIND", kind.stored)
    assert stored_name(TABLE.column("ID")) == "ID"  # the table's first columns keep their names


def test_add_column_rules() -> None:
    with pytest.raises(CompilationError, match="column 'KIND' already exists"):
        apply_change(TABLE, AddColumns([Column(name="KIND", type="VARCHAR")]), has_rows=False)
    same = apply_change(TABLE, AddColumns([Column(name="KIND", type="NUMBER")], True), has_rows=False)
    assert same.column("KIND").type == "VARCHAR"  # IF NOT EXISTS: left as it was
    with pytest.raises(CompilationError, match="duplicate column name 'X'"):
        apply_change(
            TABLE, AddColumns([Column(name="X", type="DATE"), Column(name="X", type="DATE")]), has_rows=False
        )
    required = AddColumns([Column(name="X", type="DATE", nullable=False)])
    with pytest.raises(
        CompilationError,
        match="Non-nullable column 'X' cannot be added to non-empty table 'T' unless it has a non-null",
    ):
        apply_change(TABLE, required, has_rows=True)
    assert not apply_change(TABLE, required, has_rows=False).column("X").nullable
    # A TIMESTAMP_TZ's offsets have a blob column of their own, whose name no column may take.
    with pytest.raises(CompilationError, match="is reserved"):
        apply_change(TABLE, AddColumns([Column(name="__floe_tz_offset:AT", type="VARCHAR")]), has_rows=False)


def test_drop_rename_and_drop_not_null() -> None:
    with pytest.raises(CompilationError, match="invalid identifier 'NOPE'"):
        apply_change(TABLE, DropColumns(["NOPE"]), has_rows=False)
    assert names(apply_change(TABLE, DropColumns(["NOPE", "AT"], True), has_rows=False)) == ["ID", "KIND"]
    with pytest.raises(CompilationError, match="at least one column"):
        apply_change(TABLE, DropColumns(["ID", "KIND", "AT"]), has_rows=False)
    renamed = apply_change(TABLE, RenameColumn("KIND", "CATEGORY"), has_rows=True)
    assert names(renamed) == ["ID", "CATEGORY", "AT"] and stored_name(renamed.column("CATEGORY")) == "KIND"
    twice = apply_change(renamed, RenameColumn("CATEGORY", "K2"), has_rows=True)
    assert stored_name(twice.column("K2")) == "KIND"
    with pytest.raises(CompilationError, match="column 'ID' already exists"):
        apply_change(TABLE, RenameColumn("KIND", "ID"), has_rows=True)
    with pytest.raises(CompilationError, match="invalid identifier 'NOPE'"):
        apply_change(TABLE, RenameColumn("NOPE", "X"), has_rows=True)
    assert apply_change(TABLE, DropNotNull(["ID"]), has_rows=True).column("ID").nullable


def test_table_properties() -> None:
    on = apply_change(TABLE, SetTable(True, "c"), has_rows=True)
    assert on.enable_schema_evolution and on.comment == "c"
    off = apply_change(on, UnsetTable(["ENABLE_SCHEMA_EVOLUTION", "COMMENT"]), has_rows=True)
    assert not off.enable_schema_evolution and off.comment is None


def test_evolution_is_idempotent_and_recorded() -> None:
    """[EVO] new columns added, NOT NULL dropped; applied again (a replay, another task) it changes
    nothing more."""
    change = Evolution(add=(Column(name="SCORE", type="FLOAT"),), drop_not_null=("ID",))
    once = evolved(TABLE, change, TRIGGER, exact=False)
    assert names(once) == ["ID", "KIND", "AT", "SCORE"] and once.column("ID").nullable
    assert once.column("SCORE").evolution is not None
    assert once.column("SCORE").evolution.evolution_type == "ADD_COLUMN"
    assert (
        once.column("ID").evolution is not None
        and once.column("ID").evolution.evolution_type == "DROP_NOT_NULL"
    )
    assert evolved(once, change, TRIGGER, exact=False) == once
    # CASE_INSENSITIVE: a column of another case is the same column.
    assert evolved(once, Evolution(add=(Column(name="Score", type="FLOAT"),)), TRIGGER, exact=False) == once
    # CASE_SENSITIVE: it is not.
    exact = evolved(once, Evolution(add=(Column(name="Score", type="FLOAT"),)), TRIGGER, exact=True)
    assert names(exact)[-1] == "Score"
    assert matches("SCORE", "score", exact=False) and not matches("SCORE", "score", exact=True)


def test_a_hand_made_change_clears_the_evolution_record() -> None:
    """Snowflake: the record is 'set to NULL when the user manually modifies the table column'."""
    once = evolved(TABLE, Evolution(drop_not_null=("ID",)), TRIGGER, exact=False)
    renamed = apply_change(once, RenameColumn("ID", "IDENT"), has_rows=True)
    assert renamed.column("IDENT").evolution is None


def test_describe_table_shows_the_schema_evolution_record() -> None:
    """[BCR-1377] DESC TABLE shows SchemaEvolutionRecord for tables with ENABLE_SCHEMA_EVOLUTION."""
    columns, rows = describe_table(TABLE)
    assert columns == ["name", "type", "kind", "null?"]
    assert rows[0] == ["ID", "NUMBER(38,0)", "COLUMN", "N"]
    table = evolved(
        TABLE.model_copy(update={"enable_schema_evolution": True}),
        Evolution(add=(Column(name="SCORE", type="FLOAT"),)),
        TRIGGER,
        exact=False,
    )
    columns, rows = describe_table(table)
    assert columns[-1] == "schema evolution record"
    assert [r[-1] for r in rows[:3]] == [None, None, None]
    assert json.loads(rows[3][-1]) == {
        "evolutionType": "ADD_COLUMN",
        "evolutionMode": "SNOWPIPE",
        "fileName": "f/1.json",
        "triggeringTime": "2023-11-14 22:13:20.123 +0000",
        "pipeId": "abc",
    }


@dataclass
class FakeCatalog:
    """What may_evolve and authorize read: objects by kind and name."""

    objects: dict[tuple[type, str], object] = field(default_factory=dict)

    def find(self, model: type, name: str) -> object | None:
        return self.objects.get((model, name))

    def add(self, obj: Database | Schema | Table | Role) -> None:
        self.objects[(type(obj), obj.name)] = obj


def _catalog(grants: dict[str, list[str]], granted: dict[str, list[str]]) -> FakeCatalog:
    catalog = FakeCatalog()
    catalog.add(Database(name="DB", owner="SYSADMIN"))
    catalog.add(Schema(name="DB.S", owner="SYSADMIN"))
    catalog.add(TABLE)
    for role in ("LOADER", "GRANTEE", "PARENT", "OTHER", "PUBLIC"):
        on = {grant_key("DATABASE", "DB"): ["USAGE"], grant_key("SCHEMA", "DB.S"): ["USAGE"]}
        on[grant_key("TABLE", TABLE.name)] = grants.get(role, [])
        catalog.add(Role(name=role, grants=on, roles=granted.get(role, [])))
    return catalog


@pytest.mark.parametrize(
    ("grants", "granted"),
    [
        ({}, {}),
        ({"GRANTEE": ["EVOLVE SCHEMA"]}, {}),
        ({"GRANTEE": ["INSERT"]}, {}),
        ({"OTHER": ["EVOLVE SCHEMA"]}, {"PARENT": ["OTHER"]}),
        ({"OTHER": ["EVOLVE SCHEMA"]}, {"OTHER": ["PARENT"]}),
        ({}, {"PARENT": ["LOADER"]}),
        ({"PUBLIC": ["EVOLVE SCHEMA"]}, {}),
    ],
)
@pytest.mark.parametrize("role", ["LOADER", "GRANTEE", "PARENT", "OTHER", ADMIN_ROLE, "SYSADMIN"])
def test_may_evolve_agrees_with_authorize(
    grants: dict[str, list[str]], granted: dict[str, list[str]], role: str
) -> None:
    """The loader's check (floe) and the statements' check (services) give one answer for a pipe
    owner's OWNERSHIP or EVOLVE SCHEMA on the table."""
    catalog = _catalog(grants, granted)
    principal = Principal("U", frozenset({role}), primary=role, secondary=False)
    try:
        authorize(catalog, principal, Need("TABLE", TABLE.name, ("OWNERSHIP", "EVOLVE SCHEMA")))  # type: ignore[arg-type]
        expected = True
    except (ObjectNotFound, PermissionDenied):
        expected = False
    assert may_evolve(catalog, role, TABLE) is expected  # type: ignore[arg-type]
