"""Issue 16's acceptance table (``tests/e2e/acceptance``), run through real pipes.

All the cases load at once, so the table costs one wait, not one per case: every case gets its own
bucket, stage, table and auto-ingest pipe; then every file is put; then each test
checks one case's rows and COPY_HISTORY. A case whose files never reach a final history row fails
with the names of what is still missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import Stack, unique, wait_until
from tests.e2e.acceptance import Case, all_cases

# The shared setup creates every case's objects and waits for all their files (its own bound is
# `wait_until`'s, 60 s plus 3 s a case); pytest's 600 s per test would cut it first on a loaded machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

CASES = all_cases()
FINAL = {"Loaded", "Load failed", "Partially loaded", "Load skipped"}


@dataclass
class Loaded:
    """One case's objects after the load."""

    names: dict[str, str]
    history: dict[str, dict[str, Any]]


def _names(case: Case, bucket: str) -> dict[str, str]:
    return {
        "stage": unique("st_"),
        "table": unique("t_"),
        "pipe": unique("p_"),
        "name": unique("x_"),
        "bucket": bucket,
        "prefix": f"{case.id}/",
    }


# str.format would trip over JSON braces in a case's SQL; only the known names are filled.
_PLACEHOLDER = re.compile(r"\{(stage|table|pipe|name|bucket|prefix|TABLE)\}")


def _fill(text: str, names: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: _value(m.group(1), names), text)


def _value(key: str, names: dict[str, str]) -> str:
    return names["table"].upper() if key == "TABLE" else names[key]


def _final(stack: Stack, names: dict[str, str], files: list[str]) -> dict[str, dict[str, Any]] | None:
    rows = stack.sql(
        "SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => '"
        + names["table"]
        + "', START_TIME => DATEADD(HOURS, -1, CURRENT_TIMESTAMP())))"
    )
    final = {r["FILE_NAME"]: r for r in rows if r["STATUS"] in FINAL}
    return final if set(files) <= set(final) else None


@pytest.fixture(scope="module")
def loaded(stack: Stack, s3: Any) -> Iterator[dict[str, Loaded]]:
    # A bucket a case: S3 keeps one notification entry per pipe prefix in a bucket, and LocalStack's
    # PutBucketNotificationConfiguration checks every entry, so with all the cases in one bucket each
    # CREATE PIPE cost more than the last (2 s at the 80th case, 2 of the table's 3 minutes).
    names = {case.id: _names(case, unique("accept")) for case in CASES}
    for case in CASES:
        n = names[case.id]
        bucket = n["bucket"]
        s3.create_bucket(Bucket=bucket)
        for statement in case.setup:
            stack.sql(_fill(statement, n))
        stack.sql(
            f"CREATE STAGE {n['stage']} URL = 's3://{bucket}/{case.id}/' STORAGE_INTEGRATION = floe_tests "
            + _fill(case.stage_options, n)
        )
        stack.sql(f"CREATE TABLE {n['table']} ({case.columns}) {_fill(case.table_options, n)}")
        stack.sql(
            f"CREATE PIPE {n['pipe']} AUTO_INGEST = TRUE AS COPY INTO {n['table']} " + _fill(case.copy, n)
        )
    for case in CASES:
        for name, body in case.files.items():
            s3.put_object(Bucket=names[case.id]["bucket"], Key=f"{case.id}/{name}", Body=body)
    out: dict[str, Loaded] = {}

    def all_final() -> bool:
        for case in CASES:
            if case.id not in out:
                history = _final(stack, names[case.id], list(case.files))
                if history is not None:
                    out[case.id] = Loaded(names[case.id], history)
        return len(out) == len(CASES)

    wait_until(
        all_final,
        timeout=60.0 + 3.0 * len(CASES),
        what=lambda: "final history rows of " + ", ".join(c.id for c in CASES if c.id not in out),
    )
    yield out


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case, loaded: dict[str, Loaded], stack: Stack) -> None:
    got = loaded[case.id]
    rows = stack.sql(_fill(case.query, got.names))
    assert [tuple(r.values()) for r in rows] == case.rows, case.source
    for file, expected in case.history.items():
        want = {k: _fill(v, got.names) if isinstance(v, str) else v for k, v in expected.items()}
        actual = {k: got.history[file].get(k) for k in want}
        assert actual == want, f"{file}: {case.source}"
