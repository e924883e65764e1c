"""POST /v1/chat/completions."""
from __future__ import annotations

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, StreamingResponse

from aio.api.errors import APIError
from aio.api.schemas import ChatCompletionRequest
from aio.chat.context import RequestContext
from aio.server.deps import ApiKey, State
from aio.server.errors import error_response
from aio.server.key_limits import KeyLimitExceeded
from aio.server.json_text import TextCheckedRoute

router = APIRouter(route_class=TextCheckedRoute)


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, state: State, key: ApiKey,
                                 x_aio_session: str | None = Header(None, min_length=1, max_length=256)):
    ctx = RequestContext(key_id=key.id if key is not None else None, session=x_aio_session)
    headers = {"x-request-id": ctx.request_id}
    try:
        admission = state.limiter.admit(key)
    except KeyLimitExceeded as exc:
        state.service.accounting.rejected(body, ctx, exc)
        return error_response(exc, {**headers, **exc.rate_headers})
    ctx.on_done = admission.finish
    headers.update(admission.headers)
    try:
        chat = await state.service.prepare(body, ctx)
    except APIError as exc:
        return error_response(exc, headers)
    if body.stream:
        try:
            opened = await state.service.open(chat)  # refused or failed before the first token: a plain error
        except APIError as exc:
            return error_response(exc, headers)
        # Headers go out before the answer exists: the cost comes in the usage chunk's `aio` object.
        return StreamingResponse(state.service.stream(opened), media_type="text/event-stream",
                                 headers={**headers, **_tier_headers(opened.chat), "cache-control": "no-cache"})
    try:
        result = await state.service.complete(chat)
    except APIError as exc:
        return error_response(exc, headers)
    headers.update(_tier_headers(chat))
    headers["x-aio-cost-usd"] = f"{result['aio']['cost_usd']:.10f}"
    return JSONResponse(result, headers=headers)


def _tier_headers(chat) -> dict[str, str]:
    return {"x-aio-tier": chat.tier.name, "x-aio-model": chat.tier.model, "x-aio-routing-reason": chat.decision.reason}
