"""The chat endpoint in process, for tests that must not race the engine: the real route, ChatService and key
limiter over the given tiers, driven through ASGI directly so that the test decides when a client disconnects;
and a gate on an engine's steps, so that a generation cannot finish before the test lets it (whatever the
machine's speed)."""
from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import SimpleNamespace

from fastapi import FastAPI, Request

from aio.chat.service import ChatService
from aio.db.keys import ApiKeyInfo
from aio.http.deps import api_key
from aio.http.key_limits import KeyLimiter
from aio.metrics import Metrics
from aio.routing import Router
from aio.server.errors import install_error_handlers
from aio.server.routes import chat
from aio.settings import TierSettings
from tests.test_chat_service import FixedClassifier, ListLog
from tiers.serving.pool import TierPool

PATH = "/v1/chat/completions"


class StepGate:
    """Lets an engine's background loop run only the steps the test allows (`allow`), or all (`open`)."""

    def __init__(self, engine) -> None:
        self._allowed = threading.Semaphore(0)
        self._opened = False
        self._done = threading.Condition()
        self.steps = 0  # steps run
        step = engine.step

        def gated_step():
            if not self._opened:
                self._allowed.acquire()
            try:
                return step()
            finally:
                with self._done:
                    self.steps += 1
                    self._done.notify_all()

        engine.step = gated_step

    def allow(self, num_steps: int) -> None:
        for _ in range(num_steps):
            self._allowed.release()

    def open(self) -> None:
        self._opened = True
        self._allowed.release()  # the step waiting for its turn, if any

    async def ran(self, num_steps: int, timeout: float = 60.0) -> None:
        """Waits until `num_steps` steps have run (never more than were allowed)."""
        def wait() -> bool:
            with self._done:
                return self._done.wait_for(lambda: self.steps >= num_steps, timeout)
        assert await asyncio.to_thread(wait), f"the engine ran {self.steps} of {num_steps} steps"


@dataclass
class Call:
    """One POST driven through the app's ASGI interface. After the body, `receive` returns `http.disconnect` once
    the test calls `disconnect()`, or at once from its `disconnect_at`-th call on; `send` may fail like a broken
    connection."""
    app: FastAPI
    body: dict
    headers: dict[str, str] = field(default_factory=dict)
    disconnect_at: int | None = None
    fail_send_at: int | None = None  # this message (counted from 1) and the later ones raise OSError
    sent: list[dict] = field(default_factory=list)
    num_receives: int = 0

    def __post_init__(self) -> None:
        self._gone = asyncio.Event()
        self._changed = asyncio.Condition()
        headers = [(b"content-type", b"application/json")] + [(k.lower().encode(), v.encode())
                                                              for k, v in self.headers.items()]
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": PATH, "raw_path": PATH.encode(), "query_string": b"",
                 "root_path": "", "headers": headers, "client": ("127.0.0.1", 1234), "server": ("127.0.0.1", 80),
                 "app": self.app}
        self.task = asyncio.create_task(self.app(scope, self._receive, self._send))

    async def _receive(self) -> dict:
        self.num_receives += 1
        if self.num_receives == 1:
            return {"type": "http.request", "body": json.dumps(self.body).encode(), "more_body": False}
        if self.disconnect_at is None or self.num_receives < self.disconnect_at:
            await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict) -> None:
        if self.fail_send_at is not None and len(self.sent) + 1 >= self.fail_send_at:
            raise OSError("the connection broke")
        async with self._changed:
            self.sent.append(message)
            self._changed.notify_all()

    def disconnect(self) -> None:
        self._gone.set()

    async def wait_for_events(self, count: int) -> None:
        """Until `count` server-sent events arrived."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.events) >= count), 60)

    async def finished(self) -> None:
        """The app returned (a generous limit guards against a hang: a request that never ends fails here)."""
        await asyncio.wait_for(asyncio.shield(self.task), 60)

    @property
    def status(self) -> int | None:
        return next((m["status"] for m in self.sent if m["type"] == "http.response.start"), None)

    @property
    def response_headers(self) -> dict[str, str]:
        start = next((m for m in self.sent if m["type"] == "http.response.start"), {"headers": []})
        return {name.decode(): value.decode() for name, value in start["headers"]}

    @property
    def content(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")

    def json(self) -> dict:
        return json.loads(self.content)

    @property
    def events(self) -> list[str]:
        return [line for line in self.content.decode().split("\n\n") if line.startswith("data: ")]


async def until(condition, timeout: float = 60.0) -> None:
    """Waits for a condition that the test's own requests make true (the engine's steps are gated meanwhile)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


async def engine_idle(engine, timeout: float = 60.0) -> None:
    """Waits (the gate open) until the engine holds no request and no KV block: its aborts and finishes done."""
    await until(lambda: not engine.has_unfinished_requests() and not engine.stats().num_used_blocks, timeout)


def limited_key(key_id: int = 7, max_streams: int = 1) -> ApiKeyInfo:
    return ApiKeyInfo(id=key_id, name=f"key-{key_id}", prefix="aio-test", role="user",
                      created_at=datetime.now(timezone.utc), max_streams=max_streams)


def chat_app(tiers: list, keys: dict[str, ApiKeyInfo] | None = None, max_queue: int = 256,
             **service_options) -> tuple[FastAPI, ChatService, ListLog]:
    """The chat route over `tiers` (cheapest first). keys: bearer token -> key ("": a request without one)."""
    settings = {t.name: TierSettings(path="/x", input_price_per_million=1.0, output_price_per_million=2.0,
                                     max_queue=max_queue) for t in tiers}
    log = ListLog()
    service = ChatService(TierPool(tiers), Router(FixedClassifier([1.0 / len(tiers)] * len(tiers)),
                                                  [t.name for t in tiers]), settings, log, Metrics(),
                          **service_options)
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(chat.router)
    app.state.aio = SimpleNamespace(service=service, limiter=KeyLimiter())

    def key_of(request: Request) -> ApiKeyInfo | None:
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        return (keys or {}).get(token)

    app.dependency_overrides[api_key] = key_of
    return app, service, log
