"""ORC: a file's bytes -> its own columns, one row per ORC row (read with ``pyarrow.orc``).

Like Parquet, ORC compresses its stripes itself (zlib, snappy, lz4, zstd), and Snowflake has no
COMPRESSION option for it. Columns keep their types (binary reads as hex text, see
``parquet_rows.columnar_raw``); an ORC timestamp is a TIMESTAMP_NTZ. The file is read stripe by
stripe, so one that decodes past ``max_bytes`` fails after reading about that much, not all of it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.orc as orc

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import PartTooLarge
from pipeline.formats.parquet_rows import columnar_raw
from pipeline.formats.raw import RawFile, empty_raw

MAGIC = b"ORC"


def read_orc(body: bytes, fmt: FileFormat, path: str, max_bytes: int | None = None) -> RawFile:
    """One staged ORC file as a RawFile."""
    if not body:
        return empty_raw([], "ORC", path, b"", fmt)
    try:
        if not body.startswith(MAGIC):
            raise ValueError("not an ORC file (it does not start with 'ORC')")
        source = orc.ORCFile(pa.BufferReader(body))
        stripes: list[pa.RecordBatch] = []
        size = 0
        for i in range(source.nstripes):
            stripe = source.read_stripe(i)
            size += stripe.nbytes
            if max_bytes is not None and size > max_bytes:
                raise PartTooLarge(path, max_bytes, record=False, kind="ORC")
            stripes.append(stripe)
        schema = source.schema
        table = pa.Table.from_batches(stripes, schema=schema) if stripes else schema.empty_table()
        table.schema.names  # noqa: B018 - names decode lazily: a bad one raises only here
    except UnicodeDecodeError as exc:
        raise FileLoadError("Error parsing the ORC file: a column name is not UTF-8", file=path) from exc
    except (pa.ArrowException, OSError, ValueError) as exc:
        detail = str(exc) or type(exc).__name__
        raise FileLoadError(
            f"Error parsing the ORC file: {detail[:1].lower()}{detail[1:]}", file=path
        ) from exc
    return columnar_raw(table, "ORC", path, fmt)
