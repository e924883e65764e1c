"""The goals of the "no input kills the server" issue, checked against a live `aio serve` with API keys:

    python -m benchmarks.hostile_goals [--config FILE]

- A: a finite `$defs` chain of 1,000 links in response_format (94 KB; it crashed llguidance): a 4xx, and the
  process is alive and healthy after;
- B: `logit_bias` with the key "²" (str.isdigit() says yes, int() says no): a 4xx, and a key limited to one
  request in flight can still make its next request (its slot was released);
- C: 40,000 distinct tools (2.2 MB): a 4xx while /health, polled throughout, answers within 2 s;
- D: one key fills the small tier's KV cache (16 streamed choices, ignore_eos); another key's request is answered
  within 30 s while the first still streams;
- E: a non-streamed request (n = 4, ignore_eos) whose client gives up after 2 s: the tier's KV is back to 0
  within 15 s and the row is logged `cancelled`.

Without --config the server runs the SmolLM2 demo tiers (as the probe that found these did). The suite runs it
(tests/test_hostile_goals.py)."""
from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

HELLO = [{"role": "user", "content": "hi"}]
CHAIN_LINKS = 1_000


def defs_chain(links: int = CHAIN_LINKS) -> dict:
    defs = {f"D{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/D{i + 1}"}}} for i in range(links)}
    defs[f"D{links}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/D0"}


@dataclass
class Goals:
    results: dict[str, dict] = field(default_factory=dict)

    def record(self, name: str, met: bool, **figures) -> None:
        self.results[name] = {"met": bool(met), **figures}

    @property
    def met(self) -> bool:
        return bool(self.results) and all(r["met"] for r in self.results.values())

    def report(self) -> str:
        lines = [f"{name}: {'met' if r['met'] else 'NOT MET'} "
                 + ", ".join(f"{k} {v}" for k, v in r.items() if k != "met") for name, r in self.results.items()]
        return "\n".join(lines + ["GOALS MET" if self.met else "GOALS NOT MET"])


def kv_usage(base_url: str, tier: str) -> float:
    text = httpx.get(base_url + "/metrics", timeout=30).text
    match = re.search(rf'vllm:kv_cache_usage_perc{{[^}}]*tier="{tier}"[^}}]*}} ([0-9.e+-]+)', text)
    return float(match.group(1)) if match else float("nan")


def check_a(base_url: str, key: str, process_alive, goals: Goals) -> None:
    body = {"model": "small", "max_tokens": 5, "messages": HELLO,
            "response_format": {"type": "json_schema", "json_schema": {"name": "chain", "schema": defs_chain()}}}
    status = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=120,
                        headers={"authorization": f"Bearer {key}"}).status_code
    healthy = httpx.get(base_url + "/health", timeout=30).status_code == 200
    goals.record("A", 400 <= status < 500 and process_alive() and healthy, status=status,
                 process_alive=process_alive(), bytes=len(json.dumps(body)))


def check_b(base_url: str, limited_key: str, goals: Goals) -> None:
    headers = {"authorization": f"Bearer {limited_key}"}
    bad = httpx.post(base_url + "/v1/chat/completions", headers=headers, timeout=60,
                     json={"model": "small", "max_tokens": 3, "messages": HELLO, "logit_bias": {"²": 1}})
    after = httpx.post(base_url + "/v1/chat/completions", headers=headers, timeout=120,
                       json={"model": "small", "max_tokens": 3, "messages": HELLO})
    goals.record("B", 400 <= bad.status_code < 500 and after.status_code == 200, status=bad.status_code,
                 next_request=after.status_code, param=bad.json().get("error", {}).get("param"))


def check_c(base_url: str, key: str, goals: Goals) -> None:
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "d",
                                               "parameters": {"type": "object"}}} for i in range(40_000)]
    raw = json.dumps({"model": "small", "messages": HELLO, "tools": tools}).encode()
    slowest, done = 0.0, threading.Event()

    def poll() -> None:
        nonlocal slowest
        with httpx.Client(timeout=30) as client:
            while not done.is_set():
                start = time.perf_counter()
                client.get(base_url + "/health")
                slowest = max(slowest, time.perf_counter() - start)
                time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        status = httpx.post(base_url + "/v1/chat/completions", content=raw, timeout=120,
                            headers={"authorization": f"Bearer {key}", "content-type": "application/json"}).status_code
    finally:
        done.set()
        poller.join()
    goals.record("C", 400 <= status < 500 and slowest < 2.0, status=status, megabytes=round(len(raw) / 1e6, 2),
                 slowest_health_s=round(slowest, 3))


def check_d(base_url: str, hog_key: str, other_key: str, goals: Goals) -> None:
    hog_body = {"model": "small", "messages": HELLO, "n": 16, "ignore_eos": True, "stream": True}
    filled, stop = threading.Event(), threading.Event()

    def hog() -> None:
        with httpx.stream("POST", base_url + "/v1/chat/completions", json=hog_body, timeout=600,
                          headers={"authorization": f"Bearer {hog_key}"}) as response:
            for _ in response.iter_lines():
                if stop.is_set():
                    return

    thread = threading.Thread(target=hog, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    peak = 0.0
    while time.monotonic() < deadline and not filled.is_set():
        peak = max(peak, kv_usage(base_url, "small"))
        if peak >= 0.95:
            filled.set()
        time.sleep(0.05)
    start = time.perf_counter()
    other = httpx.post(base_url + "/v1/chat/completions", timeout=120, headers={"authorization": f"Bearer {other_key}"},
                       json={"model": "small", "max_tokens": 8, "messages": HELLO})
    waited = time.perf_counter() - start
    hog_running = thread.is_alive()
    stop.set()
    thread.join(timeout=60)
    goals.record("D", filled.is_set() and other.status_code == 200 and waited < 30, kv_peak=round(peak, 3),
                 other_status=other.status_code, other_seconds=round(waited, 2), hog_still_streaming=hog_running)


def check_e(base_url: str, key: str, database_url: str, goals: Goals) -> None:
    try:
        httpx.post(base_url + "/v1/chat/completions", timeout=2.0, headers={"authorization": f"Bearer {key}"},
                   json={"model": "medium", "messages": HELLO, "n": 4, "max_tokens": 600, "ignore_eos": True})
        gave_up = False
    except httpx.TimeoutException:
        gave_up = True
    left = time.monotonic()
    while time.monotonic() - left < 15 and kv_usage(base_url, "medium") > 0:
        time.sleep(0.1)
    freed_after = time.monotonic() - left
    status = _last_row_status(database_url)
    goals.record("E", gave_up and freed_after < 15 and status == "cancelled", client_gave_up=gave_up,
                 kv_freed_after_s=round(freed_after, 2), row=status)


def _last_row_status(database_url: str) -> str | None:
    import sqlalchemy as sa

    engine = sa.create_engine(database_url)
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            with engine.connect() as connection:
                row = connection.execute(sa.text("SELECT status FROM requests WHERE tier = 'medium' "
                                                 "ORDER BY created_at DESC LIMIT 1")).first()
            if row is not None:
                return row[0]
            time.sleep(0.2)
    finally:
        engine.dispose()
    return None


def run(server, keys: dict[str, str]) -> Goals:
    goals = Goals()
    alive = lambda: server.process.poll() is None  # noqa: E731
    check_a(server.base_url, keys["plain"], alive, goals)
    check_b(server.base_url, keys["limited"], goals)
    check_c(server.base_url, keys["plain"], goals)
    check_d(server.base_url, keys["hog"], keys["plain"], goals)
    check_e(server.base_url, keys["plain"], server.database_url, goals)
    goals.record("process", alive(), alive_after_all=alive())
    return goals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=None, help="a TOML settings file (default: the demo tiers)")
    parser.add_argument("--demo-model", default="smollm2", help="the demo tiers without --config (as the probe: smollm2)")
    args = parser.parse_args(argv)
    from benchmarks.live_server import create_key, start_server  # the suite's helpers for a live `aio serve`

    with tempfile.TemporaryDirectory() as home_dir:
        home = Path(home_dir)
        database = f"sqlite:///{home / 'aio.db'}"
        keys = {"plain": create_key(home, database, "plain"), "hog": create_key(home, database, "hog"),
                "limited": create_key(home, database, "limited", "--max-streams", "1")}
        server = start_server(args.config, home, database, timeout=300, AIO_DEMO_MODEL=args.demo_model,
                              AIO_OPEN_ENDPOINT="false")
        try:
            goals = run(server, keys)
            print(goals.report())
        finally:
            server.stop()
    return 0 if goals.met else 1


if __name__ == "__main__":
    raise SystemExit(main())
