"""llama-server's own endpoints: /completion and /infill (native_generation), /tokenize and
/detokenize with the target's vocabulary, /apply-template with its chat template, and /props."""

from __future__ import annotations

import os

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from .._version import __version__
from .. import completions
from ..completions import RequestError
from ..templates import ChatTemplateError, template_source
from . import generation, native_generation
from .errors import answer_error
from .request_checks import read_json
from .state import server_state

router = APIRouter()


@router.post("/completion")
@router.post("/completions")  # llama-server's alias of /completion (OpenAI's is /v1/completions)
async def completion(request: Request):
    return await native_generation.serve(request, "completion")


@router.post("/infill")
async def infill(request: Request):
    return await native_generation.serve(request, "infill")


@router.post("/tokenize")
async def tokenize(request: Request):
    decoder = server_state(request).decoder
    try:
        body = await read_json(request)
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            raise RequestError("'content' must be a string", "content", "invalid_type")
        add_special = body.get("add_special", False)
        with_pieces = body.get("with_pieces", False)
        if not isinstance(add_special, bool) or not isinstance(with_pieces, bool):
            raise RequestError("'add_special' and 'with_pieces' must be true or false", None, "invalid_type")
        try:
            toks = decoder.target_model.tokenize(body["content"], add_special, True,
                                                 max_tokens=max(decoder.n_ctx, 1 << 20))
        except ValueError as exc:
            raise RequestError(str(exc), "content", "invalid_value") from None
    except RequestError as exc:
        return answer_error(exc)
    if with_pieces:
        model = decoder.target_model
        return {"tokens": [{"id": t, "piece": model.token_to_piece(t, True).decode("utf-8", "replace")}
                           for t in toks]}
    return {"tokens": toks}


@router.post("/detokenize")
async def detokenize(request: Request):
    decoder = server_state(request).decoder
    try:
        body = await read_json(request)
        toks = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(toks, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in toks):
            raise RequestError("'tokens' must be a list of token ids", "tokens", "invalid_type")
        n_vocab = decoder.target_model.n_vocab
        bad = next((t for t in toks if not 0 <= t < n_vocab), None)
        if bad is not None:
            raise RequestError(f"token id {bad} is outside the vocabulary of {n_vocab}", "tokens", "invalid_value")
    except RequestError as exc:
        return answer_error(exc)
    return {"content": decoder.target_model.detokenize(toks, True)}


@router.get("/props")
@router.get("/v1/props")
async def props(request: Request):
    """The server's settings as llama-server's /props reports them (what the editor extensions
    read: default_generation_settings.n_ctx)."""
    st = server_state(request)
    dec, d = st.decoder, st.config.defaults
    settings = {"n_ctx": dec.n_ctx, "model": st.config.model_name,
                "params": {"temperature": d.temperature, "top_k": d.top_k, "top_p": d.top_p, "min_p": d.min_p,
                           "n_predict": -1, "speculative.n_max": d.n_draft if d.n_draft is not None else dec.n_draft}}
    out = {"default_generation_settings": settings, "total_slots": len(st.slots),
           "model_alias": st.config.model_name, "model_path": os.path.basename(dec.model_path),
           "chat_template": dec.target_model.chat_template or "", "build_info": f"specllama {__version__}"}
    if st.config.chat_template is not None:  # (--chat-template: the one template used)
        try:
            out["chat_template"] = await run_in_threadpool(template_source, dec.target_model, st.config.chat_template)
        except ChatTemplateError:  # (its file gone since the server started: the requests say why)
            out["chat_template"] = ""
    elif tool_use := dec.target_model.named_chat_template("tool_use"):  # (used for the requests with tools)
        out["chat_template_tool_use"] = tool_use
    return out


@router.post("/apply-template")
async def apply_template(request: Request):
    """llama-server's /apply-template: the prompt a chat request with this body is generated after
    ({"prompt"}), rendered by the chat template the server uses with its variables (tools,
    chat_template_kwargs, reasoning_effort and the server's own); nothing is generated."""
    st = server_state(request)
    try:
        req = generation.checked_request(st, await read_json(request), "chat")
        try:
            prompt = await run_in_threadpool(st.decoder.apply_chat_template, req.messages, True,
                                             st.config.chat_template, **completions.template_variables(req))
        except ChatTemplateError as exc:
            raise RequestError(str(exc), "messages", "chat_template_error") from None
        except ValueError as exc:
            raise RequestError(str(exc), "messages", "invalid_value") from None
    except RequestError as exc:
        return answer_error(exc)
    return {"prompt": prompt}
