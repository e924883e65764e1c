"""Chat messages as the API receives them → the plain {role, content} text messages tiers take."""
from __future__ import annotations

from typing import Any, Sequence

from aio.api.errors import invalid_request

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


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
                                  f"messages.{index}.content.{j}", code="unsupported_content")
    return "\n".join(parts)


def normalize_messages(messages: Sequence[Any]) -> list[dict[str, str]]:
    """`messages` are pydantic ChatMessage objects (role, content); raises a 400 APIError on bad input."""
    if not messages:
        raise invalid_request("messages must contain at least one message", "messages", code="empty_messages")
    normalized: list[dict[str, str]] = []
    for i, message in enumerate(messages):
        role = ROLES.get(message.role)
        if role is None:
            raise invalid_request(f"messages[{i}].role {message.role!r} is not supported; use one of "
                                  f"{', '.join(ROLES)}", f"messages.{i}.role")
        normalized.append({"role": role, "content": _content_text(message.content, i, message.role)})
    return normalized
