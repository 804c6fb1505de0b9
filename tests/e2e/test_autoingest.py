"""Auto-ingest end to end: put files into a stage bucket, query them through `floe sql`."""

from __future__ import annotations

import gzip
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyarrow import fs as pafs

from floe.aws import pyarrow_s3_kwargs
from tests.conftest import Stack, unique, wait_until

pytestmark = pytest.mark.e2e


def history(stack: Stack, table: str) -> list[dict[str, Any]]:
    return stack.sql(
        "SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => '"
        + table
        + "', START_TIME => DATEADD(hours, -1, CURRENT_TIMESTAMP()))) ORDER BY FILE_NAME"
    )


def done(stack: Stack, table: str, n: int) -> list[dict[str, Any]] | None:
    rows = [r for r in history(stack, table) if r["STATUS"] != "Load in progress"]
    return rows if len(rows) >= n else None


def make_pipe(
    stack: Stack,
    bucket: str,
    *,
    on_error: str = "SKIP_FILE",
    transform: bool = True,
    auto_ingest: bool = True,
) -> tuple[str, str]:
    stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
    stack.sql(
        f"CREATE STAGE {stage} URL = 's3://{bucket}/in/'"
        " STORAGE_INTEGRATION = floe_tests FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
    )
    stack.sql(
        f"CREATE TABLE {table} (id INT NOT NULL, name VARCHAR, amount NUMBER(10,2), day DATE, "
        "file VARCHAR, row_no INT)"
    )
    select = (
        f"(SELECT $1, $2, $3::NUMBER(10,2), $4, METADATA$FILENAME, METADATA$FILE_ROW_NUMBER FROM @{stage})"
        if transform
        else f"@{stage}"
    )
    stack.sql(
        f"CREATE PIPE {pipe} AUTO_INGEST = {auto_ingest} AS COPY INTO {table} FROM {select} "
        f"FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1) ON_ERROR = {on_error}"
    )
    return table, pipe


def csv_file(start: int, n: int) -> bytes:
    lines = ["id,name,amount,day"] + [
        f"{i},name {i},{i}.5,2026-01-{1 + i % 28:02d}" for i in range(start, start + n)
    ]
    return ("\n".join(lines) + "\n").encode()


def test_files_load_with_values_names_and_row_numbers(stack: Stack, bucket: str, s3: Any) -> None:
    table, pipe = make_pipe(stack, bucket)
    keys = ["in/a.csv", "in/sub dir/b+c ü.csv", "in/z.csv.gz"]
    s3.put_object(Bucket=bucket, Key=keys[0], Body=csv_file(0, 10))
    s3.put_object(Bucket=bucket, Key=keys[1], Body=csv_file(10, 5))
    s3.put_object(Bucket=bucket, Key=keys[2], Body=gzip.compress(csv_file(15, 3)))

    wait_until(lambda: stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"] == 18, what="18 rows")
    rows = stack.sql(f"SELECT * FROM {table} ORDER BY id")
    assert [r["ID"] for r in rows] == list(range(18))
    first = rows[0]
    assert first["NAME"] == "name 0" and first["AMOUNT"] == 0.5 and first["DAY"] == "2026-01-01"
    assert first["FILE"] == "a.csv" and first["ROW_NO"] == 1
    assert {r["FILE"] for r in rows} == {"a.csv", "sub dir/b+c ü.csv", "z.csv.gz"}
    assert [r["ROW_NO"] for r in rows if r["FILE"] == "sub dir/b+c ü.csv"] == [1, 2, 3, 4, 5]

    hist = wait_until(lambda: done(stack, table, 3), what="history")
    assert {h["FILE_NAME"]: h["STATUS"] for h in hist} == dict.fromkeys(
        ["a.csv", "sub dir/b+c ü.csv", "z.csv.gz"], "Loaded"
    )
    assert {h["ROW_COUNT"] for h in hist} == {10, 5, 3}
    assert all(h["PIPE_NAME"] == pipe.upper() and h["STAGE_LOCATION"] == f"s3://{bucket}/in/" for h in hist)

    status = stack.sql(f"SELECT SYSTEM$PIPE_STATUS('{pipe}') AS s")[0]["S"]
    assert '"executionState":"RUNNING"' in status and '"pendingFileCount":0' in status
    grouped = stack.sql(
        f"SELECT day, COUNT(*) AS n FROM {table} WHERE id < 5 GROUP BY day ORDER BY day LIMIT 2"
    )
    assert grouped == [{"DAY": "2026-01-01", "N": 1}, {"DAY": "2026-01-02", "N": 1}]


def test_reput_same_key_is_not_loaded_twice(stack: Stack, bucket: str, s3: Any) -> None:
    table, _ = make_pipe(stack, bucket)
    s3.put_object(Bucket=bucket, Key="in/once.csv", Body=csv_file(0, 4))
    wait_until(lambda: done(stack, table, 1), what="first load")
    s3.put_object(Bucket=bucket, Key="in/once.csv", Body=csv_file(100, 7))  # overwritten, new eTag
    s3.put_object(Bucket=bucket, Key="in/marker.csv", Body=csv_file(200, 1))
    wait_until(
        lambda: any(h["FILE_NAME"] == "marker.csv" for h in done(stack, table, 1) or []), what="marker load"
    )
    assert stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"] == 5
    # The overwritten object (another size) is skipped, and says so in a row of its own (decision 73).
    once = sorted(h["STATUS"] for h in history(stack, table) if h["FILE_NAME"] == "once.csv")
    assert once == ["Load skipped", "Loaded"]


@pytest.mark.parametrize("on_error", ["SKIP_FILE", "CONTINUE"])
def test_bad_rows_show_first_error_in_copy_history(stack: Stack, bucket: str, s3: Any, on_error: str) -> None:
    table, _ = make_pipe(stack, bucket, on_error=on_error)
    body = b"id,name,amount,day\n1,a,1.0,2026-01-01\n2,b,abc,2026-01-02\n3,c,3.0,2026-01-03\n"
    s3.put_object(Bucket=bucket, Key="in/bad.csv", Body=body)
    (h,) = wait_until(lambda: done(stack, table, 1), what="bad file history")
    assert h["FIRST_ERROR_MESSAGE"] == "Numeric value 'abc' is not recognized"
    assert h["FIRST_ERROR_LINE_NUMBER"] == 3
    assert h["FIRST_ERROR_COLUMN_NAME"] == f'"{table.upper()}"["AMOUNT":3]'
    assert h["ERROR_COUNT"] == 1 and h["ROW_PARSED"] == 3
    count = stack.sql(f"SELECT COUNT(*) AS n FROM {table}")[0]["N"]
    if on_error == "SKIP_FILE":
        assert h["STATUS"] == "Load failed" and h["ROW_COUNT"] == 0 and count == 0
    else:
        assert h["STATUS"] == "Partially loaded" and h["ROW_COUNT"] == 2 and count == 2


def test_blobs_are_encrypted(stack: Stack, bucket: str, s3: Any) -> None:
    table, _ = make_pipe(stack, bucket)
    s3.put_object(Bucket=bucket, Key="in/secret.csv", Body=csv_file(0, 3))
    wait_until(lambda: done(stack, table, 1), what="load")
    tables_bucket = stack.settings.pipeline.tables_bucket
    blobs = [o["Key"] for o in s3.list_objects_v2(Bucket=tables_bucket).get("Contents", [])]
    mine = [k for k in blobs if f"/{table.upper()}/" in k]
    assert mine, blobs
    fs = pafs.S3FileSystem(**pyarrow_s3_kwargs(stack.settings.aws))
    for key in mine:
        with pytest.raises(OSError, match="encrypted"):
            pq.read_table(f"{tables_bucket}/{key}", filesystem=fs)


def test_plain_copy_and_missing_object(stack: Stack, bucket: str, s3: Any) -> None:
    stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
    stack.sql(f"CREATE STAGE {stage} URL = 's3://{bucket}/raw/' STORAGE_INTEGRATION = floe_tests")
    stack.sql(f"CREATE TABLE {table} (a INT, b VARCHAR)")
    stack.sql(
        f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} FROM @{stage} FILE_FORMAT = (TYPE = CSV)"
    )
    s3.put_object(Bucket=bucket, Key="raw/p.csv", Body=b"1,x\n2,y\n")
    wait_until(lambda: done(stack, table, 1), what="plain copy")
    assert stack.sql(f"SELECT a, b FROM {table} ORDER BY a") == [{"A": 1, "B": "x"}, {"A": 2, "B": "y"}]
    shown = {r["name"]: r for r in stack.sql("SHOW PIPES")}
    assert shown[pipe.upper()]["notification_channel"].startswith("arn:aws:sqs:")


def test_spark_reader_scans_the_committed_rows(stack: Stack, bucket: str, s3: Any) -> None:
    """The reader for large scans sees exactly what the query engine sees, decrypted."""
    from pipeline import read_table, spark_session

    table, _ = make_pipe(stack, bucket)
    for i in range(3):
        s3.put_object(Bucket=bucket, Key=f"in/scan_{i}.csv", Body=csv_file(i * 100, 50))
    wait_until(lambda: done(stack, table, 3), what="three loads")
    spark = spark_session(stack.settings, "floe-reader-test")
    try:
        df = read_table(spark, stack.settings, table)
        assert df.count() == 150
        rows = {r["ID"]: r for r in df.collect()}
        assert sorted(rows) == sorted(i * 100 + j for i in range(3) for j in range(50))
        assert rows[101]["NAME"] == "name 101" and rows[101]["FILE"] == "scan_1.csv"
        assert rows[101]["ROW_NO"] == 2 and float(rows[101]["AMOUNT"]) == 101.5
    finally:
        spark.stop()
