"""The dashboard's payloads, one function per JSON endpoint (and the CLI report): plain dicts of numbers.
Each takes an open connection and a `TimeRange`; nothing here knows HTTP."""
from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from aio.reports import latency as latency_panel
from aio.reports import quality as quality_panel
from aio.reports import queries
from aio.reports import router_panel
from aio.reports.ranges import TimeRange
from aio.db.rollups import NO_TIER

DEFAULT_TOP_N = 10
DEFAULT_SAMPLES = 20


def _kpis(usage: dict[str, Any], quality: dict[str, Any] | None, ttft: dict[str, Any] | None) -> dict[str, Any]:
    return {**usage,
            "quality_pass_rate": quality["pass_rate"] if quality else None,
            "quality_verdicts": quality["verdicts"] if quality else 0,
            "judge_cost_usd": quality["judge_cost_usd"] if quality else 0.0,
            "ttft_p95_ms": ttft["p95"] if ttft else None}


def summary(connection: Connection, r: TimeRange) -> dict[str, Any]:
    """KPI tiles, in total and per tier: requests, tokens, cost, all-large baseline, savings ($, %), error rate
    (requests a tier took that did not end "ok"), quality pass rate of the verified samples, judge cost (not part
    of the cost), p95 time to first token, and the requests the confidence cascade answered again with what their
    replaced answers cost (part of the cost; under the tier that served the last answer). Requests refused before
    any tier took them (4xx: bad input, auth, limits) are not a tier and not errors of the service: they are
    counted on their own under `rejected`."""
    by_tier = queries.sums_by_tier(connection, r)
    rejected = by_tier.pop(NO_TIER, None)
    quality = quality_panel.pass_rates(connection, r)
    ttft = latency_panel.latency(connection, r, ("ttft_ms",))["tiers"]
    cascades = queries.cascades_by_tier(connection, r)
    none = {"cascades": 0, "cascade_cost_usd": 0.0}
    tiers = {tier: {**_kpis(usage, quality["tiers"].get(tier), ttft.get(tier, {}).get("ttft_ms")),
                    **cascades.get(tier, none)}
             for tier, usage in by_tier.items()}
    total = _kpis(queries.totals(by_tier), quality["total"] if quality["total"]["verdicts"] else None,
                  ttft.get(latency_panel.ALL, {}).get("ttft_ms"))
    total["cascades"] = sum(values["cascades"] for values in tiers.values())
    total["cascade_cost_usd"] = sum(values["cascade_cost_usd"] for values in tiers.values())
    total["rejected"] = rejected["requests"] if rejected else 0
    return {"range": r.as_json(), "total": total, "tiers": tiers,
            "rejected": {"requests": rejected["requests"]} if rejected else {"requests": 0}}


def traffic(connection: Connection, r: TimeRange) -> dict[str, Any]:
    """Requests and tokens per bucket and tier, with each tier's share."""
    data = queries.series(connection, r)
    keep = ("requests", "tokens", "request_share", "token_share")
    return {"range": r.as_json(), "buckets": data["buckets"],
            "tiers": {t: {k: v[k] for k in keep} for t, v in data["tiers"].items()},
            "total": {k: data["total"][k] for k in ("requests", "tokens")}}


def cost(connection: Connection, r: TimeRange) -> dict[str, Any]:
    """Actual cost vs the all-large baseline per bucket (and per tier), savings and cumulative savings."""
    data = queries.series(connection, r)
    keep = ("cost_usd", "baseline_cost_usd", "savings_usd")
    return {"range": r.as_json(), "buckets": data["buckets"],
            "tiers": {t: {k: v[k] for k in keep} for t, v in data["tiers"].items()},
            "total": {k: data["total"][k] for k in (*keep, "cumulative_savings_usd")}}


def breakdown(connection: Connection, r: TimeRange, by: tuple[str, ...] = queries.BREAKDOWNS,
              limit: int = DEFAULT_TOP_N) -> dict[str, Any]:
    """Cost by tier, API key, `user` and model: the top `limit` of each by cost."""
    return {"range": r.as_json(), "limit": limit,
            "breakdowns": {name: queries.breakdown(connection, r, name, limit) for name in by}}


def latency(connection: Connection, r: TimeRange) -> dict[str, Any]:
    return {"range": r.as_json(), **latency_panel.latency(connection, r)}


def quality(connection: Connection, r: TimeRange, samples: int = DEFAULT_SAMPLES) -> dict[str, Any]:
    rates = quality_panel.pass_rates(connection, r)
    return {"range": r.as_json(), **rates, "judge_cost_usd": rates["total"]["judge_cost_usd"],
            "failing_samples": quality_panel.failing_samples(connection, r, samples)}


def router(connection: Connection, r: TimeRange, quality_knob: float, offsets: dict[str, float],
           tiers: list[str]) -> dict[str, Any]:
    return {"range": r.as_json(), "histogram": router_panel.score_histogram(connection, r),
            "thresholds": router_panel.thresholds(quality_knob, offsets, tiers),
            "reroutes": router_panel.reroutes(connection, r),
            "threshold_changes": router_panel.threshold_changes(connection, r),
            "classifier_versions": router_panel.classifier_versions(connection, r)}
