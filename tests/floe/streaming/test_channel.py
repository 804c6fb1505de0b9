"""Streaming channels against the fake v2 API: buffering, flushing (on lag, size and demand),
continuation-token chaining, offset tokens, retries, invalidation, ON_ERROR, thread safety and
throttling. Time is the fake clock's; waits are on conditions, never sleeps."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import pytest

from floe.streaming import protocol as wire
from floe.streaming.channel import StreamingIngestChannel
from floe.streaming.client import StreamingIngestClient
from floe.streaming.protocol import Code
from floe.streaming.transport import (
    ChannelClosedError,
    ChannelInvalidError,
    RowValidationError,
    StreamingTimeout,
    StreamingUnavailable,
)
from tests.floe.streaming.conftest import MakeClient
from tests.floe.streaming.test_transport import (
    FakeClock,
    FakeServer,
    error,
    random_rows,
    settle,
)

pytestmark = pytest.mark.unit


def _open(
    make_client: MakeClient, name: str = "ch", **props: Any
) -> tuple[StreamingIngestClient, StreamingIngestChannel]:
    client = make_client(**props)
    channel, _ = client.open_channel(name)
    return client, channel


# ------------------------------------------------------------------------------------------------
# Chaining and offset tokens


def test_each_append_carries_the_previous_answers_continuation_token(
    server: FakeServer, make_client: MakeClient
) -> None:
    _, ch = _open(make_client)
    for i in range(3):
        ch.append_row({"ID": i}, str(i))
        ch.wait_for_flush()
    tokens = [c.params[wire.CONTINUATION_TOKEN] for c in server.of("rows")]
    assert tokens == ["ch-g1-0", "ch-g1-1", "ch-g1-2"]
    assert len({c.params[wire.REQUEST_ID] for c in server.of("rows")}) == 3
    assert server.sent_rows("ch") == [{"ID": 0}, {"ID": 1}, {"ID": 2}]
    assert all(c.headers["Content-Encoding"] == "zstd" for c in server.of("rows"))


def test_merged_appends_send_the_first_start_and_last_end_offset_token(
    server: FakeServer, make_client: MakeClient
) -> None:
    _, ch = _open(make_client)
    ch.append_rows([{"ID": 1}, {"ID": 2}], "1", "2")
    ch.append_row({"ID": 3}, "3")
    ch.append_rows([{"ID": 4}])
    ch.wait_for_flush()
    (call,) = server.of("rows")
    assert (call.params[wire.START_OFFSET_TOKEN], call.params[wire.END_OFFSET_TOKEN]) == ("1", "3")
    assert call.rows() == [{"ID": 1}, {"ID": 2}, {"ID": 3}, {"ID": 4}]


def test_a_call_with_only_an_end_token_starts_at_it_and_none_are_sent_without_tokens(
    server: FakeServer, make_client: MakeClient
) -> None:
    _, ch = _open(make_client)
    ch.append_rows([{"ID": 1}], end_offset_token="7")
    ch.wait_for_flush()
    ch.append_rows([{"ID": 2}])
    ch.wait_for_flush()
    with_token, without = server.of("rows")
    assert (with_token.params[wire.START_OFFSET_TOKEN], with_token.params[wire.END_OFFSET_TOKEN]) == (
        "7",
        "7",
    )
    assert wire.START_OFFSET_TOKEN not in without.params and wire.END_OFFSET_TOKEN not in without.params


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_other_compressions(server: FakeServer, make_client: MakeClient, compression: str) -> None:
    _, ch = _open(make_client, compression=compression)
    ch.append_row({"ID": 1, "NAME": Decimal("1.50")})
    ch.wait_for_flush()
    (call,) = server.of("rows")
    assert call.headers.get("Content-Encoding") == (None if compression == "none" else compression)
    assert call.rows() == [{"ID": 1, "NAME": "1.50"}]  # serialized by serialize_row


# ------------------------------------------------------------------------------------------------
# When rows are sent


def test_rows_are_sent_once_max_client_lag_passed(
    server: FakeServer, clock: FakeClock, make_client: MakeClient
) -> None:
    client, ch = _open(make_client, max_client_lag=500)
    ch.append_row({"ID": 1}, "1")
    clock.advance(0.499)
    settle(client)
    assert server.of("rows") == []
    clock.advance(0.001)
    client._flusher.wake()
    server.wait_for(lambda: bool(server.of("rows")) and bool(server.channels["ch"].rows))
    assert server.sent_rows("ch") == [{"ID": 1}]


def test_a_full_append_is_sent_without_waiting_for_the_lag(
    server: FakeServer, make_client: MakeClient
) -> None:
    _, ch = _open(make_client, max_client_lag=600_000)
    rows = random_rows(40, 100_000)  # 4 MB: more than one append's budget
    ch.append_rows(rows, "a", "b")
    server.wait_for(lambda: server.channels["ch"].appends >= 1)
    first = server.of("rows")[0]
    assert len(first.body or b"") <= wire.MAX_BODY_BYTES
    assert first.rows() == rows[: len(first.rows())]


def test_large_appends_are_split_under_the_4mb_cap_and_sent_once_in_order(
    server: FakeServer, make_client: MakeClient
) -> None:
    _, ch = _open(make_client)
    batches = [random_rows(40, 100_000, tag=f"b{i}-") for i in range(3)]  # 12 MB of random text
    for i, rows in enumerate(batches):
        ch.append_rows(rows, f"s{i}", f"e{i}")
    ch.wait_for_flush()
    calls = server.of("rows")
    assert len(calls) >= 3
    assert all(len(c.body or b"") <= wire.MAX_BODY_BYTES for c in calls)
    assert server.sent_rows("ch") == [r for rows in batches for r in rows]
    assert [c.params.get(wire.END_OFFSET_TOKEN) for c in calls if wire.END_OFFSET_TOKEN in c.params][
        -1
    ] == "e2"


def test_flushes_of_one_channel_never_overlap(server: FakeServer, make_client: MakeClient) -> None:
    """A second flush request while an append is in flight waits for its continuation token."""
    gate, inside = threading.Event(), threading.Event()

    def hold_first(call: Any) -> None:
        if not inside.is_set():
            inside.set()
            assert gate.wait(30)

    server.on_rows = hold_first
    _, ch = _open(make_client)
    ch.append_row({"ID": 1})
    ch.initiate_flush()
    assert inside.wait(30)
    ch.append_row({"ID": 2})
    ch.initiate_flush()
    gate.set()
    ch.wait_for_flush()
    assert [c.params[wire.CONTINUATION_TOKEN] for c in server.of("rows")] == ["ch-g1-0", "ch-g1-1"]


# ------------------------------------------------------------------------------------------------
# Retries and failures


def test_a_retried_append_resends_the_same_request_id_token_and_body(
    server: FakeServer, clock: FakeClock, make_client: MakeClient
) -> None:
    _, ch = _open(make_client)
    server.fail(
        "rows",
        error(503, Code.UNAVAILABLE, "metadata store down", {"Retry-After": "3"}),
        error(429, Code.RATE_LIMITED, "over the channel's rate", {"Retry-After": "1.5"}),
    )
    ch.append_rows([{"ID": 1}], "1", "1")
    ch.wait_for_flush()
    first, second, third = server.of("rows")
    assert first.params == second.params == third.params
    assert first.body == second.body == third.body
    assert clock.sleeps == [3.0, 1.5]
    assert server.sent_rows("ch") == [{"ID": 1}]


def test_409_invalidates_the_channel(server: FakeServer, make_client: MakeClient) -> None:
    _, ch = _open(make_client)
    server.fail("rows", error(409, Code.STALE_CONTINUATION_TOKEN_SEQUENCER, "Channel sequencer is stale"))
    ch.append_row({"ID": 1})
    with pytest.raises(ChannelInvalidError, match="STALE_CONTINUATION_TOKEN_SEQUENCER") as info:
        ch.wait_for_flush()
    assert "reopen" in str(info.value) and "channel ch" in str(info.value)
    assert info.value.code == Code.STALE_CONTINUATION_TOKEN_SEQUENCER
    assert not ch.is_valid()
    with pytest.raises(ChannelInvalidError, match=r"STALE_CONTINUATION_TOKEN_SEQUENCER.*reopen"):
        ch.append_row({"ID": 2})
    for call in (ch.wait_for_flush, ch.initiate_flush, ch.get_latest_committed_offset_token):
        with pytest.raises(ChannelInvalidError, match="STALE_CONTINUATION_TOKEN_SEQUENCER"):
            call()
    ch.close()  # quietly: the loss was reported
    assert ch.is_closed


def test_retries_that_run_out_invalidate_the_channel_and_free_its_bytes(
    server: FakeServer, make_client: MakeClient
) -> None:
    client, ch = _open(make_client, max_retries=2)
    server.fail("rows", *[error(503, Code.UNAVAILABLE, "down")] * 3)
    ch.append_rows([{"ID": 1}, {"ID": 2}])
    with pytest.raises(ChannelInvalidError, match="after 3 attempts") as info:
        ch.wait_for_flush()
    assert isinstance(info.value.__cause__, StreamingUnavailable)
    assert client.buffered_bytes == 0
    # The client-wide flush leaves the channel out: its loss was reported.
    client.wait_for_flush()


def test_reopening_a_channel_in_the_same_client_invalidates_the_old_object(
    server: FakeServer, make_client: MakeClient
) -> None:
    client, old = _open(make_client)
    old.append_row({"ID": 1})
    new, _ = client.open_channel("ch")
    assert not old.is_valid() and old.is_closed
    with pytest.raises(ChannelClosedError, match="reopened"):
        old.append_row({"ID": 2})
    new.append_row({"ID": 3})
    new.wait_for_flush()
    assert server.sent_rows("ch") == [{"ID": 3}]
    assert server.of("rows")[0].params[wire.CONTINUATION_TOKEN] == "ch-g2-0"


# ------------------------------------------------------------------------------------------------
# ON_ERROR


def test_abort_raises_on_the_first_error_and_buffers_nothing_of_the_batch(
    server: FakeServer, make_client: MakeClient
) -> None:
    client = make_client()
    ch, _ = client.open_channel("ch", on_error="ABORT")
    with pytest.raises(RowValidationError, match="ABORT: row 1, column ID") as info:
        ch.append_rows([{"ID": 1}, {"ID": "not a number"}, {"ID": None}], "1", "3")
    assert (info.value.row_index, info.value.column) == (1, "ID")
    assert client.buffered_bytes == 0
    ch.append_row({"ID": 4}, "4")
    ch.wait_for_flush()
    assert server.sent_rows("ch") == [{"ID": 4}]


def test_skip_batch_returns_every_error_and_buffers_nothing_of_the_batch(
    server: FakeServer, make_client: MakeClient
) -> None:
    client = make_client()
    ch, _ = client.open_channel("ch", on_error="skip_batch")
    response = ch.append_rows([{"ID": "x"}, {"ID": 2}, {"NAME": "no id"}, {"ID": 3, "EXTRA": 1}])
    assert response.has_errors()
    assert [e.row_index for e in response.errors] == [0, 2, 3]
    assert response.error_row_count == 3
    assert client.buffered_bytes == 0
    assert not ch.append_rows([{"ID": 5}]).has_errors()
    ch.wait_for_flush()
    assert server.sent_rows("ch") == [{"ID": 5}]


def test_continue_sends_invalid_rows_and_reports_only_unsendable_ones(
    server: FakeServer, make_client: MakeClient
) -> None:
    _, ch = _open(make_client)
    response = ch.append_rows([{"ID": "not a number"}, {"ID": object()}, "not a row", {"ID": 2}])  # type: ignore[list-item]
    assert [e.row_index for e in response.errors] == [1, 2]
    ch.wait_for_flush()
    assert server.sent_rows("ch") == [{"ID": "not a number"}, {"ID": 2}]


def test_a_row_too_big_for_one_append_is_refused(server: FakeServer, make_client: MakeClient) -> None:
    client = make_client()
    ch, _ = client.open_channel("ch", on_error="ABORT")
    (big,) = random_rows(1, 6_000_000)  # about 4.5 MB once compressed
    with pytest.raises(RowValidationError, match="must fit one"):
        ch.append_rows([{"ID": 1, "NAME": big["NAME"]}])
    assert client.buffered_bytes == 0


# ------------------------------------------------------------------------------------------------
# Threads and memory


def test_many_threads_appending_send_every_row_once_in_per_thread_order(
    server: FakeServer, make_client: MakeClient
) -> None:
    client = make_client(flush_threads=3)
    channels = [client.open_channel(f"ch{i}")[0] for i in range(2)]
    threads_per_channel, per_thread = 4, 300
    start = threading.Barrier(threads_per_channel * len(channels))

    def append(ch: StreamingIngestChannel, t: int) -> None:
        start.wait()
        for i in range(per_thread):
            ch.append_row({"ID": i, "NAME": f"t{t}"}, f"{t}:{i}")
            if i % 25 == 0:
                ch.initiate_flush()
            if i == per_thread // 2:
                ch.wait_for_flush()  # sends while the other threads append: at least two appends

    threads = [
        threading.Thread(target=append, args=(ch, t)) for ch in channels for t in range(threads_per_channel)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    client.wait_for_flush()
    for ch in channels:
        rows = server.sent_rows(ch.channel_name)
        assert len(rows) == threads_per_channel * per_thread
        for t in range(threads_per_channel):
            assert [r["ID"] for r in rows if r["NAME"] == f"t{t}"] == list(range(per_thread))
    for ch in channels:
        assert sum(1 for c in server.of("rows") if f"/channels/{ch.channel_name}/" in c.path) >= 2
    assert client.buffered_bytes == 0


def test_appends_block_while_the_buffer_is_full_and_resume_when_it_drains(
    server: FakeServer, make_client: MakeClient
) -> None:
    gate = threading.Event()
    server.on_rows = lambda call: assert_set(gate)
    client, ch = _open(make_client, max_buffer_bytes=1000, max_client_lag=600_000)
    ch.append_rows([{"NAME": "x" * 600}])
    ch.append_rows([{"NAME": "y" * 600}])  # over the bound now: the scheduler sends at once
    server.wait_for(lambda: bool(server.of("rows")))  # and the sender is held at the gate
    done = threading.Event()

    def third() -> None:
        ch.append_rows([{"NAME": "z"}])
        done.set()

    thread = threading.Thread(target=third)
    thread.start()
    f = client._flusher
    with f.cond:
        assert f.cond.wait_for(lambda: f.throttled == 1, 30)
    assert not done.is_set()
    gate.set()
    assert done.wait(30)
    thread.join(30)
    ch.wait_for_flush()
    assert [r["NAME"][0] for r in server.sent_rows("ch")] == ["x", "y", "z"]
    assert client.buffered_bytes == 0


def assert_set(event: threading.Event) -> None:
    """Hold the caller until the test opens the gate (bounded, so a broken test cannot hang)."""
    assert event.wait(30)


def test_a_blocked_append_fails_when_the_client_closes(server: FakeServer, make_client: MakeClient) -> None:
    gate = threading.Event()
    server.on_rows = lambda call: assert_set(gate)
    client, ch = _open(make_client, max_buffer_bytes=100)
    ch.append_rows([{"NAME": "x" * 200}])
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            ch.append_rows([{"NAME": "y"}])
        except ChannelClosedError as exc:
            errors.append(exc)

    thread = threading.Thread(target=blocked)
    thread.start()
    f = client._flusher
    with f.cond:
        assert f.cond.wait_for(lambda: f.throttled == 1, 30)
    client.close(wait_for_flush=False)
    gate.set()
    thread.join(30)
    assert len(errors) == 1 and "client was closed" in str(errors[0])


# ------------------------------------------------------------------------------------------------
# Status, commit, close


def test_wait_for_commit_polls_until_the_token_checker_agrees(
    server: FakeServer, clock: FakeClock, make_client: MakeClient
) -> None:
    server.commit_after_polls = 3
    _, ch = _open(make_client, commit_poll_interval_ms=250)
    ch.append_rows([{"ID": 1}], "1", "1")
    ch.wait_for_commit(lambda token: token == "1", timeout_seconds=10)
    assert ch.get_latest_committed_offset_token() == "1"
    assert clock.sleeps == [0.25, 0.25, 0.25]


def test_wait_for_commit_times_out(server: FakeServer, clock: FakeClock, make_client: MakeClient) -> None:
    server.commit_after_polls = 10**9
    _, ch = _open(make_client)
    ch.append_rows([{"ID": 1}], "1", "1")
    with pytest.raises(StreamingTimeout, match="latest committed offset token is None"):
        ch.wait_for_commit(lambda token: token == "1", timeout_seconds=1)
    assert sum(clock.sleeps) == pytest.approx(1.0)


def test_wait_for_commit_raises_when_the_server_reports_the_channel_failed(
    server: FakeServer, make_client: MakeClient
) -> None:
    _, ch = _open(make_client)
    server.channels["ch"].status_code = Code.CHANNEL_MUST_BE_REOPENED
    server.channels["ch"].last_error_message = "table replaced"
    with pytest.raises(ChannelInvalidError, match=r"ERR_CHANNEL_MUST_BE_REOPENED \(table replaced\).*reopen"):
        ch.wait_for_commit(lambda token: True)
    assert not ch.is_valid()


def test_wait_for_flush_times_out_on_the_clock(
    server: FakeServer, clock: FakeClock, make_client: MakeClient
) -> None:
    client, ch = _open(make_client)
    gate = threading.Event()

    def slow(call: Any) -> None:
        clock.advance(5)  # the append takes longer than the wait's timeout...
        client._flusher.wake()  # ...and the waiter looks at the clock again
        assert_set(gate)

    server.on_rows = slow
    ch.append_row({"ID": 1})
    try:
        with pytest.raises(StreamingTimeout, match="rows of channel\\(s\\) ch not yet sent"):
            ch.wait_for_flush(timeout_seconds=2)
    finally:
        gate.set()
    ch.wait_for_flush()
    assert server.sent_rows("ch") == [{"ID": 1}]


def test_close_flushes_drops_when_asked_and_refuses_later_appends(
    server: FakeServer, make_client: MakeClient
) -> None:
    _, ch = _open(make_client)
    ch.append_row({"ID": 1})
    ch.close(drop=True)
    (drop,) = server.of("drop")
    assert drop.params[wire.REQUEST_ID]
    assert [c.rows() for c in server.of("rows")] == [[{"ID": 1}]]
    assert ch.is_closed and "ch" not in server.channels
    with pytest.raises(ChannelClosedError, match="channel ch: the channel was closed"):
        ch.append_row({"ID": 2})
    ch.close()  # closing twice is harmless


def test_close_without_flush_drops_the_buffer(server: FakeServer, make_client: MakeClient) -> None:
    client, ch = _open(make_client)
    ch.append_row({"ID": 1})
    ch.close(wait_for_flush=False)
    assert client.buffered_bytes == 0
    client.wait_for_flush()
    assert server.of("rows") == []


def test_channel_names(make_client: MakeClient) -> None:
    _, ch = _open(make_client, name="part-0")
    assert ch.fully_qualified_channel_name == "DB.PUBLIC.EVENTS_PIPE.part-0"
    assert (ch.db_name, ch.schema_name, ch.pipe_name, ch.channel_name) == (
        "DB",
        "PUBLIC",
        "EVENTS_PIPE",
        "part-0",
    )
    assert ch.table_columns[0]["name"] == "ID"
    assert ch.on_error == "CONTINUE"
