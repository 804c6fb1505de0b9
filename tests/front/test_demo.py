"""`floe demo` (front/demo.py): its sample files, and the whole demo on a test stack."""

from __future__ import annotations

import csv
import io

import pytest

from front import demo
from tests.conftest import Stack, unique


@pytest.mark.unit
def test_sample_files_carry_one_bad_fare_in_file_two() -> None:
    for index in (1, 2, 3):
        rows = list(csv.DictReader(io.StringIO(demo.sample_file(index).decode())))
        assert len(rows) == 5
        bad = [r for r in rows if r["fare"] == "n/a"]
        assert len(bad) == (1 if index == 2 else 0)


@pytest.mark.e2e
def test_the_demo_loads_its_files_and_exits_zero(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    # A bucket of its own: the demo's fixed bucket may belong to a `make run` on this machine.
    bucket = unique("demo")
    monkeypatch.setattr(demo, "BUCKET", bucket)
    assert demo.run_demo(stack.settings, follow=False, timeout=180.0) == 0
    # Three files of five rows; ON_ERROR = CONTINUE drops the one bad fare of file 2. Then the
    # streamed rows, through the table's default pipe, committed with their offset token.
    files = stack.sql("SELECT COUNT(*) AS n FROM trips WHERE source_file <> 'demo-channel'")[0]["N"]
    streamed = stack.sql(
        "SELECT COUNT(*) AS n, MIN(source_row) AS lo FROM trips WHERE source_file = 'demo-channel'"
    )
    assert (files, streamed) == (14, [{"N": demo.STREAM_ROWS, "LO": 0}])
    channels = stack.sql("SHOW CHANNELS IN TABLE trips")
    assert [(c["name"], c["offset_token"]) for c in channels] == [("demo-channel", str(demo.STREAM_ROWS - 1))]
    # The pipe's transform called the example service's to_usd (EUR at 1.08) on every file row.
    converted = stack.sql(
        "SELECT COUNT(*) AS n FROM trips "
        "WHERE source_file <> 'demo-channel' AND fare_usd = ROUND(fare * 1.08, 2)"
    )
    assert converted == [{"N": 14}]
