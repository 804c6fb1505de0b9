"""Reads one staged file as the job would, in a process of its own, and says how it ended.

``python -m tests.security.attacks.decode_probe FORMAT PATH MAX_PART_BYTES [MAX_FILE_BYTES]``:
without MAX_FILE_BYTES the file is read whole (``read_raw``, as a small file is); with it, a
Parquet file is read part by part (``parquet_parts``, as a large one or one that decodes past the
part bound is), holding one part at a time. Prints one JSON line: the exception's class and message
(or none), the rows read and the process's peak resident memory; the caller sees a crash in its
exit status.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.formats import open_parquet, read_raw
from pipeline.large_files import parquet_parts


def main() -> None:
    kind, path, max_part = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    max_file = int(sys.argv[4]) if len(sys.argv) > 4 else None
    data = path.read_bytes()
    fmt = FileFormat(type=kind)
    rows = 0
    error: dict[str, str] | None = None
    try:
        if max_file is None:
            rows = read_raw(data, fmt, path=path.name, max_bytes=max_part).num_rows
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


def _peak_rss() -> int:
    """This process's peak resident memory (bytes) since it started this program: VmHWM is reset by
    exec, where wait4's figure keeps the peak of the parent's image the child was forked from."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


if __name__ == "__main__":
    main()
