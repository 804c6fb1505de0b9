"""A staged file's bytes -> a RawFile: undo the compression, then hand the body to its format's reader.

COMPRESSION: AUTO recognises gzip, bzip2 and zstd by magic bytes; GZIP, BZ2, ZSTD, BROTLI, DEFLATE,
RAW_DEFLATE and NONE can be forced. A UTF-8 byte order mark is skipped unless SKIP_BYTE_ORDER_MARK =
FALSE (CSV: after ENCODING is converted to UTF-8, by the CSV reader). Decompression is incremental
and bounded (``max_bytes``), so a decompression bomb fails its file (PartTooLarge) instead of
filling the worker's memory; so is decoding Parquet, Avro and ORC, whose values are counted as they
are decoded, and parsing CSV and JSON, whose records are counted before they are parsed (a short
record costs many times its bytes; decision 110).
"""

from __future__ import annotations

import io
import sys

from floe.catalog.models import FileFormat
from floe.errors import FileLoadError
from pipeline.chunks import (
    PartTooLarge,
    compression_of,
    csv_size,
    decompressed,
    json_size,
    read_bounded,
    record_token,
)
from pipeline.formats.avro_records import read_avro
from pipeline.formats.csv_records import read_csv
from pipeline.formats.json_documents import read_json
from pipeline.formats.orc_rows import read_orc
from pipeline.formats.parquet_rows import read_parquet
from pipeline.formats.raw import UTF8_BOM, RawFile

_GZIP_MAGIC = b"\x1f\x8b"


def read_raw(
    data: bytes, fmt: FileFormat, *, path: str, columns: int | None = None, max_bytes: int | None = None
) -> RawFile:
    """Decompress and parse one staged file.

    ``columns`` (CSV only) fixes the expected field count, as a plain COPY does (the number of target
    columns); without it the first record decides. ``max_bytes`` bounds the decompressed file
    (``pipeline.max_part_bytes``): past it, PartTooLarge, after inflating only that much. Raises
    FileLoadError when the file as a whole cannot be read.
    """
    kind = fmt.type.upper()
    if kind == "PARQUET":
        # Parquet compresses internally; only a whole-file gzip wrapper is undone here.
        compression = "AUTO" if data.startswith(_GZIP_MAGIC) else "NONE"
        body = _decompress(data, compression, path, max_bytes, "Parquet")
        return read_parquet(body, fmt, path, max_bytes)
    if kind == "ORC":  # compressed internally too, and Snowflake has no COMPRESSION option for it
        compression = "AUTO" if data.startswith(_GZIP_MAGIC) else "NONE"
        return read_orc(_decompress(data, compression, path, max_bytes, "ORC"), fmt, path, max_bytes)
    if kind == "AVRO":  # COMPRESSION is the whole file's; the blocks' codec is undone by read_avro
        body = _decompress(data, fmt.compression, path, max_bytes, "Avro")
        return read_avro(body, fmt, path, max_bytes)
    body = _decompress(data, fmt.compression, path, max_bytes, "JSON" if kind == "JSON" else "")
    if kind == "CSV":  # converts ENCODING to UTF-8, then drops a byte-order mark (or keeps it)
        field = fmt.field_delimiter.encode("utf-8") if fmt.field_delimiter else b""
        # Short rows cost many times their bytes once parsed: counted before they are.
        if max_bytes is not None and csv_size(body, record_token(fmt), field) > max_bytes:
            raise PartTooLarge(path, max_bytes, record=False, decoded=True)
        return read_csv(body, fmt, path, columns)
    if fmt.skip_byte_order_mark and body.startswith(UTF8_BOM):
        body = body[len(UTF8_BOM) :]  # SKIP_BYTE_ORDER_MARK = FALSE: the JSON reader meets it
    if kind == "JSON":
        if max_bytes is not None and json_size(body) > max_bytes:
            raise PartTooLarge(path, max_bytes, record=False, kind="JSON", decoded=True)
        return read_json(body, fmt, path, max_bytes=max_bytes)
    raise FileLoadError(f"Unsupported file format type '{fmt.type}'", file=path)


def _decompress(
    data: bytes, compression: str, path: str, max_bytes: int | None = None, kind: str = ""
) -> bytes:
    """Undo COMPRESSION (AUTO recognises gzip, bzip2 and zstd by their magic bytes), inflating at
    most ``max_bytes`` (PartTooLarge past it): the streaming decompressors of ``pipeline.chunks``
    over the bytes in memory, so a bomb costs the bound, not its inflated size."""
    if compression_of(data[:4], compression) == "NONE" or not data:
        body: bytes | None = data if max_bytes is None or len(data) <= max_bytes else None
    else:
        stream = decompressed(io.BytesIO(data), compression, path)
        body = read_bounded(stream, sys.maxsize - 1 if max_bytes is None else max_bytes)
    if body is None:
        assert max_bytes is not None
        raise PartTooLarge(path, max_bytes, record=False, kind=kind)
    return body
