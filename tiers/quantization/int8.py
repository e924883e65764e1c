"""Per-output-channel symmetric 8-bit weights: value = q * scale, q in -127..127."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tiers.quantization.int4 import QuantizationError


@dataclass
class Int8Weight:
    qweight: torch.Tensor  # int8 [N, K]
    scales: torch.Tensor  # float32 [N]

    def __post_init__(self) -> None:
        if self.qweight.dim() != 2 or self.qweight.dtype != torch.int8:
            raise QuantizationError(f"expected an int8 [N, K] weight, got {self.qweight.dtype} "
                                    f"{tuple(self.qweight.shape)}")
        if tuple(self.scales.shape) != (self.qweight.shape[0],):
            raise QuantizationError(f"scales {tuple(self.scales.shape)} do not match {self.qweight.shape[0]} rows")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.qweight.shape)

    @property
    def nbytes(self) -> int:
        return self.qweight.numel() + self.scales.numel() * self.scales.element_size()

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return (self.qweight.float() * self.scales.float().unsqueeze(-1)).to(dtype)


def quantize_int8(weight: torch.Tensor) -> Int8Weight:
    """Round-to-nearest symmetric per-channel quantization of a float [N, K] weight."""
    if weight.dim() != 2:
        raise QuantizationError(f"expected a 2-D weight, got shape {tuple(weight.shape)}")
    w = weight.detach().float()
    scales = (w.abs().amax(-1) / 127).clamp_min(torch.finfo(torch.float32).tiny)
    q = (w / scales.unsqueeze(-1)).round().clamp(-127, 127).to(torch.int8)
    return Int8Weight(q, scales)
