"""Internal stages' files, encrypted at rest: a streaming envelope format under Floe's master key.

A file PUT on an internal stage is stored in Floe's stages bucket as::

    header   magic "FLOESTG1" (8) | master key id, UTF-8, zero-padded (64) | wrap nonce (12)
             | data key wrapped by the master key, AES-256-GCM (32 + 16) | segment nonce prefix (7)
    segments the file in segments of ``SEGMENT`` bytes (the last one shorter, maybe empty), each
             sealed with AES-256-GCM under the data key: nonce = prefix | segment number (4, big
             endian) | 1 for the last segment else 0; associated data = the header

A fresh random data key per file, wrapped with the master key (as ``floe.blobs`` wraps a blob's
data key) with the object key as associated data: a file copied or moved to another key, or to
another stage, does not decrypt. The segment numbers and the last-segment flag (the STREAM
construction) make a reordered, cut or extended file fail too. Segments let the API encrypt an
upload and decrypt a download as they stream, and the Spark tasks decrypt a large file as they
parse it, holding one segment at a time. The header has a fixed length, so a file's size as PUT
follows from its stored size (``plain_size``) without reading it, which LIST shows.
"""

from __future__ import annotations

import os
import struct
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from floe.blobs import KeyProvider, StaticKeyProvider
from floe.errors import FileLoadError

MAGIC = b"FLOESTG1"
"""The first bytes of every encrypted stage file (format version 1)."""
KEY_ID_BYTES = 64
"""Room for the master key's id in the header (``encryption.master_key_id``, UTF-8)."""
SEGMENT = 1 << 20
"""Plaintext bytes per sealed segment."""
TAG = 16
"""AES-GCM tag bytes after each segment."""
_WRAPPED = 32 + TAG
_PREFIX = 7
HEADER = len(MAGIC) + KEY_ID_BYTES + 12 + _WRAPPED + _PREFIX
"""Header bytes before the first segment."""
_KEY_AAD = b"floe/stage-file-key/v1\x00"


class StageFileError(FileLoadError):
    """A stage file does not decrypt under its name: altered, cut short, moved, or sealed under
    another master key. Loading it fails the file (never the batch)."""


class Readable(Protocol):
    """Anything with a blocking ``read(n)`` (a boto3 body, a pyarrow stream, a file)."""

    def read(self, n: int = ..., /) -> bytes:
        """Up to n bytes; b'' at the end."""
        ...


def stored_size(plain: int) -> int:
    """The stored size of a file of ``plain`` bytes."""
    segments = max(1, -(-plain // SEGMENT))
    return HEADER + plain + TAG * segments


def plain_size(stored: int) -> int:
    """The size a file had when it was PUT, from its stored size (``stored_size``'s inverse);
    0 for an object too short to be a stage file."""
    body = stored - HEADER
    if body < TAG:
        return 0
    segments = -(-body // (SEGMENT + TAG))
    return body - TAG * segments


def _nonce(prefix: bytes, number: int, last: bool) -> bytes:
    return prefix + struct.pack(">IB", number, 1 if last else 0)


class Encryptor:
    """Seals one file as it arrives: ``header``, then what ``update`` and ``finish`` return."""

    def __init__(self, master: bytes, key_id: str, name: str) -> None:
        raw_id = key_id.encode()
        if len(raw_id) > KEY_ID_BYTES:
            raise ValueError(f"the master key id is longer than {KEY_ID_BYTES} bytes")
        data_key = AESGCM.generate_key(bit_length=256)
        wrap_nonce = os.urandom(12)
        wrapped = AESGCM(master).encrypt(wrap_nonce, data_key, _KEY_AAD + name.encode())
        self._prefix = os.urandom(_PREFIX)
        self.header = MAGIC + raw_id.ljust(KEY_ID_BYTES, b"\0") + wrap_nonce + wrapped + self._prefix
        self._aead = AESGCM(data_key)
        self._pending = bytearray()
        self._number = 0
        self.plain_bytes = 0
        """Plaintext bytes taken so far."""

    def _seal(self, chunk: bytes, last: bool) -> bytes:
        sealed = self._aead.encrypt(_nonce(self._prefix, self._number, last), chunk, self.header)
        self._number += 1
        return sealed

    def update(self, data: bytes) -> bytes:
        """The sealed segments ``data`` completes. The last ``SEGMENT`` bytes stay pending, so the
        segment that ``finish`` seals is the file's last whatever its length."""
        self._pending += data
        self.plain_bytes += len(data)
        out = bytearray()
        while len(self._pending) > SEGMENT:
            out += self._seal(bytes(self._pending[:SEGMENT]), last=False)
            del self._pending[:SEGMENT]
        return bytes(out)

    def finish(self) -> bytes:
        """The last segment (an empty file has one, empty)."""
        sealed = self._seal(bytes(self._pending), last=True)
        self._pending.clear()
        return sealed


class DecryptingReader:
    """A stage file's plaintext as a stream (``read(n)``), from its stored bytes. StageFileError as
    soon as a segment fails to open, or the stream ends where no last segment was sealed."""

    closed = False  # what pyarrow's PythonFile checks before it reads

    def __init__(self, raw: Readable, provider: KeyProvider, name: str) -> None:
        self._raw = raw
        self._name = name
        header = self._exactly(HEADER)
        if len(header) < HEADER or not header.startswith(MAGIC):
            raise self._error("it is not an encrypted stage file (no Floe header)")
        key_id = header[len(MAGIC) : len(MAGIC) + KEY_ID_BYTES].rstrip(b"\0").decode(errors="replace")
        at = len(MAGIC) + KEY_ID_BYTES
        wrap_nonce, wrapped = header[at : at + 12], header[at + 12 : at + 12 + _WRAPPED]
        try:
            master = provider.master_key(key_id)
            data_key = AESGCM(master).decrypt(wrap_nonce, wrapped, _KEY_AAD + name.encode())
        except InvalidTag:
            raise self._error(
                "its key does not open under its name (it was moved or copied from another stage file, "
                "or sealed under another master key)"
            ) from None
        except FileLoadError:
            raise
        except Exception as exc:  # noqa: BLE001 -- an unknown key id, from any KeyProvider
            raise self._error(f"its master key is not available ({exc})") from None
        self._header = header
        self._prefix = header[-_PREFIX:]
        self._aead = AESGCM(data_key)
        self._number = 0
        self._current = self._exactly(SEGMENT + TAG)
        self._done = False
        self._buffer = b""
        self._offset = 0

    def _error(self, why: str) -> StageFileError:
        return StageFileError(f"Stage file '{self._name}' cannot be decrypted: {why}.", file=self._name)

    def _exactly(self, n: int) -> bytes:
        parts: list[bytes] = []
        left = n
        while left > 0:
            piece = self._raw.read(left)
            if not piece:
                break
            parts.append(bytes(piece))
            left -= len(piece)
        return b"".join(parts)

    def _next_segment(self) -> bytes:
        """The next segment's plaintext; b'' once the last one was read."""
        if self._done:
            return b""
        ahead = self._exactly(SEGMENT + TAG) if len(self._current) == SEGMENT + TAG else b""
        last = not ahead
        try:
            plain = self._aead.decrypt(_nonce(self._prefix, self._number, last), self._current, self._header)
        except InvalidTag:
            raise self._error(
                f"segment {self._number} was altered, or the file was cut short or extended"
            ) from None
        self._number += 1
        self._current = ahead
        self._done = last
        return plain

    def read(self, n: int = -1, /) -> bytes:
        """Up to ``n`` plaintext bytes (all that is left for n < 0); b'' at the end."""
        out: list[bytes] = []
        want = n if n >= 0 else -1
        while want != 0:
            if self._offset >= len(self._buffer):
                self._buffer, self._offset = self._next_segment(), 0
                if not self._buffer:
                    break
            end = len(self._buffer) if want < 0 else min(len(self._buffer), self._offset + want)
            out.append(self._buffer[self._offset : end])
            if want > 0:
                want -= end - self._offset
            self._offset = end
        return b"".join(out)

    def readable(self) -> bool:
        """For pyarrow's PythonFile."""
        return True

    def close(self) -> None:
        """Close the stored stream under it, when it can be closed."""
        close = getattr(self._raw, "close", None)
        if close is not None:
            close()
        self.closed = True


class StageCipher:
    """Seals and opens internal stage files under one master key."""

    def __init__(self, provider: KeyProvider, key_id: str) -> None:
        self._provider = provider
        self.key_id = key_id

    def encryptor(self, name: str) -> Encryptor:
        """A new file's encryptor; ``name`` is its object key in the stages bucket."""
        return Encryptor(self._provider.master_key(self.key_id), self.key_id, name)

    def reader(self, raw: Readable, name: str) -> DecryptingReader:
        """The plaintext of the stored stream ``raw`` of the object ``name``."""
        return DecryptingReader(raw, self._provider, name)

    def seal(self, data: bytes, name: str) -> bytes:
        """A whole file, sealed (tests and small files)."""
        enc = self.encryptor(name)
        return enc.header + enc.update(data) + enc.finish()

    def open(self, stored: bytes, name: str) -> bytes:
        """A whole stored file's plaintext."""
        return self.reader(_Bytes(stored), name).read()


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._at = 0

    def read(self, n: int = -1, /) -> bytes:
        end = len(self._data) if n < 0 else min(len(self._data), self._at + n)
        piece = bytes(self._data[self._at : end])
        self._at = end
        return piece


def stage_cipher(key_id: str, key: bytes) -> StageCipher:
    """The cipher for the master key from settings (``encryption.master_key_id`` and its key)."""
    return StageCipher(StaticKeyProvider(key_id, key), key_id)
