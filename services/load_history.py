"""Load history as SQL reads it: COPY_HISTORY (the table function and the INFORMATION_SCHEMA
view), INFORMATION_SCHEMA.LOAD_HISTORY, VALIDATE_PIPE_LOAD, and the recorded fields of
SYSTEM$PIPE_STATUS.

Every answer is an Arrow table built here from ``floe.history`` (file states, error details, skip
records) and handed to the query engine, which registers it under a generated name, so the user's
WHERE, ORDER BY and joins run over it in DuckDB. The time bounds are evaluated by the engine, in
Python (``services.query.evaluate_bound``), never by DuckDB. Access goes through the one check
(``services.access``): a pipe's history is read with SELECT on its table, or MONITOR (or OWNERSHIP)
on the pipe; VALIDATE_PIPE_LOAD needs what Snowflake lists for it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from floe.aws import AWS_ERRORS
from floe.aws import client as aws_client
from floe.catalog import Catalog, Pipe, Stage, Table
from floe.catalog.names import join_parts, split_parts
from floe.errors import CompilationError, ObjectNotFound, PermissionDenied
from floe.history import (
    COPY_HISTORY_STATUS,
    LOAD_HISTORY_STATUS,
    LOAD_SKIPPED,
    ErrorDetail,
    FileState,
    SkipRecord,
    iso_utc,
    read_errors,
    read_skips,
    read_states,
)
from floe.keys import Keys, RedisClient
from floe.settings import Settings
from services.access import Check, Need, passes

DAY_MS = 86_400_000
HISTORY_DAYS = 14
"""How far back the history functions and views look, as Snowflake's INFORMATION_SCHEMA does."""
VALIDATE_LIMIT_DAYS = 15
"""VALIDATE_PIPE_LOAD refuses a START_TIME further back than this (Snowflake: "If the specified
date range falls outside the last 15 days, an error is returned")."""
LOAD_HISTORY_ROWS = 10_000
"""LOAD_HISTORY's upper limit of rows (Snowflake's; the newest are kept)."""

_TS = pa.timestamp("ms", tz="UTC")

COPY_HISTORY_SCHEMA = pa.schema(
    [
        ("FILE_NAME", pa.string()),
        ("STAGE_LOCATION", pa.string()),
        ("LAST_LOAD_TIME", _TS),
        ("ROW_COUNT", pa.int64()),
        ("ROW_PARSED", pa.int64()),
        ("FILE_SIZE", pa.int64()),
        ("FIRST_ERROR_MESSAGE", pa.string()),
        ("FIRST_ERROR_LINE_NUMBER", pa.int64()),
        ("FIRST_ERROR_CHARACTER_POS", pa.int64()),
        ("FIRST_ERROR_COLUMN_NAME", pa.string()),
        ("ERROR_COUNT", pa.int64()),
        ("ERROR_LIMIT", pa.int64()),
        ("STATUS", pa.string()),
        ("TABLE_CATALOG_NAME", pa.string()),
        ("TABLE_SCHEMA_NAME", pa.string()),
        ("TABLE_NAME", pa.string()),
        ("PIPE_CATALOG_NAME", pa.string()),
        ("PIPE_SCHEMA_NAME", pa.string()),
        ("PIPE_NAME", pa.string()),
        ("PIPE_RECEIVED_TIME", _TS),
    ]
)
"""The COPY_HISTORY table function's columns."""

COPY_HISTORY_VIEW_SCHEMA = pa.schema(
    [
        *[COPY_HISTORY_SCHEMA.field(n) for n in COPY_HISTORY_SCHEMA.names[:13]],
        ("TABLE_ID", pa.string()),
        ("TABLE_NAME", pa.string()),
        ("TABLE_SCHEMA_ID", pa.string()),
        ("TABLE_SCHEMA_NAME", pa.string()),
        ("TABLE_CATALOG_ID", pa.string()),
        ("TABLE_CATALOG_NAME", pa.string()),
        ("PIPE_CATALOG_NAME", pa.string()),
        ("PIPE_SCHEMA_NAME", pa.string()),
        ("PIPE_NAME", pa.string()),
        ("PIPE_RECEIVED_TIME", _TS),
        ("FIRST_COMMIT_TIME", _TS),
        ("BYTES_BILLED", pa.int64()),
    ]
)
"""The COPY_HISTORY view's columns, in the order of Snowflake's (ACCOUNT_USAGE) view. Floe's ids
are strings (a table incarnation's id; schemas and databases have none, so NULL), and it bills
nothing (BYTES_BILLED is NULL)."""

LOAD_HISTORY_SCHEMA = pa.schema(
    [
        ("SCHEMA_NAME", pa.string()),
        ("FILE_NAME", pa.string()),
        ("TABLE_NAME", pa.string()),
        ("LAST_LOAD_TIME", _TS),
        ("STATUS", pa.string()),
        ("ROW_COUNT", pa.int64()),
        ("ROW_PARSED", pa.int64()),
        ("FIRST_ERROR_MESSAGE", pa.string()),
        ("FIRST_ERROR_LINE_NUMBER", pa.int64()),
        ("FIRST_ERROR_CHARACTER_POSITION", pa.int64()),
        ("FIRST_ERROR_COL_NAME", pa.string()),
        ("ERROR_COUNT", pa.int64()),
        ("ERROR_LIMIT", pa.int64()),
    ]
)
"""INFORMATION_SCHEMA.LOAD_HISTORY's columns."""

VALIDATE_PIPE_LOAD_SCHEMA = pa.schema(
    [
        ("ERROR", pa.string()),
        ("FILE", pa.string()),
        ("LINE", pa.int64()),
        ("CHARACTER", pa.int64()),
        ("BYTE_OFFSET", pa.int64()),
        ("CATEGORY", pa.string()),
        ("CODE", pa.int64()),
        ("SQL_STATE", pa.int64()),
        ("COLUMN_NAME", pa.string()),
        ("ROW_NUMBER", pa.int64()),
        ("ROW_START_LINE", pa.int64()),
        ("REJECTED_RECORD", pa.string()),
    ]
)
"""VALIDATE_PIPE_LOAD's columns; CODE and SQL_STATE are numbers, as Snowflake types them."""

VIEWS = ("COPY_HISTORY", "LOAD_HISTORY")
"""The INFORMATION_SCHEMA views Floe answers."""


def _ts(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def copy_history_row(state: FileState, table: Table, pipe: Pipe) -> dict[str, Any]:
    """One COPY_HISTORY row of a file state."""
    tdb, tschema, tname = split_parts(table.name)
    pdb, pschema, pname = split_parts(pipe.name)
    return {
        "FILE_NAME": state.path,
        "STAGE_LOCATION": state.stage_location,
        "LAST_LOAD_TIME": _ts(state.loaded_ms),
        "ROW_COUNT": state.rows_loaded if state.complete else None,
        "ROW_PARSED": state.rows_parsed,
        "FILE_SIZE": state.size,
        "FIRST_ERROR_MESSAGE": state.first_error,
        "FIRST_ERROR_LINE_NUMBER": state.first_error_line,
        "FIRST_ERROR_CHARACTER_POS": state.first_error_character,
        "FIRST_ERROR_COLUMN_NAME": state.first_error_column,
        "ERROR_COUNT": state.errors_seen,
        "ERROR_LIMIT": state.error_limit,
        "STATUS": COPY_HISTORY_STATUS[state.status],
        "TABLE_CATALOG_NAME": tdb,
        "TABLE_SCHEMA_NAME": tschema,
        "TABLE_NAME": tname,
        "PIPE_CATALOG_NAME": pdb,
        "PIPE_SCHEMA_NAME": pschema,
        "PIPE_NAME": pname,
        "PIPE_RECEIVED_TIME": _ts(state.received_ms),
    }


def skip_row(skip: SkipRecord, table: Table, pipe: Pipe) -> dict[str, Any]:
    """The "Load skipped" COPY_HISTORY row of a skip record: nothing parsed, nothing loaded, and
    why in FIRST_ERROR_MESSAGE (its error count stays 0: the file was not read)."""
    tdb, tschema, tname = split_parts(table.name)
    pdb, pschema, pname = split_parts(pipe.name)
    when = iso_utc(skip.loaded_ms) if skip.loaded_ms is not None else "an earlier load"
    return {
        "FILE_NAME": skip.path,
        "STAGE_LOCATION": pipe.stage_url,
        "LAST_LOAD_TIME": _ts(skip.received_ms),
        "ROW_COUNT": 0,
        "ROW_PARSED": 0,
        "FILE_SIZE": skip.size,
        "FIRST_ERROR_MESSAGE": (
            f"File was already loaded by this pipe (at {when}) and is not loaded again within "
            f"{HISTORY_DAYS} days, even with other contents; stage it under a new name"
        ),
        "FIRST_ERROR_LINE_NUMBER": None,
        "FIRST_ERROR_CHARACTER_POS": None,
        "FIRST_ERROR_COLUMN_NAME": None,
        "ERROR_COUNT": 0,
        "ERROR_LIMIT": None,
        "STATUS": LOAD_SKIPPED,
        "TABLE_CATALOG_NAME": tdb,
        "TABLE_SCHEMA_NAME": tschema,
        "TABLE_NAME": tname,
        "PIPE_CATALOG_NAME": pdb,
        "PIPE_SCHEMA_NAME": pschema,
        "PIPE_NAME": pname,
        "PIPE_RECEIVED_TIME": _ts(skip.received_ms),
    }


def _in_range(row: dict[str, Any], start: dt.datetime, end: dt.datetime | None) -> bool:
    when = row["LAST_LOAD_TIME"] or row["PIPE_RECEIVED_TIME"]
    return bool(when >= start and (end is None or when < end))


def error_rows(state: FileState, errors: list[ErrorDetail] | None) -> list[dict[str, Any]]:
    """VALIDATE_PIPE_LOAD's rows of one file: each recorded error, or, for a file whose errors were
    not recorded one by one (a file that could not be read, or loaded before Floe kept them), its
    first error from load history."""
    if errors is None:
        if not state.first_error:
            return []
        errors = [
            ErrorDetail(
                state.first_error,
                line=state.first_error_line,
                character=state.first_error_character,
                column_name=state.first_error_column,
                row_start_line=state.first_error_line,
            )
        ]
    return [
        {
            "ERROR": e.error,
            "FILE": state.path,
            "LINE": e.line,
            "CHARACTER": e.character,
            "BYTE_OFFSET": e.byte_offset,
            "CATEGORY": e.category,
            "CODE": _number(e.code),
            "SQL_STATE": _number(e.sql_state),
            "COLUMN_NAME": e.column_name,
            "ROW_NUMBER": e.row_number,
            "ROW_START_LINE": e.row_start_line,
            "REJECTED_RECORD": e.rejected_record,
        }
        for e in errors
    ]


class LoadHistory:
    """Builds the history tables a query reads."""

    def __init__(self, settings: Settings, client: RedisClient, catalog: Catalog) -> None:
        self.settings = settings
        self.redis = client
        self.keys = Keys(settings.redis.prefix)
        self.catalog = catalog

    # ------------------------------------------------------------------------ COPY_HISTORY

    def monitored(self, table: str, check: Check) -> set[str] | None:
        """Whose load history of ``table`` the caller may read: every pipe's (None) with SELECT on
        the table, else the pipes it holds MONITOR (or OWNERSHIP) on; the SELECT refusal if none."""
        try:
            check(Need("TABLE", table, ("SELECT",)))
            return None
        except (ObjectNotFound, PermissionDenied):
            found = self.catalog.find(Table, table)
            pipes = {
                p.name
                for p in (self.catalog.pipes_for_table(found) if found is not None else [])
                if passes(check, Need("PIPE", p.name, ("MONITOR", "OWNERSHIP")))
            }
            if not pipes:
                raise
            return pipes

    def copy_history(
        self,
        table_name: str,
        start: dt.datetime,
        end: dt.datetime | None,
        check: Check,
        pipe_name: str | None = None,
    ) -> pa.Table:
        """COPY_HISTORY(TABLE_NAME => ..., START_TIME => ...[, END_TIME => ...][, PIPE_NAME => ...]):
        one row per file of each pipe the caller may see, plus the "Load skipped" rows of files
        sent again, by LAST_LOAD_TIME (or when received, while in progress) in [start, end)."""
        pipes = self.monitored(table_name, check)
        table = self.catalog.get(Table, table_name)
        since = int(start.timestamp() * 1000) - DAY_MS
        rows: list[dict[str, Any]] = []
        for pipe in self.catalog.pipes_for_table(table):
            if (pipes is not None and pipe.name not in pipes) or (pipe_name and pipe.name != pipe_name):
                continue
            rows += [r for r in self._pipe_rows(pipe, table, since) if _in_range(r, start, end)]
        return pa.Table.from_pylist(rows, schema=COPY_HISTORY_SCHEMA)

    def _pipe_rows(self, pipe: Pipe, table: Table, since_ms: int) -> Iterator[dict[str, Any]]:
        for state in read_states(self.redis, self.keys, pipe.id, since_ms):
            yield copy_history_row(state, table, pipe)
        for skip in read_skips(self.redis, self.keys, pipe.id, since_ms):
            yield skip_row(skip, table, pipe)

    # ----------------------------------------------------------------------------- views

    def view(self, name: str, database: str, check: Check) -> pa.Table:
        """INFORMATION_SCHEMA.COPY_HISTORY or LOAD_HISTORY of ``database``: the last 14 days of the
        pipes whose history the caller may read (as COPY_HISTORY's table function decides), for
        every table of the database. Files still loading are left out, as Snowflake's views
        include only loads that ran to completion; LOAD_HISTORY has no "Load skipped" either."""
        now = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
        since = now - HISTORY_DAYS * DAY_MS
        rows: list[dict[str, Any]] = []
        for table in self.catalog.all(Table).values():
            if split_parts(table.name)[0] != database:
                continue
            try:
                pipes = self.monitored(table.name, check)
            except (ObjectNotFound, PermissionDenied):
                continue
            for pipe in self.catalog.pipes_for_table(table):
                if pipes is None or pipe.name in pipes:
                    rows += [
                        r for r in self._pipe_rows(pipe, table, since) if r["LAST_LOAD_TIME"] is not None
                    ]
        if name == "LOAD_HISTORY":
            return self._load_history(rows)
        out = [
            {**r, "TABLE_ID": self._table_id(r), "FIRST_COMMIT_TIME": r["LAST_LOAD_TIME"]}
            for r in rows
            if r["STATUS"] != COPY_HISTORY_STATUS["LOAD_IN_PROGRESS"]
        ]
        return pa.Table.from_pylist(out, schema=COPY_HISTORY_VIEW_SCHEMA)

    def _table_id(self, row: dict[str, Any]) -> str | None:
        name = join_parts(row["TABLE_CATALOG_NAME"], row["TABLE_SCHEMA_NAME"], row["TABLE_NAME"])
        table = self.catalog.find(Table, name)
        return table.id if table is not None else None

    @staticmethod
    def _load_history(rows: list[dict[str, Any]]) -> pa.Table:
        by_status = {COPY_HISTORY_STATUS[k]: v for k, v in LOAD_HISTORY_STATUS.items()}
        kept = [r for r in rows if r["STATUS"] in by_status]
        kept.sort(key=lambda r: r["LAST_LOAD_TIME"], reverse=True)
        out = [
            {
                "SCHEMA_NAME": r["TABLE_SCHEMA_NAME"],
                "FILE_NAME": r["FILE_NAME"],
                "TABLE_NAME": r["TABLE_NAME"],
                "LAST_LOAD_TIME": r["LAST_LOAD_TIME"],
                "STATUS": by_status[r["STATUS"]],
                "ROW_COUNT": r["ROW_COUNT"],
                "ROW_PARSED": r["ROW_PARSED"],
                "FIRST_ERROR_MESSAGE": r["FIRST_ERROR_MESSAGE"],
                "FIRST_ERROR_LINE_NUMBER": r["FIRST_ERROR_LINE_NUMBER"],
                "FIRST_ERROR_CHARACTER_POSITION": r["FIRST_ERROR_CHARACTER_POS"],
                "FIRST_ERROR_COL_NAME": r["FIRST_ERROR_COLUMN_NAME"],
                "ERROR_COUNT": r["ERROR_COUNT"],
                "ERROR_LIMIT": r["ERROR_LIMIT"],
            }
            for r in kept[:LOAD_HISTORY_ROWS]
        ]
        return pa.Table.from_pylist(out, schema=LOAD_HISTORY_SCHEMA)

    # -------------------------------------------------------------------- VALIDATE_PIPE_LOAD

    def authorize_validate(self, pipe: Pipe, check: Check) -> None:
        """VALIDATE_PIPE_LOAD's privileges: OWNERSHIP of the pipe, or MONITOR on it with USAGE on
        its stage and SELECT and INSERT on its table (Snowflake's minimum)."""
        if passes(check, Need("PIPE", pipe.name, ("OWNERSHIP",))):
            return
        check(Need("PIPE", pipe.name, ("MONITOR",)))
        stage = self.catalog.find(Stage, pipe.copy_spec.stage) if pipe.copy_spec.stage else None
        if stage is not None:
            check(Need("STAGE", stage.name, ("READ",) if stage.internal else ("USAGE",)))
        check(Need("TABLE", pipe.copy_spec.table, ("SELECT",)))
        check(Need("TABLE", pipe.copy_spec.table, ("INSERT",)))

    def validate_pipe_load(
        self, pipe_name: str, start: dt.datetime, end: dt.datetime | None, check: Check
    ) -> pa.Table:
        """VALIDATE_PIPE_LOAD(PIPE_NAME => ..., START_TIME => ...[, END_TIME => ...]): every
        recorded error of every file the pipe loaded, failed or partly loaded in [start, end), in
        load order and file order; no rows when there were no errors.

        Unlike Snowflake, which refuses a pipe whose COPY transforms (it validates by running the
        COPY again), Floe recorded each error when the file loaded, through the transform or not,
        and shows them for every pipe (docs/decisions.md)."""
        check(Need("PIPE", pipe_name, ("MONITOR", "OWNERSHIP")))
        pipe = self.catalog.get(Pipe, pipe_name)
        self.authorize_validate(pipe, check)
        now = dt.datetime.now(dt.UTC)
        oldest = now - dt.timedelta(days=VALIDATE_LIMIT_DAYS)
        if start < oldest:
            raise CompilationError(
                f"VALIDATE_PIPE_LOAD reads the last {HISTORY_DAYS} days: START_TIME "
                f"{start.isoformat(timespec='seconds')} is more than {VALIDATE_LIMIT_DAYS} days ago",
                code="002140",
                sql_state="22023",
            )
        since = int(start.timestamp() * 1000) - DAY_MS
        states = [
            s
            for s in read_states(self.redis, self.keys, pipe.id, since)
            if s.complete
            and s.errors_seen > 0
            and (when := _ts(s.loaded_ms)) is not None
            and when >= start
            and (end is None or when < end)
        ]
        states.sort(key=lambda s: (s.loaded_ms or 0, s.path))
        details = read_errors(self.redis, self.keys, pipe.id, [s.path for s in states])
        rows = [row for s in states for row in error_rows(s, details.get(s.path))]
        return pa.Table.from_pylist(rows, schema=VALIDATE_PIPE_LOAD_SCHEMA)

    # -------------------------------------------------------------------- SYSTEM$PIPE_STATUS

    def recorded_status(self, pipe: Pipe) -> dict[str, str]:
        """The pipe's status hash (registrar, consumer) and, for an auto-ingest pipe, the
        notification channel's (consumer), as SYSTEM$PIPE_STATUS names the fields."""
        raw = self.redis.hgetall(self.keys.status(pipe.id))
        out = {k.decode(): v.decode() for k, v in raw.items()}
        if pipe.auto_ingest:
            channel = self.redis.hgetall(self.keys.notification_channel())
            out.update({k.decode(): v.decode() for k, v in channel.items()})
        return out

    def channel_backlog(self, queue_arn: str) -> int | None:
        """numOutstandingMessagesOnChannel: the queue's messages not yet received (SQS's
        ApproximateNumberOfMessages); None when SQS does not answer."""
        sqs = aws_client(self.settings.aws, "sqs")
        try:
            url = sqs.get_queue_url(QueueName=queue_arn.rsplit(":", 1)[-1])["QueueUrl"]
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
            return int(attrs["Attributes"]["ApproximateNumberOfMessages"])
        except AWS_ERRORS:
            return None
        except (KeyError, ValueError):
            return None
        finally:
            sqs.close()


STATUS_TIMES = (
    "lastPipeErrorTimestamp",
    "lastPipeFaultTimestamp",
    "lastIngestedTimestamp",
    "lastReceivedMessageTimestamp",
    "lastForwardedMessageTimestamp",
    "lastPulledFromChannelTimestamp",
)
"""The recorded fields of SYSTEM$PIPE_STATUS that are times (epoch ms stored, ISO 8601 shown)."""

STATUS_ORDER = (
    "executionState",
    "oldestPendingFilePath",
    "oldestFileTimestamp",
    "pendingFileCount",
    "lastPipeErrorTimestamp",
    "lastPipeFaultTimestamp",
    "lastIngestedTimestamp",
    "lastIngestedFilePath",
    "notificationChannelName",
    "numOutstandingMessagesOnChannel",
    "lastReceivedMessageTimestamp",
    "lastForwardedMessageTimestamp",
    "error",
    "fault",
    "lastPulledFromChannelTimestamp",
    "lastForwardedFilePath",
)
"""SYSTEM$PIPE_STATUS's fields in the order Snowflake documents them."""


def status_json(fields: dict[str, Any], recorded: dict[str, str]) -> str:
    """The SYSTEM$PIPE_STATUS answer: the computed ``fields``, then the recorded ones they do not
    override (times shown as ISO 8601), in Snowflake's order; absent fields are left out."""
    merged: dict[str, Any] = {}
    for key in ("lastIngestedFilePath", "lastForwardedFilePath", "error", "fault"):
        if key in recorded:
            merged[key] = recorded[key]
    for key in STATUS_TIMES:
        if recorded.get(key, "").isdigit():
            merged[key] = iso_utc(int(recorded[key]))
    merged.update({k: v for k, v in fields.items() if v is not None})
    ordered = {k: merged[k] for k in STATUS_ORDER if k in merged}
    return json.dumps(ordered, separators=(",", ":"))
