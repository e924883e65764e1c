"""GGUF-block kernel calls timed back to back in C (`aio_kq_time_calls`, tiers/native/read_bound.c), for
benchmarks.decode_bound's per-kernel figures.

Called from Python one by one, each call also paid the interpreter's code and data, cold after the weights' stream:
the 1.5B's gate_up shape (17,920 x 1,536, 84 copies, 2 threads) took 650-731 us a call through kquant.gemm,
590-640 us through ctypes alone, and 527-573 us in a C loop on an Intel Xeon (docs/benchmarks.md, issue 37's
twenty-eighth pass). A decode step runs its stack as one native call, so the C loop is the kernel's figure."""
from __future__ import annotations

import ctypes
from collections.abc import Callable

import torch

from tiers.native import NativeLibrary
from tiers.quantization.kquant import KQuantWeight, call_arrays


def kq_calls(native: NativeLibrary, weights: list[KQuantWeight]) -> Callable[..., float]:
    """A pass over `weights` (one call each, all of one shape and the same block types in the same order): x float32
    [M, K] -> the pass's seconds. Raises ValueError for weights that differ in shape or types, RuntimeError for a
    call the kernel refuses."""
    first = weights[0]
    if any(w.shape != first.shape or w.types != first.types for w in weights):
        raise ValueError("every weight of a pass must have the first one's shape and block types")
    _, ns, types, nparts = call_arrays(first)  # every call's row counts and type ids: the first weight's
    n, k = first.shape
    ptrs = (ctypes.c_void_p * (len(weights) * nparts))(*(rows.data_ptr() for w in weights for _, rows in w.parts))
    keep = list(weights)  # the pointers stay valid while the pass lives

    def run(x: torch.Tensor, out: torch.Tensor | None = None) -> float:
        """out (float32 [M, N], contiguous): where each call writes; it holds the last call's product after."""
        x = x.float().contiguous()
        if x.shape[1] != k:
            raise ValueError(f"x has {x.shape[1]} features, the weights {k}")
        if out is None:
            out = torch.empty(x.shape[0], n, dtype=torch.float32)
        if out.shape != (x.shape[0], n) or out.dtype != torch.float32 or not out.is_contiguous():
            raise ValueError(f"out must be float32 [{x.shape[0]}, {n}], contiguous")
        status = ctypes.c_int(0)
        seconds = native.lib.aio_kq_time_calls(x.data_ptr(), x.shape[0], k, nparts, ptrs, ns, types, len(keep),
                                               out.data_ptr(), torch.get_num_threads(), ctypes.byref(status))
        if status.value:
            raise RuntimeError(f"the native kernel refused a call ({status.value})")
        return seconds

    return run
