"""Callers of a running API: an unprivileged SQL user, raw HTTP, and a /health watcher."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

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


@dataclass(frozen=True)
class Span:
    """When a request was sent and when its answer came, on ``time.monotonic``: compared with each
    other to order a probe against an attack, never held against a bound."""

    sent: float
    answered: float


T = TypeVar("T")

IN_FLIGHT = 5
"""Probes the API must answer while an attack is in flight: a few, so one lucky answer is not it."""


@dataclass
class HealthWatch:
    """/health probes sent one after another while an attack runs, and the attack's requests.

    What it shows is progress, not speed: how many probes the API answered while an attack request
    was in flight (``answered_in_flight``). A latency bound would fail on a loaded machine, and a
    probe answered while no attack was running shows nothing. The price: a stall shorter than the
    request it happens in leaves answers before and after it, and is not seen.
    """

    probes: list[Span] = field(default_factory=list)
    """The probes answered 200, in the order they were sent."""
    failures: list[str] = field(default_factory=list)
    attacks: list[Span] = field(default_factory=list)
    """The attack's requests, as ``attack`` ran them."""

    def attack(self, request: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one attack request, ``request(*args, **kwargs)``, recording when it was in flight. A
        statement the SQL rate limit turns away is in flight while ``SqlCaller.sql`` waits to retry
        it, and the API answers probes meanwhile: keep an attack within the limit's burst."""
        sent = time.monotonic()
        try:
            return request(*args, **kwargs)
        finally:
            self.attacks.append(Span(sent, time.monotonic()))

    @property
    def answered_in_flight(self) -> int:
        """Probes the API answered while one attack request was in flight (sent after the request
        was, answered before its answer came), less the first of each request. A probe sent while
        the attack blocks the API is answered as the block ends, in the same breath as the attack,
        and may arrive first; only a second answer shows that the API answered in between, so an
        API that answers nothing during the attack counts none."""
        counted = 0
        for attack in self.attacks:
            inside = [p for p in self.probes if attack.sent <= p.sent and p.answered <= attack.answered]
            counted += max(0, len(inside) - 1)
        return counted

    def until_answered(self, attack: Callable[[], T], rounds: int) -> list[T]:
        """Run ``attack`` (whose requests go through ``self.attack``) again and again until the API
        has answered ``IN_FLIGHT`` probes while its requests were in flight, or ``rounds`` runs are
        done; the runs' results. A fixed attack answers in a fraction of a second, and a check of
        /health that saw nothing proves nothing."""
        answers = [attack()]
        while self.answered_in_flight < IN_FLIGHT and len(answers) < rounds:
            answers.append(attack())
        return answers


@contextmanager
def watching_health(base_url: str, interval: float = 0.02) -> Iterator[HealthWatch]:
    """Poll /health until the block ends, one probe at a time, ``interval`` s after the last answer.
    A probe that fails or is not answered 200 is a failure. The client waits a minute for an
    answer: a slow one is no failure (the count of answers in flight is what shows a stall)."""
    watch = HealthWatch()
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=60.0) as client:
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    resp = client.get(f"{base_url}/health")
                except httpx.HTTPError as exc:
                    watch.failures.append(f"/health failed: {exc!r}")
                else:
                    if resp.status_code == 200:
                        watch.probes.append(Span(sent, time.monotonic()))
                    else:
                        watch.failures.append(f"/health answered {resp.status_code}")
                stop.wait(interval)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        stop.set()
        thread.join(70)
