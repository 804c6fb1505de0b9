"""tests/workers.py: the stack's tests go to one xdist worker, and a stray one is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.workers import STACK_SCOPE, misplaced, scope_of

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Item:
    """What ``misplaced`` reads of a collected test."""

    nodeid: str
    fixturenames: tuple[str, ...]


@pytest.mark.unit
def test_the_stack_tests_form_one_scope_and_the_others_their_modules() -> None:
    assert scope_of("tests/e2e/test_autoingest.py::test_x") == STACK_SCOPE
    assert scope_of("tests/security/test_redos.py::test_y[a]") == STACK_SCOPE
    assert scope_of("tests/front/test_demo.py::test_z") == STACK_SCOPE
    assert scope_of("tests/front/test_cli.py::test_z") == "tests/front/test_cli.py"
    assert scope_of("tests/floe/test_keys.py::TestK::test_a") == "tests/floe/test_keys.py::TestK"


@pytest.mark.unit
def test_a_stack_test_outside_the_paths_is_named() -> None:
    items = [
        Item("tests/e2e/test_a.py::test_a", ("stack",)),
        Item("tests/floe/test_b.py::test_b", ("stack", "tmp_path")),
        Item("tests/floe/test_c.py::test_c", ("tmp_path",)),
    ]
    assert misplaced(items) == ["tests/floe/test_b.py::test_b"]  # type: ignore[arg-type]


CONFTEST = """
import os
import pytest
from tests.workers import pytest_runtest_setup, pytest_xdist_make_scheduler  # noqa: F401

@pytest.fixture(scope="session")
def stack():
    # One line per session that started a "stack": the test counts them.
    with open(os.environ["STARTS"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
    return "stack"
"""

STACK_TEST = """
import os
def test_{n}(stack):
    with open(os.environ["RAN"], "a") as f:
        f.write("{n} " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""

PLAIN_TEST = """
import os
def test_{n}():
    with open(os.environ["RAN"], "a") as f:
        f.write("{n} " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def _project(root: Path, files: dict[str, str]) -> None:
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text(CONFTEST)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _run(root: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        # The generated project's `tests` package is its own: Floe's comes through sys.path's end.
        "PYTHONPATH": str(ROOT),
        "STARTS": str(root / "starts.txt"),
        "RAN": str(root / "ran.txt"),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q", "tests"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.integration
def test_two_workers_start_one_stack_and_share_the_rest(tmp_path: Path) -> None:
    files = {f"tests/e2e/test_s{i}.py": STACK_TEST.format(n=f"s{i}") for i in range(4)}
    files |= {f"tests/floe/test_p{i}.py": PLAIN_TEST.format(n=f"p{i}") for i in range(8)}
    _project(tmp_path, files)
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = dict(line.split() for line in (tmp_path / "ran.txt").read_text().splitlines())
    assert len(ran) == 12
    stack_workers = {ran[f"s{i}"] for i in range(4)}
    assert len(stack_workers) == 1  # every stack test on one worker
    assert (tmp_path / "starts.txt").read_text().split() == list(stack_workers)  # one stack started
    assert set(ran.values()) == {"gw0", "gw1"}  # and the other worker did the rest's share


@pytest.mark.integration
def test_a_stack_test_outside_the_paths_stops_the_run(tmp_path: Path) -> None:
    _project(tmp_path, {"tests/floe/test_stray.py": STACK_TEST.format(n="stray")})
    done = _run(tmp_path)
    assert done.returncode != 0
    assert "tests/floe/test_stray.py::test_stray" in done.stdout + done.stderr
    assert "STACK_PATHS" in done.stdout + done.stderr
    assert not (tmp_path / "ran.txt").exists()  # failed before it ran
    assert not (tmp_path / "starts.txt").exists()  # and before its stack started
