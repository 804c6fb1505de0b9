"""Key-pair helpers agree with what the snowflake-ingest SDK computes and sends."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import jwt
import pytest
from snowflake.ingest.utils.tokentools import SecurityManager

from floe.keypair import (
    InvalidKey,
    ensure_key_file,
    fingerprint,
    load_public_key,
    new_private_key,
    private_key_pem,
    public_key_body,
    sign_token,
)

pytestmark = pytest.mark.unit


def test_fingerprint_and_claims_match_the_sdk() -> None:
    key = new_private_key()
    pem = private_key_pem(key)
    sdk = SecurityManager("floe", "loader", pem)
    assert fingerprint(key.public_key()) == sdk.calculate_public_key_fingerprint(pem)
    ours = jwt.decode(sign_token("floe", "loader", key), options={"verify_signature": False})
    theirs = jwt.decode(sdk.get_token(), options={"verify_signature": False})
    assert ours["iss"] == theirs["iss"] and ours["sub"] == theirs["sub"] == "FLOE.LOADER"


def test_public_key_forms() -> None:
    key = new_private_key().public_key()
    body = public_key_body(key)
    pem = "-----BEGIN PUBLIC KEY-----\n" + "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    pem += "\n-----END PUBLIC KEY-----\n"
    assert fingerprint(load_public_key(body)) == fingerprint(load_public_key(pem)) == fingerprint(key)
    assert fingerprint(load_public_key(body[:40] + "\n " + body[40:])) == fingerprint(key)
    for bad in ("not base64 at all!", "QUJD", ""):
        with pytest.raises(InvalidKey) as info:
            load_public_key(bad)
        assert bad not in info.value.message or not bad


def test_key_file_is_created_once_even_by_racing_processes(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "admin.p8"
    results: list[str] = []

    def create() -> None:
        results.append(fingerprint(ensure_key_file(path).public_key()))

    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len(set(results)) == 1
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir()] == ["admin.p8"]
