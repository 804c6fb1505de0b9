"""Executes `floe sql` statements: DDL against the catalog, queries through the query engine."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

import redis

from floe.aws import client as aws_client
from floe.catalog import Catalog, CatalogObject, CopySpec, FileFormat, Pipe, Stage, Table, now_ms
from floe.catalog.ddl import (
    AlterPipe,
    CreatePipe,
    CreateStage,
    CreateTable,
    Defaults,
    Describe,
    Drop,
    Query,
    Show,
    Statement,
    parse,
)
from floe.errors import CompilationError, SqlError
from floe.keys import Keys
from floe.settings import Settings
from services.query import QueryEngine, Result
from services.queues import configure_bucket, ensure_queues

log = logging.getLogger("floe.sql")


def _created(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(sep=" ", timespec="milliseconds")


def _status(text: str) -> Result:
    return Result(["STATUS"], [[text]])


class SqlExecutor:
    """One instance per API process."""

    def __init__(self, settings: Settings, client: redis.Redis) -> None:
        self.settings = settings
        self.redis = client
        self.keys = Keys(settings.redis.prefix)
        self.catalog = Catalog(client, self.keys)
        self.defaults = Defaults(settings.database, settings.schema_name)
        self._queue_arn: str | None = None
        self.engine = QueryEngine(settings, client, self.catalog, self.queue_arn)

    def queue_arn(self) -> str:
        """ARN of Floe's ingest queue (created on first use)."""
        if self._queue_arn is None:
            self._queue_arn = ensure_queues(aws_client(self.settings.aws, "sqs"), self.settings)[1]
        return self._queue_arn

    def execute(self, sql: str) -> Result:
        """Run one statement."""
        stmt = parse(sql, self.defaults)
        handler: dict[type, Callable[[Any], Result]] = {
            CreateStage: self._create_stage,
            CreateTable: self._create_table,
            CreatePipe: self._create_pipe,
            Show: self._show,
            Describe: self._describe,
            Drop: self._drop,
            AlterPipe: self._alter_pipe,
            Query: lambda q: self.engine.run(q.expression),
        }
        return handler[type(stmt)](stmt)

    def _exists(self, model: type[CatalogObject], name: str, stmt: Statement) -> Result | None:
        if self.catalog.find(model, name) is None:
            return None
        if getattr(stmt, "if_not_exists", False):
            return _status(f"{name.split('.')[-1]} already exists, statement succeeded.")
        if not getattr(stmt, "replace", False):
            raise SqlError(f"Object '{name}' already exists.", code="002002", sql_state="42710")
        return None

    def _create_stage(self, s: CreateStage) -> Result:
        name = str(s.name)
        if (done := self._exists(Stage, name, s)) is not None:
            return done
        FileFormat().merged(s.file_format)
        self.catalog.put(Stage(name=name, url=s.url, file_format=s.file_format, created_ms=now_ms()))
        return _status(f"Stage area {s.name.name} successfully created.")

    def _create_table(self, s: CreateTable) -> Result:
        name = str(s.name)
        if (done := self._exists(Table, name, s)) is not None:
            return done
        self.catalog.put(Table(name=name, columns=s.columns, created_ms=now_ms()))
        return _status(f"Table {s.name.name} successfully created.")

    def _create_pipe(self, s: CreatePipe) -> Result:
        name = str(s.name)
        if (done := self._exists(Pipe, name, s)) is not None:
            return done
        stage = self.catalog.get(Stage, str(s.stage))
        table = self.catalog.get(Table, str(s.table))
        targets = s.columns if s.columns is not None else [c.name for c in table.columns]
        for col in targets:
            if col not in {c.name for c in table.columns}:
                raise CompilationError(f"invalid identifier '{col}'", code="000904")
        if s.select is not None and s.columns is None and len(s.select) > len(table.columns):
            raise CompilationError(
                f"Insert value list does not match column list expecting {len(table.columns)} "
                f"but got {len(s.select)}",
                code="002020",
            )
        fmt = FileFormat().merged(stage.file_format).merged(s.file_format)
        spec = CopySpec(
            table=str(s.table),
            columns=s.columns,
            select=s.select,
            stage=str(s.stage),
            path=s.path,
            file_format=fmt,
            on_error=s.on_error,
            on_error_limit=s.on_error_limit,
            pattern=s.pattern,
            sql=s.copy_sql,
        )
        pipe = Pipe(
            name=name,
            auto_ingest=s.auto_ingest,
            copy_spec=spec,
            table_id=table.id,
            stage_url=stage.url,
            created_ms=now_ms(),
            comment=s.comment,
        )
        old = self.catalog.find(Pipe, name)
        if pipe.auto_ingest and self.settings.auto_configure_notifications:
            self._configure_notifications(pipe.bucket, extra=pipe, without=old)
        self.catalog.put(pipe)
        if old is not None:
            self._forget_pipe(old)
        return _status(f"Pipe {s.name.name} successfully created.")

    def _configure_notifications(
        self, bucket: str, extra: Pipe | None = None, without: Pipe | None = None
    ) -> None:
        pipes = [p for p in self.catalog.all(Pipe).values() if without is None or p.name != without.name]
        if extra is not None:
            pipes.append(extra)
        s3 = aws_client(self.settings.aws, "s3")
        try:
            configure_bucket(s3, bucket, self.queue_arn(), pipes)
        except s3.exceptions.NoSuchBucket as exc:
            raise SqlError(
                f"Stage bucket '{bucket}' does not exist; create it first (aws s3 mb s3://{bucket}).",
                code="091003",
            ) from exc

    def _forget_pipe(self, pipe: Pipe) -> None:
        """Drop a pipe incarnation's queue, file states and history; its committed blobs stay in the table."""
        keep = self.keys.blobs(pipe.id)
        batch: list[bytes] = []
        for key in self.redis.scan_iter(match=self.keys.pipe_pattern(pipe.id), count=1000):
            if key.decode() != keep:
                batch.append(key)
            if len(batch) >= 1000:
                self.redis.delete(*batch)
                batch = []
        if batch:
            self.redis.delete(*batch)

    def _show(self, s: Show) -> Result:
        rows: list[dict[str, Any]] = []
        if s.kind == "STAGE":
            for st in self.catalog.all(Stage).values():
                db, schema, name = st.name.split(".")
                rows.append(
                    {
                        "created_on": _created(st.created_ms),
                        "name": name,
                        "database_name": db,
                        "schema_name": schema,
                        "url": st.url,
                        "has_credentials": "N",
                        "type": "EXTERNAL",
                        "region": self.settings.aws.region,
                    }
                )
        elif s.kind == "TABLE":
            for t in self.catalog.all(Table).values():
                db, schema, name = t.name.split(".")
                blobs = self.engine.manifest(t)
                rows.append(
                    {
                        "created_on": _created(t.created_ms),
                        "name": name,
                        "database_name": db,
                        "schema_name": schema,
                        "kind": "TABLE",
                        "rows": sum(b["rows"] for b in blobs),
                        "bytes": sum(b["bytes"] for b in blobs),
                        "owner": "ACCOUNTADMIN",
                    }
                )
        else:
            rows = [self._pipe_row(p) for p in self.catalog.all(Pipe).values()]
        if s.like is not None:
            import fnmatch

            pattern = s.like.replace("%", "*").replace("_", "?").upper()
            rows = [r for r in rows if fnmatch.fnmatchcase(str(r["name"]).upper(), pattern)]
        rows.sort(key=lambda r: str(r["name"]))
        columns = list(rows[0].keys()) if rows else self._show_columns(s.kind)
        return Result(columns, [[r[c] for c in columns] for r in rows])

    @staticmethod
    def _show_columns(kind: str) -> list[str]:
        return {
            "STAGE": [
                "created_on",
                "name",
                "database_name",
                "schema_name",
                "url",
                "has_credentials",
                "type",
                "region",
            ],
            "TABLE": ["created_on", "name", "database_name", "schema_name", "kind", "rows", "bytes", "owner"],
            "PIPE": [
                "created_on",
                "name",
                "database_name",
                "schema_name",
                "definition",
                "owner",
                "notification_channel",
                "comment",
                "pattern",
                "execution_state",
            ],
        }[kind]

    def _pipe_row(self, p: Pipe) -> dict[str, Any]:
        db, schema, name = p.name.split(".")
        return {
            "created_on": _created(p.created_ms),
            "name": name,
            "database_name": db,
            "schema_name": schema,
            "definition": p.copy_spec.sql,
            "owner": p.owner,
            "notification_channel": self.queue_arn() if p.auto_ingest else None,
            "comment": p.comment or "",
            "pattern": p.copy_spec.pattern,
            "execution_state": "PAUSED" if p.paused else "RUNNING",
        }

    def _describe(self, s: Describe) -> Result:
        name = str(s.name)
        if s.kind == "PIPE":
            row = self._pipe_row(self.catalog.get(Pipe, name))
            return Result(list(row), [list(row.values())])
        if s.kind == "TABLE":
            t = self.catalog.get(Table, name)
            cols = ["name", "type", "kind", "null?"]
            return Result(
                cols, [[c.name, c.sql_type, "COLUMN", "Y" if c.nullable else "N"] for c in t.columns]
            )
        st = self.catalog.get(Stage, name)
        return Result(
            ["property", "value"],
            [["URL", st.url], *[[k.upper(), str(v)] for k, v in st.file_format.items()]],
        )

    def _drop(self, s: Drop) -> Result:
        name = str(s.name)
        kinds: dict[str, type[CatalogObject]] = {"STAGE": Stage, "TABLE": Table, "PIPE": Pipe}
        model = kinds[s.kind]
        removed = self.catalog.delete(model, name)
        if removed is None:
            if s.if_exists:
                return _status(f"Drop statement executed successfully ({s.name.name} already dropped).")
            self.catalog.get(model, name)  # raises the Snowflake-style "does not exist" error
        if isinstance(removed, Pipe):
            self._forget_pipe(removed)
            if removed.auto_ingest and self.settings.auto_configure_notifications:
                try:
                    self._configure_notifications(removed.bucket)
                except SqlError as exc:
                    log.warning("could not update notifications of %s: %s", removed.bucket, exc)
        return _status(f"{s.name.name} successfully dropped.")

    def _alter_pipe(self, s: AlterPipe) -> Result:
        pipe = self.catalog.get(Pipe, str(s.name))
        self.catalog.put(pipe.model_copy(update={"paused": s.paused}))
        return _status("Statement executed successfully.")
