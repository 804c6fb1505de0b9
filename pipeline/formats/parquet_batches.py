"""A Parquet file decoded a batch of rows at a time, every decoded byte counted (decision 110).

The footer's ``total_uncompressed_size`` counts encoded pages, not values: 600k rows of a dictionary
holding one 1,000-character string store in 64 KB and decode to 600 MB. So a file is read here row
group by row group, each in batches of rows (``ParquetFile.iter_batches``):

- before a row group is read, its page headers bound what one batch of it can cost
  (``parquet_pages.plan_group``), and that must fit in what is left of the bound;
- string columns are decoded to dictionary indices (``read_dictionary``), and a batch is counted
  with every dictionary expanded (``decoded.batch_size``) before it is expanded to the file's
  own types;
- a whole read (``read_whole``) fails past its bound (``PartTooLarge``, which the loader answers by
  reading the file in parts); a read in parts (``read_parts``) cuts parts of about ``chunk_bytes``, a
  batch in two where it must, fails on a single row past ``pipeline.max_part_bytes`` and on a file
  past ``pipeline.max_file_bytes`` decoded.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from floe.errors import FileLoadError
from pipeline.chunks import FileTooLarge, PartTooLarge, TransportError, size_text
from pipeline.formats.decoded import batch_size
from pipeline.formats.parquet_pages import GroupPlan, ReadAt, plan_group


class GroupTooLarge(PartTooLarge):
    """A row group one batch of which may decode past ``pipeline.max_part_bytes``."""

    def __init__(self, path: str, limit: int, group: int, plan: GroupPlan) -> None:
        why = (
            f"its list and map columns hold values that decode to {plan.nested:,} bytes, and one row "
            "may hold them all"
            if plan.nested > limit // 2
            else f"decoding a batch of its rows takes up to {plan.reserve:,} bytes (its pages, its "
            "strings and a batch of values)"
        )
        FileLoadError.__init__(
            self,
            f"File '{path}' has a Parquet row group (number {group + 1}) that decodes to more than "
            f"{size_text(limit)} at once (pipeline.max_part_bytes): {why}. A Parquet file is read a "
            "batch of rows at a time; write it with smaller row groups, or raise "
            "pipeline.max_part_bytes if such files are expected.",
            file=path,
        )
        self.limit = limit
        self.record = False


class RowTooLarge(PartTooLarge):
    """One row that decodes past ``pipeline.max_part_bytes`` (its strings, from a dictionary)."""

    def __init__(self, path: str, limit: int, row: int) -> None:
        FileLoadError.__init__(
            self,
            f"File '{path}' has a row (number {row:,}) that decodes to more than {size_text(limit)} "
            "(pipeline.max_part_bytes); raise pipeline.max_part_bytes if such rows are expected.",
            file=path,
        )
        self.limit = limit
        self.record = True


def _leaf_types(t: pa.DataType) -> list[pa.DataType]:
    """The leaf types under t, depth first (Parquet's order of leaf columns)."""
    if pa.types.is_struct(t):
        return [leaf for i in range(t.num_fields) for leaf in _leaf_types(t.field(i).type)]
    if pa.types.is_map(t):
        return _leaf_types(t.key_type) + _leaf_types(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_types(t.value_type)
    return [t]


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return bool(
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def _parse_error(exc: BaseException, path: str) -> FileLoadError:
    if isinstance(exc, UnicodeDecodeError):
        return FileLoadError("Error parsing the parquet file: a column name is not UTF-8", file=path)
    detail = str(exc)
    if "Could not open Parquet input source" in detail:
        detail = detail.split("': ", 1)[-1]  # the source is Floe's buffer or S3 object
    return FileLoadError(f"Error parsing the parquet file: {detail}", file=path)


def read_at_of(source: Any) -> ReadAt:
    """``read_at`` over what ``pq.ParquetFile`` reads: an object that keeps what it reads for
    pyarrow's next read of the same range (``hold``: an S3 object read by ranges is read once), or
    a pyarrow file."""
    hold = getattr(source, "hold", None)
    if hold is not None:
        return hold  # type: ignore[no-any-return]
    size = int(source.size())

    def read_at(offset: int, n: int) -> bytes:
        n = max(0, min(n, size - offset))
        return memoryview(source.read_at(n, offset)) if n else b""  # type: ignore[return-value]

    return read_at


class ParquetBatches:
    """An open Parquet file read a batch at a time: its string columns as dictionary indices,
    expanded to the file's own types once counted."""

    def __init__(self, parquet: pq.ParquetFile, source: Any, path: str) -> None:
        self.parquet = parquet
        self.path = path
        self.source = source
        self.read_at = read_at_of(source)
        try:
            self.target = parquet.schema_arrow
            schema = parquet.schema
            leaves = [leaf for t in self.target.types for leaf in _leaf_types(t)]
            # Only strings and binary read as dictionaries (their leaves as pyarrow reads them: the
            # file's stored Arrow schema may make a BYTE_ARRAY a decimal or an extension type).
            text = [
                i
                for i in range(len(schema))
                if len(leaves) == len(schema)
                and schema.column(i).physical_type == "BYTE_ARRAY"
                and _is_text(leaves[i])
            ]
            self.indexed = pq.ParquetFile(
                source, metadata=parquet.metadata, read_dictionary=text or None, pre_buffer=False
            )
        except TransportError:
            raise
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise _parse_error(exc, path) from exc

    def plan(self, g: int) -> GroupPlan:
        return plan_group(self.read_at, self.parquet, g, self.path)

    def batches(self, g: int, plan: GroupPlan) -> Iterator[pa.RecordBatch]:
        """Row group ``g`` in batches of ``plan.batch_rows`` rows, strings as dictionary indices."""
        reader = self.indexed.iter_batches(batch_size=plan.batch_rows, row_groups=[g])
        while True:
            try:
                batch = next(reader)
                batch.schema.names  # noqa: B018 - names decode lazily: a bad one raises only here
            except StopIteration:
                break
            except TransportError:
                raise
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise _parse_error(exc, self.path) from exc
            yield batch
        release = getattr(self.source, "release", None)
        if release is not None:
            release()

    def expand(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its dictionaries expanded: the file's own column types."""
        try:
            # Only the columns that hold dictionaries: pyarrow's cast of some nested types to
            # themselves fails (a list of NULLs), and the others need no copy.
            columns = [
                column if column.type == field.type else column.cast(field.type)
                for column, field in zip(batch.columns, self.target, strict=True)
            ]
            return pa.RecordBatch.from_arrays(columns, schema=self.target)
        except (pa.ArrowException, ValueError) as exc:
            raise _parse_error(exc, self.path) from exc

    def empty(self) -> pa.Table:
        return self.target.empty_table()


def read_whole(decoder: ParquetBatches, groups: Sequence[int], limit: int | None) -> pa.Table:
    """Row groups ``groups`` as one table, failing (``PartTooLarge``) as soon as what they decode to,
    or what decoding their next batch may take, passes ``limit``."""
    pieces: list[pa.RecordBatch] = []
    held = 0
    for g in groups:
        plan = decoder.plan(g)
        if limit is not None and held + plan.reserve > limit:
            raise PartTooLarge(decoder.path, limit, record=False, kind="Parquet", decoded=True)
        done = 0
        for batch in decoder.batches(g, plan):
            held += batch_size(batch)
            if limit is not None and held > limit:
                raise PartTooLarge(decoder.path, limit, record=False, kind="Parquet", decoded=True)
            pieces.append(decoder.expand(batch))
            done += batch.num_rows
            del batch
            if limit is not None and done < plan.rows and held + plan.reserve > limit:
                raise PartTooLarge(decoder.path, limit, record=False, kind="Parquet", decoded=True)
    if not pieces:
        return decoder.empty()
    return pa.Table.from_batches(pieces, schema=decoder.target)


def read_parts(
    decoder: ParquetBatches, *, chunk_bytes: int, max_part_bytes: int, max_file_bytes: int
) -> Iterator[pa.Table]:
    """The file as tables of about ``chunk_bytes`` decoded each (never past ``max_part_bytes``, what
    decoding a batch may take included), a batch cut where a part must end."""
    md = decoder.parquet.metadata
    path = decoder.path
    pieces: list[pa.RecordBatch] = []
    held = total = rows = 0
    # A batch that would take a part past chunk_bytes is cut there, so parts stay near chunk_bytes
    # whatever a batch expands to (a single row larger than that is a part of its own).
    cap = min(max_part_bytes, chunk_bytes)

    def flush() -> pa.Table:
        nonlocal pieces, held
        table = pa.Table.from_batches(pieces, schema=decoder.target)
        pieces, held = [], 0
        return table

    for g in range(md.num_row_groups):
        plan = decoder.plan(g)
        if plan.reserve > max_part_bytes:
            raise GroupTooLarge(path, max_part_bytes, g, plan)
        if pieces and held + plan.reserve > max_part_bytes:
            yield flush()
        done = 0
        for batch in decoder.batches(g, plan):
            done += batch.num_rows
            while batch.num_rows:
                size = batch_size(batch)
                if held + size > cap:
                    fits = _rows_that_fit(batch, cap - held)
                    if not fits and pieces:
                        yield flush()
                        continue
                    if not fits:  # one row alone past a part's size: alone, if within the bound
                        fits = 1 if batch_size(batch.slice(0, 1)) <= max_part_bytes else 0
                    if not fits:
                        raise RowTooLarge(path, max_part_bytes, rows + 1)
                    taken, batch = batch.slice(0, fits), batch.slice(fits)
                    size = batch_size(taken)
                else:
                    taken, batch = batch, batch.slice(batch.num_rows)
                total += size
                if total > max_file_bytes:
                    raise FileTooLarge(path, max_file_bytes, decoded=True)
                pieces.append(decoder.expand(taken))
                held += size
                rows += taken.num_rows
                del taken
                if held >= chunk_bytes:
                    yield flush()
            del batch
            if pieces and done < plan.rows and held + plan.reserve > max_part_bytes:
                yield flush()  # before the next batch is decoded: it may take the reserve
    if pieces or rows == 0:
        yield flush() if pieces else decoder.empty()


def _rows_that_fit(batch: pa.RecordBatch, room: int) -> int:
    """The most leading rows of ``batch`` whose decoded size is within ``room`` (halving: each try
    costs the rows it counts)."""
    low, high = 0, batch.num_rows
    while low < high:
        mid = (low + high + 1) // 2
        if batch_size(batch.slice(0, mid)) <= room:
            low = mid
        else:
            high = mid - 1
    return low
