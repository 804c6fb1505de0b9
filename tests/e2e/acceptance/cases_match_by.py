"""MATCH_BY_COLUMN_NAME, INCLUDE_METADATA and the METADATA$ columns of a file."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from tests.e2e.acceptance.case import Case

CIT = "[CIT] https://docs.snowflake.com/en/sql-reference/sql/copy-into-table"


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


CASES = [
    Case(
        id="match_by_parquet_case_insensitive",
        source=f"{CIT} (MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE: columns by name, order irrelevant, "
        "extra file columns ignored, missing ones NULL; example 'Loading Parquet data ... "
        "MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE')",
        columns="continent VARCHAR, country VARCHAR, city VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = PARQUET) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE",
        files={
            "a.parquet": _parquet(
                pa.table({"Country": ["France", "Peru"], "CONTINENT": ["Europe", "America"], "pop": [1, 2]})
            )
        },
        rows=[("America", "Peru", None), ("Europe", "France", None)],
        history={"a.parquet": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="match_by_json_case_sensitive_include_metadata",
        source=f"{CIT} (MATCH_BY_COLUMN_NAME = CASE_SENSITIVE; INCLUDE_METADATA = (col = METADATA$FILENAME, "
        "...) needs MATCH_BY_COLUMN_NAME and wins over a file column of that name); "
        "[META] https://docs.snowflake.com/en/user-guide/querying-metadata",
        columns='"id" INT, "Name" VARCHAR, file VARCHAR, row_no INT',
        copy="FROM @{stage} FILE_FORMAT = (TYPE = JSON) MATCH_BY_COLUMN_NAME = CASE_SENSITIVE "
        "INCLUDE_METADATA = (file = METADATA$FILENAME, row_no = METADATA$FILE_ROW_NUMBER)",
        files={"b.json": b'{"id": 1, "Name": "ann", "FILE": "x"}\n{"ID": 2, "name": "bo"}\n'},
        rows=[(1, "ann", "b.json", 1), (None, None, "b.json", 2)],
        history={"b.json": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
]
