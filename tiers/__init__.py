"""AIO's tiers: the inference engine (paged KV cache, continuous batching, Llama-family models) and the tier
layer above it. No SQL, and no HTTP except a remote tier's client (`serving/remote.py`).

Floors, top to bottom, each importing only the ones below it (tests/test_structure.py holds the folders and
modules on disk to this list):
  serving/          the tier pool AIO serves from: a local Engine or a remote server per tier; tool calling
  engine/           Engine (llm_engine.py), its step (core.py), scheduler, KV cache, sampling, spec_decode/
  models/           model configs, the Llama-family model, checkpoints (HF, AWQ, GGUF), tokenizers
  attention/        attention backends: PyTorch, Triton, native
  quantization/     INT4 / INT8 weights, QuantizedLinear and its kernels
  native/           the native CPU library (C, built at first use)
  triton_device.py  where Triton kernels can run: compiled on CUDA, or in the interpreter on CPU
  checkpoints.py    random checkpoints built offline (demo tiers, tests, benchmarks)
  lazy_exports.py   the packages' public names, loaded on first use
The public names below load on first use, so `tiers.engine.config` (EngineConfig) imports without torch.
"""
from __future__ import annotations

from tiers.lazy_exports import lazy_getattr

_EXPORTS = {
    "Engine": "tiers.engine.llm_engine",
    "EngineConfig": "tiers.engine.config",
    "EngineStats": "tiers.engine.outputs",
    "RequestOutput": "tiers.engine.outputs",
    "InvalidRequestError": "tiers.engine.sampling_params",
    "SamplingParams": "tiers.engine.sampling_params",
    "StructuredOutputParams": "tiers.engine.sampling_params",
    "UnsupportedModelError": "tiers.models.config",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
