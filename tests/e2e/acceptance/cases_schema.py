"""Table schema evolution (decision 81): ENABLE_SCHEMA_EVOLUTION = TRUE with MATCH_BY_COLUMN_NAME adds
the columns files bring and drops NOT NULL where a file lacks a column.

Files of one case may load in any order (and in parallel tasks), so the queries name their columns
rather than rely on the order evolution added them in. ALTER TABLE itself, with pipes loading before
and after each change, is tests/e2e/test_schema_evolution.py (a case's ``setup`` runs before its
table exists).
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq

from tests.e2e.acceptance.case import Case

EVO = "[EVO] https://docs.snowflake.com/en/user-guide/data-load-schema-evolution"
CIT = "[CIT] https://docs.snowflake.com/en/sql-reference/sql/copy-into-table"
EVOLVING = "ENABLE_SCHEMA_EVOLUTION = TRUE"


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _orc(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    orc.write_table(table, buf)
    return buf.getvalue()


JSON_FILES = {
    "1.json": b'{"id": 1, "name": "a"}\n',
    "2.json": b'{"id": 2, "name": "b", "Score": 9.5, "tags": ["x", "y"]}\n'
    b'{"id": 3, "name": "c", "Score": 1}\n',
}

CASES = [
    Case(
        id="schema_evolution_parquet_adds_columns",
        source=f"{EVO} (example: file2 adds a column, file3 another; 'Automatically adding new columns'; "
        "the rows loaded before a column existed read NULL in it)",
        columns="a INT, b INT, c INT",
        table_options=EVOLVING,
        copy="FROM @{stage} FILE_FORMAT = (TYPE = PARQUET) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE",
        files={
            "file2.parquet": _parquet(pa.table({"a": [1], "b": [2], "c": [3], "d": [4]})),
            "file3.parquet": _parquet(pa.table({"a": [5], "b": [6], "c": [7], "e": [8]})),
        },
        query="SELECT a, b, c, d, e FROM {table} ORDER BY a",
        rows=[(1, 2, 3, 4, None), (5, 6, 7, None, 8)],
        history={"file2.parquet": {"STATUS": "Loaded"}, "file3.parquet": {"STATUS": "Loaded"}},
    ),
    Case(
        id="schema_evolution_json_types_inferred",
        source=f"{EVO} (JSON; types inferred from the values: a number column, an array as VARIANT; "
        "CASE_INSENSITIVE names them in upper case)",
        columns="id INT, name VARCHAR",
        table_options=EVOLVING,
        copy="FROM @{stage} FILE_FORMAT = (TYPE = JSON) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE",
        files=JSON_FILES,
        query="SELECT id, name, score, tags FROM {table} ORDER BY id",
        rows=[(1, "a", None, None), (2, "b", 9.5, '["x","y"]'), (3, "c", 1.0, None)],
        history={
            "1.json": {"STATUS": "Loaded", "ROW_COUNT": 1},
            "2.json": {"STATUS": "Loaded", "ROW_COUNT": 2},
        },
    ),
    Case(
        id="schema_evolution_off_ignores_new_columns",
        source=f"{CIT} (MATCH_BY_COLUMN_NAME: 'Any columns in the data files that do not match a table "
        f"column are ignored'); {EVO} (evolution only with ENABLE_SCHEMA_EVOLUTION = TRUE)",
        columns="id INT, name VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = JSON) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE",
        files=JSON_FILES,
        query="SELECT * FROM {table} ORDER BY id",
        rows=[(1, "a"), (2, "b"), (3, "c")],
        history={"2.json": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="schema_evolution_drops_not_null",
        source=f"{EVO} ('Automatically dropping the NOT NULL constraint from columns that are missing in "
        "new data files')",
        columns="id INT NOT NULL, code VARCHAR NOT NULL",
        table_options=EVOLVING,
        copy="FROM @{stage} FILE_FORMAT = (TYPE = JSON) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE",
        files={"n.json": b'{"id": 1}\n'},
        rows=[(1, None)],
        history={"n.json": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="schema_evolution_off_keeps_not_null",
        source=f"{EVO} (without ENABLE_SCHEMA_EVOLUTION the NOT NULL column stays: the row fails, "
        "and SKIP_FILE fails the file)",
        columns="id INT NOT NULL, code VARCHAR NOT NULL",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = JSON) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE",
        files={"n.json": b'{"id": 1}\n'},
        rows=[],
        history={"n.json": {"STATUS": "Load failed", "ROW_COUNT": 0}},
    ),
    Case(
        id="schema_evolution_csv_parse_header",
        source=f"{EVO} ('for schema evolution with CSV, when used with MATCH_BY_COLUMN_NAME and "
        "PARSE_HEADER, ERROR_ON_COLUMN_COUNT_MISMATCH must be set to false'); the header names the "
        "new column, its text gives the type",
        columns="id INT, name VARCHAR",
        table_options=EVOLVING,
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV PARSE_HEADER = TRUE "
        "ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE",
        files={"c.csv": b"id,name,amount\n1,a,2.5\n2,b,3\n"},
        query="SELECT id, name, amount FROM {table} ORDER BY id",
        rows=[(1, "a", 2.5), (2, "b", 3.0)],
        history={"c.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="schema_evolution_orc_case_sensitive",
        source=f"{EVO} ('This feature supports Apache Avro, Apache Parquet, CSV, JSON, and ORC files'); "
        "CASE_SENSITIVE keeps the file's name as written",
        columns='"id" INT',
        table_options=EVOLVING,
        copy="FROM @{stage} FILE_FORMAT = (TYPE = ORC) MATCH_BY_COLUMN_NAME = CASE_SENSITIVE",
        files={"o.orc": _orc(pa.table({"id": [1, 2], "Extra": ["x", None]}))},
        query='SELECT "id", "Extra" FROM {table} ORDER BY 1',
        rows=[(1, "x"), (2, None)],
        history={"o.orc": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
]
