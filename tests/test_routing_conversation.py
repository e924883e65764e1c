"""Conversation-aware routing: stickiness keyed by session or by user + earlier turns, recent failed
verifications of near-duplicates, and their combination (`aio.routing.context_routing`)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from aio.routing import RoutingDecision
from aio.routing.context_routing import ContextRouting, FailureFeed
from aio.routing.conversation import ConversationTiers, conversation_keys
from aio.routing.recent_failures import RecentFailures

TIERS = ["small", "medium", "large"]


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def decision(tier, reason="classifier", version="v1"):
    return RoutingDecision(tier, reason, 0.5, (0.3, 0.3, 0.4), version)


def unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


# ---- keys --------------------------------------------------------------------------------------------------


def test_next_turn_finds_the_previous_turn_by_its_earlier_messages():
    first = conversation_keys([user("Design a rate limiter")], user="ann")
    assert first.lookup is None  # a first turn has no history
    second = conversation_keys([user("Design a rate limiter"), assistant("Use a token bucket ..."),
                                user("and in Rust?")], user="ann")
    assert second.lookup == first.store
    # the assistant's text does not matter (clients may re-format it)
    again = conversation_keys([user("Design a rate limiter"), assistant("something else"), user("and in Rust?")],
                              user="ann")
    assert again.lookup == first.store


def test_keys_differ_per_user_and_per_api_key():
    msgs = [user("a"), assistant("b"), user("c")]
    assert conversation_keys(msgs, user="ann").lookup != conversation_keys(msgs, user="bob").lookup
    assert conversation_keys(msgs, owner="1").lookup != conversation_keys(msgs, owner="2").lookup


def test_session_header_keys_the_conversation_whatever_its_messages():
    a = conversation_keys([user("hi")], user="ann", session="s-1")
    b = conversation_keys([user("totally different")], user="ann", session="s-1")
    assert a.lookup == a.store == b.lookup == b.store
    assert conversation_keys([user("hi")], user="bob", session="s-1").store != a.store


# ---- stickiness --------------------------------------------------------------------------------------------


def test_a_conversation_never_moves_down_and_can_move_up():
    memory = ConversationTiers()
    hard = [user("Design a distributed rate limiter for a multi-region API gateway")]
    d1 = memory.apply(decision("large"), conversation_keys(hard, "ann"), TIERS)
    assert (d1.tier, d1.reason) == ("large", "classifier")
    follow = hard + [assistant("..."), user("and in Rust?")]
    d2 = memory.apply(decision("small"), conversation_keys(follow, "ann"), TIERS)
    assert (d2.tier, d2.reason) == ("large", "sticky")
    # a different user with the same words is a different conversation
    d3 = ConversationTiers().apply(decision("small"), conversation_keys(follow, "bob"), TIERS)
    assert d3.tier == "small"


def test_the_new_turn_raises_the_conversation_when_it_needs_more():
    memory = ConversationTiers()
    turns = [user("hi")]
    assert memory.apply(decision("small"), conversation_keys(turns, "u"), TIERS).tier == "small"
    turns += [assistant("hello"), user("prove Fermat's little theorem")]
    d = memory.apply(decision("large"), conversation_keys(turns, "u"), TIERS)
    assert (d.tier, d.reason) == ("large", "classifier")
    turns += [assistant("..."), user("thanks")]
    assert memory.apply(decision("small"), conversation_keys(turns, "u"), TIERS).tier == "large"


def test_session_stickiness_and_expiry():
    memory = ConversationTiers(ttl_s=10)
    keys = conversation_keys([user("x")], session="abc")
    memory.apply(decision("medium"), keys, TIERS, now=0.0)
    assert memory.apply(decision("small"), keys, TIERS, now=5.0).tier == "medium"
    assert memory.apply(decision("small"), keys, TIERS, now=100.0).tier == "small"  # expired


def test_a_tier_no_longer_configured_is_ignored_and_memory_is_bounded():
    memory = ConversationTiers(max_conversations=2)
    keys = conversation_keys([user("x")], session="s")
    memory.apply(decision("large"), keys, TIERS)
    assert memory.apply(decision("small"), keys, ["small", "medium"]).tier == "small"
    for i in range(5):
        memory.apply(decision("small"), conversation_keys([user(str(i))], session=str(i)), TIERS)
    assert len(memory) == 2
    with pytest.raises(ValueError):
        ConversationTiers(ttl_s=0)


# ---- recent failures ---------------------------------------------------------------------------------------


def test_near_duplicate_of_a_failure_routes_above_the_failed_tier():
    failures = RecentFailures(similarity=0.9)
    failures.add(unit([1, 0, 0]), "small", "v1")
    m = failures.match(unit([1, 0.1, 0]), "v1", TIERS)
    assert m is not None and m.failed_tier == "small" and m.min_tier == "medium" and m.similarity > 0.99
    assert failures.match(unit([0, 1, 0]), "v1", TIERS) is None  # not similar
    assert failures.match(unit([1, 0.1, 0]), "v2", TIERS) is None  # a newer classifier learned from it
    assert failures.match(None, "v1", TIERS) is None
    failures.add(unit([0, 0, 1]), "medium", "v1")
    assert failures.match(unit([0, 0.05, 1]), "v1", TIERS).min_tier == "large"
    assert failures.match(unit([0, 0.05, 1]), "v1", ["small", "medium"]) is None  # no larger tier


def test_failures_expire_and_are_bounded():
    failures = RecentFailures(max_items=2, ttl_s=10)
    failures.add(unit([1, 0]), "small", "v", now=0.0)
    assert failures.match(unit([1, 0]), "v", TIERS, now=5.0) is not None
    assert failures.match(unit([1, 0]), "v", TIERS, now=50.0) is None
    for _ in range(5):
        failures.add(unit([0, 1]), "small", "v")
    assert len(failures) == 2
    with pytest.raises(ValueError):
        failures.add(unit([1, 0]), "huge", "v")


# ---- combined ----------------------------------------------------------------------------------------------


def test_context_routing_applies_failures_then_stickiness():
    routing = ContextRouting()
    routing.failed_verification(unit([1, 0, 0]), "small", "v1")
    d, keys = routing.adjust(decision("small"), TIERS, messages=[user("q")], user="u", embedding=unit([1, 0.05, 0]))
    assert (d.tier, d.reason) == ("medium", "recent-failure")
    routing.served(keys, "large")  # escalated later for length: the conversation remembers large
    d2, _ = routing.adjust(decision("small"), TIERS, messages=[user("q"), assistant("a"), user("more")], user="u",
                           embedding=unit([0, 1, 0]))
    assert (d2.tier, d2.reason) == ("large", "sticky")
    explicit, _ = routing.adjust(RoutingDecision("small", "explicit"), TIERS,
                                 messages=[user("q"), assistant("a"), user("more")], user="u")
    assert explicit.tier == "small"  # a named model is the client's choice


def test_failure_feed_stores_every_verdict_and_remembers_failures():
    saved = []
    store = SimpleNamespace(save=saved.append, recent_outcomes=lambda tier, limit: [True])
    routing = ContextRouting()
    clf = SimpleNamespace(embed=lambda texts: np.array([unit([1, 0, 0]) if "hard" in t else unit([0, 1, 0])
                                                        for t in texts]))
    feed = FailureFeed(store, routing, lambda: clf)

    def verdict(text, passed):
        cand = SimpleNamespace(messages=[user(text)], tier="small", classifier_version="v1")
        return SimpleNamespace(candidate=cand, passed=passed)

    feed.save(verdict("a hard one", False))
    feed.save(verdict("an easy one", True))
    assert len(saved) == 2 and len(routing.failures) == 1
    assert feed.recent_outcomes("small", 5) == [True]  # the wrapped store's other methods pass through
    assert routing.failures.match(unit([1, 0, 0]), "v1", TIERS).min_tier == "medium"


# ---- through the chat service --------------------------------------------------------------------------------


class TextClassifier:
    """Large for texts mentioning "design", small otherwise; embeddings: a one-hot of the first word's length."""
    version = "text-1"

    def predict_with_embeddings(self, texts):
        proba = np.array([[0.05, 0.05, 0.9] if "design" in t.lower() else [0.9, 0.05, 0.05] for t in texts])
        emb = np.zeros((len(texts), 8), dtype=np.float32)
        for i, t in enumerate(texts):
            emb[i, min(len(t.split()[-1]) if t.split() else 0, 7)] = 1.0
        return proba, emb

    def predict_proba(self, texts):
        return self.predict_with_embeddings(texts)[0]


def test_service_keeps_a_conversation_on_its_tier_and_logs_the_reason():
    from aio.api.schemas import ChatCompletionRequest
    from aio.chat.context import RequestContext
    from tests.test_chat_service import FakeTier, make_service, run

    service, log = make_service([FakeTier("small"), FakeTier("medium"), FakeTier("large")])
    service.router.classifier = TextClassifier()

    def ask(messages, session=None, user_name="ann"):
        body = ChatCompletionRequest.model_validate({"model": "auto", "messages": messages, "user": user_name,
                                                     "max_tokens": 2})
        chat = run(service.prepare(body, RequestContext(session=session)))
        run(service.complete(chat))
        return chat.decision

    first = [user("please design a rate limiter")]
    assert ask(first).tier == "large"
    follow = first + [assistant("ab"), user("and in Rust?")]
    assert ask(follow).tier == "large"  # scored with the previous user turn: the follow-up inherits its difficulty
    third = follow + [assistant("ab"), user("ok, thanks")]
    d = ask(third)  # scored alone it is small ("and in Rust?" + "ok, thanks"); the thread keeps large
    assert (d.tier, d.reason) == ("large", "sticky")
    assert log.records[-1].routing_reason == "sticky"
    assert ask(third, user_name="bob").tier == "small"  # another user's thread of the same words
    # an explicit session keys the thread whatever the messages
    assert ask([user("design it")], session="s1").tier == "large"
    assert ask([user("thanks")], session="s1").reason == "sticky"
    assert ask([user("thanks")], session="s2").tier == "small"


def test_service_routes_near_duplicates_of_failed_verifications_up():
    from aio.api.schemas import ChatCompletionRequest
    from aio.chat.context import RequestContext
    from tests.test_chat_service import FakeTier, make_service, run

    service, _ = make_service([FakeTier("small"), FakeTier("medium"), FakeTier("large")])
    clf = TextClassifier()
    service.router.classifier = clf
    _, emb = clf.predict_with_embeddings(["what is tricky"])
    service.context_routing.failed_verification(emb[0], "small", clf.version)

    def ask(text):
        body = ChatCompletionRequest.model_validate({"model": "auto", "messages": [user(text)], "max_tokens": 2})
        return run(service.prepare(body, RequestContext())).decision

    d = ask("explain this tricky")  # last word of the same length: the same fake embedding
    assert (d.tier, d.reason) == ("medium", "recent-failure")
    assert ask("explain this odd").tier == "small"
