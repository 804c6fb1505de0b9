"""What Floe loaded before issue 16, as acceptance cases: CSV, JSON and Parquet basics and ON_ERROR."""

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
        id="csv_skip_header_null_if",
        source=f"{CIT} (SKIP_HEADER; NULL_IF default \\N; EMPTY_FIELD_AS_NULL default TRUE)",
        columns="id INT, name VARCHAR, note VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)",
        files={"a.csv": b"id,name,note\n1,a,\\N\n2,,x\n"},
        rows=[(1, "a", None), (2, None, "x")],
        history={"a.csv": {"STATUS": "Loaded", "ROW_COUNT": 2, "ROW_PARSED": 2, "ERROR_COUNT": 0}},
    ),
    Case(
        id="csv_on_error_continue_first_error",
        source=(
            f"{CIT} (ON_ERROR = CONTINUE; error 100038 'Numeric value ... is not recognized'; "
            'FIRST_ERROR_LINE counts physical lines with the header, column as "<TABLE>"["<COL>":n])'
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1) ON_ERROR = CONTINUE",
        files={"b.csv": b"id,amount\n1,1.5\n2,abc\n3,3.25\n"},
        rows=[(1, 1.5), (3, 3.25)],
        history={
            "b.csv": {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 2,
                "ROW_PARSED": 3,
                "ERROR_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "Numeric value 'abc' is not recognized",
                "FIRST_ERROR_LINE_NUMBER": 3,
                "FIRST_ERROR_COLUMN_NAME": '"{TABLE}"["AMOUNT":2]',
            }
        },
    ),
    Case(
        id="csv_on_error_skip_file_default",
        source=f"{CIT} (Snowpipe's default ON_ERROR is SKIP_FILE)",
        columns="id INT, amount NUMBER(10,2)",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV)",
        files={"c.csv": b"1,1.5\n2,abc\n"},
        rows=[],
        history={"c.csv": {"STATUS": "Load failed", "ROW_COUNT": 0, "ERROR_COUNT": 1}},
    ),
    Case(
        id="json_strip_outer_array_transform",
        source=(
            f"{CIT} (STRIP_OUTER_ARRAY: one row per element); "
            "[TRF] https://docs.snowflake.com/en/user-guide/data-load-transform ($1:path::type)"
        ),
        columns="city VARCHAR, day DATE",
        copy=(
            "FROM (SELECT $1:location.city::varchar, $1:sale_date::date FROM @{stage}) "
            "FILE_FORMAT = (TYPE = JSON STRIP_OUTER_ARRAY = TRUE)"
        ),
        files={
            "d.json": b'[{"location": {"city": "Lexington"}, "sale_date": "2017-03-28"},'
            b' {"location": {"city": "Belmont"}, "sale_date": "2017-03-29"}]'
        },
        rows=[("Belmont", "2017-03-29"), ("Lexington", "2017-03-28")],
        history={"d.json": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="parquet_transform",
        source=f"{CIT} (Parquet read as $1 of each row, fields by name)",
        columns="id INT, name VARCHAR",
        copy="FROM (SELECT $1:id, $1:name FROM @{stage}) FILE_FORMAT = (TYPE = PARQUET)",
        files={"e.parquet": _parquet(pa.table({"id": [1, 2], "name": ["a", "b"]}))},
        rows=[(1, "a"), (2, "b")],
        history={"e.parquet": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
]
