"""SQL that tries to read the server's files, environment or settings through the query engine
(issue 9, items 1-3), and the secrets a refusal must never contain."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from floe.settings import Settings

PASSWD_MARK = "root:x:0:0"


def secret_marks(settings: Settings) -> list[str]:
    """Fragments of the admin key, the master key and /etc/passwd: none may come back in a body."""
    marks = [PASSWD_MARK]
    for path in (settings.auth.admin_key_file, settings.encryption.master_key_file):
        text = Path(path).read_text()
        body = "".join(line for line in text.splitlines() if "-----" not in line)
        marks += [
            body[i : i + 24] for i in range(0, min(len(body), 24 * 4), 24) if len(body[i : i + 24]) == 24
        ]
    return marks


def file_targets(settings: Settings) -> list[str]:
    """Paths the issue's attacker read: both keys (absolute and relative), globs, /etc/passwd, environ."""
    state = Path(settings.state_dir)
    return [
        str(Path(settings.auth.admin_key_file).resolve()),
        str(Path(settings.encryption.master_key_file).resolve()),
        os.path.relpath(settings.auth.admin_key_file),
        f"{state}/*",
        "/etc/passwd",
        "/proc/self/environ",
    ]


def lateral_reads(paths: Iterable[str]) -> list[str]:
    """Item 1: table functions behind LATERAL, in FROM, in a subquery and as scalars."""
    out: list[str] = []
    for path in paths:
        out += [
            f"SELECT filename, content FROM (SELECT 1) AS d, LATERAL read_text('{path}')",
            f"SELECT * FROM (SELECT 1) AS d, LATERAL read_blob('{path}')",
            f"SELECT * FROM read_csv('{path}')",
            f"SELECT * FROM TABLE(read_text('{path}'))",
            f"SELECT (SELECT content FROM read_text('{path}')) AS c",
            f"SELECT * FROM '{path}'",
        ]
    return out


def sibling_cte(path: str) -> str:
    """Item 2: a CTE named like a file in one subquery; the sibling's same name would scan the file."""
    return (
        f'SELECT * FROM (WITH "{path}" AS (SELECT 1 AS a) SELECT * FROM "{path}") AS a, '
        f'(SELECT * FROM "{path}") AS b'
    )


def history_oracle(table: str, path: str, threshold: int) -> str:
    """Item 3: COPY_HISTORY's START_TIME as a one-bit oracle on a file's first byte."""
    return (
        f"SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => '{table}', START_TIME => "
        f"CASE WHEN (SELECT ascii(substr(content, 1, 1)) FROM read_text('{path}')) >= {threshold} "
        "THEN CURRENT_TIMESTAMP() ELSE 'x' END))"
    )


def history_oracle_without_files(table: str, threshold: int) -> str:
    """Item 3 without a table function: a bound that only DuckDB could evaluate."""
    return (
        f"SELECT * FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => '{table}', START_TIME => "
        f"CASE WHEN {threshold} >= 64 THEN CURRENT_TIMESTAMP() ELSE 'x' END))"
    )
