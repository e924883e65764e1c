"""GGUF block-quantized weights kept as stored, for the native CPU kernel (tiers/native/kquant.c): K-quants
(Q4_K, Q5_K, Q6_K: super-blocks of 256 with 6-bit or int8 sub-block scales) and Q5_0, Q5_1, Q8_0 (blocks of 32).

A KQuantWeight is one or more parts stacked along the output rows, each part rows of one block type as bytes
[rows, row_bytes], from the file or repacked into the kernel's own layout (repack: Q4_K_R, Q6_K_R, Q5_0_R, the
same bytes in another order): a fused projection whose shards have different types (Q4_K_M stores
some attn_v / ffn_down as Q6_K or Q8_0 next to Q4_K / Q5_0 shards) keeps each shard's type, and its matmul is one
kernel call per part into the columns of one output.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from tiers.native import NativeKernelError, NativeLibrary, huge_pages
from tiers.quantization.int4 import QuantizationError

# the block types of GGUF files this module takes
STORED_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")
# the native kernel's own layout of a stored type (repack): the same bytes per element, codes reordered for its
# lanes (kquant.c has the layouts); Q5_0_R's rows are a multiple of 128 elements, its unit here 4 blocks
REPACKED = {"Q4_K": "Q4_K_R", "Q6_K": "Q6_K_R", "Q5_0": "Q5_0_R"}
GROUP_BLOCKS = {"Q5_0_R": 4}
# type id, elements per block, bytes per block: gguf's own table (GGML_QUANT_SIZES), not restated; a repacked type's
# id is 256 + its stored type's, its block a group of GROUP_BLOCKS stored blocks
BLOCK_TYPES = {name: (int(GGMLQuantizationType[name]), *GGML_QUANT_SIZES[GGMLQuantizationType[name]])
               for name in STORED_TYPES}
BLOCK_TYPES |= {packed: (256 + BLOCK_TYPES[kind][0], *(GROUP_BLOCKS.get(packed, 1) * n for n in BLOCK_TYPES[kind][1:]))
                for kind, packed in REPACKED.items()}
# the types `quantize` makes from float weights
QUANTIZABLE_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")
# the types a GGUF projection keeps as stored (Q4_0 / Q4_1 go to Int4Weight and the w4a8 kernel instead)
NATIVE_TYPES = ("Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")


def row_bytes(kind: str, k: int) -> int:
    _, elems, nbytes = BLOCK_TYPES[kind]
    if k % elems:
        raise QuantizationError(f"{kind} rows hold multiples of {elems} elements, not {k}")
    return k // elems * nbytes


@dataclass
class KQuantWeight:
    parts: list[tuple[str, torch.Tensor]]  # (type name, uint8 [rows, row_bytes(type, K)]) in output-row order
    in_features: int

    def __post_init__(self) -> None:
        for kind, rows in self.parts:
            if kind not in BLOCK_TYPES:
                raise QuantizationError(f"block type {kind} is not one of {', '.join(BLOCK_TYPES)}")
            if rows.dtype != torch.uint8 or rows.dim() != 2 or rows.shape[1] != row_bytes(kind, self.in_features):
                raise QuantizationError(f"{kind} part {tuple(rows.shape)} {rows.dtype} is not uint8 rows of "
                                        f"{row_bytes(kind, self.in_features)} bytes")

    @staticmethod
    def from_blocks(kind: str, data: np.ndarray, rows: int, k: int) -> "KQuantWeight":
        """A tensor's raw blocks (a GGUF reader's tensor.data: [rows, row_bytes] or flat) as one part, copied to
        huge pages (huge_pages: a decode step streams them)."""
        array = np.ascontiguousarray(data).view(np.uint8).reshape(rows, row_bytes(kind, k))
        return KQuantWeight([(kind, huge_pages.copy(array))], k)

    @property
    def shape(self) -> tuple[int, int]:
        return sum(rows.shape[0] for _, rows in self.parts), self.in_features

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(kind for kind, _ in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(rows.numel() for _, rows in self.parts)

    def select_rows(self, index: torch.Tensor) -> "KQuantWeight":
        if len(self.parts) != 1:
            raise QuantizationError("select_rows takes a weight of one part")
        kind, rows = self.parts[0]
        return KQuantWeight([(kind, _on_huge_pages(rows[index]))], self.in_features)

    def to(self, device: torch.device | str) -> "KQuantWeight":
        return KQuantWeight([(kind, rows.to(device)) for kind, rows in self.parts], self.in_features)

    @staticmethod
    def cat(weights: list["KQuantWeight"]) -> "KQuantWeight":
        if len({w.in_features for w in weights}) != 1:
            raise QuantizationError("parts with different in_features")
        parts: list[tuple[str, torch.Tensor]] = []
        for w in weights:
            for kind, rows in w.parts:
                if parts and parts[-1][0] == kind:  # neighbours of one type: one part, one kernel call
                    parts[-1] = (kind, _cat(parts[-1][1], rows))
                else:
                    parts.append((kind, rows))
        return KQuantWeight(parts, weights[0].in_features)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The float [N, K] weight, equal to gguf's dequantizer (scale * code + min in float32)."""
        from tiers.native import native_library

        native = native_library()
        if native is None:
            return self._dequantize_gguf(dtype)
        return dequantize_parts(native, self, torch.empty(self.shape, dtype=torch.float32)).to(dtype)

    def _dequantize_gguf(self, dtype: torch.dtype) -> torch.Tensor:
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import dequantize

        if set(self.types) - set(STORED_TYPES):
            raise QuantizationError(f"{'/'.join(self.types)}: blocks repacked for the native kernel are read by it "
                                    "only")

        out = [torch.from_numpy(dequantize(rows.cpu().numpy(), GGMLQuantizationType[kind]).copy())
               for kind, rows in self.parts]
        return torch.cat(out).reshape(self.shape).to(dtype)


def _on_huge_pages(rows: torch.Tensor) -> torch.Tensor:
    """A new contiguous copy of rows: on huge pages where they are on the CPU."""
    return huge_pages.copy(rows) if rows.device.type == "cpu" else rows.contiguous().clone()


def _cat(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    if first.device.type != "cpu":
        return torch.cat((first, second))
    out = huge_pages.empty((first.shape[0] + second.shape[0], first.shape[1]), first.dtype)
    return torch.cat((first, second), out=out)


def repack(native: NativeLibrary, weight: KQuantWeight, in_place: bool = False) -> KQuantWeight:
    """The weight with its Q4_K / Q6_K / Q5_0 parts in the native kernel's layout (Q4_K_R / Q6_K_R / Q5_0_R: the same
    values and bytes, one vpdpbusd per 64 codes in its loop; Q5_0 where rows hold a multiple of 128), other parts as
    they are; parts already repacked are kept. A new weight with repacked copies: the input is untouched, its
    tensors may be shared (one checkpoint, two engines). in_place: for a caller that owns the weight (a fresh
    load), its tensors rewritten and its parts relabelled instead."""
    def takes(kind: str) -> bool:
        return kind in REPACKED and weight.in_features % BLOCK_TYPES[REPACKED[kind]][1] == 0

    if not any(takes(kind) for kind in weight.types):
        return weight
    parts = []
    for kind, rows in weight.parts:
        if takes(kind):
            rows = rows.contiguous() if in_place else _on_huge_pages(rows)
            new_id = native.lib.aio_kq_repack(rows.data_ptr(), rows.shape[0], weight.in_features,
                                              BLOCK_TYPES[kind][0])
            if new_id != BLOCK_TYPES[REPACKED[kind]][0]:
                raise NativeKernelError(f"the native kernel does not repack {kind} rows of {weight.in_features}")
            kind = REPACKED[kind]
        parts.append((kind, rows))
    if not in_place:
        return KQuantWeight(parts, weight.in_features)
    weight.parts = parts
    weight.__dict__.pop("_c_arrays", None)  # the type ids changed
    return weight


def quantize(weight: torch.Tensor, kind: str) -> KQuantWeight:
    """A float [N, K] weight as GGUF blocks of one of QUANTIZABLE_TYPES, by the gguf package's reference quantizer
    (ggml's round-to-nearest rules); one part, not repacked."""
    from gguf.quants import quantize as gguf_quantize

    if kind not in QUANTIZABLE_TYPES:
        raise QuantizationError(f"quantizing to {kind}: only {', '.join(QUANTIZABLE_TYPES)} (the gguf package "
                                "quantizes no K-quant)")
    n, k = weight.shape
    row_bytes(kind, k)  # a clear error for rows that do not hold whole blocks
    blocks = gguf_quantize(weight.detach().float().cpu().numpy(), GGMLQuantizationType[kind])
    return KQuantWeight([(kind, torch.from_numpy(np.ascontiguousarray(blocks)).view(n, -1))], k)


def dequantize_parts(native: NativeLibrary, weight: KQuantWeight, out: torch.Tensor) -> torch.Tensor:
    """The weight's rows decoded into `out` (contiguous [N, K], float32 or bfloat16: gguf's dequantizer's values,
    bf16 rounded to nearest even), every part through the kernel's own decoding on torch's threads; returns out."""
    k, row = weight.in_features, 0
    for kind, rows in weight.parts:
        rows = rows.contiguous()
        if native.lib.aio_kq_dequantize_dense(rows.data_ptr(), rows.shape[0], k, BLOCK_TYPES[kind][0],
                                              out[row].data_ptr(), out.dtype == torch.bfloat16,
                                              torch.get_num_threads()):
            raise NativeKernelError(f"the native kernel does not take {kind} rows of {k} elements")
        row += rows.shape[0]
    return out


def dequantize_rows(native: NativeLibrary, rows: torch.Tensor, kind: str, k: int) -> torch.Tensor:
    """uint8 [N, row_bytes] of one block type -> float32 [N, K], through the kernel's own decoding."""
    return dequantize_parts(native, KQuantWeight([(kind, rows)], k), torch.empty(rows.shape[0], k))


def call_arrays(weight: KQuantWeight) -> tuple:
    """The parts' pointers, row counts and type ids as C arrays, built once per weight (its tensors stay put)."""
    arrays = getattr(weight, "_c_arrays", None)
    if arrays is None:
        n = len(weight.parts)
        arrays = ((ctypes.c_void_p * n)(*(rows.data_ptr() for _, rows in weight.parts)),
                  (ctypes.c_int64 * n)(*(rows.shape[0] for _, rows in weight.parts)),
                  (ctypes.c_int * n)(*(BLOCK_TYPES[kind][0] for kind, _ in weight.parts)), n)
        weight._c_arrays = arrays
    return arrays


def gemm(native: NativeLibrary, x: torch.Tensor, weight: KQuantWeight) -> torch.Tensor:
    """float32 [M, K] @ W^T -> float32 [M, N]: one kernel call for all parts (activations quantized once), each
    part into its own output columns. Called once per layer and step: kept to the few Python operations it needs."""
    if x.dtype != torch.float32 or x.stride(-1) != 1:
        x = x.float().contiguous()
    m, k = x.shape
    ptrs, ns, types, parts = call_arrays(weight)
    n = weight.shape[0]
    out = torch.empty(m, n, dtype=torch.float32)
    status = native.lib.aio_gemm_kq_parts(x.data_ptr(), m, k, x.stride(0), parts, ptrs, ns, types, out.data_ptr(), n,
                                          torch.get_num_threads())
    if status:
        raise NativeKernelError("out of memory in the native kernel" if status == -1 else
                                f"the native kernel does not take {'/'.join(weight.types)} rows of {k} elements")
    return out


def gather_rows(weight: KQuantWeight, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rows `ids` dequantized (an embedding read from the same blocks as a tied lm_head): [*ids.shape, K]. IndexError
    for an id outside the table."""
    from tiers.native import native_library

    flat = ids.reshape(-1).to(torch.int64).contiguous()
    native = native_library()
    k, n = weight.in_features, weight.shape[0]
    out = torch.empty(flat.shape[0], k, dtype=torch.float32)
    if native is not None and len(weight.parts) == 1:  # one call: a step's few torch ops cost more than the rows
        kind, rows = weight.parts[0][0], weight.parts[0][1].contiguous()
        status = native.lib.aio_kq_gather_rows(rows.data_ptr(), n, k, BLOCK_TYPES[kind][0], flat.data_ptr(),
                                               flat.shape[0], out.data_ptr())
        if status == -3:
            raise _outside(flat, n)
        if status:
            raise NativeKernelError(f"the native kernel does not take {kind} rows of {k} elements")
        return out.view(*ids.shape, k).to(dtype)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= n):
        raise _outside(flat, n)
    start = 0
    for kind, rows in weight.parts:
        inside = (flat >= start) & (flat < start + rows.shape[0])
        if inside.any():
            picked = rows[flat[inside] - start]
            out[inside] = (dequantize_rows(native, picked, kind, k) if native is not None else
                           KQuantWeight([(kind, picked)], k)._dequantize_gguf(torch.float32))
        start += rows.shape[0]
    return out.view(*ids.shape, k).to(dtype)


def _outside(flat: torch.Tensor, n: int) -> IndexError:
    """The error for ids outside a table of n rows, naming the first such id (not the whole prompt's)."""
    bad = flat[(flat < 0) | (flat >= n)]
    return IndexError(f"token id {int(bad[0])} is outside the embedding's {n} rows")
