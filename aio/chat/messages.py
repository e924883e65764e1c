"""Chat messages as the API receives them → the messages tiers take: {role, content} text, plus `tool_calls` on
assistant turns and `tool_call_id` on tool turns (OpenAI's shapes)."""
from __future__ import annotations

from typing import Any, Sequence

from aio.api.errors import invalid_request

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def _content_text(content: Any, index: int, role: str) -> str:
    if content is None:
        if role == "assistant":
            return ""
        raise invalid_request(f"messages[{index}].content is required for role {role!r}", f"messages.{index}.content")
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif kind in ("text", None):
            raise invalid_request(f"messages[{index}].content[{j}] must be {{'type': 'text', 'text': str}}",
                                  f"messages.{index}.content.{j}")
        else:
            raise invalid_request(f"messages[{index}].content[{j}] has type {kind!r}: only text content is supported",
                                  f"messages.{index}.content.{j}", code="unsupported_parameter")
    return "\n".join(parts)


def _normalize(message: Any, i: int) -> dict[str, Any]:
    role = ROLES.get(message.role)
    if role is None:
        raise invalid_request(f"messages[{i}].role {message.role!r} is not supported; use one of "
                              f"{', '.join(ROLES)}", f"messages.{i}.role")
    has_calls = role == "assistant" and bool(message.tool_calls)
    if message.tool_calls and role != "assistant":
        raise invalid_request(f"messages[{i}]: only assistant messages carry tool_calls", f"messages.{i}.tool_calls")
    normalized: dict[str, Any] = {"role": role, "content": _content_text(message.content, i, message.role)}
    if has_calls:
        normalized["tool_calls"] = [c.model_dump() for c in message.tool_calls]
    if role == "tool":
        if not message.tool_call_id:
            raise invalid_request(f"messages[{i}]: a tool message needs the tool_call_id of the call it answers",
                                  f"messages.{i}.tool_call_id")
        normalized["tool_call_id"] = message.tool_call_id
    return normalized


def normalize_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """`messages` are pydantic ChatMessage objects; raises a 400 APIError on bad input."""
    if not messages:
        raise invalid_request("messages must contain at least one message", "messages", code="empty_messages")
    return [_normalize(message, i) for i, message in enumerate(messages)]
