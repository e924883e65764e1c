"""A LlamaForCausalLM from weights already under our parameter names: float tensors, and Int4Weight for projections
that stay 4-bit (GGUF Q4_0/Q4_1, AWQ). Shared by the GGUF and AWQ loaders.

The model is built on the meta device; 4-bit projections become QuantizedLinear directly and only the remaining
float parameters are allocated, so no float copy of a 4-bit layer ever exists.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch import nn

from tiers.models.config import ModelConfig, UnsupportedModelError
from tiers.models.llama import LlamaForCausalLM
from tiers.native import native_library
from tiers.quantization.int4 import Int4Weight
from tiers.quantization.kquant import KQuantWeight
from tiers.quantization.linear import KQuantEmbedding, QuantizedLinear, set_submodule

Weights = dict[str, "torch.Tensor | Int4Weight | KQuantWeight"]
PACKED = (Int4Weight, KQuantWeight)  # weights that stay quantized: QuantizedLinear layers


def fuse_shards(shards: dict[str, dict[int, "torch.Tensor | Int4Weight"]], num_shards: Callable[[str], int],
                dtype: torch.dtype, path: Path | str = "",
                error: Callable[[str], Exception] = UnsupportedModelError) -> Weights:
    """Each fused parameter (qkv_proj, gate_up_proj) from its shards, concatenated along the output rows in shard
    order: one Int4Weight when every shard is 4-bit, else float in `dtype`. Raises `error` for a missing shard."""
    fused: Weights = {}
    for ours, parts in shards.items():
        expected = num_shards(ours)
        if sorted(parts) != list(range(expected)):
            raise error(f"{path}: {ours} is missing parts (has shards {sorted(parts)} of {expected})")
        ordered = [parts[i] for i in range(expected)]
        if all(isinstance(p, Int4Weight) for p in ordered):
            fused[ours] = Int4Weight.cat(ordered)
        elif all(isinstance(p, KQuantWeight) for p in ordered):
            fused[ours] = KQuantWeight.cat(ordered)
        else:
            fused[ours] = torch.cat([p.dequantize(dtype) if isinstance(p, PACKED) else p.to(dtype)
                                     for p in ordered])
    return fused


def assemble_model(config: ModelConfig, weights: Weights, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32, path: Path | str = "",
                   error: Callable[[str], Exception] = UnsupportedModelError,
                   dense_min_rows: int | None = None, kernel: str | None = None) -> LlamaForCausalLM:
    """weights: our parameter name -> float tensor or Int4Weight (a whole fused parameter). Raises `error` (a
    message naming `path`) for a missing, unexpected or misshapen weight. dense_min_rows, kernel: the 4-bit layers'
    (QuantizedLinear)."""
    device = torch.device(device)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    expected = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    if config.tie_word_embeddings:
        expected.discard("lm_head.weight")
    int4_modules = set()
    # GGUF block types as stored run on the native CPU kernel only: elsewhere they are dequantized here
    kq_native = device.type == "cpu" and kernel in (None, "native") and native_library() is not None
    weights = {n: w.dequantize(dtype) if isinstance(w, KQuantWeight) and not kq_native else w
               for n, w in weights.items()}
    embedding = weights.get("embed_tokens.weight")
    if isinstance(embedding, KQuantWeight):  # kept as stored (an untied file's: the reader keeps no tied one)
        if config.tie_word_embeddings or tuple(embedding.shape) != tuple(model.embed_tokens.weight.shape):
            raise error(f"{path}: embedding {tuple(embedding.shape)} kept as stored does not fit "
                        f"{config.architecture}")
        model.embed_tokens = KQuantEmbedding(embedding, dtype)
        int4_modules.add("embed_tokens")
        expected.discard("embed_tokens.weight")
    for name, w in weights.items():
        if not isinstance(w, PACKED) or name == "embed_tokens.weight":
            continue
        module = name.rpartition(".")[0]
        if name not in expected or not isinstance(model.get_submodule(module), nn.Linear):
            raise error(f"{path}: 4-bit weight {name!r} is not a projection of {config.architecture}")
        bias = weights.get(f"{module}.bias")
        if isinstance(bias, PACKED):
            raise error(f"{path}: bias {module}.bias is 4-bit")
        linear = model.get_submodule(module)
        if (linear.out_features, linear.in_features) != tuple(w.shape):
            raise error(f"{path}: weight {name!r} has shape {tuple(w.shape)}, expected "
                        f"{(linear.out_features, linear.in_features)}")
        set_submodule(model, module, QuantizedLinear(w, bias.to(dtype) if bias is not None else None, device,
                                                     kernel=kernel, dense_min_rows=dense_min_rows))
        int4_modules.add(module)
        expected -= {name, f"{module}.bias"}
    missing = sorted(expected - set(weights))
    if missing:
        raise error(f"{path} is missing weights: {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
    materialize(model, device, dtype)
    params = dict(model.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for name, tensor in weights.items():
            if name.rpartition(".")[0] in int4_modules:
                continue
            if name not in params:
                raise error(f"{path}: weight {name!r} does not exist in {config.architecture} as this engine "
                            "implements it")
            if params[name].shape != tensor.shape:
                raise error(f"{path}: weight {name!r} has shape {tuple(tensor.shape)}, expected "
                            f"{tuple(params[name].shape)}")
            params[name].copy_(tensor)
    return model.eval()


def materialize(model: nn.Module, device: torch.device, dtype: torch.dtype) -> None:
    """Allocates (uninitialised) every parameter still on the meta device, on `device` in `dtype`; tied parameters
    stay one tensor. Quantized layers, already real, are left alone."""
    done: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if not param.is_meta:
                continue
            if id(param) not in done:
                done[id(param)] = nn.Parameter(torch.empty(param.shape, device=device, dtype=dtype),
                                               requires_grad=False)
            setattr(module, name, done[id(param)])


def cast_float_weights(model: nn.Module, dtype: torch.dtype) -> None:
    """Casts the float parameters outside quantized layers (a QuantizedLinear keeps its kernel's own formats)."""
    for module in model.modules():
        if isinstance(module, QuantizedLinear):
            continue
        for param in module.parameters(recurse=False):
            if param.dtype != dtype and param.is_floating_point():
                param.data = param.data.to(dtype)


def weight_bytes(model: nn.Module) -> int:
    """Resident bytes of the model's parameters and buffers (tied ones once); the rotary tables excluded."""
    seen: set[int] = set()
    total = 0
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if name.startswith("rotary.") or id(t) in seen:
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return total
