"""The figures of routing fitted to the tiers' outcomes (the probe, the quality target, the answer scorer), on the
evaluation part's per-tier answers, with the product's own code: `RoutingFit.choose` for `auto` at a target,
`verify.route_then_verify` for the cascade, `AnswerScorer` for the scores. Intervals: 90% bootstrap over tasks."""
from __future__ import annotations

import numpy as np

from aio.routing.escalation_fit import LAMBDAS, THRESHOLDS
from aio.routing.outcome_fit import RoutingFit
from aio.routing.quality_target import LAMBDA_GRID, TargetRule
from aio.routing.verify import route_then_verify
from benchmarks.end_to_end.curves import intervals
from benchmarks.end_to_end.policies import TIERS, TierAnswers
from benchmarks.end_to_end.traffic import Answer
from classifier.answer_scorer import AnswerEvidence

RESAMPLES = 1000
TARGETS = (0.85, 0.9, 0.95, 0.98)


def answer_scores(fit: RoutingFit, proba: np.ndarray, by_tier: dict[str, list[Answer]]) -> np.ndarray:
    """(tasks, tiers): the fit's answer scorer on each cheaper tier's answer (NaN for the largest, or without
    logprobs)."""
    p_right = fit.p_right(proba)
    out = np.full((len(proba), len(TIERS)), np.nan)
    for t, tier in enumerate(TIERS[:-1]):
        for i, answer in enumerate(by_tier[tier]):
            if answer.logprobs:
                evidence = AnswerEvidence(answer.text, answer.logprobs, answer.margins, answer.finish_reason)
                out[i, t] = fit.scorer.score(tier, evidence, float(p_right[i, t]))
    return out


def _auc(y: np.ndarray, s: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    known = ~np.isnan(s)
    y, s = y[known], s[known]
    return float(roc_auc_score(y, s)) if 0 < y.sum() < len(y) else float("nan")


def _relative(answers: TierAnswers, tier: np.ndarray, cost: np.ndarray, rows: np.ndarray) -> tuple[float, float]:
    right = answers.correct[rows, tier[rows]].sum() / max(answers.correct[rows, 2].sum(), 1)
    return float(right), float(cost[rows].sum() / answers.cost[rows, 2].sum())


def mixing_frontier(answers: TierAnswers, rows: np.ndarray) -> list[tuple[float, float]]:
    """(cost, relative accuracy) of the fixed tiers; random mixing of two of them lies on the segment between."""
    points = []
    for t in range(len(TIERS)):
        tier = np.full(len(answers), t)
        points.append(_relative(answers, tier, answers.cost[:, t], rows)[::-1])
    return sorted(points)


def mixing_accuracy(frontier: list[tuple[float, float]], cost: float) -> float:
    """The best relative accuracy random mixing of fixed tiers reaches at `cost` (the upper hull, interpolated)."""
    hull: list[tuple[float, float]] = []
    for point in frontier:
        while len(hull) >= 2 and (hull[-1][1] - hull[-2][1]) * (point[0] - hull[-2][0]) <= \
                (point[1] - hull[-2][1]) * (hull[-1][0] - hull[-2][0]):
            hull.pop()
        hull.append(point)
    costs, accuracies = zip(*hull)
    return float(np.interp(cost, costs, accuracies, left=np.nan, right=accuracies[-1]))


def figures(fit: RoutingFit, proba: np.ndarray, answers: TierAnswers, by_tier: dict[str, list[Answer]]) -> dict:
    """Everything the issue's goals read, on these tasks."""
    n = len(answers)
    p_right = fit.p_right(proba)
    scores = answer_scores(fit, proba, by_tier)
    every = np.arange(n)
    policies: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    default = fit.rule.choose(p_right)
    policies[f"auto, quality target {fit.target:g} (the default)"] = (default, answers.cost[every, default])
    for target in TARGETS:
        chosen = fit.rule_for(target).choose(p_right)
        policies[f"auto, quality target {target:g}"] = (chosen, answers.cost[every, chosen])
    if fit.escalation is not None:
        outcome = route_then_verify(p_right, scores, answers.cost, fit.escalation.rule, fit.escalation.thresholds)
        policies[f"auto + cascade (scorer), target {fit.target:g}"] = (outcome.tier, outcome.cost)

    def statistic(rows: np.ndarray) -> dict[str, float]:
        out = {}
        for name, (tier, cost) in policies.items():
            out[f"{name}: accuracy"], out[f"{name}: cost"] = _relative(answers, tier, cost, rows)
        for t, tier in enumerate(TIERS[:-1]):
            out[f"scorer AUC, {tier}'s answers"] = _auc(answers.correct[rows, t].astype(float), scores[rows, t])
            out[f"mean logprob AUC, {tier}'s answers"] = _auc(answers.correct[rows, t].astype(float),
                                                             answers.confidence[rows, t])
        return out

    point = statistic(every)
    bands = intervals(n, statistic, RESAMPLES)
    estimate = fit.estimate_for(proba, default)
    measured = point[f"auto, quality target {fit.target:g} (the default): accuracy"]
    return {"figures": {k: (v, *bands[k]) for k, v in point.items()},
            "estimate_vs_truth": {"estimate": estimate.to_dict(), "measured": measured,
                                  "gap_points": 100 * (estimate.relative_accuracy - measured)},
            "curve_vs_mixing": curve_vs_mixing(fit, p_right, answers),
            "cascade_sweep": cascade_sweep(p_right, scores, answers, fit.cost_share)}


def curve_vs_mixing(fit: RoutingFit, p_right: np.ndarray, answers: TierAnswers) -> dict:
    """`auto` over λ against random mixing of fixed tiers at the same cost: the smallest margin (auto − mixing)."""
    rows = np.arange(len(answers))
    frontier = mixing_frontier(answers, rows)
    margins = []
    for lam in LAMBDA_GRID:
        chosen = TargetRule(fit.cost_share, float(lam)).choose(p_right)
        accuracy, cost = _relative(answers, chosen, answers.cost[rows, chosen], rows)
        mix = mixing_accuracy(frontier, cost)
        if not np.isnan(mix):
            margins.append((cost, accuracy, mix))
    worst = min(margins, key=lambda m: m[1] - m[2])
    return {"points": len(margins), "above_everywhere": all(a >= m - 1e-9 for _, a, m in margins),
            "smallest_margin": {"cost": worst[0], "auto": worst[1], "mixing": worst[2]}}


def cascade_sweep(p_right: np.ndarray, scores: np.ndarray, answers: TierAnswers, share: tuple[float, ...]) -> dict:
    """The cheapest route-then-verify (λ, thresholds) at 98% of always-large's accuracy on these tasks, chosen in
    hindsight: a bound on what the cascade can do with these scores, not a policy."""
    rows = np.arange(len(answers))
    best = None
    for lam in LAMBDAS:
        for small in THRESHOLDS:
            for medium in THRESHOLDS:
                outcome = route_then_verify(p_right, scores, answers.cost, TargetRule(share, float(lam)),
                                            (small, medium))
                accuracy, cost = _relative(answers, outcome.tier, outcome.cost, rows)
                if accuracy >= 0.98 and (best is None or cost < best["cost"]):
                    best = {"cost": cost, "accuracy": accuracy, "lambda": float(lam), "thresholds": [small, medium]}
    return {"hindsight_cost_at_98": best}


def text(results: dict) -> str:
    """The issue's goals, each figure with its 90% interval."""
    def f(name: str) -> str:
        value, low, high = results["learned"]["figures"][name]
        return f"{value:.1%} [{low:.1%}, {high:.1%}]"

    learned, lines = results["learned"], ["", "Routing fitted to the tiers' outcomes (evaluation part, per-tier answers):"]
    for name in learned["figures"]:
        if name.endswith(": accuracy"):
            policy = name[:-len(": accuracy")]
            lines.append(f"  {policy}: accuracy {f(name)} of always-large's at {f(policy + ': cost')} of its cost")
        elif "AUC" in name:
            value, low, high = learned["figures"][name]
            lines.append(f"  {name}: {value:.3f} [{low:.3f}, {high:.3f}]")
    e = learned["estimate_vs_truth"]
    lines.append(f"  quality estimate {e['estimate']['relative_accuracy']:.1%} [{e['estimate']['low']:.1%}, "
                 f"{e['estimate']['high']:.1%}] vs measured {e['measured']:.1%}: {e['gap_points']:+.1f} points")
    c = learned["curve_vs_mixing"]
    lines.append(f"  auto's curve above random mixing of fixed tiers at every cost: {c['above_everywhere']} "
                 f"(smallest margin at cost {c['smallest_margin']['cost']:.1%}: auto {c['smallest_margin']['auto']:.1%}"
                 f" vs mixing {c['smallest_margin']['mixing']:.1%})")
    lines.append(f"  the cascade's cheapest (λ, thresholds) at 98% in hindsight: {learned['cascade_sweep']}")
    for phase, data in results.get("out_of_box", {}).items():
        auto = data["auto"]
        lines.append(f"Out of the box ({phase}): live auto {auto['relative_accuracy']:.1%} of always-large's accuracy "
                     f"at {auto['cost_fraction']:.1%} of its cost, served by {auto['served_by']}; dashboard estimate "
                     f"{data['dashboard_estimate']}")
        if "auto_cascade" in data:
            c = data["auto_cascade"]
            lines.append(f"  with the cascade: {c['relative_accuracy']:.1%} at {c['cost_fraction']:.1%}, "
                         f"{c['cascaded']} cascaded")
        if "probe_s" in data:
            lines.append(f"  probe: {data['probe_s']:.0f} s over two runs {[round(s) for s in data['probe_s_runs']]} "
                         f"(killed after {data['done_before_kill']}, resumed at {data['done_after_restart']}); "
                         f"served while probing: {data['served_while_probing']}")
    return "\n".join(lines)
