"""A large body is parsed and validated off the event loop: `/health` answers while a maximal hostile body (the
largest `max_body_bytes` takes: tens of thousands of distinct tools) is held inside its validation, and the thread
that validates it is not the loop's. By protocol: the validation waits for an event the test sets only after
`/health` answered; on the loop it would hold the loop and `/health` would wait behind it."""
from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from aio.api.schemas import ChatCompletionRequest
from aio.http import json_text
from aio.server.body_limit import BodyLimitMiddleware
from aio.server.errors import install_error_handlers
from aio.settings import Settings

URL = "/v1/chat/completions"


def app(handled: list[object] | None = None) -> FastAPI:
    router = APIRouter(route_class=json_text.TextCheckedRoute)

    @router.post(URL)
    async def chat(body: ChatCompletionRequest) -> dict:
        if handled is not None:
            handled.append(body)
        return {"tools": len(body.tools or [])}

    @router.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    application = FastAPI()
    application.add_middleware(BodyLimitMiddleware, max_body_bytes=Settings.model_fields["max_body_bytes"].default)
    install_error_handlers(application)
    application.include_router(router)
    return application


def hostile_body(limit: int, max_tools: int | None = None) -> bytes:
    """Distinct tools up to just under `limit` bytes (the probe sent 40,000 in 2.2 MB), or `max_tools` of them."""
    tool = '{"type": "function", "function": {"name": "f%d"}}'
    parts, size = [], 60
    while size + len(tool) + 10 < limit and len(parts) != max_tools:
        parts.append(tool % len(parts))
        size += len(parts[-1]) + 2
    return ('{"model": "auto", "messages": [{"role": "user", "content": "hi"}], "tools": [' + ", ".join(parts)
            + "]}").encode()


LIMIT = Settings.model_fields["max_body_bytes"].default


@pytest.mark.parametrize("body, status, code, words", [
    (hostile_body(LIMIT), 413, "request_too_large", f"more than {json_text.MAX_JSON_TOKENS} JSON tokens"),
    (hostile_body(LIMIT, max_tools=10_000), 400, "invalid_value", "at most 128 items are allowed, got 10000"),
], ids=["4 MB of tools", "10,000 tools"])
def test_health_answers_while_a_maximal_hostile_body_is_validated(monkeypatch, body, status, code, words):
    assert len(body) <= LIMIT
    started, release = threading.Event(), threading.Event()
    threads: list[int] = []
    parse = json_text.parse_json

    def held_parse(raw: bytes):
        threads.append(threading.get_ident())
        started.set()
        assert release.wait(120), "the test never released the validation"
        return parse(raw)

    monkeypatch.setattr(json_text, "parse_json", held_parse)

    async def scenario() -> tuple[int, httpx.Response, httpx.Response, bool]:
        loop_thread = threading.get_ident()
        transport = httpx.ASGITransport(app=app())
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=120) as client:
            posted = asyncio.create_task(client.post(URL, content=body, headers={"content-type": "application/json"}))
            assert await asyncio.to_thread(started.wait, 120), "the body never reached its validation"
            health = await client.get("/health")  # answered while the body is held in its validation
            still_validating = not posted.done()
            release.set()
            return loop_thread, health, await posted, still_validating

    loop_thread, health, answer, still_validating = asyncio.run(scenario())
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert still_validating
    assert threads and threads[0] != loop_thread
    error = answer.json()["error"]
    assert answer.status_code == status and error["code"] == code and words in error["message"], error


def test_a_small_body_is_parsed_on_the_loop_and_a_large_one_is_validated_once(monkeypatch):
    """Below INLINE_BYTES no thread hop; above, the handler gets the very model the worker validated (FastAPI does
    not validate it again on the loop)."""
    from_worker: list[object] = []
    real = json_text.TextCheckedRequest._parse_and_validate

    def recorded(self, raw: bytes):
        from_worker.append(real(self, raw))
        return from_worker[-1]

    monkeypatch.setattr(json_text.TextCheckedRequest, "_parse_and_validate", recorded)
    handled: list[object] = []

    async def scenario() -> list[int]:
        transport = httpx.ASGITransport(app=app(handled))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            small = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
            large = {**small, "messages": [{"role": "user", "content": "x" * (json_text.INLINE_BYTES + 1)}]}
            return [(await client.post(URL, content=json.dumps(b).encode(),
                                       headers={"content-type": "application/json"})).status_code
                    for b in (small, large)]

    assert asyncio.run(scenario()) == [200, 200]
    assert len(from_worker) == 1 and isinstance(from_worker[0], ChatCompletionRequest)
    assert len(handled) == 2 and handled[1] is from_worker[0]
