"""Floe's Redis steps on a real Redis Cluster of three primaries (infra/redis_cluster.py).

Each test spreads its pipes over every node (their ids are drawn until each primary owns one), so a
step that reached one node only, or put two pipes' keys in one command, fails here. The cluster
comes from ``redis_cluster`` (tests/infra/conftest.py): the session's own under
``make test-cluster``, or one started for these tests; without ``-m cluster`` they are skipped.
"""

from __future__ import annotations

import stat
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pyspark.sql.streaming.datasource import ReadMaxRows
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from bench.harness import unique
from floe import keys as key_layer
from floe.catalog import Catalog, CopySpec, Pipe, Stage, Table, now_ms
from floe.catalog.models import Column, new_id
from floe.channels import ChannelStore, PipeRef
from floe.external import Breaker
from floe.history import read_states
from floe.keys import Keys, SlotError, one_slot, scan_keys
from floe.settings import ExternalFunctionSettings, Settings
from infra import redis_cluster as local_cluster
from infra.stack import write_redis_users
from pipeline.job import stored_states
from pipeline.registrar import Outcome, PipeCommit, Registrar
from pipeline.source import FileStreamReader
from services.dedup import Deduper, FileRef
from services.sql import SqlExecutor
from tests.conftest import TEST_INTEGRATION
from tests.infra.conftest import cluster_selected, cluster_settings
from tests.pipeline.test_source import micro_batches
from tests.services.test_sql_access import ADMIN

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.fixture
def cluster(redis_cluster: Settings) -> Settings:
    """The session's cluster, with a key prefix of this test's own."""
    return redis_cluster.model_copy(
        update={"redis": redis_cluster.redis.model_copy(update={"prefix": unique("cl")})}, deep=True
    )


@pytest.fixture
def client(cluster: Settings) -> Iterator[RedisCluster]:
    """A cluster client from the one factory, as every Floe process makes it."""
    made = cluster.redis.client()
    assert isinstance(made, RedisCluster)
    yield made
    made.close()


@pytest.fixture
def keys(cluster: Settings) -> Keys:
    return Keys(cluster.redis.prefix)


def node_of(client: RedisCluster, key: str) -> str:
    node = client.get_node_from_key(key)
    assert node is not None
    return str(node.name)


def pipe_ids_on_every_node(client: RedisCluster, keys: Keys) -> list[str]:
    """One pipe id per primary: each pipe's keys live on another node."""
    by_node: dict[str, str] = {}
    for _ in range(500):
        pipe_id = new_id()
        by_node.setdefault(node_of(client, keys.queue(pipe_id)), pipe_id)
        if len(by_node) == local_cluster.NODES:
            return list(by_node.values())
    pytest.fail(f"500 pipe ids fell on {len(by_node)} nodes only")


def make_pipe(pipe_id: str) -> Pipe:
    return Pipe(
        id=pipe_id,
        name=f"D.S.P_{pipe_id.upper()}",
        copy_spec=CopySpec(table="D.S.T", stage="D.S.S"),
        table_id="t",
        stage_url="s3://b/",
    )


# -- the cluster itself ----------------------------------------------------------------------------


def test_the_cluster_is_three_durable_primaries_that_need_a_password(
    cluster: Settings, client: RedisCluster
) -> None:
    primaries = client.get_primaries()
    assert len(primaries) == local_cluster.NODES
    for node in local_cluster.nodes(cluster):
        info = local_cluster.cluster_info(cluster, node)
        assert info is not None and info["cluster_state"] == "ok", info
        assert int(info["cluster_slots_assigned"]) == local_cluster.SLOTS
    for node in primaries:
        config = client.config_get("append*", target_nodes=node)
        assert config["appendonly"] == "yes" and config["appendfsync"] == "always", config
    assert cluster.redis.resolve_password() is not None
    first = primaries[0]
    anonymous = redis.Redis(host=first.host, port=first.port)
    with pytest.raises(redis.RedisError, match=r"NOAUTH|authenticated"):
        anonymous.ping()
    anonymous.close()


# -- Floe's steps ----------------------------------------------------------------------------------


def test_dedup_enqueues_each_file_once_on_every_node(client: RedisCluster, keys: Keys) -> None:
    deduper = Deduper(client, keys, 3600)
    for pipe_id in pipe_ids_on_every_node(client, keys):
        pipe = make_pipe(pipe_id)
        files = [FileRef(f"in/{i:03d}.csv", 10) for i in range(50)]
        assert deduper.enqueue(pipe, files, source="rest") == [True] * 50
        assert deduper.enqueue(pipe, files[:10], source="notification") == [False] * 10
        assert client.xlen(keys.queue(pipe_id)) == 50
        assert [s.path for s in read_states(client, keys, pipe_id)] == [f.path for f in files]


def test_the_registrar_commits_each_pipe_once_and_the_job_reads_states_across_nodes(
    client: RedisCluster, keys: Keys
) -> None:
    ids = pipe_ids_on_every_node(client, keys)
    deduper, registrar = Deduper(client, keys, 3600), Registrar(client, keys, 3600)
    for pipe_id in ids:
        deduper.enqueue(make_pipe(pipe_id), [FileRef("a.csv", 1), FileRef("b.csv", 2)], source="rest")

    # The job's one call for the files of every pipe in a batch (a single MGET cannot span nodes).
    wanted = [(pipe_id, path) for pipe_id in ids for path in ("a.csv", "gone.csv", "b.csv")]
    with pytest.raises(RedisClusterException):
        client.mget([keys.file(pipe_id, path) for pipe_id, path in wanted])
    stored = stored_states(client, keys, wanted)
    assert [value is not None for value in stored] == [True, False, True] * len(ids)
    assert all(b'"LOAD_IN_PROGRESS"' in value for value in stored if value is not None)

    for pipe_id in ids:
        entries = client.xrange(keys.queue(pipe_id))
        states = read_states(client, keys, pipe_id)
        commit = PipeCommit(
            pipe_id,
            blobs=[{"name": f"blob-{pipe_id}", "rows": 2}],
            files=[
                (s.model_copy(update={"status": "LOADED", "rows_loaded": 1}), sid.decode())
                for s, (sid, _) in zip(states, entries, strict=True)
            ],
        )
        assert registrar.commit(commit, "query", 1, now_ms()) is Outcome.COMMITTED
        assert registrar.commit(commit, "query", 1, now_ms()) is Outcome.REPLAYED
        assert registrar.committed(pipe_id, "query", 1)
        assert client.xlen(keys.queue(pipe_id)) == 0
        assert {s.status for s in read_states(client, keys, pipe_id)} == {"LOADED"}
        assert list(client.hgetall(keys.blobs(pipe_id))) == [f"blob-{pipe_id}".encode()]


def test_the_catalog_puts_gets_and_deletes_in_one_slot(client: RedisCluster, keys: Keys) -> None:
    catalog, reader = Catalog(client, keys), Catalog(client, keys)
    table = Table(name="D.S.T", columns=[Column(name="A", type="NUMBER")])
    version = reader.version()
    catalog.put(table)
    pipe = make_pipe(new_id()).model_copy(update={"table_id": table.id})
    catalog.put(pipe)
    assert reader.get(Table, "D.S.T") == table and reader.segments(table) == [pipe.id]
    loser = make_pipe(new_id()).model_copy(update={"name": pipe.name, "table_id": table.id})
    assert catalog.put_new(loser) == pipe  # the one already there wins
    assert reader.segments(table) == [pipe.id]
    assert catalog.delete(Table, "D.S.T") == table
    assert reader.find(Table, "D.S.T") is None and reader.segments(table) == []
    assert reader.version() == version + 4


def test_drop_pipe_forgets_the_keys_of_pipes_on_every_node(cluster: Settings, client: RedisCluster) -> None:
    ex = SqlExecutor(cluster, client)
    ex.execute(TEST_INTEGRATION, ADMIN)
    ex.execute("CREATE STAGE st URL = 's3://somebucket/x/' STORAGE_INTEGRATION = floe_tests", ADMIN)
    ex.execute("CREATE TABLE t (a INT)", ADMIN)
    pipes: dict[str, Pipe] = {}
    nodes: set[str] = set()
    for i in range(60):
        ex.execute(f"CREATE PIPE p{i} AUTO_INGEST = FALSE AS COPY INTO t FROM @st", ADMIN)
        pipe = ex.catalog.get(Pipe, f"FLOE.PUBLIC.P{i}")
        pipes[f"p{i}"] = pipe
        nodes.add(node_of(client, ex.keys.queue(pipe.id)))
        if len(nodes) == local_cluster.NODES:
            break
    assert len(nodes) == local_cluster.NODES
    deduper = Deduper(client, ex.keys, 3600)
    for pipe in pipes.values():
        deduper.enqueue(pipe, [FileRef(f"f{i}.csv", 1) for i in range(30)], source="rest")

    for name in pipes:
        ex.execute(f"DROP PIPE {name}", ADMIN)

    for pipe in pipes.values():
        left = {k.decode() for k in scan_keys(client, ex.keys.pipe_pattern(pipe.id))}
        # The retired flag stays (the registrar checks it); queue, file states and history go.
        assert left == {ex.keys.retired(pipe.id)}, (pipe.name, sorted(left)[:5])


def test_the_source_plans_and_reads_pipes_on_every_node(
    cluster: Settings, client: RedisCluster, keys: Keys
) -> None:
    catalog = Catalog(client, keys)
    # The table and stage the pipes were made on: a pipe without them is stopped, and not planned.
    catalog.put(Table(name="D.S.T", id="t", columns=[Column(name="A", type="NUMBER")]))
    catalog.put(Stage(name="D.S.S", url="s3://b/"))
    expected: Counter[tuple[str, str]] = Counter()
    for n, pipe_id in enumerate(pipe_ids_on_every_node(client, keys)):
        pipe = make_pipe(pipe_id)
        catalog.put(pipe)
        paths = [f"in/{pipe_id}/{i:03d}.csv" for i in range(20 * (n + 1))]
        Deduper(client, keys, 3600).enqueue(pipe, [FileRef(p, 1) for p in paths], source="rest")
        expected.update((pipe_id, p) for p in paths)
    reader = FileStreamReader(
        {
            "redis_url": cluster.redis.url,
            "redis_cluster": "true",
            "redis_username": cluster.redis.username,
            "redis_password_file": cluster.redis.password_file,
            "prefix": keys.prefix,
            "max_files": "25",
        }
    )
    batches = list(micro_batches(reader, ReadMaxRows(25)))
    assert all(len(batch) <= 25 for batch in batches)
    assert Counter(entry for batch in batches for entry in batch) == expected  # each once
    assert len({pipe_id for pipe_id, _ in batches[0]}) == local_cluster.NODES  # shared fairly


def test_breakers_trip_once_and_close_on_the_cluster(client: RedisCluster, keys: Keys) -> None:
    settings = ExternalFunctionSettings(breaker_cooldown_s=30.0)
    url = "https://svc.example/f"
    breakers = [Breaker(settings, client, keys) for _ in range(6)]
    trips = []
    threads = [threading.Thread(target=lambda b=b: trips.append(b.trip(url, "down"))) for b in breakers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({t.since_ms for t in trips}) == 1 and max(t.trips for t in trips) == 1  # one trip
    assert Breaker(client=client, keys=keys).states([url]) == {url: trips[0]}
    breakers[0].close(url, trips[0])
    assert Breaker(client=client, keys=keys).states([url]) == {}


def test_channels_open_append_and_drop_on_the_cluster(client: RedisCluster, keys: Keys) -> None:
    store = ChannelStore(client, keys, 1 << 20)
    for pipe_id in pipe_ids_on_every_node(client, keys):
        ref = PipeRef(pipe_id, "D", "S", "P")
        opened = store.open(ref, "ch", now_ms(), None, fail_on_uncommitted=False)
        token = store.append(ref, "ch", opened.token, "r1", b'{"a": 1}\n', 1, None, "1", now_ms())
        assert token.row_sequencer == opened.token.row_sequencer + 1
        assert client.xlen(keys.rows(pipe_id)) == 1
        assert store.drop(ref, "ch", fail_on_uncommitted=False)


def test_a_step_over_two_slots_fails_on_the_cluster_as_one_slot_refuses_it(
    client: RedisCluster, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = pipe_ids_on_every_node(client, keys)[:2]
    both = [keys.queue(a), keys.queue(b)]
    script = client.register_script("return #KEYS")
    with pytest.raises(RedisClusterException, match="same key slot"):
        script(keys=both)
    assert script(keys=[keys.queue(a), keys.history(a)]) == 2
    monkeypatch.setattr(key_layer, "_checking", True)
    with pytest.raises(SlotError):
        one_slot(both, "a script")


# -- starting and stopping -------------------------------------------------------------------------


@pytest.fixture
def own_cluster(
    request: pytest.FixtureRequest, base_settings: Settings, tmp_path: Path
) -> Iterator[Settings]:
    """Settings of a cluster this test starts and stops itself (not the session's)."""
    if not cluster_selected(request.config):
        pytest.skip("starts a Redis Cluster: run with -m cluster (make test-cluster)")
    settings = cluster_settings(base_settings, tmp_path / "state")
    try:
        yield settings
    finally:
        local_cluster.down(settings)


def test_a_restarted_cluster_keeps_its_slots_and_data(own_cluster: Settings) -> None:
    users = write_redis_users(own_cluster)
    ports = [n.port for n in local_cluster.nodes(own_cluster)]
    assert local_cluster.up(own_cluster, users) == ports
    assert local_cluster.up(own_cluster, users) == []  # running: used as it is
    for node in local_cluster.nodes(own_cluster):  # owner-only, as everything under the state dir
        assert stat.S_IMODE(node.pid_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(node.log.stat().st_mode) == 0o600
        assert stat.S_IMODE(node.directory.stat().st_mode) == 0o700
    client = own_cluster.redis.client()
    key = Keys(own_cluster.redis.prefix).queue(new_id())
    client.xadd(key, {"path": "a.csv"})
    client.close()

    assert local_cluster.down(own_cluster) == ports
    assert local_cluster.state(own_cluster) == ("stopped", None)
    # Started again, the nodes find the layout in their nodes.conf and the data in their AOF.
    assert local_cluster.up(own_cluster, users) == ports
    client = own_cluster.redis.client()
    assert client.xlen(key) == 1
    client.close()
    state, pid = local_cluster.state(own_cluster)
    assert state == "ready" and pid is not None
