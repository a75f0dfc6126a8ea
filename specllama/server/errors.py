"""Every failure in OpenAI's error shape ({"error": {"message", "type", "param", "code"}}), with
its HTTP status: request errors, HTTP errors, unexpected exceptions, and a model whose
rpc-server connection broke."""

from __future__ import annotations

from typing import Dict, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..completions import RequestError


def error_response(status: int, message: str, kind: str = "invalid_request_error", code: Optional[str] = None,
                   param: Optional[str] = None, headers: Optional[Dict[str, str]] = None) -> JSONResponse:
    return JSONResponse(RequestError(message, param, code, status, kind).body(), status_code=status, headers=headers)


def answer_error(exc: RequestError) -> JSONResponse:
    """The response to a request that cannot be served; a busy server's 503 says when to retry."""
    headers = {"Retry-After": "1"} if exc.status == 503 else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def model_lost(why: str) -> RequestError:
    """The error of a request on models whose rpc-server connection broke."""
    return RequestError(f"the model cannot run: {why}; restart the server", None, "rpc_connection_lost", 500,
                        "server_error")


def install_error_handlers(app: FastAPI) -> None:
    """HTTP errors (404, 405), FastAPI's validation errors and any other exception answer in
    OpenAI's error shape."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return error_response(exc.status_code, str(exc.detail), code=code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        return error_response(400, str(exc), code="invalid_value")

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception):
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error",
                              code="internal_error")
