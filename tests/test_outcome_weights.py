"""classifier.outcome_weights: outcome labels of the open-ended prompts, the training weights per row kind, and the
choice rule (the chat sanity pairs gate; outcome log loss, then open-ended APGR decide)."""
from __future__ import annotations

import numpy as np
import pytest

from classifier.open_ended import Outcomes
from classifier.open_ended import outcome_labels
from classifier.outcome_weights import PAIR_GATE, Candidate, Mix, Weights, choose, weights_of


def _outcomes(small, medium, large) -> Outcomes:
    n = len(small)
    return Outcomes([f"o{i}" for i in range(n)], ["math"] * n, [f"t{i}" for i in range(n)],
                    {"small": np.array(small, float), "medium": np.array(medium, float),
                     "large": np.array(large, float)})


def test_open_label_is_the_cheapest_tier_within_a_point_of_large():
    rows, labels = outcome_labels(_outcomes([9, 3, 2, 1, np.nan], [8, 8, 3, 1, 5], [9, 9, 9, 1, 5]))
    assert rows.tolist() == [0, 1, 2, 3]  # a prompt with an unscored tier is left out
    assert labels.tolist() == [0, 1, 2, 0]  # all wrong alike: small (a larger tier would not help)


def test_weights_per_row_kind_and_chat_label():
    mix = Mix(list("abcdef"), np.array([0, 2, 0, 1, 2, 1]), np.array(["bench", "bench", "chat", "chat", "chat", "open"]),
              {})
    assert weights_of(mix, Weights(easy=10.0, hard=0.5, open=5.0)).tolist() == [1.0, 1.0, 10.0, 0.5, 0.5, 5.0]


def _candidate(cw, ow, loss, apgr, pairs, work_apgr=None) -> Candidate:
    work = {} if work_apgr is None else {"apgr": (work_apgr, work_apgr - 0.1, work_apgr + 0.1)}
    return Candidate(Weights(cw, cw, ow), loss, {"apgr": (apgr, apgr - 0.1, apgr + 0.1)}, work,
                     (pairs, pairs - 0.05, pairs), (1.0, 1.0, 1.0), np.zeros(0))


def test_choice_gates_on_chat_pairs_then_outcomes_decide():
    cands = [_candidate(20, 0, 0.500, 0.55, 0.99),   # hand labels heavy: passes the gate, worst open APGR
             _candidate(0, 20, 0.501, 0.80, 0.90),   # best APGR but fails the chat check: may not ship
             _candidate(5, 20, 0.502, 0.75, 0.96),
             _candidate(1, 20, 0.530, 0.85, 0.97)]   # best passing APGR but outcome loss far worse
    chosen = choose(cands)
    assert (chosen.weights.easy, chosen.weights.open) == (5, 20)
    assert choose([_candidate(0, 0, 0.5, 0.9, PAIR_GATE - 0.01)]) is None


def test_both_outcome_sets_count_alike_in_the_choice():
    cands = [_candidate(20, 0, 0.500, 0.70, 0.99, work_apgr=0.45),  # best on open-ended, worst on the workload
             _candidate(20, 1, 0.501, 0.62, 0.99, work_apgr=0.60)]
    assert cands[0].outcome_apgr == pytest.approx(0.575) and cands[1].outcome_apgr == pytest.approx(0.61)
    assert choose(cands) is cands[1]
    assert _candidate(1, 0, 0.5, 0.7, 1.0).outcome_apgr == pytest.approx(0.7)  # without workload outcomes


def test_workload_rows_are_never_trained_and_tasks_load_as_the_server_sees_them(tmp_path):
    from classifier.errors import ClassifierError
    from classifier.features import messages_to_text
    from classifier.task_outcomes import load_task_outcomes

    mix = Mix(["a", "b"], np.array([0, 0]), np.array(["chat", "work"]), {})
    assert weights_of(mix, Weights(easy=3.0, hard=1.0, open=1.0)).tolist() == [3.0, 0.0]
    path = tmp_path / "w.jsonl"
    path.write_text('{"id": "g1", "category": "arithmetic", "difficulty": 1, "prompt": "What is 2+2? Answer: N",'
                    ' "correct": {"small": false, "medium": true, "large": true}}\n')
    tasks = load_task_outcomes(path)
    assert tasks.texts == [messages_to_text([{"role": "user", "content": "What is 2+2? Answer: N"}])]
    assert [tasks.scores[t].tolist() for t in ("small", "medium", "large")] == [[0.0], [1.0], [1.0]]
    path.write_text('{"id": "g1", "category": "arithmetic", "prompt": "x", "correct": {"small": 1}}\n')
    with pytest.raises(ClassifierError, match="correct"):
        load_task_outcomes(path)
    with pytest.raises(ClassifierError, match="train_outcomes"):
        load_task_outcomes(tmp_path / "missing.jsonl")


def test_subject_correlation_follows_the_gap():
    from classifier.subject_outcomes import SubjectRow, correlation

    rows = [SubjectRow(f"s{i}", 30, 0.8 - 0.1 * i, 0.9, 0.2 + 0.05 * i) for i in range(5)]
    assert correlation(rows) == pytest.approx(1.0)  # the larger the gap, the higher the router's score
    assert correlation([SubjectRow(r.subject, r.n, r.weak, r.strong, -r.router) for r in rows]) == pytest.approx(-1.0)
    assert np.isnan(correlation(rows[:2]))
