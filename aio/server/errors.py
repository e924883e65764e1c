"""The HTTP side of the API errors (aio.api.errors): JSON responses and FastAPI's exception handlers."""
from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from aio.api.errors import APIError, invalid_request
from aio.server.validation_errors import validation_message

__all__ = ["APIError", "error_response", "install_error_handlers", "invalid_request"]


def error_response(error: APIError, extra_headers: dict[str, str] | None = None) -> JSONResponse:
    headers = {**error.headers(), **(extra_headers or {})}
    return JSONResponse(error.body(), status_code=error.status_code, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param, code = validation_message(exc, request.headers.get("content-type"))
        return error_response(APIError(400, message, param=param, code=code))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        error = APIError(exc.status_code, message, param=getattr(exc, "param", None), code=getattr(exc, "code", None))
        return error_response(error, dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logging.getLogger("aio.server").exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(APIError(500, "internal error; the server's log has the details"))
