"""Chooses the attention backend once per engine (EngineConfig.attention_backend)."""
from __future__ import annotations

import torch

from tiers.attention.backend import AttentionBackend

ATTENTION_BACKENDS = ("torch", "triton")


def get_attention_backend(name: str | None, device: torch.device) -> AttentionBackend:
    """name: "torch" or "triton"; None: triton on CUDA, torch elsewhere. Triton is imported only when chosen."""
    name = name or ("triton" if device.type == "cuda" else "torch")
    if name == "torch":
        from tiers.attention.torch_backend import TorchAttentionBackend

        return TorchAttentionBackend()
    if name == "triton":
        from tiers.attention.triton_backend import TritonAttentionBackend

        return TritonAttentionBackend()
    raise ValueError(f"attention_backend must be one of {ATTENTION_BACKENDS}, got {name!r}")
