"""Turns a request (prompt, sampling params, priority) into a validated Sequence (vLLM's input processor)."""
from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence as Seq

import torch

from tiers.engine.output_processor import eos_token_ids
from tiers.engine.outputs import RequestOutput
from tiers.engine.sampling_params import InvalidRequestError, SamplingParams
from tiers.engine.sequence import Sequence
from tiers.engine.structured_output import GrammarCompiler
from tiers.models.config import ModelConfig

Prompt = str | list[int]


class InputProcessor:
    def __init__(self, path: Path, tokenizer: Any, model_config: ModelConfig, max_model_len: int, seed: int,
                 make_generator: Callable[[int], torch.Generator]) -> None:
        self.path, self.tokenizer, self.vocab_size = path, tokenizer, model_config.vocab_size
        self.eos_token_ids = frozenset(eos_token_ids(model_config, tokenizer))
        self.grammars = GrammarCompiler(tokenizer, self.vocab_size, set(self.eos_token_ids))
        self.max_model_len = max_model_len
        self.make_generator = make_generator
        self._rng = random.Random(seed)

    def make_sequence(self, prompt: Prompt, params: SamplingParams, request_id: str | None, priority: int,
                      on_output: Callable[[RequestOutput], None] | None, stream: bool,
                      tenant: Hashable | None = None) -> Sequence:
        """Raises InvalidRequestError for bad input. tenant: who asked, an opaque hashable id (the scheduler shares
        the engine fairly between tenants)."""
        if not isinstance(params, SamplingParams):
            raise InvalidRequestError(f"params must be SamplingParams, got {type(params).__name__}")
        token_ids = self.tokenize(prompt)
        if len(token_ids) > self.max_model_len:
            raise InvalidRequestError(f"the prompt has {len(token_ids)} tokens, more than this model's maximum "
                                      f"context length of {self.max_model_len} tokens")
        if not isinstance(priority, int):
            raise InvalidRequestError(f"priority must be an integer, got {priority!r}")
        if not isinstance(tenant, Hashable):
            raise InvalidRequestError(f"a tenant is a string or an integer, got {type(tenant).__name__}")
        self.check_token_ids(params)
        grammar = self.grammars.new_matcher(params.structured_output) if params.structured_output else None
        generator = None
        if not params.greedy:
            seed = params.seed if params.seed is not None else self._rng.getrandbits(63)
            generator = self.make_generator(seed)
        return Sequence(request_id or uuid.uuid4().hex, token_ids, params, priority=priority, tenant=tenant,
                        on_output=on_output, stream=stream, generator=generator, grammar=grammar,
                        min_tokens_stop_ids=self.min_tokens_stop_ids(params))

    def check_token_ids(self, params: SamplingParams) -> None:
        """Token ids in params must be inside the vocabulary."""
        for name, ids in (("logit_bias", params.logit_bias or {}), ("stop_token_ids", params.stop_token_ids)):
            bad = [t for t in ids if t >= self.vocab_size]
            if bad:
                raise InvalidRequestError(f"{name}: token id {bad[0]} is outside the vocabulary [0, "
                                          f"{self.vocab_size})")

    def min_tokens_stop_ids(self, params: SamplingParams) -> frozenset[int]:
        """What min_tokens masks: stop_token_ids, and EOS unless ignore_eos (vLLM's rule)."""
        if not params.min_tokens:
            return frozenset()
        return frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_token_ids)

    def make_batch(self, prompts: Prompt | Seq[Prompt], params: SamplingParams | Seq[SamplingParams] | None,
                   priority: int, on_output: Callable[[RequestOutput], None]) -> list[Sequence]:
        """One sequence per prompt (a single prompt may be given bare), with one params for all or one each."""
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = list(prompts)
        if isinstance(params, (list, tuple)):
            if len(params) != len(prompts):
                raise InvalidRequestError(f"got {len(params)} SamplingParams for {len(prompts)} prompts")
            param_list = list(params)
        else:
            param_list = [params or SamplingParams()] * len(prompts)
        return [self.make_sequence(p, sp, None, priority, on_output, False) for p, sp in zip(prompts, param_list)]

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            tools: list[dict[str, Any]] | None = None) -> list[int]:
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise InvalidRequestError(f"{self.path} has no chat template")
        kwargs = {"tools": tools} if tools else {}
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True,
                                                 **kwargs)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)

    def tokenize(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidRequestError("the prompt is empty")
            if self.tokenizer is None:
                raise InvalidRequestError(f"{self.path} has no tokenizer: pass token ids instead of text")
            token_ids = self.tokenizer.encode(prompt)
        elif isinstance(prompt, (list, tuple)):
            token_ids = list(prompt)
            if any(isinstance(t, bool) or not isinstance(t, int) for t in token_ids):
                raise InvalidRequestError("a token-id prompt must be a list of integers")
            bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
            if bad:
                raise InvalidRequestError(f"token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})")
        else:
            raise InvalidRequestError(f"a prompt is a string or a list of token ids, got {type(prompt).__name__}")
        if not token_ids:
            raise InvalidRequestError("the prompt is empty")
        return token_ids
