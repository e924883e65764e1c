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

from benchmarks.hostile_goals import defs_chain

TIERS = ("small", "medium", "large")
BROKEN_CONNECTION = 599  # the status counted for a request whose connection broke (a 5xx for the goal)
HELLO = [{"role": "user", "content": "hi"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
SELF_REQUIRED = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}
DEFS_CYCLE = {"$defs": {"A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}, "required": ["b"]},
                        "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"]}},
              "$ref": "#/$defs/A"}


def _tool(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def _schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def _nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def _alias_chain(links: int) -> dict:
    defs = {f"D{i}": {"$ref": f"#/$defs/D{i + 1}"} for i in range(links)}
    defs[f"D{links}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/D0"}


def poisons() -> list[tuple[str, bytes]]:
    """(name, raw JSON body): the blast-radius report's poisons and the earlier reliability work's hostile input."""
    def chat(model: str = "small", **fields: Any) -> dict:
        return {"model": model, "max_tokens": 5, "messages": HELLO, **fields}

    bodies: dict[str, Any] = {
        "recursive schema ($ref #)": chat(response_format=_schema_format(SELF_REQUIRED)),
        "recursive schema, stream, large": chat("large", stream=True, response_format=_schema_format(SELF_REQUIRED)),
        "recursive schema in tools, required": chat(tools=[_tool("x", SELF_REQUIRED)], tool_choice="required"),
        "$defs cycle A->B->A, named tool": chat(tools=[_tool("x", DEFS_CYCLE)],
                                                tool_choice={"type": "function", "function": {"name": "x"}}),
        "$defs cycle, response_format, auto": chat("auto", response_format=_schema_format(DEFS_CYCLE)),
        "schema nested 200 deep": chat(response_format=_schema_format(_nested(200))),
        "lone surrogate in content": chat(messages=[{"role": "user", "content": "\ud800"}]),
        "lone surrogate, auto (classifier)": chat("auto", messages=[{"role": "user", "content": "a \udfff b"}]),
        "lone surrogate, stream": chat(stream=True, messages=[{"role": "user", "content": "\ud83d"}]),
        "lone surrogate in a content part": chat(messages=[{"role": "user",
                                                            "content": [{"type": "text", "text": "x\ud800"}]}]),
        "lone surrogate in a tool description": chat(tools=[{"type": "function", "function": {
            "name": "f", "description": "\udc00", "parameters": {"type": "object"}}}]),
        "lone surrogate in a schema key": chat(response_format=_schema_format(
            {"type": "object", "properties": {"\ud800": {"type": "string"}}})),
        "lone surrogate in stop": chat(stop=["\ud800"]),
        "lone surrogate in user": chat(user="\ud800"),
        "unknown named tool": chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}),
        "invalid regex pattern": chat(response_format=_schema_format({"type": "string", "pattern": "(unclosed"})),
        "logit_bias outside the vocabulary": chat(logit_bias={"99999999": 5}),
        "n = 1000": chat(n=1000),
        "max_tokens = 1e12": chat(max_tokens=10 ** 12),
        "five stops": chat(stop=["a", "b", "c", "d", "e"]),
        "empty messages": chat(messages=[]),
        "control characters and SQL": chat(messages=[{"role": "user", "content":
                                                      "'); DROP TABLE requests; -- <script>x</script> \x00\x07\x1b[31m"}]),
        "image part": chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]),
        "unknown model": chat("gpt-17"),
        # the hostile-input issue's rows A-K (A-E also in benchmarks.hostile_goals, with their goals)
        "A: $defs chain of 1,000 links": chat(response_format=_schema_format(defs_chain())),
        "A: the chain as a forced tool's parameters": chat(tools=[_tool("x", defs_chain())],
                                                           tool_choice={"type": "function", "function": {"name": "x"}}),
        "A: 2,600 plain $ref links": chat(response_format=_schema_format(_alias_chain(2_600))),
        "A: 3,000 properties": chat(response_format=_schema_format(
            {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(3_000)}})),
        "A: 160 patternProperties": chat(response_format=_schema_format(
            {"type": "object", "patternProperties": {f"^k{i}_[a-z]+$": {"type": "integer"} for i in range(160)}})),
        "B: logit_bias key '²'": chat(logit_bias={"²": 1}),
        "B: logit_bias keys '1' and '01'": chat(logit_bias={"1": 1, "01": 2}),
        "C: 129 tools": chat(tools=[_tool(f"t{i}", {"type": "object"}) for i in range(129)]),
        "D: 16 endless streamed choices": chat(n=16, ignore_eos=True, stream=True, max_tokens=200),
        "F: cycle through an $id URL": chat(response_format=_schema_format(
            {"$id": "https://x.test/s", "type": "object", "properties": {"a": {"$ref": "https://x.test/s"}},
             "required": ["a"]})),
        "F: cycle through a percent-encoded pointer": chat(response_format=_schema_format(
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/A%20B"}}, "required": ["a"],
             "$defs": {"A B": {"$ref": "#"}}})),
        "F: cycle through patternProperties": chat(response_format=_schema_format(
            {"type": "object", "patternProperties": {"^a$": {"$ref": "#"}}, "required": ["a"]})),
        "F: an $anchor ref in a forced tool (valid)": chat(
            tools=[_tool("x", {"type": "object", "properties": {"q": {"$ref": "#me"}}, "required": ["q"],
                               "$defs": {"M": {"$anchor": "me", "type": "integer"}}})],
            tool_choice={"type": "function", "function": {"name": "x"}}),
        "I: max_tokens as a string": {**chat(), "max_tokens": "4"},
        "I: max_tokens true": {**chat(), "max_tokens": True},
        "I: n as a string": chat(n="2"),
        "I: stream as a string": chat(stream="true"),
        "I: aio_cascade 'yes'": chat("auto", aio_cascade="yes"),
        "I: aio_cascade 1": chat("auto", aio_cascade=1),
        "I: aio_cascade_threshold as a string": chat("auto", aio_cascade_threshold="-0.5"),
        "J: temperature 1e-300 (valid: greedy)": chat(temperature=1e-300),
        "J: repetition_penalty 1e-300": chat(repetition_penalty=1e-300),
        "K: NUL in content (valid)": chat(messages=[{"role": "user", "content": "a\u0000b"}]),
    }
    raw = [(name, json.dumps(body).encode()) for name, body in bodies.items()]
    raw += [("not UTF-8", b"\xff\xfe not utf-8"), ("not JSON", b"{"), ("a list", b"[]"), ("empty body", b""),
            ("NaN temperature", b'{"model": "small", "messages": [{"role": "user", "content": "hi"}], '
                                b'"temperature": NaN}'),
            ("raw surrogate bytes", b'{"model": "small", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}'),
            ("JSON nested 100,000 deep", b'{"model": "small", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")]
    return raw


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


def admin_poisons() -> list[tuple[str, str, str, dict | None]]:
    """(name, method, path, JSON body) sent with the admin key: rows G and H."""
    return [("G: DELETE a 20-digit key id", "DELETE", "/admin/keys/99999999999999999999", None),
            ("G: DELETE key id '3.0'", "DELETE", "/admin/keys/3.0", None),
            ("H: a key name with CR/LF/ESC", "POST", "/admin/keys", {"name": "evil\r\n 9 forged \x1b[31m"})]


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
    from tests.servers import create_key, start_server  # the suite's helpers for a live `aio serve`

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
