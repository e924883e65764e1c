"""GET /v1/models: `auto` (routed) and each tier."""
from __future__ import annotations

import time

from fastapi import APIRouter

from aio.server.deps import ApiKey, State

router = APIRouter()
_CREATED = int(time.time())


@router.get("/v1/models")
async def list_models(state: State, key: ApiKey) -> dict:
    tiers = list(state.pool)
    demo = any(t.is_demo for t in tiers)
    note = "DEMO tiers with random weights: answers are gibberish" if demo else None
    data = [{"id": "auto", "object": "model", "created": _CREATED, "owned_by": "aio", "root": "auto",
             "max_model_len": max(t.max_model_len for t in tiers),
             "aio": {"routed": True, "tiers": [t.name for t in tiers], "classifier_version": state.classifier.version,
                     "demo_weights": demo, "note": note}}]
    for tier in tiers:
        prices = state.tier_settings[tier.name]
        data.append({"id": tier.name, "object": "model", "created": _CREATED, "owned_by": "aio", "root": tier.model,
                     "max_model_len": tier.max_model_len,
                     "aio": {"tier": tier.name, "model": tier.model, "remote": prices.is_remote,
                             "input_price_per_million": prices.input_price_per_million,
                             "output_price_per_million": prices.output_price_per_million,
                             "demo_weights": tier.is_demo, "note": note if tier.is_demo else None}})
    return {"object": "list", "data": data}
