"""ReDoS attacks (issue 9, items 5-7): inputs that made Python's backtracking regex engine hold
the GIL for seconds, sent through the real API."""

from __future__ import annotations

from typing import Any

import httpx

from tests.security.attacks.caller import SqlCaller

# Item 5: each % became `.*`; 12 of them on one table name took 3.6 s, 40 more than 60 s.
LIKE_PERCENT_RUN = "%" * 40 + "!"
"""40 wildcards, then a character no name holds, so every split of the name is tried."""
LIKE_LONG = "%a" * 40 + "%" + "x" * 5_000
"""40 wildcards between a's, then a long literal tail no name matches."""

# Item 6: `(a+)+b` against 27 a's took 2.9 s, and each extra character doubled it.
NESTED_PATTERN = "(a+)+b"
NESTED_PATHS = ["a" * 27, "a" * 64, "a" * 1_024]
"""Paths the pattern cannot match (no b), up to S3's 1,024-byte key limit."""

# Item 7: 60,000 spaces froze the API for 9.8 s in the CREATE PIPE header regex.
HEADER_SPACES = 60_000


def show_like(caller: SqlCaller, kind: str, pattern: str) -> tuple[int, dict[str, Any]]:
    """SHOW <kind> LIKE '<pattern>'."""
    return caller.sql(f"SHOW {kind} LIKE '{pattern}'")


def create_pipe_with_spaces(caller: SqlCaller, name: str, tail: str) -> tuple[int, dict[str, Any]]:
    """CREATE PIPE <name>, 60,000 spaces, then ``tail``."""
    return caller.sql(f"CREATE PIPE {name}" + " " * HEADER_SPACES + tail)


def insert_files(caller: SqlCaller, pipe: str, paths: list[str]) -> httpx.Response:
    """POST /v1/data/pipes/<pipe>/insertFiles naming ``paths``."""
    return httpx.post(
        f"{caller.url}/v1/data/pipes/{pipe}/insertFiles",
        json={"files": [{"path": p, "size": 10} for p in paths]},
        headers=caller.headers(),
        timeout=120.0,
    )
