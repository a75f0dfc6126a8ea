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

The modules:
    app.py            the app factory and `serve` (uvicorn on a socket bound before the URL is announced)
    config.py         ServerConfig, the settings `specllama serve` takes
    state.py          ServerState: the decoder, its slots, the queue, the metrics and the worker threads
    slots.py          SlotPool: which slot a request gets, and the queue of requests waiting for one
    generation.py     one completion request run on a slot, answered whole or streamed
    request_checks.py the request body read within its size limit, the model name, the API key
    errors.py         OpenAI's error shape for every failure, and the app's exception handlers
    metrics.py        the Prometheus counters behind /metrics
    openai_routes.py  /v1/chat/completions, /v1/completions, /v1/models (and their unversioned paths)
    native_routes.py  llama-server's own endpoints: /tokenize, /detokenize
    health_routes.py  /health and /metrics
"""

from .app import create_app, serve
from .config import ServerConfig

__all__ = ["ServerConfig", "create_app", "serve"]
