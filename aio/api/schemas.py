"""The request bodies the API accepts (OpenAI's chat completion shape; unknown fields are accepted and ignored)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_N = 16
MAX_STOP = 4  # as OpenAI


FUNCTION_NAME = r"^[a-zA-Z0-9_-]{1,64}$"  # as OpenAI


class FunctionCall(BaseModel):
    name: str
    arguments: str


class MessageToolCall(BaseModel):
    """A call in an earlier assistant turn."""
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None  # assistant turns
    tool_call_id: str | None = None  # tool turns


class FunctionDefinition(BaseModel):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema; none: no arguments
    strict: bool | None = None


class ToolDefinition(BaseModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(BaseModel):
    name: str = Field("response", pattern=FUNCTION_NAME)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


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
    # the confidence cascade for this request (None: the server's `cascade`); a threshold turns it on
    aio_cascade: bool | None = None
    aio_cascade_threshold: float | None = Field(None, le=0)  # a confidence (logprob) below which the answer escalates
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None  # token id (as a string) -> bias in [-100, 100]
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    # vLLM's extra sampling parameters
    top_k: int | None = Field(None, ge=-1)
    ignore_eos: bool | None = False
    repetition_penalty: float | None = Field(None, gt=0)
    min_tokens: int | None = Field(None, ge=0)


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


    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, bias: dict[str, float] | None) -> dict[str, float] | None:
        for token, value in (bias or {}).items():
            if not token.isdigit():
                raise ValueError(f"logit_bias keys are token ids, got {token!r}")
            if not -100 <= value <= 100:
                raise ValueError(f"logit_bias values must be in [-100, 100], got {value} for token {token}")
        return bias


class CreateKeyRequest(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    role: str = Field("user", pattern="^(user|admin)$")
