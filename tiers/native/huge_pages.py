"""CPU buffers on transparent huge pages, for the weights the native kernels stream.

A batch-1 decode step reads every weight once, so it runs at the rate memory streams, and on 4 KB pages that rate is
lower: on an AMD EPYC (2 threads, interleaved in one process) an AVX2 read loop over 1 GiB read 17.5 GB/s on 4 KB
pages and 19.3 GB/s on 2 MB pages, and a Q4_K_R kernel call on the 1.5B's gate shape (8,960 x 1,536) ran 5% faster
on 2 MB pages, Q5_0_R on the 0.5B's 7%. numpy advises huge pages for the aligned middle of its arrays from 4 MB,
torch not at all (unless THP_MEM_ALLOC_ENABLE is set), so the projections torch concatenated (qkv, gate_up: 45% of
the 1.5B's bytes) sat on 4 KB pages while most others did not.

`empty` maps anonymous private memory and advises huge pages (MADV_HUGEPAGE) for its whole 2 MB pages before
anything touches them: the first write faults huge pages in where the kernel has free ones (THP "always" or
"madvise"). The bytes past the last whole 2 MB page stay on 4 KB pages, so nothing is allocated beyond the buffer.
Under 2 MB, on a system without THP or with THP "never", it is torch.empty. The buffer is unmapped when the last
tensor viewing it is freed.

That leaves a weight under 2 MB, and every weight's last partial page, on 4 KB pages. `SlabArena` packs many
buffers into shared slabs of whole huge pages instead (a loaded model's streamed weights:
tiers/quantization/placement.py, which has the figures).
"""
from __future__ import annotations

import math
import mmap
from functools import cache
from pathlib import Path

import numpy as np
import torch

HUGE_PAGE = 2 << 20
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@cache
def available() -> bool:
    """Transparent huge pages can back an advised mapping here (Linux with THP "always" or "madvise")."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        setting = THP_SETTING.read_text()
    except OSError:
        return False
    return "[always]" in setting or "[madvise]" in setting


def empty(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """An uninitialised contiguous CPU tensor, its whole 2 MB pages advised as huge pages (see the module)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < HUGE_PAGE or not available():
        return torch.empty(shape, dtype=dtype)
    mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                        prot=mmap.PROT_READ | mmap.PROT_WRITE)
    flat = torch.frombuffer(mapping, dtype=torch.uint8)  # holds the mapping until the last view is freed
    start = -flat.data_ptr() % HUGE_PAGE
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE, start, nbytes // HUGE_PAGE * HUGE_PAGE)
    except OSError:  # refused (a sandbox's seccomp, a kernel built without it): the same buffer on 4 KB pages
        pass
    return flat[start:start + nbytes].view(dtype).view(shape)


def copy(source: torch.Tensor | np.ndarray) -> torch.Tensor:
    """A contiguous CPU copy of `source` in a buffer from `empty`."""
    if isinstance(source, np.ndarray):  # copied by numpy: a read-only source (a mapped file) is only read
        out = empty(source.shape, torch.from_numpy(np.empty(0, source.dtype)).dtype)
        out.numpy()[...] = source
        return out
    out = empty(source.shape, source.dtype)
    out.copy_(source)
    return out


class SlabArena:
    """Copies of tensors carved from shared slabs of whole huge pages (`empty` of a multiple of 2 MB), each copy
    `align`-byte aligned and placed in the first slab with room, in the order asked; a tensor larger than a slab
    gets a buffer of its own, rounded up to whole huge pages. A slab lives as long as a copy in it. Append-only:
    for weights that stay until the model goes."""

    def __init__(self, slab_bytes: int = 16 * HUGE_PAGE, align: int = 4096) -> None:
        assert slab_bytes % HUGE_PAGE == 0 and align > 0 and HUGE_PAGE % align == 0
        self.slab_bytes, self.align = slab_bytes, align
        self.slabs: list[list] = []  # [flat uint8 slab, bytes used]

    def copy(self, source: torch.Tensor) -> torch.Tensor:
        """A contiguous copy of `source` (a CPU tensor) in the arena."""
        nbytes = source.numel() * source.element_size()
        out = self._place(nbytes)[:nbytes].view(source.dtype).view(source.shape)
        out.copy_(source)
        return out

    def _place(self, nbytes: int) -> torch.Tensor:
        if nbytes > self.slab_bytes:
            return empty((-(-nbytes // HUGE_PAGE) * HUGE_PAGE,), torch.uint8)
        for slab in self.slabs:
            start = -(-slab[1] // self.align) * self.align
            if start + nbytes <= self.slab_bytes:
                slab[1] = start + nbytes
                return slab[0][start:]
        self.slabs.append([empty((self.slab_bytes,), torch.uint8), nbytes])
        return self.slabs[-1][0]
