"""A local Redis Cluster of three primaries, for running Floe on a cluster on one machine.

With ``FLOE_REDIS__CLUSTER=true``, ``make up`` (``infra/stack.py``) starts this instead of the single
Redis, and ``make down`` stops it; ``make redis-cluster-up`` / ``redis-cluster-down`` do only that.
The nodes listen on ``FLOE_REDIS__URL``'s port and the two after it (their cluster bus on each
port + 10000), on loopback, each a ``redis-server --cluster-enabled yes`` with:

* AOF and ``appendfsync always``, as the single Redis has (nothing is acknowledged before it is
  durable), no RDB snapshots, and its own directory ``<state_dir>/redis-cluster/<port>/`` (the AOF
  and ``nodes.conf``, where the node keeps the cluster's layout);
* the single Redis's users file as its config file (``infra.stack.write_redis_users``): no anonymous
  access, one user, ``settings.redis.username``, whose password never reaches a command line. The
  ``redis-cli --cluster create`` step signs in with ``--user`` and ``REDISCLI_AUTH``.

The first start hands each node a third of the 16,384 slots (``redis-cli --cluster create ...
--cluster-replicas 0``); a later start finds the layout in each node's ``nodes.conf`` and only waits
until every node reports ``cluster_state:ok``. Pid files go to ``<state_dir>/run/redis-cluster-<port>.pid``,
logs to ``<state_dir>/logs/redis-cluster-<port>.log``; every node runs in its own session, like the
stack's parts, so a Ctrl-C in the terminal that started it does not reach it.

This module knows nothing of the stack; the stack calls :func:`up`, :func:`down` and :func:`state`
with the users file it wrote, and the tests do the same.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from urllib.parse import urlparse

import redis
from rich.console import Console

from floe.runtime import OWNER_ONLY_UMASK, private_dir
from floe.settings import RedisSettings, Settings
from infra.processes import (
    Ending,
    environ_without,
    exit_code,
    launch,
    log_tail,
    process_alive,
    read_pid,
    stop_group,
)

NODES = 3
"""Primaries, and so the ports after the URL's that the cluster takes."""
SLOTS = 16384
BUS_OFFSET = 10000
"""Redis's cluster bus listens on the client port plus this."""
LOOPBACK = frozenset({"127.0.0.1", "localhost"})
READY_TIMEOUT_S = 30.0
STOP_GRACE_S = 20.0
POLL_S = 0.1
LOG_TAIL_LINES = 20


class ClusterError(RuntimeError):
    """The cluster could not be started, formed or stopped; the message says why and what to do."""


@dataclass(frozen=True)
class Node:
    """One primary: its port and where its files go."""

    host: str
    port: int
    directory: Path
    pid_file: Path
    log: Path

    @property
    def address(self) -> str:
        """``host:port``, as redis-cli names nodes."""
        return f"{self.host}:{self.port}"


def nodes(settings: Settings) -> list[Node]:
    """The cluster's nodes: the URL's port and the ``NODES - 1`` after it."""
    url = urlparse(settings.redis.url)
    host = "127.0.0.1" if url.hostname in (None, "localhost") else url.hostname
    first = url.port or 6379
    state = Path(settings.state_dir).absolute()
    return [
        Node(
            host=host,
            port=port,
            directory=state / "redis-cluster" / str(port),
            pid_file=state / "run" / f"redis-cluster-{port}.pid",
            log=state / "logs" / f"redis-cluster-{port}.log",
        )
        for port in range(first, first + NODES)
    ]


def node_argv(node: Node, users_file: Path) -> tuple[str, ...]:
    """The redis-server command line of one node (the users file first: it holds no password)."""
    return (
        "redis-server",
        str(users_file),
        "--bind", node.host,
        "--port", str(node.port),
        "--daemonize", "no",
        "--cluster-enabled", "yes",
        "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", "5000",
        "--appendonly", "yes",
        "--appendfsync", "always",
        "--dir", str(node.directory),
        "--save", "",
    )  # fmt: skip


def free_base_port(low: int = 20000, high: int = 29000) -> int:
    """A port such that it, the ``NODES - 1`` after it and their bus ports are free on loopback
    (for tests, which start a cluster of their own beside any other)."""
    for _ in range(200):
        base = low + int.from_bytes(os.urandom(2), "big") % (high - low)
        ports = [base + i for i in range(NODES)]
        if all(_bindable(p) and _bindable(p + BUS_OFFSET) for p in ports):
            return base
    raise ClusterError(f"no {NODES} free consecutive ports between {low} and {high}")


# ------------------------------------------------------------------------------------------ probes


def _bindable(port: int) -> bool:
    """True when nothing listens on the loopback port (connections a stopped node left in
    TIME_WAIT do not count: redis-server binds with SO_REUSEADDR, as this check does)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _node_settings(settings: Settings, node: Node) -> RedisSettings:
    return settings.redis.model_copy(
        update={"url": f"redis://{node.host}:{node.port}/0", "cluster": False, "check_slots": False}
    )


@contextlib.contextmanager
def _node_client(settings: Settings, node: Node) -> Iterator[redis.Redis[bytes]]:
    """A client of one node alone (CLUSTER INFO is a node's own view), signed in as Floe is."""
    client = _node_settings(settings, node).client(socket_timeout=2.0, socket_connect_timeout=1.0)
    assert isinstance(client, redis.Redis), "a client without `cluster` is a plain redis.Redis"
    try:
        yield client
    finally:
        client.close()


def cluster_info(settings: Settings, node: Node) -> dict[str, str] | None:
    """The node's CLUSTER INFO, or None when it does not answer (or refuses Floe's credentials)."""
    with _node_client(settings, node) as client:
        try:
            info = client.execute_command("CLUSTER INFO")
        except (redis.RedisError, OSError):
            return None
    return {str(k): str(v) for k, v in dict(info).items()}


def _formed(info: dict[str, str] | None) -> bool:
    return (
        info is not None
        and info.get("cluster_state") == "ok"
        and info.get("cluster_slots_ok") == str(SLOTS)
        and info.get("cluster_known_nodes") == str(NODES)
    )


def _fresh(info: dict[str, str] | None) -> bool:
    """A node that knows no other node and owns no slot (never joined a cluster)."""
    return (
        info is not None
        and info.get("cluster_known_nodes") == "1"
        and info.get("cluster_slots_assigned") == "0"
    )


# ------------------------------------------------------------------------------------------ processes


def running_pid(node: Node) -> int | None:
    """The pid of the node when this module started it and it still runs."""
    pid = read_pid(node.pid_file)
    # Only if it is still this node's redis-server, which titles itself `redis-server <host>:<port>
    # [cluster]`: pid files outlive reboots, and pids are reused.
    return pid if pid is not None and process_alive(pid, "redis-server", f":{node.port}") else None


def _start(node: Node, users_file: Path) -> int:
    for port in (node.port, node.port + BUS_OFFSET):
        if not _bindable(port):
            raise ClusterError(
                f"port {node.host}:{port} is taken by something that is not a node of Floe's cluster; "
                "stop it or point FLOE_REDIS__URL at other ports"
            )
    private_dir(node.directory)
    return launch(
        node_argv(node, users_file),
        log=node.log,
        pid_file=node.pid_file,
        # An explicit password has no business in redis-server's /proc/<pid>/environ.
        env=environ_without("FLOE_REDIS__PASSWORD"),
        umask=OWNER_ONLY_UMASK,
        banner=f"starting {node.address}",
    ).pid


def _log_tail(node: Node) -> str:
    return log_tail(node.log, LOG_TAIL_LINES) or "(no log)"


def _stop(pid: int, node: Node) -> str:
    """SIGTERM the node (its session), SIGKILL it after the grace period; say which was needed."""
    ending = stop_group(pid, STOP_GRACE_S)
    if ending is Ending.SURVIVED:
        raise ClusterError(f"redis-cluster {node.address}: pid {pid} did not exit even after SIGKILL")
    return "killed" if ending is Ending.KILLED else "stopped"


# ------------------------------------------------------------------------------------------ public


def up(settings: Settings, users_file: Path, console: Console | None = None) -> list[int]:
    """Start the nodes that do not run, form the cluster if it is new, and wait until every node
    reports the whole cluster; the ports of the nodes this call started.

    A node that already answers Floe's credentials on its port is used as it is.
    """
    console = console or Console(highlight=False)
    layout = nodes(settings)
    if layout[0].host not in LOOPBACK:
        if _formed(cluster_info(settings, layout[0])):
            return []
        raise ClusterError(
            f"the Redis Cluster at {settings.redis.url} does not answer; it is not on this host"
        )
    started: list[int] = []
    begun = time.monotonic()
    for node in layout:
        if running_pid(node) is None and cluster_info(settings, node) is None:
            _start(node, users_file)
            started.append(node.port)
    try:
        for node in layout:
            _wait(partial(_answers, settings, node), node, "answer")
        _form(settings, layout, console)
    except ClusterError:
        for node in layout:
            if node.port in started and (pid := running_pid(node)) is not None:
                _stop(pid, node)
        raise
    ports = f"{layout[0].port}-{layout[-1].port}"
    if started:
        console.print(
            f"[green]✓[/] redis     cluster of {NODES} on {layout[0].host}:{ports} ready in "
            f"{time.monotonic() - begun:.1f} s (started {', '.join(map(str, started))})"
        )
    else:
        console.print(f"[green]✓[/] redis     cluster of {NODES} on {layout[0].host}:{ports} already running")
    return started


def _answers(settings: Settings, node: Node) -> bool:
    return cluster_info(settings, node) is not None


def _wait(ready: Callable[[], bool], node: Node, what: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Poll ``ready`` until it holds; fail at once when the node's process exited, with its log."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        pid = read_pid(node.pid_file)
        if pid is not None and exit_code(pid) is not None:
            raise ClusterError(f"redis-cluster {node.address} exited; its log ends:\n{_log_tail(node)}")
        if time.monotonic() > deadline:
            raise ClusterError(
                f"redis-cluster {node.address} did not {what} within {timeout_s:.0f} s; "
                f"its log ends:\n{_log_tail(node)}"
            )
        time.sleep(POLL_S)


def _form(settings: Settings, layout: list[Node], console: Console) -> None:
    """Hand out the slots once, on new nodes; then wait until every node sees the whole cluster."""
    infos = [cluster_info(settings, node) for node in layout]
    if all(_fresh(info) for info in infos):
        with console.status("forming the cluster…"):
            _create(settings, layout)
    elif not all(_formed(info) for info in infos) and any(_fresh(info) for info in infos):
        raise ClusterError(
            "some nodes belong to a cluster and some are new, so they cannot form one; stop them "
            f"(make redis-cluster-down) and delete {layout[0].directory.parent} to start an empty cluster"
        )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        infos = [cluster_info(settings, node) for node in layout]
        if all(_formed(info) for info in infos):
            return
        if time.monotonic() > deadline:
            states = ", ".join(
                f"{n.address}: {i.get('cluster_state') if i else 'no answer'}"
                for n, i in zip(layout, infos, strict=True)
            )
            raise ClusterError(
                f"the nodes did not agree on a cluster within {READY_TIMEOUT_S:.0f} s ({states})"
            )
        time.sleep(POLL_S)


def _create(settings: Settings, layout: list[Node]) -> None:
    """``redis-cli --cluster create``: a third of the slots to each node, no replicas."""
    env = environ_without("FLOE_REDIS__PASSWORD")
    argv = [
        "redis-cli",
        "--cluster",
        "create",
        *(n.address for n in layout),
        "--cluster-replicas",
        "0",
        "--cluster-yes",
    ]
    password = settings.redis.resolve_password()
    if password is not None:
        # REDISCLI_AUTH keeps the password off the command line (and out of `ps`).
        argv += ["--user", settings.redis.username]
        env["REDISCLI_AUTH"] = password
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise ClusterError(
            f"redis-cli --cluster create failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )


def down(settings: Settings, console: Console | None = None) -> list[int]:
    """Stop the nodes this module started (their data stays); the ports stopped."""
    console = console or Console(highlight=False)
    stopped: list[int] = []
    for node in nodes(settings):
        pid = running_pid(node)
        if pid is not None:
            how = _stop(pid, node)
            console.print(f"[green]✓[/] redis     {node.address} {how}  pid {pid}")
            stopped.append(node.port)
        node.pid_file.unlink(missing_ok=True)
    if not stopped:
        console.print("[dim]-[/] redis     cluster not running (or not started by Floe)")
    return stopped


def state(settings: Settings) -> tuple[str, int | None]:
    """The cluster's state: ``ready`` (every node sees the whole cluster), ``starting`` (some node
    answers) or ``stopped``; with the first node's pid when this module started it."""
    layout = nodes(settings)
    infos = [cluster_info(settings, node) for node in layout]
    pid = running_pid(layout[0])
    if all(_formed(info) for info in infos):
        return "ready", pid
    return ("starting" if any(info is not None for info in infos) else "stopped"), pid
