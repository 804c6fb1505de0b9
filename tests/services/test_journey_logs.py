"""The log fields that let one grep follow a file (README, "Logs, progress and `floe status`"): the
JSON formatter (floe/runtime.py), the dedup step's line per file (services/dedup.py) and the
registrar's (pipeline/registrar.py), against the real Redis. The whole journey across the
processes: tests/e2e/test_journey_and_status.py."""

from __future__ import annotations

import json
import logging

import pytest
import redis

from floe.catalog import CopySpec, Pipe
from floe.history import FileState
from floe.keys import Keys
from floe.runtime import JsonFormatter, log_context
from floe.settings import Settings
from pipeline.registrar import PipeCommit, Registrar
from services.dedup import Deduper, FileRef

pytestmark = pytest.mark.integration


def line(record: logging.LogRecord, process: str | None = "consumer") -> dict[str, object]:
    return dict(json.loads(JsonFormatter(process).format(record)))


def record(msg: str, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("floe.x", logging.INFO, __file__, 1, msg, (), None)
    rec.__dict__.update(extra)
    return rec


@pytest.mark.unit
def test_a_line_carries_the_process_the_known_fields_and_the_context() -> None:
    token = log_context.set({"batch": 7, "request_id": "r1"})
    try:
        out = line(record("enqueued", pipe="D.S.P", file="é/a b.csv", step="enqueued", color_message="x"))
    finally:
        log_context.reset(token)
    assert out["process"] == "consumer" and out["msg"] == "enqueued"
    assert (out["pipe"], out["file"], out["step"], out["batch"], out["request_id"]) == (
        "D.S.P",
        "é/a b.csv",
        "enqueued",
        7,
        "r1",
    )
    assert "color_message" not in out  # a library's own extra is not a field
    # The name as it is, so `grep '"file": "é/a b.csv"'` finds the line.
    text = JsonFormatter("consumer").format(record("m", file="é/a b.csv"))
    assert '"file": "é/a b.csv"' in text
    assert "process" not in line(record("m"), process=None)


def make_pipe() -> Pipe:
    return Pipe(
        name="D.S.P", copy_spec=CopySpec(table="D.S.T", stage="D.S.S"), table_id="t", stage_url="s3://b/x/"
    )


def fields(caplog: pytest.LogCaptureFixture, logger: str) -> list[tuple[object, ...]]:
    return [
        (
            r.levelname,
            r.getMessage(),
            r.__dict__.get("file"),
            r.__dict__.get("step"),
            r.__dict__.get("source"),
        )
        for r in caplog.records
        if r.name == logger
    ]


def test_dedup_logs_each_file_once_with_its_pipe_and_source(
    isolated_settings: Settings, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    d = Deduper(redis_client, Keys(isolated_settings.redis.prefix), isolated_settings.retention_seconds)
    pipe = make_pipe()
    with caplog.at_level(logging.DEBUG, logger="floe.dedup"):
        d.enqueue(pipe, [FileRef("a.csv"), FileRef("b.csv")], source="rest")
        d.enqueue(pipe, [FileRef("a.csv")], source="notification")
        d.refresh(pipe, [FileRef("a.csv"), FileRef("c.csv")], source="refresh")
    assert fields(caplog, "floe.dedup") == [
        ("INFO", "enqueued", "a.csv", "enqueued", "rest"),
        ("INFO", "enqueued", "b.csv", "enqueued", "rest"),
        ("INFO", "skipped: already seen by this pipe", "a.csv", "skipped", "notification"),
        # A REFRESH or backfill leaves alone what is pending or loaded: only at DEBUG, as a
        # backfill lists the whole stage every interval.
        ("DEBUG", "skipped: pending, loaded or partially loaded already", "a.csv", "skipped", "refresh"),
        ("INFO", "enqueued", "c.csv", "enqueued", "refresh"),
    ]
    assert all(r.__dict__.get("pipe") == "D.S.P" for r in caplog.records if r.name == "floe.dedup")


def test_the_registrar_logs_each_committed_file_and_a_failure_with_its_error(
    isolated_settings: Settings, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    pipe = make_pipe()
    Deduper(redis_client, keys, 3600).enqueue(pipe, [FileRef("ok.csv"), FileRef("bad.csv")], source="rest")
    ids = [sid.decode() for sid, _ in redis_client.xrange(keys.queue(pipe.id))]
    base = {"stage_location": "s3://b/x/", "received_ms": 1}
    ok = FileState(path="ok.csv", status="LOADED", rows_loaded=3, rows_parsed=3, **base)
    bad = FileState(
        path="bad.csv", status="LOAD_FAILED", first_error="Numeric value 'x' is not recognized", **base
    )
    commit = PipeCommit(pipe.id, files=[(ok, ids[0]), (bad, ids[1])], pipe_name=pipe.name)
    registrar = Registrar(redis_client, keys, 3600)
    with caplog.at_level(logging.INFO, logger="floe.pipeline.registrar"):
        registrar.commit(commit, "q", 4, 1000)
        registrar.commit(commit, "q", 4, 1000)  # a replay commits nothing, and logs nothing
    got = [
        (
            r.levelname,
            r.getMessage(),
            r.__dict__["file"],
            r.__dict__["batch"],
            r.__dict__["step"],
            r.__dict__["pipe"],
        )
        for r in caplog.records
        if r.name == "floe.pipeline.registrar"
    ]
    assert got == [
        ("INFO", "committed: LOADED, 3 rows", "ok.csv", 4, "committed", "D.S.P"),
        ("WARNING", "load failed: Numeric value 'x' is not recognized", "bad.csv", 4, "committed", "D.S.P"),
    ]
