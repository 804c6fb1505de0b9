"""``ON_THE_CLUSTER``'s check (tests/infra/conftest.py): an entry that names no collected test is a
usage error in a run that collected its file whole, and nothing at all in a run that could not have
seen its test (another file, some tests of its file only, the file ignored).

The rules on their own, then the collection hook itself in pytest runs of a copy of the entries'
files (``pytester``), where renaming one test makes the run fail naming its entry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.conftest import ON_THE_CLUSTER, dead_entries, named_by, whole_files

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.unit

FAULTS = "tests/chaos/test_faults.py"
RENAMED = f"{FAULTS}::test_consumer_killed_mid_message"
FILES = sorted({e.partition("::")[0] for e in ON_THE_CLUSTER})


def collection_of(entries: tuple[str, ...] = ON_THE_CLUSTER) -> list[str]:
    """Node ids as a collection of the entries' files gives them: a file entry's file holds two tests,
    a test entry has two parameter sets, and every file holds a test no entry names."""
    ids = []
    for entry in entries:
        if entry.endswith("::"):
            ids += [f"{entry}test_one", f"{entry}test_two"]
        elif entry.endswith("]"):  # one parameter set: the test has another
            ids += [entry, entry.partition("[")[0] + "[unnamed]"]
        else:
            ids += [f"{entry}[a]", f"{entry}[b]"]
    return ids + [f"{f}::test_not_on_the_cluster" for f in FILES]


def test_an_entry_names_its_test_with_its_parameter_sets_or_every_test_of_its_file() -> None:
    assert named_by("t/f.py::", "t/f.py::test_a")
    assert named_by("t/f.py::", "t/f.py::Tests::test_a[1]")
    assert named_by("t/f.py::test_a", "t/f.py::test_a")
    assert named_by("t/f.py::test_a", "t/f.py::test_a[point-3]")
    assert named_by("t/f.py::Tests", "t/f.py::Tests::test_a")
    # A name that merely starts the same is another test, in a file or a class.
    assert not named_by("t/f.py::test_a", "t/f.py::test_a_again")
    assert not named_by("t/f.py::Tests", "t/f.py::Tests2::test_a")
    assert not named_by("t/f.py::test_a", "t/g.py::test_a")
    assert not named_by("t/f.py::", "t/f.pyx::test_a")


def test_every_entry_matches_a_collection_of_its_files() -> None:
    assert dead_entries(ON_THE_CLUSTER, collection_of(), set(FILES)) == []


def test_a_renamed_test_leaves_its_entry_dead() -> None:
    ids = [i.replace(RENAMED, RENAMED + "_once") for i in collection_of()]
    assert RENAMED in ON_THE_CLUSTER and RENAMED + "_once[a]" in ids
    assert dead_entries(ON_THE_CLUSTER, ids, set(FILES)) == [RENAMED]
    # ... unless the run did not collect its file whole.
    assert dead_entries(ON_THE_CLUSTER, ids, set(FILES) - {FAULTS}) == []


def test_a_renamed_file_leaves_its_entry_dead() -> None:
    gone = "tests/e2e/test_autoingest.py"
    ids = [i for i in collection_of() if not i.startswith(gone)]
    assert dead_entries(ON_THE_CLUSTER, ids, set(FILES)) == [f"{gone}::"]


def test_a_file_is_whole_when_an_argument_covers_it_and_nothing_ignored_it(tmp_path: Path) -> None:
    (tmp_path / "tests" / "chaos").mkdir(parents=True)
    (tmp_path / FAULTS).write_text("")
    entries = (f"{FAULTS}::test_x", "tests/e2e/test_gone.py::")
    collected = [f"{FAULTS}::test_x", "tests/infra/test_y.py::test_y"]

    def whole(args: list[str], here: Path = tmp_path, ids: list[str] = collected) -> set[str]:
        return whole_files(entries, args, here, tmp_path, ids)

    # A directory above the files, or the file itself: both, the missing file too (moved or renamed).
    assert whole(["tests"]) == whole([str(tmp_path)]) == {FAULTS, "tests/e2e/test_gone.py"}
    assert whole(["chaos"], here=tmp_path / "tests") == {FAULTS}
    assert whole([FAULTS, "tests/infra/test_y.py"]) == {FAULTS}
    # Some of its tests only, another file, or the file ignored (it exists and gave no test): not whole.
    assert whole([f"{FAULTS}::test_x"]) == set()
    assert whole(["tests/infra/test_y.py"]) == set()
    assert whole(["tests"], ids=["tests/infra/test_y.py::test_y"]) == {"tests/e2e/test_gone.py"}


# ----------------------------------------------------------------- the hook, in pytest runs


@pytest.fixture
def copy(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project holding the entries' files, each with the tests its entries name (and one more),
    and a conftest of ``tests/infra/conftest.py``'s collection hook."""
    pytester.makeini("[pytest]\nmarkers =\n    cluster: on the cluster\n")
    pytester.makeconftest("from tests.infra.conftest import pytest_collection_modifyitems  # noqa: F401\n")
    tests: dict[str, dict[str, list[str]]] = {f: {"test_not_on_the_cluster": []} for f in FILES}
    for entry in ON_THE_CLUSTER:
        path, _, name = entry.partition("::")
        base, _, param = (name or "test_one").partition("[")
        # A parameter set's entry: its test runs that set and one no entry names.
        tests[path].setdefault(base, ["unnamed"] if param else []).extend([param[:-1]] if param else [])
    for path, names in tests.items():
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            "import pytest\n\n\n"
            + "".join(
                (f"@pytest.mark.parametrize('p', {params!r})\ndef {n}(p):\n" if params else f"def {n}():\n")
                + "    pass\n\n\n"
                for n, params in names.items()
            )
        )
    return pytester


def rename(pytester: pytest.Pytester, entry: str, new: str) -> None:
    path, _, name = entry.partition("::")
    target = pytester.path / path
    text = target.read_text()
    assert f"def {name}(" in text
    target.write_text(text.replace(f"def {name}(", f"def {new}("))


def test_the_hook_marks_what_the_entries_name(copy: pytest.Pytester) -> None:
    result = copy.runpytest_inprocess("-m", "cluster", "--collect-only", "-q", "tests")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    marked = {line for line in result.stdout.lines if "::" in line}
    # A file entry's every test; of the other files, only the tests named.
    whole = [e for e in ON_THE_CLUSTER if e.endswith("::")]
    named = {f"{e}{t}" for e in whole for t in ("test_one", "test_not_on_the_cluster")}
    assert marked == named | (set(ON_THE_CLUSTER) - set(whole))


def test_the_hook_refuses_a_run_that_collected_a_renamed_test_s_file(copy: pytest.Pytester) -> None:
    rename(copy, RENAMED, "test_consumer_killed_mid_message_once")
    result = copy.runpytest_inprocess("--collect-only", "-q", "tests")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert f"ON_THE_CLUSTER names no collected test for '{RENAMED}'" in result.stderr.str()
    # -m does not hide it: the check sees the collection before markers deselect.
    assert (
        copy.runpytest_inprocess("-m", "cluster", "--collect-only", FAULTS).ret == pytest.ExitCode.USAGE_ERROR
    )


def test_the_hook_lets_runs_pass_that_could_not_have_seen_the_renamed_test(copy: pytest.Pytester) -> None:
    rename(copy, RENAMED, "test_consumer_killed_mid_message_once")
    for args in (
        ["tests/e2e/test_autoingest.py"],  # another file
        [f"{FAULTS}::test_spark_job_killed_mid_load"],  # some of its file's tests
        ["tests", f"--ignore={FAULTS}"],  # its file left out
    ):
        result = copy.runpytest_inprocess("--collect-only", "-q", *args)
        assert result.ret == pytest.ExitCode.OK, (args, result.stderr.str())
