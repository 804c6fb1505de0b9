"""The Redis Cluster the tests marked ``cluster`` run on, and which other tests are marked so.

``make test-cluster`` points the whole session at a local cluster (``FLOE_REDIS__CLUSTER=true`` and
``FLOE_REDIS__URL``, so ``base_settings`` and every stack the tests start use it) and runs
``pytest -m cluster``: the cluster's own tests below, and the end-to-end tests named in
``ON_THE_CLUSTER``. Run with ``-m cluster`` but without those settings, ``redis_cluster`` starts a
cluster of its own on free ports and stops it afterwards. Without ``-m cluster`` the tests that need a
cluster are deselected, so ``make test`` starts none.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness import unique
from floe.settings import Settings
from infra import redis_cluster as local_cluster
from infra.stack import write_redis_users

ON_THE_CLUSTER = (
    "tests/e2e/test_autoingest.py::",
    "tests/e2e/test_snowpipe_sdk.py::",
    "tests/chaos/test_faults.py::test_spark_job_killed_mid_load",
    "tests/chaos/test_faults.py::test_job_killed_again_while_replaying_the_killed_batch",
    "tests/chaos/test_faults.py::test_job_killed_between_the_commits_of_two_pipes_in_one_batch",
    "tests/chaos/test_faults.py::test_consumer_killed_mid_message",
    "tests/chaos/test_faults.py::test_api_killed_while_insert_files_calls_are_in_flight",
)
"""End-to-end tests that ``make test-cluster`` runs with the whole stack on the cluster: auto-ingest,
REST (the Snowpipe SDK's insertFiles and reports) and the exactly-once kill tests. They run in
``make test`` on the single Redis as well."""


CLUSTER_FIXTURES = ("redis_cluster", "own_cluster")
"""Tests using these start or need a Redis Cluster: without ``-m cluster`` they are deselected."""


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(ON_THE_CLUSTER):
            item.add_marker(pytest.mark.cluster)
    if cluster_selected(config):
        return
    # Deselected, not skipped: `make test` reports no test it did not mean to run.
    dropped = [i for i in items if set(getattr(i, "fixturenames", ())) & set(CLUSTER_FIXTURES)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i not in dropped]


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
