"""Property test of Snowpipe Streaming's exactly-once and fencing rules against the real Redis, without
Spark: Hypothesis runs random sequences of channel steps (open and reopen, append by the current
writer, a stale append with an earlier token, a retry of an earlier append, drop) and micro-batches of
a simulated pipeline through the real ``ChannelStore``, ``pipeline.job.channel_settles`` and
``ChannelRegistrar``. The pipeline plans a batch as the Spark source does (the rows stream after the
last planned id, up to N entries), loads each append's rows the way the executors do, and may die
before its settle (the next batch is then the replay of the same range and batch id, as Spark's
offset log replays it) or after it (the replay must change nothing).

After every step, Floe's state must be that of ``Model``, a reference model written apart from the
code under test:
- the rows in the pipe's manifest are exactly those of the acknowledged appends that were not fenced,
  each once; an append is fenced iff a reopen or drop of its channel came after it was acknowledged
  and before its batch settled;
- each channel's committed offset token is the end token of its last committed append (in row
  sequencer order) that carried one, and its counters, sequencers and pending appends are the model's;
- the rows stream holds exactly the appends not settled yet, in order, and each one's rows are stored;
  nothing of an append is left once its batch settled, committed or fenced;
- a refused append stores nothing and a retry of an acknowledged one answers its next token again
  and stores nothing;
- an open refused for uncommitted rows (``fail_on_uncommitted_rows``, which the official SDK always
  sends) seals the current writer: it appends nothing new (409 STALE), its acknowledged appends still
  commit, so a reopen retried once they did is not held off by a writer that keeps appending;
- an empty offset token (the SDK's ``endOffsetToken=`` when an append has none) is no token.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import pytest
import redis
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st

from bench.harness import unique
from floe.channels import ChannelError, ChannelStore, PipeRef, channel_state
from floe.keys import Keys
from floe.records import LoadOutcome, LoadTask, PipeResults, RowAppend
from floe.streaming.protocol import Code, ContinuationToken
from pipeline import job
from pipeline.registrar import ChannelRegistrar, Outcome
from tests.conftest import reference_model_examples

pytestmark = pytest.mark.integration

CHANNELS = ("c0", "c1")
REF = PipeRef("streaming-pipe", "D", "S", "P")
QUERY_ID = "q"
MAX_PENDING_BYTES = 1 << 20
"""Far above what a sequence appends: the FULL refusal is not part of the model."""

Mode = Literal["settle", "crash", "crash_after_settle"]
Answer = tuple[Any, ...]
"""What a step came to, as the model and the test compare it: ('OK', ...) or ('ERR', code)."""
Writer = tuple[str, int, int]
"""A channel writer in the model: (channel, generation, client sequencer)."""
Entries = list[tuple[bytes, dict[bytes, bytes]]]

# ------------------------------------------------------------------------------------------------
# Steps


@dataclass(frozen=True)
class Open:
    """Open a channel, or reopen it (a new writer, which fences the old one)."""

    channel: str
    fail_on_uncommitted: bool = False


@dataclass(frozen=True)
class Append:
    """The channel's current writer appends ``rows`` new rows, with an end offset token or without."""

    channel: str
    rows: int = 1
    with_token: bool = True
    empty: bool = False
    """Without a token, send it as the SDK does: an empty string."""


@dataclass(frozen=True)
class StaleAppend:
    """An append of one new row with one of the channel's earlier tokens (never its valid one),
    picked by index: an old writer's, a dropped incarnation's or a used one."""

    channel: str
    pick: int = 0


@dataclass(frozen=True)
class Retry:
    """An acknowledged append of the channel sent again with its requestId, token and rows; ``pick``
    counts back from the last one."""

    channel: str
    pick: int = 0


@dataclass(frozen=True)
class Drop:
    """Drop the channel."""

    channel: str
    fail_on_uncommitted: bool = False


@dataclass(frozen=True)
class Batch:
    """The pipeline's next micro-batch of up to ``size`` appends (the replay of the last one first, if
    it did not finish); ``mode`` says whether the driver dies before the settle, after it, or not."""

    size: int = 4
    mode: Mode = "settle"


Op = Open | Append | StaleAppend | Retry | Drop | Batch

# ------------------------------------------------------------------------------------------------
# The reference model


@dataclass
class Ack:
    """An acknowledged append."""

    channel: str
    generation: int
    cseq: int
    rseq: int
    ids: list[str]
    body: bytes
    end: str | None
    planned: bool = False
    superseded: bool = False
    """A reopen or a drop of its channel came after it was acknowledged."""
    fate: Literal["waiting", "committed", "fenced"] = "waiting"

    @property
    def writer(self) -> Writer:
        """The writer that appended it."""
        return (self.channel, self.generation, self.cseq)


@dataclass
class Chan:
    """A channel that exists; ``generation`` stands for its incarnation (new on every create)."""

    generation: int
    cseq: int = 0
    rseq: int = 0
    last_request: str = ""
    token: str | None = None
    rows_inserted: int = 0
    sealed: bool = False
    """An open with fail_on_uncommitted was refused since the current writer's open."""


@dataclass
class Model:
    """The rules, in plain Python: what each step answers and what is committed."""

    channels: dict[str, Chan | None] = field(default_factory=dict)
    acks: list[Ack] = field(default_factory=list)
    """Every acknowledged append, in the order acknowledged (the rows stream's order)."""
    generations: int = 0

    def pending(self, name: str) -> list[Ack]:
        """The current writer's appends not settled yet (what fail_on_uncommitted looks at)."""
        ch = self.channels.get(name)
        if ch is None:
            return []
        return [a for a in self.acks if a.fate == "waiting" and a.writer == (name, ch.generation, ch.cseq)]

    def _supersede(self, name: str) -> None:
        for a in self.acks:
            if a.channel == name and a.fate == "waiting":
                a.superseded = True

    def open(self, name: str, fail_on_uncommitted: bool) -> tuple[Answer, bool]:
        """The answer (generation, client and row sequencer), and whether a new incarnation began."""
        ch = self.channels.get(name)
        created = ch is None
        if ch is None:
            self.generations += 1
            ch = self.channels[name] = Chan(self.generations)
        elif fail_on_uncommitted and self.pending(name):
            ch.sealed = True
            return ("ERR", Code.CHANNEL_HAS_UNCOMMITTED_DATA), False
        else:
            self._supersede(name)
        ch.cseq += 1
        ch.last_request = ""
        ch.sealed = False
        return ("OK", ch.generation, ch.cseq, ch.rseq), created

    def drop(self, name: str, fail_on_uncommitted: bool) -> Answer:
        """('OK', whether there was a channel) or a refusal."""
        if self.channels.get(name) is None:
            return ("OK", False)
        if fail_on_uncommitted and self.pending(name):
            return ("ERR", Code.CHANNEL_HAS_UNCOMMITTED_DATA)
        self._supersede(name)
        self.channels[name] = None
        return ("OK", True)

    def append(
        self,
        name: str,
        token: tuple[int, int, int],
        request: str,
        ids: list[str],
        body: bytes,
        end: str | None,
    ) -> Answer:
        """('OK', next row sequencer) or a refusal, for a token given as (generation, cseq, rseq)."""
        generation, cseq, rseq = token
        ch = self.channels.get(name)
        if ch is None:
            return ("ERR", Code.CHANNEL_DOES_NOT_EXIST)
        if generation != ch.generation:
            return ("ERR", Code.CHANNEL_MUST_BE_REOPENED)
        if cseq != ch.cseq:
            return ("ERR", Code.STALE_CONTINUATION_TOKEN_SEQUENCER)
        if request == ch.last_request and rseq == ch.rseq - 1:
            return ("OK", ch.rseq)  # a retry: the same answer, nothing stored
        if ch.sealed:
            return ("ERR", Code.STALE_CONTINUATION_TOKEN_SEQUENCER)
        if rseq != ch.rseq:
            return ("ERR", Code.INVALID_ROW_SEQUENCER)
        self.acks.append(Ack(name, generation, cseq, rseq, ids, body, end))
        ch.rseq += 1
        ch.last_request = request
        return ("OK", ch.rseq)

    def plan(self, size: int) -> list[Ack]:
        """The next micro-batch: the first ``size`` appends not planned before, in stream order."""
        todo = [a for a in self.acks if a.fate == "waiting" and not a.planned][:size]
        for a in todo:
            a.planned = True
        return todo

    def settle(self, acks: list[Ack]) -> set[Writer]:
        """Settle a batch's appends: each commits unless fenced; the writers fenced."""
        fenced: set[Writer] = set()
        for a in acks:
            if a.superseded:
                a.fate = "fenced"
                fenced.add(a.writer)
                continue
            a.fate = "committed"
            ch = self.channels[a.channel]
            assert ch is not None and ch.generation == a.generation, "the model: a live writer's channel"
            ch.rows_inserted += len(a.ids)
            if a.end is not None:
                ch.token = a.end
        return fenced


# ------------------------------------------------------------------------------------------------
# Floe and a simulated pipeline, driven in step with the model


@dataclass(frozen=True)
class Sent:
    """An acknowledged append as its writer keeps it, to send it again."""

    request_id: str
    token: ContinuationToken
    body: bytes
    count: int
    end: str | None
    answer: ContinuationToken


@dataclass
class Client:
    """One writer of a channel (what an open returned), with its latest token."""

    channel: str
    token: ContinuationToken
    sent: list[Sent] = field(default_factory=list)


@dataclass
class Planned:
    """A micro-batch as Spark's offset log holds it: its id and the stream range (start, end]."""

    batch_id: int
    start: str
    end: str
    acks: list[Ack]
    settled: bool = False


class World:
    """The real channel store, settle path and Redis, and the model, stepped together."""

    def __init__(self, client: redis.Redis[bytes], keys: Keys) -> None:
        self.r = client
        self.keys = keys
        self.store = ChannelStore(client, keys, MAX_PENDING_BYTES)
        self.registrar = ChannelRegistrar(client, keys, 3600)
        self.model = Model()
        self.clients: list[Client] = []
        self.current: dict[str, Client | None] = {}
        self.tokens: dict[str, list[ContinuationToken]] = {name: [] for name in CHANNELS}
        """Every token each channel's writers were given, for stale appends."""
        self.incarnation: dict[tuple[str, int], str] = {}
        """The real incarnation of each model generation."""
        self.generation: dict[tuple[str, str], int] = {}
        self.clock = 1_000_000
        self.serial = 0
        self.last_end = "0-0"
        self.next_batch = 0
        self.replay: Planned | None = None

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def fresh(self, what: str) -> str:
        self.serial += 1
        return f"{what}{self.serial}"

    def apply(self, op: Op) -> str:
        """Run one step on both sides; assert they agree; what it came to."""
        if isinstance(op, Open):
            return self.open(op)
        if isinstance(op, Append):
            return self.append(op)
        if isinstance(op, StaleAppend):
            return self.stale(op)
        if isinstance(op, Retry):
            return self.retry(op)
        if isinstance(op, Drop):
            return self.drop(op)
        return self.batch(op)

    # -- channel steps ---------------------------------------------------------------------------

    def open(self, op: Open) -> str:
        want, created = self.model.open(op.channel, op.fail_on_uncommitted)
        try:
            opened = self.store.open(REF, op.channel, self.tick(), None, op.fail_on_uncommitted)
        except ChannelError as exc:
            got: Answer = ("ERR", exc.code)
        else:
            t = opened.token
            if created and want[0] == "OK":
                assert (op.channel, t.incarnation) not in self.generation, "a new incarnation was expected"
                self.incarnation[(op.channel, want[1])] = t.incarnation
                self.generation[(op.channel, t.incarnation)] = want[1]
            got = (
                "OK",
                self.generation.get((op.channel, t.incarnation)),
                t.client_sequencer,
                t.row_sequencer,
            )
            w = Client(op.channel, t)
            self.clients.append(w)
            self.current[op.channel] = w
            self.tokens[op.channel].append(t)
        assert got == want, f"{op}: Floe {got}, model {want}"
        event(f"open: {'new incarnation' if created else got[0] if got[0] == 'OK' else got[1]}")
        return str(got)

    def drop(self, op: Drop) -> str:
        want = self.model.drop(op.channel, op.fail_on_uncommitted)
        try:
            got: Answer = ("OK", self.store.drop(REF, op.channel, op.fail_on_uncommitted) is not None)
        except ChannelError as exc:
            got = ("ERR", exc.code)
        assert got == want, f"{op}: Floe {got}, model {want}"
        if got == ("OK", True):
            self.current[op.channel] = None
        event(f"drop: {got[1]}")
        return str(got)

    def rows(self, n: int) -> tuple[list[str], bytes]:
        ids = [self.fresh("row") for _ in range(n)]
        return ids, b"".join(json.dumps({"id": i}).encode() + b"\n" for i in ids)

    def send(
        self, channel: str, token: ContinuationToken, request: str, body: bytes, count: int, end: str | None
    ) -> Answer:
        """The real append: ('OK', next row sequencer) or ('ERR', code)."""
        try:
            nxt = self.store.append(REF, channel, token, request, body, count, None, end, self.tick())
        except ChannelError as exc:
            return ("ERR", exc.code)
        assert (nxt.incarnation, nxt.client_sequencer) == (token.incarnation, token.client_sequencer)
        return ("OK", nxt.row_sequencer)

    def expect(
        self,
        channel: str,
        token: ContinuationToken,
        request: str,
        ids: list[str],
        body: bytes,
        end: str | None,
    ) -> Answer:
        """The model's answer to an append with ``token``."""
        generation = self.generation[(channel, token.incarnation)]
        triple = (generation, token.client_sequencer, token.row_sequencer)
        return self.model.append(channel, triple, request, ids, body, end or None)

    def append(self, op: Append) -> str:
        w = self.current.get(op.channel)
        if w is None:
            return "skipped: the channel has no writer"
        request = self.fresh("req")
        ids, body = self.rows(op.rows)
        end = self.fresh("offset") if op.with_token else "" if op.empty else None
        want = self.expect(op.channel, w.token, request, ids, body, end)
        got = self.send(op.channel, w.token, request, body, op.rows, end)
        assert got == want, f"{op}: Floe {got}, model {want}"
        if got[0] == "OK":
            answer = ContinuationToken(w.token.incarnation, w.token.client_sequencer, got[1])
            w.sent.append(Sent(request, w.token, body, op.rows, end, answer))
            w.token = answer
            self.tokens[op.channel].append(answer)
        return f"{got} rows {ids}"

    def stale(self, op: StaleAppend) -> str:
        w = self.current.get(op.channel)
        pool = [t for t in self.tokens[op.channel] if w is None or t != w.token]
        if not pool:
            return "skipped: no earlier token"
        token = pool[op.pick % len(pool)]
        request = self.fresh("req")
        ids, body = self.rows(1)
        want = self.expect(op.channel, token, request, ids, body, None)
        assert want[0] == "ERR", "the model: only the current writer's latest token is valid"
        got = self.send(op.channel, token, request, body, 1, None)
        assert got == want, f"{op} with {token}: Floe {got}, model {want}"
        event(f"stale append: {got[1]}")
        return f"{token.encode()}: {got}"

    def retry(self, op: Retry) -> str:
        sent = [s for w in self.clients if w.channel == op.channel for s in w.sent]
        if not sent:
            return "skipped: nothing sent"
        s = sent[-1 - op.pick % len(sent)]
        ids = [json.loads(line)["id"] for line in s.body.splitlines()]
        want = self.expect(op.channel, s.token, s.request_id, ids, s.body, s.end)
        got = self.send(op.channel, s.token, s.request_id, s.body, s.count, s.end)
        assert got == want, f"{op} of {s.request_id}: Floe {got}, model {want}"
        if got[0] == "OK":
            assert got[1] == s.answer.row_sequencer, "a retry answers the first answer's token"
        event(f"retry: {got[0] if got[0] == 'OK' else got[1]}")
        return f"{s.request_id} again: {got}"

    # -- the pipeline ----------------------------------------------------------------------------

    def blob_name(self, batch_id: int, channel: str, incarnation: str, cseq: int) -> str:
        """Deterministic per (batch, channel writer), as the loader's names are: a replay rewrites it."""
        return f"blob-{batch_id}-{channel}-{incarnation}-{cseq}"

    def ident(self, a: RowAppend) -> tuple[str, str, int, int, int, str | None]:
        return (a.channel, a.incarnation, a.client_sequencer, a.row_sequencer, a.rows, a.end_offset_token)

    def ack_ident(self, a: Ack) -> tuple[str, str, int, int, int, str | None]:
        return (a.channel, self.incarnation[(a.channel, a.generation)], a.cseq, a.rseq, len(a.ids), a.end)

    def read(self, start: str, end: str, count: int | None = None) -> list[RowAppend]:
        entries = cast(
            Entries, self.r.xrange(self.keys.rows(REF.pipe_id), min=f"({start}", max=end, count=count)
        )
        return [RowAppend.from_stream(sid, fields) for sid, fields in entries]

    def batch(self, op: Batch) -> str:
        if self.replay is not None:
            planned, self.replay = self.replay, None
            return self.run(planned, op.mode, "replay of ")
        want = self.model.plan(op.size)
        appends = self.read(self.last_end, "+", op.size)
        assert [self.ident(a) for a in appends] == [self.ack_ident(a) for a in want], "the planned range"
        if not appends:
            return "nothing to plan"
        planned = Planned(self.next_batch, self.last_end, str(appends[-1].stream_id), want)
        self.next_batch += 1
        self.last_end = planned.end
        return self.run(planned, op.mode, "")

    def execute(self, batch_id: int, tasks: list[LoadTask]) -> PipeResults:
        """The executors: each writer's appends in row sequencer order, and one blob per writer."""
        res = PipeResults()
        by_writer: dict[tuple[str, str, int], list[tuple[LoadTask, RowAppend]]] = {}
        for task in tasks:
            a = task.row_append
            assert a is not None
            by_writer.setdefault((a.channel, a.incarnation, a.client_sequencer), []).append((task, a))
        for writer, items in sorted(by_writer.items()):
            items.sort(key=lambda ta: ta[1].row_sequencer)
            stored = self.r.mget([a.data_key for _, a in items])
            files: list[str] = []
            ids: list[str] = []
            for (task, _), data in zip(items, stored, strict=True):
                if data is None:
                    gone = LoadOutcome.stopped(task.path, "the rows are gone", system=False)
                    res.outcomes.append(gone.of_task(task))
                    continue
                rows = [json.loads(line)["id"] for line in data.splitlines() if line]
                loaded = LoadOutcome(task.path, "LOADED", rows_parsed=len(rows), rows_loaded=len(rows))
                res.outcomes.append(loaded.of_task(task))
                files.append(task.path)
                ids += rows
            if files:
                res.blobs.append({"name": self.blob_name(batch_id, *writer), "files": files, "rows": ids})
        return res

    def run(self, planned: Planned, mode: Mode, what: str) -> str:
        appends = self.read(planned.start, planned.end)
        # A settled batch's entries are gone, so its replay reads nothing; an unsettled one's are all there.
        expected = [] if planned.settled else [self.ack_ident(a) for a in planned.acks]
        assert [self.ident(a) for a in appends] == expected, f"batch {planned.batch_id} reads its range"
        tasks = [LoadTask.appended(REF.pipe_id, a) for a in appends]
        results = self.execute(planned.batch_id, tasks)
        now = self.tick()
        # The driver collects the tasks in no particular order: the settles must not depend on it.
        settles = job.channel_settles(results, tasks[::-1], now)
        label = f"{what}batch {planned.batch_id} ({len(tasks)} appends)"
        event(f"batch: {what}{mode}")
        if mode == "crash":
            self.replay = planned  # Spark replays the logged range under the same batch id
            return f"{label}: the driver died before its settle"
        settled = self.registrar.settle(REF.pipe_id, settles, QUERY_ID, planned.batch_id, now)
        if planned.settled:
            assert settled.outcome is Outcome.REPLAYED and not settled.fenced_blobs, f"{label}: {settled}"
        else:
            fenced = self.model.settle(planned.acks)
            want = sorted(
                self.blob_name(planned.batch_id, c, self.incarnation[(c, g)], s) for c, g, s in fenced
            )
            assert settled.outcome is Outcome.COMMITTED, f"{label}: {settled}"
            assert sorted(settled.fenced_blobs) == want, (
                f"{label}: fenced {settled.fenced_blobs}, model {want}"
            )
            planned.settled = True
            event("batch: some writer fenced" if fenced else "batch: nothing fenced")
        if mode == "crash_after_settle":
            self.replay = planned
            return f"{label}: {settled.outcome.name}, then the driver died before Spark's commit log"
        return f"{label}: {settled.outcome.name}, fenced {settled.fenced_blobs}"

    # -- the invariant ---------------------------------------------------------------------------

    def check(self) -> None:
        """Floe's state is the model's (see the module docstring)."""
        m = self.model
        blobs = self.r.hgetall(self.keys.blobs(REF.pipe_id))
        committed = sorted(i for v in blobs.values() for i in json.loads(v)["rows"])
        assert committed == sorted(i for a in m.acks if a.fate == "committed" for i in a.ids), "manifest"
        waiting = [a for a in m.acks if a.fate == "waiting"]
        stream = self.read("0-0", "+")
        assert [self.ident(a) for a in stream] == [self.ack_ident(a) for a in waiting], "rows stream"
        # Every append's own key: its rows while it waits, nothing once its batch settled.
        if m.acks:
            stored = self.r.mget([self.data_key(a) for a in m.acks])
            for a, data in zip(m.acks, stored, strict=True):
                want = a.body if a.fate == "waiting" else None
                assert data == want, f"row data of {a.channel}/{a.rseq} ({a.fate}): {data!r}"
        self.check_channels()

    def data_key(self, a: Ack) -> str:
        incarnation = self.incarnation[(a.channel, a.generation)]
        return self.keys.row_data(REF.pipe_id, a.channel, incarnation, a.cseq, a.rseq)

    def check_no_stray_rows(self) -> None:
        """No row data key but those of the appends waiting (a refused append stored none): one SCAN
        of the whole keyspace, so once per sequence, not after every step."""
        pattern = self.keys.row_data(REF.pipe_id, "", "", 0, 0).split(":rowdata:")[0] + ":rowdata:*"
        stored = {k.decode() for k in self.r.scan_iter(match=pattern, count=1000)}
        assert stored == {self.data_key(a) for a in self.model.acks if a.fate == "waiting"}, "row data keys"

    def check_channels(self) -> None:
        m = self.model
        statuses = self.store.statuses(REF, list(CHANNELS))
        assert set(statuses) == {n for n, c in m.channels.items() if c is not None}, "channels"
        for name, status in statuses.items():
            ch = m.channels[name]
            assert ch is not None
            pending = m.pending(name)
            assert status.last_committed_offset_token == ch.token, f"{name}: committed offset token"
            assert (status.rows_inserted, status.rows_parsed, status.rows_error_count) == (
                ch.rows_inserted,
                ch.rows_inserted,
                0,
            ), f"{name}: counters"
            raw = channel_state(self.r, self.keys, REF.pipe_id, name)
            got = (raw["incarnation"], int(raw["cseq"]), int(raw["rseq"]))
            assert got == (self.incarnation[(name, ch.generation)], ch.cseq, ch.rseq), f"{name}: sequencers"
            assert (int(raw["pending"]), int(raw["pending_bytes"])) == (
                len(pending),
                sum(len(a.body) for a in pending),
            ), f"{name}: pending appends"


# ------------------------------------------------------------------------------------------------
# The test

channels = st.sampled_from(CHANNELS)
WEIGHTED: list[tuple[int, st.SearchStrategy[Op]]] = [
    (2, st.builds(Open, channels, st.booleans())),
    (
        5,
        st.builds(
            Append, channels, st.integers(1, 3), st.sampled_from([True, True, True, False]), st.booleans()
        ),
    ),
    (2, st.builds(StaleAppend, channels, st.integers(0, 20))),
    (1, st.builds(Retry, channels, st.integers(0, 2))),
    (1, st.builds(Drop, channels, st.booleans())),
    (
        3,
        st.builds(
            Batch, st.integers(1, 4), st.sampled_from(["settle", "settle", "crash", "crash_after_settle"])
        ),
    ),
]
"""Each step with its weight: appends and batches are the common steps; a drop ends a writer."""
# sampled_from keeps the repeats (one_of would merge equal strategies into one branch).
steps: st.SearchStrategy[Op] = st.sampled_from([s for weight, s in WEIGHTED for _ in range(weight)]).flatmap(
    lambda s: s
)

START: list[Op] = [Open("c0"), Open("c1")]
"""Every sequence starts with both channels open (a step on a channel without a writer is skipped)."""

REOPEN_IN_A_REPLAYED_BATCH: list[Op] = [
    Append("c0", 2),
    Append("c0", 1),
    Batch(4, "crash"),
    Open("c0"),  # the old writer's two appends, planned and loaded, must not commit at the replay
    Append("c0", 1),
    StaleAppend("c0", 1),
    Batch(4, "settle"),
    Batch(4, "settle"),
]
DROP_AND_CREATE_AGAIN: list[Op] = [
    Append("c0", 1),
    Drop("c0"),
    Open("c0"),  # a new incarnation: its row sequencer starts again at 0
    Append("c0", 1),
    Batch(4, "settle"),  # both incarnations' appends in one batch
]
REPLAY_AFTER_SETTLE: list[Op] = [
    Append("c0", 1),
    Append("c1", 2),
    Batch(4, "crash_after_settle"),
    Open("c1"),
    Append("c1", 1),
    Retry("c0"),
    Batch(2, "settle"),  # the replay: a no-op
    Batch(2, "settle"),
]
UNCOMMITTED: list[Op] = [
    Append("c0", 1),
    Append("c0", 1, with_token=False),
    Open("c0", fail_on_uncommitted=True),
    Drop("c0", fail_on_uncommitted=True),
    Batch(1, "settle"),
    Open("c0", fail_on_uncommitted=True),
    Batch(1, "settle"),
    Drop("c0", fail_on_uncommitted=True),
]

SEALED_BY_A_REFUSED_REOPEN: list[Op] = [
    Append("c0", 1),
    Append("c0", 2, with_token=False, empty=True),
    Open("c0", fail_on_uncommitted=True),  # refused: the writer is sealed
    Append("c0", 1),  # refused
    Retry("c0"),  # its last acknowledged append is still answered
    StaleAppend("c0", 0),
    Batch(1, "settle"),
    Open("c0", fail_on_uncommitted=True),  # one append still waits
    Batch(4, "crash"),
    Batch(4, "settle"),  # the replay commits it
    Open("c0", fail_on_uncommitted=True),  # nothing waits: the new writer
    Append("c0", 1),
    Batch(4, "settle"),
]


@contextmanager
def fresh_world(client: redis.Redis[bytes]) -> Iterator[World]:
    """A world on a new key prefix (one per Hypothesis example); its keys are removed afterwards."""
    prefix = unique("t")
    try:
        yield World(client, Keys(prefix))
    finally:
        stale = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if stale:
            client.delete(*stale)


@settings(
    max_examples=reference_model_examples(dev=60, ci=500),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@example(ops=REOPEN_IN_A_REPLAYED_BATCH)
@example(ops=DROP_AND_CREATE_AGAIN)
@example(ops=REPLAY_AFTER_SETTLE)
@example(ops=UNCOMMITTED)
@example(ops=SEALED_BY_A_REFUSED_REOPEN)
@given(ops=st.lists(steps, min_size=8, max_size=30))
def test_random_channel_sequences_commit_exactly_once_and_fence(
    redis_client: redis.Redis[bytes], ops: list[Op]
) -> None:
    """After every step (a difference can be masked by a later one, so not only at the end), its
    answer and Floe's state are the model's."""
    with fresh_world(redis_client) as world:
        for op in [*START, *ops]:
            note(f"{op} -> {world.apply(op)}")
            world.check()
        world.check_no_stray_rows()
