"""Where a loaded model's streamed weights live on the CPU: packed into shared slabs of huge pages.

Policy: a batch-1 decode step streams every projection's weight once, at the rate memory and address translation
allow. A weight in a buffer of its own (huge_pages.empty) keeps its last partial 2 MB page on 4 KB pages, and a
weight under 2 MB all of it: 36% of the 0.5B's layer bytes, 15% of the 1.5B's. Packed back to back, in model order,
into slabs of whole huge pages (huge_pages.SlabArena), all of them are on huge pages but for the last slab's
unused tail: the 1.5B's decoder stack ran 2.6% faster (8 paired rounds, 95% interval 0.1-5.1%; docs/benchmarks.md,
issue 37's twenty-second pass), at the same resident memory.

Packed: the weight buffers of every QuantizedLinear on a native CPU kernel that no other module shares (a tied INT8
head's rows, which the embedding reads too, stay where they are). It runs once, after loading and before anything
records the buffers' addresses (the native decoder layer's structs); without transparent huge pages it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from collections import Counter

from torch import nn

from tiers.native import huge_pages
from tiers.quantization.kquant import KQuantWeight
from tiers.quantization.linear import QuantizedLinear
from tiers.quantization.methods import NATIVE_KERNELS


def pack_streamed_weights(model: nn.Module) -> int:
    """Moves the buffers the module docstring names into one SlabArena; returns the bytes moved."""
    if not huge_pages.available():
        return 0
    owners = Counter(id(b) for m in model.modules() for b in m.buffers(recurse=False))
    arena = huge_pages.SlabArena()
    moved = 0
    for module in model.modules():
        if not isinstance(module, QuantizedLinear) or module.kernel not in NATIVE_KERNELS:
            continue
        if module.kernel == "cpu_kq":
            if any(owners[id(rows)] > 1 for _, rows in module.kq.parts):
                continue
            parts = [(kind, arena.copy(rows)) for kind, rows in module.kq.parts]
            module.kq = KQuantWeight(parts, module.kq.in_features)
            for i, (_, rows) in enumerate(parts):
                module.register_buffer(f"kq_part{i}", rows)
                moved += rows.numel()
        elif owners[id(module.qweight)] == 1:
            module.register_buffer("qweight", arena.copy(module.qweight))
            moved += module.qweight.numel() * module.qweight.element_size()
    _trim_heap()
    return moved


def _trim_heap() -> None:
    """Hands the heap's free pages back to the system (glibc's malloc_trim): the weights under 2 MB came from the
    heap, whose freed chunks otherwise stay resident (~90 MB on the 1.5B)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return
    if trim is not None:
        trim(0)
