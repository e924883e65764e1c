"""The request bodies the API accepts (OpenAI's chat completion shape; unknown fields are accepted and ignored).

Strict types, as OpenAI's API: a string is not an integer ("4"), a bool is not a number (true) and a number is not
a bool (1); an integer is a number (`temperature: 1`). Every list and string a client can make long has a bound, so
that validating the largest body the server accepts stays linear and short (docs/api.md lists them).
"""
from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aio.db.keys import key_name_problem

MAX_N = 16
MAX_STOP = 4  # as OpenAI documents
MAX_TOOLS = 128  # as OpenAI documents ("a max of 128 functions are supported")
FUNCTION_NAME = r"^[a-zA-Z0-9_-]{1,64}$"  # as OpenAI documents
MAX_MESSAGE_NAME = 64  # as OpenAI documents for a message's `name`
# AIO's own bounds, where OpenAI documents none: far above what a real request sends, low enough that no field can
# make validation or a later step expensive.
MAX_MESSAGES = 2048
MAX_CONTENT_PARTS = 2048  # per message
MAX_TOOL_CALLS = 1024  # per assistant message
MAX_ID_LENGTH = 256  # tool call ids, the model's name
MAX_STOP_LENGTH = 256  # characters per stop string: checked against the output's tail at every token
MAX_DESCRIPTION = 32_768  # characters of a tool's or a JSON schema's description
MAX_SCHEMA_CHARS = 100_000  # a tool's parameters or a response JSON schema, as compact JSON
MAX_LOGIT_BIAS = 1024  # entries
MAX_TOKEN_ID = (1 << 31) - 1  # larger than any vocabulary; the engine checks the tier's own
INT64 = (1 << 63) - 1


class StrictModel(BaseModel):
    model_config = ConfigDict(strict=True)


class FunctionCall(StrictModel):
    name: str = Field(max_length=64)
    arguments: str


class MessageToolCall(StrictModel):
    """A call in an earlier assistant turn."""
    id: str = Field(max_length=MAX_ID_LENGTH)
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(StrictModel):
    model_config = ConfigDict(strict=True, extra="allow")

    role: str = Field(max_length=32)
    content: str | Annotated[list[dict[str, Any]], Field(max_length=MAX_CONTENT_PARTS)] | None = None
    name: str | None = Field(None, max_length=MAX_MESSAGE_NAME)
    tool_calls: list[MessageToolCall] | None = Field(None, max_length=MAX_TOOL_CALLS)  # assistant turns
    tool_call_id: str | None = Field(None, max_length=MAX_ID_LENGTH)  # tool turns


def _schema_size(schema: dict[str, Any] | None, what: str) -> dict[str, Any] | None:
    if schema is not None and len(json.dumps(schema, separators=(",", ":"))) > MAX_SCHEMA_CHARS:
        raise ValueError(f"{what} is larger than {MAX_SCHEMA_CHARS} characters as compact JSON")
    return schema


class FunctionDefinition(StrictModel):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = Field(None, max_length=MAX_DESCRIPTION)
    parameters: dict[str, Any] | None = None  # a JSON schema; none: no arguments
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _parameters_size(cls, parameters: dict[str, Any] | None) -> dict[str, Any] | None:
        return _schema_size(parameters, "a function's parameters schema")


class ToolDefinition(StrictModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(StrictModel):
    name: str = Field(max_length=64)


class NamedToolChoice(StrictModel):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(StrictModel):
    name: str = Field("response", pattern=FUNCTION_NAME)
    description: str | None = Field(None, max_length=MAX_DESCRIPTION)
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None

    @field_validator("schema_")
    @classmethod
    def _schema_size(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        return _schema_size(schema, "the response schema")


class ResponseFormat(StrictModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(StrictModel):
    model_config = ConfigDict(strict=True, extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(StrictModel):
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)  # NaN/Infinity: "a finite number"

    model: str = Field(max_length=MAX_ID_LENGTH)
    messages: list[ChatMessage] = Field(max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int | None = Field(1, ge=1, le=MAX_N)
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP)] | None = None
    seed: int | None = Field(None, ge=-INT64 - 1, le=INT64)  # int64, as OpenAI
    user: str | None = Field(None, max_length=256)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    aio_quality: float | None = Field(None, ge=0, le=1)  # per-request quality knob (0 cheapest .. 1 best)
    # the confidence cascade for this request (None: the server's `cascade`); a threshold turns it on
    aio_cascade: bool | None = None
    aio_cascade_threshold: float | None = Field(None, le=0)  # a confidence (logprob) below which the answer escalates
    # the exact answer cache (aio.answer_cache): false skips it; true asks for it (a 400 where it cannot apply)
    aio_cache: bool | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None  # token id (as a string) -> bias in [-100, 100]
    tools: list[ToolDefinition] | None = Field(None, max_length=MAX_TOOLS)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    # vLLM's extra sampling parameters
    top_k: int | None = Field(None, ge=-1)
    ignore_eos: bool | None = False
    # vLLM takes any p > 0; AIO keeps logit / p finite and exact: p in [0.01, 2] (2: OpenRouter's upper bound)
    repetition_penalty: float | None = Field(None, ge=0.01, le=2)
    min_tokens: int | None = Field(None, ge=0)


    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, stop: str | list[str] | None) -> str | list[str] | None:
        strings = stop if isinstance(stop, list) else [] if stop is None else [stop]
        if len(strings) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop sequences are allowed, got {len(strings)}")
        if any(not s for s in strings):
            raise ValueError("stop sequences must be non-empty")
        if any(len(s) > MAX_STOP_LENGTH for s in strings):
            raise ValueError(f"a stop sequence may have at most {MAX_STOP_LENGTH} characters")
        return stop

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _logit_bias_size(cls, bias: Any) -> Any:
        """Before the values are checked: a dict's length bound does not stop pydantic at its first entries."""
        if isinstance(bias, dict) and len(bias) > MAX_LOGIT_BIAS:
            raise ValueError(f"at most {MAX_LOGIT_BIAS} logit_bias entries are allowed, got {len(bias)}")
        return bias

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, bias: dict[str, float] | None) -> dict[str, float] | None:
        seen: dict[int, str] = {}
        for token, value in (bias or {}).items():
            if not (token.isascii() and token.isdigit()) or len(token) > 10 or int(token) > MAX_TOKEN_ID:
                raise ValueError(f"logit_bias keys are token ids (decimal digits, at most {MAX_TOKEN_ID}), got "
                                 f"{token[:20]!r}")
            if int(token) in seen:
                raise ValueError(f"logit_bias names token {int(token)} twice ({seen[int(token)]!r} and {token!r})")
            seen[int(token)] = token
            if not -100 <= value <= 100:
                raise ValueError(f"logit_bias values must be in [-100, 100], got {value} for token {token}")
        return bias


class KeySettings(StrictModel):
    """A key's limits and budget (aio.db.keys, aio.db.budgets); null: none."""
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    rpm_limit: int | None = Field(None, ge=1)
    tpm_limit: int | None = Field(None, ge=1)
    max_streams: int | None = Field(None, ge=1)
    budget_usd: float | None = Field(None, gt=0)
    budget_period: Literal["day", "week", "month", "total"] | None = None
    budget_soft: float | None = Field(None, gt=0, lt=1)

    def changes(self) -> dict[str, Any]:
        """The settings the client sent (a PATCH changes only those)."""
        return {name: getattr(self, name) for name in self.model_fields_set}


class UpdateKeyRequest(KeySettings):
    pass


class CreateKeyRequest(KeySettings):
    name: str
    role: Literal["user", "admin"] = "user"

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        problem = key_name_problem(name)
        if problem is not None:
            raise ValueError(problem)
        return name
