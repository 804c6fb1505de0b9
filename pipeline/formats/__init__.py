"""Staged file bytes -> a raw Arrow table, plus the records that could not be parsed at all.

``read_raw`` undoes compression and splits the file into records; it does not know the target
table. Typing, the COPY transform and ON_ERROR live in ``pipeline.transform``.

Numbering (the same for every format, used by METADATA$FILE_ROW_NUMBER and by load history):

- **row number**: 1-based ordinal of a record among the records of the file, counting bad records
  too. For CSV, the SKIP_HEADER lines are not records (so the first data row is row 1 whatever
  SKIP_HEADER is), and neither are blank lines skipped by SKIP_BLANK_LINES = TRUE. For JSON a record
  is a document (an element with STRIP_OUTER_ARRAY); for Parquet and ORC a row; for Avro a record.
- **line**: physical line (1-based, counting the header lines) where the record starts. A quoted
  CSV value or a JSON document can span several lines. Parquet, Avro and ORC have no lines: line =
  row number.

The modules:

- ``decoded``, ``parquet_pages``, ``parquet_batches``: what decoded values cost, counted before
  they are made, and Parquet read a bounded batch of rows at a time (decision 110);
- ``raw``: what every reader returns (RawFile, RowError), whole-file failures (FileParseError) and
  where invalid UTF-8 is;
- ``staged_files``: ``read_raw``, COMPRESSION, and the choice of reader;
- ``csv_records``, ``json_documents``, ``parquet_rows``, ``avro_records``, ``orc_rows``: one reader
  per format, each documenting the raw table it makes. Parquet, Avro and ORC (COLUMNAR_FORMATS) give
  the file's own columns and share ``parquet_rows.columnar_raw``.

Other packages import from here, not from the modules.
"""

from pipeline.formats.csv_records import (
    check_csv_options,
    csv_field_character,
    csv_record_text,
    field_spans,
    read_csv,
    read_csv_part,
    show_marked,
)
from pipeline.formats.json_documents import read_checked_lines, read_json
from pipeline.formats.parquet_batches import GroupTooLarge, ParquetBatches, RowTooLarge, read_parts
from pipeline.formats.parquet_rows import COLUMNAR_FORMATS, open_parquet, parquet_raw, read_parquet_groups
from pipeline.formats.raw import (
    CODE_END_OF_RECORD,
    CODE_EXTRA_FIELD,
    CODE_INVALID_UTF8,
    CODE_JSON_PARSE,
    UTF8_BOM,
    FileParseError,
    RawFile,
    RowError,
    end_of_record_message,
)
from pipeline.formats.staged_files import read_raw

__all__ = [
    "CODE_END_OF_RECORD",
    "CODE_EXTRA_FIELD",
    "CODE_INVALID_UTF8",
    "CODE_JSON_PARSE",
    "COLUMNAR_FORMATS",
    "UTF8_BOM",
    "FileParseError",
    "GroupTooLarge",
    "ParquetBatches",
    "RawFile",
    "RowError",
    "RowTooLarge",
    "check_csv_options",
    "csv_field_character",
    "csv_record_text",
    "end_of_record_message",
    "field_spans",
    "open_parquet",
    "parquet_raw",
    "read_checked_lines",
    "read_csv",
    "read_csv_part",
    "read_json",
    "read_parquet_groups",
    "read_parts",
    "read_raw",
    "show_marked",
]
