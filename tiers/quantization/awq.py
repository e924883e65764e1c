"""AutoAWQ "GEMM" checkpoints into the portable 4-bit form.

Layout (per linear layer): qweight int32 [in, out / 8], qzeros int32 [in / group, out / 8], scales fp16
[in / group, out]; eight 4-bit values per int32, in the order AWQ_ORDER (nibble j of a word holds column
8 * word + AWQ_ORDER[j]); value = (q - zero) * scale.
"""
from __future__ import annotations

import torch

from tiers.quantization.int4 import Int4Weight, QuantizationError, pack_nibbles

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def unpack_awq_int32(packed: torch.Tensor) -> torch.Tensor:
    """int32 [R, C / 8] -> uint8 [R, C] in logical column order."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=packed.device)
    nibbles = (packed.unsqueeze(-1) >> shifts) & 0xF  # [R, C/8, 8]: nibble j
    inverse = torch.tensor([AWQ_ORDER.index(c) for c in range(8)], device=packed.device)
    return nibbles[..., inverse].flatten(-2).to(torch.uint8)  # column c of a word sits in nibble inverse[c]


def awq_gemm_to_int4(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
                     group_size: int = 128) -> Int4Weight:
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        raise QuantizationError(f"AWQ qweight/qzeros must be int32, got {qweight.dtype}/{qzeros.dtype}")
    in_features, out_features = qweight.shape[0], 8 * qweight.shape[1]
    groups = in_features // group_size if group_size > 0 else 0
    if not groups or in_features % group_size:
        raise QuantizationError(f"AWQ in_features {in_features} is not a multiple of the group size {group_size}")
    if tuple(qzeros.shape) != (groups, out_features // 8) or tuple(scales.shape) != (groups, out_features):
        raise QuantizationError(f"AWQ shapes do not agree: qweight {tuple(qweight.shape)}, qzeros "
                                f"{tuple(qzeros.shape)}, scales {tuple(scales.shape)}, group size {group_size}")
    codes = unpack_awq_int32(qweight).t().contiguous()  # [out, in]
    zeros = unpack_awq_int32(qzeros).t().float()  # [out, groups]
    s = scales.t().float().contiguous()
    # (q - z) * s == q * s + (-z * s) exactly: both products are exact in float32 (4-bit times fp16).
    return Int4Weight(pack_nibbles(codes), s, (-zeros * s).contiguous(), group_size)
