"""OpenAI's endpoints: chat and text completions, responses, and the model list (chat, responses and
the model list also at the path without /v1, as llama-server serves them; its /completions is its
native endpoint, served in native_routes)."""

from __future__ import annotations

import os

from fastapi import APIRouter, Request

from .. import completions
from .errors import answer_error
from .generation import complete, prompt_size
from .request_checks import read_json
from .responses import Response, chat_body
from .state import server_state

router = APIRouter()


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(request: Request):
    return await complete(request, "chat")


@router.post("/v1/completions")
async def text_completions(request: Request):
    return await complete(request, "text")


@router.post("/v1/responses")
@router.post("/responses")
async def responses(request: Request):
    """OpenAI's Responses API, served as the chat completion it asks for (server/responses.py)."""
    try:
        body = await read_json(request)
        chat = chat_body(body)
    except completions.RequestError as exc:
        return answer_error(exc)
    return await complete(request, "chat", chat, Response(body, server_state(request).config.model_name))


@router.post("/v1/responses/input_tokens")
@router.post("/responses/input_tokens")
async def response_input_tokens(request: Request):
    """The prompt tokens a /v1/responses request would be generated after (OpenAI's
    responses.input_tokens.count)."""
    return await _input_tokens(request, chat_body)


@router.post("/v1/chat/completions/input_tokens")
@router.post("/chat/completions/input_tokens")
async def chat_input_tokens(request: Request):
    """The prompt tokens a /v1/chat/completions request would be generated after (llama-server's)."""
    return await _input_tokens(request, lambda body: body)


async def _input_tokens(request: Request, to_chat):
    try:
        n = await prompt_size(request, to_chat(await read_json(request)))
    except completions.RequestError as exc:
        return answer_error(exc)
    return {"object": "response.input_tokens", "input_tokens": n}


@router.get("/v1/models")
@router.get("/models")
async def models(request: Request):
    st = server_state(request)
    decoder = st.decoder
    target = decoder.target_model
    meta = {"n_ctx_slot": decoder.n_ctx, "n_vocab": target.n_vocab, "size": target.size,
            "draft": os.path.basename(decoder.draft_path) if decoder.draft_path else None,
            "slots": len(st.slots)}
    return {"object": "list", "data": [{"id": st.config.model_name, "object": "model", "created": st.created,
                                        "owned_by": "specllama", "meta": meta}]}
