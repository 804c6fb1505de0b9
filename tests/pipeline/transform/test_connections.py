"""The transform's DuckDB connections: sandboxed, memory-limited."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import pytest

from floe.errors import FileLoadError
from pipeline.formats import read_raw
from pipeline.transform import apply_copy, connections, new_connection
from tests.pipeline.transform.support import NOTE, ORDERS, compile_for
from tests.security.attacks import copy_transform as attack

pytestmark = pytest.mark.unit


def test_explicit_connection() -> None:
    compiled = compile_for(ORDERS)
    raw = read_raw(b"1,a,1,2024-01-01,true,2024-01-01\n", compiled.file_format, path="f.csv")
    table, result = apply_copy(compiled, raw, filename="f.csv", con=new_connection())
    assert result.status == "LOADED" and table.num_rows == 1


def test_the_transform_connections_cannot_read_files(secret: Path) -> None:
    """Defence in depth: even SQL that reached DuckDB could not read a file."""
    for con in (new_connection(), connections.connection(None), connections.compile_connection()):
        for sql in ("SELECT * FROM read_text('/etc/passwd')", f"SELECT * FROM read_text('{secret}')"):
            with pytest.raises(duckdb.Error, match="disabled"):
                con.sql(sql).fetchall()
    # A plan whose SQL reads a file, as the payload made one: the file fails, unread.
    compiled = compile_for(NOTE, select=["$1"])
    plan = dataclasses.replace(compiled.plans[0], pre=f"({attack.read_file_sql(str(secret))})")
    forced = dataclasses.replace(compiled, plans=(plan,), queries={})
    raw = read_raw(b"a\n", forced.file_format, path="f.csv")
    with pytest.raises(FileLoadError, match="disabled") as caught:
        apply_copy(forced, raw, filename="f.csv", con=new_connection())
    assert "TOP-SECRET" not in caught.value.message


def test_new_connection_takes_a_memory_limit() -> None:
    con = new_connection(memory_limit="123MB")
    limit = con.sql("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert limit.startswith("117") or limit.startswith("123"), limit  # DuckDB shows MiB
    with pytest.raises(duckdb.Error):
        con.execute("SET memory_limit = '8GB'")  # locked
