"""GGUF (llama.cpp) checkpoints: config, weights under our parameter names, tokenizer and chat template."""
from tiers.models.gguf.reader import GGUFCheckpoint, GGUFError, load_gguf

__all__ = ["GGUFCheckpoint", "GGUFError", "load_gguf"]
from tiers.models.gguf.model import build_model  # noqa: E402

__all__ += ["build_model"]
