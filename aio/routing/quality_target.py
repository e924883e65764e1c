"""Quality as a target an operator understands: `quality_target = 0.95` keeps at least 95% of always-largest's
accuracy, as estimated, at the least estimated cost.

Policy. With per-tier probabilities P(t right | prompt) fitted to the deployment's outcomes
(`classifier.outcome_calibration`) and each tier's cost per request as a share of the largest's (κ_t, measured on
the probe), a prompt goes to the tier that maximises P(t right) − λ·κ_t: the accuracy a tier adds must pay for
what it costs more. λ = 0 sends each prompt to its most accurate tier; a large λ to the cheapest. λ is the
largest value (least cost) at which the estimated accuracy of the routed traffic, Σ P(chosen tier right), is at
least `target` × Σ P(largest right), estimated over a reference set of prompts: recent traffic when there is
enough, else the probe set's prompts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LAMBDA_GRID = np.concatenate([[0.0], np.geomspace(1e-4, 10.0, 400)])


@dataclass(frozen=True)
class TargetRule:
    cost_share: tuple[float, ...]  # κ_t per tier, cheapest first; the largest's is 1
    lam: float

    def choose(self, p_right: np.ndarray) -> np.ndarray:
        """The tier index per row of P(t right): argmax of P − λκ; ties go to the cheaper tier."""
        utility = np.atleast_2d(p_right) - self.lam * np.asarray(self.cost_share)[None, :]
        return np.argmax(utility, axis=1)


def relative_accuracy(p_right: np.ndarray, chosen: np.ndarray) -> float:
    """Estimated accuracy of serving each row on `chosen`, as a share of always-largest's."""
    p_right = np.atleast_2d(p_right)
    served = p_right[np.arange(len(chosen)), chosen].sum()
    return float(served / max(p_right[:, -1].sum(), 1e-12))


def cost_fraction(cost_share: tuple[float, ...], chosen: np.ndarray) -> float:
    return float(np.asarray(cost_share)[chosen].mean()) if len(chosen) else 0.0


def rule_for_target(p_right: np.ndarray, cost_share: tuple[float, ...], target: float) -> TargetRule:
    """The cheapest rule (largest λ on the grid) whose estimated relative accuracy on `p_right` reaches `target`;
    λ = 0 when none does."""
    if not 0.0 < target <= 1.5:
        raise ValueError(f"quality_target must be in (0, 1.5], got {target}")
    best = TargetRule(tuple(cost_share), 0.0)
    for lam in LAMBDA_GRID:
        rule = TargetRule(tuple(cost_share), float(lam))
        if relative_accuracy(p_right, rule.choose(p_right)) >= target - 1e-12:
            best = rule
    return best
