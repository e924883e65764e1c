"""Shared by the W4A16 tests (test_triton_w4a16.py, test_w4a16_dense.py): a random INT4 weight."""
from __future__ import annotations

import torch

from tiers.quantization import Int4Weight, pack_nibbles


def random_int4(n: int, k: int, group: int, seed: int = 0) -> Int4Weight:
    """Uniform codes (every nibble value, both halves of a byte), positive scales, mins of either sign."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    scales = torch.rand(n, k // group, generator=g) * 0.1 + 0.01
    mins = torch.randn(n, k // group, generator=g) * 0.5
    return Int4Weight(pack_nibbles(codes), scales, mins, group)
