"""`Cache-Control: no-store` on every JSON response (keys, usage and prompts must not sit in shared caches)."""
from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class NoStoreMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                names = {name.lower(): value for name, value in headers}
                if names.get(b"content-type", b"").startswith(b"application/json") and b"cache-control" not in names:
                    headers.append((b"cache-control", b"no-store"))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_header)
