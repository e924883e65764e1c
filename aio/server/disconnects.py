"""A client that goes away stops its request's work.

A non-streamed answer is computed before anything is sent, so nothing notices a client that disconnects meanwhile:
`unless_disconnected` runs the work while watching the request's ASGI channel for `http.disconnect`, and cancels
the work when it comes. A stream's own disconnects are Starlette's to see (StreamingResponse cancels its events);
`EventStream` makes sure a stream's request is ended also when Starlette never started its events.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

T = TypeVar("T")


async def unless_disconnected(request: Request, work: Awaitable[T]) -> tuple[bool, T | None]:
    """(True, the work's result), or (False, None) when the client disconnected first (the work is cancelled and
    awaited). The work's exceptions propagate."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.create_task(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return False, None
    return True, task.result()


async def _disconnected(request: Request) -> None:
    """Returns once the client is gone. The body was read already: the channel carries nothing else."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class EventStream(StreamingResponse):
    """Server-sent events followed by `on_close()` however the response ends: finished, failed, or cut off before
    its first byte (then Starlette never started the events' generator, whose own clean-up never ran)."""

    def __init__(self, events, on_close: Callable[[], Awaitable[None]], headers: dict[str, str]) -> None:
        super().__init__(events, media_type="text/event-stream", headers=headers)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                await self.body_iterator.aclose()
            finally:
                await self.on_close()
