"""ALTER PIPE [IF EXISTS] p REFRESH [PREFIX = '<path>'] [MODIFIED_AFTER = '<timestamp>'], parsed.

What REFRESH does with a pipe is tested against LocalStack and Redis in
tests/services/test_pipe_refresh.py; its parse time on long inputs in test_parse_linear.py."""

from __future__ import annotations

import datetime as dt

import pytest

from floe.catalog.ddl import AlterPipe, AlterPipeRefresh, Name, parse
from floe.errors import CompilationError

pytestmark = pytest.mark.unit

P = Name("FLOE", "PUBLIC", "P")


def refresh(sql: str) -> AlterPipeRefresh:
    s = parse(sql)
    assert isinstance(s, AlterPipeRefresh), s
    return s


def test_a_bare_refresh_names_the_pipe_and_nothing_else() -> None:
    assert parse("ALTER PIPE p REFRESH") == AlterPipeRefresh(P)
    assert parse("  alter   pipe\n p\trefresh ;") == AlterPipeRefresh(P)


def test_names_qualify_as_in_every_other_statement() -> None:
    assert refresh("ALTER PIPE db.sch.p REFRESH").name == Name("DB", "SCH", "P")
    assert refresh('ALTER PIPE "Mixed Case" REFRESH').name == Name("FLOE", "PUBLIC", "Mixed Case")
    assert refresh('ALTER PIPE "CLICKS-STREAMING" REFRESH').name.name == "CLICKS-STREAMING"
    assert refresh("ALTER PIPE IF EXISTS s.p REFRESH") == AlterPipeRefresh(
        Name("FLOE", "S", "P"), if_exists=True
    )


def test_prefix_is_kept_as_written() -> None:
    assert refresh("ALTER PIPE p REFRESH PREFIX = 'd1/'").prefix == "d1/"
    assert refresh("ALTER PIPE p REFRESH prefix='2026/11/ev'").prefix == "2026/11/ev"  # a key prefix
    assert refresh("ALTER PIPE p REFRESH PREFIX = 'it''s/'").prefix == "it's/"
    assert refresh("ALTER PIPE p REFRESH PREFIX = ''").prefix == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-20T13:56:46-07:00", dt.datetime(2026, 11, 20, 20, 56, 46, tzinfo=dt.UTC)),
        ("2026-11-20T20:56:46Z", dt.datetime(2026, 11, 20, 20, 56, 46, tzinfo=dt.UTC)),
        ("2026-11-20 20:56:46.250+00:00", dt.datetime(2026, 11, 20, 20, 56, 46, 250_000, tzinfo=dt.UTC)),
        # No offset: UTC, since Floe has no session time zone.
        ("2026-11-20T20:56:46", dt.datetime(2026, 11, 20, 20, 56, 46, tzinfo=dt.UTC)),
        ("2026-11-20", dt.datetime(2026, 11, 20, tzinfo=dt.UTC)),
    ],
)
def test_modified_after_reads_iso_8601(text: str, expected: dt.datetime) -> None:
    s = refresh(f"ALTER PIPE p REFRESH MODIFIED_AFTER = '{text}'")
    assert s.modified_after == expected
    assert s.modified_after is not None and s.modified_after.tzinfo is not None


def test_the_options_come_in_either_order() -> None:
    one = parse("ALTER PIPE p REFRESH PREFIX = 'd1/' MODIFIED_AFTER = '2026-11-20T00:00:00Z'")
    other = parse("ALTER PIPE p REFRESH MODIFIED_AFTER = '2026-11-20T00:00:00Z' PREFIX = 'd1/'")
    assert one == other == AlterPipeRefresh(P, False, "d1/", dt.datetime(2026, 11, 20, tzinfo=dt.UTC))


def test_set_still_pauses() -> None:
    assert parse("ALTER PIPE p SET PIPE_EXECUTION_PAUSED = TRUE") == AlterPipe(P, True)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "ALTER PIPE p REFRESH PATTERN = '.*'",
            "unexpected 'PATTERN'. ALTER PIPE ... REFRESH expects PREFIX = '<path>' or MODIFIED_AFTER",
        ),
        ("ALTER PIPE p REFRESH PREFIX 'd1/'", "unexpected ''d1/''. ALTER PIPE ... REFRESH expects '=' after"),
        ("ALTER PIPE p REFRESH PREFIX = d1", "expects a quoted path after PREFIX ="),
        ("ALTER PIPE p REFRESH PREFIX = 'd1/", "expects a quoted path after PREFIX ="),
        (
            "ALTER PIPE p REFRESH MODIFIED_AFTER = 2026-11-20",
            "expects a quoted timestamp after MODIFIED_AFTER",
        ),
        ("ALTER PIPE p REFRESH MODIFIED_AFTER = 'yesterday'", "invalid MODIFIED_AFTER 'yesterday'"),
        ("ALTER PIPE p REFRESH MODIFIED_AFTER = '2026-13-01'", "expected an ISO-8601 timestamp"),
        # fromisoformat alone would read fifty digits as a time in the year 1111.
        ("ALTER PIPE p REFRESH MODIFIED_AFTER = '" + "1" * 50 + "'", "invalid MODIFIED_AFTER '1111"),
        ("ALTER PIPE p REFRESH PREFIX = 'a' PREFIX = 'b'", "duplicate option PREFIX"),
        ("ALTER PIPE p REFRESH PREFIX = 'a' x", "unexpected 'x'"),
        ("ALTER PIPE p REFRESH PREFIX = 'a', MODIFIED_AFTER = '2026-11-20'", "unexpected ','"),
        ("ALTER PIPE " + "n" * 256 + " REFRESH", "is too long (256 characters)"),
    ],
)
def test_errors_say_what_is_expected(sql: str, message: str) -> None:
    with pytest.raises(CompilationError) as info:
        parse(sql)
    assert message in info.value.message


def test_a_word_that_only_starts_with_refresh_is_not_refresh() -> None:
    with pytest.raises(CompilationError, match="unsupported statement: ALTER"):
        parse("ALTER PIPE p REFRESHED")
