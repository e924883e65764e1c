"""The confidence cascade with fake tiers whose chosen tokens have a set logprob: who is judged, when an answer is
replaced by a larger tier's, what the client sees, the request's one log row, the roll-ups and the monitor."""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from aio.api.errors import APIError
from aio.chat.cascade import CascadeSettings
from aio.chat.confidence import LOGPROB_FLOOR, confidence
from aio.chat.context import RequestContext
from aio.db import migrate
from aio.db.database import make_engine
from aio.db.log_writer import LogWriter
from aio.db.models import DailyAggregate, Request
from aio.db.records import RequestRecord
from tests.test_chat_service import FakeTier, make_service, request, run
from tiers.engine.errors import RequestFailedError
from tiers.engine.sequence import TokenLogprob
from tiers.serving.pool import TierUnavailableError

ON = CascadeSettings(enabled=True, threshold=-0.5)
SMALL_ONLY = (1.0, 0.0, 0.0)  # the classifier routes everything to small


@dataclass
class ScoredTier(FakeTier):
    """A fake tier whose every chosen token has logprob `logprob`, given only when asked (as the engine does), and
    never by a `remote` one."""
    logprob: float = -0.1
    remote: bool = False

    async def stream_chat(self, messages, params, request_id, priority=0, options=None, tenant=None):
        async for chunk in super().stream_chat(messages, params, request_id, priority, options):
            if chunk.num_new_tokens and params.logprobs is not None and not self.remote:
                chunk.logprobs = [TokenLogprob(7, self.logprob, [])]
            yield chunk


def three(small=-0.1, medium=-0.1, large=-0.1, **small_options):
    return [ScoredTier("small", words=["s1", "s2"], logprob=small, **small_options),
            ScoredTier("medium", words=["m1", "m2", "m3"], logprob=medium),
            ScoredTier("large", words=["l1"], logprob=large)]


def serve(service, **body):
    """Prepares and completes one request; returns the response body and the prepared chat."""
    chat = run(service.prepare(request(**body), RequestContext()))
    return run(service.complete(chat)), chat


def cascades(service, from_tier: str, to_tier: str) -> float:
    value = service.metrics.registry.get_sample_value("aio:cascades_total",
                                                      {"from_tier": from_tier, "to_tier": to_tier})
    return value or 0.0


def cost(tier_index: int, prompt: int, completion: int) -> float:
    """make_service's prices: tier i costs (i + 1) USD per million prompt tokens, 2 (i + 1) per million completion."""
    return (prompt * (tier_index + 1) + completion * 2 * (tier_index + 1)) / 1e6


class FakeMonitor:
    def __init__(self):
        self.offered = []

    def offer(self, candidate):
        self.offered.append(candidate)
        return True


# --- the confidence -----------------------------------------------------------------------------------------------

def test_confidence_is_the_mean_or_the_least_likely_token_and_unknown_without_logprobs():
    assert confidence([-0.1, -0.3, -2.0]) == pytest.approx(-0.8)
    assert confidence([-0.1, -0.3, -2.0], "min") == -2.0
    assert confidence([]) is None and confidence([], "min") is None
    assert confidence([-math.inf, 0.0], "min") == LOGPROB_FLOOR  # finite: it goes into JSON and SQL
    assert confidence([math.nan, 0.0]) == pytest.approx(LOGPROB_FLOOR / 2)
    with pytest.raises(ValueError, match="unknown confidence measure 'max'"):
        confidence([-1.0], "max")


# --- who is judged, who is replaced ----------------------------------------------------------------------------------

def test_a_confident_answer_stays_on_its_tier():
    tiers = three(small=-0.1)
    service, log = make_service(tiers, proba=SMALL_ONLY, cascade=ON)
    body, chat = serve(service)
    assert body["choices"][0]["message"]["content"] == "s1s2" and body["model"] == "model-small"
    assert body["aio"]["confidence"] == pytest.approx(-0.1) and body["aio"]["cascade_from"] is None
    assert not tiers[1].calls and not tiers[2].calls
    [record] = log.records
    assert record.tier == "small" and record.routing_reason == "classifier"
    assert record.confidence == pytest.approx(-0.1) and record.cascade_from_tier is None
    assert record.cascade_cost_usd is None and record.cost_usd == pytest.approx(cost(0, 3, 2))


def test_an_unconfident_answer_is_answered_again_by_the_next_tier_and_logged_once():
    tiers = three(small=-2.0, medium=-0.2)
    service, log = make_service(tiers, proba=SMALL_ONLY, cascade=ON)
    body, chat = serve(service)
    assert body["choices"][0]["message"]["content"] == "m1m2m3" and body["model"] == "model-medium"
    assert body["usage"]["completion_tokens"] == 3  # the served answer's tokens
    first, final = cost(0, 3, 2), cost(1, 3, 3)
    assert body["aio"] == {**body["aio"], "tier": "medium", "routing_reason": "cascade", "cascade_from": "small",
                           "cost_usd": pytest.approx(first + final), "confidence": pytest.approx(-0.2),
                           "baseline_cost_usd": pytest.approx(cost(2, 3, 3))}
    assert chat.tier.name == "medium"  # the route's x-aio-tier header reads it
    assert len(tiers[0].calls) == len(tiers[1].calls) == 1 and not tiers[2].calls
    [record] = log.records
    assert record.status == "ok" and record.tier == "medium" and record.model == "model-medium"
    assert record.routing_reason == "cascade" and record.answer == "m1m2m3" and record.completion_tokens == 3
    assert record.cost_usd == pytest.approx(first + final) and record.cascade_cost_usd == pytest.approx(first)
    assert record.baseline_cost_usd == pytest.approx(cost(2, 3, 3))
    assert record.cascade_from_tier == "small" and record.cascade_confidence == pytest.approx(-2.0)
    assert record.confidence == pytest.approx(-0.2)
    assert cascades(service, "small", "medium") == 1
    assert service.metrics.registry.get_sample_value("vllm:generation_tokens_total",
                                                     {"tier": "small", "model_name": "model-small"}) == 2
    assert service._in_flight == 0


def test_the_cascade_climbs_while_each_answer_is_unconfident_and_the_reference_is_not_verified():
    tiers = three(small=-2.0, medium=-1.0, large=-3.0)
    service, log = make_service(tiers, proba=SMALL_ONLY, cascade=ON)
    service.monitor = FakeMonitor()
    body, _ = serve(service)
    assert body["model"] == "model-large" and body["aio"]["cascade_from"] == "small"
    [record] = log.records
    assert record.tier == "large" and record.cascade_from_tier == "small"
    assert record.cascade_confidence == pytest.approx(-2.0) and record.confidence == pytest.approx(-3.0)
    assert record.cascade_cost_usd == pytest.approx(cost(0, 3, 2) + cost(1, 3, 3))
    assert record.cost_usd == pytest.approx(cost(0, 3, 2) + cost(1, 3, 3) + cost(2, 3, 1))
    assert cascades(service, "small", "medium") == cascades(service, "medium", "large") == 1
    assert service.monitor.offered == []  # the largest tier's answer is the monitor's reference


def test_the_monitor_still_gets_cheap_answers_the_cascade_kept_or_raised_to_a_cheaper_tier():
    service, log = make_service(three(small=-0.1), proba=SMALL_ONLY, cascade=ON)
    service.monitor = FakeMonitor()
    serve(service)
    [candidate] = service.monitor.offered
    assert candidate.tier == "small" and candidate.answer == "s1s2"
    service, log = make_service(three(small=-2.0, medium=-0.1), proba=SMALL_ONLY, cascade=ON)
    service.monitor = FakeMonitor()
    serve(service)
    [candidate] = service.monitor.offered
    assert candidate.tier == "medium" and candidate.answer == "m1m2m3"


def test_the_per_request_switch_and_threshold():
    off = CascadeSettings(enabled=False, threshold=-0.5)
    service, log = make_service(three(small=-2.0), proba=SMALL_ONLY, cascade=off)
    assert serve(service)[0]["model"] == "model-small"  # the server's default: off
    assert serve(service, aio_cascade=True)[0]["model"] == "model-medium"
    assert serve(service, aio_cascade_threshold=-3.0)[0]["model"] == "model-small"  # -2.0 is confident enough
    assert serve(service, aio_cascade_threshold=-1.0)[0]["model"] == "model-medium"
    assert [r.confidence for r in log.records] == [None, pytest.approx(-0.1), pytest.approx(-2.0),
                                                   pytest.approx(-0.1)]
    service, log = make_service(three(small=-2.0), proba=SMALL_ONLY, cascade=ON)
    assert serve(service, aio_cascade=False)[0]["model"] == "model-small"
    assert log.records[0].confidence is None and service.pool.tiers[0].calls[0][1].logprobs is None
    with pytest.raises(APIError) as info:
        run(service.prepare(request(aio_cascade=False, aio_cascade_threshold=-1.0), RequestContext()))
    assert info.value.status_code == 400 and info.value.param == "aio_cascade_threshold"


def test_the_min_measure():
    tiers = three(small=-0.3)
    service, log = make_service(tiers, proba=SMALL_ONLY,
                                cascade=CascadeSettings(enabled=True, threshold=-0.2, measure="min"))
    assert serve(service)[0]["aio"]["cascade_from"] == "small"


# --- what never cascades ---------------------------------------------------------------------------------------------

def test_an_explicitly_named_model_never_cascades_and_asking_for_it_is_a_400():
    tiers = three(small=-5.0)
    service, log = make_service(tiers, proba=SMALL_ONLY, cascade=ON)
    body, chat = serve(service, model="small")
    assert body["model"] == "model-small" and chat.cascade is None and body["aio"]["confidence"] is None
    assert tiers[0].calls[0][1].logprobs is None and not tiers[1].calls
    with pytest.raises(APIError) as info:
        run(service.prepare(request(model="small", aio_cascade=True), RequestContext()))
    assert info.value.status_code == 400 and info.value.param == "aio_cascade"
    assert "named model 'small'" in info.value.message


def test_a_stream_is_served_uncascaded_and_asking_for_the_cascade_on_one_is_a_400():
    tiers = three(small=-5.0)
    service, log = make_service(tiers, proba=SMALL_ONLY, cascade=ON)
    chat = run(service.prepare(request(stream=True), RequestContext()))
    assert chat.cascade is None and chat.params[0].logprobs is None
    for field, value in (("aio_cascade", True), ("aio_cascade_threshold", -1.0)):
        with pytest.raises(APIError) as info:
            run(service.prepare(request(stream=True, **{field: value}), RequestContext()))
        error = info.value
        assert error.status_code == 400 and error.param == field and error.code == "unsupported_parameter"
        assert error.message.startswith(f"{field} is not supported with stream=true")
    assert [r.status for r in log.records] == ["rejected", "rejected"]


@pytest.mark.parametrize("body", [{"response_format": {"type": "json_object"}},
                                  {"tools": [{"type": "function", "function": {"name": "f"}}]},
                                  {"n": 2}])
def test_tools_response_format_and_several_choices_never_cascade(body):
    tiers = three(small=-5.0)
    service, log = make_service(tiers, proba=SMALL_ONLY, cascade=ON)
    response, chat = serve(service, **body)
    assert chat.cascade is None and response["model"] == "model-small" and not tiers[1].calls
    with pytest.raises(APIError) as info:
        run(service.prepare(request(aio_cascade=True, **body), RequestContext()))
    assert info.value.status_code == 400 and info.value.code == "unsupported_parameter"


def test_the_largest_tier_and_answers_without_logprobs_are_never_cascaded():
    tiers = three(large=-5.0)
    service, log = make_service(tiers, proba=(0.0, 0.0, 1.0), cascade=ON)
    body, chat = serve(service, aio_cascade=True)  # routed to large: nothing larger, not an error
    assert body["model"] == "model-large" and chat.cascade is None and log.records[0].confidence is None
    tiers = three(small=-5.0, remote=True)  # a remote tier that returns no logprobs: confidence unknown
    service, log = make_service(tiers, proba=SMALL_ONLY, cascade=ON)
    body, _ = serve(service)
    assert body["model"] == "model-small" and body["aio"]["confidence"] is None and not tiers[1].calls
    assert log.records[0].confidence is None and log.records[0].cascade_from_tier is None


# --- failures, logprobs, conversations --------------------------------------------------------------------------------

@pytest.mark.parametrize("failure", [lambda m: TierUnavailableError(m, retry_after_s=30), RequestFailedError])
def test_a_failed_escalation_serves_the_cheaper_answer(failure, caplog):
    tiers = three(small=-2.0)
    tiers[1].fail_after, tiers[1].failure = 1, failure
    service, log = make_service(tiers, proba=SMALL_ONLY, cascade=ON)
    body, chat = serve(service)
    assert body["model"] == "model-small" and body["choices"][0]["message"]["content"] == "s1s2"
    assert body["aio"]["cascade_from"] is None and body["aio"]["confidence"] == pytest.approx(-2.0)
    [record] = log.records
    assert record.status == "ok" and record.tier == "small" and record.routing_reason == "classifier"
    assert record.cascade_from_tier is None and record.cost_usd == pytest.approx(cost(0, 3, 2))
    assert "the cascade from small to medium failed" in caplog.text
    assert service.tiers.is_up(tiers[1]) == (failure is RequestFailedError)  # only the tier's own fault marks it down
    assert cascades(service, "small", "medium") == 0 and service._in_flight == 0


def test_a_larger_tier_that_cannot_count_the_prompt_keeps_the_cheaper_answer(caplog):
    def broken_tokenizer(messages, options=None):
        raise RuntimeError("the tokenizer is gone")

    tiers = three(small=-2.0)
    tiers[1].count_prompt_tokens = broken_tokenizer
    service, log = make_service(tiers, proba=SMALL_ONLY, cascade=ON)
    assert serve(service)[0]["model"] == "model-small" and log.records[0].status == "ok"
    assert "no cascade from small: RuntimeError: the tokenizer is gone" in caplog.text


def test_a_larger_tier_that_is_down_is_skipped_and_none_up_keeps_the_answer():
    tiers = three(small=-2.0)
    tiers[1].available = False
    service, log = make_service(tiers, proba=SMALL_ONLY, cascade=ON)
    assert serve(service)[0]["model"] == "model-large"
    tiers[2].available = False
    assert serve(service)[0]["model"] == "model-small"


def test_the_client_gets_logprobs_only_when_it_asked():
    service, log = make_service(three(small=-2.0, medium=-0.2), proba=SMALL_ONLY, cascade=ON)
    body, chat = serve(service)
    # asked for the cascade only: the chosen token and the best other (the answer scorer's margin)
    assert body["choices"][0]["logprobs"] is None and chat.params[0].logprobs == 2
    body, _ = serve(service, logprobs=True)
    entries = body["choices"][0]["logprobs"]["content"]
    assert [e["logprob"] for e in entries] == [pytest.approx(-0.2)] * 3  # the served (medium) answer's tokens
    assert all(e["top_logprobs"] == [] for e in entries)  # top_logprobs not asked: none, whatever the tier gave


def test_a_conversation_the_cascade_raised_keeps_its_tier():
    service, log = make_service(three(small=-2.0, medium=-0.2), proba=SMALL_ONLY, cascade=ON)
    chat = run(service.prepare(request(), RequestContext(session="thread-1")))
    run(service.complete(chat))
    chat = run(service.prepare(request(), RequestContext(session="thread-1")))
    assert chat.tier.name == "medium" and chat.decision.reason == "sticky"


# --- the log ---------------------------------------------------------------------------------------------------------

def test_a_cascaded_row_is_stored_and_counted_under_its_final_tier(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'aio.db'}")
    migrate.upgrade(engine)
    day = datetime(2025, 3, 1, 12, tzinfo=timezone.utc)
    writer = LogWriter(engine, batch_size=10, flush_interval_s=0.05)
    writer.start()
    writer.submit(RequestRecord("cascaded", "ok", day, tier="medium", routing_reason="cascade", cost_usd=0.5,
                                baseline_cost_usd=2.0, confidence=-0.2, cascade_from_tier="small",
                                cascade_confidence=-2.0, cascade_cost_usd=0.1))
    writer.submit(RequestRecord("kept", "ok", day, tier="small", routing_reason="classifier", cost_usd=0.1,
                                baseline_cost_usd=1.0, confidence=-0.1))
    assert writer.flush(30) and writer.close()
    with engine.connect() as connection:
        row = connection.execute(sa.select(Request).where(Request.request_id == "cascaded")).mappings().one()
        assert (row["cascade_from_tier"], row["cascade_confidence"], row["cascade_cost_usd"], row["confidence"]) \
            == ("small", -2.0, 0.1, -0.2)
        a = DailyAggregate
        sums = {tier: (n, c, total) for tier, n, c, total in connection.execute(
            sa.select(a.tier, a.num_cascades, a.cascade_cost_usd, a.cost_usd))}
    assert sums == {"medium": (1, 0.1, 0.5), "small": (0, 0.0, 0.1)}
    engine.dispose()
