"""INFER_SCHEMA, the table function, and CREATE TABLE ... USING TEMPLATE (decision 82).

``SELECT * FROM TABLE(INFER_SCHEMA(LOCATION => '@stage/path', FILE_FORMAT => 'f' [, FILES => (...)]
[, IGNORE_CASE => TRUE | FALSE] [, MAX_FILE_COUNT => n] [, MAX_RECORDS_PER_FILE => n]
[, KIND => 'STANDARD']))`` lists the files at the location, reads each one's columns within bounds
(``floe.file_schema``) and answers Snowflake's rows (``floe.inference``): COLUMN_NAME, TYPE,
NULLABLE, EXPRESSION, FILENAMES, ORDER_ID.

The executor evaluates the call before the query engine sees the query (``inline``), as it runs
SYSTEM$PIPE_FORCE_RESUME: reading a stage is the caller's act, checked with the caller's
privileges, and the engine then gets a literal relation of the rows, never a way to reach S3.

Privileges, through ``services.access.authorize``: USAGE on the file format (the executor's
``resolve_format``), and READ on an internal stage or USAGE on an external one and on its storage
integration, which must still admit the stage's URL (``services.stages.StageFiles.place``, as LIST).
A user stage (``@~``) is the caller's own. Table stages are refused, as Snowflake documents.

Bounds: at most ``MAX_FILES`` files (fewer with MAX_FILE_COUNT), of each CSV or JSON file its first
``SAMPLE_BYTES`` decompressed (and MAX_RECORDS_PER_FILE records), of each Parquet or ORC file its
last ``query.infer_schema_footer_bytes`` (the footer, of which pyarrow is handed the schema alone),
of each Avro file its header; at most ``query.infer_schema_max_columns`` columns in a file and in
the answer, counted before they are made (decision 117); all within the query time limit
(``query.timeout_s``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from floe.aws import AWS_ERRORS
from floe.catalog import Catalog, Column, FileFormat
from floe.catalog.ddl import FORMAT_NAME, check_csv_format
from floe.catalog.names import IDENTIFIER_MAX_LENGTH, Defaults, qualify
from floe.catalog.stage_commands import parse_location
from floe.errors import CompilationError, FileLoadError, SqlError
from floe.file_schema import FileSchemaError, Limits, Readable, file_columns
from floe.inference import OUTPUT_COLUMNS, TEXT, VARIANT, ColumnsOf, InferredColumn, merge
from floe.settings import Settings
from floe.types import parse_column_type
from services.auth import Principal
from services.stages import Place, StagedFile, StageFiles

MAX_FILES = 1000
"""Files one INFER_SCHEMA reads at most (also the most FILES may name, as in Snowflake)."""
SAMPLE_BYTES = 8 << 20
"""Decompressed bytes read from the start of each CSV or JSON file."""
HELD_COLUMNS = 100
"""Columns held over all the files at once, as a multiple of ``query.infer_schema_max_columns``:
each file's columns until they are merged (a few hundred bytes each)."""
FUNCTION = "INFER_SCHEMA"
_ARGS = ("LOCATION", "FILE_FORMAT", "FILES", "IGNORE_CASE", "MAX_FILE_COUNT", "MAX_RECORDS_PER_FILE", "KIND")
_USAGE = (
    "INFER_SCHEMA(LOCATION => '@stage[/path]', FILE_FORMAT => '<file format name>' [, FILES => "
    "('<file>', ...)] [, IGNORE_CASE => TRUE | FALSE] [, MAX_FILE_COUNT => <n>] "
    "[, MAX_RECORDS_PER_FILE => <n>] [, KIND => 'STANDARD'])"
)
_TEMPLATE_FORM = (
    "USING TEMPLATE takes INFER_SCHEMA's output as its documentation writes it: (SELECT "
    "ARRAY_AGG(OBJECT_CONSTRUCT(*)) [WITHIN GROUP (ORDER BY ORDER_ID)] FROM TABLE(INFER_SCHEMA(...))), "
    "OBJECT_CONSTRUCT('COLUMN_NAME', COLUMN_NAME, 'TYPE', TYPE, 'NULLABLE', NULLABLE) in place of "
    'OBJECT_CONSTRUCT(*), or that output as a string (\'[{"COLUMN_NAME": ..., "TYPE": ...}]\'); '
    "Floe evaluates no other query there"
)

ResolveFormat = Callable[[Principal, dict[str, object]], dict[str, object]]
"""``SqlExecutor.resolve_format``: a FORMAT_NAME's options, once USAGE on it is checked."""


@dataclass(frozen=True)
class InferCall:
    """INFER_SCHEMA's arguments."""

    location: str
    file_format: str
    files: tuple[str, ...] | None = None
    ignore_case: bool = False
    max_file_count: int | None = None
    max_records: int | None = None


def limits_of(settings: Settings, max_records: int | None) -> Limits:
    """What INFER_SCHEMA reads of each file, by the settings and MAX_RECORDS_PER_FILE."""
    query = settings.query
    return Limits(SAMPLE_BYTES, max_records, query.infer_schema_footer_bytes, query.infer_schema_max_columns)


def _refusal(message: str) -> CompilationError:
    return CompilationError(f"{message}; {_USAGE}")


def _string(value: exp.Expr, name: str) -> str:
    if not (isinstance(value, exp.Literal) and value.is_string):
        raise _refusal(f"{name} takes a string literal")
    return str(value.this)


def _count(value: exp.Expr, name: str) -> int:
    if not (isinstance(value, exp.Literal) and not value.is_string and str(value.this).isdigit()):
        raise _refusal(f"{name} takes a positive integer")
    n = int(str(value.this)[:12])
    if n < 1:
        raise _refusal(f"{name} takes a positive integer")
    return n


def _files(value: exp.Expr) -> tuple[str, ...]:
    items = value.expressions if isinstance(value, exp.Tuple | exp.Paren | exp.Array) else [value]
    if isinstance(value, exp.Paren):
        items = [value.this]
    names = tuple(_string(v, "FILES") for v in items)
    if not names or len(names) > MAX_FILES:
        raise _refusal(f"FILES names 1 to {MAX_FILES} files")
    return names


def parse_call(call: exp.Anonymous) -> InferCall:
    """INFER_SCHEMA's named arguments, checked; CompilationError names what is wrong."""
    args: dict[str, exp.Expr] = {}
    for kw in call.expressions:
        if not isinstance(kw, exp.Kwarg):
            raise _refusal("INFER_SCHEMA takes named arguments only")
        key = kw.this.name.upper()
        if key not in _ARGS:
            raise _refusal(f"invalid argument {key[:40]} for INFER_SCHEMA")
        args[key] = kw.expression
    if "LOCATION" not in args or "FILE_FORMAT" not in args:
        raise _refusal("INFER_SCHEMA needs LOCATION and FILE_FORMAT")
    if "KIND" in args and (kind := _string(args["KIND"], "KIND").upper()) != "STANDARD":
        raise CompilationError(
            f"INFER_SCHEMA KIND => '{kind[:40]}' is not supported: Floe has Snowflake tables only "
            "(KIND => 'STANDARD', the default), no Iceberg tables"
        )
    ignore = args.get("IGNORE_CASE")
    if ignore is not None and not isinstance(ignore, exp.Boolean):
        raise _refusal("IGNORE_CASE takes TRUE or FALSE")
    return InferCall(
        location=_string(args["LOCATION"], "LOCATION"),
        file_format=_string(args["FILE_FORMAT"], "FILE_FORMAT"),
        files=_files(args["FILES"]) if "FILES" in args else None,
        ignore_case=bool(ignore.this) if ignore is not None else False,
        max_file_count=_count(args["MAX_FILE_COUNT"], "MAX_FILE_COUNT") if "MAX_FILE_COUNT" in args else None,
        max_records=(
            _count(args["MAX_RECORDS_PER_FILE"], "MAX_RECORDS_PER_FILE")
            if "MAX_RECORDS_PER_FILE" in args
            else None
        ),
    )


def is_infer_schema(node: exp.Expr) -> bool:
    """Whether a TABLE(...) holds an INFER_SCHEMA call."""
    return isinstance(node, exp.Anonymous) and node.name.upper() == FUNCTION


# ---------------------------------------------------------------------------------------------
# Staged files as ``floe.file_schema.Source``s


class _StagedSource:
    """One file of an external stage (Floe's S3 client, as LIST lists it) or of an internal one
    (its sealed object, decrypted as it is read)."""

    def __init__(self, files: StageFiles, place: Place, staged: StagedFile) -> None:
        self._files = files
        self._place = place
        self._key = staged.key
        self.path = staged.path
        self.size = staged.size
        self._bodies: list[Any] = []

    def _body(self, **extra: str) -> Any:
        body = self._files.s3().get_object(Bucket=self._place.bucket, Key=self._key, **extra)["Body"]
        self._bodies.append(body)
        return body

    def stream(self) -> Readable:
        """The file's bytes from the start."""
        body = self._body()
        if self._place.internal:
            reader: Readable = self._files.cipher().reader(body, self._key)
            return reader
        return body  # type: ignore[no-any-return]

    def tail(self, n: int) -> bytes:
        """The file's last ``n`` bytes: a ranged read outside, the decrypted stream's end inside."""
        if self.size <= 0:
            return b""
        if not self._place.internal:
            start = max(0, self.size - n)
            return bytes(self._body(Range=f"bytes={start}-{self.size - 1}").read())
        stream, kept = self.stream(), bytearray()
        while block := stream.read(1 << 20):
            kept += block
            if len(kept) > 2 * n:
                del kept[: len(kept) - n]
        return bytes(kept[-n:])

    def close(self) -> None:
        """Let go of the S3 bodies opened (a body read partly holds its connection)."""
        for body in self._bodies:
            body.close()


# ---------------------------------------------------------------------------------------------
# The function


class SchemaInference:
    """INFER_SCHEMA and USING TEMPLATE, for one API process."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        defaults: Defaults,
        stage_files: StageFiles,
        resolve_format: ResolveFormat,
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self.defaults = defaults
        self.stage_files = stage_files
        self.resolve_format = resolve_format

    def infer(self, principal: Principal, call: InferCall) -> list[InferredColumn]:
        """The rows of one INFER_SCHEMA call, read as ``principal`` may."""
        name = str(qualify(call.file_format, self.defaults))
        fmt = FileFormat().merged(self.resolve_format(principal, {FORMAT_NAME: name}))
        kind = fmt.type.upper()
        if kind == "CSV":
            check_csv_format(fmt)  # SKIP_HEADER with PARSE_HEADER, among others
        location = parse_location(call.location, self.defaults, what="INFER_SCHEMA's LOCATION", user=True)
        if location.table:
            raise CompilationError(
                "INFER_SCHEMA supports named stages (internal or external) and user stages only, "
                f"not table stages (@%{location.name.name}): put the files on a named stage"
            )
        place = self.stage_files.place(principal, location, "read")
        chosen = self._chosen(place, call)
        limits = limits_of(self.settings, call.max_records)
        deadline = time.monotonic() + self.settings.query.timeout_s
        found: list[ColumnsOf] = []
        names: set[str] = set()
        held = 0
        for staged in chosen:
            if time.monotonic() > deadline:
                raise SqlError(
                    f"INFER_SCHEMA did not finish within {self.settings.query.timeout_s:g} s "
                    "(query.timeout_s): name fewer files (FILES, MAX_FILE_COUNT, a narrower LOCATION) "
                    "or read fewer records of each (MAX_RECORDS_PER_FILE)",
                    code="000630",
                    sql_state="57014",
                )
            found.append(self._columns(place, staged, fmt, limits))
            held += len(found[-1].columns)
            names.update(c.name.upper() if call.ignore_case else c.name for c in found[-1].columns)
            self._check_columns(place, len(names), held, len(found))
        headerless = kind == "CSV" and not fmt.parse_header
        return merge(
            found,
            ignore_case=call.ignore_case,
            fallback=TEXT if kind == "CSV" else VARIANT,
            positional=headerless,
        )

    def _check_columns(self, place: Place, names: int, held: int, files: int) -> None:
        """Refuse an answer past ``query.infer_schema_max_columns`` before it is made: its names, or
        the columns held until they are merged (``HELD_COLUMNS`` times as many)."""
        most = self.settings.query.infer_schema_max_columns
        if names <= most and held <= HELD_COLUMNS * most:
            return
        found = f"{names} names" if names > most else f"{held} columns, counted in each file"
        raise SqlError(
            f"the {files} files read at {place.label}/{place.path} have more than {most} columns "
            f"between them ({found}), the most INFER_SCHEMA answers (query.infer_schema_max_columns): "
            "name fewer files (FILES, MAX_FILE_COUNT, a narrower LOCATION), or raise "
            "query.infer_schema_max_columns",
            code="000603",
            sql_state="54000",
        )

    def _chosen(self, place: Place, call: InferCall) -> list[StagedFile]:
        """The files to read: FILES (each must be there), else every file at the location, in key
        order; MAX_FILE_COUNT of them, at most MAX_FILES; zero-byte files hold no columns."""
        listed = [f for f in self.stage_files.files(place, None) if not f.key.endswith("/")]
        if call.files is not None:
            folder = place.path if not place.path or place.path.endswith("/") else place.path + "/"
            by_path = {f.path: f for f in listed}
            chosen = []
            for name in call.files:
                path = folder + name.lstrip("/")
                if path not in by_path:
                    raise SqlError(f"Remote file '{place.label}/{path}' was not found.", code="002003")
                chosen.append(by_path[path])
        else:
            chosen = listed
        if call.max_file_count is not None:
            chosen = chosen[: call.max_file_count]
        if len(chosen) > MAX_FILES:
            raise SqlError(
                f"{place.label}/{place.path} holds more than {MAX_FILES} files, the most INFER_SCHEMA "
                "reads: give MAX_FILE_COUNT, FILES, or a narrower LOCATION",
                code="091003",
                sql_state="22000",
            )
        return [f for f in chosen if f.size > 0]

    def _columns(self, place: Place, staged: StagedFile, fmt: FileFormat, limits: Limits) -> ColumnsOf:
        source = _StagedSource(self.stage_files, place, staged)
        try:
            return file_columns(source, fmt, limits)
        except FileSchemaError as exc:
            raise SqlError(f"{exc} (file '{staged.path}')", code="100000", sql_state="22000") from None
        except FileLoadError as exc:  # an internal stage's file that does not decrypt
            raise SqlError(
                f"{exc.message} (file '{staged.path}')", code="100000", sql_state="22000"
            ) from None
        except AWS_ERRORS as exc:
            text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            raise SqlError(
                f"Failure using stage area. Cause: [{place.label}/{staged.path}: {text}]",
                code="091003",
                sql_state="22000",
            ) from exc
        finally:
            source.close()

    # -------------------------------------------------------------------------- in queries

    def inline(self, query: exp.Expr, principal: Principal) -> exp.Expr:
        """``query`` with each TABLE(INFER_SCHEMA(...)) replaced by its rows, as a literal relation
        (a subquery over VALUES, keeping the call's alias) the query engine runs like any other."""
        if not any(is_infer_schema(fn.this) for fn in query.find_all(exp.TableFromRows)):
            return query
        query = query.copy()
        for fn in [f for f in query.find_all(exp.TableFromRows) if is_infer_schema(f.this)]:
            rows = self.infer(principal, parse_call(fn.this))
            alias = fn.args.get("alias")
            fn.replace(relation(rows, alias.copy() if isinstance(alias, exp.TableAlias) else None))
        return query

    # ---------------------------------------------------------------------- USING TEMPLATE

    def template_columns(self, principal: Principal, template: exp.Expr) -> list[Column]:
        """The columns CREATE TABLE ... USING TEMPLATE creates: each object's COLUMN_NAME (its case
        kept), TYPE and NULLABLE (TRUE when absent)."""
        if isinstance(template, exp.Literal) and template.is_string:
            try:
                objects = json.loads(str(template.this))
            except ValueError as exc:
                raise CompilationError(f"USING TEMPLATE's string is not JSON: {exc}") from None
        else:
            objects = self._evaluate(principal, template)
        return template_columns(objects)

    def _evaluate(self, principal: Principal, template: exp.Expr) -> list[dict[str, Any]]:
        """The documented template query, evaluated here (``_TEMPLATE_FORM``)."""
        select = template.this if isinstance(template, exp.Subquery) else template
        if not isinstance(select, exp.Select) or len(select.expressions) != 1:
            raise CompilationError(_TEMPLATE_FORM)
        extra = [k for k, v in select.args.items() if v and k not in ("expressions", "from", "from_")]
        source = select.args.get("from_") or select.args.get("from")
        fn = source.this if isinstance(source, exp.From) else None
        if extra or not isinstance(fn, exp.TableFromRows) or not is_infer_schema(fn.this):
            raise CompilationError(_TEMPLATE_FORM)
        aggregate, order = select.expressions[0], None
        if isinstance(aggregate, exp.WithinGroup):
            aggregate, order = aggregate.this, aggregate.expression
        if not isinstance(aggregate, exp.ArrayAgg):
            raise CompilationError(_TEMPLATE_FORM)
        keys = _object_keys(aggregate.this)
        rows = [r.row() for r in self.infer(principal, parse_call(fn.this))]
        if order is not None:
            rows = _ordered(rows, order)
        return [{key: row[column] for key, column in keys} for row in rows]


def _output_column(node: exp.Expr) -> str:
    """The INFER_SCHEMA column a template's column reference names (any case, unquoted)."""
    name = node.name.upper() if isinstance(node, exp.Column) and not node.table else ""
    if name not in OUTPUT_COLUMNS:
        raise CompilationError(f"{_TEMPLATE_FORM} (INFER_SCHEMA has the columns {', '.join(OUTPUT_COLUMNS)})")
    return name


def _object_keys(node: exp.Expr) -> list[tuple[str, str]]:
    """OBJECT_CONSTRUCT's (key, INFER_SCHEMA column) pairs: all of them for ``*``."""
    if isinstance(node, exp.StarMap):
        return [(c, c) for c in OUTPUT_COLUMNS]
    if not isinstance(node, exp.Struct):
        raise CompilationError(_TEMPLATE_FORM)
    pairs = []
    for item in node.expressions:
        key = item.this if isinstance(item, exp.PropertyEQ) else None
        if not (isinstance(key, exp.Literal) and key.is_string):
            raise CompilationError(_TEMPLATE_FORM)
        pairs.append((str(key.this), _output_column(item.expression)))
    return pairs


def _ordered(rows: list[dict[str, Any]], order: exp.Expr) -> list[dict[str, Any]]:
    """WITHIN GROUP (ORDER BY col [ASC | DESC], ...)."""
    if not isinstance(order, exp.Order):
        raise CompilationError(_TEMPLATE_FORM)
    for ordered in reversed(order.expressions):
        column = _output_column(ordered.this if isinstance(ordered, exp.Ordered) else ordered)
        descending = bool(ordered.args.get("desc")) if isinstance(ordered, exp.Ordered) else False
        rows = sorted(rows, key=lambda r: (r[column] is None, r[column]), reverse=descending)
    return rows


def template_columns(objects: Any) -> list[Column]:
    """Table columns from INFER_SCHEMA's objects, as USING TEMPLATE reads them."""
    if not isinstance(objects, list) or not objects:
        raise CompilationError(
            "USING TEMPLATE found no columns: INFER_SCHEMA found no file with columns at its LOCATION"
        )
    columns: list[Column] = []
    for obj in objects:
        name, type_text = (obj.get("COLUMN_NAME"), obj.get("TYPE")) if isinstance(obj, dict) else (None, None)
        if not isinstance(name, str) or not isinstance(type_text, str):
            raise CompilationError("each object of USING TEMPLATE needs COLUMN_NAME and TYPE strings")
        if not name or len(name) > IDENTIFIER_MAX_LENGTH:
            raise CompilationError(f"invalid column name '{name[:40]}' in USING TEMPLATE")
        try:
            kind, precision, scale = parse_column_type(exp.DataType.build(type_text, dialect="snowflake"))
        except (SqlglotError, ValueError):
            raise CompilationError(f"Unsupported data type '{type_text[:80]}' in USING TEMPLATE") from None
        nullable = obj.get("NULLABLE", True)
        if any(c.name == name for c in columns):
            raise CompilationError(f"duplicate column name '{name}' in USING TEMPLATE")
        columns.append(
            Column(name=name, type=kind, precision=precision, scale=scale, nullable=nullable is not False)
        )
    return columns


# ---------------------------------------------------------------------------------------------
# The rows as a relation for the query engine

_NULL_ROW = (
    "(CAST(NULL AS TEXT), CAST(NULL AS TEXT), CAST(NULL AS BOOLEAN), CAST(NULL AS TEXT), "
    "CAST(NULL AS TEXT), CAST(NULL AS INT))"
)
"""A first row of the right types, so the columns are typed even with no other row; filtered out."""


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    return exp.Literal.string(str(value)).sql("snowflake")


def relation(rows: list[InferredColumn], alias: exp.TableAlias | None) -> exp.Subquery:
    """INFER_SCHEMA's rows as ``(SELECT ... FROM (VALUES ...))``, its columns named as Snowflake's,
    under ``alias`` (the call's)."""
    values = [_NULL_ROW] + ["(" + ", ".join(_literal(v) for v in r.row().values()) + ")" for r in rows]
    names = ", ".join(f'"{c}"' for c in OUTPUT_COLUMNS)
    text = (
        f'SELECT {names} FROM (VALUES {", ".join(values)}) AS "__floe_infer"({names}) '
        f'WHERE "ORDER_ID" IS NOT NULL'
    )
    select = sqlglot.parse_one(text, read="snowflake")
    return exp.Subquery(this=select, alias=alias) if alias is not None else exp.Subquery(this=select)
