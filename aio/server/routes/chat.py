"""POST /v1/chat/completions."""
from __future__ import annotations

import time

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse

from aio.answer_cache import CACHE_HEADER, AnswerCache, CachedAnswer, hit_body
from aio.api.errors import APIError
from aio.api.schemas import ChatCompletionRequest
from aio.chat.context import RequestContext
from aio.http.deps import ApiKey, State
from aio.server.disconnects import EventStream, unless_disconnected
from aio.server.errors import error_response
from aio.http.key_limits import Admission, KeyLimitExceeded
from aio.http.json_text import TextCheckedRoute
from aio.http.state import AppState

router = APIRouter(route_class=TextCheckedRoute)

CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that left before its answer (nobody receives it)


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request, state: State, key: ApiKey,
                                 x_aio_session: str | None = Header(None, min_length=1, max_length=256)):
    """A client that disconnects before its answer cancels the request (aborted in the engine, logged cancelled).
    The key's slot in flight is released however the request ends."""
    ctx = RequestContext(key_id=key.id if key is not None else None, session=x_aio_session)
    headers = {"x-request-id": ctx.request_id}
    try:
        admission = state.limiter.admit(key)
    except KeyLimitExceeded as exc:
        state.service.accounting.rejected(body, ctx, exc)
        return error_response(exc, {**headers, **exc.rate_headers})
    try:
        await _budget(state, key, ctx.request_id)
    except APIError as exc:  # 429 budget_exceeded, or 503 when the budget cannot be checked
        admission.finish(0)
        state.service.accounting.rejected(body, ctx, exc)
        return error_response(exc, {**headers, **getattr(exc, "budget_headers", {})})
    except BaseException:  # the client left while the budget was checked: its row clears any hold it took
        admission.finish(0)
        state.service.accounting.rejected(body, ctx, APIError(CLIENT_CLOSED_REQUEST, "the client closed the "
                                                              "connection", code="client_closed"))
        raise
    ctx.on_done = admission.finish
    headers.update(admission.headers)
    response: Response | None = None
    try:
        answered, response = await unless_disconnected(request, _answer(body, ctx, state, headers, admission))
        return response if answered else Response(status_code=CLIENT_CLOSED_REQUEST)
    finally:
        if not isinstance(response, EventStream):  # a stream releases it when it ends
            admission.finish(0)  # idempotent: the request's accounting released it with its tokens


async def _budget(state: AppState, key, request_id: str) -> None:
    guard = getattr(state, "budgets", None)  # None in bare test apps
    if guard is not None:
        await guard.admit(key, request_id)


async def _answer(body: ChatCompletionRequest, ctx: RequestContext, state: AppState, headers: dict[str, str],
                  admission: Admission) -> Response:
    service = state.service
    cache: AnswerCache | None = getattr(state, "answer_cache", None)  # None in bare test apps
    lookup = None
    if cache is not None:
        try:
            lookup = await cache.lookup(body, ctx.key_id, [(t.name, t.model) for t in service.pool])
        except APIError as exc:
            service.accounting.rejected(body, ctx, exc)
            return error_response(exc, headers)
        headers[CACHE_HEADER] = lookup.status
        if lookup.answer is not None:
            return _cache_hit(body, ctx, service, lookup.answer, headers)
    try:
        chat = await service.prepare(body, ctx)
    except APIError as exc:
        return error_response(exc, headers)
    if body.stream:
        try:
            opened = await service.open(chat)  # refused or failed before the first token: a plain error
        except APIError as exc:
            return error_response(exc, headers)

        async def on_close() -> None:
            try:
                await service.close_stream(opened)
            finally:
                admission.finish(0)

        # Headers go out before the answer exists: the cost comes in the usage chunk's `aio` object.
        return EventStream(service.stream(opened), on_close,
                           {**headers, **_tier_headers(opened.chat), "cache-control": "no-cache"})
    try:
        result = await service.complete(chat)
    except APIError as exc:
        return error_response(exc, headers)
    headers.update(_tier_headers(chat))
    headers["x-aio-cost-usd"] = f"{result['aio']['cost_usd']:.10f}"
    if lookup is not None:
        await cache.save(lookup, result, ctx.request_id)
    return JSONResponse(result, headers=headers)


def _cache_hit(body: ChatCompletionRequest, ctx: RequestContext, service, answer: CachedAnswer,
               headers: dict[str, str]) -> Response:
    """The first answer again, without the engine: logged as a hit, 0 tokens billed."""
    result = hit_body(answer, ctx.request_id, int(time.time()))
    service.accounting.cached(body, ctx, result, answer.tier, answer.cost_usd)
    headers.update({"x-aio-tier": answer.tier, "x-aio-model": answer.model, "x-aio-routing-reason": "cache",
                    "x-aio-cost-usd": f"{0.0:.10f}"})
    return JSONResponse(result, headers=headers)


def _tier_headers(chat) -> dict[str, str]:
    return {"x-aio-tier": chat.tier.name, "x-aio-model": chat.tier.model, "x-aio-routing-reason": chat.decision.reason}
