"""The official `openai` SDK against a live `aio serve` on loopback (three local tiers, SQLite log)."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
import sqlalchemy as sa

from benchmarks.live_server import TEST_ADMIN_KEY, LiveServer, aio_command, free_port, server_env, start_server

PRICES = {"small": (0.1, 0.2), "medium": (0.5, 1.0), "large": (3.0, 6.0)}
MAX_MODEL_LEN = {"small": 128, "medium": 256, "large": 1024}
MAX_BODY = 64 * 1024
SHAPES = {"small": dict(hidden_size=64, num_layers=2), "medium": dict(hidden_size=96, num_layers=2),
          "large": dict(hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=4, intermediate_size=512)}


def write_config(path: Path, checkpoints: dict[str, Path], **tier_overrides: dict) -> Path:
    lines = [f"max_body_bytes = {MAX_BODY}", "quality = 0.5", ""]
    for tier, ckpt in checkpoints.items():
        options = {"path": str(ckpt), "max_model_len": MAX_MODEL_LEN[tier],
                   "input_price_per_million": PRICES[tier][0], "output_price_per_million": PRICES[tier][1],
                   "kv_cache_bytes": 16 << 20, **tier_overrides.get(tier, {})}
        lines.append(f"[tiers.{tier}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in options.items()]
        lines.append("")
    path.write_text("\n".join(lines))
    return path


@pytest.fixture(scope="module")
def tier_checkpoints(checkpoint_dir) -> dict[str, Path]:
    return {tier: checkpoint_dir("llama", max_position_embeddings=1024, **shape) for tier, shape in SHAPES.items()}


@pytest.fixture(scope="module")
def server(tmp_path_factory, tier_checkpoints):
    home = tmp_path_factory.mktemp("aio-home")
    config = write_config(home / "aio.toml", tier_checkpoints, large={"max_num_seqs": 1, "max_queue": 1})
    # No monitor: a verdict on an earlier "hello" lands whenever the machine's speed lets it, and a failed one
    # routes the next near-duplicate above small (recent failures), which the routing tests here do not expect.
    live = start_server(config, home, f"sqlite:///{home / 'aio.db'}", AIO_CLASSIFIER_POLL_INTERVAL_S="0.3",
                        AIO_QUALITY_SAMPLE_RATE="0")
    yield live
    live.stop()


@pytest.fixture()
def client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.api_url, api_key="unused-open-endpoint", max_retries=0)


def log_rows(server: LiveServer, request_ids: list[str], timeout: float = 10.0) -> dict[str, dict]:
    """The requests table's rows for these ids, waiting for the background log writer."""
    from aio.db.database import make_engine

    engine = make_engine(server.database_url)
    deadline = time.monotonic() + timeout
    try:
        while True:
            with engine.connect() as c:
                rows = c.execute(sa.text("SELECT * FROM requests WHERE request_id IN :ids")
                                 .bindparams(sa.bindparam("ids", expanding=True)), {"ids": request_ids}).mappings().all()
            if len(rows) >= len(set(request_ids)) or time.monotonic() > deadline:
                return {r["request_id"]: dict(r) for r in rows}
            time.sleep(0.1)
    finally:
        engine.dispose()


def reference_text(path: Path, messages: list[dict], max_tokens: int) -> str:
    from tiers import Engine, SamplingParams

    engine = Engine.from_pretrained(path, kv_cache_bytes=4 << 20, max_model_len=256)
    out = engine.generate([engine.apply_chat_template(messages)], SamplingParams(max_tokens=max_tokens, temperature=0))
    return out[0].text


HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello to the team."}]


def test_chat_completion_matches_the_engine_and_carries_usage_cost_and_headers(server, client, tier_checkpoints):
    raw = client.chat.completions.with_raw_response.create(model="small", messages=HELLO, max_completion_tokens=12,
                                                          temperature=0, extra_body={"ignore_eos": True})
    completion = raw.parse()
    assert completion.model == tier_checkpoints["small"].name
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == reference_text(tier_checkpoints["small"], HELLO, 12)
    assert completion.choices[0].finish_reason == "length"
    usage = completion.usage
    assert usage.completion_tokens == 12 and usage.total_tokens == usage.prompt_tokens + 12
    assert raw.headers["x-aio-tier"] == "small"
    expected_cost = (usage.prompt_tokens * PRICES["small"][0] + 12 * PRICES["small"][1]) / 1e6
    assert float(raw.headers["x-aio-cost-usd"]) == pytest.approx(expected_cost, rel=1e-6)
    request_id = raw.headers["x-request-id"]
    row = log_rows(server, [request_id])[request_id]
    assert (row["tier"], row["routing_reason"], row["status"]) == ("small", "explicit", "ok")
    assert (row["prompt_tokens"], row["completion_tokens"]) == (usage.prompt_tokens, 12)
    assert row["cost_usd"] == pytest.approx(expected_cost, rel=1e-6)
    large_cost = (usage.prompt_tokens * PRICES["large"][0] + 12 * PRICES["large"][1]) / 1e6
    assert row["baseline_cost_usd"] == pytest.approx(large_cost, rel=1e-6)
    assert row["answer"] == completion.choices[0].message.content
    assert json.loads(row["prompt"])[1]["content"] == HELLO[1]["content"]
    assert row["ttft_ms"] > 0 and row["latency_ms"] >= row["ttft_ms"]
    assert 0 <= row["queue_ms"] <= row["ttft_ms"]  # the engine reports its queue time


def test_streaming_sends_role_first_then_the_same_text_then_usage(server, client, tier_checkpoints):
    stream = client.chat.completions.create(model="medium", messages=HELLO, max_tokens=10, temperature=0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reference_text(tier_checkpoints["medium"], HELLO, 10)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10
    assert all(c.usage is None for c in chunks[:-1])
    assert {c.model for c in chunks} == {tier_checkpoints["medium"].name}


def test_n_choices_seed_and_logprobs(client):
    kwargs = dict(model="small", messages=HELLO, max_tokens=8, temperature=1.0, seed=7, n=2,
                  logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    first = client.chat.completions.create(**kwargs)
    again = client.chat.completions.create(**kwargs)
    assert [c.index for c in first.choices] == [0, 1]
    assert [c.message.content for c in first.choices] == [c.message.content for c in again.choices]
    assert first.usage.completion_tokens == 16
    for choice in first.choices:
        entries = choice.logprobs.content
        assert len(entries) == 8
        for entry in entries:
            assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
            assert entry.top_logprobs[0].logprob >= entry.logprob - 1e-5


def test_stop_string_ends_the_answer(client):
    base = client.chat.completions.create(model="small", messages=HELLO, max_tokens=20, temperature=0,
                                          extra_body={"ignore_eos": True}).choices[0].message.content
    stop = base[5:8]
    assert stop.strip(), base
    stopped = client.chat.completions.create(model="small", messages=HELLO, max_tokens=20, temperature=0, stop=[stop],
                                             extra_body={"ignore_eos": True}).choices[0]
    assert stopped.finish_reason == "stop" and stopped.message.content == base[:base.index(stop)]


def test_a_tiny_temperature_answers_as_greedy_and_wrong_types_are_400s(server, client):
    answers = [client.chat.completions.create(model="small", messages=HELLO, max_tokens=10, temperature=t, seed=5,
                                              logprobs=True, extra_body={"ignore_eos": True}) for t in (1e-300, 0)]
    assert answers[0].usage.completion_tokens == 10  # was an empty answer: 1e-300 is 0 in float32, the softmax NaN
    tokens = [[e.token for e in a.choices[0].logprobs.content] for a in answers]
    assert tokens[0] == tokens[1] and answers[0].choices[0].message.content == answers[1].choices[0].message.content
    for extra, param in [({"repetition_penalty": 1e-300}, "repetition_penalty"), ({"max_tokens": "4"}, "max_tokens"),
                         ({"max_tokens": True}, "max_tokens"), ({"n": "2"}, "n"), ({"stream": "true"}, "stream"),
                         ({"aio_cascade": "yes"}, "aio_cascade"), ({"aio_cascade": 1}, "aio_cascade"),
                         ({"aio_cascade_threshold": "-0.5"}, "aio_cascade_threshold"),
                         ({"logit_bias": {"²": 1}}, "logit_bias"), ({"logit_bias": {"³": 1}}, "logit_bias")]:
        response = httpx.post(server.api_url + "/chat/completions", timeout=30,
                              json={"model": "small", "messages": HELLO, **extra})
        assert response.status_code == 400, (extra, response.text)
        assert response.json()["error"]["param"] == param


def test_nul_is_kept_in_the_prompt_and_logged_as_u_fffd_in_text_columns(server, client):
    """The one rule docs/operations.md states for SQLite and PostgreSQL alike (PostgreSQL text cannot hold NUL)."""
    raw = client.chat.completions.with_raw_response.create(
        model="small", messages=[{"role": "user", "content": "a\x00b"}], max_tokens=1, user="u\x00v")
    row = log_rows(server, [raw.headers["x-request-id"]])[raw.headers["x-request-id"]]
    assert json.loads(row["prompt"])[0]["content"] == "a\x00b" and row["user"] == "u\ufffdv"


def test_the_open_server_answers_only_loopback_host_names(server):
    """DNS rebinding: a page whose name resolves to 127.0.0.1 sends its own name as Host."""
    port = server.base_url.rsplit(":", 1)[1]
    rebound = httpx.post(server.api_url + "/chat/completions", headers={"host": f"rebound.example:{port}"},
                         json={"model": "small", "messages": HELLO, "max_tokens": 1}, timeout=30)
    assert rebound.status_code == 400 and rebound.json()["error"]["code"] == "host_not_allowed"
    assert httpx.get(server.base_url + "/health", headers={"host": f"LOCALHOST:{port}"}).status_code == 200
    assert httpx.get(server.base_url + "/health", headers={"host": f"[::1]:{port}"}).status_code == 200


def test_auto_routes_through_the_classifier_and_the_quality_knob(server, client):
    ids, tiers = [], []
    for quality in (0.0, 1.0):
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=HELLO, max_tokens=4, extra_body={"aio_quality": quality})
        ids.append(raw.headers["x-request-id"])
        tiers.append(raw.headers["x-aio-tier"])
        assert raw.headers["x-aio-routing-reason"] == "classifier"
    assert tiers == ["small", "large"]
    rows = log_rows(server, ids)
    for request_id, quality in zip(ids, (0.0, 1.0)):
        row = rows[request_id]
        assert row["routing_reason"] == "classifier" and row["classifier_version"]
        scores = row["tier_scores"] if isinstance(row["tier_scores"], list) else json.loads(row["tier_scores"])
        assert len(scores) == 3 and sum(scores) == pytest.approx(1.0)
        assert row["quality"] == quality


def test_the_confidence_cascade_climbs_from_unsure_tiers_and_refuses_streams(server, client):
    """Random-weight tiers are unsure of every token (mean logprob far below -0.5): a cascaded request routed to
    small is answered again up to large; a threshold below their confidence keeps it on small."""
    def post(**extra):
        response = httpx.post(server.api_url + "/chat/completions", timeout=60, json={
            "model": "auto", "messages": HELLO, "max_tokens": 4, "aio_quality": 0.0, **extra})
        assert response.status_code == 200, response.text
        return response

    climbed = post(aio_cascade=True)
    aio = climbed.json()["aio"]
    assert climbed.headers["x-aio-tier"] == aio["tier"] == "large" and aio["cascade_from"] == "small"
    assert climbed.headers["x-aio-routing-reason"] == aio["routing_reason"] == "cascade"
    assert climbed.json()["choices"][0]["logprobs"] is None  # the cascade's logprobs are its own
    kept = post(aio_cascade_threshold=-100.0)
    assert kept.headers["x-aio-tier"] == "small" and kept.json()["aio"]["cascade_from"] is None
    confidence = kept.json()["aio"]["confidence"]
    assert -100.0 <= confidence < -0.5
    rows = log_rows(server, [climbed.headers["x-request-id"], kept.headers["x-request-id"]])
    row = rows[climbed.headers["x-request-id"]]
    assert (row["tier"], row["routing_reason"], row["cascade_from_tier"]) == ("large", "cascade", "small")
    assert row["cascade_confidence"] < -0.5 and 0 < row["cascade_cost_usd"] < row["cost_usd"]
    assert row["cost_usd"] == pytest.approx(aio["cost_usd"]) and row["confidence"] == pytest.approx(aio["confidence"])
    assert rows[kept.headers["x-request-id"]]["confidence"] == pytest.approx(confidence)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="auto", messages=HELLO, stream=True, extra_body={"aio_cascade": True})
    assert info.value.body["param"] == "aio_cascade" and "stream=true" in info.value.body["message"]


def _prompt_of(path: Path, low: int, high: int) -> str:
    """A user message whose chat prompt has between low and high tokens."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    for n in range(10, 400):
        text = " ".join(f"w{i}" for i in range(n))
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
        num = len(ids["input_ids"] if hasattr(ids, "keys") else ids)
        if low < num < high:
            return text
    raise AssertionError("no prompt length fits")


def test_a_prompt_too_long_for_the_tier_escalates_then_is_refused(server, client, tier_checkpoints):
    words = _prompt_of(tier_checkpoints["small"], 140, 230)  # over small's 128, under medium's 256
    raw = client.chat.completions.with_raw_response.create(
        model="small", messages=[{"role": "user", "content": words}], max_tokens=4)
    assert raw.headers["x-aio-tier"] == "medium" and raw.headers["x-aio-routing-reason"] == "escalation"
    assert raw.parse().model != "small"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="auto", messages=[{"role": "user", "content": words * 12}], max_tokens=4)
    assert info.value.code == "context_length_exceeded"
    assert info.value.response.headers["x-request-id"]


@pytest.mark.parametrize("kwargs, param", [
    (dict(messages=[]), "messages"),
    (dict(messages=[{"role": "user", "content": 5}]), "messages.0.content"),
    (dict(messages=[{"role": "wizard", "content": "hi"}]), "messages.0.role"),
    (dict(messages=HELLO, temperature=-1), "temperature"),
    (dict(messages=HELLO, max_tokens=0), "max_tokens"),
    (dict(messages=HELLO, n=99), "n"),
    (dict(messages=HELLO, top_logprobs=2), "top_logprobs"),
])
def test_invalid_requests_get_openai_shaped_400s(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="small", **kwargs)
    error = info.value.body
    assert info.value.status_code == 400
    assert set(error) >= {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and error["message"]


def test_an_empty_user_message_is_answered_as_openai_does(client):
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=[{"role": "user", "content": ""}],
                                                            max_tokens=2)
    assert raw.status_code == 200 and raw.headers["x-aio-tier"] in ("small", "medium", "large")
    assert raw.parse().usage.prompt_tokens > 0


def test_unknown_model_is_404_and_extra_fields_are_ignored(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=HELLO)
    assert info.value.code == "model_not_found"
    ok = client.chat.completions.create(model="small", messages=HELLO, max_tokens=2,
                                        extra_body={"presence_penalty": 0.5, "some_future_field": {"x": 1}}, user="u1")
    assert ok.usage.completion_tokens <= 2


def test_malformed_json_and_oversized_bodies(server):
    bad = httpx.post(server.api_url + "/chat/completions", content=b"{not json", timeout=10,
                     headers={"content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    big = {"model": "small", "messages": [{"role": "user", "content": "x" * (MAX_BODY + 10)}]}
    response = httpx.post(server.api_url + "/chat/completions", json=big, timeout=10)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"

    def chunked():
        yield json.dumps(big).encode()

    response = httpx.post(server.api_url + "/chat/completions", content=chunked(), timeout=10,
                          headers={"content-type": "application/json"})
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"


def test_models_health_ready_and_metrics(server, client, tier_checkpoints):
    models = {m.id: m for m in client.models.list().data}
    assert set(models) == {"auto", "small", "medium", "large"}
    assert models["small"].max_model_len == 128 and models["large"].max_model_len == 1024
    assert models["medium"].root == tier_checkpoints["medium"].name
    assert httpx.get(server.base_url + "/health").json() == {"status": "ok"}
    ready = httpx.get(server.base_url + "/ready")
    assert ready.status_code == 200 and ready.json()["checks"]["database"] == "ok"
    client.chat.completions.create(model="small", messages=HELLO, max_tokens=3, extra_body={"ignore_eos": True})
    text = httpx.get(server.base_url + "/metrics").text
    for name in ("vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_count",
                 "vllm:inter_token_latency_seconds_count", "vllm:request_queue_time_seconds_count",
                 "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "aio:cost_usd_total", "aio:baseline_cost_usd_total", "vllm:generation_tokens_total"):
        assert f"{name}{{" in text, name
    requests = [line for line in text.splitlines()
                if line.startswith('aio:requests_total{') and 'tier="small"' in line and 'status="ok"' in line]
    assert requests and float(requests[0].split()[-1]) >= 1


def _metric(server: LiveServer, name: str, tier: str) -> float:
    for line in httpx.get(server.base_url + "/metrics").text.splitlines():
        if line.startswith(name + "{") and f'tier="{tier}"' in line:
            return float(line.split()[-1])
    return 0.0


def test_full_queue_gets_429_and_a_dropped_stream_is_logged_as_aborted(server, client):
    """large runs one sequence at a time and queues one more: a third request is refused with Retry-After."""
    long = dict(model="large", messages=HELLO, max_tokens=900, temperature=0, stream=True,
                extra_body={"ignore_eos": True})
    first = client.chat.completions.with_raw_response.create(**long)
    first_id = first.headers["x-request-id"]
    stream = first.parse()
    next(iter(stream))  # the role chunk
    second_done = threading.Event()

    def second() -> None:
        client.chat.completions.create(model="large", messages=HELLO, max_tokens=2)
        second_done.set()

    threading.Thread(target=second, daemon=True).start()
    deadline = time.monotonic() + 20
    while _metric(server, "vllm:num_requests_waiting", "large") < 1:
        assert time.monotonic() < deadline, "the second request never queued"
        time.sleep(0.05)
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="large", messages=HELLO, max_tokens=2)
    assert int(info.value.response.headers["retry-after"]) >= 1
    assert info.value.code == "queue_full"
    stream.close()  # the client goes away mid-answer: the engine aborts it and frees its blocks
    assert second_done.wait(30)
    row = log_rows(server, [first_id])[first_id]
    assert row["status"] == "cancelled" and row["completion_tokens"] < 900


def test_the_open_endpoint_ignores_keys_and_admin_endpoints_still_need_the_admin_key(server):
    assert httpx.get(server.base_url + "/admin/keys").status_code == 401
    response = httpx.post(server.api_url + "/chat/completions", headers={"Authorization": "Bearer wrong-key"},
                          json={"model": "small", "messages": HELLO, "max_tokens": 1})
    assert response.status_code == 200 and response.headers["cache-control"] == "no-store"


def test_every_finished_request_is_logged_exactly_once(server, client):
    ids = []
    for i in range(6):
        raw = client.chat.completions.with_raw_response.create(
            model=("small", "medium", "auto")[i % 3], messages=[{"role": "user", "content": f"question {i}?"}],
            max_tokens=3, stream=bool(i % 2))
        ids.append(raw.headers["x-request-id"])
        if i % 2:
            list(raw.parse())
    rows = log_rows(server, ids)
    assert set(rows) == set(ids)
    from aio.db.database import make_engine

    engine = make_engine(server.database_url)
    with engine.connect() as c:
        counts = c.execute(sa.text("SELECT request_id, COUNT(*) FROM requests GROUP BY request_id "
                                   "HAVING COUNT(*) > 1")).all()
    engine.dispose()
    assert counts == []


@pytest.mark.parametrize("host, open_endpoint, message", [
    ("0.0.0.0", "true", "open_endpoint = true serves without API keys and is for loopback only"),
    ("127.0.0.1", "false", "no API keys: create one with `aio keys create --name NAME`"),
])
def test_serving_without_keys_needs_open_mode_and_loopback(tmp_path, tier_checkpoints, host, open_endpoint, message):
    config = write_config(tmp_path / "aio.toml", tier_checkpoints)
    result = __import__("subprocess").run(
        aio_command("serve", "--host", host, "--port", str(free_port()), "--config", str(config)),
        env=server_env(tmp_path, f"sqlite:///{tmp_path / 'aio.db'}", TEST_ADMIN_KEY, AIO_OPEN_ENDPOINT=open_endpoint),
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_promoted_classifier_and_new_thresholds_take_over_without_restart(server, client, tmp_path):
    from aio.routing import registry
    from aio.db.database import make_engine
    from classifier import HeuristicClassifier

    everything_is_hard = HeuristicClassifier(version="heuristic-live-test", thetas=[-20.0, -19.0])
    everything_is_hard.save(tmp_path / "live")
    db = make_engine(server.database_url)
    try:
        registry.register(db, version=everything_is_hard.version, kind="heuristic", path=str(tmp_path / "live"),
                          status="candidate")
        registry.promote(db, everything_is_hard.version)
        time.sleep(1.5)  # the server polls every 0.3 s
        raw = client.chat.completions.with_raw_response.create(model="auto", messages=HELLO, max_tokens=2)
        assert raw.headers["x-aio-tier"] == "large"
        request_id = raw.headers["x-request-id"]
        assert log_rows(server, [request_id])[request_id]["classifier_version"] == "heuristic-live-test"
        registry.set_router_state(db, quality=0.0, updated_by="test")  # 0: everything goes to the cheapest tier
        time.sleep(1.5)
        raw = client.chat.completions.with_raw_response.create(model="auto", messages=HELLO, max_tokens=2)
        assert raw.headers["x-aio-tier"] == "small"
        models = {m.id: m for m in client.models.list().data}
        assert models["auto"].aio["classifier_version"] == "heuristic-live-test"
    finally:
        registry.set_router_state(db, quality=0.5, updated_by="test")
        registry.rollback(db)
        db.dispose()
