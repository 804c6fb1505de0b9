"""The chaos tests' oracle: what a table must hold after a fault, checked from several sides.

COPY_HISTORY alone cannot show a duplicate (history is one key per pipe and path), so the oracle
also reads the storage itself. It lists the table's blobs in the tables bucket, decrypts every
blob a manifest names, and compares the rows with the staged files, value for value. Blobs that no
manifest names are *orphans*. A kill between a blob write and its commit can leave one, and they are
never read (docs/decisions.md), so the oracle counts and reports them but does not fail on them. It
also checks that nothing is left to load: the pipe's Redis queue stream is empty, SYSTEM$PIPE_STATUS
says ``pendingFileCount == 0``, and no notification is still in SQS (visible or in flight). Then it
watches for a settle period and checks again, so a late replay (a redelivered message, a replayed
micro-batch) cannot slip past.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

from pyarrow import fs as pafs

from floe.aws import client as aws_client
from floe.aws import pyarrow_s3_kwargs
from floe.blobs import crypto_from_settings, read_blob
from floe.catalog import Catalog, Pipe, Table
from floe.catalog.ddl import Defaults, qualify
from floe.keys import Keys
from floe.settings import Settings
from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import history

ROWS = 5
"""Rows in every file of a chaos file set."""

SETTLE_S = 5.0
"""How long the oracle watches after a first pass. Twice the consumer's long-poll wait and several
trigger intervals of the Spark job, so a late redelivery or replay would have landed by then."""

Row = tuple[int, str, Decimal, str, str, int]
"""(id, name, amount, day, file, row number): one table row, comparable with a staged file's."""


def file_set(n: int, tag: str) -> dict[str, bytes]:
    """``n`` CSV files of ROWS rows each, keyed by stage-relative name."""
    out: dict[str, bytes] = {}
    for i in range(n):
        lines = ["id,name,amount,day"] + [
            f"{i * ROWS + j},{tag} {i}/{j},{j}.25,2026-02-{1 + j:02d}" for j in range(ROWS)
        ]
        out[f"{tag}/f{i:04d}.csv"] = ("\n".join(lines) + "\n").encode()
    return out


def expected_rows(files: dict[str, bytes]) -> Counter[Row]:
    """The rows the files must become: the CSV values, the file's name and the 1-based row number."""
    out: Counter[Row] = Counter()
    for name, body in files.items():
        for n, line in enumerate(body.decode().splitlines()[1:], start=1):
            id_, label, amount, day = line.split(",")
            out[(int(id_), label, Decimal(amount), day, name, n)] += 1
    return out


@dataclass
class Scan:
    """What the tables bucket and the manifests hold for one table."""

    rows: Counter[Row] = field(default_factory=Counter)
    committed: list[str] = field(default_factory=list)
    """Blob names the manifests hold."""
    orphans: list[str] = field(default_factory=list)
    """Blobs in the bucket under the table's prefix that no manifest names."""
    missing: list[str] = field(default_factory=list)
    """Blobs a manifest names that the bucket does not hold."""


def _row(r: dict[str, Any]) -> Row:
    day = r["DAY"]
    return (
        int(r["ID"]),
        str(r["NAME"]),
        Decimal(r["AMOUNT"]),
        day.isoformat() if isinstance(day, dt.date) else str(day),
        str(r["FILE"]),
        int(r["ROW_NO"]),
    )


def scan_table(settings: Settings, table_name: str) -> Scan:
    """Decrypt every committed blob of a table, and find the blobs no manifest names.

    Reads Redis and S3 directly, not through the query engine, so a bug in either path cannot hide
    a bug in the other.
    """
    keys = Keys(settings.redis.prefix)
    qualified = str(qualify(table_name, Defaults(settings.database, settings.schema_name)))
    scan = Scan()
    # Closed at once: a Redis Cluster client's sockets would otherwise wait for the cycle collector.
    with closing(settings.redis.client()) as client:
        catalog = Catalog(client, keys)
        table = catalog.get(Table, qualified)
        for pipe_id in catalog.segments(table):
            scan.committed.extend(k.decode() for k in cast(list[bytes], client.hkeys(keys.blobs(pipe_id))))
    db, schema, name = table.name.split(".")
    prefix = f"{db}/{schema}/{name}/{table.id}/"
    bucket = settings.pipeline.tables_bucket
    stored: set[str] = set()
    for page in (
        aws_client(settings.aws, "s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    ):
        stored.update(obj["Key"] for obj in page.get("Contents", []))
    named = set(scan.committed)
    scan.orphans = sorted(stored - named)
    scan.missing = sorted(named - stored)
    fs = pafs.S3FileSystem(**pyarrow_s3_kwargs(settings.aws))
    crypto = crypto_from_settings(settings.encryption.master_key_id, settings.encryption.resolve_master_key())
    for blob in sorted(named & stored):
        data = read_blob(fs, f"{bucket}/{blob}", crypto, name=blob)
        data = data.rename_columns([c.upper() for c in data.column_names])
        scan.rows.update(_row(r) for r in data.to_pylist())
    return scan


def queue_depths(settings: Settings) -> dict[str, int]:
    """Notifications in SQS: waiting, and received but not yet deleted."""
    sqs = aws_client(settings.aws, "sqs")
    url = sqs.get_queue_url(QueueName=settings.consumer.queue_name)["QueueUrl"]
    attrs = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return {k: int(v) for k, v in attrs.items()}


def pending(stack: Stack, pipe: str) -> tuple[int, int]:
    """(pendingFileCount from SYSTEM$PIPE_STATUS, length of the pipe's Redis queue stream)."""
    status = json.loads(stack.sql(f"SELECT SYSTEM$PIPE_STATUS('{pipe}') AS s")[0]["S"])
    s = stack.settings
    qualified = str(qualify(pipe, Defaults(s.database, s.schema_name)))
    with closing(s.redis.client()) as client:
        p = Catalog(client, Keys(s.redis.prefix)).get(Pipe, qualified)
        depth = int(cast(int, client.xlen(Keys(s.redis.prefix).queue(p.id))))
    return int(status["pendingFileCount"]), depth


def _settled_queues(stack: Stack) -> None:
    wait_until(
        lambda: sum(queue_depths(stack.settings).values()) == 0,
        timeout=3 * stack.settings.consumer.visibility_timeout_s + 30,
        what="every notification to leave SQS",
    )


def _same_rows(scan: Scan, want: Counter[Row]) -> None:
    assert scan.missing == [], f"manifests name blobs the bucket lacks: {scan.missing[:3]}"
    twice = {row: n for row, n in scan.rows.items() if n > 1}
    assert not twice, f"{len(twice)} rows are in committed blobs more than once, e.g. {list(twice)[:3]}"
    assert scan.rows == want, (
        f"committed blobs hold {sum(scan.rows.values())} rows; the files have {sum(want.values())}; "
        f"e.g. missing {list(want - scan.rows)[:3]}, extra {list(scan.rows - want)[:3]}"
    )


def _check(stack: Stack, table: str, pipe: str, files: dict[str, bytes], want: Counter[Row]) -> Scan:
    dupes = stack.sql(
        f"SELECT file, row_no, COUNT(*) AS n FROM {table} GROUP BY file, row_no HAVING COUNT(*) > 1 LIMIT 5"
    )
    assert dupes == [], f"rows loaded twice: {dupes}"
    per_file = {
        r["FILE"]: r["N"] for r in stack.sql(f"SELECT file, COUNT(*) AS n FROM {table} GROUP BY file")
    }
    missing = sorted(set(files) - set(per_file))
    assert not missing, f"{len(missing)} files never loaded, e.g. {missing[:3]}"
    assert per_file == dict.fromkeys(files, ROWS)
    hist = history(stack, table)
    assert sorted(h["FILE_NAME"] for h in hist) == sorted(files), "one COPY_HISTORY entry per file"
    assert {h["STATUS"] for h in hist} == {"Loaded"}
    assert {h["ROW_COUNT"] for h in hist} == {ROWS}
    # The storage itself: every committed blob decrypted, its rows against the staged files.
    scan = scan_table(stack.settings, table)
    _same_rows(scan, want)
    assert pending(stack, pipe) == (0, 0), "files are still queued for the pipe"
    return scan


def assert_exactly_once(stack: Stack, table: str, pipe: str, files: dict[str, bytes]) -> Scan:
    """Each file's rows exactly once, by SQL, by COPY_HISTORY and in the decrypted blobs, with
    nothing left to load; then again after a settle period. Returns the final scan (for its orphans).
    """
    want = expected_rows(files)
    _check(stack, table, pipe, files, want)
    _settled_queues(stack)
    # An observation window, not synchronisation: anything late (a replayed batch, a redelivered
    # notification) has had time to land, and must have changed nothing.
    time.sleep(SETTLE_S)
    scan = _check(stack, table, pipe, files, want)
    print(f"{table}: {len(scan.committed)} committed blobs, {len(scan.orphans)} orphan blobs")
    return scan


def assert_rows_exactly_once(stack: Stack, table: str, pipe: str, files: dict[str, bytes]) -> Scan:
    """The oracle without COPY_HISTORY, for a table loaded by a pipe that was replaced midway (a
    replaced pipe's history is dropped, as in Snowflake)."""
    want = expected_rows(files)
    _settled_queues(stack)
    time.sleep(SETTLE_S)  # the observation window of assert_exactly_once
    per_file = {
        r["FILE"]: r["N"] for r in stack.sql(f"SELECT file, COUNT(*) AS n FROM {table} GROUP BY file")
    }
    assert per_file == dict.fromkeys(files, ROWS)
    scan = scan_table(stack.settings, table)
    _same_rows(scan, want)
    assert pending(stack, pipe) == (0, 0), "files are still queued for the pipe"
    print(f"{table}: {len(scan.committed)} committed blobs, {len(scan.orphans)} orphan blobs")
    return scan
