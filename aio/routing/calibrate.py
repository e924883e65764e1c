"""`aio router calibrate --large-share 0.2`: the quality threshold that sends about that share of recent
routed traffic to the large tier (what RouteLLM users set), stored for every server to pick up."""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from aio.db.models import Request
from aio.db.records import utcnow
from aio.routing import registry
from aio.routing.router import Router
from aio.settings import TIER_ORDER

MIN_REQUESTS = 20


class CalibrationError(ValueError):
    pass


@dataclass
class CalibrationReport:
    quality: float
    num_requests: int
    num_rescored: int  # prompts scored again with the classifier in service (the rest use the logged scores)
    shares: dict[str, float]  # the tier shares the new threshold gives on this traffic


def recent_scores(engine: Engine, classifier: Any, since: timedelta) -> tuple[np.ndarray, int]:
    """Per-tier probabilities of recent classifier-routed requests: re-scored from the prompt when it was
    logged, else the scores logged with the request."""
    from classifier.features import messages_to_text

    query = (sa.select(Request.prompt, Request.tier_scores)
             .where(Request.created_at >= utcnow() - since, Request.routing_reason.in_(("classifier", "escalation"))))
    texts, logged = [], []
    with Session(engine) as session:
        for prompt, scores in session.execute(query):
            if prompt:
                try:
                    texts.append(messages_to_text(json.loads(prompt)))
                    continue
                except (ValueError, TypeError):
                    pass
            if scores:
                logged.append([float(s) for s in scores])
    rows = []
    if texts:
        rows.append(np.asarray(classifier.predict_proba(texts), dtype=np.float64))
    if logged:
        width = max(len(r) for r in logged)
        rows.append(np.asarray([r + [0.0] * (width - len(r)) for r in logged], dtype=np.float64))
    if not rows:
        return np.zeros((0, 0)), 0
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 0), (0, width - r.shape[1]))) for r in rows]
    return np.concatenate(rows), len(texts)


def calibrate_large_share(engine: Engine, router: Router, large_share: float, since: timedelta,
                          apply: bool = True) -> CalibrationReport:
    if not 0.0 <= large_share <= 1.0:
        raise CalibrationError(f"--large-share must be in [0, 1], got {large_share}")
    if len(router.tiers) < 2:
        raise CalibrationError("only one tier is configured: there is nothing to calibrate")
    proba, num_rescored = recent_scores(engine, router.classifier, since)
    if len(proba) < MIN_REQUESTS:
        raise CalibrationError(f"only {len(proba)} routed requests in the window (need >= {MIN_REQUESTS}): "
                               "widen --since or wait for traffic")
    quality = quality_for_large_share(router, proba, large_share)
    shares = tier_shares(router, proba, quality)
    if apply:
        registry.set_router_state(engine, quality=quality, updated_by="aio router calibrate",
                                  note=f"large share {large_share:.3f} over {len(proba)} requests in {since}")
    return CalibrationReport(quality, len(proba), num_rescored, shares)


def quality_for_large_share(router: Router, proba: np.ndarray, large_share: float) -> float:
    """The quality at which about `large_share` of these rows go to the largest tier: it is chosen when the
    next-largest tier's P(good) falls short of that tier's threshold."""
    below = router.tiers[-2]
    p_good = np.cumsum(proba, axis=1)[:, min(TIER_ORDER.index(below), proba.shape[1] - 1)]
    ordered = np.sort(p_good)
    k = int(round(large_share * len(ordered)))
    cut = 0.0 if k == 0 else (1.0 + 1e-6 if k >= len(ordered) else float((ordered[k - 1] + ordered[k]) / 2))
    return min(1.0, max(0.0, cut - router.offsets.get(below, 0.0)))


def tier_shares(router: Router, proba: np.ndarray, quality: float) -> dict[str, float]:
    counts = {t: 0 for t in router.tiers}
    for row in proba:
        counts[router.decide(row, quality).tier] += 1
    return {t: c / len(proba) for t, c in counts.items()}
