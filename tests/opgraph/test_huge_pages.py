"""A model's memory on 2 MiB pages (dsl/runtime/huge_pages.py): the plan's arena is one block
with every buffer on a page, advised as huge pages unless OPDSL_HUGE_PAGES=0; plan-cache hits
and artifacts read their weights into such a mapping.  Results are the same either way."""
import mmap

import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph import artifact_format
from dsl.runtime import huge_pages
from dsl.runtime.cache_lines import LINE, address

RNG = np.random.default_rng(21)


class Recording(mmap.mmap):
    """mmap.mmap that records its madvise calls (and can refuse them, as a kernel without THP)."""
    advised: list = []
    refuse = False

    def madvise(self, *args):
        Recording.advised.append(args)
        if Recording.refuse:
            raise OSError(22, "Invalid argument")
        return super().madvise(*args)


@pytest.fixture
def recording(monkeypatch):
    monkeypatch.setattr(huge_pages.mmap, "mmap", Recording)
    monkeypatch.setattr(Recording, "advised", [])
    monkeypatch.setattr(Recording, "refuse", False)
    monkeypatch.delenv("OPDSL_HUGE_PAGES", raising=False)
    return Recording


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no MADV_HUGEPAGE on this platform")
def test_a_mapping_of_a_huge_page_or_more_is_advised_and_rounded_up(recording, monkeypatch):
    small = huge_pages.mapping(huge_pages.HUGE_PAGE - 1)
    assert len(small) == huge_pages.HUGE_PAGE - 1 and recording.advised == []
    big = huge_pages.mapping(huge_pages.HUGE_PAGE + 5)
    assert len(big) == 2 * huge_pages.HUGE_PAGE  # its tail gets a whole huge page too
    assert recording.advised == [(mmap.MADV_HUGEPAGE,)]
    monkeypatch.setenv("OPDSL_HUGE_PAGES", "0")
    off = huge_pages.mapping(huge_pages.HUGE_PAGE + 5)
    assert len(off) == huge_pages.HUGE_PAGE + 5 and len(recording.advised) == 1  # not advised
    monkeypatch.delenv("OPDSL_HUGE_PAGES")
    recording.refuse = True  # a kernel without transparent huge pages: still a mapping
    refused = huge_pages.anonymous(huge_pages.HUGE_PAGE)
    assert refused.size == huge_pages.HUGE_PAGE and not refused.any()
    refused[-1] = 3
    assert refused[-1] == 3
    monkeypatch.delattr(huge_pages.mmap, "MAP_ANONYMOUS")  # no anonymous mappings (Windows): numpy's memory
    plain = huge_pages.anonymous(huge_pages.HUGE_PAGE + 5)
    assert plain.size == huge_pages.HUGE_PAGE + 5 and address(plain) % LINE == 0 and not plain.any()


@pytest.mark.parametrize("total", ["under a huge page", "a huge page or more"])
def test_carved_buffers_are_zeroed_apart_and_aligned(total):
    sizes = [5000, 1, 123457] if total == "under a huge page" else [huge_pages.HUGE_PAGE, 70001, 3]
    bufs = huge_pages.carve(sizes)
    align = huge_pages.ALIGN if sum(sizes) >= huge_pages.HUGE_PAGE else LINE
    assert [b.size for b in bufs] == sizes
    spans = sorted((address(b), address(b) + b.size) for b in bufs)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))  # no two overlap
    for i, b in enumerate(bufs):
        assert address(b) % align == 0 and b.dtype == np.uint8 and b.flags.writeable and not b.any()
        b[:] = i + 1
    assert [int(b[0]) for b in bufs] == [1, 2, 3]  # each write stayed in its own buffer


def chain():
    """x -> Exp -> Neg -> Add(., x) -> Sigmoid -> Abs: four intermediates in the arena."""
    g = dsl.Graph("pages")
    x = g.input("x", (8, 64), dsl.f32)
    g.output(ops.Abs(ops.Sigmoid(ops.Add(ops.Neg(ops.Exp(x)), x))), "y")
    return g


@pytest.mark.parametrize("huge", ["1", "0"])
def test_a_model_runs_on_its_page_aligned_arena(backend, monkeypatch, huge):
    """The plan's intermediates live in one carved block (a huge page made small here, so this
    small model takes the mapping path), each buffer on a page; the results equal numpy's on
    every backend, with the advice and without it."""
    monkeypatch.setattr(huge_pages, "HUGE_PAGE", 4096)
    monkeypatch.setenv("OPDSL_HUGE_PAGES", huge)
    carved, carve = [], huge_pages.carve
    monkeypatch.setattr(huge_pages, "carve", lambda sizes: carved.append(carve(sizes)) or carved[-1])
    model = chain().compile(backend=backend, fuse=False)
    x = RNG.standard_normal((8, 64)).astype(np.float32)
    want = np.abs(1 / (1 + np.exp(np.exp(x) - x)))
    for _ in range(2):  # the second run reuses the arena
        np.testing.assert_allclose(model.run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    assert len(carved) == 1 and carved[0]
    roots = set()
    for buf in carved[0]:
        assert address(buf) % 4096 == 0
        roots.add(id(buf.base))
    assert len(roots) == 1  # one block


def test_a_large_read_buffer_is_an_advised_mapping(recording):
    """artifact_format.private_buffer (artifacts and plan-cache hits read into it): from one
    huge page up an advised anonymous mapping of exactly the size asked, numpy's buffer below."""
    buf = artifact_format.private_buffer(huge_pages.HUGE_PAGE + 1)
    assert isinstance(buf.obj, Recording) and len(buf) == huge_pages.HUGE_PAGE + 1 and not buf.readonly
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert recording.advised == [(mmap.MADV_HUGEPAGE,)]
    assert isinstance(artifact_format.private_buffer(huge_pages.HUGE_PAGE - 1).obj, np.ndarray)


@pytest.mark.parametrize("short", [False, True], ids=["whole writes", "short writes"])
def test_the_page_writer_writes_whole_huge_pages(short):
    """Every write reaching the file starts at a huge-page offset and covers whole huge pages
    (the last one shorter), whatever the chunks' sizes; the bytes are the chunks' in order, also
    when the file takes fewer bytes than asked now and then."""
    page = huge_pages.HUGE_PAGE

    class Raw:
        def __init__(self):
            self.writes, self.data = [], bytearray()

        def write(self, b):
            n = min(len(b), 700_000) if short else len(b)
            self.writes.append((len(self.data), n))
            self.data += bytes(b[:n])
            return n
    raw = Raw()
    chunks = [RNG.integers(0, 255, size, dtype=np.uint8).tobytes() for size in (3, 2_500_000, 64, 1_900_001, 5 * page)]
    with artifact_format.PageWriter(raw) as f:
        for c in chunks:
            f.write(c)
        assert f.tell() == sum(map(len, chunks))
    assert bytes(raw.data) == b"".join(chunks)
    if not short:
        assert all(at % page == 0 for at, _ in raw.writes)
        assert all(n % page == 0 for _, n in raw.writes[:-1]) and raw.writes[-1][1] < page
        assert any(n > page for _, n in raw.writes)  # whole pages of the big chunk, written from it


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no MADV_HUGEPAGE on this platform")
@pytest.mark.parametrize("huge", ["1", "0"])
def test_a_mapped_read_is_advised_as_huge_pages(tmp_path, recording, monkeypatch, huge):
    """read(mapped=True) (plan-cache hits, load_model(mmap=True)) advises the file mapping, so
    pages the page cache does not hold are read ahead as 2 MiB folios; not with OPDSL_HUGE_PAGES=0."""
    monkeypatch.setenv("OPDSL_HUGE_PAGES", huge)
    path = artifact_format.write(tmp_path / "a.opdsl", {"key": "x"}, {"graph": b"g" * 100, "weights": [b"w" * 5000]},
                                 fast=("weights",), mode=0o600)
    art = artifact_format.read(path, trusted=True, mapped=True)
    assert bytes(art.section("weights")) == b"w" * 5000
    assert recording.advised == ([(mmap.MADV_HUGEPAGE,)] if huge == "1" else [])
