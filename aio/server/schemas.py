"""The request bodies the API accepts (OpenAI's chat completion shape; unknown fields are accepted and ignored)."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

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
    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessage]
    max_completion_tokens: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int | None = Field(1, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = Field(None, max_length=256)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    aio_quality: float | None = Field(None, ge=0, le=1)  # per-request quality knob (0 cheapest .. 1 best)
    # vLLM's extra sampling parameters
    top_k: int | None = Field(None, ge=-1)
    ignore_eos: bool | None = False


class CreateKeyRequest(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    role: str = Field("user", pattern="^(user|admin)$")
