"""The Snowpipe REST endpoints and their authentication, in-process against the real Redis.

Each test gets its own key prefix, so users, pipes and queues never leak between tests. The
end-to-end path through the official SDK and the Spark job is in tests/e2e/test_snowpipe_sdk.py.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import quote

import jwt
import pytest
import redis
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from bench.harness import unique
from floe.catalog import Catalog, Pipe
from floe.history import FileState
from floe.keypair import fingerprint, new_private_key, public_key_body
from floe.keys import Keys
from floe.settings import Settings
from front.client import auth_header
from pipeline.registrar import PipeCommit, Registrar
from services.api import create_app
from services.auth import NO_MATCHING_KEY
from tests.asgi import AppClient
from tests.conftest import TEST_INTEGRATION

pytestmark = pytest.mark.integration


def token(
    user: str,
    key: rsa.RSAPrivateKey,
    *,
    account: str = "FLOE",
    iat: float | None = None,
    lifetime: float = 3540,
    fp_of: rsa.RSAPrivateKey | None = None,
    alg: str = "RS256",
    scale: int = 1,
) -> str:
    """A key-pair JWT as the SDK builds it, with knobs to break each part."""
    now = time.time() if iat is None else iat
    q = f"{account}.{user}".upper()
    claims = {
        "iss": f"{q}.{fingerprint((fp_of or key).public_key())}",
        "sub": q,
        "iat": int(now * scale),
        "exp": int((now + lifetime) * scale),
    }
    signer: Any = key if alg == "RS256" else "a-shared-secret-of-32-bytes-or-more!"
    return jwt.encode(claims, signer, algorithm=alg)


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


@dataclass
class Api:
    """An app on a private key prefix, with a pipe and users holding different privileges."""

    client: AppClient
    settings: Settings
    redis: redis.Redis[bytes]
    pipe: Pipe
    keys: dict[str, rsa.RSAPrivateKey]

    def sql(self, statement: str) -> dict[str, Any]:
        resp = self.client.post("/api/v1/sql", json={"sql": statement}, headers=auth_header(self.settings))
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def url(self, endpoint: str, pipe: str | None = None) -> str:
        return f"/v1/data/pipes/{pipe or self.pipe.name}/{endpoint}?requestId={uuid.uuid4()}"

    def insert(self, user: str, paths: list[str], **kw: Any) -> Any:
        return self.client.post(
            self.url("insertFiles") + kw.pop("query", ""),
            json={"files": [{"path": p, "size": 10} for p in paths]},
            headers=bearer(token(user, self.keys[user])),
            **kw,
        )

    def queued(self) -> int:
        return int(self.redis.xlen(Keys(self.settings.redis.prefix).queue(self.pipe.id)))

    def __enter__(self) -> Api:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.client.close()


def make_api(settings: Settings, client: redis.Redis[bytes], pattern: str | None = None) -> Api:
    app = create_app(settings, client)
    api = Api(AppClient(app), settings, client, None, {})  # type: ignore[arg-type]
    try:
        _populate(api, client, settings, pattern)
    except BaseException:
        api.client.close()  # a failed setup must not leave the portal thread running
        raise
    return api


def _populate(api: Api, client: redis.Redis[bytes], settings: Settings, pattern: str | None) -> None:
    """Create the stage, table and pipe, the two roles, and the three users with their keys."""
    stage, table, pipe = unique("st_"), unique("t_"), unique("p_")
    api.sql(TEST_INTEGRATION)
    api.sql(
        f"CREATE STAGE {stage} URL = 's3://{unique('b')}/in/' STORAGE_INTEGRATION = floe_tests "
        "FILE_FORMAT = (TYPE = CSV)"
    )
    api.sql(f"CREATE TABLE {table} (a INT, b VARCHAR)")
    where = f" PATTERN = '{pattern}'" if pattern else ""
    api.sql(f"CREATE PIPE {pipe} AS COPY INTO {table} FROM @{stage}{where}")
    api.pipe = Catalog(client, Keys(settings.redis.prefix)).get(Pipe, f"FLOE.PUBLIC.{pipe.upper()}")
    api.sql("CREATE ROLE loader")
    api.sql("CREATE ROLE watcher")
    for role in ("loader", "watcher"):
        api.sql(f"GRANT USAGE ON DATABASE FLOE TO ROLE {role}")
        api.sql(f"GRANT USAGE ON SCHEMA FLOE.PUBLIC TO ROLE {role}")
    api.sql(f"GRANT OPERATE ON PIPE {pipe} TO ROLE loader")
    api.sql(f"GRANT MONITOR ON PIPE {pipe} TO ROLE watcher")
    for user, role in (("LOADER_U", "loader"), ("WATCHER_U", "watcher"), ("NOBODY_U", None)):
        key = new_private_key()
        api.keys[user] = key
        default = f" DEFAULT_ROLE = {role}" if role else ""
        api.sql(f"CREATE USER {user} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}'{default}")
        if role:
            api.sql(f"GRANT ROLE {role} TO USER {user}")


@pytest.fixture
def api(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> Iterator[Api]:
    built = make_api(isolated_settings, redis_client)
    with built:
        yield built


def assert_error(resp: Any, status: int, *fragments: str) -> dict[str, Any]:
    """The status and Snowflake's error body, and the message never echoes credentials."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"code", "success", "message", "data"} and body["success"] is False
    for fragment in fragments:
        assert fragment in body["message"], body["message"]
    auth = resp.request.headers.get("authorization", "")
    if auth:
        assert auth.split(" ")[-1] not in resp.text
    assert "PRIVATE KEY" not in resp.text and "MII" not in resp.text
    return dict(body)


def test_insert_files_enqueues_once_and_reports_skips(api: Api) -> None:
    resp = api.insert("LOADER_U", ["a.csv", "/sub/b.csv"])
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["responseCode"] == "SUCCESS" and body["requestId"]
    assert api.queued() == 2
    again = api.insert("LOADER_U", ["a.csv", "c.csv"], query="&showSkippedFiles=true")
    assert again.status_code == 200
    assert [f["path"] for f in again.json()["skippedFiles"]] == ["a.csv"]
    assert api.queued() == 3


def test_text_plain_body_and_case_insensitive_pipe_name(api: Api) -> None:
    resp = api.client.post(
        api.url("insertFiles", api.pipe.name.lower()),
        content="x.csv\r\n\ny.csv\n",
        headers={**bearer(token("LOADER_U", api.keys["LOADER_U"])), "Content-Type": "text/plain"},
    )
    assert resp.status_code == 200, resp.text
    assert api.queued() == 2


def test_pattern_lists_unmatched_files(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> None:
    with make_api(isolated_settings, redis_client, pattern=".*[.]csv") as api:
        resp = api.insert("LOADER_U", ["ok.csv", "skip.json"])
        assert resp.status_code == 200
        assert resp.json()["unmatchedPatternFiles"] == [{"path": "skip.json"}]
        assert api.queued() == 1


def test_insert_report_and_load_history_scan(api: Api) -> None:
    before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 5))
    assert api.insert("LOADER_U", ["one.csv", "two.csv"]).status_code == 200
    watcher = bearer(token("WATCHER_U", api.keys["WATCHER_U"]))
    report = api.client.get(api.url("insertReport"), headers=watcher).json()
    assert report["pipe"] == api.pipe.name and report["completeResult"] is True
    assert {f["path"]: f["status"] for f in report["files"]} == {
        "one.csv": "LOAD_IN_PROGRESS",
        "two.csv": "LOAD_IN_PROGRESS",
    }

    # The registrar commits one file, as the Spark job would.
    keys = Keys(api.settings.redis.prefix)
    sid = api.redis.xrange(keys.queue(api.pipe.id), count=1)[0][0].decode()
    state = FileState.model_validate_json(api.redis.get(keys.file(api.pipe.id, "one.csv")))  # type: ignore[arg-type]
    done = state.model_copy(update={"status": "LOADED", "rows_parsed": 3, "rows_loaded": 3, "loaded_ms": 1})
    Registrar(api.redis, keys, 3600).commit(
        PipeCommit(api.pipe.id, [], [(done, sid)]), "q", 0, int(time.time() * 1000)
    )

    report = api.client.get(
        api.url("insertReport") + f"&beginMark={report['nextBeginMark']}", headers=watcher
    ).json()
    entries = {f["path"]: f for f in report["files"]}
    assert entries["one.csv"]["status"] == "LOADED" and entries["one.csv"]["rowsInserted"] == 3
    assert entries["one.csv"]["complete"] is True and entries["one.csv"]["fileSize"] == 10
    assert entries["two.csv"]["status"] == "LOAD_IN_PROGRESS"
    later = api.client.get(
        api.url("insertReport") + f"&beginMark={report['nextBeginMark']}", headers=watcher
    ).json()
    assert [f["path"] for f in later["files"]] == ["two.csv"]  # the event was consumed; in flight stays

    scan = api.client.get(api.url("loadHistoryScan") + f"&startTimeInclusive={before}", headers=watcher)
    assert scan.status_code == 200, scan.text
    body = scan.json()
    assert body["completeResult"] == "true"
    assert sorted(f["path"] for f in body["files"]) == ["one.csv", "two.csv"]
    future = api.client.get(
        api.url("loadHistoryScan") + "&startTimeInclusive=2999-01-01T00:00:00Z", headers=watcher
    ).json()
    assert future["files"] == []
    assert_error(api.client.get(api.url("loadHistoryScan"), headers=watcher), 400, "startTimeInclusive")


def test_authentication_failures_answer_401_and_say_why(api: Api) -> None:
    key = api.keys["LOADER_U"]
    url = api.url("insertFiles")
    body = {"files": [{"path": "a.csv"}]}
    cases = [
        ({}, "Authorization header is missing"),
        ({"Authorization": "Basic dXNlcjpwdw=="}, "Bearer"),
        (bearer("not-a-jwt"), "not a well-formed JWT"),
        (bearer(token("LOADER_U", new_private_key())), NO_MATCHING_KEY),
        (bearer(token("LOADER_U", new_private_key(), fp_of=key)), NO_MATCHING_KEY),
        (bearer(token("LOADER_U", key, iat=time.time() - 7200, lifetime=3600)), "expired"),
        (bearer(token("LOADER_U", key, lifetime=7200)), "more than 3600 s after iat"),
        (bearer(token("LOADER_U", key, iat=time.time() + 600)), "issued in the future"),
        (bearer(token("LOADER_U", key, account="OTHER")), "account 'OTHER'"),
        (bearer(token("GHOST_U", key)), NO_MATCHING_KEY),  # one answer: user names stay secret
        (bearer(token("WATCHER_U", key)), NO_MATCHING_KEY),  # another user's name
        (bearer(token("LOADER_U", key, alg="HS256")), "algorithm 'HS256'"),
        (
            {**bearer(token("LOADER_U", key)), "X-Snowflake-Authorization-Token-Type": "OAUTH"},
            "opens only the /v2/streaming routes",
        ),
        (
            {**bearer(token("LOADER_U", key)), "X-Snowflake-Authorization-Token-Type": "SNOWFLAKE"},
            "only KEYPAIR_JWT",
        ),
    ]
    unsigned = jwt.encode({"sub": "FLOE.LOADER_U", "iss": "x"}, None, algorithm="none")  # type: ignore[arg-type]
    cases.append((bearer(unsigned), "algorithm 'none'"))
    for headers, why in cases:
        assert_error(api.client.post(url, json=body, headers=headers), 401, why)
    assert api.queued() == 0


def test_tokens_in_milliseconds_and_the_second_key_are_accepted(api: Api) -> None:
    key = api.keys["LOADER_U"]
    assert (
        api.client.post(
            api.url("insertFiles"),
            json={"files": [{"path": "ms.csv"}]},
            headers={
                **bearer(token("LOADER_U", key, scale=1000)),
                "X-Snowflake-Authorization-Token-Type": "KEYPAIR_JWT",
            },
        ).status_code
        == 200
    )
    rotated = new_private_key()
    api.sql(f"ALTER USER LOADER_U SET RSA_PUBLIC_KEY_2 = '{public_key_body(rotated.public_key())}'")
    resp = api.client.post(
        api.url("insertFiles"),
        json={"files": [{"path": "k2.csv"}]},
        headers=bearer(token("LOADER_U", rotated)),
    )
    assert resp.status_code == 200, resp.text
    api.sql("ALTER USER LOADER_U UNSET RSA_PUBLIC_KEY")
    old = bearer(token("LOADER_U", key))
    assert_error(api.client.post(api.url("insertFiles"), json={"files": [{"path": "z"}]}, headers=old), 401)


def test_privileges_unknown_pipes_and_bad_requests(api: Api) -> None:
    loader = bearer(token("LOADER_U", api.keys["LOADER_U"]))
    # The watcher sees the pipe (MONITOR, and USAGE on its database and schema) but may not load.
    assert_error(api.insert("WATCHER_U", ["a.csv"]), 403, "Insufficient privileges", "OPERATE")
    # Nobody holds nothing: the pipe answers as a missing one does, so its existence does not leak.
    assert_error(api.insert("NOBODY_U", ["a.csv"]), 404, "not found")
    nobody = bearer(token("NOBODY_U", api.keys["NOBODY_U"]))
    assert_error(api.client.get(api.url("insertReport"), headers=nobody), 404, "not found")
    assert api.client.get(api.url("insertReport"), headers=loader).status_code == 200  # OPERATE may read
    assert_error(
        api.client.post(
            api.url("insertFiles", "FLOE.PUBLIC.NO_SUCH_PIPE"), json={"files": []}, headers=loader
        ),
        404,
        "not found",
    )
    url = api.url("insertFiles")
    too_many = {"files": [{"path": f"f{i}.csv"} for i in range(5001)]}
    assert_error(api.client.post(url, json=too_many, headers=loader), 400, "5001 files", "at most 5000")
    long_path = {"files": [{"path": "é" * 513}]}  # 1,026 UTF-8 bytes
    assert_error(api.client.post(url, json=long_path, headers=loader), 400, "1026 bytes")
    assert api.client.post(url, json={"files": [{"path": "é" * 512}]}, headers=loader).status_code == 200
    assert_error(
        api.client.post(url, content=b"a.csv", headers={**loader, "Content-Type": "application/xml"}),
        415,
        "application/xml",
    )
    assert_error(
        api.client.post(url, content=b"{", headers={**loader, "Content-Type": "application/json"}), 400
    )
    assert_error(
        api.client.post(url, json={"files": [{"path": "a", "size": -1}]}, headers=loader), 400, "size"
    )
    assert_error(
        api.client.get(api.url("insertReport") + "&recentSeconds=soon", headers=loader), 400, "recentSeconds"
    )
    assert api.queued() == 1


def test_rate_limit_answers_429(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> None:
    settings = isolated_settings.model_copy(
        update={
            "auth": isolated_settings.auth.model_copy(
                update={"rate_limit_per_s": 0.01, "rate_limit_burst": 2}
            )
        }
    )
    with make_api(settings, redis_client) as api:
        statuses = [api.insert("LOADER_U", [f"r{i}.csv"]).status_code for i in range(3)]
        assert statuses == [200, 200, 429]
        assert_error(api.insert("LOADER_U", ["r9.csv"]), 429, "Too many requests")


def test_sql_endpoint_needs_a_token(api: Api) -> None:
    resp = api.client.post("/api/v1/sql", json={"sql": "SHOW PIPES"})
    assert resp.status_code == 401 and "Authorization header is missing" in resp.json()["message"]
    other = bearer(token("NOBODY_U", api.keys["NOBODY_U"]))
    denied = api.client.post("/api/v1/sql", json={"sql": "CREATE USER x"}, headers=other)
    assert denied.status_code == 403, denied.text
    assert api.client.get("/health").status_code == 200  # health and metrics stay open
    assert "floe_api_requests" in api.client.get("/metrics").text


@hyp_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    content_type=st.sampled_from(["application/json", "text/plain", "application/octet-stream", ""]),
    body=st.binary(max_size=200)
    | st.builds(
        lambda paths: json.dumps({"files": [{"path": p} for p in paths]}).encode(),
        st.lists(st.text(max_size=30), max_size=5),
    ),
    pipe_name=st.text(max_size=20),
)
def test_no_request_gets_a_500(api: Api, content_type: str, body: bytes, pipe_name: str) -> None:
    """Arbitrary bodies, paths and pipe names answer 2xx or 4xx, through the whole HTTP stack."""
    headers = {**bearer(token("LOADER_U", api.keys["LOADER_U"])), "Content-Type": content_type}
    for name in (api.pipe.name, pipe_name):
        resp = api.client.post(
            f"/v1/data/pipes/{quote(name, safe='')}/insertFiles", content=body, headers=headers
        )
        assert resp.status_code < 500, resp.text
