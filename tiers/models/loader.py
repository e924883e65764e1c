"""Builds a model from a local Hugging Face checkpoint folder (single or sharded safetensors)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import torch
from safetensors import safe_open

from tiers.models.config import ModelConfig, UnsupportedModelError
from tiers.models.llama import LlamaForCausalLM
from tiers.native import native_library

IGNORED_WEIGHT_SUFFIXES = ("rotary_emb.inv_freq",)


def resolve_device(name: str) -> torch.device:
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for, but CUDA is not available")
    return device


def resolve_dtype(name: str | torch.dtype | None, device: torch.device, model_config: ModelConfig,
                  quantized: bool = False, kernel: str | None = None) -> torch.dtype:
    """None or "auto": on CPU float32, or bfloat16 for a model with quantized projections on torch's kernels (they
    take bf16 activations; AIO's native kernels take float32); elsewhere the checkpoint's half type (or
    bfloat16)."""
    if isinstance(name, torch.dtype):
        return name
    if name is None or name == "auto":
        if device.type == "cpu":
            if quantized and (kernel == "torch" or native_library() is None):
                return torch.bfloat16
            return torch.float32
        return torch.float16 if model_config.torch_dtype == "float16" else torch.bfloat16
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"unsupported dtype {name!r}; use float32, bfloat16 or float16")
    return dtype


def safetensors_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return [path / name for name in sorted(set(weight_map.values()))]
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    files = sorted(path.glob("*.safetensors"))
    if files:
        return files
    raise FileNotFoundError(f"no safetensors weights in {path} (model.safetensors or an index); "
                            "convert .bin checkpoints to safetensors first")


def iterate_weights(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    for file in safetensors_files(path):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def load_model(path: str | Path, config: ModelConfig, device: torch.device, dtype: torch.dtype) -> LlamaForCausalLM:
    path = Path(path)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to_empty(device=device).to(dtype)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded: set[str] = set()
    for name, tensor in iterate_weights(path):
        if name.endswith(IGNORED_WEIGHT_SUFFIXES):
            continue
        if config.tie_word_embeddings and name == "lm_head.weight":
            continue
        target_name, shard = our_name(name)
        param = params.get(target_name)
        if param is None:
            raise UnsupportedModelError(f"unexpected weight {name!r} in {path}: the checkpoint does not match "
                                        f"{config.architecture} as this engine implements it (quantized "
                                        "checkpoints load only in the AutoAWQ GEMM and GGUF formats)")
        target = param.data if shard is None else param.data[model.shard_slice(target_name.split(".")[-2], shard)]
        if target.shape != tensor.shape:
            raise UnsupportedModelError(f"weight {name!r} has shape {tuple(tensor.shape)}, "
                                        f"expected {tuple(target.shape)}")
        with torch.no_grad():
            target.copy_(tensor.to(dtype))
        loaded.add(f"{target_name}#{shard}")
    expected = {f"{n}#{s}" for n, p in params.items() for s in _shards_of(n)}
    if config.tie_word_embeddings:
        expected.discard("lm_head.weight#None")
    missing = sorted(expected - loaded)
    if missing:
        raise UnsupportedModelError(f"checkpoint {path} is missing weights: {', '.join(missing[:5])}"
                                    + (" ..." if len(missing) > 5 else ""))
    return model.eval()


def our_name(name: str) -> tuple[str, int | None]:
    """A Hugging Face weight name -> (our parameter name, shard of a fused parameter or None):
    model.layers.0.self_attn.k_proj.weight -> (layers.0.self_attn.qkv_proj.weight, 1)."""
    target_name = name[len("model."):] if name.startswith("model.") else name
    parts = target_name.split(".")
    if len(parts) >= 2 and parts[-2] in LlamaForCausalLM.packed:
        fused, shard = LlamaForCausalLM.packed[parts[-2]]
        parts[-2] = fused
        return ".".join(parts), shard
    return target_name, None


def _shards_of(param_name: str) -> list[int | None]:
    if ".qkv_proj." in param_name:
        return [0, 1, 2]
    if ".gate_up_proj." in param_name:
        return [0, 1]
    return [None]
