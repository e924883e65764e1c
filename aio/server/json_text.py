"""Text the API can take: a JSON body whose strings hold a lone UTF-16 surrogate is refused whole (400).

JSON may escape a lone surrogate (`"\\ud800"`), and Python decodes it into a string no UTF-8 codec, tokenizer,
sentence encoder or database can take. Refused where the body is parsed, it never reaches a batch that other
requests share (the classifier's micro-batches, an engine step, the request log). Every router of the app uses
`TextCheckedRoute`.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Coroutine

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

_SURROGATE = re.compile("[\ud800-\udfff]")


class InvalidTextError(HTTPException):
    """A 400 that FastAPI's body parsing passes through as it is (an HTTPException), with OpenAI's param and code."""

    def __init__(self, message: str, param: str | None) -> None:
        super().__init__(400, message)
        self.param = param
        self.code = "invalid_text"


def invalid_text(value: Any) -> tuple[str, str] | None:
    """(param path, reason) of the first string in `value` (keys too) that holds a lone surrogate, or None.
    Iterative: a deeply nested body cannot exhaust the stack."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            found = _SURROGATE.search(node)
            if found:
                return path, f"a lone UTF-16 surrogate (\\u{ord(found.group()):04x}) at character {found.start()}"
        elif isinstance(node, dict):
            for key, item in reversed(list(node.items())):
                child = f"{path}.{key}" if path else str(key)
                if _SURROGATE.search(key):
                    return path or "body", "a key holds a lone UTF-16 surrogate"
                stack.append((item, child))
        elif isinstance(node, list):
            stack.extend((item, f"{path}.{i}" if path else str(i)) for i, item in reversed(list(enumerate(node))))
    return None


class TextCheckedRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = json.loads(await self.body())
            found = invalid_text(body)
            if found is not None:
                param, reason = found
                raise InvalidTextError(f"invalid text in {param!r}: {reason}; text must be valid Unicode (a lone "
                                       "surrogate cannot be encoded as UTF-8)", param)
            self._json = body
        return self._json


class TextCheckedRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            return await handler(TextCheckedRequest(request.scope, request.receive))

        return checked
