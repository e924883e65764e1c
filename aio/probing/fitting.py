"""From stored probe results to the active routing fit: the tiers' paired outcomes, the classifier's scores of the
probe prompts, `outcome_fit.fit_routing`, saved for every replica."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.engine import Engine

from aio.probing.plan import MIN_TASKS
from aio.probing.store import ProbeOutcome, ProbeStore
from aio.routing.fit_store import save_active
from aio.routing.outcome_fit import RoutingFit, fit_routing
from classifier.features import messages_to_text

logger = logging.getLogger(__name__)


@dataclass
class PairedOutcomes:
    """Probe tasks (rows) answered by at least one tier, per tier (columns): NaN where a tier did not answer."""
    tiers: tuple[str, ...]
    task_ids: list[str]
    prompts: list[str]
    correct: np.ndarray
    cost: np.ndarray
    results: list[dict[str, ProbeOutcome]]  # per task: tier -> its answer

    def texts(self) -> list[str]:
        return [messages_to_text([{"role": "user", "content": p}]) for p in self.prompts]


def paired_outcomes(store: ProbeStore, fingerprints: dict[str, str]) -> PairedOutcomes:
    tiers = tuple(fingerprints)
    by_task: dict[str, dict[str, ProbeOutcome]] = {}
    for tier, fingerprint in fingerprints.items():
        for result in store.results(fingerprint):
            by_task.setdefault(result.task_id, {})[tier] = result
    ids = sorted(by_task)
    correct = np.full((len(ids), len(tiers)), np.nan)
    cost = np.full((len(ids), len(tiers)), np.nan)
    for i, task_id in enumerate(ids):
        for t, tier in enumerate(tiers):
            if (r := by_task[task_id].get(tier)) is not None:
                correct[i, t], cost[i, t] = float(r.correct), r.cost_usd
    prompts = [next(iter(by_task[i].values())).prompt for i in ids]
    return PairedOutcomes(tiers, ids, prompts, correct, cost, [by_task[i] for i in ids])


def refit(engine: Engine, classifier: Any, fingerprints: dict[str, str], target: float,
          note: str) -> RoutingFit | None:
    """Fits routing to the stored outcomes of `fingerprints` (tier -> fingerprint, cheapest first) and makes it the
    active fit; None (nothing saved) while a tier has fewer than MIN_TASKS outcomes."""
    outcomes = paired_outcomes(ProbeStore(engine), fingerprints)
    answered = (~np.isnan(outcomes.correct)).sum(axis=0)
    if len(outcomes.tiers) < 2 or (answered.min() if len(answered) else 0) < MIN_TASKS:
        logger.info("no routing fit yet: outcomes per tier %s (need %d each)",
                    dict(zip(outcomes.tiers, answered.tolist())), MIN_TASKS)
        return None
    proba = np.asarray(classifier.predict_proba(outcomes.texts()), dtype=np.float64)
    fit = fit_routing(proba, outcomes.correct, outcomes.cost, outcomes.tiers, target, classifier.version, fingerprints,
                      results=outcomes.results)
    save_active(engine, fit, note)
    return fit


def refit_routing(engine: Engine, router: Any, fingerprints: dict[str, str], target: float) -> RoutingFit | None:
    """`refit` for the router's classifier and tiers (what a server runs once its tiers are measured, or when its
    classifier changed)."""
    return refit(engine, router.classifier, {t: fingerprints[t] for t in router.tiers}, target,
                 note=f"fitted for classifier {router.classifier.version}")
