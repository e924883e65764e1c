"""Admin endpoints (the admin key): API keys."""
from __future__ import annotations

import asyncio
import dataclasses

from fastapi import APIRouter, Depends

from aio.api.errors import APIError
from aio.api.schemas import CreateKeyRequest
from aio.db.keys import MAX_ID
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
    info, key = await asyncio.to_thread(state.keys.create, body.name, body.role)
    return {**_info(info), "key": key}


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
