"""The SDK's connection steps must not open doors (issue 32, gaps 1-6, 9, 10 of
docs/streaming-sdk-protocol.md): the hostname answer cannot be steered to a name the certificate
does not cover, a scoped token sent without its type header is checked as strictly as with it, the
JWT's ``scp`` role cannot raise a user above its grants, every exchange's token is new, telemetry
holds no unbounded body, and ``:pipe-info`` hands out none of Floe's own credentials.
"""

from __future__ import annotations

import time

import jwt
import pytest
import redis

from floe.settings import Settings
from floe.streaming import protocol as wire
from floe.tls import SERVER_CERT, ensure_tls, san_names, tls_dir
from front.client import auth_header
from services.api import create_app
from tests.asgi import AppClient
from tests.services.test_streaming_session import Session, keypair_jwt, session  # noqa: F401

pytestmark = pytest.mark.integration

TELEMETRY = "/telemetry/send/sessionless"


def test_the_hostname_cannot_be_steered_off_the_certificate(
    isolated_settings: Settings, redis_client: redis.Redis[bytes]
) -> None:
    from cryptography import x509

    settings = isolated_settings.model_copy(
        update={"api": isolated_settings.api.model_copy(update={"host": "0.0.0.0", "tls": "auto"})}
    )
    ensure_tls(settings)
    covered = san_names(x509.load_pem_x509_certificate((tls_dir(settings) / SERVER_CERT).read_bytes()))
    hosts = [
        "evil.example",
        "evil.example:443",
        '127.0.0.1"',
        '127.0.0.1", "x": "',
        "local\\host",
        "localhost.evil.example",
        "127.0.0.1:8443:9",
        "[::1]",
        "x" * 300,
        "0.0.0.0",
        "",
        "%31%32%37.0.0.1",
    ]
    with AppClient(create_app(settings, redis_client), base_url="https://testserver") as client:
        for host in hosts:
            resp = client.get(wire.HOSTNAME_PATH, headers={**auth_header(settings), "Host": host})
            assert resp.status_code == 200, (host, resp.text)
            assert resp.text in covered - {"0.0.0.0"}, (host, resp.text)


def test_a_scoped_token_without_its_type_header_is_checked_as_strictly(session: Session) -> None:  # noqa: F811
    path = wire.bulk_status_path("FLOE", "PUBLIC", session.pipe)
    good = session.exchange("WRITER_U").text
    claims = jwt.decode(good, options={"verify_signature": False})
    forged = jwt.encode(claims, "not-the-servers-secret-but-long-enough", algorithm="HS256")
    expired = jwt.encode(
        {**claims, "exp": int(time.time()) - 10}, "not-the-servers-secret-but-long-enough", algorithm="HS256"
    )
    for token in (forged, expired, good[:-3] + "AAA"):
        resp = session.client.post(
            path, json={"channel_names": []}, headers={"Authorization": f"Bearer {token}"}
        )
        assert resp.status_code == 401, resp.text
        assert resp.json()["code"] == "ERR_UNAUTHORIZED"
    # The scoped token still opens the streaming routes only.
    sql = session.client.post(
        "/api/v1/sql", json={"sql": "SELECT 1"}, headers={"Authorization": f"Bearer {good}"}
    )
    assert sql.status_code == 401 and "/v2/streaming" in sql.json()["message"], sql.text
    # A key-pair JWT without the header is a key-pair JWT, as before.
    keypair = {"Authorization": f"Bearer {keypair_jwt('WRITER_U', session.keys['WRITER_U'])}"}
    assert session.client.post(path, json={"channel_names": []}, headers=keypair).status_code == 200


@pytest.mark.parametrize(
    "role", ["ACCOUNTADMIN", "accountadmin", "SYSADMIN", "spare", "no_such_role", '"writer"']
)
def test_the_scp_role_cannot_raise_a_user_above_its_grants(session: Session, role: str) -> None:  # noqa: F811
    for resp in (
        session.client.get(wire.HOSTNAME_PATH, headers=session.keypair("WRITER_U", role)),
        session.exchange("WRITER_U", role),
        session.client.post(
            "/api/v1/sql", json={"sql": "SHOW USERS"}, headers=session.keypair("WRITER_U", role)
        ),
    ):
        assert resp.status_code == 400, resp.text
        assert "is not granted" in resp.json()["message"], resp.text


@pytest.mark.parametrize("scp", [17, ["session:role:writer"], "session:role:" + "R" * 300])
def test_a_malformed_scp_claim_is_refused(session: Session, scp: object) -> None:  # noqa: F811
    key = session.keys["WRITER_U"]
    claims = jwt.decode(keypair_jwt("WRITER_U", key), options={"verify_signature": False})
    token = jwt.encode({**claims, "scp": scp}, key, algorithm="RS256")
    resp = session.client.get(wire.HOSTNAME_PATH, headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code in (400, 401), resp.text
    assert "scp" in resp.json()["message"] or "role" in resp.json()["message"], resp.text


def test_every_exchange_gives_a_new_token(session: Session) -> None:  # noqa: F811
    tokens = [session.exchange("WRITER_U").text for _ in range(40)]
    assert len(set(tokens)) == len(tokens)


def test_telemetry_holds_no_unbounded_body(session: Session) -> None:  # noqa: F811
    headers = {**session.keypair("WRITER_U"), "Content-Type": "application/json"}
    big = b'{"logs": ["' + b"x" * (2 * 1024 * 1024) + b'"]}'
    resp = session.client.post(TELEMETRY, content=big, headers=headers)
    assert resp.status_code == 413, resp.text
    assert "telemetry" in resp.json()["message"].lower()
    assert session.client.post(TELEMETRY, json={"logs": []}).status_code == 401


def test_pipe_info_hands_out_none_of_floes_credentials(session: Session) -> None:  # noqa: F811
    resp = session.pipe_info(session.scoped("WRITER_U"))
    assert resp.status_code == 200, resp.text
    text = resp.text
    aws = session.settings.aws
    for secret in (aws.access_key_id, aws.secret_access_key.get_secret_value()):
        for where in ("rowset_stage_location", "durable_stage_location"):
            assert secret not in resp.json()[where]["creds"].values()
    assert session.settings.pipeline.tables_bucket not in text
