"""The chaos tests' oracle: what a table must hold after a fault, checked from several sides.

COPY_HISTORY alone cannot show a duplicate (history is one key per pipe and path), so the oracle
also reads the storage itself. It lists the table's blobs in the tables bucket, decrypts every
blob a manifest names, and compares the rows with the staged files, value for value. Blobs that no
manifest names are *orphans*: a kill between a blob write and its commit leaves them until the
replay overwrites or sweeps them (docs/decisions.md, decision 32), so after the settle period the
oracle fails on any, save under a prefix a test names as decision 32's documented garbage. It also
checks that nothing is left to load: the pipe's Redis queue stream is empty, SYSTEM$PIPE_STATUS says
``pendingFileCount == 0``, and no notification is still in SQS (visible or in flight); for a
streaming table, that no accepted append waits in Redis. Then it watches for a settle period and
checks again, so a late replay (a redelivered message, a replayed micro-batch) cannot slip past.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Generic, TypeVar, cast

from pyarrow import fs as pafs

from floe.aws import client as aws_client
from floe.aws import pyarrow_s3_kwargs
from floe.blobs import crypto_from_settings, read_blob
from floe.catalog import Catalog, Pipe, Table
from floe.catalog.ddl import Defaults, qualify
from floe.keys import Keys
from floe.settings import Settings
from pipeline.loader import table_prefix
from tests.conftest import Stack, wait_until
from tests.e2e.test_autoingest import history

ROWS = 5
"""Rows in every file of a chaos file set."""

SETTLE_S = 5.0
"""How long the oracle watches after a first pass. Twice the consumer's long-poll wait and several
trigger intervals of the Spark job, so a late redelivery or replay would have landed by then."""

Row = tuple[int, str, Decimal, str, str, int]
"""(id, name, amount, day, file, row number): one table row, comparable with a staged file's."""

R = TypeVar("R")
"""A table row as a test compares it: a hashable tuple of its values."""


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


def repeated_rows(
    file: str, records: int, record: Callable[[int], tuple[int, str, Decimal, str]], block: int
) -> Counter[Row]:
    """The rows of a large file whose ``block`` records repeat (record ``i`` of a block is
    ``record(i)``): each with the file's name and its 1-based row number."""
    return Counter((*record((n - 1) % block), file, n) for n in range(1, records + 1))


@dataclass
class Scan(Generic[R]):
    """What the tables bucket and the manifests hold for one table."""

    rows: Counter[R] = field(default_factory=Counter)
    committed: list[str] = field(default_factory=list)
    """Blob names the manifests hold."""
    orphans: list[str] = field(default_factory=list)
    """Blobs in the bucket under the table's prefix that no manifest names."""
    missing: list[str] = field(default_factory=list)
    """Blobs a manifest names that the bucket does not hold."""


def csv_row(r: dict[str, Any]) -> Row:
    """A row of a chaos table, from a decrypted blob, comparable with ``expected_rows``."""
    day = r["DAY"]
    return (
        int(r["ID"]),
        str(r["NAME"]),
        Decimal(r["AMOUNT"]),
        day.isoformat() if isinstance(day, dt.date) else str(day),
        str(r["FILE"]),
        int(r["ROW_NO"]),
    )


def scan_table(settings: Settings, table_name: str, row: Callable[[dict[str, Any]], R]) -> Scan[R]:
    """Decrypt every committed blob of a table (each row through ``row``), and find the blobs no
    manifest names.

    Reads Redis and S3 directly, not through the query engine, so a bug in either path cannot hide
    a bug in the other.
    """
    keys = Keys(settings.redis.prefix)
    qualified = str(qualify(table_name, Defaults(settings.database, settings.schema_name)))
    scan: Scan[R] = Scan()
    # Closed at once: a Redis Cluster client's sockets would otherwise wait for the cycle collector.
    with closing(settings.redis.client()) as client:
        catalog = Catalog(client, keys)
        table = catalog.get(Table, qualified)
        for pipe_id in catalog.segments(table):
            scan.committed.extend(k.decode() for k in cast(list[bytes], client.hkeys(keys.blobs(pipe_id))))
    prefix = table_prefix(table)
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
        scan.rows.update(row(r) for r in data.to_pylist())
    return scan


def incarnation_prefix(settings: Settings, table_name: str, pipe_name: str) -> str:
    """Where the current incarnation of ``pipe_name`` writes its blobs of ``table_name``
    (``pipeline.loader.batch_prefix``): what decision 32 calls garbage once the pipe is dropped."""
    keys = Keys(settings.redis.prefix)
    defaults = Defaults(settings.database, settings.schema_name)
    with closing(settings.redis.client()) as client:
        catalog = Catalog(client, keys)
        table = catalog.get(Table, str(qualify(table_name, defaults)))
        pipe = catalog.get(Pipe, str(qualify(pipe_name, defaults)))
    return f"{table_prefix(table)}{pipe.id}/"


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


def _same_rows(scan: Scan[R], want: Counter[R]) -> None:
    assert scan.missing == [], f"manifests name blobs the bucket lacks: {scan.missing[:3]}"
    twice = {row: n for row, n in scan.rows.items() if n > 1}
    assert not twice, f"{len(twice)} rows are in committed blobs more than once, e.g. {list(twice)[:3]}"
    assert scan.rows == want, (
        f"committed blobs hold {sum(scan.rows.values())} rows; the source sent {sum(want.values())}; "
        f"e.g. missing {list(want - scan.rows)[:3]}, extra {list(scan.rows - want)[:3]}"
    )


def _no_orphans(scan: Scan[R], garbage: str | None) -> None:
    """No blob outside the manifests, but under ``garbage``: the prefix of a dropped pipe or table
    incarnation that decision 32 documents as garbage (a batch killed after its blob writes whose
    pipe was dropped before the replay), which the caller names."""
    leaked = [o for o in scan.orphans if garbage is None or not o.startswith(garbage)]
    assert leaked == [], (
        f"{len(leaked)} blobs under the table's prefix that no manifest names (a replay that named its "
        f"blobs otherwise than the killed attempt, or a refused commit left behind), e.g. {leaked[:3]}"
    )


def _check(stack: Stack, table: str, pipe: str, want: Counter[Row]) -> Scan[Row]:
    counts = Counter[str]()
    for row, n in want.items():
        counts[row[4]] += n
    dupes = stack.sql(
        f"SELECT file, row_no, COUNT(*) AS n FROM {table} GROUP BY file, row_no HAVING COUNT(*) > 1 LIMIT 5"
    )
    assert dupes == [], f"rows loaded twice: {dupes}"
    per_file = {
        r["FILE"]: r["N"] for r in stack.sql(f"SELECT file, COUNT(*) AS n FROM {table} GROUP BY file")
    }
    missing = sorted(set(counts) - set(per_file))
    assert not missing, f"{len(missing)} files never loaded, e.g. {missing[:3]}"
    assert per_file == dict(counts)
    hist = history(stack, table)
    assert sorted(h["FILE_NAME"] for h in hist) == sorted(counts), "one COPY_HISTORY entry per file"
    assert {h["STATUS"] for h in hist} == {"Loaded"}
    assert {h["FILE_NAME"]: h["ROW_COUNT"] for h in hist} == dict(counts)
    # The storage itself: every committed blob decrypted, its rows against the staged files.
    scan = scan_table(stack.settings, table, csv_row)
    _same_rows(scan, want)
    assert pending(stack, pipe) == (0, 0), "files are still queued for the pipe"
    return scan


def assert_exactly_once(
    stack: Stack, table: str, pipe: str, files: dict[str, bytes], garbage: str | None = None
) -> Scan[Row]:
    """Each file's rows exactly once, by SQL, by COPY_HISTORY and in the decrypted blobs, with
    nothing left to load; then again after a settle period, and no orphan blob (but under
    ``garbage``, see ``_no_orphans``). Returns the final scan."""
    return assert_loaded_once(stack, table, pipe, expected_rows(files), garbage)


def assert_loaded_once(
    stack: Stack, table: str, pipe: str, want: Counter[Row], garbage: str | None = None
) -> Scan[Row]:
    """``assert_exactly_once`` for the rows ``want`` (a file's name is each row's fifth value)."""
    _check(stack, table, pipe, want)
    _settled_queues(stack)
    # An observation window, not synchronisation: anything late (a replayed batch, a redelivered
    # notification) has had time to land, and must have changed nothing.
    time.sleep(SETTLE_S)
    scan = _check(stack, table, pipe, want)
    _no_orphans(scan, garbage)
    print(f"{table}: {len(scan.committed)} committed blobs, {len(scan.orphans)} orphan blobs")
    return scan


def assert_rows_exactly_once(stack: Stack, table: str, pipe: str, files: dict[str, bytes]) -> Scan[Row]:
    """The oracle without COPY_HISTORY, for a table loaded by a pipe that was replaced midway (a
    replaced pipe's history is dropped, as in Snowflake)."""
    want = expected_rows(files)
    _settled_queues(stack)
    time.sleep(SETTLE_S)  # the observation window of assert_exactly_once
    per_file = {
        r["FILE"]: r["N"] for r in stack.sql(f"SELECT file, COUNT(*) AS n FROM {table} GROUP BY file")
    }
    assert per_file == dict.fromkeys(files, ROWS)
    scan = scan_table(stack.settings, table, csv_row)
    _same_rows(scan, want)
    assert pending(stack, pipe) == (0, 0), "files are still queued for the pipe"
    _no_orphans(scan, None)
    print(f"{table}: {len(scan.committed)} committed blobs, {len(scan.orphans)} orphan blobs")
    return scan


Sent = tuple[str, int, str]
"""(channel, offset, payload): one row a streaming producer sent, as the table holds it."""


def _sent_row(r: dict[str, Any]) -> Sent:
    return (str(r["CH"]), int(r["OFF"]), str(r["PAYLOAD"]))


def waiting_appends(settings: Settings, table_name: str) -> tuple[int, int]:
    """(entries in the table's streaming pipe's rows stream, row-data keys left): accepted appends
    that no commit has settled yet."""
    keys = Keys(settings.redis.prefix)
    qualified = str(qualify(table_name, Defaults(settings.database, settings.schema_name)))
    with closing(settings.redis.client()) as client:
        catalog = Catalog(client, keys)
        table = catalog.get(Table, qualified)
        entries = data = 0
        for p in catalog.pipes_for_table(table):
            if p.source == "streaming":
                entries += int(client.xlen(keys.rows(p.id)))
                pattern = keys.rows(p.id).removesuffix(":rows") + ":rowdata:*"  # see Keys.row_data
                data += sum(1 for _ in client.scan_iter(match=pattern, count=1000))
    return entries, data


def _check_channels(stack: Stack, table: str, want: Counter[Sent]) -> Scan[Sent]:
    last: dict[str, int] = {}
    for ch, off, _ in want:
        last[ch] = max(last.get(ch, -1), off)
    got = stack.sql(
        f"SELECT ch, COUNT(*) AS n, COUNT(DISTINCT off) AS d FROM {table} GROUP BY ch ORDER BY ch"
    )
    sent = Counter(ch for ch, _, _ in want.elements())
    assert got == [{"CH": ch, "N": sent[ch], "D": sent[ch]} for ch in sorted(sent)], "rows per channel"
    tokens = {r["name"]: r["offset_token"] for r in stack.sql(f"SHOW CHANNELS IN TABLE {table}")}
    assert tokens == {ch: str(off) for ch, off in last.items()}, "each channel's token is its last offset"
    scan = scan_table(stack.settings, table, _sent_row)
    _same_rows(scan, want)
    assert waiting_appends(stack.settings, table) == (0, 0), "appends are still waiting to load"
    return scan


def assert_channels_exactly_once(stack: Stack, table: str, want: Counter[Sent]) -> Scan[Sent]:
    """Every row the producers sent exactly once, by SQL and in the decrypted blobs, value for value;
    each channel's committed token its last offset; no append left waiting; then the same after a
    settle period, and no orphan blob."""
    _check_channels(stack, table, want)
    time.sleep(SETTLE_S)  # the observation window of assert_exactly_once
    scan = _check_channels(stack, table, want)
    _no_orphans(scan, None)
    print(f"{table}: {len(scan.committed)} committed blobs, {len(scan.orphans)} orphan blobs")
    return scan
