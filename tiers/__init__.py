"""The tier pool's inference engine: paged KV cache, continuous batching, Llama-family models.

Layers, each importing only the ones below it:
  llm_engine (Engine: the front end) > spec_decode > engine (scheduler, KV cache, model runner, sampling) >
  models > attention.
The public names below load on first use, so `tiers.engine.config` (EngineConfig) imports without torch.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Engine": "tiers.llm_engine",
    "EngineConfig": "tiers.engine.config",
    "EngineStats": "tiers.engine.outputs",
    "RequestOutput": "tiers.engine.outputs",
    "InvalidRequestError": "tiers.engine.sampling_params",
    "SamplingParams": "tiers.engine.sampling_params",
    "StructuredOutputParams": "tiers.engine.sampling_params",
    "UnsupportedModelError": "tiers.models.config",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tiers' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
