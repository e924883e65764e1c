"""Admin endpoints (the admin key): API keys."""
from __future__ import annotations

import asyncio
import dataclasses

from fastapi import APIRouter, Depends

from aio.api.errors import APIError
from aio.api.schemas import CreateKeyRequest
from aio.server.deps import State, admin_key
from aio.server.json_text import TextCheckedRoute

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
    info, key = await asyncio.to_thread(state.keys.create, body.name, body.role)
    return {**_info(info), "key": key}


@router.delete("/keys/{key_id}")
async def revoke_key(key_id: int, state: State) -> dict:
    if not await asyncio.to_thread(state.keys.revoke, key_id):
        raise APIError(404, f"no active key with id {key_id}", param="key_id")
    return {"id": key_id, "revoked": True}
