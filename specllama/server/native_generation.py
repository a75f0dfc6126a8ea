"""A /completion or /infill request served on the slots: checked, its prompt built, each of its
n_cmpl completions generated on a slot (with llama-server's text-dependent stops), and answered as
llama-server answers: one object (or an array for several completions), or server-sent events
ending with the full object (no [DONE])."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List

from fastapi import Request
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from .. import completions
from ..completions import RequestError
from ..rpc_guard import RPCConnectionLost
from . import native_completion as nc
from .errors import answer_error, model_lost
from .generation import _Run, _slot, finished
from .request_checks import read_json
from .state import ServerState, server_state


async def serve(request: Request, kind: str):
    st = server_state(request)
    try:
        if st.decoder.lost is not None:
            raise model_lost(st.decoder.lost)
        req = nc.parse(await read_json(request), kind, st.config.defaults)  # "model" ignored, as llama-server does
        dec = st.decoder
        tokens = await run_in_threadpool(nc.prompt_tokens, dec, req, st.config.n_batch, -1)
        max_new = nc.check_room(dec, req, tokens)
    except RequestError as exc:
        return answer_error(exc)
    if req.stream:
        return await _streamed(st, req, tokens, max_new)
    answers: List[Dict[str, Any]] = []
    for k in range(req.n_cmpl):
        try:
            run, limits, i, opts = await _start(st, req, tokens, max_new, k)
        except RequestError as exc:
            return answer_error(exc)
        try:
            out = await finished(request, run)
        except RPCConnectionLost as exc:
            return answer_error(model_lost(str(exc)))
        answers.append(nc.select_fields(_final(st, req, k, i, tokens, out, limits, opts), req.response_fields))
    return JSONResponse(answers if req.n_cmpl > 1 else answers[0])


async def _start(st: ServerState, req: nc.NativeRequest, tokens: List[int], max_new: int, k: int):
    """Completion k of req started on a slot: (its run, its limits, the slot, its options)."""
    opts = req.options.copy()
    if req.n_predict == 0:
        # only the prompt, into the slot's cache (an editor's warm-up): the pass that computes it
        # yields one token, which is not answered
        opts.max_tokens, opts.speculative = 1, False
    else:
        opts.max_tokens = max_new
    opts = completions.choice_options(opts, k)  # several completions differ
    try:
        opts = st.decoder.options(opts)
    except (TypeError, ValueError) as exc:
        param = next((p for p in ("drafter", "n_draft", "speculative", "seed") if p in str(exc)), None)
        raise RequestError(str(exc), param, "invalid_value") from None
    i = await _slot(st, tokens)
    limits = nc.Limits(st.slots[i].target_model, req.n_indent, req.t_max_predict_ms)
    sent = [0]

    def hook(step_tokens, text):
        stop = limits.step(list(step_tokens))
        if limits.stopped:  # pass on only what the cut keeps
            keep = max(0, limits.cut_at - sent[0])
            text = text[:keep]
        sent[0] += len(text)
        return text, stop

    run = _Run(st, i, tokens, opts, hook)
    return run, limits, i, opts


def _final(st: ServerState, req: nc.NativeRequest, k: int, i: int, tokens: List[int], out, limits: nc.Limits,
           opts) -> Dict[str, Any]:
    dec = st.slots[i]
    if req.n_predict == 0:
        text, toks, word, stype, stats = "", [], "", "limit", out.stats  # the prompt's figures; nothing predicted
    else:
        text, toks = limits.cut(out.text, list(out.tokens))
        word = nc.stopping_word(dec, out, list(opts.stop))
        stype = nc.stop_type(out.finish_reason, limits.stopped, word)
        stats = out.stats
    truncated = bool(getattr(out, "context_full", False))
    return nc.result(dec, req, k, i, st.config.model_name, tokens, text, toks, stype, word, stats,
                     limits.has_new_line, truncated, dec.n_ctx, opts)


async def _streamed(st: ServerState, req: nc.NativeRequest, tokens: List[int], max_new: int):
    """Each completion's chunks in turn, marked with its index (llama-server interleaves those of
    completions generated at once; a client tells them apart by index either way), each ending with
    its final object (stop: true)."""
    try:
        started = await _start(st, req, tokens, max_new, 0)
    except RequestError as exc:
        return answer_error(exc)

    async def events():
        nonlocal started
        for k in range(req.n_cmpl):
            if k:
                try:
                    started = await _start(st, req, tokens, max_new, k)
                except RequestError as exc:
                    yield json.dumps(exc.body(), separators=(",", ":"))
                    return
            run, limits, i, opts = started
            try:
                while True:
                    item = await run.texts.get()
                    if item is None:
                        break
                    text = item[0]
                    yield json.dumps({"index": k, "content": text, "tokens": [], "stop": False, "id_slot": i,
                                      "tokens_predicted": len(limits.tokens), "tokens_evaluated": len(tokens)},
                                     separators=(",", ":"))
                try:
                    out = await asyncio.shield(run.future)
                except RPCConnectionLost as exc:
                    yield json.dumps(model_lost(str(exc)).body(), separators=(",", ":"))
                    return
                final = _final(st, req, k, i, tokens, out, limits, opts)
                final["content"], final["tokens"] = "", []  # as llama-server's last chunk: the text came before
                yield json.dumps(nc.select_fields(final, req.response_fields), separators=(",", ":"))
            finally:
                run.cancel.set()  # a client gone: the generation stops within one step

    return EventSourceResponse(events(), sep="\n", ping=15, shutdown_grace_period=30)
