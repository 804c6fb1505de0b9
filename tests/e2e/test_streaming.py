"""Snowpipe Streaming end to end: rows appended over the v2 REST API go through the Spark job and
the pipe's transform into the table, and the channel's offset token commits with them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import date
from decimal import Decimal
from typing import Any

import httpx
import pytest

from floe.streaming import protocol as wire
from floe.tls import api_base_url, client_ssl_context
from front.client import auth_header
from tests.conftest import Stack, unique, wait_until

pytestmark = pytest.mark.e2e


class Rest:
    """The v2 routes as a user of the REST API calls them (the admin's key-pair JWT)."""

    def __init__(self, stack: Stack, pipe: str) -> None:
        self.http = httpx.Client(
            base_url=api_base_url(stack.settings), verify=client_ssl_context(stack.settings) or True
        )
        self.headers = {**auth_header(stack.settings), "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT"}
        self.pipe = pipe

    def open(self, channel: str, **body: Any) -> dict[str, Any]:
        resp = self.http.put(
            wire.channel_path("FLOE", "PUBLIC", self.pipe, channel), json=body, headers=self.headers
        )
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def append(
        self, channel: str, token: str, rows: list[dict[str, Any]], start: str, end: str
    ) -> httpx.Response:
        params = {
            "continuationToken": token,
            "startOffsetToken": start,
            "endOffsetToken": end,
            "requestId": str(uuid.uuid4()),
        }
        body = "".join(json.dumps(r) + "\n" for r in rows).encode()
        return self.http.post(
            wire.rows_path("FLOE", "PUBLIC", self.pipe, channel),
            params=params,
            content=body,
            headers={**self.headers, "Content-Type": "application/x-ndjson"},
        )

    def status(self, channel: str) -> dict[str, Any]:
        resp = self.http.post(
            wire.bulk_status_path("FLOE", "PUBLIC", self.pipe),
            json={"channel_names": [channel]},
            headers=self.headers,
        )
        assert resp.status_code == 200, resp.text
        return dict(resp.json()["channel_statuses"].get(channel) or {})


@pytest.fixture
def rest_for(stack: Stack) -> Iterator[Callable[[str], Rest]]:
    """Rest clients on the stack for a pipe each, closed after the test."""
    made: list[Rest] = []

    def make(pipe: str) -> Rest:
        made.append(Rest(stack, pipe))
        return made[-1]

    yield make
    for rest in made:
        rest.http.close()


def committed(rest: Rest, channel: str, token: str) -> dict[str, Any] | None:
    status = rest.status(channel)
    return status if status.get("last_committed_offset_token") == token else None


def test_rows_load_through_a_transform_with_their_offset_token(
    stack: Stack, rest_for: Callable[[str], Rest]
) -> None:
    table, pipe = unique("t_"), unique("p_")
    stack.sql(f"CREATE TABLE {table} (id INT, kind VARCHAR, amount NUMBER(10,2))")
    stack.sql(
        f"CREATE PIPE {pipe} AS COPY INTO {table} FROM (SELECT $1:id, UPPER($1:kind), "
        "$1:amount::NUMBER(10,2) FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
    )
    rest = rest_for(pipe)
    opened = rest.open("partition-7")
    assert opened["channel_status"]["last_committed_offset_token"] is None
    rows = [{"id": i, "kind": f"k{i % 3}", "amount": f"{i}.25"} for i in range(1, 1001)]
    first = rest.append("partition-7", opened["next_continuation_token"], rows[:500], "1", "500")
    assert first.status_code == 200, first.text
    second = rest.append("partition-7", first.json()["next_continuation_token"], rows[500:], "501", "1000")
    assert second.status_code == 200, second.text
    status = wait_until(lambda: committed(rest, "partition-7", "1000"), what="offset token 1000 committed")
    assert (
        status["rows_inserted"] == 1000 and status["rows_parsed"] == 1000 and status["rows_error_count"] == 0
    )
    # The token became visible together with the rows.
    got = stack.sql(f"SELECT COUNT(*) AS n, SUM(id) AS s, MIN(kind) AS k, SUM(amount) AS a FROM {table}")[0]
    assert got == {"N": 1000, "S": 500500, "K": "K0", "A": 500500 + 250.0}
    # A reopen returns the committed token.
    assert rest.open("partition-7")["channel_status"]["last_committed_offset_token"] == "1000"


def test_bad_rows_are_counted_and_the_rest_load(stack: Stack, rest_for: Callable[[str], Rest]) -> None:
    table = unique("t_")
    stack.sql(f"CREATE TABLE {table} (id INT NOT NULL, amount NUMBER(10,2))")
    rest = rest_for(f"{table}-STREAMING")
    opened = rest.open("c")
    rows: list[dict[str, Any]] = [
        {"id": 1, "amount": 1.5},
        {"id": None, "amount": 2},
        {"ID": 3, "Amount": "x"},
        {"id": 4},
    ]
    resp = rest.append("c", opened["next_continuation_token"], rows, "a", "b")
    assert resp.status_code == 200, resp.text
    status = wait_until(lambda: committed(rest, "c", "b"), what="the append committed")
    assert status["rows_parsed"] == 4 and status["rows_inserted"] == 2 and status["rows_error_count"] == 2
    assert status["last_error_offset_upper_bound"] == "b" and status["last_error_message"]
    assert status["last_error_timestamp_ms"] > 0
    assert stack.sql(f"SELECT id, amount FROM {table} ORDER BY id") == [
        {"ID": 1, "AMOUNT": 1.5},
        {"ID": 4, "AMOUNT": None},
    ]


def test_a_reopen_drops_the_old_writers_uncommitted_rows(
    stack: Stack, rest_for: Callable[[str], Rest]
) -> None:
    """Pause the pipe so the first writer's append waits, reopen, resume: it never commits."""
    table, pipe = unique("t_"), unique("p_")
    stack.sql(f"CREATE TABLE {table} (id INT)")
    stack.sql(
        f"CREATE PIPE {pipe} AS COPY INTO {table} "
        "FROM (SELECT $1:id FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
    )
    stack.sql(f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = TRUE")
    rest = rest_for(pipe)
    old = rest.open("c")["next_continuation_token"]
    assert rest.append("c", old, [{"id": 1}, {"id": 2}], "1", "2").status_code == 200
    new = rest.open("c")["next_continuation_token"]
    late = rest.append("c", old, [{"id": 3}], "3", "3")
    assert late.status_code == 409 and late.json()["code"] == wire.Code.STALE_CONTINUATION_TOKEN_SEQUENCER
    assert rest.append("c", new, [{"id": 10}], "10", "10").status_code == 200
    stack.sql(f"ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = FALSE")
    wait_until(lambda: committed(rest, "c", "10"), what="the new writer's append committed")
    assert stack.sql(f"SELECT id FROM {table}") == [{"ID": 10}]


def client_properties(stack: Stack) -> dict[str, Any]:
    """Floe's client, configured as a user would: the API's URL, the user and its key."""
    return {
        "url": api_base_url(stack.settings),
        "account": stack.settings.account,
        "user": stack.settings.auth.admin_user,
        "private_key_file": stack.settings.auth.admin_key_file,
        "max_client_lag": 200,
    }


def test_the_python_client_streams_rows_exactly_once(stack: Stack) -> None:
    """The issue's example: open, resume from the committed token, append, wait for the commit."""
    from floe.streaming import StreamingIngestClient

    table = unique("t_")
    stack.sql(f"CREATE TABLE {table} (id INT, kind VARCHAR, amount NUMBER(10,2), day DATE)")
    with StreamingIngestClient(
        "loader-1", "FLOE", "PUBLIC", f"{table}-STREAMING", properties=client_properties(stack)
    ) as client:
        channel, status = client.open_channel("partition-7")
        assert status.status_code == "SUCCESS" and channel.get_latest_committed_offset_token() is None
        for start in range(0, 2000, 250):
            rows = [
                {"id": i, "kind": f"k{i % 4}", "amount": Decimal(i) / 4, "day": date(2026, 1, 1 + i % 28)}
                for i in range(start, start + 250)
            ]
            channel.append_rows(rows, start_offset_token=str(start), end_offset_token=str(start + 249))
        channel.wait_for_commit(lambda token: token is not None and int(token) >= 1999, timeout_seconds=60)
        assert channel.get_latest_committed_offset_token() == "1999"
        # A second writer resumes from the committed token and sends nothing twice.
        again, status = client.open_channel("partition-7")
        resume = int(status.latest_committed_offset_token or -1) + 1
        assert resume == 2000
        again.append_rows(
            [{"id": i, "kind": "late", "amount": 1, "day": "2026-02-01"} for i in range(resume, resume + 10)],
            end_offset_token=str(resume + 9),
        )
        again.wait_for_commit(lambda token: token == "2009", timeout_seconds=60)
    got = stack.sql(f"SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d, SUM(amount) AS a FROM {table}")[0]
    assert got == {"N": 2010, "D": 2010, "A": sum(i / 4 for i in range(2000)) + 10}


def test_the_clients_abort_and_skip_batch_check_rows_before_sending(stack: Stack) -> None:
    from floe.streaming import RowValidationError, StreamingIngestClient

    table = unique("t_")
    stack.sql(f"CREATE TABLE {table} (id INT NOT NULL, day DATE, ok BOOLEAN)")
    bad = [{"id": 1, "day": "2026-01-01", "ok": "yes"}, {"id": 2, "day": "not a date", "ok": True}]
    good = [{"id": 3, "day": "2026-01-03", "ok": "no"}]
    props = client_properties(stack)
    with StreamingIngestClient("v", "FLOE", "PUBLIC", f"{table}-STREAMING", properties=props) as client:
        skipping, _ = client.open_channel("skip", on_error="SKIP_BATCH")
        refused = skipping.append_rows(bad, end_offset_token="1")
        assert [(e.row_index, e.column) for e in refused.errors] == [(1, "DAY")]
        assert skipping.append_rows(good, end_offset_token="2").has_errors() is False
        skipping.wait_for_commit(lambda t: t == "2", timeout_seconds=60)
        aborting, _ = client.open_channel("abort", on_error="ABORT")
        with pytest.raises(RowValidationError, match="not a date") as info:
            aborting.append_rows(bad, end_offset_token="1")
        assert info.value.row_index == 1
    # Nothing of either bad batch was sent: only the good row is in the table, and the server saw
    # no error on the channel that skipped.
    assert stack.sql(f"SELECT id, day, ok FROM {table}") == [{"ID": 3, "DAY": "2026-01-03", "OK": False}]
    status = {r["name"]: r for r in stack.sql(f"SHOW CHANNELS IN TABLE {table}")}
    assert status["skip"]["rows_inserted"] == 1 and status["skip"]["rows_error_count"] == 0
    assert status["abort"]["row_sequencer"] == 0
