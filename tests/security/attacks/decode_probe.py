"""Reads one staged file as the job would, in a process of its own, and says how it ended.

``python -m tests.security.attacks.decode_probe FORMAT PATH MAX_PART_BYTES [MAX_FILE_BYTES]``:
without MAX_FILE_BYTES the file is read whole (``read_raw``, as a small file is); with it, a
Parquet, CSV or JSON file is read part by part (``parquet_parts``, ``record_chunks``,
``json_parts``, as a large one or one that decodes past the part bound is), holding one part at a
time. Prints one JSON line: the exception's class and message
(or none), the rows read and the process's peak resident memory; the caller sees a crash in its
exit status.
"""

from __future__ import annotations

import inspect
import io
import json
import sys
from pathlib import Path

import pyarrow as pa

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import decompressed, record_chunks
from pipeline.formats import open_parquet, read_csv_part, read_raw
from pipeline.large_files import json_parts, parquet_parts, read_json_part


def main() -> None:
    kind, path, max_part = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    max_file = int(sys.argv[4]) if len(sys.argv) > 4 else None
    data = path.read_bytes()
    fmt = FileFormat.model_validate({"type": kind})
    rows = 0
    error: dict[str, str] | None = None
    try:
        if max_file is None:
            rows = read_raw(data, fmt, path=path.name, max_bytes=max_part).num_rows
        elif kind in ("CSV", "JSON"):
            rows = _text_parts(data, fmt, path.name, max_part, max_file)
        else:
            source = pa.BufferReader(data)
            parquet = open_parquet(source, path.name)
            parts = parquet_parts(
                parquet,
                fmt,
                path.name,
                chunk_bytes=max_part // 4,
                max_part_bytes=max_part,
                max_file_bytes=max_file,
                source=source,
            )
            for part in parts:
                rows += part.num_rows
                del part
    except (FileLoadError, MemoryError, RecursionError) as exc:
        message = exc.message if isinstance(exc, FileLoadError) else str(exc)
        error = {"type": type(exc).__name__, "message": message}
    print(json.dumps({"error": error, "rows": rows, "peak": _peak_rss()}))


def _text_parts(data: bytes, fmt: FileFormat, name: str, max_part: int, max_file: int) -> int:
    """A CSV or JSON file read as the loader streams it (``loader._file_parts``): its rows."""
    body = decompressed(io.BytesIO(data), fmt.compression, name, max_bytes=max_file)
    rows = 0
    if fmt.type == "CSV":
        width: int | None = None
        chunks = record_chunks(body, max_part // 4, fmt, max_part_bytes=max_part, path=name)
        for n, chunk in enumerate(chunks):
            raw = read_csv_part(chunk, fmt, name, first=n == 0, width=width)
            width = width or raw.width
            rows += raw.num_rows
        return rows
    bounded = "max_bytes" in inspect.signature(read_json_part).parameters
    extra = {"max_bytes": max_part} if bounded else {}
    for n, part in enumerate(json_parts(body, max_part // 4, fmt, max_part_bytes=max_part, path=name)):
        rows += read_json_part(part, fmt, name, first=n == 0, **extra).num_rows
    return rows


def _peak_rss() -> int:
    """This process's peak resident memory (bytes) since it started this program: VmHWM is reset by
    exec, where wait4's figure keeps the peak of the parent's image the child was forked from."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


if __name__ == "__main__":
    main()
