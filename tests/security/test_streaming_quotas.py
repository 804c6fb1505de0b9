"""Streaming cannot fill the shared Redis (issue 31, item 6).

A user with only INSERT on one table sent 17 KB of zstd and left 201 MB of rows in Redis: every
open reset the channel's pending bound, channels per pipe were unlimited and the append rate was
per channel name. What a channel, a pipe, a table and a user hold in Redis (decompressed bytes,
rows, channels) is now bounded, the bounds survive a reopen and free up when the pipeline commits
(or is found gone after a crash), and appends are rate-limited per user too.

Everything runs in-process against the real Redis, each test on its own key prefix.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
import zstandard
from cryptography.hazmat.primitives.asymmetric import rsa

from bench.harness import unique
from floe.catalog import Catalog, Pipe
from floe.channel_quotas import NO_LIMITS, Ledger
from floe.keypair import new_private_key, public_key_body
from floe.keys import Keys, scan_keys
from floe.records import RowAppend
from floe.settings import Settings
from floe.streaming import protocol as wire
from front.client import auth_header
from pipeline.registrar import ChannelRegistrar, ChannelSettle, Outcome
from services import streaming as streaming_service
from services.api import create_app
from tests.asgi import AppClient
from tests.services.test_snowpipe import bearer, token

pytestmark = pytest.mark.integration

ROLE = "tenant"
TOO_MANY_CHANNELS = "ERR_TOO_MANY_CHANNELS"
USERS = ("MALLORY", "TRUDY")
"""Two users of the same role: a bound of one user must not stop the other."""


@dataclass
class Tenant:
    """An API on its own key prefix with two tables, a second streaming pipe on the first table, and
    users whose role may append to the tables (INSERT) and the pipe (OPERATE), and nothing else."""

    client: AppClient
    settings: Settings
    redis: redis.Redis[bytes]
    tables: tuple[str, str]
    pipe: str
    """A streaming pipe with a transform into tables[0], next to its default pipe."""
    keys: dict[str, rsa.RSAPrivateKey] = field(default_factory=dict)
    _scoped: dict[str, dict[str, str]] = field(default_factory=dict)

    def sql(self, statement: str) -> None:
        resp = self.client.post("/api/v1/sql", json={"sql": statement}, headers=auth_header(self.settings))
        assert resp.status_code == 200, resp.text

    def default_pipe(self, table: int = 0) -> str:
        return f"{self.tables[table]}-STREAMING"

    def headers(self, user: str) -> dict[str, str]:
        """A scoped token for the user's key-pair JWT, exchanged once."""
        if user not in self._scoped:
            resp = self.client.post(
                wire.TOKEN_PATH,
                content=f"grant_type={wire.TOKEN_GRANT_TYPE}&scope=localhost",
                headers={
                    **bearer(token(user, self.keys[user])),
                    "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT",
                    "Content-Type": "application/x-www-form-urlencoded",
                },
            )
            assert resp.status_code == 200, resp.text
            self._scoped[user] = {
                "Authorization": f"Bearer {resp.text}",
                "X-Snowflake-Authorization-Token-Type": "OAUTH",
            }
        return self._scoped[user]

    def open(self, user: str, pipe: str, channel: str) -> Any:
        return self.client.put(
            wire.channel_path("FLOE", "PUBLIC", pipe, channel), json={}, headers=self.headers(user)
        )

    def opened(self, user: str, pipe: str, channel: str) -> str:
        """Open the channel; its continuation token."""
        resp = self.open(user, pipe, channel)
        assert resp.status_code == 200, resp.text
        return str(resp.json()["next_continuation_token"])

    def drop(self, user: str, pipe: str, channel: str) -> Any:
        return self.client.delete(
            wire.channel_path("FLOE", "PUBLIC", pipe, channel), headers=self.headers(user)
        )

    def append(
        self,
        user: str,
        pipe: str,
        channel: str,
        cont: str,
        body: bytes,
        zstd: bool = False,
        request_id: str | None = None,
    ) -> Any:
        headers = {**self.headers(user), "Content-Type": "application/x-ndjson"}
        if zstd:
            headers["Content-Encoding"] = "zstd"
        return self.client.post(
            wire.rows_path("FLOE", "PUBLIC", pipe, channel),
            params={"continuationToken": cont, "requestId": request_id or str(uuid.uuid4())},
            content=body,
            headers=headers,
        )

    def pipe_id(self, name: str) -> str:
        return (
            Catalog(self.redis, Keys(self.settings.redis.prefix)).get(Pipe, f"FLOE.PUBLIC.{name.upper()}").id
        )

    def queued(self, pipe: str) -> list[RowAppend]:
        key = Keys(self.settings.redis.prefix).rows(self.pipe_id(pipe))
        return [RowAppend.from_stream(sid, f) for sid, f in self.redis.xrange(key)]

    def stored_bytes(self) -> int:
        """Bytes of rows waiting in Redis under this prefix (every append's row data)."""
        pattern = f"{self.settings.redis.prefix}:*:rowdata:*"
        return sum(int(self.redis.strlen(k)) for k in scan_keys(self.redis, pattern))

    def memory(self) -> int:
        """What Redis says every key of this prefix takes (MEMORY USAGE, values and overhead)."""
        keys = list(scan_keys(self.redis, f"{self.settings.redis.prefix}:*"))
        return sum(int(self.redis.memory_usage(k, samples=0) or 0) for k in keys)


@pytest.fixture
def tenant_with(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> Iterator[Any]:
    """A factory of Tenants whose streaming settings are the defaults updated with ``bounds``."""
    made: list[Tenant] = []

    def make(**bounds: Any) -> Tenant:
        streaming = isolated_settings.streaming.model_copy(update=bounds)
        settings = isolated_settings.model_copy(update={"streaming": streaming})
        t = Tenant(
            AppClient(create_app(settings, redis_client)),
            settings,
            redis_client,
            (unique("t_"), unique("t_")),
            unique("p_"),
        )
        made.append(t)
        for table in t.tables:
            t.sql(f"CREATE TABLE {table} (id INT, note VARCHAR)")
        t.sql(
            f"CREATE PIPE {t.pipe} AS COPY INTO {t.tables[0]} FROM (SELECT $1:id, $1:note "
            "FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
        )
        t.sql(f"CREATE ROLE {ROLE}")
        t.sql(f"GRANT USAGE ON DATABASE FLOE TO ROLE {ROLE}")
        t.sql(f"GRANT USAGE ON SCHEMA FLOE.PUBLIC TO ROLE {ROLE}")
        for table in t.tables:
            t.sql(f"GRANT INSERT ON TABLE {table} TO ROLE {ROLE}")
        t.sql(f"GRANT OPERATE ON PIPE {t.pipe} TO ROLE {ROLE}")
        for user in USERS:
            key = t.keys[user] = new_private_key()
            public = public_key_body(key.public_key())
            t.sql(f"CREATE USER {user} RSA_PUBLIC_KEY = '{public}' DEFAULT_ROLE = {ROLE}")
            t.sql(f"GRANT ROLE {ROLE} TO USER {user}")
        return t

    yield make
    for t in made:
        t.client.close()
    stale = list(redis_client.scan_iter(match=f"{isolated_settings.redis.prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)


def rows(count: int, pad: int = 0) -> bytes:
    """``count`` NDJSON rows, each with a note of ``pad`` characters."""
    return b"".join(b'{"id": %d, "note": "%s"}\n' % (i, b"x" * pad) for i in range(count))


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=19).compress(data)


def refused(resp: Any, status: int, code: str, *fragments: str) -> None:
    """The answer is the streaming API's error shape with this status and code, naming each fragment."""
    assert resp.status_code == status, (resp.status_code, resp.text)
    body = resp.json()
    assert set(body) == {"code", "message"} and body["code"] == code, body
    for fragment in fragments:
        assert fragment in body["message"], (fragment, body["message"])


# ------------------------------------------------------------------------------------------------
# Pending rows: they survive a reopen, and every holder is bounded


def test_reopening_a_channel_does_not_reset_what_it_holds(tenant_with: Any) -> None:
    """The channel's bound counts what waits in Redis: a reopen fences the old writer, but its rows
    stay until the pipeline settles them, so they still count."""
    t = tenant_with(max_pending_bytes_per_channel=1)
    pipe = t.default_pipe()
    # An empty holder takes one append whatever its size (a bound below one append would stop it).
    assert t.append("MALLORY", pipe, "c", t.opened("MALLORY", pipe, "c"), rows(10)).status_code == 200
    for _ in range(3):
        again = t.append("MALLORY", pipe, "c", t.opened("MALLORY", pipe, "c"), rows(10))
        refused(again, 503, wire.Code.PENDING_FULL, "FLOE_STREAMING__MAX_PENDING_BYTES_PER_CHANNEL")
    assert len(t.queued(pipe)) == 1


def _two_holders(t: Tenant, scope: str) -> tuple[tuple[str, str, str], tuple[str, str, str]]:
    """Two (user, pipe, channel) writers that share only the holder ``scope`` names."""
    if scope == "pipe":
        return ("MALLORY", t.pipe, "a"), ("TRUDY", t.pipe, "b")
    if scope == "table":  # the table's default pipe and the other pipe into it
        return ("MALLORY", t.default_pipe(0), "a"), ("TRUDY", t.pipe, "b")
    return ("MALLORY", t.default_pipe(0), "a"), ("MALLORY", t.default_pipe(1), "b")  # user


@pytest.mark.parametrize("scope", ["pipe", "table", "user"])
@pytest.mark.parametrize("measure", ["bytes", "rows"])
def test_what_a_pipe_a_table_and_a_user_hold_is_bounded(tenant_with: Any, scope: str, measure: str) -> None:
    """Decompressed bytes and rows are counted: 100 rows of 1 KB sent as a few hundred bytes of zstd
    fill a bound of 50 KB (and one of 150 rows), and the next append, on another channel, is refused."""
    setting = f"max_pending_{measure}_per_{scope}"
    t = tenant_with(**{setting: 50_000 if measure == "bytes" else 150})
    first, second = _two_holders(t, scope)
    body = zstd(rows(100, pad=1000))
    assert len(body) < 2_000
    ok = t.append(*first, t.opened(*first), body, zstd=True)
    assert ok.status_code == 200, ok.text
    over = t.append(*second, t.opened(*second), body, zstd=True)
    refused(over, 503, wire.Code.PENDING_FULL, f"FLOE_STREAMING__{setting.upper()}")
    # A writer that does not share that holder still appends.
    other = ("TRUDY", t.default_pipe(1), "z")
    assert t.append(*other, t.opened(*other), body, zstd=True).status_code == 200


@pytest.mark.parametrize("scope", ["pipe", "table", "user"])
def test_channels_of_a_pipe_a_table_and_a_user_are_bounded(tenant_with: Any, scope: str) -> None:
    t = tenant_with(**{f"max_channels_per_{scope}": 2})
    first, second = _two_holders(t, scope)
    t.opened(*first)
    t.opened(*second)
    third = (second[0], second[1], "c")
    refused(
        t.open(*third),
        400,
        TOO_MANY_CHANNELS,
        f"FLOE_STREAMING__MAX_CHANNELS_PER_{scope.upper()}",
        "Drop the channels",
    )
    # Reopening a channel that exists is never refused; dropping one makes room.
    t.opened(*first)
    assert t.drop(*first).status_code == 200
    t.opened(*third)


def test_appends_are_rate_limited_per_user_across_channels(tenant_with: Any) -> None:
    """The issue's 24 appends over 24 channel names each passed their channel's rate."""
    t = tenant_with(appends_per_s_per_user=0.001, appends_burst_per_user=3)
    pipe = t.default_pipe()
    answers = [
        t.append("MALLORY", pipe, f"c{i}", t.opened("MALLORY", pipe, f"c{i}"), rows(1)) for i in range(4)
    ]
    assert [a.status_code for a in answers[:3]] == [200, 200, 200]
    refused(answers[3], 429, wire.Code.RATE_LIMITED, "FLOE_STREAMING__APPENDS_PER_S_PER_USER")
    assert int(answers[3].headers["retry-after"]) >= 1
    assert t.append("TRUDY", pipe, "t", t.opened("TRUDY", pipe, "t"), rows(1)).status_code == 200


# ------------------------------------------------------------------------------------------------
# Atomic under concurrency, cheap when refused, freed by the pipeline, healed after a crash


def test_concurrent_appends_overshoot_a_bound_by_at_most_one_append(tenant_with: Any) -> None:
    """16 writers on 16 channels append at once until refused: what Redis holds stays within the
    user's bound plus one append (the one an empty holder always takes)."""
    limit = 200_000
    t = tenant_with(max_pending_bytes_per_user=limit)
    pipe = t.default_pipe()
    body = rows(40, pad=1000)  # about 41 KB a request
    conts = {f"c{i}": t.opened("MALLORY", pipe, f"c{i}") for i in range(16)}

    def writer(channel: str) -> int:
        accepted, cont = 0, conts[channel]
        for _ in range(10):
            resp = t.append("MALLORY", pipe, channel, cont, body)
            if resp.status_code != 200:
                refused(resp, 503, wire.Code.PENDING_FULL, "FLOE_STREAMING__MAX_PENDING_BYTES_PER_USER")
                break
            accepted += 1
            cont = resp.json()["next_continuation_token"]
        return accepted

    with ThreadPoolExecutor(16) as pool:
        accepted = sum(pool.map(writer, conts))
    assert accepted >= 1
    assert t.stored_bytes() == accepted * len(body)
    assert t.stored_bytes() <= limit + len(body), (t.stored_bytes(), limit)


def test_an_append_over_a_full_bound_is_refused_before_it_is_inflated(
    tenant_with: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each bomb cost 1.6 s of API CPU to inflate and parse: a holder that is full refuses it first,
    and one with little room left stops inflating it once it passes that room."""
    t = tenant_with(max_pending_bytes_per_user=300_000)
    pipe = t.default_pipe()
    assert (
        t.append("MALLORY", pipe, "a", t.opened("MALLORY", pipe, "a"), rows(250, pad=1000)).status_code == 200
    )
    inflated: list[int] = []
    real = streaming_service.decode_body

    def counting(body: bytes, encoding: str | None, *args: Any, **kwargs: Any) -> bytes:
        out = real(body, encoding, *args, **kwargs)
        inflated.append(len(out))
        return out

    monkeypatch.setattr(streaming_service, "decode_body", counting)
    bomb = zstd(rows(20_000, pad=1000))  # about 20 MB of rows in a few KB
    over = t.append("MALLORY", pipe, "b", t.opened("MALLORY", pipe, "b"), bomb, zstd=True)
    refused(over, 503, wire.Code.PENDING_FULL, "FLOE_STREAMING__MAX_PENDING_BYTES_PER_USER")
    assert inflated == [], "the body was inflated although the user's bound had no room for it"


def _settle(t: Tenant, pipe: str) -> Outcome:
    """Commit every queued append of the pipe as the job does (pipeline.registrar)."""
    keys = Keys(t.settings.redis.prefix)
    appends = t.queued(pipe)
    writers: dict[tuple[str, str, int], list[RowAppend]] = {}
    for a in appends:
        writers.setdefault((a.channel, a.incarnation, a.client_sequencer), []).append(a)
    settles = [
        ChannelSettle(
            channel,
            incarnation,
            cseq,
            appends=len(group),
            bytes=sum(a.size for a in group),
            rows_inserted=sum(a.rows for a in group),
            rows_parsed=sum(a.rows for a in group),
            stream_ids=[str(a.stream_id) for a in group],
            data_keys=[a.data_key for a in group],
        )
        for (channel, incarnation, cseq), group in writers.items()
    ]
    registrar = ChannelRegistrar(t.redis, keys, 3600)
    return registrar.settle(t.pipe_id(pipe), settles, "q", uuid.uuid4().int % 1_000_000, 1).outcome


def test_the_bound_frees_up_when_the_pipeline_commits(tenant_with: Any) -> None:
    t = tenant_with(max_pending_bytes_per_user=1, max_pending_rows_per_user=1)
    pipe = t.default_pipe()
    cont = t.opened("MALLORY", pipe, "c")
    first = t.append("MALLORY", pipe, "c", cont, rows(5))
    assert first.status_code == 200
    cont = first.json()["next_continuation_token"]
    refused(t.append("MALLORY", pipe, "c", cont, rows(5)), 503, wire.Code.PENDING_FULL)
    assert _settle(t, pipe) is Outcome.COMMITTED
    assert t.append("MALLORY", pipe, "c", cont, rows(5)).status_code == 200


def test_a_retried_append_counts_once_and_a_retry_after_its_commit_counts_nothing(tenant_with: Any) -> None:
    t = tenant_with()
    pipe = t.default_pipe()
    ledger = Ledger(t.redis, Keys(t.settings.redis.prefix), NO_LIMITS)
    cont = t.opened("MALLORY", pipe, "c")
    first = t.append("MALLORY", pipe, "c", cont, rows(3), request_id="r-1")
    again = t.append("MALLORY", pipe, "c", cont, rows(3), request_id="r-1")
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    totals = ledger.totals()
    assert totals["u:MALLORY|r"] == 3 and totals["u:MALLORY|n"] == 1, totals
    assert _settle(t, pipe) is Outcome.COMMITTED
    assert ledger.totals() == {"u:MALLORY|n": 1, **{k: v for k, v in totals.items() if k.endswith("|n")}}
    late = t.append("MALLORY", pipe, "c", cont, rows(3), request_id="r-1")
    assert late.status_code == 200 and late.json() == first.json()
    assert not any(k.endswith(("|b", "|r")) for k in ledger.totals()), ledger.totals()


def test_a_crash_between_commit_and_release_does_not_keep_the_bound_full(
    tenant_with: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job died after its commit removed the rows and before it released their count: the
    count is checked against the rows actually left in Redis before anyone is refused."""
    t = tenant_with(max_pending_bytes_per_user=1, max_channels_per_user=1)
    pipe = t.default_pipe()
    cont = t.opened("MALLORY", pipe, "c")
    assert t.append("MALLORY", pipe, "c", cont, rows(5)).status_code == 200
    # The commit's own step, without the release that follows it: the rows and the channel are gone.
    for a in t.queued(pipe):
        t.redis.delete(a.data_key)
        t.redis.xdel(Keys(t.settings.redis.prefix).rows(t.pipe_id(pipe)), str(a.stream_id))
    t.redis.delete(Keys(t.settings.redis.prefix).channel(t.pipe_id(pipe), "c"))
    # Counts younger than the grace are never taken for leftovers (an append may be in flight).
    monkeypatch.setattr("floe.channel_quotas.RECONCILE_GRACE_MS", 0)
    cont = t.opened("MALLORY", pipe, "d")
    assert t.append("MALLORY", pipe, "d", cont, rows(5)).status_code == 200
    assert t.stored_bytes() == len(rows(5))


# ------------------------------------------------------------------------------------------------
# The attack


def test_many_bombs_over_many_channel_names_leave_at_most_the_users_bound(tenant_with: Any) -> None:
    """The issue's attack, scaled down: a user with INSERT on one table sends zstd bodies of about
    1 MB of rows each over 24 channel names, then reopens every channel and sends them again. Redis
    keeps at most the user's bound and one append, whatever the bound per channel says."""
    limit = 4 * 1024 * 1024
    t = tenant_with(max_pending_bytes_per_user=limit, appends_per_s_per_user=0)
    pipe = t.default_pipe()
    raw = rows(1000, pad=1000)
    bomb = zstd(raw)
    assert len(bomb) < 20_000 and len(raw) > 1_000_000
    before = t.memory()
    accepted = 0
    for _ in range(2):
        for i in range(24):
            resp = t.append("MALLORY", pipe, f"ch{i}", t.opened("MALLORY", pipe, f"ch{i}"), bomb, zstd=True)
            accepted += resp.status_code == 200
    assert t.stored_bytes() <= limit + len(raw), (accepted, t.stored_bytes())
    # Every key of the prefix, what Redis itself counts: the rows, their queue, channels, counts.
    assert t.memory() - before <= limit + len(raw) + 1024 * 1024, t.memory() - before
