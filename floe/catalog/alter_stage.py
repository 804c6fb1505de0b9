"""ALTER STAGE: the properties of a stage Floe can change in place (decision 84).

Supported, as Snowflake's ALTER STAGE spells them::

    ALTER STAGE [IF EXISTS] s SET [URL = 's3://bucket/prefix/'] [STORAGE_INTEGRATION = i]
                                  [FILE_FORMAT = (...)] [COMMENT = '...']

URL and STORAGE_INTEGRATION are an external stage's (its "cloud parameters"); the stage stays the same
object, so the pipes on it stop as STOPPED_STAGE_ALTERED ("The URL of the stage that the pipe
references changed", Snowflake's troubleshooting guide) until they are recreated, which "Managing
Snowpipe" asks for after such a change. FILE_FORMAT and COMMENT change no pipe: a pipe keeps the
options it was created with (decision 79). RENAME TO, CREDENTIALS, ENCRYPTION, DIRECTORY, REFRESH and
tags are refused, each with what Floe does instead.

The statement is read by ``floe.catalog.access``'s scanner (anchored steps, so errors say where and
the time stays linear); FILE_FORMAT's parenthesised value is cut out by counting parentheses outside
quotes, in one pass, and handed to the caller (``floe.catalog.ddl``), which reads it exactly as CREATE
STAGE reads its FILE_FORMAT.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from floe.catalog.access import Scanner, shortened
from floe.catalog.names import Defaults, Name
from floe.catalog.stage_commands import stage_path
from floe.errors import CompilationError

SETTABLE = ("URL", "STORAGE_INTEGRATION", "FILE_FORMAT", "COMMENT")
"""What ALTER STAGE ... SET changes in Floe."""
_REFUSED = {
    "CREDENTIALS": "Floe reads S3 with its own credentials, bounded by the stage's STORAGE_INTEGRATION",
    "ENCRYPTION": "an internal stage's files are sealed under Floe's key, an external stage is read as S3 "
    "serves it; CREATE OR REPLACE STAGE to change how it was created",
    "DIRECTORY": "Floe has no directory tables",
    "TAG": "Floe has no tags",
    "AWS_ACCESS_POINT_ARN": "Floe reads a stage's bucket by its name",
    "USE_PRIVATELINK_ENDPOINT": "Floe reaches S3 at FLOE_AWS__ENDPOINT_URL",
}


@dataclass
class AlterStage:
    """ALTER STAGE [IF EXISTS] s SET ...; None where the statement leaves a property as it is."""

    name: Name
    if_exists: bool = False
    url: str | None = None
    storage_integration: str | None = None
    """Upper-cased unless quoted."""
    file_format: dict[str, object] | None = None
    """The options, as CREATE STAGE's FILE_FORMAT reads them."""
    comment: str | None = None

    @property
    def relocates(self) -> bool:
        """Whether it changes a cloud parameter (the pipes on the stage then stop)."""
        return self.url is not None or self.storage_integration is not None


def parse_alter_stage(
    text: str, defaults: Defaults, file_format: Callable[[str], dict[str, object]]
) -> AlterStage:
    """ALTER STAGE as above; ``file_format`` reads FILE_FORMAT's parenthesised value."""
    sc = Scanner(text)
    sc.what = "ALTER STAGE"
    sc.expect(r"ALTER\s+STAGE\b", "ALTER STAGE")
    out = AlterStage(Name("", "", ""), sc.take(r"IF\s+EXISTS\b") is not None)
    out.name = sc.qualified("stage", defaults)
    if m := sc.take(r"RENAME\b|REFRESH\b|UNSET\b"):
        verb = " ".join(m.group(0).split()).upper()
        raise CompilationError(
            f"ALTER STAGE ... {verb} is not supported by Floe: it sets "
            f"{', '.join(SETTABLE)} (ALTER STAGE s SET ...); to rename a stage, create it under the new "
            "name and recreate its pipes"
        )
    sc.expect(r"SET\b", f"SET (Floe's ALTER STAGE sets {', '.join(SETTABLE)})")
    seen: set[str] = set()
    while not sc.at_end() or not seen:
        key = sc.word(r"[A-Za-z_]\w*", f"a stage property: {', '.join(SETTABLE)}")
        if key in _REFUSED:
            raise CompilationError(f"ALTER STAGE ... SET {key} is not supported: {_REFUSED[key]}")
        if key not in SETTABLE:
            raise CompilationError(
                f"invalid stage property '{key[:40]}'; ALTER STAGE sets {', '.join(SETTABLE)}"
            )
        if key in seen:
            raise CompilationError(f"duplicate property '{key}' in ALTER STAGE")
        seen.add(key)
        sc.expect("=", f"'=' after {key}")
        _set(sc, out, key, file_format)
    return out


def _set(sc: Scanner, out: AlterStage, key: str, file_format: Callable[[str], dict[str, object]]) -> None:
    if key == "URL":
        url = sc.string("a quoted URL, such as URL = 's3://bucket/prefix/'")
        if not url.lower().startswith("s3://"):
            raise CompilationError("an external stage's URL is an S3 location: URL = 's3://bucket/prefix/'")
        stage_path(url[len("s3://") :], f"URL '{shortened(url, 200)}'")  # as CREATE STAGE (decision 115)
        out.url = url
    elif key == "STORAGE_INTEGRATION":
        out.storage_integration = sc.ident("integration")
    elif key == "COMMENT":
        out.comment = sc.string("a quoted comment")
    else:
        out.file_format = file_format(_parenthesised(sc))


def _parenthesised(sc: Scanner) -> str:
    """A balanced ``( ... )`` at the cursor, moved past. Parentheses inside string literals do not
    count; in them a backslash escapes the next character and ``''`` is a quote, as Snowflake reads
    strings. One pass over the text."""
    sc.expect(r"(?=\()", "FILE_FORMAT's options in parentheses: FILE_FORMAT = (TYPE = CSV ...)")
    text, start = sc.text, sc.pos
    depth, quoted, i = 0, False, start
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1  # the escaped character, whatever it is
            elif c == "'":
                if text.startswith("''", i):
                    i += 1
                else:
                    quoted = False
        elif c == "'":
            quoted = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                sc.pos = i + 1
                return text[start : i + 1]
        i += 1
    raise CompilationError("FILE_FORMAT's parentheses are not closed in ALTER STAGE")
