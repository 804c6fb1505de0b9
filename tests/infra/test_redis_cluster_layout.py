"""The local Redis Cluster's layout and command lines (no processes; the cluster itself is in
test_redis_cluster.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from floe.settings import Settings
from infra import redis_cluster as local_cluster

pytestmark = pytest.mark.unit


def test_each_node_runs_with_aof_always_in_its_own_dir_and_no_password_on_its_command_line(
    tmp_path: Path,
) -> None:
    settings = Settings(
        state_dir=str(tmp_path),
        redis={"url": "redis://127.0.0.1:7101/0", "cluster": True, "password": "s3cret-pw"},
    )
    layout = local_cluster.nodes(settings)
    assert [n.port for n in layout] == [7101, 7102, 7103]
    assert len({n.directory for n in layout}) == 3
    argv = local_cluster.node_argv(layout[1], tmp_path / "users.conf")
    text = " ".join(argv)
    assert argv[:2] == ("redis-server", str(tmp_path / "users.conf"))
    for option in (
        "--port 7102",
        "--bind 127.0.0.1",
        "--cluster-enabled yes",
        "--appendonly yes",
        "--appendfsync always",
        f"--dir {tmp_path / 'redis-cluster' / '7102'}",
    ):
        assert option in text
    assert "s3cret-pw" not in text
