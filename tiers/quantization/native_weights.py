"""Int4Weight / Int8Weight as the native CPU kernel's row records (tiers/native/w4a8.c): codes in its
interleaved block layout, one fp16 scale (and min) per block of 32 input features; a group of 64/128/256 repeats
its scale. GGUF Q4_0/Q4_1/Q8_0 scales are fp16 already, so their conversion is exact; float32 scales (round-to-
nearest from a float checkpoint) are rounded to fp16, and dequantize_native returns what the kernel computes
with."""
from __future__ import annotations

import torch

from tiers.native import huge_pages
from tiers.quantization.cpu_native import BLOCK, pack_w4, pack_w8, unpack_w4, unpack_w8
from tiers.quantization.int4 import Int4Weight
from tiers.quantization.int8 import Int8Weight


def native_ok(weight: Int4Weight | Int8Weight) -> bool:
    group = weight.group_size if isinstance(weight, Int4Weight) else BLOCK
    return weight.shape[1] % BLOCK == 0 and group % BLOCK == 0


def int4_rows(weight: Int4Weight, device: torch.device) -> torch.Tensor:
    repeat = weight.group_size // BLOCK
    return _placed(pack_w4(weight.codes(), weight.scales.float().repeat_interleave(repeat, dim=1),
                           weight.mins.float().repeat_interleave(repeat, dim=1)), device)


def int8_rows(weight: Int8Weight, device: torch.device) -> torch.Tensor:
    n, k = weight.shape
    scales = weight.scales.float() if weight.blockwise else weight.scales.float().unsqueeze(1).expand(n, k // BLOCK)
    return _placed(pack_w8(weight.qweight, scales), device)


def _placed(rows: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The records on `device`: on the CPU in a buffer on huge pages (a decode step streams them)."""
    return huge_pages.copy(rows) if torch.device(device).type == "cpu" else rows.to(device)


def dequantize_native(rows: torch.Tensor, k: int, w8: bool, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The float [N, K] weight a native layer computes with."""
    n = rows.shape[0]
    if w8:
        q, scales = unpack_w8(rows, k)
        return (q.float().view(n, k // BLOCK, BLOCK) * scales.unsqueeze(-1)).view(n, k).to(dtype)
    codes, scales, mins = unpack_w4(rows, k)
    w = codes.float().view(n, k // BLOCK, BLOCK) * scales.unsqueeze(-1) + mins.unsqueeze(-1)
    return w.view(n, k).to(dtype)


def gather_rows_w8(rows: torch.Tensor, k: int, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rows `ids` of a native INT8 matrix, dequantized (a tied embedding read from the lm_head's buffer)."""
    return dequantize_native(rows[ids.reshape(-1)], k, True, dtype).view(*ids.shape, k)
