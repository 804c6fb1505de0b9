"""The user stage ``@~`` in the file commands (LIST, REMOVE, PUT, GET) and its refusal in a pipe's
COPY, as Snowflake's guides write them; and where a user's stage keeps its files (decision 84)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from floe.catalog import User
from floe.catalog.ddl import parse
from floe.catalog.names import Defaults
from floe.catalog.stage_commands import (
    USER_STAGE_NAME,
    GetFiles,
    ListFiles,
    PutFiles,
    RemoveFiles,
    StageLocation,
    parse_file_command,
    parse_location,
)
from floe.catalog.user_stages import user_stage_key, user_stage_url
from floe.errors import CompilationError
from floe.settings import Settings
from tests.cpu_time import cpu_seconds

pytestmark = pytest.mark.unit

D = Defaults()


def user_stage(path: str = "") -> StageLocation:
    return StageLocation(USER_STAGE_NAME, path, user=True)


@pytest.mark.parametrize(
    ("sql", "parsed"),
    [
        # "User stages are referenced using @~; e.g. use LIST @~ to list the files in a user stage."
        # (Snowflake, "Choosing an internal stage for local files")
        ("LIST @~", ListFiles(user_stage())),
        ("ls @~/staged", ListFiles(user_stage("staged"))),
        ("LIST @~/staged PATTERN = '.*[.]csv[.]gz'", ListFiles(user_stage("staged"), ".*[.]csv[.]gz")),
        ("REMOVE @~/staged", RemoveFiles(user_stage("staged"))),
        ("rm '@~/a b/'", RemoveFiles(user_stage("a b/"))),
        # Snowflake's PUT examples: PUT file:///tmp/data/mydata.csv @~ ... and @~/staged.
        ("PUT file:///tmp/data/mydata.csv @~", PutFiles("/tmp/data/mydata.csv", user_stage())),
        ("PUT file:///tmp/data/*.csv @~/staged", PutFiles("/tmp/data/*.csv", user_stage("staged"))),
        # Snowflake's GET example: GET @~/myfiles file:///tmp/data/
        ("GET @~/myfiles file:///tmp/data/", GetFiles(user_stage("myfiles"), "/tmp/data/")),
    ],
)
def test_the_file_commands_take_the_user_stage(sql: str, parsed: object) -> None:
    assert parse_file_command(sql, D) == parsed


def test_a_user_location_writes_back_to_itself() -> None:
    for text in ("@~", "@~/a/b.csv", "@~/x/"):
        location = parse_location(text, D, user=True)
        assert location.user and not location.table
        assert str(location) == text
        assert parse_location(str(location), D, user=True) == location


@pytest.mark.parametrize("text", ["@~x", "@~~", "@~.s"])
def test_anything_but_a_path_after_the_tilde_is_refused(text: str) -> None:
    with pytest.raises(CompilationError, match="the user stage is @~ or @~/path"):
        parse_location(text, D, user=True)


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE PIPE p AS COPY INTO t FROM @~",
        "CREATE PIPE p AS COPY INTO t FROM @~/staged FILE_FORMAT = (TYPE = CSV)",
        "CREATE PIPE p AS COPY INTO t FROM (SELECT $1 FROM @~/staged)",
    ],
)
def test_a_pipe_cannot_read_a_user_stage(sql: str) -> None:
    """Snowflake's Snowpipe REST guide: "Snowpipe doesn't load files from user stages or temporary
    stages." Without the file commands' permission, a location refuses @~."""
    with pytest.raises(CompilationError, match=r"a pipe cannot load from a user stage \(@~\)"):
        parse(sql, D)
    with pytest.raises(CompilationError, match="user stage"):
        parse_location("@~", D)


def test_each_user_incarnation_has_a_stage_of_its_own() -> None:
    settings = Settings()
    ada = User(name="ADA", created_ms=1)
    assert user_stage_key(ada) == user_stage_key(ada.model_copy(update={"default_role": "R"}))  # ALTER
    others = {
        user_stage_key(u)
        for u in (
            ada,
            User(name="ADA", created_ms=2),
            User(name="BOB", created_ms=1),
            User(name="ada", created_ms=1),
        )
    }
    assert len(others) == 4  # created again, or another name: another stage
    url = user_stage_url(settings, ada)
    assert url == f"s3://{settings.stages.bucket}/users/{user_stage_key(ada)}/"
    # Whatever the name holds, the key stays one plain folder.
    assert user_stage_key(User(name='../"x/y"', created_ms=1)).isalnum()


def _timed(sql: str) -> float:
    def work() -> None:
        with contextlib.suppress(CompilationError):
            parse_file_command(sql, D)

    return cpu_seconds(work, repeat=1)


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "LIST @~/" + "a/" * (n // 2),
        lambda n: "LIST @~" + "~" * n,
        lambda n: "LIST '@~/" + "a" * n,
    ],
    ids=["long path", "tildes", "unterminated quote"],
)
def test_user_locations_parse_in_linear_time(make: Callable[[int], str]) -> None:
    # The fastest of a few runs: the machine is shared, and a pause is not the parser's.
    small = min(_timed(make(20_000)) for _ in range(3))
    large = min(_timed(make(40_000)) for _ in range(3))
    assert large <= 3 * small + 0.005, (small, large)
