"""Callers of a running API: an unprivileged SQL user, raw HTTP, and a /health watcher."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from floe.keypair import new_private_key, private_key_pem, public_key_body
from floe.settings import Settings
from front.client import auth_header


@dataclass
class SqlCaller:
    """Runs statements through the API's SQL endpoint as one user, returning status and body."""

    settings: Settings
    user: str
    key_file: str

    @property
    def url(self) -> str:
        """The API's base URL."""
        return f"http://{self.settings.api.host}:{self.settings.api.port}"

    def headers(self) -> dict[str, str]:
        """A fresh bearer token for this user."""
        return auth_header(self.settings, self.user, self.key_file)

    def sql(self, statement: str, timeout: float = 120.0) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) of one statement. A 429 (the API's per-user statement limit,
        settings.auth.sql_rate_limit_*) is waited out as its Retry-After says, so attacks that
        run many statements measure the refusal they aim at, not the rate limit."""
        deadline = time.monotonic() + timeout
        while True:
            resp = httpx.post(
                f"{self.url}/api/v1/sql", json={"sql": statement}, headers=self.headers(), timeout=timeout
            )
            if resp.status_code != 429 or time.monotonic() > deadline:
                return resp.status_code, resp.json()
            time.sleep(min(5.0, float(resp.headers.get("retry-after", "1"))))

    def run_all(self, *statements: str) -> list[dict[str, Any]]:
        """Run statements that must succeed, in order; their JSON bodies."""
        bodies = []
        for statement in statements:
            status, body = self.sql(statement)
            assert status == 200, (statement, body)
            bodies.append(body)
        return bodies


def new_user(admin: SqlCaller, directory: Path, name: str, *grants: str) -> SqlCaller:
    """Create a user with a fresh key pair and a role of its own, run ``grants`` (with ``{role}``
    standing for that role) as the admin, and return a caller signed in as the user."""
    key = new_private_key()
    key_file = directory / f"{name}.p8"
    key_file.write_text(private_key_pem(key))
    role = f"{name}_role"
    admin.run_all(
        f"CREATE ROLE {role}",
        f"CREATE USER {name} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}' DEFAULT_ROLE = {role}",
        f"GRANT ROLE {role} TO USER {name}",
        *(g.format(role=role) for g in grants),
    )
    return SqlCaller(admin.settings, name, str(key_file))


@dataclass
class HealthWatch:
    """Latencies of /health polled one after another while an attack runs."""

    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def worst(self) -> float:
        """The slowest answer (seconds); infinity when none came."""
        return max(self.latencies, default=float("inf"))


@contextmanager
def watching_health(base_url: str, interval: float = 0.05) -> Iterator[HealthWatch]:
    """Poll /health until the block ends. A request that fails or takes over 5 s counts as 5 s."""
    watch = HealthWatch()
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=5.0) as client:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    resp = client.get(f"{base_url}/health")
                    if resp.status_code != 200:
                        watch.failures.append(f"/health answered {resp.status_code}")
                    watch.latencies.append(time.perf_counter() - started)
                except httpx.HTTPError as exc:
                    watch.failures.append(f"/health failed: {exc!r}")
                    watch.latencies.append(5.0)
                stop.wait(interval)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        stop.set()
        thread.join(10)
