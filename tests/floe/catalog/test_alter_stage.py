"""ALTER STAGE ... SET, as Snowflake's ALTER STAGE page writes it (decision 84): what is read, what
is refused, and linear time on adversarial input (as tests/floe/catalog/test_parse_linear.py asks of
every statement)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from floe.catalog.alter_stage import AlterStage
from floe.catalog.ddl import parse
from floe.catalog.names import Defaults, Name
from floe.errors import CompilationError
from tests.cpu_time import cpu_seconds

pytestmark = pytest.mark.unit

D = Defaults()


def name(n: str) -> Name:
    return Name("FLOE", "PUBLIC", n)


def test_set_reads_each_property() -> None:
    # ALTER STAGE's documented examples: SET a file format and a comment, and change the URL.
    s = parse(
        "ALTER STAGE my_int_stage SET FILE_FORMAT = (TYPE = 'CSV' FIELD_DELIMITER = ',' SKIP_HEADER = 1)"
    )
    assert s == AlterStage(
        name("MY_INT_STAGE"), file_format={"type": "CSV", "field_delimiter": ",", "skip_header": 1}
    )
    s = parse("ALTER STAGE IF EXISTS db.sc.my_ext_stage SET URL='s3://loading/files/new/' COMMENT = 'moved'")
    assert s == AlterStage(
        Name("DB", "SC", "MY_EXT_STAGE"), True, url="s3://loading/files/new/", comment="moved"
    )
    assert isinstance(s, AlterStage) and s.relocates
    s = parse("ALTER STAGE s SET STORAGE_INTEGRATION = \"Lake\" FILE_FORMAT = (FORMAT_NAME = 'f')")
    assert s == AlterStage(
        name("S"), storage_integration="Lake", file_format={"format_name": "FLOE.PUBLIC.F"}
    )
    assert not AlterStage(name("S"), comment="c").relocates


def test_a_file_format_keeps_its_parentheses_and_quotes() -> None:
    s = parse(
        "ALTER STAGE s SET FILE_FORMAT = (TYPE = CSV NULL_IF = ('(', ')', 'it''s') ESCAPE = '\\\\') "
        "COMMENT = 'x'"
    )
    assert isinstance(s, AlterStage) and s.comment == "x"
    assert s.file_format == {"type": "CSV", "null_if": ["(", ")", "it's"], "escape": "\\"}


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("ALTER STAGE s RENAME TO t", "ALTER STAGE ... RENAME is not supported"),
        ("ALTER STAGE s REFRESH", "ALTER STAGE ... REFRESH is not supported"),
        ("ALTER STAGE s UNSET TAG t", "ALTER STAGE ... UNSET is not supported"),
        ("ALTER STAGE s SET CREDENTIALS = (AWS_KEY_ID = 'k')", "Floe reads S3 with its own credentials"),
        ("ALTER STAGE s SET ENCRYPTION = (TYPE = 'NONE')", "SET ENCRYPTION is not supported"),
        ("ALTER STAGE s SET DIRECTORY = (ENABLE = TRUE)", "no directory tables"),
        ("ALTER STAGE s SET TAG t = 'v'", "Floe has no tags"),
        ("ALTER STAGE s SET", "expects a stage property"),
        ("ALTER STAGE s SET COPY_OPTIONS = (ON_ERROR = CONTINUE)", "invalid stage property 'COPY_OPTIONS'"),
        ("ALTER STAGE s SET URL = 'gcs://b/'", "an S3 location"),
        ("ALTER STAGE s SET URL = s3", "a quoted URL"),
        ("ALTER STAGE s SET COMMENT = 'a' COMMENT = 'b'", "duplicate property 'COMMENT'"),
        ("ALTER STAGE s SET FILE_FORMAT = (TYPE = CSV", "parentheses are not closed"),
        ("ALTER STAGE s SET FILE_FORMAT = TYPE", "FILE_FORMAT's options in parentheses"),
        ("ALTER STAGE s SET FILE_FORMAT = (TYPE = XML)", "TYPE = XML is not supported"),
        ("ALTER STAGE s SET FILE_FORMAT = (TYPE = CSV) URL", "'=' after URL"),
    ],
)
def test_refusals(sql: str, said: str) -> None:
    with pytest.raises(CompilationError, match=said.replace("(", r"\(").replace(")", r"\)")):
        parse(sql, D)


N = 25_000
CASES: dict[str, Callable[[int], str]] = {
    "spaces after SET": lambda n: "ALTER STAGE s SET" + " " * n + "x",
    "long name": lambda n: "ALTER STAGE " + "a" * n + " SET",
    "dots": lambda n: "ALTER STAGE " + "a ." * (n // 3) + " SET",
    "unterminated comment": lambda n: "ALTER STAGE s SET COMMENT = '" + "a" * n,
    "quote pairs": lambda n: "ALTER STAGE s SET COMMENT = '" + "''" * (n // 2),
    "open parentheses": lambda n: "ALTER STAGE s SET FILE_FORMAT = " + "(" * n,
    "quoted parentheses": lambda n: "ALTER STAGE s SET FILE_FORMAT = ('" + "(" * n,
    "backslashes": lambda n: "ALTER STAGE s SET FILE_FORMAT = ('" + "\\" * n,
    "many properties": lambda n: "ALTER STAGE s SET" + " COMMENT = 'x'" * (n // 14),
}


def _timed(sql: str) -> float:
    def work() -> None:
        with contextlib.suppress(CompilationError):
            parse(sql, D)

    return cpu_seconds(work, repeat=1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_linear(case: str) -> None:
    make = CASES[case]
    # The fastest of a few runs: the machine is shared, and a pause is not the parser's.
    small = min(_timed(make(N)) for _ in range(3))
    large = min(_timed(make(2 * N)) for _ in range(3))
    assert large <= 3 * small + 0.005, f"{case}: {small:.4f} s then {large:.4f} s"
