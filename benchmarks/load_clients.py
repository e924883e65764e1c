"""The load test's streaming clients, the audit of the SQL log and the report, shared by `benchmarks.loadtest` (one
server) and `benchmarks.replicated` (replicas behind a proxy)."""
from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import httpx
import numpy as np

PROMPTS = ["Hi!", "What is the capital of France?", "Explain why the sky is blue.",
           "Compare quicksort and mergesort step by step and explain which is faster and why.",
           "Write a haiku about the sea.", "List three prime numbers.",
           "Analyze the trade-offs between SQL and NoSQL databases for a payments system."]


@dataclass
class Outcomes:
    answered: list[str] = field(default_factory=list)  # request ids
    refused: int = 0  # clean 429/503 with Retry-After
    failed: list[str] = field(default_factory=list)  # what went wrong
    cut: list[str] = field(default_factory=list)  # request ids of streams that started and were cut
    server_errors: int = 0  # 5xx answers other than a 503 with Retry-After
    failed_at: list[float] = field(default_factory=list)  # time.monotonic() of each failure
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    tokens: int = 0
    started_at: float = 0.0  # time.monotonic() when the clients started


async def one_request(client: httpx.AsyncClient, url: str, max_tokens: int, timeout: float,
                      out: Outcomes, rng: random.Random) -> float:
    """Returns how long to wait before the next request (Retry-After on refusals)."""
    body = {"model": "auto", "messages": [{"role": "user", "content": rng.choice(PROMPTS)}], "stream": True,
            "max_tokens": max_tokens, "ignore_eos": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    started = None  # the request id once the answer has begun
    try:
        async with asyncio.timeout(timeout):
            async with client.stream("POST", url, json=body) as response:
                if response.status_code in (429, 503):
                    await response.aread()
                    retry = response.headers.get("retry-after")
                    if retry is None:
                        out.failed.append(f"{response.status_code} without Retry-After")
                        return 0.0
                    out.refused += 1
                    return float(retry)
                if response.status_code != 200:
                    await response.aread()
                    out.server_errors += response.status_code >= 500
                    out.failed.append(f"HTTP {response.status_code}: {response.text[:200]}")
                    return 0.0
                request_id = response.headers["x-request-id"]
                started = request_id
                first, finished, done, tokens = None, False, False, 0
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        done = True
                        break
                    event = json.loads(line[6:])
                    if "error" in event:
                        out.failed.append(f"error event: {event['error'].get('message')}")
                        return 0.0
                    for choice in event.get("choices") or []:
                        if choice["delta"].get("content") and first is None:
                            first = time.perf_counter()
                        finished = finished or choice.get("finish_reason") is not None
                    if event.get("usage"):
                        tokens = event["usage"]["completion_tokens"]
                if not (done and finished):
                    out.failed.append("stream cut without an error event")
                    out.cut.append(request_id)
                    return 0.0
                end = time.perf_counter()
                out.answered.append(request_id)
                out.ttft.append((first or end) - start)
                out.e2e.append(end - start)
                out.tokens += tokens
                return 0.0
    except TimeoutError:
        out.failed_at.append(time.monotonic())
        out.failed.append(f"no complete answer within {timeout:g} s")
    except httpx.HTTPError as exc:
        out.failed_at.append(time.monotonic())
        out.failed.append(f"{type(exc).__name__}: {exc}")
        if started is not None:
            out.cut.append(started)
    return 0.0


async def run_clients(base_url: str, clients: int, duration: float, max_tokens: int, timeout: float,
                      seed: int, alongside=None) -> tuple[Outcomes, float]:
    """N client loops for `duration` seconds; `alongside`, a coroutine, runs with them (chaos)."""
    out = Outcomes()
    url = base_url.rstrip("/") + "/v1/chat/completions"
    deadline = time.monotonic() + duration
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)

    async def client_loop(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10), limits=limits) as client:
            while time.monotonic() < deadline:
                wait = await one_request(client, url, max_tokens, timeout, out, rng)
                if wait:
                    await asyncio.sleep(min(wait, max(0.0, deadline - time.monotonic())))

    start = time.perf_counter()
    out.started_at = time.monotonic()
    await asyncio.gather(*(client_loop(i) for i in range(clients)), *([alongside] if alongside else []))
    return out, time.perf_counter() - start


def audit_log(database_url: str, request_ids: list[str], timeout: float = 30.0) -> tuple[int, int]:
    """(missing, duplicated) answered requests in the SQL log."""
    import sqlalchemy as sa

    from aio.db.database import make_engine

    engine = make_engine(database_url)
    wanted = set(request_ids)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with engine.connect() as c:
                rows = c.execute(sa.text("SELECT request_id, COUNT(*) FROM requests GROUP BY request_id")).all()
            counts = {request_id: n for request_id, n in rows if request_id in wanted}
            missing = len(wanted - counts.keys())
            if missing == 0 or time.monotonic() > deadline:
                return missing, sum(1 for n in counts.values() if n > 1)
            time.sleep(0.5)
    finally:
        engine.dispose()


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99), "p99_over_p50": float(p99 / p50) if p50 else 0.0}


def print_report(args, out: Outcomes, seconds: float, missing: int | None, duplicated: int | None,
                 **extra) -> dict:
    ttft, e2e = percentiles(out.ttft), percentiles(out.e2e)
    report = {"clients": args.clients, "seconds": round(seconds, 1), "answered": len(out.answered),
              "refused": out.refused, "failed": len(out.failed), "server_errors": out.server_errors,
              "lost_from_log": missing, "duplicated_in_log": duplicated,
              "requests_per_s": round(len(out.answered) / seconds, 2),
              "output_tokens_per_s": round(out.tokens / seconds, 1), "ttft_s": ttft, "e2e_s": e2e,
              "failures": sorted(set(out.failed))[:10], **extra}
    print(f"answered {len(out.answered)}, refused cleanly {out.refused}, failed {len(out.failed)} "
          f"({out.server_errors} 5xx), missing from the log {missing}, duplicated {duplicated}")
    print(f"throughput {report['requests_per_s']} req/s, {report['output_tokens_per_s']} output tokens/s")
    for name, p in (("TTFT", ttft), ("end-to-end", e2e)):
        if p:
            print(f"{name:10s} p50 {p['p50'] * 1000:8.1f} ms  p95 {p['p95'] * 1000:8.1f} ms  "
                  f"p99 {p['p99'] * 1000:8.1f} ms  p99/p50 {p['p99_over_p50']:.2f}")
    for failure in report["failures"]:
        print("failure:", failure)
    print("JSON", json.dumps(report))
    return report
