"""The engine panel: live figures from each local tier's engine (`Engine.stats()`); remote tiers have none."""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable


def engine_stats(tiers: Iterable[Any]) -> dict[str, Any]:
    """Per tier: KV-cache usage, running/waiting requests, prefix-cache hit rate, preemptions and speculative
    acceptance (when enabled); {"available": false, "reason"} for a tier without a local engine."""
    out: dict[str, Any] = {}
    for tier in tiers:
        engine = getattr(tier, "engine", None)
        if engine is None or not hasattr(engine, "stats"):
            out[tier.name] = {"available": False, "model": tier.model,
                              "reason": "remote tier: engine statistics are unavailable"}
            continue
        try:
            stats = engine.stats()
        except Exception as exc:  # a closed or failed engine: say so rather than fail the panel
            out[tier.name] = {"available": False, "model": tier.model, "reason": f"{type(exc).__name__}: {exc}"}
            continue
        speculative = getattr(stats, "speculative", None)
        out[tier.name] = {
            "available": True, "model": tier.model, "kv_cache_usage": stats.kv_cache_usage,
            "num_blocks": stats.num_blocks, "num_used_blocks": stats.num_used_blocks,
            "num_running": stats.num_running, "num_waiting": stats.num_waiting,
            "prefix_cache_hit_rate": stats.prefix_cache_hit_rate, "num_preemptions": stats.num_preemptions,
            "num_steps": stats.num_steps,
            "speculative": dataclasses.asdict(speculative) if dataclasses.is_dataclass(speculative) else None}
    return out
