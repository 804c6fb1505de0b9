"""Parquet's USE_VECTORIZED_SCANNER through the transform: with FALSE (the default) a map reads as
``{"key_value": [{"key": ..., "value": ...}]}`` and NULL values are left out of ``$1``, of its
structs and of its lists; with TRUE maps are objects and NULLs are shown (copy-into-table,
USE_VECTORIZED_SCANNER, and its two examples, reproduced here as ``PERSON``)."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyarrow import orc

from floe.catalog.models import Column, CopySpec, FileFormat, Table
from pipeline.formats import read_raw
from pipeline.transform import CompiledCopy, compile_copy
from pipeline.transform.query import ShapeSql, input_table
from tests.pipeline.transform.support import VARIANT_TABLE, compile_for, load, parquet_bytes

pytestmark = pytest.mark.unit

PERSON = parquet_bytes(
    pa.table(
        {
            "my_map": pa.array([[("k1", "v1"), ("k2", "v2")], None], pa.map_(pa.string(), pa.string())),
            "person": [
                {
                    "name": "Adam",
                    "nickname": None,
                    "age": 34,
                    "phone_numbers": ["1234567890", "0987654321", None, "6781234590"],
                },
                {"name": None, "nickname": None, "age": None, "phone_numbers": None},
            ],
        }
    )
)
MY_MAP = '{"key_value":[{"key":"k1","value":"v1"},{"key":"k2","value":"v2"}]}'
ADAM = '{"name":"Adam","age":34,"phone_numbers":["1234567890","0987654321","6781234590"]}'
ADAM_SHOWN = (
    '{"name":"Adam","nickname":null,"age":34,"phone_numbers":["1234567890","0987654321",null,"6781234590"]}'
)
TWO = Table(
    name="D.S.TWO", columns=[Column(name="MY_MAP", type="VARIANT"), Column(name="PERSON", type="VARIANT")]
)


def variants(compiled: CompiledCopy, data: bytes) -> list[tuple[Any, ...]]:
    out, result = load(compiled, data, "f.parquet")
    assert result.status == "LOADED", result
    return [tuple(row.values()) for row in out]


def by_name(table: Table, **fmt: Any) -> CompiledCopy:
    copy = CopySpec(
        table=table.name,
        stage="D.S.ST",
        file_format=FileFormat(type="PARQUET", **fmt),
        match_by_column_name="CASE_INSENSITIVE",
    )
    return compile_copy(copy, table, "PARQUET")


def test_default_reader_shows_a_map_as_entries_and_leaves_nulls_out() -> None:
    """The documented example of USE_VECTORIZED_SCANNER = FALSE: "my_map": {"key_value": [...]},
    and "person" without "nickname" and without the NULL phone number."""
    compiled = compile_for(TWO, select=["$1:my_map", "$1:person"], type="PARQUET")
    assert variants(compiled, PERSON) == [(MY_MAP, ADAM), (None, "{}")]


def test_vectorized_scanner_shows_a_map_as_an_object_and_shows_nulls() -> None:
    """The documented example of USE_VECTORIZED_SCANNER = TRUE: "my_map": {"k1": "v1", "k2": "v2"}
    and "nickname": null."""
    compiled = compile_for(
        TWO, select=["$1:my_map", "$1:person"], type="PARQUET", use_vectorized_scanner=True
    )
    assert variants(compiled, PERSON) == [
        ('{"k1":"v1","k2":"v2"}', ADAM_SHOWN),
        (None, '{"name":null,"nickname":null,"age":null,"phone_numbers":null}'),
    ]


def test_whole_row_leaves_null_columns_and_fields_out_by_default() -> None:
    """``$1`` into one VARIANT column (a plain COPY): a NULL column is left out of the row's object
    as a NULL field is out of a struct's."""
    assert variants(compile_for(VARIANT_TABLE, type="PARQUET"), PERSON) == [
        ('{"my_map":' + MY_MAP + ',"person":' + ADAM + "}",),
        ('{"person":{}}',),
    ]
    vectorized = compile_for(VARIANT_TABLE, type="PARQUET", use_vectorized_scanner=True)
    assert variants(vectorized, PERSON)[1] == (
        '{"my_map":null,"person":{"name":null,"nickname":null,"age":null,"phone_numbers":null}}',
    )


def test_match_by_column_name_loads_struct_and_map_columns_as_the_reader_shows_them() -> None:
    assert variants(by_name(TWO), PERSON) == [(MY_MAP, ADAM), (None, "{}")]
    assert variants(by_name(TWO, use_vectorized_scanner=True), PERSON)[0] == (
        '{"k1":"v1","k2":"v2"}',
        ADAM_SHOWN,
    )


PATHS = Table(
    name="D.S.PATHS",
    columns=[
        Column(name="V1", type="VARCHAR"),
        Column(name="V2", type="VARIANT"),
        Column(name="NICK", type="VARIANT"),
        Column(name="PHONE", type="VARCHAR"),
        Column(name="N", type="NUMBER"),
    ],
)


def test_paths_read_into_the_shapes_the_reader_shows() -> None:
    """``$1:my_map:key_value[0]:value`` reads the entries; ``$1:person:nickname`` is SQL NULL either
    way (a missing field and a NULL one read alike); the NULL phone number is gone from the list by
    default, so index 2 is the third number."""
    select = [
        "$1:my_map:key_value[0]:value",
        "$1:my_map:key_value[1]",
        "$1:person:nickname",
        "$1:person:phone_numbers[2]",
        "1",
    ]
    rows = variants(compile_for(PATHS, select=select, type="PARQUET"), PERSON)
    assert rows[0] == ("v1", '{"key":"k2","value":"v2"}', None, "6781234590", 1)
    vectorized = compile_for(
        PATHS,
        select=["$1:my_map:k1", "$1:my_map:k2", "$1:person:nickname", "$1:person:phone_numbers[2]", "1"],
        type="PARQUET",
        use_vectorized_scanner=True,
    )
    assert variants(vectorized, PERSON)[0] == ("v1", '"v2"', "null", None, 1)


NESTED = parquet_bytes(
    pa.table(
        {
            "id": [1, 2],
            "orders": pa.array(
                [
                    [
                        {"sku": "a", "qty": None, "tags": {"x": None}},
                        None,
                        {"sku": None, "qty": 2, "tags": None},
                    ],
                    [],
                ]
            ),
            "attrs": pa.array(
                [[("color", {"rgb": None, "name": "red"})], [("size", None)]],
                pa.map_(pa.string(), pa.struct([("rgb", pa.int64()), ("name", pa.string())])),
            ),
        }
    )
)
NESTED_TABLE = Table(
    name="D.S.NESTED",
    columns=[
        Column(name="ORDERS", type="VARIANT"),
        Column(name="ATTRS", type="VARIANT"),
        Column(name="N", type="NUMBER"),
        Column(name="TEXT", type="VARCHAR"),
    ],
)


def test_structs_in_lists_and_in_map_values_leave_their_nulls_out() -> None:
    select = ["$1:orders", "$1:attrs", "ARRAY_SIZE($1:orders)", "$1:orders[1]:qty"]
    rows = variants(compile_for(NESTED_TABLE, select=select, type="PARQUET"), NESTED)
    assert rows == [
        (
            '[{"sku":"a","tags":{}},{"qty":2}]',
            '{"key_value":[{"key":"color","value":{"name":"red"}}]}',
            2,
            "2",
        ),
        ("[]", '{"key_value":[{"key":"size"}]}', 0, None),
    ]


def test_a_struct_loaded_into_text_is_its_json_by_default() -> None:
    """A struct's text is the JSON of the object Snowflake's reader shows (DuckDB's own text of a
    struct, ``{'a': 1}``, is not JSON); a map's likewise."""
    table = Table(
        name="D.S.T", columns=[Column(name="PERSON", type="VARCHAR"), Column(name="MY_MAP", type="VARCHAR")]
    )
    assert variants(by_name(table), PERSON)[0] == (ADAM, MY_MAP)


def test_flat_files_pay_nothing() -> None:
    """A file without structs adds nothing to the query's source; ``$1`` of one without NULLs is the
    same SQL as with the vectorized scanner (DuckDB's to_json of the row)."""
    data = parquet_bytes(pa.table({"id": [1, 2], "name": ["a", "b"], "l": [[1], [2, 3]]}))
    columns = Table(
        name="D.S.C", columns=[Column(name="ID", type="NUMBER"), Column(name="NAME", type="VARCHAR")]
    )
    for compiled in (by_name(columns), compile_for(columns, select=["$1:id", "$1:name"], type="PARQUET")):
        raw = read_raw(data, compiled.file_format, path="f.parquet")
        assert input_table(compiled, raw)[1] == ShapeSql()
    shapes = []
    for vectorized in (False, True):
        compiled = compile_for(VARIANT_TABLE, type="PARQUET", use_vectorized_scanner=vectorized)
        shapes.append(input_table(compiled, read_raw(data, compiled.file_format, path="f.parquet"))[1])
    assert shapes[0] == shapes[1]
    assert shapes[0].replace == ()


def test_other_columnar_formats_keep_their_nulls() -> None:
    """USE_VECTORIZED_SCANNER is Parquet's: an ORC struct still shows its NULL fields."""
    buf = io.BytesIO()
    struct = pa.struct([("a", pa.int64()), ("b", pa.string())])
    orc.write_table(pa.table({"s": pa.array([{"a": 1, "b": None}], struct)}), buf)
    compiled = compile_for(VARIANT_TABLE, type="ORC")
    assert variants(compiled, buf.getvalue()) == [('{"s":{"a":1,"b":null}}',)]


# ---------------------------------------------------------------------------------------------
# Property: the default reader's JSON is the vectorized scanner's with every NULL left out (scalar
# types that read alike either way: the scanner's own timestamp and binary rules are not this test's)


def _strip(value: Any) -> Any:
    """The oracle: a JSON value with NULL object members and NULL array elements left out."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value if v is not None]
    return value


KEYS = ["a", "B", 'q"uote', "back\\slash", "tab\t", "\x1f", "é", "key_value", "null"]
SCALARS: list[tuple[pa.DataType, st.SearchStrategy[Any]]] = [
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.int8(), st.integers(-128, 127)),
    (pa.float64(), st.floats(allow_nan=False, allow_infinity=False)),
    (pa.bool_(), st.booleans()),
    (pa.string(), st.text(max_size=6)),
    (pa.decimal128(9, 2), st.decimals(-(10**6), 10**6, places=2, allow_nan=False, allow_infinity=False)),
    (pa.date32(), st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1))),
]


@st.composite
def _typed(draw: st.DrawFn, depth: int = 0) -> tuple[pa.DataType, st.SearchStrategy[Any]]:
    """An Arrow type (scalars, structs and lists, nested) and a strategy for its values, NULLs included."""
    kind = draw(st.sampled_from(["scalar", "struct", "list"] if depth < 3 else ["scalar"]))
    if kind == "scalar":
        t, values = draw(st.sampled_from(SCALARS))
    elif kind == "struct":
        names = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
        fields = [(name, draw(_typed(depth + 1))) for name in names]
        t = pa.struct([(name, ft) for name, (ft, _) in fields])
        values = st.fixed_dictionaries({name: fv for name, (_, fv) in fields})
    else:
        vt, vv = draw(_typed(depth + 1))
        t, values = pa.list_(vt), st.lists(vv, max_size=3)
    return t, st.one_of(st.none(), values)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_default_reader_json_is_the_scanners_without_its_nulls(data: st.DataObject) -> None:
    """For any nesting of structs and lists, ``$1`` and ``$1:col`` read by default are what the
    vectorized scanner reads, with NULL fields and NULL list elements left out. The scanner's JSON is
    DuckDB's to_json, and the oracle is plain Python: neither is the SQL under test."""
    columns = data.draw(st.lists(_typed(), min_size=1, max_size=3))
    n = data.draw(st.integers(1, 4))
    table = pa.table(
        {f"c{i}": pa.array([data.draw(values) for _ in range(n)], t) for i, (t, values) in enumerate(columns)}
    )
    file = parquet_bytes(table)
    whole = [json.loads(r[0]) for r in variants(compile_for(VARIANT_TABLE, type="PARQUET"), file)]
    shown = [
        json.loads(r[0])
        for r in variants(compile_for(VARIANT_TABLE, type="PARQUET", use_vectorized_scanner=True), file)
    ]
    assert whole == [_strip(row) for row in shown]
    one = Table(name="D.S.ONE", columns=[Column(name="V", type="VARIANT")])
    col = [r[0] for r in variants(compile_for(one, select=["$1:c0"], type="PARQUET"), file)]
    col_shown = [
        r[0]
        for r in variants(
            compile_for(one, select=["$1:c0"], type="PARQUET", use_vectorized_scanner=True), file
        )
    ]
    assert [None if v is None else json.loads(v) for v in col] == [
        None if v is None else _strip(json.loads(v)) for v in col_shown
    ]


def test_the_oracle_leaves_nulls_out_at_every_depth() -> None:
    assert _strip({"a": None, "b": [1, None, {"c": None, "d": [None]}]}) == {"b": [1, {"d": []}]}


def _nested(depth: int) -> pa.DataType:
    """A struct ``depth`` levels deep: each level a scalar and the next level (a list at the bottom)."""
    t: pa.DataType = pa.list_(pa.struct([("z", pa.int64())]))
    for _ in range(depth):
        t = pa.struct([("n", pa.int64()), ("deeper", t)])
    return t


def _nested_value(depth: int, null_at: int) -> Any:
    value: Any = [{"z": 1}, None, {"z": None}]
    for level in range(depth, 0, -1):
        value = {"n": None if level == null_at else level, "deeper": value}
    return value


def test_a_deeply_nested_struct_reads_as_the_scanner_shows_it_without_nulls() -> None:
    """Past ``MAX_PATH`` levels the SQL binds the struct to a variable of its own, and past
    ``FAST_DEPTH`` it builds every object by hand: the JSON is the same as at shallow depths."""
    depth = 20
    values = [_nested_value(depth, null_at) for null_at in (0, 1, 5, 9, 17, 20)] + [None]
    file = parquet_bytes(pa.table({"c0": pa.array(values, _nested(depth))}))
    whole = [json.loads(r[0]) for r in variants(compile_for(VARIANT_TABLE, type="PARQUET"), file)]
    shown = [
        json.loads(r[0])
        for r in variants(compile_for(VARIANT_TABLE, type="PARQUET", use_vectorized_scanner=True), file)
    ]
    assert whole == [_strip(row) for row in shown]
    assert whole[1]["c0"] == _strip(_nested_value(depth, 1))  # the oracle sees the values themselves


def test_the_sql_of_a_nested_type_grows_linearly_with_its_depth() -> None:
    """The file chooses its type: the SQL built from it must not grow faster than the type (it was
    cubic: 115 MB for 200 levels)."""
    from pipeline.transform.query import reader_text

    sizes = {d: len(reader_text('"c0"', _nested(d))) for d in (50, 100, 200)}
    assert sizes[200] <= 2.2 * sizes[100] and sizes[100] <= 2.2 * sizes[50], sizes
