"""ORC: a file's bytes -> its own columns, one row per ORC row (read with ``pyarrow.orc``).

Like Parquet, ORC compresses its stripes itself (zlib, snappy, lz4, zstd), and Snowflake has no
COMPRESSION option for it. Columns keep their types (binary reads as hex text, see
``parquet_rows.columnar_raw``); an ORC timestamp is a TIMESTAMP_NTZ.

The file is read a batch of rows at a time (pyarrow's ORC scanner), and what its values decode to is
counted against ``max_bytes`` as they are read, dictionary strings, NULLs and list values included.
Before anything is decoded, each stripe's own structure (``orc_stripes``) says how far its streams
inflate, how many values its lists hold and how long its dictionary strings are: a stripe that
inflates past the bound, or one batch of which may, fails the file unread (decision 110).
"""

from __future__ import annotations

import zlib

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.orc as orc
import zstandard

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import PartTooLarge
from pipeline.formats.decoded import batch_size
from pipeline.formats.orc_stripes import OrcStructureError, plan_orc, tail_size
from pipeline.formats.parquet_rows import columnar_raw
from pipeline.formats.raw import RawFile, empty_raw

MAGIC = b"ORC"


def read_orc(body: bytes, fmt: FileFormat, path: str, max_bytes: int | None = None) -> RawFile:
    """One staged ORC file as a RawFile."""
    if not body:
        return empty_raw([], "ORC", path, b"", fmt)
    limit = max_bytes if max_bytes is not None else 1 << 62
    try:
        if not body.startswith(MAGIC):
            raise ValueError("not an ORC file (it does not start with 'ORC')")
        if tail_size(body, limit // 4) > limit // 4:  # before liborc inflates it
            raise PartTooLarge(path, limit, record=False, kind="ORC", decoded=True)
        source = orc.ORCFile(pa.BufferReader(body))
        schema = source.schema
        schema.names  # noqa: B018 - names decode lazily: a bad one raises only here
        plan = plan_orc(
            body, source.reader.serialized_file_tail(), source.compression, source.compression_size, limit
        )
        if plan.inflated > limit or plan.reserve > limit:
            raise PartTooLarge(path, limit, record=False, kind="ORC", decoded=True)
        rows = source.nrows
        fragment = ds.OrcFileFormat().make_fragment(pa.BufferReader(body))
        batches: list[pa.RecordBatch] = []
        held = done = 0
        for batch in fragment.to_batches(
            batch_size=plan.batch_rows, use_threads=False, batch_readahead=0, fragment_readahead=0
        ):
            held += batch_size(batch)
            done += batch.num_rows
            if held > limit or (done < rows and held + plan.reserve > limit):
                raise PartTooLarge(path, limit, record=False, kind="ORC", decoded=True)
            batches.append(batch)
        table = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
    except UnicodeDecodeError as exc:
        raise FileLoadError("Error parsing the ORC file: a column name is not UTF-8", file=path) from exc
    except (pa.ArrowException, OSError, ValueError, zlib.error, zstandard.ZstdError) as exc:
        detail = str(exc) or type(exc).__name__
        if isinstance(exc, OrcStructureError):
            detail = f"its structure does not parse: {detail}"
        raise FileLoadError(
            f"Error parsing the ORC file: {detail[:1].lower()}{detail[1:]}", file=path
        ) from exc
    return columnar_raw(table, "ORC", path, fmt)
