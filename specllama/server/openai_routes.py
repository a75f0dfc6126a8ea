"""OpenAI's endpoints: chat and text completions, and the model list (chat and the model list also
at the path without /v1, as llama-server serves them; its /completions is its native endpoint,
served in native_routes)."""

from __future__ import annotations

import os

from fastapi import APIRouter, Request

from .generation import complete
from .state import server_state

router = APIRouter()


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(request: Request):
    return await complete(request, "chat")


@router.post("/v1/completions")
async def text_completions(request: Request):
    return await complete(request, "text")


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
