"""Large JSON and Parquet files loaded in parts, and Parquet's USE_VECTORIZED_SCANNER (decisions 83
and 86).

The session stack streams files over 8 MB in parts of 4 MB (tests/conftest.py), so the two large
cases' files (about 9 MB each) load in three parts or so: their rows, row numbers and the history
row's error line must be the whole file's. The 2 GB files are tests/chaos/test_large_formats.py.
"""

from __future__ import annotations

import datetime as dt
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

from tests.e2e.acceptance.case import Case

CIT = "[CIT] https://docs.snowflake.com/en/sql-reference/sql/copy-into-table"
SIZING = "https://docs.snowflake.com/en/user-guide/data-load-considerations-prepare"
CFF = "[CFF] https://docs.snowflake.com/en/sql-reference/sql/create-file-format"

NDJSON_DOCS = 100_000
"""About 9.5 MB of NDJSON: over the stack's 8 MB streaming threshold."""
PRETTY_EVERY = 1000
"""Every this many documents one is written over 5 lines, so lines and rows differ."""
BAD_DOCS = (7, 93_000)
"""Documents whose id is not a number: errors of their rows, in the first part and in the last."""


def _ndjson() -> bytes:
    out = []
    for i in range(1, NDJSON_DOCS + 1):
        doc = {
            "id": i if i not in BAD_DOCS else f"n/a {i}",
            "kind": ["view", "click", "buy"][i % 3],
            "pad": "x" * 48,
        }
        out.append(json.dumps(doc, indent=1) if i % PRETTY_EVERY == 0 else json.dumps(doc))
    return ("\n".join(out) + "\n").encode()


def _line_of(doc: int) -> int:
    """The line document ``doc`` starts on: one line each, 4 more for each pretty one before it."""
    return doc + 4 * ((doc - 1) // PRETTY_EVERY)


PARQUET_ROWS = 180_000
BAD_ROW = 171_717
"""A row whose string is not UTF-8, in the last row groups."""


def _parquet_large() -> bytes:
    names = [f"customer {i:08d} {'y' * 25}".encode() for i in range(1, PARQUET_ROWS + 1)]
    names[BAD_ROW - 1] = b"Zo\xeb"
    table = pa.table(
        {"id": pa.array(range(1, PARQUET_ROWS + 1), pa.int64()), "name": pa.array(names, pa.binary())}
    )
    buf = io.BytesIO()
    # Uncompressed and without dictionaries: over 8 MB stored, in 18 row groups.
    pq.write_table(table, buf, row_group_size=10_000, compression="none", use_dictionary=False)
    return buf.getvalue()


def _parquet(table: pa.Table, *, int96: bool = False) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, use_deprecated_int96_timestamps=int96)
    return buf.getvalue()


AT = dt.datetime(2024, 1, 2, 3, 4, 5)
TIMES = pa.table(
    {
        "b": pa.array([b"Hi"], pa.binary()),
        "local": pa.array([AT], pa.timestamp("us")),  # TimestampType(isAdjustedToUtc=False, MICROS)
        "utc": pa.array([AT], pa.timestamp("ms", tz="UTC")),  # isAdjustedToUtc=True, MILLIS
    }
)
# The documented example of the vectorized scanner's output: a map, and NULL values shown.
PERSON = pa.table(
    {
        "my_map": pa.array([[("k1", "v1"), ("k2", "v2")]], pa.map_(pa.string(), pa.string())),
        "person": [
            {
                "name": "Adam",
                "nickname": None,
                "age": 34,
                "phone_numbers": ["1234567890", "0987654321", None, "6781234590"],
            }
        ],
    }
)
# The same file as the default reader shows it (USE_VECTORIZED_SCANNER = FALSE), as documented.
DEFAULT_MAP = '{"key_value":[{"key":"k1","value":"v1"},{"key":"k2","value":"v2"}]}'
DEFAULT_PERSON = '{"name":"Adam","age":34,"phone_numbers":["1234567890","0987654321","6781234590"]}'

CASES = [
    Case(
        id="large_ndjson_in_parts",
        source=(
            f"{CIT} (TYPE = JSON, ON_ERROR = CONTINUE: the file's other rows load, FIRST_ERROR_LINE "
            f"counts the file's lines); {SIZING} ('If you must load a large file, carefully consider "
            "the ON_ERROR copy option value'): a 9.5 MB file streamed in parts of 4 MB, rows and lines "
            "numbered in the file"
        ),
        columns="id INT, kind VARCHAR, rownum INT",
        copy=(
            "FROM (SELECT $1:id, $1:kind, METADATA$FILE_ROW_NUMBER FROM @{stage}) "
            "FILE_FORMAT = (TYPE = JSON) ON_ERROR = CONTINUE"
        ),
        files={"big.json": _ndjson()},
        query=(
            "SELECT COUNT(*), COUNT(DISTINCT rownum), MIN(rownum), MAX(rownum), SUM(id), "
            "COUNT_IF(id <> rownum) FROM {table}"
        ),
        rows=[
            (
                NDJSON_DOCS - 2,
                NDJSON_DOCS - 2,
                1,
                NDJSON_DOCS,
                NDJSON_DOCS * (NDJSON_DOCS + 1) // 2 - sum(BAD_DOCS),
                0,
            )
        ],
        history={
            "big.json": {
                "STATUS": "Partially loaded",
                "ROW_COUNT": NDJSON_DOCS - 2,
                "ROW_PARSED": NDJSON_DOCS,
                "ERROR_COUNT": 2,
                "FIRST_ERROR_MESSAGE": "Numeric value 'n/a 7' is not recognized",
                "FIRST_ERROR_LINE_NUMBER": _line_of(7),
            }
        },
    ),
    Case(
        id="large_parquet_in_parts",
        source=(
            f"{CIT} (TYPE = PARQUET; invalid UTF-8 is an error unless REPLACE_INVALID_CHARACTERS; "
            f"ON_ERROR = CONTINUE); {SIZING}: a 9 MB file of 18 row groups read a few row groups at "
            "a time, by ranges; the bad row's line is its row in the file"
        ),
        columns="id INT, name VARCHAR, rownum INT",
        copy=(
            "FROM (SELECT $1:id, $1:name, METADATA$FILE_ROW_NUMBER FROM @{stage}) "
            "FILE_FORMAT = (TYPE = PARQUET) ON_ERROR = CONTINUE"
        ),
        files={"big.parquet": _parquet_large()},
        query="SELECT COUNT(*), MIN(rownum), MAX(rownum), COUNT_IF(id <> rownum), MAX(name) FROM {table}",
        rows=[(PARQUET_ROWS - 1, 1, PARQUET_ROWS, 0, f"customer {PARQUET_ROWS:08d} {'y' * 25}")],
        history={
            "big.parquet": {
                "STATUS": "Partially loaded",
                "ROW_COUNT": PARQUET_ROWS - 1,
                "ROW_PARSED": PARQUET_ROWS,
                "ERROR_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "Invalid UTF8 detected in string 'Zo0xEB'",
                "FIRST_ERROR_LINE_NUMBER": BAD_ROW,
            }
        },
    ),
    Case(
        id="parquet_vectorized_scanner_overrides_options",
        source=(
            f"{CIT} (USE_VECTORIZED_SCANNER = TRUE: 'The BINARY_AS_TEXT option is always treated as "
            "FALSE and the USE_LOGICAL_TYPE option is always treated as TRUE, no matter what the actual "
            "value is being set to'; TimestampType(isAdjustedToUtc=False) -> TIMESTAMP_NTZ, "
            "isAdjustedToUtc=True -> TIMESTAMP_LTZ)"
        ),
        columns="b VARCHAR, local_ts VARIANT, utc_ts TIMESTAMP_LTZ",
        copy=(
            "FROM (SELECT $1:b, $1:local, $1:utc FROM @{stage}) FILE_FORMAT = (TYPE = PARQUET "
            "USE_VECTORIZED_SCANNER = TRUE BINARY_AS_TEXT = TRUE USE_LOGICAL_TYPE = FALSE)"
        ),
        files={"t.parquet": _parquet(TIMES)},
        rows=[("4869", '"2024-01-02 03:04:05"', "2024-01-02 03:04:05+00:00")],
        history={"t.parquet": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="parquet_vectorized_scanner_int96",
        source=f"{CIT} (INT96: TIMESTAMP_LTZ with USE_VECTORIZED_SCANNER = TRUE, TIMESTAMP_NTZ without)",
        columns="t VARIANT",
        copy="FROM (SELECT $1:t FROM @{stage}) FILE_FORMAT = (TYPE = PARQUET USE_VECTORIZED_SCANNER = TRUE)",
        files={"i.parquet": _parquet(pa.table({"t": pa.array([AT], pa.timestamp("ns"))}), int96=True)},
        rows=[('"2024-01-02 03:04:05+00"',)],
        history={"i.parquet": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="parquet_vectorized_scanner_map_and_nulls",
        source=(
            f"{CIT} (USE_VECTORIZED_SCANNER = TRUE: a map reads as an object, "
            '"my_map": {"k1": "v1", "k2": "v2"}, and NULL values are shown: "nickname": null and the '
            "null phone number; the documented example)"
        ),
        columns="my_map VARIANT, person VARIANT",
        copy=(
            "FROM (SELECT $1:my_map, $1:person FROM @{stage}) "
            "FILE_FORMAT = (TYPE = PARQUET USE_VECTORIZED_SCANNER = TRUE)"
        ),
        files={"p.parquet": _parquet(PERSON)},
        rows=[
            (
                '{"k1":"v1","k2":"v2"}',
                '{"name":"Adam","nickname":null,"age":34,'
                '"phone_numbers":["1234567890","0987654321",null,"6781234590"]}',
            )
        ],
        history={"p.parquet": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="parquet_default_reader_map_and_nulls",
        source=(
            f"{CIT} (USE_VECTORIZED_SCANNER = FALSE, the default: 'This option does not support Parquet "
            'maps. The output of scanning a map type is "my_map": {"key_value": [{"key": "k1", "value": '
            '"v1"}, {"key": "k2", "value": "v2"}]}\', and \'does not explicitly show NULL values\': '
            '"person" without "nickname", and "phone_numbers" without the null; the documented example)'
        ),
        columns="my_map VARIANT, person VARIANT, first_value VARCHAR",
        copy=(
            "FROM (SELECT $1:my_map, $1:person, $1:my_map:key_value[0]:value FROM @{stage}) "
            "FILE_FORMAT = (TYPE = PARQUET)"
        ),
        files={"p.parquet": _parquet(PERSON)},
        rows=[(DEFAULT_MAP, DEFAULT_PERSON, "v1")],
        history={"p.parquet": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="parquet_default_reader_whole_row",
        source=(
            f"{CIT} (USE_VECTORIZED_SCANNER = FALSE: the map as key_value entries and NULL values not "
            "shown, in $1 too; semi-structured data: a plain COPY loads each record into one VARIANT column)"
        ),
        columns="src VARIANT",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = PARQUET USE_VECTORIZED_SCANNER = FALSE)",
        files={"p.parquet": _parquet(PERSON)},
        rows=[('{"my_map":' + DEFAULT_MAP + ',"person":' + DEFAULT_PERSON + "}",)],
        history={"p.parquet": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="parquet_default_reader_match_by_column_name",
        source=(
            f"{CIT} (USE_VECTORIZED_SCANNER = FALSE, the default: the map as key_value entries and NULL "
            "values not shown; MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE loads each file column into the "
            "table column of its name)"
        ),
        columns="MY_MAP VARIANT, PERSON VARIANT",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = PARQUET) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE",
        files={"p.parquet": _parquet(PERSON)},
        rows=[(DEFAULT_MAP, DEFAULT_PERSON)],
        history={"p.parquet": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
]
