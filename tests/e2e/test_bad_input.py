"""Bad input end to end: the process keeps running, the error is clear, nothing else is lost.

Malformed queue messages, awkward object keys, an object deleted before its load, and files whose
contents are broken in the ways real uploads break. Each test checks the load-history outcome a
user sees in COPY_HISTORY and that good files next to and after the bad input still load.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from floe.aws import client as aws_client
from front.client import auth_header
from tests.conftest import Stack, unique, wait_until
from tests.e2e.test_autoingest import csv_file, history, make_pipe

pytestmark = pytest.mark.e2e

COLUMNS = "id INT NOT NULL, name VARCHAR, amount NUMBER(10,2), day DATE, file VARCHAR, row_no INT"
SELECT = {
    "CSV": "$1, $2, $3::NUMBER(10,2), $4",
    "JSON": "$1:id, $1:name, $1:amount, $1:day",
    "PARQUET": "$1:id, $1:name, $1:amount, $1:day",
}
FORMAT = {
    "CSV": "TYPE = CSV SKIP_HEADER = 1",
    "JSON": "TYPE = JSON",
    "PARQUET": "TYPE = PARQUET",
}


def format_pipe(stack: Stack, bucket: str, kind: str, on_error: str) -> tuple[str, str]:
    """A table and an auto-ingest pipe loading `kind` files from s3://bucket/in/ with a transform."""
    stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
    stack.sql(f"CREATE STAGE {stage} URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = floe_tests")
    stack.sql(f"CREATE TABLE {table} ({COLUMNS})")
    stack.sql(
        f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} FROM "
        f"(SELECT {SELECT[kind]}, METADATA$FILENAME, METADATA$FILE_ROW_NUMBER FROM @{stage}) "
        f"FILE_FORMAT = ({FORMAT[kind]}) ON_ERROR = {on_error}"
    )
    return table, pipe


def json_file(start: int, n: int) -> bytes:
    docs = [
        {"id": i, "name": f"name {i}", "amount": i + 0.5, "day": f"2026-01-{1 + i % 28:02d}"}
        for i in range(start, start + n)
    ]
    return "".join(json.dumps(d) + "\n" for d in docs).encode()


def parquet_file(start: int, n: int) -> bytes:
    ids = list(range(start, start + n))
    table = pa.table(
        {
            "id": ids,
            "name": [f"name {i}" for i in ids],
            "amount": [i + 0.5 for i in ids],
            "day": [f"2026-01-{1 + i % 28:02d}" for i in ids],
        }
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


GOOD = {"CSV": (csv_file, "csv"), "JSON": (json_file, "json"), "PARQUET": (parquet_file, "parquet")}


def truncated(data: bytes) -> bytes:
    """The first half of a file, as an interrupted upload leaves it."""
    return data[: len(data) // 2]


def latin1_csv() -> bytes:
    return "id,name,amount,day\n1,Ann,1.5,2026-01-01\n2,Zoë,2.5,2026-01-02\n".encode("latin-1")


def parquet_with_invalid_utf8() -> bytes:
    """Row 2's name holds a Latin-1 byte in a column declared UTF-8 (as broken writers produce)."""
    names = pa.array([b"Ann", b"Zo\xeb"], pa.binary())
    table = pa.table(
        {
            "id": [1, 2],
            "name": pa.Array.from_buffers(pa.string(), 2, names.buffers()),
            "amount": [1.5, 2.5],
            "day": ["2026-01-01", "2026-01-02"],
        }
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def row_for(stack: Stack, table: str, name: str) -> dict[str, Any] | None:
    """The file's COPY_HISTORY row once its load is over."""
    rows = [r for r in history(stack, table) if r["FILE_NAME"] == name and r["STATUS"] != "Load in progress"]
    return rows[0] if rows else None


def ids_of(stack: Stack, table: str, file: str) -> list[int]:
    rows = stack.sql(f"SELECT id FROM {table} WHERE file = '{file}' ORDER BY id")
    return [r["ID"] for r in rows]


def assert_running(stack: Stack) -> None:
    for name in ("api", "consumer", "pipeline"):
        assert stack.procs[name].poll() is None, f"floe {name} exited:\n{stack.log_text(name)[-3000:]}"


def logged_failure(stack: Stack, file: str, message: str) -> bool:
    """Whether the pipeline logged the file's failure with its message (one JSON object a line)."""
    for line in stack.log_text("pipeline").splitlines():
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        if entry.get("file") == file and message in entry.get("msg", ""):
            return True
    return False


@dataclass(frozen=True)
class BadFile:
    """A broken file, the pipe that reads it and the load history it must get."""

    kind: str
    on_error: str
    name: str
    body: bytes
    expect: dict[str, Any]
    """COPY_HISTORY columns; '{T}' in a value stands for the table's upper-case name."""
    loaded_ids: list[int] = field(default_factory=list)
    """ids of the bad file's rows that must be in the table."""


EMPTY = {
    "STATUS": "Loaded",
    "ROW_COUNT": 0,
    "ROW_PARSED": 0,
    "ERROR_COUNT": 0,
    "FIRST_ERROR_MESSAGE": None,
    "FIRST_ERROR_LINE_NUMBER": None,
}
END_OF_RECORD_AMOUNT = """End of record reached while expected to parse column '"{T}"["AMOUNT":3]'"""
WHOLE_FILE_FAILED = {"STATUS": "Load failed", "ROW_COUNT": 0, "ROW_PARSED": 0, "ERROR_COUNT": 1}

BAD_FILES = [
    pytest.param(BadFile("CSV", "SKIP_FILE", "empty.csv", b"", EMPTY), id="zero-byte-csv"),
    pytest.param(BadFile("JSON", "SKIP_FILE", "empty.json", b"", EMPTY), id="zero-byte-json"),
    pytest.param(BadFile("PARQUET", "SKIP_FILE", "empty.parquet", b"", EMPTY), id="zero-byte-parquet"),
    pytest.param(
        BadFile(
            "CSV",
            "CONTINUE",
            "corrupt.csv.gz",
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 64,
            {
                **WHOLE_FILE_FAILED,
                "FIRST_ERROR_MESSAGE": "Invalid data encountered during decompression for file: "
                "'corrupt.csv.gz',compression type used: 'GZIP', cause: "
                "'Error -3 while decompressing data: invalid block type'",
                "FIRST_ERROR_LINE_NUMBER": None,
            },
        ),
        id="corrupt-gzip",
    ),
    pytest.param(
        BadFile(
            "PARQUET",
            "CONTINUE",
            "cut.parquet",
            truncated(parquet_file(0, 100)),
            {
                **WHOLE_FILE_FAILED,
                "FIRST_ERROR_MESSAGE": "Error parsing the parquet file: Parquet magic bytes not found in "
                "footer. Either the file is corrupted or this is not a parquet file.",
                "FIRST_ERROR_LINE_NUMBER": None,
            },
        ),
        id="truncated-parquet",
    ),
    pytest.param(
        BadFile(
            "CSV",
            "SKIP_FILE",
            "columns.csv",
            b"id,name,amount,day\n1,a,1.5,2026-01-01\n2,b\n3,c,3.5,2026-01-03,extra\n",
            {
                "STATUS": "Load failed",
                "ROW_COUNT": 0,
                "ROW_PARSED": 3,
                "ERROR_COUNT": 2,
                "FIRST_ERROR_MESSAGE": END_OF_RECORD_AMOUNT,
                "FIRST_ERROR_LINE_NUMBER": 3,
                "FIRST_ERROR_CHARACTER_POS": 4,
                "FIRST_ERROR_COLUMN_NAME": '"{T}"["AMOUNT":3]',
            },
        ),
        id="csv-wrong-column-count",
    ),
    pytest.param(
        BadFile(
            "CSV",
            "CONTINUE",
            "short-first.csv",
            b"id,name,amount,day\n1,a\n2,b,2.5,2026-01-02\n3,c,3.5,2026-01-03,extra\n4,d,4.5,2026-01-04\n",
            {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 2,
                "ROW_PARSED": 4,
                "ERROR_COUNT": 2,
                "FIRST_ERROR_MESSAGE": END_OF_RECORD_AMOUNT,
                "FIRST_ERROR_LINE_NUMBER": 2,
                "FIRST_ERROR_CHARACTER_POS": 4,
                "FIRST_ERROR_COLUMN_NAME": '"{T}"["AMOUNT":3]',
            },
            loaded_ids=[2, 4],
        ),
        id="csv-short-first-record",
    ),
    pytest.param(
        BadFile(
            "CSV",
            "SKIP_FILE",
            "latin1.csv",
            latin1_csv(),
            {
                # Invalid UTF-8 is an error of its row (decision 70): the file's other row parsed.
                **WHOLE_FILE_FAILED,
                "ROW_PARSED": 2,
                "FIRST_ERROR_MESSAGE": "Invalid UTF8 detected in string 'Zo0xEB'",
                "FIRST_ERROR_LINE_NUMBER": 3,
                "FIRST_ERROR_CHARACTER_POS": 3,
                "FIRST_ERROR_COLUMN_NAME": '"{T}"["NAME":2]',
            },
        ),
        id="csv-not-utf8",
    ),
    pytest.param(
        BadFile(
            "CSV",
            "CONTINUE",
            "latin1-continue.csv",
            latin1_csv(),
            {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 1,
                "ROW_PARSED": 2,
                "ERROR_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "Invalid UTF8 detected in string 'Zo0xEB'",
                "FIRST_ERROR_LINE_NUMBER": 3,
            },
            loaded_ids=[1],
        ),
        id="csv-not-utf8-continue",
    ),
    pytest.param(
        BadFile(
            "JSON",
            "CONTINUE",
            "one-bad-line.json",
            json_file(1, 1) + b'{"id": 2, "name": "b", "amount": 2.5, "day": }\n' + json_file(3, 1),
            {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 2,
                "ROW_PARSED": 3,
                "ERROR_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "Error parsing JSON: expecting value, pos 45",
                "FIRST_ERROR_LINE_NUMBER": 2,
                "FIRST_ERROR_CHARACTER_POS": 46,
            },
            loaded_ids=[1, 3],
        ),
        id="json-one-bad-line",
    ),
    pytest.param(
        BadFile(
            "PARQUET",
            "CONTINUE",
            "latin1.parquet",
            parquet_with_invalid_utf8(),
            {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 1,
                "ROW_PARSED": 2,
                "ERROR_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "Invalid UTF8 detected in string 'Zo0xEB'",
                "FIRST_ERROR_LINE_NUMBER": 2,
            },
            loaded_ids=[1],
        ),
        id="parquet-not-utf8",
    ),
]


@pytest.mark.parametrize("bad", BAD_FILES)
def test_bad_file_is_reported_and_the_files_around_it_load(
    stack: Stack, bucket: str, s3: Any, bad: BadFile
) -> None:
    """Safeguard: a file that cannot be (fully) read fails alone with Snowflake's error, its place
    in the file and its counts in load history; the good file of the same batch, and one put
    afterwards, still load, and the pipeline keeps running."""
    table, _ = format_pipe(stack, bucket, bad.kind, bad.on_error)
    make, ext = GOOD[bad.kind]
    s3.put_object(Bucket=bucket, Key=f"in/{bad.name}", Body=bad.body)
    s3.put_object(Bucket=bucket, Key=f"in/good-before.{ext}", Body=make(100, 3))

    got = wait_until(lambda: row_for(stack, table, bad.name), what=f"history of {bad.name}")
    expect = {k: v.replace("{T}", table.upper()) if isinstance(v, str) else v for k, v in bad.expect.items()}
    assert {k: got[k] for k in expect} == expect
    if bad.expect["STATUS"] == "Load failed":
        assert logged_failure(stack, bad.name, expect["FIRST_ERROR_MESSAGE"]), "the failure was not logged"

    neighbour = wait_until(lambda: row_for(stack, table, f"good-before.{ext}"), what="the good neighbour")
    assert (neighbour["STATUS"], neighbour["ROW_COUNT"]) == ("Loaded", 3)
    s3.put_object(Bucket=bucket, Key=f"in/good-after.{ext}", Body=make(200, 2))
    after = wait_until(lambda: row_for(stack, table, f"good-after.{ext}"), what="the file put afterwards")
    assert (after["STATUS"], after["ROW_COUNT"]) == ("Loaded", 2)

    # Every row of the table reads back (a bad value that slipped into a blob would break this).
    rows = stack.sql(f"SELECT * FROM {table} ORDER BY id")
    assert [r["ID"] for r in rows] == sorted([*bad.loaded_ids, 100, 101, 102, 200, 201])
    assert ids_of(stack, table, bad.name) == bad.loaded_ids
    assert_running(stack)


def test_object_deleted_before_its_load_fails_with_a_system_error(stack: Stack, bucket: str, s3: Any) -> None:
    """Safeguard: a notified file that is gone when the pipe gets to it becomes LOAD_FAILED with
    Snowflake's "Remote file ... was not found" as first error and as the insertReport systemError,
    instead of failing the batch; the file queued next to it loads."""
    table, pipe = make_pipe(stack, bucket)
    stack.sql(f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = TRUE")
    s3.put_object(Bucket=bucket, Key="in/gone.csv", Body=csv_file(0, 3))
    s3.put_object(Bucket=bucket, Key="in/kept.csv", Body=csv_file(10, 4))

    def pending() -> int:
        return int(
            json.loads(stack.sql(f"SELECT SYSTEM$PIPE_STATUS('{pipe}') AS s")[0]["S"])["pendingFileCount"]
        )

    wait_until(lambda: pending() == 2, what="both files queued while the pipe is paused")
    # A file of another, running pipe queued after them loads: the job has planned a micro-batch
    # since, and that batch must have left the paused pipe's files alone.
    other_bucket = unique("stage")
    s3.create_bucket(Bucket=other_bucket)
    other, _ = make_pipe(stack, other_bucket)
    s3.put_object(Bucket=other_bucket, Key="in/witness.csv", Body=csv_file(0, 1))
    wait_until(lambda: row_for(stack, other, "witness.csv"), what="the running pipe's file to load")
    assert history(stack, table) and all(h["STATUS"] == "Load in progress" for h in history(stack, table))
    s3.delete_object(Bucket=bucket, Key="in/gone.csv")
    stack.sql(f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = FALSE")

    gone = wait_until(lambda: row_for(stack, table, "gone.csv"), what="history of the deleted file")
    message = (
        f"Remote file 's3://{bucket}/in/gone.csv' was not found. If you are running a copy command, please "
        "make sure files are not deleted when they are being loaded or files are not being loaded into "
        "two different tables concurrently with auto purge option."
    )
    assert gone["STATUS"] == "Load failed"
    assert gone["FIRST_ERROR_MESSAGE"] == message
    assert (gone["ERROR_COUNT"], gone["ROW_COUNT"], gone["FIRST_ERROR_LINE_NUMBER"]) == (1, 0, None)
    kept = wait_until(lambda: row_for(stack, table, "kept.csv"), what="history of the kept file")
    assert (kept["STATUS"], kept["ROW_COUNT"]) == ("Loaded", 4)
    assert ids_of(stack, table, "kept.csv") == [10, 11, 12, 13]
    assert ids_of(stack, table, "gone.csv") == []

    settings = stack.settings
    url = f"http://127.0.0.1:{settings.api.port}/v1/data/pipes/FLOE.PUBLIC.{pipe.upper()}/insertReport"
    report = httpx.get(url, headers=auth_header(settings), timeout=30).json()
    files = {f["path"]: f for f in report["files"]}
    assert files["gone.csv"]["status"] == "LOAD_FAILED"
    assert files["gone.csv"]["systemError"] == message
    assert files["kept.csv"]["status"] == "LOADED" and files["kept.csv"]["systemError"] is None
    assert pending() == 0
    assert_running(stack)


LONG_NAME = "long/" + "é" * 500 + "x" * 12 + ".csv"
AWKWARD_NAMES = [
    "with space.csv",
    "plus+sign.csv",
    "100% sure.csv",
    "literal%20stays.csv",
    "literal%2Bstays.csv",
    "a + b = c & d.csv",
    "ünïcödé/日本語/😀.csv",
    "double//slash.csv",
    LONG_NAME,
]


def test_awkward_keys_load_under_their_exact_names(stack: Stack, bucket: str, s3: Any) -> None:
    """Safeguard: S3 URL-encodes keys in notifications ('+' for space, %XX otherwise); decoding must
    give back the exact key, so that spaces, '+', '%', unicode, '//' (which pyarrow's S3 filesystem
    refuses) and 1,024-byte keys each load once, from the right object, under their own name in
    history and METADATA$FILENAME."""
    assert len(f"in/{LONG_NAME}".encode()) == 1024  # S3's limit for a key
    table, _ = make_pipe(stack, bucket)
    for i, name in enumerate(AWKWARD_NAMES):
        s3.put_object(Bucket=bucket, Key=f"in/{name}", Body=csv_file(i * 10, i + 1))

    def all_done() -> list[dict[str, Any]] | None:
        rows = [r for r in history(stack, table) if r["STATUS"] != "Load in progress"]
        return rows if len(rows) >= len(AWKWARD_NAMES) else None

    hist = wait_until(all_done, what="every awkward key loaded")
    assert {h["FILE_NAME"]: (h["STATUS"], h["ROW_COUNT"]) for h in hist} == {
        name: ("Loaded", i + 1) for i, name in enumerate(AWKWARD_NAMES)
    }
    rows = stack.sql(f"SELECT file, MIN(id) AS lo, COUNT(*) AS n FROM {table} GROUP BY file")
    assert {r["FILE"]: (r["LO"], r["N"]) for r in rows} == {
        name: (i * 10, i + 1) for i, name in enumerate(AWKWARD_NAMES)
    }
    assert_running(stack)


def sqs_url(sqs: Any, name: str) -> str:
    return str(sqs.get_queue_url(QueueName=name)["QueueUrl"])


def test_malformed_queue_messages_go_to_the_dead_letter_queue(stack: Stack, bucket: str, s3: Any) -> None:
    """Safeguard: a message that is not a usable S3 notification (not JSON, JSON of the wrong shape,
    a bucket no pipe reads) is never deleted as handled nor retried forever: after maxReceiveCount
    deliveries SQS moves it to the dead-letter queue, the consumer logs why, and keeps consuming."""
    table, _ = make_pipe(stack, bucket)
    sqs = aws_client(stack.settings.aws, "sqs")
    queue = sqs_url(sqs, stack.settings.consumer.queue_name)
    dlq = sqs_url(sqs, stack.settings.consumer.dlq_name)
    token = unique("poison")
    unknown_bucket = unique("nobucket")
    record = {
        "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": unknown_bucket}, "object": {"key": f"in/{token}.csv", "size": 10}},
    }
    bodies = {
        f"not json at all {token}": "message body is not JSON",
        json.dumps([token, 1, 2]): "message body is not a JSON object",
        json.dumps({"token": token, "Records": "nope"}): "message has no Records list",
        json.dumps({"Records": [{"eventName": "ObjectCreated:Put", "token": token}]}): "S3 record lacks",
        "[" * 100_000 + token: "nested too deeply",
        json.dumps({"Records": [record]}): f"no auto-ingest pipe reads bucket of s3://{unknown_bucket}/",
    }
    for body in bodies:
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    s3.put_object(Bucket=bucket, Key="in/alongside.csv", Body=csv_file(0, 2))

    dead: set[str] = set()

    def all_dead() -> bool:
        resp = sqs.receive_message(
            QueueUrl=dlq,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            VisibilityTimeout=300,
        )
        dead.update(m["Body"] for m in resp.get("Messages", []) if m["Body"] in bodies)
        return dead == set(bodies)

    wait_until(all_dead, timeout=120, what="every poison message in the dead-letter queue")

    consumer_log = stack.log_text("consumer")
    for reason in bodies.values():
        assert reason in consumer_log, f"consumer log does not say {reason!r}"
    alongside = wait_until(
        lambda: row_for(stack, table, "alongside.csv"), what="the good file sent alongside"
    )
    assert (alongside["STATUS"], alongside["ROW_COUNT"]) == ("Loaded", 2)
    s3.put_object(Bucket=bucket, Key="in/after.csv", Body=csv_file(10, 3))
    after = wait_until(lambda: row_for(stack, table, "after.csv"), what="a good file put afterwards")
    assert (after["STATUS"], after["ROW_COUNT"]) == ("Loaded", 3)
    assert_running(stack)
