"""Issue 9, item 4: a pipe's COPY transform cannot run SQL of its own text on the workers.

The issue's pipe loaded the master key into a table: a placeholder name in one string literal made
the compiler turn the text of another literal into live SQL. Through the real API, consumer and
Spark job, the same pipe must load its literals' text, and never the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from front.client import records
from tests.conftest import Stack, unique, wait_until
from tests.security.attacks import copy_transform as attack
from tests.security.attacks.caller import SqlCaller

pytestmark = pytest.mark.e2e


def _rows(caller: SqlCaller, statement: str) -> list[dict[str, Any]]:
    return records(caller.run_all(statement)[0])


def test_the_issues_pipe_loads_its_text_not_the_master_key(
    stack: Stack, admin: SqlCaller, bucket: str, s3: Any
) -> None:
    key_path = stack.settings.encryption.master_key_file
    master_key = Path(key_path).read_text().strip()
    assert master_key
    stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
    item = attack.issue_item(attack.read_file_sql(key_path))
    for statement in (
        f"CREATE STAGE {stage} URL = 's3://{bucket}/in/'"
        " STORAGE_INTEGRATION = floe_tests FILE_FORMAT = (TYPE = CSV)",
        f"CREATE TABLE {table} (v VARCHAR, file VARCHAR)",
        f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} "
        f"FROM (SELECT {item}, METADATA$FILENAME FROM @{stage}) FILE_FORMAT = (TYPE = CSV)",
    ):
        _rows(admin, statement)

    s3.put_object(Bucket=bucket, Key="in/trigger.csv", Body=b"a\n")

    def finished() -> list[dict[str, Any]] | None:
        rows = _rows(
            admin,
            f"SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => '{table}', "
            "START_TIME => DATEADD(hours, -1, CURRENT_TIMESTAMP())))",
        )
        return [r for r in rows if r["STATUS"] != "Load in progress"] or None

    history = wait_until(finished, what="the file's load to finish")
    assert [(h["FILE_NAME"], h["STATUS"]) for h in history] == [("trigger.csv", "Loaded")], history

    loaded = _rows(admin, f"SELECT v, file FROM {table}")
    assert loaded == [{"V": attack.issue_item_value(attack.read_file_sql(key_path)), "FILE": "trigger.csv"}]
    assert master_key not in str(loaded)
