"""What decoded Arrow data costs, counted before it is made (decision 110).

A columnar file's encodings make values from almost nothing: a dictionary index stands for a string
however long, a run of one definition level for any number of NULLs, a repetition level for list
elements. The readers of Parquet, ORC and Avro count these bytes as they decode, a batch at a time,
against ``pipeline.max_part_bytes``, and a dictionary-encoded column is counted by the strings its
indices stand for before those strings are written out.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

ROW_BYTES = 16
"""Every row costs its row and line numbers (``RawFile``) whatever its columns hold: a file of
columns that decode to nothing (NULL-typed, zero-width) is bounded by its row count."""

BATCH_BYTES = 16 * 1024 * 1024
"""Decoded bytes of one batch of rows, as the footer's counts bound them before it is decoded (its
dictionary-encoded strings are counted once decoded to indices, before they are expanded)."""

MAX_BATCH_ROWS = 65_536
"""Most rows decoded at a time, however narrow the rows."""


def decoded_size(arr: pa.Array) -> int:
    """Bytes ``arr`` takes in memory with every dictionary expanded to its values (what a cast to
    the value type, or DuckDB reading it, makes of it). Slices count their own rows only."""
    t = arr.type
    if pa.types.is_dictionary(t):
        values = arr.dictionary
        n = len(arr)
        if _is_binary_like(values.type):
            lengths = pc.binary_length(values)
            total = pc.sum(pc.take(lengths, arr.indices)).as_py() or 0
            return int(total) + 8 * (n + 1) + (n + 7) // 8
        try:
            width = max(1, values.type.bit_width // 8)
        except ValueError:  # values of no fixed width, not text: as if each were all of them
            width = int(values.nbytes) + 1
        return int(n * width + (n + 7) // 8)
    if pa.types.is_struct(t):
        return int((len(arr) + 7) // 8 + sum(decoded_size(child) for child in arr.flatten()))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        n = len(arr)
        offsets = arr.offsets  # this (possibly sliced) array's own: its children are those between
        start, end = (offsets[0].as_py(), offsets[n].as_py()) if n else (0, 0)
        return int(8 * (n + 1) + (n + 7) // 8 + decoded_size(arr.values.slice(start, end - start)))
    if pa.types.is_fixed_size_list(t):
        return int((len(arr) + 7) // 8 + decoded_size(arr.flatten()))
    return int(arr.nbytes)


def batch_size(batch: pa.RecordBatch) -> int:
    """``decoded_size`` of every column of ``batch``, and each row's ``ROW_BYTES``."""
    return int(ROW_BYTES * batch.num_rows + sum(decoded_size(column) for column in batch.columns))


def _is_binary_like(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary_view(t)
    )
