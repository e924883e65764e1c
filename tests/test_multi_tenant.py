"""Per-key limits and fair queuing with several keys; oversized prompts; slow clients; data at rest. On a live
server, except where a request must stay in flight while the test looks: those run in process with the engine's
steps gated (tests/inprocess.py), so they never race the engine."""
from __future__ import annotations

import asyncio
import socket
import subprocess
import time

import httpx
import pytest

from benchmarks.live_server import aio_command, create_key, server_env, start_server
from tests.inprocess import Call, StepGate, chat_app, engine_idle, limited_key, until
from tests.test_server_api import HELLO, log_rows
from tiers.engine.llm_engine import Engine
from tiers.serving.pool import LocalTier


@pytest.fixture(scope="module")
def tenants(tmp_path_factory, checkpoint_dir):
    home = tmp_path_factory.mktemp("tenants")
    database_url = f"sqlite:///{home / 'aio.db'}"
    path = checkpoint_dir("llama", hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=4, intermediate_size=512,
                          max_position_embeddings=1024)
    config = home / "aio.toml"
    config.write_text("max_body_bytes = 8388608\nheader_timeout_s = 1.0\nbody_timeout_s = 1.0\n\n" + "".join(
        f'[tiers.{tier}]\npath = "{path}"\nmax_model_len = 1024\nkv_cache_bytes = {32 << 20}\nmax_num_seqs = 1\n'
        "max_queue = 8\ninput_price_per_million = 1.0\noutput_price_per_million = 2.0\n\n"
        for tier in ("small", "large")))
    keys = {"rpm": create_key(home, database_url, "rpm", "--rpm", "3"),
            "tpm": create_key(home, database_url, "tpm", "--tpm", "10"),
            "light": create_key(home, database_url, "light")}
    server = start_server(config, home, database_url, AIO_OPEN_ENDPOINT="false", AIO_MONITOR_MODE="off")
    server.keys, server.home, server.config = keys, home, config
    yield server
    server.stop()


def post(server, key: str, **body) -> httpx.Response:
    return httpx.post(server.api_url + "/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=60,
                      json={"model": "small", "messages": HELLO, "max_tokens": 2, **body})


def test_requests_per_minute_per_key_with_openai_headers_and_a_live_update(tenants):
    keys = tenants.keys
    answered = [post(tenants, keys["rpm"]) for _ in range(3)]
    assert [r.status_code for r in answered] == [200] * 3
    assert answered[0].headers["x-ratelimit-limit-requests"] == "3"
    assert [r.headers["x-ratelimit-remaining-requests"] for r in answered] == ["2", "1", "0"]
    refused = post(tenants, keys["rpm"])
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(refused.headers["retry-after"]) <= 60 and refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert post(tenants, keys["light"]).status_code == 200  # another key is not affected
    done = subprocess.run(aio_command("keys", "update", "rpm", "--rpm", "0"), capture_output=True, text=True,
                          env=server_env(tenants.home, tenants.database_url, tenants.admin_key), timeout=60)
    assert done.returncode == 0 and "no limits" in done.stdout, done.stderr
    time.sleep(5.5)  # the key cache
    assert post(tenants, keys["rpm"]).status_code == 200


def test_tokens_per_minute_per_key(tenants):
    first = post(tenants, tenants.keys["tpm"])
    assert first.status_code == 200 and first.headers["x-ratelimit-limit-tokens"] == "10"
    refused = post(tenants, tenants.keys["tpm"])  # the first used more than 10 prompt + completion tokens
    assert refused.status_code == 429 and refused.headers["x-ratelimit-remaining-tokens"] == "0"
    assert "10 tokens per minute" in refused.json()["error"]["message"]


def test_an_oversized_prompt_is_refused_before_tokenizing_and_not_stored_whole(tenants):
    huge = "lorem ipsum " * 350_000  # 4.2 MB: over any tier's context at any tokenizer
    refused = httpx.post(tenants.api_url + "/chat/completions", timeout=120,
                         headers={"Authorization": f"Bearer {tenants.keys['light']}"},
                         json={"model": "auto", "messages": [{"role": "user", "content": huge}]})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    assert "characters" in refused.json()["error"]["message"]
    request_id = refused.headers["x-request-id"]
    row = log_rows(tenants, [request_id])[request_id]
    assert row["status"] == "rejected" and len(row["prompt"]) < 10_000 and "more characters not stored" in row["prompt"]


def test_slow_headers_and_slow_bodies_are_cut_off(tenants):
    host, port = tenants.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as slow_headers:
        slow_headers.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        assert slow_headers.recv(1024) == b""  # closed by the server after header_timeout_s
    with socket.create_connection((host, int(port)), timeout=10) as slow_body:
        slow_body.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100\r\n\r\n{\"model\":")
        answer = b""
        while chunk := slow_body.recv(4096):  # until the server closes the connection
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in answer
    assert httpx.get(tenants.base_url + "/health").status_code == 200


def test_the_home_the_database_and_the_journal_are_private(tenants):
    from aio.server.data_at_rest import mode

    assert mode(tenants.home) == 0o700
    assert mode(tenants.home / "aio.db") == 0o600
    journals = list((tenants.home / "log-spill").glob("journal-*.jsonl"))
    assert journals and all(mode(p) == 0o600 for p in journals) and mode(tenants.home / "log-spill") == 0o700


def test_the_first_command_on_a_fresh_home_creates_it_private(tmp_path):
    """`aio keys create` before any `serve`: the home and the database (key hashes) are this user's alone."""
    from aio.server.data_at_rest import mode

    home = tmp_path / "fresh" / "home"
    create_key(home, f"sqlite:///{home / 'aio.db'}", "first")
    assert mode(home) == 0o700 and mode(home / "aio.db") == 0o600
    assert all(mode(p) == 0o600 for p in home.glob("aio.db-*"))


def test_a_database_made_by_the_library_is_private(tmp_path):
    import sqlalchemy as sa

    from aio.db.database import make_engine
    from aio.server.data_at_rest import mode

    engine = make_engine(f"sqlite:///{tmp_path / 'new' / 'log.db'}")
    with engine.connect() as connection:
        connection.execute(sa.text("CREATE TABLE t (x INTEGER)"))
    assert mode(tmp_path / "new") == 0o700 and mode(tmp_path / "new" / "log.db") == 0o600


@pytest.mark.parametrize("start, end", [("9999-12-30", "9999-12-31"), ("9999-12-31T00:00:00", None),
                                        ("0001-01-01", "0001-01-02")])
def test_a_custom_dashboard_range_at_the_ends_of_the_calendar_is_a_400(start, end):
    from aio.api.errors import APIError
    from aio.reports.ranges import parse_range

    with pytest.raises(APIError) as info:
        parse_range("custom", start, end)
    assert info.value.status_code == 400 and info.value.param == "start"


@pytest.mark.parametrize("admin_key, message", [
    ("short-admin-key", "the admin key has 15 characters; it needs at least 32"),
    ("ab" * 20, "the admin key repeats a few characters (2 distinct)"),
])
def test_weak_admin_keys_are_refused_at_start(tmp_path, admin_key, message):
    done = subprocess.run(aio_command("serve", "--port", "1"), capture_output=True, text=True, timeout=120,
                          env=server_env(tmp_path, f"sqlite:///{tmp_path / 'aio.db'}", admin_key))
    assert done.returncode == 2 and message in done.stderr and admin_key not in done.stdout + done.stderr


def test_a_generated_admin_key_goes_to_a_private_file_not_to_the_output(tmp_path):
    from aio.server.data_at_rest import mode

    server = start_server(None, tmp_path, f"sqlite:///{tmp_path / 'aio.db'}", admin_key="",
                          AIO_DEMO_MODEL="random", AIO_MONITOR_MODE="off")
    try:
        key_file = tmp_path / "admin-key"
        key = key_file.read_text().strip()
        assert mode(key_file) == 0o600 and len(key) >= 32
        assert httpx.get(server.base_url + "/admin/keys", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    finally:
        server.stop()
    assert key not in server.output() and str(key_file) in server.output()


# ---- in process, the engine's steps gated ----------------------------------------------------------------

KEYS = {"streams": limited_key(1, max_streams=1), "heavy": limited_key(2, max_streams=None),
        "light": limited_key(3, max_streams=None), "hog": limited_key(4, max_streams=None)}


def ask(app, key: str, **body) -> Call:
    return Call(app, {"model": "small", "messages": HELLO, "max_tokens": 2, **body}, {"authorization": f"Bearer {key}"})


@pytest.fixture
def one_seat(checkpoint_dir):
    """small runs one sequence at a time and queues 8."""
    engine = Engine.from_pretrained(checkpoint_dir("llama"), max_model_len=256, max_num_seqs=1)
    gate = StepGate(engine)
    app, _, log = chat_app([LocalTier("small", engine, "tiny")], KEYS, max_queue=8)
    yield engine, gate, app, log
    gate.open()
    engine.close()


def test_concurrent_streams_per_key(one_seat):
    engine, gate, app, _ = one_seat

    async def main():
        stream = ask(app, "streams", max_tokens=100, stream=True, ignore_eos=True)
        gate.allow(1)
        await stream.wait_for_events(2)  # it streams, and cannot finish: the engine runs no step more
        second = ask(app, "streams")
        await second.finished()
        assert second.status == 429 and second.response_headers["retry-after"] == "1"
        light = ask(app, "light")  # another key is not limited by this one's
        stream.disconnect()
        await stream.finished()
        gate.open()
        await light.finished()
        assert light.status == 200
        again = ask(app, "streams")  # the ended stream gave its slot back
        await again.finished()
        assert again.status == 200
        await engine_idle(engine)

    asyncio.run(main())


def test_one_key_cannot_fill_a_tier_queue_and_n_counts_against_it(one_seat):
    """A key may hold half of the tier's queue, counted in sequences; and the engine serves a light key's request
    before every waiting sequence of a heavy key (fair sharing), though they came first."""
    engine, gate, app, log = one_seat

    async def main():
        heavy = [ask(app, "heavy", max_tokens=20, n=2, stream=True, ignore_eos=True) for _ in range(2)]
        await until(lambda: engine.stats().num_waiting == 4)  # handed to the engine, which runs no step yet
        refused = ask(app, "heavy", n=2)
        await refused.finished()
        assert refused.status == 429 and refused.json()["error"]["code"] == "queue_share_exceeded"
        light = ask(app, "light")
        await until(lambda: engine.stats().num_waiting == 5)
        too_many = ask(app, "light", n=8)  # 5 waiting + 8 sequences > max_queue 8
        await too_many.finished()
        assert too_many.status == 429 and too_many.json()["error"]["code"] == "queue_full"
        gate.open()
        for call in (light, *heavy):
            await call.finished()
            assert call.status == 200
        await engine_idle(engine)

    asyncio.run(main())
    served = [r for r in log.records if r.status == "ok"]
    assert [r.key_id for r in served] == [KEYS["light"].id] + [KEYS["heavy"].id] * 2


def test_a_key_filling_the_kv_pool_does_not_starve_another_keys_request(checkpoint_dir):
    """One key streams six long choices that fill small's 24 KV blocks; another key's request, arriving then,
    is answered while all six still generate (before fair sharing it waited for them: a 503 after 60 s)."""
    import torch

    from tiers.engine.kv_cache import kv_bytes_per_block
    from tiers.models.checkpoint import open_checkpoint

    path = checkpoint_dir("llama")
    block_bytes = kv_bytes_per_block(open_checkpoint(path).config, 16, torch.float32)
    engine = Engine.from_pretrained(path, max_model_len=256, max_num_seqs=8, kv_cache_bytes=24 * block_bytes)
    gate = StepGate(engine)
    app, _, _ = chat_app([LocalTier("small", engine, "tiny")], KEYS)

    async def main():
        hog = ask(app, "hog", max_tokens=200, n=6, stream=True, ignore_eos=True)
        while engine.stats().num_free_blocks > 0:
            gate.allow(1)
            await gate.ran(gate.steps + 1)
        waiting = engine.stats().num_waiting
        light = ask(app, "light", max_tokens=4, ignore_eos=True)
        await until(lambda: engine.stats().num_waiting == waiting + 1)
        for _ in range(40):
            if light.task.done():
                break
            gate.allow(1)
            await gate.ran(gate.steps + 1)
        await light.finished()
        assert light.status == 200 and light.json()["usage"]["completion_tokens"] == 4
        assert not hog.task.done() and engine.stats().num_running > 1
        hog.disconnect()
        await hog.finished()
        gate.open()
        await engine_idle(engine)

    try:
        asyncio.run(main())
    finally:
        gate.open()
        engine.close()
