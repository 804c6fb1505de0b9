"""Reads one staged file as INFER_SCHEMA does in the API, in a process of its own, and says how it
ended.

``python -m tests.security.attacks.infer_probe FORMAT PATH``: the file's columns within the API's
bounds (``floe.file_schema.file_columns`` with the limits ``services.infer_schema`` sets from the
default settings), merged into INFER_SCHEMA's rows and made into the relation the query engine gets,
as ``SchemaInference.infer`` and ``inline`` do past S3. Prints one JSON line: the error's class and
message (or none), the columns found and the process's peak resident memory; the caller sees a
crash in its exit status.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from floe.catalog.models import FileFormat
from floe.file_schema import FileSchemaError, Readable, file_columns
from floe.inference import TEXT, VARIANT, merge
from floe.settings import Settings
from services.infer_schema import limits_of, relation
from tests.security.attacks.decode_probe import _peak_rss


class _File:
    """A staged file on disk, read as ``_StagedSource`` reads one from S3."""

    def __init__(self, path: Path) -> None:
        self.path = path.name
        self._file = path
        self.size = path.stat().st_size

    def stream(self) -> Readable:
        return io.BytesIO(self._file.read_bytes())

    def tail(self, n: int) -> bytes:
        with self._file.open("rb") as f:
            f.seek(max(0, self.size - n))
            return f.read()


def main() -> None:
    kind, path = sys.argv[1], Path(sys.argv[2])
    fmt = FileFormat.model_validate({"type": kind})
    error: dict[str, str] | None = None
    columns = 0
    try:
        found = file_columns(_File(path), fmt, limits_of(Settings(), None))
        columns = len(found.columns)
        rows = merge([found], fallback=TEXT if kind == "CSV" else VARIANT, positional=kind == "CSV")
        relation(rows, None).sql("duckdb")
    except (FileSchemaError, MemoryError, RecursionError) as exc:
        error = {"type": type(exc).__name__, "message": str(exc)}
    print(json.dumps({"error": error, "columns": columns, "peak": _peak_rss()}))


if __name__ == "__main__":
    main()
