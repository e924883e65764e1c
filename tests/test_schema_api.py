"""Schemas the grammar library cannot take, through the chat endpoint (in process: the real route and ChatService
over a tiny random model's engine). The issue's probe, a 1,000-link `$defs` chain that segfaulted the whole
server, is a 400 `invalid_schema` naming the limit, in response_format and in a tool's parameters, and the server
answers the next request (in a subprocess: a regression fails this test instead of killing pytest). A grammar
that gives up mid-generation is the same 400, with its param and code, streamed or not."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.inprocess import Call, chat_app
from tiers.engine import structured_output
from tiers.engine.llm_engine import Engine
from tiers.serving.pool import LocalTier

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]
HELLO = [{"role": "user", "content": "Hello"}]
SELF_REQUIRED = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}

PROBE_SCRIPT = """
import asyncio, json, sys
from tests.inprocess import Call, chat_app
from tests.test_schema_limits import property_chain
from tiers.engine.llm_engine import Engine
from tiers.serving.pool import LocalTier

LONG = 65_536
engine = Engine.from_pretrained(sys.argv[1], max_model_len=LONG)  # the tool's schema in the prompt fits
app, _, _ = chat_app([LocalTier("small", engine, "tiny")])
probe = property_chain(1_000)
deep = {"type": "function", "function": {"name": "deep", "parameters": probe}}
bodies = {
    "response_format": {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": probe}}},
    "forced tool": {"tools": [deep], "tool_choice": {"type": "function", "function": {"name": "deep"}}},
    "required": {"tools": [deep], "tool_choice": "required"},
    "plain": {},
}

async def main():
    answers = {}
    for name, extra in bodies.items():
        call = Call(app, {"model": "small", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                          **extra})
        await call.finished()
        answers[name] = [call.status, call.json()]
    return answers

print(json.dumps(asyncio.run(main())))
engine.close()
"""


def test_the_probe_is_a_400_and_the_server_lives_on(checkpoint_dir):
    """A context long enough for the probe in a tool's parameters (~56k prompt tokens) to reach the compiler."""
    path = checkpoint_dir("llama", max_position_embeddings=65_536)
    done = subprocess.run([sys.executable, "-c", PROBE_SCRIPT, str(path)], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    for name, param in (("response_format", "response_format"), ("forced tool", "tools"), ("required", "tools")):
        status, body = answers[name]
        assert status == 400, (name, body)
        error = body["error"]
        assert (error["param"], error["code"], error["type"]) == (param, "invalid_schema", "invalid_request_error")
        assert "schema objects deep once its $refs are followed" in error["message"]
        assert "the limit is 1,000" in error["message"]
    assert answers["response_format"][1]["error"]["message"].startswith("the JSON schema nests 2,002 schema objects")
    assert answers["plain"][0] == 200


@pytest.fixture(scope="module")
def served(checkpoint_dir):
    engine = Engine.from_pretrained(checkpoint_dir("llama"), max_model_len=1024)  # a tool prompt fits
    app, _, log = chat_app([LocalTier("small", engine, "tiny")])
    yield app, log
    engine.close()


def sent_error(call: Call) -> tuple[int, dict]:
    """(the HTTP status, the error object): refused before the first token, the response is the error; after it,
    the stream's last data event is (either is right: where the grammar gives up is the model's doing)."""
    if call.status != 200:
        return call.status, call.json()["error"]
    events = [json.loads(e.removeprefix("data: ")) for e in call.events if e != "data: [DONE]"]
    assert "error" in events[-1], events[-1]
    return 200, events[-1]["error"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("extra, param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "endless", "schema": SELF_REQUIRED}}},
     "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "endless", "parameters": SELF_REQUIRED}}],
      "tool_choice": {"type": "function", "function": {"name": "endless"}}}, "tools"),
])
def test_a_grammar_that_gives_up_mid_generation_is_a_400_naming_the_schema(served, monkeypatch, stream, extra,
                                                                         param):
    """The recursive schema of the blast-radius report, let past the up-front check: llguidance gives up after its
    first tokens (it had a null param and code)."""
    app, log = served
    monkeypatch.setattr(structured_output, "_check_recursion", lambda graph: None)
    before = len(log.records)

    async def main() -> Call:
        call = Call(app, {"model": "small", "messages": HELLO, "max_tokens": 40, "temperature": 0.0,
                          "stream": stream, **extra})
        await call.finished()
        return call

    status, error = sent_error(asyncio.run(main()))
    assert status == 400 or stream
    assert (error["param"], error["code"], error["type"]) == (param, "invalid_schema", "invalid_request_error")
    assert error["message"].startswith("structured output could not go on")
    assert log.records[before].http_status == 400
