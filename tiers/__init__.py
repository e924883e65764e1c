"""The tier pool's inference engine: paged KV cache, continuous batching, Llama-family models."""
from tiers.engine.config import EngineConfig
from tiers.engine.llm_engine import Engine
from tiers.engine.outputs import EngineStats, RequestOutput
from tiers.engine.sampling_params import InvalidRequestError, SamplingParams
from tiers.models.config import UnsupportedModelError

__all__ = ["Engine", "EngineConfig", "EngineStats", "InvalidRequestError", "RequestOutput", "SamplingParams",
           "UnsupportedModelError"]
