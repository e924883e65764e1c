"""Chooses the attention backend once per engine (EngineConfig.attention_backend)."""
from __future__ import annotations

import torch

from tiers.attention.backend import AttentionBackend

ATTENTION_BACKENDS = ("torch", "triton")


def get_attention_backend(name: str | None, device: torch.device) -> AttentionBackend:
    """name: "torch" or "triton"; None: triton on CUDA, torch elsewhere. Triton is imported only when chosen.
    Raises ValueError where Triton cannot run: on CPU it runs only in its interpreter (TRITON_INTERPRET=1 before
    triton is imported; tests and debugging), and a process that has it compiled for a GPU cannot take CPU tensors."""
    name = name or ("triton" if device.type == "cuda" else "torch")
    if name == "torch":
        from tiers.attention.torch_backend import TorchAttentionBackend

        return TorchAttentionBackend()
    if name == "triton":
        try:
            from tiers.attention.triton_backend import TritonAttentionBackend
            from tiers.attention.triton_paged_attention import unavailable_on
        except ImportError as e:
            raise ValueError(f"attention_backend='triton' needs the triton package ({e}); use 'torch'") from e
        problem = unavailable_on(device)
        if problem:
            raise ValueError(f"attention_backend='triton' cannot run on {device}: {problem}; use 'torch'")
        return TritonAttentionBackend()
    raise ValueError(f"attention_backend must be one of {ATTENTION_BACKENDS}, got {name!r}")
