"""INFER_SCHEMA and CREATE TABLE ... USING TEMPLATE through the SQL executor, against real LocalStack
stages (external ones through their integration, internal ones sealed) and the real Redis.

The examples are Snowflake's, from the INFER_SCHEMA reference
(https://docs.snowflake.com/en/sql-reference/functions/infer_schema) and CREATE TABLE's
(https://docs.snowflake.com/en/sql-reference/sql/create-table, "CREATE TABLE ... USING TEMPLATE").
"""

from __future__ import annotations

import gzip
import io
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq
import pytest

from floe.catalog import ADMIN_ROLE, Pipe, Stage, Table, split_s3_url
from floe.errors import CompilationError, ObjectNotFound, PermissionDenied, SqlError
from services.auth import Principal
from services.sql import SqlExecutor

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
DOC_CSV = (
    b"col_bool,col_date,col_ts\ntrue,2024-01-02,2024-01-02 10:00:00\nfalse,2024-01-03,2024-01-03 11:30:00\n"
)


def run(ex: SqlExecutor, sql: str, principal: Principal = ADMIN) -> list[dict[str, Any]]:
    return ex.execute(sql, principal).records()


def parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def infer(ex: SqlExecutor, args: str, principal: Principal = ADMIN) -> list[dict[str, Any]]:
    return run(ex, f"SELECT * FROM TABLE(INFER_SCHEMA({args}))", principal)


@pytest.fixture
def stage(ex: SqlExecutor, bucket: str) -> str:
    """An external stage ``mystage`` on a fresh bucket."""
    run(ex, f"CREATE STAGE mystage URL = 's3://{bucket}/' STORAGE_INTEGRATION = floe_tests")
    return bucket


def test_csv_with_parse_header_as_the_reference_shows(ex: SqlExecutor, stage: str, s3: Any) -> None:
    """INFER_SCHEMA's CSV example: PARSE_HEADER names the columns, NULLABLE is TRUE, EXPRESSION is
    $1:<name>::<type>, FILENAMES the file's path on the stage, ORDER_ID from 0."""
    s3.put_object(Bucket=stage, Key="csv/schema_A_1.csv", Body=DOC_CSV)
    run(ex, "CREATE FILE FORMAT my_csv_format TYPE = csv PARSE_HEADER = true")
    rows = infer(ex, "LOCATION=>'@mystage/csv/', FILE_FORMAT=>'my_csv_format'")
    assert rows == [
        {
            "COLUMN_NAME": "col_bool",
            "TYPE": "BOOLEAN",
            "NULLABLE": True,
            "EXPRESSION": "$1:col_bool::BOOLEAN",
            "FILENAMES": "csv/schema_A_1.csv",
            "ORDER_ID": 0,
        },
        {
            "COLUMN_NAME": "col_date",
            "TYPE": "DATE",
            "NULLABLE": True,
            "EXPRESSION": "$1:col_date::DATE",
            "FILENAMES": "csv/schema_A_1.csv",
            "ORDER_ID": 1,
        },
        {
            "COLUMN_NAME": "col_ts",
            "TYPE": "TIMESTAMP_NTZ",
            "NULLABLE": True,
            "EXPRESSION": "$1:col_ts::TIMESTAMP_NTZ",
            "FILENAMES": "csv/schema_A_1.csv",
            "ORDER_ID": 2,
        },
    ]
    # A relation like any other: filtered, ordered, aliased; empty where there are no files.
    picked = run(
        ex,
        "SELECT s.column_name, type FROM TABLE(INFER_SCHEMA(LOCATION=>'@mystage/csv/', "
        "FILE_FORMAT=>'my_csv_format')) AS s WHERE type <> 'DATE' ORDER BY order_id DESC",
    )
    assert picked == [
        {"COLUMN_NAME": "col_ts", "TYPE": "TIMESTAMP_NTZ"},
        {"COLUMN_NAME": "col_bool", "TYPE": "BOOLEAN"},
    ]
    assert infer(ex, "LOCATION=>'@mystage/none/', FILE_FORMAT=>'my_csv_format'") == []
    # Without PARSE_HEADER the columns are c1, c2... and the header is a record like any other.
    run(ex, "CREATE FILE FORMAT plain_csv TYPE = CSV")
    plain = infer(ex, "LOCATION=>'@mystage/csv/', FILE_FORMAT=>'plain_csv'")
    assert [(r["COLUMN_NAME"], r["TYPE"], r["EXPRESSION"]) for r in plain] == [
        ("c1", "TEXT", "$1::TEXT"),
        ("c2", "TEXT", "$2::TEXT"),
        ("c3", "TEXT", "$3::TEXT"),
    ]


def test_parquet_columns_and_ignore_case(ex: SqlExecutor, stage: str, s3: Any) -> None:
    """INFER_SCHEMA's Parquet example: continent TEXT, country and COUNTRY VARIANT, two columns
    with IGNORE_CASE => TRUE (upper-cased, GET_IGNORE_CASE expressions); a whole stage, a path, or
    a file as LOCATION."""
    data = parquet(
        pa.table(
            {
                "continent": ["Europe"],
                "country": [{"name": "France"}],
                "COUNTRY": [{"city": "Paris"}],
            }
        )
    )
    s3.put_object(Bucket=stage, Key="geography/cities.parquet", Body=data)
    run(ex, "CREATE FILE FORMAT my_parquet_format TYPE = parquet")
    expected = [
        ("continent", "TEXT", True, "$1:continent::TEXT", "geography/cities.parquet", 0),
        ("country", "VARIANT", True, "$1:country::VARIANT", "geography/cities.parquet", 1),
        ("COUNTRY", "VARIANT", True, "$1:COUNTRY::VARIANT", "geography/cities.parquet", 2),
    ]
    for location in ("@mystage", "@mystage/geography/cities.parquet"):
        rows = infer(ex, f"LOCATION=>'{location}', FILE_FORMAT=>'my_parquet_format'")
        assert [tuple(r.values()) for r in rows] == expected
    rows = infer(ex, "LOCATION=>'@mystage', FILE_FORMAT=>'my_parquet_format', IGNORE_CASE=>TRUE")
    assert [(r["COLUMN_NAME"], r["TYPE"], r["EXPRESSION"], r["ORDER_ID"]) for r in rows] == [
        ("CONTINENT", "TEXT", "GET_IGNORE_CASE ($1, CONTINENT)::TEXT", 0),
        ("COUNTRY", "VARIANT", "GET_IGNORE_CASE ($1, COUNTRY)::VARIANT", 1),
    ]


def test_json_on_an_internal_stage_with_files_and_bounds(ex: SqlExecutor) -> None:
    """INFER_SCHEMA's JSON example on an internal stage (its files sealed at rest): FILES names
    files in the LOCATION, MAX_FILE_COUNT and MAX_RECORDS_PER_FILE bound what is read, columns of
    several files merge (types widened, FILENAMES listing each file)."""
    run(ex, "CREATE STAGE inner_stage")
    stage = ex.catalog.get(Stage, "FLOE.PUBLIC.INNER_STAGE")
    bucket, root = split_s3_url(stage.url)
    files = {
        "json/schema_A_1.json": b'{"col_bool": true, "col_date": "2024-01-02", '
        b'"col_ts": "2024-01-02T10:00:00"}\n',
        "json/schema_A_2.json.gz": gzip.compress(b'{"col_bool": false, "n": 1}\n{"n": 12.5}\n'),
    }
    for name, body in files.items():
        key = root + name
        ex.stage_files.s3().put_object(Bucket=bucket, Key=key, Body=ex.stage_files.cipher().seal(body, key))
    run(ex, "CREATE FILE FORMAT my_json_format TYPE = json")
    rows = infer(ex, "LOCATION=>'@inner_stage/json/', FILE_FORMAT=>'my_json_format'")
    assert [(r["COLUMN_NAME"], r["TYPE"], r["FILENAMES"]) for r in rows] == [
        ("col_bool", "BOOLEAN", "json/schema_A_1.json,json/schema_A_2.json.gz"),
        ("col_date", "DATE", "json/schema_A_1.json"),
        ("col_ts", "TIMESTAMP_NTZ", "json/schema_A_1.json"),
        ("n", "NUMBER(3, 1)", "json/schema_A_2.json.gz"),
    ]
    one = infer(
        ex, "LOCATION=>'@inner_stage/json', FILE_FORMAT=>'my_json_format', FILES=>('schema_A_2.json.gz')"
    )
    assert [(r["COLUMN_NAME"], r["TYPE"]) for r in one] == [("col_bool", "BOOLEAN"), ("n", "NUMBER(3, 1)")]
    first_record = infer(
        ex,
        "LOCATION=>'@inner_stage/json/', FILE_FORMAT=>'my_json_format', FILES=>('schema_A_2.json.gz'), "
        "MAX_RECORDS_PER_FILE=>1",
    )
    assert [(r["COLUMN_NAME"], r["TYPE"]) for r in first_record] == [
        ("col_bool", "BOOLEAN"),
        ("n", "NUMBER(1, 0)"),
    ]
    counted = infer(ex, "LOCATION=>'@inner_stage', FILE_FORMAT=>'my_json_format', MAX_FILE_COUNT=>1")
    assert {r["FILENAMES"] for r in counted} == {"json/schema_A_1.json"}
    with pytest.raises(SqlError, match=r"Remote file '@INNER_STAGE/json/nope\.json' was not found"):
        infer(ex, "LOCATION=>'@inner_stage/json/', FILE_FORMAT=>'my_json_format', FILES=>('nope.json')")


def test_avro_and_orc(ex: SqlExecutor, stage: str, s3: Any) -> None:
    """The two other formats INFER_SCHEMA reads: Avro from its schema (a union with null is
    NULLABLE, logical types typed), ORC from its footer."""
    buf = io.BytesIO()
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"]},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            },
        ],
    }
    fastavro.writer(buf, schema, [{"id": 1, "name": None, "day": 1, "price": b"\x01"}], codec="deflate")
    s3.put_object(Bucket=stage, Key="avro/a.avro", Body=buf.getvalue())
    run(ex, "CREATE FILE FORMAT av TYPE = AVRO")
    rows = infer(ex, "LOCATION=>'@mystage/avro/', FILE_FORMAT=>'av'")
    assert [(r["COLUMN_NAME"], r["TYPE"], r["NULLABLE"]) for r in rows] == [
        ("id", "NUMBER(38, 0)", False),
        ("name", "TEXT", True),
        ("day", "DATE", False),
        ("price", "NUMBER(9, 2)", False),
    ]
    orc = io.BytesIO()
    pa_orc.write_table(
        pa.table({"a": pa.array([1], pa.int64()), "when": pa.array([0], pa.timestamp("us"))}), orc
    )
    s3.put_object(Bucket=stage, Key="orc/a.orc", Body=orc.getvalue())
    run(ex, "CREATE FILE FORMAT oc TYPE = ORC")
    rows = infer(ex, "LOCATION=>'@mystage/orc/', FILE_FORMAT=>'oc'")
    assert [(r["COLUMN_NAME"], r["TYPE"]) for r in rows] == [
        ("a", "NUMBER(38, 0)"),
        ("when", "TIMESTAMP_NTZ"),
    ]


def test_create_table_using_template(ex: SqlExecutor, stage: str, s3: Any) -> None:
    """CREATE TABLE's USING TEMPLATE example (ARRAY_AGG(OBJECT_CONSTRUCT(*)) WITHIN GROUP (ORDER BY
    order_id)), the form with only the needed keys, and INFER_SCHEMA's output as a string; the
    columns keep the case INFER_SCHEMA gives them. Any other template is refused."""
    s3.put_object(Bucket=stage, Key="csv/schema_A_1.csv", Body=DOC_CSV)
    run(ex, "CREATE FILE FORMAT my_csv_format TYPE = csv PARSE_HEADER = true")
    call = "TABLE(INFER_SCHEMA(LOCATION=>'@mystage/csv/', FILE_FORMAT=>'my_csv_format'))"
    assert run(
        ex,
        "CREATE TABLE mytable USING TEMPLATE (SELECT ARRAY_AGG(OBJECT_CONSTRUCT(*)) "
        f"WITHIN GROUP (ORDER BY order_id) FROM {call})",
    ) == [{"STATUS": "Table MYTABLE successfully created."}]
    table = ex.catalog.get(Table, "FLOE.PUBLIC.MYTABLE")
    assert [(c.name, c.sql_type, c.nullable) for c in table.columns] == [
        ("col_bool", "BOOLEAN", True),
        ("col_date", "DATE", True),
        ("col_ts", "TIMESTAMP_NTZ", True),
    ]
    run(
        ex,
        "CREATE OR REPLACE TABLE mytable ENABLE_SCHEMA_EVOLUTION = TRUE USING TEMPLATE (SELECT "
        "ARRAY_AGG(OBJECT_CONSTRUCT('COLUMN_NAME', COLUMN_NAME, 'TYPE', TYPE, 'NULLABLE', NULLABLE)) "
        f"WITHIN GROUP (ORDER BY ORDER_ID DESC) FROM {call})",
    )
    table = ex.catalog.get(Table, "FLOE.PUBLIC.MYTABLE")
    assert [c.name for c in table.columns] == ["col_ts", "col_date", "col_bool"]
    assert table.enable_schema_evolution
    run(
        ex,
        "CREATE TABLE from_text USING TEMPLATE "
        '\'[{"COLUMN_NAME": "ID", "TYPE": "NUMBER(38, 0)", "NULLABLE": false}, '
        '{"COLUMN_NAME": "name", "TYPE": "TEXT"}]\'',
    )
    table = ex.catalog.get(Table, "FLOE.PUBLIC.FROM_TEXT")
    assert [(c.name, c.sql_type, c.nullable) for c in table.columns] == [
        ("ID", "NUMBER(38,0)", False),
        ("name", "VARCHAR", True),
    ]
    with pytest.raises(CompilationError, match="USING TEMPLATE takes INFER_SCHEMA's output"):
        run(ex, f"CREATE TABLE other USING TEMPLATE (SELECT COLUMN_NAME FROM {call})")
    with pytest.raises(CompilationError, match="found no columns"):
        run(
            ex,
            "CREATE TABLE empty USING TEMPLATE (SELECT ARRAY_AGG(OBJECT_CONSTRUCT(*)) FROM "
            "TABLE(INFER_SCHEMA(LOCATION=>'@mystage/nothing/', FILE_FORMAT=>'my_csv_format')))",
        )


def test_what_infer_schema_refuses(ex: SqlExecutor, stage: str, s3: Any) -> None:
    """Snowflake's rules: SKIP_HEADER is not supported with PARSE_HEADER = TRUE, table stages are
    not read, KIND => 'ICEBERG' has no tables here; unknown arguments and formats are named."""
    s3.put_object(Bucket=stage, Key="csv/a.csv", Body=DOC_CSV)
    run(ex, "CREATE FILE FORMAT hdr TYPE = CSV PARSE_HEADER = TRUE")
    run(ex, "ALTER FILE FORMAT hdr SET SKIP_HEADER = 1")
    with pytest.raises(CompilationError, match="The SKIP_HEADER option is not supported with PARSE_HEADER"):
        infer(ex, "LOCATION=>'@mystage', FILE_FORMAT=>'hdr'")
    run(ex, "ALTER FILE FORMAT hdr SET SKIP_HEADER = 0")
    run(ex, "CREATE TABLE t (a INT)")
    with pytest.raises(CompilationError, match="not table stages"):
        infer(ex, "LOCATION=>'@%t', FILE_FORMAT=>'hdr'")
    with pytest.raises(CompilationError, match="KIND => 'ICEBERG' is not supported"):
        infer(ex, "LOCATION=>'@mystage', FILE_FORMAT=>'hdr', KIND=>'ICEBERG'")
    with pytest.raises(CompilationError, match="invalid argument PATTERN"):
        infer(ex, "LOCATION=>'@mystage', FILE_FORMAT=>'hdr', PATTERN=>'.*'")
    with pytest.raises(ObjectNotFound, match="NOPE"):
        infer(ex, "LOCATION=>'@mystage', FILE_FORMAT=>'nope'")
    s3.put_object(Bucket=stage, Key="bad/x.json", Body=b'{"a": 1}\n{"a": \n')
    run(ex, "CREATE FILE FORMAT js TYPE = JSON")
    with pytest.raises(SqlError, match=r"Error parsing JSON: .*\(file 'bad/x.json'\)"):
        infer(ex, "LOCATION=>'@mystage/bad/', FILE_FORMAT=>'js'")


def test_privileges(ex: SqlExecutor, stage: str, s3: Any) -> None:
    """USAGE on the file format and on the external stage (with its integration), as Snowflake's
    INFER_SCHEMA and CREATE TABLE ... USING TEMPLATE need; CREATE TABLE on the schema for the
    template."""
    s3.put_object(Bucket=stage, Key="a.csv", Body=DOC_CSV)
    run(ex, "CREATE FILE FORMAT hdr TYPE = CSV PARSE_HEADER = TRUE")
    run(ex, "CREATE ROLE reader")
    run(ex, "GRANT USAGE ON DATABASE floe TO ROLE reader")
    run(ex, "GRANT USAGE ON SCHEMA floe.public TO ROLE reader")
    reader = Principal("READER_USER", frozenset({"READER", "PUBLIC"}))
    args = "LOCATION=>'@mystage', FILE_FORMAT=>'hdr'"
    with pytest.raises(ObjectNotFound, match=r"File format 'FLOE\.PUBLIC\.HDR' does not exist"):
        infer(ex, args, reader)
    run(ex, "GRANT USAGE ON FILE FORMAT hdr TO ROLE reader")
    with pytest.raises(ObjectNotFound, match=r"Stage 'FLOE\.PUBLIC\.MYSTAGE' does not exist"):
        infer(ex, args, reader)
    run(ex, "GRANT USAGE ON STAGE mystage TO ROLE reader")
    with pytest.raises(ObjectNotFound, match="'FLOE_TESTS' does not exist or not authorized"):
        infer(ex, args, reader)  # USAGE on the stage's storage integration too
    run(ex, "GRANT USAGE ON INTEGRATION floe_tests TO ROLE reader")
    assert [r["COLUMN_NAME"] for r in infer(ex, args, reader)] == ["col_bool", "col_date", "col_ts"]
    template = (
        "CREATE TABLE made USING TEMPLATE "
        f"(SELECT ARRAY_AGG(OBJECT_CONSTRUCT(*)) FROM TABLE(INFER_SCHEMA({args})))"
    )
    with pytest.raises(PermissionDenied):
        run(ex, template, reader)
    run(ex, "GRANT CREATE TABLE ON SCHEMA floe.public TO ROLE reader")
    run(ex, template, reader)
    assert ex.catalog.get(Table, "FLOE.PUBLIC.MADE").owner == "READER"
    # An internal stage: READ on it.
    run(ex, "CREATE STAGE inner_stage")
    bucket, root = split_s3_url(ex.catalog.get(Stage, "FLOE.PUBLIC.INNER_STAGE").url)
    key = root + "a.csv"
    ex.stage_files.s3().put_object(Bucket=bucket, Key=key, Body=ex.stage_files.cipher().seal(DOC_CSV, key))
    inner = "LOCATION=>'@inner_stage', FILE_FORMAT=>'hdr'"
    with pytest.raises(ObjectNotFound, match=r"Stage 'FLOE\.PUBLIC\.INNER_STAGE' does not exist"):
        infer(ex, inner, reader)
    run(ex, "GRANT READ ON STAGE inner_stage TO ROLE reader")
    assert [r["FILENAMES"] for r in infer(ex, inner, reader)] == ["a.csv"] * 3


def test_create_pipe_takes_parse_header_with_match_by_column_name_only(ex: SqlExecutor) -> None:
    """PARSE_HEADER applies to INFER_SCHEMA and MATCH_BY_COLUMN_NAME only; SKIP_HEADER is not supported
    with it, whether both are in one FILE_FORMAT or the stage gives one and the pipe the other."""
    run(
        ex,
        "CREATE STAGE st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests "
        "FILE_FORMAT = (SKIP_HEADER = 1)",
    )
    run(ex, "CREATE TABLE t (a INT, b VARCHAR)")
    with pytest.raises(CompilationError, match='Invalid file format "PARSE_HEADER" is only allowed'):
        run(ex, "CREATE PIPE p AS COPY INTO t FROM @st FILE_FORMAT = (SKIP_HEADER = 0 PARSE_HEADER = TRUE)")
    with pytest.raises(CompilationError, match="The SKIP_HEADER option is not supported with PARSE_HEADER"):
        run(
            ex,
            "CREATE PIPE p AS COPY INTO t FROM @st FILE_FORMAT = (PARSE_HEADER = TRUE) "
            "MATCH_BY_COLUMN_NAME = CASE_SENSITIVE",
        )
    with pytest.raises(CompilationError, match="The SKIP_HEADER option is not supported with PARSE_HEADER"):
        run(ex, "CREATE FILE FORMAT both TYPE = CSV PARSE_HEADER = TRUE SKIP_HEADER = 1")
    run(
        ex,
        "CREATE PIPE p AS COPY INTO t FROM @st FILE_FORMAT = (SKIP_HEADER = 0 PARSE_HEADER = TRUE) "
        "MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE",
    )
    fmt = ex.catalog.get(Pipe, "FLOE.PUBLIC.P").copy_spec.file_format
    assert (fmt.parse_header, fmt.skip_header) == (True, 0)
