"""FastAPI dependencies shared by the routes."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from aio.db.keys import ApiKeyInfo
from aio.http.state import AppState


def get_state(request: Request) -> AppState:
    return request.app.state.aio


State = Annotated[AppState, Depends(get_state)]


async def api_key(request: Request) -> ApiKeyInfo | None:
    return await get_state(request).auth.user(request)


async def admin_key(request: Request) -> None:
    await get_state(request).auth.admin(request)


ApiKey = Annotated[ApiKeyInfo | None, Depends(api_key)]
