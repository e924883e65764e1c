"""The exact answer cache: every request field that can change the answer is in the key (each one changed is a
miss), the fields left out cannot change it, only deterministic non-streamed requests use it, one key's answers
never reach another (unless the scope is shared), a hit is byte-identical and bills 0 tokens, `log_prompts = false`
keeps the prompt out of the cache, and cached answers follow the log's retention."""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from aio.answer_cache import EXCLUDED_FIELDS, AnswerCache, CachedAnswer, MemoryStore, SqlStore, cache_key
from aio.api.schemas import ChatCompletionRequest
from aio.db.keys import ApiKeyInfo
from aio.db.models import AnswerCacheEntry
from aio.db.retention import prune_raw_rows
from tests.inprocess import chat_app
from tests.test_chat_service import FakeTier

UTC = timezone.utc
TIERS = [("small", "model-small")]
BASE = {"model": "small", "messages": [{"role": "user", "content": "What is 17 times 23?"}], "temperature": 0,
        "max_tokens": 3}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

# one changed value per field of the request model that is in the key
CHANGED = {
    "model": "medium", "messages": [{"role": "user", "content": "What is 17 times 24?"}],
    "max_completion_tokens": 5, "max_tokens": 4, "temperature": 0.7, "top_p": 0.9, "n": 2, "stop": ["x"],
    "seed": 7, "stream": True, "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 2,
    "aio_quality": 0.3, "aio_cascade": True, "aio_cascade_threshold": -1.0, "presence_penalty": 0.5,
    "frequency_penalty": 0.5, "logit_bias": {"5": 1.0}, "tools": [TOOL], "tool_choice": "none",
    "parallel_tool_calls": False, "response_format": {"type": "json_object"}, "top_k": 5, "ignore_eos": True,
    "repetition_penalty": 1.1, "min_tokens": 1,
}
# the same request, differently spelled or only differing where the answer cannot
SAME = [{"n": 1}, {"stream": False}, {"user": "someone else"}, {"aio_cache": True}, {"aio_cache": False}]


def key_of(body: dict, scope: str = "key:1", tiers=TIERS) -> str:
    return cache_key(ChatCompletionRequest.model_validate(body), scope, tiers)


def test_every_field_of_the_request_model_is_in_the_key_or_excluded_on_purpose():
    assert set(ChatCompletionRequest.model_fields) == set(CHANGED) | EXCLUDED_FIELDS
    assert EXCLUDED_FIELDS == {"user", "aio_cache"}


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_a_changed_field_is_a_miss(field):
    assert key_of({**BASE, field: CHANGED[field]}) != key_of(BASE)


@pytest.mark.parametrize("change", [{"messages": [{"role": "user", "content": "What is 17 times 23? "}]},
                                    {"messages": [{"role": "system", "content": "x"}, *BASE["messages"]]},
                                    {"messages": [{"role": "user", "content": "What is 17 times 23?", "name": "a"}]},
                                    {"temperature": 0.0000001}, {"unknown_extra": 1}, {"max_tokens": 30},
                                    {"stop": "x"}, {"response_format": {"type": "text"}}])
def test_near_identical_requests_are_misses(change):
    assert key_of({**BASE, **change}) != key_of(BASE)


@pytest.mark.parametrize("change", SAME)
def test_what_cannot_change_the_answer_is_not_in_the_key(change):
    assert key_of({**BASE, **change}) == key_of(BASE)


def test_the_scope_and_the_tiers_served_are_in_the_key():
    assert key_of(BASE, "key:1") != key_of(BASE, "key:2") != key_of(BASE, "shared")
    assert key_of(BASE, tiers=[("small", "model-small-v2")]) != key_of(BASE)


def key(key_id: int) -> ApiKeyInfo:
    return ApiKeyInfo(id=key_id, name=f"key-{key_id}", prefix="aio-test", role="user", created_at=datetime.now(UTC))


def app_with(cache: AnswerCache, tier: FakeTier | None = None, **service_options):
    tier = tier or FakeTier("small", words=["three", "hundred", "ninety-one"])
    app, service, log = chat_app([tier], {"a": key(1), "b": key(2)}, **service_options)
    app.state.aio.answer_cache = cache
    return TestClient(app), tier, log


def post(client, token: str = "a", **body):
    return client.post("/v1/chat/completions", json={**BASE, **body}, headers={"authorization": f"Bearer {token}"})


def test_a_hit_is_byte_identical_bills_0_tokens_and_is_logged_with_the_cost_it_saved():
    client, tier, log = app_with(AnswerCache(MemoryStore(10)))
    with client:
        first = post(client, n=2, seed=3)
        second = post(client, n=2, seed=3)
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert (first.headers["x-aio-cache"], second.headers["x-aio-cache"]) == ("miss", "hit")
    assert len(tier.calls) == 2  # the first request's two choices; the hit never reached the tier

    def choices(response) -> bytes:
        raw = response.content
        start = raw.index(b'"choices":')
        return raw[start:raw.index(b',"usage":', start)]

    assert choices(second) == choices(first)
    assert second.json()["usage"]["total_tokens"] == 0 and second.json()["id"] != first.json()["id"]
    aio = second.json()["aio"]
    assert aio["cost_usd"] == 0 and aio["routing_reason"] == "cache"
    assert aio["cache"]["saved_usd"] == pytest.approx(first.json()["aio"]["cost_usd"]) and aio["cache"]["saved_usd"] > 0
    assert second.headers["x-aio-tier"] == "small" and float(second.headers["x-aio-cost-usd"]) == 0
    miss, hit = log.records
    assert not miss.cache_hit and miss.cost_usd > 0
    assert hit.cache_hit and hit.cost_usd == 0 and hit.prompt_tokens == hit.completion_tokens == 0
    assert hit.cache_saved_usd == pytest.approx(miss.cost_usd) and hit.routing_reason == "cache"
    assert hit.status == "ok" and hit.tier == "small" and hit.num_choices == 2


@pytest.mark.parametrize("body, status", [
    ({"temperature": 1}, "bypass"), ({"temperature": None}, "bypass"), ({"aio_cache": False}, "bypass"),
    ({"temperature": 0.8, "seed": 5}, "hit"),
])
def test_only_deterministic_requests_use_the_cache(body, status):
    client, tier, _ = app_with(AnswerCache(MemoryStore(10)))
    with client:
        post(client, **body)
        again = post(client, **body)
    assert again.status_code == 200 and again.headers["x-aio-cache"] == status


def test_streamed_requests_bypass_the_cache():
    client, tier, _ = app_with(AnswerCache(MemoryStore(10)))
    with client:
        post(client)
        streamed = post(client, stream=True)
    assert streamed.status_code == 200 and streamed.headers["x-aio-cache"] == "bypass"
    assert "data: [DONE]" in streamed.text and len(tier.calls) == 2


@pytest.mark.parametrize("body, fragment", [
    ({"aio_cache": True, "temperature": 1}, "deterministic"), ({"aio_cache": True, "stream": True}, "streamed"),
    ({"aio_cache": "true"}, None), ({"aio_cache": 1}, None),
])
def test_aio_cache_is_validated_strictly(body, fragment):
    client, tier, log = app_with(AnswerCache(MemoryStore(10)))
    with client:
        response = post(client, **body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "aio_cache" or "aio_cache" in error["message"]
    if fragment:
        assert fragment in error["message"]
    assert not tier.calls


def test_asking_for_the_cache_on_a_server_without_one_is_a_400():
    client, tier, _ = app_with(AnswerCache(None))
    with client:
        assert post(client, aio_cache=True).status_code == 400
        assert post(client).status_code == 200


def test_opt_in_caches_only_requests_that_ask():
    client, tier, _ = app_with(AnswerCache(MemoryStore(10), opt_in=True))
    with client:
        post(client)
        assert post(client).headers["x-aio-cache"] == "bypass"
        post(client, aio_cache=True)
        assert post(client, aio_cache=True).headers["x-aio-cache"] == "hit"


def test_one_keys_answers_never_reach_another_unless_the_scope_is_shared():
    client, tier, _ = app_with(AnswerCache(MemoryStore(10)))
    with client:
        post(client, "a")
        assert post(client, "b").headers["x-aio-cache"] == "miss"
        assert post(client, "a").headers["x-aio-cache"] == "hit"
    client, tier, _ = app_with(AnswerCache(MemoryStore(10), scope="shared"))
    with client:
        post(client, "a")
        assert post(client, "b").headers["x-aio-cache"] == "hit"


def test_a_changed_parameter_misses_end_to_end():
    client, tier, _ = app_with(AnswerCache(MemoryStore(10)))
    with client:
        post(client)
        for change in ({"max_tokens": 2}, {"messages": [{"role": "user", "content": "What is 17 times 24?"}]},
                       {"seed": 1}, {"stop": ["hundred"]}, {"logprobs": True}):
            assert post(client, **change).headers["x-aio-cache"] == "miss", change


def test_the_memory_store_is_bounded_lru():
    store = MemoryStore(2)
    answer = CachedAnswer("{}", "small", "m", 0.1, 0.2, "r", datetime.now(UTC))
    for name in ("a", "b"):
        store.put(name, answer)
    assert store.get("a", None) is not None
    store.put("c", answer)
    assert len(store) == 2 and store.get("b", None) is None and store.get("a", None) is not None


@pytest.fixture()
def engine(sqlite_engine):
    return sqlite_engine


def test_the_sql_store_is_shared_by_replicas_and_keeps_no_prompt_when_prompts_are_not_logged(engine):
    secret = f"my account number is {uuid.uuid4().hex}"
    body = {"messages": [{"role": "user", "content": secret}]}
    first, _, log_a = app_with(AnswerCache(SqlStore(engine)), log_prompts=False)
    with first:
        assert post(first, **body).headers["x-aio-cache"] == "miss"
    second, tier, log_b = app_with(AnswerCache(SqlStore(engine)), log_prompts=False)
    with second:
        assert post(second, **body).headers["x-aio-cache"] == "hit"
    assert not tier.calls
    with engine.connect() as connection:
        rows = [dict(r._mapping) for r in connection.execute(AnswerCacheEntry.__table__.select())]
    assert len(rows) == 1 and len(rows[0]["key_hash"]) == 64
    assert secret not in json.dumps(rows, default=str)
    assert log_a.records[0].prompt is None and log_b.records[0].prompt is None and log_b.records[0].answer is None


def test_cached_answers_follow_the_logs_retention(engine):
    now = datetime(2026, 11, 26, 12, tzinfo=UTC)
    old = CachedAnswer("{}", "small", "m", 0.1, 0.2, "r1", now - timedelta(days=8))
    fresh = CachedAnswer("{}", "small", "m", 0.1, 0.2, "r2", now - timedelta(days=6))
    store = SqlStore(engine)
    store.put("old", old)
    store.put("fresh", fresh)
    assert store.get("old", now - timedelta(days=7)) is None  # past retention: not served before the prune
    memory = MemoryStore(10)
    memory.put("old", old)
    assert memory.get("old", now - timedelta(days=7)) is None and len(memory) == 0
    prune_raw_rows(engine, 7, now=now)
    assert store.get("old", None) is None and store.get("fresh", None) is not None


def test_a_failed_answer_is_not_stored():
    client, tier, _ = app_with(AnswerCache(MemoryStore(10)), FakeTier("small", fail_after=1))
    with client:
        assert post(client).status_code >= 500
        assert post(client).headers["x-aio-cache"] == "miss"
