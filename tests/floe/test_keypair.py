"""Key-pair helpers agree with what the snowflake-ingest SDK computes and sends."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from snowflake.ingest.utils.tokentools import SecurityManager

from floe import keypair
from floe.keypair import (
    InvalidKey,
    create_private_file,
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


def test_key_file_is_created_once_even_by_racing_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keys" / "admin.p8"
    racers = 4
    # Every racer generates its key before any of them writes: each really tries to create the file.
    barrier = threading.Barrier(racers)
    generated: list[int] = []

    def new_key() -> rsa.RSAPrivateKey:
        barrier.wait(timeout=60)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        generated.append(1)
        return key

    monkeypatch.setattr(keypair, "new_private_key", new_key)
    results: list[str] = []

    def create() -> None:
        results.append(fingerprint(ensure_key_file(path).public_key()))

    before = os.umask(0)  # 0600 must come from the code, not from the umask
    try:
        threads = [threading.Thread(target=create) for _ in range(racers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.umask(before)
    assert len(generated) == racers  # the race happened
    assert len(results) == racers and len(set(results)) == 1
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir()] == ["admin.p8"]


def test_create_private_file_never_exposes_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    seen: list[bytes] = []

    def make() -> bytes:
        seen.append(b"exists" if path.exists() else b"absent")  # nothing is in place while writing
        return b"first"

    assert create_private_file(path, make) == b"first"
    assert create_private_file(path, lambda: b"second") == b"first"  # an existing file wins
    assert seen == [b"absent"]
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
