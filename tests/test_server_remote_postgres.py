"""A deployment on PostgreSQL whose tiers mix a local engine, a remote AIO server and a dead remote server."""
from __future__ import annotations

import json
import signal
import subprocess

import httpx
import openai
import pytest
import sqlalchemy as sa

from aio.db.database import make_engine
from benchmarks.live_server import aio_command, free_port, server_env, start_server
from tests.test_server_api import HELLO, log_rows

BACKEND_MODEL = "backend-model"


@pytest.fixture(scope="module")
def backend(tmp_path_factory, checkpoint_dir):
    """An AIO server standing in for a vLLM box: it serves one tier, the checkpoint the large tier uses."""
    home = tmp_path_factory.mktemp("backend")
    path = checkpoint_dir("llama", max_position_embeddings=1024, hidden_size=96, num_layers=2)
    config = home / "aio.toml"
    config.write_text(f'[tiers.small]\npath = "{path}"\nmodel = "{BACKEND_MODEL}"\nmax_model_len = 512\n'
                      f"kv_cache_bytes = {16 << 20}\n")
    live = start_server(config, home, f"sqlite:///{home / 'aio.db'}")
    yield live
    live.stop()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, checkpoint_dir, backend, postgres_database_factory):
    home = tmp_path_factory.mktemp("deployment")
    database_url = postgres_database_factory("deployment")
    upgrade = subprocess.run(aio_command("db", "upgrade"), env=server_env(home, database_url, "k"),
                             capture_output=True, text=True, timeout=120)
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    small = checkpoint_dir("llama", max_position_embeddings=1024, hidden_size=64, num_layers=2)
    config = home / "aio.toml"
    config.write_text(
        f'[tiers.small]\npath = "{small}"\nmax_model_len = 256\nkv_cache_bytes = {16 << 20}\n'
        "input_price_per_million = 0.1\noutput_price_per_million = 0.1\n\n"
        f'[tiers.medium]\nbase_url = "http://127.0.0.1:{free_port()}/v1"\nmodel = "nobody-home"\nmax_model_len = 512\n\n'
        f'[tiers.large]\nbase_url = "{backend.api_url}"\nmodel = "{BACKEND_MODEL}"\n'
        "input_price_per_million = 3.0\noutput_price_per_million = 6.0\n")
    live = start_server(config, home, database_url)
    yield live
    live.stop()


def test_a_remote_tier_answers_like_its_server(deployment, backend):
    here = openai.OpenAI(base_url=deployment.api_url, api_key="x", max_retries=0)
    there = openai.OpenAI(base_url=backend.api_url, api_key="x", max_retries=0)
    kwargs = dict(messages=HELLO, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    direct = there.chat.completions.create(model=BACKEND_MODEL, **kwargs)
    raw = here.chat.completions.with_raw_response.create(model="large", **kwargs)
    proxied = raw.parse()
    assert raw.headers["x-aio-tier"] == "large" and proxied.model == BACKEND_MODEL
    assert proxied.choices[0].message.content == direct.choices[0].message.content
    assert proxied.usage.completion_tokens == direct.usage.completion_tokens == 8
    assert proxied.usage.prompt_tokens == direct.usage.prompt_tokens
    assert float(raw.headers["x-aio-cost-usd"]) == pytest.approx(
        (proxied.usage.prompt_tokens * 3.0 + 8 * 6.0) / 1e6, rel=1e-6)
    streamed = here.chat.completions.create(model="large", stream=True, **kwargs)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == \
        direct.choices[0].message.content
    models = {m.id: m for m in here.models.list().data}
    assert models["large"].max_model_len == 512  # asked from the backend's /v1/models


def test_a_dead_remote_tier_is_marked_down_and_its_requests_fall_back_to_a_larger_tier(deployment):
    client = openai.OpenAI(base_url=deployment.api_url, api_key="x", max_retries=0)
    for _ in range(2):  # the first finds the tier dead; the second skips it up front
        raw = client.chat.completions.with_raw_response.create(model="medium", messages=HELLO, max_tokens=2)
        assert raw.headers["x-aio-tier"] == "large" and raw.headers["x-aio-routing-reason"] == "fallback"
        assert raw.parse().model == BACKEND_MODEL
    ready = httpx.get(deployment.base_url + "/ready")
    assert ready.status_code == 503 and ready.json()["checks"]["tiers"]["medium"] == "unavailable"


def test_every_request_is_logged_once_in_postgres_and_flushed_on_shutdown(deployment):
    client = openai.OpenAI(base_url=deployment.api_url, api_key="x", max_retries=0)
    ids = []
    for i in range(8):
        raw = client.chat.completions.with_raw_response.create(
            model=("small", "large")[i % 2], messages=[{"role": "user", "content": f"q{i}"}], max_tokens=2,
            stream=i % 4 == 1)
        if i % 4 == 1:
            list(raw.parse())
        ids.append(raw.headers["x-request-id"])
    # SIGTERM: uvicorn shuts down gracefully (the log writer flushes), then re-raises the signal to exit.
    assert deployment.stop() in (0, -signal.SIGTERM)
    rows = log_rows(deployment, ids, timeout=0)
    assert set(rows) == set(ids)
    engine = make_engine(deployment.database_url)
    with engine.connect() as c:
        duplicates = c.execute(sa.text("SELECT request_id FROM requests GROUP BY request_id HAVING COUNT(*) > 1")).all()
        by_tier = dict(c.execute(sa.text("SELECT tier, SUM(num_requests) FROM daily_aggregates GROUP BY tier")).all())
        logged = dict(c.execute(sa.text("SELECT tier, COUNT(*) FROM requests WHERE tier IS NOT NULL "
                                        "GROUP BY tier")).all())
    engine.dispose()
    assert duplicates == []
    assert {k: int(v) for k, v in by_tier.items() if k in logged} == {k: int(v) for k, v in logged.items()}
    for request_id in ids:
        assert rows[request_id]["tier"] in ("small", "large") and rows[request_id]["status"] == "ok"
        assert json.loads(rows[request_id]["prompt"])[0]["role"] == "user"
