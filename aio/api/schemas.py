"""The request bodies the API accepts (OpenAI's chat completion shape; unknown fields are accepted and ignored)."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_N = 16
MAX_STOP = 4  # as OpenAI


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)  # NaN/Infinity in JSON: "a finite number"

    model: str
    messages: list[ChatMessage]
    max_completion_tokens: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int | None = Field(1, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-(1 << 63), le=(1 << 63) - 1)  # int64, as OpenAI
    user: str | None = Field(None, max_length=256)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    aio_quality: float | None = Field(None, ge=0, le=1)  # per-request quality knob (0 cheapest .. 1 best)
    # vLLM's extra sampling parameters
    top_k: int | None = Field(None, ge=-1)
    ignore_eos: bool | None = False


    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, stop: str | list[str] | None) -> str | list[str] | None:
        if isinstance(stop, list):
            if len(stop) > MAX_STOP:
                raise ValueError(f"at most {MAX_STOP} stop sequences are allowed, got {len(stop)}")
            if any(not s for s in stop):
                raise ValueError("stop sequences must be non-empty")
        elif stop == "":
            raise ValueError("a stop sequence must be non-empty")
        return stop


class CreateKeyRequest(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    role: str = Field("user", pattern="^(user|admin)$")
