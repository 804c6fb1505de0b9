"""A path a client or a notification names stays inside the pipe's stage (issue 31, item 2).

insertFiles stripped a leading ``/`` only: with OPERATE on a pipe whose stage is
``s3://b/allowed/``, ``../secret/x.csv`` and ``a/../../secret/x.csv`` answered 200, and
``s3://b/secret/x.csv`` loaded into the table. A dot segment, as written or percent-encoded, now
names no file of a stage: insertFiles refuses it with 400, and every mapping of an object key to a
pipe (S3 notifications, REFRESH, insertFiles, the queue a replaced pipe hands over) finds it
outside the pipe's location.
"""

from __future__ import annotations

import json

import pytest

from floe.catalog.models import CopySpec, FileFormat, Pipe, has_dot_segment
from services.answers import RestError
from services.snowpipe import parse_insert_files

pytestmark = pytest.mark.unit

ESCAPES = [
    "../secret/x.csv",
    "a/../../secret/x.csv",
    "./x.csv",
    "a/./b.csv",
    "a/..",
    "%2e%2e/secret/x.csv",
    "%2E%2e/secret/x.csv",
    "a/%2e/b.csv",
    "%252e%252e/secret/x.csv",  # encoded twice: a layer that decodes twice resolves it
    "..%2fsecret/x.csv",
    "..%5csecret/x.csv",
    "a\\..\\..\\secret\\x.csv",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_insert_files_refuses_a_path_with_a_dot_segment(path: str) -> None:
    for content_type, body in (
        ("application/json", json.dumps({"files": [{"path": "ok.csv"}, {"path": path}]})),
        ("text/plain", f"ok.csv\n{path}\n"),
    ):
        with pytest.raises(RestError) as caught:
            parse_insert_files(content_type, body.encode())
        assert caught.value.status == 400
        assert "files[1].path has a '.' or '..' segment" in str(caught.value)


def _pipe() -> Pipe:
    spec = CopySpec(table="D.S.T", stage="D.S.ST", file_format=FileFormat(type="CSV"), on_error="SKIP_FILE")
    return Pipe(name="D.S.P", copy_spec=spec, table_id="t1", stage_url="s3://b/allowed/", owner="R")


@pytest.mark.parametrize("path", ESCAPES)
def test_a_key_with_a_dot_segment_is_outside_every_pipe(path: str) -> None:
    """What a notification, REFRESH or insertFiles maps through ``Pipe.relative_path``."""
    pipe = _pipe()
    assert pipe.relative_path("allowed/" + path) is None
    assert pipe.relative_path(pipe.object_key(path)) is None


@pytest.mark.parametrize(
    "path",
    ["x.csv", "a/b.csv", "a.b/..c.csv", "...", "a/.../b.csv", "100%.csv", "a%20b.csv", ".hidden/x.csv"],
)
def test_dots_inside_a_name_are_a_name(path: str) -> None:
    assert not has_dot_segment(path)
    assert parse_insert_files("text/plain", path.encode())[0].path == path
    assert _pipe().relative_path("allowed/" + path) == path
