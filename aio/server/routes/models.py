"""GET /v1/models (and /v1/models/{id}): `auto` (routed) and each tier. The `aio` object says what a tier is:
`demo_weights` (random weights: gibberish), `embedded_default` ("smollm2" / "family" / "random": the demo tiers
served when none are configured, else null) and `note`, a sentence for people."""
from __future__ import annotations

import time

from fastapi import APIRouter

from aio.api.errors import APIError
from aio.http.deps import ApiKey, State
from aio.http.state import AppState
from aio.http.json_text import TextCheckedRoute

router = APIRouter(route_class=TextCheckedRoute)
_CREATED = int(time.time())


@router.get("/v1/models")
async def list_models(state: State, key: ApiKey) -> dict:
    return {"object": "list", "data": _entries(state)}


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(model_id: str, state: State, key: ApiKey) -> dict:
    """One model by its id: `auto`, a tier's name, or (as AIO also routes by it) a tier's model name."""
    entries = _entries(state)
    for entry in entries:
        if model_id in (entry["id"], entry["root"]):
            return entry
    raise APIError(404, f"the model {model_id!r} does not exist; models: {', '.join(e['id'] for e in entries)}",
                   param="model", code="model_not_found")


def _entries(state: AppState) -> list[dict]:
    tiers = list(state.pool)
    demo = any(t.is_demo for t in tiers)  # random demo weights
    embedded = state.demo.kind if state.demo is not None else None  # "smollm2" | "family" | "random" | None
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
    return data
