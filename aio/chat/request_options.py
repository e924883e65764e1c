"""What a request asks for besides its messages: tools and the output format (→ the tiers' ChatOptions), and the
parameters AIO refuses because it cannot honour them (a 400 naming the field, never silently ignored); the model it
names, and a prompt no tier could hold."""
from __future__ import annotations

from typing import Any

from aio.api.errors import APIError, invalid_request
from aio.api.schemas import ChatCompletionRequest
from tiers.serving.pool import TierPool
from tiers.serving.tools.options import ChatOptions

MAX_CHARS_PER_TOKEN = 32  # no tokenizer's token is longer: more characters than this per context token cannot fit

# Fields OpenAI or vLLM define that would change the answer and that AIO does not implement: field -> why.
UNSUPPORTED_FIELDS = {
    "audio": "audio output is not supported",
    "web_search_options": "web search is not supported",
    "functions": "the legacy `functions` parameter is not supported; send `tools` instead",
    "function_call": "the legacy `function_call` parameter is not supported; send `tool_choice` instead",
    "reasoning_effort": "the tiers are not reasoning models",
    "verbosity": "the tiers do not support `verbosity`",
    "prediction": "predicted outputs are not supported",
    "best_of": "best_of is not supported; use n",
    "use_beam_search": "beam search is not supported",
    "length_penalty": "beam search is not supported",
    "echo": "echo is not supported",
    "prompt_logprobs": "prompt logprobs are not supported",
    "guided_json": "send response_format {'type': 'json_schema', ...} instead",
    "guided_regex": "regular-expression guided decoding is not supported",
    "guided_choice": "choice-guided decoding is not supported",
    "guided_grammar": "grammar-guided decoding is not supported",
    "structured_outputs": "send response_format instead",
    "bad_words": "bad_words is not supported",
    "allowed_token_ids": "allowed_token_ids is not supported",
    "truncate_prompt_tokens": "prompt truncation is not supported",
    "include_stop_str_in_output": "include_stop_str_in_output is not supported",
    "min_p": "min_p is not supported",
}


def unsupported_parameter(field: str, why: str) -> APIError:
    return invalid_request(f"{field}: {why}", field, code="unsupported_parameter")


def reject_unsupported(body: ChatCompletionRequest) -> None:
    """A 400 `unsupported_parameter` for a field that would change the answer and is not implemented."""
    extra: dict[str, Any] = body.model_extra or {}
    for field, why in UNSUPPORTED_FIELDS.items():
        if extra.get(field) not in (None, False):
            raise unsupported_parameter(field, why)
    modalities = extra.get("modalities")
    if modalities not in (None, ["text"]):
        raise unsupported_parameter("modalities", "only text output is supported: ['text']")
    if extra.get("skip_special_tokens") is False:
        raise unsupported_parameter("skip_special_tokens", "special tokens are always skipped in the output")


def chat_options(body: ChatCompletionRequest) -> ChatOptions | None:
    """The request's tools and output format, checked against each other; None for plain text chat."""
    tools = body.tools or []
    if not tools:
        if body.tool_choice not in (None, "none"):
            raise invalid_request("tool_choice is only allowed when tools are given", "tool_choice")
        if body.parallel_tool_calls is not None:
            raise invalid_request("parallel_tool_calls is only allowed when tools are given", "parallel_tool_calls")
    names = [t.function.name for t in tools]
    seen: set[str] = set()
    for name in names:  # linear: a set, not names.count (the schema bounds tools at 128 too)
        if name in seen:
            raise invalid_request(f"tools: the function name {name!r} is given more than once", "tools")
        seen.add(name)
    choice: str | dict[str, Any] = "auto" if tools else "none"
    if body.tool_choice is not None:
        choice = body.tool_choice if isinstance(body.tool_choice, str) else body.tool_choice.model_dump()
    if isinstance(choice, dict) and choice["function"]["name"] not in seen:
        raise invalid_request(f"tool_choice names the function {choice['function']['name']!r}, which is not "
                              f"among the tools ({', '.join(names)})", "tool_choice.function.name")
    response_format = _response_format(body)
    if not tools and response_format is None:
        return None
    return ChatOptions(tools=tuple(t.model_dump(exclude_none=True) for t in tools), tool_choice=choice,
                       parallel_tool_calls=body.parallel_tool_calls is not False, response_format=response_format)


def _response_format(body: ChatCompletionRequest) -> dict[str, Any] | None:
    fmt = body.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_schema":
        if fmt.json_schema is None:
            raise invalid_request("response_format of type 'json_schema' needs a json_schema object "
                                  "({'name': ..., 'schema': {...}})", "response_format.json_schema")
        if fmt.json_schema.schema_ is not None and not isinstance(fmt.json_schema.schema_, dict):
            raise invalid_request("response_format.json_schema.schema must be a JSON schema object",
                                  "response_format.json_schema.schema")
    return fmt.model_dump(by_alias=True, exclude_none=True)


def wants_structure(options: ChatOptions | None) -> bool:
    """Tools or a JSON format: the requests `tools_min_tier` applies to."""
    return options is not None and not options.is_plain


def refuse_oversized(messages: list[dict[str, str]], pool: TierPool) -> None:
    """A prompt no tier could hold is refused before anything tokenizes its megabytes."""
    num_chars = sum(len(str(m.get("content") or "")) for m in messages)
    largest = max(t.max_model_len for t in pool)
    if num_chars > largest * MAX_CHARS_PER_TOKEN:
        raise APIError(400, f"the messages have {num_chars} characters, more than any tier's context "
                            f"({largest} tokens) can hold; shorten the messages", param="messages",
                       code="context_length_exceeded")


def named_tier(model: str, pool: TierPool) -> str | None:
    """The tier a named model means (None for `auto`); 404 for a model no tier serves."""
    if model == "auto":
        return None
    tier = pool.find(model)
    if tier is None:
        names = ["auto"] + [t.name for t in pool] + [t.model for t in pool]
        raise APIError(404, f"the model {model!r} does not exist; models: {', '.join(names)}",
                       param="model", code="model_not_found")
    return tier.name
