"""The per-file query's layers: NULLs that are not errors, errors inside expressions, NOT NULL."""

from __future__ import annotations

import pytest

from floe.catalog.models import Column, Table
from pipeline.transform import new_connection
from pipeline.transform.query import empty_input, query_for
from tests.pipeline.transform.support import ORDERS, compile_for, load

pytestmark = pytest.mark.unit


def test_nullif_and_iff_nulls_are_not_errors() -> None:
    table = Table(
        name="D.S.T",
        columns=[Column(name="A", type="NUMBER", precision=9, scale=0), Column(name="B", type="VARCHAR")],
    )
    compiled = compile_for(
        table, select=["NULLIF($1, '')", "IFF($2 = 'x', NULL, $2)"], empty_field_as_null=False
    )
    out, result = load(compiled, b",x\n3,y\n")
    assert result.status == "LOADED", result
    assert out == [{"A": None, "B": None}, {"A": 3, "B": "y"}]


def test_errors_inside_expressions_are_found_and_described() -> None:
    table = Table(name="D.S.T", columns=[Column(name="A", type="NUMBER", precision=9, scale=0)])
    compiled = compile_for(table, select=["COALESCE($1::number * 2, 0)"], on_error="CONTINUE")
    out, result = load(compiled, b"1\nabc\n\n")
    assert [r["A"] for r in out] == [2, 0]
    assert (result.errors_seen, result.first_error_line) == (1, 2)
    assert result.first_error == "Numeric value 'abc' is not recognized"


def test_not_null_violation() -> None:
    compiled = compile_for(ORDERS, columns=["NAME"], select=["$1"], on_error="CONTINUE")
    _, result = load(compiled, b"a\n")
    assert result.status == "LOAD_FAILED"
    assert result.code == "100088"
    assert result.first_error is not None and result.first_error.startswith(
        "NULL result in a non-nullable column"
    )
    assert result.first_error_column == '"ORDERS"["ID":1]'


def test_the_query_is_built_once_per_input_shape() -> None:
    compiled = compile_for(ORDERS)
    assert len(compiled.queries) == 1  # CSV: bound by compile_copy already
    con = new_connection()
    query = query_for(compiled, empty_input(compiled), con)
    assert query_for(compiled, empty_input(compiled), con) is query
    assert list(compiled.queries.values()) == [query]


def test_each_plan_that_can_fail_gets_a_status_column() -> None:
    # NAME is loaded and has a length limit; ID is NOT NULL but not loaded; the rest stay NULL.
    compiled = compile_for(ORDERS, columns=["NAME"], select=["$1"])
    query = next(iter(compiled.queries.values()))
    assert [compiled.plans[k].column.name for k in query.status] == ["NAME", "ID"]
    assert "CAST(4 AS UTINYINT)" in query.sql  # ID is not loaded: every row violates NOT NULL
    assert query.pre_try[0] is not None and all(p is None for p in query.pre_try[1:])
