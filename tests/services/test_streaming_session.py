"""What the official snowpipe-streaming SDK (1.9.1) needs before its first channel, in-process
against the real Redis: the hostname and token answers in the forms it parses, the role of its
JWT's ``scp`` claim, telemetry, ``:pipe-info``, coded errors on every streaming route, and names
with ``%2F`` routed on the raw path (docs/streaming-sdk-protocol.md, section 8, gaps 1-6, 9, 10).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
import redis
from cryptography.hazmat.primitives.asymmetric import rsa

from bench.harness import unique
from floe.keypair import fingerprint, new_private_key, public_key_body
from floe.settings import Settings
from floe.streaming import protocol as wire
from floe.tls import ensure_tls
from front.client import auth_header
from services.api import create_app
from tests.asgi import AppClient
from tests.conftest import TEST_INTEGRATION

pytestmark = pytest.mark.integration

FORM = "application/x-www-form-urlencoded"
PIPE_INFO_BODY = {"generate_new_token": True, "encryption_version": "AES-CTR-128.1"}
"""What the SDK sends to ``:pipe-info``."""


def keypair_jwt(user: str, key: rsa.RSAPrivateKey, role: str | None = None, account: str = "FLOE") -> str:
    """A key-pair JWT as the SDK 1.9.1 signs it: ``iat``/``exp`` in milliseconds, ``scp`` when a
    role is set, the role as written."""
    now_ms = int(time.time() * 1000)
    qualified = f"{account}.{user}".upper()
    claims: dict[str, Any] = {
        "iss": f"{qualified}.{fingerprint(key.public_key())}",
        "sub": qualified,
        "iat": now_ms,
        "exp": now_ms + 3_540_000,
    }
    if role is not None:
        claims["scp"] = f"session:role:{role}"
    return jwt.encode(claims, key, algorithm="RS256")


@dataclass
class Session:
    """An app on a private key prefix with a table, a streaming pipe, roles and users."""

    client: AppClient
    settings: Settings
    table: str
    pipe: str
    keys: dict[str, rsa.RSAPrivateKey]

    def sql(self, statement: str) -> Any:
        resp = self.client.post("/api/v1/sql", json={"sql": statement}, headers=auth_header(self.settings))
        assert resp.status_code == 200, resp.text
        return resp.json()

    def keypair(self, user: str, role: str | None = None) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {keypair_jwt(user, self.keys[user], role)}",
            "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT",
        }

    def exchange(self, user: str, role: str | None = None) -> Any:
        return self.client.post(
            wire.TOKEN_PATH,
            content=f"grant_type={wire.TOKEN_GRANT_TYPE}&scope=127.0.0.1",
            headers={**self.keypair(user, role), "Content-Type": FORM},
        )

    def scoped(self, user: str, role: str | None = None, type_header: bool = True) -> dict[str, str]:
        resp = self.exchange(user, role)
        assert resp.status_code == 200, resp.text
        headers = {"Authorization": f"Bearer {resp.text}"}
        if type_header:
            headers["X-Snowflake-Authorization-Token-Type"] = "OAUTH"
        return headers

    def pipe_info(self, headers: dict[str, str], pipe: str | None = None) -> Any:
        path = wire.pipe_path("FLOE", "PUBLIC", pipe or self.pipe) + ":pipe-info"
        return self.client.post(path, json=PIPE_INFO_BODY, headers=headers)


@pytest.fixture
def session(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> Iterator[Session]:
    app = create_app(isolated_settings, redis_client)
    s = Session(AppClient(app), isolated_settings, unique("t_"), unique("p_"), {})
    with s.client:
        s.sql(f"CREATE TABLE {s.table} (id INT, b BINARY)")
        s.sql(
            f"CREATE PIPE {s.pipe} AS COPY INTO {s.table} FROM (SELECT $1:id, $1:b "
            "FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
        )
        for role in ("writer", "watcher", "spare"):
            s.sql(f"CREATE ROLE {role}")
            s.sql(f"GRANT USAGE ON DATABASE FLOE TO ROLE {role}")
            s.sql(f"GRANT USAGE ON SCHEMA FLOE.PUBLIC TO ROLE {role}")
        s.sql(f"GRANT OPERATE ON PIPE {s.pipe} TO ROLE writer")
        s.sql(f"GRANT INSERT ON TABLE {s.table} TO ROLE writer")
        s.sql(f"GRANT MONITOR ON PIPE {s.pipe} TO ROLE watcher")
        # A role granted through another: USE ROLE takes it, so the JWT's scp does too.
        s.sql("CREATE ROLE inner_role")
        s.sql("GRANT ROLE inner_role TO ROLE writer")
        for user, role in (("WRITER_U", "writer"), ("WATCHER_U", "watcher"), ("NOBODY_U", None)):
            key = new_private_key()
            s.keys[user] = key
            default = f" DEFAULT_ROLE = {role}" if role else ""
            s.sql(f"CREATE USER {user} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}'{default}")
            if role:
                s.sql(f"GRANT ROLE {role} TO USER {user}")
        yield s


def assert_code(resp: Any, status: int, code: str, *fragments: str) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"code", "message"} and body["code"] == code, body
    for fragment in fragments:
        assert fragment in body["message"], body


# ------------------------------------------------------------------------------------------------
# 1. Hostname


def test_the_hostname_is_the_bare_host_as_plain_text(session: Session) -> None:
    resp = session.client.get(
        wire.HOSTNAME_PATH, headers={**session.keypair("WRITER_U"), "Host": "127.0.0.1:8443"}
    )
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    # No port (the SDK adds the account URL's), no quotes, no JSON.
    assert resp.text == "127.0.0.1"


def test_a_bind_all_api_answers_the_name_its_certificate_covers(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    settings = isolated_settings.model_copy(
        update={"api": isolated_settings.api.model_copy(update={"host": "0.0.0.0", "tls": "auto"})}
    )
    ensure_tls(settings)  # `floe api` makes the certificate before the app; it covers 127.0.0.1, localhost
    with AppClient(create_app(settings, redis_client), base_url="https://testserver") as client:
        auth = auth_header(settings)
        for host, answer in (
            ("127.0.0.1:8443", "127.0.0.1"),
            ("localhost:8443", "localhost"),
            ("LOCALHOST", "localhost"),
            ("floe.example.com:8443", "127.0.0.1"),  # not covered: the first name that is
            ("0.0.0.0:8443", "127.0.0.1"),  # a bind address is no host to connect to
        ):
            resp = client.get(wire.HOSTNAME_PATH, headers={**auth, "Host": host})
            assert (resp.status_code, resp.text) == (200, answer), host


def test_a_configured_host_is_answered_when_the_request_names_another(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    settings = isolated_settings.model_copy(
        update={"api": isolated_settings.api.model_copy(update={"host": "floe.internal", "tls": "auto"})}
    )
    ensure_tls(settings)
    with AppClient(create_app(settings, redis_client), base_url="https://testserver") as client:
        resp = client.get(wire.HOSTNAME_PATH, headers={**auth_header(settings), "Host": "10.9.8.7:8443"})
        assert (resp.status_code, resp.text) == (200, "floe.internal")


# ------------------------------------------------------------------------------------------------
# 2-3. Token exchange


def test_the_token_is_plain_text_a_jwt_with_seconds_and_a_unique_jti(session: Session) -> None:
    first, second = session.exchange("WRITER_U"), session.exchange("WRITER_U")
    assert first.status_code == second.status_code == 200, first.text
    assert first.headers["content-type"].startswith("text/plain")
    assert first.headers["cache-control"] == "no-store"
    assert '"' not in first.text and "\\" not in first.text and first.text.count(".") == 2
    # Two exchanges in the same second differ: a retried 401 must not get the token that failed.
    assert first.text != second.text
    header = jwt.get_unverified_header(first.text)
    claims = jwt.decode(first.text, options={"verify_signature": False})
    assert header["alg"] == "HS256"
    assert claims["exp"] - claims["iat"] == session.settings.auth.scoped_token_lifetime_s
    assert abs(claims["exp"] - time.time() - session.settings.auth.scoped_token_lifetime_s) < 60  # seconds
    assert claims["jti"] != jwt.decode(second.text, options={"verify_signature": False})["jti"]


@pytest.mark.parametrize("type_header", [True, False])
def test_the_scoped_token_works_with_or_without_its_type_header(session: Session, type_header: bool) -> None:
    headers = session.scoped("WRITER_U", type_header=type_header)
    opened = session.client.put(
        wire.channel_path("FLOE", "PUBLIC", session.pipe, "c1"), json={}, headers=headers
    )
    assert opened.status_code == 200, opened.text
    status = session.client.post(
        wire.bulk_status_path("FLOE", "PUBLIC", session.pipe), json={"channel_names": ["c1"]}, headers=headers
    )
    assert status.status_code == 200, status.text
    assert list(status.json()["channel_statuses"]) == ["c1"]


# ------------------------------------------------------------------------------------------------
# 4. The role of the JWT's scp claim


def sql_as(session: Session, headers: dict[str, str], statement: str = "SELECT 1") -> Any:
    return session.client.post("/api/v1/sql", json={"sql": statement}, headers=headers)


def owner_of_a_new_table(session: Session, headers: dict[str, str]) -> str:
    """The role that owns a table the caller creates: its current role."""
    table = unique("owned_")
    resp = sql_as(session, headers, f"CREATE TABLE {table} (a INT)")
    assert resp.status_code == 200, resp.text
    shown = session.sql(f"SHOW TABLES LIKE '{table.upper()}'")
    (row,) = [dict(zip(shown["columns"], r, strict=True)) for r in shown["rows"]]
    return str(row["owner"])


def test_the_scp_role_is_the_current_role(session: Session) -> None:
    session.sql("GRANT CREATE TABLE ON SCHEMA FLOE.PUBLIC TO ROLE inner_role")
    # As written by the user: an unquoted role name is upper-cased as SQL reads it.
    assert owner_of_a_new_table(session, session.keypair("WRITER_U", role="inner_role")) == "INNER_ROLE"
    assert owner_of_a_new_table(session, session.keypair("WRITER_U")) == "WRITER"
    # The scoped token carries the role to the streaming routes.
    token = session.exchange("WRITER_U", role="writer").text
    assert jwt.decode(token, options={"verify_signature": False})["role"] == "WRITER"


def test_a_role_not_granted_is_refused_clearly(session: Session) -> None:
    for path in (wire.HOSTNAME_PATH, "/api/v1/sql"):
        headers = session.keypair("WRITER_U", role="spare")
        resp = (
            session.client.get(path, headers=headers)
            if path == wire.HOSTNAME_PATH
            else sql_as(session, headers)
        )
        assert resp.status_code == 400, resp.text
        assert "SPARE" in resp.json()["message"] and "not granted" in resp.json()["message"]
    refused = session.exchange("WRITER_U", role="spare")
    assert_code(refused, 400, wire.Code.BAD_REQUEST, "Role 'SPARE'", "GRANT ROLE")


def test_revoking_the_role_ends_its_scoped_tokens(session: Session) -> None:
    headers = session.scoped("WATCHER_U", role="watcher")
    path = wire.bulk_status_path("FLOE", "PUBLIC", session.pipe)
    assert session.client.post(path, json={"channel_names": []}, headers=headers).status_code == 200
    session.sql("REVOKE ROLE watcher FROM USER WATCHER_U")
    refused = session.client.post(path, json={"channel_names": []}, headers=headers)
    assert_code(refused, 400, wire.Code.BAD_REQUEST, "Role 'WATCHER'", "is not granted")


# ------------------------------------------------------------------------------------------------
# 5. Telemetry


def test_telemetry_is_accepted_and_discarded(session: Session) -> None:
    body = {"logs": [{"timestamp": "1", "message": {"type": "ssv2_client_metrics", "client_name": "c"}}]}
    resp = session.client.post("/telemetry/send/sessionless", json=body, headers=session.keypair("WRITER_U"))
    assert resp.status_code == 200, resp.text
    # data must be a string: the SDK fails to read null there (its final flush said so).
    assert resp.json() == {"data": "discarded", "success": True}


# ------------------------------------------------------------------------------------------------
# 6. Pipe info


def test_pipe_info_answers_what_the_sdk_parses_and_keeps_it_in_rowset_mode(session: Session) -> None:
    resp = session.pipe_info(session.scoped("WRITER_U"))
    assert resp.status_code == 200, resp.text
    info = resp.json()
    assert set(info) == {
        "rowset_stage_location",
        "durable_stage_location",
        "encryption_info",
        "parameter_overrides",
    }
    now_ms = time.time() * 1000
    for where in ("rowset_stage_location", "durable_stage_location"):
        location = info[where]
        assert location["location_type"] == "S3"
        assert isinstance(location["location"], str) and location["location"].endswith("/")
        assert isinstance(location["region"], str) and location["use_s3_regional_url"] is False
        assert set(location["creds"]) == {"AWS_KEY_ID", "AWS_SECRET_KEY", "AWS_TOKEN"}
        assert all(isinstance(v, str) and v for v in location["creds"].values())
        assert isinstance(location["expiry_time_ms"], int) and location["expiry_time_ms"] > now_ms + 600_000
        assert "parameters" not in location or location["parameters"] is None
    encryption = info["encryption_info"]
    assert set(encryption) == {"pipe_key_id", "pipe_key", "diversifier"}
    assert all(isinstance(v, str | int) and v is not None for v in encryption.values())
    overrides = info["parameter_overrides"]
    # The pipe's BINARY_FORMAT (HEX by default) is how the SDK is told to write bytes.
    assert overrides["binary_input_format"] == "HEX"
    assert isinstance(overrides["max_append_request_buffer_duration_ms"], int)


def test_pipe_info_of_the_default_pipe_and_a_monitor(session: Session) -> None:
    default = f"{session.table}-STREAMING"
    assert session.pipe_info(session.scoped("WRITER_U"), pipe=default).status_code == 200
    assert session.pipe_info(session.scoped("WATCHER_U")).status_code == 200


def test_pipe_info_refusals_are_the_404_of_a_missing_pipe(session: Session) -> None:
    assert_code(
        session.pipe_info(session.scoped("WRITER_U"), pipe="nope"), 404, wire.Code.PIPE_DOES_NOT_EXIST
    )
    missing = session.pipe_info(session.scoped("NOBODY_U"), pipe="nope")
    unseen = session.pipe_info(session.scoped("NOBODY_U"))
    assert_code(unseen, 404, wire.Code.PIPE_DOES_NOT_EXIST)
    assert unseen.json()["message"].replace(session.pipe.upper(), "NOPE") == missing.json()["message"]
    # Its owner learns why a file pipe has no pipe info.
    session.sql(TEST_INTEGRATION)
    session.sql(f"CREATE STAGE st URL = 's3://{unique('b')}/in/' STORAGE_INTEGRATION = floe_tests")
    session.sql(f"CREATE PIPE files AS COPY INTO {session.table} FROM @st FILE_FORMAT = (TYPE = JSON)")
    admin = {**auth_header(session.settings), "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT"}
    assert_code(session.pipe_info(admin, pipe="files"), 400, wire.Code.BAD_REQUEST, "loads files")


# ------------------------------------------------------------------------------------------------
# 9. Coded errors


def test_a_missing_privilege_is_the_404_the_sdk_does_not_retry(session: Session) -> None:
    # MONITOR sees the pipe but may not write: Snowflake's 404, not a 403 the SDK would retry as a
    # bad token for hours; the message still says what it takes.
    opened = session.client.put(
        wire.channel_path("FLOE", "PUBLIC", session.pipe, "c"), json={}, headers=session.scoped("WATCHER_U")
    )
    assert_code(opened, 404, wire.Code.PIPE_DOES_NOT_EXIST, "OPERATE")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2/streaming/nothing-here"),
        ("POST", "/v2/streaming/databases/FLOE/schemas/PUBLIC/pipes/P:no-such-action"),
        ("POST", "/v2/streaming/data/databases/FLOE/schemas/PUBLIC/pipes/P/channels/c/filebuffer"),
        ("GET", "/v2/streaming/databases/FLOE/schemas/PUBLIC/pipes/P/channels/c"),
    ],
)
def test_unknown_streaming_routes_answer_with_a_code(session: Session, method: str, path: str) -> None:
    resp = session.client.request(method, path, headers=session.scoped("WRITER_U"))
    assert resp.status_code in (404, 405), resp.text
    body = resp.json()
    assert set(body) == {"code", "message"} and body["code"].startswith("ERR_"), body
    assert path.split("?")[0] in body["message"] or method in body["message"], body


# ------------------------------------------------------------------------------------------------
# 10. Names on the raw path


@pytest.mark.parametrize("channel", ["a/b", "100%", "x%2Fy", "sp ace&=?#"])
def test_a_name_with_an_encoded_slash_reaches_its_route(session: Session, channel: str) -> None:
    headers = session.scoped("WRITER_U")
    opened = session.client.put(
        wire.channel_path("FLOE", "PUBLIC", session.pipe, channel), json={}, headers=headers
    )
    assert opened.status_code == 200, opened.text
    assert opened.json()["channel_status"]["channel_name"] == channel
    status = session.client.post(
        wire.bulk_status_path("FLOE", "PUBLIC", session.pipe),
        json={"channel_names": [channel]},
        headers=headers,
    )
    assert list(status.json()["channel_statuses"]) == [channel]


def test_a_quoted_pipe_name_with_a_slash_reaches_its_route(session: Session) -> None:
    name = f"s/{uuid.uuid4().hex[:6]}"
    session.sql(
        f'CREATE PIPE "{name}" AS COPY INTO {session.table} FROM (SELECT $1:id '
        "FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
    )
    admin = {**auth_header(session.settings), "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT"}
    resp = session.pipe_info(admin, pipe=f'"{name}"')
    assert resp.status_code == 200, resp.text
    opened = session.client.put(wire.channel_path("FLOE", "PUBLIC", f'"{name}"', "c"), json={}, headers=admin)
    assert opened.status_code == 200, opened.text
    assert opened.json()["channel_status"]["pipe_name"] == name
