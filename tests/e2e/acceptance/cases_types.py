"""Issue 16's types as acceptance cases: BINARY (BINARY_FORMAT), TIME (TIME_FORMAT), TIMESTAMP_TZ
keeping its offset, TIMESTAMP_LTZ, and VARCHAR(n) lengths with TRUNCATECOLUMNS / ENFORCE_LENGTH."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from tests.e2e.acceptance.case import Case

DOCS = "https://docs.snowflake.com/en/"
BIN = f"[BIN] {DOCS}sql-reference/binary-input-output"
CIT = f"[CIT] {DOCS}sql-reference/sql/copy-into-table"
DTIO = f"[DTIO] {DOCS}sql-reference/date-time-input-output"
DT = f"[DT] {DOCS}sql-reference/data-types-datetime"


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


CASES = [
    Case(
        id="types_binary_hex",
        source=(
            f"{BIN} (HEX input is case-insensitive; 100115 'The following string is not a legal "
            "hex-encoded value: 'HELP''; queries show BINARY as hex); "
            f"{CIT} (BINARY_FORMAT default HEX)"
        ),
        columns="id INT, b BINARY",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV) ON_ERROR = CONTINUE",
        files={"a.csv": b"1,48454C50\n2,48454c50\n3,HELP\n"},
        rows=[(1, "48454C50"), (2, "48454C50")],
        history={
            "a.csv": {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 2,
                "ERROR_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "The following string is not a legal hex-encoded value: 'HELP'",
                "FIRST_ERROR_LINE_NUMBER": 3,
                "FIRST_ERROR_COLUMN_NAME": '"{TABLE}"["B":2]',
            }
        },
    ),
    Case(
        id="types_binary_base64",
        source=f"{BIN} (BASE64 ignores whitespace); {CIT} (BINARY_FORMAT = BASE64)",
        columns="id INT, b BINARY",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV FIELD_DELIMITER = '|' BINARY_FORMAT = BASE64)",
        files={"b.csv": b"1|SGVs bG8=\n2|U05PVw==\n"},
        rows=[(1, "48656C6C6F"), (2, "534E4F57")],
        history={"b.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="types_binary_utf8",
        source=f"{BIN} (UTF8: the text's own bytes; TO_BINARY('SNOW', 'UTF-8') is 534E4F57)",
        columns="id INT, b BINARY(8)",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV BINARY_FORMAT = UTF8) ON_ERROR = CONTINUE",
        files={"c.csv": b"1,SNOW\n2,much too long\n"},
        rows=[(1, "534E4F57")],
        history={
            "c.csv": {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "Binary value 'much too long' is too long and would be truncated",
            }
        },
    ),
    Case(
        id="types_binary_parquet_as_is",
        source=f"{CIT} (Parquet BINARY_AS_TEXT = FALSE: binary columns load as binary)",
        columns="id INT, b BINARY",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = PARQUET BINARY_AS_TEXT = FALSE)",
        files={"d.parquet": _parquet(pa.table({"id": [1], "b": pa.array([b"\x00\xff\x10"], pa.binary())}))},
        rows=[(1, "00FF10")],
        history={"d.parquet": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
    Case(
        id="types_time_auto",
        source=(
            f"{DTIO} (AUTO times: HH24:MI:SS.FFTZH:TZM, HH24:MI:SS.FF, HH24:MI:SS, HH24:MI, "
            "HH12:MI:SS.FF AM, HH12:MI:SS AM, HH12:MI AM)"
        ),
        columns="id INT, t TIME",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV FIELD_DELIMITER = '|') ON_ERROR = CONTINUE",
        files={
            "e.csv": b"1|12:34:56.5+07:00\n2|12:34:56\n3|12:34\n4|01:02:03.25 PM\n5|01:02 am\n6|25:00:00\n"
        },
        rows=[
            (1, "12:34:56.500000"),
            (2, "12:34:56"),
            (3, "12:34:00"),
            (4, "13:02:03.250000"),
            (5, "01:02:00"),
        ],
        history={
            "e.csv": {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 5,
                "FIRST_ERROR_MESSAGE": "Time '25:00:00' is not recognized",
                "FIRST_ERROR_LINE_NUMBER": 6,
            }
        },
    ),
    Case(
        id="types_time_format",
        source=f"{CIT} (TIME_FORMAT); {DTIO} (format elements HH24, MI, SS, FF)",
        columns="id INT, t TIME(3)",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV TIME_FORMAT = 'HH24MISS.FF') ON_ERROR = CONTINUE",
        files={"f.csv": b"1,123456.78912\n2,12:34:56\n"},
        rows=[(1, "12:34:56.789000")],  # TIME(3): three fractional digits kept
        history={
            "f.csv": {
                "STATUS": "Partially loaded",
                "FIRST_ERROR_MESSAGE": "Time '12:34:56' is not recognized",
            }
        },
    ),
    Case(
        id="types_timestamp_tz_keeps_offset",
        source=(
            f"{DT} (TIMESTAMP_TZ stores UTC plus the offset, the session's when none is given; "
            "values compare by their UTC instant)"
        ),
        columns="id INT, z TIMESTAMP_TZ",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV FIELD_DELIMITER = '|')",
        files={
            "g.csv": b"1|2024-01-02 16:00:00 +01:00\n2|2024-01-02 14:00:00-03:00\n3|2024-01-02 15:00:00\n"
            b"4|Tue, 02 Jan 2024 20:00:00 +0530\n"
        },
        query="SELECT id, z FROM {table} ORDER BY z, id",
        rows=[
            (4, "2024-01-02 20:00:00+05:30"),  # 14:30 UTC
            (1, "2024-01-02 16:00:00+01:00"),  # 15:00 UTC
            (3, "2024-01-02 15:00:00+00:00"),
            (2, "2024-01-02 14:00:00-03:00"),  # 17:00 UTC
        ],
        history={"g.csv": {"STATUS": "Loaded", "ROW_COUNT": 4}},
    ),
    Case(
        id="types_timestamp_tz_same_instant",
        source=f"{DT} (TIMESTAMP_TZ values are compared by their times in UTC)",
        columns="id INT, z TIMESTAMP_TZ",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV FIELD_DELIMITER = '|')",
        files={
            "h.csv": b"1|2024-01-01 00:00:00 +00:00\n2|2024-01-01 01:00:00 +01:00\n3|2024-01-01 01:00:00\n"
        },
        query="SELECT id FROM {table} WHERE z = '2024-01-01T01:00:00+01:00'::TIMESTAMP_TZ ORDER BY id",
        rows=[(1,), (2,)],
        history={"h.csv": {"STATUS": "Loaded", "ROW_COUNT": 3}},
    ),
    Case(
        id="types_timestamp_ltz",
        source=f"{DT} (TIMESTAMP_LTZ stores UTC and is shown in the session time zone, UTC in Floe)",
        columns="id INT, l TIMESTAMP_LTZ",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV FIELD_DELIMITER = '|')",
        files={"i.csv": b"1|2024-01-02 16:00:00 +01:00\n2|2024-01-02 16:00:00\n"},
        rows=[(1, "2024-01-02 15:00:00+00:00"), (2, "2024-01-02 16:00:00+00:00")],
        history={"i.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="types_varchar_length_error",
        source=(
            f"{CIT} (TRUNCATECOLUMNS = FALSE / ENFORCE_LENGTH = TRUE, the default: an over-long string is "
            "an error); 3P 100074 'User character length limit (n) exceeded by string' "
            "(snowflakedb/gosnowflake#470)"
        ),
        columns="id INT, s VARCHAR(3)",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV) ON_ERROR = CONTINUE",
        files={"j.csv": b"1,abc\n2,abcdef\n"},
        rows=[(1, "abc")],
        history={
            "j.csv": {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "User character length limit (3) exceeded by string 'abcdef'",
                "FIRST_ERROR_COLUMN_NAME": '"{TABLE}"["S":2]',
            }
        },
    ),
    Case(
        id="types_truncatecolumns",
        source=f"{CIT} (TRUNCATECOLUMNS = TRUE: strings are truncated to the target column length)",
        columns="id INT, s VARCHAR(3)",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV) TRUNCATECOLUMNS = TRUE",
        files={"k.csv": b"1,abc\n2,abcdef\n"},
        rows=[(1, "abc"), (2, "abc")],
        history={"k.csv": {"STATUS": "Loaded", "ROW_COUNT": 2, "ERROR_COUNT": 0}},
    ),
    Case(
        id="types_enforce_length_false",
        source=f"{CIT} (ENFORCE_LENGTH = FALSE, TRUNCATECOLUMNS's inverse synonym)",
        columns="id INT, s VARCHAR(2)",
        copy="FROM (SELECT $1, $2 FROM @{stage}) FILE_FORMAT = (TYPE = CSV) ENFORCE_LENGTH = FALSE",
        files={"l.csv": "1,héllo\n".encode()},
        rows=[(1, "hé")],  # characters, not bytes
        history={"l.csv": {"STATUS": "Loaded", "ROW_COUNT": 1}},
    ),
]
