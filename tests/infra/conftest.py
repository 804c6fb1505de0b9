"""The Redis Cluster the tests marked ``cluster`` run on, and which other tests are marked so.

``make test-cluster`` points the whole session at a local cluster (``FLOE_REDIS__CLUSTER=true`` and
``FLOE_REDIS__URL``, so ``base_settings`` and every stack the tests start use it) and runs
``pytest -m cluster``: the cluster's own tests below, and the end-to-end tests named in
``ON_THE_CLUSTER``. Run with ``-m cluster`` but without those settings, ``redis_cluster`` starts a
cluster of its own on free ports and stops it afterwards. Without ``-m cluster`` the tests that need a
cluster are deselected, so ``make test`` starts none.

An entry of ``ON_THE_CLUSTER`` that names no collected test is a usage error (``dead_entries``),
so a renamed or moved test cannot silently drop off the cluster run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from bench.harness import unique
from floe.settings import Settings
from infra import redis_cluster as local_cluster
from infra.stack import write_redis_users

ON_THE_CLUSTER = (
    "tests/e2e/test_autoingest.py::",
    "tests/e2e/test_snowpipe_sdk.py::",
    # The kills of a load in Spark tasks: their Python workers hold Redis clients of their own (a
    # channel's rows), where a load in the driver uses the driver's, as every other test here does.
    "tests/chaos/test_faults.py::test_spark_job_killed_mid_load[pipeline.reading-40-tasks]",
    "tests/chaos/test_faults.py::test_spark_job_killed_mid_load[pipeline.after_blobs-1-tasks]",
    "tests/chaos/test_faults.py::test_spark_job_killed_mid_load[pipeline.after_commit-1-tasks]",
    "tests/chaos/test_faults.py::test_job_killed_again_while_replaying_the_killed_batch",
    "tests/chaos/test_faults.py::test_job_killed_between_the_commits_of_two_pipes_in_one_batch",
    "tests/chaos/test_faults.py::test_consumer_killed_mid_message",
    "tests/chaos/test_faults.py::test_api_killed_while_insert_files_calls_are_in_flight",
)
"""End-to-end tests that ``make test-cluster`` runs with the whole stack on the cluster: auto-ingest,
REST (the Snowpipe SDK's insertFiles and reports) and the exactly-once kill tests. They run in
``make test`` on the single Redis as well. An entry is a whole file (``path::``), one test with
all its parameter sets (``path::name``, ``named_by``) or one parameter set (``path::name[id]``)."""


CLUSTER_FIXTURES = ("redis_cluster", "own_cluster")
"""Tests using these start or need a Redis Cluster: without ``-m cluster`` they are deselected."""


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    nodeids = [i.nodeid for i in items]
    # Before -m and -k deselect: the whole collection is what an entry must match. --lf collects
    # only the tests that failed last, so no file is whole.
    lf = config.getoption("lf", False)
    args, here, root = config.args, config.invocation_params.dir, config.rootpath
    whole = set() if lf else whole_files(ON_THE_CLUSTER, args, here, root, nodeids)
    dead = dead_entries(ON_THE_CLUSTER, nodeids, whole)
    if dead:
        raise pytest.UsageError(
            "tests/infra/conftest.py: ON_THE_CLUSTER names no collected test for "
            + ", ".join(repr(e) for e in dead)
            + ": rename the entry with its test, or remove it (make test-cluster would skip it silently)"
        )
    for item in items:
        if any(named_by(entry, item.nodeid) for entry in ON_THE_CLUSTER):
            item.add_marker(pytest.mark.cluster)
    if cluster_selected(config):
        return
    # Deselected, not skipped: `make test` reports no test it did not mean to run.
    dropped = [i for i in items if set(getattr(i, "fixturenames", ())) & set(CLUSTER_FIXTURES)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i not in dropped]


def named_by(entry: str, nodeid: str) -> bool:
    """Whether ``entry`` of ``ON_THE_CLUSTER`` names the test ``nodeid``: every test of the file for
    ``path::``; else that test, its parameter sets (``[...]``) and a class's tests (``::``), but no
    other test whose name merely starts the same (``test_x`` is not ``test_x_again``)."""
    if entry.endswith("::"):
        return nodeid.startswith(entry)
    return nodeid == entry or nodeid.startswith((entry + "[", entry + "::"))


def dead_entries(entries: Iterable[str], nodeids: Iterable[str], whole: set[str]) -> list[str]:
    """The entries naming a file of ``whole`` (files this run collected whole, ``whole_files``) but
    none of its collected tests ``nodeids``: their test was renamed, moved or deleted."""
    ids = list(nodeids)
    return [e for e in entries if e.partition("::")[0] in whole and not any(named_by(e, n) for n in ids)]


def whole_files(
    entries: Iterable[str], args: Iterable[str], here: Path, root: Path, nodeids: Iterable[str]
) -> set[str]:
    """The files of ``entries`` (rootdir-relative) that a run on ``args`` (given in ``here``)
    collected every test of, so that an entry there matching nothing means its test is gone: those
    under an argument naming a directory or the file itself (not ``file::test``, which collects
    some of its tests only), unless the file exists but gave no test (``--ignore``,
    ``collect_ignore``). A file that does not exist counts: a moved or renamed file is what the
    check is for."""
    roots = [(here / a).resolve() for a in args if "::" not in a]
    collected = {n.partition("::")[0] for n in nodeids}
    out = set()
    for name in {e.partition("::")[0] for e in entries}:
        path = (root / name).resolve()
        if not any(r == path or r in path.parents for r in roots):
            continue
        if path.exists() and name not in collected:
            continue
        out.add(name)
    return out


def cluster_selected(config: pytest.Config) -> bool:
    """Whether the run asked for the cluster tests (``-m cluster``, ``-m "cluster and not chaos"``...)."""
    words = str(config.getoption("markexpr") or "").replace("(", " ").replace(")", " ").split()
    return any(w == "cluster" and (i == 0 or words[i - 1] != "not") for i, w in enumerate(words))


@pytest.fixture(scope="session")
def redis_cluster(
    request: pytest.FixtureRequest, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """Settings of a running Redis Cluster of three primaries, on a fresh key prefix."""
    if not cluster_selected(request.config):
        pytest.skip("starts a Redis Cluster: run with -m cluster (make test-cluster)")
    if base_settings.redis.cluster:
        # The session's own cluster: `services` starts it unless it runs, and stops what it started.
        services: Settings = request.getfixturevalue("services")
        yield services.model_copy(
            update={"redis": services.redis.model_copy(update={"prefix": unique("cl")})}, deep=True
        )
        return
    settings = cluster_settings(base_settings, tmp_path_factory.mktemp("redis-cluster"))
    local_cluster.up(settings, write_redis_users(settings))
    try:
        yield settings
    finally:
        local_cluster.down(settings)


def cluster_settings(base: Settings, state: Path) -> Settings:
    """``base`` pointed at a cluster of its own on free ports, with its state (and a password of its
    own) under ``state`` and a fresh key prefix; started by ``local_cluster.up``."""
    return base.model_copy(
        update={
            "state_dir": str(state),
            "redis": base.redis.model_copy(
                update={
                    "url": f"redis://127.0.0.1:{local_cluster.free_base_port()}/0",
                    "cluster": True,
                    "password": None,
                    "password_file": str(state / "redis.password"),
                    "prefix": unique("cl"),
                }
            ),
        },
        deep=True,
    )
