"""ALTER TABLE: the column changes and table properties Floe supports, parsed with sqlglot.

Supported, as Snowflake spells them (decision 81)::

    ALTER TABLE [IF EXISTS] t ADD [COLUMN] [IF NOT EXISTS] c type [NOT NULL | NULL] [, c2 type ...]
    ALTER TABLE [IF EXISTS] t DROP [COLUMN] [IF EXISTS] c [, c2 ...]
    ALTER TABLE [IF EXISTS] t RENAME COLUMN c TO d
    ALTER TABLE [IF EXISTS] t { ALTER | MODIFY } [COLUMN] c DROP NOT NULL [, [COLUMN] c2 DROP NOT NULL ...]
    ALTER TABLE [IF EXISTS] t SET [ENABLE_SCHEMA_EVOLUTION = TRUE | FALSE] [COMMENT = '...']
    ALTER TABLE [IF EXISTS] t UNSET ENABLE_SCHEMA_EVOLUTION | COMMENT [, ...]

Everything else (a column's type, SET NOT NULL, DEFAULT, RENAME TO, SWAP WITH, CLUSTER BY, ...) is
refused with what Floe does instead: Floe never accepts a statement it would not carry out.

sqlglot parses most of this; a few lists it does not know (``DROP a, b`` without COLUMN, several
``ALTER c DROP NOT NULL``) come back as a Command and are split here at their top-level commas by
sqlglot's tokenizer, each piece parsed again (never a regular expression over the statement).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import sqlglot
from sqlglot import Token, TokenType, exp
from sqlglot.errors import ParseError, TokenError

from floe.catalog.models import Column
from floe.catalog.names import Defaults, Name, check_identifier, qualify
from floe.errors import CompilationError
from floe.types import parse_column_type


@dataclass
class AddColumns:
    """ADD [COLUMN] [IF NOT EXISTS] c type [NOT NULL], ..."""

    columns: list[Column]
    if_not_exists: bool = False


@dataclass
class DropColumns:
    """DROP [COLUMN] [IF EXISTS] c, ..."""

    names: list[str]
    if_exists: bool = False


@dataclass
class RenameColumn:
    """RENAME COLUMN old TO new."""

    old: str
    new: str


@dataclass
class DropNotNull:
    """{ALTER | MODIFY} [COLUMN] c DROP NOT NULL, ..."""

    names: list[str]


@dataclass
class SetTable:
    """SET ENABLE_SCHEMA_EVOLUTION = ... COMMENT = '...' (None: not given)."""

    enable_schema_evolution: bool | None = None
    comment: str | None = None


@dataclass
class UnsetTable:
    """UNSET ENABLE_SCHEMA_EVOLUTION, COMMENT."""

    properties: list[str] = field(default_factory=list)


TableChange = AddColumns | DropColumns | RenameColumn | DropNotNull | SetTable | UnsetTable
"""One ALTER TABLE's change: Floe takes one kind of change per statement."""


@dataclass
class AlterTable:
    """ALTER TABLE [IF EXISTS] t <change>."""

    name: Name
    change: TableChange
    if_exists: bool = False


_SUPPORTED = (
    "ADD [COLUMN] c type, DROP [COLUMN] c, RENAME COLUMN c TO d, ALTER [COLUMN] c DROP NOT NULL, "
    "SET ENABLE_SCHEMA_EVOLUTION = TRUE | FALSE, SET COMMENT = '...' or UNSET"
)
_PROPERTIES = ("ENABLE_SCHEMA_EVOLUTION", "COMMENT")


def parse_alter_table(text: str, defaults: Defaults) -> AlterTable:
    """One ALTER TABLE statement (``text`` without its trailing semicolon)."""
    node = _parse(text)
    if isinstance(node, exp.Command):
        return _fallback(text, defaults)
    if not isinstance(node, exp.Alter) or str(node.args.get("kind") or "").upper() != "TABLE":
        raise CompilationError(f"unsupported ALTER statement; ALTER TABLE takes {_SUPPORTED}")
    table = node.this
    if not isinstance(table, exp.Table):
        raise CompilationError("ALTER TABLE needs a table name")
    name = qualify(table.sql("snowflake"), defaults)
    change = _change(node.args.get("actions") or [])
    return AlterTable(name, change, bool(node.args.get("exists")))


def _parse(text: str) -> exp.Expr:
    # sqlglot logs a warning each time it falls back to a Command; that is expected here.
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return sqlglot.parse_one(text, read="snowflake")
    except ParseError as exc:
        detail = exc.errors[0]["description"] if exc.errors else str(exc)
        message = f"syntax error in ALTER TABLE: {detail}; ALTER TABLE takes {_SUPPORTED}"
        raise CompilationError(message) from exc
    except TokenError as exc:
        raise CompilationError(f"syntax error in ALTER TABLE: {exc}") from exc
    finally:
        logger.setLevel(level)


def _identifier(node: exp.Expr) -> str:
    """A column name as the catalog keeps it: quoted as written, unquoted upper-cased."""
    ident = node.this if isinstance(node, exp.Column) else node
    if not isinstance(ident, exp.Identifier):
        raise CompilationError(f"expected a column name, got '{node.sql('snowflake')[:80]}'")
    return check_identifier(ident.name if ident.quoted else ident.name.upper())


def _change(actions: list[exp.Expr]) -> TableChange:
    if not actions:
        raise CompilationError(f"ALTER TABLE needs a change: {_SUPPORTED}")
    kinds = {type(a) for a in actions}
    if len(kinds) > 1:
        raise CompilationError(f"ALTER TABLE takes one kind of change at a time: {_SUPPORTED}")
    first = actions[0]
    if isinstance(first, exp.ColumnDef):
        return AddColumns([_new_column(a) for a in actions], any(bool(a.args.get("exists")) for a in actions))
    if isinstance(first, exp.Drop):
        return _drop(actions)
    if isinstance(first, exp.RenameColumn):
        if len(actions) != 1:
            raise CompilationError("RENAME COLUMN renames one column per statement")
        return RenameColumn(_identifier(first.this), _identifier(first.args["to"]))
    if isinstance(first, exp.AlterColumn):
        return DropNotNull([_drop_not_null(a) for a in actions])
    if isinstance(first, exp.AlterSet):
        return _set(first)
    if isinstance(first, exp.Set) and first.args.get("unset"):
        return _unset(first)
    if isinstance(first, exp.Command) and str(first.this).upper() == "DROP":
        return _drop_list(str(first.args.get("expression") or ""))
    if isinstance(first, exp.AlterRename):
        raise CompilationError(
            "ALTER TABLE ... RENAME TO is not supported by Floe (a table's blobs are bound to its "
            "name); create the new table and a pipe loading it"
        )
    raise CompilationError(
        f"ALTER TABLE ... {first.sql('snowflake')[:60]} is not supported by Floe; ALTER TABLE takes "
        f"{_SUPPORTED}"
    )


def _new_column(cdef: exp.Expr) -> Column:
    """ADD COLUMN's column: a type and NOT NULL (or NULL); nothing else."""
    name = _identifier(cdef.this)
    dtype = cdef.args.get("kind")
    if not isinstance(dtype, exp.DataType):
        raise CompilationError(f"column {name} needs a type")
    ctype, precision, scale = parse_column_type(dtype)
    nullable = True
    for constraint in cdef.args.get("constraints") or []:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.NotNullColumnConstraint):
            nullable = bool(kind.args.get("allow_null"))
            continue
        raise CompilationError(
            f"ADD COLUMN {name} ... {constraint.sql('snowflake')[:60]} is not supported by Floe: a new "
            "column takes a type and NOT NULL only (no DEFAULT, AUTOINCREMENT, COLLATE, constraints "
            "or comments); its value in the rows already loaded is NULL"
        )
    if cdef.args.get("position") is not None:
        raise CompilationError("ADD COLUMN ... FIRST | AFTER is not supported: new columns go last")
    return Column(name=name, type=ctype, precision=precision, scale=scale, nullable=nullable)


def _drop(actions: list[exp.Expr]) -> DropColumns:
    names: list[str] = []
    if_exists = False
    for action in actions:
        if str(action.args.get("kind") or "").upper() != "COLUMN":
            raise CompilationError(
                f"ALTER TABLE ... {action.sql('snowflake')[:60]} is not supported by Floe; "
                "DROP [COLUMN] c drops a column"
            )
        if_exists = if_exists or bool(action.args.get("exists"))
        names += [_identifier(c) for c in action.args.get("tables") or []]
    return DropColumns(names, if_exists)


def _drop_list(text: str) -> DropColumns:
    """``DROP a, b`` without COLUMN, which sqlglot leaves as text: ``[IF EXISTS] a, b``."""
    tokens = sqlglot.tokenize(text, read="snowflake")
    if_exists = False
    if len(tokens) >= 2 and tokens[0].text.upper() == "IF" and tokens[1].text.upper() == "EXISTS":
        if_exists = True
        tokens = tokens[2:]
    names: list[str] = []
    for piece in _split(tokens):
        if len(piece) != 1 or piece[0].token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
            raise CompilationError(f"DROP [COLUMN] takes column names separated by commas, got '{text[:80]}'")
        token = piece[0]
        quoted = token.token_type == TokenType.IDENTIFIER
        names.append(check_identifier(token.text if quoted else token.text.upper()))
    return DropColumns(names, if_exists)


def _split(tokens: list[Token]) -> list[list[Token]]:
    """Tokens split at the commas outside parentheses."""
    pieces: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        if token.token_type == TokenType.COMMA and depth == 0:
            pieces.append([])
        else:
            pieces[-1].append(token)
    return pieces


def _drop_not_null(action: exp.Expr) -> str:
    if not isinstance(action, exp.AlterColumn):
        raise CompilationError(f"ALTER TABLE takes one kind of change at a time: {_SUPPORTED}")
    name = _identifier(action.this)
    if action.args.get("drop") and action.args.get("allow_null"):
        return name
    if action.args.get("dtype") is not None:
        raise CompilationError(
            f"changing the type of column {name} is not supported by Floe (its blobs keep the type "
            "they were written with); add a column of the new type, or recreate the table"
        )
    if action.args.get("allow_null") is False:
        raise CompilationError(
            f"ALTER COLUMN {name} SET NOT NULL is not supported by Floe (rows already loaded are not "
            "checked); only DROP NOT NULL is"
        )
    raise CompilationError(
        f"ALTER TABLE ... {action.sql('snowflake')[:60]} is not supported by Floe; ALTER [COLUMN] c "
        "DROP NOT NULL is"
    )


def _set(action: exp.AlterSet) -> SetTable:
    out = SetTable()
    props: list[exp.Expr] = []
    for item in action.expressions:
        props += item.expressions if isinstance(item, exp.Properties) else [item]
    for prop in props:
        if isinstance(prop, exp.SchemaCommentProperty):
            out.comment = _string(prop.this, "COMMENT")
            continue
        key = prop.name.upper() if isinstance(prop, exp.Property) else ""
        value = prop.args.get("value")
        if key == "ENABLE_SCHEMA_EVOLUTION" and isinstance(value, exp.Boolean):
            out.enable_schema_evolution = bool(value.this)
        elif key == "ENABLE_SCHEMA_EVOLUTION":
            raise CompilationError("ENABLE_SCHEMA_EVOLUTION takes TRUE or FALSE")
        elif key == "COMMENT":
            out.comment = _string(value, "COMMENT")
        else:
            shown = prop.sql("snowflake")[:60]
            raise CompilationError(
                f"ALTER TABLE ... SET {shown} is not supported by Floe; SET takes "
                "ENABLE_SCHEMA_EVOLUTION = TRUE | FALSE and COMMENT = '...'"
            )
    if out.enable_schema_evolution is None and out.comment is None:
        raise CompilationError("ALTER TABLE ... SET needs ENABLE_SCHEMA_EVOLUTION = ... or COMMENT = '...'")
    return out


def _string(node: object, key: str) -> str:
    if isinstance(node, exp.Literal) and node.is_string:
        return str(node.this)
    raise CompilationError(f"{key} takes a quoted string")


def _unset(action: exp.Set) -> UnsetTable:
    names: list[str] = []
    for item in action.expressions:
        name = item.name.upper() if isinstance(item, exp.Identifier | exp.Var | exp.Column) else ""
        if name not in _PROPERTIES:
            raise CompilationError(
                f"ALTER TABLE ... UNSET {item.sql('snowflake')[:60]} is not supported by Floe; UNSET "
                "takes ENABLE_SCHEMA_EVOLUTION and COMMENT"
            )
        names.append(name)
    return UnsetTable(names)


def _fallback(text: str, defaults: Defaults) -> AlterTable:
    """A statement sqlglot could not parse whole: ``{ALTER | MODIFY} c DROP NOT NULL, d DROP NOT
    NULL`` (its first piece parses; each next one is parsed as an ALTER COLUMN of its own)."""
    tokens = sqlglot.tokenize(text, read="snowflake")
    pieces = _split(tokens)
    first_end = pieces[0][-1].end + 1 if pieces[0] else 0
    head = _parse(text[:first_end])
    if not isinstance(head, exp.Alter) or not isinstance(head.this, exp.Table):
        raise CompilationError(f"syntax error in ALTER TABLE; ALTER TABLE takes {_SUPPORTED}")
    actions = list(head.args.get("actions") or [])
    if len(pieces) > 1:
        if not (len(actions) == 1 and isinstance(actions[0], exp.AlterColumn)):
            raise CompilationError(
                f"ALTER TABLE takes one kind of change at a time, in Snowflake's syntax: {_SUPPORTED}"
            )
        for piece in pieces[1:]:
            if not piece:
                raise CompilationError("syntax error in ALTER TABLE: an empty item between commas")
            part = _parse("ALTER TABLE t ALTER " + text[piece[0].start : piece[-1].end + 1])
            actions += list(part.args.get("actions") or []) if isinstance(part, exp.Alter) else [part]
    elif not actions:
        raise CompilationError(f"syntax error in ALTER TABLE; ALTER TABLE takes {_SUPPORTED}")
    name = qualify(head.this.sql("snowflake"), defaults)
    return AlterTable(name, _change(actions), bool(head.args.get("exists")))
