"""How long a hostile request body holds the event loop: the chat route's real body handling (TextCheckedRoute:
token count, JSON parse, lone-surrogate check, the strict request model, the error handler) in a uvicorn server
on loopback (a process of its own), with `/health` polled every 5 ms while bodies of `max_body_bytes` (4 MB) are
posted one after another.

    python -m benchmarks.body_stall [--repeat 3] [--on-loop]

For each body shape: the time the server took to answer it, and the slowest `/health` poll meanwhile (a poll
waits for whatever holds the loop). `--on-loop` parses and validates every body on the loop and counts no tokens
(the behaviour before bodies went to the worker thread), for comparison. The worker thread still holds Python's
GIL through each C call (json.loads, pydantic), so the remaining stall is the longest such call, not zero.
"""
from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time

import httpx
import uvicorn
from fastapi import APIRouter, FastAPI

from aio.api.schemas import ChatCompletionRequest
from aio.chat.request_options import chat_options
from aio.http import json_text
from aio.server.body_limit import BodyLimitMiddleware
from aio.server.errors import install_error_handlers

LIMIT = 4 << 20
BASE = '{"model": "auto", "messages": [{"role": "user", "content": "hi"}], '


def _fill(prefix: str, item: str, suffix: str, sep: str = ",") -> bytes:
    count = (LIMIT - len(prefix) - len(suffix)) // (len(item) + len(sep))
    return (prefix + sep.join([item] * count) + suffix).encode()


def _at_token_bound(prefix: str, item: str, suffix: str) -> bytes:
    """As many items as stay within MAX_JSON_TOKENS: the most expensive body that is still parsed."""
    low, high = 1, json_text.MAX_JSON_TOKENS
    while low < high:
        middle = (low + high + 1) // 2
        text = prefix + ",".join([item] * middle) + suffix
        low, high = (middle, high) if json_text.json_tokens(text, json_text.MAX_JSON_TOKENS) \
            <= json_text.MAX_JSON_TOKENS else (low, middle - 1)
    return (prefix + ",".join([item] * low) + suffix).encode()


def _distinct_tools() -> bytes:
    parts, size = [], len(BASE) + 20
    while size < LIMIT - 100:
        parts.append('{"type": "function", "function": {"name": "f%d"}}' % len(parts))
        size += len(parts[-1]) + 2
    return (BASE + '"tools": [' + ", ".join(parts[:-1]) + "]}").encode()


def shapes() -> dict[str, bytes]:
    return {
        "distinct tools (76k)": _distinct_tools(),
        "messages, empty content": _fill('{"model": "auto", "messages": [', '{"role":"user","content":""}', "]}"),
        "content parts": _fill('{"model": "auto", "messages": [{"role": "user", "content": [',
                               '{"type":"text","text":""}', "]}]}"),
        "unknown field, empty lists": _fill(BASE + '"x": [', "[]", "]}"),
        "unknown field, zeros": _fill(BASE + '"x": [', "0", "]}"),
        "tool parameters, nested": _fill(BASE + '"tools": [{"type": "function", "function": {"name": "f", '
                                         '"parameters": {"a": [', "[0,0,0,0]", "]}}}]}"),
        "surrogate at the end": _fill(BASE + '"x": [', '""', '], "user": "\\ud800"}'),
        "one long prompt": (BASE[:-2].replace('"hi"', '"' + "a" * (LIMIT - 100) + '"') + "}").encode(),
        "at the token bound: lists": _at_token_bound(BASE + '"x": [', "[]", "]}"),
        "at the token bound: dicts": _at_token_bound(BASE + '"x": [', "{}", "]}"),
        "at the token bound: tools": _at_token_bound(BASE + '"tools": [', '{"type":"function","function":{"name":'
                                                     '"f"}}', "]}"),
        "at the token bound: parts": _at_token_bound('{"model": "auto", "messages": [{"role": "user", "content": [',
                                                     '{"type":"text","text":""}', "]}]}"),
    }


def build_app() -> FastAPI:
    router = APIRouter(route_class=json_text.TextCheckedRoute)

    @router.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest) -> dict:
        chat_options(body)
        return {"ok": True}

    @router.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    app = FastAPI()
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=LIMIT)
    install_error_handlers(app)
    app.include_router(router)
    return app


async def measure(url: str, body: bytes) -> tuple[float, float, int]:
    """(seconds to answer the body, slowest /health poll meanwhile, status)."""
    async with httpx.AsyncClient(timeout=120) as client:
        await client.get(url + "/health")
        slowest = 0.0
        start = time.perf_counter()
        posted = asyncio.create_task(client.post(url + "/v1/chat/completions", content=body,
                                                 headers={"content-type": "application/json"}))
        while not posted.done():
            t = time.perf_counter()
            await client.get(url + "/health")
            slowest = max(slowest, time.perf_counter() - t)
            await asyncio.sleep(0.005)
        response = await posted
        return time.perf_counter() - start, slowest, response.status_code


def serve(port: int, on_loop: bool) -> None:
    if on_loop:
        json_text.INLINE_BYTES = LIMIT + 1
        json_text.MAX_JSON_TOKENS = LIMIT
    uvicorn.run(build_app(), host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--on-loop", action="store_true", help="parse and validate on the event loop (the old way)")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.on_loop)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "benchmarks.body_stall", "--serve", str(port)]
                              + (["--on-loop"] if args.on_loop else []))
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                httpx.get(url + "/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        print(f"{'body (4 MB unless at the bound)':<32} {'bytes':>9} {'status':>6} {'answered in':>12} "
              f"{'slowest /health':>16}")
        for name, body in shapes().items():
            assert len(body) <= LIMIT, (name, len(body))
            runs = [asyncio.run(measure(url, body)) for _ in range(args.repeat)]
            answer = min(r[0] for r in runs)
            stall = min(r[1] for r in runs)
            print(f"{name:<32} {len(body):>9} {runs[0][2]:>6} {answer * 1e3:>9.0f} ms {stall * 1e3:>13.0f} ms")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
