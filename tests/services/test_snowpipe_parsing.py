"""Property tests: no insertFiles body, however odd, gets past parsing as anything but files or a 4xx."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from services.answers import RestError
from services.snowpipe import MAX_PATH_BYTES, parse_insert_files

pytestmark = pytest.mark.unit

CONTENT_TYPES = st.sampled_from(
    ["application/json", "application/json; charset=utf-8", "text/plain", "TEXT/PLAIN", None, "", "x/y"]
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
FILE_ITEMS = st.fixed_dictionaries(
    {"path": st.text(max_size=40) | JSON_VALUES},
    optional={"size": st.none() | st.integers() | st.text(max_size=3), "extra": JSON_VALUES},
)


def check(content_type: str | None, body: bytes) -> None:
    try:
        files = parse_insert_files(content_type, body)
    except RestError as exc:
        assert exc.status in (400, 415) and exc.message
        return
    assert files
    for f in files:
        assert f.path and not f.path.startswith("/") and len(f.path.encode()) <= MAX_PATH_BYTES
        assert f.size is None or (isinstance(f.size, int) and f.size >= 0)


@settings(max_examples=300, deadline=None)
@example("text/plain", b"/")  # once became an empty path
@example("application/json", b'{"files": [{"path": "// "}]}')
@given(CONTENT_TYPES, st.binary(max_size=300))
def test_arbitrary_bytes(content_type: str | None, body: bytes) -> None:
    check(content_type, body)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_arbitrary_json_documents(doc: object) -> None:
    check("application/json", json.dumps(doc).encode())


@settings(max_examples=300, deadline=None)
@given(st.lists(FILE_ITEMS, max_size=6))
def test_arbitrary_file_lists(items: list[dict[str, object]]) -> None:
    check("application/json", json.dumps({"files": items}).encode())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_plain(text: str) -> None:
    check("text/plain", text.encode("utf-8", "surrogatepass"))


def test_deeply_nested_json_is_a_400() -> None:
    with pytest.raises(RestError) as info:
        parse_insert_files("application/json", b"[" * 100_000 + b"]" * 100_000)
    assert info.value.status == 400


def test_valid_bodies() -> None:
    assert [
        (f.path, f.size)
        for f in parse_insert_files(
            "application/json", b'{"files": [{"path": "/a b+c.csv", "size": 3}, {"path": "d"}]}'
        )
    ] == [("a b+c.csv", 3), ("d", None)]
    assert [f.path for f in parse_insert_files("text/plain", "x.csv\r\n\n ü.csv \n".encode())] == [
        "x.csv",
        " ü.csv ",
    ]
