"""GET /v1/models: `auto` (routed) and each tier. The `aio` object says what a tier is: `demo_weights` (random
weights: gibberish), `embedded_default` ("smollm2" / "random" for the demo tiers served when none are configured,
else null) and `note`, a sentence for people."""
from __future__ import annotations

import time

from fastapi import APIRouter

from aio.server.deps import ApiKey, State

router = APIRouter()
_CREATED = int(time.time())


@router.get("/v1/models")
async def list_models(state: State, key: ApiKey) -> dict:
    tiers = list(state.pool)
    demo = any(t.is_demo for t in tiers)  # random demo weights
    embedded = state.demo.kind if state.demo is not None else None  # "smollm2" | "random" | None
    note = state.demo.note if state.demo is not None else None
    data = [{"id": "auto", "object": "model", "created": _CREATED, "owned_by": "aio", "root": "auto",
             "max_model_len": max(t.max_model_len for t in tiers),
             "aio": {"routed": True, "tiers": [t.name for t in tiers], "classifier_version": state.classifier.version,
                     "demo_weights": demo, "embedded_default": embedded, "note": note}}]
    for tier in tiers:
        prices = state.tier_settings[tier.name]
        data.append({"id": tier.name, "object": "model", "created": _CREATED, "owned_by": "aio", "root": tier.model,
                     "max_model_len": tier.max_model_len,
                     "aio": {"tier": tier.name, "model": tier.model, "remote": prices.is_remote,
                             "input_price_per_million": prices.input_price_per_million,
                             "output_price_per_million": prices.output_price_per_million,
                             "demo_weights": tier.is_demo, "embedded_default": embedded, "note": note}})
    return {"object": "list", "data": data}
