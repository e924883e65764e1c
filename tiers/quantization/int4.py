"""Group-wise 4-bit weights in one portable form, whatever they came from (RTN from float weights, GGUF Q4_0/Q4_1
blocks, AutoAWQ GEMM checkpoints): value = code * scale + min, with code in 0..15 and one (scale, min) per group of
`group_size` consecutive input features of an output row."""
from __future__ import annotations

from dataclasses import dataclass

import torch


class QuantizationError(ValueError):
    """A weight or a model cannot be quantized (or dequantized) as asked."""


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K] codes in 0..15 -> uint8 [N, K // 2]: column 2i in the low nibble of byte i, 2i+1 in the high."""
    if codes.shape[-1] % 2:
        raise QuantizationError(f"4-bit packing needs an even number of columns, got {codes.shape[-1]}")
    codes = codes.to(torch.uint8)
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of pack_nibbles: uint8 [N, K // 2] -> uint8 [N, K]."""
    return torch.stack((packed & 0x0F, packed >> 4), dim=-1).flatten(-2)


@dataclass
class Int4Weight:
    packed: torch.Tensor  # uint8 [N, K // 2], see pack_nibbles
    scales: torch.Tensor  # float32 [N, K // group_size]
    mins: torch.Tensor  # float32 [N, K // group_size]
    group_size: int

    def __post_init__(self) -> None:
        n, half_k = self.packed.shape
        k = 2 * half_k
        if self.group_size <= 0 or k % self.group_size:
            raise QuantizationError(f"in_features {k} is not a multiple of the group size {self.group_size}")
        groups = (n, k // self.group_size)
        if tuple(self.scales.shape) != groups or tuple(self.mins.shape) != groups:
            raise QuantizationError(f"scales {tuple(self.scales.shape)} / mins {tuple(self.mins.shape)} do not "
                                    f"match {groups} groups of a [{n}, {k}] weight")

    @property
    def shape(self) -> tuple[int, int]:
        return self.packed.shape[0], 2 * self.packed.shape[1]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.packed, self.scales, self.mins))

    def codes(self) -> torch.Tensor:
        return unpack_nibbles(self.packed)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """code * scale + min in float32 (two roundings, the order gguf's own dequantizer uses), then `dtype`."""
        n, k = self.shape
        codes = self.codes().view(n, k // self.group_size, self.group_size).float()
        w = codes * self.scales.float().unsqueeze(-1) + self.mins.float().unsqueeze(-1)
        return w.view(n, k).to(dtype)

    def select_rows(self, index: torch.Tensor) -> "Int4Weight":
        return Int4Weight(self.packed[index], self.scales[index], self.mins[index], self.group_size)

    def to(self, device: torch.device | str) -> "Int4Weight":
        return Int4Weight(self.packed.to(device), self.scales.to(device), self.mins.to(device), self.group_size)

    @staticmethod
    def cat(parts: list["Int4Weight"]) -> "Int4Weight":
        """Stacks weights along the output rows (fused qkv / gate_up)."""
        sizes = {p.group_size for p in parts}
        widths = {p.shape[1] for p in parts}
        if len(sizes) != 1 or len(widths) != 1:
            raise QuantizationError(f"cannot fuse 4-bit weights of group sizes {sorted(sizes)} and in_features "
                                    f"{sorted(widths)}")
        return Int4Weight(torch.cat([p.packed for p in parts]), torch.cat([p.scales for p in parts]),
                          torch.cat([p.mins for p in parts]), parts[0].group_size)


def quantize_int4(weight: torch.Tensor, group_size: int = 128) -> Int4Weight:
    """Round-to-nearest asymmetric 4-bit quantization of a float [N, K] weight, one (scale, min) per group."""
    if weight.dim() != 2:
        raise QuantizationError(f"expected a 2-D weight, got shape {tuple(weight.shape)}")
    n, k = weight.shape
    if group_size <= 0 or k % group_size:
        raise QuantizationError(f"in_features {k} is not a multiple of the group size {group_size}")
    w = weight.detach().float().view(n, k // group_size, group_size)
    lo, hi = w.amin(-1), w.amax(-1)
    scales = ((hi - lo) / 15).clamp_min(torch.finfo(torch.float32).tiny)
    codes = ((w - lo.unsqueeze(-1)) / scales.unsqueeze(-1)).round().clamp(0, 15).to(torch.uint8)
    return Int4Weight(pack_nibbles(codes.view(n, k)), scales.contiguous(), lo.contiguous(), group_size)
