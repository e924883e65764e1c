"""Per-request sampling settings, validated at construction."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any


# logit / p and logit * p stay within 100x the model's logits, finite and exact in float32 (vLLM takes any p > 0:
# p = 1e-300 turns a logit into inf and the answer into NaN); 2 is OpenRouter's upper bound.
MIN_REPETITION_PENALTY = 0.01
MAX_REPETITION_PENALTY = 2.0


class InvalidRequestError(ValueError):
    """A request the engine refuses: the message says which field is wrong and why."""


@dataclass(frozen=True)
class StructuredOutputParams:
    """Guided decoding: the output must be JSON matching json_schema, or (json_object) some JSON object. Exactly
    one of the two. Whether the engine's grammar library supports the schema is checked when the request is added
    (Engine.add_request / Engine.check_structured_output)."""
    json_schema: dict | None = None
    json_object: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.json_object, bool):
            raise InvalidRequestError(f"structured_output.json_object must be a boolean, got {self.json_object!r}")
        if self.json_schema is not None and not isinstance(self.json_schema, dict):
            raise InvalidRequestError("structured_output.json_schema must be a JSON object (a dict), got "
                                      f"{type(self.json_schema).__name__}")
        if (self.json_schema is not None) == self.json_object:
            raise InvalidRequestError("structured_output needs exactly one of json_schema and json_object")
        try:
            self.canonical_key()
        except (TypeError, ValueError) as exc:
            raise InvalidRequestError(f"structured_output.json_schema is not serialisable as JSON: {exc}") from None

    def canonical_key(self) -> str:
        """The grammar cache's key: the schema as canonical JSON (sorted keys, no whitespace)."""
        if self.json_schema is None:
            return "json_object"
        return "json_schema:" + json.dumps(self.json_schema, sort_keys=True, separators=(",", ":"),
                                           allow_nan=False)


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0  # >= 0, finite; 0: greedy. Any T > 0 is exact (sampler.tempered)
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: no top-k
    seed: int | None = None
    stop: list[str] | str | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None  # number of top logprobs per generated token (0: only the sampled one)
    skip_special_tokens: bool = True
    # Logits processing (OpenAI's and vLLM's definitions), applied before temperature/top-k/top-p and to greedy
    # requests too; returned logprobs stay the model's raw distribution.
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit, in [-100, 100]
    presence_penalty: float = 0.0  # in [-2, 2]: subtracted once from every token generated so far
    frequency_penalty: float = 0.0  # in [-2, 2]: subtracted per occurrence among the generated tokens
    repetition_penalty: float = 1.0  # in [0.01, 2]: tokens in the prompt or output: logit / p if positive, else * p
    min_tokens: int = 0  # EOS and stop_token_ids are masked until this many tokens were generated
    structured_output: StructuredOutputParams | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = [s for s in (self.stop or [])]
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not _is_number(self.temperature) or self.temperature < 0:
            raise InvalidRequestError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not isinstance(self.top_p, (int, float)) or not (0.0 < self.top_p <= 1.0):
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise InvalidRequestError(f"top_k must be -1, 0 (disabled) or a positive integer, got {self.top_k!r}")
        if self.top_k == -1:
            self.top_k = 0
        if self.seed is not None and not isinstance(self.seed, int):
            raise InvalidRequestError(f"seed must be an integer, got {self.seed!r}")
        if any(not isinstance(s, str) or s == "" for s in self.stop):
            raise InvalidRequestError("stop must be a non-empty string or a list of non-empty strings")
        if any(not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise InvalidRequestError("stop_token_ids must be non-negative integers")
        if self.logprobs is not None and (not isinstance(self.logprobs, int) or not 0 <= self.logprobs <= 20):
            raise InvalidRequestError(f"logprobs must be an integer in [0, 20], got {self.logprobs!r}")
        self._check_logits_processing()

    def _check_logits_processing(self) -> None:
        if self.logit_bias is not None:
            self.logit_bias = _checked_logit_bias(self.logit_bias)
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not _is_number(value) or not -2.0 <= value <= 2.0:
                raise InvalidRequestError(f"{name} must be a number in [-2, 2], got {value!r}")
        if not _is_number(self.repetition_penalty) or \
                not MIN_REPETITION_PENALTY <= self.repetition_penalty <= MAX_REPETITION_PENALTY:
            raise InvalidRequestError(f"repetition_penalty must be a number in [{MIN_REPETITION_PENALTY}, "
                                      f"{MAX_REPETITION_PENALTY}], got {self.repetition_penalty!r}")
        if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, int) or \
                not 0 <= self.min_tokens <= self.max_tokens:
            raise InvalidRequestError(f"min_tokens must be an integer in [0, max_tokens={self.max_tokens}], got "
                                      f"{self.min_tokens!r}")
        if self.structured_output is not None and not isinstance(self.structured_output, StructuredOutputParams):
            raise InvalidRequestError("structured_output must be StructuredOutputParams, got "
                                      f"{type(self.structured_output).__name__}")

    @property
    def has_penalties(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0)

    @property
    def processes_logits(self) -> bool:
        """True when the request changes the model's logits before choosing a token (such requests decode without
        speculation); min_tokens counts only while it is pending, see Sequence.processes_logits."""
        return bool(self.logit_bias or self.has_penalties or self.structured_output is not None)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _checked_logit_bias(logit_bias: Any) -> dict[int, float]:
    """Token ids (ints, or their decimal strings as in OpenAI's JSON) -> biases in [-100, 100]. Whether the ids are
    inside the vocabulary is checked where the vocabulary is known (InputProcessor)."""
    if not isinstance(logit_bias, dict):
        raise InvalidRequestError(f"logit_bias must map token ids to numbers, got {type(logit_bias).__name__}")
    checked: dict[int, float] = {}
    for key, value in logit_bias.items():
        token = key
        if isinstance(key, str) and key.strip().isdigit():
            token = int(key)
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise InvalidRequestError(f"logit_bias keys must be non-negative token ids, got {key!r}")
        if not _is_number(value) or not -100.0 <= value <= 100.0:
            raise InvalidRequestError(f"logit_bias values must be numbers in [-100, 100], got {value!r} for token "
                                      f"{token}")
        checked[token] = float(value)
    return checked
