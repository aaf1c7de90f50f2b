"""The block checksum of the artifact's weight sections (dsl/opgraph/artifact_checksum.py): it
matches its definition, written out with Python integers, and a flipped bit, a moved, zeroed or
replaced block, a truncation or an extension each change it."""
import hashlib

import numpy as np
import pytest

from dsl.opgraph import artifact_checksum as ac

WORDS = ac.BLOCK_WORDS
BLOCK = WORDS * 8


def _reference(data: bytes) -> str:
    """The definition, with Python integers: per 64 KiB block (the data, then zeros up to the next
    block boundary: there is always a last, padded block), the sum of its little-endian 64-bit
    words and the sum of word j times 2j + 1, both mod 2^64."""
    n = len(data)
    padded = data + b"\0" * (BLOCK - n % BLOCK)
    table = []
    for at in range(0, len(padded), BLOCK):
        words = [int.from_bytes(padded[at + 8 * j:at + 8 * j + 8], "little") for j in range(WORDS)]
        table.append(sum(words) % 2**64)
        table.append(sum((2 * j + 1) * w for j, w in enumerate(words)) % 2**64)
    h = hashlib.sha256(n.to_bytes(8, "little"))
    h.update(b"".join(v.to_bytes(8, "little") for v in table))
    return h.hexdigest()


@pytest.fixture(scope="module")
def data() -> bytes:
    return np.random.default_rng(11).integers(0, 256, 2 * BLOCK + 1000, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("size", [0, 5, BLOCK, 2 * BLOCK + 1000])
def test_it_matches_its_definition(data, size):
    assert ac.block_sums(data[:size]) == _reference(data[:size])


def test_chunks_are_hashed_as_their_concatenation(data):
    assert ac.block_sums([data[:100], memoryview(data)[100:BLOCK + 3], bytearray(data[BLOCK + 3:])]) == \
        ac.block_sums(data)


@pytest.mark.parametrize("at", [0, 7, 8, BLOCK - 1, BLOCK, BLOCK + 12345, 2 * BLOCK, 2 * BLOCK + 999])
@pytest.mark.parametrize("bit", [0, 3, 7])
def test_one_flipped_bit_anywhere_changes_it(data, at, bit):
    bad = bytearray(data)
    bad[at] ^= 1 << bit
    assert ac.block_sums(bytes(bad)) != ac.block_sums(data)


def test_two_flips_that_cancel_in_a_plain_sum_change_it(data):
    """Bit 5 set in one word and cleared in another of the same block leaves the sum of the block's
    words as it was; the odd-weighted sum sees it."""
    bad = bytearray(data)
    i, j = next((i, j) for i in range(0, BLOCK, 8) for j in range(i + 8, BLOCK, 8)
                if not bad[i] & 32 and bad[j] & 32)
    bad[i] |= 32
    bad[j] &= ~32 & 0xFF
    words = np.frombuffer(bytes(bad[:BLOCK]), "<u8"), np.frombuffer(data[:BLOCK], "<u8")
    assert words[0].sum() == words[1].sum()  # what a plain sum would miss
    assert ac.block_sums(bytes(bad)) != ac.block_sums(data)


def test_moved_zeroed_truncated_and_extended_data_change_it(data):
    good = ac.block_sums(data)
    swapped = data[BLOCK:2 * BLOCK] + data[:BLOCK] + data[2 * BLOCK:]
    zeroed = data[:BLOCK] + b"\0" * BLOCK + data[2 * BLOCK:]
    for bad in (swapped, zeroed, data[:-1], data[:2 * BLOCK], data + b"\0", data + b"\0" * BLOCK):
        assert ac.block_sums(bad) != good
