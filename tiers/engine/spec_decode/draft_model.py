"""The draft model of speculative decoding: loaded from a checkpoint folder or shared with another engine, after
checking that it speaks the target's token ids."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tiers.engine.model_runner import ModelRunner
from tiers.models.config import ModelConfig
from tiers.models.llama import LlamaForCausalLM
from tiers.models.checkpoint import open_checkpoint


class DraftModelError(ValueError):
    """The draft model cannot draft for the target: a different vocabulary, device or dtype."""


class DraftTarget:
    """The model a draft drafts for: what its draft must match."""

    def __init__(self, path: Path, model_config: ModelConfig, tokenizer: Any, device: torch.device,
                 dtype: torch.dtype) -> None:
        self.path, self.model_config, self.tokenizer = path, model_config, tokenizer
        self.device, self.dtype = device, dtype

    def check_vocabulary(self, draft_name: Any, draft_config: ModelConfig, draft_tokenizer: Any) -> None:
        """A draft must speak the target's token ids: same vocabulary size, and the same tokenizer vocabulary
        where both have one. Raises DraftModelError naming both models."""
        if draft_config.vocab_size != self.model_config.vocab_size:
            raise DraftModelError(f"the draft model {draft_name} has a vocabulary of {draft_config.vocab_size} "
                                  f"tokens but the target {self.path} has {self.model_config.vocab_size}: "
                                  "speculative decoding needs the same tokenizer and vocabulary")
        if self.tokenizer is not None and draft_tokenizer is not None:
            if self.tokenizer.get_vocab() != draft_tokenizer.get_vocab():
                raise DraftModelError(f"the draft model {draft_name} and the target {self.path} have different "
                                      "tokenizer vocabularies: speculative decoding needs the same tokenizer")


def load_draft_model(path: Path, target: DraftTarget) -> tuple[LlamaForCausalLM, ModelConfig]:
    """A checkpoint folder or .gguf file, in its stored precision (quantization "auto") and the target's dtype.
    The vocabulary is checked before any weight is loaded. (For another precision, pass an Engine as the draft.)"""
    checkpoint = open_checkpoint(path)
    target.check_vocabulary(path, checkpoint.config, checkpoint.tokenizer)
    return checkpoint.load_model(target.device, target.dtype), checkpoint.config


def share_draft_model(name: Any, runner: ModelRunner, model_config: ModelConfig, tokenizer: Any,
                      target: DraftTarget) -> tuple[LlamaForCausalLM, ModelConfig]:
    """Another engine's model (its runner's weights, shared rather than copied) as the draft."""
    target.check_vocabulary(name, model_config, tokenizer)
    if runner.device != target.device or runner.dtype != target.dtype:
        raise DraftModelError(f"the draft engine ({name}) runs on {runner.device} in {runner.dtype}, the "
                              f"target on {target.device} in {target.dtype}: they must match to share a step")
    return runner.model, model_config
