"""How tools and tool messages reach a chat template.

A template that knows tools (it mentions `tools`: Llama 3.1+, Qwen2.5, Mistral, Hermes) gets them as `tools=` and
the history as it is, with each call's arguments as an object, as Hugging Face templates expect. A template
without tool support (SmolLM2's, plain ChatML, Llama 2) gets AIO's fallback prompt: the tools and the Hermes call
format in a system message, earlier calls as `<tool_call>` blocks in the assistant's text and tool results as user
turns in `<tool_response>` blocks — the format the hermes parser reads back.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from tiers.serving.tools.options import ChatOptions

FALLBACK_TOOL_PROMPT = """You can call functions to help answer. The functions, as JSON schemas:
<tools>
{tools}
</tools>
To call a function, reply with one block per call, each holding a JSON object with the function's name and its \
arguments, and nothing else:
<tool_call>
{{"name": "<function name>", "arguments": {{<arguments as JSON>}}}}
</tool_call>
A function's result comes back in a <tool_response> block. If no function is needed, answer normally."""


@dataclass(frozen=True)
class TemplateTools:
    """What a chat template can do with tools: natively (`tools=`) or through AIO's fallback prompt; and the
    format its model writes calls in (the parser that reads them)."""
    native: bool
    parser: str  # "hermes" | "llama3_json"

    @classmethod
    def of(cls, template: str | None) -> TemplateTools:
        template = template or ""
        native = "tools" in template
        llama3 = native and ("<|python_tag|>" in template or "ipython" in template) and "<tool_call>" not in template
        return cls(native=native, parser="llama3_json" if llama3 else "hermes")


def render_messages(messages: Sequence[dict[str, Any]], options: ChatOptions | None,
                    template: TemplateTools) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages (and `tools=` argument) to give the chat template."""
    has_tool_history = any(m.get("tool_calls") or m["role"] == "tool" for m in messages)
    tools = list(options.tools) if options is not None and options.tools else None
    if template.native:
        return [_native_message(m) for m in messages], tools
    rendered = [_fallback_message(m) for m in messages] if has_tool_history else [dict(m) for m in messages]
    if tools:
        rendered = _with_system(rendered, FALLBACK_TOOL_PROMPT.format(
            tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools)))
    return rendered, None


def _native_message(message: dict[str, Any]) -> dict[str, Any]:
    if not message.get("tool_calls"):
        return dict(message)
    calls = [{"id": c["id"], "type": "function",
              "function": {"name": c["function"]["name"], "arguments": _arguments_object(c["function"]["arguments"])}}
             for c in message["tool_calls"]]
    return {**message, "content": message.get("content") or "", "tool_calls": calls}


def _fallback_message(message: dict[str, Any]) -> dict[str, Any]:
    if message["role"] == "tool":
        return {"role": "user", "content": f"<tool_response>\n{message['content']}\n</tool_response>"}
    if message.get("tool_calls"):
        blocks = [json.dumps({"name": c["function"]["name"],
                              "arguments": _arguments_object(c["function"]["arguments"])}, ensure_ascii=False)
                  for c in message["tool_calls"]]
        text = "\n".join(f"<tool_call>\n{b}\n</tool_call>" for b in blocks)
        content = message.get("content") or ""
        return {"role": "assistant", "content": f"{content}\n{text}" if content else text}
    return {"role": message["role"], "content": message["content"]}


def _with_system(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _arguments_object(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
