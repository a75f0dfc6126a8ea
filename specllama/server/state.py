"""ServerState, what the routes serve from: the decoder (or its slots), the queue in front of
them, the metrics, and the threads that run the generations. One per app, in app.state.server."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import FrozenSet, List

from fastapi import Request

from ..decoder import SpeculativeDecoder
from .config import ServerConfig
from .metrics import Metrics
from .slots import SlotPool


@dataclass
class ServerState:
    config: ServerConfig
    slots: List[SpeculativeDecoder]
    pool: SlotPool
    metrics: Metrics
    executor: ThreadPoolExecutor  # one thread per slot runs its generations
    stopping: threading.Event  # set at shutdown: generations stop within one step
    created: int = field(default_factory=lambda: int(time.time()))
    known_paths: FrozenSet[str] = frozenset()  # the routes' paths, as /metrics labels them

    @property
    def decoder(self) -> SpeculativeDecoder:
        """The decoder whose facts (models, context, health) the server reports: every slot has the same."""
        return self.slots[0]

    @classmethod
    def start(cls, decoder: SpeculativeDecoder, config: ServerConfig, stopping: threading.Event,
              own_decoder: bool) -> "ServerState":
        """config.parallel slots made from decoder (decoder.slots), or decoder itself as the one
        slot. With own_decoder, a decoder that gave its models to slots is closed (its caches are
        not needed)."""
        if config.parallel > 1:
            slots = decoder.slots(config.parallel)
            if own_decoder:
                decoder.close()
        else:
            slots = [decoder]
        pool = SlotPool(slots, config.queue_size)
        executor = ThreadPoolExecutor(max_workers=config.parallel, thread_name_prefix="specllama-slot")
        return cls(config=config, slots=slots, pool=pool, metrics=Metrics(pool), executor=executor,
                   stopping=stopping)


def server_state(request: Request) -> ServerState:
    return request.app.state.server
