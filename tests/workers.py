"""How `make test` shares the suite between pytest-xdist workers (decision 87).

Every test that uses the session ``stack`` fixture (a running API, consumer and Spark job) goes to
one worker, as one unit of work: a second worker given any of them would start a second stack,
which costs a Spark job's start-up and memory and competes with the first for the two cores. The
other tests are shared out a module at a time, so a module's own fixtures start once.

xdist's ``--dist loadgroup`` would do this with ``xdist_group`` marks, but under pytest 9 its group
never reaches the scheduler (it renames ``item._nodeid``, which pytest 9 no longer reads). So the
scheduler here groups by path, and each worker checks at collection that every test using the
stack lies under one of those paths before it runs, so a new end-to-end module cannot silently
start a second stack.
"""

from __future__ import annotations

from typing import Any

import pytest

STACK_PATHS = (
    "tests/e2e/",
    "tests/chaos/",
    "tests/security/",
    "tests/front/test_demo.py",
    "tests/services/test_query_pruning_e2e.py",
)
"""Where the tests that use the session stack live: they all run on one worker."""

STACK_SCOPE = "floe-stack"
"""The one unit of work those tests form."""


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: the stack's, or its module (or class)."""
    if nodeid.startswith(STACK_PATHS):
        return STACK_SCOPE
    return nodeid.rsplit("::", 1)[0]


def misplaced(items: list[pytest.Item]) -> list[str]:
    """The tests that use the stack but lie outside STACK_PATHS."""
    return [
        item.nodeid
        for item in items
        if "stack" in getattr(item, "fixturenames", ()) and not item.nodeid.startswith(STACK_PATHS)
    ]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A load-by-scope scheduler whose scopes are ``scope_of``'s."""
    from xdist.scheduler import LoadScopeScheduling

    class StackScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's scope scheduler, with the stack's tests as one scope."""

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return StackScopeScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under xdist, fail a test that uses the stack from outside STACK_PATHS, before its fixtures
    start one."""
    if hasattr(item.config, "workerinput") and misplaced([item]):
        pytest.fail(
            f"{item.nodeid} uses the session stack but is not under tests/workers.py's STACK_PATHS, so "
            "a second xdist worker would start a second stack: add its path there.",
            pytrace=False,
        )
