"""Several small files through one shared query (``copy_group``): every file it answers for gets
exactly what ``apply_copy`` gives it alone, and every file it cannot answer for is left to
``apply_copy``."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe.catalog.models import OnError
from floe.records import LoadOutcome
from pipeline.formats import read_raw
from pipeline.transform import CompiledCopy, apply_copy, copy_group, groupable
from tests.pipeline.transform.support import ORDERS, compile_for

pytestmark = pytest.mark.unit

GOOD = b"%d,n%d,1.5,2024-01-01 10:00:00,true,2024-01-0%d\n"


def good_file(start: int, rows: int) -> bytes:
    return b"".join(GOOD % (i, i % 100, 1 + i % 9) for i in range(start, start + rows))


BAD_VALUES = {
    "amount": b"%d,n,zz,2024-01-01 10:00:00,true,2024-01-01\n",  # a conversion error
    "not_null": b",n,1.5,2024-01-01 10:00:00,true,2024-01-01\n",  # a NULL ID
    "too_long": b"%d,abcdefghijk,1.5,2024-01-01 10:00:00,true,2024-01-01\n",  # VARCHAR(8)
    "short": b"%d,n\n",  # a parse error: too few fields
    "slow_path": b"%d,n,1.5,2024-01-01 10:00:00,TRUE,01-Jan-2024\n",  # converts only by the full rule
}


def bad_file(kind: str, start: int) -> bytes:
    line = BAD_VALUES[kind]
    bad = line % start if b"%d" in line else line
    return good_file(start + 1, 3) + bad + good_file(start + 10, 2)


def alone(compiled: CompiledCopy, name: str, data: bytes) -> tuple[list[dict[str, object]], object]:
    rows, outcome = apply_copy(compiled, read_raw(data, compiled.file_format, path=name), filename=name)
    return rows.to_pylist(), outcome


def grouped(
    compiled: CompiledCopy, files: list[tuple[str, bytes]]
) -> list[tuple[list[dict[str, object]], object] | None]:
    raws = [(name, read_raw(data, compiled.file_format, path=name)) for name, data in files]
    return [None if g is None else (g[0].to_pylist(), g[1]) for g in copy_group(compiled, raws)]


@pytest.mark.parametrize("on_error", ["SKIP_FILE_PCT", "CONTINUE", "SKIP_FILE"])
def test_clean_files_come_out_of_one_query_as_they_do_alone(on_error: OnError) -> None:
    compiled = compile_for(ORDERS, on_error=on_error)
    files = [(f"f{i}.csv", good_file(i * 100, 1 + i)) for i in range(6)]
    out = grouped(compiled, files)
    assert all(g is not None for g in out), "clean files of one width are the group's"
    assert out == [alone(compiled, name, data) for name, data in files]


@pytest.mark.parametrize("kind", sorted(BAD_VALUES))
def test_a_file_with_an_error_is_left_to_load_alone_and_the_others_are_not(kind: str) -> None:
    compiled = compile_for(ORDERS, on_error="CONTINUE")
    files = [("a.csv", good_file(0, 4)), ("bad.csv", bad_file(kind, 50)), ("c.csv", good_file(200, 3))]
    out = grouped(compiled, files)
    assert out[1] is None
    assert [out[0], out[2]] == [alone(compiled, n, d) for n, d in (files[0], files[2])]


def test_a_file_of_another_width_is_left_to_load_alone() -> None:
    compiled = compile_for(ORDERS, columns=["ID", "NAME"], on_error="CONTINUE")
    files = [("a.csv", b"1,a\n2,b\n"), ("wide.csv", b"3,c,x\n"), ("c.csv", b"4,d\n")]
    out = grouped(compiled, files)
    assert out[1] is None and out[0] is not None and out[2] is not None
    assert [out[0], out[2]] == [alone(compiled, n, d) for n, d in (files[0], files[2])]


def test_each_file_keeps_its_name_and_row_numbers() -> None:
    compiled = compile_for(
        ORDERS, columns=["ID", "NAME"], select=["METADATA$FILE_ROW_NUMBER", "METADATA$FILENAME"]
    )
    files = [("d/a.csv", b"1,a\n2,b\n"), ("b.csv", b"3,c\n"), ("d/c.csv", b"4,d\n5,e\n6,f\n")]
    out = grouped(compiled, files)
    assert all(g is not None for g in out)
    assert out == [alone(compiled, name, data) for name, data in files]
    assert [r["NAME"] for g in out if g for r in g[0]] == ["d/a.csv"] * 2 + ["b.csv"] + ["d/c.csv"] * 3


def test_a_copy_that_reads_the_files_etag_is_not_grouped() -> None:
    compiled = compile_for(ORDERS, columns=["ID", "NAME"], select=["$1", "METADATA$FILE_CONTENT_KEY"])
    assert not groupable(compiled)
    assert grouped(compiled, [("a.csv", b"1,a\n"), ("b.csv", b"2,b\n")]) == [None, None]


def test_one_file_is_no_group() -> None:
    compiled = compile_for(ORDERS)
    assert grouped(compiled, [("a.csv", good_file(0, 3))]) == [None]


def good_rows(start: int, rows: int) -> list[dict[str, object]]:
    """The table rows ``good_file(start, rows)`` holds, worked out by hand from its records."""
    return [
        {
            "ID": i,
            "NAME": f"n{i % 100}",
            "AMOUNT": Decimal("1.50"),
            "TS": dt.datetime(2024, 1, 1, 10, 0),
            "OK": True,
            "DAY": dt.date(2024, 1, 1 + i % 9),
        }
        for i in range(start, start + rows)
    ]


FIRST_ERRORS = {
    "amount": "Numeric value 'zz' is not recognized",
    "not_null": (
        "NULL result in a non-nullable column. Use quotes if an empty field should be interpreted as "
        "an empty string instead of a null"
    ),
    "too_long": "User character length limit (8) exceeded by string 'abcdefghijk'",
    "short": 'End of record reached while expected to parse column \'"ORDERS"["AMOUNT":3]\'',
}
"""The error of the bad record of each kind (Snowflake's words); slow_path's record has none."""


def expected(
    name: str, kind: str | None, start: int, rows: int, on_error: str
) -> tuple[list[dict[str, object]], LoadOutcome]:
    """What a file of the property loads and its load-history record, by ON_ERROR's rules: a clean
    file (``good_file(start, rows)``) loads whole; ``bad_file(kind, start)`` has 6 records, the 4th
    bad (but slow_path's, which the full rule converts: DAY 01-Jan-2024), so CONTINUE and
    SKIP_FILE_2 load the other 5 and SKIP_FILE none. ERROR_LIMIT: 1, 2, or the rows parsed."""
    if kind is None:
        loaded, parsed, errors = good_rows(start, rows), rows, 0
    elif kind == "slow_path":
        odd = {**good_rows(start, 1)[0], "NAME": "n", "DAY": dt.date(2024, 1, 1)}
        loaded, parsed, errors = [*good_rows(start + 1, 3), odd, *good_rows(start + 10, 2)], 6, 0
    else:
        loaded, parsed, errors = [*good_rows(start + 1, 3), *good_rows(start + 10, 2)], 6, 1
    limit = {"CONTINUE": parsed, "SKIP_FILE": 1, "SKIP_FILE_2": 2}[on_error]
    if errors >= limit:
        loaded = []
    status = "LOAD_FAILED" if errors >= limit else "PARTIALLY_LOADED" if errors else "LOADED"
    outcome = LoadOutcome(
        name,
        status,
        rows_parsed=parsed,
        rows_loaded=len(loaded),
        errors_seen=errors,
        error_limit=limit,
        first_error=FIRST_ERRORS[kind] if errors and kind else None,
        first_error_line=4 if errors else None,
    )
    return loaded, outcome


def summary(outcome: LoadOutcome) -> LoadOutcome:
    """The load-history columns ``expected`` works out (the error's details left out)."""
    return LoadOutcome(
        outcome.path,
        outcome.status,
        rows_parsed=outcome.rows_parsed,
        rows_loaded=outcome.rows_loaded,
        errors_seen=outcome.errors_seen,
        error_limit=outcome.error_limit,
        first_error=outcome.first_error,
        first_error_line=outcome.first_error_line,
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from([None, None, *sorted(BAD_VALUES)]), min_size=2, max_size=8),
    on_error=st.sampled_from(["CONTINUE", "SKIP_FILE", "SKIP_FILE_2"]),
)
def test_whatever_the_mix_each_file_gets_its_own_result(kinds: list[str | None], on_error: str) -> None:
    """The group answers for every clean file (when there are two) and for no other; each file,
    from the group or then alone, loads the rows and gets the load-history record worked out by
    hand from what it holds (``expected``), not from what Floe's other road gives."""
    limit = 2 if on_error == "SKIP_FILE_2" else 0
    compiled = compile_for(ORDERS, on_error="SKIP_FILE_N" if limit else on_error, limit=limit)  # type: ignore[arg-type]
    files = [
        (f"f{i}.csv", good_file(i * 100, 2 + i) if kind is None else bad_file(kind, i * 100))
        for i, kind in enumerate(kinds)
    ]
    out = grouped(compiled, files)
    for i, ((name, data), kind, g) in enumerate(zip(files, kinds, out, strict=True)):
        rows, outcome = expected(name, kind, i * 100, 2 + i, on_error)
        if kind is not None:
            assert g is None, f"{name} has a record the group's query flags: it loads alone"
            got_rows, got = alone(compiled, name, data)
            assert (got_rows, summary(got)) == (rows, outcome), name
            continue
        if sum(k is None for k in kinds) >= 2:
            assert g is not None, f"{name} is clean: the group loads it"
        # (A lone clean file may still share the query with files it then leaves to load alone.)
        assert (g or alone(compiled, name, data)) == (rows, outcome), name
