"""Start, stop and inspect the local Floe stack, without Docker.

The stack has five parts, started in this order and stopped in the reverse order:

* ``localstack``: S3 and SQS, LocalStack 4.13.1 in host mode, from ``.floe/localstack-venv``;
* ``redis``: Debian's ``redis-server`` with AOF and ``appendfsync always`` (invariant 3: nothing is
  acknowledged before it is durable), and no anonymous access: its only user is
  ``settings.redis.username``, whose password the first start generates into
  ``settings.redis.password_file`` (0600). The password reaches redis-server through a config file
  that holds only its SHA-256, never through a command line, and the clients through
  ``settings.redis.client()``. With ``FLOE_REDIS__CLUSTER=true`` it is a local Redis Cluster of
  three primaries instead (``infra/redis_cluster.py``), signed in the same way;
* ``api``, ``consumer``, ``pipeline``: the Floe processes, ``.venv/bin/floe <name>``.

Each part runs detached in its own session. That way a Ctrl-C in the terminal that started it does not
reach it (``make run`` stops the parts in order instead), and ``down`` can signal the whole process
group, Spark's JVM included. The pid goes to ``<state_dir>/run/<name>.pid``, the output to
``<state_dir>/logs/<name>.log``.

When a part counts as ready:

* LocalStack: ``/_localstack/init/ready`` answers 200 and reports the READY stage completed;
* Redis: it answers PING;
* a Floe process: it has created ``<state_dir>/run/<name>.ready``. The process deletes the file on exit;
  the stack deletes a stale one before each start and after each stop.

A LocalStack or Redis that already answers on the configured endpoint is used as it is, and never
stopped. An endpoint that is not on this host (for example ``http://localstack:4566``) is only checked.

Everything the stack and its parts create under the state directory is owner-only: the directory is
0700 and every part starts with umask 077 (files 0600), Redis's AOF and LocalStack's files included.

Command line: ``python -m infra.stack {up,down,status,services-up,services-down}`` (the Makefile wraps
it). The tests call :func:`ensure_services` and :func:`stop`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import redis
from redis.exceptions import RedisClusterException
from rich.console import Console
from rich.table import Table

from floe.keypair import create_private_file
from floe.runtime import OWNER_ONLY_UMASK, private_dir, private_files
from floe.settings import RedisSettings, Settings
from floe.tls import TlsError, api_base_url, client_ssl_context, ensure_tls
from infra import redis_cluster
from infra.processes import (
    LOG_TAIL_LINES,
    environ_without,
    launch,
    log_tail,
    process_alive,
    read_pid,
    terminate,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = REPO_ROOT / ".venv" / "bin"
# LocalStack lives in its own venv because its pins conflict with aiobotocore; `make localstack-install`
# creates it at this fixed place, independent of state_dir (which tests may point elsewhere).
LOCALSTACK_PYTHON = REPO_ROOT / ".floe" / "localstack-venv" / "bin" / "python"

SERVICES: tuple[str, ...] = ("localstack", "redis")
FLOE_PROCESSES: tuple[str, ...] = ("api", "consumer", "pipeline")
ALL_PARTS: tuple[str, ...] = SERVICES + FLOE_PROCESSES

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
POLL_S = 0.2
READY_TIMEOUT_S: dict[str, float] = {
    # The first LocalStack start measured ~6 s here; a cold page cache on a slow disk can take far longer.
    "localstack": 120.0,
    "redis": 30.0,
    "api": 60.0,
    "consumer": 60.0,
    # The Spark session alone takes ~7 s; the first streaming batch setup can take ~30 s on 2 cores.
    "pipeline": 180.0,
}

# Loopback endpoints must never go through an HTTP proxy a user may have configured.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class StackError(RuntimeError):
    """A part could not be started or checked; the message names it and carries the hint and log tail."""


class _ExitedEarly(StackError):
    """The part's process exited before it was ready."""


@dataclass(frozen=True)
class Part:
    """One process of the stack: how to start it, how to recognise it and how to tell it is ready."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cmdline_marker: str
    """Substring of ``/proc/<pid>/cmdline`` proving that a pid from a pid file is still this part."""
    ready_timeout_s: float
    is_ready: Callable[[], bool]
    endpoint: str = ""
    port: tuple[str, int] | None = None
    """Host and port the part serves, checked before a start so a foreign listener gives a clear error."""
    answers: Callable[[], bool] | None = None
    """For services: does something already serve the endpoint? Then it is used, not started."""
    local: bool = True
    """False when the endpoint is on another host: the stack can only check it, not start it."""
    enabled: bool = True
    """False when settings say the part is not used (an empty AWS endpoint means real AWS)."""
    ready_path: Path | None = None
    dirs: tuple[Path, ...] = ()
    install_hint: str = ""
    prepare: Callable[[], object] | None = None
    """Run before each start, after ``dirs`` exist (Redis writes its users file there)."""
    refusal: Callable[[], str] | None = None
    """For services: why a listener on ``port`` does not count as this part, if it can tell."""


@dataclass(frozen=True)
class PartStatus:
    """What ``status`` reports about one part."""

    name: str
    state: str
    pid: int | None
    endpoint: str
    log: Path


@dataclass
class _Outcome:
    """What :func:`ensure` did for one part, for the progress line."""

    name: str
    action: str
    seconds: float = 0.0
    pid: int | None = None
    extra: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- paths


def state_dir(settings: Settings) -> Path:
    """The absolute state directory (relative settings resolve against the current directory)."""
    return Path(settings.state_dir).absolute()


def pid_file(name: str, settings: Settings) -> Path:
    """``<state_dir>/run/<name>.pid``."""
    return state_dir(settings) / "run" / f"{name}.pid"


def ready_file(name: str, settings: Settings) -> Path:
    """``<state_dir>/run/<name>.ready``: a Floe process creates it once ready and deletes it on exit."""
    return state_dir(settings) / "run" / f"{name}.ready"


def log_file(name: str, settings: Settings) -> Path:
    """``<state_dir>/logs/<name>.log``."""
    return state_dir(settings) / "logs" / f"{name}.log"


# ------------------------------------------------------------------------------------------- probes


def _http_json(url: str, timeout: float = 1.0) -> tuple[int, Any] | None:
    """GET ``url``; return (status, parsed JSON or None), or None when nothing answers."""
    try:
        with _HTTP.open(url, timeout=timeout) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (OSError, ValueError):
        return None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def _localstack_ready(base_url: str) -> bool:
    """True once LocalStack reports its READY init stage completed (200 alone comes earlier)."""
    answer = _http_json(f"{base_url}/_localstack/init/ready")
    if answer is None or answer[0] != 200 or not isinstance(answer[1], dict):
        return False
    return answer[1].get("completed") is True


def _is_localstack(base_url: str) -> bool:
    """True when the endpoint answers like LocalStack (its health resource lists services)."""
    answer = _http_json(f"{base_url}/_localstack/health")
    return answer is not None and answer[0] == 200 and isinstance(answer[1], dict) and "services" in answer[1]


def _redis_answer(settings: RedisSettings) -> str:
    """PING the Redis of ``settings``, signed in as Floe's clients are: "pong", "refused" or "none".

    "refused" means a Redis answers but not to Floe's credentials (wrong, missing or unexpected
    password), which is worth a precise error rather than "nothing answers".
    """
    try:
        # A cluster client asks for the cluster's layout as it is made, so making it can fail too.
        client = settings.client(socket_timeout=1.0, socket_connect_timeout=1.0)
    except RedisClusterException:
        return "none"
    try:
        return "pong" if client.ping() else "none"
    except redis.AuthenticationError:
        return "refused"
    except redis.ResponseError as exc:
        # NOAUTH, WRONGPASS and "AUTH ... called without any password configured" all come as replies.
        text = str(exc).upper()
        return "refused" if "AUTH" in text or "WRONGPASS" in text or "NOPERM" in text else "none"
    except (redis.RedisError, OSError):
        return "none"
    finally:
        client.close()


def _redis_pings(settings: RedisSettings) -> bool:
    """True when the Redis of ``settings`` answers PING to Floe's credentials."""
    return _redis_answer(settings) == "pong"


def _redis_refusal(settings: RedisSettings) -> str:
    """Why a Redis on the configured port is not usable, when it answers but refuses Floe."""
    if _redis_answer(settings) != "refused":
        return ""
    if settings.resolve_password() is None:
        return (
            f"it requires a password, and Floe has none: put the password of user {settings.username!r} "
            f"in {settings.password_file} (mode 0600) or FLOE_REDIS__PASSWORD"
        )
    source = "FLOE_REDIS__PASSWORD" if settings.password is not None else settings.password_file
    return (
        f"it refuses user {settings.username!r} with the password from {source}: correct that password, "
        f"or, if this Redis was started without one, remove {source} so Floe connects without signing in"
    )


def _port_open(host: str, port: int) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


# -------------------------------------------------------------------------------------------- parts


def _child_env() -> dict[str, str]:
    """The environment of a Floe child: ours, unchanged, plus the Python that Spark workers must use."""
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = str(VENV_BIN / "python")
    return env


def _localstack_part(settings: Settings) -> Part:
    """LocalStack in host mode, with the environment the spike found to work (see DESIGN.md)."""
    endpoint = settings.aws.endpoint_url.rstrip("/")
    if not endpoint:
        return Part("localstack", (), {}, "", 0.0, lambda: True, enabled=False)
    url = urlparse(endpoint)
    host = url.hostname or "127.0.0.1"
    port = url.port or (443 if url.scheme == "https" else 80)
    env = dict(os.environ)
    # LocalStack runs from its own venv; Python variables inherited from Floe's venv would mix the two.
    for var in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(var, None)
    env.update(
        {
            "OVERRIDE_IN_DOCKER": "0",
            # Loopback only: the stack is for one developer machine, never a shared network.
            "GATEWAY_LISTEN": f"127.0.0.1:{port}",
            "GATEWAY_SERVER": "hypercorn",
            "SERVICES": "s3,sqs,sns",
            "EAGER_SERVICE_LOADING": "1",
            "DNS_ADDRESS": "0",
            "SKIP_SSL_CERT_DOWNLOAD": "1",
            "DISABLE_EVENTS": "1",
            "FILESYSTEM_ROOT": str(state_dir(settings) / "localstack"),
            "LOCALSTACK_HOST": f"localhost:{port}",
            "SQS_ENDPOINT_STRATEGY": "path",
        }
    )
    return Part(
        name="localstack",
        argv=(str(LOCALSTACK_PYTHON), "-m", "localstack.runtime.main"),
        env=env,
        cmdline_marker="localstack.runtime.main",
        ready_timeout_s=READY_TIMEOUT_S["localstack"],
        is_ready=lambda: _localstack_ready(endpoint),
        endpoint=endpoint,
        port=("127.0.0.1" if host == "localhost" else host, port),
        answers=lambda: _is_localstack(endpoint),
        local=host in LOOPBACK_HOSTS,
        dirs=(state_dir(settings) / "localstack",),
        install_hint="run `make localstack-install`",
    )


def redis_users_file(settings: Settings) -> Path:
    """``<state_dir>/redis/users.conf``: the config file that declares the stack's Redis users."""
    return state_dir(settings) / "redis" / "users.conf"


def redis_password(settings: RedisSettings) -> str:
    """The password of the stack's Redis: the explicit setting, else the password file, created on
    first use with a random password (mode 0600, O_EXCL: concurrent starts agree on one)."""
    if urlparse(settings.url).password:
        raise StackError(
            "redis: the Redis URL carries a password, and URLs end up in logs and error messages; "
            "remove it from FLOE_REDIS__URL and put it in FLOE_REDIS__PASSWORD or "
            f"{settings.password_file} (mode 0600) instead"
        )
    if settings.password is not None:
        return settings.password.get_secret_value()
    text = create_private_file(settings.password_file, lambda: secrets.token_urlsafe(32).encode())
    password = text.decode().strip()
    if not password:
        raise StackError(
            f"redis: {settings.password_file} is empty; delete it and start Redis again to generate one"
        )
    return password


def redis_users_conf(username: str, password: str) -> str:
    """redis.conf lines that leave ``username`` as the only user, with every right.

    The password is given as its SHA-256 (``#<hex>``), so the file does not disclose it either;
    ``default off`` refuses every connection that does not sign in. The default user keeps every
    right all the same: Redis 7.0 replays the AOF as that user, and with no rights it drops every
    MULTI/EXEC on restart (NOPERM in the log, the registrar's commits lost).
    """
    digest = hashlib.sha256(password.encode()).hexdigest()
    return f"user default off ~* &* +@all\nuser {username} on #{digest} ~* &* +@all\n"


def write_redis_users(settings: Settings, path: Path | None = None, mode: int = 0o600) -> Path:
    """Write the users config file for ``settings`` (creating the password on first use); return it.

    The file is replaced atomically, so a Redis starting meanwhile reads the old or the new one.
    ``mode`` is 0600 for the stack, whose redis-server runs as the same user; the Docker setup,
    where Redis runs as another user, passes 0644 (the file holds only a hash).
    """
    target = path or redis_users_file(settings)
    text = redis_users_conf(settings.redis.username, redis_password(settings.redis))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp, mode)  # after creation: the umask must not widen or narrow it
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def redis_argv(settings: Settings) -> tuple[str, ...]:
    """The redis-server command line: AOF fsynced on every write, no RDB snapshots, loopback only.

    The first argument is the users file (:func:`write_redis_users`); no password is ever on it.
    """
    url = urlparse(settings.redis.url)
    argv: tuple[str, ...] = (
        "redis-server",
        str(redis_users_file(settings)),
        "--bind", "127.0.0.1",
        "--port", str(url.port or 6379),
        "--daemonize", "no",
        "--appendonly", "yes",
        "--appendfsync", "always",
        "--dir", str(state_dir(settings) / "redis"),
        "--save", "",
    )  # fmt: skip
    return argv


def _redis_part(settings: Settings) -> Part:
    """Redis with the persistence that invariant 3 requires."""
    url = urlparse(settings.redis.url)
    host = url.hostname or "127.0.0.1"
    port = url.port or 6379
    # An explicit password in the environment has no business in redis-server's /proc/<pid>/environ.
    env = environ_without("FLOE_REDIS__PASSWORD")
    return Part(
        name="redis",
        argv=redis_argv(settings),
        env=env,
        # redis-server rewrites its process title to "redis-server <host>:<port>".
        cmdline_marker="redis-server",
        ready_timeout_s=READY_TIMEOUT_S["redis"],
        is_ready=lambda: _redis_pings(settings.redis),
        endpoint=f"redis://{host}:{port}",
        port=("127.0.0.1" if host == "localhost" else host, port),
        answers=lambda: _redis_pings(settings.redis),
        local=url.scheme in ("redis", "") and host in LOOPBACK_HOSTS,
        dirs=(state_dir(settings) / "redis",),
        install_hint="run `make redis-install`",
        prepare=lambda: write_redis_users(settings),
        refusal=lambda: _redis_refusal(settings.redis),
    )


def _api_answers(settings: Settings) -> bool:
    """True when the API answers ``/health`` with 200, over HTTPS verified against its CA when TLS is on.

    A certificate that does not verify raises :class:`StackError` at once: waiting cannot fix it.
    """
    try:
        context = client_ssl_context(settings)
    except TlsError as exc:
        raise StackError(f"api: {exc.message}") from None
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    url = f"{api_base_url(settings)}/health"
    try:
        with opener.open(url, timeout=1.0) as resp:
            resp.read()
            return bool(resp.status == 200)
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ssl.SSLCertVerificationError):
            raise StackError(
                f"api: {url} presented a certificate that does not verify ({exc.reason.verify_message}); "
                "check FLOE_API__TLS_CA_FILE. The API keeps running; `make down` stops it."
            ) from None
        return False
    except (OSError, ValueError):
        return False


def _prepare_api(settings: Settings) -> None:
    """Create or renew the API's certificate (tls=auto), or check the given one (tls=files)."""
    try:
        ensure_tls(settings)
    except TlsError as exc:
        raise StackError(f"api: {exc.message}") from None


def _floe_part(name: str, settings: Settings) -> Part:
    """A Floe process; it signals readiness with its ready file (the API also by answering /health)."""
    ready = ready_file(name, settings)
    is_api = name == "api"
    return Part(
        name=name,
        argv=(str(VENV_BIN / "floe"), name),
        env=_child_env(),
        cmdline_marker=f"floe {name}",
        ready_timeout_s=READY_TIMEOUT_S[name],
        # The ready file appears at application start-up, a moment before uvicorn binds its port.
        is_ready=(lambda: ready.exists() and _api_answers(settings)) if is_api else ready.exists,
        endpoint=api_base_url(settings) if is_api else "",
        ready_path=ready,
        install_hint="run `make venv`",
        prepare=(lambda: _prepare_api(settings)) if is_api else None,
    )


def build_part(name: str, settings: Settings) -> Part:
    """The :class:`Part` called ``name``, configured from ``settings``."""
    if name == "localstack":
        return _localstack_part(settings)
    if name == "redis":
        return _redis_part(settings)
    if name in FLOE_PROCESSES:
        return _floe_part(name, settings)
    raise StackError(f"unknown part {name!r}; known parts: {', '.join(ALL_PARTS)}")


def _ordered(names: Iterable[str]) -> list[str]:
    """``names`` in start order, checked; unknown names are an error rather than silently ignored."""
    wanted = set(names)
    unknown = wanted - set(ALL_PARTS)
    if unknown:
        raise StackError(f"unknown part(s) {', '.join(sorted(unknown))}; known parts: {', '.join(ALL_PARTS)}")
    return [name for name in ALL_PARTS if name in wanted]


# ---------------------------------------------------------------------------------------- processes


def running_pid(name: str, settings: Settings) -> int | None:
    """Pid of ``name`` when the stack started it and it still runs, else None."""
    part = build_part(name, settings)
    pid = read_pid(pid_file(name, settings))
    if pid is not None and process_alive(pid, part.cmdline_marker):
        return pid
    return None


def _failure(part: Part, settings: Settings, what: str, kind: type[StackError] = StackError) -> StackError:
    """A StackError that says what failed, shows the log tail and gives a hint."""
    log = log_file(part.name, settings)
    tail = log_tail(log)
    if tail:
        body = f"\n--- last {LOG_TAIL_LINES} lines of {log} ---\n{tail}\n---"
    else:
        body = f" (no output in {log})"
    hint = f"\nHint: read {log}, fix the cause and run `make up` again; `make down` stops what is running."
    return kind(f"{part.name}: {what}{body}{hint}")


def _start(part: Part, settings: Settings) -> tuple[int, float]:
    """Start ``part`` detached and wait until it is ready; return (pid, seconds taken)."""
    exe = part.argv[0]
    if shutil.which(exe) is None:
        raise StackError(f"{part.name}: {exe} not found; {part.install_hint}")
    if part.port is not None and _port_open(*part.port):
        # Something listens but did not answer as this service (that was checked first): starting would
        # only fail on bind, so say what is wrong instead.
        host, port = part.port
        reason = part.refusal() if part.refusal is not None else ""
        if reason:
            raise StackError(f"{part.name}: a {part.name} answers on {host}:{port}, but {reason}")
        raise StackError(
            f"{part.name}: port {host}:{port} is taken by a process that does not answer as {part.name}; "
            "stop it or point Floe elsewhere through settings (FLOE_...)"
        )
    private_dir(state_dir(settings))
    for directory in part.dirs:
        private_dir(directory)
    if part.prepare is not None:
        part.prepare()
    if part.ready_path is not None:
        part.ready_path.unlink(missing_ok=True)  # a stale file from a crash would fake readiness
    started = time.monotonic()
    proc = launch(
        part.argv,
        log=log_file(part.name, settings),
        pid_file=pid_file(part.name, settings),
        env=part.env,
        # Whatever the caller's umask (tests start parts in-process), what a part creates is 0600.
        umask=OWNER_ONLY_UMASK,
        banner=f"floe stack: starting {part.name}: {' '.join(part.argv)}",
    )
    _wait_ready(part, settings, proc.pid, proc, started)
    return proc.pid, time.monotonic() - started


def _wait_ready(
    part: Part, settings: Settings, pid: int, proc: subprocess.Popen[bytes] | None, started: float
) -> None:
    """Poll until ``part`` is ready; on exit or timeout stop it, clean up and raise with the log tail."""
    deadline = started + part.ready_timeout_s
    while True:
        if part.is_ready():
            return
        code = proc.poll() if proc is not None else None
        if code is not None or (proc is None and not process_alive(pid, part.cmdline_marker)):
            _forget(part, settings)
            what = f"exited with code {code}" if code is not None else "exited"
            raise _failure(part, settings, f"{what} before it was ready", _ExitedEarly)
        if time.monotonic() >= deadline:
            # Leaving a half-started part behind would make the next `make up` wait on it again.
            terminate(pid)
            _forget(part, settings)
            raise _failure(part, settings, f"not ready after {part.ready_timeout_s:.0f} s")
        time.sleep(POLL_S)


def _forget(part: Part, settings: Settings) -> None:
    """Remove the pid file and ready file of a part that no longer runs."""
    pid_file(part.name, settings).unlink(missing_ok=True)
    if part.ready_path is not None:
        part.ready_path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------- public


def _ensure_part(part: Part, settings: Settings) -> _Outcome:
    """Make one part ready, starting it only when neither we nor anyone else runs it."""
    if not part.enabled:
        return _Outcome(part.name, "not used")
    pid = read_pid(pid_file(part.name, settings))
    if pid is not None and process_alive(pid, part.cmdline_marker):
        if part.is_ready():
            return _Outcome(part.name, "already running", pid=pid)
        # Ours but not ready yet, e.g. a concurrent `make up` is starting it: wait for it too.
        started = time.monotonic()
        try:
            _wait_ready(part, settings, pid, None, started)
            return _Outcome(part.name, "ready", time.monotonic() - started, pid)
        except _ExitedEarly:
            # Whoever started it stopped it again (a test session ending, `make down`): start our own.
            pid = None
    if pid is not None:
        _forget(part, settings)  # stale pid file from a crash or a reboot
    if part.answers is not None and part.answers():
        return _Outcome(part.name, "already running", extra=["not started by Floe"])
    if not part.local:
        raise StackError(
            f"{part.name}: {part.endpoint} does not answer, and it is not on this host, so the stack cannot "
            "start it; start it yourself or change the endpoint in settings (FLOE_...)"
        )
    pid, seconds = _start(part, settings)
    return _Outcome(part.name, "started", seconds, pid)


def _print_outcome(console: Console, outcome: _Outcome, part: Part) -> None:
    """One progress line per part."""
    where = f"  {part.endpoint}" if part.endpoint else ""
    pid = f"  pid {outcome.pid}" if outcome.pid else ""
    extra = f"  ({', '.join(outcome.extra)})" if outcome.extra else ""
    if outcome.action == "started":
        console.print(f"[green]✓[/] {part.name:<10} ready in {outcome.seconds:.1f} s{pid}{where}")
    elif outcome.action == "ready":
        console.print(f"[green]✓[/] {part.name:<10} ready after waiting {outcome.seconds:.1f} s{pid}{where}")
    elif outcome.action == "not used":
        console.print(f"[dim]-[/] {part.name:<10} not used (settings point at real AWS)")
    else:
        console.print(f"[green]✓[/] {part.name:<10} already running{pid}{where}{extra}")


def ensure(
    names: Iterable[str], settings: Settings | None = None, console: Console | None = None
) -> list[str]:
    """Make the named parts ready, in stack order; return the names this call started.

    Raises :class:`StackError` when a part cannot be started or does not become ready in time.
    """
    settings = settings or Settings()
    console = console or Console(highlight=False)
    private_dir(state_dir(settings))  # also closes a state directory an older Floe left world-readable
    started: list[str] = []
    for name in _ordered(names):
        if name == "redis" and settings.redis.cluster:
            if _cluster_up(settings, console):
                started.append(name)
            continue
        part = build_part(name, settings)
        with console.status(f"starting {name}…"):
            outcome = _ensure_part(part, settings)
        _print_outcome(console, outcome, part)
        if outcome.action == "started":
            started.append(name)
    return started


def _cluster_up(settings: Settings, console: Console) -> list[int]:
    """Start the local Redis Cluster that stands in for the single Redis (``redis.cluster``)."""
    try:
        return redis_cluster.up(settings, write_redis_users(settings), console)
    except redis_cluster.ClusterError as exc:
        raise StackError(f"redis: {exc}") from None


def ensure_services(settings: Settings | None = None, console: Console | None = None) -> list[str]:
    """Start LocalStack and Redis unless they already run; return the names this call started."""
    return ensure(SERVICES, settings, console)


def stop(names: Iterable[str], settings: Settings | None = None, console: Console | None = None) -> list[str]:
    """Stop the named parts that the stack started, in reverse stack order; return the names stopped.

    Parts that something else started (no pid file of ours) are left alone.
    """
    settings = settings or Settings()
    console = console or Console(highlight=False)
    stopped: list[str] = []
    for name in reversed(_ordered(names)):
        if name == "redis" and settings.redis.cluster:
            if redis_cluster.down(settings, console):
                stopped.append(name)
            continue
        part = build_part(name, settings)
        path = pid_file(name, settings)
        pid = read_pid(path)
        if pid is not None and process_alive(pid, part.cmdline_marker):
            with console.status(f"stopping {name}…"):
                how = terminate(pid)
            console.print(f"[green]✓[/] {name:<10} {how}  pid {pid}")
            stopped.append(name)
        elif path.exists():
            console.print(f"[dim]-[/] {name:<10} was not running (removed stale pid file)")
        elif part.enabled and part.answers is not None and part.answers():
            console.print(f"[dim]-[/] {name:<10} not started by Floe; left running")
        else:
            console.print(f"[dim]-[/] {name:<10} not running")
        _forget(part, settings)
    return stopped


def status(settings: Settings | None = None, names: Sequence[str] = ALL_PARTS) -> list[PartStatus]:
    """The state of each part: ready, starting, external, stopped, unreachable or not used."""
    settings = settings or Settings()
    result: list[PartStatus] = []
    for name in _ordered(names):
        if name == "redis" and settings.redis.cluster:
            state, pid = redis_cluster.state(settings)
            log = redis_cluster.nodes(settings)[0].log
            result.append(PartStatus(name, state, pid, settings.redis.url, log))
            continue
        part = build_part(name, settings)
        log = log_file(name, settings)
        if not part.enabled:
            result.append(PartStatus(name, "not used", None, "", log))
            continue
        pid = read_pid(pid_file(name, settings))
        if pid is not None and process_alive(pid, part.cmdline_marker):
            state = "ready" if part.is_ready() else "starting"
        elif part.answers is not None and part.answers():
            state, pid = "external", None
        else:
            state = "stale pid file" if pid is not None else "stopped"
            pid = None
            if not part.local:
                state = "unreachable"
        result.append(PartStatus(name, state, pid, part.endpoint, log))
    return result


# ---------------------------------------------------------------------------------------------- CLI


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it lies below it (keeps the table narrow)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _print_status(console: Console, rows: list[PartStatus]) -> None:
    """The ``status`` table."""
    colour = {"ready": "green", "external": "cyan", "starting": "yellow", "stopped": "dim"}
    table = Table(title="Floe stack")
    for column in ("part", "state", "pid", "endpoint", "log"):
        table.add_column(column)
    for row in rows:
        style = colour.get(row.state, "red")
        table.add_row(
            row.name,
            f"[{style}]{row.state}[/]",
            str(row.pid or ""),
            row.endpoint,
            _shown(row.log) if row.log.exists() else "",
        )
    console.print(table)


def _parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(
        prog="python -m infra.stack",
        description=(
            "Start, stop and inspect the local Floe stack (LocalStack, Redis, floe api/consumer/pipeline). "
            "Pid files go to <state_dir>/run, logs to <state_dir>/logs; state_dir comes from settings "
            "(FLOE_STATE_DIR, default .floe). Services that already answer on their endpoint are used as "
            "they are and never stopped."
        ),
        epilog=f"Parts, in start order: {', '.join(ALL_PARTS)}.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    part_help = f"parts to act on (default: all of {', '.join(ALL_PARTS)})"
    up = sub.add_parser("up", help="start what is not running and wait until everything is ready")
    up.add_argument("parts", nargs="*", metavar="PART", help=part_help)
    down = sub.add_parser("down", help="stop what the stack started (SIGTERM, SIGKILL after 20 s)")
    down.add_argument("parts", nargs="*", metavar="PART", help=part_help)
    st = sub.add_parser("status", help="print a table of the parts and their state")
    st.add_argument("parts", nargs="*", metavar="PART", help=part_help)
    s_up = sub.add_parser("services-up", help="start only LocalStack and Redis (what the tests need)")
    s_up.add_argument(
        "--record",
        metavar="FILE",
        type=Path,
        help="write the names this run started to FILE, one a line, for `services-down --recorded FILE`",
    )
    s_down = sub.add_parser("services-down", help="stop LocalStack and Redis if the stack started them")
    s_down.add_argument(
        "--recorded",
        metavar="FILE",
        type=Path,
        help="stop only the services listed in FILE (written by `services-up --record`), then delete FILE",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m infra.stack``; returns the exit code."""
    args = _parser().parse_args(argv)
    private_files()  # the record files and anything else this command creates
    console = Console(highlight=False)
    settings = Settings()
    try:
        if args.command == "up":
            ensure(args.parts or ALL_PARTS, settings, console)
        elif args.command == "services-up":
            started = ensure(SERVICES, settings, console)
            if args.record is not None:
                args.record.parent.mkdir(parents=True, exist_ok=True)
                args.record.write_text("".join(f"{name}\n" for name in started))
        elif args.command in ("down", "services-down"):
            # Once stopping has begun, a second Ctrl-C (from `make run`) must not leave a half-stopped stack;
            # stopping is bounded by the SIGKILL deadline anyway.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if args.command == "down":
                stop(args.parts or ALL_PARTS, settings, console)
            elif args.recorded is not None:
                names = args.recorded.read_text().split() if args.recorded.exists() else []
                stop(names, settings, console)
                args.recorded.unlink(missing_ok=True)
            else:
                stop(SERVICES, settings, console)
        else:
            _print_status(console, status(settings, args.parts or ALL_PARTS))
    except StackError as exc:
        console.print("[red]✗[/]", end=" ")
        console.out(str(exc))  # plain output: log tails may contain text that looks like rich markup
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]; parts already started keep running (`make down` stops them)")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
