"""Callers of a running API: an unprivileged SQL user, raw HTTP, and a /health watcher."""

from __future__ import annotations

import itertools
import statistics
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
    other to order a probe against an attack, or with other spans of the same run, never held
    against a bound in seconds."""

    sent: float
    answered: float

    @property
    def took(self) -> float:
        return self.answered - self.sent


T = TypeVar("T")

IN_FLIGHT = 5
"""Probes the API must answer while an attack is in flight: a few, so one lucky answer is not it."""

QUIET = 5
"""Probes the watcher has answered before the attack starts, and again after it ends: the API's
pace of answering /health when nothing attacks it (``HealthWatch.cycle``)."""

SILENCE_CYCLES = 20
"""A silence inside an attack request counts as a stall only when it lasts this many quiet cycles
(``HealthWatch.cycle``): shorter ones are within what a busy scheduler makes of the probes' pace
(unbroken, the longest silence seen was 4 cycles), and a request shorter than that holds too few
probes to tell a stall from chance."""

STALLS_TOLERATED = 1
"""Stalled attack requests a watch lets pass: one is a hiccup of a loaded machine, which freezes
every process at random; an attack that freezes the API does it in every round it runs."""

MIN_ROUNDS = 2
"""Runs of an attack at the least, so that a stall it causes shows up twice (``STALLS_TOLERATED``)."""


@dataclass(frozen=True)
class Stall:
    """An attack request and the longest stretch within it in which no probe was answered."""

    request: Span
    silence: Span

    def __str__(self) -> str:
        return (
            f"no answer for {self.silence.took:.2f} s of a {self.request.took:.2f} s request "
            f"(from +{self.silence.sent - self.request.sent:.2f} s)"
        )


@dataclass
class HealthWatch:
    """/health probes sent one after another while an attack runs, and the attack's requests.

    What it shows is progress, not speed, against nothing but the same run's own pace, so a loaded
    machine, which slows the probes, the attack and the quiet API alike, changes no verdict:

    - the API answered probes while the attack's requests were in flight (``answered_in_flight``),
      so it did not stop for the whole of each;
    - no attack request held a stall (``stalls``): a stretch without an answer that is most of the
      request and many times the quiet API's pace (``cycle``), in more than one request. This
      sees an API that stops for a while inside each request and answers before and after it (a
      regex holding the GIL for seconds, a blocked event loop), which the first alone lets pass.
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

    @property
    def cycle(self) -> float:
        """The quiet API's pace: the median time from one probe's answer to the next over the
        stretches no attack request overlaps (the watch takes ``QUIET`` answers before the attack
        and after it); infinity without any."""
        answers = [p.answered for p in self.probes]
        quiet = [
            b - a
            for a, b in itertools.pairwise(answers)
            if not any(r.sent < b and a < r.answered for r in self.attacks)
        ]
        return statistics.median(quiet) if quiet else float("inf")

    def silence(self, request: Span) -> Span:
        """The longest stretch of ``request``'s flight in which no probe was answered: between two
        consecutive marks among its sending, the probes' answers that came meanwhile and its own
        answer. A stall of the API inside the request is such a stretch, whatever answers came
        before and after it."""
        inside = (p.answered for p in self.probes if request.sent < p.answered < request.answered)
        marks = [request.sent, *inside, request.answered]
        return max((Span(a, b) for a, b in itertools.pairwise(marks)), key=lambda s: s.took)

    @property
    def stalls(self) -> list[Stall]:
        """The attack requests that held a stall: a silence (``silence``) over half the request
        and over ``SILENCE_CYCLES`` quiet cycles. Both are ratios within this run: a machine slowed
        evenly stretches silences, requests and cycles alike. A request shorter than that many
        cycles holds too few probes to tell, and counts as no stall."""
        cycle, found = self.cycle, []
        for request in self.attacks:
            silence = self.silence(request)
            if silence.took > request.took / 2 and silence.took > SILENCE_CYCLES * cycle:
                found.append(Stall(request, silence))
        return found

    def until_answered(self, attack: Callable[[], T], rounds: int) -> list[T]:
        """Run ``attack`` (whose requests go through ``self.attack``) again and again until the API
        has answered ``IN_FLIGHT`` probes while its requests were in flight, and at least
        ``MIN_ROUNDS`` times, or ``rounds`` runs are done; the runs' results. A fixed attack answers
        in a fraction of a second, and a check of /health that saw nothing proves nothing."""
        answers = [attack()]
        while (self.answered_in_flight < IN_FLIGHT or len(answers) < MIN_ROUNDS) and len(answers) < rounds:
            answers.append(attack())
        return answers

    def check(self, during: str = "the attack's requests were in flight") -> None:
        """Assert that /health never failed, that the API answered ``IN_FLIGHT`` probes while the
        attack's requests were in flight, and that at most ``STALLS_TOLERATED`` of them stalled."""
        assert not self.failures, self.failures
        answered = self.answered_in_flight
        assert answered >= IN_FLIGHT, (
            f"/health answered {answered} times while {during} ({len(self.attacks)} requests), "
            f"of {len(self.probes)} answers"
        )
        stalls = self.stalls
        assert len(stalls) <= STALLS_TOLERATED, (
            f"/health stalled in {len(stalls)} of {len(self.attacks)} attack requests "
            f"(the quiet API answers every {self.cycle * 1000:.0f} ms): "
            + "; ".join(map(str, stalls[:3]))
            + ("; ..." if len(stalls) > 3 else "")
        )


@contextmanager
def watching_health(base_url: str, interval: float = 0.02) -> Iterator[HealthWatch]:
    """Poll /health from before the block starts until after it ends, one probe at a time,
    ``interval`` s after the last answer, with ``QUIET`` answers taken before the block runs and
    again after it (the quiet API's pace, ``HealthWatch.cycle``). A probe that fails or is not
    answered 200 is a failure. The client waits a minute for an answer: a slow one is no failure
    (what the probes show is how the answers space out, ``HealthWatch.check``)."""
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

    def quiet(since: float) -> None:
        # Probes that fail leave fewer quiet answers, and the watch's check reports the failures.
        failed = len(watch.failures)
        while thread.is_alive() and len(watch.failures) - failed < QUIET:
            if sum(p.sent >= since for p in watch.probes) >= QUIET:
                return
            time.sleep(interval)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        quiet(float("-inf"))
        yield watch
        quiet(time.monotonic())
    finally:
        stop.set()
        thread.join(70)
