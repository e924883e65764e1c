"""The quality an operator gets, as estimated: for the requests `auto` routed in a time range, the routing fit's
P(served tier right) summed, as a share of P(largest tier right) summed over the same prompts (accuracy relative
to always-largest), with the interval of the fit's bootstrap refits. Requests sent to a named model are the
client's choice and left out. With fewer than `MIN_REQUESTS` routed requests it is the fit's own estimate on the
probe prompts, and says so."""
from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from aio.db.models import Request
from aio.routing.outcome_fit import RoutingFit
from aio.routing.reasons import Reason

MIN_REQUESTS = 20
AUTO_ROUTED = tuple(r.value for r in Reason if r is not Reason.EXPLICIT)


def quality_estimate(connection: Connection, fit: RoutingFit | None, start: datetime, end: datetime
                     ) -> dict[str, Any] | None:
    """{"relative_accuracy", "low", "high", "cost_share", "num_requests", "target", "on"}; None without a fit."""
    if fit is None:
        return None
    rows = connection.execute(
        sa.select(Request.tier, Request.tier_scores)
        .where(Request.created_at >= start, Request.created_at < end, Request.status == "ok",
               Request.routing_reason.in_(AUTO_ROUTED), Request.tier_scores.is_not(None))).all()
    usable = [(fit.tiers.index(tier), scores) for tier, scores in rows
              if tier in fit.tiers and scores and len(scores) == len(fit.tiers)]
    if len(usable) < MIN_REQUESTS:
        return {**fit.estimate.to_dict(), "num_requests": len(usable), "target": fit.target, "on": "probe prompts"}
    chosen = np.array([t for t, _ in usable])
    proba = np.array([s for _, s in usable], dtype=np.float64)
    estimate = fit.estimate_for(proba, chosen)
    return {**estimate.to_dict(), "num_requests": len(usable), "target": fit.target, "on": "routed traffic"}
