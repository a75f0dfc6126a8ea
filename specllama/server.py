"""`specllama serve`: an OpenAI-compatible HTTP server on FastAPI and uvicorn, streaming with
sse-starlette, metrics with prometheus-client.

Requests are checked and answered by specllama.completions (the layer the Python methods use).
Each of --parallel slots is a decoder with its own KV caches on one loaded copy of the models;
the slots' caches are sequences of one context per model, and one native thread merges the
decodes of the slots generating at the same time into one llama_decode (SpeculativeDecoder.slots). A request
goes to the free slot whose cache shares the longest prefix with its prompt (else the least
recently used one); requests beyond the slots wait in a bounded queue, and a full queue is
answered 503 with Retry-After. A client that goes away stops its generation within one
verification step. Models on rpc-servers whose connection breaks fail the requests they held
(500, code "rpc_connection_lost"; a stream ends with an error event), refuse new ones, and
/health says so (503).
"""

import asyncio
import contextlib
import hmac
import json
import os
import socket
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import prometheus_client
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import __version__, completions
from ._core import GenerateOptions
from .completions import RequestError
from .decoder import SpeculativeDecoder
from .rpc_guard import RPCConnectionLost


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    parallel: int = 1
    queue_size: int = 16  # requests waiting for a slot beyond the busy ones
    api_key: Optional[str] = None
    chat_template: Optional[str] = None
    cors_origins: Sequence[str] = ()
    max_body_bytes: int = 8 * 1024 * 1024
    model_name: str = "model"
    defaults: GenerateOptions = field(default_factory=GenerateOptions)


KNOWN = {"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions", "/v1/models", "/models",
         "/health", "/v1/health", "/metrics", "/tokenize", "/detokenize"}


class QueueFull(Exception):
    pass


class SlotPool:
    """The slots, and the requests waiting for one (first come, first served)."""

    def __init__(self, slots: List[SpeculativeDecoder], queue_size: int) -> None:
        self.slots = slots
        self.free = list(range(len(slots)))
        self.waiters: deque = deque()  # (future, prompt tokens) of the requests waiting, oldest first
        self.queue_size = queue_size
        self.last_used = [0] * len(slots)  # when each slot was last taken (a counter)
        self.clock = 0

    @property
    def busy(self) -> int:
        return len(self.slots) - len(self.free)

    @property
    def queued(self) -> int:
        return len(self.waiters)

    def _best_free(self, tokens: List[int]) -> int:
        """Take the free slot whose cache shares the longest prefix with tokens, where that is at
        least a tenth of the prompt (llama-server's rule); otherwise the least recently used free
        slot, so that a new conversation does not evict one whose history is cached elsewhere."""
        def shared(i: int) -> int:
            cached = self.slots[i].cached_tokens()
            n = 0
            for a, b in zip(cached, tokens):
                if a != b:
                    break
                n += 1
            return n

        scores = {i: shared(i) for i in self.free}
        best = max(self.free, key=lambda i: (scores[i], -self.last_used[i]))
        if scores[best] * 10 < len(tokens):
            best = min(self.free, key=lambda i: self.last_used[i])
        self.free.remove(best)
        self.clock += 1
        self.last_used[best] = self.clock
        return best

    async def acquire(self, tokens: List[int]) -> int:
        """A slot for a prompt of tokens: at once if one is free and nobody waits, else after the
        requests queued before it. QueueFull when queue_size requests already wait."""
        if self.free and not self.waiters:
            return self._best_free(tokens)
        if len(self.waiters) >= self.queue_size:
            raise QueueFull()
        fut = asyncio.get_running_loop().create_future()
        entry = (fut, tokens)
        self.waiters.append(entry)
        try:
            return await fut
        except BaseException:
            if entry in self.waiters:
                self.waiters.remove(entry)
            elif fut.done() and not fut.cancelled():  # a slot was handed over as it gave up
                self.release(fut.result())
            raise

    def release(self, i: int) -> None:
        self.free.append(i)
        while self.waiters and self.free:  # the longest-waiting request takes a slot now
            fut, tokens = self.waiters.popleft()
            if not fut.done():
                fut.set_result(self._best_free(tokens))


class Metrics:
    def __init__(self, pool: SlotPool) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        prometheus_client.disable_created_metrics()
        r = self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._totals = {"drafted": 0, "accepted": 0, "generated": 0, "decode_s": 0.0}
        self.requests = Counter("specllama_requests", "HTTP requests answered", ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("specllama_prompt_tokens", "prompt tokens of completions", registry=r)
        self.prompt_processed = Counter("specllama_prompt_tokens_processed",
                                        "prompt tokens processed (not found in a slot's cache)", registry=r)
        self.generated = Counter("specllama_generated_tokens", "tokens generated", registry=r)
        self.drafted = Counter("specllama_drafted_tokens", "tokens drafted", registry=r)
        self.accepted = Counter("specllama_accepted_tokens", "drafted tokens the target kept", registry=r)
        self.decode_seconds = Counter("specllama_decode_seconds", "time spent generating after prefill", registry=r)
        Gauge("specllama_acceptance_rate", "accepted / drafted tokens since start", registry=r).set_function(
            lambda: self._ratio("accepted", "drafted"))
        Gauge("specllama_tokens_per_second", "generated tokens per second of a slot's decoding since start",
              registry=r).set_function(lambda: self._ratio("generated", "decode_s"))
        Gauge("specllama_queue_depth", "requests waiting for a slot", registry=r).set_function(lambda: pool.queued)
        Gauge("specllama_slots_busy", "slots generating", registry=r).set_function(lambda: pool.busy)
        Gauge("specllama_slots_total", "slots", registry=r).set_function(lambda: len(pool.slots))
        Gauge("specllama_slots_per_decode", "slots' decodes merged per llama_decode call since start "
              "(1 with one slot)", registry=r).set_function(lambda: self._per_decode(pool.slots[0]))

    @staticmethod
    def _per_decode(slot) -> float:
        b = None if slot.closed else slot.slot_batching
        return b["chunks"] / b["decodes"] if b and b["decodes"] else 1.0

    def _ratio(self, num: str, den: str) -> float:
        with self._lock:
            return self._totals[num] / self._totals[den] if self._totals[den] else 0.0

    def add(self, stats) -> None:
        decode_s = max(0.0, stats.t_total_ms - stats.t_prefill_ms) / 1000.0
        self.prompt_tokens.inc(stats.n_prompt)
        self.prompt_processed.inc(stats.n_prompt - stats.n_prompt_cached)
        self.generated.inc(stats.n_generated)
        self.drafted.inc(stats.n_drafted)
        self.accepted.inc(stats.n_accepted)
        self.decode_seconds.inc(decode_s)
        with self._lock:
            for key, value in (("drafted", stats.n_drafted), ("accepted", stats.n_accepted),
                               ("generated", stats.n_generated), ("decode_s", decode_s)):
                self._totals[key] += value

    def text(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)


def _error(status: int, message: str, kind: str = "invalid_request_error", code: Optional[str] = None,
           param: Optional[str] = None, headers: Optional[Dict[str, str]] = None):
    return JSONResponse(RequestError(message, param, code, status, kind).body(), status_code=status, headers=headers)


def create_app(decoder: SpeculativeDecoder, config: ServerConfig, stopping: Optional[threading.Event] = None,
               own_decoder: bool = False):
    """The ASGI app serving decoder, or config.parallel slots made from it (decoder.slots). With
    own_decoder, a decoder that gave its models to slots is closed (its caches are not needed)."""
    stopping = stopping or threading.Event()
    if config.parallel > 1:
        slots = decoder.slots(config.parallel)
        if own_decoder:
            decoder.close()
        decoder = slots[0]  # for the models' facts: every slot has the same
    else:
        slots = [decoder]
    pool = SlotPool(slots, config.queue_size)
    metrics = Metrics(pool)
    executor = ThreadPoolExecutor(max_workers=config.parallel, thread_name_prefix="specllama-slot")
    created = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        stopping.set()  # anything still generating stops within one step
        executor.shutdown(wait=True)

    app = FastAPI(title="specllama", version=__version__, docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)
    app.state.n_ctx_slot = decoder.n_ctx

    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return _error(exc.status_code, str(exc.detail), code=code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        return _error(400, str(exc), code="invalid_value")

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception):
        return _error(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error")

    @app.middleware("http")
    async def guard(request: Request, call_next):
        path = request.url.path
        if config.api_key and path not in ("/health", "/v1/health") and request.method != "OPTIONS":
            given = request.headers.get("authorization", "")
            expected = f"Bearer {config.api_key}"
            if not hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8")):
                response = _error(401, "invalid or missing API key (Authorization: Bearer ...)",
                                  kind="authentication_error", code="invalid_api_key")
                metrics.requests.labels(path if path in KNOWN else "other", "401").inc()
                return response
        response = await call_next(request)
        metrics.requests.labels(path if path in KNOWN else "other", str(response.status_code)).inc()
        return response

    async def read_json(request: Request) -> Any:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > config.max_body_bytes:
            raise RequestError(f"the request body is over {config.max_body_bytes} bytes", None, "body_too_large", 413)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > config.max_body_bytes:
                raise RequestError(f"the request body is over {config.max_body_bytes} bytes", None, "body_too_large",
                                   413)
        try:
            return json.loads(bytes(body))
        except (UnicodeDecodeError, ValueError) as exc:
            raise RequestError(f"the request body is not valid JSON: {exc}", None, "invalid_json") from None

    def check_model(name: Optional[str]) -> None:
        if name is not None and name not in (config.model_name, os.path.basename(decoder.model_path)):
            raise RequestError(f"the model '{name}' does not exist; this server serves '{config.model_name}'",
                               "model", "model_not_found", 404)

    def answer_error(exc: RequestError):
        headers = {"Retry-After": "1"} if exc.status == 503 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    def lost_error(why: str) -> RequestError:
        return RequestError(f"the model cannot run: {why}; restart the server", None, "rpc_connection_lost", 500,
                            "server_error")

    async def complete(request: Request, kind: str):
        try:
            if decoder.lost is not None:
                raise lost_error(decoder.lost)
            req = completions.parse(await read_json(request), kind, config.defaults)
            check_model(req.model)
            tokens = await run_in_threadpool(completions.prompt_tokens, slots[0], req, config.chat_template)
            opts = completions.options_for(slots[0], req, len(tokens))
            try:
                i = await pool.acquire(tokens)
            except QueueFull:
                raise RequestError("the server is busy: all slots are generating and the queue is full; retry "
                                   "shortly", None, "server_busy", 503, "server_error") from None
        except RequestError as exc:
            return answer_error(exc)

        loop = asyncio.get_running_loop()
        cancel = threading.Event()
        texts: "asyncio.Queue" = asyncio.Queue()
        slot = slots[i]

        def on_step(step_tokens, text, n_drafted, n_accepted):
            if text:
                loop.call_soon_threadsafe(texts.put_nowait, text)
            return cancel.is_set() or stopping.is_set()

        def work():
            try:
                out = slot.generate(tokens, opts, on_step=on_step)
            finally:
                loop.call_soon_threadsafe(texts.put_nowait, None)
            metrics.add(out.stats)
            return out

        fut = loop.run_in_executor(executor, work)
        fut.add_done_callback(lambda _: pool.release(i))  # the slot is free once its generation has stopped

        if not req.stream:
            watcher = asyncio.ensure_future(_watch_disconnect(request, cancel))
            try:
                out = await asyncio.shield(fut)
            except RPCConnectionLost as exc:
                return answer_error(lost_error(str(exc)))
            finally:
                watcher.cancel()
            rid = completions.new_id(kind)
            return JSONResponse(completions.response(req, rid, config.model_name, int(time.time()), out.text,
                                                     out.finish_reason, out.stats, out.tokens))

        writer = completions.ChunkWriter(req, config.model_name)

        async def events():
            try:
                for c in writer.text(""):
                    yield json.dumps(c)
                while True:
                    text = await texts.get()
                    if text is None:
                        break
                    for c in writer.text(text):
                        yield json.dumps(c)
                try:
                    out = await asyncio.shield(fut)
                except RPCConnectionLost as exc:
                    yield json.dumps(lost_error(str(exc)).body())
                    return
                for c in writer.end(out.finish_reason, out.stats):
                    yield json.dumps(c)
                yield "[DONE]"
            finally:
                cancel.set()  # a client gone: the generation stops within one step

        return EventSourceResponse(events(), sep="\n", ping=15, shutdown_grace_period=30)

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat_completions(request: Request):
        return await complete(request, "chat")

    @app.post("/v1/completions")
    @app.post("/completions")
    async def text_completions(request: Request):
        return await complete(request, "text")

    @app.get("/v1/models")
    @app.get("/models")
    async def models():
        target = decoder.target_model
        meta = {"n_ctx_slot": decoder.n_ctx, "n_vocab": target.n_vocab, "size": target.size,
                "draft": os.path.basename(decoder.draft_path) if decoder.draft_path else None,
                "slots": len(slots)}
        return {"object": "list", "data": [{"id": config.model_name, "object": "model", "created": created,
                                            "owned_by": "specllama", "meta": meta}]}

    @app.get("/health")
    @app.get("/v1/health")
    async def health():
        if decoder.lost is not None:
            return JSONResponse({"status": "error", "error": decoder.lost}, status_code=503)
        return {"status": "ok", "slots_idle": len(pool.free), "slots_processing": pool.busy,
                "requests_queued": pool.queued}

    @app.get("/metrics")
    async def prometheus():
        return Response(metrics.text(), media_type=prometheus_client.CONTENT_TYPE_LATEST)

    @app.post("/tokenize")
    async def tokenize(request: Request):
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

    @app.post("/detokenize")
    async def detokenize(request: Request):
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

    return app


async def _watch_disconnect(request, cancel: threading.Event) -> None:
    """Set cancel when the client of a non-streamed request goes away."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            cancel.set()
            return


def serve(decoder: SpeculativeDecoder, config: ServerConfig, announce=print, own_decoder: bool = False) -> None:
    """Run the server until Ctrl-C (or SIGTERM): generations in flight then stop within one step
    and end with their final event; queued requests are answered. own_decoder: as create_app's."""
    import uvicorn

    stopping = threading.Event()
    app = create_app(decoder, config, stopping, own_decoder)
    n_ctx = app.state.n_ctx_slot
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    host, port = sock.getsockname()[:2]
    sock.listen(2048)  # before the URL is announced, so a client that reads it can connect at once

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            stopping.set()  # generations stop within one step and send their final events
            super().handle_exit(sig, frame)

    uconfig = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=30,
                             lifespan="on")
    server = Server(uconfig)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    try:
        announce(f"specllama serve: http://{shown}:{port}/v1 (OpenAI API; model '{config.model_name}', "
                 f"{config.parallel} slot(s) of {n_ctx} tokens{', API key required' if config.api_key else ''})")
    except BaseException:
        sock.close()
        raise
    server.run(sockets=[sock])
