"""What a model path is, and how to build its model in the precision asked for.

Three formats: a Hugging Face folder of float safetensors, an AutoAWQ GEMM folder (4-bit projections), and a GGUF
file (llama.cpp; Q4_0/Q4_1 projections can stay 4-bit). `quantization` (EngineConfig's) picks the projections'
precision, see tiers.quantization.modes; embeddings, lm_head and norms always stay float in the model's dtype.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from tiers.models.assemble import Weights, assemble_model, cast_float_weights
from tiers.models.awq import AWQError, awq_config, load_awq_weights
from tiers.models.config import ModelConfig
from tiers.models.gguf.reader import GGUFCheckpoint, GGUFError, load_gguf
from tiers.models.llama import LlamaForCausalLM
from tiers.models.loader import load_model
from tiers.models.tokenizer import load_tokenizer
from tiers.native import native_library
from tiers.quantization.int4 import Int4Weight
from tiers.quantization.kquant import KQuantWeight
from tiers.quantization.linear import QuantizedLinear, quantize_lm_head, quantize_model
from tiers.quantization.modes import QUANTIZATION_MODES

logger = logging.getLogger(__name__)

_STORED_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Checkpoint:
    def __init__(self, path: Path, fmt: str, config: ModelConfig, tokenizer: Any,
                 gguf: GGUFCheckpoint | None = None) -> None:
        self.path, self.format, self.config, self.tokenizer = path, fmt, config, tokenizer
        self.gguf = gguf

    @property
    def native_int4(self) -> bool:
        """Whether some projections are stored quantized in a form that runs as stored (4-bit, GGUF blocks)."""
        if self.format == "gguf":
            return any(isinstance(w, (Int4Weight, KQuantWeight)) for w in self.gguf.weights.values())
        return self.format == "awq"

    @property
    def q8_0_output(self) -> bool:
        """Whether a GGUF file stores the output projection (or the tied embedding) as Q8_0."""
        if self.format != "gguf":
            return False
        types = self.gguf.tensor_types
        return types.get("output.weight", types.get("token_embd.weight")) == "Q8_0"

    def is_quantized(self, quantization: str | None) -> bool:
        """Whether the model built with this quantization mode has quantized projections."""
        return quantization in ("int4", "int8") or (quantization == "auto" and self.native_int4)

    def load_model(self, device: torch.device, dtype: torch.dtype, quantization: str | None = "auto",
                   group_size: int = 128, lm_head_int8: bool = False, dense_min_rows: int | None = None,
                   kernel: str | None = None) -> LlamaForCausalLM:
        """lm_head_int8: the output projection (and a tied embedding) as INT8 too (EngineConfig.quantize_lm_head).
        dense_min_rows, kernel: the quantized projections' (EngineConfig.quantized_dense_min_rows,
        quantized_kernel)."""
        if quantization not in QUANTIZATION_MODES:
            raise ValueError(f"quantization must be one of {QUANTIZATION_MODES}, got {quantization!r}")
        requantize = quantization in ("int4", "int8")
        # Round-to-nearest from the stored precision, not from `dtype`'s rounding of it.
        load_dtype = dtype if not requantize or _stored_dtype(self.config) == dtype else torch.float32
        if self.format == "hf":
            model = load_model(self.path, self.config, device, load_dtype)
        else:
            # AWQ: streamed, each layer converted on `device` (a 70B checkpoint never sits whole in host memory)
            weights = self.gguf.weights if self.format == "gguf" else load_awq_weights(self.path, self.config,
                                                                                         load_dtype, device)
            if quantization is None or quantization == "int8":
                weights = _dequantized(weights)
            elif quantization == "int4":  # requantized from float below, as before GGUF blocks ran natively
                weights = _dequantized(weights, (KQuantWeight,))
            model = assemble_model(self.config, weights, device, load_dtype, self.path,
                                   GGUFError if self.format == "gguf" else AWQError, dense_min_rows, kernel)
        if requantize:
            report = quantize_model(model, quantization, group_size, kernel=kernel, dense_min_rows=dense_min_rows)
            skipped = {name: why for name, why in report.items() if why.startswith("skipped")}
            if skipped:
                logger.warning("%s: %d of %d projections stay float under %s (e.g. %s: %s)", self.path,
                               len(skipped), len(report), quantization, *next(iter(skipped.items())))
        cast_float_weights(model, dtype)
        # A quantized model keeps a GGUF's Q8_0 output tensor 8-bit where the native kernel runs it: blocks of 32
        # with one scale each, so the requantization is exact (and its kernel keeps float32 activations)
        as_stored = (quantization is not None and self.q8_0_output and device.type == "cpu" and kernel != "torch"
                     and native_library() is not None)
        if (lm_head_int8 or as_stored) and not isinstance(model.lm_head, QuantizedLinear):  # a K-quant one is
            quantize_lm_head(model, dtype, kernel)
        return model


def open_checkpoint(path: str | Path | GGUFCheckpoint) -> Checkpoint:
    """path: a Hugging Face checkpoint folder (float or AWQ), a .gguf file, or a GGUFCheckpoint already read (so
    that several engines share one parse of a large file). Reads the config and tokenizer, not the weights (a GGUF
    file is read whole)."""
    if isinstance(path, GGUFCheckpoint):
        return _from_gguf(path)
    path = Path(path)
    if path.is_file() or path.suffix.lower() == ".gguf":
        return _from_gguf(load_gguf(path))
    config = ModelConfig.from_pretrained(path)
    fmt = "awq" if awq_config(config.raw, path) is not None else "hf"
    return Checkpoint(path, fmt, config, load_tokenizer(path))


def is_checkpoint(path: str | Path) -> bool:
    """Whether `path` looks like something open_checkpoint reads (a folder with config.json, or a .gguf file)."""
    path = Path(path)
    return (path / "config.json").is_file() or (path.is_file() and path.suffix.lower() == ".gguf")


def _from_gguf(checkpoint: GGUFCheckpoint) -> Checkpoint:
    if checkpoint.tokenizer is None:
        raise GGUFError(f"{checkpoint.path}: read without its tokenizer (load_gguf(..., with_tokenizer=False))")
    return Checkpoint(Path(checkpoint.path), "gguf", checkpoint.config, checkpoint.tokenizer, checkpoint)


def _dequantized(weights: Weights, kinds: tuple[type, ...] = (Int4Weight, KQuantWeight)) -> Weights:
    return {n: w.dequantize() if isinstance(w, kinds) else w for n, w in weights.items()}


def _stored_dtype(config: ModelConfig) -> torch.dtype:
    return _STORED_DTYPES.get(str(config.torch_dtype), torch.float32)
