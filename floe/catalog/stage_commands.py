"""The file commands on stages: LIST (LS), REMOVE (RM), PUT and GET, and stage locations.

``@[db.schema.]stage[/path]`` names a named stage, ``@[db.schema.]%table[/path]`` a table's stage
(the stage every table has), ``@~[/path]`` the current user's stage; any may be written in single
quotes, as Snowflake requires when the name or path holds spaces (``'@"my stage"/a b/'``). The file
commands take a user stage; a pipe's COPY does not, as Snowpipe loads no user stage. The path of
LIST, REMOVE and GET is a key prefix as written (``@s/data`` names ``data.csv`` and
``data/x.csv``), as in Snowflake; a COPY's path is a folder. No path holds a ``.`` or ``..``
segment, as written or percent-encoded (``stage_path``): it would name a place outside the stage
to whatever resolves it on the way (decisions 108, 115).

PUT and GET move files between the client's machine and a stage, so the client runs them
(``floe put``, ``floe get``, or ``floe sql`` with a PUT or GET statement, as SnowSQL does); the
API refuses them as statements and serves the transfers on routes of their own.

Every regex here sees user text and runs under ``Scanner``'s rules: anchored, and no two
neighbouring parts that can match the same characters (tests/floe/catalog/test_stage_commands.py
times them on long inputs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from floe.catalog.access import Scanner, shortened
from floe.catalog.models import has_dot_segment
from floe.catalog.names import IDENT, Defaults, Name, qualify
from floe.errors import CompilationError
from floe.patterns import compile_pattern

TABLE_MARK = "%"
"""``@%t`` names table t's stage."""
USER_MARK = "~"
"""``@~`` names the current user's stage."""
USER_STAGE_NAME = Name("", "", USER_MARK)
"""What a user stage's location has for a name: the stage is the caller's, whoever that is."""

# One to three identifiers, the last one perhaps marked as a table's (``%``); the marks in other
# places are refused afterwards. Shaped as QNAME is, so it is as linear.
_LOCATION = re.compile(rf"@(?P<name>%?{IDENT}(?:\s*\.\s*%?{IDENT}){{0,2}})(?P<path>/.*)?", re.DOTALL)
# An unquoted location runs to the next blank; a quoted name inside it may hold blanks.
_BARE_LOCATION = r'@(?:"[^"]*"|[^\s"])*'
_BARE_URI = r"file://\S*"
_QUOTED = r"'[^']*(?:''[^']*)*'"
_COMMAND = re.compile(r"(?:LIST|LS|REMOVE|RM|PUT|GET)\b", re.I)

PARALLEL_MAX = 99
"""PARALLEL's largest value, as Snowflake's."""
SOURCE_COMPRESSIONS = ("AUTO_DETECT", "GZIP", "BZ2", "BROTLI", "ZSTD", "DEFLATE", "RAW_DEFLATE", "NONE")
"""PUT's SOURCE_COMPRESSION values."""


@dataclass
class StageLocation:
    """A stage and a path in it, as the file commands and a COPY's FROM name them."""

    name: Name
    """The stage; for a table stage, the table."""
    path: str = ""
    """The path after the stage name, without its leading '/' ('' for the whole stage)."""
    table: bool = False
    """A table's stage (``@%t``)."""
    user: bool = False
    """The current user's stage (``@~``); ``name`` is then ``USER_STAGE_NAME``."""

    def __str__(self) -> str:
        """The location as it is written back (``parse_location`` reads it to the same)."""
        if self.user:
            return f"@{USER_MARK}" + (f"/{self.path}" if self.path else "")
        db, schema, name = (_quoted(p) for p in (self.name.database, self.name.schema, self.name.name))
        mark = TABLE_MARK if self.table else ""
        return f"@{db}.{schema}.{mark}{name}" + (f"/{self.path}" if self.path else "")


def _quoted(part: str) -> str:
    """A name part as SQL writes it: bare if upper-case would read it back the same, else quoted."""
    return part if re.fullmatch(r"[A-Z_][A-Z0-9_$]*", part) else f'"{part}"'


@dataclass
class ListFiles:
    """LIST | LS <location> [PATTERN = '<regex>']: the files on a stage."""

    location: StageLocation
    pattern: str | None = None


@dataclass
class RemoveFiles:
    """REMOVE | RM <location> [PATTERN = '<regex>']: delete files from a stage."""

    location: StageLocation
    pattern: str | None = None


@dataclass
class PutFiles:
    """PUT file://<path>/<name or glob> <internal location> [PARALLEL = n] [AUTO_COMPRESS = TRUE |
    FALSE] [SOURCE_COMPRESSION = ...] [OVERWRITE = TRUE | FALSE]; the client runs it."""

    source: str
    """The local path after ``file://``, as written (its file name may hold ``*`` and ``?``)."""
    location: StageLocation
    parallel: int = 4
    auto_compress: bool = True
    source_compression: str = "AUTO_DETECT"
    overwrite: bool = False


@dataclass
class GetFiles:
    """GET <internal location> file://<directory> [PARALLEL = n] [PATTERN = '<regex>']; the client
    runs it."""

    location: StageLocation
    target: str
    """The local directory after ``file://``, as written."""
    parallel: int = 10
    pattern: str | None = None


FileCommand = ListFiles | RemoveFiles | PutFiles | GetFiles


def transfer_refusal(statement: PutFiles | GetFiles) -> CompilationError:
    """What the API answers a PUT or GET statement: the client runs it (it reads or writes local
    files), through the API's transfer routes."""
    verb, command = ("PUT", "put") if isinstance(statement, PutFiles) else ("GET", "get")
    return CompilationError(
        f"{verb} transfers files between your machine and a stage, so the client runs it: use "
        f"`floe sql` (which runs PUT and GET itself, as SnowSQL does) or `floe {command}`. Over HTTP, "
        "the transfers are /api/v1/stages/files (PUT to upload, GET to download) and /api/v1/stages/list."
    )


def stage_path(path: str, where: str) -> str:
    """``path``, a path in a stage as a client names it (a location's, a PUT's file name, REFRESH's
    PREFIX), unless it holds a ``.`` or ``..`` segment as written or percent-encoded
    (``has_dot_segment``): CompilationError naming it and ``where`` it was written.

    S3 keys are plain strings, but pyarrow's S3 filesystem, which the job reads with, resolves
    ``in/../secret`` to ``secret`` (measured on LocalStack), so such a path would name a file of
    another stage, or outside the integration's locations. Refused, not normalised, as insertFiles
    refuses it (decision 108).
    """
    if has_dot_segment(path):
        raise CompilationError(
            f"invalid path '{shortened(path, 200)}' in {where}: a path in a stage may not hold a '.' or "
            "'..' segment (as written or percent-encoded, such as %2e%2e); name files by their path from "
            "the stage, such as @my_stage/dir/file.csv"
        )
    return path


def is_file_command(text: str) -> bool:
    """Whether a statement (stripped) is LIST, LS, REMOVE, RM, PUT or GET."""
    return _COMMAND.match(text) is not None


def parse_location(
    text: str, defaults: Defaults, *, what: str = "a stage", user: bool = False
) -> StageLocation:
    """``@[db.schema.]stage[/path]``, ``@[db.schema.]%table[/path]`` or, where ``user`` allows it,
    ``@~[/path]``, quotes around it removed."""
    text = text.strip()
    if text.startswith("'") and text.endswith("'") and len(text) >= 2:
        text = text[1:-1].replace("''", "'").strip()
    if text.startswith(f"@{USER_MARK}"):
        return _user_location(text, user)
    m = _LOCATION.fullmatch(text)
    if m is None:
        raise CompilationError(
            f"invalid stage location '{shortened(text)}'; {what} is @stage[/path] or @%table[/path]"
        )
    name = m.group("name")
    parts = re.findall(rf"%?{IDENT}", name)
    if any(p.startswith(TABLE_MARK) for p in parts[:-1]):
        raise CompilationError(f"invalid stage location '{shortened(text)}': only the table is marked with %")
    table = parts[-1].startswith(TABLE_MARK)
    if table:
        cut = len(name) - len(parts[-1])  # the last part ends the name: drop its mark
        name = name[:cut] + name[cut + 1 :]
    path = stage_path((m.group("path") or "").lstrip("/"), f"stage location '{shortened(text, 200)}'")
    return StageLocation(qualify(name, defaults), path, table)


def _user_location(text: str, allowed: bool) -> StageLocation:
    """``@~[/path]``: the caller's own stage, for the file commands only."""
    if not allowed:
        # Snowflake's Snowpipe guide: "Snowpipe doesn't load files from user stages or temporary stages."
        raise CompilationError(
            "a pipe cannot load from a user stage (@~): Snowpipe doesn't load files from user stages. "
            "Stage the files on a named stage (CREATE STAGE s, then PUT ... @s) or on the table's stage "
            "(@%t)."
        )
    rest = text[2:]
    if rest and not rest.startswith("/"):
        raise CompilationError(f"invalid stage location '{shortened(text)}'; the user stage is @~ or @~/path")
    path = stage_path(rest.lstrip("/"), f"stage location '{shortened(text, 200)}'")
    return StageLocation(USER_STAGE_NAME, path, user=True)


def parse_file_command(text: str, defaults: Defaults) -> FileCommand:
    """One of the file commands (``is_file_command``), read by the scanner."""
    sc = Scanner(text)
    verb = sc.word(r"LIST\b|LS\b|REMOVE\b|RM\b|PUT\b|GET\b", "LIST, REMOVE, PUT or GET")
    if verb in ("LIST", "LS", "REMOVE", "RM"):
        sc.what = "LIST" if verb in ("LIST", "LS") else "REMOVE"
        location = _location(sc, defaults)
        pattern = _options(sc, ("PATTERN",)).get("PATTERN")
        cls = ListFiles if verb in ("LIST", "LS") else RemoveFiles
        return cls(location, _pattern(pattern))
    if verb == "PUT":
        sc.what = "PUT"
        source = _uri(sc, "the local files to upload, such as file:///tmp/data/*.csv")
        location = _location(sc, defaults)
        opts = _options(sc, ("PARALLEL", "AUTO_COMPRESS", "SOURCE_COMPRESSION", "OVERWRITE"))
        compression = opts.get("SOURCE_COMPRESSION", "AUTO_DETECT").upper()
        if compression not in SOURCE_COMPRESSIONS:
            raise CompilationError(
                f"invalid value '{shortened(compression)}' for SOURCE_COMPRESSION; "
                f"expected one of {', '.join(SOURCE_COMPRESSIONS)}"
            )
        return PutFiles(
            source,
            location,
            parallel=_parallel(opts.get("PARALLEL"), 4),
            auto_compress=_boolean(opts, "AUTO_COMPRESS", True),
            source_compression=compression,
            overwrite=_boolean(opts, "OVERWRITE", False),
        )
    sc.what = "GET"
    location = _location(sc, defaults)
    target = _uri(sc, "the local directory to download into, such as file:///tmp/data/")
    opts = _options(sc, ("PARALLEL", "PATTERN"))
    return GetFiles(location, target, _parallel(opts.get("PARALLEL"), 10), _pattern(opts.get("PATTERN")))


def _location(sc: Scanner, defaults: Defaults) -> StageLocation:
    token = sc.expect(
        rf"{_QUOTED}|{_BARE_LOCATION}", "a stage location such as @my_stage/path/ or @%my_table"
    )
    return parse_location(token.group(0), defaults, user=True)


def _uri(sc: Scanner, expected: str) -> str:
    """A ``file://`` URI, bare or quoted; the path after ``file://``."""
    token = sc.expect(rf"{_QUOTED}|{_BARE_URI}", expected).group(0).strip()
    if token.startswith("'"):
        token = token[1:-1].replace("''", "'")
    if not token.lower().startswith("file://"):
        raise CompilationError(f"expected a file:// URI, found '{shortened(token)}'")
    path = token[len("file://") :]
    if not path:
        raise CompilationError("the file:// URI names no path")
    return path


def _options(sc: Scanner, allowed: tuple[str, ...]) -> dict[str, str]:
    """``KEY = value`` options in any order, each once."""
    out: dict[str, str] = {}
    expected = " or ".join(f"{k} = ..." for k in allowed)
    while not sc.at_end():
        key = sc.word("|".join(rf"{k}\b" for k in allowed), expected)
        if key in out:
            raise CompilationError(f"duplicate option {key} in {sc.what}")
        sc.expect("=", f"'=' after {key}")
        if key == "PATTERN":
            out[key] = sc.string("a quoted regular expression after PATTERN =, such as PATTERN = '.*[.]csv'")
        else:
            out[key] = sc.expect(r"[A-Za-z0-9_]+", f"a value after {key} =").group(0).strip()
    return out


def _pattern(pattern: str | None) -> str | None:
    if pattern is not None:
        compile_pattern(pattern)  # RE2 runs it; refused here with what to change otherwise
    return pattern


def _parallel(value: str | None, default: int) -> int:
    if value is None:
        return default
    if not value.isdigit() or not 1 <= int(value) <= PARALLEL_MAX:
        raise CompilationError(
            f"invalid value '{shortened(value)}' for PARALLEL; expected 1 to {PARALLEL_MAX}"
        )
    return int(value)


def _boolean(options: dict[str, str], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    if value.upper() not in ("TRUE", "FALSE"):
        raise CompilationError(f"invalid value '{shortened(value)}' for {key}; expected TRUE or FALSE")
    return value.upper() == "TRUE"
