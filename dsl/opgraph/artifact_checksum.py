"""The checksum of the large raw sections of ``.opdsl`` files and model plan entries (weights).

sha256 of a 200 MB weight section costs about twice the CPU of CRC-32 and protects against more
than the check is for: the trust rules (a file only this user can change, docs/cache.md) keep out
anyone who could craft a collision; this check is against a truncated copy, a damaged disk or a
bad transfer.  CRC-32 (zlib's, the one of gzip and PNG; it releases the GIL on large buffers)
detects every error burst up to 32 bits, every one- or two-bit error in sections under 512 MB,
and other damage with probability 1 - 2^-32; the length is part of the digest, so any truncation
or extension is caught whatever the bytes.  sha256 stays on the small sections (header, graph,
code), which are unpickled or run.
"""
from __future__ import annotations

import zlib

NAME = "crc32"


def crc32_digest(data) -> str:
    """``<length>-<crc32>`` in hex of ``data`` (bytes, bytearray, memoryview or a list of them,
    taken as their concatenation)."""
    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    crc, n = 0, 0
    for p in parts:
        crc = zlib.crc32(p, crc)
        n += memoryview(p).nbytes
    return f"{n:x}-{crc:08x}"
