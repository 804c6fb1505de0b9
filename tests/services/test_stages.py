"""Internal stages through the real API (uvicorn, the gate, the transfer routes) on the real Redis
and LocalStack, driven by the client's PUT and GET (``front.transfer``) and by LIST and REMOVE over
SQL: files at rest are sealed, each privilege rule is Snowflake's, external stages are listed and
cleaned within their integration, and dropped or replaced stages take their files with them.
Loading an internal stage's files through a pipe: tests/e2e/test_internal_stages.py."""

from __future__ import annotations

import gzip
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from typer.testing import CliRunner

from bench.harness import unique
from floe.catalog.names import Defaults
from floe.catalog.stage_commands import GetFiles, PutFiles, parse_file_command
from floe.keypair import new_private_key, private_key_pem, public_key_body
from floe.runtime import free_port
from floe.settings import Settings
from floe.stage_crypto import MAGIC, stage_cipher, stored_size
from front import cli as cli_module
from front.client import StatementRejected, auth_header, records, run_sql, upload_file
from front.transfer import Caller, get, put
from tests.conftest import TEST_INTEGRATION
from tests.services.conftest import serving

pytestmark = pytest.mark.integration

MAX_FILE = 12 * 1024 * 1024


@dataclass
class Served:
    """The API on a port of its own, with a stages bucket of its own."""

    settings: Settings
    s3: Any
    keys: Path

    def sql(self, statement: str, who: Caller | None = None) -> list[dict[str, Any]]:
        auth = who.auth() if who is not None else {}
        return records(run_sql(self.settings, statement, **auth))

    def objects(self, prefix: str = "") -> dict[str, bytes]:
        bucket = self.settings.stages.bucket
        listed = self.s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
        return {o["Key"]: self.s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}

    def user(self, role: str) -> Caller:
        """A new user whose default role is ``role`` (created), signing with a key of its own."""
        name = unique("u_")
        key = new_private_key()
        path = self.keys / f"{name}.p8"
        path.write_text(private_key_pem(key))
        self.sql(f"CREATE ROLE IF NOT EXISTS {role}")
        self.sql(
            f"CREATE USER {name} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}' DEFAULT_ROLE = {role}"
        )
        self.sql(f"GRANT ROLE {role} TO USER {name}")
        self.sql(
            f"GRANT USAGE ON DATABASE floe TO ROLE {role}; GRANT USAGE ON SCHEMA floe.public TO ROLE {role}"
        )
        return Caller(self.settings, name, str(path))


@pytest.fixture
def served(
    isolated_settings: Settings, redis_client: redis.Redis[bytes], s3: Any, tmp_path: Path
) -> Iterator[Served]:
    """uvicorn serving the app with its own HTTP protocol and a fresh stages bucket."""
    port = free_port()
    settings = isolated_settings.model_copy(
        update={
            "api": isolated_settings.api.model_copy(update={"host": "127.0.0.1", "port": port, "tls": "off"}),
            "stages": isolated_settings.stages.model_copy(
                update={"bucket": unique("stages"), "part_bytes": 5 * 1024 * 1024, "max_file_bytes": MAX_FILE}
            ),
            "encryption": isolated_settings.encryption.model_copy(
                update={"master_key_file": str(tmp_path / "master.key")}
            ),
        }
    )
    keys = tmp_path / "keys"
    keys.mkdir()
    with serving(settings, redis_client):
        served = Served(settings, s3, keys)
        served.sql(TEST_INTEGRATION)
        yield served


def admin(served: Served) -> Caller:
    return Caller(served.settings)


def put_rows(served: Served, statement: str, who: Caller | None = None) -> list[dict[str, Any]]:
    parsed = served_parse(served, statement)
    assert isinstance(parsed, PutFiles)
    outcome = put(parsed, who or admin(served))
    return [dict(zip(outcome.columns, r, strict=True)) for r in outcome.rows]


def get_rows(served: Served, statement: str, who: Caller | None = None) -> list[dict[str, Any]]:
    parsed = served_parse(served, statement)
    assert isinstance(parsed, GetFiles)
    outcome = get(parsed, who or admin(served))
    return [dict(zip(outcome.columns, r, strict=True)) for r in outcome.rows]


def served_parse(served: Served, statement: str) -> object:
    return parse_file_command(statement, Defaults())


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


CSV = b"id,name\n" + b"".join(b"%d,name %d\n" % (i, i) for i in range(200))


def test_put_list_get_round_trip_with_the_files_sealed_at_rest(served: Served, tmp_path: Path) -> None:
    stage = unique("st_")
    served.sql(f"CREATE STAGE {stage} FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1) COMMENT = 'uploads'")
    local = tmp_path / "local"
    write(local / "a.csv", CSV)
    write(local / "b.csv.gz", gzip.compress(b"x,y\n1,2\n"))
    write(local / "c.json", b'{"a": 1}\n')
    write(local / "skip.txt", b"not matched by the glob")

    rows = put_rows(served, f"PUT 'file://{local}/?.*s*' @{stage}/in PARALLEL = 2")
    assert [
        (r["source"], r["target"], r["source_compression"], r["target_compression"], r["status"])
        for r in rows
    ] == [
        ("a.csv", "a.csv.gz", "NONE", "GZIP", "UPLOADED"),
        ("b.csv.gz", "b.csv.gz", "GZIP", "GZIP", "UPLOADED"),
        ("c.json", "c.json.gz", "NONE", "GZIP", "UPLOADED"),
    ]
    assert rows[0]["source_size"] == len(CSV) and 0 < rows[0]["target_size"] < len(CSV)

    listed = served.sql(f"LIST @{stage}")
    assert [r["name"] for r in listed] == [
        f"{stage.lower()}/in/{n}" for n in ("a.csv.gz", "b.csv.gz", "c.json.gz")
    ]
    assert [r["size"] for r in listed] == [r["target_size"] for r in rows]
    assert all(
        re.fullmatch(r"[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT", r["last_modified"])
        for r in listed
    )

    # At rest: sealed, the size LIST shows is what was PUT, the md5 is the stored object's (as
    # Snowflake's, it differs from the local file's), and only Floe's key opens it.
    stored = served.objects()
    assert len(stored) == 3
    for row, (key, body) in zip(listed, sorted(stored.items()), strict=True):
        assert body.startswith(MAGIC) and b"name 1" not in body
        assert len(body) == stored_size(row["size"])
        etag = served.s3.head_object(Bucket=served.settings.stages.bucket, Key=key)["ETag"].strip('"')
        assert row["md5"] == etag
    a_key = next(k for k in stored if k.endswith("in/a.csv.gz"))
    enc = served.settings.encryption
    assert (
        gzip.decompress(stage_cipher(enc.master_key_id, enc.resolve_master_key()).open(stored[a_key], a_key))
        == CSV
    )

    out = tmp_path / "out"
    got = get_rows(served, f"GET @{stage}/in file://{out}/ PATTERN = '.*[.]csv[.]gz'")
    assert [(r["file"], r["status"]) for r in got] == [("a.csv.gz", "DOWNLOADED"), ("b.csv.gz", "DOWNLOADED")]
    assert gzip.decompress((out / "a.csv.gz").read_bytes()) == CSV
    assert (out / "b.csv.gz").read_bytes() == (local / "b.csv.gz").read_bytes()
    assert not (out / "c.json.gz").exists() and not list(out.glob(".*part"))


def test_overwrite_false_skips_a_name_already_there_and_true_replaces_it(
    served: Served, tmp_path: Path
) -> None:
    stage = unique("st_")
    served.sql(f"CREATE STAGE {stage}")
    path = write(tmp_path / "a.csv", b"1\n")
    assert put_rows(served, f"PUT file://{path} @{stage}")[0]["status"] == "UPLOADED"
    write(path, b"2\n")
    skipped = put_rows(served, f"PUT file://{path} @{stage}")[0]
    assert skipped["status"] == "SKIPPED"
    got = get_rows(served, f"GET @{stage} file://{tmp_path}/out/")
    assert gzip.decompress((tmp_path / "out" / "a.csv.gz").read_bytes()) == b"1\n" and got[0]["size"] > 0
    assert put_rows(served, f"PUT file://{path} @{stage} OVERWRITE = TRUE")[0]["status"] == "UPLOADED"
    get_rows(served, f"GET @{stage} file://{tmp_path}/out2/")
    assert gzip.decompress((tmp_path / "out2" / "a.csv.gz").read_bytes()) == b"2\n"
    # The API checks again: a file put there since the client's LIST is skipped, not replaced.
    answer = upload_file(served.settings, f"@{stage}", "a.csv.gz", b"raced")
    assert answer["status"] == "SKIPPED"


def test_list_and_remove_by_path_and_pattern(served: Served, tmp_path: Path) -> None:
    stage = unique("st_")
    served.sql(f"CREATE STAGE {stage}")
    for sub, name in (("in", "a.csv"), ("in", "b.json"), ("other", "c.csv")):
        upload_file(served.settings, f"@{stage}/{sub}", name, b"x")
    s = stage.lower()
    assert [r["name"] for r in served.sql(f"LIST @{stage}/in")] == [f"{s}/in/a.csv", f"{s}/in/b.json"]
    assert [r["name"] for r in served.sql(f"LS @{stage}/i")] == [
        f"{s}/in/a.csv",
        f"{s}/in/b.json",
    ]  # a prefix
    assert [r["name"] for r in served.sql(f"LIST @{stage} PATTERN = '.*[.]csv'")] == [
        f"{s}/in/a.csv",
        f"{s}/other/c.csv",
    ]
    # PATTERN matches the whole name LIST shows, the stage's name included.
    assert served.sql(f"LIST @{stage} PATTERN = 'in/.*'") == []
    assert served.sql(f"REMOVE @{stage}/in PATTERN = '.*json'") == [
        {"name": f"{s}/in/b.json", "result": "removed"}
    ]
    assert [r["name"] for r in served.sql(f"LIST @{stage}")] == [f"{s}/in/a.csv", f"{s}/other/c.csv"]
    assert [r["name"] for r in served.sql(f"RM @{stage}")] == [f"{s}/in/a.csv", f"{s}/other/c.csv"]
    assert served.sql(f"LIST @{stage}") == [] and served.objects() == {}


def test_read_lists_and_gets_write_puts_and_removes(served: Served, tmp_path: Path) -> None:
    stage = unique("st_")
    served.sql(f"CREATE STAGE {stage}")
    upload_file(served.settings, f"@{stage}", "a.csv", b"1\n")
    reader_role, writer_role, usage_role = unique("r_"), unique("w_"), unique("us_")
    reader, writer, usage = served.user(reader_role), served.user(writer_role), served.user(usage_role)
    served.sql(f"GRANT READ ON STAGE {stage} TO ROLE {reader_role}")
    served.sql(f"GRANT READ, WRITE ON STAGE {stage} TO ROLE {writer_role}")
    # USAGE is an external stage's privilege: GRANT refuses it on an internal one (decision 84).
    with pytest.raises(
        StatementRejected, match=f"invalid privilege 'USAGE' on internal stage .*{stage.upper()}"
    ):
        served.sql(f"GRANT USAGE ON STAGE {stage} TO ROLE {usage_role}")
    src = write(tmp_path / "b.csv", b"2\n")

    assert [r["name"] for r in served.sql(f"LIST @{stage}", reader)] == [f"{stage.lower()}/a.csv"]
    assert get_rows(served, f"GET @{stage} file://{tmp_path}/r/", reader)[0]["status"] == "DOWNLOADED"
    refused = put_rows(served, f"PUT file://{src} @{stage}", reader)[0]
    assert refused["status"] == "ERROR" and "Insufficient privileges" in refused["message"]
    assert "WRITE" in refused["message"]
    with pytest.raises(StatementRejected, match="Insufficient privileges"):
        served.sql(f"REMOVE @{stage}", reader)

    assert put_rows(served, f"PUT file://{src} @{stage}", writer)[0]["status"] == "UPLOADED"
    assert len(served.sql(f"REMOVE @{stage} PATTERN = '.*/b[.]csv.*'", writer)) == 1

    with pytest.raises(StatementRejected, match="does not exist or not authorized"):
        served.sql(f"LIST @{stage}", usage)
    stranger = served.user(unique("none_"))
    with pytest.raises(StatementRejected, match="does not exist or not authorized"):
        served.sql(f"LIST @{stage}", stranger)


def test_a_table_stage_is_its_tables_owners(served: Served, tmp_path: Path) -> None:
    table = unique("t_")
    served.sql(f"CREATE TABLE {table} (a INT)")
    path = write(tmp_path / "rows.csv", b"1\n2\n")
    assert put_rows(served, f"PUT file://{path} @%{table}")[0]["status"] == "UPLOADED"
    assert [r["name"] for r in served.sql(f"LIST @%{table}")] == ["rows.csv.gz"]

    loader_role = unique("l_")
    loader = served.user(loader_role)
    served.sql(f"GRANT SELECT, INSERT ON TABLE {table} TO ROLE {loader_role}")
    with pytest.raises(StatementRejected, match=r"Insufficient privileges.*\n.*OWNERSHIP on table"):
        served.sql(f"LIST @%{table}", loader)
    served.sql(f"GRANT OWNERSHIP ON TABLE {table} TO ROLE {loader_role}")
    assert [r["name"] for r in served.sql(f"LIST @%{table}", loader)] == ["rows.csv.gz"]

    # Replacing the table replaces its stage; dropping it drops its files.
    served.sql(f"CREATE OR REPLACE TABLE {table} (a INT)")
    assert served.sql(f"LIST @%{table}") == [] and served.objects() == {}
    upload_file(served.settings, f"@%{table}", "again.csv", b"3\n")
    served.sql(f"DROP TABLE {table}")
    assert served.objects() == {}


def test_replacing_or_dropping_an_internal_stage_drops_its_files(served: Served) -> None:
    stage = unique("st_")
    served.sql(f"CREATE STAGE {stage}")
    upload_file(served.settings, f"@{stage}", "a.csv", b"1\n")
    served.sql(f"CREATE OR REPLACE STAGE {stage}")
    assert served.sql(f"LIST @{stage}") == [] and served.objects() == {}
    upload_file(served.settings, f"@{stage}", "b.csv", b"1\n")
    assert len(served.objects()) == 1
    served.sql(f"DROP STAGE {stage}")
    assert served.objects() == {}


def test_show_and_desc_an_internal_stage(served: Served) -> None:
    stage = unique("st_")
    served.sql(f"CREATE STAGE {stage} FILE_FORMAT = (TYPE = JSON) COMMENT = 'mine'")
    (row,) = served.sql(f"SHOW STAGES LIKE '{stage}'")
    assert (row["url"], row["type"], row["comment"], row["storage_integration"]) == (
        "",
        "INTERNAL",
        "mine",
        None,
    )
    described = {r["property"]: r["value"] for r in served.sql(f"DESC STAGE {stage}")}
    assert described["URL"] == "" and described["TYPE"] == "JSON"


def test_external_stages_list_and_remove_within_their_integration(served: Served, tmp_path: Path) -> None:
    bucket = unique("ext")
    served.s3.create_bucket(Bucket=bucket)
    for key in ("in/a.csv", "in/b.csv", "elsewhere/c.csv"):
        served.s3.put_object(Bucket=bucket, Key=key, Body=b"1\n")
    integration, stage = unique("i_"), unique("ext_")
    served.sql(
        f"CREATE STORAGE INTEGRATION {integration} TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' "
        f"ENABLED = TRUE STORAGE_ALLOWED_LOCATIONS = ('s3://{bucket}/in/')"
    )
    served.sql(f"CREATE STAGE {stage} URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = {integration}")
    listed = served.sql(f"LIST @{stage}")
    assert [r["name"] for r in listed] == [f"s3://{bucket}/in/a.csv", f"s3://{bucket}/in/b.csv"]
    assert listed[0]["size"] == 2 and listed[0]["md5"] == "b026324c6904b2a9cb4b88d6d61c81d1"  # md5 of b"1\n"
    assert served.sql(f"REMOVE @{stage}/a") == [{"name": f"s3://{bucket}/in/a.csv", "result": "removed"}]
    keys = [o["Key"] for o in served.s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert sorted(keys) == ["elsewhere/c.csv", "in/b.csv"]

    with pytest.raises(
        StatementRejected, match=r"091003.*GET and PUT commands are not supported with external stage"
    ):
        upload_file(served.settings, f"@{stage}", "x.csv", b"1")
    path = write(tmp_path / "x.csv", b"1\n")
    assert (
        "not supported with external stage"
        in put_rows(served, f"PUT file://{path} @{stage} OVERWRITE = TRUE")[0]["message"]
    )

    # Floe's credentials list nothing the integration no longer admits.
    served.sql(
        f"ALTER STORAGE INTEGRATION {integration} SET STORAGE_BLOCKED_LOCATIONS = ('s3://{bucket}/in/')"
    )
    with pytest.raises(StatementRejected, match="not allowed by integration"):
        served.sql(f"LIST @{stage}")


def test_the_stages_bucket_is_no_external_location(served: Served) -> None:
    bucket = served.settings.stages.bucket
    with pytest.raises(StatementRejected, match="internal stages bucket"):
        served.sql(
            f"CREATE STORAGE INTEGRATION {unique('i_')} TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' "
            f"ENABLED = TRUE STORAGE_ALLOWED_LOCATIONS = ('s3://{bucket}/')"
        )
    with pytest.raises(StatementRejected, match="internal stages bucket"):
        served.sql(
            f"CREATE STAGE {unique('st_')} URL = 's3://{bucket}/stages/' STORAGE_INTEGRATION = floe_tests"
        )


def test_pipes_on_internal_stages(served: Served) -> None:
    stage, table = unique("st_"), unique("t_")
    served.sql(f"CREATE STAGE {stage} FILE_FORMAT = (TYPE = CSV)")
    served.sql(f"CREATE TABLE {table} (a INT)")
    with pytest.raises(StatementRejected, match="AUTO_INGEST = TRUE is not supported for internal stages"):
        served.sql(f"CREATE PIPE {unique('p_')} AUTO_INGEST = TRUE AS COPY INTO {table} FROM @{stage}")
    with pytest.raises(StatementRejected, match="Table stages don't support transforming data"):
        served.sql(f"CREATE PIPE {unique('p_')} AS COPY INTO {table} FROM (SELECT $1 FROM @%{table})")
    pipe = unique("p_")
    served.sql(f"CREATE PIPE {pipe} AS COPY INTO {table} FROM @%{table} FILE_FORMAT = (TYPE = CSV)")
    assert served.sql(f"DESC PIPE {pipe}")[0]["definition"].endswith(
        f"FROM @%{table} FILE_FORMAT = (TYPE = CSV)"
    )

    # Creating a pipe on an internal stage takes READ on it (USAGE cannot be granted on one).
    role = unique("pr_")
    maker = served.user(role)
    served.sql(f"GRANT CREATE PIPE ON SCHEMA floe.public TO ROLE {role}")
    served.sql(f"GRANT INSERT ON TABLE {table} TO ROLE {role}")
    with pytest.raises(StatementRejected, match="does not exist or not authorized"):
        served.sql(f"CREATE PIPE {unique('p_')} AS COPY INTO {table} FROM @{stage}", maker)
    served.sql(f"GRANT READ ON STAGE {stage} TO ROLE {role}")
    served.sql(f"CREATE PIPE {unique('p_')} AS COPY INTO {table} FROM @{stage}", maker)


def test_put_and_get_as_statements_point_to_the_client(served: Served) -> None:
    with pytest.raises(StatementRejected, match="the client runs it: use `floe sql`"):
        served.sql("PUT file:///tmp/a.csv @s")
    with pytest.raises(StatementRejected, match="floe get"):
        served.sql("GET @s file:///tmp/")


def test_a_large_file_goes_in_parts_and_one_too_large_is_refused(served: Served, tmp_path: Path) -> None:
    stage = unique("st_")
    served.sql(f"CREATE STAGE {stage}")
    data = os.urandom(11 * 1024 * 1024)  # three parts of 5 MiB, sealed
    path = write(tmp_path / "big.bin", data)
    (row,) = put_rows(served, f"PUT file://{path} @{stage} AUTO_COMPRESS = FALSE")
    assert (row["status"], row["target_size"]) == ("UPLOADED", len(data))
    (stored,) = served.objects().values()
    assert len(stored) == stored_size(len(data))
    get_rows(served, f"GET @{stage} file://{tmp_path}/out/")
    assert (tmp_path / "out" / "big.bin").read_bytes() == data

    too_big = write(tmp_path / "huge.bin", os.urandom(MAX_FILE + 1))
    (row,) = put_rows(served, f"PUT file://{too_big} @{stage} AUTO_COMPRESS = FALSE")
    assert row["status"] == "ERROR" and "stages.max_file_bytes" in row["message"]
    assert [r["name"] for r in served.sql(f"LIST @{stage}")] == [f"{stage.lower()}/big.bin"]
    uploads = served.s3.list_multipart_uploads(Bucket=served.settings.stages.bucket).get("Uploads", [])
    assert uploads == []  # the refused upload's parts were aborted


def test_an_upload_is_authenticated_before_its_body_is_read(served: Served) -> None:
    url = f"http://127.0.0.1:{served.settings.api.port}/api/v1/stages/files"
    resp = httpx.put(url, params={"location": "@s", "name": "a.csv"}, content=b"x" * 1000, timeout=30)
    assert resp.status_code == 401
    # A body declared too large is refused before a byte of it is read.
    head = "".join(f"{k}: {v}\r\n" for k, v in auth_header(served.settings).items())
    with socket.create_connection(("127.0.0.1", served.settings.api.port), timeout=30) as sock:
        sock.sendall(
            (
                f"PUT /api/v1/stages/files?location=%40s&name=a.csv HTTP/1.1\r\nHost: x\r\n{head}"
                f"Content-Length: {MAX_FILE + 1}\r\n\r\n"
            ).encode()
        )
        answer = sock.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 413") and "stages.max_file_bytes" in answer


def test_floe_sql_runs_put_and_get_itself(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOE_API__HOST", "127.0.0.1")
    monkeypatch.setenv("FLOE_API__PORT", str(served.settings.api.port))
    monkeypatch.setenv("FLOE_API__TLS", "off")
    monkeypatch.setenv("FLOE_AUTH__ADMIN_KEY_FILE", served.settings.auth.admin_key_file)
    stage = unique("st_")
    served.sql(f"CREATE STAGE {stage}")
    path = write(tmp_path / "d.csv", CSV)
    run = CliRunner().invoke(cli_module.app, ["sql", "--json", f"PUT file://{path} @{stage}/x"])
    assert run.exit_code == 0, run.output
    assert '"target": "d.csv.gz"' in run.output and '"status": "UPLOADED"' in run.output
    run = CliRunner().invoke(
        cli_module.app, ["get", f"@{stage}", f"file://{tmp_path}/o/", "PATTERN = '.*d.*'"]
    )
    assert run.exit_code == 0, run.output
    assert "DOWNLOADED" in run.output and gzip.decompress((tmp_path / "o" / "d.csv.gz").read_bytes()) == CSV
    run = CliRunner().invoke(cli_module.app, ["put", str(path), f"@{stage}/x"])
    assert run.exit_code == 0 and "SKIPPED" in run.output
    run = CliRunner().invoke(cli_module.app, ["sql", f"SELECT 1; PUT file://{path} @{stage}"])
    assert run.exit_code == 2 and "PUT and GET run alone" in run.output
    run = CliRunner().invoke(cli_module.app, ["put", str(tmp_path / "none*.csv"), f"@{stage}"])
    assert run.exit_code == 1 and "File doesn't exist" in run.output
