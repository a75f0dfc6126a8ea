"""Anthropic's endpoints: messages and their token count (server/messages.py turns them into chat
completions and back)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .. import completions
from .generation import complete, prompt_size
from .messages import Message, chat_body, error_response
from .request_checks import read_json
from .state import server_state

router = APIRouter()


@router.post("/v1/messages")
async def messages(request: Request):
    """Anthropic's Messages API, served as the chat completion it asks for (server/messages.py)."""
    st = server_state(request)
    try:
        body = await read_json(request)
        chat = chat_body(body)
    except completions.RequestError as exc:
        return error_response(exc)
    return await complete(request, "chat", chat, Message(body, st.config.model_name, st.slots[0]))


@router.post("/v1/messages/count_tokens")
async def count_message_tokens(request: Request):
    """The input tokens of a /v1/messages request, as Anthropic's endpoint counts them."""
    try:
        n = await prompt_size(request, chat_body(await read_json(request), count_only=True))
    except completions.RequestError as exc:
        return error_response(exc)
    return {"input_tokens": n}
