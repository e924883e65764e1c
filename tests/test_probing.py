"""aio.probing: tiers answer the probe set, outcomes are stored and resumed, budgets are planned, fingerprints say
which model a measurement belongs to, and shipped measurements are used only by the files they were made with."""
from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import time

import pytest

from aio.db.database import make_engine
from aio.db.migrate import upgrade
from aio.probing.fingerprint import file_sha256, tier_fingerprint
from aio.probing.measure import Measurement, measure
from aio.probing.plan import MIN_TASKS, TierCost, planned_tasks
from aio.probing.runner import ProbeTarget, probe_tier
from aio.probing.shipped import export, import_shipped
from aio.probing.store import ProbeStore
from aio.settings import Prices, TierSettings
from probes.probe_set import probe_set
from tiers.engine.sequence import TokenLogprob
from tiers.serving.pool import ChatChunk


class ScriptedTier:
    """A Tier that answers each task's truth when `knows(task)` and a wrong value otherwise; counts its requests."""

    def __init__(self, name: str, tasks, knows) -> None:
        self.name, self.model, self.max_model_len, self.is_demo = name, f"scripted-{name}", 4096, False
        self.truth = {t.prompt: t for t in tasks}
        self.knows = knows
        self.requests = 0

    async def stream_chat(self, messages, params, request_id, priority=0, options=None):
        self.requests += 1
        task = self.truth[messages[-1]["content"]]
        value = task.truth if self.knows(task) else "no idea"
        yield ChatChunk(delta_text=f"Answer: {value}", num_new_tokens=3,
                        logprobs=[TokenLogprob(1, -0.1, [(1, -0.1), (2, -2.5)])] * 3)
        yield ChatChunk(finish_reason="stop", num_prompt_tokens=40)


@pytest.fixture()
def store(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'aio.db'}")
    upgrade(engine)
    return ProbeStore(engine)


@pytest.fixture(scope="module")
def tasks():
    return [t for t in probe_set(per_cell=3, n_crux=4) if t.kind != "code"]  # ScriptedTier states a final answer


def target(tier, price=1.0):
    return ProbeTarget(tier, f"sha256:{tier.name}", Prices(price, price))


def test_answers_are_scored_against_the_truth_and_stored_once(store, tasks):
    tier = ScriptedTier("small", tasks, lambda t: t.difficulty == 1)
    stored = asyncio.run(probe_tier(target(tier), tasks[:20], store, concurrency=3))
    results = store.results("sha256:small")
    assert stored == len(results) == 20
    assert all(r.correct == (next(t for t in tasks if t.id == r.task_id).difficulty == 1) for r in results)
    assert all(r.token_logprobs == [-0.1] * 3 and r.token_margins == [2.4] * 3 for r in results)
    assert results[0].cost_usd == pytest.approx((40 + 3) / 1e6)
    again = asyncio.run(probe_tier(target(tier), tasks[:20], store))
    assert again == 0 and tier.requests == 20  # a stored task is never asked again


def test_a_stopped_measurement_resumes_with_only_what_is_missing(store, tasks):
    tier = ScriptedTier("small", tasks, lambda t: True)
    asyncio.run(probe_tier(target(tier), tasks[:10], store))
    statuses = asyncio.run(measure([Measurement(target(tier), tier.model)], store, tasks[:30], budget_s=3600))
    assert tier.requests == 30 and statuses["small"].done == 30 and statuses["small"].measured
    asyncio.run(measure([Measurement(target(tier), tier.model)], store, tasks[:30], budget_s=3600))
    assert tier.requests == 30  # measured: not probed again


def test_a_failing_tier_is_marked_failed_and_the_others_are_measured(store, tasks):
    class Broken(ScriptedTier):
        async def stream_chat(self, *args, **kwargs):
            raise ConnectionError("unreachable")
            yield  # makes this an async generator

    good, bad = ScriptedTier("small", tasks, lambda t: True), Broken("large", tasks, lambda t: True)
    statuses = asyncio.run(measure([Measurement(target(good), "g"), Measurement(target(bad), "b")], store,
                                   tasks[:30], budget_s=3600))
    assert statuses["small"].measured and statuses["large"].status == "failed"
    assert "unreachable" in statuses["large"].note


def test_the_plan_gives_local_tiers_a_common_prefix_and_caps_remote_ones():
    costs = [TierCost("small", 1.0), TierCost("medium", 2.0), TierCost("large", 7.0, remote=True)]
    plan = planned_tasks(costs, num_tasks=500, remaining_s=300, done=8, max_remote_tasks=40)
    assert plan == {"small": 108, "medium": 108, "large": 40}
    assert planned_tasks(costs, 500, 0, 8, 40)["small"] == MIN_TASKS  # never fewer than a fit needs
    assert planned_tasks(costs, 60, 10_000, 8, 100) == {"small": 60, "medium": 60, "large": 60}


def test_a_fingerprint_follows_the_file_and_the_answer_settings(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights-1")
    base = TierSettings(path=model)
    first = tier_fingerprint(base, tmp_path)
    assert tier_fingerprint(TierSettings(path=model, max_num_seqs=8), tmp_path) == first  # speed only
    assert tier_fingerprint(TierSettings(path=model, quantization="int8"), tmp_path) != first
    assert file_sha256(model, tmp_path) == hashlib.sha256(b"weights-1").hexdigest()
    model.write_bytes(b"weights-2")
    assert tier_fingerprint(base, tmp_path) != first
    remote = TierSettings(base_url="http://10.0.0.7:8000/v1", model="m")
    assert tier_fingerprint(remote, tmp_path) != tier_fingerprint(
        TierSettings(base_url="http://10.0.0.7:8000/v1", model="other"), tmp_path)


def test_a_shipped_measurement_is_used_only_by_its_own_fingerprint(store, tasks, tmp_path):
    tier = ScriptedTier("small", tasks, lambda t: t.difficulty <= 2)
    asyncio.run(measure([Measurement(target(tier), tier.model)], store, tasks[:25], budget_s=3600))
    shipped = tmp_path / "measurements.jsonl.gz"
    export(store, {"small": "sha256:small"}, shipped)
    fresh_engine = make_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    upgrade(fresh_engine)
    fresh = ProbeStore(fresh_engine)
    assert import_shipped(fresh, {"small": "sha256:other-file"}, shipped) == []
    assert import_shipped(fresh, {"medium": "sha256:small"}, shipped) == ["medium"]
    status = fresh.status("sha256:small")
    assert status.measured and status.source == "shipped" and status.tier == "medium"
    assert [(r.task_id, r.correct) for r in fresh.results("sha256:small")] == \
        [(r.task_id, r.correct) for r in store.results("sha256:small")]


def test_serve_measures_its_tiers_in_the_background_and_then_routes_to_the_target(tmp_path):
    import httpx

    from benchmarks.live_server import start_server

    database = f"sqlite:///{tmp_path / 'aio.db'}"
    env = dict(AIO_DEMO_MODEL="random", AIO_PROBE_ON_START="true", AIO_PROBE_MAX_TASKS="30",
               AIO_PROBE_CONCURRENCY="16")
    server = start_server(None, tmp_path, database, **env)
    try:
        first = httpx.get(server.base_url + "/ready", timeout=30).json()["checks"]["routing"]
        answer = httpx.post(server.api_url + "/chat/completions", timeout=60, json={
            "model": "auto", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 200  # serving goes on while the tiers are probed
        routing = first
        for _ in range(600):
            routing = httpx.get(server.base_url + "/ready", timeout=30).json()["checks"]["routing"]
            if routing["rule"] == "quality_target":
                break
            time.sleep(0.5)
        assert routing["rule"] == "quality_target" and set(routing["tiers_measured"].values()) == {"measured"}
        assert first["rule"] == "quality_knob" or first["tiers_measured"] == routing["tiers_measured"]
        assert all(m["done"] == 30 for m in routing["measurements"].values())
    finally:
        server.stop()
    again = start_server(None, tmp_path, database, **env)
    try:
        routing = httpx.get(again.base_url + "/ready", timeout=30).json()["checks"]["routing"]
        assert routing["rule"] == "quality_target"  # measured once: not probed again, the fit is in force at start
    finally:
        again.stop()


def test_a_shipped_measurement_is_fitted_at_start_so_the_first_request_routes_by_the_target(tmp_path, monkeypatch):
    """The random demo tiers measured once (`aio calibrate`) and their measurement exported as if shipped: a fresh
    home imports it by fingerprint and serves with the quality target from its first request, probing nothing."""
    from fastapi.testclient import TestClient

    from aio.probing import shipped
    from aio.server.app import create_app
    from aio.settings import Settings
    from benchmarks.live_server import aio_command, server_env

    first, fresh = tmp_path / "first", tmp_path / "fresh"
    first.mkdir()
    fresh.mkdir()
    database = f"sqlite:///{first / 'aio.db'}"
    done = subprocess.run(aio_command("calibrate", "--max-tasks", "30", "--concurrency", "16", "--json"),
                          capture_output=True, text=True,
                          env=server_env(first, database, "", AIO_DEMO_MODEL="random"), timeout=600)
    assert done.returncode == 0, done.stderr
    tiers = json.loads(done.stdout[done.stdout.index("{"):])["tiers"]
    export(ProbeStore(make_engine(database)), {t: s["fingerprint"] for t, s in tiers.items()},
           tmp_path / "measurements.jsonl.gz")
    (fresh / "demo").symlink_to(first / "demo")  # the same checkpoint files: the same fingerprints
    monkeypatch.setattr(shipped, "SHIPPED", tmp_path / "measurements.jsonl.gz")
    monkeypatch.setattr("aio.probing.background.import_shipped",
                        lambda store, fps: shipped.import_shipped(store, fps, tmp_path / "measurements.jsonl.gz"))
    settings = Settings(home=fresh, demo_model="random", open_endpoint=True, probe_on_start=True)
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        routing = client.get("/ready").json()["checks"]["routing"]
    assert routing["rule"] == "quality_target"
    assert {m["source"] for m in routing["measurements"].values()} == {"shipped"}
