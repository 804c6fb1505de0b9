"""The channel routes as the official ``snowpipe-streaming`` SDK (1.9.1) calls them, with the exact
request shapes its recording showed (docs/streaming-sdk-protocol.md): every open with
``fail_on_uncommitted_rows: true``, appends whose zstd NDJSON ends each call's rows with an empty line
and whose offset tokens are empty strings when none was given, the elastic channel (no tokens at all,
retries under the same ``requestId``), and the status fields the SDK reads. The pipeline's commit is
the job's and the registrar's own code, without Spark (tests/e2e/test_streaming_sdk.py runs the SDK
itself against the stack)."""

from __future__ import annotations

import time
import uuid
from typing import Any
from urllib.parse import quote

import pytest
import redis
import zstandard

from bench.harness import unique
from floe.channels import channel_state
from floe.keypair import new_private_key, public_key_body
from floe.keys import Keys
from floe.records import LoadOutcome, LoadTask, PipeResults
from floe.settings import Settings
from floe.streaming import protocol as wire
from pipeline.job import channel_settles
from pipeline.registrar import ChannelRegistrar, Outcome, Settled
from services.api import create_app
from tests.asgi import AppClient
from tests.services.test_snowpipe import bearer, token
from tests.services.test_streaming import Streams, assert_code, streams  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

SDK_STATUS_FIELDS = {
    "database_name",
    "schema_name",
    "pipe_name",
    "channel_name",
    "channel_status_code",
    "last_committed_offset_token",
    "created_on_ms",
    "rows_inserted",
    "rows_parsed",
    "rows_error_count",
    "last_error_offset_upper_bound",
    "last_error_message",
    "last_error_timestamp_ms",
    "snowflake_avg_processing_latency_ms",
}
"""SfChannelStatus, the struct the SDK reads a channel status into (14 fields)."""
SDK_HEADERS = {
    "User-Agent": "SnowpipeStreamingSDK/v1.9.1 (linux unix x86_64) PYTHON/3.11.7",
    "Accept": "application/json",
    "Accept-Charset": "UTF-8",
}


def headers(s: Streams, user: str) -> dict[str, str]:
    """The SDK's headers with the user's key-pair JWT (the scoped token is another part's)."""
    return {
        **SDK_HEADERS,
        **bearer(token(user, s.keys[user])),
        "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT",
    }


def sdk_open(s: Streams, user: str, channel: str, offset_token: str | None = None, pipe: str = "") -> Any:
    """PUT as the SDK sends it: ``fail_on_uncommitted_rows`` is always true."""
    body = '{"fail_on_uncommitted_rows":true}'
    if offset_token is not None:
        body = f'{{"offset_token":"{offset_token}","fail_on_uncommitted_rows":true}}'
    return s.client.put(
        wire.channel_path("floe", "public", pipe or s.pipe, channel)
        + f"?requestId={uuid.uuid4()}&retryCount=0",
        content=body,
        headers={**headers(s, user), "Content-Type": "application/json"},
    )


def sdk_body(*calls: list[str]) -> bytes:
    """The NDJSON of a flush: each append_row(s) call's rows, then one more newline."""
    return b"".join("".join(row + "\n" for row in rows).encode() + b"\n" for rows in calls)


def sdk_append(
    s: Streams,
    user: str,
    channel: str,
    cont: str | None,
    body: bytes,
    *,
    start: str = "",
    end: str = "",
    request_id: str | None = None,
    retry: int = 0,
    pipe: str = "",
) -> Any:
    """POST .../rows as the SDK sends it: zstd, every query parameter in its order, a token not given
    as an empty string; an elastic append (``cont`` None) carries requestId and retryCount only."""
    query = f"requestId={request_id or uuid.uuid4()}&retryCount={retry}"
    if cont is not None:
        query = (
            f"startOffsetToken={quote(start, safe='')}&endOffsetToken={quote(end, safe='')}"
            f"&continuationToken={quote(cont, safe='')}&" + query
        )
    return s.client.post(
        wire.rows_path("floe", "public", pipe or s.pipe, channel) + "?" + query,
        content=zstandard.ZstdCompressor().compress(body),
        headers={
            **headers(s, user),
            "Content-Type": "application/x-ndjson",
            "Content-Encoding": "zstd",
            "x-snowflake-uncompressed-content-length": str(len(body)),
            "x-snowflake-min-append-timestamp-ms": str(int(time.time() * 1000)),
        },
    )


def bulk(s: Streams, user: str, *names: str, pipe: str = "") -> dict[str, Any]:
    resp = s.client.post(
        wire.bulk_status_path("floe", "public", pipe or s.pipe) + f"?requestId={uuid.uuid4()}&retryCount=0",
        content='{"channel_names":[' + ",".join(f'"{n}"' for n in names) + "]}",
        headers={**headers(s, user), "Content-Type": "application/json"},
    )
    assert resp.status_code == 200, resp.text
    statuses: dict[str, Any] = resp.json()["channel_statuses"]
    return statuses


def commit(s: Streams, *, bad_rows: int = 0, pipe: str = "") -> Settled:
    """The pipeline's next micro-batch of every queued append, settled by the job's and the
    registrar's code (the rows' loading stands in for Spark's): ``bad_rows`` rows of the last
    append fail their conversion."""
    pipe_id = s.pipe_id(pipe or None)
    appends = s.queued(pipe or None)
    tasks = [LoadTask.appended(pipe_id, a) for a in appends]
    outcomes: list[LoadOutcome] = []
    writers: dict[tuple[str, str, int], list[str]] = {}
    for i, (task, a) in enumerate(zip(tasks, appends, strict=True)):
        errors = bad_rows if i == len(appends) - 1 else 0
        outcomes.append(
            LoadOutcome(
                task.path,
                "PARTIALLY_LOADED" if errors else "LOADED",
                a.rows,
                a.rows - errors,
                errors,
                first_error="Numeric value 'x' is not recognized" if errors else None,
                stream_id=task.stream_id,
            )
        )
        writers.setdefault((a.channel, a.incarnation, a.client_sequencer), []).append(task.path)
    blobs = [{"name": unique("blob-"), "files": files} for files in writers.values()]
    now = int(time.time() * 1000)
    settles = channel_settles(PipeResults(outcomes, blobs), tasks, now)
    registrar = ChannelRegistrar(s.redis, Keys(s.settings.redis.prefix), 3600)
    return registrar.settle(pipe_id, settles, unique("q"), 0, now)


@pytest.fixture
def sdk(streams: Streams) -> Streams:  # noqa: F811 (the fixture imported above)
    """An app with a table, a streaming pipe and its users (test_streaming's)."""
    return streams


def state(s: Streams, channel: str) -> dict[str, str]:
    return channel_state(s.redis, Keys(s.settings.redis.prefix), s.pipe_id(), channel)


# ------------------------------------------------------------------------------------------------
# Gap 11: empty lines; gap 12: empty offset tokens


def test_an_sdk_flush_with_its_empty_lines_is_taken(sdk: Streams) -> None:
    opened = sdk_open(sdk, "WRITER_U", "c1")
    assert opened.status_code == 200, opened.text
    cont = opened.json()["next_continuation_token"]
    body = sdk_body(['{"id":1,"kind":"a"}'], ['{"id":2}', '{"id":3}', '{"id":4}', '{"id":5}'])
    assert body == b'{"id":1,"kind":"a"}\n\n{"id":2}\n{"id":3}\n{"id":4}\n{"id":5}\n\n'
    appended = sdk_append(sdk, "WRITER_U", "c1", cont, body, start="1", end="5")
    assert appended.status_code == 200, appended.text
    assert isinstance(appended.json()["next_continuation_token"], str)
    (queued,) = sdk.queued()
    assert (queued.rows, queued.start_offset_token, queued.end_offset_token) == (5, "1", "5")
    # Stored without the empty lines, as the loader reads one row a line.
    assert sdk.redis.get(queued.data_key) == body.replace(b"\n\n", b"\n")
    assert queued.size == len(body) - 2


def test_empty_offset_tokens_are_no_tokens(sdk: Streams) -> None:
    opened = sdk_open(sdk, "WRITER_U", "c1", offset_token="41")
    assert opened.json()["channel_status"]["last_committed_offset_token"] == "41"
    cont = opened.json()["next_continuation_token"]
    first = sdk_append(sdk, "WRITER_U", "c1", cont, sdk_body(['{"id":1}']))
    assert first.status_code == 200, first.text
    (queued,) = sdk.queued()
    assert (queued.start_offset_token, queued.end_offset_token) == (None, None)
    assert commit(sdk, bad_rows=1).outcome is Outcome.COMMITTED
    status = bulk(sdk, "WRITER_U", "c1")["c1"]
    # The committed token stays the last one given, never "".
    assert status["last_committed_offset_token"] == "41"
    assert status["rows_error_count"] == 1 and status["last_error_offset_upper_bound"] is None
    second = sdk_append(
        sdk, "WRITER_U", "c1", first.json()["next_continuation_token"], sdk_body(['{"id":2}']), end="42"
    )
    assert second.status_code == 200, second.text
    commit(sdk)
    assert bulk(sdk, "WRITER_U", "c1")["c1"]["last_committed_offset_token"] == "42"


def test_an_empty_token_already_stored_reads_as_none(sdk: Streams) -> None:
    """A channel whose token became "" before Floe read "" as no token reports none."""
    sdk_open(sdk, "WRITER_U", "c1")
    sdk.redis.hset(Keys(sdk.settings.redis.prefix).channel(sdk.pipe_id(), "c1"), "token", "")
    assert bulk(sdk, "WRITER_U", "c1")["c1"]["last_committed_offset_token"] is None
    reopened = sdk_open(sdk, "WRITER_U", "c1")
    assert reopened.json()["channel_status"]["last_committed_offset_token"] is None


# ------------------------------------------------------------------------------------------------
# Gap 8: a producer restarted after a crash reopens with fail_on_uncommitted_rows


def test_a_restarted_producer_resumes_after_the_rows_its_last_life_appended(sdk: Streams) -> None:
    cont = sdk_open(sdk, "WRITER_U", "c1").json()["next_continuation_token"]
    first = sdk_append(sdk, "WRITER_U", "c1", cont, sdk_body(['{"id":1}', '{"id":2}']), start="1", end="2")
    cont = first.json()["next_continuation_token"]
    last_request = str(uuid.uuid4())
    second = sdk_append(
        sdk, "WRITER_U", "c1", cont, sdk_body(['{"id":3}']), start="3", end="3", request_id=last_request
    )
    assert second.status_code == 200, second.text
    # The producer dies; its next life opens the channel while those rows wait for the pipeline: the
    # SDK retries this 409 for about 120 s.
    refused = sdk_open(sdk, "WRITER_U", "c1")
    assert_code(refused, 409, wire.Code.CHANNEL_HAS_UNCOMMITTED_DATA, "not committed yet")
    # A writer of the old life still running (a zombie) appends no more: the reopen is not held off
    # by it, and what it appended before stays, to commit.
    late = sdk_append(sdk, "WRITER_U", "c1", second.json()["next_continuation_token"], sdk_body(['{"id":4}']))
    assert_code(late, 409, wire.Code.STALE_CONTINUATION_TOKEN_SEQUENCER, "reopen")
    again = sdk_append(
        sdk,
        "WRITER_U",
        "c1",
        cont,
        sdk_body(['{"id":3}']),
        start="3",
        end="3",
        request_id=last_request,
        retry=1,
    )
    assert again.status_code == 200 and again.json() == second.json(), again.text
    assert_code(sdk_open(sdk, "WRITER_U", "c1"), 409, wire.Code.CHANNEL_HAS_UNCOMMITTED_DATA)
    assert len(sdk.queued()) == 2
    settled = commit(sdk)
    assert settled.outcome is Outcome.COMMITTED and settled.fenced_blobs == []
    # The next retry of the open gets the channel, with the token of everything its last life stored.
    reopened = sdk_open(sdk, "WRITER_U", "c1")
    assert reopened.status_code == 200, reopened.text
    status = reopened.json()["channel_status"]
    assert (status["last_committed_offset_token"], status["rows_inserted"]) == ("3", 3)
    resumed = sdk_append(
        sdk,
        "WRITER_U",
        "c1",
        reopened.json()["next_continuation_token"],
        sdk_body(['{"id":4}']),
        start="4",
        end="4",
    )
    assert resumed.status_code == 200, resumed.text
    commit(sdk)
    assert bulk(sdk, "WRITER_U", "c1")["c1"]["rows_inserted"] == 4
    assert state(sdk, "c1")["cseq"] == "2"


def test_a_reopen_of_a_channel_with_nothing_pending_is_at_once(sdk: Streams) -> None:
    cont = sdk_open(sdk, "WRITER_U", "c1").json()["next_continuation_token"]
    sdk_append(sdk, "WRITER_U", "c1", cont, sdk_body(['{"id":1}']), end="1")
    commit(sdk)
    reopened = sdk_open(sdk, "WRITER_U", "c1")
    assert (
        reopened.status_code == 200
        and reopened.json()["channel_status"]["last_committed_offset_token"] == "1"
    )


# ------------------------------------------------------------------------------------------------
# Gaps 14-15: the elastic channel


def test_every_pipe_reports_an_elastic_channel(sdk: Streams) -> None:
    statuses = bulk(sdk, "WATCHER_U", "ELASTIC", "nope")
    assert list(statuses) == ["ELASTIC"]
    elastic = statuses["ELASTIC"]
    assert set(elastic) == SDK_STATUS_FIELDS
    assert elastic["channel_name"] == "ELASTIC" and elastic["channel_status_code"] == "SUCCESS"
    assert elastic["pipe_name"] == sdk.pipe.upper() and elastic["last_committed_offset_token"] is None
    assert (elastic["rows_inserted"], elastic["rows_parsed"], elastic["rows_error_count"]) == (0, 0, 0)
    assert elastic["created_on_ms"] > 0
    # The table's default pipe too (made by this first call).
    default = f"{sdk.table}-STREAMING"
    assert bulk(sdk, "WRITER_U", "ELASTIC", pipe=default)["ELASTIC"]["pipe_name"] == default.upper()


def test_elastic_appends_from_many_producers_retries_stored_once(sdk: Streams) -> None:
    requests = [str(uuid.uuid4()) for _ in range(3)]
    answers = [
        sdk_append(sdk, "WRITER_U", "ELASTIC", None, sdk_body([f'{{"id":{i}}}', '{"id":0}']), request_id=r)
        for i, r in enumerate(requests)
    ]
    for resp in answers:
        assert resp.status_code == 200, resp.text
        assert isinstance(resp.json()["next_continuation_token"], str)
    # A retry (the answer was lost) keeps its requestId: answered, not stored again.
    retried = sdk_append(
        sdk,
        "WRITER_U",
        "ELASTIC",
        None,
        sdk_body(['{"id":0}', '{"id":0}']),
        request_id=requests[0],
        retry=1,
    )
    assert retried.status_code == 200 and retried.json() == answers[0].json()
    queued = sdk.queued()
    assert len(queued) == 3 and {a.channel for a in queued} == {"ELASTIC"}
    assert all(a.start_offset_token is None and a.end_offset_token is None for a in queued)
    assert commit(sdk).outcome is Outcome.COMMITTED
    # Committed, the same request is still answered once: the retry comes after the rows loaded.
    late = sdk_append(
        sdk,
        "WRITER_U",
        "ELASTIC",
        None,
        sdk_body(['{"id":0}', '{"id":0}']),
        request_id=requests[1],
        retry=2,
    )
    assert late.status_code == 200 and sdk.queued() == []
    status = bulk(sdk, "WRITER_U", "ELASTIC")["ELASTIC"]
    assert (status["rows_inserted"], status["last_committed_offset_token"]) == (6, None)
    assert state(sdk, "ELASTIC")["pending"] == "0"
    # At least once: the same rows under a new requestId are new rows.
    assert (
        sdk_append(sdk, "WRITER_U", "ELASTIC", None, sdk_body(['{"id":0}']), request_id="r-new").status_code
        == 200
    )
    assert len(sdk.queued()) == 1


def test_the_elastic_channel_is_not_opened_dropped_or_given_offsets(sdk: Streams) -> None:
    assert_code(sdk_open(sdk, "WRITER_U", "ELASTIC"), 400, wire.Code.BAD_REQUEST, "ELASTIC")
    dropped = sdk.client.delete(
        wire.channel_path("floe", "public", sdk.pipe, "ELASTIC"), headers=headers(sdk, "WRITER_U")
    )
    assert_code(dropped, 400, wire.Code.BAD_REQUEST, "ELASTIC")
    with_tokens = sdk_append(sdk, "WRITER_U", "ELASTIC", "x_1_0", sdk_body(['{"id":1}']), end="7")
    assert_code(with_tokens, 400, wire.Code.BAD_REQUEST, "offset")
    # Appending asks what any channel's append asks.
    refused = sdk_append(sdk, "NOBODY_U", "ELASTIC", None, sdk_body(['{"id":1}']))
    assert_code(refused, 404, wire.Code.PIPE_DOES_NOT_EXIST)
    assert sdk.queued() == []


# ------------------------------------------------------------------------------------------------
# Gap 13: throttling that does not push the SDK into file mode


def test_a_full_pending_bound_answers_503_and_a_rate_429(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    """Six 429s in a row on one append move the SDK to file mode; a 503 is retried as long and does
    not. A full bound waits on the pipeline, not on the client's pace: 503. A rate is the client's: 429."""
    streaming = isolated_settings.streaming.model_copy(
        update={
            "appends_per_s_per_channel": 0.001,
            "appends_burst_per_channel": 2,
            "max_pending_bytes_per_channel": 30,
        }
    )
    settings = isolated_settings.model_copy(update={"streaming": streaming})
    s = Streams(AppClient(create_app(settings, redis_client)), settings, redis_client, unique("t_"), "", {})
    with s.client:
        s.sql(f"CREATE TABLE {s.table} (id INT)")
        s.sql("CREATE ROLE writer")
        s.sql("GRANT USAGE ON DATABASE FLOE TO ROLE writer")
        s.sql("GRANT USAGE ON SCHEMA FLOE.PUBLIC TO ROLE writer")
        s.sql(f"GRANT INSERT ON TABLE {s.table} TO ROLE writer")
        s.keys["WRITER_U"] = new_private_key()
        key = public_key_body(s.keys["WRITER_U"].public_key())
        s.sql(f"CREATE USER WRITER_U RSA_PUBLIC_KEY = '{key}' DEFAULT_ROLE = writer")
        s.sql("GRANT ROLE writer TO USER WRITER_U")
        s.pipe = f"{s.table}-STREAMING"
        cont = sdk_open(s, "WRITER_U", "c").json()["next_continuation_token"]
        first = sdk_append(s, "WRITER_U", "c", cont, sdk_body(['{"id": 1, "pad": "xxxxxxxxxx"}']))
        assert first.status_code == 200, first.text
        nxt = first.json()["next_continuation_token"]
        full = sdk_append(s, "WRITER_U", "c", nxt, sdk_body(['{"id": 2}']))
        assert_code(full, 503, wire.Code.PENDING_FULL, "FLOE_STREAMING__MAX_PENDING_BYTES_PER_CHANNEL")
        assert int(full.headers["retry-after"]) >= 1
        over = sdk_append(s, "WRITER_U", "c", nxt, sdk_body(['{"id": 2}']))
        assert_code(over, 429, wire.Code.RATE_LIMITED, "over its append rate")
        assert int(over.headers["retry-after"]) >= 1
        # The elastic channel is bounded as one channel.
        assert (
            sdk_append(
                s, "WRITER_U", "ELASTIC", None, sdk_body(['{"id": 1, "pad": "xxxxxxxxxx"}'])
            ).status_code
            == 200
        )
        assert_code(
            sdk_append(s, "WRITER_U", "ELASTIC", None, sdk_body(['{"id": 2}'])), 503, wire.Code.PENDING_FULL
        )
        assert len(s.queued()) == 2


# ------------------------------------------------------------------------------------------------
# The status fields the SDK reads


def test_the_status_has_the_sdks_fields_and_counts_a_bad_row(sdk: Streams) -> None:
    opened = sdk_open(sdk, "WRITER_U", "c1")
    assert set(opened.json()["channel_status"]) == SDK_STATUS_FIELDS
    cont = opened.json()["next_continuation_token"]
    sdk_append(sdk, "WRITER_U", "c1", cont, sdk_body(['{"id":1}', '{"id":"x"}']), start="1", end="2")
    commit(sdk, bad_rows=1)
    status = bulk(sdk, "WATCHER_U", "c1")["c1"]
    assert set(status) == SDK_STATUS_FIELDS
    assert (status["rows_inserted"], status["rows_parsed"], status["rows_error_count"]) == (1, 2, 1)
    assert status["last_committed_offset_token"] == "2" and status["last_error_offset_upper_bound"] == "2"
    assert "not recognized" in status["last_error_message"]
    assert isinstance(status["last_error_timestamp_ms"], int)
    assert isinstance(status["snowflake_avg_processing_latency_ms"], int)
    assert isinstance(status["created_on_ms"], int) and status["channel_status_code"] == "SUCCESS"


def test_a_drop_answers_the_last_committed_offset_token(sdk: Streams) -> None:
    cont = sdk_open(sdk, "WRITER_U", "c1").json()["next_continuation_token"]
    sdk_append(sdk, "WRITER_U", "c1", cont, sdk_body(['{"id":1}']), end="1")
    commit(sdk)
    dropped = sdk.client.delete(
        wire.channel_path("floe", "public", sdk.pipe, "c1") + f"?requestId={uuid.uuid4()}&retryCount=0",
        headers=headers(sdk, "WRITER_U"),
    )
    assert dropped.status_code == 200 and dropped.json() == {"last_committed_offset_token": "1"}, dropped.text
