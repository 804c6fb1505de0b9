"""One process of the limit baseline: read its share of the CSV files, cast, write one encrypted blob.

Started twice by ``bench.baselines.run_limit``. It imports no more than the work needs (pyarrow and
``floe.blobs``), so starting it costs little CPU next to processes that run beside it. Protocol
(one line each): stdin gets the job as JSON (paths, output path, master key id and key, target
schema, and ``s3``: pyarrow's S3 options when the paths are ``bucket/key`` objects on LocalStack,
where the blob is written too, as Floe writes its own), stdout answers ``ready``, stdin says ``go``
and stdout then gets the result as JSON. The key travels on stdin, never on the command line.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from pyarrow import fs as pafs

from floe.blobs import crypto_from_settings, write_blob


def run(job: dict[str, Any], schema: pa.Schema, crypto: Any, fs: pafs.FileSystem) -> dict[str, Any]:
    """Read, cast and write the job's files as one blob on ``fs``; the figures."""
    started = time.perf_counter()
    read = pacsv.ReadOptions(use_threads=False)
    # Every column arrives as text and is cast, as Floe's COPY transform does with $n::TYPE.
    convert = pacsv.ConvertOptions(column_types={name: pa.string() for name in schema.names})
    pieces = []
    for path in job["paths"]:
        with fs.open_input_stream(path) as stream:
            raw = pacsv.read_csv(stream, read_options=read, convert_options=convert)
        pieces.append(pa.table([pc.cast(raw[f.name], f.type) for f in schema], schema=schema))
    table = pa.concat_tables(pieces)
    out = job["out"]
    meta = write_blob(
        table,
        fs,
        out,
        crypto,
        name=Path(out).name,
        files=[Path(p).name for p in job["paths"]],
    )
    return {"rows": meta.rows, "bytes": meta.bytes, "seconds": time.perf_counter() - started}


def main() -> None:
    """Entry point of ``python -m bench.limit_worker``."""
    job = json.loads(sys.stdin.readline())
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(job["schema"])))
    crypto = crypto_from_settings(job["key_id"], base64.b64decode(job["key"]))
    fs = pafs.S3FileSystem(**job["s3"]) if job.get("s3") else pafs.LocalFileSystem()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    print(json.dumps(run(job, schema, crypto, fs)), flush=True)


if __name__ == "__main__":
    main()
