"""FastAPI's request validation errors → one message a person can act on, with the OpenAI `param` path.

Pydantic reports a value that fits no member of a union once per member, with the member's type in the location
(`messages.0.content.str`, `messages.0.content.list[dict[str,any]]`): those are merged into one error on the field
itself ("should be a valid string or a valid list"). A body that is missing or not a JSON object gets its own
message instead of pydantic's "Input should be a valid dictionary".
"""
from __future__ import annotations

import math
import re
import reprlib
from typing import Any

from fastapi.exceptions import RequestValidationError

_TYPE_TAG = re.compile(r"^(str|int|float|bool|none|bytes|any)$|\[|^[A-Z]")  # union-member tags pydantic adds
_SHOULD_BE = "Input should be "
_PLAIN = {"a valid dictionary or object to extract fields from": "a JSON object", "a valid dictionary": "a JSON object",
          "a valid list": "a list", "a valid string": "a string"}


def _param(loc: tuple[Any, ...]) -> str | None:
    parts = [str(p) for p in loc if p != "body" and not (isinstance(p, str) and _TYPE_TAG.search(p))]
    return ".".join(parts) or None


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxstring, _REPR.maxlong, _REPR.maxother = 2, 3, 3, 40, 40, 40


def _short(value: Any, limit: int = 60) -> str:
    """A short repr whose cost does not grow with the value (a hostile body's list may have a million items)."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _reason(error: dict[str, Any]) -> str:
    ctx = error.get("ctx") or {}
    if error.get("type") == "too_long" and "max_length" in ctx:
        return f"at most {ctx['max_length']} items are allowed, got {ctx.get('actual_length', 'more')}"
    reason = str(error.get("msg", "invalid value"))
    reason = reason[len(_SHOULD_BE):] if reason.startswith(_SHOULD_BE) else reason
    return _PLAIN.get(reason, reason)


def validation_message(exc: RequestValidationError, content_type: str | None) -> tuple[str, str | None, str | None]:
    """(message, param, code) for the first invalid parameter of the request."""
    errors = exc.errors()
    if not errors:
        return "invalid request", None, None
    first = errors[0]
    if first.get("type") == "json_invalid":
        return "the request body is not valid JSON", None, "invalid_json"
    param = _param(tuple(first.get("loc", ())))
    if param is None:  # the body as a whole
        media = (content_type or "").split(";")[0].strip().lower()
        if first.get("type") == "missing":
            return "the request body is empty: send a JSON object with 'model' and 'messages'", None, "invalid_json"
        if media != "application/json":
            return (f"the request body must be JSON (Content-Type: application/json), not {media or 'untyped'}",
                    None, "invalid_json")
        return f"the request body must be a JSON object, not {_short(first.get('input'))}", None, "invalid_json"
    if first.get("type") == "missing":
        return f"missing required parameter: {param!r}", param, "missing_required_parameter"
    if str(first.get("type", "")).endswith("_type"):
        # a union member with the value's type that fails inside it (`stop: ["a", 1]` is a list: its item 1 is wrong)
        inside = next((e for e in errors if (_param(tuple(e.get("loc", ()))) or "").startswith(param + ".")), None)
        if inside is not None:
            first, param = inside, _param(tuple(inside.get("loc", ())))
    value = first.get("input")
    if isinstance(value, float) and not math.isfinite(value):
        return f"invalid value for {param!r}: must be a finite number, got {value}", param, "invalid_value"
    same_field = [e for e in errors if _param(tuple(e.get("loc", ()))) == param]
    # A union member whose type the value has (a list for `str | list`) says what is wrong with it; the others
    # only say that the value is not of their type.
    specific = [e for e in same_field if not str(e.get("type", "")).endswith("_type")]
    same_field = specific if specific and len(specific) < len(same_field) else same_field
    reasons: list[str] = []
    for error in same_field:
        reason = _reason(error)
        if reason not in reasons:
            reasons.append(reason)
    return (f"invalid value for {param!r}: should be {' or '.join(reasons)}, got {_short(value)}"
            if all(str(e.get("msg", "")).startswith(_SHOULD_BE) for e in same_field)
            else f"invalid value for {param!r}: {'; '.join(reasons)}"), param, "invalid_value"
