"""A fast checksum for the large raw sections of ``.opdsl`` files and model plan entries (weights).

sha256 of a 200 MB weight section costs 0.4-1.3 s of CPU on a 2-core Zen 3 -- as long as the rest
of ``dsl.load_model`` together -- and it protects against more than the check is for: the trust
rules (a file only this user can change, docs/cache.md) keep out anyone who could craft a
collision; the checksum is against a truncated copy, a damaged disk or a bad transfer.

``block_sums`` reads the bytes as little-endian 64-bit words in blocks of 64 KiB and keeps, per
block, the wrapping sum of its words and the wrapping sum of its words times 1, 3, 5, ... (odd
weights, as in Fletcher's and Adler's checksums: a product with an odd number keeps every bit of
a change).  The digest is the sha256 of the length and that table.  numpy computes both sums
(~3x faster than sha256 here, and outside the GIL).

What it catches: any change inside one 8-byte word of a block, whatever its bits (both sums
change); any change to two words of a block except a pair of opposite flips of their top bit(s)
(about 1 in 4,000 random double flips in one block); a block moved, duplicated, zeroed or
replaced by other data (except with probability ~2^-64); and any truncation or extension (the
length).  sha256 stays on the small sections (header, graph, code), which are unpickled or run.
"""
from __future__ import annotations

import hashlib

import numpy as np

NAME = "blocksum64"
BLOCK_WORDS = 8192                     # 64 KiB blocks
_ODD = np.arange(1, 2 * BLOCK_WORDS, 2, dtype=np.uint64)


def block_sums(data) -> str:
    """The hex digest of ``data`` (bytes, bytearray, memoryview or a list of them, concatenated)."""
    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
    if len(parts) != 1:
        joined = np.empty(sum(memoryview(p).nbytes for p in parts), np.uint8)
        at = 0
        for p in parts:
            v = np.frombuffer(p, np.uint8)
            joined[at:at + v.size] = v
            at += v.size
        raw = joined
    else:
        raw = np.frombuffer(parts[0], np.uint8)
    n = raw.size
    block = BLOCK_WORDS * 8
    full = n // block
    words = raw[:full * block].view("<u8").reshape(full, BLOCK_WORDS)
    tail = np.zeros(BLOCK_WORDS * 8, np.uint8)
    tail[:n - full * block] = raw[full * block:]
    table = np.empty((full + 1, 2), "<u8")
    np.sum(words, axis=1, out=table[:full, 0])
    np.matmul(words, _ODD, out=table[:full, 1])
    last = tail.view("<u8")
    table[full, 0] = last.sum()
    table[full, 1] = last @ _ODD
    h = hashlib.sha256(n.to_bytes(8, "little"))
    h.update(table.tobytes())
    return h.hexdigest()
