"""One request must never hurt another, against a live `aio serve` with real keys: innocent streaming and
non-streaming traffic from one key while another key sends every poison of the blast-radius report, the earlier
hostile input and fuzzed bodies. No innocent request fails or is cut, no tier is marked down, no poison gets a 5xx,
and the server is ready after. (The longer run: `python -m benchmarks.blast_radius`.)"""
from __future__ import annotations

import json

import httpx
import pytest

from benchmarks.blast_radius import report, run
from benchmarks.live_server import create_key, start_server
from benchmarks.poisons import SELF_REQUIRED


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("blast")
    database = f"sqlite:///{home / 'aio.db'}"
    keys = [create_key(home, database, name) for name in ("innocent", "poison")]
    live = start_server(None, home, database, AIO_DEMO_MODEL="random", AIO_OPEN_ENDPOINT="false")
    yield live, keys
    live.stop()


def test_poison_from_one_key_hurts_no_request_of_another(server):
    live, (innocent, poison) = server
    outcome = run(live.base_url, innocent, poison, duration_s=12, clients=4, fuzz_examples=40,
                  server_log=live.output, admin_key=live.admin_key, process_alive=lambda: live.process.poll() is None)
    assert outcome.goal_met, report(outcome, 12)
    statuses = {name: status for name, status in outcome.poison_statuses}
    assert statuses["recursive schema ($ref #)"] == 400 and statuses["lone surrogate in content"] == 400
    refused = [name for name in statuses if name[:2] in ("A:", "B:", "C:", "F:", "I:", "G:", "H:")
               or name == "J: repetition_penalty 1e-300"]
    assert {name: statuses[name] for name in refused if not 400 <= statuses[name] < 500} == \
        {"F: an $anchor ref in a forced tool (valid)": 200}
    assert statuses["J: temperature 1e-300 (valid: greedy)"] == statuses["K: NUL in content (valid)"] == 200
    assert statuses["D: 16 endless streamed choices"] == 200 and outcome.process_alive
    assert "engine loop failed" not in live.output()


def test_poison_errors_name_the_cause_and_nothing_internal(server):
    live, (_, poison) = server
    headers = {"authorization": f"Bearer {poison}", "content-type": "application/json"}
    body = {"model": "small", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SELF_REQUIRED}}}
    error = httpx.post(live.base_url + "/v1/chat/completions", json=body, headers=headers, timeout=60).json()["error"]
    assert error["code"] == "invalid_schema" and "$ref cycle # -> #" in error["message"]
    surrogate = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "ok \ud800"}]})
    error = httpx.post(live.base_url + "/v1/chat/completions", content=surrogate, headers=headers,
                       timeout=60).json()["error"]
    assert error["code"] == "invalid_text" and error["param"] == "messages.0.content"
    assert "surrogate" in error["message"] and "Error" not in error["message"]
