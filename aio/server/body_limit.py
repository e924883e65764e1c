"""Refuses request bodies over a size limit with 413, by Content-Length or while a chunked body streams in, and
bodies that do not arrive within a time limit with 408 (a slow client cannot hold a request open)."""
from __future__ import annotations

import asyncio
import json
import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aio.api.errors import APIError


class BodyTooLarge(HTTPException):
    """Raised while reading a body: FastAPI passes HTTPExceptions through to the app's error handlers."""

    code = "request_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large_message(limit))


def too_large_message(limit: int) -> str:
    return f"the request body is larger than {limit} bytes (max_body_bytes)"


class BodyTooSlow(HTTPException):
    def __init__(self, timeout_s: float) -> None:
        super().__init__(408, f"the request body did not arrive within {timeout_s:g} s")


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int, body_timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await self._refuse(send)
            return
        received = 0
        response_started = False
        body_done = False
        deadline = time.monotonic() + self.body_timeout_s

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done:
                return await receive()  # after the body: waits for the disconnect, with no deadline
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise BodyTooSlow(self.body_timeout_s) from None
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not response_started:
                await self._refuse(send)
        except BodyTooSlow:
            if not response_started:
                await self._refuse(send, APIError(408, f"the request body did not arrive within "
                                                       f"{self.body_timeout_s:g} s", code="request_timeout"))

    async def _refuse(self, send: Send, error: APIError | None = None) -> None:
        error = error or APIError(413, too_large_message(self.max_body_bytes), code=BodyTooLarge.code)
        body = json.dumps(error.body()).encode()
        await send({"type": "http.response.start", "status": error.status_code,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
