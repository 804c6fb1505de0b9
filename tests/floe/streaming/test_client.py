"""The streaming client against the fake v2 API: properties and their defaults, opening, statuses,
dropping, flushing every channel, closing (also by garbage collection)."""

from __future__ import annotations

import gc
import json
import logging
from pathlib import Path
from typing import Any

import jwt
import pytest

import floe.streaming
from floe.streaming import protocol as wire
from floe.streaming.client import StreamingIngestClient
from floe.streaming.protocol import ChannelStatus, Code
from floe.streaming.transport import (
    ChannelClosedError,
    ChannelInvalidError,
    StreamingConfigError,
    StreamingRequestError,
)
from tests.floe.streaming.conftest import MakeClient
from tests.floe.streaming.test_transport import (
    DB,
    PEM,
    PIPE,
    PROPS,
    SCHEMA,
    FakeClock,
    FakeServer,
    error,
)

pytestmark = pytest.mark.unit


def _client(server: FakeServer, clock: FakeClock, **kwargs: Any) -> StreamingIngestClient:
    return StreamingIngestClient(
        "c", DB, SCHEMA, PIPE, transport=server, clock=clock, sleep=clock.sleep, **kwargs
    )


def _jwt_claims(server: FakeServer) -> dict[str, Any]:
    token = server.of("token")[0].headers["Authorization"].removeprefix("Bearer ")
    return dict(jwt.decode(token, options={"verify_signature": False}))


# ------------------------------------------------------------------------------------------------
# Properties


def test_explicit_properties_never_read_floe_settings(
    server: FakeServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_settings() -> None:
        raise AssertionError("Settings() built although every connection property was given")

    monkeypatch.setattr("floe.streaming.client.Settings", no_settings)
    client = _client(server, clock, properties=PROPS)
    client.close()
    assert _jwt_claims(server)["sub"] == "ACME.LOADER"


def test_missing_connection_properties_default_to_floe_settings(
    server: FakeServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key_file = tmp_path / "admin.p8"
    key_file.write_text(PEM)
    monkeypatch.setenv("FLOE_ACCOUNT", "acme")
    monkeypatch.setenv("FLOE_AUTH__ADMIN_USER", "loader")
    monkeypatch.setenv("FLOE_AUTH__ADMIN_KEY_FILE", str(key_file))
    monkeypatch.setenv("FLOE_API__HOST", "api.internal")
    monkeypatch.setenv("FLOE_API__PORT", "9443")
    monkeypatch.setenv("FLOE_API__TLS", "off")
    client = _client(server, clock)
    client.close()
    assert client.config.url == "http://api.internal:9443"
    assert _jwt_claims(server)["sub"] == "ACME.LOADER"
    (token,) = server.of("token")
    assert token.body is not None and b"scope=api.internal%3A9443" in token.body


def test_profile_json_supplies_properties_and_the_dict_wins(
    server: FakeServer, clock: FakeClock, tmp_path: Path
) -> None:
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({**PROPS, "URL": "https://other:1", "max_client_lag": 250}))
    client = _client(server, clock, profile_json=profile, properties={"url": "https://floe.test:8443"})
    client.close()
    assert (client.config.url, client.config.max_client_lag_ms) == ("https://floe.test:8443", 250)


def test_a_private_key_without_pem_armour_is_accepted(server: FakeServer, clock: FakeClock) -> None:
    body = "".join(line for line in PEM.splitlines() if not line.startswith("-----"))
    _client(server, clock, properties={**PROPS, "private_key": body}).close()
    assert _jwt_claims(server)["sub"] == "ACME.LOADER"


def test_unknown_properties_are_named_in_a_warning(
    server: FakeServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "floe.streaming.client"):
        _client(server, clock, properties={**PROPS, "scheme": "https", "role": "LOADER"}).close()
    assert "ignoring unknown streaming client properties: scheme" in caplog.text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"max_client_lag": 0}, "max_client_lag property must be an integer from 1 to 600000"),
        ({"max_client_lag": 600_001}, "max_client_lag"),
        ({"max_client_lag": "soon"}, "max_client_lag"),
        ({"max_buffer_bytes": True}, "max_buffer_bytes"),
        ({"compression": "brotli"}, "compression must be one of zstd, gzip, none"),
        ({"private_key_file": "/k.p8"}, "either the private_key or the private_key_file"),
        ({"url": "floe.test:8443"}, "must start with http"),
        (
            {"private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"},
            "cannot use the private key",
        ),
    ],
)
def test_invalid_properties_are_refused(
    server: FakeServer, clock: FakeClock, extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(StreamingConfigError, match=message):
        _client(server, clock, properties={**PROPS, **extra})
    assert server.calls == []


def test_an_unreadable_key_file_names_the_file(server: FakeServer, clock: FakeClock, tmp_path: Path) -> None:
    props = {k: v for k, v in PROPS.items() if k != "private_key"}
    missing = tmp_path / "missing.p8"
    with pytest.raises(StreamingConfigError, match=f"cannot read the private key {missing}"):
        _client(server, clock, properties={**props, "private_key_file": str(missing)})


# ------------------------------------------------------------------------------------------------
# Channels


def test_open_channel_sends_the_documented_request(server: FakeServer, make_client: MakeClient) -> None:
    client = make_client()
    channel, status = client.open_channel("part 0")
    (call,) = server.of("open")
    assert call.method == "PUT"
    assert call.path == wire.channel_path(DB, SCHEMA, PIPE, "part 0")
    assert call.json == {wire.FAIL_ON_UNCOMMITTED_ROWS: False}
    assert call.params[wire.REQUEST_ID]
    assert isinstance(status, ChannelStatus) and status.channel_name == "part 0"
    assert status.last_committed_offset_token is None
    assert channel.channel_name == "part 0"
    client.open_channel("part 0", offset_token="41", fail_on_uncommitted_rows=True)
    assert server.of("open")[1].json == {wire.FAIL_ON_UNCOMMITTED_ROWS: True, wire.OFFSET_TOKEN: "41"}


def test_from_table_uses_the_default_pipe(server: FakeServer, clock: FakeClock) -> None:
    client = StreamingIngestClient.from_table(
        "c", DB, SCHEMA, "events", properties=PROPS, transport=server, clock=clock, sleep=clock.sleep
    )
    client.open_channel("ch")
    client.close()
    assert client.pipe_name == "EVENTS-STREAMING"
    assert server.of("open")[0].path == wire.channel_path(DB, SCHEMA, "EVENTS-STREAMING", "ch")


def test_open_channel_refuses_an_unknown_on_error(make_client: MakeClient) -> None:
    with pytest.raises(StreamingConfigError, match="on_error must be one of CONTINUE, ABORT, SKIP_BATCH"):
        make_client().open_channel("ch", on_error="IGNORE")


def test_open_channel_refused_for_uncommitted_rows_names_the_code(
    server: FakeServer, make_client: MakeClient
) -> None:
    client = make_client()
    server.fail("open", error(409, Code.CHANNEL_HAS_UNCOMMITTED_DATA, "2 rows are not committed"))
    with pytest.raises(
        ChannelInvalidError, match="ERR_CHANNEL_HAS_UNCOMMITTED_DATA: 2 rows are not committed"
    ):
        client.open_channel("ch", fail_on_uncommitted_rows=True)


def test_statuses_and_latest_committed_offset_tokens(server: FakeServer, make_client: MakeClient) -> None:
    client = make_client()
    ch, _ = client.open_channel("ch")
    ch.append_rows([{"ID": 1}], "1", "5")
    ch.wait_for_flush()
    statuses = client.get_channel_statuses(["ch", "unknown"])
    assert list(statuses) == ["ch"]
    assert statuses["ch"].last_committed_offset_token == "5"
    assert server.of("status")[-1].json == {wire.CHANNEL_NAMES: ["ch", "unknown"]}
    assert client.get_latest_committed_offset_tokens(["ch", "unknown"]) == {"ch": "5", "unknown": None}


def test_drop_channel_deletes_it_and_closes_the_local_object(
    server: FakeServer, make_client: MakeClient
) -> None:
    client = make_client()
    ch, _ = client.open_channel("ch")
    client.drop_channel("ch")
    (call,) = server.of("drop")
    assert (call.method, call.path) == ("DELETE", wire.channel_path(DB, SCHEMA, PIPE, "ch"))
    assert call.params[wire.REQUEST_ID]
    assert ch.is_closed
    with pytest.raises(ChannelClosedError, match="dropped by drop_channel"):
        ch.append_row({"ID": 1})
    with pytest.raises(StreamingRequestError, match="ERR_CHANNEL_DOES_NOT_EXIST_OR_NOT_AUTHORIZED") as info:
        client.drop_channel("ch")
    assert info.value.status == 404


# ------------------------------------------------------------------------------------------------
# Flush and close


def test_client_flush_sends_every_channel(server: FakeServer, make_client: MakeClient) -> None:
    client = make_client()
    a, _ = client.open_channel("a")
    b, _ = client.open_channel("b")
    a.append_row({"ID": 1})
    b.append_row({"ID": 2})
    client.wait_for_flush(timeout_seconds=30)
    assert (server.sent_rows("a"), server.sent_rows("b")) == ([{"ID": 1}], [{"ID": 2}])
    a.append_row({"ID": 3})
    client.initiate_flush()
    server.wait_for(lambda: len(server.channels["a"].rows) == 2)


def test_close_flushes_then_stops_and_refuses_further_calls(server: FakeServer, clock: FakeClock) -> None:
    with _client(server, clock, properties=PROPS) as client:
        ch, _ = client.open_channel("ch")
        ch.append_row({"ID": 1})
        threads = list(client._flusher._threads)
    assert server.sent_rows("ch") == [{"ID": 1}]
    assert client.is_closed and ch.is_closed and server.closed
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()
    with pytest.raises(ChannelClosedError, match="client was closed"):
        client.open_channel("ch")
    with pytest.raises(ChannelClosedError, match="client was closed"):
        ch.append_row({"ID": 2})
    client.close()  # twice is harmless


def test_close_without_flush_drops_the_rows(
    server: FakeServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    client = _client(server, clock, properties=PROPS)
    ch, _ = client.open_channel("ch")
    ch.append_rows([{"ID": 1}, {"ID": 2}])
    with caplog.at_level(logging.WARNING, "floe.streaming.client"):
        client.close(wait_for_flush=False)
    assert server.of("rows") == []
    assert "closed with 2 buffered rows dropped" in caplog.text


def test_an_unclosed_client_stops_when_collected(
    server: FakeServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    client = _client(server, clock, properties=PROPS)
    ch, _ = client.open_channel("ch")
    ch.append_row({"ID": 1})
    threads = list(client._flusher._threads)
    with caplog.at_level(logging.WARNING, "floe.streaming.client"):
        del client
        gc.collect()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()
    assert server.closed and ch.is_closed
    assert "was not closed: 1 buffered rows were dropped" in caplog.text


def test_public_names_are_exported() -> None:
    assert floe.streaming.StreamingIngestClient is StreamingIngestClient
    assert floe.streaming.ChannelInvalidError is ChannelInvalidError
    for name in floe.streaming.__all__:
        assert getattr(floe.streaming, name)
    with pytest.raises(AttributeError):
        _ = floe.streaming.NoSuchName
