"""The linear-time matchers: SHOW ... LIKE and a pipe's PATTERN (issue 9, items 5 and 6)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe.catalog.models import CopySpec, Pipe
from floe.errors import CompilationError
from floe.patterns import compile_pattern, like_matcher, stored_pattern
from tests.cpu_time import cpu_seconds

pytestmark = pytest.mark.unit

# A bound against exponential blowup, not a performance figure: RE2 and the LIKE matcher answer
# these in microseconds; Python's re took 2.9 s for (a+)+b on 27 characters.
BLOWUP_S = 0.2


def _timed(match: object, text: str) -> tuple[bool, float]:
    assert callable(match)
    result: object = None

    def work() -> None:
        nonlocal result
        result = match(text)

    took = cpu_seconds(work, repeat=1)
    return bool(result), took


# --- SHOW ... LIKE ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("A%", "ABC", True),
        ("a%", "ABC", True),  # case-insensitive both ways
        ("A%", "abc", True),
        ("A%", "XA", False),
        ("%A", "XA", True),
        ("%B%", "ABC", True),
        ("%B%", "AC", False),
        ("A_C", "ABC", True),
        ("A_C", "AC", False),  # _ is exactly one character
        ("A_C", "ABBC", False),
        ("___", "abc", True),
        ("___", "ab", False),
        ("%", "", True),
        ("%", "anything at all", True),
        ("", "", True),
        ("", "A", False),
        ("ABC", "ABC", True),
        ("AB", "ABC", False),  # the whole name, not a prefix
        ("BC", "ABC", False),
        ("%%%C", "ABC", True),
        ("A%%", "A", True),
        ("%_%", "", False),
        ("%_%", "x", True),
        # regex metacharacters are literal in LIKE
        ("a.b", "a.b", True),
        ("a.b", "aXb", False),
        ("a+b", "a+b", True),
        ("a+b", "aab", False),
        ("(x)", "(x)", True),
        ("[ab]", "[AB]", True),
        ("[ab]", "a", False),
        ("$^*?|{1}", "$^*?|{1}", True),
        ("a\\b", "a\\b", True),  # no escape character: a backslash is itself
        ("a\\_", "a\\x", True),
        ("a\\_", "a_", False),
        ("%", "line\nbreak", True),  # % and _ cross newlines
        ("line_break", "line\nbreak", True),
        ("straße%", "STRASSE", False),  # one character at a time, no case-folding expansion
        ("É%", "école", True),
        ("é%", "École", True),
    ],
)
def test_like_semantics(pattern: str, name: str, expected: bool) -> None:
    assert like_matcher(pattern)(name) is expected


def _like_by_regex(pattern: str, name: str) -> bool:
    """The translation Floe used before (correct, but backtracking): the reference."""
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.IGNORECASE | re.DOTALL) is not None


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="aAb%_.", max_size=8), st.text(alphabet="aAbB._%", max_size=12))
def test_like_agrees_with_the_regex_translation(pattern: str, name: str) -> None:
    assert like_matcher(pattern)(name) == _like_by_regex(pattern, name)


def test_like_with_forty_percent_signs_does_not_blow_up() -> None:
    """Item 5: 40 % against a long name that does not match took over 60 s with re."""
    pattern = "%a" * 40 + "%b"
    name = "a" * 10_000
    matched, took = _timed(like_matcher(pattern), name)
    assert not matched and took < BLOWUP_S * 10
    matched, took = _timed(like_matcher("%" * 40 + "x" * 5_000 + "%"), "x" * 4_999 + "y" * 5_000)
    assert not matched and took < BLOWUP_S * 10


def test_like_with_underscores_is_bounded_by_the_name() -> None:
    """With _, the worst case is len(name) * len(pattern); names are at most 255 characters
    (floe.catalog.access.IDENTIFIER_MAX_LENGTH), and a pattern needing more characters than the
    name has is rejected before any matching."""
    name = "x" * 255
    matched, took = _timed(like_matcher("%" + "x_" * 120 + "y%"), name)
    assert not matched and took < BLOWUP_S
    matched, took = _timed(like_matcher("%_" * 50_000), name)
    assert not matched and took < BLOWUP_S
    assert like_matcher("%" + "x_" * 120 + "%")(name)


# --- PATTERN ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        (".*[.]csv", "a/b.csv", True),
        (".*[.]csv", "b.csv", True),
        (".*[.]csv", "b.csv.gz", False),  # a full match, not a search
        (".*[.]csv", "bxcsv", False),
        (".*/2026/.*", "data/2026/01.csv", True),
        (".*/2026/.*", "2026/01.csv", False),
        (".*/2026/.*", "data/2025/01.csv", False),
        (r"sub/.*\.json", "sub/x.json", True),
        (r"sub/.*\.json", "other/sub/x.json", False),
        ("(?i).*[.]CSV", "x.csv", True),
        (r"\d{4}-\d{2}/.*", "2026-01/a.csv", True),
        ("(a+)+b", "a" * 30 + "b", True),
        ("(a+)+b", "a" * 30, False),
    ],
)
def test_pattern_semantics_unchanged(pattern: str, path: str, expected: bool) -> None:
    assert compile_pattern(pattern)(path) is expected
    if len(path) < 20:  # Python's re is the old reference; its worst case stays tiny here
        assert (re.fullmatch(pattern, path) is not None) is expected


def test_nested_quantifier_runs_in_linear_time() -> None:
    """Item 6: (a+)+b against 27 a's took 2.9 s under re, doubling with each extra character."""
    matched, took = _timed(compile_pattern("(a+)+b"), "a" * 1024)
    assert not matched and took < BLOWUP_S


@pytest.mark.parametrize(
    ("pattern", "advice"),
    [
        (
            "a(?=b)",
            "PATTERN uses a lookahead, which Floe's linear-time matcher (RE2) does not support; "
            "rewrite it without (?=...)",
        ),
        (".*(?!tmp)", "negative lookahead"),
        ("(?<=x)a", "lookbehind"),
        ("(?<!x)a", "negative lookbehind"),
        (r"(a)\1", r"backreference (\1)"),
        ("(?P<d>a)(?P=d)", "named backreference"),
        ("a++", "possessive quantifier"),
        ("(?>a)", "atomic group"),
        (r"x\Z", "use $"),
        ("[a-", "invalid PATTERN: missing ]"),
        (r"\pL{1000}", "PATTERN is too large"),  # bounded by max_mem, not by the machine
    ],
)
def test_patterns_re2_cannot_run_are_refused_with_advice(pattern: str, advice: str) -> None:
    with pytest.raises(CompilationError) as info:
        compile_pattern(pattern)
    assert advice in info.value.message
    assert f"(PATTERN = '{pattern}')" in info.value.message


@pytest.fixture
def fresh_cache() -> Iterator[None]:
    stored_pattern.cache_clear()
    yield
    stored_pattern.cache_clear()


def _pipe(pattern: str | None) -> Pipe:
    spec = CopySpec(table="D.S.T", stage="D.S.ST", pattern=pattern)
    return Pipe(name="D.S.P", copy_spec=spec, table_id="t1", stage_url="s3://b/in/")


def test_stored_pipe_with_a_pattern_re2_refuses_matches_nothing_and_warns_once(
    fresh_cache: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A pipe created before CREATE PIPE checked PATTERN must not crash the consumer or the API."""
    caplog.set_level(logging.WARNING, logger="floe.patterns")
    pipe = _pipe(r"(?!tmp/).*\.csv")
    assert [pipe.matches(p) for p in ("a.csv", "tmp/a.csv", "b.json")] == [False, False, False]
    assert _pipe(r"(?!tmp/).*\.csv").matches("c.csv") is False
    warnings = [r for r in caplog.records if r.name == "floe.patterns"]
    assert len(warnings) == 1
    assert "matches no file until it is recreated" in warnings[0].getMessage()
    assert "negative lookahead" in warnings[0].getMessage()


def test_pipe_matches_with_and_without_pattern(fresh_cache: None) -> None:
    assert _pipe(None).matches("any/file.bin")
    assert not _pipe(None).matches("dir/")
    assert _pipe(".*[.]csv").matches("x/y.csv")
    assert not _pipe(".*[.]csv").matches("x/y.json")


def test_compiled_patterns_are_cached() -> None:
    from floe.patterns import _compile

    before = _compile.cache_info().hits
    compile_pattern(".*cached[.]csv")
    compile_pattern(".*cached[.]csv")
    assert _compile.cache_info().hits > before


# --- random PATTERNs through the matcher, each call bounded in time ---------------------------

_ATOMS = st.sampled_from(["a", "b", "/", ".", r"\.", "[ab]", "[^/]", r"\d", r"\w", "(a|a)", "(a|ab)", "x"])


def _quantified(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(inner, st.sampled_from(["+", "*", "?", "{1,3}", "{2}", "+?", "*?"])).map(
        lambda t: f"(?:{t[0]}){t[1]}"
    )


PATTERNS = st.recursive(
    _ATOMS,
    lambda inner: st.one_of(
        _quantified(inner),  # nested quantifiers: (a+)+, ((a|a)*)*
        st.lists(inner, min_size=2, max_size=4).map("".join),
        st.lists(inner, min_size=2, max_size=3).map(lambda alts: "(" + "|".join(alts) + ")"),
    ),
    max_leaves=12,
)
PATHS = st.one_of(
    st.text(alphabet="ab/.x1", max_size=1024),
    st.tuples(st.sampled_from("ab"), st.integers(1, 1023), st.sampled_from(["", "!", "b", "/"])).map(
        lambda t: (t[0] * t[1] + t[2])[:1024]
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PATTERNS, PATHS)
def test_random_patterns_run_in_bounded_time(pattern: str, path: str) -> None:
    assert len(path.encode()) <= 1024
    try:
        match = compile_pattern(pattern)
    except CompilationError:
        return  # refused at CREATE PIPE with advice; nothing runs
    matched, took = _timed(match, path)
    assert took < BLOWUP_S, f"PATTERN {pattern!r} took {took:.3f} s on a path of {len(path)} characters"
    if len(path) <= 8:  # short enough for Python's re, the old engine, to be the reference
        assert matched == (re.fullmatch(pattern, path) is not None)
