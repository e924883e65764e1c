"""A GGUF file (llama.cpp's format) as what the engine needs: our ModelConfig and our parameters.

Tensors map onto tiers.models.llama's names, fused like the safetensors loader fuses them (q/k/v -> qkv_proj,
gate/up -> gate_up_proj). llama.cpp stores the rows of q and k permuted for its rotary layout (llama and mistral
files; qwen2 files are not permuted): we undo that by moving whole rows, so quantized blocks stay intact. Every
tensor type the gguf package can dequantize loads as float; Q4_0 / Q4_1 projections can instead stay 4-bit
(group 32, exact: see Int4Weight) and K-quant / Q5_0 / Q5_1 / Q8_0 projections, and a K-quant output tensor, as
stored (KQuantWeight, for the native CPU kernel; Q4_K, Q6_K and Q5_0 repacked into its layouts as they load, where
it builds) for QuantizedLinear.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tiers.models.assemble import fuse_shards
from tiers.models.config import ModelConfig, RopeConfig, UnsupportedModelError
from tiers.models.gguf.file import GGUFError, open_gguf, read_metadata
from tiers.models.rotary import inverse_frequencies
from tiers.native import native_library
from tiers.quantization.int4 import Int4Weight, pack_nibbles
from tiers.quantization.kquant import (BLOCK_TYPES, NATIVE_TYPES as _BLOCK_TYPES_KEPT, STORED_TYPES, KQuantWeight,
                                       repack)

ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}
PERMUTED_ARCHITECTURES = ("llama", "mistral")  # convert_hf_to_gguf.py permutes q/k rows for these

_GLOBAL_NAMES = {"token_embd": "embed_tokens", "output_norm": "norm", "output": "lm_head"}
# GGUF block tensor -> (our module under layers.N, shard of a fused parameter or None)
_BLOCK_NAMES = {
    "attn_norm": ("input_layernorm", None), "ffn_norm": ("post_attention_layernorm", None),
    "attn_q": ("self_attn.qkv_proj", 0), "attn_k": ("self_attn.qkv_proj", 1), "attn_v": ("self_attn.qkv_proj", 2),
    "attn_output": ("self_attn.o_proj", None),
    "ffn_gate": ("mlp.gate_up_proj", 0), "ffn_up": ("mlp.gate_up_proj", 1), "ffn_down": ("mlp.down_proj", None),
}
_FUSED_SHARDS = {"self_attn.qkv_proj": 3, "mlp.gate_up_proj": 2}
_INT4_TYPES = ("Q4_0", "Q4_1")
# an output tensor of these stays as stored; a Q8_0 one runs INT8 with float activations (checkpoint.py)
_K_TYPES = ("Q4_K", "Q5_K", "Q6_K")
_IGNORED_TENSORS = ("rope_freqs.weight",)  # llama3 rope scaling, read into the config


@dataclass
class GGUFCheckpoint:
    path: Path
    config: ModelConfig
    # our parameter name (as in LlamaForCausalLM.named_parameters) -> float tensor, or Int4Weight / KQuantWeight
    # for a projection kept as stored
    weights: dict[str, torch.Tensor | Int4Weight | KQuantWeight]
    tokenizer: Any  # a transformers PreTrainedTokenizerFast, or None when not asked for
    chat_template: str | None
    metadata: dict[str, Any] = field(repr=False)
    tensor_types: dict[str, str] = field(default_factory=dict, repr=False)  # GGUF name -> type name


def architecture_of(metadata: dict[str, Any], path: Path | str = "") -> str:
    arch = metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise GGUFError(f"{path}: unsupported GGUF architecture {arch!r}; supported: "
                        f"{', '.join(sorted(ARCHITECTURES))}")
    return arch


def config_from_gguf(metadata: dict[str, Any], tensors: dict[str, Any], path: Path | str = "") -> ModelConfig:
    """Our ModelConfig from the file's metadata; `tensors` maps GGUF tensor names to reader tensors (their
    presence decides tied embeddings and biases; rope_freqs.weight decides llama3 rope scaling)."""
    arch = architecture_of(metadata, path)

    def get(key: str, default: Any = ...) -> Any:
        value = metadata.get(f"{arch}.{key}", default)
        if value is ...:
            raise GGUFError(f"{path}: metadata key {arch}.{key} is missing")
        return value

    num_heads = int(get("attention.head_count"))
    num_kv_heads = get("attention.head_count_kv", num_heads)
    if isinstance(num_kv_heads, list):  # per-layer counts: fine when they agree
        if len(set(num_kv_heads)) != 1:
            raise GGUFError(f"{path}: per-layer KV head counts {sorted(set(num_kv_heads))} are not supported")
        num_kv_heads = num_kv_heads[0]
    hidden = int(get("embedding_length"))
    head_dim = int(get("attention.key_length", hidden // num_heads))
    rope_dim = int(get("rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise GGUFError(f"{path}: partial rotary embeddings (rope.dimension_count {rope_dim} < head_dim "
                        f"{head_dim}) are not supported")
    if "token_embd.weight" not in tensors:
        raise GGUFError(f"{path}: no token_embd.weight tensor")
    vocab_size = int(tensors["token_embd.weight"].shape[-1])  # GGUF shapes are [in, out]: [hidden, vocab]
    theta = float(get("rope.freq_base", 10000.0))
    context = int(get("context_length", 2048))
    raw: dict[str, Any] = {
        "architectures": [ARCHITECTURES[arch]], "model_type": arch, "hidden_act": "silu",
        "vocab_size": vocab_size, "hidden_size": hidden, "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")), "num_attention_heads": num_heads,
        "num_key_value_heads": int(num_kv_heads), "head_dim": head_dim,
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        "max_position_embeddings": context, "rope_theta": theta,
        "tie_word_embeddings": "output.weight" not in tensors,
        "attention_bias": arch != "qwen2" and "blk.0.attn_q.bias" in tensors,
        "mlp_bias": "blk.0.ffn_gate.bias" in tensors,
    }
    scaling = _rope_scaling(metadata, arch, tensors, theta, head_dim, path)
    if scaling:
        raw["rope_scaling"] = scaling
    eos = [metadata.get(f"tokenizer.ggml.{k}") for k in ("eos_token_id", "eot_token_id", "eom_token_id")]
    eos = list(dict.fromkeys(int(e) for e in eos if e is not None))
    if eos:
        raw["eos_token_id"] = eos[0] if len(eos) == 1 else eos
    if metadata.get("tokenizer.ggml.bos_token_id") is not None:
        raw["bos_token_id"] = int(metadata["tokenizer.ggml.bos_token_id"])
    try:
        return ModelConfig.from_dict(raw)
    except UnsupportedModelError as e:
        raise GGUFError(f"{path}: {e}") from e


def _rope_scaling(metadata: dict[str, Any], arch: str, tensors: dict[str, Any], theta: float, head_dim: int,
                  path: Path | str) -> dict[str, Any] | None:
    kind = metadata.get(f"{arch}.rope.scaling.type")
    factor = metadata.get(f"{arch}.rope.scaling.factor")
    if kind == "linear" and factor:
        return {"rope_type": "linear", "factor": float(factor)}
    if kind not in (None, "none", "linear"):
        raise GGUFError(f"{path}: unsupported rope scaling {kind!r}")
    if "rope_freqs.weight" not in tensors:
        return None
    # Llama 3.x: llama.cpp stores the per-frequency divisors instead of the parameters; find the llama3
    # parameters that give them (the published models use factor 8 or 32, low 1, high 4, original 8192).
    divisors = torch.from_numpy(_dequantize(tensors["rope_freqs.weight"], path).copy()).flatten()
    original = int(metadata.get(f"{arch}.rope.scaling.original_context_length", 8192))
    base = inverse_frequencies(RopeConfig(theta=theta), head_dim)
    for f in ([float(factor)] if factor else []) + [8.0, 16.0, 32.0, 4.0, 2.0]:
        rope = RopeConfig(theta=theta, rope_type="llama3", factor=f, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=original)
        if divisors.shape == base.shape and torch.allclose(base / divisors, inverse_frequencies(rope, head_dim),
                                                           rtol=1e-3):
            return {"rope_type": "llama3", "factor": f, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": original}
    raise GGUFError(f"{path}: rope_freqs.weight matches no llama3 rope scaling this engine knows")


def _dequantize(t, path: Path | str = "") -> np.ndarray:
    from gguf.quants import dequantize

    try:
        return dequantize(t.data, t.tensor_type)
    except NotImplementedError as e:
        raise GGUFError(f"{path}: tensor {t.name!r} has type {t.tensor_type.name}, which the installed gguf "
                        f"package cannot dequantize") from e


def unpermute_index(rows: int, num_heads: int) -> torch.Tensor:
    """Row order that undoes llama.cpp's q/k permute: ours = gguf[index]. (llama.cpp reshapes each head's rows as
    (2, head_dim/2) and swaps the two axes; the inverse reshapes them as (head_dim/2, 2) and swaps back.)"""
    if rows % (2 * num_heads):
        raise GGUFError(f"{rows} rows do not split into {num_heads} heads of an even size")
    return torch.arange(rows).view(num_heads, rows // num_heads // 2, 2).transpose(1, 2).reshape(-1)


def permute_rows(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """llama.cpp's permute (convert_hf_to_gguf.py), for tests and writers: gguf = permute_rows(ours)."""
    rows = weight.shape[0]
    return weight.reshape(num_heads, 2, rows // num_heads // 2, *weight.shape[1:]).transpose(1, 2).reshape(
        weight.shape)


def q4_to_int4(t, path: Path | str = "") -> Int4Weight:
    """A Q4_0 / Q4_1 tensor as an Int4Weight (group 32), without loss. Blocks: Q4_0 = f16 d, 16 bytes of nibbles
    (value (q - 8) * d); Q4_1 = f16 d, f16 m, 16 bytes (value q * d + m). Byte j of a block holds element j in its
    low nibble and element j + 16 in its high nibble."""
    kind = t.tensor_type.name
    if kind not in _INT4_TYPES:
        raise GGUFError(f"{path}: tensor {t.name!r} is {kind}, not Q4_0/Q4_1")
    rows = int(t.shape[-1]) if len(t.shape) > 1 else 1
    _, elements, nbytes = BLOCK_TYPES[kind]  # gguf's GGML_QUANT_SIZES: 32 elements, 18 / 20 bytes
    header = nbytes - elements // 2  # the f16 d (and m) before the nibbles
    blocks = np.ascontiguousarray(t.data).reshape(rows, -1, nbytes)
    d = torch.from_numpy(blocks[..., 0:2].copy().view(np.float16)).squeeze(-1).float()
    if kind == "Q4_0":
        m = -8 * d
    else:
        m = torch.from_numpy(blocks[..., 2:4].copy().view(np.float16)).squeeze(-1).float()
    qs = torch.from_numpy(blocks[..., header:].copy())
    codes = torch.cat((qs & 0x0F, qs >> 4), dim=-1).reshape(rows, -1)  # [N, K], element order of the block
    return Int4Weight(pack_nibbles(codes), d.contiguous(), m.contiguous(), elements)


def _parse_name(name: str) -> tuple[str, int | None]:
    """GGUF tensor name -> (our parameter name, shard of a fused parameter or None)."""
    base, _, kind = name.rpartition(".")
    if base in _GLOBAL_NAMES and kind == "weight":
        return f"{_GLOBAL_NAMES[base]}.weight", None
    match = re.fullmatch(r"blk\.(\d+)\.(\w+)", base)
    if match and match.group(2) in _BLOCK_NAMES and kind in ("weight", "bias"):
        module, shard = _BLOCK_NAMES[match.group(2)]
        return f"layers.{match.group(1)}.{module}.{kind}", shard
    raise GGUFError(f"unexpected tensor {name!r}: it has no place in a llama-family model as this engine "
                    "implements it")


def load_weights(reader, config: ModelConfig, keep_int4: bool = True, dtype: torch.dtype = torch.float32,
                 path: Path | str = "") -> dict[str, torch.Tensor | Int4Weight | KQuantWeight]:
    """Our parameters from the file's tensors. When keep_int4, projections stored as Q4_0/Q4_1 stay Int4Weight and
    those stored as K-quants, Q5_0, Q5_1 or Q8_0 stay KQuantWeight, as do an output tensor stored as a K-quant and
    an untied file's quantized token embedding (a fused parameter stays quantized only when all its shards are of
    one kind); everything else is dequantized to `dtype`."""
    arch = architecture_of({"general.architecture": _arch_name(config)}, path)
    shards: dict[str, dict[int, tuple[Any, str]]] = {}
    weights: dict[str, torch.Tensor | Int4Weight | KQuantWeight] = {}
    names = {t.name for t in reader.tensors}
    for t in reader.tensors:
        if t.name in _IGNORED_TENSORS:
            continue
        ours, shard = _parse_name(t.name)
        value: torch.Tensor | Int4Weight | KQuantWeight
        is_projection = ours.endswith("_proj.weight")
        kind = t.tensor_type.name
        if keep_int4 and is_projection and kind in _INT4_TYPES:
            value = q4_to_int4(t, path)
        elif keep_int4 and len(t.shape) == 2 and (
                (is_projection and kind in _BLOCK_TYPES_KEPT) or (ours == "lm_head.weight" and kind in _K_TYPES)
                or (ours == "embed_tokens.weight" and kind in STORED_TYPES and "output.weight" in names)):
            value = KQuantWeight.from_blocks(kind, t.data, int(t.shape[1]), int(t.shape[0]))
            if (native := native_library()) is not None:  # the kernel's layout, on this load's own copy
                repack(native, value, in_place=True)
        else:
            array = _dequantize(t, path)
            value = torch.from_numpy(np.array(array, dtype=np.float32, copy=True))
            value = value.reshape([int(s) for s in reversed(t.shape)]) if len(t.shape) > 1 else value.flatten()
        if arch in PERMUTED_ARCHITECTURES and shard in (0, 1) and ".qkv_proj." in ours:
            heads = config.num_heads if shard == 0 else config.num_kv_heads
            index = unpermute_index(value.shape[0], heads)
            value = value.select_rows(index) if isinstance(value, (Int4Weight, KQuantWeight)) else value[index]
        if shard is None:
            weights[ours] = value if isinstance(value, (Int4Weight, KQuantWeight)) else value.to(dtype)
        else:
            shards.setdefault(ours, {})[shard] = value
    weights.update(fuse_shards(shards, lambda ours: _FUSED_SHARDS[ours.split(".", 2)[2].rpartition(".")[0]], dtype,
                               path, GGUFError))
    return weights


def _arch_name(config: ModelConfig) -> str:
    return {v: k for k, v in ARCHITECTURES.items()}[config.architecture]


def load_gguf(path: str | Path, *, keep_int4: bool = True, dtype: torch.dtype = torch.float32,
              with_tokenizer: bool = True) -> GGUFCheckpoint:
    """The one entry point: a GGUF file -> (config, weights under our names, tokenizer, chat template)."""
    from tiers.models.gguf.tokenizer import build_tokenizer

    path = Path(path)
    reader = open_gguf(path)
    metadata = read_metadata(reader)
    tensors = {t.name: t for t in reader.tensors}
    config = config_from_gguf(metadata, tensors, path)
    tokenizer = build_tokenizer(reader, metadata, path) if with_tokenizer else None
    weights = load_weights(reader, config, keep_int4, dtype, path)
    return GGUFCheckpoint(path=path, config=config, weights=weights, tokenizer=tokenizer,
                          chat_template=metadata.get("tokenizer.chat_template"), metadata=metadata,
                          tensor_types={t.name: t.tensor_type.name for t in reader.tensors})
