"""Table blobs: encrypted Parquet files with per-column statistics.

Each blob is written with Parquet modular encryption (AES-GCM, footer and every column encrypted).
pyarrow's CryptoFactory makes a random data key per blob; Floe's KMS client wraps it with the
master key (AES-256-GCM), so the blob carries only the wrapped key. The master key comes from a
KeyProvider, which a real KMS can implement later. Blob statistics (min, max, null count, max
length, row count) go into the manifest so queries can skip blobs without opening them.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.parquet.encryption as pe
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pyarrow import fs as pafs

from floe.errors import TerminalError


class KeyProvider(Protocol):
    """Serves master keys by id (settings today, a KMS tomorrow)."""

    def master_key(self, key_id: str) -> bytes:
        """The 32-byte master key with this id."""
        ...


@dataclass(frozen=True)
class StaticKeyProvider:
    """One master key from settings."""

    key_id: str
    key: bytes = field(repr=False)

    def master_key(self, key_id: str) -> bytes:
        """The key, if the id matches."""
        if key_id != self.key_id:
            raise TerminalError(f"unknown master key id '{key_id}'")
        return self.key


_PROVIDERS: dict[str, KeyProvider] = {}


class _EnvelopeKms(pe.KmsClient):  # type: ignore[misc]
    """Wraps and unwraps data keys with AES-256-GCM under a master key."""

    def __init__(self, provider: KeyProvider) -> None:
        super().__init__()
        self._provider = provider

    def wrap_key(self, key_bytes: bytes, master_key_identifier: str) -> str:
        nonce = os.urandom(12)
        sealed = AESGCM(self._provider.master_key(master_key_identifier)).encrypt(nonce, key_bytes, None)
        return base64.b64encode(nonce + sealed).decode()

    def unwrap_key(self, wrapped_key: str, master_key_identifier: str) -> bytes:
        raw = base64.b64decode(wrapped_key)
        return AESGCM(self._provider.master_key(master_key_identifier)).decrypt(raw[:12], raw[12:], None)


class BlobCrypto:
    """Encryption and decryption properties for blobs under one key provider."""

    def __init__(self, provider: KeyProvider, key_id: str) -> None:
        self.key_id = key_id
        self._factory = pe.CryptoFactory(lambda _cfg: _EnvelopeKms(provider))
        self._kms = pe.KmsConnectionConfig()

    def encryption(self) -> Any:
        """Fresh encryption properties: a new random data key per blob."""
        config = pe.EncryptionConfiguration(
            footer_key=self.key_id,
            uniform_encryption=True,
            encryption_algorithm="AES_GCM_V1",
            plaintext_footer=False,
            double_wrapping=False,
            cache_lifetime=dt.timedelta(seconds=1),
            data_key_length_bits=256,
        )
        return self._factory.file_encryption_properties(self._kms, config)

    def decryption(self) -> Any:
        """Decryption properties (the wrapped data key is read from the blob)."""
        config = pe.DecryptionConfiguration(cache_lifetime=dt.timedelta(minutes=10))
        return self._factory.file_decryption_properties(self._kms, config)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return None
    return value


def column_stats(table: pa.Table) -> dict[str, dict[str, Any]]:
    """Per column: min, max, null_count and, for strings, max_length (the seed's EP info)."""
    stats: dict[str, dict[str, Any]] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        entry: dict[str, Any] = {"null_count": col.null_count}
        if len(col) > col.null_count and not pa.types.is_boolean(col.type):
            mm = pc.min_max(col)
            entry["min"] = _jsonable(mm["min"].as_py())
            entry["max"] = _jsonable(mm["max"].as_py())
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            lengths = pc.utf8_length(col)
            entry["max_length"] = pc.max(lengths).as_py() or 0
        stats[name] = entry
    return stats


@dataclass
class BlobMeta:
    """A manifest entry: where a blob is and what its statistics say."""

    name: str
    path: str
    rows: int
    bytes: int
    stats: dict[str, dict[str, Any]]
    files: list[str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "path": self.path,
            "rows": self.rows,
            "bytes": self.bytes,
            "stats": self.stats,
            "files": self.files,
        }


def write_blob(
    table: pa.Table, fs: pafs.FileSystem, path: str, crypto: BlobCrypto, *, name: str, files: list[str]
) -> BlobMeta:
    """Write one encrypted blob. S3 makes the object visible only when the upload completes, and the
    name is deterministic, so a replay overwrites the same object instead of adding one."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", encryption_properties=crypto.encryption())
    buf = sink.getvalue()
    with fs.open_output_stream(path) as out:
        out.write(buf)
    return BlobMeta(
        name=name, path=path, rows=table.num_rows, bytes=buf.size, stats=column_stats(table), files=files
    )


def read_blob(fs: pafs.FileSystem, path: str, crypto: BlobCrypto) -> pa.Table:
    """Read and decrypt one blob."""
    with fs.open_input_file(path) as f:
        return pq.read_table(f, decryption_properties=crypto.decryption())


def crypto_from_settings(key_id: str, key: bytes) -> BlobCrypto:
    """A BlobCrypto for the master key from settings (cached per process)."""
    provider = _PROVIDERS.setdefault(key_id, StaticKeyProvider(key_id, key))
    return BlobCrypto(provider, key_id)
