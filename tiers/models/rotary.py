"""Rotary position embeddings (default, linear and llama3 scaling), matching transformers' numerics."""
from __future__ import annotations

import math

import torch

from tiers.models.config import RopeConfig


def inverse_frequencies(rope: RopeConfig, head_dim: int) -> torch.Tensor:
    inv_freq = 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if rope.rope_type == "linear":
        return inv_freq / rope.factor
    if rope.rope_type == "llama3":
        return _llama3_scale(inv_freq, rope)
    return inv_freq


def _llama3_scale(inv_freq: torch.Tensor, rope: RopeConfig) -> torch.Tensor:
    old_len = rope.original_max_position_embeddings
    low_freq_wavelen = old_len / rope.low_freq_factor
    high_freq_wavelen = old_len / rope.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / rope.factor, inv_freq)
    smooth = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(torch.nn.Module):
    """cos/sin for every position, computed once."""

    def __init__(self, rope: RopeConfig, head_dim: int, max_positions: int) -> None:
        super().__init__()
        inv_freq = inverse_frequencies(rope, head_dim)
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        sin, half = emb.sin(), head_dim // 2
        # sin with its first half negated: rotate_half(x) * sin == x.roll(D/2) * signed_sin (one op, not four)
        self.register_buffer("signed_sin", torch.cat((-sin[:, :half], sin[:, half:]), dim=-1), persistent=False)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, signed sin), looked up once per step and shared by every layer: [T, 1, D] each."""
        return self.cos[positions].unsqueeze(1).to(dtype), self.signed_sin[positions].unsqueeze(1).to(dtype)


def apply_rotary_one(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x: [T, heads, D] (e.g. q and k side by side), rotated like transformers' apply_rotary_pos_emb
    (x * cos + rotate_half(x) * sin), bit for bit: rotate_half(x) * sin is x.roll(D/2) * signed_sin exactly."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin
