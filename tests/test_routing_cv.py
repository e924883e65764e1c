"""Grouped cross-validation, bootstrap intervals, and the chat agreement measures (`classifier.cv`,
`classifier.cv_report`, `classifier.chat_data`)."""
from __future__ import annotations

import numpy as np
import pytest

from classifier import cv_report, routing_metrics as rm
from classifier.chat_data import (SANITY_PATH, TRAIN_PATH, ChatSet, agreement, category_pairs, difficulty_to_tier,
                                  explicit_pairs, load_chat, pair_order)
from classifier.cv import bootstrap, cross_val_proba, grouped_folds, near_duplicate_groups


def test_near_duplicates_share_a_group_transitively():
    e = np.array([[1, 0, 0], [0.99, 0.14, 0], [0.96, 0.28, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    g = near_duplicate_groups(e, threshold=0.98)
    assert g[0] == g[1] == g[2]  # 0~1 and 1~2, though 0 and 2 are further apart
    assert len({g[0], g[3], g[4]}) == 3


def test_grouped_folds_keep_groups_together_and_balance():
    groups = np.repeat(np.arange(50), np.arange(1, 51) % 4 + 1)
    folds = grouped_folds(groups, 5, seed=1)
    for g in np.unique(groups):
        assert len(set(folds[groups == g])) == 1
    sizes = np.bincount(folds, minlength=5)
    assert sizes.max() - sizes.min() <= 4
    assert not np.array_equal(folds, grouped_folds(groups, 5, seed=2))  # a new deal per repeat


def test_cross_val_proba_never_predicts_a_row_it_trained_on():
    n = 40
    groups = np.arange(n) // 2
    seen = []

    def fit_predict(train, test):
        assert not set(train) & set(test)
        assert not set(groups[train]) & set(groups[test])
        seen.append(test)
        return np.tile([0.25, 0.75], (len(test), 1))

    oof = cross_val_proba(fit_predict, n, 2, groups, k=4, repeats=2)
    assert oof.shape == (2, n, 2) and not np.isnan(oof).any()
    extra = cross_val_proba(fit_predict, n, 2, groups, k=4, repeats=1, eval_rows=np.arange(10))
    assert np.isnan(extra[0, 10:]).all() and not np.isnan(extra[0, :10]).any()


def test_bootstrap_interval_brackets_the_value_and_narrows_with_n():
    rng = np.random.default_rng(0)
    small, large = rng.normal(size=50), rng.normal(size=5000)
    v1, lo1, hi1 = bootstrap(lambda idx: small[idx].mean(), len(small), 300)
    v2, lo2, hi2 = bootstrap(lambda idx: large[idx].mean(), len(large), 300)
    assert lo1 <= v1 <= hi1 and lo2 <= v2 <= hi2
    assert hi2 - lo2 < (hi1 - lo1) / 3


def test_two_tier_report_matches_routing_metrics_on_one_repeat():
    rng = np.random.default_rng(3)
    n = 300
    weak = (rng.random(n) < 0.6).astype(float)
    strong = np.maximum(weak, (rng.random(n) < 0.5).astype(float))
    p_small = np.clip(0.5 + 0.4 * (weak - strong) + 0.1 * rng.normal(size=n), 0.01, 0.99)
    oof = np.stack([p_small, 1 - p_small], axis=1)[None]
    report = cv_report.two_tier(oof, weak, strong, n_boot=100)
    assert report["apgr"][0] == pytest.approx(rm.apgr(1 - p_small, weak, strong))
    assert report["cpt50"][0] == pytest.approx(rm.cpt(1 - p_small, weak, strong, 0.5))
    assert report["apgr"][1] <= report["apgr"][0] <= report["apgr"][2]
    assert report["apgr"][0] > 0.7  # an informative score beats random (~0.55)


def test_three_tier_cost_at_accuracy():
    correct = np.array([[1, 1, 1], [0, 1, 1], [0, 0, 1], [1, 1, 1]], dtype=float)
    perfect = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=float)
    costs = (1.0, 2.0, 10.0)
    assert cv_report.cost_at_accuracy(perfect, correct, costs) == pytest.approx((1 + 2 + 10 + 1) / 4 / 10)
    assert cv_report.accuracy_at_cost(perfect, correct, costs, 0.36) == pytest.approx(1.0)
    assert cv_report.accuracy_at_cost(perfect, correct, costs, 0.2) == pytest.approx(0.5)  # all on the small tier


def test_calibration_error_tells_calibrated_from_overconfident():
    from classifier.calibration import calibration_error

    rng = np.random.default_rng(0)
    p = rng.random(20000)
    event = rng.random(20000) < p
    assert calibration_error(p, event) < 0.02
    assert calibration_error(np.clip(1.5 * p - 0.25, 0, 1), event) > 0.06  # pushed towards 0 and 1
    assert calibration_error(np.full(8, 0.5), np.array([1, 0] * 4)) == 0.0
    # cv_report reads P(label <= t) from per-tier probabilities: a calibrated 3-tier oof scores low on both
    labels = rng.integers(0, 3, 6000)
    oof = np.full((1, 6000, 3), 1 / 3)
    report = cv_report.calibration(oof, labels, n_boot=20)
    assert set(report) == {"ece_le_0", "ece_le_1"} and all(v[0] < 0.03 for v in report.values())
    assert cv_report.calibration(np.tile([0.9, 0.05, 0.05], (1, 6000, 1)), labels, n_boot=20)["ece_le_0"][0] > 0.5


# ---- the chat sets -----------------------------------------------------------------------------------------

def test_chat_files_are_well_formed_and_disjoint():
    sanity, train = load_chat(SANITY_PATH), load_chat(TRAIN_PATH)
    assert len(sanity.texts) >= 300 and len(train.texts) >= 240
    folded = {t.strip().lower() for t in sanity.texts}
    assert len(folded) == len(sanity.texts) and not folded & {t.strip().lower() for t in train.texts}
    wanted = {"greeting", "arithmetic", "code", "systems", "writing", "knowledge", "reasoning", "data", "summary"}
    assert set(sanity.categories) == wanted == set(train.categories)
    pairs = explicit_pairs(sanity)
    assert len(pairs) >= 50
    for e, h in pairs:
        assert sanity.difficulty[e] <= 2 and sanity.difficulty[h] >= 4 and sanity.categories[e] == sanity.categories[h]


def test_difficulty_to_tier():
    assert difficulty_to_tier([1, 2, 3, 4, 5]).tolist() == [0, 0, 1, 2, 2]
    assert difficulty_to_tier([1, 3, 4], n_tiers=2).tolist() == [0, 0, 1]


def test_agreement_measures():
    chat = ChatSet(["a", "b", "c", "d"], ["hi", "x", "design", "y"], np.array([1, 2, 5, 4]),
                   ["greeting", "code", "greeting", "code"], ["p1", None, "p1", None])
    assert explicit_pairs(chat) == [(0, 2)]
    assert sorted(category_pairs(chat)) == [(0, 2), (1, 3)]
    right = np.array([0.1, 0.2, 0.9, 0.8])
    assert pair_order(right, category_pairs(chat)) == 1.0
    assert pair_order(right[::-1], category_pairs(chat)) == 0.0
    result = agreement(right, chat, n_boot=50)
    assert result["kendall_tau"][0] > 0.9 and result["explicit_pairs"][0] == 1.0
