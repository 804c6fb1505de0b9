"""The API over HTTPS with a generated local CA (FLOE_API__TLS=auto): `floe sql`, the stack's probe and
the snowflake-ingest SDK verify against the CA; plain HTTP and clients without the CA are refused.

The module starts its own `floe api` (no consumer or Spark job: insertFiles only queues files) on a
free port with its own state directory, so the CA is generated fresh, on the session's Redis and
LocalStack.
"""

from __future__ import annotations

import json
import os
import ssl
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from snowflake.ingest import SimpleIngestManager, StagedFile

from bench.harness import unique
from floe.runtime import free_port
from floe.settings import Settings
from floe.tls import CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY, api_base_url, ensure_local_ca, tls_dir
from front.client import StatementRejected, run_sql
from infra.stack import _api_answers
from tests.conftest import TEST_INTEGRATION, Stack, wait_until
from tests.e2e.test_autoingest import csv_file
from tests.e2e.test_snowpipe_sdk import rest_pipe

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def tls_stack(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A `floe api` serving HTTPS with a certificate it generated under its fresh state directory."""
    state = tmp_path_factory.mktemp("floe-tls")
    settings = services.model_copy(
        update={
            "state_dir": str(state),
            "redis": services.redis.model_copy(update={"prefix": unique("tls")}),
            "api": services.api.model_copy(update={"port": free_port(), "tls": "auto"}),
            "pipeline": services.pipeline.model_copy(update={"tables_bucket": unique("tables")}),
            "encryption": services.encryption.model_copy(
                update={"master_key_file": str(state / "master.key")}
            ),
            "auth": services.auth.model_copy(update={"admin_key_file": str(state / "admin_rsa_key.p8")}),
        },
        deep=True,
    )
    env = {**os.environ, **settings.child_env(), "PYSPARK_PYTHON": sys.executable}
    logs = state / "logs"
    logs.mkdir()
    st = Stack(settings, env, {}, logs)
    try:
        st.start("api")
        # The ready file comes at application start-up, just before uvicorn binds the port.
        wait_until(lambda: _api_answers(settings), timeout=30, what="the API to answer /health over https")
        st.sql(TEST_INTEGRATION)
        yield st
    finally:
        st.stop("api")


def test_the_api_generated_its_ca_and_serves_https(tls_stack: Stack) -> None:
    directory = tls_dir(tls_stack.settings)
    for name in (CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, name
    assert api_base_url(tls_stack.settings).startswith("https://127.0.0.1:")
    assert "issued a server certificate for 127.0.0.1, localhost" in tls_stack.log_text("api")
    assert tls_stack.sql("SELECT 1 AS one") == [{"ONE": 1}]  # floe sql's client, verified against the CA


def test_plain_http_to_the_tls_port_fails(tls_stack: Stack) -> None:
    url = f"http://127.0.0.1:{tls_stack.settings.api.port}/health"
    # The server expects a TLS handshake, gets a request line, and hangs up without an HTTP answer.
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(url, timeout=10)
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(url, timeout=10)


def test_clients_without_the_ca_fail_verification(tls_stack: Stack, tmp_path: Path) -> None:
    url = f"{api_base_url(tls_stack.settings)}/health"
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(url, verify=ssl.create_default_context(), timeout=10)
    with pytest.raises(requests.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        requests.get(url, timeout=10)  # requests' own bundle (certifi) does not know the local CA
    other = tmp_path / "other"
    ensure_local_ca(other, "127.0.0.1")
    api = tls_stack.settings.api.model_copy(update={"tls": "files", "tls_ca_file": str(other / CA_CERT)})
    with pytest.raises(StatementRejected, match="certificate that does not verify"):
        run_sql(tls_stack.settings.model_copy(update={"api": api}), "SELECT 1")


def test_sdk_inserts_files_over_https_with_the_ca_in_its_trust_store(
    tls_stack: Stack, bucket: str, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe, _, user, pem = rest_pipe(tls_stack, bucket)  # also run through floe sql over https
    names = ["a.csv", "b.csv"]
    for i, name in enumerate(names):
        s3.put_object(Bucket=bucket, Key=f"rest/{name}", Body=csv_file(i * 10, 3))

    # How a user hands the SDK a private CA: requests reads REQUESTS_CA_BUNDLE.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls_dir(tls_stack.settings) / CA_CERT))
    sdk = SimpleIngestManager(
        account="floe",
        user=user,
        pipe=pipe,
        private_key=pem,
        scheme="https",
        host="127.0.0.1",
        port=tls_stack.settings.api.port,
    )
    assert sdk.ingest_files([StagedFile(n, None) for n in names])["responseCode"] == "SUCCESS"

    # The 200 comes once the files are durably queued; with no Spark job here they stay queued.
    report = sdk.get_history()
    assert sorted(f["path"] for f in report["files"]) == names
    assert report["statistics"]["activeFilesCount"] == 2
    status = tls_stack.sql(f"SELECT SYSTEM$PIPE_STATUS('{pipe}') AS s")[0]["S"]
    assert json.loads(status)["pendingFileCount"] == 2


def test_the_streaming_client_appends_over_https_and_verifies_the_ca(
    tls_stack: Stack, tmp_path: Path
) -> None:
    """The streaming client verifies the API against the CA (from the settings, or ca_file); with
    another CA it refuses to connect. No Spark job runs here: the appends stay durably queued."""
    from floe.streaming import StreamingConfigError, StreamingIngestClient

    table = unique("t_")
    tls_stack.sql(f"CREATE TABLE {table} (id INT)")
    with StreamingIngestClient(
        "tls", "FLOE", "PUBLIC", f"{table}-STREAMING", settings=tls_stack.settings
    ) as client:
        assert client.config.url.startswith("https://")
        channel, _ = client.open_channel("c")
        channel.append_rows([{"id": 1}, {"id": 2}], end_offset_token="2")
        channel.wait_for_flush(timeout_seconds=30)
    shown = tls_stack.sql(f"SHOW CHANNELS IN TABLE {table}")
    assert [(c["name"], c["row_sequencer"]) for c in shown] == [("c", 1)]
    other = tmp_path / "other"
    ensure_local_ca(other, "127.0.0.1")
    wrong = {"ca_file": str(other / CA_CERT), "max_retries": 0}
    with pytest.raises(StreamingConfigError, match="certificate that does not verify"):
        StreamingIngestClient(
            "tls", "FLOE", "PUBLIC", f"{table}-STREAMING", properties=wrong, settings=tls_stack.settings
        )
