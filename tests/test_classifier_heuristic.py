"""The classifier's cheap signals (classifier.features) and the heuristic router built on them."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from classifier import (FEATURE_NAMES, HeuristicClassifier, TextFeatures, extract_features, feature_vector,
                        messages_to_text)
from classifier.features import DOMAINS, LEXICONS, MAX_CHARS, find_entities
from classifier.heuristic import CONFIG_NAME, REFERENCE_TRAFFIC, default_mix

GREETING = "Hi there!"
FACTUAL = "What is the capital of France?"
ANALYSIS = ("Compare PostgreSQL and MongoDB for an analytics workload with 200M rows. Explain why one of them fits "
            "better, and then outline the migration step by step, including what would happen if a write fails "
            "halfway through.")
CODE_REVIEW = """Can you review this function? It is slow on large inputs and I think there is a bug in the
error handling as well. Suggest a cleaner version and explain the complexity.

```python
def merge_intervals(intervals):
    result = []
    for start, end in sorted(intervals):
        merged = False
        for i, (s, e) in enumerate(result):
            if start <= e and end >= s:
                result[i] = (min(s, start), max(e, end))
                merged = True
        if not merged:
            result.append((start, end))
    try:
        return sorted(result)
    except Exception:
        return []
```"""
KEYWORD_PHRASES = ["analyze this", "Compare them.", "explain why", "step by step", "Evaluate the options.",
                   "synthesize", "what would happen if it failed?", "trade-offs", "Prove it.", "pros and cons"]


@pytest.fixture(scope="module")
def clf() -> HeuristicClassifier:
    return HeuristicClassifier()


def route_at_half(proba: np.ndarray) -> np.ndarray:
    """The cheapest tier k with P(label <= k) >= 0.5 (what the router does at quality 0.5)."""
    return np.argmax(np.cumsum(proba, axis=1) >= 0.5, axis=1)


# ---------------------------------------------------------------------------------------------- features


def test_reasoning_keywords_on_word_boundaries_with_inflections():
    text = ("Please analyze this, then reanalyzed it. It is incomparable and comparable, but a comparison helps. "
            "Explain why, step-by-step; what would happen if we stop? Pros and cons, trade-offs. COMPARE.")
    # analyze, reanalyzed, comparison, explain why, step-by-step, what would happen if, pros and cons, trade-offs,
    # COMPARE; not incomparable, not comparable
    assert extract_features(text).num_reasoning_keywords == 9
    assert extract_features("The compartment is incomparable; the analyst was evaluative.").num_reasoning_keywords == 0
    assert extract_features("```\nanalyze(x)  # compare\n```").num_reasoning_keywords == 0  # not in code


def test_entities_kinds_and_sentence_starts():
    text = "Yesterday Alice met Bob in New York to discuss the API, a 5 GB dump, parse_config() and myVar."
    assert find_entities(text) == {"Alice", "Bob", "New York", "API", "5GB", "parse_config()", "myVar"}
    assert extract_features(text).num_entities == 7
    assert find_entities("Paris is nice. London too.\n- Berlin as well") == set()  # all at sentence/line starts
    assert find_entities("PLEASE HELP ME NOW") == set()  # shouting is not acronyms
    assert find_entities("It costs $12 and takes 3.5 ms on the H100 via HttpClient and os.path.join") == {
        "$12", "3.5ms", "H100", "HttpClient", "os.path.join"}
    assert find_entities("e.g. it is fine, i.e. ok") == set()


def test_counts_on_hand_written_examples():
    f = extract_features("What is X? Also, why?\n1. first\n2. second\na) third")
    assert f.question_depth == 2 + 3 + 1  # question marks, enumerated lines, "Also"
    assert extract_features("Do (a) this and (b) that as well as this.").question_depth == 3
    assert extract_features("One. Two! Three? pi is 3.14 ok\nfour").num_sentences == 5
    assert extract_features("don't stop").num_words == 2
    assert extract_features("").num_words == 0 and extract_features("").num_sentences == 0


def test_domain_and_specificity():
    f = extract_features("The plaintiff filed a lawsuit over the contract.")
    assert (f.domain, f.num_domain_terms) == ("law", 3)
    assert f.domain_specificity == pytest.approx(3 / 8)
    assert extract_features("Solve x^2 + 3x = 10, then compute \\int_0^1 x dx.").domain == "math"
    assert extract_features("My mortgage and pension, plus dividends from stocks.").domain == "finance"
    assert extract_features("Nice day for a walk in the park with friends.").domain == "general"
    assert extract_features("What is the capital of France?").domain == "general"
    code = extract_features(CODE_REVIEW)
    assert code.has_code and code.domain == "code" and code.domain_specificity > 0.5
    assert not extract_features(GREETING).has_code
    assert extract_features("def foo(x):\n    return x").has_code
    assert extract_features("why does `git rebase` rewrite history").has_code


def test_lexicons_are_disjoint_lowercase_words():
    seen: set[str] = set()
    for domain in DOMAINS:
        words = LEXICONS[domain]
        assert not (words & seen), words & seen
        assert all(w == w.lower() and w.isalnum() for w in words)
        seen |= words


def test_feature_vector_layout():
    f = TextFeatures(num_words=9, num_sentences=2, num_reasoning_keywords=1, num_entities=0, question_depth=3,
                     num_domain_terms=4, domain_specificity=0.25, has_code=True, domain="math")
    v = feature_vector(f)
    assert v.dtype == np.float32 and v.shape == (len(FEATURE_NAMES),)
    named = dict(zip(FEATURE_NAMES, v.tolist()))
    assert named["log_num_words"] == pytest.approx(math.log(10))
    assert named["log_question_depth"] == pytest.approx(math.log(4))
    assert named["domain_specificity"] == 0.25 and named["has_code"] == 1.0
    assert [named[f"domain_{d}"] for d in DOMAINS] == [float(d == "math") for d in DOMAINS]
    assert extract_features(CODE_REVIEW) == extract_features(CODE_REVIEW)  # deterministic


def test_long_input_is_cut_and_features_are_fast():
    assert extract_features("word " * MAX_CHARS).num_words == MAX_CHARS // 5
    start = time.perf_counter()
    for text in REFERENCE_TRAFFIC:
        extract_features(text)
    assert (time.perf_counter() - start) / len(REFERENCE_TRAFFIC) < 1e-3


# ---------------------------------------------------------------------------------------------- messages


def test_messages_to_text():
    parts = [{"type": "text", "text": "Describe"}, {"type": "image_url", "image_url": {"url": "x"}},
             {"type": "text", "text": "this image"}]
    assert messages_to_text([{"role": "user", "content": parts}]) == "Describe\nthis image"
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "answer"}, {"role": "user", "content": "second"},
            {"role": "assistant", "content": None}, {"role": "user", "content": "third"}]
    assert messages_to_text(chat) == "Be brief.\nsecond\nthird"
    odd = [None, "text", {"content": "no role"}, {"role": "user"}, {"role": "user", "content": None},
           {"role": 3, "content": "x"}, {"role": "developer", "content": "Sys"}, {"role": "USER", "content": "q"},
           {"role": "user", "content": [None, 5, {"type": "text", "text": None}]}]
    assert messages_to_text(odd) == "Sys\nq"
    assert messages_to_text([{"role": "system", "content": "only the system"}]) == "only the system"
    assert messages_to_text(None) == "" and messages_to_text([]) == "" and messages_to_text("hi") == ""
    long_system = [{"role": "system", "content": "x " * MAX_CHARS}, {"role": "user", "content": "the request"}]
    assert messages_to_text(long_system).endswith("\nthe request")
    assert len(messages_to_text(long_system)) < MAX_CHARS  # the request survives the features' cut


# ---------------------------------------------------------------------------------------------- heuristic


def test_simple_requests_score_below_analysis_and_code_review(clf):
    simple = clf.score([GREETING, FACTUAL])
    complex_ = clf.score([ANALYSIS, CODE_REVIEW])
    assert simple.max() < complex_.min()
    assert clf.predict([GREETING, FACTUAL, ANALYSIS, CODE_REVIEW]) == [0, 0, 2, 2]
    proba = clf.predict_proba([GREETING, ANALYSIS])
    assert proba[0, 0] > 0.9 and proba[1, 2] > 0.9


def test_held_out_requests_land_on_sensible_tiers(clf):
    easy = ["good morning!", "Who painted the Mona Lisa?", "What's 12 times 7?", "Translate 'cat' to French.",
            "Give me three names for a bakery."]
    hard = ["Evaluate the pros and cons of event sourcing for a banking ledger, compare it with a classic CRUD "
            "design, and explain why auditability matters for regulators.",
            "Derive the closed form of the least-squares estimator, then prove it is unbiased under the Gauss-Markov "
            "assumptions and discuss what would happen if the errors are correlated."]
    assert clf.predict(easy) == [0] * len(easy)
    assert clf.predict(hard) == [2] * len(hard)


@pytest.mark.parametrize("n_tiers", [2, 3, 4])
def test_proba_shape_and_mix_on_reference_traffic(n_tiers):
    clf = HeuristicClassifier(n_tiers=n_tiers)
    assert len(clf.thetas) == n_tiers - 1 and all(a < b for a, b in zip(clf.thetas, clf.thetas[1:]))
    proba = clf.predict_proba(list(REFERENCE_TRAFFIC))
    assert proba.shape == (len(REFERENCE_TRAFFIC), n_tiers)
    assert np.all((proba >= 0) & (proba <= 1)) and np.allclose(proba.sum(axis=1), 1.0)
    share = np.bincount(route_at_half(proba), minlength=n_tiers) / len(REFERENCE_TRAFFIC)
    assert np.allclose(share, default_mix(n_tiers), atol=1.5 / len(REFERENCE_TRAFFIC))
    assert clf.predict_proba([]).shape == (0, n_tiers)


def test_argmax_agrees_with_the_half_threshold_on_reference_traffic(clf):
    proba = clf.predict_proba(list(REFERENCE_TRAFFIC))
    assert np.mean(np.argmax(proba, axis=1) == route_at_half(proba)) >= 0.95


def test_calibrate_to_a_custom_mix():
    clf = HeuristicClassifier()
    texts = [GREETING, FACTUAL, "How do I boil an egg?", ANALYSIS, CODE_REVIEW]
    clf.calibrate(texts, mix=(0.4, 0.2, 0.4))
    assert np.bincount(route_at_half(clf.predict_proba(texts)), minlength=3).tolist() == [2, 1, 2]
    with pytest.raises(ValueError):
        clf.calibrate(texts, mix=(0.5, 0.5))


def test_invalid_configuration_and_input():
    with pytest.raises(ValueError):
        HeuristicClassifier(n_tiers=1)
    with pytest.raises(ValueError):
        HeuristicClassifier(weights={"not_a_feature": 1.0})
    with pytest.raises(ValueError):
        HeuristicClassifier(thetas=(1.0,))
    with pytest.raises(TypeError):
        HeuristicClassifier().predict_proba("one string, not a list")


def test_save_load_round_trip(tmp_path):
    texts = [GREETING, FACTUAL, ANALYSIS, CODE_REVIEW, ""]
    for clf in (HeuristicClassifier(), HeuristicClassifier(n_tiers=4, temperature=0.5, version="h-test",
                                                           weights={"log_num_words": 0.7, "has_code": 2.0})):
        folder = tmp_path / clf.version
        assert clf.save(folder) == folder / CONFIG_NAME
        loaded = HeuristicClassifier.load(folder)
        assert (loaded.version, loaded.n_tiers, loaded.thetas) == (clf.version, clf.n_tiers, clf.thetas)
        assert np.array_equal(loaded.predict_proba(texts), clf.predict_proba(texts))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / CONFIG_NAME).write_text('{"kind": "learned"}')
    with pytest.raises(ValueError):
        HeuristicClassifier.load(tmp_path / "other")


# ---------------------------------------------------------------------------------------------- properties

_TRICKY = st.sampled_from(list("`~$\\^*_()[]{}<>=!?.,;:-+#@%&|'\"\n\t ") + ["```", "```python\n", "\\frac", "1.", "a)",
                                                                         "ABC ", "Abc ", "α", "5 GB", "x_y", "é"])
TEXTS = st.one_of(st.text(max_size=300), st.lists(st.one_of(_TRICKY, st.text(max_size=8)), max_size=40).map("".join))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_arbitrary_text_never_raises_and_gives_finite_probabilities(clf, text):
    vector = feature_vector(extract_features(text))
    assert np.all(np.isfinite(vector))
    proba = clf.predict_proba([text])
    assert np.all(np.isfinite(proba)) and np.all(proba >= 0) and abs(proba.sum() - 1) < 1e-9


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS, st.sampled_from(KEYWORD_PHRASES), st.sampled_from([" ", "\n", ". "]))
def test_adding_reasoning_keywords_never_lowers_p_large(clf, text, phrase, sep):
    before, after = clf.predict_proba([text, text + sep + phrase])
    assert after[-1] >= before[-1]
    assert clf.score([text + sep + phrase])[0] >= clf.score([text])[0]
