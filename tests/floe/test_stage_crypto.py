"""Internal stages' files at rest: sealed per file under the master key, bound to their names,
streamed a segment at a time; altering, cutting, extending, reordering or moving one fails it."""

from __future__ import annotations

import io
import os

import pytest

from floe.blobs import StaticKeyProvider
from floe.stage_crypto import (
    HEADER,
    SEGMENT,
    TAG,
    StageCipher,
    StageFileError,
    plain_size,
    stage_cipher,
    stored_size,
)

pytestmark = pytest.mark.unit

KEY = bytes(range(32))
NAME = "stages/0123456789abcdef/in/a.csv.gz"


@pytest.fixture
def cipher() -> StageCipher:
    return stage_cipher("floe-master-1", KEY)


@pytest.mark.parametrize("size", [0, 1, 100, SEGMENT - 1, SEGMENT, SEGMENT + 1, 3 * SEGMENT + 7])
def test_round_trip_and_sizes(cipher: StageCipher, size: int) -> None:
    data = os.urandom(size)
    stored = cipher.seal(data, NAME)
    assert len(stored) == stored_size(size)
    assert plain_size(len(stored)) == size
    assert cipher.open(stored, NAME) == data


def test_sizes_invert_everywhere_near_segment_edges() -> None:
    for segments in range(4):
        for delta in range(-TAG - 2, TAG + 3):
            size = max(0, segments * SEGMENT + delta)
            assert plain_size(stored_size(size)) == size
    assert plain_size(HEADER) == 0  # too short to be a stage file


def test_the_stored_bytes_do_not_show_the_file(cipher: StageCipher) -> None:
    data = b"id,secret\n" + b"1,hunter2 the password of the account\n" * 1000
    stored = cipher.seal(data, NAME)
    assert b"hunter2" not in stored and b"id,secret" not in stored
    assert cipher.seal(data, NAME) != stored  # a fresh data key per file


def test_a_file_read_in_small_pieces_streams(cipher: StageCipher) -> None:
    data = os.urandom(2 * SEGMENT + 123)
    reader = cipher.reader(io.BytesIO(cipher.seal(data, NAME)), NAME)
    pieces = []
    while piece := reader.read(4099):
        assert len(piece) <= 4099
        pieces.append(piece)
    assert b"".join(pieces) == data
    assert reader.read(10) == b""


def test_the_encryptor_fed_in_pieces_seals_what_one_call_seals(cipher: StageCipher) -> None:
    data = os.urandom(SEGMENT * 2)  # an exact multiple: the last full segment is the last one
    enc = cipher.encryptor(NAME)
    out = enc.header + b"".join(enc.update(data[i : i + 65536]) for i in range(0, len(data), 65536))
    out += enc.finish()
    assert len(out) == stored_size(len(data))
    assert cipher.open(out, NAME) == data


def _fails(cipher: StageCipher, stored: bytes, name: str = NAME) -> str:
    with pytest.raises(StageFileError) as caught:
        cipher.open(stored, name)
    return caught.value.message


def test_a_moved_file_does_not_decrypt(cipher: StageCipher) -> None:
    stored = cipher.seal(b"a,b\n", NAME)
    assert "moved or copied" in _fails(cipher, stored, "stages/fedcba9876543210/in/a.csv.gz")


def test_another_master_key_does_not_decrypt(cipher: StageCipher) -> None:
    stored = cipher.seal(b"a,b\n", NAME)
    other = StageCipher(StaticKeyProvider("floe-master-1", bytes(32)), "floe-master-1")
    assert "moved or copied" in _fails(other, stored)
    unknown = StageCipher(StaticKeyProvider("floe-master-2", KEY), "floe-master-2")
    assert "not available" in _fails(unknown, stored)


def test_altered_cut_extended_or_reordered_files_fail(cipher: StageCipher) -> None:
    data = os.urandom(2 * SEGMENT + 10)
    stored = cipher.seal(data, NAME)
    flipped = bytearray(stored)
    flipped[HEADER + 5] ^= 1
    assert "segment 0" in _fails(cipher, bytes(flipped))
    one = SEGMENT + TAG
    assert "cut short" in _fails(cipher, stored[: HEADER + 2 * one])  # the last segment dropped
    assert "segment 2" in _fails(cipher, stored + stored[-one:])  # a segment added
    first, second = stored[HEADER : HEADER + one], stored[HEADER + one : HEADER + 2 * one]
    swapped = stored[:HEADER] + second + first + stored[HEADER + 2 * one :]
    assert "segment 0" in _fails(cipher, swapped)
    header = bytearray(stored)
    header[len(b"FLOESTG1") + 64 + 12 + 3] ^= 1  # the wrapped key
    assert "moved or copied" in _fails(cipher, bytes(header))


def test_an_object_that_is_not_a_stage_file_fails(cipher: StageCipher) -> None:
    assert "no Floe header" in _fails(cipher, b"id,name\n1,a\n")
    assert "no Floe header" in _fails(cipher, b"")


def test_a_key_id_too_long_for_the_header_is_refused() -> None:
    with pytest.raises(ValueError, match="longer than 64 bytes"):
        stage_cipher("k" * 65, KEY).encryptor(NAME)
