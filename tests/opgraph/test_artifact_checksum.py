"""The weight sections' checksum (dsl/opgraph/artifact_checksum.py): CRC-32 of the bytes taken as
one stream, with their length; chunks hash as their concatenation, and a flipped bit, two flips,
a moved or zeroed block, a truncation or an extension each change it."""
import zlib

import numpy as np
import pytest

from dsl.opgraph import artifact_checksum as ac

BLOCK = 1 << 16


@pytest.fixture(scope="module")
def data() -> bytes:
    return np.random.default_rng(11).integers(0, 256, 2 * BLOCK + 1000, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("size", [0, 5, BLOCK, 2 * BLOCK + 1000])
def test_it_is_the_length_and_zlibs_crc32(data, size):
    assert ac.crc32_digest(data[:size]) == f"{size:x}-{zlib.crc32(data[:size]):08x}"


def test_chunks_are_hashed_as_their_concatenation(data):
    assert ac.crc32_digest([data[:100], memoryview(data)[100:BLOCK + 3], bytearray(data[BLOCK + 3:])]) == \
        ac.crc32_digest(data)


@pytest.mark.parametrize("at", [0, 7, 8, BLOCK - 1, BLOCK, 2 * BLOCK + 999])
@pytest.mark.parametrize("bit", [0, 7])
def test_one_flipped_bit_anywhere_changes_it(data, at, bit):
    bad = bytearray(data)
    bad[at] ^= 1 << bit
    assert ac.crc32_digest(bytes(bad)) != ac.crc32_digest(data)


def test_two_flips_that_cancel_in_a_plain_sum_change_it(data):
    """A bit set in one byte and the same bit cleared in another leaves a byte sum as it was."""
    bad = bytearray(data)
    i = next(i for i in range(len(bad)) if not bad[i] & 32)
    j = next(j for j in range(BLOCK, len(bad)) if bad[j] & 32)
    bad[i] |= 32
    bad[j] &= ~32 & 0xFF
    assert sum(bad) == sum(data)
    assert ac.crc32_digest(bytes(bad)) != ac.crc32_digest(data)


def test_moved_zeroed_truncated_and_extended_data_change_it(data):
    good = ac.crc32_digest(data)
    swapped = data[BLOCK:2 * BLOCK] + data[:BLOCK] + data[2 * BLOCK:]
    zeroed = data[:BLOCK] + b"\0" * BLOCK + data[2 * BLOCK:]
    for bad in (swapped, zeroed, data[:-1], data[:2 * BLOCK], data + b"\0", data + b"\0" * BLOCK):
        assert ac.crc32_digest(bad) != good
