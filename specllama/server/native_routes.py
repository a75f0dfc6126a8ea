"""llama-server's own endpoints: /completion and /infill (native_generation), /tokenize and
/detokenize with the target's vocabulary."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..completions import RequestError
from . import native_generation
from .errors import answer_error
from .request_checks import read_json
from .state import server_state

router = APIRouter()


@router.post("/completion")
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
