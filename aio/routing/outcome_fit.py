"""Routing fitted to the outcomes of the tiers actually served (docs/routing.md, "Fitting routing to your tiers").

`fit_routing` takes paired outcomes (each probe task answered by every tier, scored against its computed truth) and
the classifier's scores of their prompts, and makes a `RoutingFit`:
- per-tier probabilities P(tier right | prompt) (`classifier.outcome_calibration`), with bootstrap refits that
  give the quality estimate its interval;
- each tier's cost per request as a share of the largest tier's (κ, from the probe's own token counts);
- the λ of the quality target's rule (`quality_target`), chosen on the reference prompts;
- the answer scorer (`classifier.answer_scorer`) and the escalation thresholds of route-then-verify.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from aio.routing.escalation_fit import EscalationRule, choose_escalation, fit_scorers
from aio.routing.quality_target import TargetRule, cost_fraction, relative_accuracy, rule_for_target
from classifier.answer_scorer import AnswerScorer
from classifier.outcome_calibration import TierCalibration, fit_tier_calibration

BOOTSTRAP_FITS = 100
INTERVAL = 0.90


@dataclass(frozen=True)
class Estimate:
    """Estimated accuracy relative to always-largest, with its interval, and the cost share, of a routing."""
    relative_accuracy: float
    low: float
    high: float
    cost_share: float
    num_prompts: int

    def to_dict(self) -> dict[str, float]:
        return {"relative_accuracy": self.relative_accuracy, "low": self.low, "high": self.high,
                "cost_share": self.cost_share, "num_prompts": self.num_prompts}


@dataclass
class RoutingFit:
    classifier_version: str
    tiers: tuple[str, ...]
    fingerprints: dict[str, str]
    calibration: TierCalibration
    bootstrap: list[np.ndarray]  # weights of the bootstrap refits, for intervals
    cost_share: tuple[float, ...]
    target: float
    rule: TargetRule
    estimate: Estimate  # on the reference prompts the rule was chosen on
    scorer: AnswerScorer | None = None
    escalation: EscalationRule | None = None  # route-then-verify for the target (requests that cascade)
    counts: dict[str, int] = field(default_factory=dict)
    reference: np.ndarray | None = None  # the probe prompts' classifier probabilities: λ is chosen on them

    def rule_for(self, target: float) -> TargetRule:
        """The rule for another target, chosen on the same reference prompts."""
        if self.reference is None:
            raise ValueError("this fit keeps no reference prompts: fit it again (aio calibrate --refit)")
        return rule_for_target(self.p_right(self.reference), self.cost_share, target)

    @property
    def escalate_below(self) -> dict[str, float]:
        """Per tier but the last: the answer score below which an answer is answered again one tier up."""
        if self.escalation is None:
            return {}
        return dict(zip(self.tiers[:-1], self.escalation.thresholds))

    def p_right(self, proba: np.ndarray) -> np.ndarray:
        return self.calibration.predict(proba)

    def choose(self, proba: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
        """Tier indices for rows of the classifier's probabilities; `offsets` (per tier) lower a tier's estimated
        accuracy (the quality monitor's moves)."""
        p = self.p_right(proba)
        return self.rule.choose(p if offsets is None else p - offsets[None, :])

    def estimate_for(self, proba: np.ndarray, chosen: np.ndarray, cost: np.ndarray | None = None) -> Estimate:
        """The estimate, with the bootstrap refits' interval, for serving rows of `proba` on `chosen`; its cost share
        from `cost` (n, tiers) where the rows' costs are known (the probe's), else from the tiers' mean shares."""
        point = relative_accuracy(self.p_right(proba), chosen)
        spread = [relative_accuracy(TierCalibration(self.tiers, w, self.calibration.num_outcomes).predict(proba),
                                    chosen) for w in self.bootstrap]
        low, high = (np.quantile(spread, [(1 - INTERVAL) / 2, (1 + INTERVAL) / 2]) if spread else (point, point))
        share = cost_fraction(self.cost_share, chosen)
        if cost is not None and not np.isnan(cost).any():
            share = float(cost[np.arange(len(chosen)), chosen].sum() / max(cost[:, -1].sum(), 1e-12))
        return Estimate(point, float(low), float(high), share, len(chosen))

    def to_dict(self) -> dict[str, Any]:
        return {"classifier_version": self.classifier_version, "tiers": list(self.tiers),
                "fingerprints": self.fingerprints, "calibration": self.calibration.to_dict(),
                "bootstrap": [w.tolist() for w in self.bootstrap], "cost_share": list(self.cost_share),
                "target": self.target, "lambda": self.rule.lam, "estimate": self.estimate.to_dict(),
                "scorer": self.scorer.to_dict() if self.scorer is not None else None,
                "escalation": None if self.escalation is None else {
                    "lambda": self.escalation.rule.lam, "thresholds": list(self.escalation.thresholds),
                    "accuracy": self.escalation.accuracy, "cost_share": self.escalation.cost_share},
                "counts": self.counts,
                "reference": None if self.reference is None else np.round(self.reference, 5).tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoutingFit:
        calibration = TierCalibration.from_dict(data["calibration"])
        cost_share = tuple(float(x) for x in data["cost_share"])
        return cls(data["classifier_version"], tuple(data["tiers"]), dict(data["fingerprints"]), calibration,
                   [np.asarray(w, dtype=np.float64) for w in data["bootstrap"]], cost_share, float(data["target"]),
                   TargetRule(cost_share, float(data["lambda"])), Estimate(**data["estimate"]),
                   AnswerScorer.from_dict(data["scorer"]) if data.get("scorer") else None,
                   _escalation(data.get("escalation"), cost_share), dict(data.get("counts") or {}),
                   np.asarray(data["reference"], dtype=np.float64) if data.get("reference") else None)

    def retarget(self, target: float, reference: np.ndarray) -> RoutingFit:
        """The same fit with λ chosen anew for `target` on `reference` (the classifier's probabilities of the
        prompts to estimate on: recent traffic, or the probe's)."""
        p = self.p_right(reference)
        rule = rule_for_target(p, self.cost_share, target)
        fit = RoutingFit(**{**self.__dict__, "target": target, "rule": rule})  # the escalation rule stays the fit's
        fit.estimate = fit.estimate_for(reference, rule.choose(p))
        return fit


def fit_routing(proba: np.ndarray, correct: np.ndarray, cost: np.ndarray, tiers: tuple[str, ...], target: float,
                classifier_version: str, fingerprints: dict[str, str], seed: int = 0,
                results: Sequence[dict] | None = None) -> RoutingFit:
    """`proba`: the classifier's per-tier probabilities of the probe prompts; `correct`, `cost`: (n, n_tiers), NaN
    where a tier did not answer a prompt; `results`: per prompt, tier -> its probe result (the answers, for the
    answer scorer). The reference prompts are the probe's own."""
    calibration = fit_tier_calibration(proba, correct, tiers)
    rng = np.random.default_rng(seed)
    bootstrap = []
    for _ in range(BOOTSTRAP_FITS):
        rows = rng.integers(0, len(proba), len(proba))
        bootstrap.append(fit_tier_calibration(proba[rows], correct[rows], tiers).weights)
    share = cost_shares(cost)
    p = calibration.predict(proba)
    rule = rule_for_target(p, share, target)
    fit = RoutingFit(classifier_version, tuple(tiers), dict(fingerprints), calibration, bootstrap, share, target,
                     rule, Estimate(0.0, 0.0, 0.0, 0.0, 0),
                     counts={t: int((~np.isnan(correct[:, i])).sum()) for i, t in enumerate(tiers)},
                     reference=np.asarray(proba, dtype=np.float64))
    fit.estimate = fit.estimate_for(proba, rule.choose(p), cost)
    if results is not None:
        fit.scorer, scores = fit_scorers(results, tuple(tiers), p, correct, seed)
        fit.escalation = choose_escalation(p, scores, correct, cost, share, target)
    return fit


def _escalation(data: dict[str, Any] | None, cost_share: tuple[float, ...]) -> EscalationRule | None:
    if not data:
        return None
    return EscalationRule(TargetRule(cost_share, float(data["lambda"])), tuple(float(t) for t in data["thresholds"]),
                          float(data["accuracy"]), float(data["cost_share"]))


def cost_shares(cost: np.ndarray) -> tuple[float, ...]:
    """Each tier's mean cost per request over the prompts every tier answered, as a share of the largest's."""
    both = ~np.isnan(cost).any(axis=1)
    mean = np.nanmean(cost[both] if both.any() else cost, axis=0)
    return tuple(float(m / mean[-1]) if mean[-1] > 0 else float(i == len(mean) - 1) for i, m in enumerate(mean))
