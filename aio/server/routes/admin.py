"""Admin endpoints (the admin key): API keys."""
from __future__ import annotations

import asyncio
import dataclasses

from fastapi import APIRouter, Depends

from aio.api.errors import APIError
from aio.api.schemas import CreateKeyRequest, UpdateKeyRequest
from aio.db.budgets import Budget
from aio.db.keys import MAX_ID, KeyLimits
from aio.http.deps import State, admin_key
from aio.http.json_text import TextCheckedRoute

router = APIRouter(prefix="/admin", dependencies=[Depends(admin_key)], route_class=TextCheckedRoute)


def _info(info) -> dict:
    data = dataclasses.asdict(info)
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in data.items()}


@router.get("/keys")
async def list_keys(state: State) -> dict:
    keys = await asyncio.to_thread(state.keys.list)
    return {"object": "list", "data": [_info(k) for k in keys]}


@router.post("/keys", status_code=201)
async def create_key(body: CreateKeyRequest, state: State) -> dict:
    try:
        limits = KeyLimits(body.rpm_limit, body.tpm_limit, body.max_streams)
        budget = Budget(body.budget_usd, body.budget_period or "month", body.budget_soft) \
            if body.budget_usd is not None else None
    except ValueError as exc:
        raise APIError(400, str(exc), param="budget_usd", code="invalid_value") from None
    if budget is None and (body.budget_period is not None or body.budget_soft is not None):
        raise APIError(400, "budget_period and budget_soft need a budget_usd", param="budget_usd",
                       code="invalid_value")
    info, key = await asyncio.to_thread(state.keys.create, body.name, body.role, limits, budget)
    return {**_info(info), "key": key}


@router.patch("/keys/{key_id}")
async def update_key(key_id: str, body: UpdateKeyRequest, state: State) -> dict:
    """Changes the limits and budget fields the body names (null: none); the others stay."""
    number = _key_id(key_id)
    changes = body.changes()
    if not changes:
        raise APIError(400, "nothing to change: send rpm_limit, tpm_limit, max_streams, budget_usd, budget_period or "
                            "budget_soft", code="invalid_value")
    try:
        info = await asyncio.to_thread(state.keys.update_limits, number, changes)
    except ValueError as exc:
        raise APIError(400, str(exc), code="invalid_value") from None
    if info is None:
        raise APIError(404, f"no active key with id {number}", param="key_id")
    return _info(info)


def _key_id(text: str) -> int:
    """A key's id as the path gives it: ASCII digits only ("3.0", "+3", "³" are not ids); one past int64 names no
    key (404)."""
    if not (text.isascii() and text.isdigit()):
        raise APIError(400, f"invalid key id {text[:40]!r}: a key's id is a positive integer (GET /admin/keys lists "
                            "them)", param="key_id", code="invalid_value")
    if len(text) > len(str(MAX_ID)) or int(text) > MAX_ID or int(text) == 0:
        raise APIError(404, f"no active key with id {text[:40]}", param="key_id")
    return int(text)


@router.delete("/keys/{key_id}")
async def revoke_key(key_id: str, state: State) -> dict:
    number = _key_id(key_id)
    if not await asyncio.to_thread(state.keys.revoke, number):
        raise APIError(404, f"no active key with id {number}", param="key_id")
    return {"id": number, "revoked": True}
