"""SQL injection through a pipe's COPY transform (issue 9, item 4).

The compiler once spliced its own SQL into sqlglot's output by replacing placeholder names
(``__floe_ph_N__``), the file-name token and the Parquet row token anywhere in the text, string
literals included. A select item holding a placeholder name in a literal turned the text of another
literal into live SQL on the workers. These builders make such items; each must load as the plain
text it spells, and its SQL must never run.
"""

from __future__ import annotations

# Names the compiler uses (or used) for its own SQL: none may mean anything inside a user's text.
LOOKALIKES = (
    "__floe_ph_0__",
    "__floe_ph_1__",
    "'__FLOE_FILENAME__'",
    "'__FLOE_SCAN_TIME__'",
    "__floe_parquet_row__",
    "__floe_base__",
    "__floe_filename",
    "__floe_scan_time",
    "__floe_row",
    "__floe_input",
    "$floe_filename",
    "$floe_scan_time",
)


def snowflake_literal(text: str) -> str:
    """``text`` as a Snowflake string literal (quotes doubled, backslashes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def read_file_sql(path: str) -> str:
    """A scalar subquery reading a server file. Dollar-quoted: the issue's payload has no quote."""
    return f"SELECT content FROM read_text($${path}$$)"


def issue_item(sql: str) -> str:
    """The issue's select item, with ``sql`` where it became live SQL on the workers.

    ``'<payload>'::VARCHAR || '__floe_ph_0__' || LEFT(UUID_STRING(), 0)``: the cast made the
    compiler's placeholder 0 (``CAST('<payload>' AS VARCHAR)``), and replacing its name in the second
    literal closed that literal around the payload. UUID_STRING() makes the item volatile, so no TRY()
    stood in the way.
    """
    return f"{snowflake_literal(payload(sql))}::VARCHAR || '__floe_ph_0__' || LEFT(UUID_STRING(), 0)"


def payload(sql: str) -> str:
    """The text of the first literal of ``issue_item(sql)``."""
    return f" || ({sql}) || "


def issue_item_value(sql: str) -> str:
    """What ``issue_item(sql)`` must load: its literals' text, nothing evaluated."""
    return payload(sql) + "__floe_ph_0__"


def lookalike_item() -> str:
    """Every compiler name in literals, around METADATA$FILENAME and a cast (which make fragments)."""
    text = " ".join(LOOKALIKES)
    lit = snowflake_literal(text)
    return f"{lit} || METADATA$FILENAME::VARCHAR || {lit} || LEFT(UUID_STRING(), 0)"


def lookalike_value(filename: str) -> str:
    """What ``lookalike_item()`` must load for a file named ``filename``."""
    text = " ".join(LOOKALIKES)
    return text + filename + text


# File names and Parquet column names that would close a literal or an identifier if spliced as text.
HOSTILE_NAMES = (
    "x' || (SELECT 42) || '",
    "a'); SELECT 42; --",
    'q" := 1)) || (SELECT 42) || to_json(struct_pack("r',
    "back\\slash\\' || (SELECT 42) || '",
    "$$ || (SELECT 42) || $$",
    "__floe_ph_0__",
)
