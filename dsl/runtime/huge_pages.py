"""Buffers on 2 MiB pages, for the memory every run of a model streams through.

Most kernels ship transparent huge pages in ``madvise`` mode: only memory advised
``MADV_HUGEPAGE`` gets 2 MiB pages.  numpy advises its own allocations of 4 MiB or more, so a
model's activation buffers (light_resnet50's largest is 3.2 MB) sat on 4 KiB pages, 16 bytes
past a line.  One run of light_resnet50 walks ~100 MB of weights and ~10 MB of activations:
its packed weights on 4 KiB pages ran it 5-16 % slower than on huge pages, and its arena
carved from one advised mapping 2-4 % faster than as numpy arrays, in one process, alternated
(benchmarks/bench_pages.py; RESULTS.md, twenty-first session, slice proc).

``OPDSL_HUGE_PAGES=0`` turns the advice off (the buffers are still one mapping, on 4 KiB
pages); where the kernel has no transparent huge pages the advice is ignored."""

from __future__ import annotations

import mmap
from typing import List, Sequence

import numpy as np

from dsl import config
from dsl.runtime.cache_lines import LINE, line_aligned

HUGE_PAGE = 2 << 20  # bytes
ALIGN = 4096         # each carved buffer starts on a page: on a cache line, and no two share a page


def mapping(nbytes: int) -> mmap.mmap:
    """An anonymous private mapping of at least ``nbytes`` (zero-filled), advised as huge pages
    unless OPDSL_HUGE_PAGES=0 or it is under one huge page.  Its length is rounded up to whole
    huge pages, so its tail gets one too (the kernel, 6.7 and later, places such a mapping on
    a 2 MiB boundary); a kernel without transparent huge pages leaves it on 4 KiB pages."""
    nbytes = max(int(nbytes), 1)
    advise = config.huge_pages() and nbytes >= HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE")
    region = mmap.mmap(-1, -(-nbytes // HUGE_PAGE) * HUGE_PAGE if advise else nbytes,
                       flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if advise:
        try:
            region.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # no transparent huge pages here
            pass
    return region


def anonymous(nbytes: int) -> np.ndarray:
    """A zero-filled writable uint8 array of ``nbytes`` on its own ``mapping`` (on a cache line
    of a numpy array where anonymous private mappings do not exist, as on Windows)."""
    try:
        return np.frombuffer(mapping(nbytes), np.uint8, max(int(nbytes), 1))
    except (AttributeError, OSError, ValueError, TypeError):
        return line_aligned(max(int(nbytes), 1), np.uint8, zero=True)


def carve(sizes: Sequence[int]) -> List[np.ndarray]:
    """One zero-filled uint8 array per size, all in one block, each starting on a page -- in one
    ``anonymous`` mapping when they add up to a huge page or more, else (a small model: no
    mapping per plan) on cache lines of one numpy array.  The buffers keep their block alive as
    long as any of them lives."""
    sizes = [max(int(size), 1) for size in sizes]
    align = ALIGN if sum(sizes) >= HUGE_PAGE else LINE
    offsets, end = [], 0
    for size in sizes:
        offsets.append(end)
        end += -(-size // align) * align
    whole = anonymous(end) if align == ALIGN else line_aligned(end, np.uint8, zero=True)
    return [whole[at:at + size] for at, size in zip(offsets, sizes)]
