"""A LlamaForCausalLM from a GGUFCheckpoint: float weights copied in, 4-bit projections as QuantizedLinear."""
from __future__ import annotations

import torch

from tiers.models.assemble import assemble_model
from tiers.models.gguf.reader import GGUFCheckpoint, GGUFError
from tiers.models.llama import LlamaForCausalLM


def build_model(checkpoint: GGUFCheckpoint, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    return assemble_model(checkpoint.config, checkpoint.weights, device, dtype, checkpoint.path, GGUFError)
