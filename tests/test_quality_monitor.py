"""The quality monitor: sampling, comparison, threshold control, the replay bound, and live servers."""
from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import openai
import pytest
import sqlalchemy as sa

from quality_monitor import (AnswerComparer, Candidate, ControllerSettings, QualityMonitor, ReplayResult, Sampler,
                             ThresholdController, structured_match)
from benchmarks.live_server import start_server
from tests.test_server_api import log_rows


# ---- sampling -------------------------------------------------------------------------------------------------

def test_sampling_rate_is_deterministic_per_request_and_favours_the_threshold():
    sampler = Sampler(0.05)
    ids = [f"req-{i}" for i in range(20000)]
    picked = [sampler.should_sample(i, "small") for i in ids]
    assert 0.04 < np.mean(picked) < 0.06
    assert picked == [sampler.should_sample(i, "small") for i in ids]  # every replica decides alike
    near = np.mean([sampler.should_sample(i, "small", routing_score=0.52, threshold=0.5) for i in ids])
    far = np.mean([sampler.should_sample(i, "small", routing_score=0.95, threshold=0.5) for i in ids])
    assert near > 0.08 and far < 0.045
    assert all(Sampler(1.0).should_sample(i, "medium", routing_score=0.99, threshold=0.5) for i in ids[:500])
    assert not any(Sampler(1.0).should_sample(i, "large") for i in ids[:500])  # the reference is not verified


# ---- comparison -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer, reference, similarity, method", [
    ("The answer is 42.", "42", 1.0, "number"),
    ("The answer is 1,250", "result: 1250.0", 1.0, "number"),
    ("41", "The answer is 42", 0.0, "number"),
    ("(B)", "B", 1.0, "choice"),
    ("Answer: C", "B.", 0.0, "choice"),
    ('{"a": 1, "b": [2, 3]}', '```json\n{"b": [2, 3], "a": 1}\n```', 1.0, "json"),
    ('{"a": 1}', '{"a": 2}', 0.0, "json"),
    ("Paris.", "paris", 1.0, "exact"),
    ("f reverses the string and adds its first letter.\nAnswer: 'cbaa'", "Step 1 ...\n**Answer:** 'cbaa'", 1.0,
     "final_answer"),
    ("The result is the reversed string plus its first character.\nAnswer: 'cba'", "Answer: 'cbaa'", 0.0,
     "final_answer"),
    ("Counting the elements one by one gives\nAnswer: [1, 2, 5, 9]", "Sorted, this is:\nAnswer: [1,2,5,9]", 1.0,
     "final_answer"),
    ("Monday comes after Sunday, so\nAnswer: It is Monday.", "The final answer is: monday", 1.0, "final_answer"),
    ("Thirty days hath September... so\nAnswer: 30 days", "Answer: 31", 0.0, "final_answer"),
])
def test_structured_and_short_answers_are_compared_exactly(answer, reference, similarity, method):
    result = structured_match(answer, reference)
    assert (result.similarity, result.method) == (similarity, method)


@pytest.fixture(scope="module")
def comparer():
    return AnswerComparer()


def test_the_final_answer_rule_can_be_left_out_to_compare_with_verdicts_made_before_it():
    answer, reference = "It reverses s, then adds s[0].\nAnswer: 'cba'", "Reversed plus first letter.\nAnswer: 'cbaa'"
    assert structured_match(answer, reference).method == "final_answer"
    assert structured_match(answer, reference, final_answers=False) is None  # cosine decided these before


def test_replies_without_a_marked_final_answer_are_not_compared_as_final_answers(comparer):
    hello, hi = "Hello! How can I help you today?", "Hi there, what can I do for you?"
    code = "```python\ndef add(a, b):\n    return a + b\n```"
    other_code = "```python\ndef add(x, y):\n    return x + y\n```"
    assert structured_match(hello, hi) is None
    assert structured_match(code, other_code) is None
    assert comparer.compare(code, other_code).method == "cosine"


def test_free_text_is_compared_by_meaning(comparer):
    reference = "Water boils at 100 degrees Celsius at sea level because its vapour pressure then equals 1 atm."
    paraphrase = "At sea level, water boils at 100 °C, since that is where its vapor pressure reaches one atmosphere."
    unrelated = "The French Revolution began in 1789 with the storming of the Bastille in Paris."
    close, far = comparer.compare(paraphrase, reference), comparer.compare(unrelated, reference)
    assert close.method == far.method == "cosine"
    assert close.similarity > 0.85 > 0.3 > far.similarity


# ---- threshold control ----------------------------------------------------------------------------------------

def test_failures_raise_the_tier_threshold_once_per_cooldown_and_recovery_lowers_it():
    controller = ThresholdController(ControllerSettings(window=20, min_verdicts=10, cooldown=5, step=0.1,
                                                        max_offset=0.2))
    changes = [controller.record("small", passed=i % 3 != 0) for i in range(10)]  # 4 of 10 fail: 40%
    assert [c for c in changes if c] and changes[-1].new_offset == pytest.approx(0.1) and changes[-1].retrain_due
    more = [c for c in (controller.record("small", False) for _ in range(20)) if c]
    assert [c.new_offset for c in more] == [pytest.approx(0.2)]  # bounded by max_offset
    recovered = [c for c in (controller.record("small", True) for _ in range(40)) if c]
    assert recovered and all(not c.retrain_due for c in recovered) and controller.offsets["small"] < 0.2
    good = ThresholdController(ControllerSettings(window=20, min_verdicts=20, cooldown=5))
    assert all(good.record("medium", passed=i % 10 != 0) is None for i in range(50))  # 10% failures: fine


class MemoryStore:
    def __init__(self):
        self.verdicts, self.changes, self.current = [], [], {}

    def save(self, verdict):
        self.verdicts.append(verdict)

    def recent_outcomes(self, tier, limit):
        return []

    def offsets(self):
        return dict(self.current)

    def shift(self, change, max_offset):
        self.changes.append(change)
        offset = self.current.get(change.tier, 0.0) + change.new_offset - change.old_offset
        self.current[change.tier] = min(max_offset, max(0.0, offset))
        return dict(self.current)


def candidate(i: int, tier: str = "small", answer: str = "4") -> Candidate:
    return Candidate(f"r{i}", tier, [{"role": "user", "content": "2+2?"}], answer, 16)


def test_the_queue_is_bounded_and_the_hourly_budget_holds():
    async def scenario():
        release = asyncio.Event()

        async def slow_replayer(c):
            await release.wait()
            return ReplayResult("4", "big", 10, 5, 0.001)

        store = MemoryStore()
        monitor = QualityMonitor(slow_replayer, store, sampler=Sampler(1.0), queue_size=3,
                                 budget_tokens_per_hour=30, max_concurrent=1)
        monitor.start()
        accepted = [monitor.offer(candidate(0))]
        await asyncio.sleep(0.05)  # the worker takes it and waits in the replay
        accepted += [monitor.offer(candidate(i)) for i in range(1, 6)]
        release.set()
        await monitor.drain(10)
        after_budget = monitor.offer(candidate(99))  # 4 replays x 15 tokens spent: over the budget of 30
        await monitor.stop()
        return accepted, after_budget, monitor.stats, store

    accepted, after_budget, stats, store = asyncio.run(scenario())
    assert accepted == [True, True, True, True, False, False]  # one replaying + three queued
    assert stats.dropped["queue_full"] == 2 and not after_budget and stats.dropped["budget"] == 1
    assert len(store.verdicts) == 4 and stats.judge_cost_usd == pytest.approx(0.004)


def test_a_bad_tier_moves_thresholds_and_asks_for_a_retrain_a_good_one_does_not():
    async def run(answer: str):
        async def replayer(c):
            return ReplayResult("4", "big", 10, 1, 0.0)

        store = MemoryStore()
        controller = ThresholdController(ControllerSettings(window=10, min_verdicts=10, cooldown=10))
        monitor = QualityMonitor(replayer, store, sampler=Sampler(1.0), controller=controller, queue_size=100)
        monitor.start()
        for i in range(20):
            monitor.offer(candidate(i, answer=answer))
        await monitor.drain(30)
        await monitor.stop()
        return store

    bad = asyncio.run(run("a purple elephant"))
    assert len(bad.verdicts) == 20 and not any(v.passed for v in bad.verdicts)
    assert bad.current["small"] > 0 and all(c.retrain_due for c in bad.changes)
    good = asyncio.run(run("4"))
    assert all(v.passed for v in good.verdicts) and good.changes == [] and good.current == {}


# ---- the replay bound: live requests are scheduled in the first step after they arrive -----------------------

def test_replays_never_delay_live_requests_by_more_than_the_step_in_progress(llama_path):
    from tiers import Engine, SamplingParams

    engine = Engine.from_pretrained(llama_path, max_num_seqs=2, max_num_batched_tokens=64)
    long_prompt = list(range(5, 200))
    replay = SamplingParams(max_tokens=200, temperature=0, ignore_eos=True)
    live = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)

    def steps_to_first_token(request_id: str) -> int:
        submitted = engine.num_steps
        engine.add_request([7, 8, 9, 10, 11], live, request_id=request_id, stream=True)
        while True:
            outputs = engine.step()
            if any(o.request_id == request_id and o.token_ids for o in outputs):
                return engine.num_steps - submitted

    baseline = steps_to_first_token("alone")
    while engine.has_unfinished_requests():
        engine.step()
    for i in range(3):  # more replays than seats, one in chunked prefill
        engine.add_request(long_prompt, replay, request_id=f"replay-{i}", priority=10)
    for _ in range(3):
        engine.step()
    started = time.perf_counter()
    with_replays = steps_to_first_token("live")
    seconds = time.perf_counter() - started
    print(f"live TTFT: {baseline} step(s) alone, {with_replays} with 3 replays in flight ({seconds * 1000:.1f} ms)")
    assert baseline == with_replays == 1
    engine.abort("live")
    for i in range(3):
        engine.abort(f"replay-{i}")
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


# ---- live servers ---------------------------------------------------------------------------------------------

MONITOR_ENV = dict(AIO_QUALITY_SAMPLE_RATE="1.0", AIO_QUALITY_WINDOW="6", AIO_QUALITY_MIN_VERDICTS="6",
                   AIO_QUALITY_COOLDOWN="6", AIO_QUALITY_STEP="0.5", AIO_QUALITY_MAX_OFFSET="0.5",
                   AIO_CLASSIFIER_POLL_INTERVAL_S="0.3")


def verifications(database_url: str) -> list[dict]:
    from aio.db.database import make_engine

    engine = make_engine(database_url)
    try:
        with engine.connect() as c:
            return [dict(r) for r in c.execute(sa.text("SELECT * FROM verifications")).mappings()]
    finally:
        engine.dispose()


def wait_for(predicate, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out")


def metric(server, line_start: str) -> float:
    lines = [line for line in httpx.get(server.base_url + "/metrics").text.splitlines() if line.startswith(line_start)]
    return sum(float(line.split()[-1]) for line in lines)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """`aio serve` with no tiers configured, on the random demo tiers (random weights: small answers disagree with
    large; the real default serves one model at three precisions, whose answers agree: test_embedded_default)."""
    home = tmp_path_factory.mktemp("embedded")
    live = start_server(None, home, f"sqlite:///{home / 'aio.db'}", AIO_DEMO_MODEL="random", **MONITOR_ENV)
    yield live
    live.stop()


def test_every_low_tier_answer_is_verified_and_a_bad_tier_moves_traffic_up(embedded):
    client = openai.OpenAI(base_url=embedded.api_url, api_key="x", max_retries=0)
    # Three different trivial prompts: a repeat of a prompt whose verification failed would route up
    # (recent-failure routing, test_routing_conversation).
    before = [client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": text}], max_tokens=4).headers["x-aio-tier"]
        for text in ("hi", "What is 2+2?", "Say thanks.")]
    assert before == ["small"] * 3
    ids = []
    for i in range(8):
        raw = client.chat.completions.with_raw_response.create(
            model=("small", "medium")[i % 2], messages=[{"role": "user", "content": f"Name a colour ({i})."}],
            max_tokens=12, temperature=0)
        ids.append(raw.headers["x-request-id"])
    rows = wait_for(lambda: (v := verifications(embedded.database_url)) and
                    {r["request_id"] for r in v} >= set(ids) and v)
    for row in rows:
        assert row["tier"] in ("small", "medium") and row["reference_tier"] == "large"
        assert 0.0 <= row["similarity"] <= 1.0 and row["passed"] in (True, False, 0, 1)
        assert row["reference_answer"] is not None and row["judge_cost_usd"] > 0
    # random small weights disagree with random large ones: the small tier fails, its threshold rises
    state = wait_for(lambda: (s := _router_state(embedded.database_url)).offsets.get("small") and s)
    assert state.offsets["small"] == pytest.approx(0.5) and state.retrain_due_at is not None
    time.sleep(1.0)
    after = [client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "hi"}], max_tokens=4).headers["x-aio-tier"]
        for _ in range(3)]
    assert "small" not in after
    # replays are not user traffic: not in requests, not in the request metrics, costs apart
    user_requests = 3 + 8 + 3
    logged = log_rows(embedded, ids)
    assert len(logged) == 8
    wait_for(lambda: _count(embedded.database_url, "SELECT COUNT(*) FROM requests") >= user_requests, 10)
    time.sleep(1.0)  # a replay written as a request would show up here by now
    assert _count(embedded.database_url, "SELECT COUNT(*) FROM requests") == user_requests
    assert metric(embedded, "aio:requests_total{") == user_requests
    assert metric(embedded, "aio:judge_cost_usd_total") > 0
    assert metric(embedded, "aio:quality_verdicts_total{") >= 8
    unverified = ("SELECT COUNT(*) FROM requests r WHERE r.tier IN ('small', 'medium') AND NOT EXISTS "
                  "(SELECT 1 FROM verifications v WHERE v.request_id = r.request_id)")
    wait_for(lambda: _count(embedded.database_url, unverified) == 0)  # every low-tier answer, auto-routed too
    live_cost = _count(embedded.database_url, "SELECT SUM(cost_usd) FROM requests")
    assert metric(embedded, "aio:cost_usd_total{") == pytest.approx(live_cost, rel=1e-6)


def _router_state(database_url):
    from aio.routing import registry
    from aio.db.database import make_engine

    engine = make_engine(database_url)
    try:
        return registry.router_state(engine)
    finally:
        engine.dispose()


def _count(database_url, sql):
    from aio.db.database import make_engine

    engine = make_engine(database_url)
    try:
        with engine.connect() as c:
            return c.execute(sa.text(sql)).scalar()
    finally:
        engine.dispose()


def test_a_good_small_tier_passes_and_nothing_moves(tmp_path, checkpoint_dir):
    path = checkpoint_dir("llama")
    config = tmp_path / "aio.toml"
    config.write_text("".join(f'[tiers.{t}]\npath = "{path}"\nkv_cache_bytes = {8 << 20}\n\n'
                              for t in ("small", "large")))  # the same model: greedy answers agree
    server = start_server(config, tmp_path, f"sqlite:///{tmp_path / 'aio.db'}", **MONITOR_ENV)
    try:
        client = openai.OpenAI(base_url=server.api_url, api_key="x", max_retries=0)
        for i in range(8):
            client.chat.completions.create(model="small", messages=[{"role": "user", "content": f"Say {i}."}],
                                           max_tokens=10, temperature=0)
        rows = wait_for(lambda: len(v := verifications(server.database_url)) >= 8 and v)
        assert all(r["passed"] for r in rows) and all(r["similarity"] >= 0.85 for r in rows)
        state = _router_state(server.database_url)
        assert not state.offsets.get("small") and state.retrain_due_at is None
    finally:
        server.stop()


def test_the_monitor_as_its_own_process(tmp_path, checkpoint_dir):
    import subprocess

    from benchmarks.live_server import aio_command, server_env

    path = checkpoint_dir("llama")
    config = tmp_path / "aio.toml"
    config.write_text("".join(f'[tiers.{t}]\npath = "{path}"\nkv_cache_bytes = {8 << 20}\n\n'
                              for t in ("small", "large")))
    database_url = f"sqlite:///{tmp_path / 'aio.db'}"
    env = {**MONITOR_ENV, "AIO_MONITOR_MODE": "external"}
    server = start_server(config, tmp_path, database_url, **env)
    try:
        client = openai.OpenAI(base_url=server.api_url, api_key="x", max_retries=0)
        ids = [client.chat.completions.with_raw_response.create(
            model="small", messages=[{"role": "user", "content": f"Count to {i}."}], max_tokens=8, temperature=0)
            .headers["x-request-id"] for i in range(4)]
        log_rows(server, ids)
        time.sleep(1.0)
        assert verifications(database_url) == []  # monitor_mode = external: the server verifies nothing
        result = subprocess.run(aio_command("monitor", "--once", "--config", str(config)),
                                env=server_env(tmp_path, database_url, "k", **env), capture_output=True, text=True,
                                timeout=180)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "verified 4 answers" in result.stdout
        rows = verifications(database_url)
        assert sorted(r["request_id"] for r in rows) == sorted(ids) and all(r["passed"] for r in rows)
    finally:
        server.stop()


@pytest.mark.parametrize("store_text", [True, False])
def test_redaction_keeps_both_answers_out_of_verifications(database_url, store_text):
    """log_prompts = false: the verdict, similarity and costs are stored, neither answer is."""
    from aio.db.database import make_engine
    from aio.db.migrate import upgrade
    from aio.db.models import Request, Verification
    from aio.monitoring import SqlVerdictStore
    from quality_monitor import Verdict
    from sqlalchemy.orm import Session

    engine = make_engine(database_url)
    upgrade(engine)
    with Session(engine) as session, session.begin():
        session.add(Request(request_id="r1", status="ok", tier="small"))
    verdict = Verdict(candidate(1, answer="the secret is hunter2"), "large",
                      ReplayResult("hunter2 is the secret", "big", 10, 4, 0.002), 0.91, "cosine", True)
    SqlVerdictStore(engine, store_text=store_text).save(verdict)
    with Session(engine) as session:
        row = session.scalars(sa.select(Verification)).one()
    engine.dispose()
    assert row.passed and row.similarity == pytest.approx(0.91) and row.judge_cost_usd == pytest.approx(0.002)
    if store_text:
        assert (row.answer, row.reference_answer) == ("the secret is hunter2", "hunter2 is the secret")
    else:
        assert row.answer is None and row.reference_answer is None
