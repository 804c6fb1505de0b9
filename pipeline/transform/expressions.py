"""The expression compiler: one SELECT item of a pipe's COPY, in Snowflake SQL, as DuckDB SQL over
the raw table.

sqlglot parses the item (Snowflake dialect) and generates DuckDB SQL, after Floe rewrites the parts
DuckDB has no equivalent for: ``$n`` (raw column ``c<n>``; for JSON the document; for Parquet
``$1:col`` is the file column ``col``, matched case-insensitively), ``$1:a.b`` paths (text
extraction unless the value goes into a VARIANT), METADATA$ columns, and conversions (``::T``, CAST,
TO_DATE, TO_NUMBER...) which get Snowflake's input rules (``conversion.nested_conversion``).
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from floe.catalog.calls import call_key, site_of
from floe.catalog.models import Column, ExternalFunction, FileFormat
from floe.errors import CompilationError
from floe.types import parse_column_type
from pipeline.formats import COLUMNAR_FORMATS
from pipeline.transform.conversion import nested_conversion
from pipeline.transform.dialect import DIALECT, FloeFragment, ident
from pipeline.transform.plan import (
    CONTENT_KEY_COLUMN,
    EXTERNAL_COLUMN_PREFIX,
    FILENAME_COLUMN,
    LAST_MODIFIED_COLUMN,
    PARQUET_ROW_COLUMN,
    ROW_NUMBER_COLUMN,
    SCAN_TIME_COLUMN,
    ExternalCall,
)

_FILE_INFO = ("METADATA$FILE_CONTENT_KEY", "METADATA$FILE_LAST_MODIFIED")
_METADATA = {
    "METADATA$FILENAME": ident(FILENAME_COLUMN),
    "METADATA$FILE_ROW_NUMBER": ident(ROW_NUMBER_COLUMN),
    "METADATA$START_SCAN_TIME": ident(SCAN_TIME_COLUMN),
    "METADATA$FILE_CONTENT_KEY": ident(CONTENT_KEY_COLUMN),
    "METADATA$FILE_LAST_MODIFIED": ident(LAST_MODIFIED_COLUMN),
}
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg)
_COMPARISON = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_VOLATILE_NODES: tuple[type[exp.Expr], ...] = (exp.Rand, exp.Uuid)
_VOLATILE_NAMES = {"RANDOM", "UUID_STRING", "RANDSTR", "SEQ1", "SEQ2", "SEQ4", "SEQ8"}
_FORBIDDEN: tuple[type[exp.Expr], ...] = (exp.Subquery, exp.Select, exp.AggFunc, exp.Window, exp.Star)
# Functions whose argument is a JSON value (a path below them extracts JSON, not text).
_JSON_CONSUMERS: tuple[type[exp.Expr], ...] = (
    exp.ArraySize,
    exp.JSONExtract,
    exp.GetExtract,
    exp.Bracket,
)
_JSON_CONSUMER_NAMES = {
    "IS_ARRAY",
    "IS_OBJECT",
    "IS_NULL_VALUE",
    "TYPEOF",
    "OBJECT_KEYS",
    "TO_ARRAY",
    "TO_OBJECT",
}
_ANON_CONVERSIONS: dict[str, tuple[str, bool]] = {
    "TO_DATE": ("DATE", False),
    "DATE": ("DATE", False),
    "TRY_TO_DATE": ("DATE", True),
    "TO_TIMESTAMP": ("TIMESTAMP_NTZ", False),
    "TO_TIMESTAMP_NTZ": ("TIMESTAMP_NTZ", False),
    "TRY_TO_TIMESTAMP": ("TIMESTAMP_NTZ", True),
    "TRY_TO_TIMESTAMP_NTZ": ("TIMESTAMP_NTZ", True),
    "TO_TIMESTAMP_TZ": ("TIMESTAMP_TZ", False),
    "TO_TIMESTAMP_LTZ": ("TIMESTAMP_LTZ", False),
    "TRY_TO_TIMESTAMP_TZ": ("TIMESTAMP_TZ", True),
    "TRY_TO_TIMESTAMP_LTZ": ("TIMESTAMP_LTZ", True),
    "TO_TIME": ("TIME", False),
    "TIME": ("TIME", False),
    "TRY_TO_TIME": ("TIME", True),
    "TO_BINARY": ("BINARY", False),
    "TRY_TO_BINARY": ("BINARY", True),
    "TO_VARIANT": ("VARIANT", False),
    "TO_BOOLEAN": ("BOOLEAN", False),
    "TRY_TO_BOOLEAN": ("BOOLEAN", True),
    "TO_DOUBLE": ("FLOAT", False),
    "TRY_TO_DOUBLE": ("FLOAT", True),
}

_ColumnType = tuple[str, int | None, int | None]
_ConversionCall = tuple[exp.Expr, _ColumnType, bool]


def _int_arg(node: exp.Expr, name: str, default: int) -> int:
    value = node.args.get(name)
    if value is None:
        return default
    if isinstance(value, exp.Literal) and not value.is_string:
        return int(value.this)
    raise CompilationError(f"{name} of {node.sql('snowflake')} must be an integer constant")


def _conversion_of(node: exp.Expr) -> _ConversionCall | None:
    """If node converts one value to a Floe type: (argument, (type, precision, scale), is TRY_ form)."""
    if isinstance(node, exp.Cast):  # also TryCast
        to = node.args.get("to")
        if not isinstance(to, exp.DataType):
            return None
        safe = isinstance(node, exp.TryCast) or bool(node.args.get("safe"))
        return node.this, parse_column_type(to), safe
    if isinstance(node, exp.ToNumber) and node.args.get("format") is None:
        precision = _int_arg(node, "precision", 38)
        scale = _int_arg(node, "scale", 0)
        return node.this, ("NUMBER", precision, scale), bool(node.args.get("safe"))
    if isinstance(node, exp.ToDouble) and node.args.get("format") is None:
        return node.this, ("FLOAT", None, None), bool(node.args.get("safe"))
    if isinstance(node, exp.TsOrDsToTime) and node.args.get("format") is None:  # TO_TIME, TRY_TO_TIME
        return node.this, ("TIME", None, None), bool(node.args.get("safe"))
    if isinstance(node, exp.ToBinary) and node.args.get("format") is None:  # TO_BINARY, TRY_TO_BINARY
        return node.this, ("BINARY", None, None), bool(node.args.get("safe"))
    if isinstance(node, exp.ToBoolean):
        return node.this, ("BOOLEAN", None, None), bool(node.args.get("safe"))
    if isinstance(node, exp.ToChar) and node.args.get("format") is None:
        return node.this, ("VARCHAR", None, None), False
    if isinstance(node, exp.Anonymous):
        name = str(node.name).upper()
        if name in _ANON_CONVERSIONS and len(node.expressions) == 1:
            ctype, safe = _ANON_CONVERSIONS[name]
            return node.expressions[0], (ctype, None, None), safe
    return None


def _same_type(conv: _ColumnType, col: Column) -> bool:
    """Whether a conversion to conv is exactly the column's own type (so the final conversion does it)."""
    ctype, precision, scale = conv
    if ctype != col.type:
        return False
    if ctype == "NUMBER":
        return (precision or 38, scale or 0) == (col.precision or 38, col.scale or 0)
    if ctype == "VARCHAR":
        return precision is None or precision == col.precision
    return True


def _param_number(node: exp.Expr) -> int | None:
    """n of ``$n`` / ``alias.$n``, else None."""
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Parameter):
        node = node.this
    if isinstance(node, exp.Parameter):
        inner = node.this
        text = inner.name if isinstance(inner, exp.Expr) else str(inner)
        if text.isdigit():
            return int(text)
        raise CompilationError(f"invalid identifier '${text}'")
    return None


def _param_path(node: exp.Expr) -> tuple[int, list[exp.Expr]] | None:
    """(n, path parts) of ``$n:a.b``, ``$n['a']`` or ``$n[0]``, else None."""
    if isinstance(node, (exp.JSONExtract, exp.JSONExtractScalar)) and _param_number(node.this) is not None:
        path = node.expression
        if isinstance(path, exp.JSONPath):
            return _param_number(node.this) or 0, list(path.expressions)
    if isinstance(node, (exp.GetExtract, exp.Bracket)) and _param_number(node.this) is not None:
        key = node.expression if isinstance(node, exp.GetExtract) else (node.expressions or [None])[0]
        if isinstance(key, exp.Literal) and len(getattr(node, "expressions", []) or [key]) == 1:
            part: exp.Expr = (
                exp.JSONPathKey(this=key.this) if key.is_string else exp.JSONPathSubscript(this=int(key.this))
            )
            return _param_number(node.this) or 0, [exp.JSONPathRoot(), part]
    return None


def _is_volatile(node: exp.Expr) -> bool:
    return isinstance(node, _VOLATILE_NODES) or (
        isinstance(node, exp.Anonymous) and str(node.name).upper() in _VOLATILE_NAMES
    )


def _consumes_json(node: exp.Expr) -> bool:
    return isinstance(node, _JSON_CONSUMERS) or (
        isinstance(node, exp.Anonymous) and str(node.name).upper() in _JSON_CONSUMER_NAMES
    )


class ExprCompiler:
    """Rewrites one Snowflake SELECT item into DuckDB SQL over the raw table, noting what it reads."""

    def __init__(
        self,
        fmt_type: str,
        target: Column,
        fmt: FileFormat,
        functions: Mapping[str, ExternalFunction] | None = None,
        calls: list[ExternalCall] | None = None,
    ) -> None:
        self.fmt_type = fmt_type
        self.target = target
        self.fmt = fmt
        self.functions = functions or {}
        """The pipe's external functions by call key (CopySpec.functions, resolved)."""
        self.calls = calls if calls is not None else []
        """The COPY's external calls, shared by its items' compilers (each appends its own)."""
        self.call_indexes: list[int] = []
        """The calls this item makes."""
        self.fields: list[int] = []
        self.parquet_columns: list[str] = []
        self.parquet_row = False
        self.metadata = False
        self.file_info = False
        self.volatile = False
        self.json_text = False

    # -- fragments: Floe's SQL as nodes of the tree, generated in place (never spliced into text)
    @staticmethod
    def _ph(sql: str, *, leaf: bool = False, text_leaf: bool = False, const: bool = False) -> FloeFragment:
        """A node for Floe's ``sql``; leaf: a plain input (raw column, path); text_leaf: raw text;
        const: the same value on every row (METADATA$ columns)."""
        return FloeFragment(this=sql, leaf=leaf, text=text_leaf, const=const)

    def sql(self, node: exp.Expr, as_json: bool) -> str:
        """DuckDB SQL of a sub-expression."""
        shown = node.sql("snowflake")  # before the rewrite puts fragments in it
        rewritten = self._rewrite(node, as_json)
        if isinstance(rewritten, FloeFragment):
            return str(rewritten.this)
        try:
            return rewritten.sql(dialect=DIALECT, unsupported_level=sqlglot.ErrorLevel.RAISE)
        except SqlglotError as exc:
            raise CompilationError(f"unsupported expression {shown}: {exc}") from exc

    def compile(self, node: exp.Expr) -> tuple[str, bool, bool]:
        """(pre SQL, bare, lenient) for a whole SELECT item."""
        if isinstance(node, exp.Alias):
            node = node.this
        lenient = False
        conv = _conversion_of(node)
        if conv is not None and _same_type(conv[1], self.target):
            # The final conversion to the column type does this cast, with the file's formats.
            node, lenient = conv[0], conv[2]
        as_json = self.target.type == "VARIANT"
        rewritten = self._rewrite(node, as_json)
        if isinstance(rewritten, FloeFragment):
            bare = bool(rewritten.args.get("leaf") or rewritten.args.get("const"))
            return str(rewritten.this), bare and not self.volatile, lenient
        return rewritten.sql(dialect=DIALECT), False, lenient

    # -- the rewrite proper
    def _rewrite(self, node: exp.Expr, as_json: bool) -> exp.Expr:
        if isinstance(node, _FORBIDDEN):
            raise CompilationError(f"unsupported expression in a COPY transform: {node.sql('snowflake')}")
        external = self._external(node)
        if external is not None:
            return external
        n = _param_number(node)
        if n is not None:
            return self._param(n, as_json)
        path = _param_path(node)
        if path is not None:
            return self._path(path[0], path[1], as_json)
        if isinstance(node, exp.Column):
            return self._column(node)
        conv = _conversion_of(node)
        if conv is not None:
            return self._conversion(*conv)
        if isinstance(node, exp.ArraySize):
            return self._array_size(node)
        if _is_volatile(node):
            self.volatile = True
        self._rewrite_children(node, _consumes_json(node))
        self._coerce_text_operands(node)
        return node

    def _array_size(self, node: exp.ArraySize) -> exp.Expr:
        """ARRAY_SIZE: the number of elements of an array, NULL for anything else (Snowflake's
        ARRAY_SIZE). Its argument is JSON (a path) or a list (a Parquet column), and DuckDB's
        array_length takes only lists: both are read as JSON."""
        value = f"CAST({self.sql(node.this, True)} AS JSON)"
        return self._ph(f"CASE WHEN json_type({value}) = 'ARRAY' THEN json_array_length({value}) END")

    def _external(self, node: exp.Expr) -> exp.Expr | None:
        """A call of one of the pipe's external functions: its arguments compiled and converted to
        the parameters' types, and the input column its values will come back in."""
        if not self.functions:
            return None
        if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Anonymous):
            call = node.expression
        elif isinstance(node, exp.Anonymous) and not (
            isinstance(node.parent, exp.Dot) and node.parent.expression is node
        ):
            call = node
        else:
            return None
        key = call_key(site_of(call).node)  # before the arguments are rewritten in place
        fn = self.functions.get(key)
        if fn is None:
            return None
        if len(call.expressions) != len(fn.args):
            raise CompilationError(f"external function {fn.name} takes {len(fn.args)} argument(s)")
        args = []
        for arg, param in zip(call.expressions, fn.args, strict=True):
            sql = self.sql(arg, param.type == "VARIANT")
            converted = nested_conversion(sql, param.type, param.precision, param.scale, False)
            # VARIANT travels as its JSON text; DuckDB's JSON type would reach Arrow as an extension.
            args.append(f"CAST({converted} AS VARCHAR)" if param.type == "VARIANT" else converted)
        index = len(self.calls)
        column = f"{EXTERNAL_COLUMN_PREFIX}{index}"
        self.calls.append(ExternalCall(column, key, tuple(args), tuple(fn.args), fn.returns))
        self.call_indexes.append(index)
        if fn.returns.type == "VARIANT":
            self.json_text = True
        return self._ph(ident(column))

    def _rewrite_children(self, node: exp.Expr, as_json: bool) -> None:
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expr):
                node.set(key, self._rewrite(value, as_json))
            elif isinstance(value, list):
                node.set(key, [self._rewrite(v, as_json) if isinstance(v, exp.Expr) else v for v in value])

    def _conversion(self, inner: exp.Expr, conv: _ColumnType, safe: bool) -> exp.Expr:
        ctype, precision, scale = conv
        inner_sql = self.sql(inner, ctype == "VARIANT")
        if ctype == "VARIANT" and self._is_json_sql(inner):
            return self._ph(inner_sql)
        return self._ph(nested_conversion(inner_sql, ctype, precision, scale, safe))

    def _is_json_sql(self, node: exp.Expr) -> bool:
        """Whether node (before rewriting) yields JSON: a $1 path, or $1 of a JSON file."""
        if isinstance(node, (exp.JSONExtract, exp.GetExtract)):
            return True
        return self.fmt_type == "JSON" and _param_number(node) is not None

    def _coerce_text_operands(self, node: exp.Expr) -> None:
        """Snowflake reads strings as numbers in arithmetic; DuckDB will not, so cast raw text leaves."""
        if isinstance(node, _ARITHMETIC):
            keys = ["this", "expression"]
        elif isinstance(node, _COMPARISON):
            other = {"this": node.expression, "expression": node.this}
            keys = [k for k, o in other.items() if isinstance(o, exp.Literal) and not o.is_string]
        else:
            return
        for key in keys:
            child = node.args.get(key)
            if isinstance(child, FloeFragment) and child.args.get("text"):
                node.set(key, self._ph(f"CAST({child.this} AS DOUBLE)"))

    def _param(self, n: int, as_json: bool) -> exp.Expr:
        if self.fmt_type == "CSV":
            if n < 1:
                raise CompilationError(f"invalid identifier '${n}'")
            self.fields.append(n)
            col = ident(f"c{n}")
            return self._ph(col, leaf=True, text_leaf=True)
        if n != 1:
            raise CompilationError(f"invalid identifier '${n}': {self.fmt_type} files have only $1")
        if self.fmt_type == "JSON":
            self.json_text = True
            col = ident("c1")
            return self._ph(col, leaf=True)
        self.parquet_row = True
        return self._ph(ident(PARQUET_ROW_COLUMN), leaf=True)

    def _path(self, n: int, parts: list[exp.Expr], as_json: bool) -> exp.Expr:
        """``$n:a.b[0]``: text extraction, or JSON when the value goes into a VARIANT or JSON function."""
        if self.fmt_type in COLUMNAR_FORMATS:  # Parquet, Avro, ORC: $1:col is the file's column
            base, rest = self._parquet_base(n, parts)
            if rest is None:
                return self._ph(base, leaf=True)
        else:
            base, rest = self._document_base(n), parts
        path = exp.JSONPath(expressions=rest)
        if as_json:
            self.json_text = True
            json_sql = exp.JSONExtract(this=self._ph(base), expression=path).sql(dialect=DIALECT)
            return self._ph(json_sql, leaf=True)
        text_sql = exp.JSONExtractScalar(this=self._ph(base), expression=path).sql(dialect=DIALECT)
        return self._ph(text_sql, leaf=True, text_leaf=True)

    def _parquet_base(self, n: int, parts: list[exp.Expr]) -> tuple[str, list[exp.Expr] | None]:
        """The file column a Parquet path starts with, and the path within it (None: the column itself)."""
        if n != 1:
            raise CompilationError(f"invalid identifier '${n}': {self.fmt_type} files have only $1")
        keys = [p for p in parts if not isinstance(p, exp.JSONPathRoot)]
        if not keys or not isinstance(keys[0], exp.JSONPathKey):
            raise CompilationError(f"a {self.fmt_type} path must start with a column name, as in $1:col")
        name = str(keys[0].this).lower()
        if name not in self.parquet_columns:
            self.parquet_columns.append(name)
        if len(keys) == 1:
            return ident(name), None
        col = ident(name)
        # A Parquet column read with USE_VECTORIZED_SCANNER = FALSE may already be JSON (its structs
        # without their NULL fields, ``query.reader_value``): to_json would parse it again. The
        # condition is constant for the file's column type, so DuckDB keeps one branch when binding.
        return f"CASE WHEN typeof({col}) = 'JSON' THEN {col} ELSE to_json({col}) END", [
            exp.JSONPathRoot(),
            *keys[1:],
        ]

    def _document_base(self, n: int) -> str:
        """The JSON a CSV or JSON path reads: field ``$n`` parsed as JSON, or the JSON document."""
        if self.fmt_type == "CSV":
            self.fields.append(n)
            # A CSV field need not hold JSON: a field that does not parse has no path values.
            return f"TRY_CAST({ident(f'c{n}')} AS JSON)"
        if n != 1:
            raise CompilationError(f"invalid identifier '${n}': JSON files have only $1")
        return ident("c1")  # documents were validated by read_raw

    def _column(self, node: exp.Column) -> exp.Expr:
        name = node.name.upper()
        if name in _METADATA:
            self.metadata = self.metadata or name != "METADATA$FILE_ROW_NUMBER"
            self.file_info = self.file_info or name in _FILE_INFO
            return self._ph(_METADATA[name], const=True)
        if name.startswith("METADATA$"):
            raise CompilationError(f"{name} is not supported by Floe")
        if node.table and name in ("NEXTVAL", "CURRVAL"):
            raise CompilationError("sequences are not supported in Floe COPY transforms")
        raise CompilationError(f"invalid identifier '{node.sql('snowflake')}'")
