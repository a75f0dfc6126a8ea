"""SlotPool: the slots of a server, which one a request gets, and the requests waiting for one
(first come, first served, in a bounded queue)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import List

from ..decoder import SpeculativeDecoder


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
