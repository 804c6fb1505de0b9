"""Local exposure: what another user of the host can do to Floe's Redis, files and secrets.

The issue's attacks: Redis answered anyone on the host, so any local user could add a key to
FLOE_ADMIN; the AOF, logs and state under ``.floe/`` were world-readable; and two processes
starting together could create two different master keys.
"""

from __future__ import annotations

import multiprocessing
import stat
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path

import redis


@dataclass(frozen=True)
class RedisAttempt:
    """What an anonymous client got from Redis: whether PING and a write worked, and the error text."""

    pinged: bool
    wrote: bool
    error: str


def anonymous_redis(url: str, key: str) -> RedisAttempt:
    """Connect without credentials, as any local user can, and try PING and a write of ``key``."""
    client = redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
    pinged = wrote = False
    error = ""
    try:
        pinged = bool(client.ping())
        # What the issue did: give a user a key of the attacker's choosing.
        wrote = bool(client.hset(key, "FLOE_ADMIN", '{"rsa_public_key": "attacker"}') is not None)
    except (redis.RedisError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return RedisAttempt(pinged, wrote, error)


def readable_by_others(root: Path) -> list[str]:
    """Paths under ``root`` (itself included) that grant any permission to group or others."""
    found: list[str] = []
    for path in [root, *root.rglob("*")]:
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue  # a file a running service deleted meanwhile
        if stat.S_ISLNK(mode):
            continue
        if mode & 0o077:
            found.append(f"{oct(mode & 0o777)} {path}")
    return found


def processes_showing(secret: str) -> list[str]:
    """Processes whose command line contains ``secret`` (any local user can read /proc/*/cmdline)."""
    needle = secret.encode()
    found: list[str] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]
            found.append(f"{entry.name}: {shown}")
    return found


def redis_cmdlines() -> dict[int, str]:
    """Command lines of every running redis-server, by pid."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith("redis-server"):
            found[int(entry.name)] = cmdline
    return found


# ------------------------------------------------------------------------------------ key-file races


def _master_key(path: str, barrier: Barrier) -> bytes:
    """In a child: create the master key; every racer generates its key before any of them links."""
    import secrets

    from floe.settings import EncryptionSettings

    real = secrets.token_bytes

    def token_bytes(n: int) -> bytes:
        if n == 32:  # the key, not a temporary file's name
            barrier.wait(timeout=60)  # all racers are past the "does the file exist?" check
        return real(n)

    secrets.token_bytes = token_bytes  # type: ignore[assignment]
    return EncryptionSettings(master_key_file=path).resolve_master_key()


def _admin_key(path: str, barrier: Barrier) -> bytes:
    """In a child: create the admin key file, with the same forced overlap as :func:`_master_key`."""
    from floe import keypair

    real = keypair.new_private_key

    def new_private_key() -> keypair.rsa.RSAPrivateKey:
        barrier.wait(timeout=60)
        return real()

    keypair.new_private_key = new_private_key  # type: ignore[assignment]
    return keypair.fingerprint(keypair.ensure_key_file(path).public_key()).encode()


def _redis_password(path: str, barrier: Barrier) -> bytes:
    """In a child: create the stack's Redis password file, racers overlapping as above."""
    import secrets

    from floe.settings import RedisSettings
    from infra import stack

    real = secrets.token_urlsafe

    def token_urlsafe(n: int) -> str:
        barrier.wait(timeout=60)
        return real(n)

    secrets.token_urlsafe = token_urlsafe  # type: ignore[assignment]
    return stack.redis_password(RedisSettings(password_file=path)).encode()


RACERS: dict[str, Callable[[str, Barrier], bytes]] = {
    "master key": _master_key,
    "admin key": _admin_key,
    "redis password": _redis_password,
}


def _run(kind: str, path: str, barrier: Barrier, results: multiprocessing.Queue[bytes]) -> None:
    results.put(RACERS[kind](path, barrier))


def race(kind: str, path: Path, racers: int = 4) -> list[bytes]:
    """Start ``racers`` processes that create the same key file at once; return what each ended with.

    Each process generates its own secret and waits for all the others to have generated theirs
    before it writes, so every one of them really tries to create the file: the race is forced,
    not hoped for. A barrier that breaks (a racer that never got there) fails the race loudly.
    """
    ctx = multiprocessing.get_context("spawn")  # no fork of a threaded test process
    barrier = ctx.Barrier(racers)
    results: multiprocessing.Queue[bytes] = ctx.Queue()
    procs = [ctx.Process(target=_run, args=(kind, str(path), barrier, results)) for _ in range(racers)]
    for proc in procs:
        proc.start()
    try:
        found = [results.get(timeout=120) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=30)
    codes = [proc.exitcode for proc in procs]
    if codes != [0] * racers:
        raise AssertionError(f"a racer failed: exit codes {codes}")
    return found
