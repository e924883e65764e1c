"""The shipped default against the hand-labelled chat sanity set (never trained on): it ranks clearly-hard
prompts above clearly-easy ones of the same kind, and trivial chit-chat never needs the large tier."""
from __future__ import annotations

import numpy as np
import pytest

from classifier import routing_metrics as rm
from classifier.chat_data import agreement, difficulty_score, load_chat


@pytest.fixture(scope="module")
def scored():
    import classifier

    chat = load_chat()
    return chat, classifier.load_default().predict_proba(chat.texts)


def test_hard_prompts_score_above_easy_ones(scored):
    chat, proba = scored
    result = agreement(difficulty_score(proba), chat, n_boot=50)
    assert result["explicit_pairs"][0] >= 0.95, result
    assert result["category_pairs"][0] >= 0.9, result
    assert result["kendall_tau"][0] >= 0.5, result


def test_chit_chat_never_needs_the_large_tier(scored):
    chat, proba = scored
    chit = [i for i, (c, d) in enumerate(zip(chat.categories, chat.difficulty)) if c == "greeting" and d == 1]
    assert len(chit) >= 25
    tiers = rm.route_tiers(proba[chit], 0.5)  # the default quality knob
    assert (tiers == 0).all(), [chat.texts[chit[i]] for i in np.nonzero(tiers)[0]]
    demanding = rm.route_tiers(proba[chit], 0.9)  # even at a demanding knob, none goes to the large tier
    assert (demanding < 2).all(), [chat.texts[chit[i]] for i in np.nonzero(demanding == 2)[0]]


def test_issue_examples_rank_sensibly():
    import classifier

    clf = classifier.load_default()
    hi, two, design = clf.predict_proba(["hi", "What is 2+2?", "Design a distributed rate limiter for a multi-region "
                                         "API gateway that enforces per-tenant quotas."])
    assert rm.route_tiers(hi[None], 0.9)[0] == 0  # "hi" stays on the small tier even at quality 0.9
    assert difficulty_score(design[None])[0] > difficulty_score(two[None])[0] > difficulty_score(hi[None])[0]
    # where the design question goes at the default quality is for outcomes to say (no outcome row is a design
    # question); the quality knob moves it up before 2+2, never after
    knob = np.linspace(0.5, 0.999, 60)
    assert all(rm.route_tiers(two[None], q)[0] <= rm.route_tiers(design[None], q)[0] for q in knob)
    assert any(rm.route_tiers(two[None], q)[0] < rm.route_tiers(design[None], q)[0] for q in knob)


def test_probabilities_stay_probabilities(scored):
    _, proba = scored
    assert np.allclose(proba.sum(axis=1), 1.0) and (proba >= 0).all()
