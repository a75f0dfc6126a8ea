"""Ollama's endpoints (server/ollama.py turns them into chat and text completions and back)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .. import completions
from . import ollama
from .generation import complete
from .request_checks import check_model, read_json
from .responses import check_fields
from .state import server_state

router = APIRouter()


async def _serve(request: Request, api: str):
    st = server_state(request)
    try:
        body = await read_json(request)
        thinks = ollama.thinks(st.decoder, st.config.chat_template)
        if api == "chat":
            kind, served = "chat", ollama.chat_body(body, thinks)
        else:
            kind, served = ollama.generate_body(body, thinks)
        if served is None:
            check_model(st, ollama.model_name(body))
            return ollama.loaded(st.config.model_name, api)
    except completions.RequestError as exc:
        return ollama.error_response(exc)
    return await complete(request, kind, served, ollama.Answer(api, st.config.model_name))


@router.post("/api/chat")
async def chat(request: Request):
    """Ollama's chat, served as a chat completion."""
    return await _serve(request, "chat")


@router.post("/api/generate")
async def generate(request: Request):
    """Ollama's generate: a chat completion of the prompt, or a text completion where raw or with a suffix."""
    return await _serve(request, "generate")


@router.get("/api/tags")
async def tags(request: Request):
    """The models served: the one this server was started with."""
    st = server_state(request)
    return ollama.tags(st.config.model_name, st.decoder)


@router.get("/api/ps")
async def ps(request: Request):
    st = server_state(request)
    return ollama.running(st.config.model_name, st.decoder)


@router.post("/api/show")
async def show(request: Request):
    st = server_state(request)
    try:
        body = await read_json(request)
        check_fields(body, {"model", "name", "verbose"}, {}, "/api/show")
        check_model(st, ollama.model_name(body) or "?")
    except completions.RequestError as exc:
        return ollama.error_response(exc)
    return ollama.show(st.config.model_name, st.decoder, st.decoder.n_ctx, st.config.chat_template)


@router.get("/api/version")
async def version():
    return ollama.version()
