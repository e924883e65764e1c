"""JSON request bodies: parsed, checked for unencodable text and validated off the event loop.

Text the API can take: a JSON body whose strings hold a lone UTF-16 surrogate is refused whole (400). JSON may
escape a lone surrogate (`"\\ud800"`), and Python decodes it into a string no UTF-8 codec, tokenizer, sentence
encoder or database can take. Refused where the body is parsed, it never reaches a batch that other requests
share (the classifier's micro-batches, an engine step, the request log). Every router of the app uses
`TextCheckedRoute`.

Off the loop: a body of `max_body_bytes` (4 MB) takes the JSON parser, the surrogate walk and pydantic up to seconds
of CPU (a million tiny values); done on the event loop, every other request and `/health` would wait that long. A
body larger than `INLINE_BYTES` is parsed and validated in a worker thread instead, against the route's own body
field (FastAPI then takes the validated model as it is). A body that fails validation keeps FastAPI's order: the
route's dependencies (the API key) run first, then its errors are reported. The thread does not free the loop from
a long C call (json.loads holds the GIL throughout), so a body of more than MAX_JSON_TOKENS is refused before it is
parsed, by a count the loop can interleave with (benchmarks/body_stall.py measures what is left).
"""
from __future__ import annotations

import asyncio
import json
import re
from json.decoder import scanstring
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Coroutine

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.types import Receive, Scope

_SURROGATE = re.compile("[\ud800-\udfff]")
# What a lone surrogate needs in a UTF-8 body: a \uD800-\uDFFF escape, or the raw bytes of one (json.loads decodes
# with surrogatepass). Hangul (ED 80-9F) does not match.
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
INLINE_BYTES = 64 * 1024  # smaller bodies take well under a millisecond: parsed on the loop, no thread hop
# json.loads is one C call that holds the GIL, so even in the worker it stalls the loop for as long as it runs:
# about 1 ms per 1,000 values on a slow core (4 MB of empty arrays: 1.4 million values, over a second). A body
# with more JSON tokens than this is refused before it is parsed; the largest valid request is far below it.
MAX_JSON_TOKENS = 100_000
_NEXT_TOKEN = re.compile(r'[\[{,"]')
_BODY_ERRORS = "aio.body_errors"  # scope key: the errors of a body validated in the worker thread
_workers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="aio-body")  # bounds the parses' memory too


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


class TooManyTokens(HTTPException):
    def __init__(self) -> None:
        super().__init__(413, f"the request body holds more than {MAX_JSON_TOKENS} JSON tokens (strings, arrays, "
                              "objects and their items); send fewer")
        self.param = None
        self.code = "request_too_large"


def json_tokens(text: str, limit: int) -> int:
    """How many strings, arrays, objects and separated items (`,`) the JSON text holds, up to just past `limit`.
    Linear, in short C calls (a search, json's own string scanner) with Python between them: the event loop gets
    the GIL back between any two. Stops at malformed JSON, which json.loads then reports."""
    count, position = 0, 0
    search = _NEXT_TOKEN.search
    while count <= limit:
        token = search(text, position)
        if token is None:
            break
        count += 1
        position = token.end()
        if token.group() == '"':
            try:
                position = scanstring(text, position, True)[1]
            except json.JSONDecodeError:
                break
    return count


def _may_hold_surrogates(raw: bytes) -> bool:
    """False when no string of the parsed body can hold a lone surrogate: the walk is skipped."""
    not_utf8 = b"\x00" in raw[:4] or raw.startswith((b"\xff\xfe", b"\xfe\xff"))  # json.loads takes UTF-16/32 too
    return not_utf8 or _MAYBE_SURROGATE.search(raw) is not None


def parse_json(raw: bytes) -> Any:
    """The body as JSON; json.JSONDecodeError as FastAPI expects it, InvalidTextError for a lone surrogate,
    TooManyTokens past MAX_JSON_TOKENS."""
    text = raw.decode(json.detect_encoding(raw), "surrogatepass")  # as json.loads(bytes) decodes
    if json_tokens(text, MAX_JSON_TOKENS) > MAX_JSON_TOKENS:
        raise TooManyTokens()
    body = json.loads(text)
    found = invalid_text(body) if _may_hold_surrogates(raw) else None
    if found is not None:
        param, reason = found
        raise InvalidTextError(f"invalid text in {param!r}: {reason}; text must be valid Unicode (a lone "
                               "surrogate cannot be encoded as UTF-8)", param)
    return body


class TextCheckedRequest(Request):
    def __init__(self, scope: Scope, receive: Receive, body_field: Any = None) -> None:
        super().__init__(scope, receive)
        self._body_field = body_field

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            raw = await self.body()
            if len(raw) <= INLINE_BYTES:
                self._json = parse_json(raw)
            else:
                loop = asyncio.get_running_loop()
                self._json = await loop.run_in_executor(_workers, self._parse_and_validate, raw)
        return self._json

    def _parse_and_validate(self, raw: bytes) -> Any:
        """In the worker thread: the parsed body, validated into the route's model when it takes one whole."""
        body = parse_json(raw)
        if self._body_field is None:
            return body
        value, errors = self._body_field.validate(body, {}, loc=("body",))
        if errors:
            # FastAPI's own check refuses None at once (the field is a required model) after the dependencies ran;
            # TextCheckedRoute then reports these errors instead
            self.scope[_BODY_ERRORS] = errors
            return None
        return value


def _whole_body_model(route: APIRoute) -> Any:
    """The route's body field when the body is one pydantic model (not embedded, not a form), else None."""
    field = getattr(route, "body_field", None)
    if field is None or getattr(route, "_embed_body_fields", True) or not field.field_info.is_required():
        return None
    annotation = getattr(field.field_info, "annotation", None)
    return field if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


class TextCheckedRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        body_field = _whole_body_model(self)

        async def checked(request: Request) -> Response:
            try:
                return await handler(TextCheckedRequest(request.scope, request.receive, body_field))
            except RequestValidationError as exc:
                refused = request.scope.pop(_BODY_ERRORS, None)
                if refused is None:
                    raise
                others = [e for e in exc.errors() if tuple(e.get("loc", ()))[:1] != ("body",)]
                raise RequestValidationError(others + refused) from None

        return checked
