"""The exact answer cache's hit latency, server-side: the real chat route (API key check on SQLite, key limiter,
answer cache, request log) in process, driven through ASGI; one miss fills the cache, then `--hits` identical
requests are answered from it.

Reports, per store (memory, sql): p50 / p95 of the server-side latency the request log records for the hits
(arrival in the route to the answer built) and of the in-process round trip (ASGI, JSON encoding included), and
that every hit billed 0 tokens with an answer byte-identical to the first.

    python -m benchmarks.answer_cache --hits 500
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
from fastapi import FastAPI

from aio.answer_cache import AnswerCache, MemoryStore, SqlStore
from aio.chat.service import ChatService
from aio.db.database import make_engine
from aio.db.keys import KeyStore
from aio.db.log_writer import LogWriter
from aio.db.migrate import ensure_schema
from aio.db.models import Request
from aio.http.auth import Authenticator
from aio.http.key_limits import KeyLimiter
from aio.metrics import Metrics
from aio.routing import Router
from aio.server.errors import install_error_handlers
from aio.server.routes import chat
from aio.settings import TierSettings
from tiers.serving.pool import ChatChunk, TierLoad, TierPool

BODY = {"model": "small", "messages": [{"role": "user", "content": "What is 17 times 23?"}], "temperature": 0,
        "max_tokens": 16}


class ScriptedTier:
    """A tier that answers at a fixed pace (the hits never reach it)."""
    name, model, max_model_len, is_demo = "small", "scripted", 4096, False

    def count_prompt_tokens(self, messages, options=None) -> int:
        return sum(len(m["content"].split()) for m in messages)

    def check_options(self, options) -> None:
        pass

    async def stream_chat(self, messages, params, request_id, priority=0, options=None, tenant=None):
        for word in "17 times 23 is 391.".split():
            await asyncio.sleep(0.01)
            yield ChatChunk(delta_text=word + " ", num_new_tokens=1)
        yield ChatChunk(finish_reason="stop", num_prompt_tokens=self.count_prompt_tokens(messages))

    def token_text(self, token_id: int) -> str:
        return str(token_id)

    def load(self) -> TierLoad:
        return TierLoad(0, 0, 0.0)

    def is_available(self) -> bool:
        return True

    async def aclose(self) -> None:
        pass


class OneTier:
    """The router's classifier for a single tier."""
    version = "one-tier"

    def predict_proba(self, texts):
        return np.ones((len(texts), 1))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def run(store_name: str, hits: int, folder: Path) -> dict:
    engine = make_engine(f"sqlite:///{folder / f'{store_name}.db'}")
    ensure_schema(engine)
    keys = KeyStore(engine)
    _, token = keys.create("bench")
    log = LogWriter(engine, flush_interval_s=0.05)
    log.start()
    tier = ScriptedTier()
    settings = {"small": TierSettings(path="/x", input_price_per_million=0.5, output_price_per_million=1.5)}
    service = ChatService(TierPool([tier]), Router(OneTier(), ["small"]), settings, log,
                          Metrics())
    store = MemoryStore(10_000) if store_name == "memory" else SqlStore(engine)
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(chat.router)
    app.state.aio = SimpleNamespace(service=service, limiter=KeyLimiter(), answer_cache=AnswerCache(store),
                                    auth=Authenticator(keys, "x" * 40, "127.0.0.1"))
    headers = {"authorization": f"Bearer {token}"}
    round_trips = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://aio") as client:
        first = await client.post("/v1/chat/completions", json=BODY, headers=headers)
        assert first.headers["x-aio-cache"] == "miss", first.text
        first_choices = json.dumps(first.json()["choices"])
        identical = billed = 0
        for _ in range(hits):
            started = time.perf_counter()
            response = await client.post("/v1/chat/completions", json=BODY, headers=headers)
            round_trips.append((time.perf_counter() - started) * 1000)
            assert response.headers["x-aio-cache"] == "hit", response.text
            identical += json.dumps(response.json()["choices"]) == first_choices
            billed += response.json()["usage"]["total_tokens"]
    assert await asyncio.to_thread(log.flush, 30)
    log.close()
    with engine.connect() as connection:
        server = [row.latency_ms for row in connection.execute(
            Request.__table__.select().where(Request.cache_hit.is_(True)))]
    engine.dispose()
    return {"store": store_name, "hits": hits, "identical": identical, "tokens_billed": billed,
            "server_p50_ms": statistics.median(server), "server_p95_ms": percentile(server, 0.95),
            "round_trip_p50_ms": statistics.median(round_trips), "round_trip_p95_ms": percentile(round_trips, 0.95)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hits", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for store in ("memory", "sql"):
            result = asyncio.run(run(store, args.hits, Path(folder)))
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}))


if __name__ == "__main__":
    main()
