"""AutoAWQ "GEMM" checkpoints, all of AWQ in one place: a Hugging Face folder whose config.json says
quantization_config.quant_method == "awq" (awq_config), its packed layout (unpack_awq_int32, awq_gemm_to_int4) and
the streamed loader (load_awq_weights). Each quantized projection is stored as qweight / qzeros / scales; everything
else (embeddings, norms, lm_head, biases, layers in modules_to_not_convert) is float. The projections become
Int4Weight under our (fused) parameter names, ready for tiers.models.assemble, and run as the "int4" method
(tiers.quantization.methods): AWQ is a storage format, not a kernel.

Layout (per linear layer): qweight int32 [in, out / 8], qzeros int32 [in / group, out / 8], scales fp16
[in / group, out]; eight 4-bit values per int32, in the order AWQ_ORDER (nibble j of a word holds column
8 * word + AWQ_ORDER[j]); value = (q - zero) * scale.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tiers.models.assemble import Weights, fuse_shards
from tiers.models.config import ModelConfig, UnsupportedModelError
from tiers.models.loader import IGNORED_WEIGHT_SUFFIXES, iterate_weights, our_name
from tiers.quantization.int4 import Int4Weight, QuantizationError, pack_nibbles

AWQ_GROUP_SIZE = 128  # AutoAWQ's default, and the only one this engine takes
_AWQ_TENSORS = ("qweight", "qzeros", "scales")
_FUSED_SHARDS = {"qkv_proj": 3, "gate_up_proj": 2}
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def unpack_awq_int32(packed: torch.Tensor) -> torch.Tensor:
    """int32 [R, C / 8] -> uint8 [R, C] in logical column order."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=packed.device)
    nibbles = (packed.unsqueeze(-1) >> shifts) & 0xF  # [R, C/8, 8]: nibble j
    inverse = torch.tensor([AWQ_ORDER.index(c) for c in range(8)], device=packed.device)
    return nibbles[..., inverse].flatten(-2).to(torch.uint8)  # column c of a word sits in nibble inverse[c]


def awq_gemm_to_int4(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
                     group_size: int = 128) -> Int4Weight:
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        raise QuantizationError(f"AWQ qweight/qzeros must be int32, got {qweight.dtype}/{qzeros.dtype}")
    in_features, out_features = qweight.shape[0], 8 * qweight.shape[1]
    groups = in_features // group_size if group_size > 0 else 0
    if not groups or in_features % group_size:
        raise QuantizationError(f"AWQ in_features {in_features} is not a multiple of the group size {group_size}")
    if tuple(qzeros.shape) != (groups, out_features // 8) or tuple(scales.shape) != (groups, out_features):
        raise QuantizationError(f"AWQ shapes do not agree: qweight {tuple(qweight.shape)}, qzeros "
                                f"{tuple(qzeros.shape)}, scales {tuple(scales.shape)}, group size {group_size}")
    codes = unpack_awq_int32(qweight).t().contiguous()  # [out, in]
    zeros = unpack_awq_int32(qzeros).t().float()  # [out, groups]
    s = scales.t().float().contiguous()
    # (q - z) * s == q * s + (-z * s) exactly: both products are exact in float32 (4-bit times fp16).
    return Int4Weight(pack_nibbles(codes), s, (-zeros * s).contiguous(), group_size)


class AWQError(UnsupportedModelError):
    """An AWQ checkpoint this engine cannot load; the message names the folder and the problem."""


def awq_config(raw: dict[str, Any], path: Path | str = "") -> dict[str, Any] | None:
    """The checkpoint's AWQ quantization_config (validated), or None when it is not an AWQ checkpoint."""
    qc = raw.get("quantization_config") or {}
    if qc.get("quant_method") != "awq":
        return None
    bits = qc.get("bits", qc.get("w_bit", 4))
    group = qc.get("group_size", qc.get("q_group_size", AWQ_GROUP_SIZE))
    version = str(qc.get("version", "gemm")).lower()
    if bits != 4:
        raise AWQError(f"{path}: AWQ with {bits}-bit weights is not supported (4-bit only)")
    if group != AWQ_GROUP_SIZE:
        raise AWQError(f"{path}: AWQ group size {group} is not supported (only {AWQ_GROUP_SIZE}, AutoAWQ's default)")
    if version != "gemm":
        raise AWQError(f"{path}: AWQ version {version!r} is not supported (only AutoAWQ's 'gemm' layout)")
    if not qc.get("zero_point", True):
        raise AWQError(f"{path}: AWQ without zero points is not supported")
    return qc


def load_awq_weights(path: str | Path, config: ModelConfig, dtype: torch.dtype = torch.float32,
                     device: torch.device | str = "cpu") -> Weights:
    """Our parameters from an AWQ folder: Int4Weight for the quantized projections (fused where all the shards of
    a fused one are quantized, else dequantized and fused as float), float tensors in `dtype` for the rest, all on
    `device`.

    Streamed: tensors are read one at a time, a layer is converted on `device` as soon as its qweight, qzeros and
    scales have been read, and a fused projection is concatenated as soon as its last shard is there, so neither
    host nor device memory ever holds more than the result plus one layer in transit (a 70B checkpoint of ~40 GB
    loads on a 128 GiB host and converts on the GPU, not on the CPU)."""
    path, device = Path(path), torch.device(device)
    packed: dict[str, dict[str, torch.Tensor]] = {}  # HF module name -> {"qweight": ..., ...}, until complete
    shards: dict[str, dict[int, torch.Tensor | Int4Weight]] = {}
    weights: Weights = {}
    for name, tensor in iterate_weights(path):
        if name.endswith(IGNORED_WEIGHT_SUFFIXES) or (config.tie_word_embeddings and name == "lm_head.weight"):
            continue
        module, _, kind = name.rpartition(".")
        if kind not in _AWQ_TENSORS:
            _put(weights, shards, name, tensor.to(device, dtype), dtype, path)
            continue
        parts = packed.setdefault(module, {})
        parts[kind] = tensor.to(device)
        if len(parts) == len(_AWQ_TENSORS):
            del packed[module]
            try:
                weight = awq_gemm_to_int4(parts["qweight"], parts["qzeros"], parts["scales"], AWQ_GROUP_SIZE)
            except QuantizationError as e:
                raise AWQError(f"{path}: AWQ layer {module}: {e}") from e
            _put(weights, shards, f"{module}.weight", weight, dtype, path)
    for module, parts in packed.items():
        missing = [k for k in _AWQ_TENSORS if k not in parts]
        raise AWQError(f"{path}: AWQ layer {module} has no {', '.join(missing)} (each quantized layer needs "
                       "qweight, qzeros and scales)")
    weights.update(fuse_shards(shards, _num_shards, dtype, path, AWQError))  # only incomplete ones are left: raises
    return weights


def _num_shards(ours: str) -> int:
    return _FUSED_SHARDS[ours.split(".")[-2]]


def _put(weights: Weights, shards: dict[str, dict[int, Any]], hf_name: str, value: torch.Tensor | Int4Weight,
         dtype: torch.dtype, path: Path) -> None:
    """Stores a weight under our name; a shard of a fused parameter waits for the others, then all are fused."""
    ours, shard = our_name(hf_name)
    if shard is None:
        weights[ours] = value
        return
    parts = shards.setdefault(ours, {})
    parts[shard] = value
    if len(parts) == _num_shards(ours):
        weights.update(fuse_shards({ours: shards.pop(ours)}, _num_shards, dtype, path, AWQError))
