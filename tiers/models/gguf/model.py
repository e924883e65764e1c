"""A LlamaForCausalLM from a GGUFCheckpoint: float weights copied in, 4-bit projections as QuantizedLinear."""
from __future__ import annotations

import torch

from tiers.models.gguf.reader import GGUFCheckpoint, GGUFError
from tiers.models.llama import LlamaForCausalLM
from tiers.quantization.int4 import Int4Weight
from tiers.quantization.linear import QuantizedLinear, set_submodule


def build_model(checkpoint: GGUFCheckpoint, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    config, weights = checkpoint.config, checkpoint.weights
    device = torch.device(device)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to_empty(device=device).to(dtype)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    params = dict(model.named_parameters(remove_duplicate=False))
    expected = set(params) - ({"lm_head.weight"} if config.tie_word_embeddings else set())
    int4 = {name: w for name, w in weights.items() if isinstance(w, Int4Weight)}
    for name, w in int4.items():
        module = name.rpartition(".")[0]
        bias = weights.get(f"{module}.bias")
        if bias is not None and isinstance(bias, Int4Weight):
            raise GGUFError(f"{checkpoint.path}: bias {module}.bias is 4-bit")
        set_submodule(model, module, QuantizedLinear(w, bias.to(dtype) if bias is not None else None, device))
        expected -= {name, f"{module}.bias"}
    missing = sorted(expected - set(weights))
    if missing:
        raise GGUFError(f"{checkpoint.path} is missing weights: {', '.join(missing[:5])}"
                        + (" ..." if len(missing) > 5 else ""))
    with torch.no_grad():
        for name, tensor in weights.items():
            if isinstance(tensor, Int4Weight) or (name.rpartition(".")[0] + ".weight") in int4:
                continue
            if name not in params:
                raise GGUFError(f"{checkpoint.path}: weight {name!r} does not exist in {config.architecture} as "
                                "this engine implements it")
            if params[name].shape != tensor.shape:
                raise GGUFError(f"{checkpoint.path}: weight {name!r} has shape {tuple(tensor.shape)}, expected "
                                f"{tuple(params[name].shape)}")
            params[name].copy_(tensor.to(dtype))
    return model.eval()
