"""The API client the CLI, the demo, the benchmarks and the tests share (front/client.py)."""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest

from floe.keypair import new_private_key, private_key_pem
from floe.settings import Settings
from front.client import SqlFailed, auth_header, records

pytestmark = pytest.mark.unit


def test_records_key_rows_by_column() -> None:
    body = {"columns": ["ID", "NAME"], "rows": [[1, "a"], [2, None]]}
    assert records(body) == [{"ID": 1, "NAME": "a"}, {"ID": 2, "NAME": None}]


def test_auth_header_signs_a_key_pair_token_for_the_user(tmp_path: Path) -> None:
    key_file = tmp_path / "user.p8"
    key_file.write_text(private_key_pem(new_private_key()))
    settings = Settings()
    header = auth_header(settings, "alice", str(key_file))
    assert header["X-Snowflake-Authorization-Token-Type"] == "KEYPAIR_JWT"
    claims = jwt.decode(header["Authorization"].removeprefix("Bearer "), options={"verify_signature": False})
    assert claims["sub"] == f"{settings.account.upper()}.ALICE"
    # The token is cached per (account, user, key file): a second call does not sign again.
    assert auth_header(settings, "alice", str(key_file)) == header


def test_auth_header_without_the_key_file_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(SqlFailed, match=r"cannot read the private key .*missing\.p8"):
        auth_header(Settings(), "alice", str(tmp_path / "missing.p8"))
