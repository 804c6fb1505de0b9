"""The Snowpipe Streaming v2 routes in-process against the real Redis: the token exchange, open,
append, drop and bulk status, their errors, fencing and privileges. Loading the appended rows
through Spark is in tests/e2e/test_streaming.py."""

from __future__ import annotations

import gzip
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import zstandard
from cryptography.hazmat.primitives.asymmetric import rsa

from bench.harness import unique
from floe.catalog import Catalog, Pipe
from floe.channels import INACTIVE_CHANNEL_MS, ChannelStore, channel_state
from floe.keypair import new_private_key, public_key_body
from floe.keys import Keys
from floe.records import RowAppend
from floe.settings import Settings
from floe.streaming import protocol as wire
from front.client import auth_header
from services.api import create_app
from tests.asgi import AppClient
from tests.conftest import TEST_INTEGRATION
from tests.services.test_snowpipe import bearer, token

pytestmark = pytest.mark.integration

FORM = "application/x-www-form-urlencoded"


@dataclass
class Streams:
    """An app on a private key prefix with a table, a streaming pipe and users."""

    client: AppClient
    settings: Settings
    redis: redis.Redis[bytes]
    table: str
    pipe: str
    keys: dict[str, rsa.RSAPrivateKey]

    def sql(self, statement: str) -> list[dict[str, Any]]:
        resp = self.client.post("/api/v1/sql", json={"sql": statement}, headers=auth_header(self.settings))
        assert resp.status_code == 200, resp.text
        body = resp.json()
        return [dict(zip(body["columns"], row, strict=True)) for row in body["rows"]]

    def scoped(self, user: str) -> dict[str, str]:
        """Headers with a scoped token exchanged for the user's key-pair JWT."""
        resp = self.client.post(
            wire.TOKEN_PATH,
            content=f"grant_type={wire.TOKEN_GRANT_TYPE}&scope=localhost",
            headers={
                **bearer(token(user, self.keys[user])),
                "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT",
                "Content-Type": FORM,
            },
        )
        assert resp.status_code == 200, resp.text
        return {
            "Authorization": f"Bearer {resp.text}",
            "X-Snowflake-Authorization-Token-Type": "OAUTH",
        }

    def open(self, user: str, channel: str, pipe: str | None = None, **body: Any) -> Any:
        path = wire.channel_path("floe", "public", pipe or self.pipe, channel)
        return self.client.put(
            path, params={"requestId": str(uuid.uuid4())}, json=body, headers=self.scoped(user)
        )

    def append(
        self,
        user: str,
        channel: str,
        cont: str,
        rows: bytes,
        *,
        start: str | None = None,
        end: str | None = None,
        request_id: str | None = None,
        headers: dict[str, str] | None = None,
        pipe: str | None = None,
    ) -> Any:
        params = {"continuationToken": cont, "requestId": request_id or str(uuid.uuid4())}
        if start is not None:
            params["startOffsetToken"] = start
        if end is not None:
            params["endOffsetToken"] = end
        return self.client.post(
            wire.rows_path("FLOE", "PUBLIC", pipe or self.pipe, channel),
            params=params,
            content=rows,
            headers={**self.scoped(user), "Content-Type": "application/x-ndjson", **(headers or {})},
        )

    def status(self, user: str, *names: str, pipe: str | None = None) -> Any:
        return self.client.post(
            wire.bulk_status_path("FLOE", "PUBLIC", pipe or self.pipe),
            json={"channel_names": list(names)},
            headers=self.scoped(user),
        )

    def pipe_id(self, name: str | None = None) -> str:
        catalog = Catalog(self.redis, Keys(self.settings.redis.prefix))
        return catalog.get(Pipe, f"FLOE.PUBLIC.{(name or self.pipe).upper()}").id

    def queued(self, name: str | None = None) -> list[RowAppend]:
        key = Keys(self.settings.redis.prefix).rows(self.pipe_id(name))
        return [RowAppend.from_stream(sid, f) for sid, f in self.redis.xrange(key)]


@pytest.fixture
def streams(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> Iterator[Streams]:
    app = create_app(isolated_settings, redis_client)
    s = Streams(AppClient(app), isolated_settings, redis_client, unique("t_"), unique("p_"), {})
    with s.client:
        s.sql(f"CREATE TABLE {s.table} (id INT, kind VARCHAR, amount NUMBER(10,2))")
        s.sql(
            f"CREATE PIPE {s.pipe} AS COPY INTO {s.table} FROM (SELECT $1:id, $1:kind, $1:amount "
            "FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
        )
        s.sql("CREATE ROLE writer")
        s.sql("CREATE ROLE watcher")
        for role in ("writer", "watcher"):
            s.sql(f"GRANT USAGE ON DATABASE FLOE TO ROLE {role}")
            s.sql(f"GRANT USAGE ON SCHEMA FLOE.PUBLIC TO ROLE {role}")
        s.sql(f"GRANT OPERATE ON PIPE {s.pipe} TO ROLE writer")
        s.sql(f"GRANT INSERT ON TABLE {s.table} TO ROLE writer")
        s.sql(f"GRANT MONITOR ON PIPE {s.pipe} TO ROLE watcher")
        for user, role in (("WRITER_U", "writer"), ("WATCHER_U", "watcher"), ("NOBODY_U", None)):
            key = new_private_key()
            s.keys[user] = key
            default = f" DEFAULT_ROLE = {role}" if role else ""
            s.sql(f"CREATE USER {user} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}'{default}")
            if role:
                s.sql(f"GRANT ROLE {role} TO USER {user}")
        yield s


def ndjson(*rows: str) -> bytes:
    return "".join(r + "\n" for r in rows).encode()


def assert_code(resp: Any, status: int, code: str, *fragments: str) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"code", "message"} and body["code"] == code, body
    for fragment in fragments:
        assert fragment in body["message"], body


def test_open_append_and_status(streams: Streams) -> None:
    opened = streams.open("WRITER_U", "partition-7")
    assert opened.status_code == 200, opened.text
    body = opened.json()
    status = body["channel_status"]
    assert status["channel_name"] == "partition-7" and status["pipe_name"] == streams.pipe.upper()
    assert status["channel_status_code"] == "SUCCESS" and status["last_committed_offset_token"] is None
    assert [c["name"] for c in body["table_columns"]] == ["ID", "KIND", "AMOUNT"]
    cont = body["next_continuation_token"]
    first = streams.append(
        "WRITER_U", "partition-7", cont, ndjson('{"id": 1}', '{"id": 2}'), start="1", end="2"
    )
    assert first.status_code == 200, first.text
    second = streams.append(
        "WRITER_U", "partition-7", first.json()["next_continuation_token"], ndjson('{"id": 3}')
    )
    assert second.status_code == 200, second.text
    queued = streams.queued()
    assert [(a.channel, a.rows, a.start_offset_token, a.end_offset_token) for a in queued] == [
        ("partition-7", 2, "1", "2"),
        ("partition-7", 1, None, None),
    ]
    assert streams.redis.get(queued[0].data_key) == b'{"id": 1}\n{"id": 2}\n'
    shown = streams.status("WATCHER_U", "partition-7", "nope")
    assert shown.status_code == 200, shown.text
    assert list(shown.json()["channel_statuses"]) == ["partition-7"]


def test_compressed_bodies_are_accepted(streams: Streams) -> None:
    cont = streams.open("WRITER_U", "c").json()["next_continuation_token"]
    rows = ndjson('{"id": 1}', '{"id": 2}')
    gz = streams.append("WRITER_U", "c", cont, gzip.compress(rows), headers={"Content-Encoding": "gzip"})
    assert gz.status_code == 200, gz.text
    zs = streams.append(
        "WRITER_U",
        "c",
        gz.json()["next_continuation_token"],
        zstandard.ZstdCompressor().compress(rows),
        headers={"Content-Encoding": "zstd"},
    )
    assert zs.status_code == 200, zs.text
    assert [streams.redis.get(a.data_key) for a in streams.queued()] == [rows, rows]


def test_a_retried_append_is_stored_once(streams: Streams) -> None:
    """The same requestId and token after a lost answer gets the same next token, and no second copy."""
    cont = streams.open("WRITER_U", "c").json()["next_continuation_token"]
    first = streams.append("WRITER_U", "c", cont, ndjson('{"id": 1}'), request_id="r-1")
    again = streams.append("WRITER_U", "c", cont, ndjson('{"id": 1}'), request_id="r-1")
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert len(streams.queued()) == 1
    # The same stale token under a new request id is a different append: refused.
    other = streams.append("WRITER_U", "c", cont, ndjson('{"id": 1}'), request_id="r-2")
    assert_code(other, 409, wire.Code.INVALID_ROW_SEQUENCER, "not its latest")


def test_reopen_fences_the_old_writer(streams: Streams) -> None:
    old = streams.open("WRITER_U", "c").json()["next_continuation_token"]
    assert streams.append("WRITER_U", "c", old, ndjson('{"id": 1}')).status_code == 200
    reopened = streams.open("WRITER_U", "c")
    assert reopened.status_code == 200
    late = streams.append("WRITER_U", "c", old, ndjson('{"id": 2}'))
    assert_code(late, 409, wire.Code.STALE_CONTINUATION_TOKEN_SEQUENCER, "Please reopen the channel")
    state = channel_state(streams.redis, Keys(streams.settings.redis.prefix), streams.pipe_id(), "c")
    assert state["cseq"] == "2" and state["pending"] == "0"
    new = reopened.json()["next_continuation_token"]
    assert streams.append("WRITER_U", "c", new, ndjson('{"id": 3}')).status_code == 200
    assert [a.client_sequencer for a in streams.queued()] == [1, 2]


def test_fail_on_uncommitted_rows(streams: Streams) -> None:
    cont = streams.open("WRITER_U", "c").json()["next_continuation_token"]
    assert streams.append("WRITER_U", "c", cont, ndjson('{"id": 1}')).status_code == 200
    refused = streams.open("WRITER_U", "c", fail_on_uncommitted_rows=True)
    assert_code(refused, 409, wire.Code.CHANNEL_HAS_UNCOMMITTED_DATA)
    assert streams.open("WRITER_U", "c", fail_on_uncommitted_rows=False).status_code == 200


def test_open_with_an_offset_token_sets_it(streams: Streams) -> None:
    status = streams.open("WRITER_U", "c", offset_token="41").json()["channel_status"]
    assert status["last_committed_offset_token"] == "41"


def test_drop_forgets_the_channel(streams: Streams) -> None:
    cont = streams.open("WRITER_U", "c").json()["next_continuation_token"]
    path = wire.channel_path("FLOE", "PUBLIC", streams.pipe, "c")
    dropped = streams.client.delete(path, headers=streams.scoped("WRITER_U"))
    assert dropped.status_code == 200, dropped.text
    assert streams.status("WATCHER_U", "c").json()["channel_statuses"] == {}
    assert_code(
        streams.append("WRITER_U", "c", cont, ndjson('{"id": 1}')), 404, wire.Code.CHANNEL_DOES_NOT_EXIST
    )
    again = streams.client.delete(path, headers=streams.scoped("WRITER_U"))
    assert_code(again, 404, wire.Code.CHANNEL_DOES_NOT_EXIST)
    # Created again, the channel is a new incarnation: the first one's token does not fit it.
    streams.open("WRITER_U", "c")
    assert_code(
        streams.append("WRITER_U", "c", cont, ndjson('{"id": 1}')), 409, wire.Code.CHANNEL_MUST_BE_REOPENED
    )


@pytest.mark.parametrize(
    ("rows", "fragment"),
    [
        (b'{"id": 1}\n{"id": \n', "line 2"),
        (b'{"id": 1}\n[1, 2]\n', "line 2"),
        (b"", "no rows"),
    ],
)
def test_a_malformed_line_is_a_400_naming_it(streams: Streams, rows: bytes, fragment: str) -> None:
    cont = streams.open("WRITER_U", "c").json()["next_continuation_token"]
    assert_code(streams.append("WRITER_U", "c", cont, rows), 400, wire.Code.MALFORMED_ROWS, fragment)
    assert streams.queued() == []


def test_a_body_over_4_mb_is_a_413(streams: Streams) -> None:
    cont = streams.open("WRITER_U", "c").json()["next_continuation_token"]
    big = ndjson(*['{"kind": "' + "x" * 1000 + '"}'] * (wire.MAX_BODY_BYTES // 1000 + 10))
    assert_code(
        streams.append("WRITER_U", "c", cont, big), 413, wire.Code.PAYLOAD_TOO_LARGE, "Split the rows"
    )
    bomb = gzip.compress(b'{"kind": "' + b"x" * (wire.MAX_UNCOMPRESSED_BYTES + 10) + b'"}\n')
    assert len(bomb) < wire.MAX_BODY_BYTES
    resp = streams.append("WRITER_U", "c", cont, bomb, headers={"Content-Encoding": "gzip"})
    assert_code(resp, 413, wire.Code.PAYLOAD_TOO_LARGE)
    assert streams.queued() == []


def test_unknown_pipe_and_missing_privileges(streams: Streams) -> None:
    assert_code(streams.open("WRITER_U", "c", pipe="nope"), 404, wire.Code.PIPE_DOES_NOT_EXIST)
    # A role without any privilege on the pipe cannot tell it exists.
    assert_code(streams.open("NOBODY_U", "c"), 404, wire.Code.PIPE_DOES_NOT_EXIST)
    # MONITOR reads status but may not write: the 404 the SDK does not retry, saying what it takes.
    assert_code(streams.open("WATCHER_U", "c"), 404, wire.Code.PIPE_DOES_NOT_EXIST, "OPERATE")
    assert streams.status("WATCHER_U", "c").status_code == 200
    assert_code(streams.status("NOBODY_U", "c"), 404, wire.Code.PIPE_DOES_NOT_EXIST)


def test_tokens_and_their_scope(streams: Streams) -> None:
    headers = streams.scoped("WRITER_U")
    # A scoped token opens the streaming routes only.
    sql = streams.client.post("/api/v1/sql", json={"sql": "SELECT 1"}, headers=headers)
    assert sql.status_code == 401 and "/v2/streaming" in sql.json()["message"]
    forged = {**headers, "Authorization": headers["Authorization"][:-4] + "AAAA"}
    path = wire.channel_path("FLOE", "PUBLIC", streams.pipe, "c")
    assert_code(streams.client.put(path, json={}, headers=forged), 401, "ERR_UNAUTHORIZED", "not issued")
    # A key-pair JWT works on the streaming routes as well; no token at all does not.
    keypair = {
        **bearer(token("WRITER_U", streams.keys["WRITER_U"])),
        "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT",
    }
    assert streams.client.put(path, json={}, headers=keypair).status_code == 200
    assert_code(streams.client.put(path, json={}), 401, "ERR_UNAUTHORIZED")
    # Removing the user's key ends its scoped tokens at once.
    streams.sql("ALTER USER WRITER_U UNSET RSA_PUBLIC_KEY")
    assert_code(streams.client.put(path, json={}, headers=headers), 401, "ERR_UNAUTHORIZED")
    bad_grant = streams.client.post(
        wire.TOKEN_PATH,
        content="grant_type=password",
        headers={**auth_header(streams.settings), "Content-Type": FORM},
    )
    assert_code(bad_grant, 400, wire.Code.BAD_REQUEST, "grant_type")


def test_the_default_pipe_matches_columns_by_name(streams: Streams) -> None:
    default = f"{streams.table}-STREAMING"
    opened = streams.open("WRITER_U", "c", pipe=default)
    assert opened.status_code == 200, opened.text
    assert opened.json()["channel_status"]["pipe_name"] == default.upper()
    pipe = Catalog(streams.redis, Keys(streams.settings.redis.prefix)).get(
        Pipe, f"FLOE.PUBLIC.{default.upper()}"
    )
    assert pipe.source == "streaming" and pipe.default_streaming and pipe.copy_spec.select is None
    # INSERT on the table is what the default pipe asks; MONITOR on another pipe is not enough.
    assert_code(streams.open("WATCHER_U", "c", pipe=default), 404, wire.Code.PIPE_DOES_NOT_EXIST)
    assert_code(streams.open("WRITER_U", "c", pipe="GHOST-STREAMING"), 404, wire.Code.PIPE_DOES_NOT_EXIST)


def test_a_file_pipe_takes_no_channels(streams: Streams) -> None:
    streams.sql(TEST_INTEGRATION)
    streams.sql("CREATE STAGE st URL = 's3://b/in/' STORAGE_INTEGRATION = floe_tests")
    streams.sql(f"CREATE PIPE files AS COPY INTO {streams.table} FROM @st")
    streams.sql("GRANT OPERATE ON PIPE files TO ROLE writer")
    assert_code(streams.open("WRITER_U", "c", pipe="files"), 400, wire.Code.BAD_REQUEST, "loads files")


def test_a_channel_over_its_rate_gets_429_and_over_its_pending_bytes_503(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    streaming = isolated_settings.streaming.model_copy(
        update={
            "appends_per_s_per_channel": 0.001,
            "appends_burst_per_channel": 2,
            "max_pending_bytes_per_channel": 30,
        }
    )
    settings = isolated_settings.model_copy(update={"streaming": streaming})
    app = create_app(settings, redis_client)
    s = Streams(AppClient(app), settings, redis_client, unique("t_"), "", {"FLOE_ADMIN": new_private_key()})
    with s.client:
        s.sql(f"CREATE TABLE {s.table} (id INT)")
        second_key = public_key_body(s.keys["FLOE_ADMIN"].public_key())
        s.sql(f"ALTER USER FLOE_ADMIN SET RSA_PUBLIC_KEY_2 = '{second_key}'")
        s.pipe = f"{s.table}-STREAMING"
        cont = s.open("FLOE_ADMIN", "c").json()["next_continuation_token"]
        # The first append goes in whatever its size; then the channel holds 36 bytes uncommitted.
        first = s.append("FLOE_ADMIN", "c", cont, ndjson('{"id": 1, "pad": "xxxxxxxxxx"}'))
        assert first.status_code == 200, first.text
        full = s.append("FLOE_ADMIN", "c", first.json()["next_continuation_token"], ndjson('{"id": 2}'))
        # Not 429: the pipeline is behind, not the client (six 429s send the SDK to file mode).
        assert_code(full, 503, wire.Code.PENDING_FULL, "not yet committed")
        assert int(full.headers["retry-after"]) >= 1
        # Two appends of the burst are spent: the third is over the rate.
        over = s.append("FLOE_ADMIN", "c", first.json()["next_continuation_token"], ndjson('{"id": 2}'))
        assert_code(over, 429, wire.Code.RATE_LIMITED, "over its append rate")
        assert int(over.headers["retry-after"]) >= 1
        assert len(s.queued()) == 1


def test_channels_inactive_for_30_days_expire(streams: Streams) -> None:
    streams.open("WRITER_U", "old")
    streams.open("WRITER_U", "new")
    store = ChannelStore(streams.redis, Keys(streams.settings.redis.prefix), 1 << 20)
    pipe_id = streams.pipe_id()
    now = int(time.time() * 1000)
    assert store.names(pipe_id, now) == ["new", "old"]
    streams.redis.zadd(
        Keys(streams.settings.redis.prefix).channels(pipe_id), {"old": now - INACTIVE_CHANNEL_MS - 1}
    )
    assert store.names(pipe_id, now) == ["new"]
    assert streams.status("WATCHER_U", "old", "new").json()["channel_statuses"].keys() == {"new"}
