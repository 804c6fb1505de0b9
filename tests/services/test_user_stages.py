"""User stages (``@~``) through the real API, as tests/services/test_stages.py drives internal stages:
PUT, LIST, GET and REMOVE on each user's own stage, sealed at rest beside the other internal
stages; no other user reaches it, whatever its roles; nothing can be granted on it; it goes with its
user; and no pipe loads from it (decision 84).

Snowflake's texts ("Choosing an internal stage for local files"): "User stages are referenced using
@~; e.g. use LIST @~ to list the files in a user stage", "Unlike named stages, user stages cannot be
altered or dropped"; Snowpipe's REST guide: "Snowpipe doesn't load files from user stages"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.harness import unique
from floe.catalog.user_stages import USER_PREFIX
from floe.stage_crypto import MAGIC
from front.client import StatementRejected
from tests.services.test_stages import Served, admin, get_rows, put_rows
from tests.services.test_stages import served as served  # the fixture, re-exported

pytestmark = pytest.mark.integration


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_each_user_puts_lists_gets_and_removes_on_its_own_stage(served: Served, tmp_path: Path) -> None:
    ada, bob = served.user(unique("r_")), served.user(unique("r_"))
    src = write(tmp_path / "events.csv", b"1,view\n2,click\n")

    rows = put_rows(served, f"PUT file://{src} @~/staged", ada)
    assert [(r["target"], r["status"]) for r in rows] == [("events.csv.gz", "UPLOADED")]
    # LIST shows the path in the stage, as for a table's stage.
    (listed,) = served.sql("LIST @~", ada)
    assert listed["name"] == "staged/events.csv.gz" and listed["size"] == rows[0]["target_size"]
    assert [r["name"] for r in served.sql("LS @~/staged PATTERN = '.*[.]gz'", ada)] == [
        "staged/events.csv.gz"
    ]

    # Sealed at rest, under the user's own prefix of the stages bucket.
    ((key, body),) = served.objects(USER_PREFIX).items()
    assert re.fullmatch(r"users/[0-9a-f]{32}/staged/events[.]csv[.]gz", key) and body.startswith(MAGIC)

    got = get_rows(served, f"GET @~/staged file://{tmp_path}/back/", ada)
    assert [(r["file"], r["status"]) for r in got] == [("events.csv.gz", "DOWNLOADED")]

    # Another user, and the administrator (ACCOUNTADMIN), see their own stage only: nothing here.
    assert served.sql("LIST @~", bob) == []
    assert served.sql("LIST @~") == []
    assert get_rows(served, f"GET @~ file://{tmp_path}/bob/", bob) == []
    assert served.sql("REMOVE @~", bob) == []
    assert len(served.objects(USER_PREFIX)) == 1

    # OVERWRITE = FALSE skips the file already there, as on any internal stage.
    assert put_rows(served, f"PUT file://{src} @~/staged", ada)[0]["status"] == "SKIPPED"
    assert [r["result"] for r in served.sql("REMOVE @~/staged/", ada)] == ["removed"]
    assert served.sql("LIST @~", ada) == [] and served.objects(USER_PREFIX) == {}


def test_nothing_is_granted_on_a_user_stage_and_no_pipe_reads_it(served: Served) -> None:
    with pytest.raises(StatementRejected, match="syntax error"):
        served.sql("GRANT READ ON STAGE @~ TO ROLE public")
    served.sql("CREATE TABLE t (a INT)")
    with pytest.raises(StatementRejected, match=r"a pipe cannot load from a user stage \(@~\)"):
        served.sql("CREATE PIPE p AS COPY INTO t FROM @~/staged")
    with pytest.raises(StatementRejected, match="the user stage is @~ or @~/path"):
        served.sql("LIST @~other")


def test_a_users_stage_goes_with_the_user(served: Served, tmp_path: Path) -> None:
    role = unique("r_")
    who = served.user(role)
    src = write(tmp_path / "a.csv", b"1\n")
    assert put_rows(served, f"PUT file://{src} @~", who)[0]["status"] == "UPLOADED"
    assert len(served.objects(USER_PREFIX)) == 1
    served.sql(f"DROP USER {who.user}")
    assert served.objects(USER_PREFIX) == {}

    # A user created again under the name starts with an empty stage of its own.
    again = served.user(role)
    assert put_rows(served, f"PUT file://{src} @~", again)[0]["status"] == "UPLOADED"
    served.sql(f"CREATE OR REPLACE USER {again.user}")
    assert served.objects(USER_PREFIX) == {}


def test_the_admin_has_a_stage_too(served: Served, tmp_path: Path) -> None:
    src = write(tmp_path / "mine.csv", b"x\n")
    assert (
        put_rows(served, f"PUT file://{src} @~ AUTO_COMPRESS = FALSE", admin(served))[0]["status"]
        == "UPLOADED"
    )
    assert [r["name"] for r in served.sql("LIST @~")] == ["mine.csv"]
