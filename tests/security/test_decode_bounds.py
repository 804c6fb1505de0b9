"""Issue 31, items 3 and 4: a file whose own encoding decodes to far more than it stores fails alone,
and reading it costs the process at most ``pipeline.max_part_bytes`` plus a constant.

Each crafted file (``tests.security.attacks.bombs``) is read in a process of its own
(``tests.security.attacks.decode_probe``), which reports its peak resident memory (VmHWM); a
baseline process reads a small file of the same format the same way, so the difference is what the
bomb cost. The loader tests then put a bomb and another pipe's good file in one micro-batch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

from floe.catalog.models import CopySpec, FileFormat, Pipe
from pipeline import loader
from pipeline.loader import BatchContext, process_partition
from tests.pipeline.test_loader import TABLE, FakeWorker, put
from tests.security.attacks import bombs
from tests.security.attacks.bombs import MiB

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

LIMIT = 64 * MiB
"""``pipeline.max_part_bytes`` of the probes."""
SLACK = 64 * MiB
"""What a read may cost above the bound: one batch being decoded past it, the decoder's own buffers
(a compressed column chunk, a page, a dictionary) and the allocator's rounding (decision 110)."""


@dataclass(frozen=True)
class Probe:
    error: dict[str, str] | None
    rows: int
    peak: int
    """Peak resident memory of the process, bytes."""
    status: int
    """The exit code: 0 for a clean exit; minus a signal's number for a crash."""


def probe(tmp_path: Path, name: str, data: bytes, kind: str, max_file: int | None = None) -> Probe:
    path = tmp_path / name
    path.write_bytes(data)
    args = [sys.executable, "-m", "tests.security.attacks.decode_probe", kind, str(path), str(LIMIT)]
    if max_file is not None:
        args.append(str(max_file))
    log = tmp_path / f"{name}.stderr"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr)
        assert proc.stdout is not None
        with proc.stdout:
            out = proc.stdout.read()
        status = proc.wait()
    result: dict[str, Any] = (
        json.loads(out) if status == 0 and out.strip() else {"error": None, "rows": -1, "peak": 0}
    )
    if status != 0:
        print(log.read_text(errors="replace")[-2000:])
    return Probe(result["error"], result["rows"], result["peak"], status)


def small_parquet() -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"s": ["a", "b"], "l": [[1], [2]]}), sink)
    return bytes(sink.getvalue())


def small_orc() -> bytes:
    sink = pa.BufferOutputStream()
    orc.write_table(pa.table({"s": ["a", "b"], "l": [[1], [2]]}), sink)
    return bytes(sink.getvalue())


def small_avro() -> bytes:
    return bombs.avro_small_values(10)


SMALL: dict[str, Callable[[], bytes]] = {
    "PARQUET": small_parquet,
    "ORC": small_orc,
    "AVRO": small_avro,
    "JSON": lambda: b'{"a": [1, 2]}\n',
    "CSV": lambda: b"a,b\n1,2\n",
}

_baselines: dict[tuple[str, bool], int] = {}


def baseline(tmp_path: Path, kind: str, streamed: bool) -> int:
    """Peak memory of a process that reads a small file of ``kind`` the same way."""
    key = (kind, streamed)
    if key not in _baselines:
        small = probe(tmp_path, f"small.{kind.lower()}", SMALL[kind](), kind, 4 * LIMIT if streamed else None)
        assert small.status == 0 and small.error is None and small.rows > 0, small
        _baselines[key] = small.peak
    return _baselines[key]


@dataclass(frozen=True)
class Bomb:
    name: str
    kind: str
    build: Callable[[], bytes]
    refusal: str
    """What the file's failure says (a setting's name, or why such a file is not read)."""
    stored_below: int = 4 * MiB


BOMBS = [
    # The file: 600k rows of one 1,000-character string, 600 MB decoded.
    Bomb(
        "parquet-dictionary",
        "PARQUET",
        lambda: bombs.parquet_dictionary(600_000, 1000),
        "pipeline.max_part_bytes",
    ),
    # Many columns of NULLs: runs of one definition level, 8 bytes a value decoded (800 MB).
    Bomb(
        "parquet-many-null-columns",
        "PARQUET",
        lambda: bombs.parquet_null_columns(200_000, 500),
        "pipeline.max_part_bytes",
    ),
    # Deep nesting's cheapest form: one row whose list holds 100M NULL elements (800 MB).
    Bomb(
        "parquet-nested-nulls",
        "PARQUET",
        lambda: bombs.parquet_nested_nulls(100_000_000),
        "pipeline.max_part_bytes",
    ),
    # A 192 MiB page whose footer says 1,000 bytes.
    Bomb(
        "parquet-understated-page",
        "PARQUET",
        lambda: bombs.parquet_understated(192 * MiB),
        "pipeline.max_part_bytes",
    ),
    Bomb("orc-dictionary", "ORC", lambda: bombs.orc_dictionary(600_000, 1000), "pipeline.max_part_bytes"),
    Bomb(
        "orc-many-null-columns",
        "ORC",
        lambda: bombs.orc_null_columns(200_000, 500),
        "pipeline.max_part_bytes",
    ),
    Bomb("orc-nested-nulls", "ORC", lambda: bombs.orc_nested_nulls(100_000_000), "pipeline.max_part_bytes"),
    Bomb("orc-one-large-value", "ORC", lambda: bombs.orc_one_value(192 * MiB), "pipeline.max_part_bytes"),
    # A linked list a million levels deep: one byte a level.
    Bomb("avro-deep-recursion", "AVRO", lambda: bombs.avro_recursive(1_000_000), "nested more than"),
    # An array that says it holds 100M NULLs, in a few bytes.
    Bomb("avro-array-of-nulls", "AVRO", lambda: bombs.avro_null_array(100_000_000), "takes no bytes"),
    # A block of 10M records of zero bytes each.
    Bomb(
        "avro-empty-records", "AVRO", lambda: bombs.avro_empty_records(10_000_000), "pipeline.max_part_bytes"
    ),
    # 48M one-byte integers in one record: each a Python object before it is an Arrow value.
    Bomb("avro-small-values", "AVRO", lambda: bombs.avro_small_values(48_000_000), "pipeline.max_part_bytes"),
    # Text has no dictionary, but every record costs its numbers and its fields' offsets: 48 MiB of
    # four-byte CSV rows is 12.6M rows, about 900 MB parsed; 24 MiB of two-byte JSON documents
    # 12.6M documents, each a string and two numbers.
    Bomb(
        "csv-short-rows",
        "CSV",
        lambda: bombs.gzip_bomb(48 * MiB, b"1,2\n", header=b"a,b\n"),
        "pipeline.max_part_bytes",
    ),
    Bomb(
        "json-small-documents", "JSON", lambda: bombs.gzip_bomb(24 * MiB, b"1\n"), "pipeline.max_part_bytes"
    ),
    Bomb(
        "json-documents-on-one-line",
        "JSON",
        lambda: bombs.gzip_bomb(24 * MiB, b"1 "),
        "pipeline.max_part_bytes",
    ),
]


@pytest.mark.parametrize("bomb", BOMBS, ids=[b.name for b in BOMBS])
def test_a_decode_bomb_read_whole_fails_within_the_bound(tmp_path: Path, bomb: Bomb) -> None:
    data = bomb.build()
    assert len(data) < bomb.stored_below, f"{bomb.name} should be small as stored ({len(data):,} bytes)"
    base = baseline(tmp_path, bomb.kind, False)
    got = probe(tmp_path, bomb.name, data, bomb.kind)
    growth = got.peak - base
    print(f"{bomb.name}: {len(data):,} bytes stored, peak RSS +{growth / MiB:.0f} MiB over the baseline")
    assert got.status == 0, f"the reading process died (wait status {got.status})"
    assert got.error is not None, f"read {got.rows:,} rows whole, past a {LIMIT // MiB} MiB bound"
    assert bomb.refusal in got.error["message"], got.error
    assert growth <= LIMIT + SLACK, f"peak RSS grew by {growth / MiB:.0f} MiB for a {LIMIT // MiB} MiB bound"


STREAMED = [b for b in BOMBS if b.kind == "PARQUET"]


@pytest.mark.parametrize("bomb", STREAMED, ids=[b.name for b in STREAMED])
def test_a_parquet_decode_bomb_read_in_parts_stays_within_the_bound(tmp_path: Path, bomb: Bomb) -> None:
    """A Parquet file that decodes past the part bound is handed to the streaming path, which reads
    it a part at a time: parts of bounded decoded size, a single row past the part bound failing the
    file, and the file's decoded total bounded by ``pipeline.max_file_bytes``."""
    data = bomb.build()
    base = baseline(tmp_path, bomb.kind, True)
    got = probe(tmp_path, bomb.name, data, bomb.kind, max_file=4 * LIMIT)
    growth = got.peak - base
    print(f"{bomb.name} in parts: peak RSS +{growth / MiB:.0f} MiB over the baseline, {got.rows:,} rows")
    assert got.status == 0, f"the reading process died (wait status {got.status})"
    assert got.error is not None, f"read {got.rows:,} rows, past a {4 * LIMIT // MiB} MiB file bound"
    assert (
        "pipeline.max_file_bytes" in got.error["message"] or "pipeline.max_part_bytes" in got.error["message"]
    )
    assert growth <= LIMIT + SLACK, f"peak RSS grew by {growth / MiB:.0f} MiB for a {LIMIT // MiB} MiB bound"


TEXT = [b for b in BOMBS if b.kind in ("CSV", "JSON") and b.name != "json-documents-on-one-line"]


@pytest.mark.parametrize("bomb", TEXT, ids=[b.name for b in TEXT])
def test_dense_text_read_in_parts_loads_within_the_bound(tmp_path: Path, bomb: Bomb) -> None:
    """Streamed, such a file's parts are cut by what their records cost, not by their bytes alone:
    all of it loads, and the process holds about a part."""
    data = bomb.build()
    base = baseline(tmp_path, bomb.kind, True)
    got = probe(tmp_path, bomb.name, data, bomb.kind, max_file=4 * LIMIT)
    growth = got.peak - base
    print(f"{bomb.name} in parts: peak RSS +{growth / MiB:.0f} MiB over the baseline, {got.rows:,} rows")
    assert got.status == 0 and got.error is None, got
    assert got.rows > 12_000_000
    assert growth <= LIMIT + SLACK, f"peak RSS grew by {growth / MiB:.0f} MiB for a {LIMIT // MiB} MiB bound"


def test_deeply_nested_json_is_an_error_of_its_row_within_the_bound(tmp_path: Path) -> None:
    """JSON decodes to its own text: nothing amplifies, and nesting past Python's recursion limit is
    an error of the document, not of the process."""
    deep = b"[" * 200_000 + b"]" * 200_000
    data = deep + b"\n" + b'{"a": 1}\n'
    base = baseline(tmp_path, "JSON", False)
    got = probe(tmp_path, "deep.json", data, "JSON")
    assert got.status == 0 and got.error is None and got.rows == 1, got
    assert got.peak - base <= LIMIT + SLACK


# ---------------------------------------------------------------------------------------------
# Through the loader: the bomb fails alone, in load history, and another pipe's file loads

BOUND = 8 * MiB


def _pipe(name: str, fmt: FileFormat, select: list[str]) -> Pipe:
    spec = CopySpec(
        table=TABLE.name, stage="DB.PUBLIC.ST", select=select, file_format=fmt, on_error="CONTINUE"
    )
    return Pipe(name=name, copy_spec=spec, table_id=TABLE.id, stage_url="s3://bucket/in/")


def one_batch(
    monkeypatch: pytest.MonkeyPatch, worker: FakeWorker, files: list[tuple[Pipe, str, bytes]]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """One micro-batch's Spark task over files of several pipes: each file's record, and the blobs."""
    for _, name, data in files:
        put(worker.root, name, data)
    monkeypatch.setattr(loader, "_WORKER", worker)
    pipes = {p.id: p for p, _, _ in files}
    ctx = BatchContext(
        "",
        b"",
        "query",
        7,
        {i: p.model_dump_json() for i, p in pipes.items()},
        {i: TABLE.model_dump_json() for i in pipes},
    )
    rows = [
        {"pipe_id": p.id, "path": n, "size": len(d), "received_ms": 0, "stream_id": f"{i}-0", "part": 0}
        for i, (p, n, d) in enumerate(files)
    ]
    records: dict[str, dict[str, Any]] = {}
    blobs: list[dict[str, Any]] = []
    for batch in process_partition(ctx, iter([pa.RecordBatch.from_pylist(rows)])):
        for out in batch.to_pylist():
            payload = json.loads(out["payload"])
            if out["kind"] == "file":
                records[payload["path"]] = payload
            else:
                blobs.append(payload)
    return records, blobs


GOOD = _pipe("DB.PUBLIC.GOOD", FileFormat(type="CSV"), ["$1", "$2"])

LOADER_BOMBS = [
    ("dict.parquet", "PARQUET", lambda: bombs.parquet_dictionary(200_000, 1000), "pipeline.max_file_bytes"),
    ("dict.orc", "ORC", lambda: bombs.orc_dictionary(200_000, 1000), "pipeline.max_part_bytes"),
    ("empty.avro", "AVRO", lambda: bombs.avro_empty_records(10_000_000), "pipeline.max_part_bytes"),
]


@pytest.mark.parametrize(("name", "kind", "build", "setting"), LOADER_BOMBS, ids=[b[0] for b in LOADER_BOMBS])
def test_a_decode_bomb_fails_alone_and_another_pipes_file_loads(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    kind: str,
    build: Callable[[], bytes],
    setting: str,
) -> None:
    """200 MB decoded from a few KB: with an 8 MiB part bound (and, for Parquet, which is then read
    in parts, a 32 MiB file bound) the file fails with a message naming the setting, in its own load
    history record; the other pipe's file in the same task loads."""
    worker = FakeWorker(tmp_path, max_part_bytes=BOUND, max_file_bytes=4 * BOUND, chunk_bytes=BOUND // 4)
    bomb_pipe = _pipe(
        "DB.PUBLIC.BOMB",
        FileFormat.model_validate({"type": kind}),
        ["METADATA$FILE_ROW_NUMBER", "$1:n" if kind == "AVRO" else "$1:s"],
    )
    data = build()
    records, blobs = one_batch(
        monkeypatch, worker, [(bomb_pipe, name, data), (GOOD, "good.csv", b"1,a\n2,b\n")]
    )
    record = records[name]
    assert (record["status"], record["rows_loaded"]) == ("LOAD_FAILED", 0)
    assert setting in record["first_error"], record["first_error"]
    assert record["size"] == len(data)
    assert (records["good.csv"]["status"], records["good.csv"]["rows_loaded"]) == ("LOADED", 2)
    assert [b["files"] for b in blobs] == [["good.csv"]]
