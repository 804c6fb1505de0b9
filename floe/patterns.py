"""Linear-time matchers for patterns users write: SHOW ... LIKE and a pipe's PATTERN.

Python's ``re`` backtracks and holds the GIL, so one crafted pattern (``(a+)+b``, forty ``%``)
froze the whole API. Here LIKE is matched without regexes (``like_matcher``: linear without
``_``, O(len(name) * len(pattern)) with it, and names are at most 255 characters), and PATTERN
runs under RE2 (``google-re2``), whose time is linear in the path whatever the pattern. RE2
refuses backreferences and lookaround; CREATE PIPE reports such a pattern with what to change
(``compile_pattern``), and a pipe stored before that check whose pattern RE2 refuses matches
nothing and logs one warning (``stored_pattern``).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from typing import Any

import re2

from floe.errors import CompilationError

log = logging.getLogger("floe.patterns")

PATTERN_MAX_MEM = 2 << 20
"""Memory RE2 may use for one compiled PATTERN (program plus DFA cache), in bytes. A pattern whose
program does not fit is refused at CREATE PIPE; a DFA that outgrows it falls back to RE2's NFA,
slower but still linear in the path. Every cached pattern may hold this much, hence the small figure."""

PATTERN_CACHE_SIZE = 512
"""Compiled PATTERNs kept per process (one per distinct pattern text)."""

# Constructs RE2 refuses, as its error message names them, with the advice to give.
_UNSUPPORTED: tuple[tuple[str, str], ...] = (
    ("(?<=", "a lookbehind, which {engine} does not support; rewrite it without (?<=...)"),
    ("(?<!", "a negative lookbehind, which {engine} does not support; rewrite it without (?<!...)"),
    ("(?=", "a lookahead, which {engine} does not support; rewrite it without (?=...)"),
    (
        "(?!",
        "a negative lookahead, which {engine} does not support; rewrite it without (?!...), "
        "for example with a character class such as [^x]",
    ),
    (
        "(?P",
        "a named backreference (?P=name), which {engine} does not support; repeat the group instead",
    ),
    ("(?>", "an atomic group (?>...), which {engine} does not support; use a plain group (...)"),
    ("(?#", "a comment (?#...), which {engine} does not support; remove it"),
    ("++", "a possessive quantifier (++), which {engine} does not support; use + instead"),
    ("*+", "a possessive quantifier (*+), which {engine} does not support; use * instead"),
    ("?+", "a possessive quantifier (?+), which {engine} does not support; use ? instead"),
    ("\\Z", "\\Z, which {engine} does not support; use $ (or \\z) for the end of the path"),
)
_ENGINE = "Floe's linear-time matcher (RE2)"


def _options() -> Any:
    options = re2.Options()
    options.max_mem = PATTERN_MAX_MEM
    # RE2 would print every refused pattern to stderr; the refusal is reported to the user instead.
    options.log_errors = False
    return options


def _advice(reason: str) -> str:
    """What to tell the user about a PATTERN RE2 refused with ``reason`` (RE2's message)."""
    if ref := re.search(r"invalid escape sequence: (\\[1-9])", reason):
        return (
            f"PATTERN uses a backreference ({ref.group(1)}), which {_ENGINE} does not support; "
            "rewrite it without referring back to a group"
        )
    for construct, advice in _UNSUPPORTED:
        if reason.endswith(": " + construct):
            return "PATTERN uses " + advice.format(engine=_ENGINE)
    if "too large" in reason:
        return (
            f"PATTERN is too large for {_ENGINE} (over {PATTERN_MAX_MEM >> 20} MiB once compiled); "
            "use fewer or smaller counted repetitions such as {n}"
        )
    return (
        f"invalid PATTERN: {reason}. Floe runs PATTERN with RE2; "
        "see https://github.com/google/re2/wiki/Syntax for the syntax it accepts"
    )


@functools.lru_cache(maxsize=PATTERN_CACHE_SIZE)
def _compile(pattern: str) -> Any:
    """The compiled RE2 program of a pattern (cached), or re2.error."""
    return re2.compile(pattern, _options())


def compile_pattern(pattern: str) -> Callable[[str], bool]:
    """A pipe PATTERN as a full-match predicate; a CompilationError saying what to change if RE2
    cannot run it. CREATE PIPE calls this, so no pipe is stored with a pattern Floe cannot run."""
    try:
        regexp = _compile(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        shown = pattern if len(pattern) <= 200 else pattern[:200] + "..."
        raise CompilationError(f"{_advice(reason)} (PATTERN = '{shown}')") from exc
    return lambda path: regexp.fullmatch(path) is not None


def _never(path: str) -> bool:
    return False


@functools.lru_cache(maxsize=PATTERN_CACHE_SIZE)
def stored_pattern(pattern: str) -> Callable[[str], bool]:
    """The predicate of a stored pipe's PATTERN. A pattern stored before CREATE PIPE checked it,
    which RE2 cannot run, matches no path; the warning is logged once per process (cached)."""
    try:
        return compile_pattern(pattern)
    except CompilationError as exc:
        log.warning(
            "a pipe's PATTERN cannot run under RE2, so the pipe matches no file until it is "
            "recreated (CREATE OR REPLACE PIPE) with a supported PATTERN: %s",
            exc.message.removeprefix("SQL compilation error:\n"),
        )
        return _never


def _fold(text: str) -> list[str]:
    """Characters compared case-insensitively; lower-casing one character at a time keeps the
    positions (``'İ'.lower()`` is two characters), which ``_`` counts."""
    out = []
    for c in text:
        low = c.lower()
        out.append(low if len(low) == 1 else c)
    return out


def like_matcher(pattern: str) -> Callable[[str], bool]:
    """Snowflake's LIKE as used by SHOW ... LIKE: ``%`` any run of characters, ``_`` one character,
    every other character literal (no escape character), case-insensitive, whole name.

    Without ``_``, the literal pieces between ``%`` are found left to right with ``str.find``
    (leftmost is always right, since ``%`` absorbs whatever lies between): O(len(name) +
    len(pattern)). With ``_``, the classic wildcard matcher goes back on a mismatch only to the
    last ``%``, one character further: O(len(name) * len(pattern)) at worst, never exponential.
    A pattern needing more characters than the name has is rejected before either runs.
    """
    pat = "".join(_fold(pattern))
    needed = len(pat) - pat.count("%")
    if "_" not in pat:
        return functools.partial(_match_pieces, pat.split("%"), needed)
    return functools.partial(_match_wildcards, pat, needed)


def _match_pieces(pieces: list[str], needed: int, name: str) -> bool:
    text = "".join(_fold(name))
    if needed > len(text):
        return False
    if len(pieces) == 1:
        return text == pieces[0]
    first, *middle, last = pieces
    pos, end = len(first), len(text) - len(last)
    if not (text.startswith(first) and text.endswith(last) and pos <= end):
        return False
    for piece in middle:
        found = text.find(piece, pos, end)
        if found < 0:
            return False
        pos = found + len(piece)
    return True


def _match_wildcards(pat: str, needed: int, name: str) -> bool:
    text = "".join(_fold(name))
    n, m = len(text), len(pat)
    if needed > n:
        return False
    ti = pi = 0
    star = -1  # index in pat of the last % seen
    mark = 0  # index in text where that % resumed
    while ti < n:
        if pi < m and pat[pi] == "%":
            star, mark = pi, ti
            pi += 1
        elif pi < m and (pat[pi] == "_" or pat[pi] == text[ti]):
            ti += 1
            pi += 1
        elif star >= 0:
            mark += 1
            ti, pi = mark, star + 1
        else:
            return False
    while pi < m and pat[pi] == "%":
        pi += 1
    return pi == m
