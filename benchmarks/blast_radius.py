"""One request must never hurt another: innocent traffic from one API key while another key sends every poison
we know of and a hypothesis-driven fuzzer of request bodies, against a live `aio serve` (real keys, not --open).

    python -m benchmarks.blast_radius [--duration 60] [--clients 8] [--fuzz-examples 300] [--config FILE]

Without --config the server runs the embedded demo tiers with random weights (AIO_DEMO_MODEL=random). Goal: 0
innocent requests failed or cut, 0 tiers marked down, no poison answered 5xx, the server ready after. The suite
runs a short version (tests/test_blast_radius.py).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import httpx
from hypothesis import HealthCheck, given, settings, strategies as st

from benchmarks.poisons import WEATHER, _schema_format, _tool, admin_poisons, poisons

TIERS = ("small", "medium", "large")
BROKEN_CONNECTION = 599  # the status counted for a request whose connection broke (a 5xx for the goal)
# ---- the fuzzer ------------------------------------------------------------------------------------------------

_TEXT = st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=12)
_SCHEMA = st.recursive(
    st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "null"}, {"$ref": "#"},
                     {"enum": ["a", 1]}, {"type": "string", "pattern": "[a-z]{1,3}"}, {"type": "string", "maxLength": 3},
                     {"type": "number", "minimum": 5, "maximum": 1}]),
    lambda inner: st.one_of(
        st.builds(lambda props, req: {"type": "object", "properties": props,
                                      "required": [k for k in props if req]},
                  st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3), st.booleans()),
        st.builds(lambda items, n: {"type": "array", "items": items, "minItems": n}, inner, st.integers(0, 2)),
        st.builds(lambda options: {"anyOf": options}, st.lists(inner, min_size=1, max_size=3))),
    max_leaves=6)


@st.composite
def request_bodies(draw: Callable) -> dict:
    """Chat bodies mixing schemas (recursive ones too), tools, invalid Unicode and sampling fields."""
    body: dict[str, Any] = {"model": draw(st.sampled_from(("auto",) + TIERS)),
                            "messages": draw(st.lists(st.fixed_dictionaries(
                                {"role": st.sampled_from(["user", "system", "assistant"]), "content": _TEXT}),
                                min_size=1, max_size=3)),
                            "max_tokens": draw(st.integers(1, 12))}
    extra = draw(st.sets(st.sampled_from(["response_format", "tools", "temperature", "top_p", "n", "stop", "seed",
                                          "logprobs", "logit_bias", "presence_penalty", "min_tokens", "stream"]),
                         max_size=5))
    if "response_format" in extra:
        body["response_format"] = draw(st.one_of(st.just({"type": "json_object"}),
                                                 _SCHEMA.map(_schema_format)))
    if "tools" in extra:
        body["tools"] = [_tool("f", draw(_SCHEMA.filter(lambda s: s.get("type") == "object"))), WEATHER]
        body["tool_choice"] = draw(st.sampled_from(["auto", "required", "none",
                                                    {"type": "function", "function": {"name": "f"}}]))
    numbers = st.one_of(st.floats(-3, 3), st.integers(-2, 40))
    for name in ("temperature", "top_p", "presence_penalty", "seed"):
        if name in extra:
            body[name] = draw(numbers)
    if "n" in extra:
        body["n"] = draw(st.integers(0, 3))
    if "stop" in extra:
        body["stop"] = draw(st.lists(_TEXT, max_size=3))
    if "logprobs" in extra:
        body["logprobs"], body["top_logprobs"] = True, draw(st.integers(0, 25))
    if "logit_bias" in extra:
        body["logit_bias"] = {str(draw(st.integers(0, 70_000))): draw(st.floats(-100, 100))}
    if "min_tokens" in extra:
        body["min_tokens"] = draw(st.integers(0, 20))
    if "stream" in extra:
        body["stream"] = True
    return body


# ---- traffic ---------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    innocent_ok: int = 0
    innocent_failed: list[str] = field(default_factory=list)  # what went wrong, per failed innocent request
    poison_statuses: Counter = field(default_factory=Counter)  # (name, status) of the named poisons
    poison_5xx: list[str] = field(default_factory=list)
    fuzz_statuses: Counter = field(default_factory=Counter)
    fuzz_5xx: list[str] = field(default_factory=list)
    stream_errors: int = 0  # poison/fuzz streams that ended in an error event (their own failure)
    tiers_marked_down: int = 0
    ready_after: bool = False
    process_alive: bool = True

    @property
    def goal_met(self) -> bool:
        return not (self.innocent_failed or self.poison_5xx or self.fuzz_5xx or self.tiers_marked_down) \
            and self.ready_after and self.innocent_ok > 0 and self.process_alive


def _read_stream(lines: Iterable[str]) -> tuple[bool, str | None]:
    """(completed with [DONE] and a finish chunk, the error event's message if any)."""
    finished = done = False
    for line in lines:
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            continue
        event = json.loads(data)
        if "error" in event:
            return False, event["error"].get("message")
        finished = finished or any(c.get("finish_reason") for c in event.get("choices", []))
    return done and finished, None


async def _innocent_client(client: httpx.AsyncClient, url: str, key: str, index: int, stop_at: float,
                           outcome: Outcome) -> None:
    rng = random.Random(index)
    headers = {"authorization": f"Bearer {key}"}
    while time.monotonic() < stop_at:
        stream = index % 2 == 1
        body = {"model": rng.choice(("auto",) + TIERS), "messages": [{"role": "user", "content": f"say {index}"}],
                "max_tokens": rng.randint(2, 8), "temperature": 0, "stream": stream}
        try:
            if stream:
                async with client.stream("POST", url, json=body, headers=headers) as response:
                    if response.status_code != 200:
                        await response.aread()
                        outcome.innocent_failed.append(f"stream {response.status_code}: {response.text[:200]}")
                        continue
                    lines = [line async for line in response.aiter_lines()]
                ok, error = _read_stream(lines)
                if not ok:
                    outcome.innocent_failed.append(f"stream cut: {error or 'no [DONE]'}")
                    continue
            else:
                response = await client.post(url, json=body, headers=headers)
                if response.status_code != 200 or response.json()["choices"][0]["finish_reason"] not in ("stop",
                                                                                                         "length"):
                    outcome.innocent_failed.append(f"{response.status_code}: {response.text[:200]}")
                    continue
            outcome.innocent_ok += 1
        except httpx.HTTPError as exc:
            outcome.innocent_failed.append(f"{type(exc).__name__}: {exc}")


def _post(client: httpx.Client, url: str, key: str, raw: bytes, streaming: bool) -> tuple[int, bool]:
    """(status, whether a 200 stream ended in an error event); status 599 when the connection broke."""
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    try:
        if not streaming:
            return client.post(url, content=raw, headers=headers).status_code, False
        with client.stream("POST", url, content=raw, headers=headers) as response:
            if response.status_code != 200:
                response.read()
                return response.status_code, False
            _, error = _read_stream(response.iter_lines())
            return 200, error is not None
    except httpx.HTTPError:
        return BROKEN_CONNECTION, False


def _send_poisons(base_url: str, key: str, stop_at: float, fuzz_examples: int, outcome: Outcome) -> None:
    url = base_url + "/v1/chat/completions"
    with httpx.Client(timeout=120) as client:
        rounds = 0
        while rounds == 0 or time.monotonic() < stop_at:
            for name, raw in poisons():
                status, errored = _post(client, url, key, raw, b'"stream": true' in raw)
                outcome.poison_statuses[(name, status)] += 1
                outcome.stream_errors += errored
                if status >= 500:
                    outcome.poison_5xx.append(f"{name}: {status}")
            rounds += 1
            if fuzz_examples:
                _fuzz(client, url, key, fuzz_examples, outcome)
                fuzz_examples = 0


def _fuzz(client: httpx.Client, url: str, key: str, examples: int, outcome: Outcome) -> None:
    @given(body=request_bodies())
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              derandomize=True)
    def probe(body: dict) -> None:
        raw = json.dumps(body).encode()
        status, errored = _post(client, url, key, raw, bool(body.get("stream")))
        outcome.fuzz_statuses[status] += 1
        outcome.stream_errors += errored
        if status >= 500:
            outcome.fuzz_5xx.append(f"{status}: {raw[:300]!r}")

    probe()


def _send_admin_poisons(base_url: str, admin_key: str, outcome: Outcome) -> None:
    with httpx.Client(timeout=60) as client:
        for name, method, path, body in admin_poisons():
            try:
                status = client.request(method, base_url + path, json=body,
                                        headers={"authorization": f"Bearer {admin_key}"}).status_code
            except httpx.HTTPError:
                status = BROKEN_CONNECTION
            outcome.poison_statuses[(name, status)] += 1
            if status >= 500:
                outcome.poison_5xx.append(f"{name}: {status}")


def run(base_url: str, innocent_key: str, poison_key: str, duration_s: float, clients: int, fuzz_examples: int,
        server_log: Callable[[], str], admin_key: str | None = None,
        process_alive: Callable[[], bool] | None = None) -> Outcome:
    """Innocent clients for `duration_s` beside the poison sender (which goes on until the fuzzer is done)."""
    outcome = Outcome()
    log_before = server_log().count("marked down")
    stop_at = time.monotonic() + duration_s
    sender = threading.Thread(target=_send_poisons, args=(base_url, poison_key, stop_at, fuzz_examples, outcome))
    sender.start()

    async def innocents() -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            url = base_url + "/v1/chat/completions"
            await asyncio.gather(*(_innocent_client(client, url, innocent_key, i, stop_at, outcome)
                                   for i in range(clients)))

    asyncio.run(innocents())
    sender.join()
    if admin_key is not None:
        _send_admin_poisons(base_url, admin_key, outcome)
    outcome.tiers_marked_down = server_log().count("marked down") - log_before
    outcome.process_alive = process_alive() if process_alive is not None else True
    ready = httpx.get(base_url + "/ready", timeout=30)
    outcome.ready_after = ready.status_code == 200 and all(v == "ok" for v in ready.json()["checks"]["tiers"].values())
    return outcome


def report(outcome: Outcome, seconds: float) -> str:
    lines = [f"innocent requests: {outcome.innocent_ok} ok, {len(outcome.innocent_failed)} failed or cut "
             f"({seconds:.0f} s)"]
    lines += [f"  {failure}" for failure in outcome.innocent_failed[:10]]
    lines.append(f"tiers marked down: {outcome.tiers_marked_down}; ready after: {outcome.ready_after}; process "
                 f"alive after: {outcome.process_alive}")
    lines.append("named poisons (name: statuses):")
    by_name: dict[str, list[str]] = {}
    for (name, status), count in sorted(outcome.poison_statuses.items()):
        by_name.setdefault(name, []).append(f"{status} x{count}")
    lines += [f"  {name}: {', '.join(statuses)}" for name, statuses in by_name.items()]
    lines.append(f"fuzzed bodies by status: {dict(sorted(outcome.fuzz_statuses.items()))}; poison streams ended by "
                 f"an error event: {outcome.stream_errors}")
    lines += [f"  5xx: {line}" for line in (outcome.poison_5xx + outcome.fuzz_5xx)[:10]]
    lines.append("GOAL MET" if outcome.goal_met else "GOAL NOT MET")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of innocent traffic")
    parser.add_argument("--clients", type=int, default=8, help="innocent clients (half of them stream)")
    parser.add_argument("--fuzz-examples", type=int, default=300)
    parser.add_argument("--config", type=Path, default=None, help="a TOML settings file (default: random demo tiers)")
    args = parser.parse_args(argv)
    from benchmarks.live_server import create_key, start_server  # the suite's helpers for a live `aio serve`

    with tempfile.TemporaryDirectory() as home_dir:
        home = Path(home_dir)
        database = f"sqlite:///{home / 'aio.db'}"
        innocent, poison = (create_key(home, database, name) for name in ("innocent", "poison"))
        server = start_server(args.config, home, database, AIO_DEMO_MODEL="random", AIO_OPEN_ENDPOINT="false")
        try:
            start = time.monotonic()
            outcome = run(server.base_url, innocent, poison, args.duration, args.clients, args.fuzz_examples,
                          server.output, server.admin_key, lambda: server.process.poll() is None)
            print(report(outcome, time.monotonic() - start))
        finally:
            server.stop()
    return 0 if outcome.goal_met else 1


if __name__ == "__main__":
    raise SystemExit(main())
