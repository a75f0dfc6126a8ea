"""The app factory (create_app) and serve: uvicorn on a socket bound before the URL is announced,
stopping generations within one step at Ctrl-C or SIGTERM."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Optional

from fastapi import FastAPI

from .. import placement
from .._version import __version__
from ..decoder import SpeculativeDecoder
from . import anthropic_routes, health_routes, native_routes, ollama_routes, openai_routes
from .config import ServerConfig
from .errors import install_error_handlers
from .request_checks import install_guard
from .state import ServerState


def create_app(decoder: SpeculativeDecoder, config: ServerConfig, stopping: Optional[threading.Event] = None,
               own_decoder: bool = False) -> FastAPI:
    """The ASGI app serving decoder, or config.parallel slots made from it (decoder.slots). With
    own_decoder, a decoder that gave its models to slots is closed (its caches are not needed)."""
    st = ServerState.start(decoder, config, stopping or threading.Event(), own_decoder)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        st.stopping.set()  # anything still generating stops within one step
        st.executor.shutdown(wait=True)
        for slot in st.slots:  # (what each slot's adaptive rule learned, for the next server)
            if not slot.closed:
                slot.save_adaptive_memory()

    app = FastAPI(title="specllama", version=__version__, docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)
    app.state.server = st
    app.state.n_ctx_slot = st.decoder.n_ctx
    groups = (openai_routes, anthropic_routes, ollama_routes, native_routes, health_routes)
    for routes in groups:
        app.include_router(routes.router)
    st.known_paths = frozenset(route.path for routes in groups for route in routes.router.routes)
    install_error_handlers(app)
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    install_guard(app)  # added last: outside CORS, so a refused request is counted too
    return app


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
        where = placement.describe(decoder.n_gpu_layers, decoder.n_gpu_layers_draft)
        memory = app.state.server.decoder.adaptive_memory
        resumed = "; the adaptive rule resumes what earlier runs learned" if memory and memory.resumed else ""
        announce(f"specllama serve: http://{shown}:{port}/v1 (OpenAI API; model '{config.model_name}', "
                 f"{config.parallel} slot(s) of {n_ctx} tokens{', API key required' if config.api_key else ''}"
                 f"{'; ' + where if where else ''}{resumed})")
    except BaseException:
        sock.close()
        raise
    server.run(sockets=[sock])
