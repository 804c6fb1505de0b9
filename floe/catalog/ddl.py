"""Snowflake SQL statements Floe understands, parsed into plain statement objects.

sqlglot's Snowflake dialect parses stages, tables, COPY INTO and queries. It does not cover the
pipe header (``CREATE PIPE ... AS``), SHOW, DESC, DROP of pipes/stages or ALTER PIPE, so those
few headers are matched by hand and everything after ``AS`` goes back to sqlglot. Users, roles
and grants are parsed by hand in ``floe.catalog.access``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from floe.catalog import access
from floe.catalog.access import AccessStatement
from floe.catalog.models import Column, FileFormat, OnError
from floe.catalog.names import QNAME, check_identifier

# Callers import these from here, as they did before the names had a module of their own.
from floe.catalog.names import Defaults as Defaults
from floe.catalog.names import Name as Name
from floe.catalog.names import qualify as qualify
from floe.errors import CompilationError
from floe.patterns import compile_pattern
from floe.types import parse_column_type

FORMAT_OPTIONS: dict[str, str] = {
    "TYPE": "type",
    "COMPRESSION": "compression",
    "FIELD_DELIMITER": "field_delimiter",
    "RECORD_DELIMITER": "record_delimiter",
    "SKIP_HEADER": "skip_header",
    "FIELD_OPTIONALLY_ENCLOSED_BY": "field_optionally_enclosed_by",
    "NULL_IF": "null_if",
    "EMPTY_FIELD_AS_NULL": "empty_field_as_null",
    "TRIM_SPACE": "trim_space",
    "ERROR_ON_COLUMN_COUNT_MISMATCH": "error_on_column_count_mismatch",
    "SKIP_BLANK_LINES": "skip_blank_lines",
    "STRIP_OUTER_ARRAY": "strip_outer_array",
    "DATE_FORMAT": "date_format",
    "TIMESTAMP_FORMAT": "timestamp_format",
}


@dataclass
class CreateStage:
    """CREATE STAGE."""

    name: Name
    url: str
    file_format: dict[str, object]
    replace: bool = False
    if_not_exists: bool = False


@dataclass
class CreateTable:
    """CREATE TABLE."""

    name: Name
    columns: list[Column]
    replace: bool = False
    if_not_exists: bool = False


@dataclass
class CreatePipe:
    """CREATE PIPE; the stage reference is resolved (and formats merged) by the executor."""

    name: Name
    auto_ingest: bool
    table: Name
    columns: list[str] | None
    select: list[str] | None
    stage: Name
    path: str
    file_format: dict[str, object]
    on_error: OnError
    on_error_limit: float
    pattern: str | None
    copy_sql: str
    replace: bool = False
    if_not_exists: bool = False
    comment: str | None = None


@dataclass
class Show:
    """SHOW STAGES | TABLES | PIPES [LIKE '...']."""

    kind: str
    like: str | None = None


@dataclass
class Describe:
    """DESC[RIBE] STAGE | TABLE | PIPE name."""

    kind: str
    name: Name


@dataclass
class Drop:
    """DROP STAGE | TABLE | PIPE [IF EXISTS] name."""

    kind: str
    name: Name
    if_exists: bool = False


@dataclass
class AlterPipe:
    """ALTER PIPE name SET PIPE_EXECUTION_PAUSED = TRUE | FALSE."""

    name: Name
    paused: bool


@dataclass
class Query:
    """Any SELECT; run by the query engine."""

    expression: exp.Expr
    sql: str


Statement = (
    CreateStage | CreateTable | CreatePipe | Show | Describe | Drop | AlterPipe | Query | AccessStatement
)

_KINDS = {
    "STAGE": "STAGE",
    "STAGES": "STAGE",
    "TABLE": "TABLE",
    "TABLES": "TABLE",
    "PIPE": "PIPE",
    "PIPES": "PIPE",
}

# Every regex below sees user SQL, so each must run in linear time under Python's backtracking
# engine (issue 9: `(?P<props>.*?)\s+AS\s+` took 9.8 s on 60,000 spaces). The rules that keep
# them linear: each is anchored (``match``/``fullmatch`` on text ``parse`` has stripped), no `.*`
# is followed by anything that could fail, and no two neighbouring quantified parts can match the
# same characters (no `\s*;?\s*`), so a failure gives back each character once, not once per
# start. tests/floe/catalog/test_parse_linear.py times every one on 100k-character inputs.
_PIPE_HEAD = re.compile(
    rf"CREATE\s+(?P<replace>OR\s+REPLACE\s+)?PIPE\s+(?P<ine>IF\s+NOT\s+EXISTS\s+)?(?P<name>{QNAME})",
    re.IGNORECASE,
)
_PIPE_PROP = re.compile(
    r"\s+(?P<key>AUTO_INGEST|COMMENT|INTEGRATION|AWS_SNS_TOPIC|ERROR_INTEGRATION)\s*=\s*"
    r"(?P<value>'[^']*(?:''[^']*)*'|\w+)",
    re.IGNORECASE,
)
_PIPE_AS = re.compile(r"\s+AS\s", re.IGNORECASE)
_SHOW = re.compile(
    r"SHOW\s+(?P<kind>STAGES|TABLES|PIPES)(?:\s+LIKE\s+'(?P<like>[^']*)')?(?:\s+IN\s.*)?", re.I | re.DOTALL
)
_DESC = re.compile(rf"DESC(?:RIBE)?\s+(?P<kind>STAGE|TABLE|PIPE)\s+(?P<name>{QNAME})", re.I)
_DROP = re.compile(rf"DROP\s+(?P<kind>STAGE|TABLE|PIPE)\s+(?P<ie>IF\s+EXISTS\s+)?(?P<name>{QNAME})", re.I)
_ALTER_PIPE = re.compile(
    rf"ALTER\s+PIPE\s+(?:IF\s+EXISTS\s+)?(?P<name>{QNAME})\s+SET\s+PIPE_EXECUTION_PAUSED\s*=\s*"
    r"(?P<value>TRUE|FALSE)",
    re.I,
)
_STAGE_REF = re.compile(rf"@(?P<name>{QNAME})(?P<path>/.*)?", re.DOTALL)
_ON_ERROR = re.compile(r"^(CONTINUE|SKIP_FILE|ABORT_STATEMENT|SKIP_FILE_(\d+(?:\.\d+)?)(%?))$", re.I)


def qualify_table(table: exp.Table, defaults: Defaults) -> Name:
    """A table reference's full name: quoted parts as written, unquoted ones upper-cased."""
    parts = [p for p in (table.catalog, table.db, table.name) if p]
    idents = [i for i in table.find_all(exp.Identifier)]
    quoted = {i.name for i in idents if i.quoted}
    norm = [p if p in quoted else p.upper() for p in parts]
    while len(norm) < 3:
        norm.insert(0, defaults.schema if len(norm) == 1 else defaults.database)
    return Name(*map(check_identifier, norm))


def _value(node: exp.Expr | None) -> object:
    """A Python value from an option's value node."""
    if node is None:
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = str(node.this)
        return int(text) if re.fullmatch(r"-?\d+", text) else float(text)
    if isinstance(node, exp.Tuple | exp.Paren | exp.Array):
        items = node.expressions if not isinstance(node, exp.Paren) else [node.this]
        return [_value(i) for i in items]
    if isinstance(node, exp.Null):
        return None
    return node.name if isinstance(node, exp.Var | exp.Identifier | exp.Column) else node.sql("snowflake")


def format_options(props: list[exp.Expr]) -> dict[str, object]:
    """FILE_FORMAT = (...) options as FileFormat field names and values."""
    out: dict[str, object] = {}
    for prop in props:
        if not isinstance(prop, exp.Property):
            continue
        key = prop.name.upper()
        if key == "FORMAT_NAME":
            raise CompilationError(
                "named file formats (FORMAT_NAME) are not supported; give the options inline"
            )
        if key not in FORMAT_OPTIONS:
            raise CompilationError(
                f"invalid file format option '{key}'. Supported: {', '.join(sorted(FORMAT_OPTIONS))}"
            )
        value = _value(prop.args.get("value"))
        fieldname = FORMAT_OPTIONS[key]
        if fieldname == "type" and isinstance(value, str):
            value = value.upper()
            if value not in ("CSV", "JSON", "PARQUET"):
                raise CompilationError(f"file format TYPE = {value} is not supported (CSV, JSON, PARQUET)")
        if fieldname == "compression" and isinstance(value, str):
            value = value.upper()
        if fieldname == "field_optionally_enclosed_by" and isinstance(value, str) and value.upper() == "NONE":
            value = None
        if fieldname == "null_if" and not isinstance(value, list):
            value = [value]
        if fieldname == "null_if" and isinstance(value, list):
            value = ["" if v is None else str(v) for v in value]
        if isinstance(value, str) and value.upper() in ("TRUE", "FALSE") and fieldname not in ("null_if",):
            value = value.upper() == "TRUE"
        out[fieldname] = value
    FileFormat.model_validate(out)  # reject bad values at DDL time, not at load time
    return out


def parse_on_error(text: str) -> tuple[OnError, float]:
    """ON_ERROR value as (rule, limit)."""
    m = _ON_ERROR.match(text.strip())
    if not m:
        raise CompilationError(f"invalid value '{text}' for ON_ERROR")
    word = m.group(1).upper()
    if word == "ABORT_STATEMENT":
        raise CompilationError(
            "ON_ERROR = ABORT_STATEMENT is not allowed in a pipe (use SKIP_FILE or CONTINUE)"
        )
    if m.group(2):
        return ("SKIP_FILE_PCT" if m.group(3) else "SKIP_FILE_N"), float(m.group(2))
    return ("CONTINUE" if word == "CONTINUE" else "SKIP_FILE"), 0.0


def _parse_stage_ref(text: str, defaults: Defaults) -> tuple[Name, str]:
    m = _STAGE_REF.fullmatch(text.strip())
    if not m:
        raise CompilationError(f"invalid stage reference '{text}'; expected @stage[/path]")
    path = (m.group("path") or "").lstrip("/")
    if path and not path.endswith("/"):
        path += "/"
    return qualify(m.group("name"), defaults), path


def parse_copy(sql: str, defaults: Defaults) -> dict[str, object]:
    """COPY INTO ... as the keyword arguments of CreatePipe (minus the pipe's own)."""
    try:
        node = sqlglot.parse_one(sql, read="snowflake")
    except (ParseError, TokenError) as exc:
        raise CompilationError(f"syntax error in COPY INTO: {exc}") from exc
    if not isinstance(node, exp.Copy):
        raise CompilationError("a pipe must be defined AS COPY INTO <table> FROM ...")
    table, columns = _copy_target(node, defaults)
    select, source = _copy_source(node)
    stage, path = _parse_stage_ref(source.this.name, defaults)
    options = _copy_options(node)
    if select is not None and columns is not None and len(columns) != len(select):
        raise CompilationError(
            f"Insert value list does not match column list expecting {len(columns)} but got {len(select)}"
        )
    return {
        "table": table,
        "columns": columns,
        "select": select,
        "stage": stage,
        "path": path,
        "file_format": options.file_format,
        "on_error": options.on_error,
        "on_error_limit": options.on_error_limit,
        "pattern": options.pattern,
        "copy_sql": sql.strip().rstrip(";"),
    }


def _copy_target(node: exp.Copy, defaults: Defaults) -> tuple[Name, list[str] | None]:
    """The table COPY INTO loads, and its column list when one is given."""
    target = node.this
    columns: list[str] | None = None
    if isinstance(target, exp.Schema):
        columns = [i.name if i.quoted else i.name.upper() for i in target.expressions]
        target = target.this
    return qualify_table(target, defaults), columns


def _copy_source(node: exp.Copy) -> tuple[list[str] | None, exp.Table]:
    """The stage table COPY reads FROM, and the transform's SELECT list when it reads through one."""
    files = node.args.get("files") or []
    if len(files) != 1:
        raise CompilationError("COPY INTO must read FROM exactly one stage")
    source = files[0]
    select: list[str] | None = None
    if isinstance(source, exp.Subquery):
        select, source = _copy_transform(source)
    if not isinstance(source, exp.Table) or not str(source.this.name if source.this else "").startswith("@"):
        raise CompilationError("COPY INTO must read FROM @stage or FROM (SELECT ... FROM @stage)")
    return select, source


def _copy_transform(subquery: exp.Subquery) -> tuple[list[str], exp.Expr | None]:
    """A COPY transform's SELECT list as Snowflake SQL, and what it selects FROM."""
    query = subquery.this
    if not isinstance(query, exp.Select):
        raise CompilationError("the COPY transform must be a simple SELECT")
    for clause in ("where", "group", "order", "limit", "joins", "having", "distinct"):
        if query.args.get(clause):
            raise CompilationError(f"{clause.upper()} is not supported in a COPY transform")
    select = [(e.this if isinstance(e, exp.Alias) else e).sql("snowflake") for e in query.expressions]
    from_ = query.args.get("from_") or query.args.get("from")
    return select, from_.this if from_ is not None else None


@dataclass
class _CopyOptions:
    """The COPY options a pipe keeps, with Snowpipe's defaults (ON_ERROR = SKIP_FILE)."""

    file_format: dict[str, object]
    on_error: OnError = "SKIP_FILE"
    on_error_limit: float = 0.0
    pattern: str | None = None


_NOT_IN_PIPES = ("FILES", "SIZE_LIMIT", "PURGE", "FORCE", "RETURN_FAILED_ONLY", "VALIDATION_MODE")
_NOT_YET = ("MATCH_BY_COLUMN_NAME", "TRUNCATECOLUMNS", "ENFORCE_LENGTH")


def _copy_options(node: exp.Copy) -> _CopyOptions:
    """FILE_FORMAT, ON_ERROR and PATTERN, in the order written (a repeated option: the last wins)."""
    options = _CopyOptions(file_format={})
    for param in node.args.get("params") or []:
        key = param.name.upper()
        if key == "FILE_FORMAT":
            options.file_format = format_options(param.expressions)
        elif key == "ON_ERROR":
            options.on_error, options.on_error_limit = parse_on_error(
                str(_value(param.args.get("expression")))
            )
        elif key == "PATTERN":
            options.pattern = str(_value(param.args.get("expression")))
            compile_pattern(options.pattern)  # refuses what RE2 cannot run, saying what to change
        else:
            raise _refused_copy_option(key)
    return options


def _refused_copy_option(key: str) -> CompilationError:
    """Why COPY option ``key`` is refused: a pipe never takes it, Floe lacks it, or it is unknown."""
    if key in _NOT_IN_PIPES:
        return CompilationError(f"COPY option {key} is not allowed in a pipe definition")
    if key in _NOT_YET:
        return CompilationError(f"COPY option {key} is not supported by Floe yet")
    return CompilationError(f"invalid COPY option '{key}'")


def _parse_pipe(text: str, m: re.Match[str], defaults: Defaults) -> CreatePipe:
    """CREATE PIPE: the header, then properties one at a time from left to right, up to AS."""
    props: dict[str, str] = {}
    pos = m.end()
    while (head := _PIPE_AS.match(text, pos)) is None:
        pm = _PIPE_PROP.match(text, pos)
        if not pm:
            near = text[pos:].lstrip()[:40]
            raise CompilationError(
                f"syntax error in CREATE PIPE near '{near}'; expected pipe properties "
                "(AUTO_INGEST = TRUE, COMMENT = '...') and then AS COPY INTO <table> FROM @<stage>"
                if near
                else "CREATE PIPE needs a definition: CREATE PIPE <name> AS COPY INTO <table> FROM @<stage>"
            )
        props[pm.group("key").upper()] = pm.group("value")
        pos = pm.end()
    auto = props.get("AUTO_INGEST", "FALSE").upper()
    if auto not in ("TRUE", "FALSE"):
        raise CompilationError(f"invalid value '{auto}' for AUTO_INGEST")
    comment = props.get("COMMENT")
    copy = parse_copy(text[head.end() :], defaults)
    return CreatePipe(
        name=qualify(m.group("name"), defaults),
        auto_ingest=auto == "TRUE",
        replace=bool(m.group("replace")),
        if_not_exists=bool(m.group("ine")),
        comment=comment[1:-1].replace("''", "'") if comment else None,
        **copy,  # type: ignore[arg-type]
    )


def _parse_create(node: exp.Create, defaults: Defaults) -> Statement:
    kind = str(node.args.get("kind") or "").upper()
    replace = bool(node.args.get("replace"))
    ine = bool(node.args.get("exists"))
    if kind == "TABLE":
        return _parse_create_table(node, defaults, replace, ine)
    if kind == "STAGE":
        return _parse_create_stage(node, defaults, replace, ine)
    raise CompilationError(f"CREATE {kind} is not supported")


def _parse_create_table(node: exp.Create, defaults: Defaults, replace: bool, ine: bool) -> CreateTable:
    schema = node.this
    if not isinstance(schema, exp.Schema):
        raise CompilationError("CREATE TABLE needs a column list (CTAS and LIKE are not supported)")
    cols = [_column(cdef) for cdef in schema.expressions]
    if len({c.name for c in cols}) != len(cols):
        raise CompilationError("duplicate column name in CREATE TABLE")
    return CreateTable(qualify_table(schema.this, defaults), cols, replace, ine)


def _column(cdef: exp.Expr) -> Column:
    """One column definition of CREATE TABLE."""
    if not isinstance(cdef, exp.ColumnDef):
        raise CompilationError(f"unsupported table element: {cdef.sql('snowflake')}")
    dtype = cdef.args.get("kind")
    if dtype is None:
        raise CompilationError(f"column {cdef.name} needs a type")
    ctype, precision, scale = parse_column_type(dtype)
    not_null = any(isinstance(c.args.get("kind"), exp.NotNullColumnConstraint) for c in cdef.constraints)
    ident = cdef.this
    name = ident.name if getattr(ident, "quoted", False) else ident.name.upper()
    return Column(name=name, type=ctype, precision=precision, scale=scale, nullable=not not_null)


def _parse_create_stage(node: exp.Create, defaults: Defaults, replace: bool, ine: bool) -> CreateStage:
    url = ""
    fmt: dict[str, object] = {}
    for prop in node.args["properties"].expressions if node.args.get("properties") else []:
        if isinstance(prop, exp.FileFormatProperty):
            fmt = format_options(prop.expressions)
            continue
        name = prop.name.upper() if isinstance(prop, exp.Property) else None
        if name == "URL":
            url = str(_value(prop.args.get("value")))
        elif name not in ("COMMENT", "CREDENTIALS"):
            raise CompilationError(f"unsupported stage property: {prop.sql('snowflake')}")
    if not url.lower().startswith("s3://"):
        raise CompilationError(
            "only external stages are supported: CREATE STAGE s URL = 's3://bucket/prefix/'"
        )
    return CreateStage(qualify_table(node.this, defaults), url, fmt, replace, ine)


def parse(sql: str, defaults: Defaults | None = None) -> Statement:
    """Parse one statement."""
    defaults = defaults or Defaults()
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise CompilationError("empty SQL statement")
    if m := _PIPE_HEAD.match(text):
        return _parse_pipe(text, m, defaults)
    if m := _SHOW.fullmatch(text):
        return Show(_KINDS[m.group("kind").upper()], m.group("like"))
    if m := _DESC.fullmatch(text):
        return Describe(_KINDS[m.group("kind").upper()], qualify(m.group("name"), defaults))
    if m := _DROP.fullmatch(text):
        return Drop(_KINDS[m.group("kind").upper()], qualify(m.group("name"), defaults), bool(m.group("ie")))
    if m := _ALTER_PIPE.fullmatch(text):
        return AlterPipe(qualify(m.group("name"), defaults), m.group("value").upper() == "TRUE")
    if (stmt := access.parse(text, defaults)) is not None:
        return stmt
    try:
        node = sqlglot.parse_one(text, read="snowflake")
    except ParseError as exc:
        raise CompilationError(
            f"syntax error: {exc.errors[0]['description'] if exc.errors else exc}"
        ) from exc
    except TokenError as exc:  # an unterminated string or quoted name
        raise CompilationError(f"syntax error: {exc}") from exc
    if isinstance(node, exp.Create):
        return _parse_create(node, defaults)
    if isinstance(node, exp.Query):
        return Query(node, text)
    raise CompilationError(f"unsupported statement: {text.split()[0].upper()} (see `floe sql --help`)")
