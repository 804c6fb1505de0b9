"""Stopped pipes (decision 84): a pipe whose table or stage was dropped, replaced or altered after it
was created shows Snowflake's STOPPED_* executionState, loads nothing, keeps its queued files, and
comes back only when it is recreated, which hands those files on. Through the SQL executor against
the real Redis, and the Spark source's planning (``pipeline.source``) against the same catalog.

Snowflake's texts: SYSTEM$PIPE_STATUS lists the states; CREATE STAGE's usage notes ("Any pipes that
reference the stage stop loading data. The execution status of the pipes changes to
STOPPED_STAGE_DROPPED. To resume loading data, these pipe objects must be recreated (using the CREATE
OR REPLACE PIPE syntax).") and "Troubleshooting Snowpipe" (STOPPED_STAGE_ALTERED: "The URL of the
stage that the pipe references changed"; STOPPED_STAGE_DROPPED: "dropped or replaced")."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from floe.catalog import Pipe, Stage
from floe.catalog.pipe_state import pipe_stopped
from floe.errors import SqlError
from pipeline.source import FileStreamReader, PipeRange
from services.dedup import Deduper, FileRef
from services.sql import SqlExecutor
from tests.services.test_sql_access import run

pytestmark = pytest.mark.integration


def status_of(ex: SqlExecutor, name: str = "p") -> dict[str, Any]:
    (row,) = run(ex, f"SELECT SYSTEM$PIPE_STATUS('{name}') AS s")
    return dict(json.loads(row["S"]))


def state(ex: SqlExecutor, name: str = "p") -> str:
    return str(status_of(ex, name)["executionState"])


def shown(ex: SqlExecutor, name: str = "p") -> str:
    (row,) = run(ex, f"SHOW PIPES LIKE '{name}'")
    return str(row["execution_state"])


def pipe(ex: SqlExecutor, name: str = "p") -> Pipe:
    return ex.catalog.get(Pipe, f"FLOE.PUBLIC.{name.upper()}")


def queued(ex: SqlExecutor, p: Pipe) -> list[str]:
    return [f[b"path"].decode() for _, f in ex.redis.xrange(ex.keys.queue(p.id))]


def planned(ex: SqlExecutor) -> set[str]:
    """The pipe ids the Spark source plans a micro-batch for now."""
    reader = FileStreamReader(
        {"redis_url": ex.settings.redis.url, "prefix": ex.keys.prefix, "max_files": "10"}
    )
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(10))
    return {cast(PipeRange, part).pipe_id for part in reader.partitions(start, end)}


EXTERNAL = "CREATE STAGE {name} URL = 's3://pipe-state/{path}/' STORAGE_INTEGRATION = floe_tests"


def world(ex: SqlExecutor, stage: str = EXTERNAL.format(name="st", path="in")) -> Pipe:
    run(ex, stage)
    run(ex, "CREATE TABLE t (a INT)")
    run(ex, "CREATE PIPE p AS COPY INTO t FROM @st")
    p = pipe(ex)
    assert state(ex) == shown(ex) == "RUNNING" and pipe_stopped(ex.catalog, p) is None
    return p


def test_a_dropped_stage_stops_the_pipe_until_it_is_recreated(ex: SqlExecutor) -> None:
    p = world(ex)
    Deduper(ex.redis, ex.keys, 3600).enqueue(p, [FileRef("a.csv", 1), FileRef("b.csv", 1)], source="rest")
    assert p.id in planned(ex)

    run(ex, "DROP STAGE st")
    got = status_of(ex)
    assert got["executionState"] == shown(ex) == "STOPPED_STAGE_DROPPED"
    assert "Stage 'FLOE.PUBLIC.ST' does not exist" in got["error"]
    # It loads nothing, and its files wait: the source plans nothing for it.
    assert got["pendingFileCount"] == 2 and got["oldestPendingFilePath"] == "a.csv"
    assert p.id not in planned(ex)
    with pytest.raises(SqlError, match=r"Pipe P is stopped \(STOPPED_STAGE_DROPPED\)") as info:
        run(ex, "ALTER PIPE p REFRESH")
    assert info.value.code == "091304"

    # A stage made again under the name is another stage: the pipe stays stopped.
    run(ex, EXTERNAL.format(name="st", path="in"))
    got = status_of(ex)
    assert got["executionState"] == "STOPPED_STAGE_DROPPED" and "now is another one" in got["error"]
    assert p.id not in planned(ex)

    # Recreating the pipe brings it back, with the files still queued on the same location.
    run(ex, "CREATE OR REPLACE PIPE p AS COPY INTO t FROM @st")
    new = pipe(ex)
    assert state(ex) == "RUNNING" and new.id != p.id
    assert sorted(queued(ex, new)) == ["a.csv", "b.csv"] and new.id in planned(ex)


def test_create_or_replace_stage_stops_its_pipes(ex: SqlExecutor) -> None:
    world(ex)
    run(ex, "CREATE OR REPLACE STAGE st URL = 's3://pipe-state/in/' STORAGE_INTEGRATION = floe_tests")
    assert state(ex) == "STOPPED_STAGE_DROPPED"


def test_a_dropped_or_replaced_table_stops_the_pipe(ex: SqlExecutor) -> None:
    p = world(ex)
    Deduper(ex.redis, ex.keys, 3600).enqueue(p, [FileRef("a.csv", 1)], source="rest")
    run(ex, "DROP TABLE t")
    got = status_of(ex)
    assert got["executionState"] == shown(ex) == "STOPPED_MISSING_TABLE"
    assert "Table 'FLOE.PUBLIC.T' does not exist" in got["error"] and got["pendingFileCount"] == 1
    assert p.id not in planned(ex)
    run(ex, "CREATE TABLE t (a INT)")  # a new table of the name: the pipe loaded the old one
    got = status_of(ex)
    assert got["executionState"] == "STOPPED_MISSING_TABLE" and "was replaced" in got["error"]
    run(ex, "CREATE OR REPLACE PIPE p AS COPY INTO t FROM @st")
    assert state(ex) == "RUNNING" and queued(ex, pipe(ex)) == ["a.csv"]


def test_a_table_stage_goes_with_its_table(ex: SqlExecutor) -> None:
    run(ex, "CREATE TABLE src (a INT)")
    run(ex, "CREATE TABLE t (a INT)")
    run(ex, "CREATE PIPE p AS COPY INTO t FROM @%src")
    assert state(ex) == "RUNNING"
    run(ex, "CREATE OR REPLACE TABLE src (a INT)")
    got = status_of(ex)
    assert got["executionState"] == "STOPPED_STAGE_DROPPED" and "@%SRC" in got["error"]


def test_an_internal_stage_replaced_stops_the_pipe(ex: SqlExecutor) -> None:
    world(ex, "CREATE STAGE st")
    run(ex, "CREATE OR REPLACE STAGE st")
    assert state(ex) == "STOPPED_STAGE_DROPPED"


def test_a_stage_whose_location_changed_stops_its_pipe_as_altered(ex: SqlExecutor) -> None:
    """The same stage (same incarnation) with another URL or storage integration: the way ALTER
    STAGE would change it, and the way a pipe made before stages had ids sees a stage made again."""
    p = world(ex)
    stage = ex.catalog.get(Stage, "FLOE.PUBLIC.ST")
    ex.catalog.put(stage.model_copy(update={"url": "s3://pipe-state/elsewhere/"}))
    got = status_of(ex)
    assert got["executionState"] == shown(ex) == "STOPPED_STAGE_ALTERED"
    assert "changed after pipe FLOE.PUBLIC.P was created" in got["error"]
    assert p.id not in planned(ex)
    ex.catalog.put(stage.model_copy(update={"storage_integration": "OTHER"}))
    assert state(ex) == "STOPPED_STAGE_ALTERED"
    ex.catalog.put(stage)
    assert state(ex) == "RUNNING"
    # A pipe from before stages had ids: only the URL tells.
    ex.catalog.put(p.model_copy(update={"stage_id": None}))
    ex.catalog.put(stage.model_copy(update={"id": None, "url": "s3://pipe-state/other/"}))
    assert state(ex) == "STOPPED_STAGE_ALTERED"


def test_a_paused_stopped_pipe_shows_why_it_is_stopped(ex: SqlExecutor) -> None:
    world(ex)
    run(ex, "ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE")
    assert state(ex) == "PAUSED"
    run(ex, "DROP STAGE st")
    assert state(ex) == shown(ex) == "STOPPED_STAGE_DROPPED"  # resuming would not make it load


def test_alter_stage_set_url_stops_the_pipes_on_it(ex: SqlExecutor) -> None:
    """ALTER STAGE changes the stage in place (same object: its grants and pipes stay bound to it);
    a new URL or integration stops its pipes as STOPPED_STAGE_ALTERED, a comment or file format
    does not (a pipe keeps the options it was created with, decision 79)."""
    p = world(ex)
    stage = ex.catalog.get(Stage, "FLOE.PUBLIC.ST")
    run(ex, "ALTER STAGE st SET COMMENT = 'raw' FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)")
    altered = ex.catalog.get(Stage, "FLOE.PUBLIC.ST")
    assert (altered.id, altered.comment, altered.file_format) == (
        stage.id,
        "raw",
        {"type": "CSV", "skip_header": 1},
    )
    assert state(ex) == "RUNNING"

    run(ex, "ALTER STAGE st SET URL = 's3://pipe-state/moved/'")
    got = status_of(ex)
    assert got["executionState"] == shown(ex) == "STOPPED_STAGE_ALTERED" and p.id not in planned(ex)
    assert ex.catalog.get(Stage, "FLOE.PUBLIC.ST").id == stage.id  # the same stage, altered
    run(ex, "CREATE OR REPLACE PIPE p AS COPY INTO t FROM @st")
    assert state(ex) == "RUNNING" and pipe(ex).stage_url == "s3://pipe-state/moved/"
    assert pipe(ex).copy_spec.file_format.skip_header == 1  # the new pipe reads the stage's format now


def test_alter_stage_checks_what_create_stage_checks(ex: SqlExecutor) -> None:
    run(ex, "CREATE STAGE inbox")
    with pytest.raises(SqlError, match="apply to external stages; stage 'INBOX' is an internal stage"):
        run(ex, "ALTER STAGE inbox SET URL = 's3://pipe-state/x/'")
    run(ex, EXTERNAL.format(name="st", path="in"))
    tables = ex.settings.pipeline.tables_bucket
    with pytest.raises(SqlError, match="Floe's tables bucket"):
        run(ex, f"ALTER STAGE st SET URL = 's3://{tables}/'")
    with pytest.raises(SqlError, match="does not exist or not authorized"):
        run(ex, "ALTER STAGE st SET STORAGE_INTEGRATION = nope")
    with pytest.raises(SqlError, match=r"File format 'FLOE[.]PUBLIC[.]GONE' does not exist"):
        run(ex, "ALTER STAGE st SET FILE_FORMAT = (FORMAT_NAME = 'gone')")
    assert ex.catalog.get(Stage, "FLOE.PUBLIC.ST").url == "s3://pipe-state/in/"  # refused: unchanged
    assert (
        run(ex, "ALTER STAGE IF EXISTS ghost SET COMMENT = 'x'")[0]["STATUS"]
        == "Statement executed successfully."
    )
    with pytest.raises(SqlError, match="does not exist or not authorized"):
        run(ex, "ALTER STAGE ghost SET COMMENT = 'x'")
