"""PUT and GET, run on the client as SnowSQL runs them: the local files are read and written here,
and their bytes go through the API's transfer routes (``front.client``), so no S3 credentials are
needed. The API seals what it stores and opens what it sends (``services.stages``).

PUT finds the files its ``file://`` path names (``*`` and ``?`` in the file name, never in a
directory, as Snowflake's), gzips the uncompressed ones when AUTO_COMPRESS (the default, adding
``.gz``), skips a file whose target name is already on the stage unless OVERWRITE, and answers
SnowSQL's columns. GET downloads every file of a location (and PATTERN) into one directory, by its
file name: like Snowflake's, it refuses two files of one name from different folders.
"""

from __future__ import annotations

import os
import re
import tempfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from floe.catalog.stage_commands import GetFiles, PutFiles
from floe.errors import FloeError
from floe.patterns import compile_pattern
from floe.settings import Settings
from front.client import StatementRejected, download_file, list_stage, upload_file

PUT_COLUMNS = [
    "source",
    "target",
    "source_size",
    "target_size",
    "source_compression",
    "target_compression",
    "status",
    "message",
]
"""PUT's result columns, as SnowSQL prints them."""
GET_COLUMNS = ["file", "size", "status", "message"]
"""GET's result columns, as SnowSQL prints them."""
READ_BYTES = 1 << 20
"""Bytes read from a local file at a time."""

_EXTENSIONS = {
    ".gz": "GZIP",
    ".gzip": "GZIP",
    ".bz2": "BZ2",
    ".zst": "ZSTD",
    ".br": "BROTLI",
    ".deflate": "DEFLATE",
    ".raw_deflate": "RAW_DEFLATE",
}
_MAGIC = (
    (b"\x1f\x8b", "GZIP"),
    (b"BZh", "BZ2"),
    (b"\x28\xb5\x2f\xfd", "ZSTD"),
    (b"PAR1", "PARQUET"),
    (b"ORC", "ORC"),
)


class Meter(Protocol):
    """Where a transfer reports its progress (the CLI's progress bar)."""

    def start(self, name: str, total: int) -> None:
        """A file of ``total`` bytes starts."""

    def advance(self, name: str, n: int) -> None:
        """``n`` more bytes of it moved."""

    def done(self, name: str) -> None:
        """It is over (moved, skipped or failed)."""


class Silent:
    """A Meter that shows nothing."""

    def start(self, name: str, total: int) -> None:
        """Nothing."""

    def advance(self, name: str, n: int) -> None:
        """Nothing."""

    def done(self, name: str) -> None:
        """Nothing."""


@dataclass
class Caller:
    """Who runs the transfer, and how to reach the API."""

    settings: Settings
    user: str | None = None
    key_file: str | None = None
    role: str | None = None

    def auth(self) -> dict[str, Any]:
        """The keyword arguments ``front.client``'s functions take for the caller."""
        return {"user": self.user, "key_file": self.key_file, "role": self.role}


@dataclass
class Outcome:
    """A transfer's rows, and whether any file failed."""

    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """Whether a row says ERROR."""
        status = self.columns.index("status")
        return any(row[status] == "ERROR" for row in self.rows)


def glob_pattern(name: str) -> str:
    """A file-name glob (``*``, ``?``) as an RE2 pattern, everything else literal."""
    out = []
    for c in name:
        out.append("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c))
    return "".join(out)


def local_files(source: str) -> list[Path]:
    """The files a PUT's ``file://`` path names, sorted: one file, or a glob in the file name. A
    relative path is taken from the working directory."""
    path = Path(os.path.expanduser(source))
    if not path.is_absolute():
        path = Path.cwd() / path
    if any(c in str(path.parent) for c in "*?"):
        raise StatementRejected(
            f"PUT does not support wildcards in directories ('{path.parent}'): files are staged without "
            "their folders, so name the files of one directory"
        )
    if "*" in path.name or "?" in path.name:
        matches = compile_pattern(glob_pattern(path.name))  # RE2: linear whatever the glob
        try:
            found = sorted(p for p in path.parent.iterdir() if p.is_file() and matches(p.name))
        except OSError as exc:
            raise StatementRejected(f"cannot read the directory '{path.parent}': {exc.strerror}") from None
    else:
        found = [path] if path.is_file() else []
    if not found:
        raise StatementRejected(f"File doesn't exist: ['{path}']")
    return found


def source_compression(path: Path, declared: str) -> str:
    """A local file's compression: SOURCE_COMPRESSION when declared, else by extension, else by its
    first bytes (gzip, bzip2, zstd; Parquet and ORC files are compressed inside)."""
    if declared != "AUTO_DETECT":
        return declared
    by_name = _EXTENSIONS.get(path.suffix.lower())
    if by_name is not None:
        return by_name
    with path.open("rb") as f:
        head = f.read(4)
    return next((kind for magic, kind in _MAGIC if head.startswith(magic)), "NONE")


def _pieces(path: Path, gzip: bool, moved: Callable[[int], None], sizes: list[int]) -> Iterator[bytes]:
    """A file's bytes as they are read, gzipped on the way when ``gzip``; ``moved`` counts the
    bytes read, ``sizes`` gets the bytes sent."""
    packer = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 31) if gzip else None
    sent = 0
    with path.open("rb") as f:
        while piece := f.read(READ_BYTES):
            moved(len(piece))
            out = packer.compress(piece) if packer is not None else piece
            if out:
                sent += len(out)
                yield out
    if packer is not None:
        tail = packer.flush()
        sent += len(tail)
        yield tail
    sizes.append(sent)


def _folder(path: str) -> str:
    return path if not path or path.endswith("/") else path + "/"


def put(statement: PutFiles, caller: Caller, meter: Meter | None = None) -> Outcome:
    """Run a PUT: upload the files, ``statement.parallel`` at a time; one row per file."""
    meter = meter or Silent()
    files = local_files(statement.source)
    location = str(statement.location)
    existing: dict[str, int] = {}
    if not statement.overwrite:
        # As Snowflake does, a LIST first: a file already there is skipped without sending it.
        folder = _folder(statement.location.path)
        listed = list_stage(caller.settings, str(replace(statement.location, path=folder)), **caller.auth())
        existing = {str(f["path"]): int(f["size"]) for f in listed}

    def one(path: Path) -> list[Any]:
        size = path.stat().st_size
        try:
            kind = source_compression(path, statement.source_compression)
        except OSError as exc:
            return [path.name, path.name, size, 0, "NONE", "NONE", "ERROR", str(exc.strerror)]
        gzip = statement.auto_compress and kind == "NONE"
        target = path.name + ".gz" if gzip else path.name
        target_kind = "GZIP" if gzip else kind
        row = [path.name, target, size, 0, kind, target_kind]
        stored = _folder(statement.location.path) + target
        if stored in existing:
            return [*row[:3], existing[stored], *row[4:], "SKIPPED", ""]
        meter.start(path.name, size)
        sizes: list[int] = []
        try:
            answer = upload_file(
                caller.settings,
                location,
                target,
                _pieces(path, gzip, lambda n: meter.advance(path.name, n), sizes),
                overwrite=statement.overwrite,
                **caller.auth(),
            )
        except (FloeError, OSError) as exc:
            return [*row, "ERROR", getattr(exc, "message", str(exc))]
        finally:
            meter.done(path.name)
        if answer["status"] == "SKIPPED":  # put there since the LIST
            return [*row, "SKIPPED", ""]
        return [*row[:3], int(answer.get("size") or (sizes[0] if sizes else 0)), *row[4:], "UPLOADED", ""]

    with ThreadPoolExecutor(max(1, min(statement.parallel, len(files)))) as pool:
        rows = list(pool.map(one, files))
    return Outcome(list(PUT_COLUMNS), rows)


def get(statement: GetFiles, caller: Caller, meter: Meter | None = None) -> Outcome:
    """Run a GET: download the files into the directory, ``statement.parallel`` at a time."""
    meter = meter or Silent()
    location = str(statement.location)
    listed = list_stage(caller.settings, location, statement.pattern, **caller.auth())
    by_name: dict[str, list[str]] = {}
    for f in listed:
        by_name.setdefault(str(f["path"]).rsplit("/", 1)[-1], []).append(str(f["path"]))
    clashes = sorted(name for name, paths in by_name.items() if len(paths) > 1)
    if clashes:
        raise StatementRejected(
            f"GET cannot download files of one name from different paths ({', '.join(clashes[:5])}): "
            "files are downloaded without their folders. Name a narrower path or a PATTERN."
        )
    target = Path(os.path.expanduser(statement.target))
    if not target.is_absolute():
        target = Path.cwd() / target
    target.mkdir(parents=True, exist_ok=True)
    stage_root = str(replace(statement.location, path=""))

    def one(f: dict[str, Any]) -> list[Any]:
        name = str(f["path"]).rsplit("/", 1)[-1]
        meter.start(name, int(f["size"]))
        handle, partial = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=target)
        try:
            with os.fdopen(handle, "wb") as out:
                size = download_file(
                    caller.settings,
                    stage_root,
                    str(f["path"]),
                    out,
                    progress=lambda n: meter.advance(name, n),
                    **caller.auth(),
                )
            os.replace(partial, target / name)  # only a whole file takes the name
        except (FloeError, OSError) as exc:
            Path(partial).unlink(missing_ok=True)
            return [name, 0, "ERROR", getattr(exc, "message", str(exc))]
        finally:
            meter.done(name)
        return [name, size, "DOWNLOADED", ""]

    with ThreadPoolExecutor(max(1, min(statement.parallel, len(listed) or 1))) as pool:
        rows = list(pool.map(one, listed))
    return Outcome(list(GET_COLUMNS), rows)
