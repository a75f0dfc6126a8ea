"""One completion request served on a slot: checked and queued for a slot, generated on the slot's
thread, and answered as one JSON object or as server-sent events, one per verification step. A
client that goes away stops its generation within one step."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, Callable, List, Optional, Tuple, Union

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from .. import completions
from ..completions import RequestError
from ..options import GenerateOptions
from ..rpc_guard import RPCConnectionLost
from .errors import answer_error, model_lost
from .messages import Message
from .ollama import Answer as OllamaAnswer
from .request_checks import check_model, read_json
from .responses import Response
from .slots import QueueFull
from .state import ServerState, server_state

# a /v1/responses, /v1/messages or Ollama request's answer: the chat answer and chunks turned into its API's
Answer = Union[Response, Message, OllamaAnswer]


async def complete(request: Request, kind: str, body: Any = None, answer: Optional[Answer] = None):
    """Serve a /v1/chat/completions (kind "chat") or /v1/completions ("text") request; n choices
    one after another, each on a slot it waits for as a request would. body: the request's body
    where the caller has read it; answer: a /v1/responses or /v1/messages request's Response or
    Message, which turns the chat answer into its API's answer, events and errors."""
    st = server_state(request)
    try:
        req, tokens, opts = await _admit(st, request, kind, body)
        run = await _next_run(st, tokens, opts, 0)
    except RequestError as exc:
        return _error(exc, answer)
    if not req.stream:
        return await _whole(st, request, req, kind, run, tokens, opts, answer)
    return _streamed(st, req, run, tokens, opts, answer)


def _error(exc: RequestError, answer: Optional[Answer]):
    return answer.error(exc) if answer is not None else answer_error(exc)


# request fields about what is generated, left out where only the prompt's tokens are counted
_GENERATION_ONLY = ("stream", "stream_options", "max_tokens", "max_completion_tokens", "n_predict", "n")


async def prompt_size(request: Request, body: Any) -> int:
    """The tokens of a chat request's prompt, whatever it asks to generate after it (RequestError
    where the prompt cannot be served)."""
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in _GENERATION_ONLY}
    _, tokens, _ = await _admit(server_state(request), request, "chat", body)
    return len(tokens)


async def _admit(st: ServerState, request: Request, kind: str, body: Any = None
                 ) -> Tuple[completions.Request, List[int], GenerateOptions]:
    """The checked request, its prompt's tokens and its options."""
    if st.decoder.lost is not None:
        raise model_lost(st.decoder.lost)
    req = checked_request(st, await read_json(request) if body is None else body, kind)
    check_model(st, req.model)
    tokens = await run_in_threadpool(completions.prompt_tokens, st.slots[0], req, st.config.chat_template,
                                     st.config.n_batch)
    return req, tokens, completions.options_for(st.slots[0], req, len(tokens))


def checked_request(st: ServerState, body: Any, kind: str) -> completions.Request:
    """The checked request of body, with the server's settings where it gives none of its own."""
    req = completions.parse(body, kind, st.config.defaults)
    if req.reasoning_format is None:
        req.reasoning_format = st.config.reasoning_format
    if req.reasoning_budget in (None, -1):  # (-1 asks for the server's, as llama-server reads it)
        req.reasoning_budget = st.config.reasoning_budget
    if req.reasoning_budget_message is None:
        req.reasoning_budget_message = st.config.reasoning_budget_message
    req.template_kwargs = {**st.config.template_kwargs, **req.template_kwargs}
    return req


async def _slot(st: ServerState, tokens: List[int]) -> int:
    """A slot for a generation after tokens (RequestError 503 where the queue is full)."""
    try:
        return await st.pool.acquire(tokens)
    except QueueFull:
        raise RequestError("the server is busy: all slots are generating and the queue is full; retry shortly",
                           None, "server_busy", 503, "server_error") from None


async def _next_run(st: ServerState, tokens: List[int], opts: GenerateOptions, c: int) -> "_Run":
    """Choice c's generation (of a request's n), on a slot it waited for."""
    return _Run(st, await _slot(st, tokens), tokens, completions.choice_options(opts, c))


class _Run:
    """A generation on slot i, started in the slot's thread at once. texts receives each step's
    text and None at the end; setting cancel stops it within one step. The slot is free again once
    the generation has stopped."""

    def __init__(self, st: ServerState, i: int, tokens: List[int], opts: GenerateOptions,
                 hook: Optional[Callable[[List[int], str], Tuple[str, bool]]] = None) -> None:
        """hook(step's tokens, step's text) -> (the text to pass on, stop now?), for stops that
        depend on the text (llama-server's n_indent and t_max_predict_ms). texts receives (text,
        the step's TokenLogprob entries or None) per step that has either."""
        self.loop = asyncio.get_running_loop()
        self.cancel = threading.Event()
        self.texts: "asyncio.Queue" = asyncio.Queue()
        slot = st.slots[i]

        def on_step(step_tokens, text, n_drafted, n_accepted, logprobs=None):
            stop = False
            if hook is not None:
                text, stop = hook(step_tokens, text)
            if text or logprobs:
                self.loop.call_soon_threadsafe(self.texts.put_nowait, (text, logprobs))
            return stop or self.cancel.is_set() or st.stopping.is_set()

        def work():
            try:
                out = slot.generate(tokens, opts, on_step=on_step)
            finally:
                self.loop.call_soon_threadsafe(self.texts.put_nowait, None)
            st.metrics.add(out.stats)
            return out

        self.future = self.loop.run_in_executor(st.executor, work)
        self.future.add_done_callback(lambda _: st.pool.release(i))


async def finished(request: Request, run: _Run):
    """run's result, stopping it within one step if the client goes away first;
    RPCConnectionLost where the model's rpc-server was lost."""
    watcher = asyncio.ensure_future(_watch_disconnect(request, run.cancel))
    try:
        return await asyncio.shield(run.future)
    finally:
        watcher.cancel()


async def _whole(st: ServerState, request: Request, req: completions.Request, kind: str, run: _Run,
                 tokens: List[int], opts: GenerateOptions, answer: Optional[Answer] = None):
    rid, created, answers, all_stats, outs = completions.new_id(kind), int(time.time()), [], [], []
    for c in range(req.n):
        try:
            run = run if c == 0 else await _next_run(st, tokens, opts, c)
            out = await finished(request, run)
        except RequestError as exc:
            return _error(exc, answer)
        except RPCConnectionLost as exc:
            return _error(model_lost(str(exc)), answer)
        outs.append(out)
        lps = completions.logprobs_json(req, st.decoder.target_model, out.logprobs)
        answers.append(completions.response(req, rid, st.config.model_name, created, out.text, out.finish_reason,
                                            out.stats, out.tokens, lps))
        all_stats.append(out.stats)
        if run.cancel.is_set() or st.stopping.is_set():
            break  # the client went away, or the server stops: no more choices
    whole = completions.response_of_choices(answers, all_stats)
    return JSONResponse(answer.whole(whole, outs) if answer is not None else whole)


def _streamed(st: ServerState, req: completions.Request, run: _Run, tokens: List[int],
              opts: GenerateOptions, answer: Optional[Answer] = None) -> EventSourceResponse:
    model = st.decoder.target_model

    async def chunks():
        """The chat chunks (dicts; an error's body ends them; each choice's result as a Finished
        before its last chunks), then "[DONE]"."""
        first, all_stats, current = None, [], run
        try:
            for c in range(req.n):
                if c > 0:
                    try:
                        current = await _next_run(st, tokens, opts, c)
                    except RequestError as exc:
                        yield exc.body()
                        return
                writer = completions.ChunkWriter(req, st.config.model_name, c, first)
                first = first or writer
                async for chunk in _choice_chunks(req, writer, current, model, all_stats):
                    yield chunk
                if len(all_stats) <= c:
                    return  # the generation failed (the model was lost): its error event was sent
            for c in first.usage_chunk(completions.total_usage(all_stats)):
                yield c
            yield "[DONE]"
        finally:
            current.cancel.set()  # a client gone: the generation stops within one step

    async def events():
        inner = chunks()
        try:
            for e in answer.start(len(tokens)) if answer is not None else []:
                yield e
            async for c in inner:
                if answer is None:
                    if not isinstance(c, Finished):
                        yield c if isinstance(c, str) else json.dumps(c)
                elif isinstance(c, Finished):
                    for e in answer.finished(c.out):
                        yield e
                elif not isinstance(c, str):
                    for e in answer.events(c):
                        yield e
        finally:
            await inner.aclose()

    if getattr(answer, "ndjson", False):  # Ollama's stream: a JSON object per line
        async def lines():
            async for e in events():
                yield json.dumps(e) + "\n"
        return StreamingResponse(lines(), media_type="application/x-ndjson")
    return EventSourceResponse(events(), sep="\n", ping=15, shutdown_grace_period=30)


async def _choice_chunks(req: completions.Request, writer: completions.ChunkWriter, run: _Run, model, all_stats):
    """One choice's events as it generates; its stats appended to all_stats where it ends."""
    for c in writer.text(""):
        yield c
    while True:
        item = await run.texts.get()
        if item is None:
            break
        text, lps = item
        for c in writer.text(text, completions.logprobs_json(req, model, lps, writer.n_text)):
            yield c
    try:
        out = await asyncio.shield(run.future)
    except RPCConnectionLost as exc:
        yield model_lost(str(exc)).body()
        return
    except Exception as exc:  # (a generation that failed: the stream ends with the error a whole answer gets)
        yield RequestError(f"internal error: {type(exc).__name__}: {exc}", None, "internal_error", 500,
                           "server_error").body()
        return
    all_stats.append(out.stats)
    yield Finished(out)
    for c in writer.end(out.finish_reason, out.stats, with_usage=False):
        yield c


class Finished:
    """A choice's generation result, among its chunks."""

    def __init__(self, out) -> None:
        self.out = out


async def _watch_disconnect(request, cancel: threading.Event) -> None:
    """Set cancel when the client of a non-streamed request goes away."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            cancel.set()
            return
