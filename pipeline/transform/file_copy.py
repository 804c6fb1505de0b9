"""Running a file through a compiled COPY: ``apply_copy`` for a file read whole, ``FileCopy`` for one
fed in parts (a large file read as a stream), ``failed_file`` for one that could not be read.

A clean file is one query (``query.query_for``). Only the rows whose conversion DuckDB's own casts
rejected get the complete Snowflake rule, in a second query on just those rows; the first error's
message costs one more one-row query.

ON_ERROR then decides the file's fate (see ``FileCopy.result``), on the whole file's counts.

Every error of the file is kept too, in file order, up to ``max_errors`` (the setting
``pipeline.max_errors_per_file``): each bad record's message, place, code and text, which the
registrar stores with the file's outcome and VALIDATE_PIPE_LOAD shows. A described row error costs
the one-row query its message takes, so the cap also bounds the time a file of bad rows costs.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, replace

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from floe.errors import FileLoadError
from floe.history import REJECTED_RECORD_CHARS, ErrorDetail
from floe.records import LoadOutcome
from floe.types import duckdb_type, offset_column
from pipeline.formats import (
    CODE_END_OF_RECORD,
    CODE_EXTRA_FIELD,
    FileParseError,
    RawFile,
    RowError,
    read_csv,
)
from pipeline.transform.connections import connection
from pipeline.transform.dialect import ident
from pipeline.transform.messages import (
    CODE_NOT_NULL,
    CODE_OTHER,
    NOT_NULL_MESSAGE,
    conversion_message,
    duckdb_message,
    field_character,
    first_line,
)
from pipeline.transform.plan import INPUT_VIEW, CompiledCopy, FileInfo, FileQuery
from pipeline.transform.query import input_table, query_for, query_params, source_sql, with_file_column
from pipeline.transform.remote_calls import CallErrors, RemoteCalls, add_call_values


@dataclass
class _FirstError:
    line: int
    character: int
    column: str | None
    message: str
    code: str


MAX_ERRORS_PER_FILE = 100
"""Errors kept per file unless the caller says otherwise (``pipeline.max_errors_per_file``)."""

SQL_STATES: dict[str, str] = {
    "100035": "22007",
    "100037": "22018",
    "100038": "22018",
    "100039": "22003",
    "100040": "22007",
    "100051": "22012",
    "100074": "54000",
}
"""The SQLSTATE of each error code whose state Snowflake's messages show (copy-reference.md, section
4); the others, parse errors and NOT NULL among them, are 22000, as in Snowflake's validation output."""


def sql_state(code: str | None) -> str | None:
    """The SQLSTATE of an error code."""
    return None if code is None else SQL_STATES.get(code, "22000")


class _Lines:
    """Where the physical lines of one part's bytes start, found once for all its errors."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._starts: np.ndarray | None = None

    def start(self, line: int) -> int | None:
        """Byte offset where 1-based physical line ``line`` starts; None when there is none."""
        if not self._data or line < 1:
            return None
        if self._starts is None:
            newlines = np.flatnonzero(np.frombuffer(self._data, dtype=np.uint8) == 10)
            self._starts = np.concatenate(([0], newlines + 1))
        if line > len(self._starts) or self._starts[line - 1] >= len(self._data):
            return None
        return int(self._starts[line - 1])

    def text(self, line: int) -> str | None:
        """The text of a physical line (without its line break), cut at ``REJECTED_RECORD_CHARS``."""
        start = self.start(line)
        if start is None:
            return None
        end = self._data.find(b"\n", start)
        raw = self._data[start : end if end >= 0 else len(self._data)]
        text = raw[: REJECTED_RECORD_CHARS * 4].decode("utf-8", "replace").rstrip("\r")
        return text[:REJECTED_RECORD_CHARS]

    def byte_offset(self, line: int, character: int) -> int | None:
        """Byte offset of 1-based ``character`` of ``line`` within these bytes."""
        start = self.start(line)
        text = self.text(line)
        if start is None or text is None:
            return None
        return start + len(text[: max(0, character - 1)].encode())


def _fit_width(compiled: CompiledCopy, raw: RawFile) -> RawFile:
    """Plain CSV COPY: records must have one field per target column; re-read when the file was
    read with another width (read_raw takes the first record's) or needs lenient repair."""
    if compiled.format == "CSV" and raw.format == "CSV" and raw.fmt.parse_header:
        return _fit_header(compiled, raw)
    if compiled.format != "CSV" or compiled.csv_width is None or raw.format != "CSV":
        return raw
    width = compiled.csv_width
    mismatches = any(e.code in (CODE_END_OF_RECORD, CODE_EXTRA_FIELD) for e in raw.errors)
    lenient = not raw.fmt.error_on_column_count_mismatch
    if raw.width == width and not (lenient and mismatches):
        return raw
    if raw.rows_parsed == 0:
        return raw
    again = read_csv(raw.data, raw.fmt, raw.path, width)
    return replace(again, row_offset=raw.row_offset, line_offset=raw.line_offset)


CODE_COLUMN_COUNT = "100080"
"""Snowflake's code for a file whose column count is not the table's (copy-reference.md, section 4)."""


def _fit_header(compiled: CompiledCopy, raw: RawFile) -> RawFile:
    """MATCH_BY_COLUMN_NAME on CSV (PARSE_HEADER): with ERROR_ON_COLUMN_COUNT_MISMATCH = TRUE, the
    default, Snowflake compares the file's columns (its header's) with the table's, so a file of
    another width loads no record: each is an error of its row (100080), and ON_ERROR decides. FALSE
    loads the columns by name whatever the widths (decision 82)."""
    table_width = len(compiled.output)
    if not raw.fmt.error_on_column_count_mismatch or raw.width == table_width or raw.num_rows == 0:
        return raw
    message = (
        f"Number of columns in file ({raw.width}) does not match that of the corresponding table "
        f"({table_width}), use file format option error_on_column_count_mismatch=false to ignore this error"
    )
    rows, lines = raw.row_numbers.to_pylist(), raw.line_numbers.to_pylist()
    errors = [
        *raw.errors,
        *(RowError(r, n, 1, None, message, CODE_COLUMN_COUNT) for r, n in zip(rows, lines, strict=True)),
    ]
    errors.sort(key=lambda e: e.line)
    empty = pa.array([], pa.int64())
    return replace(raw, table=raw.table.slice(0, 0), row_numbers=empty, line_numbers=empty, errors=errors)


def _header_field(compiled: CompiledCopy, raw: RawFile, pre: str | None) -> int:
    """MATCH_BY_COLUMN_NAME on CSV: the 1-based field of the header column a plan reads (its
    ``pre`` is that column, quoted), for the error's character position; 1 when it reads none."""
    if not raw.fmt.parse_header or pre is None:
        return 1
    for i, name in enumerate(raw.table.column_names):
        if ident(name if compiled.exact_names else name.lower()) == pre:
            return i + 1
    return 1


def _field_column(compiled: CompiledCopy, field_no: int, header: list[str] | None = None) -> str:
    """The target column Snowflake names for an error in CSV field ``field_no``; ``header``: the
    file's names (PARSE_HEADER), which say the column a field loads."""
    name = next((p.display for p in compiled.plans if field_no in p.fields[:1]), None)
    name = name or next((p.display for p in compiled.plans if field_no in p.fields), None)
    if name is None and header is not None and 0 < field_no <= len(header):
        named = header[field_no - 1] if compiled.exact_names else header[field_no - 1].lower()
        name = next((p.display for p in compiled.plans if p.pre == ident(named)), None)
    return name or f'"{compiled.table_name}"["${field_no}":{field_no}]'


def _name_parse_errors(
    compiled: CompiledCopy, errors: list[RowError], header: list[str] | None = None
) -> list[RowError]:
    """Give CSV field-count errors the target column name Snowflake would print."""
    out: list[RowError] = []
    for err in errors:
        if err.column_name is None and err.field is not None:
            err = err.named(_field_column(compiled, err.field, header))
        out.append(err)
    return out


def _first_parse_error(errors: list[RowError]) -> _FirstError | None:
    if not errors:
        return None
    e0 = min(errors, key=lambda e: e.line)
    return _FirstError(e0.line, e0.character, e0.column_name, e0.message, e0.code)


def failed_file(compiled: CompiledCopy, exc: FileLoadError, filename: str) -> LoadOutcome:
    """The result of a file that could not be read at all (a FileLoadError from ``read_raw``).

    When the error has a place in the file (a FileParseError), load history shows its line,
    character and target column, as for a row error.
    """
    if not isinstance(exc, FileParseError):
        return LoadOutcome.failed(filename, exc.message, detail=ErrorDetail(exc.message, category="parsing"))
    column = (
        _field_column(compiled, exc.field) if exc.field is not None and compiled.format == "CSV" else None
    )
    detail = ErrorDetail(
        exc.message,
        line=exc.line,
        character=exc.character,
        category="parsing",
        code=exc.code,
        sql_state=sql_state(exc.code),
        column_name=column,
        row_start_line=exc.line,
    )
    return LoadOutcome.failed(
        filename,
        exc.message,
        code=exc.code,
        line=exc.line,
        character=exc.character,
        column=column,
        detail=detail,
    )


def _error_limit(compiled: CompiledCopy, rows_parsed: int) -> int:
    if compiled.on_error == "SKIP_FILE_N":
        return max(1, int(compiled.on_error_limit))
    if compiled.on_error == "SKIP_FILE_PCT":
        return math.floor(rows_parsed * compiled.on_error_limit / 100) + 1
    if compiled.on_error == "CONTINUE":
        return rows_parsed
    return 1


def _fails(compiled: CompiledCopy, errors: int, rows_parsed: int, loaded: int) -> bool:
    if errors == 0:
        return False
    if loaded == 0:
        return True  # every record failed: nothing was loaded, whatever the rule
    rule = compiled.on_error
    if rule == "CONTINUE":
        return False
    if rule == "SKIP_FILE_N":
        return errors >= max(1, compiled.on_error_limit)
    if rule == "SKIP_FILE_PCT":
        return rows_parsed > 0 and errors * 100.0 / rows_parsed > compiled.on_error_limit
    return True  # SKIP_FILE


def _run(con: duckdb.DuckDBPyConnection, sql: str, table: pa.Table, params: dict[str, str]) -> pa.Table:
    con.register(INPUT_VIEW, table)
    try:
        return con.sql(sql, params=params).to_arrow_table()
    finally:
        con.unregister(INPUT_VIEW)


def _raises(
    con: duckdb.DuckDBPyConnection, sql: str, table: pa.Table, params: dict[str, str]
) -> Exception | None:
    try:
        _run(con, sql, table, params)
    except duckdb.Error as exc:
        return exc
    return None


def apply_copy(
    compiled: CompiledCopy,
    raw: RawFile,
    *,
    filename: str,
    con: duckdb.DuckDBPyConnection | None = None,
    remote: RemoteCalls | None = None,
    info: FileInfo | None = None,
    max_errors: int = MAX_ERRORS_PER_FILE,
) -> tuple[pa.Table, LoadOutcome]:
    """Transform one parsed file into rows of the target table and its load-history result.

    Returns the rows to load (exactly ``compiled.schema``; empty when the file fails) and the
    LoadOutcome. ``con``: a DuckDB connection owned by the calling thread, by default a per-thread
    ``new_connection()``. Pass a ``new_connection()`` too: it is the sandboxed one (a plain
    connection also works, set to UTC, but it can read files if an expression ever reached them).
    ``remote``: how to call the external functions the COPY calls. Raises FileLoadError only for
    failures of the whole file. ``info``: the file's ETag and last-modified time, when the COPY
    reads them (``compiled.file_info``). ``max_errors``: the errors whose detail the outcome keeps.
    """
    copy = FileCopy(compiled, filename, remote, info, max_errors=max_errors)
    rows = copy.add(raw, con)
    result = copy.result()
    if result.status == "LOAD_FAILED":
        rows = compiled.schema.empty_table()
    return rows, result


def groupable(compiled: CompiledCopy) -> bool:
    """Whether files of this COPY can share one query (``copy_group``): plain CSV, whose query reads
    nothing of the file but its records and its name (not its ETag or time stamp, and no external
    call, whose batches are per file)."""
    return (
        compiled.format == "CSV"
        and not compiled.file_format.parse_header
        and not compiled.file_info
        and not compiled.calls
    )


def copy_group(
    compiled: CompiledCopy,
    files: list[tuple[str, RawFile]],
    con: duckdb.DuckDBPyConnection | None = None,
    *,
    max_errors: int = MAX_ERRORS_PER_FILE,
) -> list[tuple[pa.Table, LoadOutcome] | None]:
    """Several parsed files (name, raw) through one query, for what ``apply_copy`` gives each.

    A small file's query costs more to plan and start than to run, so the files' input rows go in
    together (each keeps its own row numbers) and the result is cut back into files. A file the
    group cannot speak for gets None, and the caller runs it alone with ``apply_copy``: one with
    a parse error or no rows, one of another width than the first, and one with any row the query
    flagged (a conversion error, a NOT NULL, a value the slow path may yet convert), whose errors
    need the per-file follow-up queries. Each file's outcome is ``FileCopy``'s, as for a part.
    """
    out: list[tuple[pa.Table, LoadOutcome] | None] = [None] * len(files)
    if not groupable(compiled):
        return out
    con = connection(con)
    fitted: dict[int, RawFile] = {}
    inputs: dict[int, pa.Table] = {}
    for i, (_, raw) in enumerate(files):
        raw = _fit_width(compiled, raw)
        if raw.errors or raw.num_rows == 0:
            continue
        inp, _ = input_table(compiled, raw)
        if compiled.metadata:
            inp = with_file_column(inp, files[i][0])
        if inputs and not inp.schema.equals(next(iter(inputs.values())).schema):
            continue
        fitted[i], inputs[i] = raw, inp
    if len(inputs) < 2:
        return out
    combined = pa.concat_tables(inputs.values())
    try:
        query = query_for(compiled, combined, con)
        # One scan time for the group, which is scanned as one.
        result = _run(
            con, query.sql, combined, query_params(compiled, None, dt.datetime.now(dt.UTC).isoformat())
        )
    except duckdb.Error:
        return out  # each file alone then says which one it was, and where
    offset = 0
    for i, inp in inputs.items():
        part = result.slice(offset, inp.num_rows)
        offset += inp.num_rows
        if any(pc.any(pc.not_equal(part.column(f"e{k}"), 0)).as_py() for k in query.status):
            continue
        copy = FileCopy(compiled, files[i][0], max_errors=max_errors)
        rows = copy.add(fitted[i], con, clean=part)
        out[i] = (rows, copy.result())
    return out


class FileCopy:
    """One file's COPY, fed in one piece or in consecutive parts (a large file read as a stream).

    ``add`` transforms a part and returns its good rows; ON_ERROR is decided once, on the whole
    file's counts, by ``result``. The caller keeps or drops the rows accordingly; ``doomed`` says
    early when the file can no longer load, so a streaming caller can stop writing its rows.
    """

    def __init__(
        self,
        compiled: CompiledCopy,
        filename: str,
        remote: RemoteCalls | None = None,
        info: FileInfo | None = None,
        *,
        max_errors: int = MAX_ERRORS_PER_FILE,
    ) -> None:
        self.compiled = compiled
        self.filename = filename
        self.remote = remote
        self.info = info
        self.max_errors = max(0, max_errors)
        self.rows_parsed = 0
        self.rows_good = 0
        self.errors = 0
        self.first: _FirstError | None = None
        self.details: list[ErrorDetail] = []
        """The file's errors in file order, at most ``max_errors``."""
        self._bytes_before = 0

    def add(
        self, raw: RawFile, con: duckdb.DuckDBPyConnection | None = None, *, clean: pa.Table | None = None
    ) -> pa.Table:
        """Transform one part; returns its good rows (``compiled.schema``), whatever ON_ERROR says.
        ``clean``: the part's query result, already run (``copy_group``) and free of errors."""
        compiled = self.compiled
        con = connection(con)
        raw = _fit_width(compiled, raw)
        header = raw.table.column_names if raw.fmt.parse_header else None
        parse_errors = _name_parse_errors(compiled, raw.errors, header)
        n = raw.num_rows
        first = _first_parse_error(parse_errors)
        bad = np.zeros(n, dtype=bool)
        result: pa.Table | None = None
        described: list[tuple[int, _FirstError]] = []
        if clean is not None:
            result = clean
        elif n > 0:
            result, bad, described = self._transform(raw, con)
        if described and (first is None or described[0][1].line < first.line):
            first = described[0][1]
        self._keep(raw, parse_errors, described)
        n_bad = int(bad.sum())
        self.rows_parsed += raw.rows_parsed
        self.errors += len(parse_errors) + n_bad
        self.rows_good += n - n_bad
        if first is not None and self.first is None:
            # Parts arrive in file order, so the first part with an error holds the file's first.
            self.first = replace(first, line=first.line + raw.line_offset)
        if result is None:
            return compiled.schema.empty_table()
        if n_bad:
            result = result.filter(pa.array(~bad))
        return pa.Table.from_arrays(
            [result.column(f"o{i}").cast(f.type) for i, f in enumerate(compiled.schema)],
            schema=compiled.schema,
        )

    def _transform(
        self, raw: RawFile, con: duckdb.DuckDBPyConnection
    ) -> tuple[pa.Table, np.ndarray, list[tuple[int, _FirstError]]]:
        """Run the part's rows through DuckDB: the result, its error mask, and its first bad rows
        described (row index, error): as many as the file may still keep, and at least the first."""
        run = _FileRun.start(self.compiled, raw, con, self.filename, self.remote, self.info)
        bad = np.zeros(raw.num_rows, dtype=bool)
        if not run.query.status:
            return run.result, bad, []
        bad, where = run.bad_rows(max(1, self.max_errors - len(self.details)))
        return run.result, bad, [(row, run.describe(row, k, status)) for row, k, status in where]

    def _keep(
        self, raw: RawFile, parse_errors: list[RowError], described: list[tuple[int, _FirstError]]
    ) -> None:
        """Add the part's errors to ``details``, in file order, up to ``max_errors`` in all."""
        room = self.max_errors - len(self.details)
        if room > 0 and (parse_errors or described):
            lines = _Lines(raw.data)
            found = [self._parse_detail(raw, lines, e) for e in parse_errors[:room]]
            found += [self._row_detail(raw, lines, row, e) for row, e in described[:room]]
            found.sort(key=lambda d: (d.line or 0, d.row_number or 0))
            self.details += found[:room]
        self._bytes_before += len(raw.data)

    def _offset(self, lines: _Lines, line: int, character: int) -> int | None:
        local = lines.byte_offset(line, character)
        return None if local is None else self._bytes_before + local

    def _parse_detail(self, raw: RawFile, lines: _Lines, e: RowError) -> ErrorDetail:
        return ErrorDetail(
            e.message,
            line=e.line + raw.line_offset,
            character=e.character,
            byte_offset=self._offset(lines, e.line, e.character),
            category="parsing",
            code=e.code,
            sql_state=sql_state(e.code),
            column_name=e.column_name,
            row_number=e.row_number + raw.row_offset,
            row_start_line=e.line + raw.line_offset,
            rejected_record=lines.text(e.line),
        )

    def _row_detail(self, raw: RawFile, lines: _Lines, row: int, e: _FirstError) -> ErrorDetail:
        return ErrorDetail(
            e.message,
            line=e.line + raw.line_offset,
            character=e.character,
            byte_offset=self._offset(lines, e.line, e.character),
            category="conversion",
            code=e.code,
            sql_state=sql_state(e.code),
            column_name=e.column,
            row_number=int(raw.row_numbers[row].as_py()) + raw.row_offset,
            row_start_line=e.line + raw.line_offset,
            rejected_record=lines.text(e.line) if raw.data else _record_of(raw, row),
        )

    @property
    def doomed(self) -> bool:
        """The errors so far fail the file whatever the rest of it holds."""
        rule = self.compiled.on_error
        if self.errors == 0 or rule in ("CONTINUE", "SKIP_FILE_PCT"):
            return False
        if rule == "SKIP_FILE_N":
            return self.errors >= max(1, self.compiled.on_error_limit)
        return True

    def result(self) -> LoadOutcome:
        """The file's load-history record: ON_ERROR applied to the counts of every part."""
        compiled = self.compiled
        failed = _fails(compiled, self.errors, self.rows_parsed, self.rows_good)
        first = self.first
        return LoadOutcome(
            path=self.filename,
            status="LOADED" if self.errors == 0 else "LOAD_FAILED" if failed else "PARTIALLY_LOADED",
            rows_parsed=self.rows_parsed,
            rows_loaded=0 if failed else self.rows_good,
            errors_seen=self.errors,
            error_limit=_error_limit(compiled, self.rows_parsed),
            first_error=first.message if first else None,
            first_error_line=first.line if first else None,
            first_error_character=first.character if first else None,
            first_error_column=first.column if first else None,
            code=first.code if first else None,
            errors=tuple(self.details),
        )


@dataclass
class _FileRun:
    """One file's trip through DuckDB, and the follow-up queries its error rows need."""

    compiled: CompiledCopy
    raw: RawFile
    con: duckdb.DuckDBPyConnection
    filename: str
    params: dict[str, str]
    inp: pa.Table
    source: str
    query: FileQuery
    result: pa.Table
    call_errors: CallErrors

    @classmethod
    def start(
        cls,
        compiled: CompiledCopy,
        raw: RawFile,
        con: duckdb.DuckDBPyConnection,
        filename: str,
        remote: RemoteCalls | None = None,
        info: FileInfo | None = None,
    ) -> _FileRun:
        """Make the external calls, then run the main query."""
        inp, row_sql = input_table(compiled, raw)
        values = query_params(compiled, filename, dt.datetime.now(dt.UTC).isoformat(), info)
        source = source_sql(compiled, row_sql)
        try:
            # A part's first row number tells its calls from the other parts' in the batch ids.
            inp, call_errors = add_call_values(
                compiled, inp, source, values, con, remote, f"{filename}@{raw.row_offset}"
            )
        except duckdb.Error as exc:
            raise FileLoadError(f"Transform failed: {first_line(str(exc))}", file=filename) from exc
        try:
            # Parquet queries are bound here, against the file's own column types.
            query = query_for(compiled, inp, con, row_sql)
            result = _run(con, query.sql, inp, values)
        except duckdb.Error as exc:
            raise FileLoadError(f"Transform failed: {first_line(str(exc))}", file=filename) from exc
        return cls(compiled, raw, con, filename, values, inp, source, query, result, call_errors)

    def sql(self, expr: str, alias: str = "x") -> str:
        """A query evaluating one expression over the file's rows (run with ``self.params``)."""
        return f"SELECT {expr} AS {alias} FROM {self.source}"

    def check_rows(self) -> tuple[np.ndarray, tuple[int, int, int] | None]:
        """Error mask over the rows, and (row, plan, status) of the first error."""
        bad, where = self.bad_rows(1)
        return bad, where[0] if where else None

    def bad_rows(self, limit: int) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
        """Error mask over the rows, and (row, plan, status) of the first ``limit`` bad rows, each
        by the first of its columns in error.

        Conversion failures first get the slow, complete conversion (the result is patched where
        it succeeds).
        """
        n = self.result.num_rows
        statuses = self._statuses()
        for k, plan in enumerate(self.compiled.plans):
            failed = self.call_errors.rows(plan.calls)
            if failed:
                # The call's NULL may have converted cleanly: the row is an error all the same.
                status = statuses.setdefault(k, np.zeros(n, dtype=np.uint8))
                status[failed] = 3
        bad = np.zeros(n, dtype=bool)
        for s in statuses.values():
            bad |= s != 0
        out: list[tuple[int, int, int]] = []
        for row in np.flatnonzero(bad)[: max(0, limit)]:
            k = next(k for k in sorted(statuses) if statuses[k][row])
            out.append((int(row), k, int(statuses[k][row])))
        return bad, out

    def _statuses(self) -> dict[int, np.ndarray]:
        """Per plan with a status in this file, its final status per row (slow path and TRY_ forms
        applied)."""
        statuses: dict[int, np.ndarray] = {}
        for k in self.query.status:
            s = self.result.column(f"e{k}").to_numpy()
            if s.any():
                statuses[k] = np.array(s, dtype=np.uint8)  # writable copy
        for k, s in statuses.items():
            plan = self.compiled.plans[k]
            if self.query.slow[k] is not None and (s == 1).any():
                self._slow_path(k, s)
            if plan.lenient:
                s[s == 1] = 0 if plan.column.nullable else 4
        return statuses

    def _slow_path(self, k: int, status: np.ndarray) -> None:
        """Rows of plan k the main query could not convert: try the full rule, patch what converts."""
        plan = self.compiled.plans[k]
        rows = np.flatnonzero(status == 1)
        target = duckdb_type(plan.column)
        pre = self.query.pre_try[k] or "NULL"
        sql = f"SELECT CAST({self.query.slow[k]} AS {target}) AS v, p FROM ({self.sql(pre, 'p')})"
        offset = self.query.slow_offset[k] if k < len(self.query.slow_offset) else None
        if offset is not None:  # a TIMESTAMP_TZ's offset, read with the same full rule
            sql = f"SELECT v, {offset} AS z FROM ({sql})"
        fixed = _run(self.con, sql, self.inp.take(pa.array(rows)), self.params)
        converted = fixed.column(0).is_valid().to_numpy(zero_copy_only=False)
        if not converted.any():
            return
        mask = np.zeros(len(status), dtype=bool)
        mask[rows[converted]] = True
        self._patch(self.compiled.output.index(k), fixed.column(0), converted, mask)
        if offset is not None:
            name = offset_column(plan.column.name)
            self._patch(self.compiled.schema.get_field_index(name), fixed.column(1), converted, mask)
        status[rows[converted]] = 0

    def _patch(self, position: int, values: pa.ChunkedArray, converted: np.ndarray, mask: np.ndarray) -> None:
        """Output ``o<position>`` with the converted ``values`` put in the rows of ``mask``."""
        name = f"o{position}"
        column = self.result.column(name)
        replacements = values.filter(pa.array(converted)).cast(column.type)
        patched = pc.replace_with_mask(column.combine_chunks(), pa.array(mask), replacements.combine_chunks())
        self.result = self.result.set_column(position, name, patched)

    def describe(self, row: int, plan_index: int, status: int) -> _FirstError:
        """Message, line, character and column of the error at (row, plan, status)."""
        compiled, raw = self.compiled, self.raw
        plan = compiled.plans[plan_index]
        line = int(raw.line_numbers[row].as_py())
        failed = self.call_errors.of(plan.calls, row)
        if failed is not None:
            code, message = CODE_OTHER, failed
        else:
            code, message = self._message(plan_index, status, self.inp.slice(row, 1))
        character = 1
        if compiled.format == "CSV" and raw.data:
            field_no = plan.fields[0] if plan.fields else _header_field(compiled, raw, plan.pre)
            character = field_character(raw, line, field_no)
        return _FirstError(line, character, plan.display, message, code)

    def _message(self, plan_index: int, status: int, one: pa.Table) -> tuple[str, str]:
        """(code, message) of the error of status ``status`` in plan plan_index, on the one-row table."""
        plan = self.compiled.plans[plan_index]
        if status == 4:
            return CODE_NOT_NULL, NOT_NULL_MESSAGE
        if status == 1:
            value = _run(self.con, self.sql(self.query.pre_try[plan_index] or "NULL"), one, self.params)
            binary_format = self.compiled.file_format.binary_format
            return conversion_message(plan.column, value.column(0)[0].as_py(), binary_format)
        exc = _raises(self.con, self.sql(plan.pre or "NULL"), one, self.params)
        return duckdb_message(exc) if exc is not None else (CODE_OTHER, "Expression evaluation failed")


def _record_of(raw: RawFile, row: int) -> str | None:
    """A record without text of its own (a Parquet row) as JSON of its raw values, cut as a line is."""
    values = raw.table.slice(row, 1).to_pylist()
    if not values:
        return None
    return json.dumps(values[0], default=str, ensure_ascii=False)[:REJECTED_RECORD_CHARS]
