"""Cross-validation of routing fitted to the tiers' outcomes, on the family's shipped measurement (465 probe tasks
answered by each tier; never the end-to-end benchmark's evaluation part): what chose the default quality target,
the per-tier probabilities' inputs, the answer scorer's features and whether escalation pays.

    python -m benchmarks.routing_fit_cv [--repeats 10] [--measurements aio/data/measurements.jsonl.gz]

- targets: the calibrated classifier scores and the target's rule, fitted on 4/5 of the tasks, applied to the
  held-out fifth: measured relative accuracy and cost per target, against the estimate;
- inputs: the scores alone against the scores stacked with a k-nearest-neighbour prior over the probe prompts'
  embeddings, in 5-fold CV and held out by kind (each kind predicted from the others), and that prior used only
  near a probe prompt;
- scorer: the answer scorer's cross-validated ROC AUC per tier, against the mean logprob alone;
- escalation: route-then-verify with thresholds chosen on the training folds, applied to the held-out fold."""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

from aio.probing.shipped import SHIPPED
from aio.routing.escalation_fit import choose_escalation, fit_scorers
from aio.routing.quality_target import relative_accuracy, rule_for_target
from aio.routing.verify import route_then_verify
from classifier.outcome_calibration import fit_tier_calibration, score_features

TIERS = ("small", "medium", "large")
TARGETS = (0.85, 0.9, 0.92, 0.95, 0.98)


class Row(dict):
    __getattr__ = dict.get


def load(path: Path):
    by_task: dict[str, dict[str, Row]] = {}
    with gzip.open(path, "rt") as f:
        for line in f:
            row = json.loads(line)
            if row["kind"] == "result":
                by_task.setdefault(row["task_id"], {})[row["tier"]] = Row(row)
    ids = sorted(i for i, r in by_task.items() if len(r) == len(TIERS))
    results = [by_task[i] for i in ids]
    correct = np.array([[r[t]["correct"] for t in TIERS] for r in results], dtype=float)
    cost = np.array([[r[t]["cost_usd"] for t in TIERS] for r in results])
    return results, correct, cost


def splits(n: int, repeats: int, kinds: np.ndarray | None = None):
    if kinds is not None:
        for kind in sorted(set(kinds)):
            yield np.where(kinds != kind)[0], np.where(kinds == kind)[0]
        return
    for r in range(repeats):
        order = np.random.default_rng(r).permutation(n)
        for k in range(5):
            yield np.setdiff1d(order, order[k::5]), order[k::5]


def _measured(correct, cost, rows, chosen) -> tuple[float, float]:
    return (correct[rows, chosen].sum() / max(correct[rows, 2].sum(), 1),
            cost[rows, chosen].sum() / cost[rows, 2].sum())


def targets(proba, correct, cost, repeats: int) -> None:
    print("target  measured relative accuracy [min, max over repeats]  cost  estimate")
    for target in TARGETS:
        runs = []
        for r in range(repeats):
            sums = np.zeros(5)
            for train, test in _one_repeat(len(correct), r):
                calibration = fit_tier_calibration(proba[train], correct[train], TIERS)
                share = tuple(cost[train].mean(0) / cost[train, 2].mean())
                rule = rule_for_target(calibration.predict(proba[train]), share, target)
                chosen = rule.choose(calibration.predict(proba[test]))
                sums += [correct[test, chosen].sum(), correct[test, 2].sum(), cost[test, chosen].sum(),
                         cost[test, 2].sum(), relative_accuracy(calibration.predict(proba[test]), chosen) / 5]
            runs.append((sums[0] / sums[1], sums[2] / sums[3], sums[4]))
        a = np.array(runs)
        print(f"{target:5.2f}   {a[:, 0].mean():.3f} [{a[:, 0].min():.3f}, {a[:, 0].max():.3f}]"
              f"                       {a[:, 1].mean():.3f} {a[:, 2].mean():.3f}")


def _one_repeat(n: int, r: int):
    order = np.random.default_rng(r).permutation(n)
    for k in range(5):
        yield np.setdiff1d(order, order[k::5]), order[k::5]


def knn(embeddings, correct, train, test, k: int = 15) -> np.ndarray:
    sims = embeddings[test] @ embeddings[train].T
    nearest = np.argsort(-sims, axis=1)[:, :k]
    w = np.take_along_axis(sims, nearest, 1).clip(0) ** 2
    p = (np.einsum("ik,ikt->it", w, correct[train][nearest]) + correct[train].mean(0)) / (w.sum(1, keepdims=True) + 1)
    return np.clip(p, 0.01, 0.99)


def inputs(proba, correct, cost, embeddings, kinds) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    logit = lambda p: np.log(p / (1 - p))  # noqa: E731
    for label, split in (("5-fold CV", list(splits(len(correct), 1))), ("held out by kind", list(splits(len(correct), 1, kinds)))):
        calibrated, stacked, routes = np.zeros(correct.shape), np.zeros(correct.shape), {"scores": [], "stacked": []}
        for train, test in split:
            calibration = fit_tier_calibration(proba[train], correct[train], TIERS)
            calibrated[test] = calibration.predict(proba[test])
            inner = np.zeros((len(train), 3))
            for itrain, itest in _one_repeat(len(train), 7):
                inner[itest] = knn(embeddings, correct, train[itrain], train[itest])
            x = np.hstack([score_features(proba[train]), logit(inner)])
            models = [LogisticRegression(max_iter=2000).fit(x, correct[train, t]) for t in range(3)]
            xt = np.hstack([score_features(proba[test]), logit(knn(embeddings, correct, train, test))])
            stacked[test] = np.column_stack([m.predict_proba(xt)[:, 1] for m in models])
            share = tuple(cost[train].mean(0) / cost[train, 2].mean())
            for name, p_train, p_test in (("scores", calibration.predict(proba[train]), calibrated[test]),
                                          ("stacked", np.column_stack([m.predict_proba(x)[:, 1] for m in models]),
                                           stacked[test])):
                chosen = rule_for_target(p_train, share, 0.9).choose(p_test)
                routes[name].append((*_measured(correct, cost, test, chosen), relative_accuracy(p_test, chosen),
                                     len(test)))
        for t, tier in enumerate(TIERS):
            print(f"{label}: {tier} AUC, scores {roc_auc_score(correct[:, t], calibrated[:, t]):.3f}, "
                  f"stacked with kNN {roc_auc_score(correct[:, t], stacked[:, t]):.3f}")
        for name, runs in routes.items():
            a = np.array(runs)
            w = a[:, 3] / a[:, 3].sum()
            print(f"{label}: target 0.90 with {name}: measured {w @ a[:, 0]:.3f} at cost {w @ a[:, 1]:.3f}, "
                  f"estimate {w @ a[:, 2]:.3f}")


def gated(proba, correct, cost, embeddings, kinds, threshold: float = 0.85) -> None:
    """The neighbour prior only for prompts close to a probe prompt (max cosine >= threshold), the calibrated scores
    elsewhere; λ chosen on the calibrated scores of the training prompts, as the shipped rule chooses it."""
    from sklearn.linear_model import LogisticRegression

    logit = lambda p: np.log(p / (1 - p))  # noqa: E731
    for label, split in (("5-fold CV", list(splits(len(correct), 1))), ("held out by kind", list(splits(len(correct), 1, kinds)))):
        sums = np.zeros(6)
        for train, test in split:
            calibration = fit_tier_calibration(proba[train], correct[train], TIERS)
            inner = np.zeros((len(train), 3))
            for itrain, itest in _one_repeat(len(train), 7):
                inner[itest] = knn(embeddings, correct, train[itrain], train[itest])
            x = np.hstack([score_features(proba[train]), logit(inner)])
            models = [LogisticRegression(max_iter=2000).fit(x, correct[train, t]) for t in range(3)]
            xt = np.hstack([score_features(proba[test]), logit(knn(embeddings, correct, train, test))])
            near = (embeddings[test] @ embeddings[train].T).max(1) >= threshold
            p = np.where(near[:, None], np.column_stack([m.predict_proba(xt)[:, 1] for m in models]),
                         calibration.predict(proba[test]))
            share = tuple(cost[train].mean(0) / cost[train, 2].mean())
            chosen = rule_for_target(calibration.predict(proba[train]), share, 0.9).choose(p)
            sums += [correct[test, chosen].sum(), correct[test, 2].sum(), cost[test, chosen].sum(),
                     cost[test, 2].sum(), relative_accuracy(p, chosen) * len(test), near.sum()]
        n = len(correct)
        print(f"{label}: gated at cosine {threshold}: target 0.90 measured {sums[0] / sums[1]:.3f} at cost "
              f"{sums[2] / sums[3]:.3f}, estimate {sums[4] / n:.3f}; {sums[5] / n:.0%} of prompts near a probe prompt")


def scorer_and_escalation(results, proba, correct, cost) -> None:
    from sklearn.metrics import roc_auc_score

    calibration = fit_tier_calibration(proba, correct, TIERS)
    _, scores = fit_scorers(results, TIERS, calibration.predict(proba), correct)
    for t, tier in enumerate(TIERS[:-1]):
        mean_logprob = np.array([np.mean(r[tier]["token_logprobs"]) for r in results])
        print(f"answer scorer, {tier}: cross-fitted AUC {roc_auc_score(correct[:, t], scores[:, t]):.3f}; "
              f"mean logprob alone {roc_auc_score(correct[:, t], mean_logprob):.3f}")
    for target in (0.9, 0.95, 0.98):
        sums = np.zeros(4)
        for train, test in _one_repeat(len(correct), 0):
            cal = fit_tier_calibration(proba[train], correct[train], TIERS)
            sub = [results[i] for i in train]
            _, s_train = fit_scorers(sub, TIERS, cal.predict(proba[train]), correct[train])
            share = tuple(cost[train].mean(0) / cost[train, 2].mean())
            rule = choose_escalation(cal.predict(proba[train]), s_train, correct[train], cost[train], share, target)
            scorer, _ = fit_scorers(sub, TIERS, cal.predict(proba[train]), correct[train])
            from aio.routing.escalation_fit import evidence
            p_test = cal.predict(proba[test])
            s_test = np.full((len(test), 3), np.nan)
            for t, tier in enumerate(TIERS[:-1]):
                s_test[:, t] = [scorer.score(tier, evidence(results[i][tier]), p_test[q, t]) for q, i in enumerate(test)]
            outcome = route_then_verify(p_test, s_test, cost[test], rule.rule, rule.thresholds)
            sums += [correct[test, outcome.tier].sum(), correct[test, 2].sum(), outcome.cost.sum(), cost[test, 2].sum()]
        print(f"route-then-verify, target {target}: measured {sums[0] / sums[1]:.3f} at cost {sums[2] / sums[3]:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measurements", type=Path, default=SHIPPED)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    from classifier.default_model import load_default
    from classifier.features import messages_to_text

    results, correct, cost = load(args.measurements)
    texts = [messages_to_text([{"role": "user", "content": r["small"]["prompt"]}]) for r in results]
    classifier = load_default()
    proba = np.asarray(classifier.predict_proba(texts), dtype=np.float64)
    embeddings = np.asarray(classifier.embed(texts))
    embeddings = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    kinds = np.array([r["small"]["category"] for r in results])
    print(f"{len(results)} tasks; accuracy per tier {dict(zip(TIERS, correct.mean(0).round(3)))}")
    targets(proba, correct, cost, args.repeats)
    inputs(proba, correct, cost, embeddings, kinds)
    gated(proba, correct, cost, embeddings, kinds)
    scorer_and_escalation(results, proba, correct, cost)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
