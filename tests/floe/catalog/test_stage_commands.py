"""LIST, REMOVE, PUT and GET as Snowflake writes them, stage locations (named, table, quoted), and
CREATE STAGE without URL: what the parser reads, what it refuses, and that it stays linear."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from floe.catalog.ddl import CreatePipe, CreateStage, parse
from floe.catalog.names import Defaults, Name
from floe.catalog.stage_commands import (
    GetFiles,
    ListFiles,
    PutFiles,
    RemoveFiles,
    StageLocation,
    parse_file_command,
    parse_location,
)
from floe.errors import CompilationError
from tests.cpu_time import cpu_seconds

pytestmark = pytest.mark.unit

D = Defaults()


def name(n: str, db: str = "FLOE", schema: str = "PUBLIC") -> Name:
    return Name(db, schema, n)


def pf(sql: str) -> object:
    """A PUT or GET as the client reads it (the API refuses them: ``test_the_api_refuses_put_and_get``)."""
    return parse_file_command(sql.strip().rstrip(";"), D)


def refused(sql: str) -> str:
    with pytest.raises(CompilationError) as caught:
        (pf if sql[:3].upper() in ("PUT", "GET") else parse)(sql)
    return caught.value.message


def test_the_api_refuses_put_and_get() -> None:
    assert "the client runs it: use `floe sql`" in refused_by_parse("PUT file:///tmp/a.csv @s")
    assert "`floe get`" in refused_by_parse("GET @s file:///tmp/")


def refused_by_parse(sql: str) -> str:
    with pytest.raises(CompilationError) as caught:
        parse(sql)
    return caught.value.message


@pytest.mark.parametrize(
    ("sql", "location", "pattern"),
    [
        ("LIST @s", StageLocation(name("S")), None),
        ("ls @my_stage/path1", StageLocation(name("MY_STAGE"), "path1"), None),
        ("LIST @%mytable PATTERN='.*data_0.*'", StageLocation(name("MYTABLE"), "", True), ".*data_0.*"),
        (
            "LIST @my_csv_stage/analysis/ PATTERN='.*data_0.*'",
            StageLocation(name("MY_CSV_STAGE"), "analysis/"),
            ".*data_0.*",
        ),
        ("LIST @db.sc.%t/a/b", StageLocation(Name("DB", "SC", "T"), "a/b", True), None),
        ("""LIST '@"my stage"/a b/'""", StageLocation(name("my stage"), "a b/"), None),
        ('LIST @"my stage"/x', StageLocation(name("my stage"), "x"), None),
    ],
)
def test_list(sql: str, location: StageLocation, pattern: str | None) -> None:
    assert parse(sql) == ListFiles(location, pattern)


def test_remove_and_rm() -> None:
    assert parse("REMOVE @mystage/path1/subpath2") == RemoveFiles(
        StageLocation(name("MYSTAGE"), "path1/subpath2")
    )
    assert parse("rm @%orders") == RemoveFiles(StageLocation(name("ORDERS"), "", True))
    assert parse("RM @s pattern='.*jun.*';") == RemoveFiles(StageLocation(name("S")), ".*jun.*")


def test_put() -> None:
    # Snowflake's documented examples.
    assert pf("PUT file:///tmp/data/mydata.csv @my_int_stage;") == PutFiles(
        "/tmp/data/mydata.csv", StageLocation(name("MY_INT_STAGE"))
    )
    assert pf("PUT file:///tmp/data/orders_001.csv @%orderstiny_ext\n  AUTO_COMPRESS = FALSE;") == PutFiles(
        "/tmp/data/orders_001.csv", StageLocation(name("ORDERSTINY_EXT"), "", True), auto_compress=False
    )
    assert pf("PUT 'file:///tmp/data/orders 001.csv' @my_int_stage AUTO_COMPRESS = FALSE") == PutFiles(
        "/tmp/data/orders 001.csv", StageLocation(name("MY_INT_STAGE")), auto_compress=False
    )
    assert pf("put file:///d/*.csv @s/in OVERWRITE=TRUE PARALLEL = 8 SOURCE_COMPRESSION = gzip") == PutFiles(
        "/d/*.csv",
        StageLocation(name("S"), "in"),
        parallel=8,
        overwrite=True,
        source_compression="GZIP",
    )


def test_get() -> None:
    assert pf("GET @%mytable file:///tmp/data/;") == GetFiles(
        StageLocation(name("MYTABLE"), "", True), "/tmp/data/"
    )
    assert pf("GET @s/x file:///tmp/out PARALLEL = 2 PATTERN = '.*[.]gz'") == GetFiles(
        StageLocation(name("S"), "x"), "/tmp/out", 2, ".*[.]gz"
    )


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("LIST @~x", "the user stage is @~ or @~/path"),
        ("LIST s", "a stage location"),
        ("LIST @a.%b.c", "only the table is marked"),
        ("LIST @s PATTERN = '(?=a)b'", "lookahead"),
        ("LIST @s PATTERN = '.*' PATTERN = 'a'", "duplicate option PATTERN"),
        ("LIST @s OVERWRITE = TRUE", "PATTERN = ..."),
        ("PUT /tmp/a.csv @s", "file://"),
        ("PUT file:// @s", "names no path"),
        ("PUT file:///a @s PARALLEL = 0", "PARALLEL; expected 1 to 99"),
        ("PUT file:///a @s PARALLEL = 100", "PARALLEL; expected 1 to 99"),
        ("PUT file:///a @s AUTO_COMPRESS = maybe", "AUTO_COMPRESS; expected TRUE or FALSE"),
        ("PUT file:///a @s SOURCE_COMPRESSION = lzma", "SOURCE_COMPRESSION"),
        ("GET @s file:///a OVERWRITE = TRUE", "PARALLEL = ... or PATTERN = ..."),
    ],
)
def test_refusals(sql: str, said: str) -> None:
    assert said in refused(sql)


def test_a_location_writes_back_to_itself() -> None:
    for text in ("@S", '@"my stage"/a b/', "@DB.SC.%T/x/", '@"lower".S.%"Mixed T"'):
        location = parse_location(text, D)
        assert parse_location(str(location), D) == location
    assert str(parse_location("@s/p", D)) == "@FLOE.PUBLIC.S/p"


def test_create_stage_without_url_is_internal() -> None:
    stage = parse(
        "CREATE OR REPLACE STAGE s FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1) COMMENT = 'raw files'"
    )
    assert isinstance(stage, CreateStage)
    assert stage.internal and stage.url == "" and stage.replace
    assert stage.file_format == {"type": "CSV", "skip_header": 1} and stage.comment == "raw files"
    assert parse("CREATE STAGE s ENCRYPTION = (TYPE = 'SNOWFLAKE_FULL')").internal  # type: ignore[union-attr]
    external = parse("CREATE STAGE e URL = 's3://b/p/' STORAGE_INTEGRATION = i COMMENT = 'c'")
    assert isinstance(external, CreateStage) and not external.internal and external.comment == "c"


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("CREATE STAGE s STORAGE_INTEGRATION = i", "applies to external stages"),
        ("CREATE STAGE s ENCRYPTION = (TYPE = 'SNOWFLAKE_SSE')", "SNOWFLAKE_SSE is not supported"),
        ("CREATE STAGE s URL = 's3://b/' ENCRYPTION = (TYPE = 'SNOWFLAKE_FULL')", "applies to internal"),
        ("CREATE STAGE s URL = 'gcs://b/'", "an S3 location"),
        ("CREATE STAGE s DIRECTORY = (ENABLE = TRUE)", "unsupported stage property"),
    ],
)
def test_create_stage_refusals(sql: str, said: str) -> None:
    assert said in refused(sql)


def test_a_pipe_reads_a_table_stage() -> None:
    pipe = parse("CREATE PIPE p AS COPY INTO t FROM @%t/in FILE_FORMAT = (TYPE = CSV)")
    assert isinstance(pipe, CreatePipe)
    assert pipe.table_stage and pipe.stage == name("T") and pipe.path == "in/"
    named = parse("CREATE PIPE p AS COPY INTO t FROM @s/in")
    assert isinstance(named, CreatePipe) and not named.table_stage and named.stage == name("S")


# Inputs where a backtracking regex would go quadratic or worse; doubling them may at most triple
# the time (plus noise), as tests/floe/catalog/test_parse_linear.py asks of every statement.
LINEAR: dict[str, Callable[[int], str]] = {
    "location, long name": lambda n: "LIST @" + "a" * n,
    "location, long name then junk": lambda n: "LIST @" + "a" * n + " x",
    "location, dots": lambda n: "LIST @" + "a." * (n // 2),
    "location, marks": lambda n: "LIST @" + "%a." * (n // 3),
    "location, quotes": lambda n: 'LIST @"' + '"."' * (n // 3),
    "location, long path": lambda n: "LIST @s/" + "a/" * (n // 2),
    "options, spaces": lambda n: "LIST @s" + " " * n + "x",
    "pattern, unterminated": lambda n: "LIST @s PATTERN = '" + "a" * n,
    "put, long uri": lambda n: "PUT file://" + "/a" * (n // 2) + " @s",
    "put, quoted uri unterminated": lambda n: "PUT 'file://" + "a" * n,
    "get, options repeated": lambda n: "GET @s file:///t" + " PARALLEL = 1" * (n // 13),
}


def _parse(sql: str) -> None:
    with contextlib.suppress(CompilationError):
        parse(sql)


@pytest.mark.parametrize("case", sorted(LINEAR))
def test_the_file_commands_parse_in_linear_time(case: str) -> None:
    make = LINEAR[case]
    small_sql, large_sql = make(20_000), make(40_000)
    small = cpu_seconds(lambda: _parse(small_sql))
    large = cpu_seconds(lambda: _parse(large_sql))
    assert large <= 3 * small + 0.005, f"{case}: {small:.4f} s -> {large:.4f} s"
