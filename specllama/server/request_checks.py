"""What every request passes before it is served: the API key (with the request counted in the
metrics either way), a JSON body within the size limit, and a model name this server serves."""

from __future__ import annotations

import hmac
import json
import os
from typing import Any, Optional

from fastapi import FastAPI, Request

from ..completions import RequestError
from .errors import error_response
from .state import ServerState, server_state

# paths served without an API key (load balancers and health checks carry none)
OPEN_PATHS = ("/health", "/v1/health")


def install_guard(app: FastAPI) -> None:
    """Refuse requests without the configured API key (401) and count every answer by endpoint
    and status."""

    @app.middleware("http")
    async def guard(request: Request, call_next):
        st = server_state(request)
        path = request.url.path
        label = path if path in st.known_paths else "other"
        if not _authorized(st, request):
            st.metrics.requests.labels(label, "401").inc()
            return error_response(401, "invalid or missing API key (Authorization: Bearer ..., or X-Api-Key)",
                                  kind="authentication_error", code="invalid_api_key")
        response = await call_next(request)
        st.metrics.requests.labels(label, str(response.status_code)).inc()
        return response


def _authorized(st: ServerState, request: Request) -> bool:
    key = st.config.api_key
    if not key or request.url.path in OPEN_PATHS or request.method == "OPTIONS":
        return True
    # OpenAI's clients send Authorization: Bearer KEY, Anthropic's X-Api-Key: KEY (as llama-server takes both)
    given = request.headers.get("authorization")
    if given is None and "x-api-key" in request.headers:
        given = f"Bearer {request.headers['x-api-key']}"
    return hmac.compare_digest((given or "").encode("utf-8", "replace"), f"Bearer {key}".encode("utf-8"))


async def read_json(request: Request) -> Any:
    """The request's body as JSON; RequestError for a body over the size limit (413), not JSON, or
    nested deeper than MAX_DEPTH."""
    limit = server_state(request).config.max_body_bytes
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestError(f"the request body is over {limit} bytes", None, "body_too_large", 413)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise RequestError(f"the request body is over {limit} bytes", None, "body_too_large", 413)
    too_deep = RequestError(f"the request body is nested more than {MAX_DEPTH} levels deep", None, "invalid_json")
    try:
        value = json.loads(bytes(body))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(f"the request body is not valid JSON: {exc}", None, "invalid_json") from None
    except RecursionError:
        raise too_deep from None
    if _deeper_than(value, MAX_DEPTH):
        raise too_deep
    return value


MAX_DEPTH = 100  # lists and objects in a request body (the handling of a deeper one would run out of stack)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether value (parsed JSON) nests lists and objects more than limit levels deep."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (list, dict)):
            if depth > limit:
                return True
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


def check_model(st: ServerState, name: Optional[str]) -> None:
    """A request's "model" must name the served model (by its name or its file's), when given and
    not empty (llama.vim sends "")."""
    if name and name not in (st.config.model_name, st.decoder.model_name, os.path.basename(st.decoder.model_path)):
        raise RequestError(f"the model '{name}' does not exist; this server serves '{st.config.model_name}'",
                           "model", "model_not_found", 404)
