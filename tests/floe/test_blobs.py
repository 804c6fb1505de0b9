"""Blobs bound to their names, and sealed statistics: real pyarrow encryption, real LocalStack S3."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.parquet.encryption as pe
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pyarrow import fs as pafs

import floe.blobs as blobs
from floe.aws import pyarrow_s3_kwargs
from floe.blobs import (
    BlobCrypto,
    BlobIdentityError,
    StaticKeyProvider,
    column_stats,
    read_blob,
    write_blob,
)
from floe.settings import Settings
from tests.conftest import unique

SECRET_NAMES = ["zq-secret-alpha", "zq-secret-omega"]


def secret_table() -> pa.Table:
    return pa.table(
        {
            "ID": pa.array([424242, 989898], pa.int64()),
            "NAME": SECRET_NAMES,
            "DAY": pa.array([dt.date(1999, 12, 31), dt.date(2001, 2, 3)]),
            "AMOUNT": pa.array([13.25, 77.5]),
        }
    )


def name_for(table_id: str, blob: str) -> str:
    return f"FLOE/PUBLIC/T_{table_id}/{table_id}/pipe0001/{blob}.parquet"


@pytest.fixture
def crypto() -> BlobCrypto:
    return BlobCrypto(StaticKeyProvider("test-key", os.urandom(32)), "test-key")


@pytest.fixture
def local(tmp_path: Path) -> pafs.FileSystem:
    return pafs.LocalFileSystem()


@pytest.fixture
def s3fs(services: Settings, s3: Any) -> tuple[pafs.S3FileSystem, str]:
    bucket = unique("tables")
    s3.create_bucket(Bucket=bucket)
    return pafs.S3FileSystem(**pyarrow_s3_kwargs(services.aws)), bucket


def test_round_trip_on_s3_names_the_blob_after_its_path(
    s3fs: tuple[pafs.S3FileSystem, str], crypto: BlobCrypto
) -> None:
    fs, bucket = s3fs
    name = name_for("101", "b0")
    meta = write_blob(secret_table(), fs, f"{bucket}/{name}", crypto, name=name, files=["a.csv"])
    assert (meta.rows, meta.files) == (2, ["a.csv"])
    assert read_blob(fs, f"{bucket}/{name}", crypto).equals(secret_table())


def test_round_trip_with_an_explicit_name(tmp_path: Path, local: pafs.FileSystem, crypto: BlobCrypto) -> None:
    path = str(tmp_path / "blob.parquet")
    write_blob(secret_table(), local, path, crypto, name="X/1/b.parquet", files=[])
    assert read_blob(local, path, crypto, name="X/1/b.parquet").equals(secret_table())
    with pytest.raises(OSError, match="encrypted"):
        pq.read_table(path)


@pytest.mark.parametrize("target", ["same table", "other table"])
def test_a_blob_copied_to_another_name_fails_to_decrypt(
    s3fs: tuple[pafs.S3FileSystem, str], s3: Any, crypto: BlobCrypto, target: str
) -> None:
    fs, bucket = s3fs
    name = name_for("101", "b0")
    moved = name_for("101", "b1") if target == "same table" else name_for("202", "b0")
    write_blob(secret_table(), fs, f"{bucket}/{name}", crypto, name=name, files=[])
    s3.copy_object(Bucket=bucket, Key=moved, CopySource={"Bucket": bucket, "Key": name})
    original = s3.get_object(Bucket=bucket, Key=name)["Body"].read()
    assert s3.get_object(Bucket=bucket, Key=moved)["Body"].read() == original  # the swap happened

    with pytest.raises(BlobIdentityError, match=f"Blob '{moved}' does not decrypt under its name"):
        read_blob(fs, f"{bucket}/{moved}", crypto)
    assert read_blob(fs, f"{bucket}/{name}", crypto).num_rows == 2


def test_back_to_back_blobs_get_their_own_data_keys(
    tmp_path: Path, local: pafs.FileSystem, crypto: BlobCrypto, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_keys: list[bytes] = []
    wrap = blobs._EnvelopeKms.wrap_key

    def recording(self: Any, key_bytes: bytes, master_key_identifier: str) -> str:
        data_keys.append(bytes(key_bytes))
        return wrap(self, key_bytes, master_key_identifier)

    monkeypatch.setattr(blobs._EnvelopeKms, "wrap_key", recording)
    a, b = name_for("101", "a"), name_for("101", "b")
    write_blob(secret_table(), local, str(tmp_path / "a"), crypto, name=a, files=[])
    write_blob(secret_table(), local, str(tmp_path / "b"), crypto, name=b, files=[])

    assert len(data_keys) == 2 and len(set(data_keys)) == 2 and all(len(k) == 32 for k in data_keys)
    assert read_blob(local, str(tmp_path / "a"), crypto, name=a).num_rows == 2
    assert read_blob(local, str(tmp_path / "b"), crypto, name=b).num_rows == 2
    with pytest.raises(BlobIdentityError, match=f"Blob '{b}'"):
        read_blob(local, str(tmp_path / "a"), crypto, name=b)
    with pytest.raises(BlobIdentityError, match=f"Blob '{a}'"):
        read_blob(local, str(tmp_path / "b"), crypto, name=a)


def test_concurrent_reads_never_share_a_key_client(
    tmp_path: Path, local: pafs.FileSystem, crypto: BlobCrypto
) -> None:
    """pyarrow caches KMS clients by access token; a client shared between blobs would unwrap one
    blob's key with another's name and fail."""
    names = [name_for("101", f"c{i}") for i in range(8)]
    for i, name in enumerate(names):
        write_blob(secret_table(), local, str(tmp_path / f"c{i}"), crypto, name=name, files=[])
    errors: list[BaseException] = []
    reads = [0]
    lock = threading.Lock()

    def reader(offset: int) -> None:
        try:
            for k in range(40):
                i = (offset + k) % len(names)
                read_blob(local, str(tmp_path / f"c{i}"), crypto, name=names[i])
                with lock:
                    reads[0] += 1
        except BaseException as exc:  # noqa: BLE001 -- collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and reads[0] == 160


def test_blobs_written_before_name_binding_are_refused(
    tmp_path: Path, local: pafs.FileSystem, crypto: BlobCrypto
) -> None:
    """The format before this change: the data key wrapped without the name and without a version."""
    master = crypto._provider.master_key(crypto.key_id)

    class Unbound(pe.KmsClient):  # type: ignore[misc]
        def wrap_key(self, key_bytes: bytes, master_key_identifier: str) -> str:
            nonce = os.urandom(12)
            return base64.b64encode(nonce + AESGCM(master).encrypt(nonce, key_bytes, None)).decode()

        def unwrap_key(self, wrapped_key: str, master_key_identifier: str) -> bytes:
            raise AssertionError("not used")

    factory = pe.CryptoFactory(lambda _cfg: Unbound())
    config = pe.EncryptionConfiguration(
        footer_key=crypto.key_id, uniform_encryption=True, double_wrapping=False, data_key_length_bits=256
    )
    path = str(tmp_path / "old.parquet")
    pq.write_table(
        secret_table(),
        path,
        encryption_properties=factory.file_encryption_properties(pe.KmsConnectionConfig(), config),
    )
    with pytest.raises(BlobIdentityError, match="written before Floe bound blobs to their names"):
        read_blob(local, path, crypto, name=name_for("101", "old"))


def test_a_blob_under_another_master_key_is_refused(tmp_path: Path, local: pafs.FileSystem) -> None:
    name = name_for("101", "k")
    mine = BlobCrypto(StaticKeyProvider("test-key", os.urandom(32)), "test-key")
    theirs = BlobCrypto(StaticKeyProvider("test-key", os.urandom(32)), "test-key")
    write_blob(secret_table(), local, str(tmp_path / "k"), theirs, name=name, files=[])
    with pytest.raises(BlobIdentityError, match="another master key"):
        read_blob(local, str(tmp_path / "k"), mine, name=name)


def test_manifest_entries_carry_no_statistic_values(
    tmp_path: Path, local: pafs.FileSystem, crypto: BlobCrypto
) -> None:
    name = name_for("101", "s")
    meta = write_blob(secret_table(), local, str(tmp_path / "s"), crypto, name=name, files=["f.csv"])
    entry = meta.to_dict()
    text = json.dumps(entry)
    assert set(entry) == {"name", "path", "rows", "bytes", "sealed_stats", "files"}
    assert (entry["rows"], entry["files"]) == (2, ["f.csv"])
    for value in [
        *SECRET_NAMES,
        "424242",
        "989898",
        "1999-12-31",
        "2001-02-03",
        "13.25",
        "77.5",
        "min",
        "max",
    ]:
        assert value not in text, value
    assert "zq-secret" not in repr(meta)
    assert crypto.open_stats(json.loads(text)) == column_stats(secret_table()) == meta.stats
    assert meta.stats["NAME"]["min"] == SECRET_NAMES[0] and meta.stats["ID"]["max"] == 989898


def test_statistics_moved_to_another_blob_or_altered_fail(crypto: BlobCrypto) -> None:
    stats = column_stats(secret_table())
    a, b = name_for("101", "a"), name_for("202", "a")
    sealed = crypto.seal_stats(stats, a)
    entry: dict[str, Any] = {"name": a, "rows": 2, "sealed_stats": sealed}
    assert crypto.open_stats(entry) == stats

    with pytest.raises(BlobIdentityError, match=f"statistics of blob '{b}' do not open under its name"):
        crypto.open_stats({**entry, "name": b})
    raw = bytearray(base64.b64decode(sealed))
    raw[-1] ^= 1
    with pytest.raises(BlobIdentityError, match="altered"):
        crypto.open_stats({**entry, "sealed_stats": base64.b64encode(bytes(raw)).decode()})
    other = BlobCrypto(StaticKeyProvider("test-key", os.urandom(32)), "test-key")
    with pytest.raises(BlobIdentityError, match="another master key"):
        other.open_stats(entry)


def test_entries_without_sealed_statistics_prune_nothing(crypto: BlobCrypto) -> None:
    """Plaintext statistics from before sealing are unauthenticated, so they are ignored."""
    legacy = {"name": "n", "stats": {"ID": {"min": 1, "max": 2, "null_count": 0}}}
    assert crypto.open_stats(legacy) == {}
    assert crypto.open_stats({"name": "n"}) == {}


def test_opened_statistics_are_cached_per_sealed_entry(crypto: BlobCrypto) -> None:
    stats = column_stats(secret_table())
    entry = {"name": "n", "sealed_stats": crypto.seal_stats(stats, "n")}
    first = crypto.open_stats(entry)
    assert crypto.open_stats(dict(entry)) is first
    resealed = {"name": "n", "sealed_stats": crypto.seal_stats({"ID": {"null_count": 0}}, "n")}
    assert crypto.open_stats(resealed) == {"ID": {"null_count": 0}}


@pytest.mark.unit
def test_binary_columns_have_lengths_but_no_min_or_max(
    local: pafs.FileSystem, tmp_path: Path, crypto: BlobCrypto
) -> None:
    """BINARY values are never compared with a literal the pruning reads, and bytes have no JSON
    form: the manifest and the row groups keep only their null counts and longest length."""
    table = pa.table(
        {
            "B": pa.array([b"\x00\xff", None, b"abcde"], pa.binary()),
            "T": pa.array([dt.time(1, 2, 3), dt.time(23, 0), None], pa.time64("us")),
        }
    )
    stats = column_stats(table)
    assert stats["B"] == {"null_count": 1, "max_length": 5}
    assert stats["T"] == {"null_count": 1, "min": "01:02:03", "max": "23:00:00"}
    name = name_for("t1", "b")
    write_blob(table, local, str(tmp_path / "b.parquet"), crypto, name=name, files=["f"])
    opened = blobs.open_blob(local, str(tmp_path / "b.parquet"), crypto, name=name)
    try:
        groups = blobs.row_group_stats(opened.metadata, 0)
    finally:
        opened.close()
    assert groups["B"] == {"null_count": 1}
    assert groups["T"]["min"] == "01:02:03"
