"""ChatService and Router with fake tiers: routing decisions, escalation, mid-stream failures, accounting."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from aio.chat.context import RequestContext
from aio.chat.service import ChatService
from aio.metrics import Metrics
from aio.api.errors import APIError
from aio.api.schemas import ChatCompletionRequest
from aio.routing import ClassifierBatcher, Router
from aio.settings import TierSettings
from tiers.engine.sampling_params import InvalidRequestError
from tiers.engine.errors import RequestFailedError
from tiers.serving.pool import ChatChunk, TierLoad, TierPool, TierUnavailableError


@dataclass
class FakeTier:
    name: str
    max_model_len: int = 100
    words: list[str] = field(default_factory=lambda: ["a", "b", "c"])
    fail_after: int | None = None  # raise after this many chunks
    # The tier's own fault, for 0.2 s; RequestFailedError: the request's own
    failure: Callable[[str], Exception] = lambda message: TierUnavailableError(message, retry_after_s=0.2)
    available: bool = True
    waiting: int = 0
    is_demo: bool = False
    calls: list = field(default_factory=list)
    options: list = field(default_factory=list)

    @property
    def model(self) -> str:
        return f"model-{self.name}"

    def count_prompt_tokens(self, messages, options=None) -> int:
        return sum(len(m["content"].split()) for m in messages)

    def check_options(self, options) -> None:
        if (options.response_format or {}).get("json_schema", {}).get("schema") == {"type": "nonsense"}:
            raise InvalidRequestError("the schema's type 'nonsense' is not a JSON schema type")

    async def stream_chat(self, messages, params, request_id, priority=0, options=None, tenant=None):
        self.calls.append((request_id, params))
        self.options.append(options)
        for i, word in enumerate(self.words[:params.max_tokens]):
            if self.fail_after is not None and i == self.fail_after:
                raise self.failure("the device fell over")
            await asyncio.sleep(0)
            yield ChatChunk(delta_text=word, num_new_tokens=1)
        yield ChatChunk(finish_reason="length" if params.max_tokens <= len(self.words) else "stop",
                        num_prompt_tokens=self.count_prompt_tokens(messages))

    def token_text(self, token_id: int) -> str:
        return str(token_id)

    def load(self) -> TierLoad:
        return TierLoad(0, self.waiting, 0.0)

    def is_available(self) -> bool:
        return self.available

    async def aclose(self) -> None:
        pass


class FixedClassifier:
    version = "fixed-1"

    def __init__(self, proba):
        self.proba = np.asarray(proba, dtype=np.float64)

    def predict_proba(self, texts):
        return np.tile(self.proba, (len(texts), 1))


class ListLog:
    def __init__(self):
        self.records = []
        self.begun = []

    def begin(self, record):
        self.begun.append(record)

    def submit(self, record):
        self.records.append(record)


def make_service(tiers, proba=(0.2, 0.5, 0.3), quality=0.5, **options):
    pool = TierPool(tiers)
    settings = {t.name: TierSettings(path="/x", input_price_per_million=(i + 1) * 1.0,
                                     output_price_per_million=(i + 1) * 2.0, max_queue=2)
                for i, t in enumerate(tiers)}
    log = ListLog()
    service = ChatService(pool, Router(FixedClassifier(proba), [t.name for t in tiers], quality), settings, log,
                          Metrics(), **options)
    return service, log


def request(**kwargs) -> ChatCompletionRequest:
    body = {"model": "auto", "messages": [{"role": "user", "content": "one two three"}], **kwargs}
    return ChatCompletionRequest.model_validate(body)


def run(coro):
    return asyncio.run(coro)


def route(router: Router, text: str):
    """The server's path: the micro-batcher scores the text, the router decides with the classifier that scored it."""
    async def main():
        classifier = router.classifier
        return router.decide(await ClassifierBatcher().predict(classifier, text), None, classifier)

    return run(main())


@pytest.mark.parametrize("quality, tier", [(0.0, "small"), (0.2, "small"), (0.5, "medium"), (0.7, "medium"),
                                           (0.71, "large"), (1.0, "large")])
def test_router_picks_the_cheapest_tier_whose_cumulative_probability_reaches_the_quality(quality, tier):
    router = Router(FixedClassifier([0.2, 0.5, 0.3]), ["small", "medium", "large"], quality)
    decision = route(router, "text")
    assert decision.tier == tier and decision.reason == "classifier" and decision.classifier_version == "fixed-1"
    assert decision.score == pytest.approx({"small": 0.2, "medium": 0.7, "large": 1.0}[tier])


def test_router_with_missing_tiers_and_offsets():
    router = Router(FixedClassifier([0.6, 0.3, 0.1]), ["small", "large"], 0.5)
    assert route(router, "x").tier == "small"
    router.offsets["small"] = 0.2  # the quality monitor moved traffic up
    assert route(router, "x").tier == "large"
    with pytest.raises(ValueError):
        Router(FixedClassifier([1.0]), ["tiny"], 0.5)


def test_complete_routes_generates_and_logs_once_with_costs():
    service, log = make_service([FakeTier("small"), FakeTier("medium"), FakeTier("large")])
    chat = run(service.prepare(request(max_tokens=2, n=2, seed=5), RequestContext()))
    assert chat.tier.name == "medium" and chat.decision.reason == "classifier"
    assert [p.seed for p in chat.params] == [5, 6]
    body = run(service.complete(chat))
    assert [c["message"]["content"] for c in body["choices"]] == ["ab", "ab"]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    assert body["aio"]["cost_usd"] == pytest.approx((3 * 2.0 + 4 * 4.0) / 1e6)
    assert body["aio"]["baseline_cost_usd"] == pytest.approx((3 * 3.0 + 4 * 6.0) / 1e6)
    [record] = log.records
    assert record.status == "ok" and record.tier == "medium" and record.completion_tokens == 4
    assert record.tier_scores == [0.2, 0.5, 0.3] and record.quality == 0.5
    assert json.loads(record.prompt) == [{"role": "user", "content": "one two three"}]


def test_escalation_on_context_overflow_and_refusal_when_nothing_fits():
    tiers = [FakeTier("small", max_model_len=5), FakeTier("medium", max_model_len=8), FakeTier("large", 20)]
    service, log = make_service(tiers, proba=(1.0, 0.0, 0.0))
    chat = run(service.prepare(request(max_tokens=4), RequestContext()))
    assert chat.tier.name == "medium" and chat.decision.reason == "escalation"
    chat = run(service.prepare(request(model="small", max_tokens=10), RequestContext()))
    assert chat.tier.name == "large" and chat.decision.reason == "escalation"
    with pytest.raises(APIError) as info:
        run(service.prepare(request(max_tokens=30), RequestContext()))
    assert info.value.status_code == 400 and info.value.code == "context_length_exceeded"
    assert [r.status for r in log.records] == ["rejected"]


def test_unavailable_and_busy_tiers():
    service, log = make_service([FakeTier("small", available=False)], proba=(1.0,))
    with pytest.raises(APIError) as info:
        run(service.prepare(request(), RequestContext()))
    assert info.value.status_code == 503 and info.value.headers()["Retry-After"]
    tiers = [FakeTier("small", available=False), FakeTier("large", waiting=2)]
    service, log = make_service(tiers, proba=(1.0, 0.0, 0.0))
    with pytest.raises(APIError) as info:  # small is down, its fallback is full
        run(service.prepare(request(), RequestContext()))
    assert info.value.status_code == 429 and info.value.headers()["Retry-After"] == "1"
    tiers[1].waiting = 0
    chat = run(service.prepare(request(), RequestContext()))
    assert chat.tier.name == "large" and chat.decision.reason == "fallback"
    assert [r.status for r in log.records] == ["rejected"]


def test_a_failure_after_the_stream_started_is_an_error_event_then_done():
    service, log = make_service([FakeTier("small", fail_after=1, failure=RequestFailedError)], proba=(1.0,))
    chat = run(service.prepare(request(stream=True, max_tokens=3), RequestContext()))

    async def collect():
        return [event async for event in service.stream(await service.open(chat))]

    events = run(collect())
    payloads = [json.loads(e[6:]) for e in events[:-1]]
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert payloads[1]["choices"][0]["delta"] == {"content": "a"}
    error = payloads[-1]["error"]
    # The client reads its own request id; the cause stays in the log.
    assert error["code"] == "generation_failed" and chat.ctx.request_id in error["message"]
    assert "fell over" not in error["message"] and "RuntimeError" not in error["message"]
    assert events[-1] == "data: [DONE]\n\n"
    [record] = log.records
    assert record.status == "error" and record.completion_tokens == 1 and record.http_status == 500
    assert "fell over" in record.error


def test_a_tier_going_down_mid_request_is_a_503():
    tier = FakeTier("small")

    async def down(*args, **kwargs):
        raise TierUnavailableError("connection refused", retry_after_s=7)
        yield  # pragma: no cover

    tier.stream_chat = down
    service, log = make_service([tier], proba=(1.0,))
    chat = run(service.prepare(request(), RequestContext()))
    with pytest.raises(APIError) as info:
        run(service.complete(chat))
    assert info.value.status_code == 503 and info.value.headers()["Retry-After"] == "7"
    assert log.records[0].status == "error"


def test_redaction_keeps_prompts_and_answers_out_of_the_log():
    service, log = make_service([FakeTier("small")], proba=(1.0,))
    service.log_prompts = False
    run(service.complete(run(service.prepare(request(), RequestContext()))))
    assert log.records[0].prompt is None and log.records[0].answer is None
    assert log.records[0].completion_tokens == 3


def test_message_normalisation():
    service, _ = make_service([FakeTier("small")], proba=(1.0,))
    body = request(messages=[{"role": "developer", "content": "rules"},
                             {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]},
                             {"role": "assistant", "content": None}, {"role": "user", "content": "z"}])
    chat = run(service.prepare(body, RequestContext()))
    assert chat.messages == [{"role": "system", "content": "rules"}, {"role": "user", "content": "x\ny"},
                             {"role": "assistant", "content": ""}, {"role": "user", "content": "z"}]
    image = request(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}])
    with pytest.raises(APIError) as info:
        run(service.prepare(image, RequestContext()))
    assert info.value.code == "unsupported_parameter" and info.value.param == "messages.0.content.0"


def test_a_failing_tier_falls_back_to_a_larger_one_is_skipped_then_retried():
    small, large = FakeTier("small", fail_after=0), FakeTier("large")
    service, log = make_service([small, large], proba=(1.0, 0.0, 0.0), tier_retry_after_s=0.2)
    body = run(service.complete(run(service.prepare(request(max_tokens=2), RequestContext()))))
    assert body["model"] == "model-large" and body["aio"]["routing_reason"] == "fallback"
    assert [r.tier for r in log.records] == ["large"] and log.records[0].status == "ok"
    chat = run(service.prepare(request(), RequestContext()))  # small is marked down: skipped up front
    assert chat.tier.name == "large" and chat.decision.reason == "fallback"
    run(service.complete(chat))
    import time as _time
    _time.sleep(0.25)
    small.fail_after = None  # it recovered
    chat = run(service.prepare(request(), RequestContext()))
    assert chat.tier.name == "small" and chat.decision.reason == "classifier"
    run(service.complete(chat))
    assert service._in_flight == 0


def test_a_request_that_fails_by_itself_leaves_its_tier_up_and_tries_no_other():
    small, large = FakeTier("small", fail_after=0, failure=RequestFailedError), FakeTier("large")
    service, log = make_service([small, large], proba=(1.0, 0.0, 0.0))
    chat = run(service.prepare(request(max_tokens=2), RequestContext()))
    with pytest.raises(APIError) as info:
        run(service.complete(chat))
    assert info.value.status_code == 500 and info.value.code == "generation_failed"
    assert chat.ctx.request_id in info.value.message and "fell over" not in info.value.message
    assert large.calls == [] and [r.status for r in log.records] == ["error"] and "fell over" in log.records[0].error
    small.fail_after = None
    chat = run(service.prepare(request(), RequestContext()))  # not marked down: the next request is served there
    assert chat.tier.name == "small" and chat.decision.reason == "classifier"
    run(service.complete(chat))
    assert service._in_flight == 0


def test_a_request_that_cannot_start_in_time_is_refused_not_served_late():
    class StuckTier(FakeTier):
        async def stream_chat(self, messages, params, request_id, priority=0, options=None, tenant=None):
            await asyncio.sleep(30)
            yield ChatChunk(delta_text="late")

    service, log = make_service([StuckTier("small")], proba=(1.0,), queue_timeout_s=0.2)
    chat = run(service.prepare(request(), RequestContext()))
    with pytest.raises(APIError) as info:
        run(service.complete(chat))
    assert info.value.status_code == 503 and info.value.code == "queue_timeout" and info.value.headers()["Retry-After"]
    assert log.records[0].status == "error" and log.records[0].http_status == 503 and service._in_flight == 0


def test_the_global_concurrency_limit():
    service, log = make_service([FakeTier("small")], proba=(1.0,), max_concurrent_requests=1)

    async def scenario():
        first = await service.prepare(request(), RequestContext())
        opened = await service.open(first)  # one request in flight
        with pytest.raises(APIError) as info:
            await service.prepare(request(), RequestContext())
        async for _ in service.stream(opened):
            pass
        second = await service.prepare(request(), RequestContext())  # the slot is free again
        return info.value, second

    error, second = run(scenario())
    assert error.status_code == 429 and error.code == "server_busy" and second.tier.name == "small"


TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


@pytest.mark.parametrize("body, floor, tier, reason", [
    ({"tools": [TOOL]}, "medium", "medium", "structured_min_tier"),
    ({"response_format": {"type": "json_object"}}, "large", "large", "structured_min_tier"),
    ({"tools": [TOOL]}, None, "small", "classifier"),  # no floor set: the classifier's choice
    ({}, "large", "small", "classifier"),  # plain chat is not held to the floor
    ({"tools": [TOOL], "model": "small"}, "large", "small", "explicit"),  # a named tier is a named tier
])
def test_structured_requests_go_at_least_to_the_configured_tier(body, floor, tier, reason):
    tiers = [FakeTier("small"), FakeTier("medium"), FakeTier("large")]
    service, log = make_service(tiers, proba=(0.9, 0.05, 0.05), structured_min_tier=floor)
    result = run(service.complete(run(service.prepare(request(**body), RequestContext()))))
    assert result["aio"]["tier"] == tier and result["aio"]["routing_reason"] == reason
    assert log.records[-1].routing_reason == reason
    sent = tiers[["small", "medium", "large"].index(tier)].options[-1]
    assert (sent is None) == (not body.get("tools") and not body.get("response_format"))
    if body.get("tools"):
        assert sent.tools == (TOOL,) and sent.tool_choice == "auto"


def test_a_schema_the_tier_cannot_enforce_is_a_400_before_generation():
    tiers = [FakeTier("small")]
    service, log = make_service(tiers, proba=(1.0,))
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}
    with pytest.raises(APIError) as info:
        run(service.prepare(request(response_format=fmt), RequestContext()))
    assert info.value.status_code == 400 and info.value.param == "response_format"
    assert info.value.code == "invalid_schema" and "nonsense" in info.value.message
    assert tiers[0].calls == [] and log.records[-1].status == "rejected"
