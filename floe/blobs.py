"""Table blobs: encrypted Parquet files with per-column statistics.

Each blob is written with Parquet modular encryption (AES-GCM, footer and every column encrypted).
pyarrow's CryptoFactory makes a random data key per blob; Floe's KMS client wraps it with the
master key (AES-256-GCM), so the blob carries only the wrapped key. The wrap takes the blob's name
(``FLOE/<schema>/<table>/<table id>/<pipe id>/...parquet``) as associated data, so a blob copied or
swapped to another name or table does not decrypt. The master key comes from a KeyProvider, which a
real KMS can implement later. Blob statistics (min, max, null count, max length) are sealed with a
key derived from the master key, bound to the blob's name too, and go into the manifest so queries
can skip blobs without opening them.

Blobs are written in row groups of about ``ROW_GROUP_BYTES`` decoded. Parquet's modular encryption
seals every page and the footer separately, so a reader needs no more than the footer and the row
group it reads: ``open_blob`` decrypts the footer (checking the blob's identity) and then reads one
row group, or one batch of rows, at a time, each with Parquet's own statistics for pruning.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.parquet.encryption as pe
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pyarrow import fs as pafs

from floe.errors import TerminalError

# A wrapped data key is "<version><base64(nonce + ciphertext)>". Keys wrapped before blobs were bound
# to their names carry no version and are refused: unwrapping them without the name would let an old
# blob be swapped in under any name.
_WRAP_VERSION = "floe-v2:"
_KEY_AAD = b"floe/blob-data-key/v2\x00"
_STATS_INFO = b"floe/manifest-stats/v1"
_STATS_AAD = b"floe/manifest-stats/v1\x00"
# Where the blob's name travels from a KmsConnectionConfig to the KMS client made for it.
_CONF_BLOB = "floe.blob"
# Opened statistics kept per BlobCrypto: the query engine opens every manifest entry on each query.
_OPENED_STATS_MAX = 100_000

ROW_GROUP_BYTES = 16 * 1024 * 1024
"""Decoded bytes a blob's row group aims at: what a query reads, decodes and prunes as one unit."""
# pyarrow's own default; more rows per group only make the unit a query must hold larger.
_MAX_GROUP_ROWS = 1024 * 1024
# Rows a reader decodes at a time: about this many bytes, within DuckDB-friendly bounds (a DuckDB
# vector is 2,048 rows).
_BATCH_BYTES = 4 * 1024 * 1024
_MIN_BATCH_ROWS = 2048
_MAX_BATCH_ROWS = 64 * 1024


class BlobIdentityError(TerminalError):
    """A blob or its statistics do not decrypt under the name they are read as."""


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


def _key_aad(name: str) -> bytes:
    return _KEY_AAD + name.encode()


class _EnvelopeKms(pe.KmsClient):  # type: ignore[misc]
    """Wraps and unwraps one blob's data key with AES-256-GCM under a master key, bound to its name."""

    def __init__(self, provider: KeyProvider, name: str) -> None:
        super().__init__()
        self._provider = provider
        self._name = name

    def wrap_key(self, key_bytes: bytes, master_key_identifier: str) -> str:
        nonce = os.urandom(12)
        master = AESGCM(self._provider.master_key(master_key_identifier))
        sealed = master.encrypt(nonce, key_bytes, _key_aad(self._name))
        return _WRAP_VERSION + base64.b64encode(nonce + sealed).decode()

    def unwrap_key(self, wrapped_key: str, master_key_identifier: str) -> bytes:
        if not wrapped_key.startswith(_WRAP_VERSION):
            raise BlobIdentityError(
                f"Blob '{self._name}' was written before Floe bound blobs to their names, so it is "
                "refused (an unbound blob could be swapped in under any name). Recreate the table "
                "and load its files again."
            )
        try:
            raw = base64.b64decode(wrapped_key[len(_WRAP_VERSION) :], validate=True)
            master = AESGCM(self._provider.master_key(master_key_identifier))
            return master.decrypt(raw[:12], raw[12:], _key_aad(self._name))
        except (InvalidTag, binascii.Error) as exc:
            raise BlobIdentityError(
                f"Blob '{self._name}' does not decrypt under its name: it was copied or moved from "
                "another blob or table, or written under another master key. Floe refuses it; "
                "restore the original object, or delete it and load its files again."
            ) from exc


def _client_factory(provider: KeyProvider) -> Callable[[pe.KmsConnectionConfig], _EnvelopeKms]:
    def create(config: pe.KmsConnectionConfig) -> _EnvelopeKms:
        name = config.custom_kms_conf.get(_CONF_BLOB)
        if not name:
            raise TerminalError("a blob key was requested without the blob's name (a bug in floe/blobs.py)")
        return _EnvelopeKms(provider, name)

    return create


class BlobCrypto:
    """Encryption and decryption properties for blobs under one key provider, and sealed statistics."""

    def __init__(self, provider: KeyProvider, key_id: str) -> None:
        self.key_id = key_id
        self._provider = provider
        self._factory = pe.CryptoFactory(_client_factory(provider))
        self._stats_aead: AESGCM | None = None
        self._opened: OrderedDict[tuple[str, str], dict[str, dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    @contextmanager
    def _connection(self, name: str) -> Iterator[pe.KmsConnectionConfig]:
        # The CryptoFactory caches KMS clients by access token, and a client carries one blob's name.
        # A token of its own per use, dropped afterwards, means no two blobs (nor two threads) ever
        # share a client, and the cache does not grow with the number of blobs read.
        token = uuid.uuid4().hex
        try:
            yield pe.KmsConnectionConfig(key_access_token=token, custom_kms_conf={_CONF_BLOB: name})
        finally:
            self._factory.remove_cache_entries_for_token(token)

    @contextmanager
    def encrypting(self, name: str) -> Iterator[Any]:
        """Fresh encryption properties for the blob ``name``: a new random data key, wrapped for it."""
        config = pe.EncryptionConfiguration(
            footer_key=self.key_id,
            uniform_encryption=True,
            encryption_algorithm="AES_GCM_V1",
            plaintext_footer=False,
            double_wrapping=False,
            cache_lifetime=dt.timedelta(seconds=60),
            data_key_length_bits=256,
        )
        with self._connection(name) as kms:
            yield self._factory.file_encryption_properties(kms, config)

    @contextmanager
    def decrypting(self, name: str) -> Iterator[Any]:
        """Decryption properties for the blob ``name``; the data key is unwrapped while reading, so
        the read must happen inside the block."""
        config = pe.DecryptionConfiguration(cache_lifetime=dt.timedelta(seconds=60))
        with self._connection(name) as kms:
            yield self._factory.file_decryption_properties(kms, config)

    def _stats_cipher(self) -> AESGCM:
        if self._stats_aead is None:
            key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_STATS_INFO).derive(
                self._provider.master_key(self.key_id)
            )
            self._stats_aead = AESGCM(key)
        return self._stats_aead

    def seal_stats(self, stats: dict[str, dict[str, Any]], name: str) -> str:
        """The statistics as one base64 field, encrypted and bound to the blob's name."""
        nonce = os.urandom(12)
        plain = json.dumps(stats, sort_keys=True, separators=(",", ":")).encode()
        sealed = self._stats_cipher().encrypt(nonce, plain, _STATS_AAD + name.encode())
        return base64.b64encode(nonce + sealed).decode()

    def open_stats(self, entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The statistics of a manifest entry; empty (prune nothing) when it has no sealed ones.

        Plaintext statistics from before sealing are ignored: they are unauthenticated, and their
        blob is refused when read anyway. The result is shared through a cache: do not modify it.
        """
        sealed = entry.get("sealed_stats")
        if not isinstance(sealed, str) or not sealed:
            return {}
        name = str(entry.get("name", ""))
        key = (name, sealed)
        with self._lock:
            cached = self._opened.get(key)
            if cached is not None:
                self._opened.move_to_end(key)
                return cached
        try:
            raw = base64.b64decode(sealed, validate=True)
            plain = self._stats_cipher().decrypt(raw[:12], raw[12:], _STATS_AAD + name.encode())
        except (InvalidTag, binascii.Error) as exc:
            raise BlobIdentityError(
                f"The statistics of blob '{name}' do not open under its name: the manifest entry was "
                "copied from another blob or altered, or sealed under another master key. Remove the "
                "entry and load its files again."
            ) from exc
        stats: dict[str, dict[str, Any]] = json.loads(plain)
        with self._lock:
            self._opened[key] = stats
            if len(self._opened) > _OPENED_STATS_MAX:
                self._opened.popitem(last=False)
        return stats


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return None
    return value


def _is_binary(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t))


def column_stats(table: pa.Table) -> dict[str, dict[str, Any]]:
    """Per column: min, max, null_count and, for strings and binary, max_length (the seed's EP info:
    characters for strings, bytes for binary).

    BINARY columns get no min and max: no query can compare them with a literal Floe reads (a BINARY
    literal is hex text or a function of it, which the pruning never decodes), so a blob is never
    skipped on them, and bytes would not fit the manifest's JSON as they are."""
    stats: dict[str, dict[str, Any]] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        entry: dict[str, Any] = {"null_count": col.null_count}
        binary = _is_binary(col.type)
        if len(col) > col.null_count and not pa.types.is_boolean(col.type) and not binary:
            mm = pc.min_max(col)
            entry["min"] = _jsonable(mm["min"].as_py())
            entry["max"] = _jsonable(mm["max"].as_py())
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            lengths = pc.utf8_length(col)
            entry["max_length"] = pc.max(lengths).as_py() or 0
        elif binary:
            entry["max_length"] = pc.max(pc.binary_length(col)).as_py() or 0
        stats[name] = entry
    return stats


@dataclass
class BlobMeta:
    """A manifest entry: where a blob is and what its statistics say."""

    name: str
    path: str
    rows: int
    bytes: int
    # Plaintext, for the writer only; the manifest gets ``sealed_stats`` (see to_dict).
    stats: dict[str, dict[str, Any]] = field(repr=False)
    files: list[str]
    sealed_stats: str = field(default="", repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form. Statistics appear only sealed: min and max are values of the table."""
        entry: dict[str, Any] = {"name": self.name, "path": self.path, "rows": self.rows, "bytes": self.bytes}
        if self.sealed_stats:
            entry["sealed_stats"] = self.sealed_stats
        entry["files"] = self.files
        return entry


def row_group_rows(table: pa.Table, target_bytes: int = ROW_GROUP_BYTES) -> int:
    """Rows per row group so that one group of ``table`` decodes to about ``target_bytes``."""
    if table.num_rows == 0:
        return _MAX_GROUP_ROWS
    per_row = max(1, int(table.nbytes) // int(table.num_rows))
    return max(1, min(_MAX_GROUP_ROWS, target_bytes // per_row))


def write_blob(
    table: pa.Table,
    fs: pafs.FileSystem,
    path: str,
    crypto: BlobCrypto,
    *,
    name: str,
    files: list[str],
    row_group_bytes: int = ROW_GROUP_BYTES,
) -> BlobMeta:
    """Write one encrypted blob, its data key bound to ``name``, in row groups of about
    ``row_group_bytes`` decoded. S3 makes the object visible only when the upload completes, and the
    name is deterministic, so a replay overwrites the same object instead of adding one."""
    sink = pa.BufferOutputStream()
    rows = row_group_rows(table, row_group_bytes)
    with crypto.encrypting(name) as properties:
        pq.write_table(table, sink, compression="zstd", encryption_properties=properties, row_group_size=rows)
    buf = sink.getvalue()
    with fs.open_output_stream(path) as out:
        out.write(buf)
    stats = column_stats(table)
    return BlobMeta(
        name=name,
        path=path,
        rows=table.num_rows,
        bytes=buf.size,
        stats=stats,
        files=files,
        sealed_stats=crypto.seal_stats(stats, name),
    )


def blob_name_of(path: str) -> str:
    """The blob name in ``<tables bucket>/<name>``."""
    bucket, sep, name = path.partition("/")
    if not sep or not bucket or not name:
        raise TerminalError(f"'{path}' is not '<tables bucket>/<blob name>'; pass the blob's name")
    return name


def read_blob(fs: pafs.FileSystem, path: str, crypto: BlobCrypto, *, name: str | None = None) -> pa.Table:
    """Read and decrypt one blob. ``name`` (by default the path after the bucket) must be the name it
    was written under; otherwise BlobIdentityError."""
    blob = name if name is not None else blob_name_of(path)
    with fs.open_input_file(path) as f, crypto.decrypting(blob) as properties:
        return pq.read_table(f, decryption_properties=properties)


def row_group_stats(metadata: pq.FileMetaData, group: int) -> dict[str, dict[str, Any]]:
    """A row group's statistics from the Parquet footer, in the manifest's shape (``column_stats``
    through JSON): per column ``null_count`` and, when Parquet kept them, ``min`` and ``max``.

    Parquet leaves NaN out of min/max and keeps no min/max for a value longer than its limit (never a
    truncated one), as the manifest's statistics do for NaN; a reader prunes on both alike.
    """
    rg = metadata.row_group(group)
    out: dict[str, dict[str, Any]] = {}
    for c in range(rg.num_columns):
        chunk = rg.column(c)
        stats = chunk.statistics
        if stats is None:
            continue
        entry: dict[str, Any] = {}
        if stats.has_null_count:
            entry["null_count"] = stats.null_count
        if stats.has_min_max and not isinstance(stats.min, bytes):  # BINARY: see column_stats
            entry["min"] = _jsonable(stats.min)
            entry["max"] = _jsonable(stats.max)
        out[chunk.path_in_schema] = entry
    return out


def batch_rows(metadata: pq.FileMetaData, group: int) -> int:
    """Rows to decode at a time from a row group: about ``_BATCH_BYTES`` of its columns."""
    rg = metadata.row_group(group)
    per_row = max(1, int(rg.total_byte_size) // max(1, int(rg.num_rows)))
    return max(_MIN_BATCH_ROWS, min(_MAX_BATCH_ROWS, _BATCH_BYTES // per_row))


class OpenedBlob:
    """One blob opened for reading by row group: its footer is decrypted (which checks the blob's
    identity), its pages are fetched and decrypted only as a row group is read."""

    def __init__(self, name: str, source: pa.NativeFile, parquet: pq.ParquetFile) -> None:
        self.name = name
        self._source = source
        self._parquet = parquet

    @property
    def metadata(self) -> pq.FileMetaData:
        """The decrypted footer: row groups, their sizes and statistics."""
        return self._parquet.metadata

    def decoded_bytes(self) -> int:
        """Parquet's uncompressed size of every row group: about what reading all of it holds."""
        md = self.metadata
        return sum(md.row_group(g).total_byte_size for g in range(md.num_row_groups))

    def read_group(self, group: int) -> pa.Table:
        """Every column of one row group."""
        return self._parquet.read_row_group(group)

    def batches(self, group: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
        """One row group's ``columns``, a batch of rows (``batch_rows``) at a time. Only the row
        group's column chunks are fetched (``pre_buffer`` coalesces them into few reads) and only one
        batch is decoded at a time."""
        rows = batch_rows(self.metadata, group)
        yield from self._parquet.iter_batches(batch_size=rows, row_groups=[group], columns=columns)

    def close(self) -> None:
        """Release the object's handle (and any read-ahead it holds)."""
        self._source.close()


def open_blob(fs: pafs.FileSystem, path: str, crypto: BlobCrypto, *, name: str | None = None) -> OpenedBlob:
    """Open one blob for reading by row group; its footer is read and decrypted here, so a blob
    that is not ``name`` (by default the path after the bucket) raises BlobIdentityError now."""
    blob = name if name is not None else blob_name_of(path)
    source = fs.open_input_file(path)
    try:
        with crypto.decrypting(blob) as properties:
            # The data key is unwrapped while the footer is read, inside the block; the file's
            # decryptor keeps it for the row groups read later.
            parquet = pq.ParquetFile(source, decryption_properties=properties, pre_buffer=True)
    except BaseException:
        source.close()
        raise
    return OpenedBlob(blob, source, parquet)


def crypto_from_settings(key_id: str, key: bytes) -> BlobCrypto:
    """A BlobCrypto for the master key from settings (cached per process)."""
    provider = _PROVIDERS.setdefault(key_id, StaticKeyProvider(key_id, key))
    return BlobCrypto(provider, key_id)
