"""A large CSV file with PARSE_HEADER = TRUE, loaded by MATCH_BY_COLUMN_NAME as a stream of parts,
gives what it gives read whole (decision 82): every part knows the header's names (``record_chunks``
puts the header in front of each later part), and rows, METADATA$ columns, counts and the first
error are the whole file's. Built on tests/pipeline/test_loader.py's fake worker."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from floe.catalog.models import CopySpec, FileFormat, OnError, Pipe
from tests.pipeline.test_loader import WIDE, FakeWorker, messy_csv, put, streamed, whole

pytestmark = pytest.mark.unit


def headed_pipe(on_error: OnError = "CONTINUE") -> Pipe:
    spec = CopySpec(
        table=WIDE.name,
        stage="DB.PUBLIC.ST",
        file_format=FileFormat(
            parse_header=True, field_optionally_enclosed_by='"', error_on_column_count_mismatch=False
        ),
        match_by_column_name="CASE_INSENSITIVE",
        include_metadata={"ROW_NO": "METADATA$FILE_ROW_NUMBER", "FILE": "METADATA$FILENAME"},
        on_error=on_error,
    )
    return Pipe(name="DB.PUBLIC.HP", copy_spec=spec, table_id=WIDE.id, stage_url="s3://bucket/in/")


@pytest.mark.parametrize("compress", [False, True])
def test_a_streamed_file_with_a_header_loads_as_the_whole_file(tmp_path: Path, compress: bool) -> None:
    data = b"iD,Name\n" + messy_csv(3000, bad_every=250, blanks=True).split(b"\n", 1)[1]
    put(tmp_path, "big.csv", gzip.compress(data) if compress else data)
    pipe = headed_pipe()
    expected_rows, expected = whole(tmp_path, pipe, "big.csv")
    rows, record, blobs = streamed(
        FakeWorker(tmp_path, stream_file_bytes=1000, chunk_bytes=4000), pipe, "big.csv"
    )
    assert len(blobs) > 5, "the file should have been read in several parts"
    assert rows == expected_rows
    assert record == expected
    assert record.status == "PARTIALLY_LOADED" and record.errors_seen > 0
    assert rows[0] == {"ID": 1, "NAME": "a, b", "ROW_NO": 1, "FILE": "big.csv"}
    assert [r["ROW_NO"] for r in rows] == sorted(r["ROW_NO"] for r in rows)
