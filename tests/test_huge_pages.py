"""CPU weight buffers on transparent huge pages (tiers/native/huge_pages.py): the values and layout torch.empty would
give, every whole 2 MB page advised as huge pages (the kernel's `hg` flag in /proc/self/smaps) and nothing past the
buffer, the mapping freed with the last view, and the loaded weights a decode step streams placed there."""
from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from tests.kquant_helpers import make_blocks
from tiers.engine.spec_decode.draft_head import DraftHead
from tiers.native import huge_pages
from tiers.native.huge_pages import HUGE_PAGE
from tiers.quantization.cpu_native import pack_w8
from tiers.quantization.int8 import Int8Weight
from tiers.quantization.kquant import KQuantWeight, repack
from tiers.quantization.native_weights import int8_rows

needs_thp = pytest.mark.skipif(not huge_pages.available(), reason="no transparent huge pages here")


def _mappings() -> list[tuple[int, int, set[str]]]:
    """(start, end, VmFlags) of every mapping of this process."""
    out: list[tuple[int, int, set[str]]] = []
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(x, 16) for x in head.split("-"))
                out.append((low, high, set()))
            elif head == "VmFlags:":
                out[-1][2].update(line.split()[1:])
    return out


def _advised_bytes(start: int, end: int) -> int:
    """Bytes of [start, end) in mappings advised as huge pages."""
    return sum(min(high, end) - max(low, start) for low, high, flags in _mappings()
               if "hg" in flags and low < end and high > start)


def _span(t: torch.Tensor) -> tuple[int, int]:
    return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()


@needs_thp
@pytest.mark.parametrize("shape,dtype", [((1000, 3000), torch.float32), ((5, 2 * HUGE_PAGE + 4096), torch.uint8),
                                         ((HUGE_PAGE,), torch.uint8)])
def test_whole_huge_pages_are_advised_and_nothing_past_the_buffer(shape, dtype):
    t = huge_pages.empty(shape, dtype)
    assert t.shape == shape and t.dtype == dtype and t.is_contiguous() and t.device.type == "cpu"
    start, end = _span(t)
    assert start % HUGE_PAGE == 0
    whole = (end - start) // HUGE_PAGE * HUGE_PAGE
    assert _advised_bytes(start, start + whole) == whole
    assert _advised_bytes(start + whole, end + HUGE_PAGE) == 0  # the tail stays on 4 KB pages: no page beyond it
    t.fill_(3)
    assert int(t.view(-1)[-1]) == 3 and float(t.double().sum()) == 3 * t.numel()


def test_small_buffers_and_copies_are_plain_tensors_with_the_same_values():
    small = huge_pages.empty((100, 100), torch.float32)
    assert small.shape == (100, 100) and small.is_contiguous()
    source = torch.randn(700, 1000)
    for original in (source, source.t(), source[::2]):  # strided sources: a contiguous copy of the values
        copied = huge_pages.copy(original)
        assert copied.is_contiguous() and torch.equal(copied, original) and copied.data_ptr() != source.data_ptr()
    array = np.arange(3 * HUGE_PAGE, dtype=np.uint8).reshape(3, HUGE_PAGE)
    array.flags.writeable = False  # as a mapped GGUF file's: read, never written
    copied = huge_pages.copy(array)
    assert copied.dtype == torch.uint8 and torch.equal(copied, torch.from_numpy(array.copy()))


@needs_thp
def test_the_mapping_lives_as_long_as_a_view_of_it():
    t = huge_pages.empty((3 * HUGE_PAGE,), torch.uint8)
    t.fill_(7)
    start, end = _span(t)
    view = t[HUGE_PAGE:HUGE_PAGE + 10]
    del t
    gc.collect()
    assert int(view.sum()) == 70 and _advised_bytes(start, end) > 0
    del view
    gc.collect()
    assert not any(low < end and high > start for low, high, _ in _mappings())


@needs_thp
def test_loaded_weights_are_on_huge_pages():
    """The constructors of the weights the native kernels stream: a GGUF tensor's blocks, a fused projection's
    concatenation, rows selected or repacked into a copy, the INT8 row records, a draft head's rows."""
    rng = np.random.default_rng(0)
    n, k = 1536, 2048  # Q4_K rows of 1,152 bytes: 1.7 MB a weight, 3.5 MB fused
    first = KQuantWeight.from_blocks("Q4_K", make_blocks("Q4_K", n, k, rng), n, k)
    second = KQuantWeight.from_blocks("Q4_K", make_blocks("Q4_K", n, k, rng), n, k)
    fused = KQuantWeight.cat([first, second])
    selected = fused.select_rows(torch.arange(fused.shape[0] - 1, -1, -1))
    tensors = [fused.parts[0][1], selected.parts[0][1]]
    from tiers.native import native_library

    native = native_library()
    if native is not None:
        tensors.append(repack(native, fused).parts[0][1])
    q, scales = torch.randint(-127, 128, (4096, 1024), dtype=torch.int8), torch.rand(4096) + 0.1
    records = int8_rows(Int8Weight(q, scales), torch.device("cpu"))
    linear = torch.nn.Linear(1024, 16384, bias=False)
    # a reduced draft vocabulary (2,048 rows kept, room for 4,096) with the head's own rows
    head = DraftHead.build(linear, 16384, 2048, compact=False)
    tensors += [records, head.rows]
    for t in tensors:
        start, end = _span(t)
        whole = (end - start) // HUGE_PAGE * HUGE_PAGE
        assert start % HUGE_PAGE == 0 and whole > 0 and _advised_bytes(start, start + whole) == whole
    assert torch.equal(fused.parts[0][1], torch.cat([first.parts[0][1], second.parts[0][1]]))
    assert torch.equal(selected.parts[0][1], fused.parts[0][1].flip(0))
    assert torch.equal(records, pack_w8(q, scales.unsqueeze(1).expand(4096, 1024 // 32)))
    assert torch.equal(head.rows[:2048], linear.weight[:2048].detach())


@needs_thp
def test_the_cpu_kv_cache_is_zeros_on_huge_pages():
    """A decode at a long context streams every layer's K and V rows from blocks scattered over the pool."""
    from types import SimpleNamespace

    from tiers.engine.kv_cache import KVCache

    config = SimpleNamespace(num_layers=3, num_kv_heads=2, head_dim=32)  # the fields a KV cache reads
    cache = KVCache(config, num_blocks=300, block_size=16, dtype=torch.float32, device=torch.device("cpu"))
    for t in (cache.k_cache, cache.v_cache):
        assert t.shape == (3, 300, 16, 2, 32) and t.is_contiguous() and not t.any()
        start, end = _span(t)
        whole = (end - start) // HUGE_PAGE * HUGE_PAGE
        assert start % HUGE_PAGE == 0 and whole > 0 and _advised_bytes(start, start + whole) == whole
    k, v = cache.layers[1]
    k[2, 3] = 1.0
    assert cache.k_cache[1, 2, 3].eq(1.0).all() and cache.k_cache.sum() == 2 * 32 and not v.any()


@needs_thp
def test_a_slab_arena_packs_copies_first_fit_on_whole_huge_pages():
    """Copies with the source's values, each `align`-aligned, placed in the first slab with room (a small one after
    a large one fills the first slab's gap), a copy larger than a slab in a buffer of whole huge pages of its own,
    and every byte of every copy in a mapping advised as huge pages; a slab lives as long as a copy in it."""
    arena = huge_pages.SlabArena(slab_bytes=2 * HUGE_PAGE, align=4096)
    sources = [torch.randint(0, 256, (n,), dtype=torch.uint8) for n in (5 << 20, 100_000, 4_100_000, 5000)]
    sources.append(torch.randn(300, 100))  # another dtype and shape
    copies = [arena.copy(s) for s in sources]
    for source, copy in zip(sources, copies):
        assert copy.shape == source.shape and copy.dtype == source.dtype and torch.equal(copy, source)
        start, end = _span(copy)
        assert start % 4096 == 0 and _advised_bytes(start, end) == end - start
    assert len(arena.slabs) == 2  # 100,000 B, 5,000 B and 120,000 B in the first, 4,100,000 B in the second
    first = arena.slabs[0][0].data_ptr()
    assert [c.data_ptr() - first for c in (copies[1], copies[3], copies[4])] == [0, 102_400, 110_592]
    assert _span(copies[0])[0] % HUGE_PAGE == 0  # its own buffer: 6 MB of huge pages for 5 MB
    start, end = _span(arena.slabs[0][0])
    small = copies[3]
    del arena, sources, copies, source, copy
    gc.collect()
    assert torch.equal(small, small.clone()) and _advised_bytes(start, end) == end - start  # held by one copy
    del small
    gc.collect()
    assert not any(low < end and high > start for low, high, _ in _mappings())


@needs_thp
def test_a_models_streamed_weights_are_packed_and_compute_the_same():
    """pack_streamed_weights moves every native projection's weight onto huge pages, the K-quant parts and the INT8
    records alike, with the same bits out of the layer; a head whose rows a tied embedding reads stays shared."""
    from tiers.native import native_library
    from tiers.quantization.int8 import quantize_int8
    from tiers.quantization.linear import QuantizedEmbedding, QuantizedLinear
    from tiers.quantization.placement import pack_streamed_weights

    if native_library() is None:
        pytest.skip("the native library does not build here")
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    kq = QuantizedLinear(KQuantWeight([("Q6_K", torch.from_numpy(make_blocks("Q6_K", 300, 512, rng))),
                                       ("Q8_0", torch.from_numpy(make_blocks("Q8_0", 40, 512, rng)))], 512))
    int8 = QuantizedLinear(quantize_int8(torch.randn(96, 512), blockwise=True), kernel="cpu_w8a8")
    head = QuantizedLinear(quantize_int8(torch.randn(1000, 512), blockwise=True), kernel="cpu_w8a32")
    model = torch.nn.ModuleDict({"kq": kq, "int8": int8, "head": head,
                                 "embed": QuantizedEmbedding(head, torch.float32)})
    x = torch.randn(3, 512)
    before = {name: model[name](x) for name in ("kq", "int8", "head")}
    shared = head.qweight
    moved = pack_streamed_weights(model)
    assert moved == sum(rows.numel() for _, rows in kq.kq.parts) + int8.qweight.numel()
    assert head.qweight is shared and model["embed"].qweight is shared
    for tensor in [rows for _, rows in kq.kq.parts] + [int8.qweight]:
        start, end = _span(tensor)
        assert _advised_bytes(start, end) == end - start
    assert [kq.kq_part0.data_ptr(), kq.kq_part1.data_ptr()] == [rows.data_ptr() for _, rows in kq.kq.parts]
    for name in ("kq", "int8", "head"):
        assert torch.equal(model[name](x), before[name]), name
