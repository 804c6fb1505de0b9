"""CSV with PARSE_HEADER = TRUE loaded by MATCH_BY_COLUMN_NAME through a pipe (decision 82).

INFER_SCHEMA and CREATE TABLE ... USING TEMPLATE read staged files when they run, before any pipe
exists, so they are tested against real stages in tests/services/test_infer_schema.py.
"""

from __future__ import annotations

from tests.e2e.acceptance.case import Case

CIT = "[CIT] https://docs.snowflake.com/en/sql-reference/sql/copy-into-table"
HEADED = "FILE_FORMAT = (TYPE = CSV PARSE_HEADER = TRUE)"
BY_NAME = "MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE"
INFER = "https://docs.snowflake.com/en/sql-reference/functions/infer_schema"

CASES = [
    Case(
        id="csv_parse_header_match_by_name",
        source=(
            f"{INFER} (example 'Load the CSV file using MATCH_BY_COLUMN_NAME': CREATE FILE FORMAT "
            "my_csv_format TYPE = csv PARSE_HEADER = true; COPY INTO mytable FROM @mystage/csv/ "
            "FILE_FORMAT = (FORMAT_NAME = 'my_csv_format') MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE); "
            f"{CIT} (PARSE_HEADER: 'the first row headers will be used to determine column names')"
        ),
        setup=("CREATE FILE FORMAT {name} TYPE = csv PARSE_HEADER = true",),
        columns="col_bool BOOLEAN, col_date DATE, col_ts TIMESTAMP_NTZ",
        copy=f"FROM @{{stage}}/csv/ FILE_FORMAT = (FORMAT_NAME = '{{name}}') {BY_NAME}",
        files={
            "csv/schema_A_1.csv": b"COL_TS,col_bool,Col_Date\n"
            b"2024-01-02 10:00:00,true,2024-01-02\n2024-01-03 11:30:00,false,2024-01-03\n"
        },
        rows=[(False, "2024-01-03", "2024-01-03 11:30:00"), (True, "2024-01-02", "2024-01-02 10:00:00")],
        history={"csv/schema_A_1.csv": {"STATUS": "Loaded", "ROW_COUNT": 2, "ROW_PARSED": 2}},
    ),
    Case(
        id="csv_parse_header_case_sensitive",
        source=(
            f"{CIT} (MATCH_BY_COLUMN_NAME = CASE_SENSITIVE: names must match exactly; a table column "
            "no file column matches loads NULL)"
        ),
        columns='"id" INT, "Name" VARCHAR, city VARCHAR',
        copy=f"FROM @{{stage}} {HEADED} MATCH_BY_COLUMN_NAME = CASE_SENSITIVE",
        files={"a.csv": b"Name,id,city\nann,1,Oslo\nbo,2,Lima\n"},
        rows=[(1, "ann", None), (2, "bo", None)],
        history={"a.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_parse_header_column_count_mismatch",
        source=(
            f"{CIT} (ERROR_ON_COLUMN_COUNT_MISMATCH = TRUE, the default: 'generate a parsing error if "
            "the number of delimited columns (that is, fields) in an input data file does not match the "
            "number of columns in the corresponding table'); error text 100080 as in "
            "Snowflake-Labs/schemachange#111 (copy-reference.md, section 4)"
        ),
        columns="id INT, name VARCHAR",
        copy=f"FROM @{{stage}} {HEADED} {BY_NAME} ON_ERROR = CONTINUE",
        files={"b.csv": b"id,name,extra\n1,ann,x\n2,bo,y\n"},
        rows=[],
        history={
            "b.csv": {
                "STATUS": "Load failed",
                "ROW_COUNT": 0,
                "ROW_PARSED": 2,
                "ERROR_COUNT": 2,
                "FIRST_ERROR_MESSAGE": "Number of columns in file (3) does not match that of the "
                "corresponding table (2), use file format option error_on_column_count_mismatch=false to "
                "ignore this error",
                "FIRST_ERROR_LINE_NUMBER": 2,
            }
        },
    ),
    Case(
        id="csv_parse_header_include_metadata",
        source=(
            f"{CIT} (INCLUDE_METADATA = (col = METADATA$FILENAME, ...) with MATCH_BY_COLUMN_NAME; 'for "
            "CSV, set ERROR_ON_COLUMN_COUNT_MISMATCH = FALSE'; extra file columns are ignored, the "
            "metadata column wins over a file column of the same name)"
        ),
        columns="id INT, name VARCHAR, file VARCHAR, row_no INT",
        copy=(
            "FROM @{stage} FILE_FORMAT = (TYPE = CSV PARSE_HEADER = TRUE ERROR_ON_COLUMN_COUNT_MISMATCH = "
            f"FALSE) {BY_NAME} "
            "INCLUDE_METADATA = (file = METADATA$FILENAME, row_no = METADATA$FILE_ROW_NUMBER)"
        ),
        files={"c.csv": b"name,file,id,extra\nann,x.csv,1,z\nbo,y.csv,2,z\n"},
        rows=[(1, "ann", "c.csv", 1), (2, "bo", "c.csv", 2)],
        history={"c.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_parse_header_short_row_on_error",
        source=(
            f"{CIT} (ON_ERROR = CONTINUE; a record with fewer fields than the header: 'End of record "
            "reached while expected to parse column' 100068, the column its header names)"
        ),
        columns="id INT, name VARCHAR, city VARCHAR",
        copy=f"FROM @{{stage}} {HEADED} {BY_NAME} ON_ERROR = CONTINUE",
        files={"d.csv": b"id,city,name\n1,Oslo,ann\n2,Lima\n3,Rome,cy\n"},
        rows=[(1, "ann", "Oslo"), (3, "cy", "Rome")],
        history={
            "d.csv": {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 2,
                "ROW_PARSED": 3,
                "ERROR_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "End of record reached while expected to parse column "
                '\'"{TABLE}"["NAME":2]\'',
                "FIRST_ERROR_LINE_NUMBER": 3,
                "FIRST_ERROR_COLUMN_NAME": '"{TABLE}"["NAME":2]',
            }
        },
    ),
]
