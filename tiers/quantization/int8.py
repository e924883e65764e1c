"""Symmetric 8-bit weights: value = q * scale, q in -127..127, one scale per output channel (round-to-nearest
INT8) or per block of 32 input features (GGUF Q8_0's granularity)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tiers.quantization.int4 import QuantizationError

BLOCK = 32  # input features per scale of a blockwise weight


@dataclass
class Int8Weight:
    qweight: torch.Tensor  # int8 [N, K]
    scales: torch.Tensor  # float32 [N], or [N, K // 32] for blocks of 32

    def __post_init__(self) -> None:
        if self.qweight.dim() != 2 or self.qweight.dtype != torch.int8:
            raise QuantizationError(f"expected an int8 [N, K] weight, got {self.qweight.dtype} "
                                    f"{tuple(self.qweight.shape)}")
        n, k = self.qweight.shape
        if tuple(self.scales.shape) not in ((n,), (n, k // BLOCK)) or (self.scales.dim() == 2 and k % BLOCK):
            raise QuantizationError(f"scales {tuple(self.scales.shape)} match neither {n} rows nor their blocks of "
                                    f"{BLOCK}")

    @property
    def blockwise(self) -> bool:
        return self.scales.dim() == 2

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.qweight.shape)

    @property
    def nbytes(self) -> int:
        return self.qweight.numel() + self.scales.numel() * self.scales.element_size()

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        if self.blockwise:
            n, k = self.shape
            return (self.qweight.float().view(n, k // BLOCK, BLOCK) * self.scales.float().unsqueeze(-1)
                    ).view(n, k).to(dtype)
        return (self.qweight.float() * self.scales.float().unsqueeze(-1)).to(dtype)


def quantize_int8(weight: torch.Tensor, blockwise: bool = False) -> Int8Weight:
    """Round-to-nearest symmetric quantization of a float [N, K] weight, per channel or (blockwise) per block of
    32 input features (scale = max|w| / 127, GGUF Q8_0's rule: lossless on weights that were Q8_0 already)."""
    if weight.dim() != 2:
        raise QuantizationError(f"expected a 2-D weight, got shape {tuple(weight.shape)}")
    n, k = weight.shape
    if blockwise and k % BLOCK:
        raise QuantizationError(f"blockwise INT8 needs in_features % {BLOCK} == 0, got {k}")
    group = BLOCK if blockwise else k
    w = weight.detach().float().view(n, k // group, group)
    scales = (w.abs().amax(-1) / 127).clamp_min(torch.finfo(torch.float32).tiny)
    q = (w / scales.unsqueeze(-1)).round().clamp(-127, 127).to(torch.int8).view(n, k)
    return Int8Weight(q, scales.contiguous() if blockwise else scales.view(n))
