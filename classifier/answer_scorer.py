"""The answer scorer: P(this answer is right | the prompt and the answer), FrugalGPT's learned scorer fed with what
only the server that generated the answer has: the chosen tokens' logprobs and the margins to the best alternative
token, the answer's length and how it ended, whether it states a final answer, and the prompt's own calibrated
probability for the tier (`outcome_calibration`).

One logistic model per tier (standardised features), fitted on outcomes of that tier's answers: probe results
against computed truth, and the quality monitor's verdicts. An answer without logprobs (a remote tier that does not
return them) is scored by its prompt probability alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from quality_monitor.final_answer import extract_answer

FEATURES = ("prompt_logit", "mean_logprob", "min_logprob", "low3_logprob", "tail_logprob", "mean_margin",
            "min_margin", "tail_margin", "unsure_share", "log_tokens", "cut_off", "marked_answer", "no_answer")
TAIL = 8  # the last tokens, where a final answer sits
UNSURE_MARGIN = 1.0  # a token whose best alternative is within this many nats of it is unsure
FLOOR = -20.0
DEFAULT_C = 0.3


@dataclass(frozen=True)
class AnswerEvidence:
    text: str
    logprobs: Sequence[float] | None  # the chosen tokens' (the model's raw distribution)
    margins: Sequence[float | None] | None  # chosen logprob minus the best other token's, per token
    finish_reason: str | None


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def answer_features(evidence: AnswerEvidence, prompt_p_right: float) -> np.ndarray | None:
    """The feature vector (FEATURES' order), or None without logprobs."""
    lps = [max(FLOOR, float(x)) for x in (evidence.logprobs or ()) if x == x]
    if not lps:
        return None
    margins = [max(FLOOR, float(m)) for m in (evidence.margins or ()) if m is not None and m == m] or [0.0]
    low3 = sorted(lps)[:3]
    tail, tail_m = lps[-TAIL:], margins[-TAIL:]
    explicit = extract_answer(evidence.text, explicit=True)
    found = extract_answer(evidence.text)
    return np.array([
        _logit(prompt_p_right), float(np.mean(lps)), min(lps), float(np.mean(low3)), float(np.mean(tail)),
        float(np.mean(margins)), min(margins), float(np.mean(tail_m)),
        float(np.mean([m < UNSURE_MARGIN for m in margins])), math.log1p(len(lps)),
        float(evidence.finish_reason == "length"), float(explicit is not None), float(found is None)])


@dataclass
class TierScorer:
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    num_outcomes: int

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = ((np.atleast_2d(x) - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-z))


@dataclass
class AnswerScorer:
    tiers: dict[str, TierScorer]

    def score(self, tier: str, evidence: AnswerEvidence, prompt_p_right: float) -> float:
        """P(the answer is right); the prompt probability when the tier has no scorer or the answer no logprobs."""
        scorer = self.tiers.get(tier)
        x = answer_features(evidence, prompt_p_right)
        if scorer is None or x is None:
            return float(prompt_p_right)
        return float(scorer.predict(x)[0])

    def to_dict(self) -> dict[str, Any]:
        return {"features": list(FEATURES), "tiers": {
            t: {"mean": s.mean.tolist(), "scale": s.scale.tolist(), "coef": s.coef.tolist(),
                "intercept": s.intercept, "num_outcomes": s.num_outcomes} for t, s in self.tiers.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnswerScorer:
        if list(data.get("features", [])) != list(FEATURES):
            raise ValueError("the answer scorer was fitted on other features; fit it again (aio calibrate --refit)")
        return cls({t: TierScorer(np.asarray(s["mean"]), np.asarray(s["scale"]), np.asarray(s["coef"]),
                                  float(s["intercept"]), int(s["num_outcomes"])) for t, s in data["tiers"].items()})


def fit_tier_scorer(x: np.ndarray, y: np.ndarray, c: float = DEFAULT_C,
                    sample_weight: np.ndarray | None = None) -> TierScorer | None:
    """None when the outcomes are all alike (nothing to tell apart)."""
    from sklearn.linear_model import LogisticRegression

    y = np.asarray(y).astype(int)
    if len(np.unique(y)) < 2:
        return None
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    model = LogisticRegression(C=c, max_iter=2000).fit((x - mean) / scale, y, sample_weight=sample_weight)
    return TierScorer(mean, scale, model.coef_[0], float(model.intercept_[0]), len(y))
